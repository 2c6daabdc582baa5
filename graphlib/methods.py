"""The one method surface shared by symbolic Values and eager tensors.

Operators and methods call the public op functions, which dispatch on the operands, so the
same ``x.sum(dim=1) @ w + 1`` builds a node for a Value and runs at once for a tensor.
"""
from __future__ import annotations

from . import dtypes
from .aliases import accept_axis
from .errors import ShapeError, located
from .registry import REGISTRY as _REGISTRY
from . import methods_compat, methods_names
from .methods_compat import PyTorchMethods

# This module sits below ``ir`` (``Value`` inherits these methods), so it imports nothing
# above it; the modules above fill these hooks when they are imported (issue 26's order):
F = None            # the functional module (every op function), set by ``functional``
_handlers: dict = {}    # dispatch's handler table (type -> eager handler), set by ``dispatch``
_local = None           # ir's per-thread graph stack, set by ``dispatch``


def set_functions(module) -> None:
    """Installed by ``functional`` at import time: the op functions the methods call."""
    global F
    F = module
    methods_compat.F = module
    methods_names.F = module


def set_dispatch(handlers: dict, graph_stack) -> None:
    """Installed by ``dispatch`` at import time: its handler table and ir's graph stack, for
    the eager fast path of ``_unary``."""
    global _handlers, _local
    _handlers = handlers
    _local = graph_stack


def _unary(name: str, x):
    """``F.<name>(x)``, for the methods whose function is exactly ``<name>_op(x)`` (no
    attributes, nothing checked before dispatch): an operand whose type has a dispatch
    handler (an eager tensor), outside any graph, goes to that handler at once, which is
    what ``dispatch.apply`` decides four calls later; anything else takes the function."""
    handler = _handlers.get(type(x))
    if handler is not None and not _local.graphs:
        return handler(_REGISTRY[name], (x,), {})
    return getattr(F, name)(x)


def _is_dtype(x) -> bool:
    """Whether ``x`` names a dtype (``view(dg.int32)``), not a size."""
    if isinstance(x, (int, tuple, list)) or hasattr(x, "__index__"):
        return False
    try:
        dtypes.as_dtype(x)
    except Exception:
        return False
    return True


