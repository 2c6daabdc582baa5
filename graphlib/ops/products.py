"""PyTorch's products and array-manipulation functions that it composes from other ops
(``kron``, ``inner``, ``tensordot``, ``vdot``, ``addmv``, ``addr``, ``addbmm``, ``baddbmm``,
``block_diag``, ``cartesian_prod``, ``diag_embed``, ``diagflat``, ``tril_indices``,
``vander``, ``atleast_1d``..., ``hsplit``..., ``select``, ``aminmax``, ``msort``,
``ravel``): written with duograph's op functions, so gradients, graph nodes and export come
from the parts.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError, composite, located
from ._common import operand
from .creation import constant, eye
from .elementwise import cast, conj, isfinite, mul, where
from .layout import diag, flip, movedim, narrow, tensor_split
from .linalg import matmul
from .reduction import amax, amin, sum
from .scan import cumprod
from .shape import cat, expand, flatten, pad, reshape, squeeze, stack
from .shape import permute, unsqueeze
from .sorting import sort


def _tensor(x, op: str, what: str = "input"):
    x = operand(x, op, what)
    return constant(x) if isinstance(x, np.ndarray) else x


def _int(value, op: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(located(f"{op}: expected {what} to be an int, found "
                                f"{type(value).__name__}"))
    return int(value)


def _dim(dim, ndim: int, op: str, what: str = "dim") -> int:
    dim = _int(dim, op, what)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(located(f"{op}: {what} {dim} is out of range for a {ndim}-D tensor "
                                 f"(expected to be in range of [{-n}, {n - 1}])"))
    return dim % n


@composite("kron")
def kron(input, other):
    """``kron(input, other) -> Tensor``: the Kronecker product; the operand of fewer dims is
    taken with leading 1s, so the result's dim ``i`` is ``input.shape[i] * other.shape[i]``,
    as ``torch.kron``."""
    a, b = _tensor(input, "kron"), _tensor(other, "kron", "other")
    n = max(a.ndim, b.ndim)
    a = reshape(a, *((1,) * (n - a.ndim) + tuple(a.shape)))
    b = reshape(b, *((1,) * (n - b.ndim) + tuple(b.shape)))
    a_shape = [d for s in a.shape for d in (s, 1)]
    b_shape = [d for s in b.shape for d in (1, s)]
    out = mul(reshape(a, *a_shape), reshape(b, *b_shape))
    return reshape(out, *[x * y for x, y in zip(a.shape, b.shape)])


@composite("inner")
def inner(input, other):
    """``inner(input, other) -> Tensor``: the sum of products over the last dims (a scalar
    operand multiplies), with shape ``input.shape[:-1] + other.shape[:-1]``, as
    ``torch.inner``."""
    a, b = _tensor(input, "inner"), _tensor(other, "inner", "other")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(located(f"inner: expected the last dims to match, found shapes "
                                 f"{list(a.shape)} and {list(b.shape)}"))
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


@composite("tensordot")
def tensordot(a, b, dims=2):
    """``tensordot(a, b, dims=2) -> Tensor``: the contraction of the last ``dims`` dims of
    ``a`` with the first ``dims`` of ``b`` (an int), or of the listed dims (a pair of lists),
    as ``torch.tensordot``."""
    x, y = _tensor(a, "tensordot", "a"), _tensor(b, "tensordot", "b")
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        if dims < 0:
            raise RuntimeError(located(f"tensordot: expects dims >= 0, but got dims={dims}"))
        dims_a, dims_b = list(range(x.ndim - dims, x.ndim)), list(range(int(dims)))
    elif isinstance(dims, (list, tuple)) and len(dims) == 2:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
        dims_a = [_dim(d, x.ndim, "tensordot") for d in da]
        dims_b = [_dim(d, y.ndim, "tensordot") for d in db]
    else:
        raise TypeError(located(f"tensordot: expected dims to be an int or a pair of lists of "
                                f"dims, found {dims!r}"))
    if len(dims_a) != len(dims_b) or any(d >= x.ndim for d in dims_a) or any(
            d >= y.ndim for d in dims_b):
        raise RuntimeError(located(f"tensordot: both dimension lists should have same length "
                                   f"and fit the operands, found {dims_a} and {dims_b}"))
    for i, j in zip(dims_a, dims_b):
        if x.shape[i] != y.shape[j]:
            raise ShapeError(located(f"tensordot: contracted dimensions need to match, but "
                                     f"first has size {x.shape[i]} in dim {i} and second has "
                                     f"size {y.shape[j]} in dim {j}"))
    free_a = [d for d in range(x.ndim) if d not in dims_a]
    free_b = [d for d in range(y.ndim) if d not in dims_b]
    k = int(np.prod([x.shape[d] for d in dims_a], dtype=np.int64))
    xa = reshape(permute(x, *(free_a + dims_a)), -1 if free_a else 1, k)
    yb = reshape(permute(y, *(dims_b + free_b)), k, -1 if free_b else 1)
    out_shape = [x.shape[d] for d in free_a] + [y.shape[d] for d in free_b]
    return reshape(matmul(xa, yb), *out_shape)


@composite("vdot")
def vdot(input, other):
    """``vdot(input, other) -> Tensor``: ``sum(conj(input) * other)`` of two 1-D tensors of
    one dtype, as ``torch.vdot``."""
    a, b = _tensor(input, "vdot"), _tensor(other, "vdot", "other")
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(located(f"vdot: 1D tensors expected, but got {a.ndim}D and "
                                 f"{b.ndim}D tensors"))
    if a.shape[0] != b.shape[0]:
        raise ShapeError(located(f"vdot: inconsistent tensor size, expected tensor "
                                 f"[{a.shape[0]}] and src [{b.shape[0]}] to have the same "
                                 f"number of elements"))
    if a.dtype != b.dtype:
        raise DTypeError(located(f"vdot: expected both vectors to have same dtype, but found "
                                 f"{a.dtype} and {b.dtype}"))
    return sum(conj(a) * b) if dtypes.is_complex(a.dtype) else sum(a * b)


@composite("addmv")
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)`` for a 2-D ``mat`` (n, m) and 1-D ``vec`` (m),
    ``input`` broadcastable to (n,), as ``torch.addmv``; with ``beta=0`` ``input`` is ignored
    (NaN and inf in it do not propagate)."""
    x = _tensor(input, "addmv")
    m, v = _tensor(mat, "addmv", "mat"), _tensor(vec, "addmv", "vec")
    if m.ndim != 2 or v.ndim != 1:
        raise ShapeError(located(f"addmv: expected a 2-D mat and a 1-D vec, found shapes "
                                 f"{list(m.shape)} and {list(v.shape)}"))
    if m.shape[1] != v.shape[0]:
        raise ShapeError(located(f"addmv: size mismatch, got mat ({m.shape[0]}x{m.shape[1]})"
                                 f" and vec ({v.shape[0]})"))
    return _scaled(x, matmul(m, v), beta, alpha)


