"""Shape ops PyTorch code uses, with PyTorch's arguments and errors: flip, roll,
repeat_interleave, tile, tril/triu, diag, diagonal, trace, outer, cross, meshgrid, narrow,
unflatten, movedim, tensor_split, einsum, and ``view(dtype)`` (a bit reinterpretation).

flip, einsum and the dtype view are ops of their own; the rest are exact compositions of
existing ops (slices, concatenation, reshapes, ``where``), so their gradients, fusion and
export come with them.
"""
from __future__ import annotations

import string
import warnings

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import lrank
from ..errors import DTypeError, IndexBoundsError, ShapeError, located
from ..ir import Value
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes, format_shape, normalize_dim
from ._common import operand
from .creation import constant, zeros_like
from .elementwise import where
from .reduction import sum as _sum
from .shape import (cat, expand, getitem, index_select, pad, permute, reshape, split,
                    stack, unsqueeze)


def _static(x, name: str) -> tuple:
    shape = tuple(x.shape)
    if not all(isinstance(d, int) for d in shape):
        raise ShapeError(located(f"{name}: needs a static shape, found {format_shape(shape)}"))
    return shape


def _int(v, name: str, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not hasattr(v, "__index__"):
        if hasattr(v, "shape") and tuple(v.shape) == () and dtypes.kind(
                v.dtype if isinstance(v.dtype, str) else dtypes.as_dtype(v.dtype)) == "i":
            return int(np.asarray(v))
        raise TypeError(located(f"{name}: {what} must be an int, found {v!r}"))
    return int(v.__index__())


def _ints(v, name: str, what: str) -> tuple:
    if isinstance(v, (list, tuple)):
        return tuple(_int(d, name, what) for d in v)
    return (_int(v, name, what),)


def _dims(x, dims, name: str) -> tuple:
    out = tuple(normalize_dim(d, x.ndim, name) for d in _ints(dims, name, "dims"))
    if len(set(out)) != len(out):
        raise ShapeError(located(f"{name}: dims {list(_ints(dims, name, 'dims'))} name the "
                                 "same dim more than once"))
    return out


def _concrete(t, name: str, what: str) -> np.ndarray:
    """The values of ``t`` (an eager tensor, array or list), which decide a shape here."""
    if isinstance(t, Value):
        raise ShapeError(located(
            f"{name}: {what} decides the result's shape, so it must be known when the graph "
            "is built: pass a Python list or an eager tensor, not a graph placeholder"))
    return np.asarray(t)


# -- flip --------------------------------------------------------------------------------------
def _flip_rule(op, args, batched, attrs, size):
    return op(args[0], dims=tuple(d + 1 for d in attrs["dims"]))


flip_op = register(OpDef(
    "flip", lambda types, attrs: [types[0]],
    lambda xp, x, dims: xp.flip(x, axis=dims).copy() if dims else x.copy(),
    lambda cts, ins, outs, a, needs: [flip_op(cts[0], dims=a["dims"])],
    saves_no_data=True, attrs=Attrs(dims=Attr("dims", min=0)), batch=_flip_rule))


def flip(input, dims):
    """Reverse the order of elements along ``dims`` (an int or a sequence), as
    ``torch.flip``."""
    x = operand(input, "flip")
    return flip_op(x, dims=_dims(x, dims, "flip"))


def fliplr(input):
    """Flip a (>= 2-D) tensor left to right: ``flip(input, 1)``."""
    x = operand(input, "fliplr")
    if x.ndim < 2:
        raise ShapeError(located(f"fliplr: expected a tensor with at least 2 dims, found "
                                 f"{format_shape(x.shape)}"))
    return flip_op(x, dims=(1,))


def flipud(input):
    """Flip a (>= 1-D) tensor up to down: ``flip(input, 0)``."""
    x = operand(input, "flipud")
    if x.ndim < 1:
        raise ShapeError(located("flipud: expected a tensor with at least 1 dim, found a 0-d "
                                 "tensor"))
    return flip_op(x, dims=(0,))


# -- roll --------------------------------------------------------------------------------------
def _roll_dim(x, shift: int, d: int):
    n = x.shape[d]
    if not isinstance(n, int):
        raise ShapeError(located(f"roll: needs a static size along dim {d}, found "
                                 f"{format_shape(x.shape)}"))
    if n == 0 or shift % n == 0:
        return x
    s = shift % n
    head = (slice(None),) * d
    return cat([getitem(x, head + (slice(n - s, None),)), getitem(x, head + (slice(0, n - s),))],
               d)


def roll(input, shifts, dims=None):
    """Shift elements along ``dims`` cyclically, as ``torch.roll``; without ``dims`` the
    tensor is rolled as if flattened, then given its shape back."""
    x = operand(input, "roll")
    shifts = _ints(shifts, "roll", "shifts")
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(located(f"roll: without dims, shifts must be one int, found "
                                     f"{list(shifts)}"))
        shape = _static(x, "roll")
        return reshape(_roll_dim(reshape(x, -1), shifts[0], 0), *shape)
    dims = _ints(dims, "roll", "dims")
    if len(dims) != len(shifts):
        raise ShapeError(located(f"roll: shifts and dims must have the same length, found "
                                 f"{len(shifts)} and {len(dims)}"))
    for s, d in zip(shifts, dims):
        x = _roll_dim(x, s, normalize_dim(d, x.ndim, "roll"))
    return x


# -- repeat_interleave, tile -------------------------------------------------------------------
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times (an int, or a 1-D integer tensor with one count
    per element) along ``dim``; without ``dim`` the input is flattened first, as
    ``torch.repeat_interleave``. ``repeat_interleave(counts)`` alone gives
    ``repeat_interleave(arange(len(counts)), counts)``. A tensor of counts decides the
    result's shape, so in graph mode it must be known when the graph is built."""
    if repeats is None:
        counts = _concrete(input, "repeat_interleave", "repeats")
        if counts.ndim != 1 or counts.dtype.kind not in "iu":
            raise ShapeError(located(f"repeat_interleave: repeats must be a 1-D integer "
                                     f"tensor, found {counts.dtype}{list(counts.shape)}"))
        if (counts < 0).any():
            raise ValueError(located("repeat_interleave: repeats must be non-negative"))
        return constant(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
    x = operand(input, "repeat_interleave")
    if dim is None:
        x, d = reshape(x, -1), 0
    else:
        d = normalize_dim(_int(dim, "repeat_interleave", "dim"), x.ndim, "repeat_interleave")
    if x.ndim == 0:
        x = reshape(x, 1)
    n = x.shape[d]
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, (bool, np.bool_)):
        counts = np.asarray(int(repeats))
    else:
        counts = _concrete(repeats, "repeat_interleave", "repeats")
        if counts.dtype.kind not in "iu" or counts.ndim > 1:
            raise ShapeError(located(f"repeat_interleave: repeats must be an int or a 1-D "
                                     f"integer tensor, found {counts.dtype}"
                                     f"{list(counts.shape)}"))
    if (counts < 0).any():
        raise ValueError(located("repeat_interleave: repeats must be non-negative"))
    if counts.ndim == 1 and counts.size == 1:
        counts = counts.reshape(())
    if counts.ndim == 0:
        r = int(counts)
        total = n * r if isinstance(n, int) else None
        if output_size is not None and total is not None and output_size != total:
            raise ValueError(located(f"repeat_interleave: output_size={output_size} but the "
                                     f"repeats give {total}"))
        shape = tuple(x.shape)
        y = expand(unsqueeze(x, d + 1), *(shape[:d + 1] + (r,) + shape[d + 1:]))
        return reshape(y, *(shape[:d] + (-1 if total is None else total,) + shape[d + 1:]))
    if not isinstance(n, int) or counts.shape[0] != n:
        raise ShapeError(located(f"repeat_interleave: repeats must have the same size as "
                                 f"input along dim {d} ({n}), found {counts.shape[0]}"))
    index = np.repeat(np.arange(n, dtype=np.int64), counts)
    if output_size is not None and output_size != len(index):
        raise ValueError(located(f"repeat_interleave: output_size={output_size} but the "
                                 f"repeats give {len(index)}"))
    return index_select(x, d, constant(index))


def _repeat(x, sizes: tuple):
    x = reshape(x, *((1,) * (len(sizes) - x.ndim) + tuple(x.shape)))
    inter, target = [], []
    for n, d in zip(sizes, x.shape):
        inter += [1, d]
        target += [n, d]
    y = expand(reshape(x, *inter), *target)
    return reshape(y, *[n * d for n, d in zip(sizes, x.shape)])


def tile(input, dims):
    """Repeat the tensor ``dims[i]`` times along dim i, as ``torch.tile``: ``dims`` shorter
    than the tensor's rank is padded with leading 1s, longer adds leading dims."""
    x = operand(input, "tile")
    dims = _ints(dims, "tile", "dims")
    if any(n < 0 for n in dims):
        raise ValueError(located(f"tile: repeats must be non-negative, found {list(dims)}"))
    dims = (1,) * (x.ndim - len(dims)) + dims
    return _repeat(x, dims)


# -- triangles and diagonals -------------------------------------------------------------------
def _triangle(x, diagonal, upper: bool, name: str):
    x = operand(x, name)
    if x.ndim < 2:
        raise ShapeError(located(f"{name}: expected a tensor with at least 2 dims, found "
                                 f"{format_shape(x.shape)}"))
    rows, cols = x.shape[-2:]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise ShapeError(located(f"{name}: needs static last two dims, found "
                                 f"{format_shape(x.shape)}"))
    k = _int(diagonal, name, "diagonal")
    keep = np.tri(rows, cols, k - 1 if upper else k, dtype=bool)
    keep = ~keep if upper else keep
    return where(constant(keep), x, zeros_like(x))


def tril(input, diagonal: int = 0):
    """The lower triangle of the last two dims (on and below ``diagonal``), zeros above."""
    return _triangle(input, diagonal, False, "tril")


def triu(input, diagonal: int = 0):
    """The upper triangle of the last two dims (on and above ``diagonal``), zeros below."""
    return _triangle(input, diagonal, True, "triu")


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of the 2-D slices over ``dim1`` and ``dim2`` (``offset`` > 0 above the
    main one), as a last dim, as ``torch.diagonal``."""
    x = operand(input, "diagonal")
    k = _int(offset, "diagonal", "offset")
    d1 = normalize_dim(dim1, x.ndim, "diagonal")
    d2 = normalize_dim(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise ShapeError(located(f"diagonal: dim1 and dim2 cannot be the same dim, found "
                                 f"{dim1} and {dim2}"))
    shape = _static(x, "diagonal")
    rest = [i for i in range(x.ndim) if i not in (d1, d2)]
    n, m = shape[d1], shape[d2]
    length = max(0, min(n + min(k, 0), m - max(k, 0)))
    y = reshape(permute(x, *rest, d1, d2), *[shape[i] for i in rest], n * m)
    start = k if k >= 0 else -k * m
    index = slice(start, start + (length - 1) * (m + 1) + 1, m + 1) if length else slice(0, 0)
    return getitem(y, (Ellipsis, index))


def diag(input, diagonal: int = 0):
    """A 1-D tensor becomes the ``diagonal``-th diagonal of a square matrix (zeros
    elsewhere); a 2-D tensor gives its ``diagonal``-th diagonal, as ``torch.diag``."""
    x = operand(input, "diag")
    k = _int(diagonal, "diag", "diagonal")
    if x.ndim == 2:
        return globals()["diagonal"](x, k)
    if x.ndim != 1:
        raise ShapeError(located(f"diag: expected a 1-D or 2-D tensor, found "
                                 f"{format_shape(x.shape)}"))
    (n,) = _static(x, "diag")
    m = n + abs(k)
    v = pad(x, (0, abs(k))) if k else x
    v = unsqueeze(v, 1) if k >= 0 else unsqueeze(v, 0)
    mask = constant(np.eye(m, m, k, dtype=bool))
    return where(mask, v, zeros_like(v))


def trace(input):
    """The sum of the main diagonal of a 2-D tensor (integers sum to int64), as
    ``torch.trace``."""
    x = operand(input, "trace")
    if x.ndim != 2:
        raise ShapeError(located(f"trace: expected a 2-D tensor, found "
                                 f"{format_shape(x.shape)}"))
    return _sum(diagonal(x))


def outer(input, vec2):
    """The outer product of two 1-D tensors: ``out[i, j] = input[i] * vec2[j]``."""
    a, b = operand(input, "outer"), operand(vec2, "outer", "vec2")
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(located(f"outer: expected two 1-D tensors, found "
                                 f"{format_shape(a.shape)} and {format_shape(b.shape)}"))
    return unsqueeze(a, 1) * unsqueeze(b, 0)


ger = outer


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (input and other broadcast), as
    ``torch.cross``; without ``dim``, the first dim of size 3 (PyTorch's deprecated default,
    ``torch.linalg.cross`` uses -1)."""
    a, b = operand(input, "cross"), operand(other, "cross", "other")
    if a.ndim != b.ndim:
        raise ShapeError(located(f"cross: input and other must have the same number of dims, "
                                 f"found {format_shape(a.shape)} and {format_shape(b.shape)}"))
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape), op="cross")
    if a.dtype != b.dtype:
        raise DTypeError(located(f"cross: expected input and other of one dtype (as PyTorch), "
                                 f"found {a.dtype} and {b.dtype}"))
    if dim is None:
        warnings.warn("cross: using cross without dim is deprecated (as in PyTorch): pass dim "
                      "explicitly or use linalg.cross (dim=-1); using the first dim of size 3",
                      UserWarning, stacklevel=2)
        sizes3 = [i for i, s in enumerate(shape) if s == 3]
        if not sizes3:
            raise ShapeError(located(f"cross: no dim of size 3 in {format_shape(shape)}"))
        d = sizes3[0]
    else:
        d = normalize_dim(_int(dim, "cross", "dim"), len(shape), "cross")
    if a.shape[d] != 3 or b.shape[d] != 3:
        raise ShapeError(located(f"cross: dim {d} must have size 3 in both inputs, found "
                                 f"{format_shape(a.shape)} and {format_shape(b.shape)}"))
    a, b = expand(a, *shape), expand(b, *shape)
    head = (slice(None),) * d
    ax, ay, az = (getitem(a, head + (i,)) for i in range(3))
    bx, by, bz = (getitem(b, head + (i,)) for i in range(3))
    return stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], d)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 0-D or 1-D tensors, as ``torch.meshgrid``: ``indexing='ij'``
    (the default; PyTorch warns when it is not given, and so does this) gives out[i] of
    shape (len(t0), len(t1), ...); ``'xy'`` swaps the first two dims (numpy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument (as torch.meshgrid warns); using indexing='ij'",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(located(f"meshgrid: indexing must be 'ij' or 'xy', found "
                                 f"{indexing!r}"))
    ts = [operand(t, "meshgrid", f"tensor {i}") for i, t in enumerate(tensors)]
    if not ts:
        raise ValueError(located("meshgrid: expected at least one tensor"))
    for i, t in enumerate(ts):
        if t.ndim > 1:
            raise ShapeError(located(f"meshgrid: expected 0-D or 1-D tensors, found tensor "
                                     f"{i} of shape {format_shape(t.shape)}"))
        if t.dtype != ts[0].dtype:
            raise DTypeError(located(f"meshgrid: expected tensors of one dtype, found "
                                     f"{ts[0].dtype} and {t.dtype}"))
    ts = [reshape(t, -1) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    outs = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = shape[i]
        outs.append(expand(reshape(t, *view), *shape))
    if swap:
        outs[0], outs[1] = outs[1], outs[0]
    return tuple(outs)


# -- narrow, unflatten, movedim, tensor_split --------------------------------------------------
def narrow(input, dim: int, start, length: int):
    """``length`` elements along ``dim`` from ``start`` (negative counts from the end), as
    ``torch.narrow`` (a slice)."""
    x = operand(input, "narrow")
    if x.ndim == 0:
        raise ShapeError(located("narrow: cannot narrow a 0-d tensor"))
    d = normalize_dim(_int(dim, "narrow", "dim"), x.ndim, "narrow")
    start, length = _int(start, "narrow", "start"), _int(length, "narrow", "length")
    size = x.shape[d]
    if isinstance(size, int):
        if not -size <= start <= size:     # torch: an IndexError
            raise IndexBoundsError(located(f"narrow: start ({start}) is out of range for "
                                           f"dim {d} of size {size} (expected {-size}..{size})"))
        start = start + size if start < 0 else start
        if length < 0 or start + length > size:
            raise ShapeError(located(f"narrow: start ({start}) + length ({length}) exceeds "
                                     f"dim {d} of size {size}"))
    elif start < 0 or length < 0:
        raise ShapeError(located(f"narrow: a symbolic dim needs start >= 0 and length >= 0, "
                                 f"found {start} and {length}"))
    return getitem(x, (slice(None),) * d + (slice(start, start + length),))


def unflatten(input, dim: int, sizes):
    """Split dim ``dim`` into ``sizes`` (one may be -1), as ``torch.unflatten``."""
    x = operand(input, "unflatten")
    d = normalize_dim(_int(dim, "unflatten", "dim"), x.ndim, "unflatten")
    sizes = _ints(sizes, "unflatten", "sizes")
    if not sizes:
        raise ShapeError(located("unflatten: sizes must be non-empty"))
    shape = tuple(x.shape)
    known = int(np.prod([s for s in sizes if s != -1]))
    if sizes.count(-1) > 1:
        raise ShapeError(located(f"unflatten: only one size may be -1, found {list(sizes)}"))
    if isinstance(shape[d], int):
        if -1 in sizes:     # resolved here: reshape's -1 would count every dim, not this one
            if known == 0 or shape[d] % known:
                raise ShapeError(located(f"unflatten: sizes {list(sizes)} do not divide the "
                                         f"size {shape[d]} of dim {d}"))
            sizes = tuple(shape[d] // known if s == -1 else s for s in sizes)
        elif known != shape[d]:
            raise ShapeError(located(f"unflatten: sizes {list(sizes)} do not multiply to the "
                                     f"size {shape[d]} of dim {d}"))
    return reshape(x, *(shape[:d] + sizes + shape[d + 1:]))


def movedim(input, source, destination):
    """Move dims ``source`` to positions ``destination`` (ints or sequences of one
    length), the others keeping their order, as ``torch.movedim``."""
    x = operand(input, "movedim")
    src = _ints(source, "movedim", "source")
    dst = _ints(destination, "movedim", "destination")
    if len(src) != len(dst):
        raise ShapeError(located(f"movedim: source and destination must have the same number "
                                 f"of dims, found {list(src)} and {list(dst)}"))
    n = x.ndim
    src = [normalize_dim(s, n, "movedim") for s in src]
    dst = [normalize_dim(s, n, "movedim") for s in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(located(f"movedim: source {list(src)} and destination {list(dst)} "
                                 "must not repeat a dim"))
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    order = [o if o is not None else next(rest) for o in order]
    if order == list(range(n)):
        return x
    return permute(x, *order)


moveaxis = movedim


def tensor_split(input, indices_or_sections, dim: int = 0):
    """Split into ``n`` nearly equal parts (the first ``size % n`` one longer), or at the
    given indices, as ``torch.tensor_split``; returns a tuple of views."""
    x = operand(input, "tensor_split")
    d = normalize_dim(_int(dim, "tensor_split", "dim"), x.ndim, "tensor_split")
    size = x.shape[d]
    if not isinstance(size, int):
        raise ShapeError(located(f"tensor_split: needs a static size along dim {d}, found "
                                 f"{format_shape(x.shape)}"))
    arg = indices_or_sections
    if hasattr(arg, "shape") and hasattr(arg, "dtype") and not isinstance(arg, np.generic):
        arg = _concrete(arg, "tensor_split", "indices_or_sections")
        if arg.dtype.kind not in "iu" or arg.ndim > 1:
            raise TypeError(located(f"tensor_split: a tensor indices_or_sections must be a "
                                    f"0-D or 1-D integer tensor, found {arg.dtype}"
                                    f"{list(arg.shape)}"))
        arg = int(arg) if arg.ndim == 0 else [int(v) for v in arg]
    if isinstance(arg, (list, tuple)):
        # pieces x[p_i:p_i+1] with Python's slice rules (a decreasing index gives an empty
        # piece, and the pieces after it may overlap), as PyTorch
        points = [None] + list(_ints(arg, "tensor_split", "indices")) + [None]
        head = (slice(None),) * d
        return tuple(getitem(x, head + (slice(a, b),)) for a, b in zip(points, points[1:]))
    n = _int(arg, "tensor_split", "sections")
    if n <= 0:
        raise ValueError(located(f"tensor_split: sections must be positive, found {n}"))
    q, r = divmod(size, n)
    sizes = [q + 1] * r + [q] * (n - r)
    if len(sizes) == 1:
        return (x,)
    return tuple(split(x, sizes, d))


# -- einsum ------------------------------------------------------------------------------------
_LETTERS = string.ascii_uppercase + string.ascii_lowercase   # PyTorch's order for implicit


def _einsum_terms(equation: str):
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"einsum: the equation {equation!r} has more than one '->'")
    lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
    bad = set(eq.replace("...", "").replace("->", "").replace(",", "")) - set(_LETTERS)
    if bad:
        raise ValueError(f"einsum: subscripts must be letters (or ...), found "
                         f"{''.join(sorted(bad))!r} in {equation!r}")
    return lhs.split(","), rhs


def _einsum_canonical(equation: str, shapes):
    """The equation without ``...`` and with an explicit output, and the size of each
    letter (dims of size 1 broadcast against the others, as PyTorch)."""
    terms, rhs = _einsum_terms(equation)
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: the equation {equation!r} names {len(terms)} operands, "
                         f"found {len(shapes)}")
    used = set("".join(terms) + (rhs or ""))
    ell = 0
    for i, (t, shape) in enumerate(zip(terms, shapes)):
        named = len(t.replace("...", ""))
        if "..." in t:
            if t.count("...") > 1 or named > len(shape):
                raise ShapeError(f"einsum: operand {i} has {len(shape)} dims, too few for "
                                 f"its subscripts {t!r}")
            ell = max(ell, len(shape) - named)
        elif named != len(shape):
            raise ShapeError(f"einsum: operand {i} has {len(shape)} dims but its subscripts "
                             f"{t!r} name {named}")
    free = [c for c in _LETTERS if c not in used][:ell]
    new_terms = []
    for t, shape in zip(terms, shapes):
        if "..." in t:
            k = len(shape) - len(t.replace("...", ""))
            t = t.replace("...", "".join(free[ell - k:]))
        new_terms.append(t)
    if rhs is None:
        counts = {}
        for t in new_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(free) + "".join(sorted(
            (c for c, k in counts.items() if k == 1 and c not in free), key=_LETTERS.index))
    else:
        if rhs.count("...") > 1:
            raise ValueError(f"einsum: the output of {equation!r} has more than one '...'")
        out = rhs.replace("...", "".join(free))
        for c in out:
            if out.count(c) > 1:
                raise ValueError(f"einsum: output subscript {c!r} appears more than once in "
                                 f"{equation!r}")
            if not any(c in t for t in new_terms):
                raise ValueError(f"einsum: output subscript {c!r} does not appear in the "
                                 f"inputs of {equation!r}")
    sizes = {}
    for i, (t, shape) in enumerate(zip(new_terms, shapes)):
        for c, s in zip(t, shape):
            if t.count(c) > 1 and shape[t.index(c)] != s:
                raise ShapeError(f"einsum: subscript {c!r} is repeated for operand {i} but "
                                 f"its sizes differ, {shape[t.index(c)]} != {s}")
            have = sizes.get(c)
            if have is None or have == 1:
                sizes[c] = s
            elif s != 1 and s != have:
                raise ShapeError(f"einsum: subscript {c!r} has size {s} for operand {i}, "
                                 f"which does not broadcast with size {have}")
    return new_terms, out, sizes


def _einsum_infer(types, attrs):
    dts = {t.dtype for t in types}
    if len(dts) > 1:
        raise DTypeError(f"einsum: expected operands of one dtype (as PyTorch), found "
                         f"{', '.join(t.dtype for t in types)}; cast them first")
    if "bool" in dts:
        raise DTypeError("einsum: bool operands are not supported; cast them first")
    terms, out, sizes = _einsum_canonical(attrs["equation"], [t.shape for t in types])
    for t, ty in zip(terms, types):
        for c, s in zip(t, ty.shape):
            if s != sizes[c]:
                raise ShapeError(f"einsum: subscript {c!r} has size {s}, expected "
                                 f"{sizes[c]} (operands are broadcast by einsum())")
    return [TensorType(tuple(sizes[c] for c in out), types[0].dtype)]


def _einsum_kernel(xp, *arrays, equation):
    out = xp.einsum(equation, *arrays, optimize=len(arrays) > 2)
    out = xp.asarray(out)
    if out.base is not None or any(out is a for a in arrays):
        out = out.copy()
    return out.astype(arrays[0].dtype, copy=False)


def _einsum_vjp(cts, ins, outs, attrs, needs):
    lhs, out = attrs["equation"].split("->")
    terms = lhs.split(",")
    g = cts[0]
    sizes = {c: s for t, x in zip(terms, ins) for c, s in zip(t, x.shape)}
    used = set(attrs["equation"])
    fresh = iter(c for c in _LETTERS if c not in used)
    grads = []
    for i, term in enumerate(terms):
        if not needs[i]:
            grads.append(None)
            continue
        others = [(t, x) for j, (t, x) in enumerate(zip(terms, ins)) if j != i]
        avail = set(out).union(*[set(t) for t, _ in others])
        uniq = "".join(dict.fromkeys(term))
        target = "".join(c for c in uniq if c in avail)
        r = einsum_op(g, *[x for _, x in others],
                      equation=",".join([out] + [t for t, _ in others]) + "->" + target)
        if len(target) < len(uniq):      # letters summed in this operand alone: broadcast
            r = reshape(r, *[sizes[c] if c in avail else 1 for c in uniq])
            r = expand(r, *[sizes[c] for c in uniq])
        if len(uniq) < len(term):        # a repeated letter (a diagonal): embed it
            seen, new, eyes = set(), [], []
            for c in term:
                if c in seen:
                    f = next(fresh)
                    new.append(f)
                    eyes.append(c + f)
                else:
                    seen.add(c)
                    new.append(c)
            mats = [constant(np.eye(sizes[e[0]]), dtype=g.dtype) for e in eyes]
            r = einsum_op(r, *mats, equation=",".join([uniq] + eyes) + "->" + "".join(new))
        grads.append(r)
    return grads


def _einsum_rule(op, args, batched, attrs, size):
    """A new subscript letter for the batch, in front of each batched operand and the
    output."""
    eq = attrs["equation"].replace(" ", "")
    if "..." in eq or "->" not in eq:
        return NotImplemented
    lhs, out = eq.split("->")
    used = set(eq)
    letter = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA"
                  if c not in used)
    terms = [letter + term if b else term for term, b in zip(lhs.split(","), batched)]
    return op(*args, equation=",".join(terms) + "->" + letter + out)


