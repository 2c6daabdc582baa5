"""The one method surface shared by symbolic Values and eager tensors.

Operators and methods call the public op functions, which dispatch on the operands, so the
same ``x.sum(dim=1) @ w + 1`` builds a node for a Value and runs at once for a tensor.
"""
from __future__ import annotations

F = None  # the functional module; bound by graphlib/__init__ once every op is registered


def _is_dtype(x) -> bool:
    """Whether ``x`` names a dtype (``view(dg.int32)``), not a size."""
    if isinstance(x, (int, tuple, list)) or hasattr(x, "__index__"):
        return False
    from . import dtypes
    try:
        dtypes.as_dtype(x)
    except Exception:
        return False
    return True


class TensorMethods:
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
        return F.remainder(self, other)

    def fmod(self, other):
        return F.fmod(self, other)

    def floor_divide(self, other):
        return F.floor_divide(self, other)

    def atan2(self, other):
        return F.atan2(self, other)

    arctan2 = atan2

    def hypot(self, other):
        return F.hypot(self, other)

    def logical_xor(self, other):
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
        return F.abs(self)

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
        return F.tan(self)

    def asin(self):
        return F.asin(self)

    def acos(self):
        return F.acos(self)

    def atan(self):
        return F.atan(self)

    def sinh(self):
        return F.sinh(self)

    def cosh(self):
        return F.cosh(self)

    def asinh(self):
        return F.asinh(self)

    def acosh(self):
        return F.acosh(self)

    def atanh(self):
        return F.atanh(self)

    def log1p(self):
        return F.log1p(self)

    def expm1(self):
        return F.expm1(self)

    def log2(self):
        return F.log2(self)

    def log10(self):
        return F.log10(self)

    def exp2(self):
        return F.exp2(self)

    def floor(self):
        return F.floor(self)

    def ceil(self):
        return F.ceil(self)

    def trunc(self):
        return F.trunc(self)

    def frac(self):
        return F.frac(self)

    def isnan(self):
        return F.isnan(self)

    def isinf(self):
        return F.isinf(self)

    def isfinite(self):
        return F.isfinite(self)

    arcsin, arccos, arctan = asin, acos, atan
    arcsinh, arccosh, arctanh = asinh, acosh, atanh
    fix = trunc

    def bitwise_and(self, other):
        return F.bitwise_and(self, other)

    def bitwise_or(self, other):
        return F.bitwise_or(self, other)

    def bitwise_xor(self, other):
        return F.bitwise_xor(self, other)

    def bitwise_not(self):
        return F.bitwise_not(self)

    __hash__ = object.__hash__

    # indexing and shape ------------------------------------------------------------------------
    def __getitem__(self, index):
        return F.getitem(self, index)

    def __setitem__(self, index, value):
        """Eager tensors write in place (``Tensor.__setitem__``); a graph Value is
        immutable, so this raises an error naming the out-of-place forms."""
        from .errors import located
        raise TypeError(located(
            "__setitem__: a graph Value cannot be assigned to in place; build the new value "
            "and use it instead: y = dg.index_put(x, indices, values), "
            "dg.masked_fill(x, mask, value), dg.where(mask, values, x) or "
            "dg.scatter(x, dim, index, src)"))

    def reshape(self, *shape):
        return F.reshape(self, *shape)

    def view(self, *shape):
        """A tensor of the same data with another shape; ``view(dtype)`` reads the same
        bytes as ``dtype`` instead (the last dim scales when the element sizes differ), as
        ``torch.Tensor.view``. duograph's views are values, not aliases of the storage."""
        if len(shape) == 1 and _is_dtype(shape[0]):
            from .ops.layout import view_dtype
            return view_dtype(self, shape[0])
        return F.reshape(self, *shape)

    def permute(self, *dims):
        return F.permute(self, *dims)

    def transpose(self, dim0, dim1):
        return F.transpose(self, dim0, dim1)

    def t(self):
        return F.transpose(self, 0, 1) if self.ndim == 2 else self

    @property
    def T(self):
        return F.permute(self, *reversed(range(self.ndim)))

    def expand(self, *sizes):
        return F.expand(self, *sizes)

    def expand_as(self, other):
        return F.expand(self, *other.shape)

    def squeeze(self, dim=None):
        return F.squeeze(self, dim)

    def unsqueeze(self, dim):
        return F.unsqueeze(self, dim)

    def flatten(self, start_dim=0, end_dim=-1):
        return F.flatten(self, start_dim, end_dim)

    def split(self, split_size_or_sections, dim=0):
        return F.split(self, split_size_or_sections, dim)

    def gather(self, dim, index):
        return F.gather(self, dim, index)

    def index_select(self, dim, index):
        return F.index_select(self, dim, index)

    # reductions ------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, dtype=None):
        return F.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim=False):
        return F.mean(self, dim, keepdim)

    def amax(self, dim=None, keepdim=False):
        return F.amax(self, dim, keepdim)

    def amin(self, dim=None, keepdim=False):
        return F.amin(self, dim, keepdim)

    def max(self, dim=None, keepdim=False):
        """The largest element; with ``dim``, (values, indices) as ``torch.Tensor.max``."""
        return F.max(self, dim, keepdim)

    def min(self, dim=None, keepdim=False):
        """The smallest element; with ``dim``, (values, indices) as ``torch.Tensor.min``."""
        return F.min(self, dim, keepdim)

    def prod(self, dim=None, keepdim=False):
        return F.prod(self, dim, keepdim)

    def var(self, dim=None, keepdim=False, *, correction=1):
        return F.var(self, dim, keepdim=keepdim, correction=correction)

    def std(self, dim=None, keepdim=False, *, correction=1):
        return F.std(self, dim, keepdim=keepdim, correction=correction)

    def argmax(self, dim=None, keepdim=False):
        return F.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return F.argmin(self, dim, keepdim)

    def logsumexp(self, dim, keepdim=False):
        return F.logsumexp(self, dim, keepdim)

    def softmax(self, dim):
        return F.softmax(self, dim)

    def log_softmax(self, dim):
        return F.log_softmax(self, dim)

    # elementwise -----------------------------------------------------------------------------
    def exp(self):
        return F.exp(self)

    def log(self):
        return F.log(self)

    def sqrt(self):
        return F.sqrt(self)

    def rsqrt(self):
        return F.rsqrt(self)

    def square(self):
        return F.square(self)

    def reciprocal(self):
        return F.reciprocal(self)

    def sin(self):
        return F.sin(self)

    def cos(self):
        return F.cos(self)

    def tanh(self):
        return F.tanh(self)

    def sigmoid(self):
        return F.sigmoid(self)

    def logsigmoid(self):
        return F.logsigmoid(self)

    def relu(self):
        return F.relu(self)

    def abs(self):
        return F.abs(self)

    def neg(self):
        return F.neg(self)

    def sign(self):
        return F.sign(self)

    def erf(self):
        return F.erf(self)

    def clamp(self, min=None, max=None):
        return F.clamp(self, min, max)

    def clip(self, min=None, max=None):
        return F.clamp(self, min, max)

    def pow(self, exponent):
        return F.pow(self, exponent)

    def add(self, other):
        return F.add(self, other)

    def sub(self, other):
        return F.sub(self, other)

    def mul(self, other):
        return F.mul(self, other)

    def div(self, other):
        return F.div(self, other)

    def matmul(self, other):
        return F.matmul(self, other)

    def maximum(self, other):
        return F.maximum(self, other)

    def minimum(self, other):
        return F.minimum(self, other)

    def eq(self, other):
        return F.eq(self, other)

    def ne(self, other):
        return F.ne(self, other)

    def lt(self, other):
        return F.lt(self, other)

    def le(self, other):
        return F.le(self, other)

    def gt(self, other):
        return F.gt(self, other)

    def ge(self, other):
        return F.ge(self, other)

    def logical_not(self):
        return F.logical_not(self)

    # PyTorch methods written with the op functions ------------------------------------------
    def chunk(self, chunks, dim=0):
        return F.chunk(self, chunks, dim)

    def mm(self, other):
        return F.mm(self, other)

    def bmm(self, other):
        if self.ndim != 3 or getattr(other, "ndim", 0) != 3:
            from .errors import ShapeError, located
            raise ShapeError(located(f"bmm: expected two 3-D tensors, found "
                                     f"{list(self.shape)} and "
                                     f"{list(getattr(other, 'shape', ()))}"))
        return F.matmul(self, other)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return self * beta + F.mm(mat1, mat2) * alpha

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return self * beta + F.matmul(batch1, batch2) * alpha

    def view_as(self, other):
        return F.reshape(self, *other.shape)

    def where(self, condition, other):
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
            from .errors import ShapeError, located
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
        return F.zeros(*size, dtype=dtype or self.dtype)

    def new_ones(self, *size, dtype=None):
        return F.ones(*size, dtype=dtype or self.dtype)

    def new_full(self, size, fill_value, dtype=None):
        return F.full(size, fill_value, dtype=dtype or self.dtype)

    def is_contiguous(self, memory_format=None):
        return True

    def nelement(self):
        return self.numel()

    def ndimension(self):
        return self.ndim

    def cast(self, dtype):
        return F.cast(self, dtype)

    def type_as(self, other):
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

    # indexing and the scatter family (graphlib/ops/indexing.py) -----------------------------
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
