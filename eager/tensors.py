"""The eager Tensor and the handler that executes ops on it at once.

Every op executed on tensors goes through ``eager_apply``: types are inferred by the op's
``infer`` (cached per signature), the kernel of the tensors' device backend runs on their
arrays (``graphlib.kernels.run_kernel``; the backends come through the hook below), and, when a
gradient is wanted or a ``record()`` block is open, an ``EagerNode`` is created: an IR
``Node`` whose inputs are the tensors themselves, so the registry's vjp rules run on them
unchanged and ``record()`` can turn the nodes into a ``Graph``.
"""
from __future__ import annotations

import math
import weakref
from threading import get_ident as _get_ident
from typing import Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.dispatch import (Scalar, cast_zero_dim_operands, register_handler,
                                 set_default_handler, weak_scalar)
from ..graphlib.errors import DTypeError, DuographError, ShapeError
from ..graphlib.aliases import accept_axis
from ..graphlib.ir import ConstArray, Node, _local as _graph_local
from ..graphlib.kernels import direct_kernel, run_kernel
from ..graphlib.methods import TensorMethods
from ..graphlib.registry import REGISTRY
from ..graphlib.config import config as _config
from ..graphlib.source import user_source
from ..graphlib.types import TensorType
from . import grad_mode



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
_cpu_kernels = _backends["cpu"].kernels     # the hot path's table


def set_backend_provider(provider) -> None:
    """Install ``provider(device) -> backend`` (see above) for eager dispatch; the face
    package (``duograph/__init__.py``) installs the runtime's backends. ``None`` goes back
    to reference kernels on numpy."""
    global _provider, _cpu_kernels
    _provider = provider
    _backends.clear()
    _backends["cpu"] = _ReferenceCPU() if provider is None else provider("cpu")
    _cpu_kernels = _backends["cpu"].kernels
    _plans.clear()


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


_new = object.__new__
_weakref = weakref.ref


def _init(t, data, requires_grad: bool) -> None:
    t.array = data
    t.requires_grad = requires_grad
    t.grad = None
    t.grad_fn = None
    t._index = 0
    t._version = [0]
    t._hooks = None
    t._retains_grad = False


def _is_size(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _legacy_data(args, device, dtype: str = "float32", name: str = "Tensor"):
    """The array ``Tensor(*args)`` holds (see ``Tensor.__init__``); the typed legacy
    constructors (``LongTensor(...)``...) pass their ``dtype`` and ``name``."""
    if device is not None:
        device = str(device).split(":")[0]
        if device not in ("cpu", "cuda"):
            raise ValueError(f"Tensor: unknown device {device!r}: expected 'cpu' or 'cuda'")
    device = device or _default_device[-1]
    if len(args) == 1 and isinstance(args[0], Tensor):
        other = args[0]
        if other.device != device:
            raise RuntimeError(f"{name}: the tensor is on {other.device}, not {device}; use "
                               ".to(device)")
        if name != "Tensor" and other.dtype != dtype:
            raise TypeError(f"{name}: expected a {dtype} tensor, found {other.dtype}; use "
                            f".to({dtype!r})")
        return other.array
    if all(_is_size(a) for a in args):
        sizes = tuple(int(a) for a in args) if args else (0,)
        bad = [n for n in sizes if n < 0]
        if bad:
            raise RuntimeError(f"{name}: cannot create a tensor with negative dimension "
                               f"{bad[0]}: {list(sizes)}")
        arr = np.zeros(sizes, np.dtype(dtype))
    elif len(args) == 1 and (isinstance(args[0], (list, tuple, np.ndarray))
                             or hasattr(args[0], "__array__")):
        data = args[0]
        try:
            arr = np.array(data, dtype=np.dtype(dtype))
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"{name}: cannot make a {dtype} tensor from "
                            f"{type(data).__name__}: {e}") from None
    else:
        found = ", ".join(type(a).__name__ for a in args)
        raise TypeError(f"{name}: expected sizes (ints) or one sequence of data, found "
                        f"({found}); for a 0-d tensor of a number use dg.tensor(value)")
    return arr if device == "cpu" else _xp_for(device).asarray(arr)


class InplaceCastError(DTypeError, RuntimeError):
    """An in-place op whose result cannot be cast to the tensor's dtype (a float result into
    an integer tensor...): PyTorch raises a RuntimeError there, so this is both."""


class TensorTypeOf(TensorType):
    """``Tensor.type``: the ``TensorType`` of a tensor, callable as PyTorch's ``Tensor.type``
    (see ``Tensor.type``)."""

    __slots__ = ("_tensor",)

    def __init__(self, t: "Tensor"):
        TensorType.__init__(self, t.array.shape, t.dtype)
        object.__setattr__(self, "_tensor", t)     # (graph Values keep a plain TensorType)

    def __call__(self, dtype=None, non_blocking: bool = False, **kwargs):
        from .legacy import legacy_dtype, legacy_type_name
        t = self._tensor
        if dtype is None:
            return legacy_type_name(t)
        dt, device = legacy_dtype(dtype)
        return t.to(dtype=dt, device=device)


