"""duograph.runtime: the backends and the executor of compiled graphs.

What lives here (everything about *running* a graph; nothing about building or rewriting one):

- ``backend.py``: ``Backend``, an array module plus kernel tables keyed by the OpDef (plain
  kernels, ``out=`` forms, a compiler for fused regions), falling back to each op's
  reference kernel; ``PlanCache``, a backend's plans per fused body, held weakly by the body
  (the IR keeps no backend state). ``backends.py`` finds a backend by name or device.
- ``cpu/``: the CPU backend (numpy, numba, BLAS): everything CPU-specific, including its
  switches (``dg.config.cpu``, registered by the backend) and its timing decisions
  (``cpu/autotune.py``).
- ``cuda/``: the GPU backend on cupy (cupy imported only when the backend is made).
- ``executable.py``: the ``Executable`` and its two step types, ``Interpreted`` (the
  instruction list) and ``Planned`` (``planned.py``: programs over one arena).
- ``regions.py``: ``RegionRunner``, the bodies the region kernels of loops and branches run:
  each region compiled once into an executable (interpreted, or planned over an arena of
  its own that every iteration reuses).
- ``kernel_cache.py``: the private, verified disk cache for generated kernel sources;
  ``fperr.py``: numpy's floating-point error state, set once per run.

What it may import: ``graphlib`` only (never ``eager``, ``passes`` or the face package), and
optional libraries (numba, cupy) only where they are used, inside the function that needs
them, with a comment. Inside runtime the modules import in one order, each only what is
below it (no import circles; tests/test_structure.py checks): ``planned``, ``fperr``,
``kernel_cache``, ``regions``; ``backend``; the backends (``cpu/``, ``cuda/``); ``backends``;
``executable``. Where a lower module needs a higher one it is handed it: ``executable.py``
installs the ``Executable`` class into ``RegionRunner`` (region bodies compile into
executables, which look backends up by name).
"""
from .backend import Backend, FusedCompiler, KernelTable
from .backends import get_backend
from .executable import Executable, compile_graph, needed_nodes

__all__ = ["Backend", "Executable", "FusedCompiler", "KernelTable", "compile_graph",
           "get_backend", "needed_nodes"]
