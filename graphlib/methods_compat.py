"""PyTorch's small Tensor methods and method spellings (``is_floating_point``, ``stride``,
``unfold``, ``divide``/``multiply``/``subtract``...), shared by Values and eager tensors
like ``methods.TensorMethods``, which inherits them."""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import ShapeError, located
from .methods_names import NamesMethods

F = None            # the functional module, set by ``methods.set_functions``


class PyTorchMethods(NamesMethods):
    """PyTorch's method spellings over the op functions."""

    __slots__ = ()

    def is_floating_point(self) -> bool:
        """``is_floating_point() -> bool``: whether the dtype is a floating-point one
        (float16, bfloat16, float32, float64), as ``torch.Tensor.is_floating_point``."""
        return dtypes.is_float(self.dtype)

    def is_complex(self) -> bool:
        """``is_complex() -> bool``: whether the dtype is complex (never, for duograph's
        dtypes)."""
        return False

    def stride(self, dim=None):
        """``stride(dim=None)``: the strides (in elements) of the row-major layout every
        duograph tensor presents (``is_contiguous()`` is always True), as a tuple, or the
        stride of dim ``dim``; the symbolic dims of a Value give symbolic strides."""
        shape = tuple(self.shape)
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step = step * size
        strides = tuple(reversed(strides))
        if dim is None:
            return strides
        if not -len(shape) <= dim < max(len(shape), 1):
            raise IndexError(located(f"stride: dim {dim} is out of range for a "
                                     f"{len(shape)}-D tensor"))
        return strides[dim] if shape else 1

    def unfold(self, dimension: int, size: int, step: int):
        """``unfold(dimension, size, step)``: every window of ``size`` elements along
        ``dimension``, ``step`` apart; ``dimension`` becomes the window count and a last dim
        of ``size`` is added, as ``torch.Tensor.unfold`` (a gather here, with its gradient,
        where PyTorch returns a view)."""
        nd = max(self.ndim, 1)
        if not -nd <= dimension < nd:
            raise IndexError(located(f"unfold: dimension {dimension} is out of range for a "
                                     f"{self.ndim}-D tensor"))
        dim = dimension % nd
        length = self.shape[dim] if self.ndim else 1
        if step <= 0:
            raise ShapeError(located(f"unfold: step is {step} but must be > 0"))
        if size < 0 or size > length:
            raise ShapeError(located(f"unfold: maximum size for tensor at dimension {dim} is "
                                     f"{length} but size is {size}"))
        x = self if self.ndim else F.reshape(self, 1)
        count = (length - size) // step + 1
        index = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
        picked = F.index_select(x, dim, F.constant(index.astype(np.int64)))
        shape = list(x.shape)
        shape[dim:dim + 1] = [count, size]
        out = F.movedim(F.reshape(picked, *shape), dim + 1, -1)
        return out if self.ndim else F.reshape(out, size)

    def divide(self, other, *, rounding_mode=None):
        """``divide(other, *, rounding_mode=None)``: ``div``'s alias, as PyTorch's."""
        return F.div(self, other, rounding_mode=rounding_mode)

    def true_divide(self, other):
        """``true_divide(other)``: ``div(other)`` (true division), as PyTorch's."""
        return F.div(self, other)

    def multiply(self, other):
        """``multiply(other)``: ``mul(other)``, as PyTorch's."""
        return F.mul(self, other)

    def subtract(self, other, *, alpha=1):
        """``subtract(other, *, alpha=1)``: ``self - alpha * other``, as PyTorch's."""
        return F.sub(self, other if alpha == 1 else other * alpha)

    def nansum(self, dim=None, keepdim: bool = False, *, dtype=None):
        """``nansum(dim=None, keepdim=False)``: ``dg.nansum(self, ...)``."""
        return F.nansum(self, dim, keepdim, dtype=dtype)

    def logaddexp(self, other):
        """``logaddexp(other)``: ``dg.logaddexp(self, other)``."""
        return F.logaddexp(self, other)

    def copysign(self, other):
        """``copysign(other)``: ``dg.copysign(self, other)``."""
        return F.copysign(self, other)

    def bmm(self, mat2):
        """``bmm(mat2)``: ``dg.bmm(self, mat2)``."""
        return F.bmm(self, mat2)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``addmm(mat1, mat2, *, beta=1, alpha=1)``: ``dg.addmm(self, mat1, mat2, ...)``."""
        return F.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        """``multinomial(num_samples, replacement=False)``: ``dg.multinomial(self, ...)``."""
        return F.multinomial(self, num_samples, replacement)

    def dot(self, other):
        """``dot(other)``: ``dg.dot(self, other)``."""
        return F.dot(self, other)

    def mv(self, vec):
        """``mv(vec)``: ``dg.mv(self, vec)``."""
        return F.mv(self, vec)

    def unbind(self, dim: int = 0):
        """``unbind(dim=0)``: ``dg.unbind(self, dim)``."""
        return F.unbind(self, dim)

    def swapaxes(self, axis0: int, axis1: int):
        """``swapaxes(axis0, axis1)``: ``dg.swapaxes``."""
        return F.swapaxes(self, axis0, axis1)

    swapdims = swapaxes

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        """``diff(n=1, dim=-1)``: ``dg.diff(self, ...)``."""
        return F.diff(self, n, dim, prepend, append)

    def count_nonzero(self, dim=None):
        """``count_nonzero(dim=None)``: ``dg.count_nonzero(self, dim)``."""
        return F.count_nonzero(self, dim)

    def nanmean(self, dim=None, keepdim: bool = False, *, dtype=None):
        """``nanmean(dim=None, keepdim=False)``: ``dg.nanmean(self, ...)``."""
        return F.nanmean(self, dim, keepdim, dtype=dtype)

    def clamp_min(self, min):
        """``clamp_min(min)``: ``dg.clamp_min(self, min)``."""
        return F.clamp_min(self, min)

    def clamp_max(self, max):
        """``clamp_max(max)``: ``dg.clamp_max(self, max)``."""
        return F.clamp_max(self, max)

    def addcmul(self, tensor1, tensor2, *, value=1):
        """``addcmul(tensor1, tensor2, *, value=1)``: ``dg.addcmul(self, ...)``."""
        return F.addcmul(self, tensor1, tensor2, value=value)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """``addcdiv(tensor1, tensor2, *, value=1)``: ``dg.addcdiv(self, ...)``."""
        return F.addcdiv(self, tensor1, tensor2, value=value)

    def rot90(self, k: int = 1, dims=(0, 1)):
        """``rot90(k=1, dims=(0, 1))``: ``dg.rot90(self, ...)``."""
        return F.rot90(self, k, dims)

    def dist(self, other, p: float = 2.0):
        """``dist(other, p=2)``: ``dg.dist(self, other, p)``."""
        return F.dist(self, other, p)

    def reshape_as(self, other):
        """``reshape_as(other)``: ``self.reshape(other.shape)``."""
        return F.reshape(self, *other.shape)

    @property
    def mT(self):  # noqa: N802 - PyTorch's name
        """The last two dims swapped (a batch of matrices transposed), as ``Tensor.mT``."""
        if self.ndim < 2:
            raise ShapeError(located(f"tensor.mT is only supported on matrices or batches of "
                                     f"matrices. Got {self.ndim}-D tensor."))
        return F.transpose(self, -2, -1)

    def sum_to_size(self, *size):
        """``sum_to_size(*size)``: summed down to ``size`` (the shape it broadcasts from), as
        ``torch.Tensor.sum_to_size``."""
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        return F.sum_to(self, tuple(size))

    def float_power(self, exponent):
        """``float_power(exponent)``: ``self ** exponent`` in float64, as PyTorch's."""
        return F.pow(F.cast(self, "float64"), F.cast(exponent, "float64")
                     if hasattr(exponent, "dtype") else exponent)

    def new_empty(self, *size, dtype=None):
        """``new_empty(*size, dtype=None)``: a tensor of ``size`` with this tensor's dtype
        (unless ``dtype``); duograph fills it with zeros where PyTorch leaves it
        uninitialised."""
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        return F.zeros(*size, dtype=dtype or self.dtype)

    def get_device(self) -> int:
        """``get_device() -> int``: -1 on the CPU, else the CUDA device's index, as
        PyTorch's."""
        device = str(getattr(self, "device", "cpu"))
        if device == "cpu":
            return -1
        return int(device.partition(":")[2] or 0)

    def storage_offset(self) -> int:
        """``storage_offset() -> int``: 0; every duograph tensor starts its own buffer (views
        that share one are copies here)."""
        return 0

    def data_ptr(self) -> int:
        """``data_ptr() -> int``: the address of the first element of the tensor's buffer
        (eager tensors)."""
        array = getattr(self, "array", None)
        if array is None:
            raise RuntimeError(located("data_ptr: a graph Value has no buffer"))
        if hasattr(array, "__array_interface__"):
            return int(array.__array_interface__["data"][0])
        return int(array.data.ptr)       # cupy

    def pin_memory(self):
        """``pin_memory()``: ``self``; duograph copies host arrays to the GPU from pageable
        memory (cupy), so there is nothing to pin."""
        return self
