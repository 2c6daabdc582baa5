"""Shape ops: reshape, permute, expand, cat, split, indexing, gather, pad, and ``sum_to``.

Shape attributes may hold symbolic dims (names such as ``"N"``); the runtime binds them from
the feeds before a kernel sees them.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs, AttrValueError
from ..batching import (ensure_batched, leading_batch_rule, lrank, norm_dim, pad_after_batch,
                        shape_of)
from ..errors import DTypeError, IndexBoundsError, ShapeError, located
from ..ir import Value, current_graph
from ..registry import OpDef, get_op, register
from ..types import (TensorType, as_shape, dim_add, dim_product, dim_quotient, dim_slice,
                     dims_equal, format_shape, normalize_dim)
from ._common import operand
from .creation import constant, zeros_like

# -- reshape -----------------------------------------------------------------------------------


def _resolve_reshape(src, target, name="reshape"):
    """Replace one -1 in ``target`` by the size that keeps the element count (a derived dim
    such as ``N*6`` when symbols are left over)."""
    target = tuple(target)
    holes = [i for i, d in enumerate(target) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"{name}: only one dim may be -1, found {format_shape(target)}")
    for d in target:
        if isinstance(d, int) and d < -1:
            raise ShapeError(f"{name}: invalid size {d} in {format_shape(target)}")
    have = dim_product(src)
    known = [d for d in target if not (isinstance(d, int) and d == -1)]
    want = dim_product(known)
    if holes:
        fill = dim_quotient(have, want)
        if fill is None:
            raise ShapeError(f"{name}: cannot infer the -1 in {format_shape(target)} from "
                             f"shape {format_shape(src)}")
        target = target[:holes[0]] + (fill,) + target[holes[0] + 1:]
    elif not dims_equal(have, want):
        raise ShapeError(f"{name}: cannot reshape {format_shape(src)} "
                         f"into {format_shape(target)} (element counts differ)")
    return as_shape(target)


def _reshape_infer(types, attrs):
    (t,) = types
    return [TensorType(_resolve_reshape(t.shape, attrs["shape"]), t.dtype)]


def _reshape_rule(op, args, batched, attrs, size):
    return op(args[0], shape=(size,) + tuple(attrs["shape"]))


reshape_op = register(OpDef(
    "reshape", _reshape_infer, lambda xp, x, shape: x.reshape(shape),
    lambda cts, ins, outs, a, needs: [reshape(cts[0], ins[0].shape)],
    view=True, saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(shape=Attr("shape")), batch=_reshape_rule))

# -- permute -----------------------------------------------------------------------------------


def _permute_infer(types, attrs):
    (t,) = types
    dims = attrs["dims"]
    if sorted(dims) != list(range(t.ndim)):
        raise ShapeError(f"permute: dims {dims} are not a permutation of the {t.ndim} dims "
                         f"of {t!r}")
    return [TensorType(tuple(t.shape[d] for d in dims), t.dtype)]


def _permute_vjp(cts, ins, outs, a, needs):
    inverse = [0] * len(a["dims"])
    for i, d in enumerate(a["dims"]):
        inverse[d] = i
    return [permute(cts[0], *inverse)]


def _permute_rule(op, args, batched, attrs, size):
    return op(args[0], dims=(0,) + tuple(d + 1 for d in attrs["dims"]))


permute_op = register(OpDef("permute", _permute_infer,
                            lambda xp, x, dims: xp.transpose(x, dims), _permute_vjp,
                            view=True, saves_no_data=True,
                            complex_ok=True, storage_ok=True, attrs=Attrs(dims=Attr("dims", min=0)),
                            batch=_permute_rule))

# -- expand and sum_to (its adjoint) -----------------------------------------------------------


def _expand_infer(types, attrs):
    (t,) = types
    shape = attrs["shape"]
    if len(shape) < t.ndim:
        raise ShapeError(f"expand: target {format_shape(shape)} has fewer dims than "
                         f"{format_shape(t.shape)}")
    out = list(shape)
    lead = len(shape) - t.ndim
    for i, d in enumerate(t.shape):
        want = shape[lead + i]
        if want == -1 or want == d:
            out[lead + i] = d
        elif d != 1:
            raise ShapeError(f"expand: cannot expand {format_shape(t.shape)} to "
                             f"{format_shape(shape)} (dim {i} has size {d}, not 1)")
    for i in range(lead):
        if out[i] == -1:
            raise ShapeError("expand: -1 is not allowed for new leading dims")
    return [TensorType(tuple(out), t.dtype)]


def _expand_kernel(xp, x, shape):
    lead = len(shape) - x.ndim
    full = tuple(x.shape[i - lead] if d == -1 else d for i, d in enumerate(shape))
    return xp.broadcast_to(x, full)


def _expand_rule(op, args, batched, attrs, size):
    (x,) = args
    shape = tuple(attrs["shape"])
    x = pad_after_batch(x, len(shape) - lrank(x, True))
    return op(x, shape=(size,) + shape)


expand_op = register(OpDef(
    "expand", _expand_infer, _expand_kernel,
    lambda cts, ins, outs, a, needs: [sum_to(cts[0], ins[0].shape)],
    view=True, saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(shape=Attr("shape")), batch=_expand_rule))


def _sum_to_axes(src_shape, shape):
    lead = len(src_shape) - len(shape)
    axes = list(range(lead))
    for i, d in enumerate(shape):
        if d == 1 and src_shape[lead + i] != 1:
            axes.append(lead + i)
    return tuple(axes), lead


def _sum_to_infer(types, attrs):
    (t,) = types
    shape = attrs["shape"]
    if len(shape) > t.ndim:
        raise ShapeError(f"sum_to: cannot sum {format_shape(t.shape)} to the larger "
                         f"{format_shape(shape)}")
    lead = t.ndim - len(shape)
    for i, d in enumerate(shape):
        s = t.shape[lead + i]
        if d != s and d != 1 and not isinstance(d, str) and not isinstance(s, str):
            raise ShapeError(f"sum_to: {format_shape(t.shape)} does not broadcast from "
                             f"{format_shape(shape)}")
    return [TensorType(shape, t.dtype)]


def _sum_to_kernel(xp, x, shape):
    axes, lead = _sum_to_axes(x.shape, shape)
    if not axes:
        return x
    out = xp.sum(x, axis=axes, keepdims=True)
    return out.reshape(shape) if lead else out


def _sum_to_rule(op, args, batched, attrs, size):
    """``sum_to(shape)`` per example: the leading example dims summed away, then the dims
    ``shape`` has as 1 summed with keepdim."""
    (x,) = args
    target = tuple(attrs["shape"])
    logical = shape_of(x)[1:]
    lead = len(logical) - len(target)
    if lead > 0:
        x = get_op("sum")(x, dim=tuple(range(1, lead + 1)), keepdim=False)
        logical = logical[lead:]
    dims = tuple(i + 1 for i, (have, want) in enumerate(zip(logical, target))
                 if want == 1 and have != 1)
    if dims:
        x = get_op("sum")(x, dim=dims, keepdim=True)
    return x


sum_to_op = register(OpDef(
    "sum_to", _sum_to_infer, _sum_to_kernel,
    lambda cts, ins, outs, a, needs: [expand(cts[0], *ins[0].shape)],
    saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(shape=Attr("shape")), batch=_sum_to_rule))

# -- cat and split -----------------------------------------------------------------------------


def _cat_infer(types, attrs):
    dim = attrs["dim"]
    first = types[0]
    total = 0
    dt = first.dtype
    for t in types:
        if t.ndim != first.ndim:
            raise ShapeError(f"cat: all tensors need {first.ndim} dims, found "
                             f"{format_shape(first.shape)} and {format_shape(t.shape)}")
        for i, (a, b) in enumerate(zip(t.shape, first.shape)):
            if i != dim and a != b:
                raise ShapeError(f"cat: sizes must match except in dim {dim}, found "
                                 f"{format_shape(first.shape)} and {format_shape(t.shape)}")
        total = dim_add(total, t.shape[dim])
        dt = dtypes.result_dtype(dt, t.dtype)
    shape = first.shape[:dim] + (total,) + first.shape[dim + 1:]
    return [TensorType(shape, dt)]


def _cat_vjp(cts, ins, outs, a, needs):
    # sizes may be symbols: the runtime binds split's ``sizes`` as it binds shapes
    return list(split_op(cts[0], dim=a["dim"], sizes=tuple(x.shape[a["dim"]] for x in ins)))


cat_op = register(OpDef("cat", _cat_infer,
                        lambda xp, *xs, dim: xp.concatenate(xs, axis=dim), _cat_vjp,
                        saves_no_data=True, autocast="promote",
                        complex_ok=True, storage_ok=True, attrs=Attrs(dim=Attr(int))))


def _split_infer(types, attrs):
    (t,) = types
    dim, sizes = attrs["dim"], attrs["sizes"]
    size = t.shape[dim]
    if isinstance(size, int) and builtin_sum(sizes) != size:
        raise ShapeError(f"split: sizes {list(sizes)} do not add up to {size}, the size of "
                         f"dim {dim} of {format_shape(t.shape)}")
    return [TensorType(t.shape[:dim] + (s,) + t.shape[dim + 1:], t.dtype) for s in sizes]


def _split_kernel(xp, x, dim, sizes):
    outs, start = [], 0
    index = [slice(None)] * x.ndim
    for s in sizes:
        index[dim] = slice(start, start + s)
        outs.append(x[tuple(index)])
        start += s
    return tuple(outs)


def _split_vjp(cts, ins, outs, a, needs):
    return [cat(list(cts), a["dim"])]


split_op = register(OpDef("split", _split_infer, _split_kernel, _split_vjp, multi_output=True,
                          view=True, saves_no_data=True,
                          complex_ok=True, storage_ok=True,
                          attrs=Attrs(dim=Attr(int), sizes=Attr("shape"))))

# -- basic indexing ----------------------------------------------------------------------------


class IndexingError(IndexBoundsError):
    """An index that does not fit the tensor (out of range, too many indices, a mask of the
    wrong shape, an index tensor of the wrong dtype): a ShapeError, and an ``IndexError`` as
    PyTorch raises, so code catching PyTorch's exception catches it."""


