"""A stand-in "cuda" device for tests on machines without a GPU.

``FakeDeviceArray`` is a numpy subclass that plays a device array (``.get()`` copies it to
the host, as cupy's does); ``FakeXP`` is an array module over numpy whose functions return
``FakeDeviceArray``s (as cupy's return cupy arrays). ``fake_cuda()`` installs them as the
"cuda" device everywhere duograph looks one up: the array-module table of
``graphlib.xp`` (moves between devices), eager's device of an array, and the runtime's
"cupy" backend (eager dispatch, ``g.compile(device="cuda")``, ``dg.compile``), and puts
everything back afterwards. Device moves, device-mixing errors, optimizers, checkpoints and
graph mode then run their real device code paths on the CPU.
"""
import contextlib
import types

import numpy as np

from duograph.eager import device as eager_device
from duograph.eager import dispatch as eager_dispatch
from duograph.graphlib import xp as xpu
from duograph.runtime import backends
from duograph.runtime.backend import Backend


class FakeDeviceArray(np.ndarray):
    """A numpy array standing in for a device array."""

    def get(self, stream=None):
        return np.array(self.view(np.ndarray))

    def __repr__(self):
        return "Fake" + repr(self.view(np.ndarray))


def _to_fake(x):
    if isinstance(x, np.ndarray) and not isinstance(x, FakeDeviceArray):
        return x.view(FakeDeviceArray)
    if isinstance(x, tuple):
        return tuple(_to_fake(y) for y in x)
    if isinstance(x, list):
        return [_to_fake(y) for y in x]
    return x


def _wrap_callable(fn):
    def call(*args, **kwargs):
        return _to_fake(fn(*args, **kwargs))
    call.__name__ = getattr(fn, "__name__", "fn")
    return call


class _UfuncProxy:
    def __init__(self, ufunc):
        self._ufunc = ufunc

    def __call__(self, *args, **kwargs):
        return _to_fake(self._ufunc(*args, **kwargs))

    def __getattr__(self, name):
        attr = getattr(self._ufunc, name)
        return _wrap_callable(attr) if callable(attr) else attr


class _Namespace:
    """numpy (or one of its submodules) whose functions return FakeDeviceArrays."""

    def __init__(self, module, name):
        self._module = module
        self.__name__ = name

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if isinstance(attr, type):
            return attr                        # dtypes, ndarray...
        if isinstance(attr, np.ufunc):
            return _UfuncProxy(attr)
        if isinstance(attr, types.ModuleType):
            return _Namespace(attr, f"{self.__name__}.{name}")
        if callable(attr):
            return _wrap_callable(attr)
        return attr


class _Generator:
    def __init__(self, gen):
        self._gen = gen

    def __getattr__(self, name):
        return _wrap_callable(getattr(self._gen, name))


class FakeXP(_Namespace):
    """The array module of the fake device (``xp.__name__ == "fakecuda"``)."""

    ndarray = FakeDeviceArray

    def __init__(self):
        super().__init__(np, "fakecuda")
        self.random = types.SimpleNamespace(
            default_rng=lambda seed=None: _Generator(np.random.default_rng(seed)))

    @staticmethod
    def asarray(x, dtype=None, order=None):
        if isinstance(x, FakeDeviceArray):
            return x if dtype is None else x.astype(dtype, copy=False)
        if hasattr(x, "get") and not isinstance(x, np.ndarray):
            x = x.get()
        return np.array(x, dtype=dtype, order=order or "K").view(FakeDeviceArray)

    @staticmethod
    def asnumpy(x, stream=None):
        return x.get() if isinstance(x, FakeDeviceArray) else np.asarray(x)


def _extras():
    from scipy.special import erf

    def add_at(target, index, values):
        np.add.at(target, index, values)
    import scipy.special
    return xpu.ArrayModuleExtras(erf=_wrap_callable(erf), add_at=add_at,
                                 asarray=FakeXP.asarray,
                                 special=lambda name: _wrap_callable(getattr(scipy.special,
                                                                             name)))


@contextlib.contextmanager
def fake_cuda():
    """Install the fake device as "cuda" for the duration of the block; yields the
    backend."""
    xp = FakeXP()
    backend = Backend("fakecuda", xp, "cuda")
    saved_made = backends._made.get("cupy")
    saved_provider = eager_device.get_backend_provider()
    xpu.register_array_module("fakecuda", _extras, device="cuda")
    eager_device.register_device_array(FakeDeviceArray, "cuda")
    backends._made["cupy"] = backend
    eager_device.set_backend_provider(saved_provider)      # forget cached backends
    eager_dispatch._scalar_cache.clear()
    try:
        yield backend
    finally:
        if saved_made is None:
            backends._made.pop("cupy", None)
        else:
            backends._made["cupy"] = saved_made
        xpu.register_array_module("cupy", backends._cupy_extras, device="cuda")
        eager_device.register_device_array(FakeDeviceArray, None)
        eager_device.set_backend_provider(saved_provider)
        eager_dispatch._scalar_cache.clear()