einsum_op = register(OpDef("einsum", _einsum_infer, _einsum_kernel, _einsum_vjp,
                           autocast="lower", attrs=Attrs(equation=Attr(str)), batch=_einsum_rule))


def einsum(equation: str, *operands):
    """Einstein summation, as ``torch.einsum``: ``einsum('ij,jk->ik', a, b)``; ``...``
    stands for broadcast dims, an equation without ``->`` sums the letters that appear twice
    and orders the rest alphabetically (upper case first). Operands (also given as one list)
    must share a dtype; dims of size 1 broadcast."""
    if not isinstance(equation, str):
        raise TypeError(located("einsum: expected the equation string first (the sublist "
                                f"form is not supported), found {type(equation).__name__}"))
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    xs = [operand(x, "einsum", f"operand {i}") for i, x in enumerate(operands)]
    try:
        terms, out, sizes = _einsum_canonical(equation, [tuple(x.shape) for x in xs])
    except (ShapeError, ValueError) as e:
        raise type(e)(located(str(e))) from None
    for i, (t, x) in enumerate(zip(terms, xs)):
        want = tuple(sizes[c] for c in t)
        if tuple(x.shape) != want:
            xs[i] = expand(x, *want)
    return einsum_op(*xs, equation=",".join(terms) + "->" + out)