def _normalize_index(index, shape, name="getitem"):
    """Turn a Python index into a hashable tuple of ('i', k), ('s', start, stop, step),
    ('n',) for None; Ellipsis is expanded. Returns (items, result shape)."""
    if not isinstance(index, tuple):
        index = (index,)
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > len(shape):
        raise IndexingError(f"{name}: too many indices ({consumed}) for a tensor with "
                         f"{len(shape)} dims")
    items, out_shape, axis = [], [], 0
    seen_ellipsis = False
    for it in index:
        if it is Ellipsis:
            if seen_ellipsis:
                raise ShapeError(f"{name}: an index can only have one Ellipsis")
            seen_ellipsis = True
            for _ in range(len(shape) - consumed):
                items.append(("s", None, None, None))
                out_shape.append(shape[axis])
                axis += 1
        elif it is None:
            items.append(("n",))
            out_shape.append(1)
        elif isinstance(it, slice):
            start, stop, step = (_index_int(v, name) for v in (it.start, it.stop, it.step))
            if step is not None and step <= 0:
                raise ShapeError(f"{name}: slice step must be positive, found {step}")
            size = shape[axis]
            if isinstance(size, int):
                n = len(range(*slice(start, stop, step).indices(size)))
            elif start is None and stop is None and step in (None, 1):
                n = size
            elif (start or 0) >= 0 and stop is not None and stop >= 0:
                n = max(0, -(-(stop - (start or 0)) // (step or 1)))
            else:
                n = dim_slice(size, start, stop, step)
            items.append(("s", start, stop, step))
            out_shape.append(n)
            axis += 1
        elif hasattr(it, "__index__") and not isinstance(it, bool):
            k = int(it.__index__())
            size = shape[axis]
            if isinstance(size, int) and not -size <= k < size:
                raise IndexBoundsError(f"{name}: index {k} is out of bounds for dim {axis} with "
                                 f"size {size}")
            items.append(("i", k))
            axis += 1
        else:
            raise TypeError(f"{name}: unsupported index {it!r}; an index takes ints, "
                            "slices, None, ..., and integer or bool tensors and lists")
    out_shape.extend(shape[axis:])
    return tuple(items), tuple(out_shape)


def _index_int(v, name):
    if v is None:
        return None
    if hasattr(v, "__index__") and not isinstance(v, bool):
        return int(v.__index__())
    raise TypeError(f"{name}: slice bounds must be ints, found {v!r}")


def _python_index(items):
    out = []
    for it in items:
        if it[0] == "i":
            out.append(it[1])
        elif it[0] == "s":
            out.append(slice(it[1], it[2], it[3]))
        else:
            out.append(None)
    return tuple(out)


def _getitem_infer(types, attrs):
    (t,) = types
    _, shape = _normalize_index(_python_index(attrs["index"]), t.shape)
    return [TensorType(shape, t.dtype)]


def _getitem_rule(op, args, batched, attrs, size):
    """Basic indexing per example: a full slice for the batch dim in front."""
    index = attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    return op(args[0], index=(("s", None, None, None),) + index)


getitem_op = register(OpDef(
    "getitem", _getitem_infer, lambda xp, x, index: x[_python_index(index)],
    lambda cts, ins, outs, a, needs: [getitem_grad_op(cts[0], ins[0], index=a["index"])],
    view=True, saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(index=Attr("any")), batch=_getitem_rule))


def _getitem_grad_infer(types, attrs):
    g, x = types
    return [TensorType(x.shape, g.dtype)]


def _getitem_grad_kernel(xp, g, x, index):
    out = xp.zeros(x.shape, dtype=g.dtype)
    out[_python_index(index)] = g
    return out


def _getitem_grad_rule(op, args, batched, attrs, size):
    """The cotangent of basic indexing per example: ``x`` gives only its shape, so an
    unbatched one is broadcast (a view) and the index gets the batch's full slice."""
    g, x = (ensure_batched(a, b, size) for a, b in zip(args, batched))
    index = attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    return op(g, x, index=(("s", None, None, None),) + index)


getitem_grad_op = register(OpDef(
    "getitem_grad", _getitem_grad_infer, _getitem_grad_kernel,
    lambda cts, ins, outs, a, needs: [getitem(cts[0], _python_index(a["index"])), None],
    nondiff_inputs=(1,), saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(index=Attr("any")), batch=_getitem_grad_rule))

# -- gather / scatter_add / index_select / index_add -------------------------------------------


def _check_index_dtype(name, t):
    if t.dtype not in ("int32", "int64", "uint8"):
        raise DTypeError(f"{name}: expected an integer index tensor, found {t.dtype}")


def _gather_infer(types, attrs):
    x, idx = types
    _check_index_dtype("gather", idx)
    dim = attrs["dim"]
    if idx.ndim != x.ndim:
        raise ShapeError(f"gather: index needs as many dims as the input ({x.ndim}), "
                         f"found {format_shape(idx.shape)}")
    for i, (a, b) in enumerate(zip(idx.shape, x.shape)):
        if i != dim and isinstance(a, int) and isinstance(b, int) and a > b:
            raise ShapeError(f"gather: index {format_shape(idx.shape)} is larger than input "
                             f"{format_shape(x.shape)} in dim {i}")
    return [TensorType(idx.shape, x.dtype)]


def _checked_index(xp, index, size, dim: int, op: str):
    """``index`` as int64, every entry in ``[0, size)``: PyTorch refuses negative or too
    large indices here (numpy would wrap a negative one round silently)."""
    index = index.astype(xp.int64, copy=False)
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{op}: index {bad} is out of bounds for dim {dim} with size "
                             f"{size}")
    return index


def _gather_kernel(xp, x, index, dim):
    if index.shape != x.shape[:dim] + index.shape[dim:dim + 1] + x.shape[dim + 1:]:
        x = x[tuple(slice(0, s) if i != dim else slice(None)
                    for i, s in enumerate(index.shape))]
    return xp.take_along_axis(x, _checked_index(xp, index, x.shape[dim], dim, "gather"),
                              axis=dim)


gather_op = register(OpDef(
    "gather", _gather_infer, _gather_kernel,
    lambda cts, ins, outs, a, needs: [
        scatter_add(zeros_like_for_grad(ins[0], cts[0]), a["dim"], ins[1], cts[0]), None],
    nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int))))


