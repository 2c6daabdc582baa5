"""Advanced indexing and the scatter family, with PyTorch's semantics.

- ``index`` (``x[:, idx]``, ``x[a, b]``): integer tensors at some dims of ``x``, broadcast
  together; their result dims go where the first one stands when they index adjacent dims,
  else in front (numpy's and PyTorch's rule, judged after ints, slices and None are applied,
  as PyTorch does). Negative entries count from the end; out-of-range ones raise IndexError.
- ``index_put`` (``x[idx] = v``, ``x.index_put_``, ``index_copy``, the gradient of ``index``):
  the same places written with ``values`` (last write wins) or accumulated into.
- ``scatter`` / ``scatter_reduce``: ``torch.scatter`` (with ``reduce=``) and
  ``torch.scatter_reduce`` (sum, prod, mean, amax, amin; ``include_self``).
- ``nonzero``: the coordinates of nonzero elements, ``size`` rows (padded with
  ``fill_value`` or cut). ``masked_take``: the first ``size`` elements of ``x`` where ``mask``
  holds, zero-padded; ``masked_scatter`` is its adjoint.

Boolean masks and ``nonzero`` give shapes that depend on the data. Eager mode counts the
elements first (a value decision, so ``dg.compile`` guards it and re-records when it changes)
and then runs the ops above with a static size; graph mode needs a bound (``size=``) and
otherwise raises an error that says so.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs
from ..errors import DTypeError, ShapeError, composite, located
from ..ir import Value, current_graph
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes, format_shape, normalize_dim
from ._common import operand
from .creation import full, full_like, ones_like, zeros
from .elementwise import cast, eq, logical_not, ne, where_op
from .reduction import sum as reduce_sum
from .shape import (IndexingError, _normalize_index, _python_index, expand, gather,
                    getitem_grad_op, getitem_op, pad, reshape, scatter_add, set_advanced_indexing,
                    zeros_like_for_grad)


_INT_INDEX = ("int64", "int32")   # as PyTorch: long and int (uint8 and bool are masks)
_AFTER_0 = tuple(range(1, 66))      # every input after the first (index tensors)
_AFTER_1 = tuple(range(2, 67))      # every input after the second


def _is_tensor(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _dtype_of(x) -> str:
    return x.dtype if isinstance(x.dtype, str) else dtypes.as_dtype(x.dtype)


def _symbolic(*xs) -> bool:
    """Whether the call builds a graph (a Value among ``xs``, or inside ``with graph:``)."""
    return current_graph() is not None or any(isinstance(x, Value) for x in xs)


def _wrapped(xp, index, size, dim: int, op: str):
    """``index`` as int64 with negative entries counted from the end; IndexError outside
    ``[-size, size)``, as PyTorch's advanced indexing."""
    index = index.astype(xp.int64, copy=False)
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < -size or hi >= size:
            bad = lo if lo < -size else hi
            raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                             f"size {size}")
        if lo < 0:
            index = xp.where(index < 0, index + size, index)
    return index


def _checked(xp, index, size, dim: int, op: str):
    """``index`` as int64, every entry in ``[0, size)`` (gather and scatter refuse negative
    indices, as PyTorch does)."""
    index = index.astype(xp.int64, copy=False)
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                             f"size {size}")
    return index


# -- index and index_put -----------------------------------------------------------------------


def _check_index_tensor(op, t):
    if t.dtype not in _INT_INDEX:
        raise IndexingError(f"{op}: tensors used as indices must be integer (int64, int32) or "
                            f"bool tensors, found {t.dtype}")


def _advanced_shape(op, shape, index_types, dims):
    if not dims or len(dims) != len(index_types) or list(dims) != sorted(set(dims)) or (
            dims[-1] >= len(shape)):
        raise ShapeError(f"{op}: dims {list(dims)} must be increasing dims of "
                         f"{format_shape(shape)}, one per index tensor")
    for t in index_types:
        _check_index_tensor(op, t)
    b = broadcast_shapes(*(t.shape for t in index_types), op=op)
    if all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1)):
        return tuple(shape[:dims[0]]) + b + tuple(shape[dims[-1] + 1:])
    return b + tuple(s for i, s in enumerate(shape) if i not in dims)


def _index_infer(types, attrs):
    x, *idx = types
    return [TensorType(_advanced_shape("index", x.shape, idx, attrs["dims"]), x.dtype)]


def _key(xp, x, idx, dims, op):
    key = [slice(None)] * (dims[-1] + 1)
    for t, d in zip(idx, dims):
        key[d] = _wrapped(xp, t, x.shape[d], d, op)
    return tuple(key)


def _index_kernel(xp, x, *idx, dims):
    return x[_key(xp, x, idx, dims, "index")]


def _index_vjp(cts, ins, outs, a, needs):
    x, *idx = ins
    zero = zeros_like_for_grad(x, cts[0])
    return [index_put_op(zero, cts[0], *idx, dims=a["dims"], accumulate=True)] + [None] * len(
        idx)


index_op = register(OpDef(
    "index", _index_infer, _index_kernel, _index_vjp, nondiff_inputs=_AFTER_0,
    attrs=Attrs(dims=Attr("dims", min=0)),
    doc="x[..., i0, ..., i1, ...]: integer tensors at ``dims`` (PyTorch's advanced indexing)"))


