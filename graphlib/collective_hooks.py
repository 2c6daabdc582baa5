"""How collective ops reach a communicator, without graphlib knowing about MPI.

The collective OpDefs (``ops/collectives.py``) name a process group by an integer id (0: the
default group) and call the runner installed here to move the data. ``duograph.distributed``
installs its runner on import (``set_collective_runner``); until one is installed, and while
no process group is initialised, every group is a world of one rank: an all-reduce is the
identity, an all-gather returns its input, a broadcast from rank 0 keeps it.

A runner is any object with

- ``size(group: int) -> int`` and ``rank(group: int) -> int``;
- ``run(kind: str, array, group: int, op: str, src: int) -> array``: one collective on a
  host array (``kind`` is "all_reduce", "all_gather", "reduce_scatter", "broadcast" or
  "reduce"; ``op`` is "sum", "avg", "product", "min" or "max"; ``src`` the root's rank in
  the group). It returns a new array and never writes its input.
- ``start(kind: str, buffer, group: int, op: str) -> request``: start a non-blocking
  collective (only "all_reduce" now) in place on the C-contiguous host array ``buffer``;
  the request has ``test() -> bool`` (progresses it, True once done) and ``wait()``, which
  completes it and leaves the result in ``buffer`` (an average already divided).

A non-blocking collective is a pair of nodes: ``all_reduce_start`` copies its inputs into
one flat buffer and starts the reduction on it (``start_collective``); ``all_reduce_wait``
completes it (``wait_collective``) and yields that buffer. Between the two, the buffer
belongs to MPI: the start's output is read by its wait alone, so no memory plan reuses it.
MPI progresses a non-blocking collective only while the process is inside MPI, so the
planned runtime calls ``progress()`` between kernels while any is pending.

Collectives are ordered side effects: every rank must run the same collectives in the same
order. ``next_sequence()`` numbers them as graphs and eager calls create them; ``verify``
checks that the numbers increase along a graph's order (passes never reorder collectives).
"""
from __future__ import annotations

import itertools
import threading

import numpy as np

from .xp import to_device

REDUCE_OPS = ("sum", "avg", "product", "min", "max")


class LocalRunner:
    """A world of one rank: what collectives do with no process group."""

    def size(self, group: int) -> int:
        return 1

    def rank(self, group: int) -> int:
        return 0

    def run(self, kind: str, array, group: int, op: str = "sum", src: int = 0):
        return array.copy()

    def start(self, kind: str, buffer, group: int, op: str = "sum"):
        return _Done()


class _Done:
    """The request of a collective over one rank: done when started."""

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        return None


_local = LocalRunner()
_runner = _local
_counter = itertools.count(1)
_lock = threading.Lock()


def set_collective_runner(runner) -> None:
    """Install the object collective kernels call (None: back to a world of one rank)."""
    global _runner
    _runner = _local if runner is None else runner


def get_collective_runner():
    """The runner collective kernels call now."""
    return _runner


def group_size(group: int) -> int:
    """How many ranks process group ``group`` has (1 with no process group)."""
    return int(_runner.size(group))


def group_rank(group: int) -> int:
    return int(_runner.rank(group))


def next_sequence() -> int:
    """A fresh, increasing sequence number for a new collective node."""
    with _lock:
        return next(_counter)


def run_collective(kind: str, array, group: int, op: str = "sum", src: int = 0,
                   world: int = 1):
    """Run one collective through the runner on a host array (a device array travels
    through the host) and return the result as an array of the same array module."""
    size = group_size(group)
    if size != world:
        raise RuntimeError(f"{kind}: the node was built for a group of {world} ranks, but "
                           f"group {group} has {size} now (rebuild the graph after "
                           "init_process_group)")
    device = hasattr(array, "get") and not isinstance(array, np.ndarray)
    host = np.ascontiguousarray(array.get() if device else array)
    out = _runner.run(kind, host, group, op, src)
    return _to_device(out) if device else out


def _to_device(out):
    """A host result back on the device, through the table its backend registered."""
    return to_device(out, "cuda")


# Started, not yet waited: the start node's seq -> (request, host buffer, device module or
# None when the caller's arrays are on the host). One run of a graph at a time holds them.
_pending: dict = {}


def start_collective(kind: str, arrays, key: int, group: int, op: str = "sum", world: int = 1,
                     out=None):
    """Copy ``arrays`` (flattened, in order) into one flat buffer and start ``kind`` on it
    without waiting; ``wait_collective(key, ...)`` completes it. The buffer is ``out`` when
    that is a C-contiguous host array of the arrays' dtype (the planned runtime's buffer for
    the start node: MPI then writes the result where the wait reads it), else a fresh host
    array. Returns the buffer."""
    size = group_size(group)
    if size != world:
        raise RuntimeError(f"{kind}: the node was built for a group of {world} ranks, but "
                           f"group {group} has {size} now (rebuild the graph after "
                           "init_process_group)")
    stale = _pending.pop(key, None)
    if stale is not None:   # a run that raised between start and wait: finish its request
        stale[0].wait()
    first = arrays[0]
    device = hasattr(first, "get") and not isinstance(first, np.ndarray)
    hosts = [np.asarray(a.get() if device else a) for a in arrays]
    total = sum(h.size for h in hosts)
    dtype = hosts[0].dtype
    buf = out
    if not (isinstance(buf, np.ndarray) and buf.dtype == dtype and buf.size == total
            and buf.flags.c_contiguous and buf.flags.writeable):
        buf = np.empty(total, dtype)
    flat = buf.reshape(-1)
    at = 0
    for h in hosts:
        flat[at:at + h.size] = h.reshape(-1)
        at += h.size
    if size > 1:            # over one rank the result is the buffer: nothing to wait for
        _pending[key] = (_runner.start(kind, flat, group, op), buf, device)
    return buf


def wait_collective(kind: str, key: int, array, group: int = 0):
    """Complete the collective ``start_collective`` started under ``key`` and return its
    result: ``array`` itself when MPI reduced in it (the planned path), else the buffer the
    start made (moved back to the device when the inputs came from there). With nothing
    pending under ``key`` the collective was over one rank (done when started): ``array``."""
    entry = _pending.pop(key, None)
    if entry is None:
        if group_size(group) > 1:
            raise RuntimeError(f"{kind}_wait: no collective of seq {key} was started (every "
                               "wait needs its start to run first)")
        return array
    request, buf, device = entry
    request.wait()
    if buf is array:
        return array
    if device:
        return _to_device(buf)
    return buf.reshape(array.shape)


def pending() -> bool:
    """Whether a started collective waits for its completion."""
    return bool(_pending)


def progress() -> None:
    """Let MPI move the pending non-blocking collectives on (a request test each); cheap
    when none is pending. The planned runtime calls it between kernels."""
    if _pending:
        for request, _, _ in list(_pending.values()):
            request.test()


# OpDef of a start -> OpDef of its wait (ops/collectives.py registers them): how verify and
# the scheduler know a non-blocking pair without a table of op names
_pairs: dict = {}


def register_async_pair(start_op, wait_op) -> None:
    _pairs[start_op] = wait_op


def async_role(op) -> str:
    """"start" or "wait" for the ops of a non-blocking collective; "" for any other op."""
    if op in _pairs:
        return "start"
    return "wait" if op in _pairs.values() else ""
