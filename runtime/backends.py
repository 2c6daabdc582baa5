"""The backends by name: the CPU backend (always) and a cupy backend (optional, lazy).

``get_backend("numpy")`` (or "cpu") is the CPU backend of ``runtime/cpu``;
``get_backend("cupy")`` (or "cuda", "gpu") is the cuda backend of ``runtime/cuda`` (cupy,
generated ElementwiseKernels), made on first use.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ..graphlib import xp as xpu
from .backend import Backend
from .cpu import cpu_backend
from .cuda import CUDABackend

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
            backend = cpu_backend
        else:
            try:
                import cupy         # (optional: the gpu extra)
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
            backend = CUDABackend(cupy)
        _made[key] = backend
    return backend


def _cupy_extras() -> xpu.ArrayModuleExtras:
    """What cupy lacks of numpy's API, for the reference kernels (made on first use)."""
    # cupy is optional (the gpu extra): imported only when a cupy array first needs these
    import cupy
    import cupyx
    import cupyx.scipy.special as special
    return xpu.ArrayModuleExtras(erf=special.erf, add_at=cupyx.scatter_add,
                                 asarray=cupy.asarray, ufunc_at=_cupy_ufunc_at,
                                 special=lambda name: getattr(special, name))


def _cupy_ufunc_at(name: str, target, index, values) -> bool:
    """Unbuffered ``maximum``/``minimum.at`` on cupy, exactly: on a GPU (cupy 14.2, H200)
    ``cupy.maximum.at`` and ``cupyx.scatter_max`` rounded float64 values to float32
    (scatter_reduce amax/amin off by 4e-8 relative). Here the index arrays and values
    broadcast to one shape and flatten to places in ``target``; a stable sort by value, then
    by place, puts each place's winner at one end of its run (the last for maximum, the first
    for minimum), and one assignment to distinct places writes it; a place that received a
    NaN gets NaN (numpy's rule). No atomics: deterministic. False for other ufuncs."""
    import cupy             # (optional: called only on cupy arrays)
    if name not in ("maximum", "minimum") or not target.flags.c_contiguous or \
            any(isinstance(i, slice) for i in index):
        return False
    index = [cupy.asarray(i) for i in index]
    values = cupy.asarray(values, dtype=target.dtype)
    shape = np.broadcast_shapes(*(i.shape for i in index), values.shape)
    places = cupy.zeros(shape, dtype=cupy.int64)
    step = 1
    for i, n in zip(reversed(index), reversed(target.shape)):
        places += (i % n) * step          # (negative indices count from the end)
        step *= n
    places = places.ravel()
    values = cupy.broadcast_to(values, shape).ravel()
    if places.size == 0:
        return True
    by_value = cupy.argsort(values)                 # (cupy's sorts are stable)
    order = by_value[cupy.argsort(places[by_value])]
    places, values = places[order], values[order]
    if name == "maximum":
        ends = cupy.concatenate([places[1:] != places[:-1], cupy.ones(1, bool)])
    else:
        ends = cupy.concatenate([cupy.ones(1, bool), places[1:] != places[:-1]])
    flat = target.reshape(-1)
    won, winners = places[ends], values[ends]
    flat[won] = getattr(cupy, name)(flat[won], winners)
    if values.dtype.kind == "f":
        nan_places = places[cupy.isnan(values)]
        flat[nan_places] = cupy.nan
    return True


# the hook graphlib's kernels reach cupy through (graphlib itself never imports it)
xpu.register_array_module("cupy", _cupy_extras, device="cuda")


def backend_for_device(device: str) -> Backend:
    """The backend that runs ops on ``device`` ('cpu' or 'cuda'): the hook the face package
    installs for eager dispatch."""
    return get_backend(device)