def _scatter_add_infer(types, attrs):
    x, idx, src = types
    _check_index_dtype("scatter_add", idx)
    if idx.ndim != x.ndim or src.ndim != x.ndim or any(
            isinstance(i, int) and isinstance(s, int) and i > s
            for i, s in zip(idx.shape, src.shape)) or any(
            isinstance(i, int) and isinstance(s, int) and i > s and d != attrs["dim"]
            for d, (i, s) in enumerate(zip(idx.shape, x.shape))):
        raise ShapeError(f"scatter_add: index {format_shape(idx.shape)} must have self's "
                         f"dims ({format_shape(x.shape)}) and be no larger than src "
                         f"{format_shape(src.shape)} in any dim, nor than self in dims "
                         f"other than {attrs['dim']}")
    return [TensorType(x.shape, dtypes.result_dtype(x.dtype, src.dtype))]


def _scatter_add_kernel(xp, x, index, src, dim):
    out = x.astype(xp.result_type(x, src), copy=True)
    grids = list(xpu.open_grids(xp, index.shape))
    grids[dim] = _checked_index(xp, index, x.shape[dim], dim, "scatter_add")
    if src.shape != index.shape:    # only the corner of src that index covers is read
        src = src[tuple(slice(0, n) for n in index.shape)]
    xpu.add_at(xp, out, tuple(grids), src)
    return out


