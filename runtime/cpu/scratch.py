"""Per-thread scratch memory for kernel intermediates that live only inside one call.

A fresh multi-megabyte array per call is fresh pages from the OS each time (the allocator
returns large blocks to it): on the issue-24 CNN's second layer (4.4 MB of im2col patch
cotangents) the page faults cost more than the product itself (input gradient 7.7 -> ~3.5
ms), and Winograd's input transform on (1, 64, 56, 56) took 3.0 ms with fresh arrays, 0.7
with reused ones. So each thread keeps grow-only buffers, one per (stage, dtype), up to a
size limit; larger arrays are allocated per call.
"""
from __future__ import annotations

import threading

import numpy as np

_scratch = threading.local()


def workspace(shape, dtype, stage: str = "", limit: int = 64 << 20) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape``: a view of this thread's buffer for
    ``stage`` and ``dtype`` (valid until the thread's next request for the same stage; never
    returned to a caller). Arrays over ``limit`` bytes are allocated afresh."""
    dtype = np.dtype(dtype)
    size = 1
    for d in shape:
        size *= int(d)
    if size * dtype.itemsize > limit:
        return np.empty(shape, dtype=dtype)
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    buf = buffers.get((stage, dtype))
    if buf is None or buf.size < size:
        buf = buffers[(stage, dtype)] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)
