"""duograph.runtime: the backends and the executor of compiled graphs.

- ``backend.py``: ``Backend``, an array module plus kernel tables keyed by the OpDef (plain
  kernels, ``out=`` forms, a compiler for fused regions), falling back to each op's
  reference kernel; ``backends.py`` finds one by name or device.
- ``cpu/``: the CPU backend (numpy, numba, BLAS): everything CPU-specific.
- ``executable.py``: the ``Executable`` and its two step types, ``Interpreted`` (the
  instruction list) and ``Planned`` (``planned.py``: programs over one arena).
- ``regions.py``: ``RegionRunner``, the bodies the region kernels of loops and branches run:
  each region compiled once into an executable (interpreted, or planned over an arena of
  its own that every iteration reuses).
- ``kernel_cache.py``: the private, verified disk cache for generated kernel sources.

It knows graphlib only: never eager or passes.
"""
from .backend import Backend, FusedCompiler, KernelTable
from .backends import get_backend
from .executable import Executable, compile_graph, needed_nodes

__all__ = ["Backend", "Executable", "FusedCompiler", "KernelTable", "compile_graph",
           "get_backend", "needed_nodes"]