def _index_put_infer(types, attrs):
    x, v, *idx = types
    target = _advanced_shape("index_put", x.shape, idx, attrs["dims"])
    if broadcast_shapes(v.shape, target, op="index_put") != tuple(target):
        raise ShapeError(f"index_put: values of shape {format_shape(v.shape)} do not "
                         f"broadcast to the indexed shape {format_shape(target)}")
    return [TensorType(x.shape, x.dtype)]


def _index_put_kernel(xp, x, v, *idx, dims, accumulate=False):
    out = x.copy()
    key = _key(xp, x, idx, dims, "index_put")
    v = v.astype(x.dtype, copy=False)
    if accumulate:
        xpu.add_at(xp, out, key, xp.broadcast_to(v, out[key].shape))
    else:
        out[key] = v
    return out


def _index_put_vjp(cts, ins, outs, a, needs):
    g = cts[0]
    x, v, *idx = ins
    dims = a["dims"]
    gx = gv = None
    if needs[0]:
        gx = g if a.get("accumulate", False) else _zero_at(g, idx, dims)
    if needs[1]:
        gv = index_op(g, *idx, dims=dims)
    return [gx, gv] + [None] * len(idx)


def _zero_at(g, idx, dims):
    return index_put_op(g, zeros(dtype=g.dtype), *idx, dims=dims, accumulate=False)


index_put_op = register(OpDef(
    "index_put", _index_put_infer, _index_put_kernel, _index_put_vjp,
    nondiff_inputs=_AFTER_1,
    attrs=Attrs(dims=Attr("dims", min=0), accumulate=Attr(bool, default=False)),
    doc="x with x[..., i0, ..., i1, ...] = values (or += values when ``accumulate``)"))

# -- scatter and scatter_reduce ----------------------------------------------------------------


def _scatter_shapes(op, x, idx, src, dim):
    if idx.dtype != "int64":
        raise DTypeError(f"{op}: expected an int64 index tensor, found {idx.dtype}")
    if idx.ndim != x.ndim or (src.ndim != 0 and src.ndim != x.ndim):
        raise ShapeError(f"{op}: index and src need as many dims as self ({x.ndim}), found "
                         f"index {format_shape(idx.shape)} and src {format_shape(src.shape)}")
    for i, n in enumerate(idx.shape):
        if not isinstance(n, int):
            continue
        if src.ndim and isinstance(src.shape[i], int) and n > src.shape[i]:
            raise ShapeError(f"{op}: index {format_shape(idx.shape)} is larger than src "
                             f"{format_shape(src.shape)} in dim {i}")
        if i != dim and isinstance(x.shape[i], int) and n > x.shape[i]:
            raise ShapeError(f"{op}: index {format_shape(idx.shape)} is larger than self "
                             f"{format_shape(x.shape)} in dim {i}")


def _grids(xp, x, index, dim, op):
    """Open grids over ``index``'s shape with ``index`` itself along ``dim``."""
    grids = list(xpu.open_grids(xp, index.shape))
    grids[dim] = _checked(xp, index, x.shape[dim], dim, op)
    return tuple(grids)


def _src_part(xp, src, index, dtype):
    src = src.astype(dtype, copy=False)
    if src.ndim == 0:
        return xp.broadcast_to(src, index.shape)
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter_infer(types, attrs):
    x, idx, src = types
    _scatter_shapes("scatter", x, idx, src, attrs["dim"])
    return [TensorType(x.shape, x.dtype)]


def _scatter_kernel(xp, x, index, src, dim, reduce=None):
    out = x.copy()
    key = _grids(xp, x, index, dim, "scatter")
    part = _src_part(xp, src, index, x.dtype)
    if reduce is None:
        out[key] = part
    elif reduce == "add":
        xpu.add_at(xp, out, key, part)
    else:
        xpu.ufunc_at(xp, "multiply", out, key, part)
    return out


def _src_grad(g, index, src, dim):
    """gather(g, dim, index), zero-padded to src's shape (index may be smaller)."""
    part = gather(g, dim, index)
    if src.ndim == 0 or tuple(part.shape) == tuple(src.shape):
        return part
    widths = []
    for n, m in reversed(list(zip(index.shape, src.shape))):
        widths += [0, m - n]
    return pad(part, widths)


def _scatter_vjp(cts, ins, outs, a, needs):
    g = cts[0]
    x, index, src = ins
    dim, reduce = a["dim"], a.get("reduce")
    if reduce == "multiply":
        raise NotImplementedError("scatter: the gradient of reduce='multiply' is not "
                                  "implemented (PyTorch has none either); use "
                                  "scatter_reduce(..., 'prod')")
    gx = gs = None
    if needs[0]:
        gx = g if reduce == "add" else scatter_op(g, index, _zero_scalar(g), dim=dim)
    if needs[2]:
        gs = _src_grad(g, index, src, dim)
        if src.ndim == 0:
            gs = gs.sum()
    return [gx, None, gs]


def _zero_scalar(g):
    return zeros(dtype=g.dtype)


scatter_op = register(OpDef(
    "scatter", _scatter_infer, _scatter_kernel, _scatter_vjp, nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int), reduce=Attr(str, default=None, choices=("add", "multiply"))),
    doc="self with self[index[i][j]][j] = src[i][j] for dim=0 (torch.scatter)"))


def _scatter_reduce_infer(types, attrs):
    x, idx, src = types
    _scatter_shapes("scatter_reduce", x, idx, src, attrs["dim"])
    if src.dtype != x.dtype:
        raise DTypeError(f"scatter_reduce: expected self and src of one dtype, found "
                         f"{x.dtype} and {src.dtype}")
    return [TensorType(x.shape, x.dtype)]