def _scatter_add_vjp(cts, ins, outs, a, needs):
    gs = None
    if needs[2]:
        gs = gather(cts[0], a["dim"], ins[1])
        if tuple(gs.shape) != tuple(ins[2].shape):     # zeros where src was not read
            widths = []
            for n, m in reversed(list(zip(ins[1].shape, ins[2].shape))):
                widths += [0, m - n]
            gs = pad(gs, widths)
    return [cts[0], None, gs]


scatter_add_op = register(OpDef(
    "scatter_add", _scatter_add_infer, _scatter_add_kernel, _scatter_add_vjp,
    nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int))))


def _index_select_infer(types, attrs):
    x, idx = types
    _check_index_dtype("index_select", idx)
    if idx.ndim != 1:
        raise ShapeError(f"index_select: expected a 1-D index, found {format_shape(idx.shape)}")
    dim = attrs["dim"]
    return [TensorType(x.shape[:dim] + idx.shape + x.shape[dim + 1:], x.dtype)]


def _index_select_rule(op, args, batched, attrs, size):
    x, idx = args
    if batched[1]:      # x[..., idx, ...] with an index per example: advanced indexing
        index = get_op("index")
        dims = (norm_dim(attrs["dim"], lrank(x, batched[0])),)
        return index.batch(index, (x, idx), batched, {"dims": dims}, size)
    return op(x, idx, dim=norm_dim(attrs["dim"], lrank(x, True)) + 1)


