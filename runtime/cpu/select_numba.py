"""numba loops for selections that numpy spells in two passes or with its NaN-aware loops
(imported only where numba is installed; ``numba_support.numba_module("select_numba")``).

``nonzero_select(g, y, out)``: ``out = g where y != 0 else +0`` on the bits, in one pass: a
ReLU's backward rule ``where(y != 0, g, 0.0)`` with its comparison and selection fused. ``g``
and ``out`` are unsigned-integer views of the float arrays (the bits are moved, never
computed: NaNs, infinities and signed zeros pass as they are), ``y`` is the float array; all
three C-contiguous and 1-D. Measured on (64, 16, 28, 28) float32, one thread: 0.17 ms,
against 0.9 ms for the comparison and the masked multiply of ``select.where_bits`` and
7.3 ms for ``np.where``.

``relu(x, zero, out)``: ``np.maximum(x, 0)``'s bits (x where x > 0 or x is NaN, else +0: the
0 of ``maximum(-0.0, 0)`` too) in one vectorised pass; ``zero`` is x's dtype's 0. (64, 16,
28, 28) float32, one thread: 0.19 ms against 0.58 ms for ``np.maximum``.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def nonzero_select(g, y, out):
    for i in range(g.size):
        # g ^ g: a zero of g's integer type (a literal 0 would unify uint64 with int64)
        out[i] = g[i] if y[i] != 0 else g[i] ^ g[i]


@njit(cache=True, nogil=True)
def relu(x, zero, out):
    for i in range(x.size):
        v = x[i]
        out[i] = v if (v > 0 or v != v) else zero
