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
    if device:          # back to the device, through the table its backend registered
        return to_device(out, "cuda")
    return out
