"""Boolean masks and data-dependent sizes: ``nonzero`` (the coordinates of nonzero
elements, ``size`` rows, padded with ``fill_value`` or cut), ``masked_take`` (the first
``size`` elements of ``x`` where ``mask`` holds, zero-padded) and its adjoint
``masked_scatter``; the public ``nonzero``, ``argwhere``, ``where``, ``masked_select``,
``masked_fill`` and ``masked_scatter``.

Boolean masks and ``nonzero`` give shapes that depend on the data. Eager mode counts the
elements first (a value decision, so ``dg.compile`` guards it and re-records when it changes)
and then runs the ops above with a static size; graph mode needs a bound (``size=``) and
otherwise raises an error that says so.
"""
from __future__ import annotations


import numpy as np

from ..attrs import Attr, Attrs
from ..batching import ensure_batched, shape_of
from ..dispatch import Scalar
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, broadcast_shapes, format_shape
from ._common import operand
from .elementwise import cast, where_op
from .index_ops import _dtype_of, _is_tensor, _scalar_as, _symbolic
from .reduction import sum as reduce_sum
from .shape import (expand, getitem_op, reshape, zeros_like_for_grad)

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


def _ranks(mask, size):
    """(mask as (B, M) rows, each element's rank among its row's selected ones (-1 before the
    first))."""
    rows = reshape(mask, size, -1)
    return rows, get_op("cumsum")(cast(rows, "int64"), dim=1) - Scalar(1, "int64")


def _masked_take_rule(op, args, batched, attrs, size):
    """masked_take per example: each selected element goes to its rank's place in its
    example's row (a scatter-add into zeros; the ranks past the size go to a spare column
    that is cut off), so rows keep their own counts and zero padding."""
    x, mask = (ensure_batched(a, b, size) for a, b in zip(args, batched))
    shape = tuple(attrs["shape"])
    if x.dtype == "bool" or not all(isinstance(d, int) for d in shape):
        return NotImplemented
    k = int(np.prod(shape, dtype=np.int64))
    rows, rank = _ranks(mask, size)
    keep = get_op("logical_and")(rows, rank < k)
    idx = where_op(keep, rank, Scalar(k, "int64"))
    vals = where_op(keep, reshape(x, size, -1), Scalar(0, x.dtype))
    zeros = get_op("full")(shape=(size, k + 1), fill_value=0, dtype=x.dtype)
    out = get_op("scatter_add")(zeros, idx, vals, dim=1)
    return reshape(getitem_op(out, index=(("s", None, None, None), ("s", 0, k, None))),
                   size, *shape)


masked_take_op = register(OpDef(
    "masked_take", _masked_take_infer, _masked_take_kernel,
    lambda cts, ins, outs, a, needs: [
        masked_scatter_op(zeros_like_for_grad(ins[0], cts[0]), ins[1], cts[0], strict=False),
        None],
    nondiff_inputs=(1,),
    attrs=Attrs(shape=Attr("shape")), batch=_masked_take_rule,
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
    g, mask, src = cts[0], ins[1], ins[2]
    return [where(mask, 0.0, g) if needs[0] else None, None,
            masked_take_op(g, mask, shape=tuple(src.shape)) if needs[2] else None]


def _masked_scatter_rule(op, args, batched, attrs, size):
    """masked_scatter per example: the place of each selected element reads its example's
    source at the element's rank (a gather). A strict one whose source may be too short
    (fewer elements than the mask) runs per example, which raises as it must."""
    x, mask = (ensure_batched(a, b, size) for a, b in zip(args[:2], batched[:2]))
    src = ensure_batched(args[2], batched[2], size)
    m = int(np.prod(shape_of(mask)[1:], dtype=np.int64))
    n = int(np.prod(shape_of(src)[1:], dtype=np.int64))
    if n == 0 or (attrs.get("strict", True) and n < m):
        return NotImplemented
    rows, rank = _ranks(mask, size)
    keep = get_op("logical_and")(rows, rank < n)
    at = get_op("minimum")(get_op("maximum")(rank, Scalar(0, "int64")), Scalar(n - 1, "int64"))
    picked = get_op("gather")(reshape(src, size, -1), at, dim=1)
    return reshape(where_op(keep, picked, reshape(x, size, -1)), *shape_of(x))


masked_scatter_op = register(OpDef(
    "masked_scatter", _masked_scatter_infer, _masked_scatter_kernel, _masked_scatter_vjp,
    nondiff_inputs=(1,),
    attrs=Attrs(strict=Attr(bool, default=True)), batch=_masked_scatter_rule,
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
    elements of ``source`` (torch.masked_scatter: input and mask broadcast together; the
    in-place ``masked_scatter_`` keeps input's shape)."""
    x = operand(input, "masked_scatter")
    mask = _bool_mask(mask, "masked_scatter")
    source = operand(source, "masked_scatter", "source")
    x, mask = _broadcast_pair(x, mask, "masked_scatter")
    return masked_scatter_op(x, mask, source)
