"""Half-precision (bfloat16, float16) on the CPU: computed in float32, rounded once.

numpy has no BLAS for float16 (a 256x256 matmul measured ~1,000x slower than float32 here)
and no ``einsum`` for bfloat16 at all; ml_dtypes' bfloat16 matmul runs through float32
already. So matmul, einsum and conv2d (and conv2d's gradients) on operands that are all one
half dtype upcast them to float32, run the float32 kernel (BLAS, the numba patch copies) and
round the result to the half dtype once: what PyTorch's CPU kernels without AMX/AVX512-BF16
paths do (accumulate in float32), and a result at float32 speed plus two conversions.
``benchmarks/autocast_step.py`` measures it.

Elementwise ops and the reductions that do not accumulate in float32 already (prod, var,
std, logsumexp, amax/amin...) do the same (``elementwise_in_float32``, ``in_float32``):
ml_dtypes' bfloat16 loops convert every element through float32 one call at a time (tanh
measured ~9x slower than float32's), and numpy's float16 transcendental loops call the
float32 function per element. Elementwise operands of one shape are converted, computed and
rounded back in chunks of ``CHUNK`` elements, so the float32 copies stay in cache (bfloat16;
float16 converts whole arrays: numpy's float16 <-> float32 casts measured slower in chunks.
numpy's own float16 add is about twice as fast as the three conversions, but a composite
kernel (sigmoid, gelu...) on float16 would round after every ufunc, 2 ulps from PyTorch's
single rounding, so float16 goes through float32 too). Each result
is the float32 result rounded once to nearest-even: what PyTorch's CPU kernels for these
dtypes compute (bit for bit
where PyTorch applies the same float32 operation (+, -, *, /, comparisons...) and rounds;
for tanh, exp... the float32 functions themselves may differ by an ulp between libraries).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...graphlib.kernels import direct_kernel

HALF_NP = frozenset(np.dtype(n) for n in ("bfloat16", "float16"))
_WIDE = frozenset(np.dtype(n) for n in ("float32", "float64"))
_F32 = np.dtype("float32")
_BF16 = np.dtype("bfloat16")


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
        with np.errstate(over="ignore"):     # (too large for the half dtype: inf, silently)
            if isinstance(res, tuple):
                return tuple(r.astype(half) if r.dtype == _F32 else r for r in res)
            return res.astype(half) if res.dtype == _F32 else res

    return _wrapped(run, kernel)


CHUNK = 1 << 14       # elements per float32 chunk: three 64 KiB buffers fit in L2


def _wrapped(run: Callable, kernel: Callable) -> Callable:
    """``run`` named and documented as ``kernel``; its ``direct`` form (a kernel for fixed
    input dtypes) is ``kernel``'s where no operand is half, and none otherwise."""
    def direct(in_dtypes):
        if any(np.dtype(d) in HALF_NP for d in in_dtypes):
            return None
        return direct_kernel(kernel, in_dtypes)

    run.direct = direct
    run.__name__ = getattr(kernel, "__name__", "kernel") + "_in_float32"
    run.__doc__ = kernel.__doc__
    return run


def _chunkable(arrays: Sequence, half) -> tuple:
    """The common shape of the array operands, when every half one is C-contiguous, all have
    that shape (others may be numbers or 0-d) and it is worth chunking; else ()."""
    shape = None
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.ndim == 0:
            continue
        if shape is None:
            shape = a.shape
        elif a.shape != shape:
            return ()
        if not a.flags.c_contiguous:
            return ()
    if shape is None or int(np.prod(shape)) < 2 * CHUNK:
        return ()
    return shape


def elementwise_in_float32(kernel: Callable) -> Callable:
    """``in_float32`` for an elementwise ``kernel``, in cache-sized chunks where the
    operands allow (one shape, contiguous): each chunk's half operands upcast, ``kernel`` run
    on them, and its float32 result rounded into the half-precision output."""
    whole = in_float32(kernel)

    def run(xp, *arrays, **attrs):
        half = _half_of(arrays)
        if half is None or xp is not np:
            return kernel(xp, *arrays, **attrs)
        shape = _chunkable(arrays, half) if half == _BF16 else ()
        if not shape:
            return whole(xp, *arrays, **attrs)
        flat = [a.reshape(-1) if isinstance(a, np.ndarray) and a.ndim else a for a in arrays]
        size = flat[next(i for i, a in enumerate(flat) if isinstance(a, np.ndarray)
                         and a.ndim)].shape[0]
        with np.errstate(over="ignore"):     # (too large for the half dtype: inf, silently)
            return _chunks(kernel, xp, flat, attrs, half, size, shape, whole, arrays)

    return _wrapped(run, kernel)


def _chunks(kernel, xp, flat, attrs, half, size, shape, whole, arrays):
    """``kernel`` over ``flat`` (the operands as 1-d arrays or numbers) ``CHUNK`` elements at
    a time, half operands upcast per chunk, float32 results rounded into a half output."""
    out = None
    for start in range(0, size, CHUNK):
        stop = min(start + CHUNK, size)
        part = [(a[start:stop].astype(_F32) if a.dtype == half else a[start:stop])
                if isinstance(a, np.ndarray) and a.ndim else a for a in flat]
        res = np.asarray(kernel(xp, *part, **attrs))
        if out is None:
            if res.shape != (stop - start,):
                return whole(xp, *arrays, **attrs)      # not elementwise after all
            out = np.empty(size, half if res.dtype == _F32 else res.dtype)
        out[start:stop] = res          # float32 -> half: rounded to nearest-even
    return out.reshape(shape)
