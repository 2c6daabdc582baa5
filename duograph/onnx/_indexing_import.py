"""ONNX import handlers: indexing (Gather, GatherElements, GatherND, ScatterElements/ScatterND with
their
reductions, and the data-dependent NonZero/Unique).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import numpy as np

from ..graphlib import functional as F
from ._import import handler, refuse, static_shape
from ._import_helpers import _axis, cast, static_shape_of


def _fix_negative(ctx, idx, size, x=None, axis=None):
    """Indices with negatives counted from the end (ONNX allows them); along a symbolic dim
    the size is ``x``'s along ``axis``, read at run time."""
    idx = cast(idx, "int64")
    if isinstance(size, int):
        n = ctx.const(size, "int64")
    elif x is not None:
        n = F.numel(x, (axis,), dtype="int64")
    else:
        refuse("indices into a symbolic dim")
    return F.where(F.lt(idx, ctx.const(0, "int64")), idx + n, idx)


@handler("Gather")
def _gather(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    if idx.dtype not in ("int32", "int64"):
        refuse(f"indices of dtype {idx.dtype}")
    idx = _fix_negative(ctx, idx, x.shape[axis], x, axis)
    flat = F.reshape(idx, -1) if idx.ndim != 1 else idx
    y = F.index_select(x, axis, flat)
    if idx.ndim != 1:
        shape = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
        y = F.reshape(y, *shape) if shape else F.reshape(y, ())
    return y


@handler("GatherElements")
def _gather_elements(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis], x, axis)
    return F.gather(x, axis, idx)


@handler("ScatterElements", "Scatter")
def _scatter_elements(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("add", "none"):
        refuse(f"reduction {reduction!r} (duograph has scatter_add only)")
    x, idx, src = ctx.x(0), ctx.x(1), ctx.x(2)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis])
    if reduction == "none":
        return _overwrite(ctx, x, lambda t, u: F.scatter_add(t, axis, idx, u), src)
    return cast(F.scatter_add(x, axis, idx, src), x.dtype)


def _overwrite(ctx, x, add, src):
    """Scatter without reduction from an adding scatter: the written places of ``x`` are
    zeroed and the updates added there (ONNX leaves repeated indices undefined; with
    known indices they are refused)."""
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    counts = add(cast(F.zeros_like(x), "int32"), cast(F.ones_like(src), "int32"))
    if ctx.eager and int(counts.numpy().max(initial=0)) > 1:
        refuse("repeated indices (ONNX leaves their result undefined)")
    hit = F.gt(counts, ctx.const(0, "int32"))
    return cast(add(F.where(hit, ctx.const(0, x.dtype), x), src), x.dtype)


# -- GatherND / ScatterND: index tuples flattened to one index into the leading dims ------------
def _nd_flatten(ctx, x, idx, batch_dims):
    """(x as (B, M, rest...), idx as (B, L) flat indices into the M = prod(x.shape[b:b+k])
    positions, idx's leading shape, rest)."""
    shape = static_shape_of(x)
    ishape = static_shape_of(idx)
    k = ishape[-1]
    b = batch_dims
    if b + k > len(shape):
        refuse(f"index tuples of {k} into {len(shape) - b} dims")
    if ishape[:b] != shape[:b]:
        refuse(f"batch dims {ishape[:b]} and {shape[:b]} differ")
    if idx.dtype not in ("int32", "int64"):
        refuse(f"indices of dtype {idx.dtype}")
    sizes = shape[b:b + k]
    idx = cast(idx, "int64")
    lead = ishape[:-1]
    batch = int(np.prod(shape[:b], dtype=np.int64))
    m = int(np.prod(sizes, dtype=np.int64))
    rest = tuple(shape[b + k:])
    strides = np.cumprod((sizes[1:] + (1,))[::-1])[::-1].astype(np.int64)
    sz = ctx.const(np.asarray(sizes, np.int64), "int64")
    idx = F.where(F.lt(idx, ctx.const(0, "int64")), idx + sz, idx)
    flat = F.sum(idx * ctx.const(strides, "int64"), -1)
    per = int(np.prod(ishape[b:-1], dtype=np.int64))
    flat = F.reshape(flat, batch, per) + ctx.const(
        (np.arange(batch, dtype=np.int64) * m).reshape(batch, 1), "int64")
    return F.reshape(x, batch * m, *rest), F.reshape(flat, -1), lead, rest


@handler("GatherND")
def _gather_nd(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, ctx.attr("batch_dims", 0))
    return F.reshape(F.index_select(data, 0, flat), *(tuple(lead) + rest))