# -- view(dtype) -------------------------------------------------------------------------------
def _view_dtype_infer(types, attrs):
    (t,) = types
    src, dst = dtypes.itemsize(t.dtype), dtypes.itemsize(attrs["dtype"])
    if src == dst:
        return [TensorType(t.shape, attrs["dtype"])]
    what = (f"view: cannot view {t.dtype} as {attrs['dtype']} (different element sizes) "
            f"with shape {format_shape(t.shape)}")
    if t.ndim == 0:
        raise ShapeError(f"{what}: the tensor must have at least 1 dim")
    last = t.shape[-1]
    if not isinstance(last, int):
        raise ShapeError(f"{what}: the last dim must be static")
    if dst < src:
        new = last * (src // dst)
    elif last * src % dst:
        raise ShapeError(f"{what}: the last dim must be divisible by {dst // src}")
    else:
        new = last * src // dst
    return [TensorType(t.shape[:-1] + (new,), attrs["dtype"])]


def _view_dtype_kernel(xp, x, dtype):
    # a C-ordered copy (ascontiguousarray would make a 0-d array 1-d)
    return xp.array(x, order="C", copy=True).view(np.dtype(dtype))


def _view_dtype_rule(op, args, batched, attrs, size):
    """Viewing bytes acts on the last dim only; a 0-d example of another element size has
    none (the per-example run raises as it must)."""
    (x,) = args
    if lrank(x, True) == 0 and dtypes.itemsize(x.dtype) != dtypes.itemsize(attrs["dtype"]):
        return NotImplemented
    return op(x, **attrs)


view_dtype_op = register(OpDef("view_dtype", _view_dtype_infer, _view_dtype_kernel,
                               storage_ok=True, attrs=Attrs(dtype=Attr("dtype")),
                               batch=_view_dtype_rule))


def view_dtype(input, dtype):
    """The same bytes read as ``dtype`` (``Tensor.view(dtype)``): same-size dtypes keep the
    shape; otherwise the last dim grows or shrinks by the size ratio. Not differentiable."""
    x = operand(input, "view")
    try:
        dt = dtypes.as_dtype(dtype)
    except TypeError as e:
        raise TypeError(located(f"view: {e}")) from None
    return view_dtype_op(x, dtype=dt)
