"""The backends by name: the CPU backend (always) and a cupy backend (optional, lazy).

``get_backend("numpy")`` (or "cpu") is the CPU backend of ``runtime/cpu``;
``get_backend("cupy")`` (or "cuda", "gpu") is the cuda backend of ``runtime/cuda`` (cupy,
generated ElementwiseKernels), made on first use.
"""
from __future__ import annotations

from typing import Dict

from ..graphlib import xp as xpu
from .backend import Backend

BACKENDS = ("numpy", "cupy")
_ALIASES = {"numpy": "numpy", "cpu": "numpy", "cupy": "cupy", "cuda": "cupy", "gpu": "cupy"}
_made: Dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend for ``name`` ('numpy'/'cpu' or 'cupy'/'cuda')."""
    key = _ALIASES.get(name)
    if key is None:
        raise ValueError(f"unknown backend {name!r}: expected one of {BACKENDS}")
    backend = _made.get(key)
    if backend is None:
        if key == "numpy":
            from .cpu import cpu_backend as backend
        else:
            try:
                import cupy
            except ImportError as e:
                raise RuntimeError("the cupy backend needs cupy and a CUDA device: "
                                   "pip install 'duograph[gpu]'") from e
            try:
                count = cupy.cuda.runtime.getDeviceCount()
            except Exception as e:  # noqa: BLE001 - no driver, wrong CUDA build...
                raise RuntimeError(f"the cupy backend needs a CUDA device: cupy is installed "
                                   f"but CUDA is not usable ({type(e).__name__}: {e})") from e
            if count == 0:
                raise RuntimeError("the cupy backend needs a CUDA device: cupy found none")
            from .cuda import CUDABackend
            backend = CUDABackend(cupy)
        _made[key] = backend
    return backend


def _cupy_extras() -> xpu.ArrayModuleExtras:
    """What cupy lacks of numpy's API, for the reference kernels (made on first use)."""
    import cupy
    import cupyx
    from cupyx.scipy.special import erf
    return xpu.ArrayModuleExtras(erf=erf, add_at=cupyx.scatter_add, asarray=cupy.asarray)


# the hook graphlib's kernels reach cupy through (graphlib itself never imports it)
xpu.register_array_module("cupy", _cupy_extras, device="cuda")


def backend_for_device(device: str) -> Backend:
    """The backend that runs ops on ``device`` ('cpu' or 'cuda'): the hook the face package
    installs for eager dispatch."""
    return get_backend(device)
