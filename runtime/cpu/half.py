"""Half-precision (bfloat16, float16) products on the CPU: computed in float32, rounded once.

numpy has no BLAS for float16 (a 256x256 matmul measured ~1,000x slower than float32 here)
and no ``einsum`` for bfloat16 at all; ml_dtypes' bfloat16 matmul runs through float32
already. So matmul, einsum and conv2d (and conv2d's gradients) on operands that are all one
half dtype upcast them to float32, run the float32 kernel (BLAS, the numba patch copies) and
round the result to the half dtype once: what PyTorch's CPU kernels without AMX/AVX512-BF16
paths do (accumulate in float32), and a result at float32 speed plus two conversions.
``benchmarks/autocast_step.py`` measures it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...graphlib.kernels import direct_kernel

HALF_NP = frozenset(np.dtype(n) for n in ("bfloat16", "float16"))
_WIDE = frozenset(np.dtype(n) for n in ("float32", "float64"))
_F32 = np.dtype("float32")


def _half_of(arrays):
    """The one half dtype of the float operands, or None (none, or mixed with wider ones)."""
    half = None
    for a in arrays:
        if a is None:
            continue
        d = a.dtype
        if d in HALF_NP:
            if half is not None and d != half:
                return None
            half = d
        elif d in _WIDE:
            return None
    return half


def in_float32(kernel: Callable) -> Callable:
    """``kernel(xp, *arrays, **attrs)`` that computes in float32 where its float operands
    are all one half dtype, rounding each float32 result to it; as ``kernel`` otherwise."""
    def run(xp, *arrays, **attrs):
        half = _half_of(arrays)
        if half is None or xp is not np:
            return kernel(xp, *arrays, **attrs)
        wide = [a.astype(_F32) if a is not None and a.dtype == half else a for a in arrays]
        res = kernel(xp, *wide, **attrs)
        if isinstance(res, tuple):
            return tuple(r.astype(half) if r.dtype == _F32 else r for r in res)
        return res.astype(half) if res.dtype == _F32 else res

    def direct(in_dtypes):
        if any(np.dtype(d) in HALF_NP for d in in_dtypes):
            return None
        return direct_kernel(kernel, in_dtypes)

    run.direct = direct
    run.__name__ = getattr(kernel, "__name__", "kernel") + "_in_float32"
    run.__doc__ = kernel.__doc__
    return run
