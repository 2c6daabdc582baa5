"""Small layers over ``nn.functional`` with PyTorch's arguments, defaults and parameter
names: ``SmoothL1Loss``, ``HuberLoss``, ``CosineSimilarity``, ``PairwiseDistance``,
``RMSNorm``, ``Dropout1d/2d/3d``, ``Softplus``."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..eager.tensors import Parameter
from . import functional as NF
from .layers import _BatchNorm, _Loss
from .module import Module

__all__ = ["SmoothL1Loss", "HuberLoss", "CosineSimilarity", "PairwiseDistance", "RMSNorm",
           "Dropout1d", "Dropout2d", "Dropout3d", "Softplus", "BatchNorm3d", "AlphaDropout",
           "MarginRankingLoss", "CosineEmbeddingLoss", "HingeEmbeddingLoss", "SoftMarginLoss",
           "TripletMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "Hardshrink",
           "Softshrink", "LocalResponseNorm", "ChannelShuffle"]


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


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over a 5-D (N, C, D, H, W) input, per channel, as
    ``torch.nn.BatchNorm3d(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True)``; see ``BatchNorm2d``."""

    _dims = (5,)
    _what = "a 5-D input (N, C, D, H, W)"


class AlphaDropout(_DropoutNd):
    """Dropout for SELU networks (keeps mean and variance) in training; see
    ``nn.functional.alpha_dropout``."""

    def forward(self, x):
        return NF.alpha_dropout(x, self.p, self.training)


class _PairLoss(_Loss):
    """A loss of (input1, input2, target) with a ``margin``."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class MarginRankingLoss(_PairLoss):
    """``MarginRankingLoss(margin=0.0, reduction="mean")``: see
    ``nn.functional.margin_ranking_loss``."""

    def forward(self, input1, input2, target):
        return NF.margin_ranking_loss(input1, input2, target, self.margin,
                                      reduction=self.reduction)


class CosineEmbeddingLoss(_PairLoss):
    """``CosineEmbeddingLoss(margin=0.0, reduction="mean")``: see
    ``nn.functional.cosine_embedding_loss``."""

    def forward(self, input1, input2, target):
        return NF.cosine_embedding_loss(input1, input2, target, self.margin,
                                        reduction=self.reduction)


class HingeEmbeddingLoss(_PairLoss):
    """``HingeEmbeddingLoss(margin=1.0, reduction="mean")``: see
    ``nn.functional.hinge_embedding_loss``."""

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input, target):
        return NF.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """``SoftMarginLoss(reduction="mean")``: see ``nn.functional.soft_margin_loss``."""

    def forward(self, input, target):
        return NF.soft_margin_loss(input, target, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """``TripletMarginLoss(margin=1.0, p=2.0, eps=1e-6, swap=False, reduction="mean")``: see
    ``nn.functional.triplet_margin_loss``."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return NF.triplet_margin_loss(anchor, positive, negative, self.margin, self.p,
                                      self.eps, self.swap, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """``PoissonNLLLoss(log_input=True, full=False, eps=1e-8, reduction="mean")``: see
    ``nn.functional.poisson_nll_loss``."""

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None,
                 eps: float = 1e-8, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return NF.poisson_nll_loss(log_input, target, self.log_input, self.full,
                                   eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """``GaussianNLLLoss(full=False, eps=1e-6, reduction="mean")``: see
    ``nn.functional.gaussian_nll_loss``."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return NF.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class Hardshrink(Module):
    """``Hardshrink(lambd=0.5)``: see ``nn.functional.hardshrink``."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, x):
        return NF.hardshrink(x, self.lambd)


class Softshrink(Hardshrink):
    """``Softshrink(lambd=0.5)``: see ``nn.functional.softshrink``."""

    def forward(self, x):
        return NF.softshrink(x, self.lambd)


class LocalResponseNorm(Module):
    """``LocalResponseNorm(size, alpha=1e-4, beta=0.75, k=1.0)``: see
    ``nn.functional.local_response_norm``."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return NF.local_response_norm(x, self.size, self.alpha, self.beta, self.k)


class ChannelShuffle(Module):
    """``ChannelShuffle(groups)``: see ``nn.functional.channel_shuffle``."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        return NF.channel_shuffle(x, self.groups)
