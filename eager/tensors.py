"""The eager ``Tensor``: an array (numpy on "cpu", cupy on "cuda") plus autograd state.

The bottom of eager's tensor layer: this module holds the class, its attributes,
conversions and autograd entry points, and imports nothing of eager above it. What runs ops
on tensors is installed from above: ``dispatch`` adds the fast operators (``t + u``) and
registers ``eager_apply`` with graphlib's dispatch, ``inplace`` adds the in-place methods
(``add_``, ``t[i] = v``...), and ``autograd`` is reached through ``set_autograd`` (the
package's ``__init__`` installs it), so ``backward()`` needs no import of it here.
"""
from __future__ import annotations

from threading import get_ident as _get_ident
from typing import Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib import functional as F
from ..graphlib.aliases import accept_axis
from ..graphlib.errors import DTypeError, ShapeError
from ..graphlib.methods import TensorMethods
from ..graphlib.ops import creation as graph_creation
from ..graphlib.source import user_source
from ..graphlib.types import TensorType
from .dlpack import dlpack_capsule
from .decisions import note_decision, tracing
from .device import _default_device, _device_of, _xp_for

_new = object.__new__


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
        t = self._tensor
        if dtype is None:
            return legacy_type_name(t)
        dt, device = legacy_dtype(dtype)
        return t.to(dtype=dt, device=device)


