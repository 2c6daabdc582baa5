"""Exact, branch-free selection: ``where`` for number dtypes as bit masks.

numpy's ``where`` (and ``copyto(where=)``) branch per element and run 6-15x slower than a
ufunc on an unpredictable mask such as a ReLU's or a max-pool's; moving bits with masks is
SIMD and gives exactly the bytes ``where`` gives (NaNs, signed zeros, infinities included).
"""
from __future__ import annotations

import numpy as np

from ...graphlib.ops.elementwise import relu_op, where_op
from .numba_support import numba_module

# From this many elements the one-pass numba loops (``select_numba``) run instead of numpy's:
# smaller arrays never pay numba's import (~0.4 s, as the fused regions' threshold).
NUMBA_MIN_ELEMENTS = 1 << 16
_NUMBA_FLOATS = frozenset([np.dtype(np.float32), np.dtype(np.float64)])

# the unsigned integer dtype of each item size: the bits a mask moves
UINT_OF_SIZE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def where_bits(xp, c, a, b, out) -> bool:
    """where(c, a, b) for numbers (floats, ints) as bit masks into ``out``:
    out = (a & m) | (b & ~m) with m all ones where c holds. Bit-exact (NaNs, signed zeros
    and infinities are moved, never computed) and SIMD: numpy's where and copyto(where=)
    branch per element and measured 6-15x slower on a relu-backward mask. Needs c and a
    shaped like out; out may be a or b. Returns False (nothing written) where it cannot."""
    name = UINT_OF_SIZE.get(out.dtype.itemsize)
    if (name is None or out.dtype.kind not in "fiu" or c.shape != out.shape
            or a.shape != out.shape or not out.flags.c_contiguous
            or not a.flags.c_contiguous or not (b.ndim == 0 or b.flags.c_contiguous)):
        return False
    it = getattr(xp, name)
    if c.dtype == bool and b.size == 1 and b.dtype == out.dtype \
            and not bool(b.view(it).reshape(-1)[0]):
        # b is +0 (a ReLU's backward): a's bits times 0 or 1, in integers, one pass and no
        # mask array (1.4-1.6x faster than the masks below on 8K-128K float32)
        xp.multiply(a.view(it), c.view(xp.uint8), out=out.view(it), dtype=it)
        return True
    m = xp.empty(out.shape, it)
    xp.subtract(0, c, out=m, dtype=it)             # True -> all ones, False -> 0
    ob, ab, bb = out.view(it), a.view(it), b.view(it)
    zero_b = b.size == 1 and not bool(bb.reshape(-1)[0])   # b is +0.0: nothing to add
    if zero_b:
        xp.bitwise_and(ab, m, out=ob)
    elif xp.may_share_memory(out, b):
        xp.invert(m, out=m)
        xp.bitwise_and(bb, m, out=ob)
        xp.invert(m, out=m)
        xp.bitwise_and(m, ab, out=m)
        xp.bitwise_or(ob, m, out=ob)
    else:
        xp.bitwise_and(ab, m, out=ob)
        xp.invert(m, out=m)
        xp.bitwise_and(m, bb, out=m)
        xp.bitwise_or(ob, m, out=ob)
    return True




def numba_loops(*arrays):
    """The ``select_numba`` module where its loops apply to ``arrays`` (numpy, C-contiguous,
    float32/float64, of one shape and dtype, at least ``NUMBA_MIN_ELEMENTS``) and numba
    serves; else None."""
    a = arrays[0]
    if type(a) is not np.ndarray or a.size < NUMBA_MIN_ELEMENTS or a.dtype not in _NUMBA_FLOATS:
        return None
    for b in arrays:
        if type(b) is not np.ndarray or not b.flags.c_contiguous or b.shape != a.shape \
                or b.dtype != a.dtype:
            return None
    return numba_module("select_numba")


def relu(xp, x):
    """``relu_op``'s CPU kernel: the reference's ``maximum(x, 0)`` bits, in one numba pass
    over large float arrays (``select_numba.relu``), the reference kernel otherwise."""
    nb = numba_loops(x)
    if nb is None:
        return relu_op.kernel(xp, x)
    out = np.empty(x.shape, x.dtype)
    nb.relu(x.reshape(-1), x.dtype.type(0), out.reshape(-1))
    return out


def where(xp, c, a, b):
    """``where_op``'s CPU kernel: the reference's (operands of one dtype after the same
    promotion) through ``select``'s bit masks where they apply. A ReLU's backward rule,
    ``where(y != 0, g, 0.0)``, is the case it is for: numpy's where branches per element
    and measured 5-8x slower than the masked integer multiply on (64, 16, 28, 28) float32."""
    if a.dtype != b.dtype:
        return where_op.kernel(xp, c, a, b)
    return select(xp, c, a, b)


def select(xp, c, a, b):
    """``xp.where(c, a, b)`` (bit-exact) into a new array, fast when c and a have the
    result's shape and a number dtype, numpy's where otherwise."""
    shape = np.broadcast_shapes(c.shape, a.shape, b.shape)
    dtype = np.result_type(a.dtype, b.dtype)     # dtypes only: works for cupy arrays too
    if a.shape == shape and a.dtype == dtype and b.dtype == dtype and c.dtype == bool:
        out = xp.empty(shape, dtype)
        if where_bits(xp, c, a, b, out):
            return out
    return xp.where(c, a, b)