index_select_op = register(OpDef(
    "index_select", _index_select_infer,
    lambda xp, x, index, dim: xp.take(
        x, _checked_index(xp, index, x.shape[dim], dim, "index_select"), axis=dim),
    lambda cts, ins, outs, a, needs: [
        index_add(zeros_like_for_grad(ins[0], cts[0]), a["dim"], ins[1], cts[0]), None],
    nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int)), batch=_index_select_rule))


def _index_add_infer(types, attrs):
    x, idx, src = types
    _check_index_dtype("index_add", idx)
    dim = attrs["dim"]
    want = x.shape[:dim] + idx.shape + x.shape[dim + 1:]
    if idx.ndim != 1 or src.ndim != x.ndim or any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(src.shape, want)):
        raise ShapeError(f"index_add: expected src of shape {format_shape(want)}, found "
                         f"{format_shape(src.shape)}")
    return [TensorType(x.shape, dtypes.result_dtype(x.dtype, src.dtype))]


def _index_add_kernel(xp, x, index, src, dim):
    out = x.astype(xp.result_type(x, src), copy=True)
    where = (slice(None),) * dim + (_checked_index(xp, index, x.shape[dim], dim, "index_add"),)
    xpu.add_at(xp, out, where, src)
    return out


def _index_add_rule(op, args, batched, attrs, size):
    x, idx, src = args
    rank = lrank(x, batched[0])
    if batched[1]:      # an index per example: x[..., idx, ...] += src, an index_put
        put = get_op("index_put")
        return put.batch(put, (x, src, idx), (batched[0], batched[2], True),
                         {"dims": (norm_dim(attrs["dim"], rank),), "accumulate": True}, size)
    return op(ensure_batched(x, batched[0], size), idx, ensure_batched(src, batched[2], size),
              dim=norm_dim(attrs["dim"], rank) + 1)


index_add_op = register(OpDef(
    "index_add", _index_add_infer, _index_add_kernel,
    lambda cts, ins, outs, a, needs: [
        cts[0], None, index_select(cts[0], a["dim"], ins[1]) if needs[2] else None],
    nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int)), batch=_index_add_rule))

# -- pad ---------------------------------------------------------------------------------------


