"""Matrix products on cuBLAS that a CUDA graph can capture.

cupy refuses every cuBLAS call while a stream is capturing (its ``setStream`` wrapper raises
``NotImplementedError: calling cuBLAS API during stream capture is currently unsupported``,
cupy 13 and 14), so a training step whose matmuls or convolutions go through ``cupy.matmul``
can never be captured. cuBLAS itself supports capture (its documentation's "CUDA Graphs
support": a user workspace set with ``cublasSetWorkspace`` keeps it from allocating
inside the graph). This module calls the cuBLAS library cupy has already loaded, through
ctypes, with a handle of its own per thread and device:

- ``plan_matmul``: numpy's ``matmul`` semantics (1-D operands, broadcast batch dims, any
  strides) mapped onto one ``cublasGemmStridedBatchedEx`` call on the row-major operands
  (column-major C^T = B^T A^T, so no operand is transposed in memory); operands whose
  strides no gemm can read are copied first. Pure: tested on any machine.
- ``CublasMatmul``: the call itself (float16, float32, float64; float32 accumulates in
  float32, as ``cupy.matmul`` does without TF32); other dtypes and a missing library use
  ``cupy.matmul``.
- ``array_module``/``BlasArrayModule``: the array module the cuda backend hands to the ops'
  reference kernels: cupy, except that ``matmul`` is the capturable one above. The
  reference kernels (matmul, the im2col convolutions and their gradients) stay as they are.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

# cuBLAS and CUDA enums (cublas_api.h, library_types.h)
OP_N, OP_T = 0, 1
CUDA_R_16F, CUDA_R_32F, CUDA_R_64F = 2, 0, 1
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
# NVIDIA's recommended user workspace for Hopper (smaller GPUs need less)
WORKSPACE_BYTES = 32 << 20

# dtype -> (cudaDataType, compute type, ctypes type of alpha and beta)
DTYPES = {
    "float16": (CUDA_R_16F, COMPUTE_32F, ctypes.c_float),
    "float32": (CUDA_R_32F, COMPUTE_32F, ctypes.c_float),
    "float64": (CUDA_R_64F, COMPUTE_64F, ctypes.c_double),
}


@dataclass(frozen=True)
class Operand:
    """How gemm reads one row-major matrix operand: ``op`` (OP_N: as stored row-major,
    OP_T: stored column-major), its leading dimension and batch stride, in elements."""
    op: int
    ld: int
    stride: int


@dataclass(frozen=True)
class GemmPlan:
    """One ``cublasGemmStridedBatchedEx`` computing ``out[b] = a[b] @ b[b]`` for row-major
    ``out`` of shape ``(batch, m, n)``: cuBLAS is asked for the column-major product
    ``out^T = b^T a^T`` (its m, n are our n, m)."""
    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    out_shape: Tuple[int, ...]       # numpy's matmul result shape


def _matrix(rows: int, cols: int, s0: int, s1: int) -> Optional[Tuple[int, int]]:
    """(op, ld) reading a rows x cols matrix with element strides (s0, s1), or None."""
    if (cols == 1 or s1 == 1) and (rows == 1 or s0 >= max(1, cols)):
        return OP_N, max(1, cols) if rows == 1 else s0
    if (rows == 1 or s0 == 1) and (cols == 1 or s1 >= max(1, rows)):
        return OP_T, max(1, rows) if cols == 1 else s1
    return None


def _batch_stride(shape: tuple, strides: tuple, batch: tuple) -> Optional[int]:
    """The one element stride that walks an operand's batch dims (``shape[:-2]``, broadcast
    to ``batch``) in C order, or None where no single stride does (it is then copied).
    Batch index j = sum(i_d * prod(batch[d+1:])) must land at sum(i_d * s_d): so
    s_d = S * prod(batch[d+1:]) for every dim the batch walks (0 where the operand is
    broadcast there)."""
    lead = len(batch) - (len(shape) - 2)
    dims = [(1, 0)] * lead + list(zip(shape[:-2], strides[:-2]))
    walked = [(b, 0 if n == 1 else s) for (n, s), b in zip(dims, batch) if b != 1]
    if not walked:
        return 0
    stride = walked[-1][1]
    expect = stride * walked[-1][0]
    for b, s in reversed(walked[:-1]):
        if s != expect:
            return None
        expect = s * b
    return stride if stride >= 0 else None


def plan_matmul(a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple
                ) -> Tuple[Optional[GemmPlan], bool, bool]:
    """How numpy's ``matmul(a, b)`` runs as one strided-batched gemm: ``(plan, copy_a,
    copy_b)``, where ``copy_a``/``copy_b`` say that operand must first be made C-contiguous
    (broadcast to the batch) and planned again. Shapes and strides in elements; 1-D
    operands are vectors as in numpy. The plan is None for empty batches."""
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    if a_vec:
        a_shape, a_strides = (1,) + tuple(a_shape), (0,) + tuple(a_strides)
    if b_vec:
        b_shape, b_strides = tuple(b_shape) + (1,), tuple(b_strides) + (0,)
    m, k = a_shape[-2:]
    n = b_shape[-1]
    if b_shape[-2] != k:
        raise ValueError(f"matmul: inner dims differ: {k} and {b_shape[-2]}")
    batch = tuple(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
    out_shape = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    if count == 0:
        return None, False, False
    if 0 in (m, n, k):        # nothing to read (the caller zero-fills or has no output)
        nothing = Operand(OP_N, 1, 0)
        return GemmPlan(count, m, n, k, nothing, nothing, out_shape), False, False
    read_a = _matrix(m, k, *a_strides[-2:])
    read_b = _matrix(k, n, *b_strides[-2:])
    sa = _batch_stride(tuple(a_shape), tuple(a_strides), batch) if count > 1 else 0
    sb = _batch_stride(tuple(b_shape), tuple(b_strides), batch) if count > 1 else 0
    copy_a, copy_b = read_a is None or sa is None, read_b is None or sb is None
    if copy_a or copy_b:
        return None, copy_a, copy_b
    plan = GemmPlan(count, m, n, k, Operand(read_a[0], read_a[1], sa),
                    Operand(read_b[0], read_b[1], sb), out_shape)
    return plan, False, False


# -- the library ----------------------------------------------------------------------------

def _loaded_cublas_path() -> Optional[str]:
    """The file of the libcublas this process has loaded (cupy loads it), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                name = path.rsplit("/", 1)[-1]
                if name.startswith("libcublas.so"):
                    return path
    except OSError:
        return None
    return None


