"""Devices and the backends that run eager ops on them.

Which device an array lives on (``_device_of``), the default device of ops without tensor
inputs (``_default_device``, pushed by ``creation``'s ``device=``), and the backend provider:
eager never imports the runtime (the arrow points the other way), so the face package installs
``set_backend_provider(provider)``. Modules that cache what a backend gave them (the dispatch
plans) subscribe with ``on_provider_change``.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

_device_types: dict = {}      # array type -> device name, for types a backend registers


def _device_of(arr) -> str:
    if type(arr) is np.ndarray:
        return "cpu"
    found = _device_types.get(type(arr))
    if found is not None:
        return found
    return "cpu" if isinstance(arr, np.ndarray) else "cuda"


def register_device_array(array_type: type, device: Optional[str]) -> None:
    """Declare that arrays of ``array_type`` live on ``device`` (None forgets it): what a
    test's stand-in device array (a numpy subclass) uses to look like a "cuda" array. Arrays
    that are not numpy's are "cuda" without it."""
    if device is None:
        _device_types.pop(array_type, None)
    else:
        _device_types[array_type] = device


# -- kernels: a backend per device, through a hook -------------------------------------------
# eager never imports the runtime (the arrow points the other way): the face package installs
# ``set_backend_provider(provider)``, where ``provider(device)`` returns the backend for
# "cpu" or "cuda": an object with ``xp`` (its array module) and ``kernels`` (a mapping from
# OpDef to ``kernel(xp, *arrays, **attrs)``, answering the op's reference kernel for any op it
# does not specialise), or raises a clear error where the device is unavailable. Without a
# provider, ops run their reference kernels on numpy and only "cpu" exists.
class _ReferenceKernels:
    """OpDef -> its reference kernel."""

    def __getitem__(self, op):
        return op.kernel


class _ReferenceCPU:
    """The backend used before a provider is installed: numpy and reference kernels."""

    name = "reference"
    xp = np
    kernels = _ReferenceKernels()


_provider = None
_backends: dict = {"cpu": _ReferenceCPU()}
_listeners: list = []        # on_provider_change


def set_backend_provider(provider) -> None:
    """Install ``provider(device) -> backend`` (see above) for eager dispatch; the face
    package (``duograph/__init__.py``) installs the runtime's backends. ``None`` goes back
    to reference kernels on numpy."""
    global _provider
    _provider = provider
    _backends.clear()
    _backends["cpu"] = _ReferenceCPU() if provider is None else provider("cpu")
    for listener in _listeners:
        listener(_backends["cpu"])


def on_provider_change(listener: Callable) -> None:
    """Call ``listener(cpu_backend)`` whenever ``set_backend_provider`` installs a provider
    (eager dispatch rebinds its CPU kernel table and drops its plans)."""
    _listeners.append(listener)


def get_backend_provider():
    """The provider installed by ``set_backend_provider`` (None: reference kernels), so a
    tool that installs its own for a while (``dg.compare`` times kernels so) can put it back."""
    return _provider


def backend_for(device: str):
    """The backend that runs eager ops on ``device``."""
    backend = _backends.get(device)
    if backend is None:
        if _provider is None:
            raise RuntimeError(f"no backend for device {device!r}: eager has no backend "
                               "provider installed (import duograph installs it)")
        backend = _backends[device] = _provider(device)
    return backend


def _xp_for(device: str):
    if device == "cpu":
        return np
    return backend_for(device).xp



# the default device of ops without tensor inputs, innermost last (dispatch's
# ``push_default_device``)
_default_device = ["cpu"]