class Tensor(TensorMethods):
    """An eager tensor: an array (numpy on "cpu", cupy on "cuda") plus autograd state."""

    __slots__ = ("array", "requires_grad", "grad", "grad_fn", "_index", "_version", "_hooks",
                 "_retains_grad", "__weakref__")

    def __init__(self, *args, device=None):
        """PyTorch's legacy constructor ``torch.Tensor(...)``, always float32:

        - ``Tensor()``: an empty (0,) tensor;
        - ``Tensor(4, 4)`` (sizes): a tensor of that shape (zero-filled here, where PyTorch
          leaves it uninitialised);
        - ``Tensor(data)`` (a list, tuple or array; ``Tensor(ndarray_float64)`` too):
          a float32 copy of ``data``;
        - ``Tensor(other_tensor)``: a tensor sharing ``other_tensor``'s data and dtype.

        Use ``dg.tensor(data, dtype=..., requires_grad=...)`` to choose the dtype.
        """
        _init(self, _legacy_data(args, device), False)

    @property
    def data(self) -> "Tensor":
        """This tensor's data as a tensor without autograd history, sharing its memory, as
        PyTorch's ``.data``: ``w.grad.data.zero_()`` or ``p.data -= lr * p.grad.data`` write
        into ``w``'s memory, and autograd does not see the write (unlike ``detach()``, whose
        result shares the version counter, so such writes are caught). ``t.data = other``
        makes ``t`` hold ``other``'s data (any shape or dtype, as PyTorch). The array itself
        (numpy or cupy) is ``t.array``."""
        t = _new(Tensor)
        _init(t, self.array, False)
        return t

    @data.setter
    def data(self, value) -> None:
        if isinstance(value, Tensor):
            value = value.array
        elif not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise TypeError(f"Tensor.data: expected a tensor, found {type(value).__name__}")
        self.array = value
        self._version[0] += 1

    @classmethod
    def _wrap(cls, data, requires_grad: bool = False) -> "Tensor":
        """The engine's constructor: a tensor around ``data`` (a numpy or cupy array, kept
        as it is: no copy, no dtype change)."""
        t = _new(cls)
        _init(t, data, requires_grad)
        return t

    # -- the value protocol shared with graph Values (see graphlib.autodiff) ------------------
    @property
    def node(self):
        return self.grad_fn

    @property
    def index(self) -> int:
        return self._index

    @property
    def type(self) -> "TensorTypeOf":
        """The tensor's ``TensorType`` (shape and dtype, as a graph Value's ``type``); called,
        it is PyTorch's ``Tensor.type``: ``t.type()`` names the tensor's legacy type
        (``'duograph.FloatTensor'``, ``'duograph.cuda.LongTensor'``: duograph's module name
        where PyTorch says ``'torch.FloatTensor'``) and ``t.type(dtype)`` converts, where
        ``dtype`` is a dtype, a legacy class (``dg.DoubleTensor``) or its name (``'torch.``
        or ``'duograph.DoubleTensor'``)."""
        return TensorTypeOf(self)

    # -- attributes ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.array.shape

    @property
    def dtype(self) -> str:
        return dtype_name(self.array.dtype)

    @property
    def ndim(self) -> int:
        return self.array.ndim

    @property
    def device(self) -> str:
        return _device_of(self.array)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def dim(self) -> int:
        """``dim() -> int``: the number of dims (``ndim``)."""
        return self.array.ndim

    def size(self, dim: Optional[int] = None):
        """``size(dim=None)``: the shape as a tuple of ints, or the size of dim ``dim`` (an int;
        negative dims count from the end). duograph returns a plain tuple where PyTorch
        returns ``torch.Size``."""
        return self.array.shape if dim is None else self.array.shape[dim]

    def numel(self) -> int:
        """``numel() -> int``: the number of elements."""
        return int(self.array.size)

    def element_size(self) -> int:
        """``element_size() -> int``: the size of one element in bytes (4 for float32)."""
        return self.array.itemsize

    # -- conversions ---------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a numpy array (shares memory on the CPU)."""
        if self.requires_grad:
            raise RuntimeError("numpy(): this tensor requires grad; call .detach().numpy() "
                               "to get its data without the autograd history")
        if self.device != "cpu":
            raise RuntimeError("numpy(): the tensor is on cuda; call .cpu() first")
        _note_data(self, "numpy")
        return self.array

    def __array__(self, dtype=None, copy=None):
        arr = host_array(self)
        _note_data(self, "__array__", arr)
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.array.size != 1:
            raise ShapeError(f"item(): only one-element tensors can be converted to a Python "
                             f"number, this one has shape {list(self.shape)}")
        from .guards import note_decision
        value = self.array.reshape(()).item()
        note_decision(self, "item", value)
        return value

    def tolist(self):
        """``tolist()``: the data as a (nested) Python list of numbers; a 0-D tensor gives a
        single number. Copies from the GPU when needed."""
        arr = host_array(self)
        _note_data(self, "tolist", arr)
        return arr.tolist()

    def __bool__(self):
        if self.array.size != 1:
            raise RuntimeError(f"the truth value of a tensor with {self.array.size} elements "
                               "is ambiguous; use .any() or .all()")
        from .guards import note_decision
        value = bool(self.array.reshape(()).item())
        note_decision(self, "bool", value)
        return value

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if dtypes.kind(self.dtype) != "i" or self.array.size != 1:
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self.item())

    def __len__(self):
        if self.array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.array.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        arr = host_array(self)       # printing is not a decision: no guard (see compile)
        body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000,
                               precision=4)
        extra = []
        if arr.dtype.name not in ("float32", "int64", "bool"):
            extra.append(f"dtype={arr.dtype.name}")
        if self.device != "cpu":
            extra.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{self.grad_fn.op.name}>")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return "tensor(" + ", ".join([body] + extra) + ")"

    def to(self, *args, dtype=None, device=None, copy: bool = False) -> "Tensor":
        """Convert dtype and/or device: ``t.to("float64")``, ``t.to("cuda")``."""
        for a in args:
            if isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda"):
                device = a
            elif isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            else:
                dtype = a
        if dtype is not None:
            try:
                dtype = dtypes.as_dtype(dtype)
            except TypeError as e:
                raise TypeError(f"to(): {dtype!r} is neither a dtype nor a device ('cpu', "
                                f"'cuda'): {e}\n  in: {user_source()}") from None
        if device is not None:
            device = str(device).split(":")[0]
            if device not in ("cpu", "cuda"):
                raise ValueError(f"to(): unknown device {device!r}: expected 'cpu' or 'cuda'"
                                 f"\n  in: {user_source()}")
        out = self
        if dtype is not None and dtype != self.dtype:
            out = out.cast(dtype)
        if device is not None and device != out.device:
            from .creation import to_device
            _xp_for(device)          # a clear error when cupy (or a GPU) is missing
            out = to_device(out, device)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> "Tensor":
        """``cpu() -> Tensor``: this tensor on the CPU; ``self`` when it is already there. Same
        as ``to('cpu')`` (the result stays in the autograd graph)."""
        return self.to(device="cpu")

    def cuda(self) -> "Tensor":
        """``cuda() -> Tensor``: this tensor on the GPU (needs cupy and a GPU); ``self`` when it
        is already there. Same as ``to('cuda')``."""
        return self.to(device="cuda")

    def __dlpack__(self, *args, **kwargs):
        """The DLPack capsule of the data (no copy), as ``torch.from_dlpack``,
        ``np.from_dlpack``, ``cupy.from_dlpack`` and ``jax.dlpack`` read it; the arguments
        (``stream``, ``max_version``...) are passed to the array's own ``__dlpack__``.
        Refused for a tensor that requires grad, as PyTorch does: use ``.detach()``."""
        if self.requires_grad:
            raise RuntimeError("__dlpack__: cannot export a tensor that requires grad; use "
                               f"tensor.detach()\n  in: {user_source()}")
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        """(device type, device id) of the data, as DLPack defines them (1: CPU, 2: CUDA)."""
        return self.array.__dlpack_device__()

    def float(self) -> "Tensor":
        """``float() -> Tensor``: ``self.to(dg.float32)``; ``self`` when already float32."""
        return self.to("float32")

    def double(self) -> "Tensor":
        """``double() -> Tensor``: ``self.to(dg.float64)``; ``self`` when already float64."""
        return self.to("float64")

    def half(self) -> "Tensor":
        """``half() -> Tensor``: ``self.to(dg.float16)``; ``self`` when already float16."""
        return self.to("float16")

    def long(self) -> "Tensor":
        """``long() -> Tensor``: ``self.to(dg.int64)``; ``self`` when already int64."""
        return self.to("int64")

    def int(self) -> "Tensor":
        """``int() -> Tensor``: ``self.to(dg.int32)``; ``self`` when already int32."""
        return self.to("int32")

    def bool(self) -> "Tensor":
        """``bool() -> Tensor``: ``self.to(dg.bool)`` (nonzero is True); ``self`` when already
        bool."""
        return self.to("bool")

    def byte(self) -> "Tensor":
        """``byte() -> Tensor``: ``self.to(dg.uint8)``; ``self`` when already uint8."""
        return self.to("uint8")

    def short(self) -> "Tensor":
        """``short() -> Tensor``: ``self.to(dg.int16)``; ``self`` when already int16."""
        return self.to("int16")

    def new_tensor(self, data, dtype=None) -> "Tensor":
        """A new tensor holding a copy of ``data``, of this tensor's dtype unless given."""
        return tensor_from_data(data, dtype or self.dtype)

    def clone(self) -> "Tensor":
        """A copy that stays in the autograd graph."""
        from ..graphlib.functional import add, logical_not
        if dtypes.kind(self.dtype) == "b":
            return logical_not(logical_not(self))    # ops, so record() and compile see it
        return add(self, 0)

    def contiguous(self) -> "Tensor":
        """``contiguous() -> Tensor``: ``self``; duograph tensors have no user-visible strides,
        so every tensor is contiguous."""
        return self

    # -- autograd ------------------------------------------------------------------------------
    def detach(self) -> "Tensor":
        """The same data, cut from the autograd graph (shares memory and version counter)."""
        t = Tensor._wrap(self.array)
        t._version = self._version
        if _recorders:
            for rec in _own_recorders():
                rec._note_detach(t, self)
        return t

    def detach_(self) -> "Tensor":
        """``detach_() -> Tensor``: cut this tensor from the autograd graph in place (clears
        ``grad_fn`` and ``requires_grad``) and return it."""
        self.grad_fn = None
        self.requires_grad = False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """``requires_grad_(requires_grad=True) -> Tensor``: set ``requires_grad`` in place and
        return this tensor. Only floating-point tensors can require gradients, and a non-leaf
        tensor cannot be set to False (use ``detach()``); both raise RuntimeError."""
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use detach()")
        if requires_grad and not dtypes.is_float(self.dtype):
            raise RuntimeError(f"only floating-point tensors can require gradients, this one "
                               f"is {self.dtype}")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` of this non-leaf tensor after backward."""
        if not self.requires_grad:
            raise RuntimeError("retain_grad() on a tensor that does not require grad")
        self._retains_grad = True

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def register_hook(self, fn):
        """Call ``fn(grad)`` when this tensor's gradient is computed; a returned tensor
        replaces the gradient. Returns a handle with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("register_hook() on a tensor that does not require grad")
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(fn)
        return _HookHandle(self._hooks, fn)

    def register_post_accumulate_grad_hook(self, fn):
        """Call ``fn(self)`` once this leaf's ``.grad`` holds a backward's gradient, while
        the rest of that backward still runs. Returns a handle with ``remove()``."""
        from .autograd import register_post_accumulate_grad_hook
        return register_post_accumulate_grad_hook(self, fn)

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
        from .autograd import backward
        backward([self], None if gradient is None else [gradient], retain_graph,
                 create_graph, inputs)

    @property
    def version(self) -> int:
        return self._version[0]

    def bump_version(self) -> None:
        """Note that ``data`` was written in place (the state-holder protocol of
        ``graphlib.kernels``: executors call it after updating bound state), so autograd
        refuses gradients that saved the old values."""
        self._version[0] += 1

    # -- in-place ops ----------------------------------------------------------------------------
    def _inplace(self, fn, name: str, *others) -> "Tensor":
        """Compute ``fn(self)`` out of place, write it into this tensor's buffer, and take over
        its autograd history.

        When autograd records the op, it computes from a snapshot of the old data that keeps
        this tensor's place in the graph, so the node never reads the overwritten buffer.
        """
        tracked = grad_mode.is_grad_enabled() and (self.requires_grad or any(
            isinstance(o, Tensor) and o.requires_grad for o in others))
        if tracked and self.requires_grad and self.is_leaf:
            raise RuntimeError(f"{name}: a leaf tensor that requires grad is being used in an "
                               "in-place operation; wrap it in dg.no_grad() or use the "
                               f"out-of-place form\n  in: {user_source()}")
        if tracked and self.grad_fn is not None and self.grad_fn.op.view:
            raise RuntimeError(
                f"{name}: this tensor is a view ({self.grad_fn.op.name}) of another tensor "
                "that requires grad; an in-place change through a view would change the base "
                "tensor behind autograd's back. Use the out-of-place form, or .clone() the "
                f"view first\n  in: {user_source()}")
        src = self
        if tracked:
            src = Tensor._wrap(self.array.copy(), self.requires_grad)
            src.grad_fn, src._index = self.grad_fn, self._index
            if _recorders:
                for rec in _own_recorders():
                    rec._note_alias(src, self)
        result = fn(src)
        order = {"b": 0, "i": 1, "f": 2}
        if order[dtypes.kind(result.dtype)] > order[dtypes.kind(self.dtype)]:
            raise InplaceCastError(f"{name}: the result type {result.dtype} can't be cast to this "
                             f"tensor's dtype {self.dtype} in place (as in PyTorch); use the "
                             f"out-of-place form\n  in: {user_source()}")
        if tuple(result.shape) != tuple(self.shape):
            raise ShapeError(f"{name}: the result has shape {list(result.shape)}, which does "
                             f"not fit this tensor's shape {list(self.shape)}")
        xp = _xp_for(self.device)
        xp.copyto(self.array, result.array, casting="unsafe")
        self._version[0] += 1
        if _recorders:
            for rec in _own_recorders():
                rec._note_inplace(self, result)
        if result.grad_fn is not None:
            result.grad_fn._rebind(result._index, self)
            self.grad_fn, self._index = result.grad_fn, result._index
            self.requires_grad = True
        return self

    def add_(self, other, alpha=1):
        """``add_(other, alpha=1) -> Tensor``: ``self += alpha * other``. In place: the result is
        written into this tensor's buffer and the tensor is returned (autograd records it; a
        leaf that requires grad is refused while grad mode is on, and a result that would need
        a wider dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import add
        other = other if alpha == 1 else other * alpha
        return self._inplace(lambda s: add(s, other), "add_", other)

    def sub_(self, other, alpha=1):
        """``sub_(other, alpha=1) -> Tensor``: ``self -= alpha * other``; ``subtract_`` is an
        alias. In place: the result is written into this tensor's buffer and the tensor is
        returned (autograd records it; a leaf that requires grad is refused while grad mode is
        on, and a result that would need a wider dtype, e.g. float into an int tensor,
        raises)."""
        from ..graphlib.functional import sub
        other = other if alpha == 1 else other * alpha
        return self._inplace(lambda s: sub(s, other), "sub_", other)

    def mul_(self, other):
        """``mul_(other) -> Tensor``: ``self *= other``; ``multiply_`` is an alias. In place: the
        result is written into this tensor's buffer and the tensor is returned (autograd
        records it; a leaf that requires grad is refused while grad mode is on, and a result
        that would need a wider dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import mul
        return self._inplace(lambda s: mul(s, other), "mul_", other)

    def div_(self, other):
        """``div_(other) -> Tensor``: ``self /= other`` (true division, so an integer tensor
        raises); ``divide_`` and ``true_divide_`` are aliases. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import div
        return self._inplace(lambda s: div(s, other), "div_", other)

    def pow_(self, exponent):
        """``pow_(exponent) -> Tensor``: ``self **= exponent``. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import pow
        return self._inplace(lambda s: pow(s, exponent), "pow_", exponent)

    def clamp_(self, min=None, max=None):
        """``clamp_(min=None, max=None) -> Tensor``: every element clamped into [min, max];
        ``clip_`` is an alias. In place: the result is written into this tensor's buffer and
        the tensor is returned (autograd records it; a leaf that requires grad is refused
        while grad mode is on, and a result that would need a wider dtype, e.g. float into an
        int tensor, raises)."""
        from ..graphlib.functional import clamp
        return self._inplace(lambda s: clamp(s, min, max), "clamp_")

    clip_ = clamp_

    def neg_(self):
        """``neg_() -> Tensor``: ``self = -self``; ``negative_`` is an alias. In place: the
        result is written into this tensor's buffer and the tensor is returned (autograd
        records it; a leaf that requires grad is refused while grad mode is on, and a result
        that would need a wider dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(lambda s: -s, "neg_")

    def relu_(self):
        """``relu_() -> Tensor``: negative elements set to 0. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import relu
        return self._inplace(relu, "relu_")

    def exp_(self):
        """``exp_() -> Tensor``: the elementwise exponential. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import exp
        return self._inplace(exp, "exp_")

    def sqrt_(self):
        """``sqrt_() -> Tensor``: the elementwise square root. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        from ..graphlib.functional import sqrt
        return self._inplace(sqrt, "sqrt_")

    def zero_(self):
        """``zero_() -> Tensor``: fill with zeros in place and return this tensor (``fill_(0)``)."""
        return self.fill_(0)

    def fill_(self, value):
        """``fill_(value) -> Tensor``: every element set to ``value`` (a number or a one-element
        tensor). In place: the result is written into this tensor's buffer and the tensor is
        returned (autograd records it; a leaf that requires grad is refused while grad mode is
        on, and a result that would need a wider dtype, e.g. float into an int tensor,
        raises)."""
        from ..graphlib.functional import full_like
        if isinstance(value, Tensor):
            value = value.item()
        with grad_mode.no_grad():
            filled = full_like(self, value)
        return self._inplace(lambda s: filled, "fill_")

    def copy_(self, src):
        """``copy_(src) -> Tensor``: the elements of ``src`` (a tensor or array-like, cast to
        this tensor's dtype, moved to its device and broadcast to its shape) copied in; the
        gradient flows to ``src``. In place: the result is written into this tensor's buffer
        and the tensor is returned (autograd records it; a leaf that requires grad is refused
        while grad mode is on, and a result that would need a wider dtype, e.g. float into an
        int tensor, raises)."""
        from ..graphlib.functional import cast, expand
        if not isinstance(src, Tensor):
            src = tensor_from_data(src, self.dtype, self.device)
        if src.device != self.device:
            src = src.to(device=self.device)

        def moved(_):
            out = src
            if out.dtype != self.dtype:
                out = cast(out, self.dtype)
            if tuple(out.shape) != tuple(self.shape):
                out = expand(out, *self.shape)
            if out is src and src.requires_grad:
                out = src + 0      # a node of its own, so this tensor gets its history
            return out
        return self._inplace(moved, "copy_", src)

    # more in-place forms: the out-of-place op, written back (see _inplace) ----------------
    def _inplace_op(self, name: str, fn, *args, **kwargs) -> "Tensor":
        others = args + tuple(kwargs.values())
        return self._inplace(lambda s: fn(s, *args, **kwargs), name, *others)

    def masked_fill_(self, mask, value):
        """In place: ``value`` where ``mask`` holds."""
        return self._inplace(lambda s: s.masked_fill(mask, value), "masked_fill_", value)

    def clamp_min_(self, min):
        """In place: ``clamp(min=min)``."""
        return self.clamp_(min=min)

    def clamp_max_(self, max):
        """In place: ``clamp(max=max)``."""
        return self.clamp_(max=max)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        """In place: ``self + value * tensor1 * tensor2``."""
        return self._inplace(lambda s: s + tensor1 * tensor2 * value, "addcmul_", tensor1,
                             tensor2)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        """In place: ``self + value * tensor1 / tensor2``."""
        return self._inplace(lambda s: s + tensor1 / tensor2 * value, "addcdiv_", tensor1,
                             tensor2)

    def lerp_(self, end, weight):
        """In place: ``lerp(self, end, weight)``."""
        from ..graphlib.functional import lerp
        return self._inplace_op("lerp_", lerp, end, weight)

    def round_(self, decimals=0):
        """In place: ``round(self, decimals)``."""
        from ..graphlib.functional import round
        return self._inplace_op("round_", round, decimals=decimals)

    def nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
        """In place: ``nan_to_num(self, nan, posinf, neginf)``."""
        from ..graphlib.functional import nan_to_num
        return self._inplace_op("nan_to_num_", nan_to_num, nan, posinf, neginf)

    # -- in-place random fills (the global generator, dg.manual_seed; or generator=) ---------
    def _random_fill(self, name: str, draw, generator, floats_only: bool = True):
        if floats_only and not dtypes.is_float(self.dtype):
            raise DTypeError(f"{name}: expected a floating-point tensor (as in PyTorch), "
                             f"found {self.dtype}\n  in: {user_source()}")
        seed = _generator_seed(generator, name)
        with grad_mode.no_grad():
            values = draw(seed)
            if values.device != self.device:
                values = values.to(device=self.device)
        return self._inplace(lambda s: values, name)

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        """Fill with samples of N(mean, std**2), as ``torch.Tensor.normal_``."""
        from ..graphlib import functional as F
        if not std >= 0:
            raise ValueError(f"normal_: expected std >= 0, found {std}\n  in: {user_source()}")
        return self._random_fill("normal_", lambda seed: F.normal(
            *self.shape, seed=seed, mean=float(mean), std=float(std), dtype=self.dtype),
            generator)

    def uniform_(self, *args, generator=None, **kwargs):
        """Fill with samples uniform in [from, to) (default [0, 1)), as
        ``torch.Tensor.uniform_(from=0, to=1)``."""
        from ..graphlib import functional as F
        low, high = _from_to("uniform_", args, kwargs, 0.0, 1.0)
        if not low <= high:
            raise ValueError(f"uniform_: expected a [from, to) range with from <= to, found "
                             f"from={low}, to={high}\n  in: {user_source()}")
        return self._random_fill("uniform_", lambda seed: F.uniform(
            *self.shape, seed=seed, low=float(low), high=float(high), dtype=self.dtype),
            generator)

    def exponential_(self, lambd=1.0, *, generator=None):
        """Fill with samples of the exponential distribution of rate ``lambd`` (density
        lambd * exp(-lambd * x)), as ``torch.Tensor.exponential_``."""
        from ..graphlib import functional as F
        if not lambd > 0:
            raise ValueError(f"exponential_: expected lambd > 0, found {lambd}"
                             f"\n  in: {user_source()}")

        def draw(seed):
            u = F.uniform(*self.shape, seed=seed, dtype="float64")
            return F.cast(-F.log1p(-u) / float(lambd), self.dtype)
        return self._random_fill("exponential_", draw, generator)

    def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
        """Fill with exp(N(mean, std**2)) samples, as ``torch.Tensor.log_normal_``."""
        from ..graphlib import functional as F
        if not std > 0:
            raise ValueError(f"log_normal_: expected std > 0, found {std}"
                             f"\n  in: {user_source()}")
        return self._random_fill("log_normal_", lambda seed: F.cast(F.exp(F.normal(
            *self.shape, seed=seed, mean=float(mean), std=float(std), dtype="float64")),
            self.dtype), generator)

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with 1 (probability ``p``, a number or a tensor) or 0, in this tensor's
        dtype, as ``torch.Tensor.bernoulli_``."""
        from ..graphlib import functional as F
        if isinstance(p, Tensor):
            probs = p
        else:
            if not 0 <= p <= 1:
                raise ValueError(f"bernoulli_: expected p in [0, 1], found {p}"
                                 f"\n  in: {user_source()}")
            probs = None

        def draw(seed):
            q = F.full(self.shape, float(p), dtype="float64") if probs is None else \
                F.expand(F.cast(probs, "float64"), *self.shape)
            return F.cast(F.bernoulli(q, seed=seed), self.dtype)
        return self._random_fill("bernoulli_", draw, generator, floats_only=False)

    def random_(self, *args, generator=None, **kwargs):
        """Fill with integers uniform in [from, to - 1], as ``torch.Tensor.random_``:
        ``random_(to)`` draws from [0, to); ``random_()`` from [0, 2**mantissa] for floats
        (2**24 for float32) and [0, max] for integers ([0, 2**63 - 2] for int64)."""
        from ..graphlib import functional as F
        low, high = _from_to("random_", args, kwargs, 0, None)
        if high is None and len(args) + len(kwargs) == 1:
            low, high = 0, low
        if high is None:
            if self.dtype == "bool":
                high = 2
            elif dtypes.is_float(self.dtype):
                high = 2 ** {"float16": 11, "bfloat16": 8, "float32": 24,
                             "float64": 53}[self.dtype] + 1
            else:      # int64: [0, 2**63 - 2] (the draw's exclusive bound must fit int64)
                high = min(int(np.iinfo(self.dtype).max) + 1, 2 ** 63 - 1)
        low, high = int(low), int(high)
        if low >= high:
            raise ValueError(f"random_: expected from < to, found from={low}, to={high}"
                             f"\n  in: {user_source()}")
        if not dtypes.is_float(self.dtype):
            lo, hi = (0, 1) if self.dtype == "bool" else (
                int(np.iinfo(self.dtype).min), int(np.iinfo(self.dtype).max))
            if low < lo or high - 1 > hi:
                raise ValueError(f"random_: [{low}, {high - 1}] is out of bounds for "
                                 f"{self.dtype}\n  in: {user_source()}")

        if high > 2 ** 63 - 1:
            raise ValueError(f"random_: to={high} exceeds the int64 range\n  in: {user_source()}")

        def draw(seed):
            return F.cast(F.randint(low, high, tuple(self.shape), seed=seed, dtype="int64"),
                          self.dtype)
        return self._random_fill("random_", draw, generator, floats_only=False)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __setitem__(self, index, value):
        """``t[index] = value`` as PyTorch: basic indices (ints, slices, None, ...), integer
        tensors and lists in any position (the last write wins where they repeat a place),
        and bool masks. Under autograd or ``record()`` it is an in-place op built from
        ``index_put``, ``where`` and ``getitem_grad``, so gradients and recorded graphs see
        it."""
        from ..graphlib.ops.shape import _is_advanced
        tracked = grad_mode.is_grad_enabled() and (self.requires_grad or (
            isinstance(value, Tensor) and value.requires_grad))
        if not tracked and not _recorders:
            if isinstance(value, Tensor):
                if value.device != self.device:
                    value = value.to(device=self.device)
                value = value.array
            if _is_advanced(index):
                from ..graphlib.ops.indexing import write_in_place
                write_in_place(self, self.array, _xp_for(self.device), index, value)
            else:
                self.array[index] = value
            self._version[0] += 1
            return
        from ..graphlib.ops.indexing import index_assign
        self._inplace(lambda s: index_assign(s, index, value), "__setitem__", value)

    def _inplace_named(self, name: str, fn: str, *args, **kwargs) -> "Tensor":
        """``_inplace_op`` with the op function named (``"scatter"``), not given."""
        from ..graphlib import functional as F
        return self._inplace_op(name, getattr(F, fn), *args, **kwargs)

    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        """In-place ``scatter``."""
        return self._inplace_named("scatter_", "scatter", dim, index, src, value, reduce=reduce)

    def scatter_add_(self, dim, index, src):
        """In-place ``scatter_add``."""
        return self._inplace_named("scatter_add_", "scatter_add", dim, index, src)

    def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
        """In-place ``scatter_reduce``."""
        return self._inplace_named("scatter_reduce_", "scatter_reduce", dim, index, src,
                                reduce, include_self=include_self)

    def index_add_(self, dim, index, source, *, alpha=1):
        """In-place ``index_add``."""
        return self._inplace_named("index_add_", "index_add", dim, index, source, alpha=alpha)

    def index_copy_(self, dim, index, source):
        """In-place ``index_copy``."""
        return self._inplace_named("index_copy_", "index_copy", dim, index, source)

    def index_fill_(self, dim, index, value):
        """In-place ``index_fill``."""
        return self._inplace_named("index_fill_", "index_fill", dim, index, value)

    def index_put_(self, indices, values, accumulate=False):
        """In-place ``index_put``: ``self[indices] = values`` (``+=`` when ``accumulate``)."""
        return self._inplace_named("index_put_", "index_put", indices, values, accumulate)

    def masked_scatter_(self, mask, source):
        """In-place ``masked_scatter``."""
        return self._inplace_named("masked_scatter_", "masked_scatter", mask, source)

    def any(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Whether any element is nonzero (along ``dim``). Built from ops, so a Python
        decision on it (``if t.any():``) is seen by ``record()`` and guarded by compile."""
        return _count_true(self, dim, keepdim) > 0

    def all(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Whether every element is nonzero (along ``dim``)."""
        from ..graphlib.functional import logical_not
        return _count_true(logical_not(_as_bool(self)), dim, keepdim) == 0


def _from_to(name: str, args, kwargs, low, high):
    """PyTorch's ``(from, to)`` arguments (``from`` is a Python keyword: pass them by
    position, or as from_=/to=, or from=... through **kwargs)."""
    if len(args) > 2:
        raise TypeError(f"{name}: expected at most (from, to), found {len(args)} arguments")
    vals = list(args) + [None] * (2 - len(args))
    for key, i in (("from", 0), ("from_", 0), ("to", 1)):
        if key in kwargs:
            vals[i] = kwargs.pop(key)
    if kwargs:
        raise TypeError(f"{name}: unexpected arguments {sorted(kwargs)}")
    return (low if vals[0] is None else vals[0]), (high if vals[1] is None else vals[1])


def _generator_seed(generator, name: str):
    """The seed an in-place random fill uses: None (the global generator, dg.manual_seed),
    an int seed, or a numpy Generator (one seed drawn from it)."""
    if generator is None:
        return None
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return int(generator)
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(0, 2 ** 63 - 1))
    raise TypeError(f"{name}: generator must be None, an int seed or a numpy Generator, "
                    f"found {type(generator).__name__}")


def _add_inplace_forms():
    """``t.abs_()``, ``t.fmod_(2)``..., ``t %= 2``...: the out-of-place op written back."""
    from ..graphlib import functional as F
    unary = ("abs", "sigmoid", "tanh", "log", "log1p", "log2", "log10", "expm1", "exp2",
             "floor", "ceil", "trunc", "frac", "sign", "square", "reciprocal", "rsqrt", "sin",
             "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
             "erf", "bitwise_not")
    binary = ("fmod", "remainder", "floor_divide", "atan2", "hypot", "xlogy", "bitwise_and",
              "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift")
    for name in unary + binary:
        if hasattr(Tensor, name + "_"):
            continue

        def method(self, *args, _fn=getattr(F, name), _name=name + "_"):
            return self._inplace_op(_name, _fn, *args)
        method.__name__ = method.__qualname__ = name + "_"
        method.__doc__ = f"In place: ``{name}(self, ...)`` written into this tensor."
        setattr(Tensor, name + "_", method)
    aliases = {"fix_": "trunc_", "arcsin_": "asin_", "arccos_": "acos_", "arctan_": "atan_",
               "arcsinh_": "asinh_", "arccosh_": "acosh_", "arctanh_": "atanh_",
               "arctan2_": "atan2_", "clip_": "clamp_", "negative_": "neg_",
               "absolute_": "abs_", "true_divide_": "div_", "multiply_": "mul_",
               "subtract_": "sub_", "divide_": "div_"}
    for alias, name in aliases.items():
        if not hasattr(Tensor, alias):
            setattr(Tensor, alias, getattr(Tensor, name))
    dunders = {"__imod__": "remainder_", "__ifloordiv__": "floor_divide_",
               "__ipow__": "pow_", "__iand__": "bitwise_and_", "__ior__": "bitwise_or_",
               "__ixor__": "bitwise_xor_", "__ilshift__": "bitwise_left_shift_",
               "__irshift__": "bitwise_right_shift_"}
    for dunder, name in dunders.items():
        setattr(Tensor, dunder, getattr(Tensor, name))


_add_inplace_forms()


def _as_bool(t: Tensor):
    from ..graphlib.functional import cast
    return t if t.dtype == "bool" else cast(t, "bool")


def _count_true(t: Tensor, dim, keepdim: bool):
    from ..graphlib.functional import cast, sum
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return cast(_as_bool(t), "int64")    # PyTorch: any/all over dim=() are elementwise
    return sum(cast(_as_bool(t), "int64"), dim, keepdim)


def host_array(t: Tensor) -> np.ndarray:
    """``t``'s data as a numpy array (copied from the GPU), without noting a decision."""
    return t.array if type(t.array) is np.ndarray else t.array.get()


def _note_data(t: Tensor, kind: str, arr=None) -> None:
    """Tell an open compile() recording that Python read this tensor's data (a guard)."""
    from .guards import note_decision, tracing
    if tracing():
        note_decision(t, "data", np.array(host_array(t) if arr is None else arr, copy=True),
                      f"{kind}()")


class Parameter(Tensor):
    """A tensor that is a module's learnable parameter (requires grad by default).

    Assigning one to a Module attribute registers it; in graph mode it becomes a state input
    bound to this very object, so running the graph updates it in place.
    """

    __slots__ = ()

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = np.zeros((0,), dtype=np.float32)
        if isinstance(data, Tensor):
            data = data.array
        elif not hasattr(data, "dtype"):
            data = np.asarray(data, dtype=dtypes.infer_data_dtype(data))
        _init(self, data, False)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class SeedTensor(Tensor):
    """An int64 scalar seed drawn from eager mode's global generator for a random op.

    ``record()`` makes it a graph input (``seed0``...) rather than a constant, so that
    ``compile`` can feed a fresh draw on every call instead of replaying the same numbers.
    """

    __slots__ = ()

    def __init__(self, data):
        _init(self, data, False)

    def __int__(self):
        return int(self.array)

    __index__ = __int__


class _HookHandle:
    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


class EagerNode(Node):
    """An IR node recorded by eager execution.

    Its inputs are the tensors themselves (saved for backward). Outputs are held weakly (a
    node referencing its outputs strongly would make every result a reference cycle); a dead
    output is rebuilt from its saved array when a vjp rule needs it. ``input_keys`` and
    ``next_nodes`` capture where each input came from when the node was made, so a later
    in-place op on an input does not reroute gradients.
    """

    # a plain ``inputs`` slot (no use lists: a tape node is never placed in a graph)
    __slots__ = ("inputs", "_out_refs", "_out_data", "input_keys", "next_nodes",
                 "saved_versions", "freed", "for_grad", "n_outputs")
    graph = None

    def __init__(self, op, inputs, attrs, outputs, source, for_grad):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.source = source
        self.for_grad = for_grad
        self.freed = False
        if len(outputs) == 1:
            o = outputs[0]
            self._out_refs = (_weakref(o),)
            self._out_data = (o.array,)
            self.n_outputs = 1
        else:
            self._out_refs = tuple([_weakref(o) for o in outputs])
            self._out_data = tuple([o.array for o in outputs])
            self.n_outputs = len(outputs)
        if len(inputs) == 2:        # (the general loop below, unrolled for binary ops)
            x, y = inputs
            fx, fy = x.grad_fn, y.grad_fn
            self.input_keys = (x if fx is None else (fx, x._index),
                               y if fy is None else (fy, y._index))
            self.next_nodes = (fx, fy)
        else:
            self.input_keys, self.next_nodes = _input_links(inputs)
        # a view's gradient path assumes its base is unchanged: views save versions too
        # (the op's traits: ``view``, ``saves_no_data``, ``vjp_reads_output``)
        if for_grad and (not op.saves_no_data or op.view):
            saved = [x._version[0] for x in inputs]
            if op.vjp_reads_output:
                saved += [o._version[0] for o in outputs]
            self.saved_versions = tuple(saved)
        else:
            self.saved_versions = None

    @property
    def outputs(self):
        refs = self._out_refs
        if len(refs) == 1:
            t = refs[0]()
            if t is not None:
                return (t,)
        outs = []
        for i, ref in enumerate(self._out_refs):
            t = ref()
            if t is None:
                t = Tensor._wrap(self._out_data[i], True)
                t.grad_fn, t._index = self, i
            outs.append(t)
        return tuple(outs)

    @outputs.setter
    def outputs(self, value):
        raise AttributeError("the outputs of an eager node are fixed when it is recorded")

    def output_tensor(self, i: int):
        """The live output tensor ``i`` (None when the user dropped it)."""
        return self._out_refs[i]()

    def _rebind(self, i: int, tensor: "Tensor") -> None:
        refs = list(self._out_refs)
        refs[i] = weakref.ref(tensor)
        self._out_refs = tuple(refs)
        data = list(self._out_data)
        data[i] = tensor.array
        self._out_data = tuple(data)
        # an in-place op's result now lives in ``tensor`` (at its new version): a vjp that
        # reads this output (``vjp_reads_output``) reads exactly that
        saved = self.saved_versions
        if saved is not None and len(saved) > len(self.inputs) + i:
            saved = list(saved)
            saved[len(self.inputs) + i] = tensor._version[0]
            self.saved_versions = tuple(saved)

    def release(self) -> None:
        """Free the saved tensors (after a backward without retain_graph)."""
        self.freed = True
        self.inputs = ()
        self._out_data = ()

    def __repr__(self):
        return f"<EagerNode {self.op.name}>"


# -- execution -------------------------------------------------------------------------------
_infer_cache: dict = {}
_INFER_CACHE_LIMIT = 8192


_DTYPE_NAMES = {np.dtype(n): n for n in dtypes.DTYPE_NAMES}


def dtype_name(dt) -> str:
    """duograph name of a numpy (or cupy) dtype, without numpy's slow ``dtype.name``."""
    name = _DTYPE_NAMES.get(dt)
    return name if name is not None else dt.name


def _infer(op, in_sig, attrs):
    """(output types, their numpy dtypes) for ``op`` on inputs ``in_sig`` ((shape, dtype)
    pairs), cached per signature."""
    key = (op, in_sig, tuple(attrs.items()))
    try:
        hit = _infer_cache.get(key)
    except TypeError:        # an unhashable attribute: infer without caching
        hit, key = None, None
    if hit is not None:
        return hit
    if REGISTRY.get(op.name) is not op:
        key = None           # one-off ops (custom Functions) are never cached
    try:
        out = tuple(op.infer([TensorType(s, dtype_name(d)) for s, d in in_sig], attrs))
    except (DuographError, TypeError, ValueError) as e:
        cls = type(e) if isinstance(e, DuographError) else (
            DTypeError if isinstance(e, TypeError) else ShapeError)
        msg = str(e)
        if not msg.startswith(op.name):
            msg = f"{op.name}: {msg}"
        raise cls(f"{msg}\n  in: {user_source()}") from None
    hit = (out, tuple(np.dtype(t.dtype) for t in out))
    if key is not None:
        if len(_infer_cache) > _INFER_CACHE_LIMIT:
            _infer_cache.clear()
        _infer_cache[key] = hit
    return hit


# Open record() blocks of every thread (innermost last). The hot paths only ask whether it
# is empty; what records an op takes this thread's blocks alone (``_own_recorders``), so a
# block never captures another thread's ops (grad mode is per thread for the same reason).
_recorders: list = []


def _own_recorders() -> list:
    """This thread's open record() blocks, innermost last."""
    me = _get_ident()
    return [r for r in _recorders if r._thread == me]
_TO_DEVICE = REGISTRY["to_device"]
_CONSTANT = REGISTRY["constant"]
# Constants made on the default CPU device (what composite op functions build their masks and
# index tables with: ``constant(np.tri(...))``) follow the device of the tensors they meet.
# By identity (id -> weak reference): tensors compare elementwise, so no WeakSet.
_floating: dict = {}


def _float_constant(t) -> None:
    key = id(t)
    _floating[key] = weakref.ref(t, lambda _, key=key: _floating.pop(key, None))


def _is_floating(t) -> bool:
    ref = _floating.get(id(t))
    return ref is not None and ref() is t


def _wrap(data) -> Tensor:
    """``Tensor._wrap(data)`` inlined for the eager hot path."""
    t = _new(Tensor)
    t.array = data
    t.requires_grad = False
    t.grad = None
    t.grad_fn = None
    t._index = 0
    t._version = [0]
    t._hooks = None
    t._retains_grad = False
    return t


_scalar_cache: dict = {}
_FLOAT_NP = dtypes.FLOAT_NP


def _scalar_key(value, dtype: str, device: str) -> tuple:
    """The scalar cache's key: by value, except that a float zero also keys its sign (0.0 ==
    -0.0, but ``t / -0.0`` is not ``t / 0.0``). NaNs need nothing: a NaN key only finds
    the same float object, so the same payload."""
    if value or not isinstance(value, float):
        return (type(value), value, dtype, device)
    return (type(value), value, dtype, device, math.copysign(1.0, value))


def _as_tensor(x, device: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, Scalar):
        key = _scalar_key(x.value, x.dtype, device)
        t = _scalar_cache.get(key)
        if t is None:
            arr = _xp_for(device).asarray(x.value, dtype=x.dtype)
            if device == "cpu":
                arr.flags.writeable = False
            t = _wrap(arr)
            if len(_scalar_cache) > 4096:
                _scalar_cache.clear()
            _scalar_cache[key] = t
        return t
    if isinstance(x, (np.ndarray, np.generic)):
        arr = np.asarray(x)
        if arr.dtype.name not in dtypes.DTYPE_NAMES:
            arr = arr.astype(dtypes.infer_data_dtype(arr))
        return _wrap(_xp_for(device).asarray(arr))
    if isinstance(x, (list, tuple)):
        return _wrap(_xp_for(device).asarray(np.asarray(x, dtype=dtypes.infer_data_dtype(x))))
    raise TypeError(f"expected each operand to be a tensor, array, number or list of numbers, "
                    f"found {type(x).__name__}")


_default_device = ["cpu"]


def _prepare(op, inputs):
    """Slow path of eager_apply: convert numbers/arrays, check devices."""
    device = None
    mixed = False
    for x in inputs:
        if type(x) is Tensor or isinstance(x, Tensor):
            if type(x) is SeedTensor:
                continue        # a host seed: the other inputs (or the default) decide
            d = _device_of(x.array)
            if device is None:
                device = d
            elif d != device:
                mixed = True
    if mixed:
        inputs, device = _join_devices(op, inputs)
    device = device or _default_device[-1]
    try:
        return tuple(_as_tensor(x, device) for x in inputs), device
    except TypeError as e:
        raise TypeError(f"{op.name}: {e}\n  in: {user_source()}") from None


_plans: dict = {}        # (op, shape, dtype, ..., [attrs]) -> _plan(): the fast path's cache
_PLAN_LIMIT = 8192
_FLOAT_NP = dtypes.FLOAT_NP


def _plan(op, raw, in_dtypes, out_dtypes) -> tuple:
    """What the fast path needs to run one registered op on CPU arrays of one signature:
    ``(raw, kernel, out_dtypes, dtype0, diff, view, float_out, saves)``: the backend kernel
    it was made for (one registered later makes the plan stale), the kernel to call
    (``raw`` itself, or what it wraps when its casts do nothing for these dtypes), the
    inferred output dtypes, the one output's dtype (None for a multi-output op), which
    inputs can carry a gradient (None: the op has no vjp), whether the op is a view,
    whether its one output is floating point (can require grad) and what its tape node
    saves."""
    kernel = direct_kernel(raw, [dtype_name(d) for d in in_dtypes])
    nondiff = op.nondiff_inputs
    diff = None if op.vjp is None else tuple(
        i for i in range(len(in_dtypes)) if i not in nondiff)
    dtype0 = None if op.multi_output else out_dtypes[0]
    # what a tape node of this call saves (EagerNode.__init__'s rule): 0 nothing, 1 the
    # inputs' versions, 2 the outputs' too
    saves = 0 if op.saves_no_data and not op.view else (2 if op.vjp_reads_output else 1)
    return (raw, kernel, out_dtypes, dtype0, diff, bool(op.view),
            dtype0 is not None and dtype0 in _FLOAT_NP, saves)


def eager_apply(op, inputs, attrs):
    """Run ``op`` at once on tensors; record a node when autograd or record() needs one.

    The fast path: CPU tensors (and cached scalars) whose signature has a plan (``_plan``); anything
    else (first call of a signature, other devices, random ops, unhashable attributes, new
    scalars) takes ``_eager_apply_slow``, which makes the plan."""
    tensors = inputs
    arrays = None
    n = len(inputs)
    if n == 2:          # the common cases first, without the general loop's lists
        x, y = inputs
        tx, ty = type(x), type(y)
        if (tx is Tensor or tx is Parameter) and (ty is Tensor or ty is Parameter):
            a, b = x.array, y.array
            if type(a) is _ndarray and type(b) is _ndarray:
                arrays = (a, b)
                key = (op, a.shape, a.dtype, b.shape, b.dtype)
        elif ty is Scalar and (tx is Tensor or tx is Parameter):      # tensor <op> number
            v = y.value
            if v or not isinstance(v, float):
                t = _scalar_cache.get((type(v), v, y.dtype, "cpu"))
                a = x.array
                if t is not None and type(a) is _ndarray:
                    b = t.array
                    tensors = (x, t)
                    arrays = (a, b)
                    key = (op, a.shape, a.dtype, b.shape, b.dtype)
        elif tx is Scalar and (ty is Tensor or ty is Parameter):      # number <op> tensor
            v = x.value
            if v or not isinstance(v, float):
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu"))
                b = y.array
                if t is not None and type(b) is _ndarray:
                    a = t.array
                    tensors = (t, y)
                    arrays = (a, b)
                    key = (op, a.shape, a.dtype, b.shape, b.dtype)
    elif n == 1:
        x = inputs[0]
        tx = type(x)
        if tx is Tensor or tx is Parameter:
            if not attrs:
                return _apply1(op, x)
            a = x.array
            if type(a) is _ndarray:
                arrays = (a,)
                key = (op, a.shape, a.dtype)
    if arrays is None:
        arrays = []
        sig = [op]
        for x in inputs:
            tx = type(x)
            if tx is Tensor or tx is Parameter:
                a = x.array
            elif tx is Scalar:
                v = x.value     # (_scalar_key inlined for the common nonzero case)
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu") if v or not isinstance(
                    v, float) else _scalar_key(v, x.dtype, "cpu"))
                if t is None:
                    return _eager_apply_slow(op, inputs, attrs)
                if tensors is inputs:
                    tensors = list(inputs)
                tensors[len(arrays)] = t
                a = t.array
            else:
                return _eager_apply_slow(op, inputs, attrs)
            if type(a) is not _ndarray:
                return _eager_apply_slow(op, inputs, attrs)
            arrays.append(a)
            sig.append(a.shape)
            sig.append(a.dtype)
        key = tuple(sig)
    if attrs:
        try:
            plan = _plans.get((*key, tuple(attrs.items())))
        except TypeError:
            plan = None
    else:
        plan = _plans.get(key)
    if plan is None:
        return _eager_apply_slow(op, inputs, attrs)
    raw, kernel, out_dtypes, dtype0, diff, view, float_out, saves = plan
    if raw is not _cpu_kernels[op]:
        return _eager_apply_slow(op, inputs, attrs)
    if dtype0 is None:                   # a multi-output op
        return _apply_multi(op, inputs, tensors, arrays, attrs, plan)
    try:
        res = kernel(np, *arrays, **attrs) if attrs else kernel(np, *arrays)
        if type(res) is not _ndarray:
            res = np.asarray(res)
        rd = res.dtype
        if rd is not dtype0 and rd != dtype0:
            res = res.astype(dtype0)
    except DuographError:
        raise
    except Exception as e:
        raise _kernel_failure(op, arrays, e) from e
    out = _new(Tensor)      # _wrap(res), inlined
    out.array = res
    out.requires_grad = False
    out.grad = None
    out.grad_fn = None
    out._index = 0
    out._version = tensors[0]._version if view else [0]
    out._hooks = None
    out._retains_grad = False
    if diff is not None and _state.enabled:
        for i in diff:
            if tensors[i].requires_grad:
                if _recorders:
                    break
                _tape(op, tuple(tensors), attrs, out, res, float_out, saves)
                return out
        else:
            if _recorders:
                _record(op, inputs, tuple(tensors), attrs, (out,), False)
            return out
        _record(op, inputs, tuple(tensors), attrs, (out,), True)
    elif _recorders:
        _record(op, inputs, tuple(tensors), attrs, (out,), False)
    return out


def _input_links(inputs) -> tuple:
    """A tape node's ``(input_keys, next_nodes)`` for any number of inputs: a key is the
    producing node and output index, or the leaf tensor itself (one- and two-input nodes
    unroll this on the hot path)."""
    keys, nexts = [], []
    for x in inputs:
        fn = x.grad_fn
        if fn is not None:
            keys.append((fn, x._index))
            nexts.append(fn)
        else:
            keys.append(x)
            nexts.append(None)
    return tuple(keys), tuple(nexts)


def _tape(op, tensors, attrs, out, res, float_out, saves):
    """``_record`` of one single-output call for autograd outside ``record()`` blocks, with
    ``EagerNode.__init__`` inlined (the same fields, the same values)."""
    node = _new(EagerNode)
    node.op = op
    node.inputs = tensors
    node.attrs = attrs
    node.source = user_source() if _config.capture_source else None
    node.for_grad = True
    node.freed = False
    node._out_refs = (_weakref(out),)
    node._out_data = (res,)
    node.n_outputs = 1
    if len(tensors) == 2:
        x, y = tensors
        fx, fy = x.grad_fn, y.grad_fn
        node.input_keys = (x if fx is None else (fx, x._index),
                           y if fy is None else (fy, y._index))
        node.next_nodes = (fx, fy)
        if saves:
            node.saved_versions = ((x._version[0], y._version[0]) if saves == 1 else
                                   (x._version[0], y._version[0], out._version[0]))
        else:
            node.saved_versions = None
    elif len(tensors) == 1:
        x = tensors[0]
        fx = x.grad_fn
        node.input_keys = (x if fx is None else (fx, x._index),)
        node.next_nodes = (fx,)
        if saves:
            node.saved_versions = ((x._version[0],) if saves == 1 else
                                   (x._version[0], out._version[0]))
        else:
            node.saved_versions = None
    else:
        node.input_keys, node.next_nodes = _input_links(tensors)
        if saves:
            saved = [x._version[0] for x in tensors]
            if saves == 2:
                saved.append(out._version[0])
            node.saved_versions = tuple(saved)
        else:
            node.saved_versions = None
    if float_out:
        out.requires_grad = True
        out.grad_fn = node


def _apply_multi(op, inputs, tensors, arrays, attrs, plan):
    """eager_apply's fast path for a multi-output op (always returns a tuple)."""
    raw, kernel, out_dtypes, dtype0, diff = plan[:5]
    try:
        res = run_kernel(kernel, np, arrays, attrs, True, out_dtypes)
    except DuographError:
        raise
    except Exception as e:
        raise _kernel_failure(op, arrays, e) from e
    outs = [_wrap(r) for r in res]
    if op.view:
        shared = tensors[0]._version
        for o in outs:
            o._version = shared
    grad = False
    if diff is not None and _grad_enabled():
        for i in diff:
            if tensors[i].requires_grad:
                grad = True
                break
    if grad or _recorders:
        _record(op, inputs, tuple(tensors), attrs, outs, grad)
    return tuple(outs)


def _kernel_failure(op, arrays, e):
    from ..graphlib.errors import kernel_error
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
    return kernel_error(f"{op.name} failed: {type(e).__name__}: {e}\n  inputs: ({shapes})"
                        f"\n  in: {user_source()}", e)


def _record(op, inputs, tensors, attrs, outs, grad):
    """Put a node for this call on the tape (autograd) and into open record() blocks."""
    source = user_source() if (_recorders or _config.capture_source) else None
    node = EagerNode(op, tensors, attrs, outs, source, grad)
    if grad:
        i = 0
        for o in outs:
            if o.array.dtype in _FLOAT_NP:
                o.requires_grad = True
                o.grad_fn = node
                o._index = i
            i += 1
    if _recorders:
        for rec in _own_recorders():
            rec._add(node, outs, inputs)


def _eager_apply_slow(op, inputs, attrs):
    """eager_apply for everything its fast path does not take; makes that path's plans."""
    if op.promote and len(inputs) > 1:
        # a 0-d operand PyTorch's categories demote (``f32 + f64[]``) is cast first, and the
        # signature gets no plan, so its calls keep coming here
        cast = cast_zero_dim_operands(op, inputs)
        if cast is not inputs:
            return eager_apply(op, cast, attrs)
    tensors = inputs
    arrays = []
    cpu = _default_device[-1] == "cpu"     # (ops without tensor inputs run there)
    device = None
    for x in inputs:
        if type(x) is not Tensor and type(x) is not Parameter:
            if type(x) is Scalar and tensors is inputs:
                v = x.value     # (_scalar_key inlined for the common nonzero case)
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu") if v or not isinstance(
                    v, float) else _scalar_key(v, x.dtype, "cpu"))
                if t is not None:        # a cached CPU scalar: stay on the fast path
                    arrays.append(t.array)
                    continue
            tensors = None
            break
        a = x.array
        if type(a) is not _ndarray:
            cpu = False
        arrays.append(a)
    if tensors is not None and len(arrays) == len(inputs) and any(
            type(x) is Scalar for x in inputs):
        tensors = tuple(x if isinstance(x, Tensor) else _as_tensor(x, "cpu") for x in inputs)
    if tensors is None or not cpu:
        tensors, device = _prepare(op, inputs)
        arrays = [x.array for x in tensors]
        cpu = device == "cpu"
    if op.random and "stream" not in attrs:
        attrs = dict(attrs, stream=0)    # eager seeds are fresh per call
    key = (op, tuple([(a.shape, a.dtype) for a in arrays]), tuple(attrs.items()))
    try:
        hit = _infer_cache.get(key)
    except TypeError:
        hit = None
    if hit is None:
        hit = _infer(op, key[1], attrs)
    out_types, out_dtypes = hit
    if cpu and op is not _TO_DEVICE:
        xp, kernel = np, _cpu_kernels[op]
        if not op.random and REGISTRY.get(op.name) is op and op is not _CONSTANT and (
                op.multi_output or len(out_dtypes) == 1):
            try:
                pkey = (op, *[v for a in arrays for v in (a.shape, a.dtype)],
                        *((tuple(attrs.items()),) if attrs else ()))
                if pkey not in _plans:
                    if len(_plans) > _PLAN_LIMIT:
                        _plans.clear()
                    _plans[pkey] = _plan(op, kernel, [a.dtype for a in arrays], out_dtypes)
            except TypeError:     # an unhashable attribute: no plan
                pass
    else:
        if op is _TO_DEVICE:      # its results belong to the target device
            backend = backend_for(attrs["device"])
        else:
            backend = backend_for(device or (_device_of(arrays[0]) if arrays
                                             else _default_device[-1]))
        xp, kernel = backend.xp, backend.kernels[op]
    try:
        # No np.errstate here: it costs ~1 us per op. Like numpy, a division by zero gives
        # inf with a RuntimeWarning (PyTorch gives the same inf silently).
        res = run_kernel(kernel, xp, arrays, attrs, op.multi_output, out_dtypes)
    except DuographError:
        raise
    except Exception as e:
        raise _kernel_failure(op, arrays, e) from e
    if len(res) == 1:
        outs = [_wrap(res[0])]
        if op is _CONSTANT and device is None:
            _float_constant(outs[0])
    else:
        outs = []
        for r in res:
            outs.append(_wrap(r))
    grad = False
    if op.vjp is not None and _grad_enabled():
        nondiff = op.nondiff_inputs
        for i, x in enumerate(tensors):
            if x.requires_grad and i not in nondiff:
                grad = True
                break
    if op.view:
        shared = tensors[0]._version
        for o in outs:
            o._version = shared
    if grad or _recorders:
        _record(op, inputs, tuple(tensors), attrs, outs, grad)
    if op.multi_output:
        return tuple(outs)
    return outs[0]


_ndarray = np.ndarray
_grad_enabled = grad_mode.is_grad_enabled
_state = grad_mode._state      # its ``enabled``, read without a call on the hot path


def _device_of_inputs(inputs) -> str:
    for x in inputs:
        if isinstance(x, Tensor):
            return x.device
    return _default_device[-1]


def tensor_from_data(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of ``data`` (list, number, array or tensor)."""
    if isinstance(data, Tensor):
        data = data.__array__()
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.infer_data_dtype(data)
    arr = np.array(data, dtype=dt)
    device = device or _default_device[-1]
    return _wrap(arr if device == "cpu" else _xp_for(device).asarray(arr))


def _capture_into_graph(graph, t: Tensor):
    """A tensor met while building a graph becomes a state input bound to it: each run reads
    its current data, and ``graph.update`` writes new values back into it (parameters,
    buffers, optimizer slots)."""
    return graph.bind_state(t)        # (on its device: compile for that device)


# -- operators without the dispatch chain ------------------------------------------------------
# ``a * b`` on two CPU-or-not eager tensors (or a tensor and a Python number), outside any
# ``with graph:`` block, is exactly ``eager_apply(mul, ...)``: what ``dispatch.apply`` would
# decide (no Values, no graph, the Tensor handler, the weak scalar its coercion makes) after
# three more calls. Anything else takes the shared ``TensorMethods`` operator.
_EAGER_TYPES = (Tensor, Parameter)
# (Python type, value, the tensor's numpy dtype) -> the cached CPU scalar tensor that
# ``tensor <op> value`` reads (the one ``_as_tensor`` made for its weak Scalar), so the
# operator runs as a tensor-tensor op at once; filled on first use, never for a float zero
# (its sign is not part of the key) and used only outside record() blocks (which want the
# Scalar operand itself, to make a constant of it)
_op_scalars: dict = {}


def _apply2(op, x, y):
    """``eager_apply(op, (x, y), {})`` for two eager tensors, without building the call's
    tuples: CPU arrays whose signature has a plan run here, anything else goes there."""
    a = x.array
    b = y.array
    if type(a) is _ndarray and type(b) is _ndarray:
        plan = _plans.get((op, a.shape, a.dtype, b.shape, b.dtype))
        if plan is not None:
            raw, kernel, out_dtypes, dtype0, diff, view, float_out, saves = plan
            if raw is _cpu_kernels[op] and dtype0 is not None:
                try:
                    res = kernel(np, a, b)
                    if type(res) is not _ndarray:
                        res = np.asarray(res)
                    rd = res.dtype
                    if rd is not dtype0 and rd != dtype0:
                        res = res.astype(dtype0)
                except DuographError:
                    raise
                except Exception as e:
                    raise _kernel_failure(op, (a, b), e) from e
                out = _new(Tensor)      # _wrap(res), inlined
                out.array = res
                out.requires_grad = False
                out.grad = None
                out.grad_fn = None
                out._index = 0
                out._version = x._version if view else [0]
                out._hooks = None
                out._retains_grad = False
                if _recorders:
                    grad = diff is not None and _state.enabled and any(
                        (x, y)[i].requires_grad for i in diff)
                    _record(op, (x, y), (x, y), {}, (out,), grad)
                elif diff is not None and _state.enabled and (
                        (x.requires_grad or y.requires_grad) if len(diff) == 2 else
                        any((x, y)[i].requires_grad for i in diff)):
                    node = _new(EagerNode)      # _tape(op, (x, y), ...), inlined
                    node.op = op
                    node.inputs = (x, y)
                    node.attrs = {}
                    node.source = user_source() if _config.capture_source else None
                    node.for_grad = True
                    node.freed = False
                    node._out_refs = (_weakref(out),)
                    node._out_data = (res,)
                    node.n_outputs = 1
                    fx, fy = x.grad_fn, y.grad_fn
                    node.input_keys = (x if fx is None else (fx, x._index),
                                       y if fy is None else (fy, y._index))
                    node.next_nodes = (fx, fy)
                    node.saved_versions = None if not saves else (
                        (x._version[0], y._version[0]) if saves == 1 else
                        (x._version[0], y._version[0], out._version[0]))
                    if float_out:
                        out.requires_grad = True
                        out.grad_fn = node
                return out
    return eager_apply(op, (x, y), {})


def _apply1(op, x):
    """``eager_apply(op, (x,), {})`` for one eager tensor (``_apply2``'s unary twin)."""
    a = x.array
    if type(a) is _ndarray:
        plan = _plans.get((op, a.shape, a.dtype))
        if plan is not None:
            raw, kernel, out_dtypes, dtype0, diff, view, float_out, saves = plan
            if raw is _cpu_kernels[op] and dtype0 is not None:
                try:
                    res = kernel(np, a)
                    if type(res) is not _ndarray:
                        res = np.asarray(res)
                    rd = res.dtype
                    if rd is not dtype0 and rd != dtype0:
                        res = res.astype(dtype0)
                except DuographError:
                    raise
                except Exception as e:
                    raise _kernel_failure(op, (a,), e) from e
                out = _new(Tensor)      # _wrap(res), inlined
                out.array = res
                out.requires_grad = False
                out.grad = None
                out.grad_fn = None
                out._index = 0
                out._version = x._version if view else [0]
                out._hooks = None
                out._retains_grad = False
                if _recorders:
                    grad = bool(diff) and x.requires_grad and _state.enabled
                    _record(op, (x,), (x,), {}, (out,), grad)
                elif diff and x.requires_grad and _state.enabled:
                    _tape(op, (x,), {}, out, res, float_out, saves)
                return out
            if raw is _cpu_kernels[op]:      # a multi-output op
                return _apply_multi(op, (x,), (x,), (a,), {}, plan)
    return _eager_apply_slow(op, (x,), {})


def _fast_binary(op, name: str, reflected: bool):
    general = getattr(TensorMethods, name)

    def operator(self, other):
        if not _graph_local.graphs:
            to = type(other)
            if to is Tensor or to is Parameter:
                return _apply2(op, other, self) if reflected else _apply2(op, self, other)
            if to is float or to is int or to is bool:
                a = self.array
                if not _recorders and (other or to is not float):
                    t = _op_scalars.get((to, other, a.dtype))
                    if t is not None and type(a) is _ndarray:
                        return _apply2(op, t, self) if reflected else _apply2(op, self, t)
                s = weak_scalar(dtype_name(a.dtype), other)
                out = eager_apply(op, (s, self) if reflected else (self, s), {})
                if type(a) is _ndarray and (other or to is not float):
                    t = _scalar_cache.get((to, other, s.dtype, "cpu"))
                    if t is not None:
                        if len(_op_scalars) > 4096:
                            _op_scalars.clear()
                        _op_scalars[(to, other, a.dtype)] = t
                return out
        return general(self, other)
    operator.__name__ = operator.__qualname__ = name
    operator.__doc__ = general.__doc__
    return operator


def _fast_unary(op, name: str):
    general = getattr(TensorMethods, name)

    def operator(self):
        if not _graph_local.graphs:
            return _apply1(op, self)
        return general(self)
    operator.__name__ = operator.__qualname__ = name
    operator.__doc__ = general.__doc__
    return operator


for _name, _op, _reflected in (("__add__", "add", False), ("__radd__", "add", True),
                               ("__sub__", "sub", False), ("__rsub__", "sub", True),
                               ("__mul__", "mul", False), ("__rmul__", "mul", True),
                               ("__truediv__", "div", False), ("__rtruediv__", "div", True)):
    setattr(Tensor, _name, _fast_binary(REGISTRY[_op], _name, _reflected))
Tensor.__neg__ = _fast_unary(REGISTRY["neg"], "__neg__")
del _name, _op, _reflected

register_handler(Tensor, eager_apply, _capture_into_graph)
register_handler(Parameter, eager_apply, _capture_into_graph)
set_default_handler(eager_apply)


class _ControlFlowSupport:
    """What graphlib's control-flow ops need to run a body's Python function eagerly
    (``graphlib.ops.control.set_eager_support``)."""

    @staticmethod
    def grad_needed(objs) -> bool:
        return _grad_enabled() and any(getattr(x, "requires_grad", False) for x in objs)

    class paused:
        """No tape and no record() blocks: the control-flow node stands for these ops."""

        def __enter__(self):
            self._grad = grad_mode.is_grad_enabled()
            # this thread's blocks only: another thread's recording goes on
            self._recs = _own_recorders()
            grad_mode._set(False)
            for rec in self._recs:
                _recorders.remove(rec)

        def __exit__(self, *exc):
            _recorders.extend(self._recs)
            grad_mode._set(self._grad)

    tensor = staticmethod(_wrap)

    @staticmethod
    def array(x):
        return x.array if isinstance(x, Tensor) else x


def _register_control_flow():
    from ..graphlib.ops.control import set_eager_support
    set_eager_support(_ControlFlowSupport)


_register_control_flow()
_ = ConstArray  # re-exported type used by record()

# axis=/keepdims= for the methods Tensor defines itself (TensorMethods has its own)
for _name in ("any", "all"):
    setattr(Tensor, _name, accept_axis(vars(Tensor)[_name]))
del _name


def _join_devices(op, inputs):
    """Inputs on more than one device: as PyTorch, a 0-d CPU tensor joins the others'
    device (a Python scalar would), and so does a constant made on the default CPU device (a
    composite op's mask or index table); anything else raises, naming both devices."""
    found = [(_device_of(x.array), x) for x in inputs
             if isinstance(x, Tensor) and type(x) is not SeedTensor]
    devices = []
    for d, x in found:
        if d not in devices and not (d == "cpu" and (x.array.ndim == 0 or _is_floating(x))):
            devices.append(d)
    if len(devices) != 1:
        first = [d for d, _ in found]
        a = first[0]
        b = next(d for d in first if d != a)
        raise RuntimeError(f"{op.name}: expected all tensors on one device, found {a} and "
                           f"{b}; move them with .to({b!r}) or .to({a!r})"
                           f"\n  in: {user_source()}")
    device = devices[0]
    joined = [x.to(device) if isinstance(x, Tensor) and type(x) is not SeedTensor
              and _device_of(x.array) != device else x for x in inputs]
    return type(inputs)(joined) if isinstance(inputs, tuple) else joined, device


def push_default_device(device: str):
    """Make ``device`` the default of ops without tensor inputs (creation under
    ``device=``) until ``pop_default_device(token)``. Off the CPU the fast path's plans are
    set aside meanwhile: they are keyed by signature alone, and a zero-input op's plan
    (``ones``, ``arange``) would run its CPU kernel whatever the default device."""
    global _plans
    saved = _plans
    if device != "cpu":
        _plans = {}
    _default_device.append(device)
    return saved


def pop_default_device(token) -> None:
    """Undo ``push_default_device`` (``token`` is what it returned)."""
    global _plans
    _default_device.pop()
    _plans = token
