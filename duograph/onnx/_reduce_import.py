"""ONNX import handlers: reductions and scans (Reduce*, ArgMax/ArgMin, CumSum, CumProd, TopK).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import numpy as np

from ..graphlib import functional as F
from ._import import HANDLERS, handler, refuse, static_shape
from ._import_helpers import FLOATS, _axes_arg, _axis, cast


# -- reductions ----------------------------------------------------------------------------------
def _reduce_axes(ctx, x):
    uses_input = ctx.node.op_type == "ReduceSum" and ctx.opset >= 13 or ctx.opset >= 18
    axes = _axes_arg(ctx, 1) if uses_input else (
        None if ctx.attr("axes") is None else list(ctx.attr("axes")))
    if axes is None or (len(axes) == 0):
        if axes is not None and ctx.attr("noop_with_empty_axes", 0):
            return None
        if axes is None and ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted({_axis(a, x.ndim) for a in axes}))


def _reduction(kind):
    def run(ctx):
        x = ctx.x(0)
        keep = bool(ctx.attr("keepdims", 1))
        axes = _reduce_axes(ctx, x)
        dt = x.dtype
        if dt == "bool":
            refuse("reductions of bool")
        if axes is None:
            if kind in ("sum", "mean", "max", "min", "prod"):
                return x
            if kind == "l1":
                return F.abs(x)
            if kind in ("l2",):
                return cast(F.sqrt(x * x), dt)
            if kind == "sumsq":
                return x * x
            if kind == "logsum":
                return F.log(x)
            if kind == "logsumexp":
                return x
        if x.ndim == 0:
            axes = None
        if kind == "sum":
            y = F.sum(x, axes, keep)
        elif kind == "mean":
            if dt not in FLOATS:
                refuse(f"ReduceMean of {dt}")
            y = F.mean(x, axes, keep)
        elif kind == "max":
            y = F.amax(x, axes, keep)
        elif kind == "min":
            y = F.amin(x, axes, keep)
        elif kind == "prod":
            y = F.prod(x, axes, keep)
        elif kind == "l1":
            y = F.sum(F.abs(x), axes, keep)
        elif kind == "l2":
            y = F.sqrt(cast(F.sum(x * x, axes, keep), dt)) if dt in FLOATS else \
                refuse(f"ReduceL2 of {dt}")
        elif kind == "sumsq":
            y = F.sum(x * x, axes, keep)
        elif kind == "logsum":
            if dt not in FLOATS:
                refuse(f"ReduceLogSum of {dt}")
            y = F.log(F.sum(x, axes, keep))
        else:
            if dt not in FLOATS:
                refuse(f"ReduceLogSumExp of {dt}")
            y = F.logsumexp(x, axes if axes is not None else (), keep) if axes else x
        return cast(y, dt)
    return run


for _n, _k in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"),
               ("ReduceMin", "min"), ("ReduceProd", "prod"), ("ReduceL1", "l1"),
               ("ReduceL2", "l2"), ("ReduceSumSquare", "sumsq"), ("ReduceLogSum", "logsum"),
               ("ReduceLogSumExp", "logsumexp")):
    handler(_n)(_reduction(_k))


def _arg(fn):
    def run(ctx):
        x = ctx.x(0)
        if ctx.attr("select_last_index", 0):
            refuse("select_last_index=1")
        if x.dtype == "bool":
            refuse("ArgMax/ArgMin of bool")
        axis = _axis(ctx.attr("axis", 0), x.ndim)
        return fn(x, axis, bool(ctx.attr("keepdims", 1)))
    return run


handler("ArgMax")(_arg(F.argmax))
handler("ArgMin")(_arg(F.argmin))


@handler("CumSum")
def _cumsum(ctx):
    x = ctx.x(0)
    axis = _axis(int(ctx.known(1, "axis").item()), x.ndim)
    n = ctx.shape()[axis]
    excl, rev = ctx.attr("exclusive", 0), ctx.attr("reverse", 0)
    if not isinstance(n, int):            # a symbolic length: duograph's scan op
        if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
            refuse(f"CumSum of {x.dtype}")
        y = F.flip(x, (axis,)) if rev else x
        y = cast(F.cumsum(y, axis), x.dtype)
        if excl:
            y = _shift_exclusive(ctx, y, axis, n, 0)
        return F.flip(y, (axis,)) if rev else y
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    if rev:
        tri = (i > j) if excl else (i >= j)
    else:
        tri = (i < j) if excl else (i <= j)
    if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
        refuse(f"CumSum of {x.dtype}")
    m = ctx.const(tri.astype(x.dtype), x.dtype)
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    y = F.matmul(F.permute(x, *perm), m) if x.ndim > 1 else F.matmul(x, m)
    if x.ndim > 1:
        inv = [0] * x.ndim
        for k, p in enumerate(perm):
            inv[p] = k
        y = F.permute(y, *inv)
    return cast(y, x.dtype)


def _select_last(fn):
    def run(ctx):
        x = ctx.x(0)
        if x.dtype == "bool":
            refuse("ArgMax/ArgMin of bool")
        axis = _axis(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        if not ctx.attr("select_last_index", 0):
            return fn(x, axis, keep)
        n = static_shape(ctx, 0, [axis])[axis]
        flipped = F.index_select(x, axis, ctx.const(np.arange(n)[::-1].copy(), "int64"))
        return ctx.const(n - 1, "int64") - fn(flipped, axis, keep)
    return run


handler("ArgMax")(_select_last(F.argmax))
handler("ArgMin")(_select_last(F.argmin))


_REDUCE_MAX_MIN = {k: HANDLERS[k] for k in ("ReduceMax", "ReduceMin")}


@handler("ReduceMax", "ReduceMin")
def _reduce_max_min_bool(ctx):
    """ReduceMax/Min, and of bool tensors as any/all (through uint8)."""
    x = ctx.x(0)
    fn = _REDUCE_MAX_MIN[ctx.node.op_type]
    axes = _reduce_axes(ctx, x)
    if axes and any(x.shape[a] == 0 for a in axes):    # the empty set: the identity
        keep = bool(ctx.attr("keepdims", 1))
        shape = [1 if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes]
        if not all(isinstance(d, int) for d in shape):
            refuse("an empty reduction with symbolic dims")
        big = ctx.node.op_type == "ReduceMin"
        if x.dtype == "bool":
            fill = big
        elif x.dtype in FLOATS:
            fill = np.inf if big else -np.inf
        else:
            info = np.iinfo(x.dtype)
            fill = info.max if big else info.min
        return ctx.const(np.full(shape, fill, dtype=x.dtype), x.dtype)
    if x.dtype != "bool":
        return fn(ctx)
    ctx.ins = [cast(x, "uint8")] + list(ctx.ins[1:])
    return F.ne(fn(ctx), ctx.const(0, "uint8"))


# -- cumulative products, top-k, einsum, scatter reductions --------------------------------------
def _shift_exclusive(ctx, y, axis, n, fill):
    """``y`` moved one place along ``axis`` with ``fill`` in front (an exclusive scan)."""
    shape = list(y.shape)
    shape[axis] = 1
    first = F.full(tuple(shape), fill, dtype=y.dtype)
    if ctx.eager:
        from .. import eager
        first = eager.tensor(np.full(shape, fill, dtype=y.dtype))
    if isinstance(n, int) and n <= 1:
        return first if n == 1 else y
    index = [slice(None)] * y.ndim
    index[axis] = slice(0, -1)
    return F.cat([first, F.getitem(y, tuple(index))], axis)


@handler("CumProd")
def _cumprod(ctx):
    """CumProd with its exclusive (a leading 1) and reverse (from the end) attributes."""
    x = ctx.x(0)
    if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
        refuse(f"CumProd of {x.dtype}")
    axis = _axis(int(np.asarray(ctx.known(1, "axis")).item()), x.ndim)
    n = ctx.shape()[axis]
    rev = bool(ctx.attr("reverse", 0))
    y = F.flip(x, (axis,)) if rev else x
    y = cast(F.cumprod(y, axis), x.dtype)
    if ctx.attr("exclusive", 0):
        y = _shift_exclusive(ctx, y, axis, n, 1)
    return F.flip(y, (axis,)) if rev else y


@handler("TopK")
def _topk(ctx):
    """TopK through duograph's stable sort: among equal values the lower index comes first,
    as ONNX requires; ``sorted=0`` (any order allowed) gives the sorted order too."""
    x = ctx.x(0)
    if x.dtype == "bool":
        refuse("TopK of bool")
    if ctx.opset < 10:
        k = int(ctx.attr("k"))
    else:
        k = int(np.asarray(ctx.known(1, "K")).reshape(-1)[0])
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    size = static_shape(ctx, 0, [axis])[axis]
    if not 0 <= k <= size:
        refuse(f"K={k} out of range for an axis of size {size}")
    values, indices = F.topk(x, k, axis, largest=bool(ctx.attr("largest", 1)), sorted=True)
    return [values, cast(indices, "int64")]