def _scaled(x, product, beta, alpha):
    if alpha != 1:
        product = product * alpha
    if beta == 0:      # input ignored (NaN and inf do not propagate), its gradient zeros
        return product + where(isfinite(x), x, 0) * 0
    return product + (x if beta == 1 else x * beta)


@composite("addr")
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)`` for 1-D ``vec1`` (n) and ``vec2`` (m),
    ``input`` broadcastable to (n, m), as ``torch.addr`` (``beta=0`` ignores ``input``)."""
    x = _tensor(input, "addr")
    a, b = _tensor(vec1, "addr", "vec1"), _tensor(vec2, "addr", "vec2")
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(located(f"addr: expected 1-D vec1 and vec2, found shapes "
                                 f"{list(a.shape)} and {list(b.shape)}"))
    return _scaled(x, unsqueeze(a, 1) * unsqueeze(b, 0), beta, alpha)


def _batches(op: str, b1, b2):
    b1, b2 = _tensor(b1, op, "batch1"), _tensor(b2, op, "batch2")
    if b1.ndim != 3 or b2.ndim != 3:
        raise ShapeError(located(f"{op}: expected 3-D batch1 and batch2, found shapes "
                                 f"{list(b1.shape)} and {list(b2.shape)}"))
    if b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
        raise ShapeError(located(f"{op}: expected shapes (b, n, m) and (b, m, p), found "
                                 f"{list(b1.shape)} and {list(b2.shape)}"))
    return b1, b2


@composite("addbmm")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])`` for 3-D batches, ``input``
    broadcastable to (n, p), as ``torch.addbmm`` (``beta=0`` ignores ``input``)."""
    x = _tensor(input, "addbmm")
    b1, b2 = _batches("addbmm", batch1, batch2)
    return _scaled(x, sum(matmul(b1, b2), 0), beta, alpha)


