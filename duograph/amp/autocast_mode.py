"""``dg.autocast`` (``torch.autocast``): ops run in a lower precision where it is safe.

Which op runs in which precision is each OpDef's ``autocast`` trait (and the
``autocast_function`` decorator on composite functions such as ``linear`` and the losses);
``graphlib.autocast`` documents the lists, PyTorch's CPU ones. Eagerly an autocast block
installs one dispatch interceptor (``eager.intercept``) that casts an op's operands before it
runs; when a graph is being built (graph mode, ``dg.compile``'s recording) the casts become
``cast`` nodes, which the ``casts`` pass prunes and fusion fuses.
"""
from __future__ import annotations

import functools
import threading
import warnings
import weakref
from typing import Optional

from ..eager import Tensor, intercept
from ..graphlib import autocast as _ac
from ..graphlib import dtypes

_SUPPORTED_DEVICES = ("cpu", "cuda")


class _Installed(threading.local):
    def __init__(self):
        self.block = None       # this thread's open interceptor block, if any
        self.users = 0          # enabled autocast blocks that share it


_installed = _Installed()


def _interceptor(op, inputs, attrs, proceed):
    """Cast the operands as the op's autocast policy says, then run it beneath."""
    if op.autocast is not None and _ac.active():
        inputs = _ac.cast_operands(op, inputs, attrs, eager=True)
    return proceed(op, inputs, attrs)


# PyTorch's cast cache: a leaf tensor that requires grad (a weight) is cast once per
# outermost autocast block (while its data and the cast's tape node are unchanged):
# (id, dtype) -> (the tensor's weak reference, its version, the cast tensor)
_cast_cache: dict = {}


def _cached_cast(x, dtype: str):
    cast = _ac.REGISTRY["cast"]
    if not (_ac.cache_enabled() and isinstance(x, Tensor) and x.requires_grad
            and x.grad_fn is None):
        return cast(x, dtype=dtype)
    key = (id(x), dtype)
    hit = _cast_cache.get(key)
    if hit is not None and hit[0]() is x and hit[1] == x._version[0] and not getattr(
            hit[2].grad_fn, "freed", True):
        return hit[2]
    out = cast(x, dtype=dtype)
    if out.grad_fn is not None:        # kept only with its tape node
        _cast_cache[key] = (weakref.ref(x), x._version[0], out)
    return out


_ac.set_eager_cast(_cached_cast)


class autocast:
    """``with dg.autocast("cpu"):`` (or ``dtype=dg.float16``) runs the ops PyTorch's CPU
    autocast lists in the lower dtype (matmul, linear, conv, einsum, attention), those it
    lists as float32 in float32 (the losses, ``prod``, decompositions), and every other op
    in the dtypes its operands have. Also a decorator (``@dg.autocast("cpu")``).

    ``device_type``: "cpu" or "cuda"; ``dtype``: bfloat16 (the CPU default) or float16
    (the CUDA default); ``enabled=False`` turns autocast off inside the block;
    ``cache_enabled`` (default True) casts each weight (a leaf that requires grad) once per
    outermost autocast block. Operand tensors on another device type are not cast."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: Optional[bool] = None):
        if not isinstance(device_type, str):
            raise TypeError(f"expected type of device_type to be str, got "
                            f"{type(device_type).__name__}")
        base = device_type.split(":")[0]
        if base not in _SUPPORTED_DEVICES:
            raise RuntimeError(f"Invalid device string: '{device_type}' (autocast supports "
                               f"the device types {', '.join(_SUPPORTED_DEVICES)})")
        self.device = base
        self.fast_dtype = _ac.get_dtype(base) if dtype is None else dtypes.as_dtype(dtype)
        self._enabled = bool(enabled)
        self._cache_enabled = _ac.cache_enabled() if cache_enabled is None else bool(
            cache_enabled)
        supported = _ac.SUPPORTED_DTYPES[base]
        if self._enabled and self.fast_dtype not in supported:
            kind = base.upper()
            warnings.warn(f"In {kind} autocast, but the target dtype is not supported. "
                          f"Disabling autocast.\n{kind} Autocast only supports dtype of "
                          f"{', '.join(supported)} currently (found {self.fast_dtype}).",
                          UserWarning, stacklevel=2)
            self._enabled = False
        self._prev = None
        self._mine = False

    def __enter__(self):
        if self._prev is not None:
            raise RuntimeError("autocast: this block is already open (make a new autocast "
                               "object per with-statement)")
        self._prev = _ac.set_state(self.device, self._enabled, self.fast_dtype,
                                   self._cache_enabled)
        if self._enabled:
            if _installed.block is None:
                _installed.block = intercept(_interceptor)
                _installed.block.__enter__()
            _installed.users += 1
            self._mine = True
        return self

    def __exit__(self, *exc):
        if self._mine:
            _installed.users -= 1
            if _installed.users == 0:
                _installed.block.__exit__(*exc)
                _installed.block = None
            self._mine = False
        _ac.restore(self._prev)
        self._prev = None
        if _ac.depth() == 0:
            _cast_cache.clear()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)
        return decorated

    def __repr__(self):
        return (f"autocast(device_type={self.device!r}, dtype={self.fast_dtype}, "
                f"enabled={self._enabled})")


def is_autocast_enabled(device_type: Optional[str] = None) -> bool:
    """Whether autocast is on for ``device_type`` in this thread (PyTorch's default, with no
    argument, asks about "cuda")."""
    return _ac.is_enabled("cuda" if device_type is None else device_type.split(":")[0])


def get_autocast_dtype(device_type: str) -> str:
    """The dtype autocast uses for ``device_type`` (bfloat16 for "cpu" unless set)."""
    return _ac.get_dtype(device_type.split(":")[0])


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast supports ``device_type`` ("cpu", "cuda")."""
    return device_type.split(":")[0] in _SUPPORTED_DEVICES