def _scatter_reduce_kernel(xp, x, index, src, dim, reduce, include_self=True):
    key = _grids(xp, x, index, dim, "scatter_reduce")
    part = _src_part(xp, src, index, x.dtype)
    out = x.copy()
    if not include_self:
        hit = xp.zeros(x.shape, dtype=bool)
        hit[key] = True
        if reduce in ("sum", "mean"):
            out[hit] = 0
        elif reduce == "prod":
            out[hit] = 1
        elif part.size:     # the smallest (largest) src element cannot win a max (min)
            out[hit] = part.min() if reduce == "amax" else part.max()
    ufunc = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
             "amin": "minimum"}[reduce]
    xpu.ufunc_at(xp, ufunc, out, key, part)
    if reduce == "mean":
        count = xp.zeros(x.shape, dtype=xp.int64) + (1 if include_self else 0)
        xpu.add_at(xp, count, key, xp.ones(part.shape, dtype=xp.int64))
        count = xp.maximum(count, 1)
        if dtypes.is_float(out.dtype.name):
            out = out / count.astype(out.dtype)
        else:
            out = xp.floor_divide(out, count).astype(out.dtype)
    return out.astype(x.dtype, copy=False)


def _scatter_reduce_vjp(cts, ins, outs, a, needs):
    g, (x, index, src), out = cts[0], ins, outs[0]
    dim, reduce, incl = a["dim"], a["reduce"], a.get("include_self", True)
    ones = _ones_like(index, g)

    def hit():      # where some src element lands
        return ne(scatter_add(zeros_like_for_grad(x, g), dim, index, ones), 0)
    gx = gs = None
    if reduce == "sum":
        gx = g if incl else where(hit(), 0.0, g)
        gs = _src_grad(g, index, src, dim)
    elif reduce == "mean":
        count = scatter_add(zeros_like_for_grad(x, g) + (1.0 if incl else 0.0), dim, index,
                            ones)
        count = where(eq(count, 0), 1.0, count)
        gx = g / count if incl else where(hit(), 0.0, g)
        gs = _src_grad(g / count, index, src, dim)
    elif reduce in ("amax", "amin"):
        picked_x = cast(eq(x, out), g.dtype)
        if not incl:
            picked_x = where(hit(), 0.0, picked_x)
        picked_s = cast(eq(src_part(src, index), gather(out, dim, index)), g.dtype)
        ties = scatter_add(picked_x, dim, index, picked_s)
        share = g / ties
        gx = where(logical_not(eq(picked_x, 0)), share, 0.0)
        gs = _pad_to(gather(share, dim, index) * picked_s, index, src)
    else:   # prod, without dividing by zero: products that leave one factor out
        zero_s = cast(eq(src_part(src, index), 0), g.dtype)
        zeros_x = cast(eq(x, 0), g.dtype) if incl else zeros_like_for_grad(x, g)
        nz = scatter_add(zeros_x, dim, index, zero_s)      # zero factors per place
        base = where(eq(x, 0), 1.0, x) if incl else ones_like(x)
        p_nz = scatter_reduce_op(base, index, where(eq(src, 0), 1.0, src), dim=dim,
                                 reduce="prod", include_self=True)   # product of nonzeros
        p_src = scatter_reduce_op(ones_like(x), index, src, dim=dim, reduce="prod",
                                  include_self=True)
        gx = g * p_src if incl else where(hit(), 0.0, g)
        # leave out src[j]: out/src[j] when src[j] != 0; else the nonzero product when
        # src[j] is the only zero factor of its place; else 0
        out_at = gather(out, dim, index)
        s = src_part(src, index)
        only_zero = eq(gather(nz, dim, index), 1.0)
        excl = where(eq(s, 0), where(only_zero, gather(p_nz, dim, index), 0.0),
                     out_at / where(eq(s, 0), 1.0, s))
        gs = _pad_to(gather(g, dim, index) * excl, index, src)
    return [gx if needs[0] else None, None, gs if needs[2] else None]


