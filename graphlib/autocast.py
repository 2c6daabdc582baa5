"""Autocast: the precision an op runs in under ``dg.autocast`` (PyTorch's ``torch.autocast``).

Which ops take which precision is a trait of each op, never a table of names: an OpDef's
``autocast`` trait (``LOWER``, ``FP32``, ``PROMOTE``, or a callable ``(attrs) -> policy``),
and, for composite functions built from several ops (``linear``, the losses), the
``autocast_function(policy)`` decorator on the function. The lists follow PyTorch's CPU
autocast (``aten/src/ATen/autocast_mode.cpp``, checked against torch 2.13's CPU autocast by
``tests/test_amp_torch.py``):

- ``LOWER``: every float operand that is not float64 is cast to the autocast dtype (bfloat16
  by default on the CPU, float16 on CUDA): matmul, einsum, conv2d, linear, bmm-like products,
  scaled dot-product attention, prelu.
- ``FP32``: every float16/bfloat16 operand is cast to float32: the losses (cross entropy,
  nll, mse, l1, huber, smooth l1, kl_div, binary cross entropy), ``prod``, ``svd`` and the
  other decompositions, ``max_unpool2d``.
- ``PROMOTE``: float operands are cast to the widest of their float dtypes (``cat``, ``stack``).
- no policy: the op runs in the dtypes it is given (PyTorch's CPU autocast, unlike its CUDA
  one, keeps reductions, softmax, exp/log and the norms out of its float32 list: a bfloat16
  input gives a bfloat16 output).

The state is per thread and per device type (``is_enabled``, ``get_dtype``, ``set_state``).
Eagerly, ``duograph.amp`` installs a dispatch interceptor that calls ``cast_operands``; when
a graph is being built, ``dispatch.apply`` calls it, so the casts become ``cast`` nodes (the
``casts`` pass removes the redundant ones; fusion fuses the rest into their neighbours).
"""
from __future__ import annotations

import functools
import threading
from typing import Callable, Optional

from . import dtypes
from .ir import _local as _graph_local
from .registry import REGISTRY

LOWER, FP32, PROMOTE = "lower", "fp32", "promote"
POLICIES = (LOWER, FP32, PROMOTE)
DEFAULT_DTYPES = {"cpu": "bfloat16", "cuda": "float16"}
# dtypes PyTorch's autocast accepts per device type
SUPPORTED_DTYPES = {"cpu": ("bfloat16", "float16"), "cuda": ("float16", "bfloat16")}
_HALF = ("float16", "bfloat16")


class _State(threading.local):
    def __init__(self):
        self.enabled = {}       # device type -> bool
        self.dtypes = {}        # device type -> dtype name
        self.cache_enabled = True
        self.depth = 0          # open autocast blocks (enabled or not): the cache's lifetime
        self.suspended = 0      # inside an autocast_function's body: its ops are not cast
        self.active = False     # any device type enabled and not suspended


_state = _State()


def _refresh() -> None:
    _state.active = not _state.suspended and any(_state.enabled.values())