@composite("baddbmm")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` for 3-D batches, ``input`` broadcastable
    to (b, n, p), as ``torch.baddbmm`` (``beta=0`` ignores ``input``)."""
    x = _tensor(input, "baddbmm")
    b1, b2 = _batches("baddbmm", batch1, batch2)
    return _scaled(x, matmul(b1, b2), beta, alpha)


@composite("block_diag")
def block_diag(*tensors):
    """``block_diag(*tensors) -> Tensor``: the tensors (0-, 1- or 2-D; a 0-D one is 1x1, a
    1-D one a row) placed along the diagonal of a 2-D tensor of zeros, as
    ``torch.block_diag``."""
    blocks = []
    for i, t in enumerate(tensors):
        t = _tensor(t, "block_diag", f"tensors[{i}]")
        if t.ndim > 2:
            raise ShapeError(located(f"block_diag: Input tensors must have 2 or fewer "
                                     f"dimensions. Input {i} has {t.ndim} dimensions"))
        blocks.append(reshape(t, 1, -1) if t.ndim < 2 else t)
    if not blocks:
        return constant(np.zeros((0, 0), dtype=np.float32))
    dt = blocks[0].dtype
    for b in blocks[1:]:
        dt = dtypes.result_dtype(dt, b.dtype)
    width = np.sum([b.shape[1] for b in blocks])
    rows, left = [], 0
    for b in blocks:
        right = int(width) - left - b.shape[1]
        rows.append(pad(b if b.dtype == dt else cast(b, dt), (left, right)))
        left += b.shape[1]
    return cat(rows, 0)


@composite("cartesian_prod")
def cartesian_prod(*tensors):
    """``cartesian_prod(*tensors) -> Tensor``: every combination of the elements of the 1-D
    tensors, one per row (a single tensor is returned as it is), as
    ``torch.cartesian_prod``."""
    ts = [_tensor(t, "cartesian_prod", f"tensors[{i}]") for i, t in enumerate(tensors)]
    if not ts:
        raise TypeError(located("cartesian_prod: expected at least one tensor"))
    for i, t in enumerate(ts):
        if t.ndim != 1:
            raise ShapeError(located(f"cartesian_prod: Expect a 1D vector, but got shape "
                                     f"{list(t.shape)} (tensors[{i}])"))
    if len(ts) == 1:
        return ts[0]
    n = len(ts)
    sizes = [t.shape[0] for t in ts]
    cols = []
    for i, t in enumerate(ts):
        shaped = reshape(t, *[sizes[i] if j == i else 1 for j in range(n)])
        cols.append(reshape(expand(shaped, *sizes), -1))
    return stack(cols, 1)


@composite("diag_embed")
def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """``diag_embed(input, offset=0, dim1=-2, dim2=-1) -> Tensor``: the last dim of ``input``
    placed on the ``offset`` diagonal of new matrices in dims ``dim1`` and ``dim2`` of the
    result (one more dim than ``input``), as ``torch.diag_embed``."""
    x = _tensor(input, "diag_embed")
    offset = _int(offset, "diag_embed", "offset")
    if x.ndim == 0:
        raise ShapeError(located("diag_embed: expected input of at least 1 dim, found 0-D"))
    out_ndim = x.ndim + 1
    d1, d2 = _dim(dim1, out_ndim, "diag_embed", "dim1"), _dim(dim2, out_ndim, "diag_embed",
                                                              "dim2")
    if d1 == d2:
        raise RuntimeError(located(f"diag_embed: diagonal dimensions cannot be identical "
                                   f"{dim1}, {dim2}"))
    n = x.shape[-1]
    square = unsqueeze(x, -1) * eye(n, dtype=x.dtype) if dtypes.is_float(x.dtype) else \
        unsqueeze(x, -1) * cast(eye(n), x.dtype)
    k = abs(offset)
    if offset > 0:
        square = pad(square, (k, 0, 0, k))
    elif offset < 0:
        square = pad(square, (0, k, k, 0))
    return movedim(square, (out_ndim - 2, out_ndim - 1), (d1, d2))


@composite("diagflat")
def diagflat(input, offset: int = 0):
    """``diagflat(input, offset=0) -> Tensor``: a 2-D tensor with the flattened ``input`` on
    its ``offset`` diagonal, as ``torch.diagflat``."""
    x = _tensor(input, "diagflat")
    return diag(reshape(x, -1), _int(offset, "diagflat", "offset"))


def _tri_indices(op: str, pick, row, col, offset, dtype):
    row, col = _int(row, op, "row"), _int(col, op, "col")
    offset = _int(offset, op, "offset")
    if row < 0 or col < 0:
        raise RuntimeError(located(f"{op}: row must be non-negative, got {row}, and col "
                                   f"must be non-negative, got {col}"))
    dt = dtypes.as_dtype(dtype)
    if dt not in ("int32", "int64"):
        raise DTypeError(located(f"{op}: expected dtype int32 or int64, found {dt}"))
    rows, cols = pick(row, offset, col)
    return constant(np.stack([rows, cols]).astype(dt).reshape(2, -1))


@composite("tril_indices")
def tril_indices(row: int, col: int, offset: int = 0, *, dtype="int64"):
    """``tril_indices(row, col, offset=0, *, dtype=int64) -> Tensor``: the (2, N) row and
    column indices of the lower triangle (on and below the ``offset`` diagonal) of a
    ``row`` x ``col`` matrix, in row-major order, as ``torch.tril_indices``."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype)


@composite("triu_indices")
def triu_indices(row: int, col: int, offset: int = 0, *, dtype="int64"):
    """``triu_indices(row, col, offset=0, *, dtype=int64) -> Tensor``: the (2, N) indices of
    the upper triangle (on and above the ``offset`` diagonal), as ``torch.triu_indices``."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype)


@composite("vander")
def vander(x, N=None, increasing: bool = False):
    """``vander(x, N=None, increasing=False) -> Tensor``: the Vandermonde matrix of the 1-D
    ``x``, columns ``x ** (N-1) ... x ** 0`` (``N = len(x)`` by default; reversed when
    ``increasing``), built by cumulative products as ``torch.vander`` (so its gradient is
    defined at 0; integers stay integers, bool gives int64)."""
    v = _tensor(x, "vander", "x")
    if v.ndim != 1:
        raise ShapeError(located(f"vander: x must be a one-dimensional tensor, found shape "
                                 f"{list(v.shape)}"))
    n = v.shape[0] if N is None else _int(N, "vander", "N")
    if n < 0:
        raise RuntimeError(located(f"vander: N must be non-negative, found {n}"))
    return _vander(v, n, increasing, "vander")


def _vander(v, n: int, increasing: bool, op: str):
    dt = "int64" if v.dtype == "bool" else v.dtype
    v = cast(v, dt) if v.dtype != dt else v
    if n == 0:
        return constant(np.zeros(tuple(v.shape) + (0,), dtype=dt))
    ones = cast(unsqueeze(v, -1) * 0 + 1, dt)
    if n == 1:
        out = ones
    else:
        powers = cumprod(expand(unsqueeze(v, -1), *v.shape, n - 1), -1)
        out = cat([ones, powers], -1)
    return out if increasing else flip_last(out)


def flip_last(x):
    """``x`` reversed along its last dim."""
    return flip(x, (-1,))


def _atleast(op: str, rank: int, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
        many = True
    else:
        many = len(tensors) != 1
    out = []
    for i, t in enumerate(tensors):
        t = _tensor(t, op, f"tensors[{i}]")
        shape = tuple(t.shape)
        if t.ndim < rank:
            if rank == 3 and t.ndim == 1:
                shape = (1,) + shape + (1,)
            elif rank == 3 and t.ndim == 2:
                shape = shape + (1,)
            else:
                shape = (1,) * (rank - t.ndim) + shape
            t = reshape(t, *shape)
        out.append(t)
    return tuple(out) if many else out[0]


@composite("atleast_1d")
def atleast_1d(*tensors):
    """``atleast_1d(*tensors)``: each tensor with at least 1 dim (a 0-D one becomes shape
    (1,)); one tensor gives a tensor, several (or a list) a tuple, as ``torch.atleast_1d``."""
    return _atleast("atleast_1d", 1, tensors)


@composite("atleast_2d")
def atleast_2d(*tensors):
    """``atleast_2d(*tensors)``: each tensor with at least 2 dims (leading 1s added), as
    ``torch.atleast_2d``."""
    return _atleast("atleast_2d", 2, tensors)


@composite("atleast_3d")
def atleast_3d(*tensors):
    """``atleast_3d(*tensors)``: each tensor with at least 3 dims: 0-D to (1, 1, 1), (n,) to
    (1, n, 1), (m, n) to (m, n, 1), as ``torch.atleast_3d``."""
    return _atleast("atleast_3d", 3, tensors)


def _split(op: str, x, indices_or_sections, dim: int, min_ndim: int):
    x = _tensor(x, op)
    if x.ndim < min_ndim:
        raise RuntimeError(located(f"{op} requires a tensor with at least {min_ndim} "
                                   f"dimension, but got a tensor with {x.ndim} dimensions!"))
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(
            indices_or_sections, bool):
        n = int(indices_or_sections)
        if n <= 0 or x.shape[dim] % n != 0:
            raise RuntimeError(located(
                f"{op} attempted to split along dimension {dim}, but the size of the "
                f"dimension {x.shape[dim]} is not divisible by the split_size {n}!"))
    elif not isinstance(indices_or_sections, (list, tuple)):
        raise TypeError(located(f"{op}: expected indices_or_sections to be an int or a list "
                                f"of ints, found {type(indices_or_sections).__name__}"))
    return tuple(tensor_split(x, indices_or_sections, dim))


@composite("hsplit")
def hsplit(input, indices_or_sections):
    """``hsplit(input, indices_or_sections)``: ``tensor_split`` along dim 1 (dim 0 of a 1-D
    tensor); an int must divide that dim evenly, as ``torch.hsplit``."""
    x = _tensor(input, "hsplit")
    return _split("hsplit", x, indices_or_sections, 1 if x.ndim > 1 else 0, 1)


@composite("vsplit")
def vsplit(input, indices_or_sections):
    """``vsplit(input, indices_or_sections)``: ``tensor_split`` along dim 0 of a tensor of at
    least 2 dims; an int must divide that dim evenly, as ``torch.vsplit``."""
    return _split("vsplit", input, indices_or_sections, 0, 2)


@composite("dsplit")
def dsplit(input, indices_or_sections):
    """``dsplit(input, indices_or_sections)``: ``tensor_split`` along dim 2 of a tensor of at
    least 3 dims; an int must divide that dim evenly, as ``torch.dsplit``."""
    return _split("dsplit", input, indices_or_sections, 2, 3)


@composite("select")
def select(input, dim: int, index: int):
    """``select(input, dim, index) -> Tensor``: the slice at ``index`` of dim ``dim``, that
    dim removed (``x[:, index]`` for dim 1), as ``torch.select``."""
    x = _tensor(input, "select")
    if x.ndim == 0:
        raise IndexError(located("select: select() cannot be applied to a 0-dim tensor."))
    d = _dim(dim, x.ndim, "select")
    i = _int(index, "select", "index")
    size = x.shape[d]
    if not -size <= i < size:
        raise IndexError(located(f"select: index {i} out of range for tensor of size "
                                 f"{list(x.shape)} at dimension {d}"))
    return squeeze(narrow(x, d, i % size, 1), d)


_aminmax_result = namedtuple("aminmax", ["min", "max"])


@composite("aminmax")
def aminmax(input, *, dim=None, keepdim: bool = False):
    """``aminmax(input, *, dim=None, keepdim=False) -> (min, max)``: ``amin`` and ``amax``
    together (over everything, or over ``dim``), as ``torch.aminmax``."""
    x = _tensor(input, "aminmax")
    if dim is not None:
        dim = _dim(dim, x.ndim, "aminmax")
    return _aminmax_result(amin(x, dim, keepdim), amax(x, dim, keepdim))


@composite("msort")
def msort(input):
    """``msort(input) -> Tensor``: ``input`` sorted along dim 0, as ``torch.msort``."""
    return sort(_tensor(input, "msort"), 0)[0]


@composite("ravel")
def ravel(input):
    """``ravel(input) -> Tensor``: ``input`` flattened to 1-D, as ``torch.ravel``."""
    return flatten(_tensor(input, "ravel"))


__all__ = ["kron", "inner", "tensordot", "vdot", "addmv", "addr", "addbmm", "baddbmm",
           "block_diag", "cartesian_prod", "diag_embed", "diagflat", "tril_indices",
           "triu_indices", "vander", "atleast_1d", "atleast_2d", "atleast_3d", "hsplit",
           "vsplit", "dsplit", "select", "aminmax", "msort", "ravel"]
