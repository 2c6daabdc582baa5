"""The cuda backend: cupy arrays, generated ElementwiseKernels for fused regions and a few
elementwise ops, device-side softmax-cross-entropy; every other op runs its reference
kernel on cupy (cupy reductions, im2col convolution), with matrix products on a cuBLAS
that CUDA graphs can capture (``blas.array_module``)."""
from __future__ import annotations

from ...graphlib.registry import get_op
from ..backend import Backend
from . import kernels, philox
from .blas import array_module
from .fused import CUDAFusedCompiler


class CUDABackend(Backend):
    """cupy + generated kernels. Made on first use (``runtime.backends.get_backend``), since
    it imports cupy; what it does not specialise runs the ops' reference kernels on cupy."""

    def __init__(self, xp=None):
        if xp is None:
            import cupy as xp      # (optional: only when the backend is made)
        super().__init__("cupy", array_module(xp), "cuda",
                         fused_compiler=CUDAFusedCompiler)
        for op, kernel in kernels.table().items():
            self.register_kernel(op, kernel)
        if getattr(xp, "__name__", "") == "cupy":
            # random ops from a device seed (CUDA graphs capture them); a stand-in module
            # (numpy, a fake cupy) keeps the reference kernels
            for op, kernel in philox.table(get_op).items():
                self.register_kernel(op, kernel)