def is_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` in this thread."""
    return bool(_state.enabled.get(device_type, False))


def get_dtype(device_type: str) -> str:
    """The autocast dtype of ``device_type`` in this thread (set or default)."""
    return _state.dtypes.get(device_type) or DEFAULT_DTYPES.get(device_type, "bfloat16")


def active() -> bool:
    """Whether any device type's autocast is on (and not suspended) in this thread."""
    return _state.active


def set_state(device_type: str, enabled: bool, dtype: str, cache_enabled: bool) -> tuple:
    """Set ``device_type``'s autocast state; returns the previous state, for ``restore``."""
    prev = (device_type, _state.enabled.get(device_type, False), _state.dtypes.get(device_type),
            _state.cache_enabled)
    _state.enabled[device_type] = bool(enabled)
    _state.dtypes[device_type] = dtype
    _state.cache_enabled = bool(cache_enabled)
    _state.depth += 1
    _refresh()
    return prev


def restore(prev: tuple) -> None:
    """Undo ``set_state`` (``prev`` is what it returned)."""
    device_type, enabled, dtype, cache_enabled = prev
    _state.enabled[device_type] = enabled
    if dtype is None:
        _state.dtypes.pop(device_type, None)
    else:
        _state.dtypes[device_type] = dtype
    _state.cache_enabled = cache_enabled
    _state.depth -= 1
    _refresh()


def depth() -> int:
    """Open autocast blocks of this thread (the cast cache lives as long as the outermost)."""
    return _state.depth


def cache_enabled() -> bool:
    """Whether this thread's autocast casts each weight once per outermost block."""
    return _state.cache_enabled


# -- which operands are cast, and to what ---------------------------------------------------

def policy_of(op, attrs) -> Optional[str]:
    """The op's autocast policy for a call with ``attrs`` (its ``autocast`` trait)."""
    p = op.autocast
    if p is None or isinstance(p, str):
        return p
    return p(attrs)


def _target(policy: str, device_type: str, found: list) -> Optional[str]:
    if policy == LOWER:
        return get_dtype(device_type)
    if policy == FP32:
        return "float32"
    return functools.reduce(dtypes.result_dtype, found) if found else None   # PROMOTE


def _eligible(dt: Optional[str], policy: str) -> bool:
    if dt is None or not dtypes.is_float(dt):
        return False
    if policy == FP32:
        return dt in _HALF
    return dt != "float64"


def _plain_cast(x, dtype: str):
    return REGISTRY["cast"](x, dtype=dtype)


# What casts an operand of an eager call: a plain cast, or the cast cache ``duograph.amp``
# installs (``set_eager_cast``: each weight cast once per outermost autocast block, as
# PyTorch's cast cache). Graph Values always take the plain cast (CSE merges repeats).
_eager_cast: Callable = _plain_cast


def set_eager_cast(fn: Optional[Callable]) -> None:
    """Install ``fn(x, dtype)`` as the cast of eager operands (None: the plain cast)."""
    global _eager_cast
    _eager_cast = fn or _plain_cast


def _device_type(x, device_of) -> Optional[str]:
    """The device type whose autocast state applies to operand ``x``: its device's type
    for tensors (``device_of(x)``, by default its ``device``), the first enabled device
    type for graph Values (a graph is placed on a device when it is compiled)."""
    d = device_of(x) if device_of is not None else getattr(x, "device", None)
    if d is not None and not isinstance(d, str):
        d = str(d)
    if d:
        return d.split(":")[0]
    for d, on in _state.enabled.items():
        if on:
            return d
    return None


def cast_operands(op, inputs, attrs, device_of: Optional[Callable] = None,
                  eager: bool = False) -> tuple:
    """``inputs`` with the casts ``op``'s autocast policy asks for (the same tuple when none
    applies). ``device_of(x)`` gives a tensor's device (default: its ``device``);
    ``eager``: the operands are eager tensors (their casts may come from the cast cache)."""
    if not _state.active:
        return inputs
    policy = policy_of(op, attrs)
    if policy is None:
        return inputs
    return _cast_all(policy, inputs, device_of, eager)


def _operand_dtype(x) -> Optional[str]:
    if isinstance(x, (bool, int, float, complex)) or not hasattr(x, "shape"):
        return None       # numbers (and Scalars: weak, they follow the tensors) stay
    d = getattr(x, "dtype", None)
    return d if isinstance(d, str) or d is None else dtypes.as_dtype(d)


def _cast_all(policy, inputs, device_of, eager):
    found = [(i, x, _operand_dtype(x)) for i, x in enumerate(inputs)]
    found = [(i, x, d) for i, x, d in found if _eligible(d, policy)]
    if not found:
        return inputs
    device = _device_type(found[0][1], device_of)
    if device is None or not _state.enabled.get(device, False):
        return inputs
    target = _target(policy, device, [d for _, _, d in found])
    out = list(inputs)
    changed = False
    for i, x, d in found:
        if d != target:
            out[i] = _eager_cast(x, target) if eager else _plain_cast(x, target)
            changed = True
    return tuple(out) if changed else inputs


def _building() -> bool:
    """Whether a graph is being built (its operands are Values or get captured)."""
    return bool(_graph_local.graphs)


class _suspend:
    """Ops run inside it are not autocast (a composite function's body, once its operands
    are cast as a whole)."""

    def __enter__(self):
        _state.suspended += 1
        _refresh()

    def __exit__(self, *exc):
        _state.suspended -= 1
        _refresh()


def autocast_function(policy: str):
    """Decorator for a composite function that PyTorch's autocast treats as one op
    (``linear``: ``LOWER``; the losses: ``FP32``): under autocast its tensor arguments are
    cast as the policy says, then its body runs without further autocasting."""
    if policy not in POLICIES:
        raise ValueError(f"autocast_function: expected a policy in {POLICIES}, found "
                         f"{policy!r}")

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if not _state.active:
                return fn(*args, **kwargs)
            names = list(kwargs)
            flat = _cast_all(policy, tuple(args) + tuple(kwargs[k] for k in names), None,
                             not _building())
            args, kwargs = flat[:len(args)], dict(zip(names, flat[len(args):]))
            with _suspend():
                return fn(*args, **kwargs)
        run.autocast_policy = policy
        return run
    return wrap
