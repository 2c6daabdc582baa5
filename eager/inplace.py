"""Tensor's in-place methods: ``add_``, ``mul_``..., the random fills (``normal_``...),
``t[index] = value`` and the augmented operators (``t += u``).

Each computes the out-of-place op and writes the result back into the tensor's buffer
(``_inplace``), taking over its autograd history. ``TensorInPlace`` holds them; importing this
module installs them on ``Tensor`` (eager/__init__.py does), as ``dispatch`` installs the
fast operators.
"""
from __future__ import annotations

import numpy as np

from ..graphlib import dtypes
from ..graphlib import functional as F
from ..graphlib.errors import DTypeError, ShapeError
from ..graphlib.ops.indexing import index_assign, write_in_place
from ..graphlib.ops.shape import _is_advanced
from ..graphlib.source import user_source
from . import grad_mode
from .device import _xp_for
from .tensors import InplaceCastError, Tensor, _own_recorders, _recorders, tensor_from_data


class TensorInPlace:
    """The in-place methods of ``Tensor`` (installed on it below)."""

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
        other = other if alpha == 1 else other * alpha
        return self._inplace(lambda s: F.add(s, other), "add_", other)

    def sub_(self, other, alpha=1):
        """``sub_(other, alpha=1) -> Tensor``: ``self -= alpha * other``; ``subtract_`` is an
        alias. In place: the result is written into this tensor's buffer and the tensor is
        returned (autograd records it; a leaf that requires grad is refused while grad mode is
        on, and a result that would need a wider dtype, e.g. float into an int tensor,
        raises)."""
        other = other if alpha == 1 else other * alpha
        return self._inplace(lambda s: F.sub(s, other), "sub_", other)

    def mul_(self, other):
        """``mul_(other) -> Tensor``: ``self *= other``; ``multiply_`` is an alias. In place: the
        result is written into this tensor's buffer and the tensor is returned (autograd
        records it; a leaf that requires grad is refused while grad mode is on, and a result
        that would need a wider dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(lambda s: F.mul(s, other), "mul_", other)

    def div_(self, other, *, rounding_mode=None):
        """``div_(other, *, rounding_mode=None) -> Tensor``: ``self /= other`` (true division,
        so an integer tensor raises unless ``rounding_mode`` is "trunc" or "floor", which
        round the quotient); ``divide_`` and ``true_divide_`` are aliases. In place: the
        result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(lambda s: F.div(s, other, rounding_mode=rounding_mode), "div_",
                             other)

    def pow_(self, exponent):
        """``pow_(exponent) -> Tensor``: ``self **= exponent``. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(lambda s: F.pow(s, exponent), "pow_", exponent)

    def clamp_(self, min=None, max=None):
        """``clamp_(min=None, max=None) -> Tensor``: every element clamped into [min, max];
        ``clip_`` is an alias. In place: the result is written into this tensor's buffer and
        the tensor is returned (autograd records it; a leaf that requires grad is refused
        while grad mode is on, and a result that would need a wider dtype, e.g. float into an
        int tensor, raises)."""
        return self._inplace(lambda s: F.clamp(s, min, max), "clamp_")

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
        return self._inplace(F.relu, "relu_")

    def exp_(self):
        """``exp_() -> Tensor``: the elementwise exponential. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(F.exp, "exp_")

    def sqrt_(self):
        """``sqrt_() -> Tensor``: the elementwise square root. In place: the result is written
        into this tensor's buffer and the tensor is returned (autograd records it; a leaf that
        requires grad is refused while grad mode is on, and a result that would need a wider
        dtype, e.g. float into an int tensor, raises)."""
        return self._inplace(F.sqrt, "sqrt_")

    def zero_(self):
        """``zero_() -> Tensor``: fill with zeros in place and return this tensor (``fill_(0)``)."""
        return self.fill_(0)

    def fill_(self, value):
        """``fill_(value) -> Tensor``: every element set to ``value`` (a number or a one-element
        tensor). In place: the result is written into this tensor's buffer and the tensor is
        returned (autograd records it; a leaf that requires grad is refused while grad mode is
        on, and a result that would need a wider dtype, e.g. float into an int tensor,
        raises)."""
        if isinstance(value, Tensor):
            value = value.item()
        with grad_mode.no_grad():
            filled = F.full_like(self, value)
        return self._inplace(lambda s: filled, "fill_")

    def copy_(self, src):
        """``copy_(src) -> Tensor``: the elements of ``src`` (a tensor or array-like, F.cast to
        this tensor's dtype, moved to its device and broadcast to its shape) copied in; the
        gradient flows to ``src``. In place: the result is written into this tensor's buffer
        and the tensor is returned (autograd records it; a leaf that requires grad is refused
        while grad mode is on, and a result that would need a wider dtype, e.g. float into an
        int tensor, raises)."""
        if not isinstance(src, Tensor):
            src = tensor_from_data(src, self.dtype, self.device)
        if src.device != self.device:
            src = src.to(device=self.device)

        def moved(_):
            out = src
            if out.dtype != self.dtype:
                out = F.cast(out, self.dtype)
            if tuple(out.shape) != tuple(self.shape):
                out = F.expand(out, *self.shape)
            if out is src and src.requires_grad:
                out = src + 0      # a node of its own, so this tensor gets its history
            return out
        return self._inplace(moved, "copy_", src)

    def resize_(self, *sizes, memory_format=None):
        """``resize_(*sizes) -> Tensor``: this tensor given the shape ``sizes`` in place, as
        PyTorch's: its first elements (row-major) are kept; elements a larger size adds are
        zeros (PyTorch leaves them uninitialised). A tensor that requires grad is refused,
        as in PyTorch. ``memory_format`` is accepted; tensors here are contiguous."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
                   for n in sizes):
            raise TypeError(f"resize_: expected non-negative int sizes, found {sizes!r}\n"
                            f"  in: {user_source()}")
        if self.requires_grad:
            raise RuntimeError("cannot resize variables that require grad\n"
                               f"  in: {user_source()}")
        shape = tuple(int(n) for n in sizes)
        count = int(np.prod(shape, dtype=np.int64))
        flat = self.array.reshape(-1)
        if count == flat.shape[0]:
            self.data = flat.reshape(shape)
        else:
            fresh = _xp_for(self.device).zeros(count, dtype=flat.dtype)
            keep = min(count, flat.shape[0])
            fresh[:keep] = flat[:keep]
            self.data = fresh.reshape(shape)
        return self

    def resize_as_(self, other, memory_format=None):
        """``resize_as_(other) -> Tensor``: ``resize_(other.shape)``."""
        return self.resize_(tuple(other.shape))

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
        return self._inplace_op("lerp_", F.lerp, end, weight)

    def round_(self, decimals=0):
        """In place: ``round(self, decimals)``."""
        return self._inplace_op("round_", F.round, decimals=decimals)

    def nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
        """In place: ``nan_to_num(self, nan, posinf, neginf)``."""
        return self._inplace_op("nan_to_num_", F.nan_to_num, nan, posinf, neginf)

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
        if not std >= 0:
            raise ValueError(f"normal_: expected std >= 0, found {std}\n  in: {user_source()}")
        return self._random_fill("normal_", lambda seed: F.normal(
            *self.shape, seed=seed, mean=float(mean), std=float(std), dtype=self.dtype),
            generator)

    def uniform_(self, *args, generator=None, **kwargs):
        """Fill with samples uniform in [from, to) (default [0, 1)), as
        ``torch.Tensor.uniform_(from=0, to=1)``."""
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
        if not lambd > 0:
            raise ValueError(f"exponential_: expected lambd > 0, found {lambd}"
                             f"\n  in: {user_source()}")

        def draw(seed):
            u = F.uniform(*self.shape, seed=seed, dtype="float64")
            return F.cast(-F.log1p(-u) / float(lambd), self.dtype)
        return self._random_fill("exponential_", draw, generator)

    def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
        """Fill with exp(N(mean, std**2)) samples, as ``torch.Tensor.log_normal_``."""
        if not std > 0:
            raise ValueError(f"log_normal_: expected std > 0, found {std}"
                             f"\n  in: {user_source()}")
        return self._random_fill("log_normal_", lambda seed: F.cast(F.exp(F.normal(
            *self.shape, seed=seed, mean=float(mean), std=float(std), dtype="float64")),
            self.dtype), generator)

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with 1 (probability ``p``, a number or a tensor) or 0, in this tensor's
        dtype, as ``torch.Tensor.bernoulli_``."""
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
        tracked = grad_mode.is_grad_enabled() and (self.requires_grad or (
            isinstance(value, Tensor) and value.requires_grad))
        if not tracked and not _recorders:
            if isinstance(value, Tensor):
                if value.device != self.device:
                    value = value.to(device=self.device)
                value = value.array
            if _is_advanced(index):
                write_in_place(self, self.array, _xp_for(self.device), index, value)
            else:
                self.array[index] = value
            self._version[0] += 1
            return
        self._inplace(lambda s: index_assign(s, index, value), "__setitem__", value)

    def _inplace_named(self, name: str, fn: str, *args, **kwargs) -> "Tensor":
        """``_inplace_op`` with the op function named (``"scatter"``), not given."""
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


_CLASS_ENTRIES = ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__")
for _name, _value in list(vars(TensorInPlace).items()):
    if _name not in _CLASS_ENTRIES:
        setattr(Tensor, _name, _value)
del _name, _value
_add_inplace_forms()