@handler("ScatterND")
def _scatter_nd(ctx):
    x, idx, upd = ctx.x(0), ctx.x(1), ctx.x(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add"):
        refuse(f"reduction {reduction!r} (duograph has index_add only)")
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, 0)
    src = F.reshape(upd, -1, *rest)
    if reduction == "add":
        y = F.index_add(data, 0, flat, src)
    else:
        y = _overwrite(ctx, data, lambda t, u: F.index_add(t, 0, flat, u), src)
    return F.reshape(cast(y, x.dtype), *static_shape_of(x))


_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@handler("ScatterElements", "Scatter")
def _scatter_elements_reduce(ctx):
    """ScatterElements; the reductions add, mul, max and min combine the updates with the
    data's own value (scatter_reduce with include_self=True)."""
    reduction = ctx.attr("reduction", "none")
    if reduction == "none":
        return _scatter_elements(ctx)
    if reduction not in _SCATTER_REDUCE:
        refuse(f"reduction {reduction!r}")
    x, idx, src = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis])
    return cast(F.scatter_reduce(x, axis, idx, src, _SCATTER_REDUCE[reduction]), x.dtype)


@handler("ScatterND")
def _scatter_nd_reduce(ctx):
    """ScatterND; mul, max and min as scatter_reduce over the flattened index tuples."""
    reduction = ctx.attr("reduction", "none")
    if reduction in ("none", "add"):
        return _scatter_nd(ctx)
    if reduction not in _SCATTER_REDUCE:
        refuse(f"reduction {reduction!r}")
    x, idx, upd = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, 0)
    src = F.reshape(upd, -1, *rest)
    index = F.expand(F.reshape(flat, -1, *([1] * len(rest))), *static_shape_of(src))
    y = F.scatter_reduce(data, 0, index, src, _SCATTER_REDUCE[reduction])
    return F.reshape(cast(y, x.dtype), *static_shape_of(x))


# -- data-dependent output sizes: only for values known when the graph is built -----------------
def _data_dependent(ctx, what):
    if not ctx.eager:
        refuse(f"the output size of {what} depends on the input values, and duograph graphs "
               "have shapes fixed when the graph is built (only a constant input is "
               "computed)")


@handler("NonZero")
def _nonzero(ctx):
    _data_dependent(ctx, "NonZero")
    arr = np.asarray(ctx.x(0).numpy())
    return ctx.const(np.array(np.nonzero(arr), dtype=np.int64).reshape(arr.ndim, -1), "int64")


@handler("Unique")
def _unique(ctx):
    """Unique of a known tensor (numpy's unique; sorted=0 keeps first-occurrence order)."""
    _data_dependent(ctx, "Unique")
    arr = np.asarray(ctx.x(0).numpy())
    axis = ctx.attr("axis")
    if axis is not None:
        axis = _axis(axis, arr.ndim)
    y, first, inverse, counts = np.unique(arr, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [ctx.const(y, str(arr.dtype)), ctx.const(first, "int64"),
            ctx.const(inverse, "int64"), ctx.const(counts, "int64")]


@handler("Compress")
def _compress(ctx):
    """The slices of ``axis`` (of the flattened input without one) where ``condition`` is
    true: the condition is needed when the graph is built (the output's size is its count
    of trues), so a computed condition is refused and a graph input's is taken as fed."""
    x = ctx.x(0)
    cond = np.asarray(ctx.known(1, "condition")).reshape(-1).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        x = F.reshape(x, (-1,))
        axis = 0
    else:
        axis = _axis(axis, x.ndim)
    size = tuple(x.shape)[axis]
    if isinstance(size, int) and cond.size > size:
        refuse(f"condition has {cond.size} entries for a dim of {size}")
    return F.index_select(x, axis, ctx.const(np.flatnonzero(cond), "int64"))


@handler("ReverseSequence")
def _reverse_sequence(ctx):
    """Each batch entry's first ``sequence_lens[b]`` steps along ``time_axis`` reversed, the
    rest kept: one gather with the source step of every (step, batch) pair, the lengths
    needed when the graph is built."""
    x = ctx.x(0)
    t_ax, b_ax = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    if {t_ax, b_ax} != {0, 1}:
        refuse(f"time_axis {t_ax} and batch_axis {b_ax} (ONNX allows 0 and 1)")
    shape = static_shape(ctx)
    lens = np.asarray(ctx.known(1, "sequence_lens")).reshape(-1).astype(np.int64)
    steps, batch = shape[t_ax], shape[b_ax]
    if lens.size != batch or np.any(lens < 0) or np.any(lens > steps):
        refuse(f"sequence_lens {lens.tolist()} for {batch} sequences of {steps} steps")
    t = np.arange(steps)[:, None]
    src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)          # (T, B)
    if t_ax == 1:
        src = src.T
    index = np.broadcast_to(src.reshape(src.shape + (1,) * (len(shape) - 2)), shape)
    return F.gather(x, t_ax, ctx.const(np.ascontiguousarray(index), "int64"))
