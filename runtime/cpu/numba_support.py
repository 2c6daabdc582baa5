"""Whether numba serves here, and the hand-written numba modules, imported once.

numba is the optional ``fast`` extra: every numba kernel of the CPU backend (fused regions,
convolutions, pooling, batch norm, the loss) asks ``numba_available()`` first and gives way to
numpy's kernels when it is not installed or ``config.numba`` is off. This module imports
nothing of the backend, so every CPU module can ask it.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Dict

from .options import options

_numba_state: Dict[str, object] = {}


def numba_available() -> bool:
    """Whether numba imports (it is the optional ``fast`` extra) and is not turned off with
    ``config.numba = False`` (every numba kernel then gives way to numpy's: fused regions,
    convolutions, pooling, batch norm)."""
    if not options.numba:
        return False
    if "ok" not in _numba_state:
        try:
            # numba is optional: imported only when asked for (~0.4 s)
            import numba  # noqa: F401
            _numba_state["ok"] = True
        except Exception:  # noqa: BLE001 - any import failure means no numba
            _numba_state["ok"] = False
    return bool(_numba_state["ok"])


def numba_module(name: str):
    """The module ``runtime.cpu.<name>`` of hand-written numba kernels (``conv_numba``,
    ``norm_numba``), imported once; None where numba is not available, or (with a warning)
    where the module fails to import."""
    if not options.numba:
        return None
    key = "module:" + name
    if key not in _numba_state:
        module = None
        if numba_available():
            try:
                module = importlib.import_module(f"{__package__}.{name}")
            except Exception as exc:  # noqa: BLE001 - a broken numba means numpy's kernels
                warnings.warn(f"duograph: numba kernels {name} unavailable ({exc}); using "
                              "numpy", RuntimeWarning, stacklevel=2)
        _numba_state[key] = module
    return _numba_state[key]