_LIB: list = []


def cublas_library():
    """ctypes' handle on the cuBLAS that cupy uses, or None where there is none (a fake
    cupy, a build without cuBLAS)."""
    if not _LIB:
        lib = None
        try:
            from cupy_backends.cuda.libs import cublas as _cupy_cublas  # noqa: F401 (loads it)
            path = _loaded_cublas_path()
            if path is not None:
                lib = ctypes.CDLL(path)
                _declare(lib)
        except (ImportError, OSError, AttributeError):
            lib = None
        _LIB.append(lib)
    return _LIB[0]


def _declare(lib) -> None:
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
    lib.cublasGemmStridedBatchedEx.argtypes = [
        vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i]
    for fn in (lib.cublasCreate_v2, lib.cublasSetStream_v2, lib.cublasSetWorkspace_v2,
               lib.cublasGemmStridedBatchedEx):
        fn.restype = ctypes.c_int


class CublasError(RuntimeError):
    """A cuBLAS call returned an error status."""


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasError(f"{what} failed with cuBLAS status {status}")


class CublasMatmul:
    """``matmul(a, b, out=None)`` on cuBLAS through ctypes (see the module docstring); a
    handle and a workspace per (thread, device), made outside any capture on first use."""

    def __init__(self, cupy, lib):
        self.cupy = cupy
        self.lib = lib
        self.local = threading.local()

    def _handle(self):
        device = self.cupy.cuda.runtime.getDevice()
        handles = getattr(self.local, "handles", None)
        if handles is None:
            handles = self.local.handles = {}
        found = handles.get(device)
        if found is None:
            handle = ctypes.c_void_p()
            _check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
            workspace = self.cupy.cuda.memory.alloc(WORKSPACE_BYTES)
            _check(self.lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(workspace.ptr),
                                                  WORKSPACE_BYTES), "cublasSetWorkspace")
            found = handles[device] = (handle, workspace)
        return found[0]

    def __call__(self, a, b, out=None):
        cupy = self.cupy
        if a.dtype.name not in DTYPES or b.dtype != a.dtype or a.ndim == 0 or b.ndim == 0 \
                or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            # other dtypes (cupy's integer matmul is no cuBLAS call), and cupy's own errors
            return cupy.matmul(a, b) if out is None else cupy.matmul(a, b, out=out)
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        plan, copy_a, copy_b = self._plan(a, b)
        if copy_a or copy_b:
            if copy_a:
                a = cupy.ascontiguousarray(
                    cupy.broadcast_to(a, batch + a.shape[-2:]) if a.ndim > 1 else a)
            if copy_b:
                b = cupy.ascontiguousarray(
                    cupy.broadcast_to(b, batch + b.shape[-2:]) if b.ndim > 1 else b)
            plan, copy_a, copy_b = self._plan(a, b)
            if copy_a or copy_b:        # (contiguous operands always plan)
                raise AssertionError("matmul: contiguous operands found no gemm plan")
        if plan is None:                # an empty batch
            res = cupy.empty(batch + a.shape[-2:-1] + (b.shape[-1:] if b.ndim > 1 else ()),
                             a.dtype)
            return res if out is None else _into(cupy, out, res)
        target = out
        if out is None or out.shape != plan.out_shape or out.dtype != a.dtype or \
                not out.flags.c_contiguous:
            target = cupy.empty(plan.out_shape, a.dtype)
        if plan.k == 0:
            target.fill(0)
        elif plan.m and plan.n:
            self._gemm(plan, a, b, target)
        return target if out is None or target is out else _into(cupy, out, target)

    @staticmethod
    def _plan(a, b):
        size = a.itemsize
        return plan_matmul(a.shape, tuple(s // size for s in a.strides),
                           b.shape, tuple(s // size for s in b.strides))

    def _gemm(self, plan: GemmPlan, a, b, out) -> None:
        lib = self.lib
        handle = self._handle()
        dtype, compute, scalar = DTYPES[a.dtype.name]
        _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(
            self.cupy.cuda.get_current_stream().ptr)), "cublasSetStream")
        one, zero = scalar(1), scalar(0)
        # column-major: out^T (n x m) = b^T (n x k) . a^T (k x m)
        _check(lib.cublasGemmStridedBatchedEx(
            handle, plan.b.op, plan.a.op, plan.n, plan.m, plan.k, ctypes.byref(one),
            ctypes.c_void_p(b.data.ptr), dtype, plan.b.ld, plan.b.stride,
            ctypes.c_void_p(a.data.ptr), dtype, plan.a.ld, plan.a.stride,
            ctypes.byref(zero), ctypes.c_void_p(out.data.ptr), dtype, plan.n,
            plan.m * plan.n, plan.batch, compute, GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx")


def _into(cupy, out, res):
    cupy.copyto(out, res, casting="unsafe")
    return out


def array_module(module):
    """The cuda backend's array module for ``module``: a ``BlasArrayModule`` where cuBLAS
    can be reached through ctypes (a real cupy), else ``module`` itself (a fake cupy)."""
    lib = cublas_library() if getattr(module, "__name__", "") == "cupy" else None
    return module if lib is None else BlasArrayModule(module, lib)


class BlasArrayModule:
    """``module`` (cupy) with a ``matmul`` that CUDA graphs capture (``CublasMatmul``);
    everything else is the module's own (looked up once, then an instance attribute)."""

    def __init__(self, module, lib):
        self.module = module
        self.__name__ = module.__name__
        self.matmul = CublasMatmul(module, lib)

    def __getattr__(self, name):
        value = getattr(self.module, name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"<{self.__name__} with a capturable cuBLAS matmul>"