# how tensors print (``dg.set_printoptions``): numpy's array2string options
PRINT_OPTIONS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "max_line_width": 75}


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
        body = np.array2string(arr, separator=", ", prefix="tensor(", **PRINT_OPTIONS)
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
            _xp_for(device)          # a clear error when cupy (or a GPU) is missing
            out = graph_creation.to_device(out, device)
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
        bfloat16 is exported as DLPack's bfloat16 (``eager.dlpack``; numpy alone refuses it).
        Refused for a tensor that requires grad, as PyTorch does: use ``.detach()``."""
        if self.requires_grad:
            raise RuntimeError("__dlpack__: cannot export a tensor that requires grad; use "
                               f"tensor.detach()\n  in: {user_source()}")
        return dlpack_capsule(self.array, *args, **kwargs)

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

    def bfloat16(self) -> "Tensor":
        """``bfloat16() -> Tensor``: ``self.to(dg.bfloat16)``; ``self`` when already bfloat16."""
        return self.to("bfloat16")

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
        if dtypes.kind(self.dtype) == "b":
            return F.logical_not(F.logical_not(self))    # ops, so record() and compile see it
        return F.add(self, 0)

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
        if requires_grad and not dtypes.is_differentiable(self.dtype):
            raise RuntimeError(f"only floating-point and complex tensors can require "
                               f"gradients, this one is {self.dtype}")
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
        return _autograd.register_post_accumulate_grad_hook(self, fn)

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
        _autograd.backward([self], None if gradient is None else [gradient], retain_graph,
                           create_graph, inputs)

    @property
    def version(self) -> int:
        return self._version[0]

    def bump_version(self) -> None:
        """Note that ``data`` was written in place (the state-holder protocol of
        ``graphlib.kernels``: executors call it after updating bound state), so autograd
        refuses gradients that saved the old values."""
        self._version[0] += 1


    def any(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Whether any element is nonzero (along ``dim``). Built from ops, so a Python
        decision on it (``if t.any():``) is seen by ``record()`` and guarded by compile."""
        return _count_true(self, dim, keepdim) > 0

    def all(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Whether every element is nonzero (along ``dim``)."""
        return _count_true(F.logical_not(_as_bool(self)), dim, keepdim) == 0


# axis=/keepdims= for the methods Tensor defines itself (TensorMethods has its own)
for _name in ("any", "all"):
    setattr(Tensor, _name, accept_axis(vars(Tensor)[_name]))
del _name


def _as_bool(t: Tensor):
    return t if t.dtype == "bool" else F.cast(t, "bool")


def _count_true(t: Tensor, dim, keepdim: bool):
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return F.cast(_as_bool(t), "int64")    # PyTorch: any/all over dim=() are elementwise
    return F.sum(F.cast(_as_bool(t), "int64"), dim, keepdim)


def host_array(t: Tensor) -> np.ndarray:
    """``t``'s data as a numpy array (copied from the GPU), without noting a decision."""
    return t.array if type(t.array) is np.ndarray else t.array.get()


def _note_data(t: Tensor, kind: str, arr=None) -> None:
    """Tell an open compile() recording that Python read this tensor's data (a guard)."""
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


_DTYPE_NAMES = {np.dtype(n): n for n in dtypes.DTYPE_NAMES}


def dtype_name(dt) -> str:
    """duograph name of a numpy (or cupy) dtype, without numpy's slow ``dtype.name``."""
    name = _DTYPE_NAMES.get(dt)
    return name if name is not None else dt.name


# Open record() blocks of every thread (innermost last). The hot paths only ask whether it
# is empty; what records an op takes this thread's blocks alone (``_own_recorders``), so a
# block never captures another thread's ops (grad mode is per thread for the same reason).
_recorders: list = []


def _own_recorders() -> list:
    """This thread's open record() blocks, innermost last."""
    me = _get_ident()
    return [r for r in _recorders if r._thread == me]


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


def tensor_from_data(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of ``data`` (list, number, array or tensor)."""
    if isinstance(data, Tensor):
        data = data.__array__()
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.infer_data_dtype(data)
    arr = np.array(data, dtype=dt)
    device = device or _default_device[-1]
    return _wrap(arr if device == "cpu" else _xp_for(device).asarray(arr))


# -- PyTorch's legacy type names (``t.type()``; the classes are in ``legacy``) -----------------
# dtype -> PyTorch's legacy class name
NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
         "bfloat16": "BFloat16Tensor", "uint8": "ByteTensor", "int8": "CharTensor",
         "int16": "ShortTensor", "int32": "IntTensor", "int64": "LongTensor",
         "bool": "BoolTensor"}
_BY_NAME = {name: dt for dt, name in NAMES.items()}
_PREFIXES = ("duograph.cuda.", "torch.cuda.", "duograph.", "torch.")


def legacy_type_name(t: "Tensor") -> str:
    """``t.type()``: ``'duograph.FloatTensor'``, ``'duograph.cuda.LongTensor'``..."""
    return ("duograph.cuda." if t.device == "cuda" else "duograph.") + NAMES[t.dtype]


def legacy_dtype(spec):
    """(dtype, device or None) for ``t.type(spec)``: a dtype, a legacy class, or a legacy
    type name (``'torch.DoubleTensor'``, ``'duograph.cuda.FloatTensor'``)."""
    dt = getattr(spec, "_legacy_dtype", None)
    if dt is not None:
        return dt, None
    if isinstance(spec, str):
        for prefix in _PREFIXES:
            if spec.startswith(prefix) and spec[len(prefix):] in _BY_NAME:
                return _BY_NAME[spec[len(prefix):]], ("cuda" if ".cuda." in prefix else "cpu")
    try:
        return dtypes.as_dtype(spec), None
    except TypeError:
        raise TypeError(f"type(): expected a dtype, a legacy tensor class or a type name "
                        f"such as 'torch.FloatTensor', found {spec!r}") from None


# -- autograd, installed from above ----------------------------------------------------------
# ``Tensor.backward`` and ``register_post_accumulate_grad_hook`` call the autograd module,
# which sits above this one (it walks tensors): eager/__init__.py installs it here.
_autograd = None


def set_autograd(module) -> None:
    """Install the module that serves ``backward()`` and ``register_post_accumulate_grad_hook``
    (``duograph.eager.autograd``; ``eager/__init__.py`` does it)."""
    global _autograd
    _autograd = module

