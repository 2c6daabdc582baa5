"""One grow-only scratch buffer per thread for the temporaries that live inside one fused
kernel call: a fused body's prologue product without a home among its outputs (the
``x @ W.T`` of ``tanh(x @ W.T + b)``), the transposed product of the swapped Linear
runner, a ReLU backward's mask.

Each bound runner used to allocate its own such arrays once, at bind time, and keep them
for the program's life: a 16-layer MLP step kept 32 activation-sized scratches that the
memory planner never saw (its planned peak 2.3 MB, numpy's real peak 7.4 MB on a 256x256
MLP of 8 layers). Steps run one after another on a thread, and a runner's temporaries are
dead when it returns, so every runner of a thread can share one buffer: the scratch in use
is then the largest one runner needs, not the sum over the program.

Two levels: a runner's own temporaries (``OUTER``) and those of the region plan it calls
while they are in use (``INNER``: a chunk plan's buffers, a straight-line plan's
intermediates), each level one buffer per thread. ``Scratch(specs, level)`` reserves, for
one runner, arrays of the given ``(shape, dtype)`` laid out one after another (aligned);
``scratch.arrays()`` gives views of this thread's buffer (made again only when the buffer
was replaced by a larger one, or the call is on another thread). The views are valid
during the runner's call only: nothing a runner returns or keeps between calls may view
them. A runner bound earlier keeps its views of a buffer since replaced until its next
call: the old buffer lives until then.
"""
from __future__ import annotations

import threading
from typing import List, Sequence, Tuple

import numpy as np

_ALIGN = 64
# level 0: a runner's own temporaries (prologue products, masks); level 1: the scratch of
# the region plan a runner calls while its level-0 temporaries are in use
OUTER, INNER = 0, 1
LEVELS = 2
_local = threading.local()


def _buffers() -> list:
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = [None] * LEVELS
    return bufs


def _buffer(nbytes: int, level: int) -> np.ndarray:
    """This thread's buffer of ``level``, grown (replaced) to at least ``nbytes``."""
    bufs = _buffers()
    buf = bufs[level]
    if buf is None or buf.size < nbytes:
        raw = np.empty(nbytes + _ALIGN, np.uint8)
        start = (-raw.ctypes.data) % _ALIGN
        buf = bufs[level] = raw[start:start + nbytes]
    return buf


def workspace_bytes() -> int:
    """The bytes of this thread's scratch buffers (0 before any runner needed one)."""
    return sum(0 if b is None else int(b.size) for b in _buffers())


def release() -> None:
    """Drop this thread's buffers (the next runner call allocates anew): for memory
    measurements that must see the scratch a step needs."""
    _local.bufs = None


class Scratch:
    """Temporaries of ``specs`` (``(shape, dtype)`` each) for one runner, in this thread's
    shared buffer."""

    __slots__ = ("specs", "offsets", "nbytes", "level", "_cache")

    def __init__(self, specs: Sequence[Tuple[tuple, object]], level: int = OUTER):
        self.level = level
        self.specs = [(tuple(int(d) for d in s), np.dtype(t)) for s, t in specs]
        self.offsets = []
        off = 0
        for shape, dt in self.specs:
            self.offsets.append(off)
            off += -(-_nbytes(shape, dt) // _ALIGN) * _ALIGN
        self.nbytes = off
        self._cache: tuple = (None, [])   # (buffer, its views): one tuple, read atomically
        _buffer(self.nbytes, level)     # reserve now: a program binds all before it runs

    def arrays(self) -> List[np.ndarray]:
        """The temporaries, in this thread's buffer (valid until this thread's next call
        of a runner of the same level)."""
        buf = _buffer(self.nbytes, self.level)
        base, views = self._cache
        if buf is not base:       # (another thread's buffer, or this one's before it grew)
            views = [buf[off:off + _nbytes(shape, dt)].view(dt).reshape(shape)
                     for (shape, dt), off in zip(self.specs, self.offsets)]
            self._cache = (buf, views)
        return views


def _nbytes(shape: tuple, dt: np.dtype) -> int:
    n = dt.itemsize
    for d in shape:
        n *= d
    return n