def _pad_infer(types, attrs):
    (t,) = types
    pad = attrs["pad"]
    if len(pad) % 2 or len(pad) // 2 > t.ndim:
        raise ShapeError(f"pad: expected pairs (before, after) for at most {t.ndim} dims, "
                         f"found {list(pad)}")
    shape = list(t.shape)
    for k in range(len(pad) // 2):
        axis = t.ndim - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        if lo < 0 or hi < 0:
            raise ShapeError(f"pad: negative padding {list(pad)} is not supported")
        shape[axis] = dim_add(shape[axis], lo + hi)
    return [TensorType(tuple(shape), t.dtype)]


def _pad_width(ndim, pad):
    width = [(0, 0)] * ndim
    for k in range(len(pad) // 2):
        width[ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return width


def _pad_vjp(cts, ins, outs, a, needs):
    x = ins[0]
    index = []
    for lo, hi in _pad_width(x.ndim, a["pad"]):
        index.append(slice(lo, -hi if hi else None))
    return [getitem(cts[0], tuple(index))]


pad_op = register(OpDef(
    "pad", _pad_infer,
    lambda xp, x, pad, value: xp.pad(x, _pad_width(x.ndim, pad), mode="constant",
                                     constant_values=value),
    _pad_vjp, saves_no_data=True,
    complex_ok=True, storage_ok=True, attrs=Attrs(pad=Attr("dims"), value=Attr("number")),
    batch=leading_batch_rule))

# -- public functions --------------------------------------------------------------------------
builtin_sum = sum


def _shape_args(shape, name):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = []
    for d in shape:
        if isinstance(d, str):
            out.append(d)
        elif hasattr(d, "__index__") and not isinstance(d, bool):
            out.append(int(d.__index__()))
        else:
            raise TypeError(located(f"{name}: expected ints (or symbol names) as sizes, "
                                    f"found {d!r}"))
    return tuple(out)


def reshape(x, *shape):
    """View ``x`` with a new shape; one dim may be -1."""
    return reshape_op(x, shape=_shape_args(shape, "reshape"))


def permute(x, *dims):
    """Reorder dims: ``permute(x, 2, 0, 1)``."""
    x = operand(x, "permute")
    dims = _shape_args(dims, "permute")
    return permute_op(x, dims=tuple(normalize_dim(d, x.ndim, "permute") for d in dims))


def transpose(x, dim0: int, dim1: int):
    """``x`` with dims ``dim0`` and ``dim1`` swapped (negative dims count from the end)."""
    x = operand(x, "transpose")
    dims = list(range(x.ndim))
    a, b = normalize_dim(dim0, x.ndim, "transpose"), normalize_dim(dim1, x.ndim, "transpose")
    dims[a], dims[b] = dims[b], dims[a]
    return permute_op(x, dims=tuple(dims))


def _eager_sizes(x, sizes, name):
    """Refuse symbolic sizes (names) for an eager tensor: only a graph binds them."""
    symbolic = [d for d in sizes if not isinstance(d, int)]
    if symbolic and not isinstance(x, Value) and current_graph() is None:
        raise ShapeError(located(f"{name}: expected int sizes for an eager tensor (a symbolic "
                                 f"size such as {str(symbolic[0])!r} needs graph mode), found "
                                 f"{format_shape(sizes)}"))


def expand(x, *sizes):
    """Broadcast ``x`` to ``sizes`` without copying (-1 keeps a dim)."""
    x = operand(x, "expand")
    sizes = _shape_args(sizes, "expand")
    _eager_sizes(x, sizes, "expand")
    if tuple(sizes) == tuple(x.shape):
        return x
    return expand_op(x, shape=sizes)


def broadcast_to(x, shape):
    """``expand(x, *shape)`` (numpy's name)."""
    if hasattr(shape, "__index__") and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bool)) or not isinstance(shape, Iterable):
        raise TypeError(located(f"broadcast_to: expected a shape (a sequence of ints), found "
                                f"{type(shape).__name__} {shape!r}"))
    return expand(x, *shape)


def sum_to(x, shape):
    """Sum ``x`` down to ``shape`` (the adjoint of broadcasting to it)."""
    x = operand(x, "sum_to")
    try:
        shape = as_shape(shape)
    except (TypeError, ValueError) as e:
        raise type(e)(located(f"sum_to: {e}")) from None
    _eager_sizes(x, shape, "sum_to")
    if tuple(x.shape) == shape:
        return x
    return sum_to_op(x, shape=shape)


def squeeze(x, dim=None):
    """Remove size-1 dims (all static ones, or only ``dim``; a no-op when it is not 1)."""
    x = operand(x, "squeeze")
    if dim is None:
        shape = tuple(d for d in x.shape if d != 1)
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        dims = {normalize_dim(d, max(x.ndim, 1), "squeeze") for d in dims}
        shape = tuple(d for i, d in enumerate(x.shape) if not (i in dims and d == 1))
    if shape == tuple(x.shape):
        return x
    return reshape_op(x, shape=shape)


def unsqueeze(x, dim: int):
    """Insert a size-1 dim at ``dim``."""
    x = operand(x, "unsqueeze")
    d = normalize_dim(dim, x.ndim, "unsqueeze", allow_end=True)
    shape = tuple(x.shape)
    return reshape_op(x, shape=shape[:d] + (1,) + shape[d:])


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    """Merge dims ``start_dim..end_dim`` into one."""
    x = operand(x, "flatten")
    if x.ndim == 0:
        return reshape_op(x, shape=(1,))
    s = normalize_dim(start_dim, x.ndim, "flatten")
    e = normalize_dim(end_dim, x.ndim, "flatten")
    if s > e:
        raise ShapeError(located(f"flatten: start_dim {start_dim} comes after end_dim "
                                 f"{end_dim}"))
    if s == e:
        return x
    shape = tuple(x.shape)
    merged = shape[s:e + 1]
    mid = dim_product(merged)
    if isinstance(mid, str) and mid not in merged:
        mid = -1    # a derived size (N*6): reshape infers it, numpy resolves it at run time
    return reshape_op(x, shape=shape[:s] + (mid,) + shape[e + 1:])


def _tensor_list(tensors, name: str) -> list:
    """``tensors`` as a list; one tensor is refused (iterating it would split it into rows)."""
    if hasattr(tensors, "shape") and hasattr(tensors, "dtype"):
        raise TypeError(located(f"{name}: expected a sequence of tensors, found one tensor "
                                f"of shape {format_shape(tensors.shape)}; wrap it in a list"))
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(located(f"{name}: expected a list or tuple of tensors, found "
                                f"{type(tensors).__name__}"))
    return [operand(t, name, f"item {i}") for i, t in enumerate(tensors)]


def cat(tensors: Sequence, dim: int = 0):
    """Concatenate along an existing dim."""
    tensors = _tensor_list(tensors, "cat")
    if not tensors:
        raise ValueError(located("cat: expected a non-empty sequence of tensors"))
    d = normalize_dim(dim, tensors[0].ndim, "cat")
    if len(tensors) == 1:
        return tensors[0]
    return cat_op(*tensors, dim=d)


concatenate = cat


def stack(tensors: Sequence, dim: int = 0):
    """Join tensors of equal shape along a new dim."""
    tensors = _tensor_list(tensors, "stack")
    if not tensors:
        raise ValueError(located("stack: expected a non-empty sequence of tensors"))
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ShapeError(located(f"stack: all tensors need the same shape, found "
                                 f"{', '.join(format_shape(s) for s in shapes)}"))
    d = normalize_dim(dim, tensors[0].ndim, "stack", allow_end=True)
    parts = [unsqueeze(t, d) for t in tensors]
    return parts[0] if len(parts) == 1 else cat_op(*parts, dim=d)


def split(x, split_size_or_sections, dim: int = 0):
    """Split into chunks of a given size (the last may be smaller) or of given sizes."""
    x = operand(x, "split")
    d = normalize_dim(dim, x.ndim, "split")
    size = x.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(located(f"split: chunk size must be positive, found {step}"))
        if not isinstance(size, int):
            raise ShapeError(located(f"split: cannot split symbolic dim {size!r} into chunks "
                                     f"of {step}"))
        sizes = tuple(min(step, size - i) for i in range(0, size, step)) or (0,)
    elif isinstance(split_size_or_sections, (list, tuple)) and all(
            hasattr(s, "__index__") and not isinstance(s, bool) for s in split_size_or_sections):
        sizes = tuple(int(s.__index__()) for s in split_size_or_sections)
    else:
        raise TypeError(located(f"split: expected split_size_or_sections to be an int or a "
                                f"list of ints, found {split_size_or_sections!r}"))
    return split_op(x, dim=d, sizes=sizes)


def chunk(x, chunks: int, dim: int = 0):
    """Split into ``chunks`` nearly equal pieces (as torch.chunk)."""
    x = operand(x, "chunk")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks <= 0:
        raise AttrValueError(located(f"chunk: chunks must be a positive int, found {chunks!r}"))
    size = x.shape[normalize_dim(dim, x.ndim, "chunk")]
    if not isinstance(size, int):
        raise ShapeError(located(f"chunk: cannot chunk symbolic dim {size!r} of "
                                 f"{format_shape(x.shape)}"))
    return split(x, -(-size // chunks), dim)


def _is_advanced(index) -> bool:
    """Whether ``index`` holds a tensor, array or list (advanced indexing: ``indexing``)."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(it, (list, tuple)) or (
        hasattr(it, "shape") and hasattr(it, "dtype") and not isinstance(it, np.generic))
        for it in items)


def _advanced_getitem(x, index):
    """Replaced by ``indexing.advanced_getitem`` when ``indexing`` (above this module: it
    builds advanced indexing from these shape ops) is imported; ops/__init__ imports it."""
    raise NotImplementedError("getitem: advanced indexing needs duograph.graphlib.ops.indexing")


def set_advanced_indexing(fn) -> None:
    """Install ``fn(x, index)`` for the indices ``_is_advanced`` finds (indexing's hook)."""
    global _advanced_getitem
    _advanced_getitem = fn


def getitem(x, index):
    """``x[index]`` as PyTorch: ints, slices (positive steps), None and ``...``; integer
    tensors and lists in any position (``x[:, idx]``, ``x[a, b]``: advanced indexing); bool
    masks (``x[mask]``: eager mode only, the size depends on the data)."""
    x = operand(x, "getitem")
    if _is_advanced(index):
        return _advanced_getitem(x, index)
    try:
        items, _ = _normalize_index(index, tuple(x.shape))
    except (ShapeError, TypeError) as e:
        raise type(e)(located(str(e))) from None
    return getitem_op(x, index=items)


def gather(x, dim: int, index):
    """out[i][j] = x[index[i][j]][j] for dim=0 (torch.gather)."""
    x = operand(x, "gather")
    return gather_op(x, index, dim=normalize_dim(dim, x.ndim, "gather"))


def scatter_add(x, dim: int, index, src):
    """out = x; out[index[i][j]][j] += src[i][j] for dim=0 (torch.scatter_add)."""
    x = operand(x, "scatter_add")
    return scatter_add_op(x, index, src, dim=normalize_dim(dim, x.ndim, "scatter_add"))


def index_select(x, dim: int, index):
    """Pick entries ``index`` (1-D integers) along ``dim``."""
    x = operand(x, "index_select")
    return index_select_op(x, index, dim=normalize_dim(dim, x.ndim, "index_select"))


def index_add(x, dim: int, index, src, *, alpha=1):
    """out = x; out[..., index[i], ...] += alpha * src[..., i, ...] along ``dim``."""
    x = operand(x, "index_add")
    if alpha != 1:
        src = src * alpha
    return index_add_op(x, index, src, dim=normalize_dim(dim, x.ndim, "index_add"))


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


class _PadModeError(ValueError, NotImplementedError):
    """An unknown padding mode: a ValueError, and the NotImplementedError PyTorch raises."""


def _pad_index(mode: str, size: int, lo: int, hi: int) -> np.ndarray:
    """Source index of each output position along one dim padded (or cropped, where
    negative) by ``lo``/``hi`` in a non-constant ``mode``, as PyTorch reads them."""
    src = np.arange(size + lo + hi, dtype=np.int64) - lo
    if mode == "reflect":
        src = np.abs(src)
        src = np.where(src >= size, 2 * (size - 1) - src, src)
    elif mode == "replicate":
        src = np.clip(src, 0, size - 1)
    else:               # PyTorch crops first, then wraps around what is left
        start, kept = max(-lo, 0), size + min(lo, 0) + min(hi, 0)
        src = start + (np.arange(size + lo + hi, dtype=np.int64) - max(lo, 0)) % max(kept, 1)
    return src


def pad(x, pad: Sequence[int], mode: str = "constant", value=None):
    """Pad (torch.nn.functional.pad): ``pad`` lists (before, after) pairs from the last dim
    backwards; a negative amount crops. ``mode`` 'constant' fills with ``value`` (default 0)
    and pads any trailing dims; 'reflect' (mirror without repeating the edge), 'replicate'
    (repeat the edge) and 'circular' (wrap around) pad the last 1, 2 or 3 dims of an input
    with one or two more dims (PyTorch's supported ranks); their gradients add up the
    copies."""
    x = operand(x, "pad")
    if mode not in _PAD_MODES:
        raise _PadModeError(located(f"pad: expected mode to be one of "
                                    f"{', '.join(_PAD_MODES)}, found {mode!r}"))
    if isinstance(pad, (int, str)) or not isinstance(pad, Iterable) or not all(
            hasattr(p, "__index__") and not isinstance(p, bool) for p in pad):
        raise TypeError(located(f"pad: expected a sequence of ints, found {pad!r}"))
    pad = tuple(int(p.__index__()) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(located(f"pad: expected pairs (before, after) for at most {x.ndim} "
                                 f"dims of input {format_shape(x.shape)}, found {list(pad)}"))
    if value is None:
        value = 0.0
    elif isinstance(value, np.generic):
        value = value.item()
    elif not isinstance(value, (bool, int, float)):
        raise TypeError(located(f"pad: value must be a Python number, found "
                                f"{type(value).__name__}"))
    pairs = [(x.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)]
    if mode != "constant":
        return _pad_indexed(x, pairs, mode, value)
    crop = [slice(None)] * x.ndim
    for axis, lo, hi in pairs:
        size = x.shape[axis]
        if (lo < 0 or hi < 0) and isinstance(size, int) and size + lo + hi < 0:
            raise ShapeError(located(f"pad: padding {list(pad)} would give dim {axis} of input "
                                     f"{format_shape(x.shape)} a negative size "
                                     f"{size + lo + hi}"))
        if lo < 0 or hi < 0:
            if not isinstance(size, int) and hi < 0:
                raise ShapeError(located(f"pad: cropping the end of symbolic dim {size!r} "
                                         f"(input {format_shape(x.shape)}) is not supported"))
            stop = size + hi if hi < 0 else None
            crop[axis] = slice(max(-lo, 0), stop)
    if any(c != slice(None) for c in crop):
        x = getitem(x, tuple(crop))
    positive = tuple(max(p, 0) for p in pad)
    if not any(positive):
        return x
    return pad_op(x, pad=positive, value=value)


def _pad_indexed(x, pairs, mode: str, value):
    n = len(pairs)
    if n > 3 or x.ndim not in (n + 1, n + 2):
        raise NotImplementedError(located(
            f"pad: mode {mode!r} pads the last 1, 2 or 3 dims of an input with one or two "
            f"more dims (padding of 2 ints for a 2-D or 3-D input, 4 for 3-D or 4-D, 6 for 4-D "
            f"or 5-D); found {2 * n} ints for a {x.ndim}-D input {format_shape(x.shape)}"))
    if value not in (0, 0.0, False):
        raise ValueError(located(f"pad: mode {mode!r} takes no value (found {value!r})"))
    for axis, lo, hi in pairs:
        size = x.shape[axis]
        if not isinstance(size, int):
            raise ShapeError(located(f"pad: mode {mode!r} needs a static size for dim {axis}, "
                                     f"found input {format_shape(x.shape)}"))
        if mode == "reflect" and (lo >= size or hi >= size):
            raise ShapeError(located(f"pad: reflect padding ({lo}, {hi}) must be less than the "
                                     f"size {size} of dim {axis} (input "
                                     f"{format_shape(x.shape)})"))
        if mode == "circular" and (lo > size or hi > size):
            raise ShapeError(located(f"pad: circular padding ({lo}, {hi}) must be at most the "
                                     f"size {size} of dim {axis} (input "
                                     f"{format_shape(x.shape)}): it would wrap around more "
                                     f"than once"))
        if size + lo + hi < (0 if mode == "circular" else 1):
            raise ShapeError(located(f"pad: padding ({lo}, {hi}) leaves dim {axis} of input "
                                     f"{format_shape(x.shape)} with size {size + lo + hi}"))
        if size == 0:
            raise ShapeError(located(f"pad: mode {mode!r} cannot pad the empty dim {axis} of "
                                     f"input {format_shape(x.shape)}"))
        if lo == 0 and hi == 0:
            continue
        x = index_select(x, axis, constant(_pad_index(mode, size, lo, hi)))
    return x


def zeros_like_for_grad(x, g):
    """Zeros shaped like ``x`` with the dtype of ``g`` (used by scatter-style vjps)."""
    return zeros_like(x, dtype=g.dtype)
