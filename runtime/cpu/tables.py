"""The CPU backend's kernel tables, keyed by OpDef: filled by ``backend.py``, read by the
fused-region compiler (``fused.py``), which calls the backend's kernels without importing
the backend itself."""
from __future__ import annotations

from typing import Callable, Dict

from ...graphlib.registry import OpDef
from ..backend import KernelTable

KERNELS: KernelTable = KernelTable()            # plain kernels (reference where unset)
OUT_KERNELS: Dict[OpDef, Callable] = {}         # out= forms
PREPARE: Dict[OpDef, Callable] = {}             # per-program shortcuts
