"""More of PyTorch's layers: ``GroupNorm``, ``InstanceNorm1d/2d/3d``, ``EmbeddingBag``,
``Bilinear`` and ``Unflatten`` (PyTorch's arguments, defaults and parameter names)."""
from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

from ..eager.tensors import Parameter, Tensor
from . import functional as NF
from . import init
from .layers import _shape_error
from .module import Module

__all__ = ["GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "EmbeddingBag",
           "Bilinear", "Unflatten"]


def _float_dtype(dtype) -> np.dtype:
    from ..graphlib import dtypes
    return np.dtype("float32" if dtype is None else dtypes.as_dtype(dtype))


class GroupNorm(Module):
    """Normalise each sample over groups of channels (``torch.nn.GroupNorm``): input
    (N, C, *), ``num_channels`` divisible by ``num_groups``; per-channel ``weight`` (ones) and
    ``bias`` (zeros) when ``affine``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.affine = affine
        dt = _float_dtype(dtype)
        if affine:
            self.weight = Parameter(np.ones(num_channels, dt))
            self.bias = Parameter(np.zeros(num_channels, dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        if x.ndim < 2 or (isinstance(x.shape[1], int) and x.shape[1] != self.num_channels):
            raise _shape_error(self, f"expected an input (N, {self.num_channels}, *), found "
                               f"shape {list(x.shape)}")
        return NF.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(Module):
    _spatial = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = _float_dtype(dtype)
        if affine:
            self.weight = Parameter(np.ones(num_features, dt))
            self.bias = Parameter(np.zeros(num_features, dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor._wrap(np.zeros(num_features, dt)))
            self.register_buffer("running_var", Tensor._wrap(np.ones(num_features, dt)))
            self.register_buffer("num_batches_tracked", Tensor._wrap(np.zeros((), np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x):
        d = self._spatial
        if x.ndim not in (d + 1, d + 2):
            raise _shape_error(self, f"expected a {d + 1}-D (unbatched) or {d + 2}-D input, "
                               f"found shape {list(x.shape)}")
        batched = x.ndim == d + 2
        c = x.shape[1 if batched else 0]
        if isinstance(c, int) and c != self.num_features:
            if self.affine or self.track_running_stats:
                raise _shape_error(self, f"expected input's size at dim={1 if batched else 0} "
                                   f"to match num_features ({self.num_features}), but got: "
                                   f"{c}")
            warnings.warn(f"{type(self).__name__}: input's size at dim={1 if batched else 0} "
                          f"does not match num_features. You can silence this warning by not "
                          f"passing in num_features, which is not used because affine=False",
                          UserWarning, stacklevel=3)
        if not batched:
            x = x.unsqueeze(0)
        out = NF.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)
        return out if batched else out.squeeze(0)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of (N, C, L) or (C, L) inputs (``torch.nn.InstanceNorm1d``;
    ``affine`` and ``track_running_stats`` default to False, as there)."""
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of (N, C, H, W) or (C, H, W) inputs
    (``torch.nn.InstanceNorm2d``)."""
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of (N, C, D, H, W) or (C, D, H, W) inputs."""
    _spatial = 3


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings without building the per-index rows
    (``torch.nn.EmbeddingBag``); ``forward(input, offsets=None, per_sample_weights=None)``,
    see ``nn.functional.embedding_bag``. weight ~ N(0, 1), the ``padding_idx`` row zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 max_norm: Optional[float] = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight=None, include_last_offset: bool = False,
                 padding_idx: Optional[int] = None, device=None, dtype=None):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', found "
                             f"{mode!r}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError("EmbeddingBag: padding_idx must be within num_embeddings")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        if _weight is None:
            self.weight = Parameter(np.zeros((num_embeddings, embedding_dim),
                                             _float_dtype(dtype)))
            init.normal_(self.weight)
            if padding_idx is not None:
                self.weight.array[padding_idx] = 0.0
        else:
            arr = np.asarray(_weight.detach().numpy() if hasattr(_weight, "detach")
                             else _weight)
            if arr.shape != (num_embeddings, embedding_dim):
                raise ValueError("EmbeddingBag: shape of weight does not match "
                                 "num_embeddings and embedding_dim")
            self.weight = Parameter(arr)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return NF.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                                self.scale_grad_by_freq, self.mode, self.sparse,
                                per_sample_weights, self.include_last_offset,
                                self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class Bilinear(Module):
    """y = x1^T A x2 + b (``torch.nn.Bilinear``); weight (out, in1, in2) and bias ~
    U(-1/sqrt(in1_features), 1/sqrt(in1_features))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        dt = _float_dtype(dtype)
        self.weight = Parameter(np.zeros((out_features, in1_features, in2_features), dt))
        if bias:
            self.bias = Parameter(np.zeros(out_features, dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's init: weight and bias from U(-1/sqrt(in1_features), 1/sqrt(in1_features)).
        Called by the constructor."""
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return NF.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Unflatten(Module):
    """Expand dim ``dim`` into ``unflattened_size`` (``torch.nn.Unflatten``)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if isinstance(dim, str):
            raise TypeError("Unflatten: named dims are not supported; give dim as an int")
        if not isinstance(unflattened_size, (tuple, list)) or not all(
                isinstance(s, (int, np.integer)) for s in unflattened_size):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, found "
                            f"{unflattened_size!r}")
        self.dim, self.unflattened_size = dim, tuple(int(s) for s in unflattened_size)

    def forward(self, x):
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
