"""duograph.runtime.cpu: the CPU backend (numpy, with numba and BLAS where they pay).

Everything CPU-specific lives here, beside the ops rather than inside them:

- ``backend.py``: ``CPUBackend`` (one instance, ``cpu_backend``) registering the rest.
- ``kernels.py``: plain kernels faster than the ops' reference ones (conv and pooling through
  numba, batch norm, BLAS sums, the small-batch matmul form); each falls back to the
  reference where its fast path does not apply.
- ``out_kernels.py``: ``out=`` forms that write into the planned runtime's arena.
- ``vjp_kernels.py``: kernels for the commonest ops' vjp rules on arrays, each tied to the rule
  it implements (the eager backward walk runs them where nothing of it is recorded).
- ``fused.py``: the compiler for fused regions (numpy chunks, straight-line numpy, numba
  loops generated from the ops' ``expr`` templates, a disk cache, a thread pool).
- ``cblas.py`` (gemm through numpy's own BLAS), ``blas_reduce.py`` (sums as matrix-vector
  products), ``select.py`` (bit-mask ``where``), ``conv_numba.py`` and ``norm_numba.py``
  (hand-written numba loops, imported only where numba is installed).

The switches these read (``fused_strategy``, ``numba``, ``cblas``, ``matmul_swap``...) are
in ``dg.config``.
"""
from .backend import CPUBackend, cpu_backend

__all__ = ["CPUBackend", "cpu_backend"]
