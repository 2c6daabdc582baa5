"""PyTorch's ranking, embedding and likelihood losses and shrink activations, written with
op functions (so they run eagerly and in graphs, with gradients from the parts):
``margin_ranking_loss``, ``triplet_margin_loss``, ``cosine_embedding_loss``,
``hinge_embedding_loss``, ``soft_margin_loss``, ``poisson_nll_loss``, ``gaussian_nll_loss``,
``hardshrink``, ``softshrink``, ``local_response_norm``, ``channel_shuffle``."""
from __future__ import annotations

import math

from ..graphlib import functional as F
from ..graphlib.errors import ShapeError


def _reduction(size_average, reduce, reduction: str) -> str:
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "mean" if size_average and reduce else "sum" if reduce else "none"


def _reduce(loss, reduction: str, name: str):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: {reduction!r} is not a valid value for reduction (expected "
                     f"'mean', 'sum' or 'none')")


def margin_ranking_loss(input1, input2, target, margin: float = 0, size_average=None,
                        reduce=None, reduction: str = "mean"):
    """``max(0, -target * (input1 - input2) + margin)``, reduced, as PyTorch's."""
    loss = F.relu(-target * (input1 - input2) + margin)
    return _reduce(loss, _reduction(size_average, reduce, reduction), "margin_ranking_loss")


def _pairwise(a, b, p: float, eps: float):
    return F.norm(a - b + eps, p, -1)


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise p-norm distance (with
    ``swap``, ``d(a, n)`` is the smaller of it and ``d(p, n)``), as PyTorch's."""
    if not (anchor.ndim == positive.ndim == negative.ndim) or anchor.ndim not in (1, 2):
        raise ShapeError(f"triplet_margin_loss: the anchor, positive and negative tensors must "
                         f"all be 1-D or all 2-D, found shapes {list(anchor.shape)}, "
                         f"{list(positive.shape)}, {list(negative.shape)}")
    d_pos = _pairwise(anchor, positive, p, eps)
    d_neg = _pairwise(anchor, negative, p, eps)
    if swap:
        d_neg = F.minimum(d_neg, _pairwise(positive, negative, p, eps))
    loss = F.relu(d_pos - d_neg + margin)
    return _reduce(loss, _reduction(size_average, reduce, reduction), "triplet_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0, size_average=None,
                          reduce=None, reduction: str = "mean"):
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos(x1, x2) - margin)`` where it is
    -1, as PyTorch's (cosine over the last dim, eps 1e-12 on the squared norms)."""
    eps = 1e-12
    prod = F.sum(input1 * input2, -1)
    mag1 = F.sum(input1 * input1, -1) + eps
    mag2 = F.sum(input2 * input2, -1) + eps
    cos = prod / F.sqrt(mag1 * mag2)
    loss = F.where(target == 1, 1.0 - cos, F.where(target == -1, F.relu(cos - margin), 0.0))
    return _reduce(loss, _reduction(size_average, reduce, reduction), "cosine_embedding_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """``x`` where target is 1, ``max(0, margin - x)`` where it is -1, as PyTorch's."""
    loss = F.where(target == 1, input, 0.0) + F.where(target == -1, F.relu(margin - input),
                                                      0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction), "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """``log(1 + exp(-target * input))``, reduced, as PyTorch's."""
    loss = F.softplus(-target * input, 1.0, 1e9)
    return _reduce(loss, _reduction(size_average, reduce, reduction), "soft_margin_loss")


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean"):
    """The Poisson negative log likelihood: ``exp(input) - target * input`` (log_input) or
    ``input - target * log(input + eps)``, plus Stirling's term for target > 1 with
    ``full``, as PyTorch's."""
    if log_input:
        loss = F.exp(input) - target * input
    else:
        loss = input - target * F.log(input + eps)
    if full:
        safe = F.where(target > 1, target, 2.0)
        stirling = safe * F.log(safe) - safe + 0.5 * F.log(2 * math.pi * safe)
        loss = loss + F.where(target > 1, stirling, 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction), "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    """``0.5 * (log(max(var, eps)) + (input - target)**2 / max(var, eps))`` (plus
    ``0.5 * log(2 pi)`` with ``full``), as PyTorch's; ``var`` must be non-negative."""
    if isinstance(var, (int, float)):
        var = F.full_like(input, float(var))
    elif var.ndim == input.ndim - 1 or (var.ndim == input.ndim and var.shape[-1] == 1
                                         and input.shape[-1] != 1):
        var = F.unsqueeze(var, -1) if var.ndim == input.ndim - 1 else var
    values = getattr(var, "array", None)
    if values is not None and (values < 0).any():
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    # PyTorch clamps a clone of var in place under no_grad: the value is clamped, the
    # gradient passes as if it were not
    v = var + F.stop_gradient(F.maximum(var, eps) - var)
    loss = 0.5 * (F.log(v) + (input - target) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def hardshrink(input, lambd: float = 0.5):
    """``x`` where ``|x| > lambd``, else 0, as PyTorch's."""
    return F.where(F.abs(input) > lambd, input, 0.0)


def softshrink(input, lambd: float = 0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0, as PyTorch's."""
    if lambd < 0:
        raise ValueError(f"softshrink: lambda must be greater or equal to 0, but found to be "
                         f"{lambd}")
    return F.where(input > lambd, input - lambd, F.where(input < -lambd, input + lambd, 0.0))


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0):
    """Each element divided by ``(k + alpha / size * sum of squares over ``size``
    neighbouring channels) ** beta``, as PyTorch's (channels are dim 1)."""
    if input.ndim < 3:
        raise ShapeError(f"local_response_norm: expected 3D or higher dimensionality input "
                         f"(got {input.ndim} dimensions)")
    sq = input * input
    lo, hi = size // 2, (size - 1) // 2
    pads = [0, 0] * (input.ndim - 2) + [lo, hi]
    padded = F.pad(sq, pads)
    channels = input.shape[1]
    acc = None
    for j in range(size):
        part = F.narrow(padded, 1, j, channels)
        acc = part if acc is None else acc + part
    div = (acc * (alpha / size) + k) ** beta
    return input / div


def channel_shuffle(input, groups: int):
    """Channels (dim 1) regrouped: (N, g*c, ...) viewed as (N, g, c, ...), the two swapped,
    as PyTorch's."""
    channels = input.shape[1]
    if groups <= 0 or channels % groups:
        raise ValueError(f"channel_shuffle: number of channels ({channels}) must be divisible "
                         f"by groups ({groups})")
    rest = tuple(input.shape[2:])
    x = F.reshape(input, input.shape[0], groups, channels // groups, *rest)
    return F.reshape(F.transpose(x, 1, 2), input.shape[0], channels, *rest)

