"""duograph.runtime.cuda: the GPU backend on cupy.

Everything CUDA-specific lives here, beside the ops rather than inside them:

- ``codegen.py``: CUDA C for ``cupy.ElementwiseKernel``s generated from the ops' ``expr``
  templates (a pure module: no cupy import, tested on any machine).
- ``fused.py``: the compiler for fused bodies (prologue through the backend's kernels, the
  elementwise region as one generated kernel, cached by source: a grid-stride RawKernel on
  contiguous arrays, an ElementwiseKernel where it broadcasts).
- ``kernels.py``: the kernels specialised for the device (generated elementwise ops,
  softmax-cross-entropy without host syncs).
- ``blas.py``: matrix products on cuBLAS through ctypes, which CUDA graphs capture (cupy
  refuses cuBLAS during a capture); the backend's array module is cupy with this matmul.
- ``philox.py``: the random ops as counter-based Philox on the device, from a device seed.
- ``backend.py``: ``CUDABackend``, made on first use (it imports cupy).
- ``graphs.py``: CUDA-graph capture and replay of a planned executable with fixed shapes.

Importing this package imports no cupy; ``CUDABackend()`` and the capture do.
"""
from .backend import CUDABackend
from .graphs import CudaGraphStep, capture

__all__ = ["CUDABackend", "CudaGraphStep", "capture"]
