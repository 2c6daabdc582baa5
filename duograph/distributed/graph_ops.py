"""The bridge from the IR's collective ops (``graphlib.ops.collectives``) to MPI.

graphlib knows process groups only by integer ids and calls a runner to move data
(``graphlib.collective_hooks``); this module is that runner. Id 0 is the default group (a
world of one rank until ``init_process_group``); ``group_id(group)`` gives another group
its id. Importing ``duograph.distributed`` installs the runner; MPI is still imported only
by ``init_process_group``.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ..graphlib import collective_hooks
from .collectives import _MPI_OPS, _WIDEN, ReduceOp
from .process_group import ProcessGroup, _state, wait_request

_groups: Dict[int, ProcessGroup] = {}
_ids: Dict[int, int] = {}          # id(group) -> its group id


def group_id(group: Optional[ProcessGroup]) -> int:
    """The id collective ops name ``group`` by (0: the default group)."""
    if group is None or group is _state.default:
        return 0
    gid = _ids.get(id(group))
    if gid is None:
        gid = _ids[id(group)] = len(_groups) + 1
        _groups[gid] = group
    return gid


def group_of(gid: int) -> Optional[ProcessGroup]:
    """The group an id names; None for the default group when none is initialised."""
    if gid == 0:
        return _state.default
    try:
        return _groups[gid]
    except KeyError:
        raise KeyError(f"collectives: no process group has id {gid} in this process "
                       "(ids are given by group_id(group) when a graph is built)") from None


class MPIRunner:
    """Runs the IR's collectives on the process groups' MPI communicators."""

    def size(self, gid: int) -> int:
        g = group_of(gid)
        return 1 if g is None else g.size

    def rank(self, gid: int) -> int:
        g = group_of(gid)
        return 0 if g is None else g.rank

    def run(self, kind: str, array, gid: int, op: str = "sum", src: int = 0):
        g = group_of(gid)
        if g is None or g.mpi is None:          # a world of one rank
            return collective_hooks.LocalRunner().run(kind, array, gid, op, src)
        MPI, comm = g.mpi, g.comm
        dtype = array.dtype
        x = array.astype(_WIDEN[dtype.name]) if dtype.name in _WIDEN else array
        x = np.ascontiguousarray(x)
        mop = getattr(MPI, _MPI_OPS[ReduceOp(op)])   # (the IR's op attr is ReduceOp's value)
        if kind == "all_reduce":
            out = np.empty_like(x)
            comm.Allreduce(x, out, op=mop)
        elif kind == "all_gather":
            out = np.empty((g.size * x.shape[0],) + x.shape[1:], x.dtype)
            comm.Allgather(x, out)
        elif kind == "reduce_scatter":
            out = np.empty((x.shape[0] // g.size,) + x.shape[1:], x.dtype)
            comm.Reduce_scatter_block(x, out, op=mop)
        elif kind == "broadcast":
            out = x.copy()
            comm.Bcast(out, root=src)
        elif kind == "reduce":
            out = np.empty_like(x)
            comm.Reduce(x, out, op=mop, root=src)
            if g.rank != src:
                out[...] = 0
        else:
            raise ValueError(f"collectives: unknown collective {kind!r}")
        if op == "avg":
            out /= g.size
        return out.astype(dtype, copy=False)


    def start(self, kind: str, buffer, gid: int, op: str = "sum"):
        """Start a non-blocking ``kind`` (all_reduce) in place on ``buffer``; the request's
        ``wait`` leaves the result there (see ``graphlib.collective_hooks``)."""
        if kind != "all_reduce":
            raise ValueError(f"collectives: no non-blocking form of {kind!r}")
        g = group_of(gid)
        if g is None or g.mpi is None or g.size == 1:
            return _Request(None, buffer, buffer, op, 1)
        dtype = buffer.dtype
        wide = buffer.astype(_WIDEN[dtype.name]) if dtype.name in _WIDEN else buffer
        mop = getattr(g.mpi, _MPI_OPS[ReduceOp(op)])
        return _Request(g.comm.Iallreduce(g.mpi.IN_PLACE, wide, op=mop), wide, buffer, op,
                        g.size)


class _Request:
    """A started all-reduce: ``test()`` lets MPI progress it; ``wait()`` completes it and
    leaves the result (averaged for "avg", narrowed back from a widened dtype) in the
    caller's buffer."""

    __slots__ = ("request", "work", "buffer", "op", "size", "done")

    def __init__(self, request, work, buffer, op: str, size: int):
        self.request, self.work, self.buffer = request, work, buffer
        self.op, self.size, self.done = op, size, request is None

    def test(self) -> bool:
        if not self.done:
            self.done = bool(self.request.Test())
        return self.done

    def wait(self) -> None:
        if self.request is not None:
            if not self.done:
                wait_request(self.request)
            self.request = None
            if self.op == "avg":
                np.divide(self.work, self.size, out=self.work, casting="unsafe")
            if self.work is not self.buffer:
                self.buffer[...] = self.work
        self.done = True


runner = MPIRunner()
collective_hooks.set_collective_runner(runner)
