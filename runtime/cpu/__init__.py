"""duograph.runtime.cpu: the CPU backend (numpy, with numba and BLAS where they pay).

Everything CPU-specific lives here, beside the ops rather than inside them:

- ``backend.py``: ``CPUBackend`` (one instance, ``cpu_backend``) registering the rest.
- ``kernels.py``: plain kernels faster than the ops' reference ones (conv and pooling through
  numba, batch norm, BLAS sums, the small-batch matmul form); each falls back to the
  reference where its fast path does not apply.
- ``out_kernels.py``: ``out=`` forms that write into the planned runtime's arena.
- ``vjp_kernels.py``: kernels for the commonest ops' vjp rules on arrays, each tied to the rule
  it implements (the eager backward walk runs them where nothing of it is recorded).
- ``fused.py``: the compiler for fused regions (its entry points), split by responsibility:
  ``fused_layout.py`` (a body's prologue and region, the plan cache keyed weakly by the
  body), ``fused_strategy.py`` (which plan a region gets), ``fused_chunks.py`` (numpy chunks
  and straight-line numpy, a thread pool), ``fused_numba.py`` (numba loops generated from the
  ops' ``expr`` templates, a disk cache), ``fused_expr.py`` (the templates translated to
  Python), ``fused_special.py`` (gemm updates, swapped and masked epilogues).
- ``autotune.py``: every timing decision (which of two forms runs faster), in one place.
- ``options.py``: the backend's switches, registered into ``dg.config`` as ``dg.config.cpu``.
- ``numba_support.py``: whether numba serves (``config.cpu.numba``, installed), and the
  hand-written numba modules imported once.
- ``cblas.py`` (gemm through numpy's own BLAS), ``blas_reduce.py`` (sums as matrix-vector
  products), ``select.py`` (bit-mask ``where``), ``select_numba.py`` (the ReLU backward's
  selection in one pass), ``conv_numba.py`` (pooling, im2col),
  ``conv_direct.py`` (direct convolutions for one input channel per group: depthwise, the
  first layer) and ``norm_numba.py`` (hand-written numba loops, imported only where numba is
  installed); ``conv_winograd.py`` (Winograd F(4x4, 3x3) for 3x3 stride-1 convs, numpy and
  BLAS). Which conv2d algorithm runs is decided in ``autotune.py``
  (``config.conv_algorithm``).

The switches these read (``fused_strategy``, ``numba``, ``cblas``, ``matmul_swap``...) are
this backend's section of ``dg.config`` (``dg.config.cpu``, also by their short names).
The modules import in one order, each only what is below it: options, numba_support,
autotune, tables and the kernels; then the fused compiler's layout, chunks, expr, numba,
strategy, special cases, fused; backend last.
"""
from .backend import CPUBackend, cpu_backend

__all__ = ["CPUBackend", "cpu_backend"]
