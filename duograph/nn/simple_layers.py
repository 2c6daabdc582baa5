"""Small layers over ``nn.functional`` with PyTorch's arguments, defaults and parameter
names: ``SmoothL1Loss``, ``HuberLoss``, ``CosineSimilarity``, ``PairwiseDistance``,
``RMSNorm``, ``Dropout1d/2d/3d``, ``Softplus``."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..eager.tensors import Parameter
from . import functional as NF
from .layers import _Loss
from .module import Module

__all__ = ["SmoothL1Loss", "HuberLoss", "CosineSimilarity", "PairwiseDistance", "RMSNorm",
           "Dropout1d", "Dropout2d", "Dropout3d", "Softplus"]


class SmoothL1Loss(_Loss):
    """``SmoothL1Loss(size_average=None, reduce=None, reduction="mean", beta=1.0)``: see
    ``nn.functional.smooth_l1_loss``."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return NF.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """``HuberLoss(reduction="mean", delta=1.0)``: see ``nn.functional.huber_loss``."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return NF.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class CosineSimilarity(Module):
    """``CosineSimilarity(dim=1, eps=1e-8)``: see ``nn.functional.cosine_similarity``."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return NF.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``PairwiseDistance(p=2.0, eps=1e-6, keepdim=False)``: see
    ``nn.functional.pairwise_distance``."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return NF.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class RMSNorm(Module):
    """``RMSNorm(normalized_shape, eps=None, elementwise_affine=True)``: root-mean-square
    normalisation over the last dims, ``weight`` starting at 1; see
    ``nn.functional.rms_norm``."""

    def __init__(self, normalized_shape, eps: Optional[float] = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.ones(shape, np.dtype(dtype or "float32")))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """``weight`` back to ones."""
        if self.weight is not None:
            self.weight.array[...] = 1

    def forward(self, x):
        return NF.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _DropoutNd(Module):
    """What the channel-dropout layers share: ``p`` and ``inplace``."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 "
                             f"and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) input in training; see ``nn.functional.dropout1d``."""

    def forward(self, x):
        return NF.dropout1d(x, self.p, self.training)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) input in training; see
    ``nn.functional.dropout2d``."""

    def forward(self, x):
        return NF.dropout2d(x, self.p, self.training)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) input in training; see
    ``nn.functional.dropout3d``."""

    def forward(self, x):
        return NF.dropout3d(x, self.p, self.training)


class Softplus(Module):
    """``Softplus(beta=1.0, threshold=20.0)``: log(1 + exp(beta * x)) / beta, linear above
    ``threshold``; see ``dg.softplus``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return NF.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"