def src_part(src, index):
    """``src`` cut to ``index``'s shape (scatter reads only that corner of it)."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    return getitem_op(src, index=tuple(("s", 0, n, None) for n in index.shape))


def _pad_to(part, index, src):
    if tuple(part.shape) == tuple(src.shape):
        return part
    widths = []
    for n, m in reversed(list(zip(index.shape, src.shape))):
        widths += [0, m - n]
    return pad(part, widths)


def _ones_like(index, g):
    return ones_like(index, dtype=g.dtype)


scatter_reduce_op = register(OpDef(
    "scatter_reduce", _scatter_reduce_infer, _scatter_reduce_kernel, _scatter_reduce_vjp,
    nondiff_inputs=(1,), vjp_reads_output=True,
    attrs=Attrs(dim=Attr(int), reduce=Attr(str, choices=("sum", "prod", "mean", "amax", "amin")),
                include_self=Attr(bool, default=True)),
    doc="torch.scatter_reduce: src reduced into self at index along dim"))

# -- nonzero, masked_take, masked_scatter ------------------------------------------------------


def _nonzero_infer(types, attrs):
    (t,) = types
    return [TensorType((attrs["size"], t.ndim), "int64")]


def _nonzero_kernel(xp, x, size, fill_value=-1):
    found = xp.argwhere(x).astype(xp.int64)
    out = xp.full((size, x.ndim), fill_value, dtype=xp.int64)
    n = min(size, found.shape[0])
    out[:n] = found[:n]
    return out


nonzero_op = register(OpDef(
    "nonzero", _nonzero_infer, _nonzero_kernel,
    attrs=Attrs(size=Attr(int, min=0), fill_value=Attr(int, default=-1)),
    doc="coordinates of the nonzero elements: ``size`` rows, padded with ``fill_value``"))


def _masked_take_infer(types, attrs):
    x, mask = types
    if mask.dtype != "bool":
        raise DTypeError(f"masked_select: expected a bool mask, found {mask.dtype}")
    if tuple(mask.shape) != tuple(x.shape):
        raise ShapeError(f"masked_take: mask {format_shape(mask.shape)} and input "
                         f"{format_shape(x.shape)} must have one shape")
    return [TensorType(tuple(attrs["shape"]), x.dtype)]


def _masked_take_kernel(xp, x, mask, shape):
    picked = x[mask]
    out = xp.zeros(int(np.prod(shape, dtype=np.int64)), dtype=x.dtype)
    n = min(out.size, picked.size)
    out[:n] = picked[:n]
    return out.reshape(shape)


masked_take_op = register(OpDef(
    "masked_take", _masked_take_infer, _masked_take_kernel,
    lambda cts, ins, outs, a, needs: [
        masked_scatter_op(zeros_like_for_grad(ins[0], cts[0]), ins[1], cts[0], strict=False),
        None],
    nondiff_inputs=(1,),
    attrs=Attrs(shape=Attr("shape")),
    doc="the first prod(shape) elements of x where mask holds (row-major), zero-padded"))


def _masked_scatter_infer(types, attrs):
    x, mask, src = types
    if mask.dtype != "bool":
        raise DTypeError(f"masked_scatter: expected a bool mask, found {mask.dtype}")
    if tuple(mask.shape) != tuple(x.shape):
        raise ShapeError(f"masked_scatter: mask {format_shape(mask.shape)} and input "
                         f"{format_shape(x.shape)} must have one shape")
    if src.dtype != x.dtype:
        raise DTypeError(f"masked_scatter: expected source of dtype {x.dtype} (self's), "
                         f"found {src.dtype}")
    return [TensorType(x.shape, x.dtype)]


def _masked_scatter_kernel(xp, x, mask, src, strict=True):
    out = x.copy()
    n = int(mask.sum())
    if n > src.size:
        if strict:
            raise IndexError(f"masked_scatter: source has {src.size} elements, fewer than "
                             f"the {n} elements the mask selects")
        places = xp.flatnonzero(mask)[:src.size]     # only the first src.size places
        out.reshape(-1)[places] = src.reshape(-1)
        return out
    out[mask] = src.reshape(-1)[:n]
    return out


def _masked_scatter_vjp(cts, ins, outs, a, needs):
    g, (x, mask, src) = cts[0], ins
    return [where(mask, 0.0, g) if needs[0] else None, None,
            masked_take_op(g, mask, shape=tuple(src.shape)) if needs[2] else None]


masked_scatter_op = register(OpDef(
    "masked_scatter", _masked_scatter_infer, _masked_scatter_kernel, _masked_scatter_vjp,
    nondiff_inputs=(1,),
    attrs=Attrs(strict=Attr(bool, default=True)),
    doc="x with the places where mask holds filled by source's elements in order "
        "(``strict=False``: only as many places as source has elements)"))

# -- helpers of the public functions -----------------------------------------------------------


def _data_dependent(op: str, bound: str) -> ShapeError:
    return ShapeError(located(
        f"{op}: the result's size depends on the data (how many elements are nonzero or "
        f"selected), which a graph cannot hold. Give a bound, {bound} (the result is cut or "
        "padded to that size), or keep shapes static with dg.where(mask, x, other) / "
        "masked_fill; eager mode and dg.compile need no bound"))


def _count(mask) -> int:
    """How many elements of ``mask`` are nonzero: read in eager mode as a value decision
    (``item()``), so ``dg.compile`` guards it and re-records when it changes."""
    m = mask if _dtype_of(mask) == "bool" else cast(mask, "bool")
    return int(reduce_sum(cast(m, "int64")).item())


def _as_index_array(it, name: str):
    """A list (or tuple) inside an index as an int64 or bool array, as PyTorch reads it."""
    try:
        arr = np.asarray(it)
    except ValueError as e:
        raise IndexingError(located(f"{name}: cannot read the list {it!r} as an index "
                                    f"({e})")) from None
    if arr.dtype == object or arr.dtype.kind not in "biu":
        if arr.size == 0:
            return arr.astype(np.int64)
        raise IndexingError(located(f"{name}: tensors used as indices must be integer or "
                                    f"bool, found a list of {arr.dtype} ({it!r})"))
    return arr.astype(bool if arr.dtype.kind == "b" else np.int64)


def _mask_mismatch(name, mask_shape, x_shape, at):
    return IndexingError(located(
        f"{name}: the shape of the mask {format_shape(mask_shape)} at index {at} does not "
        f"match the shape of the indexed tensor {format_shape(x_shape)} at index {at}"))


def _parts(x, index, name: str):
    """Classify the items of ``index``: ('basic', int|slice|None|...), ('tensor', integer
    tensor) or ('mask', bool tensor)."""
    if not isinstance(index, tuple):
        index = (index,)
    parts = []
    for it in index:
        if isinstance(it, (list, tuple)):
            it = _as_index_array(it, name)
        if not _is_tensor(it):
            if isinstance(it, np.generic) and it.dtype.kind == "b":
                raise IndexingError(located(f"{name}: a bool scalar index is not supported"))
            parts.append(("basic", it))
            continue
        dt = _dtype_of(it)
        if dt == "uint8":
            warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch): it is read "
                          "as a mask; use a bool tensor instead", UserWarning, stacklevel=4)
            it, dt = cast(it, "bool"), "bool"
        if dt == "bool":
            parts.append(("mask", it))
        elif dt in _INT_INDEX:
            if it.ndim == 0 and not isinstance(it, Value):
                parts.append(("basic", int(it)))   # a 0-d index selects, as an int (PyTorch)
            else:
                parts.append(("tensor", it))
        else:
            raise IndexingError(located(f"{name}: tensors used as indices must be integer "
                                        f"(int64, int32) or bool tensors, found {dt}"))
    return parts


def _split(x, parts, name: str):
    """(basic index, index tensors, their dims in the basic result): boolean masks become
    their nonzero coordinates (eager mode only)."""
    consumed = 0
    for kind, it in parts:
        if kind == "mask":
            consumed += it.ndim
        elif kind == "tensor" or (it is not None and it is not Ellipsis):
            consumed += 1
    if consumed > x.ndim:
        raise IndexingError(located(f"{name}: too many indices ({consumed}) for a tensor of "
                                    f"{x.ndim} dims"))
    basic, tensors, dims = [], [], []
    out_dim = in_dim = 0
    ellipsis = False
    for kind, it in parts:
        if kind == "basic":
            if it is Ellipsis:
                if ellipsis:
                    raise IndexingError(located(f"{name}: an index can only have one "
                                                "Ellipsis"))
                ellipsis = True
                n = x.ndim - consumed
                basic += [slice(None)] * n
                out_dim += n
                in_dim += n
            elif it is None:
                basic.append(None)
                out_dim += 1
            elif isinstance(it, slice):
                basic.append(it)
                out_dim += 1
                in_dim += 1
            else:
                basic.append(it)
                in_dim += 1
        elif kind == "tensor":
            basic.append(slice(None))
            tensors.append(it)
            dims.append(out_dim)
            out_dim += 1
            in_dim += 1
        else:
            k = it.ndim
            covered = tuple(x.shape[in_dim:in_dim + k])
            if k == 0:
                raise IndexingError(located(f"{name}: a 0-d bool index is not supported"))
            if any(isinstance(a, int) and isinstance(b, int) and a != b
                   for a, b in zip(it.shape, covered)):
                raise _mask_mismatch(name, it.shape, x.shape, in_dim)
            if _symbolic(x, it):
                raise _data_dependent(name, "masked_select(x, mask, size=N) or "
                                      "nonzero(mask, size=N)")
            for col in nonzero(it, as_tuple=True):
                basic.append(slice(None))
                tensors.append(col)
                dims.append(out_dim)
                out_dim += 1
                in_dim += 1
    return tuple(basic), tensors, tuple(dims)


def _basic_items(x, basic, name):
    try:
        items, part_shape = _normalize_index(basic, tuple(x.shape), name)
    except (ShapeError, TypeError) as e:
        raise type(e)(located(str(e))) from None
    trivial = all(it == ("s", None, None, None) for it in items)
    return items, part_shape, trivial


def _leading_mask(x, parts):
    """The mask when ``index`` is one bool mask over x's leading dims (with an optional
    trailing Ellipsis), else None."""
    if parts and parts[-1] == ("basic", Ellipsis):
        parts = parts[:-1]
    if len(parts) != 1 or parts[0][0] != "mask":
        return None
    return parts[0][1]


def _mask_to(x, mask, name):
    """``mask`` over x's leading dims broadcast to x's shape."""
    k = mask.ndim
    if k > x.ndim or any(isinstance(a, int) and isinstance(b, int) and a != b
                         for a, b in zip(mask.shape, x.shape[:k])):
        raise _mask_mismatch(name, mask.shape, x.shape, 0)
    if k == x.ndim:
        return mask
    m = reshape(mask, *(tuple(mask.shape) + (1,) * (x.ndim - k)))
    return expand(m, *x.shape)


def advanced_getitem(x, index):
    """``x[index]`` with integer tensors, lists or bool masks among the items."""
    name = "getitem"
    parts = _parts(x, index, name)
    mask = _leading_mask(x, parts)
    if mask is not None:
        m = _mask_to(x, mask, name)
        if _symbolic(x, mask):
            raise _data_dependent(name, "masked_select(x, mask, size=N)")
        rest = tuple(x.shape[mask.ndim:])
        return masked_take_op(x, m, shape=(_count(mask),) + rest)
    basic, tensors, dims = _split(x, parts, name)
    items, _, trivial = _basic_items(x, basic, name)
    y = x if trivial else getitem_op(x, index=items)
    if not tensors:
        return y
    return index_op(y, *tensors, dims=dims)


def write_in_place(x, data, xp, index, value) -> None:
    """``x[index] = value`` written straight into ``data`` (x's array, module ``xp``): the
    eager path when neither autograd nor ``record()`` watches. Same places and errors as
    ``index_assign``: basic items first (a view of ``data``), then the index tensors."""
    name = "__setitem__"
    basic, tensors, dims = _split(x, _parts(x, index, name), name)
    items, _, _ = _basic_items(x, basic, name)
    view = data[_python_index(items)]
    if not tensors:
        view[...] = value
        return
    key = [slice(None)] * (dims[-1] + 1)
    for t, d in zip(tensors, dims):
        arr = t.array if hasattr(t, "array") else xp.asarray(t)
        key[d] = _wrapped(xp, arr, view.shape[d], d, name)
    try:
        view[tuple(key)] = value
    except ValueError as e:
        raise ShapeError(located(f"{name}: cannot assign a value of shape "
                                 f"{format_shape(getattr(value, 'shape', ()))} to the "
                                 f"indexed shape {format_shape(view[tuple(key)].shape)} "
                                 f"({e})")) from None


def _value_for(x, value, name):
    """``value`` as an operand of x's dtype (PyTorch casts what it assigns)."""
    if isinstance(value, (bool, int, float, np.generic)):
        return _scalar_as(x, value)
    value = operand(value, name, "the value")
    return value if _dtype_of(value) == _dtype_of(x) else cast(value, _dtype_of(x))


def _scalar_as(x, value):
    """A Python number converted as PyTorch converts it into x's dtype."""
    dt = _dtype_of(x)
    if isinstance(value, np.generic):
        value = value.item()
    if dt == "bool":
        return bool(value)
    if dtypes.is_float(dt):
        return float(value)
    return int(value)


def index_assign(x, index, value):
    """``x`` with ``x[index] = value``, out of place (what ``Tensor.__setitem__`` writes back):
    basic indices, integer tensors and lists, and bool masks, as PyTorch."""
    name = "__setitem__"
    x = operand(x, name)
    parts = _parts(x, index, name)
    value = _value_for(x, value, name)
    mask = _leading_mask(x, parts)
    if mask is not None:
        m = _mask_to(x, mask, name)
        rest = tuple(x.shape[mask.ndim:])
        vshape = tuple(getattr(value, "shape", ()))
        while vshape and vshape[0] == 1 and len(vshape) > len(rest):
            vshape = vshape[1:]
        if len(vshape) <= len(rest):    # one value (or row) for every selected place
            if vshape != tuple(getattr(value, "shape", ())):
                value = reshape(value, *vshape)
            return where(m, value, x)
        if _symbolic(x, mask):
            raise _data_dependent(name, "x = dg.masked_scatter(x, mask, source)")
        src = expand(value, *((_count(mask),) + rest))
        return masked_scatter_op(x, m, src)
    basic, tensors, dims = _split(x, parts, name)
    items, part_shape, trivial = _basic_items(x, basic, name)
    if not tensors:
        if trivial:     # x[...] = value: every element
            if not _is_tensor(value):
                return full_like(x, value)
            return expand(value, *x.shape) if tuple(value.shape) != tuple(x.shape) \
                else value + 0      # a node of its own, so x takes its history, not value's
        if not _is_tensor(value):
            part = full(part_shape, value, dtype=_dtype_of(x))
        else:
            part = value if tuple(value.shape) == part_shape else expand(value, *part_shape)
        keep = getitem_grad_op(full(part_shape, True, dtype="bool"), x, index=items)
        return where(keep, getitem_grad_op(part, x, index=items), x)
    if not _is_tensor(value):
        value = full((), value, dtype=_dtype_of(x))
    if trivial:
        return index_put_op(x, value, *tensors, dims=dims, accumulate=False)
    part = index_put_op(getitem_op(x, index=items), value, *tensors, dims=dims,
                        accumulate=False)
    keep = getitem_grad_op(full(part_shape, True, dtype="bool"), x, index=items)
    return where(keep, getitem_grad_op(part, x, index=items), x)


# -- public functions --------------------------------------------------------------------------


def index_put(input, indices, values, accumulate: bool = False):
    """``input`` with ``input[indices] = values`` (``+=`` when ``accumulate``), out of place
    (torch.index_put). ``indices`` is a tuple of index tensors (bool masks, and None for a
    whole dim, allowed); ``values`` must have input's dtype, as in PyTorch."""
    name = "index_put"
    x = operand(input, name)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(located(f"{name}: expected indices to be a tuple of tensors, found "
                                f"{type(indices).__name__}"))
    values = operand(values, name, "values")
    if _dtype_of(values) != _dtype_of(x):
        raise DTypeError(located(f"{name}: index put requires the source and destination "
                                 f"dtypes match, found {_dtype_of(x)} for the destination "
                                 f"and {_dtype_of(values)} for the source"))
    index = tuple(slice(None) if i is None else i for i in indices)
    for i in index:
        if not (isinstance(i, slice) or _is_tensor(i)):
            raise TypeError(located(f"{name}: expected index tensors (or None), found "
                                    f"{type(i).__name__}"))
    if not accumulate:
        return index_assign(x, index, values)
    parts = _parts(x, index, name)
    basic, tensors, dims = _split(x, parts, name)
    if not tensors:
        return x + values
    return index_put_op(x, values, *tensors, dims=dims, accumulate=True)


def nonzero(input, *, as_tuple: bool = False, size=None, fill_value: int = -1):
    """Coordinates of the nonzero elements of ``input``: an int64 tensor of shape (n, ndim),
    or with ``as_tuple=True`` one 1-D tensor per dim (torch.nonzero). The size n depends on
    the data: eager mode reads it; graph mode needs ``size=`` (a duograph extension, as
    JAX's ``nonzero(size=)``: the rows are cut or padded with ``fill_value``)."""
    return _nonzero(input, as_tuple, size, fill_value, "nonzero")


def _nonzero(input, as_tuple, size, fill_value, name):
    x = operand(input, name)
    if size is None and name == "nonzero_static":
        raise TypeError(located(f"{name}: expected size to be an int, found None"))
    for what, v in (("size", size), ("fill_value", fill_value)):
        if (v is not None or what == "fill_value") and (
                isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise TypeError(located(f"{name}: expected {what} to be an int, found "
                                    f"{type(v).__name__} {v!r}"))
    if size is not None and size < 0:
        raise ValueError(located(f"{name}: expected size >= 0, found {size}"))
    if x.ndim == 0:
        cols = _nonzero(reshape(x, 1), False, size, fill_value, name)
        if as_tuple:
            return (getitem_op(cols, index=(("s", None, None, None), ("i", 0))),)
        return getitem_op(cols, index=(("s", None, None, None), ("s", 0, 0, None)))
    if size is None:
        if _symbolic(x):
            raise _data_dependent(name, f"{name}(x, size=N)")
        size = _count(x)
    out = nonzero_op(x, size=int(size), fill_value=int(fill_value))
    if as_tuple:
        return tuple(getitem_op(out, index=(("s", None, None, None), ("i", k)))
                     for k in range(x.ndim))
    return out


def nonzero_static(input, *, size: int, fill_value: int = -1):
    """``nonzero(input)`` with exactly ``size`` rows, padded with ``fill_value`` or cut
    (torch.nonzero_static): a static shape, so it works in graph mode."""
    return _nonzero(input, False, size, fill_value, "nonzero_static")


def argwhere(input, *, size=None, fill_value: int = -1):
    """``nonzero(input)`` (torch.argwhere; ``size`` and ``fill_value`` as in nonzero)."""
    return _nonzero(input, False, size, fill_value, "argwhere")


def where(condition, input=None, other=None):
    """``input`` where ``condition`` holds, else ``other`` (broadcast together); with one
    argument, ``nonzero(condition, as_tuple=True)`` (torch.where)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError(located("where: expected where(condition) or "
                                "where(condition, input, other), found only one of input "
                                "and other"))
    return where_op(condition, input, other)


def _bool_mask(mask, name):
    mask = operand(mask, name, "mask")
    if _dtype_of(mask) != "bool":
        raise DTypeError(located(f"{name}: expected a bool mask, found {_dtype_of(mask)}"))
    return mask


def _broadcast_pair(x, mask, name):
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape), op=name)
    if tuple(x.shape) != shape:
        x = expand(x, *shape)
    if tuple(mask.shape) != shape:
        mask = expand(mask, *shape)
    return x, mask


@composite("masked_select")
def masked_select(input, mask, *, size=None):
    """The elements of ``input`` where ``mask`` holds, as a 1-D tensor (input and mask
    broadcast together; torch.masked_select). Its length depends on the data: graph mode
    needs ``size=`` (a duograph extension: cut, or padded with zeros)."""
    x = operand(input, "masked_select")
    mask = _bool_mask(mask, "masked_select")
    x, mask = _broadcast_pair(x, mask, "masked_select")
    if size is None:
        if _symbolic(x, mask):
            raise _data_dependent("masked_select", "masked_select(x, mask, size=N)")
        size = _count(mask)
    return masked_take_op(x, mask, shape=(int(size),))


def masked_fill(input, mask, value):
    """``input`` with ``value`` where ``mask`` holds (torch.masked_fill); ``value`` is a
    number or a 0-d tensor (differentiable), cast to input's dtype."""
    x = operand(input, "masked_fill")
    mask = _bool_mask(mask, "masked_fill")
    return where_op(mask, _fill_value(x, value, "masked_fill"), x)


def _fill_value(x, value, name):
    """A fill value (a number, or a 0-d tensor: differentiable) in x's dtype."""
    if _is_tensor(value):
        if value.ndim != 0:
            raise ShapeError(located(f"{name}: only supports a 0-dimensional value tensor, "
                                     f"found one of shape {format_shape(value.shape)}"))
        return value if _dtype_of(value) == _dtype_of(x) else cast(value, _dtype_of(x))
    if isinstance(value, (bool, int, float, np.generic)):
        return _scalar_as(x, value)
    raise TypeError(located(f"{name}: expected value to be a number or a 0-d tensor, found "
                            f"{type(value).__name__}"))


@composite("masked_scatter")
def masked_scatter(input, mask, source):
    """``input`` with the places where ``mask`` holds filled, in row-major order, by the
    elements of ``source`` (torch.masked_scatter; mask broadcasts to input)."""
    x = operand(input, "masked_scatter")
    mask = _bool_mask(mask, "masked_scatter")
    source = operand(source, "masked_scatter", "source")
    if tuple(mask.shape) != tuple(x.shape):
        mask = expand(mask, *x.shape)
    return masked_scatter_op(x, mask, source)


def _src_or_value(x, src, value, name):
    if src is not None and value is not None:
        raise TypeError(located(f"{name}: give src or value, not both"))
    if src is None:
        src = value
    if src is None:
        raise TypeError(located(f"{name}: missing src (a tensor) or value (a number)"))
    if isinstance(src, (bool, int, float, np.generic)):
        return full((), _scalar_as(x, src), dtype=_dtype_of(x))
    src = operand(src, name, "src")
    if _dtype_of(src) != _dtype_of(x):
        raise DTypeError(located(f"{name}: expected self and src of one dtype, found "
                                 f"{_dtype_of(x)} and {_dtype_of(src)}"))
    return src


def scatter(input, dim: int, index, src=None, value=None, *, reduce=None):
    """``input`` with ``out[index[i][j]][j] = src[i][j]`` for dim=0 (torch.scatter); ``src``
    may be a number (the ``value`` form); ``reduce='add'|'multiply'`` combines instead.
    Where index repeats a place, the last write wins."""
    x = operand(input, "scatter")
    src = _src_or_value(x, src, value, "scatter")
    return scatter_op(x, index, src, dim=normalize_dim(dim, x.ndim, "scatter"),
                      reduce=reduce)


def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """``src`` reduced into ``input`` at ``index`` along ``dim`` with ``reduce`` = 'sum',
    'prod', 'mean', 'amax' or 'amin'; ``include_self=False`` leaves input's value out of the
    places that receive something (torch.scatter_reduce)."""
    x = operand(input, "scatter_reduce")
    src = operand(src, "scatter_reduce", "src")
    return scatter_reduce_op(x, index, src, dim=normalize_dim(dim, x.ndim, "scatter_reduce"),
                             reduce=reduce, include_self=include_self)


def _index_1d(index, name):
    index = operand(index, name, "index")
    if _dtype_of(index) not in _INT_INDEX:
        raise IndexingError(located(f"{name}: expected an integer index tensor, found "
                                    f"{_dtype_of(index)}"))
    if index.ndim > 1:
        raise IndexingError(located(f"{name}: index should have at most one dimension, "
                                    f"found shape {format_shape(index.shape)}"))
    if index.ndim == 0:
        index = reshape(index, 1)
    return index


def index_copy(input, dim: int, index, source):
    """``input`` with ``out[..., index[i], ...] = source[..., i, ...]`` along ``dim``
    (torch.index_copy)."""
    x = operand(input, "index_copy")
    d = normalize_dim(dim, max(x.ndim, 1), "index_copy")
    index = _index_1d(index, "index_copy")
    source = operand(source, "index_copy", "source")
    if _dtype_of(source) != _dtype_of(x):
        raise DTypeError(located(f"index_copy: expected source of dtype {_dtype_of(x)} "
                                 f"(self's), found {_dtype_of(source)}"))
    want = tuple(x.shape[:d]) + tuple(index.shape) + tuple(x.shape[d + 1:])
    if tuple(source.shape) != want:
        raise ShapeError(located(f"index_copy: expected source of shape "
                                 f"{format_shape(want)}, found {format_shape(source.shape)}"))
    return index_put_op(x, source, index, dims=(d,), accumulate=False)


@composite("index_fill")
def index_fill(input, dim: int, index, value):
    """``input`` with ``value`` at the entries ``index`` along ``dim`` (torch.index_fill);
    ``value`` is a number or a 0-d tensor."""
    x = operand(input, "index_fill")
    d = normalize_dim(dim, max(x.ndim, 1), "index_fill")
    index = _index_1d(index, "index_fill")
    value = _fill_value(x, value, "index_fill")
    if x.ndim == 0:
        col = full((1,), False, dtype="bool")
    else:
        col = full_like(getitem_op(x, index=tuple(
            ("s", None, None, None) if i == d else ("i", 0) for i in range(x.ndim))),
            False, dtype="bool")
    hit = index_put_op(col, full((), True, dtype="bool"), index, dims=(0,))
    if x.ndim == 0:
        hit = reshape(hit, ())
    elif d != x.ndim - 1:
        hit = reshape(hit, *((x.shape[d],) + (1,) * (x.ndim - d - 1)))
    return masked_fill(x, hit, value)


def take_along_dim(input, indices, dim=None):
    """Values of ``input`` at ``indices`` along ``dim`` (torch.take_along_dim): input and
    indices broadcast in the other dims; with ``dim=None`` both are flattened first."""
    x = operand(input, "take_along_dim")
    indices = operand(indices, "take_along_dim", "indices")
    if _dtype_of(indices) not in ("int64", "int32"):
        raise IndexingError(located(f"take_along_dim: expected an integer index tensor, "
                                    f"found {_dtype_of(indices)}"))
    if dim is None:
        return gather(reshape(x, -1), 0, reshape(indices, -1))
    if x.ndim != indices.ndim:
        raise ShapeError(located(f"take_along_dim: input and indices should have the same "
                                 f"number of dimensions, found {x.ndim} and {indices.ndim}"))
    d = normalize_dim(dim, x.ndim, "take_along_dim")
    shape = list(broadcast_shapes(tuple(x.shape), tuple(indices.shape), op="take_along_dim"))
    xs = tuple(shape[:d]) + (x.shape[d],) + tuple(shape[d + 1:])
    ish = tuple(shape[:d]) + (indices.shape[d],) + tuple(shape[d + 1:])
    if tuple(x.shape) != xs:
        x = expand(x, *xs)
    if tuple(indices.shape) != ish:
        indices = expand(indices, *ish)
    return gather(x, d, indices)


@composite("take")
def take(input, index):
    """``input`` flattened, at ``index`` (any shape; negative entries count from the end),
    as torch.take."""
    x = operand(input, "take")
    index = operand(index, "take", "index")
    return index_op(reshape(x, -1), index, dims=(0,))


set_advanced_indexing(advanced_getitem)     # x[index] with tensors or lists in index