class TensorMethods(PyTorchMethods):
    __slots__ = ()
    __array_priority__ = 1000   # numpy defers `ndarray + tensor` to our __radd__

    # arithmetic ----------------------------------------------------------------------------
    def __add__(self, other):
        return F.add(self, other)

    def __radd__(self, other):
        return F.add(other, self)

    def __sub__(self, other):
        return F.sub(self, other)

    def __rsub__(self, other):
        return F.sub(other, self)

    def __mul__(self, other):
        return F.mul(self, other)

    def __rmul__(self, other):
        return F.mul(other, self)

    def __truediv__(self, other):
        return F.div(self, other)

    def __rtruediv__(self, other):
        return F.div(other, self)

    def __mod__(self, other):
        return F.remainder(self, other)

    def __rmod__(self, other):
        return F.remainder(other, self)

    def __floordiv__(self, other):
        return F.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return F.floor_divide(other, self)

    def remainder(self, other):
        """``remainder(other) -> Tensor``: the Python-style modulus; the result has the divisor's
        sign. See ``dg.remainder``."""
        return F.remainder(self, other)

    def fmod(self, other):
        """``fmod(other) -> Tensor``: the C-style remainder; the result has the dividend's sign.
        See ``dg.fmod``."""
        return F.fmod(self, other)

    def floor_divide(self, other):
        """``floor_divide(other) -> Tensor``: ``floor(self / other)``, as ``//`` (integers stay
        integers). See ``dg.floor_divide``."""
        return F.floor_divide(self, other)

    def atan2(self, other):
        """``atan2(other) -> Tensor``: the elementwise angle of the point ``(other, self)``, in
        (-pi, pi]; ``arctan2`` is an alias. See ``dg.atan2``."""
        return F.atan2(self, other)

    arctan2 = atan2

    def hypot(self, other):
        """``hypot(other) -> Tensor``: ``sqrt(self**2 + other**2)`` without overflow. See
        ``dg.hypot``."""
        return F.hypot(self, other)

    def logical_xor(self, other):
        """``logical_xor(other) -> Tensor``: elementwise exclusive or, as bool (nonzero counts as
        True). See ``dg.logical_xor``."""
        return F.logical_xor(self, other)

    def __pow__(self, other):
        return F.pow(self, other)

    def __rpow__(self, other):
        return F.pow(other, self)

    def __matmul__(self, other):
        return F.matmul(self, other)

    def __rmatmul__(self, other):
        return F.matmul(other, self)

    def __neg__(self):
        return F.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary("abs", self)

    # comparisons and logic (elementwise, returning bool tensors) ------------------------------
    def __eq__(self, other):
        return F.eq(self, other)

    def __ne__(self, other):
        return F.ne(self, other)

    def __lt__(self, other):
        return F.lt(self, other)

    def __le__(self, other):
        return F.le(self, other)

    def __gt__(self, other):
        return F.gt(self, other)

    def __ge__(self, other):
        return F.ge(self, other)

    # &, |, ^, ~ are bitwise on integers and logical on bools, as in PyTorch
    def __and__(self, other):
        return F.bitwise_and(self, other)

    def __rand__(self, other):
        return F.bitwise_and(other, self)

    def __or__(self, other):
        return F.bitwise_or(self, other)

    def __ror__(self, other):
        return F.bitwise_or(other, self)

    def __xor__(self, other):
        return F.bitwise_xor(self, other)

    def __rxor__(self, other):
        return F.bitwise_xor(other, self)

    def __invert__(self):
        return F.bitwise_not(self)

    def tan(self):
        """``tan() -> Tensor``: the elementwise tangent. See ``dg.tan``."""
        return F.tan(self)

    def asin(self):
        """``asin() -> Tensor``: the elementwise arcsine; ``arcsin`` is an alias. See
        ``dg.asin``."""
        return F.asin(self)

    def acos(self):
        """``acos() -> Tensor``: the elementwise arccosine; ``arccos`` is an alias. See
        ``dg.acos``."""
        return F.acos(self)

    def atan(self):
        """``atan() -> Tensor``: the elementwise arctangent; ``arctan`` is an alias. See
        ``dg.atan``."""
        return F.atan(self)

    def sinh(self):
        """``sinh() -> Tensor``: the elementwise hyperbolic sine. See ``dg.sinh``."""
        return F.sinh(self)

    def cosh(self):
        """``cosh() -> Tensor``: the elementwise hyperbolic cosine. See ``dg.cosh``."""
        return F.cosh(self)

    def asinh(self):
        """``asinh() -> Tensor``: the elementwise inverse hyperbolic sine; ``arcsinh`` is an
        alias. See ``dg.asinh``."""
        return F.asinh(self)

    def acosh(self):
        """``acosh() -> Tensor``: the elementwise inverse hyperbolic cosine; ``arccosh`` is an
        alias. See ``dg.acosh``."""
        return F.acosh(self)

    def atanh(self):
        """``atanh() -> Tensor``: the elementwise inverse hyperbolic tangent; ``arctanh`` is an
        alias. See ``dg.atanh``."""
        return F.atanh(self)

    def log1p(self):
        """``log1p() -> Tensor``: ``log(1 + self)``, accurate for small values. See ``dg.log1p``."""
        return F.log1p(self)

    def expm1(self):
        """``expm1() -> Tensor``: ``exp(self) - 1``, accurate for small values. See ``dg.expm1``."""
        return F.expm1(self)

    def log2(self):
        """``log2() -> Tensor``: the elementwise base-2 logarithm. See ``dg.log2``."""
        return F.log2(self)

    def log10(self):
        """``log10() -> Tensor``: the elementwise base-10 logarithm. See ``dg.log10``."""
        return F.log10(self)

    def exp2(self):
        """``exp2() -> Tensor``: ``2 ** self``, elementwise. See ``dg.exp2``."""
        return F.exp2(self)

    def floor(self):
        """``floor() -> Tensor``: round down to the nearest integer, elementwise. See
        ``dg.floor``."""
        return F.floor(self)

    def ceil(self):
        """``ceil() -> Tensor``: round up to the nearest integer, elementwise. See ``dg.ceil``."""
        return F.ceil(self)

    def trunc(self):
        """``trunc() -> Tensor``: round toward zero, elementwise (integers unchanged); ``fix`` is
        an alias. See ``dg.trunc``."""
        return F.trunc(self)

    def frac(self):
        """``frac() -> Tensor``: the fractional part ``self - trunc(self)`` (floating point
        only). See ``dg.frac``."""
        return F.frac(self)

    def isnan(self):
        """``isnan() -> Tensor``: a bool tensor, True where the element is NaN. See ``dg.isnan``."""
        return F.isnan(self)

    def isinf(self):
        """``isinf() -> Tensor``: a bool tensor, True where the element is +inf or -inf. See
        ``dg.isinf``."""
        return F.isinf(self)

    def isfinite(self):
        """``isfinite() -> Tensor``: a bool tensor, True where the element is neither NaN nor
        infinite. See ``dg.isfinite``."""
        return F.isfinite(self)

    arcsin, arccos, arctan = asin, acos, atan
    arcsinh, arccosh, arctanh = asinh, acosh, atanh
    fix = trunc

    def bitwise_and(self, other):
        """``bitwise_and(other) -> Tensor``: ``self & other``; bitwise on integers, logical on
        bools (floats are refused). See ``dg.bitwise_and``."""
        return F.bitwise_and(self, other)

    def bitwise_or(self, other):
        """``bitwise_or(other) -> Tensor``: ``self | other``; bitwise on integers, logical on
        bools (floats are refused). See ``dg.bitwise_or``."""
        return F.bitwise_or(self, other)

    def bitwise_xor(self, other):
        """``bitwise_xor(other) -> Tensor``: ``self ^ other``; bitwise on integers, logical on
        bools (floats are refused). See ``dg.bitwise_xor``."""
        return F.bitwise_xor(self, other)

    def bitwise_not(self):
        """``bitwise_not() -> Tensor``: ``~self``; bitwise not of an integer tensor, logical not
        of a bool tensor. See ``dg.bitwise_not``."""
        return F.bitwise_not(self)

    __hash__ = object.__hash__

    # indexing and shape ------------------------------------------------------------------------
    def __getitem__(self, index):
        return F.getitem(self, index)

    def __setitem__(self, index, value):
        """Eager tensors write in place (``Tensor.__setitem__``); a graph Value is
        immutable, so this raises an error naming the out-of-place forms."""
        raise TypeError(located(
            "__setitem__: a graph Value cannot be assigned to in place; build the new value "
            "and use it instead: y = dg.index_put(x, indices, values), "
            "dg.masked_fill(x, mask, value), dg.where(mask, values, x) or "
            "dg.scatter(x, dim, index, src)"))

    def reshape(self, *shape):
        """``reshape(*shape) -> Tensor``: the same elements with a new shape (given as ints or
        one tuple); one dim may be -1. See ``dg.reshape``."""
        return F.reshape(self, *shape)

    def view(self, *shape):
        """A tensor of the same data with another shape; ``view(dtype)`` reads the same
        bytes as ``dtype`` instead (the last dim scales when the element sizes differ), as
        ``torch.Tensor.view``. duograph's views are values, not aliases of the storage."""
        if len(shape) == 1 and _is_dtype(shape[0]):
            return F._view_dtype(self, shape[0])
        return F.reshape(self, *shape)

    def permute(self, *dims):
        """``permute(*dims) -> Tensor``: the dims reordered, e.g. ``x.permute(2, 0, 1)``. See
        ``dg.permute``."""
        return F.permute(self, *dims)

    def transpose(self, dim0, dim1):
        """``transpose(dim0, dim1) -> Tensor``: dims ``dim0`` and ``dim1`` swapped. See
        ``dg.transpose``."""
        return F.transpose(self, dim0, dim1)

    def t(self):
        """``t() -> Tensor``: the transpose of a 2-D tensor (dims 0 and 1 swapped). Tensors of
        any other rank are returned unchanged; PyTorch returns 0-D and 1-D tensors unchanged
        too but refuses more than 2 dims."""
        return F.transpose(self, 0, 1) if self.ndim == 2 else self

    @property
    def T(self):
        return F.permute(self, *reversed(range(self.ndim)))

    def expand(self, *sizes):
        """``expand(*sizes) -> Tensor``: broadcast to ``sizes`` (-1 keeps a dim; new leading dims
        may be added). See ``dg.expand``."""
        return F.expand(self, *sizes)

    def expand_as(self, other):
        """``expand_as(other) -> Tensor``: ``self.expand(*other.shape)``."""
        return F.expand(self, *other.shape)

    def squeeze(self, dim=None):
        """``squeeze(dim=None) -> Tensor``: size-1 dims removed (all of them, or only ``dim``; a
        no-op when that dim is not 1). See ``dg.squeeze``."""
        return F.squeeze(self, dim)

    def unsqueeze(self, dim):
        """``unsqueeze(dim) -> Tensor``: a size-1 dim inserted at ``dim``. See ``dg.unsqueeze``."""
        return F.unsqueeze(self, dim)

    def flatten(self, start_dim=0, end_dim=-1):
        """``flatten(start_dim=0, end_dim=-1) -> Tensor``: dims ``start_dim..end_dim`` merged
        into one. See ``dg.flatten``."""
        return F.flatten(self, start_dim, end_dim)

    def split(self, split_size_or_sections, dim=0):
        """``split(split_size_or_sections, dim=0) -> tuple of Tensors``: pieces of
        ``split_size_or_sections`` elements along ``dim`` (the last may be smaller), or of the
        given list of sizes. See ``dg.split``."""
        return F.split(self, split_size_or_sections, dim)

    def gather(self, dim, index):
        """``gather(dim, index) -> Tensor``: values picked along ``dim`` by the integer tensor
        ``index`` (``out[i][j] = self[index[i][j]][j]`` for dim=0). See ``dg.gather``."""
        return F.gather(self, dim, index)

    def index_select(self, dim, index):
        """``index_select(dim, index) -> Tensor``: the entries ``index`` (a 1-D integer tensor)
        along ``dim``. See ``dg.index_select``."""
        return F.index_select(self, dim, index)

    # reductions ------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, dtype=None):
        """``sum(dim=None, keepdim=False, dtype=None) -> Tensor``: the sum over ``dim`` (an int,
        a tuple, or None for all elements). Integers and bools sum to int64 unless ``dtype``
        is given. See ``dg.sum``."""
        return F.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim=False):
        """``mean(dim=None, keepdim=False) -> Tensor``: the arithmetic mean over ``dim``
        (floating-point tensors only, as in PyTorch). See ``dg.mean``."""
        return F.mean(self, dim, keepdim)

    def amax(self, dim=None, keepdim=False):
        """``amax(dim=None, keepdim=False) -> Tensor``: the maximum over ``dim`` (all elements
        when None); ties share the gradient evenly. See ``dg.amax``."""
        return F.amax(self, dim, keepdim)

    def amin(self, dim=None, keepdim=False):
        """``amin(dim=None, keepdim=False) -> Tensor``: the minimum over ``dim`` (all elements
        when None); ties share the gradient evenly. See ``dg.amin``."""
        return F.amin(self, dim, keepdim)

    def max(self, dim=None, keepdim=False):
        """The largest element; with ``dim``, (values, indices) as ``torch.Tensor.max``."""
        return F.max(self, dim, keepdim)

    def min(self, dim=None, keepdim=False):
        """The smallest element; with ``dim``, (values, indices) as ``torch.Tensor.min``."""
        return F.min(self, dim, keepdim)

    def prod(self, dim=None, keepdim=False):
        """``prod(dim=None, keepdim=False) -> Tensor``: the product over ``dim`` (all elements
        when None). See ``dg.prod``."""
        return F.prod(self, dim, keepdim)

    def var(self, dim=None, keepdim=False, *, correction=1):
        """``var(dim=None, keepdim=False, *, correction=1) -> Tensor``: the variance over
        ``dim``, dividing by ``N - correction`` (1: unbiased, the default). See ``dg.var``."""
        return F.var(self, dim, keepdim=keepdim, correction=correction)

    def std(self, dim=None, keepdim=False, *, correction=1):
        """``std(dim=None, keepdim=False, *, correction=1) -> Tensor``: the standard deviation
        over ``dim``, dividing by ``N - correction`` (1: unbiased, the default). See
        ``dg.std``."""
        return F.std(self, dim, keepdim=keepdim, correction=correction)

    def argmax(self, dim=None, keepdim=False):
        """``argmax(dim=None, keepdim=False) -> Tensor``: the int64 index of the maximum along
        ``dim`` (over the flattened tensor when None). See ``dg.argmax``."""
        return F.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        """``argmin(dim=None, keepdim=False) -> Tensor``: the int64 index of the minimum along
        ``dim`` (over the flattened tensor when None). See ``dg.argmin``."""
        return F.argmin(self, dim, keepdim)

    def logsumexp(self, dim, keepdim=False):
        """``logsumexp(dim, keepdim=False) -> Tensor``: ``log(sum(exp(self), dim))``, computed
        stably. See ``dg.logsumexp``."""
        return F.logsumexp(self, dim, keepdim)

    def softmax(self, dim):
        """``softmax(dim) -> Tensor``: ``exp(self)`` normalised to sum to 1 along ``dim``,
        computed stably. See ``dg.softmax``."""
        return F.softmax(self, dim)

    def log_softmax(self, dim):
        """``log_softmax(dim) -> Tensor``: ``self - logsumexp(self, dim)``, computed stably. See
        ``dg.log_softmax``."""
        return F.log_softmax(self, dim)

    # elementwise -----------------------------------------------------------------------------
    def exp(self):
        """``exp() -> Tensor``: the elementwise exponential. See ``dg.exp``."""
        return _unary("exp", self)

    def log(self):
        """``log() -> Tensor``: the elementwise natural logarithm. See ``dg.log``."""
        return _unary("log", self)

    def sqrt(self):
        """``sqrt() -> Tensor``: the elementwise square root. See ``dg.sqrt``."""
        return _unary("sqrt", self)

    def rsqrt(self):
        """``rsqrt() -> Tensor``: ``1 / sqrt(self)``, elementwise. See ``dg.rsqrt``."""
        return _unary("rsqrt", self)

    def square(self):
        """``square() -> Tensor``: ``self * self``, elementwise. See ``dg.square``."""
        return _unary("square", self)

    def reciprocal(self):
        """``reciprocal() -> Tensor``: ``1 / self``, elementwise. See ``dg.reciprocal``."""
        return _unary("reciprocal", self)

    def sin(self):
        """``sin() -> Tensor``: the elementwise sine. See ``dg.sin``."""
        return _unary("sin", self)

    def cos(self):
        """``cos() -> Tensor``: the elementwise cosine. See ``dg.cos``."""
        return _unary("cos", self)

    def tanh(self):
        """``tanh() -> Tensor``: the elementwise hyperbolic tangent. See ``dg.tanh``."""
        return _unary("tanh", self)

    def sigmoid(self):
        """``sigmoid() -> Tensor``: ``1 / (1 + exp(-self))``, elementwise. See ``dg.sigmoid``."""
        return _unary("sigmoid", self)

    def logsigmoid(self):
        """``logsigmoid() -> Tensor``: ``log(sigmoid(self))``, computed stably
        (``torch.nn.functional.logsigmoid``; not a Tensor method in PyTorch). See
        ``dg.logsigmoid``."""
        return F.logsigmoid(self)

    def relu(self):
        """``relu() -> Tensor``: ``max(self, 0)``, elementwise. See ``dg.relu``."""
        return _unary("relu", self)

    def abs(self):
        """``abs() -> Tensor``: the elementwise absolute value. See ``dg.abs``."""
        return _unary("abs", self)

    def neg(self):
        """``neg() -> Tensor``: ``-self``, elementwise. See ``dg.neg``."""
        return F.neg(self)

    def sign(self):
        """``sign() -> Tensor``: -1, 0 or 1 by the sign of each element. See ``dg.sign``."""
        return F.sign(self)

    def erf(self):
        """``erf() -> Tensor``: the elementwise error function. See ``dg.erf``."""
        return F.erf(self)

    def clamp(self, min=None, max=None):
        """``clamp(min=None, max=None) -> Tensor``: every element clamped into [min, max] (either
        bound may be None); ``clip`` is the same. See ``dg.clamp``."""
        return F.clamp(self, min, max)

    def clip(self, min=None, max=None):
        """``clip(min=None, max=None) -> Tensor``: an alias of ``clamp``. See ``dg.clamp``."""
        return F.clamp(self, min, max)

    def pow(self, exponent):
        """``pow(exponent) -> Tensor``: ``self ** exponent``, elementwise (the exponent a number
        or a broadcastable tensor). See ``dg.pow``."""
        return F.pow(self, exponent)

    def add(self, other):
        """``add(other) -> Tensor``: ``self + other``, broadcast (Python numbers are weak
        scalars). Unlike ``torch.Tensor.add`` it takes no ``alpha``. See ``dg.add``."""
        return F.add(self, other)

    def sub(self, other):
        """``sub(other) -> Tensor``: ``self - other``, broadcast. Unlike ``torch.Tensor.sub`` it
        takes no ``alpha``. See ``dg.sub``."""
        return F.sub(self, other)

    def mul(self, other):
        """``mul(other) -> Tensor``: ``self * other``, broadcast. See ``dg.mul``."""
        return F.mul(self, other)

    def div(self, other, *, rounding_mode=None):
        """``div(other, *, rounding_mode=None) -> Tensor``: true division ``self / other``,
        broadcast (integer operands give the default float dtype); ``rounding_mode`` "trunc"
        or "floor" rounds the quotient, as ``torch.Tensor.div``. See ``dg.div``."""
        return F.div(self, other, rounding_mode=rounding_mode)

    def matmul(self, other):
        """``matmul(other) -> Tensor``: the matrix product ``self @ other`` (1-D operands are
        vectors, leading dims broadcast). See ``dg.matmul``."""
        return F.matmul(self, other)

    def maximum(self, other):
        """``maximum(other) -> Tensor``: the elementwise maximum of the two, broadcast. See
        ``dg.maximum``."""
        return F.maximum(self, other)

    def minimum(self, other):
        """``minimum(other) -> Tensor``: the elementwise minimum of the two, broadcast. See
        ``dg.minimum``."""
        return F.minimum(self, other)

    def eq(self, other):
        """``eq(other) -> Tensor``: ``self == other`` as a bool tensor, broadcast. See ``dg.eq``."""
        return F.eq(self, other)

    def ne(self, other):
        """``ne(other) -> Tensor``: ``self != other`` as a bool tensor, broadcast. See ``dg.ne``."""
        return F.ne(self, other)

    def lt(self, other):
        """``lt(other) -> Tensor``: ``self < other`` as a bool tensor, broadcast. See ``dg.lt``."""
        return F.lt(self, other)

    def le(self, other):
        """``le(other) -> Tensor``: ``self <= other`` as a bool tensor, broadcast. See ``dg.le``."""
        return F.le(self, other)

    def gt(self, other):
        """``gt(other) -> Tensor``: ``self > other`` as a bool tensor, broadcast. See ``dg.gt``."""
        return F.gt(self, other)

    def ge(self, other):
        """``ge(other) -> Tensor``: ``self >= other`` as a bool tensor, broadcast. See ``dg.ge``."""
        return F.ge(self, other)

    def logical_not(self):
        """``logical_not() -> Tensor``: elementwise not, as bool (nonzero counts as True). See
        ``dg.logical_not``."""
        return F.logical_not(self)

    # PyTorch methods written with the op functions ------------------------------------------
    def chunk(self, chunks, dim=0):
        """``chunk(chunks, dim=0) -> tuple of Tensors``: ``chunks`` nearly equal pieces along
        ``dim``, as ``torch.Tensor.chunk``. See ``dg.chunk``."""
        return F.chunk(self, chunks, dim)

    def mm(self, other):
        """``mm(other) -> Tensor``: the product of two 2-D matrices. See ``dg.mm``."""
        return F.mm(self, other)

    def bmm(self, other):
        """``bmm(other) -> Tensor``: the batched matrix product of two 3-D tensors ``(b, n, m) @
        (b, m, p) -> (b, n, p)``; other ranks raise a ShapeError."""
        if self.ndim != 3 or getattr(other, "ndim", 0) != 3:
            raise ShapeError(located(f"bmm: expected two 3-D tensors, found "
                                     f"{list(self.shape)} and "
                                     f"{list(getattr(other, 'shape', ()))}"))
        return F.matmul(self, other)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``addmm(mat1, mat2, *, beta=1, alpha=1) -> Tensor``: ``beta * self + alpha * (mat1 @
        mat2)`` with 2-D ``mat1`` and ``mat2``."""
        return self * beta + F.mm(mat1, mat2) * alpha

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """``baddbmm(batch1, batch2, *, beta=1, alpha=1) -> Tensor``: ``beta * self + alpha *
        (batch1 @ batch2)`` for batches of matrices."""
        return self * beta + F.matmul(batch1, batch2) * alpha

    def view_as(self, other):
        """``view_as(other) -> Tensor``: ``self.reshape(*other.shape)``. As with ``view``, the
        result is a value, not an alias of this tensor's storage."""
        return F.reshape(self, *other.shape)

    def where(self, condition, other):
        """``where(condition, other) -> Tensor``: ``self`` where ``condition`` holds, else
        ``other`` (broadcast together). See ``dg.where``."""
        return F.where(condition, self, other)

    def masked_fill(self, mask, value):
        """``value`` where ``mask`` holds, else this tensor (PyTorch's masked_fill)."""
        return F.masked_fill(self, mask, value)

    def narrow(self, dim, start, length):
        """``dg.narrow(self, dim, start, length)``: a slice along ``dim``."""
        return F.narrow(self, dim, start, length)

    def movedim(self, source, destination):
        """``dg.movedim``: move dims ``source`` to ``destination``."""
        return F.movedim(self, source, destination)

    moveaxis = movedim

    def unflatten(self, dim, sizes):
        """``dg.unflatten``: split dim ``dim`` into ``sizes``."""
        return F.unflatten(self, dim, sizes)

    def outer(self, vec2):
        """``dg.outer``: the outer product with the 1-D ``vec2``."""
        return F.outer(self, vec2)

    ger = outer

    def tril(self, diagonal=0):
        """``dg.tril``: the lower triangle (on and below ``diagonal``), zeros above."""
        return F.tril(self, diagonal)

    def triu(self, diagonal=0):
        """``dg.triu``: the upper triangle (on and above ``diagonal``), zeros below."""
        return F.triu(self, diagonal)

    def repeat(self, *sizes):
        """Tile the tensor ``sizes[i]`` times along dim i (new leading dims where
        ``sizes`` is longer), as PyTorch's repeat."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise ShapeError(located(f"repeat: expected at least {self.ndim} sizes, found "
                                     f"{len(sizes)}"))
        x = F.reshape(self, *((1,) * (len(sizes) - self.ndim) + tuple(self.shape)))
        inter = []
        for n, d in zip(sizes, x.shape):
            inter += [1, d]
        x = F.reshape(x, *inter)
        target = []
        for n, d in zip(sizes, x.shape[1::2]):
            target += [n, d]
        x = F.expand(x, *target)
        return F.reshape(x, *[n * d for n, d in zip(sizes, target[1::2])])

    def new_zeros(self, *size, dtype=None):
        """``new_zeros(*size, dtype=None) -> Tensor``: a tensor of zeros of ``size`` with this
        tensor's dtype unless ``dtype`` is given. Unlike PyTorch it takes no ``device`` or
        ``requires_grad``."""
        return F.zeros(*size, dtype=dtype or self.dtype)

    def new_ones(self, *size, dtype=None):
        """``new_ones(*size, dtype=None) -> Tensor``: a tensor of ones of ``size`` with this
        tensor's dtype unless ``dtype`` is given. Unlike PyTorch it takes no ``device`` or
        ``requires_grad``."""
        return F.ones(*size, dtype=dtype or self.dtype)

    def new_full(self, size, fill_value, dtype=None):
        """``new_full(size, fill_value, dtype=None) -> Tensor``: a tensor of ``size`` filled with
        ``fill_value``, with this tensor's dtype unless ``dtype`` is given. Unlike PyTorch it
        takes no ``device`` or ``requires_grad``."""
        return F.full(size, fill_value, dtype=dtype or self.dtype)

    def is_contiguous(self, memory_format=None):
        """``is_contiguous(memory_format=None) -> bool``: always True; duograph tensors have no
        strides visible to the user."""
        return True

    def nelement(self):
        """``nelement() -> int``: the number of elements, as ``numel()``."""
        return self.numel()

    def ndimension(self):
        """``ndimension() -> int``: the number of dims, as ``dim()``."""
        return self.ndim

    def cast(self, dtype):
        """``cast(dtype) -> Tensor``: the elements converted to ``dtype`` (floats to ints
        truncate toward zero). duograph's name for ``to(dtype)``. See ``dg.cast``."""
        return F.cast(self, dtype)

    def type_as(self, other):
        """``type_as(other) -> Tensor``: the elements converted to ``other``'s dtype."""
        return F.cast(self, other.dtype)

    # more PyTorch methods (round, nan_to_num, lerp, xlogy, shifts, flips, diagonals...) ---
    def round(self, decimals=0):
        """``dg.round``: round half to even, to ``decimals`` places."""
        return F.round(self, decimals=decimals)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """``dg.nan_to_num``: replace NaN and infinities by finite values."""
        return F.nan_to_num(self, nan, posinf, neginf)

    def lerp(self, end, weight):
        """``dg.lerp``: ``self + weight * (end - self)``."""
        return F.lerp(self, end, weight)

    def xlogy(self, other):
        """``dg.xlogy``: ``self * log(other)``, 0 where self == 0."""
        return F.xlogy(self, other)

    def bitwise_left_shift(self, other):
        """``dg.bitwise_left_shift``: ``self << other``."""
        return F.bitwise_left_shift(self, other)

    def bitwise_right_shift(self, other):
        """``dg.bitwise_right_shift``: ``self >> other``."""
        return F.bitwise_right_shift(self, other)

    def __lshift__(self, other):
        return F.bitwise_left_shift(self, other)

    def __rlshift__(self, other):
        return F.bitwise_left_shift(other, self)

    def __rshift__(self, other):
        return F.bitwise_right_shift(self, other)

    def __rrshift__(self, other):
        return F.bitwise_right_shift(other, self)

    def flip(self, *dims):
        """``dg.flip``: reverse along ``dims`` (``t.flip(0, 1)`` or ``t.flip((0, 1))``)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return F.flip(self, dims)

    def fliplr(self):
        """``dg.fliplr``: reverse dim 1."""
        return F.fliplr(self)

    def flipud(self):
        """``dg.flipud``: reverse dim 0."""
        return F.flipud(self)

    def roll(self, shifts, dims=None):
        """``dg.roll``: shift cyclically along ``dims`` (flattened without)."""
        return F.roll(self, shifts, dims)

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        """``dg.repeat_interleave``: repeat each element ``repeats`` times."""
        return F.repeat_interleave(self, repeats, dim, output_size=output_size)

    def tile(self, *dims):
        """``dg.tile``: repeat the whole tensor ``dims[i]`` times along dim i."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return F.tile(self, dims)

    def diag(self, diagonal=0):
        """``dg.diag``: a 1-D tensor as a diagonal matrix, or a matrix's diagonal."""
        return F.diag(self, diagonal)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        """``dg.diagonal``: the diagonal over ``dim1`` and ``dim2``, as a last dim."""
        return F.diagonal(self, offset, dim1, dim2)

    def trace(self):
        """``dg.trace``: the sum of a matrix's main diagonal."""
        return F.trace(self)

    def cross(self, other, dim=None):
        """``dg.cross``: the cross product of 3-vectors along ``dim``."""
        return F.cross(self, other, dim)

    def tensor_split(self, indices_or_sections, dim=0):
        """``dg.tensor_split``: a tuple of parts (sections or split indices)."""
        return F.tensor_split(self, indices_or_sections, dim)
    # scans, sorting, selection, norms and closeness (PyTorch's signatures) -----------------
    def cumsum(self, dim, *, dtype=None):
        """Cumulative sum along ``dim`` (integers sum to int64)."""
        return F.cumsum(self, dim, dtype=dtype)

    def cumprod(self, dim, *, dtype=None):
        """Cumulative product along ``dim`` (integers multiply in int64)."""
        return F.cumprod(self, dim, dtype=dtype)

    def cummax(self, dim):
        """Running maximum along ``dim``: ``(values, indices)``."""
        return F.cummax(self, dim)

    def cummin(self, dim):
        """Running minimum along ``dim``: ``(values, indices)``."""
        return F.cummin(self, dim)

    def logcumsumexp(self, dim):
        """log(cumsum(exp(x))) along ``dim``, computed stably."""
        return F.logcumsumexp(self, dim)

    def sort(self, dim=-1, descending=False, stable=False):
        """Sort along ``dim``: ``(values, indices)`` (stable; NaN sorts as the largest)."""
        return F.sort(self, dim, descending, stable=stable)

    def argsort(self, dim=-1, descending=False, stable=False):
        """The indices that sort the tensor along ``dim``."""
        return F.argsort(self, dim, descending, stable=stable)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The ``k`` largest (smallest) elements along ``dim``: ``(values, indices)``."""
        return F.topk(self, k, dim, largest, sorted)

    def kthvalue(self, k, dim=-1, keepdim=False):
        """The ``k``-th smallest element along ``dim``: ``(values, indices)``."""
        return F.kthvalue(self, k, dim, keepdim)

    def median(self, dim=None, keepdim=False):
        """The lower median of all elements, or ``(values, indices)`` along ``dim``."""
        return F.median(self, dim, keepdim)

    def mode(self, dim=-1, keepdim=False):
        """The most frequent value along ``dim`` and its index: ``(values, indices)``."""
        return F.mode(self, dim, keepdim)

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
        """The distinct elements (eager mode only; see ``dg.unique``)."""
        return F.unique(self, sorted, return_inverse, return_counts, dim)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """``torch.norm``: the vector ``p``-norm over ``dim`` (all elements by default)."""
        return F.norm(self, p, dim, keepdim, dtype)

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        """Elementwise closeness as a bool tensor (see ``dg.isclose``)."""
        return F.isclose(self, other, rtol, atol, equal_nan)

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        """Whether every element is close to ``other``: a Python bool."""
        return F.allclose(self, other, rtol, atol, equal_nan)

    def equal(self, other):
        """Whether ``other`` has the same shape and elements: a Python bool."""
        return F.equal(self, other)

    # indexing and the scatter family (graphlib/ops/indexing.py, scatter.py) -----------------
    def scatter(self, dim, index, src=None, value=None, *, reduce=None):
        """``torch.Tensor.scatter``: this tensor with ``src`` (or a number) written at
        ``index`` along ``dim``."""
        return F.scatter(self, dim, index, src, value, reduce=reduce)

    def scatter_add(self, dim, index, src):
        """``torch.Tensor.scatter_add``: ``src`` added at ``index`` along ``dim``."""
        return F.scatter_add(self, dim, index, src)

    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        """``torch.Tensor.scatter_reduce`` (sum, prod, mean, amax, amin)."""
        return F.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def index_add(self, dim, index, source, *, alpha=1):
        """``torch.Tensor.index_add``: ``alpha * source`` added at ``index`` along ``dim``."""
        return F.index_add(self, dim, index, source, alpha=alpha)

    def index_copy(self, dim, index, source):
        """``torch.Tensor.index_copy``: ``source`` copied to ``index`` along ``dim``."""
        return F.index_copy(self, dim, index, source)

    def index_fill(self, dim, index, value):
        """``torch.Tensor.index_fill``: ``value`` at ``index`` along ``dim``."""
        return F.index_fill(self, dim, index, value)

    def index_put(self, indices, values, accumulate=False):
        """``torch.Tensor.index_put``: ``self[indices] = values`` out of place."""
        return F.index_put(self, indices, values, accumulate)

    def masked_select(self, mask):
        """``torch.Tensor.masked_select``: the elements where ``mask`` holds (1-D)."""
        return F.masked_select(self, mask)

    def masked_scatter(self, mask, source):
        """``torch.Tensor.masked_scatter``: ``source``'s elements where ``mask`` holds."""
        return F.masked_scatter(self, mask, source)

    def take_along_dim(self, indices, dim=None):
        """``torch.Tensor.take_along_dim``."""
        return F.take_along_dim(self, indices, dim)

    def take(self, index):
        """``torch.Tensor.take``: the flattened tensor at ``index``."""
        return F.take(self, index)

    def nonzero(self, *, as_tuple=False):
        """``torch.Tensor.nonzero``: coordinates of the nonzero elements."""
        return F.nonzero(self, as_tuple=as_tuple)

    def argwhere(self):
        """``torch.Tensor.argwhere``: ``nonzero()``."""
        return F.argwhere(self)

    # -- complex numbers ----------------------------------------------------------------------
    @property
    def real(self):
        """The real part (a copy; the tensor itself when it is real). See ``dg.real``."""
        return F.real(self)

    @property
    def imag(self):
        """The imaginary part of a complex tensor (a copy). See ``dg.imag``."""
        return F.imag(self)

    def conj(self):
        """``conj() -> Tensor``: the complex conjugate (``self`` when real). See ``dg.conj``."""
        return F.conj(self)

    def angle(self):
        """``angle() -> Tensor``: the argument of each element. See ``dg.angle``."""
        return F.angle(self)

    def is_complex(self) -> bool:
        """Whether the dtype is complex64 or complex128."""
        return self.dtype in ("complex64", "complex128")


def _add_axis_aliases(cls):
    """``axis=``/``keepdims=`` wherever a method takes ``dim=``/``keepdim=`` (as PyTorch)."""
    for name, fn in list(vars(cls).items()):
        if callable(fn) and not isinstance(fn, type) and not name.startswith("__"):
            new = accept_axis(fn)
            if new is not fn:
                setattr(cls, name, new)


_add_axis_aliases(TensorMethods)
