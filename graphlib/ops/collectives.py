"""Collectives: all_reduce, all_gather, reduce_scatter, broadcast and reduce over a process
group, as ops of the IR.

They are ordered side effects (``OpDef(ordered=True)``): every rank must run the same
collectives in the same order, so no pass merges, folds, drops or reorders them with respect
to each other, and ``verify`` checks that their ``seq`` attributes (numbered as they are
built) increase along the graph's order. The reference kernels move data through the runner
``duograph.distributed`` installs (``graphlib.collective_hooks``); with no process group a
group is a world of one rank.

Attributes: ``group`` (the process group's id, 0 the default group), ``world`` (its size
when the node was built: all_gather and reduce_scatter shapes depend on it), ``op`` (sum,
avg, product, min, max), ``src`` (the root's rank in the group, for broadcast and reduce),
``seq`` (the order number) and, for all_reduce, ``bucket`` (bytes of the gradient bucket a
DDP all-reduce may join; 0: never bucketed; -1: the ``dg.config`` size).

Non-blocking form (graph mode; the ``ddp_buckets`` pass emits it): ``all_reduce_start(*xs)``
copies its inputs, flattened, into one 1-D buffer and starts the reduction on it (MPI
Iallreduce); its output is that buffer while MPI writes into it (a request handle, read by
its wait alone). ``all_reduce_wait(h)`` completes it and yields the reduced buffer (a view
of ``h``: the planned runtime gives the start the buffer MPI reduces in, through the
``out=`` form ``all_reduce_start_into``). The wait's ``start`` attribute is its start's
``seq``; ``verify`` checks that every start has exactly one wait.

Gradients read like the maths: all_reduce(sum) <-> all_reduce(sum), all_gather <->
reduce_scatter(sum), broadcast(src) <-> reduce(dst=src).
"""
from __future__ import annotations

import numpy as _np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import leading_batch_rule, lrank, move_batch
from ..collective_hooks import (REDUCE_OPS, group_size, next_sequence, register_async_pair,
                                run_collective, start_collective, wait_collective)
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, format_shape
from ..xp import to_device


def _check_op(name, t, attrs):
    op = attrs.get("op", "sum")
    if op == "avg" and not dtypes.is_float(t.dtype):
        raise DTypeError(f"{name}: op='avg' needs a float tensor, found {t.dtype}")
    if t.dtype == "bool":
        raise DTypeError(f"{name}: bool tensors are not reduced; cast them first")


def _same_infer(name, reducing):
    def infer(types, attrs):
        (t,) = types
        if reducing:
            _check_op(name, t, attrs)
        return [TensorType(t.shape, t.dtype)]
    return infer


def _gather_infer(types, attrs):
    (t,) = types
    world = attrs.get("world", 1)
    if t.ndim == 0:
        raise ShapeError("all_gather: expected a tensor of at least 1 dim (gathered along "
                         "dim 0), found a 0-d tensor")
    d0 = t.shape[0]
    if world != 1 and not isinstance(d0, int):
        raise ShapeError(f"all_gather: dim 0 must be static, found {format_shape(t.shape)}")
    return [TensorType((d0 * world if world != 1 else d0,) + tuple(t.shape[1:]), t.dtype)]


