"""``C = alpha * A @ B + beta * C`` in place, through numpy's own BLAS (ctypes).

numpy's ``matmul`` has no ``beta``: an SGD step on a weight whose gradient is a product,
``W - lr * (A @ B)``, costs a product array and a pass over it. BLAS's gemm does it in one
call over W's own buffer (256 x 784 float32 from a batch of 32: 192 us as numpy's matmul,
multiply and subtract, 92 us as one gemm). scipy's ``blas.sgemm`` would do it too, but
scipy ships its own OpenBLAS: its threads and numpy's spin-wait against each other, which
measured a 5-25x slower MLP training step on 2 cores (4-18 ms instead of 0.7). So the
gemm called here is the one numpy itself uses, found in the OpenBLAS library numpy's wheels
bundle (symbols ``scipy_cblas_sgemm64_`` / ``scipy_cblas_dgemm64_``, 64-bit integers). Where
numpy is built otherwise (MKL, Accelerate...), or with ``dg.config.cblas = False``,
``gemm_update`` returns False and callers keep numpy's path.
"""
from __future__ import annotations

import ctypes
import glob
import os
from typing import Optional

import numpy as np

from .options import options

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_state: dict = {}


def _library() -> Optional[dict]:
    if not options.cblas:
        return None
    if "fns" in _state:
        return _state["fns"]
    fns = None
    try:
        folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
        for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas64_*"))):
            lib = ctypes.CDLL(path)
            found = {}
            for dt, name, real in (("float32", "scipy_cblas_sgemm64_", ctypes.c_float),
                                   ("float64", "scipy_cblas_dgemm64_", ctypes.c_double)):
                fn = getattr(lib, name)
                i, i64, p = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
                fn.argtypes = [i, i, i, i64, i64, i64, real, p, i64, p, i64, real, p, i64]
                fn.restype = None
                found[np.dtype(dt)] = (fn, real)
            fns = found
            break
    except (OSError, AttributeError):
        fns = None
    _state["fns"] = fns
    return fns


def available() -> bool:
    return _library() is not None


def _operand(m):
    """(transpose flag, leading dimension) of a 2-D C- or F-contiguous array, row-major."""
    if m.flags.c_contiguous:
        return _NO_TRANS, max(m.shape[1], 1)
    if m.flags.f_contiguous:
        return _TRANS, max(m.shape[0], 1)
    return None


def _check(a, b, c):
    """(gemm function, its scalar type, (transa, lda), (transb, ldb)) for operands
    ``gemm_update`` can take; None otherwise."""
    fns = _library()
    if fns is None or type(a) is not np.ndarray or type(b) is not np.ndarray \
            or type(c) is not np.ndarray:
        return None
    entry = fns.get(c.dtype)
    if entry is None or a.dtype != c.dtype or b.dtype != c.dtype or a.ndim != 2 \
            or b.ndim != 2 or c.ndim != 2 or not c.flags.c_contiguous \
            or not c.flags.writeable:
        return None
    m, k = a.shape
    if b.shape[0] != k or c.shape != (m, b.shape[1]) or 0 in c.shape:
        return None
    ta, tb = _operand(a), _operand(b)
    if ta is None or tb is None or np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return None
    return entry[0], entry[1], ta, tb


class GemmUpdate:
    """``gemm_update`` for a call site that sees the same arrays run after run (a planned
    program's arena buffers, bound state): the checks, transpose flags and data pointers of
    the last operands are kept and reused while the same three array objects come back with
    the same shapes and strides (an array's data pointer never changes, and the memo keeps
    it alive). Any other operands take the full checks. The gemm called is the same, so
    the bits are too; what is saved is ~6 us of Python per call."""

    __slots__ = ("_key", "_call")

    def __init__(self):
        self._key = None
        self._call = None

    def __call__(self, a, b, c, alpha: float, beta: float) -> bool:
        if not options.cblas:
            return False
        key = self._key
        if key is None or key[0] is not a or key[1] is not b or key[2] is not c \
                or not c.flags.writeable or key[3] != (a.strides, b.strides, c.strides,
                                                       a.shape, b.shape, c.shape):
            found = _check(a, b, c)
            if found is None:
                return False
            fn, real, ta, tb = found
            m, n, k = c.shape[0], c.shape[1], a.shape[1]
            self._key = (a, b, c, (a.strides, b.strides, c.strides, a.shape, b.shape,
                                   c.shape))
            self._call = (fn, real, ta[0], tb[0], m, n, k, a.ctypes.data, ta[1],
                          b.ctypes.data, tb[1], c.ctypes.data, max(n, 1))
        fn, real, ta, tb, m, n, k, pa, lda, pb, ldb, pc, ldc = self._call
        fn(_ROW_MAJOR, ta, tb, m, n, k, real(alpha), pa, lda, pb, ldb, real(beta), pc, ldc)
        return True


def gemm_update(a, b, c, alpha: float, beta: float) -> bool:
    """``c = alpha * a @ b + beta * c`` for 2-D numpy arrays of one float dtype, ``c``
    C-contiguous and not overlapping ``a`` or ``b``; False (nothing written) otherwise."""
    found = _check(a, b, c)
    if found is None:
        return False
    fn, real, ta, tb = found
    m, n, k = c.shape[0], c.shape[1], a.shape[1]
    fn(_ROW_MAJOR, ta[0], tb[0], m, n, k, real(alpha), a.ctypes.data, ta[1],
       b.ctypes.data, tb[1], real(beta), c.ctypes.data, max(n, 1))
    return True
