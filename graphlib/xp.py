"""Array-module helpers for kernels: one kernel body serves numpy and cupy.

Kernels receive ``xp`` (numpy or cupy) and call ``xp.<fn>`` only for what both modules share.
What they do not share (special functions, unbuffered scatter-add, moving an array onto a
device) is reached here, through a table of ``ArrayModuleExtras`` keyed by the array module's
name. graphlib registers numpy's; a backend registers its own module's
(``register_array_module``, the hook the GPU backend in ``runtime`` uses), so graphlib never
imports cupy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np


@dataclass(frozen=True)
class ArrayModuleExtras:
    """What one array module lacks of numpy's API, as functions over its arrays."""
    erf: Callable                    # erf(x) elementwise
    add_at: Callable                 # add_at(target, index, values): unbuffered +=
    asarray: Callable                # asarray(x): a host or foreign array as this module's
    # ufunc_at(name, target, index, values) -> bool: the module's own unbuffered
    # ``name.at`` where it has a right one (False: use ``getattr(xp, name).at``)
    ufunc_at: Optional[Callable] = None
    # special(name) -> the module's ``scipy.special`` function of that name (erfc, gammaln,
    # psi, polygamma, i0, i1...), for the special-function ops
    special: Optional[Callable] = None


_EXTRAS: Dict[str, ArrayModuleExtras] = {}
_LOADERS: Dict[str, Callable[[], ArrayModuleExtras]] = {}
_DEVICES: Dict[str, str] = {"cpu": "numpy"}      # device name -> array module name


def register_array_module(name: str, loader: Callable[[], ArrayModuleExtras],
                          device: Optional[str] = None) -> None:
    """Declare the extras of the array module called ``name`` (``xp.__name__``), made by
    ``loader`` on first use (so registering imports nothing), and the device whose arrays
    it holds."""
    _LOADERS[name] = loader
    _EXTRAS.pop(name, None)
    if device is not None:
        _DEVICES[device] = name


def extras(xp) -> ArrayModuleExtras:
    """The registered extras of the array module ``xp``."""
    name = xp.__name__
    if name not in _LOADERS:
        raise RuntimeError(f"no backend registered the array module {name!r}: expected "
                           f"one of {sorted(_LOADERS)}")
    return _extras_by_name(name)


def _numpy_extras() -> ArrayModuleExtras:
    # scipy is heavy to import: loaded when numpy's extras are first asked for
    import scipy.special as _special
    return ArrayModuleExtras(erf=_special.erf, add_at=np.add.at, asarray=_host,
                             special=lambda name: getattr(_special, name))


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


register_array_module("numpy", _numpy_extras, device="cpu")


def erf(xp, x):
    """Elementwise error function."""
    return extras(xp).erf(x)


def special(xp, name: str) -> Callable:
    """The array module's ``scipy.special`` function ``name`` (``gammaln``, ``psi``...)."""
    found = extras(xp).special
    if found is None:
        raise RuntimeError(f"the array module {xp.__name__!r} registered no special "
                           f"functions: {name} is not available on it")
    return found(name)


def add_at(xp, target, index, values) -> None:
    """Unbuffered ``target[index] += values`` (repeated indices accumulate)."""
    extras(xp).add_at(target, index, values)


def open_grids(xp, shape) -> tuple:
    """numpy's ``indices(shape, sparse=True)`` (cupy's ``indices`` has no ``sparse``): one
    ``arange`` per dim, shaped to broadcast against the others."""
    n = len(shape)
    return tuple(xp.arange(s).reshape((1,) * a + (s,) + (1,) * (n - a - 1))
                 for a, s in enumerate(shape))


def ufunc_at(xp, name: str, target, index, values) -> None:
    """Unbuffered ``target[index] = name(target[index], values)`` for ``name`` in add,
    multiply, maximum, minimum (repeated places combine): the module's ``ufunc.at``, or
    numpy's on the host where the module has none."""
    if name == "add":
        add_at(xp, target, index, values)
        return
    own = extras(xp).ufunc_at
    if own is not None and own(name, target, index, values):
        return
    try:
        getattr(xp, name).at(target, index, values)
        return
    except (AttributeError, NotImplementedError, TypeError):
        pass
    host = _host(target)  # pragma: no cover - array modules without ufunc.at
    getattr(np, name).at(host, tuple(i if isinstance(i, slice) else _host(i) for i in index),
                         _host(values))
    target[...] = extras(xp).asarray(host)


def to_device(x, device: str):
    """``x`` as an array of ``device`` (numpy for "cpu"; another device's array module as
    its backend registered it)."""
    if device == "cpu":
        return _host(x) if hasattr(x, "get") else x
    name = _DEVICES.get(device)
    if name is None or name not in _LOADERS:
        raise RuntimeError(f"to_device: no backend for the device {device!r} is available "
                           f"(the cuda backend needs cupy: pip install 'duograph[gpu]')")
    return _extras_by_name(name).asarray(x)


def _extras_by_name(name: str) -> ArrayModuleExtras:
    found = _EXTRAS.get(name)
    if found is None:
        found = _EXTRAS[name] = _LOADERS[name]()
    return found


def rng(xp, seed, stream: int):
    """A generator for (seed, stream): same pair, same numbers; streams are independent."""
    seed_int = int(np.asarray(seed.get() if hasattr(seed, "get") else seed).reshape(()))
    state = np.random.SeedSequence([seed_int & 0xFFFFFFFFFFFFFFFF, stream]).generate_state(2)
    combined = int(state[0]) | (int(state[1]) << 32)
    return xp.random.default_rng(combined)