def _scatter_infer(types, attrs):
    (t,) = types
    _check_op("reduce_scatter", t, attrs)
    world = attrs.get("world", 1)
    if t.ndim == 0:
        raise ShapeError("reduce_scatter: expected a tensor of at least 1 dim (scattered "
                         "along dim 0), found a 0-d tensor")
    d0 = t.shape[0]
    if world != 1 and (not isinstance(d0, int) or d0 % world):
        raise ShapeError(f"reduce_scatter: dim 0 must be a multiple of the group size "
                         f"{world}, found {format_shape(t.shape)}")
    return [TensorType((d0 // world if world != 1 else d0,) + tuple(t.shape[1:]), t.dtype)]


def _kernel(kind):
    def kernel(xp, x, op="sum", group=0, world=1, src=0, seq=0, bucket=0):
        return run_collective(kind, x, group, op, src, world)
    kernel.__name__ = f"{kind}_kernel"
    return kernel


def _start_infer(types, attrs):
    if not types:
        raise ShapeError("all_reduce_start: expected at least one tensor")
    dtype = types[0].dtype
    total = 0
    for i, t in enumerate(types):
        if t.dtype != dtype:
            raise DTypeError(f"all_reduce_start: every input needs one dtype, found {dtype} "
                             f"(input 0) and {t.dtype} (input {i})")
        n = t.numel()
        if n is None:
            raise ShapeError(f"all_reduce_start: input {i} needs a static shape, found "
                             f"{format_shape(t.shape)}")
        total += n
        _check_op("all_reduce_start", t, attrs)
    return [TensorType((total,), dtype)]


def _start_kernel(xp, *xs, op="sum", group=0, world=1, seq=0):
    buf = start_collective("all_reduce", xs, seq, group, op, world)
    if xp is not _np:       # MPI reduces a host copy; the wait returns it to the device
        return to_device(buf, "cuda") if world == 1 else xp.empty(buf.shape, buf.dtype)
    return buf


def all_reduce_start_into(xp, *xs, out, op="sum", group=0, world=1, seq=0) -> bool:
    """The start's ``out=`` form: MPI reduces in ``out`` (a planned host buffer), which the
    wait then yields without a copy. False (nothing started) for a buffer MPI cannot use."""
    if (xp is not _np or not isinstance(out, _np.ndarray) or not out.flags.c_contiguous
            or not out.flags.writeable or any(x.dtype != out.dtype for x in xs)):
        return False
    start_collective("all_reduce", xs, seq, group, op, world, out=out)
    return True


def _wait_infer(types, attrs):
    (t,) = types
    return [TensorType(t.shape, t.dtype)]


def _wait_kernel(xp, h, group=0, world=1, seq=0, start=0):
    return wait_collective("all_reduce", start, h, group)


def _all_reduce_vjp(cts, ins, outs, attrs, needs):
    op = attrs.get("op", "sum")
    if op not in ("sum", "avg"):
        raise NotImplementedError(f"all_reduce: no gradient for op={op!r} (only sum and avg)")
    return [all_reduce(cts[0], op, attrs.get("group", 0)) if needs[0] else None]


def _all_gather_vjp(cts, ins, outs, attrs, needs):
    return [reduce_scatter(cts[0], "sum", attrs.get("group", 0)) if needs[0] else None]


def _reduce_scatter_vjp(cts, ins, outs, attrs, needs):
    op = attrs.get("op", "sum")
    if op not in ("sum", "avg"):
        raise NotImplementedError(f"reduce_scatter: no gradient for op={op!r} "
                                  "(only sum and avg)")
    if not needs[0]:
        return [None]
    g = all_gather(cts[0], attrs.get("group", 0))
    return [g * (1.0 / attrs.get("world", 1)) if op == "avg" else g]


def _broadcast_vjp(cts, ins, outs, attrs, needs):
    return [reduce(cts[0], attrs.get("src", 0), attrs.get("group", 0)) if needs[0] else None]


def _reduce_vjp(cts, ins, outs, attrs, needs):
    if attrs.get("op", "sum") != "sum":
        raise NotImplementedError("reduce: a gradient only for op='sum'")
    return [broadcast(cts[0], attrs.get("src", 0), attrs.get("group", 0)) if needs[0]
            else None]


_COMMON = dict(group=Attr(int, default=0, min=0), world=Attr(int, default=1, min=1),
               seq=Attr(int, default=0, min=0))
_OP = Attr(str, default="sum", choices=REDUCE_OPS)
_SRC = Attr(int, default=0, min=0)

def _along_dim0_rule(op, args, batched, attrs, size):
    """all_gather and reduce_scatter per example work along each example's dim 0: the
    batch moves behind it (one collective carries every example), then back in front."""
    (x,) = args
    if lrank(x, True) == 0:
        return NotImplemented
    return move_batch(op(move_batch(x, 1), **attrs), 1)


all_reduce_op = register(OpDef(
    "all_reduce", _same_infer("all_reduce", True), _kernel("all_reduce"), _all_reduce_vjp,
    ordered=True, saves_no_data=True,
    attrs=Attrs(op=_OP, bucket=Attr(int, default=0, min=-1), **_COMMON),
    doc="Reduce over every rank of the group; every rank gets the result.",
    batch=leading_batch_rule))
all_gather_op = register(OpDef(
    "all_gather", _gather_infer, _kernel("all_gather"), _all_gather_vjp,
    ordered=True, saves_no_data=True, attrs=Attrs(**_COMMON),
    doc="Concatenate every rank's tensor along dim 0, in rank order.",
    batch=_along_dim0_rule))
reduce_scatter_op = register(OpDef(
    "reduce_scatter", _scatter_infer, _kernel("reduce_scatter"), _reduce_scatter_vjp,
    ordered=True, saves_no_data=True, attrs=Attrs(op=_OP, **_COMMON),
    doc="Reduce over the ranks, then rank r keeps block r of dim 0.",
    batch=_along_dim0_rule))
broadcast_op = register(OpDef(
    "broadcast", _same_infer("broadcast", False), _kernel("broadcast"), _broadcast_vjp,
    ordered=True, saves_no_data=True, attrs=Attrs(src=_SRC, **_COMMON),
    doc="Every rank gets rank src's tensor.", batch=leading_batch_rule))
reduce_op = register(OpDef(
    "reduce", _same_infer("reduce", True), _kernel("reduce"), _reduce_vjp,
    ordered=True, saves_no_data=True, attrs=Attrs(op=_OP, src=_SRC, **_COMMON),
    doc="Rank src gets the reduction over the ranks; the others get zeros.",
    batch=leading_batch_rule))
all_reduce_start_op = register(OpDef(
    "all_reduce_start", _start_infer, _start_kernel, None, ordered=True,
    attrs=Attrs(op=_OP, **_COMMON),
    doc="Start a non-blocking all-reduce of the inputs, flattened and concatenated; the "
        "output is the buffer MPI reduces in, for all_reduce_wait."))
all_reduce_wait_op = register(OpDef(
    "all_reduce_wait", _wait_infer, _wait_kernel, None, ordered=True, view=True,
    attrs=Attrs(start=Attr(int, default=0, min=0), **_COMMON),
    doc="Complete the all_reduce_start whose seq is ``start``; the reduced buffer."))
register_async_pair(all_reduce_start_op, all_reduce_wait_op)


def _attrs(group: int, **more) -> dict:
    if not isinstance(group, int) or isinstance(group, bool):
        raise TypeError(located(f"collectives: expected a process group id (int), found "
                                f"{type(group).__name__}"))
    return dict(more, group=group, world=group_size(group), seq=next_sequence())


def all_reduce(x, op: str = "sum", group: int = 0, bucket: int = 0):
    """The reduction (``op``: sum, avg, product, min, max) of ``x`` over the group's ranks."""
    return all_reduce_op(x, **_attrs(group, op=op, bucket=bucket))


def all_gather(x, group: int = 0):
    """Every rank's ``x`` concatenated along dim 0 in rank order."""
    return all_gather_op(x, **_attrs(group))


def reduce_scatter(x, op: str = "sum", group: int = 0):
    """Block ``rank`` (of dim 0 split in ``world`` blocks) of the reduction over the ranks."""
    return reduce_scatter_op(x, **_attrs(group, op=op))


def broadcast(x, src: int = 0, group: int = 0):
    """Rank ``src``'s ``x`` on every rank."""
    return broadcast_op(x, **_attrs(group, src=src))


def reduce(x, dst: int = 0, group: int = 0, op: str = "sum"):
    """The reduction over the ranks on rank ``dst``; zeros elsewhere."""
    return reduce_op(x, **_attrs(group, op=op, src=dst))


def all_reduce_start(xs, op: str = "sum", group: int = 0):
    """Start a non-blocking all-reduce of the tensors ``xs`` (flattened, concatenated); pass
    the result to ``all_reduce_wait``."""
    return all_reduce_start_op(*xs, **_attrs(group, op=op))


def all_reduce_wait(handle, group: int = 0):
    """The reduced flat buffer of the ``all_reduce_start`` that made ``handle``."""
    start = handle.node.attrs["seq"] if getattr(handle, "node", None) is not None else 0
    return all_reduce_wait_op(handle, **_attrs(group, start=start))
