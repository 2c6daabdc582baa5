"""PyTorch functions that PyTorch itself composes from other ops (``bmm``, ``addmm``,
``cdist``, ``logaddexp``, ``copysign``, ``nansum``, ``std_mean``, ``searchsorted``...):
written here with duograph's op functions, so their gradients, graph nodes, fusion and
ONNX export come from the parts.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError, composite, located
from ..types import broadcast_shapes
from ._common import operand
from .creation import constant, linspace, uniform
from .elementwise import (abs, cast, clamp, exp, isfinite, isnan, log, maximum, pow, sqrt,
                          where)
from .layout import flip, narrow
from .linalg import matmul
from .nn import stop_gradient
from .indexing import take_along_dim
from .norms import norm
from .reduction import amax, mean, std, sum, var
from .scan import cumsum
from .shape import cat, expand, reshape, squeeze, transpose, unsqueeze
from .sorting import argsort


_MACHINE_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
                "float64": 2.0 ** -52}


def _operand(x, op: str, what: str = "input"):
    """``operand``, with a list or number made a tensor (a constant), so ``.dtype`` is a
    duograph dtype name."""
    x = operand(x, op, what)
    return constant(x) if isinstance(x, np.ndarray) else x


def _float_dtype(*xs) -> str:
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = dtypes.result_dtype(dt, x.dtype)
    return dt if dtypes.is_float(dt) else dtypes.DEFAULT_FLOAT


@composite("bmm")
def bmm(input, mat2):
    """Batched matrix product of two 3-D tensors (b, n, m) @ (b, m, p) -> (b, n, p), as
    ``torch.bmm``: no broadcasting, and both operands must have one dtype."""
    a, b = _operand(input, "bmm"), _operand(mat2, "bmm", "mat2")
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(located(f"bmm: expected two 3-D tensors, found shapes "
                                 f"{list(a.shape)} and {list(b.shape)}"))
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ShapeError(located(f"bmm: expected shapes (b, n, m) and (b, m, p), found "
                                 f"{list(a.shape)} and {list(b.shape)}"))
    if a.dtype != b.dtype:
        raise DTypeError(located(f"bmm: expected both operands of one dtype, found "
                                 f"{a.dtype} and {b.dtype}"))
    return matmul(a, b)


@composite("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` for 2-D ``mat1`` (n, m) and ``mat2`` (m, p),
    ``input`` broadcastable to (n, p), as ``torch.addmm``; with ``beta=0`` ``input`` is
    ignored (NaN and inf in it do not propagate)."""
    x = _operand(input, "addmm")
    m1, m2 = _operand(mat1, "addmm", "mat1"), _operand(mat2, "addmm", "mat2")
    if m1.ndim != 2 or m2.ndim != 2:
        raise ShapeError(located(f"addmm: expected 2-D mat1 and mat2, found shapes "
                                 f"{list(m1.shape)} and {list(m2.shape)}"))
    if m1.shape[1] != m2.shape[0]:
        raise ShapeError(located(f"addmm: mat1 and mat2 shapes cannot be multiplied "
                                 f"({m1.shape[0]}x{m1.shape[1]} and "
                                 f"{m2.shape[0]}x{m2.shape[1]})"))
    product = matmul(m1, m2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product + where(isfinite(x), x, 0) * 0      # keeps the broadcast shape
    return product + (x if beta == 1 else x * beta)


@composite("nansum")
def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Sum over ``dim`` treating NaN as zero, as ``torch.nansum`` (the gradient is 0 at the
    NaNs)."""
    x = _operand(input, "nansum")
    if dtypes.is_float(x.dtype):
        x = where(isnan(x), 0, x)
    return sum(x, dim, keepdim, dtype=dtype)


@composite("copysign")
def copysign(input, other):
    """``|input|`` with the sign of ``other`` (``-0.0`` counts as negative), elementwise with
    broadcasting, as ``torch.copysign``: integer operands give the default float dtype. The
    gradient flows to ``input`` (0 where it is 0, as PyTorch's) and not to ``other``."""
    a, b = _operand(input, "copysign"), _operand(other, "copysign", "other")
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(stop_gradient(b), dt)
    negative = (1.0 / b) < 0           # true for -0.0 too (1 / -0.0 is -inf)
    magnitude = abs(a)
    return where(negative, -magnitude, magnitude)


@composite("logaddexp")
def logaddexp(input, other):
    """``log(exp(input) + exp(other))`` computed without overflow, elementwise with
    broadcasting, as ``torch.logaddexp`` (two -inf give -inf; the gradient is the softmax
    of the pair)."""
    a, b = _operand(input, "logaddexp"), _operand(other, "logaddexp", "other")
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    m = stop_gradient(maximum(a, b))
    m = where(isfinite(m), m, 0.0)
    return m + log(exp(a - m) + exp(b - m))


@composite("std_mean")
def std_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):
    """``(std, mean)`` over ``dim``, as ``torch.std_mean`` (``correction`` as ``std``'s)."""
    x = _operand(input, "std_mean")
    return (std(x, dim, correction=correction, keepdim=keepdim, unbiased=unbiased),
            mean(x, dim, keepdim=keepdim))


@composite("cdist")
def cdist(x1, x2, p: float = 2.0, compute_mode=None):
    """p-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M):
    (..., P, R), as ``torch.cdist`` (batch dims broadcast). The gradient at a zero distance
    is 0, as PyTorch's. ``compute_mode`` is accepted; the distances are computed directly
    (PyTorch's matrix-product shortcut for p=2 is less accurate)."""
    a, b = _operand(x1, "cdist", "x1"), _operand(x2, "cdist", "x2")
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(located(f"cdist: expected x1 and x2 with at least 2 dims, found "
                                 f"shapes {list(a.shape)} and {list(b.shape)}"))
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(located(f"cdist: x1 and x2 must have the same number of columns, "
                                 f"found {a.shape[-1]} and {b.shape[-1]}"))
    if not (dtypes.is_float(a.dtype) and dtypes.is_float(b.dtype)):
        raise DTypeError(located(f"cdist: expected floating-point inputs, found {a.dtype} "
                                 f"and {b.dtype}"))
    if p < 0:
        raise ValueError(located(f"cdist: p must be >= 0, found {p}"))
    diff = unsqueeze(a, -2) - unsqueeze(b, -3)          # (..., P, R, M)
    if p == 0:
        # a count: its gradient is 0, as PyTorch's (the zero term keeps the inputs attached)
        return sum(cast(stop_gradient(diff) != 0, diff.dtype) + diff * 0, -1)
    if p == float("inf"):
        return amax(abs(diff), -1)
    if p == 1:
        return sum(abs(diff), -1)
    if p == 2:
        squared = sum(diff * diff, -1)
        positive = squared > 0
        return where(positive, sqrt(where(positive, squared, 1.0)), 0.0)
    powered = sum(abs(diff) ** p, -1)
    positive = powered > 0
    return where(positive, where(positive, powered, 1.0) ** (1.0 / p), 0.0)


@composite("cosine_similarity")
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (they broadcast), each
    norm clamped to at least ``eps``, as ``torch.nn.functional.cosine_similarity``."""
    a, b = _operand(x1, "cosine_similarity", "x1"), _operand(x2, "cosine_similarity", "x2")
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    na = maximum(norm(a, 2, dim, keepdim=True), eps)
    nb = maximum(norm(b, 2, dim, keepdim=True), eps)
    return sum((a / na) * (b / nb), dim)


@composite("normalize")
def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """``input / max(||input||_p, eps)`` along ``dim``, as
    ``torch.nn.functional.normalize``."""
    x = _operand(input, "normalize")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(located(f"normalize: expected a floating-point input, found "
                                 f"{x.dtype}"))
    return x / maximum(norm(x, p, dim, keepdim=True), eps)


@composite("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``input / sqrt(mean(input**2) + eps) * weight`` over the last
    ``len(normalized_shape)`` dims, as ``torch.nn.functional.rms_norm`` (``eps`` defaults to
    the dtype's machine epsilon)."""
    x = _operand(input, "rms_norm")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
        normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise ShapeError(located(f"rms_norm: expected input with shape [*, "
                                 f"{', '.join(map(str, shape))}], found {list(x.shape)}"))
    if not dtypes.is_float(x.dtype):
        raise DTypeError(located(f"rms_norm: expected a floating-point input, found "
                                 f"{x.dtype}"))
    if eps is None:
        eps = _MACHINE_EPS[x.dtype]
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    out = x * (mean(x * x, dims, keepdim=True) + eps) ** -0.5
    if weight is not None:
        out = out * weight
    return out


@composite("searchsorted")
def searchsorted(sorted_sequence, values, *, out_int32: bool = False, right: bool = False,
                 side=None, sorter=None):
    """Indices where ``values`` would be inserted into the innermost dim of
    ``sorted_sequence`` to keep it sorted, as ``torch.searchsorted``: the first such place
    (``right=False``/``side='left'``) or the last; a 1-D sequence serves values of any
    shape, otherwise the leading dims must match. int64 (int32 with ``out_int32``); no
    gradient."""
    seq = _operand(sorted_sequence, "searchsorted", "sorted_sequence")
    vals = _operand(values, "searchsorted", "values")
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(located(f"searchsorted: side must be 'left' or 'right', found "
                                     f"{side!r}"))
        if right and side == "left":
            raise ValueError(located("searchsorted: side and right can't be set to opposites"))
        right = side == "right"
    if sorter is not None:
        seq = take_along_dim(seq, sorter, -1)
    if seq.ndim == 0:
        raise ShapeError(located("searchsorted: sorted_sequence must have at least 1 dim"))
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(vals.shape[:-1]):
        raise ShapeError(located(
            f"searchsorted: boundaries tensor should be 1 dimension or the first N-1 "
            f"dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(seq.shape)} and input value tensor {list(vals.shape)}"))
    seq, vals = stop_gradient(seq), stop_gradient(vals)
    if seq.ndim == 1:
        flat = reshape(vals, -1, 1)
        hit = (seq <= flat) if right else (seq < flat)             # (numel, M)
        count = reshape(sum(cast(hit, "int64"), -1), *vals.shape)
    else:
        hit = (unsqueeze(seq, -2) <= unsqueeze(vals, -1)) if right else (
            unsqueeze(seq, -2) < unsqueeze(vals, -1))              # (..., K, M)
        count = sum(cast(hit, "int64"), -1)
    return cast(count, "int32" if out_int32 else "int64")


@composite("randperm")
def randperm(n: int, *, seed=None, dtype="int64"):
    """A uniformly random permutation of ``0 .. n-1``, as ``torch.randperm`` (the argsort of
    ``n`` float64 uniform draws; ties have probability ~n**2 / 2**53)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(located(f"randperm: n must be a non-negative int, found {n!r}"))
    keys = uniform(int(n), seed=seed, dtype="float64", _name="randperm")
    return cast(argsort(keys, stable=True), dtype)


@composite("multinomial")
def multinomial(input, num_samples: int, replacement: bool = False, *, seed=None):
    """``num_samples`` indices drawn from the rows of ``input`` (1-D or 2-D non-negative
    weights, not necessarily summing to 1), as ``torch.multinomial``: without replacement by
    Gumbel top-k (the same distribution as drawing one at a time), with replacement by
    inverting the cumulative distribution. int64; no gradient."""
    w = _operand(input, "multinomial")
    if w.ndim not in (1, 2):
        raise ShapeError(located(f"multinomial: prob_dist must be 1 or 2 dim, found shape "
                                 f"{list(w.shape)}"))
    if not dtypes.is_float(w.dtype):
        raise DTypeError(located(f"multinomial: only floating-point dtypes are supported for "
                                 f"input, found {w.dtype}"))
    n_cat = w.shape[-1]
    if not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise ValueError(located(f"multinomial: cannot sample n_sample <= 0 samples, found "
                                 f"{num_samples!r}"))
    if not replacement and isinstance(n_cat, int) and num_samples > n_cat:
        raise ValueError(located(f"multinomial: cannot sample n_sample > prob_dist.size(-1) "
                                 f"samples without replacement ({num_samples} > {n_cat})"))
    values = getattr(w, "array", None)
    if values is not None:                       # eager: PyTorch's checks of the values
        arr = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(located("multinomial: probability tensor contains either inf, "
                                     "nan or element < 0"))
        if np.any(arr.reshape(-1, arr.shape[-1]).sum(-1) <= 0):
            raise ValueError(located("multinomial: invalid multinomial distribution (sum of "
                                     "probabilities <= 0)"))
        if not replacement and np.any(
                (arr.reshape(-1, arr.shape[-1]) > 0).sum(-1) < num_samples):
            raise ValueError(located("multinomial: invalid multinomial distribution (with "
                                     "replacement=False, not enough non-negative category "
                                     "to sample)"))
    w = cast(stop_gradient(w), "float64")
    rows = w if w.ndim == 2 else reshape(w, 1, -1)
    batch = rows.shape[0]
    if replacement:
        cdf = cumsum(rows, -1)
        total = cdf[:, -1:]
        u = uniform(batch, int(num_samples), seed=seed, dtype="float64",
                    _name="multinomial") * total
        below = unsqueeze(cdf, -2) <= unsqueeze(u, -1)               # (B, S, n)
        idx = sum(cast(below, "int64"), -1)
        idx = where(idx > n_cat - 1, n_cat - 1, idx)   # a draw of exactly the total
    else:
        u = uniform(batch, n_cat, seed=seed, dtype="float64", _name="multinomial")
        gumbel = -log(-log(where(u > 0, u, 1e-300)))
        keys = where(rows > 0, log(where(rows > 0, rows, 1.0)) + gumbel, float("-inf"))
        order = argsort(keys, -1, descending=True, stable=True)
        idx = order[:, :int(num_samples)]
    return idx if w.ndim == 2 else reshape(idx, int(num_samples))



# -- more of torch's compositions (shapes, products, reductions) -------------------------------
def _count(x, dim, keepdim):
    return sum(cast(x != 0, "int64"), dim, keepdim)


@composite("any")
def any(input, dim=None, keepdim: bool = False):
    """Whether any element is nonzero (over ``dim``), bool, as ``torch.any``."""
    return _count(_operand(input, "any"), dim, keepdim) > 0


@composite("all")
def all(input, dim=None, keepdim: bool = False):
    """Whether every element is nonzero (over ``dim``), bool, as ``torch.all``."""
    x = _operand(input, "all")
    return sum(cast(x == 0, "int64"), dim, keepdim) == 0


@composite("count_nonzero")
def count_nonzero(input, dim=None):
    """The number of nonzero elements (over ``dim``), int64, as ``torch.count_nonzero``."""
    return _count(_operand(input, "count_nonzero"), dim, False)


@composite("dot")
def dot(input, tensor):
    """The inner product of two 1-D tensors of one dtype and length, as ``torch.dot``."""
    a, b = _operand(input, "dot"), _operand(tensor, "dot", "tensor")
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(located(f"dot: 1D tensors expected, but got {a.ndim}D and {b.ndim}D "
                                 f"tensors"))
    if a.shape[0] != b.shape[0]:
        raise ShapeError(located(f"dot: inconsistent tensor size, expected tensor [{a.shape[0]}]"
                                 f" and src [{b.shape[0]}] to have the same number of elements"))
    if a.dtype != b.dtype:
        raise DTypeError(located(f"dot: expected both vectors to have same dtype, but found "
                                 f"{a.dtype} and {b.dtype}"))
    return matmul(a, b)


@composite("mv")
def mv(input, vec):
    """Matrix (n, m) times vector (m,), as ``torch.mv``."""
    a, v = _operand(input, "mv"), _operand(vec, "mv", "vec")
    if a.ndim != 2 or v.ndim != 1:
        raise ShapeError(located(f"mv: expected a 2-D matrix and a 1-D vector, found shapes "
                                 f"{list(a.shape)} and {list(v.shape)}"))
    if a.shape[1] != v.shape[0]:
        raise ShapeError(located(f"mv: size mismatch, got input ({a.shape[0]}x{a.shape[1]}), "
                                 f"vec ({v.shape[0]})"))
    return matmul(a, v)


@composite("var_mean")
def var_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):
    """``(var, mean)`` over ``dim``, as ``torch.var_mean``."""
    x = _operand(input, "var_mean")
    return (var(x, dim, correction=correction, keepdim=keepdim, unbiased=unbiased),
            mean(x, dim, keepdim=keepdim))


@composite("nanmean")
def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):
    """The mean over ``dim`` of the elements that are not NaN, as ``torch.nanmean``
    (floating-point inputs only)."""
    x = _operand(input, "nanmean")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(located(f"nanmean: expected a floating-point input, found {x.dtype}"))
    keep = cast(isnan(x) == 0, x.dtype)
    return sum(where(isnan(x), 0, x), dim, keepdim, dtype=dtype) / sum(keep, dim, keepdim)


@composite("dist")
def dist(input, other, p: float = 2.0):
    """``norm(input - other, p)`` over every element (they broadcast), as ``torch.dist``."""
    a, b = _operand(input, "dist"), _operand(other, "dist", "other")
    return norm(a - b, p)


@composite("addcmul")
def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2`` (broadcast), as ``torch.addcmul``."""
    x = _operand(input, "addcmul")
    return x + _operand(tensor1, "addcmul", "tensor1") * _operand(
        tensor2, "addcmul", "tensor2") * value


@composite("addcdiv")
def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2`` (broadcast), as ``torch.addcdiv``; integer
    ``tensor1`` and ``tensor2`` are refused, as PyTorch refuses them."""
    t1, t2 = _operand(tensor1, "addcdiv", "tensor1"), _operand(tensor2, "addcdiv", "tensor2")
    if not dtypes.is_float(t1.dtype) and not dtypes.is_float(t2.dtype):
        raise DTypeError(located("addcdiv: integer division of tensors using addcdiv is no "
                                 "longer supported; use a floating-point tensor1 or tensor2"))
    return _operand(input, "addcdiv") + t1 / t2 * value


@composite("clamp_min")
def clamp_min(input, min):
    """Elements below ``min`` raised to it, as ``torch.clamp_min``."""
    return clamp(_operand(input, "clamp_min"), min, None)


@composite("clamp_max")
def clamp_max(input, max):
    """Elements above ``max`` lowered to it, as ``torch.clamp_max``."""
    return clamp(_operand(input, "clamp_max"), None, max)


@composite("diff")
def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first;
    bools give ``!=``), as ``torch.diff``."""
    x = _operand(input, "diff")
    if x.ndim == 0:
        raise ShapeError(located("diff: expected at least one-dimensional input"))
    if n < 0:
        raise ValueError(located(f"diff: order must be non-negative but got {n}"))
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = cat([_operand(p, "diff") for p in parts], dim)
    for _ in range(n):
        size = x.shape[dim]
        hi = narrow(x, dim, 1, size - 1)
        lo = narrow(x, dim, 0, size - 1)
        x = hi != lo if x.dtype == "bool" else hi - lo
    return x


def _at_least(x, rank: int):
    while x.ndim < rank:
        x = unsqueeze(x, 0) if x.ndim < 1 or rank == 2 else unsqueeze(x, -1)
    return x


@composite("vstack")
def vstack(tensors):
    """The tensors (1-D ones as rows) concatenated along dim 0, as ``torch.vstack``."""
    return cat([_at_least(_operand(t, "vstack", "tensors"), 2) for t in tensors], 0)


@composite("hstack")
def hstack(tensors):
    """The tensors concatenated along dim 1 (dim 0 for 1-D ones), as ``torch.hstack``."""
    xs = [_operand(t, "hstack", "tensors") for t in tensors]
    xs = [reshape(x, 1) if x.ndim == 0 else x for x in xs]
    return cat(xs, 0 if xs[0].ndim == 1 else 1)


@composite("column_stack")
def column_stack(tensors):
    """The tensors as columns (0-D and 1-D ones made (n, 1)) side by side, as
    ``torch.column_stack``."""
    xs = []
    for t in tensors:
        x = _operand(t, "column_stack", "tensors")
        xs.append(reshape(x, -1, 1) if x.ndim <= 1 else x)
    return cat(xs, 1)


@composite("dstack")
def dstack(tensors):
    """The tensors concatenated along dim 2 (lower ranks made 3-D first: (n,) -> (1, n, 1),
    (m, n) -> (m, n, 1)), as ``torch.dstack``."""
    xs = []
    for t in tensors:
        x = _operand(t, "dstack", "tensors")
        if x.ndim == 0:
            x = reshape(x, 1, 1, 1)
        elif x.ndim == 1:
            x = reshape(x, 1, x.shape[0], 1)
        elif x.ndim == 2:
            x = unsqueeze(x, -1)
        xs.append(x)
    return cat(xs, 2)


@composite("swapaxes")
def swapaxes(input, axis0: int, axis1: int):
    """Dims ``axis0`` and ``axis1`` swapped, as ``torch.swapaxes`` (``transpose``)."""
    return transpose(_operand(input, "swapaxes"), axis0, axis1)


@composite("unbind")
def unbind(input, dim: int = 0):
    """The slices along ``dim``, that dim removed, as a tuple, as ``torch.unbind``."""
    x = _operand(input, "unbind")
    size = x.shape[dim]
    return tuple(squeeze(narrow(x, dim, i, 1), dim) for i in range(size))


@composite("rot90")
def rot90(input, k: int = 1, dims=(0, 1)):
    """Rotated by 90 degrees ``k`` times in the plane of ``dims`` (from the first towards
    the second), as ``torch.rot90``."""
    x = _operand(input, "rot90")
    if len(dims) != 2:
        raise ValueError(located(f"rot90: expected total rotation dims == 2, but got dims = "
                                 f"{len(dims)}"))
    d0, d1 = dims
    if x.ndim < 2:
        raise ShapeError(located(f"rot90: expected total dims >= 2, but got total dims = "
                                 f"{x.ndim}"))
    if (d0 - d1) % x.ndim == 0:
        raise ValueError(located(f"rot90: expected rotation dims to be different, but got "
                                 f"dim0 = {d0} and dim1 = {d1}"))
    k = k % 4
    if k == 1:
        return transpose(flip(x, [d1]), d0, d1)
    if k == 2:
        return flip(x, [d0, d1])
    if k == 3:
        return flip(transpose(x, d0, d1), [d1])
    return x + 0 if dtypes.kind(x.dtype) != "b" else x


@composite("logspace")
def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None):
    """``base ** linspace(start, end, steps)``, as ``torch.logspace``."""
    exponents = linspace(start, end, steps, dtype="float64")
    return cast(pow(float(base), exponents), dtype or dtypes.DEFAULT_FLOAT)


@composite("broadcast_tensors")
def broadcast_tensors(*tensors):
    """The tensors broadcast to their common shape, as ``torch.broadcast_tensors``."""
    xs = [_operand(t, "broadcast_tensors", "tensors") for t in tensors]
    shape = broadcast_shapes(*[tuple(x.shape) for x in xs])
    return tuple(expand(x, *shape) for x in xs)
