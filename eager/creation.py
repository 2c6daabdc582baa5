"""Creating eager tensors: ``tensor``, ``from_numpy``, filled tensors, ranges and random
numbers from a seedable global generator (``manual_seed``).

The filled/range/random creators work in both modes: inside ``with graph:`` they add a node,
outside they return a tensor (on ``device``, with ``requires_grad`` when asked).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..graphlib import dtypes
from ..graphlib import functional as F
from ..graphlib.ops import creation as graph_creation
from .device import _xp_for
from .dlpack import bfloat16_from_dlpack
from .dispatch import pop_default_device, push_default_device
from .tensors import SeedTensor, Tensor, tensor_from_data

_rng_state = threading.local()


def _generator() -> np.random.Generator:
    g = getattr(_rng_state, "gen", None)
    if g is None:
        g = _rng_state.gen = np.random.default_rng()
    return g


def manual_seed(seed: int) -> None:
    """Make eager random numbers reproducible: same seed, same sequence."""
    _rng_state.gen = np.random.default_rng(int(seed))


def _next_seed() -> int:
    """The next seed of the global generator, as a Python int."""
    return int(_generator().integers(0, 2**62))


draw_seed = _next_seed


def _op_seed() -> SeedTensor:
    """The seed an eager random op without ``seed=`` uses: a marked tensor, so that
    ``record()``/``compile`` treat it as an input that changes every call."""
    return SeedTensor(np.asarray(_next_seed(), dtype=np.int64))


graph_creation.set_default_seed_source(_op_seed)


def _check_device(device):
    if device is None:
        return None
    name = str(device).split(":")[0]
    if name not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: expected 'cpu' or 'cuda'")
    return name


@contextlib.contextmanager
def _on(device):
    device = _check_device(device)
    if device is None:
        yield
        return
    if device != "cpu":
        _xp_for(device)   # raises a clear error without cupy
    token = push_default_device(device)
    try:
        yield
    finally:
        pop_default_device(token)


def _finish(t, requires_grad: bool):
    if requires_grad:
        if not isinstance(t, Tensor):
            raise TypeError("requires_grad=True applies to eager tensors; in a graph use "
                            "dg.grad on the value instead")
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data``.

    Args:
        data: a Python number, a (nested) list or tuple of numbers or of one-element
            tensors, a numpy array or a tensor. The data is always copied; use
            ``as_tensor`` or ``from_numpy`` to share a numpy array's memory.
        dtype: the result's dtype. By default inferred as PyTorch does: Python floats give
            float32, ints int64, bools bool; numpy arrays and tensors keep their dtype.
        device: 'cpu' or 'cuda' (default: the current default device, normally 'cpu').
        requires_grad: make the result a leaf that records gradients (floating-point
            dtypes only; others raise RuntimeError).

    Returns a new leaf tensor; ``dg.tensor(t)`` of a tensor ``t`` is a copy cut from the
    autograd graph (PyTorch warns and suggests ``t.clone().detach()``).
    """
    t = tensor_from_data(data, dtype, _check_device(device))
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` as a tensor, sharing memory where it can.

    A tensor is returned as it is (or converted with ``to(dtype, device)`` when those are
    given); a CPU numpy array whose dtype already matches is wrapped without a copy, so
    changes to one show in the other; another DLPack producer (a PyTorch or JAX array,
    bfloat16 included) is shared through DLPack (a PyTorch tensor that requires grad:
    its ``detach()``). Anything else is copied as by ``dg.tensor``.
    """
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device) if (dtype or device) else data
    if isinstance(data, np.ndarray) and (device in (None, "cpu")) and (
            dtype is None or dtypes.as_dtype(dtype) == data.dtype.name) and \
            data.dtype.name in dtypes.DTYPE_NAMES:
        return Tensor._wrap(data)
    if hasattr(data, "__dlpack__") and hasattr(data, "__dlpack_device__") and not isinstance(
            data, (np.ndarray, np.generic)):
        try:
            shared = from_dlpack(data)
        except (BufferError, RuntimeError) as e:   # torch: a tensor that requires grad
            if not hasattr(data, "detach"):
                raise TypeError(f"as_tensor: cannot read {type(data).__name__} through DLPack "
                                f"({e})") from None
            shared = from_dlpack(data.detach())
        return shared.to(dtype=dtype, device=device) if (dtype or device) else shared
    return tensor(data, dtype, device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with the numpy array ``array``: changes to one show in
    the other, and the dtype is the array's. Raises TypeError for anything but a numpy
    array, or for a dtype duograph does not support (complex, object, strings...).
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy array, found {type(array).__name__}")
    if array.dtype.name not in dtypes.DTYPE_NAMES:
        raise TypeError(f"from_numpy: unsupported dtype {array.dtype}; supported: "
                        f"{', '.join(dtypes.DTYPE_NAMES)}")
    return Tensor._wrap(array)


def to_device(t: Tensor, device: str) -> Tensor:
    """Copy ``t`` to ``device`` (the copy stays in the autograd graph)."""
    if device == t.device:
        return t
    return graph_creation.to_device(t, device)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False):
    """A tensor of zeros of shape ``size`` (ints, or one tuple or list).

    ``dtype`` defaults to float32. ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.zeros(*size, dtype=dtype), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False):
    """A tensor of ones of shape ``size`` (ints, or one tuple or list).

    ``dtype`` defaults to float32. ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.ones(*size, dtype=dtype), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False):
    """Uninitialised in PyTorch; zeros here (numpy's empty gives no speed-up worth the
    nondeterminism)."""
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False):
    """A tensor of shape ``size`` (an int or a tuple) filled with ``fill_value``.

    ``dtype`` defaults to the type of ``fill_value``, as in PyTorch: float32 for a float,
    int64 for an int, bool for a bool. ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.full(size, fill_value, dtype=dtype), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False):
    """The values from ``start`` (inclusive) to ``end`` (exclusive) in steps of ``step``;
    ``arange(n)`` counts from 0 to ``n - 1``.

    ``dtype`` defaults to int64, or float32 when any of ``start``, ``end``, ``step`` is a
    float; a ``step`` of 0 raises. ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.arange(start, end, step, dtype=dtype), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad: bool = False):
    """``steps`` evenly spaced values from ``start`` to ``end``, both included.

    ``dtype`` defaults to float32; integer dtypes truncate toward zero (as PyTorch) and bool
    is refused. ``device`` is 'cpu' or 'cuda' (the default device when None);
    ``requires_grad=True`` makes the result a leaf that requires grad (eager only). Inside
    ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.linspace(start, end, steps, dtype=dtype), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad: bool = False):
    """The identity matrix of shape ``(n, m)`` (``m`` defaults to ``n``): ones on the diagonal,
    zeros elsewhere.

    ``dtype`` defaults to float32. ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.eye(n, m, dtype=dtype), requires_grad)


def rand(*size, seed=None, dtype=None, device=None, requires_grad: bool = False):
    """Samples from the uniform distribution on [0, 1), of shape ``size`` (ints, or one tuple).

    ``dtype`` defaults to float32 (floating-point dtypes only). ``seed`` (an int, or an int64
    scalar tensor or Value) makes the draw reproducible; without it eager mode uses the next
    seed of the global generator (``dg.manual_seed``) and graph mode raises (a graph's
    randomness is an explicit input). ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.rand(*size, seed=seed, dtype=dtype), requires_grad)


def randn(*size, seed=None, dtype=None, device=None, requires_grad: bool = False):
    """Samples from the standard normal distribution N(0, 1), of shape ``size`` (ints, or one
    tuple).

    ``dtype`` defaults to float32 (floating-point dtypes only). ``seed`` (an int, or an int64
    scalar tensor or Value) makes the draw reproducible; without it eager mode uses the next
    seed of the global generator (``dg.manual_seed``) and graph mode raises (a graph's
    randomness is an explicit input). ``device`` is 'cpu' or 'cuda' (the default device when
    None); ``requires_grad=True`` makes the result a leaf that requires grad (eager only).
    Inside ``with graph:`` it adds a node to the graph instead of returning a tensor.
    """
    with _on(device):
        return _finish(F.randn(*size, seed=seed, dtype=dtype), requires_grad)


def randint(low, high=None, size=(), seed=None, dtype=None, device=None):
    """Integers drawn uniformly from [low, high), or from [0, low) when ``high`` is None, of
    shape ``size`` (an int or a tuple).

    ``size`` defaults to () (a 0-D tensor), where PyTorch requires it; ``dtype`` defaults to
    int64. ``seed`` (an int, or an int64 scalar tensor or Value) makes the draw reproducible;
    without it eager mode uses the next seed of the global generator (``dg.manual_seed``) and
    graph mode raises (a graph's randomness is an explicit input). ``device`` is 'cpu' or
    'cuda'. Inside ``with graph:`` it adds a node to the graph.
    """
    with _on(device):
        return F.randint(low, high, size, seed=seed, dtype=dtype)


def _like(fn, x, dtype, device, requires_grad):
    device = device or getattr(x, "device", None)
    with _on(device if isinstance(x, Tensor) else None):
        return _finish(fn(), requires_grad)


def zeros_like(x, dtype=None, device=None, requires_grad: bool = False):
    """Zeros with the shape of ``x``, and its dtype and device unless ``dtype`` or ``device`` is
    given.

    ``requires_grad=True`` makes the result a leaf that requires grad. ``x`` may be a graph
    Value, which adds a node instead.
    """
    return _like(lambda: F.zeros_like(x, dtype), x, dtype, device, requires_grad)


def ones_like(x, dtype=None, device=None, requires_grad: bool = False):
    """Ones with the shape of ``x``, and its dtype and device unless ``dtype`` or ``device`` is
    given.

    ``requires_grad=True`` makes the result a leaf that requires grad. ``x`` may be a graph
    Value, which adds a node instead.
    """
    return _like(lambda: F.ones_like(x, dtype), x, dtype, device, requires_grad)


def full_like(x, fill_value, dtype=None, device=None, requires_grad: bool = False):
    """A tensor with the shape of ``x`` (and its dtype and device unless ``dtype`` or ``device``
    is given) filled with ``fill_value`` (a number; converted to the dtype, so 2.5 becomes 2
    in an integer tensor).

    ``requires_grad=True`` makes the result a leaf that requires grad. ``x`` may be a graph
    Value, which adds a node instead.
    """
    return _like(lambda: F.full_like(x, fill_value, dtype), x, dtype, device, requires_grad)


def empty_like(x, dtype=None, device=None, requires_grad: bool = False):
    """Same as ``zeros_like``: PyTorch leaves the memory uninitialised, duograph fills it with
    zeros (deterministic, at no real cost)."""
    return zeros_like(x, dtype, device, requires_grad)


def rand_like(x, dtype=None, device=None, requires_grad: bool = False, seed=None):
    """Uniform samples on [0, 1) with the shape of ``x``, and its dtype and device unless
    ``dtype`` or ``device`` is given (the dtype must be floating point).

    ``seed`` (an int, or an int64 scalar tensor or Value) makes the draw reproducible; without
    it eager mode uses the next seed of the global generator (``dg.manual_seed``) and graph
    mode raises (a graph's randomness is an explicit input). ``requires_grad=True`` makes the
    result a leaf that requires grad.
    """
    return _like(lambda: F.uniform(*x.shape, seed=seed, dtype=dtype or x.dtype,
                                   _name="rand_like"), x, dtype, device, requires_grad)


def randn_like(x, dtype=None, device=None, requires_grad: bool = False, seed=None):
    """Standard normal samples with the shape of ``x``, and its dtype and device unless ``dtype``
    or ``device`` is given (the dtype must be floating point).

    ``seed`` (an int, or an int64 scalar tensor or Value) makes the draw reproducible; without
    it eager mode uses the next seed of the global generator (``dg.manual_seed``) and graph
    mode raises (a graph's randomness is an explicit input). ``requires_grad=True`` makes the
    result a leaf that requires grad.
    """
    return _like(lambda: F.normal(*x.shape, seed=seed, dtype=dtype or x.dtype,
                                  _name="randn_like"), x, dtype, device, requires_grad)


def randint_like(x, low, high=None, dtype=None, device=None, seed=None):
    """Random integers in [low, high) (or [0, low)) with ``x``'s shape (and dtype, unless
    ``dtype`` says otherwise), like ``torch.randint_like``."""
    return _like(lambda: F.randint(low, high, tuple(x.shape), seed=seed,
                                   dtype=dtype or x.dtype), x, dtype, device, False)


def from_dlpack(obj) -> Tensor:
    """A tensor sharing ``obj``'s memory (no copy) through DLPack: ``obj`` is any object with
    ``__dlpack__`` and ``__dlpack_device__`` (a torch or JAX array, a numpy or cupy array, a
    duograph tensor), on the CPU or a CUDA device, as ``torch.from_dlpack``. The tensor
    needs no grad. bfloat16 works too (``eager.dlpack``: numpy alone refuses it)."""
    if not hasattr(obj, "__dlpack_device__") or not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ and "
                        f"__dlpack_device__ (a torch, JAX, numpy or cupy array), found "
                        f"{type(obj).__name__}")
    kind = int(obj.__dlpack_device__()[0])
    if kind in (1, 3):                  # kDLCPU, kDLCUDAHost
        try:
            arr = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError):
            arr = bfloat16_from_dlpack(obj)     # numpy has no bfloat16 of its own
            if arr is None:
                raise
    elif kind in (2, 13):               # kDLCUDA, kDLCUDAManaged
        arr = _xp_for("cuda").from_dlpack(obj)
    else:
        raise TypeError(f"from_dlpack: DLPack device type {kind} is neither the CPU (1) nor "
                        "CUDA (2)")
    if arr.dtype.name not in dtypes.DTYPE_NAMES:
        raise TypeError(f"from_dlpack: unsupported dtype {arr.dtype}; supported: "
                        f"{', '.join(dtypes.DTYPE_NAMES)}")
    return Tensor._wrap(arr)
