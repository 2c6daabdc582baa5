"""Differentiable collectives with ``torch.distributed.nn.functional``'s names: they return
new tensors (never write their inputs) and have gradient rules (all-reduce-sum <->
all-reduce-sum, all-gather <-> reduce-scatter, broadcast <-> reduce to the source).

They apply the IR's collective ops, so the same call works on eager tensors (recorded by
autograd), under ``dg.compile`` and on graph Values (a node with its place in the order).

    import duograph.distributed.nn.functional as dfn
    total = dfn.all_reduce(local_loss)              # the sum over the ranks
    parts = dfn.all_gather(features)                # a tuple: one tensor per rank
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ...graphlib import functional as F
from ...graphlib.ops import collectives as C
from ..collectives import ReduceOp, _op
from ..graph_ops import group_id, group_of, runner
from ..process_group import DistributedError, ProcessGroup


def _op_name(op) -> str:
    name = _op(op).value
    if name not in ("sum", "avg", "product", "min", "max"):
        raise ValueError(f"collectives: op {name!r} has no differentiable form (expected SUM, "
                         "AVG, PRODUCT, MIN or MAX)")
    return name


def all_reduce(tensor, op=ReduceOp.SUM, group: Optional[ProcessGroup] = None):
    """The reduction of ``tensor`` over the group's ranks, on every rank."""
    return C.all_reduce(tensor, _op_name(op), group_id(group))


def all_gather(tensor, group: Optional[ProcessGroup] = None) -> Tuple:
    """Every rank's ``tensor`` (all of one shape), as a tuple in rank order."""
    gid = group_id(group)
    size = runner.size(gid)
    flat = tensor if tensor.ndim else F.reshape(tensor, 1)
    out = C.all_gather(flat, gid)
    parts = F.split(out, flat.shape[0]) if size > 1 else (out,)
    if not tensor.ndim:
        parts = [F.reshape(p) for p in parts]
    return tuple(parts)


def reduce_scatter(output, input_list: Sequence, op=ReduceOp.SUM,
                   group: Optional[ProcessGroup] = None):
    """The reduction over the ranks of ``input_list[rank]`` (one tensor per rank, each shaped
    like ``output``), as a new tensor (``output`` gives only the shape)."""
    gid = group_id(group)
    size = runner.size(gid)
    if len(input_list) != size:
        raise DistributedError(f"reduce_scatter: expected one input per rank ({size}), "
                               f"found {len(input_list)}")
    shape = tuple(output.shape)
    flat = [F.reshape(t, -1) for t in input_list]
    res = C.reduce_scatter(F.cat(flat, 0), _op_name(op), gid)
    return F.reshape(res, *shape) if shape else F.reshape(res)


def broadcast(tensor, src: int, group: Optional[ProcessGroup] = None):
    """Rank ``src``'s ``tensor`` (``src`` a global rank, as in PyTorch) on every rank; the
    gradient flows back to ``src`` (summed over the ranks), zero elsewhere."""
    gid = group_id(group)
    g = group_of(gid)
    if g is not None and src not in g.ranks:
        raise DistributedError(f"broadcast: rank {src} is not in the group {g.ranks}")
    return C.broadcast(tensor, g.ranks.index(src) if g is not None else 0, gid)


__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
