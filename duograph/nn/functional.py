"""``duograph.nn.functional``: the functional forms of layers and losses.

Everything here is written with duograph's op functions, so it runs eagerly on tensors and
builds graph nodes on symbolic Values, with gradients from the registry's vjp rules.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.autocast import FP32, LOWER, autocast_function
from ..graphlib import functional as F
from ..graphlib.errors import DTypeError, ShapeError
from ..graphlib.functional import (adaptive_avg_pool2d, avg_pool2d, conv2d,  # noqa
                                    gelu, leaky_relu, log_softmax, logsigmoid, max_pool2d,
                                    one_hot, relu, sigmoid, softmax, softplus, tanh)
from ..graphlib.functional import (avg_pool1d, avg_pool3d, conv1d, conv3d,  # noqa: F401
                                    conv_transpose1d, conv_transpose2d, conv_transpose3d,
                                    max_pool1d, max_pool3d, pad, pixel_shuffle,
                                    pixel_unshuffle)
from ..func.batched import BatchedTensor as _BatchedTensor
from ..graphlib.ir import Value
from ..graphlib.ops import activations as A
from ..graphlib.ops.conv import (adaptive_avg_pool1d, adaptive_max_pool1d,  # noqa: F401
                                 adaptive_max_pool2d, max_pool2d_with_indices, max_unpool2d)
from ..graphlib.ops.resample import fold, interpolate, unfold  # noqa: F401
from ..graphlib.ops.composites import cosine_similarity, normalize, rms_norm  # noqa: F401
from ..graphlib.ops.sampling import affine_grid, grid_sample  # noqa: F401
from .ranking_losses import (channel_shuffle, cosine_embedding_loss,  # noqa: F401
                             gaussian_nll_loss, hardshrink, hinge_embedding_loss,
                             local_response_norm, margin_ranking_loss, poisson_nll_loss,
                             soft_margin_loss, softshrink, triplet_margin_loss)


def upsample(input, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: Optional[bool] = None):
    """``interpolate`` under its deprecated name (as torch.nn.functional.upsample)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """``interpolate(..., mode='nearest')`` under its deprecated name."""
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """``interpolate(..., mode='bilinear', align_corners=True)`` under its deprecated name."""
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


def _where(x) -> str:
    from ..graphlib.source import user_source
    return f"\n  in: {user_source()}"


def _is_symbolic(x) -> bool:
    return isinstance(x, Value)


@autocast_function(LOWER)
def linear(input, weight, bias=None):
    """input @ weight.T + bias (weight has shape (out_features, in_features))."""
    if input.shape[-1] != weight.shape[1] and isinstance(input.shape[-1], int):
        raise ShapeError(f"linear: expected input with {weight.shape[1]} features in its "
                         f"last dim, found shape {list(input.shape)}{_where(input)}")
    out = F.matmul(input, F.transpose(weight, 0, 1))
    return out + bias if bias is not None else out


def dropout(input, p: float = 0.5, training: bool = True, seed=None):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p) (train only).

    Eagerly the mask comes from the global generator (``dg.manual_seed``); in graph mode from
    ``seed`` or else the graph's own seed state, which advances every run.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must lie in [0, 1], found {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    if seed is None and _is_symbolic(input):
        seed = input.graph.seed_state()
    keep = F.bernoulli(F.full_like(input, 1.0 - p), seed=seed)
    return input * keep * (1.0 / (1.0 - p))


def embedding(input, weight, padding_idx: Optional[int] = None):
    """Rows of ``weight`` picked by the integer ``input`` (any shape)."""
    if input.dtype not in ("int32", "int64", "uint8"):
        raise DTypeError(f"embedding: expected integer indices, found {input.dtype}"
                         f"{_where(input)}")
    n = weight.shape[0]
    if not _is_symbolic(input) and hasattr(input, "array") and input.numel() > 0 and \
            isinstance(n, int):     # (a vmap-batched input is checked by the op itself)
        lo, hi = int(input.array.min()), int(input.array.max())
        if lo < 0 or hi >= n:
            raise IndexError(f"embedding: index {lo if lo < 0 else hi} is out of range for "
                             f"{n} embeddings (expected indices in [0, {n})){_where(input)}")
    flat = F.reshape(input, -1)
    rows = F.index_select(weight, 0, flat)
    if padding_idx is not None:   # the padding row's value, but no gradient into it
        keep = F.unsqueeze(flat != padding_idx, 1)
        rows = F.where(keep, rows, F.stop_gradient(rows))
    return F.reshape(rows, *tuple(input.shape), weight.shape[1])


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalise over the last ``len(normalized_shape)`` dims (biased variance)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
        normalized_shape)
    if tuple(input.shape[-len(shape):]) != shape:
        raise ShapeError(f"layer_norm: expected input ending in {list(shape)}, found "
                         f"{list(input.shape)}{_where(input)}")
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    mean = F.mean(input, dims, keepdim=True)
    centered = input - mean
    var = F.mean(centered * centered, dims, keepdim=True)
    out = centered * F.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5,
               num_batches_tracked=None):
    """Batch normalisation over all dims but the channel dim (1).

    In training the batch statistics normalise and the running statistics are updated
    (unbiased variance, as PyTorch): in place on eager tensors, through ``graph.update`` when
    building a graph. ``momentum=None`` takes the cumulative average (factor
    1 / num_batches_tracked), which needs ``num_batches_tracked``.
    """
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected at least 2 dims (N, C, ...), found "
                         f"{list(input.shape)}{_where(input)}")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0 or (
            training and eps == 0):
        raise ValueError(f"batch_norm: expected eps {'> 0 in training' if training else '>= 0'}"
                         f" (a float), found {eps!r}{_where(input)}")
    c = input.shape[1]
    dims = (0,) + tuple(range(2, input.ndim))
    bshape = (1, c) + (1,) * (input.ndim - 2)
    if training:
        sizes = [input.shape[d] for d in dims]
        if all(isinstance(n, int) for n in sizes) and int(np.prod(sizes)) == 1:
            raise ShapeError(f"batch_norm: expected more than 1 value per channel when "
                             f"training, found input of shape {list(input.shape)}"
                             f"{_where(input)}")
        _refuse_unbatched_running_stats(input, running_mean, running_var)
        if momentum is None and running_mean is not None and num_batches_tracked is None:
            raise ValueError("batch_norm: momentum=None (a cumulative average) needs "
                             "num_batches_tracked")
        fused = weight is not None and bias is not None and dtypes.is_float(input.dtype) \
            and weight.dtype == input.dtype and bias.dtype == input.dtype
        if fused:        # one kernel forward and one backward (statistics of shape (C,))
            out, mean, var = F.batch_norm_train(input, weight, bias, eps)
        else:
            mean = F.mean(input, dims, keepdim=True)
            centered = input - mean
            var = F.mean(centered * centered, dims, keepdim=True)
        if running_mean is not None:
            n = 1
            for d in dims:
                n = n * input.shape[d] if isinstance(input.shape[d], int) else None
                if n is None:
                    break
            count = n if n is not None else F.numel(input, dims, dtype=input.dtype)
            unbiased = F.reshape(var, c) * (count / (count - 1)) if n is None else \
                F.reshape(var, c) * (n / max(n - 1, 1))
            if num_batches_tracked is not None:
                tracked = num_batches_tracked + 1
            m = momentum
            if m is None:      # cumulative moving average
                m = 1.0 / F.cast(tracked, running_mean.dtype)
            _assign(running_mean, F.reshape(mean, c) * m + running_mean * (1.0 - m))
            _assign(running_var, unbiased * m + running_var * (1.0 - m))
            if num_batches_tracked is not None:
                _assign(num_batches_tracked, tracked)
        if fused:
            return out
        out = centered * F.rsqrt(var + eps)
    else:
        if running_mean is None:
            raise ValueError("batch_norm: running statistics are needed in eval mode")
        out = (input - F.reshape(running_mean, *bshape)) * F.rsqrt(
            F.reshape(running_var, *bshape) + eps)
    if weight is not None:
        out = out * F.reshape(weight, *bshape)
    if bias is not None:
        out = out + F.reshape(bias, *bshape)
    return out


def _refuse_unbatched_running_stats(input, running_mean, running_var) -> None:
    """torch.func's refusal: training-mode batch norm inside vmap would update running
    statistics shared by every example with each example's own statistics."""
    if type(input) is not _BatchedTensor:
        return
    for stat in (running_mean, running_var):
        if stat is not None and not (type(stat) is _BatchedTensor and stat.level == input.level):
            raise RuntimeError(
                "Batch norm got a batched tensor as input while the running_mean or "
                "running_var, which will be updated in place, were not batched.\nIf you are "
                "using a module and do not need eval mode, please set `track_running_stats` "
                "to be False. (duograph.func.vmap: per-example statistics cannot update "
                "statistics shared by the batch)")


def _assign(target, new) -> None:
    """Give a buffer its new value: eagerly in place, or as a state update in a graph."""
    if isinstance(new, Value):
        g = new.graph
        state = g.bind_state(target)
        g.update(state, F.cast(new, state.dtype) if new.dtype != state.dtype else new)
        return
    from ..eager import grad_mode
    with grad_mode.no_grad():
        target.copy_(new.detach() if hasattr(new, "detach") else new)


# -- losses ------------------------------------------------------------------------------------
def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's deprecated ``size_average``/``reduce`` arguments: when either is given it
    decides the reduction (both unset or true: "mean"; ``size_average=False``: "sum";
    ``reduce=False``: "none"), with PyTorch's deprecation warning."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{ret}' instead.", UserWarning, stacklevel=3)
    return ret


def _reduce(loss, reduction: str, name: str):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', found {reduction!r}")


def _check_same(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        raise ShapeError(f"{name}: input {list(input.shape)} and target "
                         f"{list(target.shape)} must have the same shape{_where(input)}")


@autocast_function(FP32)
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """Mean (or sum, or none) of the squared differences."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("mse_loss", input, target)
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


@autocast_function(FP32)
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """Mean (or sum, or none) of the absolute differences."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("l1_loss", input, target)
    return _reduce(F.abs(input - target), reduction, "l1_loss")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """0.5 * d**2 / beta where |d| < beta, else |d| - 0.5 * beta (d = input - target),
    reduced, as ``torch.nn.functional.smooth_l1_loss`` (``beta=0`` is the L1 loss)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("smooth_l1_loss", input, target)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, found {beta}{_where(input)}")
    ad = F.abs(input - target)
    if beta == 0:
        return _reduce(ad, reduction, "smooth_l1_loss")
    return _reduce(F.where(ad < beta, ad * ad * (0.5 / beta), ad - 0.5 * beta), reduction,
                   "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """0.5 * d**2 where |d| < delta, else delta * (|d| - 0.5 * delta) (d = input - target),
    optionally weighted elementwise, reduced, as ``torch.nn.functional.huber_loss``."""
    _check_same("huber_loss", input, target)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, found {delta}{_where(input)}")
    ad = F.abs(input - target)
    loss = F.where(ad < delta, 0.5 * ad * ad, delta * (ad - 0.5 * delta))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "huber_loss")


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``||x1 - x2 + eps||_p`` over the last dim, as
    ``torch.nn.functional.pairwise_distance``."""
    return F.norm(x1 - x2 + eps, p, -1, keepdim=keepdim)


def _feature_dropout(name: str, rank: int, input, p: float, training: bool, seed):
    """Zero whole channels (every element of an (N, C, ...) input's channel) with probability
    ``p``; the input has ``rank`` spatial dims after (N, C), or is unbatched (C, ...)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p must lie in [0, 1], found {p}")
    if input.ndim not in (rank + 1, rank + 2):
        raise ShapeError(f"{name}: expected a {rank + 1}-D (unbatched) or {rank + 2}-D "
                         f"(batched) input, found shape {list(input.shape)}{_where(input)}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    if seed is None and _is_symbolic(input):
        seed = input.graph.seed_state()
    lead = input.ndim - rank
    mask_shape = tuple(input.shape[:lead]) + (1,) * rank
    keep = F.bernoulli(F.full(mask_shape, 1.0 - p, dtype=input.dtype), seed=seed)
    return input * keep * (1.0 / (1.0 - p))


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False, seed=None):
    """Zero whole channels of an (N, C, L) or (C, L) input with probability ``p``, scaling the
    rest by 1/(1-p), as ``torch.nn.functional.dropout1d``."""
    return _feature_dropout("dropout1d", 1, input, p, training, seed)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, seed=None):
    """Zero whole channels of an (N, C, H, W) or (C, H, W) input with probability ``p``,
    scaling the rest by 1/(1-p), as ``torch.nn.functional.dropout2d``."""
    return _feature_dropout("dropout2d", 2, input, p, training, seed)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False,
                  seed=None):
    """Dropout that keeps a SELU network's mean and variance: dropped elements are set to
    SELU's negative saturation and an affine map restores the moments, as
    ``torch.nn.functional.alpha_dropout`` (identity unless ``training``)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"alpha_dropout: dropout probability has to be between 0 and 1, but "
                         f"got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    if seed is None and _is_symbolic(input):
        seed = input.graph.seed_state()
    alpha_p = -_SELU_ALPHA * _SELU_SCALE
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    b = -a * alpha_p * p
    keep = F.bernoulli(F.full_like(input, 1.0 - p), seed=seed)
    return (input * keep + alpha_p * (1.0 - keep)) * a + b


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False, seed=None):
    """Zero whole channels of an (N, C, D, H, W) or (C, D, H, W) input with probability
    ``p``, scaling the rest by 1/(1-p), as ``torch.nn.functional.dropout3d``."""
    return _feature_dropout("dropout3d", 3, input, p, training, seed)


def _class_last(x):
    """(N, C, d1, ...) -> (N*d1*..., C); (N, C) unchanged."""
    if x.ndim == 2:
        return x
    perm = (0,) + tuple(range(2, x.ndim)) + (1,)
    return F.reshape(F.permute(x, *perm), -1, x.shape[1])


@autocast_function(FP32)
def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log-likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C) or (N, C, d1, ...)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_class_target("nll_loss", input, target)
    logp = _class_last(input)
    tgt = F.reshape(target, -1)
    valid = tgt != ignore_index
    safe = F.where(valid, tgt, 0)
    picked = F.reshape(F.gather(logp, 1, F.unsqueeze(safe, 1)), -1)
    w = F.cast(valid, input.dtype)
    if weight is not None:
        w = w * F.index_select(weight, 0, safe)
    loss = -picked * w
    if reduction == "mean":
        return F.sum(loss) / F.sum(w)
    if reduction == "none":
        return F.reshape(loss, *tuple(target.shape))
    return _reduce(loss, reduction, "nll_loss")


def _check_class_target(name, input, target):
    if input.ndim < 2:
        raise ShapeError(f"{name}: expected input of shape (N, C) or (N, C, d1, ...), found "
                         f"{list(input.shape)}{_where(input)}")
    if target.dtype not in ("int32", "int64", "uint8"):
        raise DTypeError(f"{name}: expected integer class indices as target (or, for "
                         f"cross_entropy, class probabilities shaped like the input), found "
                         f"{target.dtype} of shape {list(target.shape)}{_where(input)}")
    want = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{name}: expected target of shape {list(want)} for input "
                         f"{list(input.shape)}, found {list(target.shape)}{_where(input)}")


@autocast_function(FP32)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """log_softmax + nll_loss, with PyTorch's class ``weight``, ``ignore_index`` and
    ``label_smoothing`` semantics. ``target`` holds class indices (N, d1, ...), or class
    probabilities of the input's shape (N, C, d1, ...)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must lie in [0, 1], found "
                         f"{label_smoothing}")
    if input.ndim >= 2 and target.dtype not in ("int32", "int64", "uint8", "bool") \
            and target.ndim == input.ndim:
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    _check_class_target("cross_entropy", input, target)
    if weight is None and label_smoothing == 0.0 and input.ndim == 2 \
            and dtypes.is_float(input.dtype):
        # one kernel forward and one backward instead of log_softmax + nll_loss's ~15 nodes
        return F.softmax_cross_entropy(input, target, ignore_index, reduction)
    logp = F.log_softmax(input, 1)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0.0:
        return nll
    c = input.shape[1]
    lp = _class_last(logp)
    tgt = F.reshape(target, -1)
    valid = F.cast(tgt != ignore_index, input.dtype)
    per_class = lp if weight is None else lp * weight
    smooth = -F.sum(per_class, 1) * valid
    if reduction == "mean":
        if weight is None:
            denom = F.sum(valid)
        else:
            denom = F.sum(F.index_select(weight, 0, F.where(tgt != ignore_index, tgt, 0))
                          * valid)
        smooth = F.sum(smooth) / denom
    elif reduction == "sum":
        smooth = F.sum(smooth)
    else:
        smooth = F.reshape(smooth, *tuple(target.shape))
    return nll * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _soft_cross_entropy(input, target, weight, reduction: str, label_smoothing: float):
    """Cross entropy against class probabilities (PyTorch: the mean divides by the number of
    samples, whatever the weights)."""
    _check_same("cross_entropy", input, target)
    c = input.shape[1]
    if label_smoothing > 0.0:
        target = target * (1.0 - label_smoothing) + label_smoothing / c
    logp = F.log_softmax(input, 1)
    if weight is not None:
        logp = logp * F.reshape(weight, c, *((1,) * (input.ndim - 2)))
    loss = -F.sum(logp * target, 1)
    if reduction == "mean":
        return F.sum(loss) / _count(loss)
    return _reduce(loss, reduction, "cross_entropy")


def _count(x):
    """The number of elements of ``x`` as a Python number, or a 0-d tensor when symbolic."""
    if all(isinstance(d, int) for d in x.shape):
        return float(np.prod(x.shape, dtype=np.int64))
    return F.numel(x, tuple(range(x.ndim)), dtype=x.dtype)


@autocast_function(FP32)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-(y log p + (1-y) log(1-p)), logs clamped at -100 as PyTorch."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("binary_cross_entropy", input, target)
    logp = F.clamp(F.log(input), min=-100.0)
    log1mp = F.clamp(F.log(1.0 - input), min=-100.0)
    loss = -(target * logp + (1.0 - target) * log1mp)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")


@autocast_function(FP32)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction: str = "mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one numerically stable formula."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("binary_cross_entropy_with_logits", input, target)
    # log(1 + exp(-|x|)) + max(-x, 0) = -log(sigmoid(x)), never overflowing
    log_sig_neg = F.softplus(-input, 1.0, 1e9)     # -log(sigmoid(x))
    if pos_weight is None:
        loss = (1.0 - target) * input + log_sig_neg
    else:
        lw = 1.0 + (pos_weight - 1.0) * target
        loss = (1.0 - target) * input + lw * log_sig_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


@autocast_function(FP32)
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """KL divergence with ``input`` as log-probabilities (PyTorch's argument order)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same("kl_div", input, target)
    if log_target:
        loss = F.exp(target) * (target - input)
    else:
        safe = F.where(target > 0, target, 1.0)
        loss = F.where(target > 0, target * (F.log(safe) - input), 0.0)
    if reduction == "batchmean":
        return F.sum(loss) / input.shape[0] if isinstance(input.shape[0], int) else \
            F.sum(loss) / F.numel(input, 0, dtype=input.dtype)
    return _reduce(loss, reduction, "kl_div")


@autocast_function(LOWER)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False):
    """softmax(q k^T * scale + mask) v over the last two dims, as PyTorch's function.

    ``attn_mask`` follows ``torch.nn.functional.scaled_dot_product_attention``: a boolean mask
    is True where a query MAY attend to a key (False entries are masked out); a float mask is
    added to the scores. ``is_causal`` masks keys after each query (top-left aligned). A query
    row with every key masked gives zeros. (``nn.MultiheadAttention`` takes PyTorch's module
    convention instead: there True means masked out.) ``is_causal`` together with an
    ``attn_mask`` applies both, as PyTorch 2.13's CPU kernels do. ``enable_gqa`` (grouped-query
    attention): key and value may have fewer heads (dim -3) than query, a divisor of its
    count; each of their heads serves that many consecutive query heads.
    """
    if enable_gqa:
        key, value = _repeat_kv_heads(query, key, value)
    out, _ = _attention(query, key, value, attn_mask, dropout_p, is_causal, scale)
    return out


def _repeat_kv_heads(q, k, v):
    """Key and value with their heads repeated to query's count (grouped-query attention)."""
    if q.ndim < 3 or k.ndim < 3 or v.ndim < 3:
        raise ShapeError(f"scaled_dot_product_attention: enable_gqa needs query, key and value "
                         f"with a heads dim (..., H, L, E), found {list(q.shape)}, "
                         f"{list(k.shape)}, {list(v.shape)}{_where(q)}")
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hq % hk or hq % hv:
        raise ShapeError(f"scaled_dot_product_attention: number of heads in key and value "
                         f"must divide the number of heads in query, found query {hq}, key "
                         f"{hk}, value {hv}{_where(q)}")
    if hk != hq:
        k = F.repeat_interleave(k, hq // hk, dim=-3)
    if hv != hq:
        v = F.repeat_interleave(v, hq // hv, dim=-3)
    return k, v


def _attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
               scale: Optional[float] = None, keep=None):
    """Attention output and weights; ``keep`` is an extra boolean mask (True = attend)."""
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError(f"scaled_dot_product_attention: expected query, key and value with at "
                         f"least 2 dims (..., L, E), found {list(q.shape)}, {list(k.shape)}, "
                         f"{list(v.shape)}{_where(q)}")
    d = q.shape[-1]
    if scale is None:
        if not isinstance(d, int):
            raise ShapeError(f"scaled_dot_product_attention: the embedding dim of query must be "
                             f"known to compute the scale, found {list(q.shape)}; pass "
                             f"scale={_where(q)}")
        scale = 1.0 / float(d) ** 0.5
    scores = F.matmul(q, F.transpose(k, -2, -1)) * scale
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        if not isinstance(lq, int) or not isinstance(lk, int):
            raise ShapeError(f"scaled_dot_product_attention: is_causal needs known sequence "
                             f"lengths, found query {list(q.shape)} and key {list(k.shape)}; "
                             f"pass an explicit attn_mask{_where(q)}")
        causal = F.constant(np.tril(np.ones((lq, lk), dtype=bool)))
        keep = causal if keep is None else F.logical_and(keep, causal)
    if attn_mask is not None:
        if attn_mask.dtype == "bool":
            keep = attn_mask if keep is None else F.logical_and(keep, attn_mask)
        else:
            scores = scores + attn_mask
    if keep is not None:
        lowest = float(np.finfo(np.dtype(scores.dtype)).min)
        scores = F.where(keep, scores, lowest)
    attn = F.softmax(scores, -1)
    if keep is not None:   # rows where every key is masked out attend to nothing
        any_key = F.amax(F.cast(keep, scores.dtype), -1, keepdim=True) > 0
        attn = F.where(any_key, attn, 0.0)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return F.matmul(attn, v), attn


# -- activations, as PyTorch defines them: ops of their own where PyTorch's gradient has its own
#    rule at the kinks (graphlib/ops/activations.py), compositions elsewhere (gradients come
#    from the parts, and elementwise fusion turns each into one kernel) ------------------------
_SELU_ALPHA = A.SELU_ALPHA
_SELU_SCALE = A.SELU_SCALE


def silu(input, inplace: bool = False):
    """x * sigmoid(x) (also called swish)."""
    return A.silu(input)


def mish(input, inplace: bool = False):
    """x * tanh(softplus(x))."""
    return A.mish(input)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """x for x > 0, else alpha * (exp(x) - 1); the gradient at 0 is alpha, as PyTorch's."""
    return A.elu(input, alpha)


def selu(input, inplace: bool = False):
    """scale * elu(x, alpha) with the self-normalising constants."""
    return A.elu(input, _SELU_ALPHA, _SELU_SCALE)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); the gradient at 0 is 1."""
    if alpha == 0:
        raise ValueError(f"celu: alpha must not be 0{_where(input)}")
    return A.elu(input, alpha, 1.0, 1.0 / alpha)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """x clamped to [min_val, max_val]; the gradient is 0 at the bounds (PyTorch's, where
    ``clamp``'s is 1)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val "
                         f"({max_val}){_where(input)}")
    return A.hardtanh(input, min_val, max_val)


def relu6(input, inplace: bool = False):
    """min(max(x, 0), 6); the gradient is 0 at 0 and 6, as PyTorch's."""
    return A.hardtanh(input, 0.0, 6.0)


def hardsigmoid(input, inplace: bool = False):
    """relu6(x + 3) / 6, computed exactly (PyTorch's CPU kernel multiplies by a float32 1/6,
    so its float64 results differ from this by up to 3e-8 relative)."""
    return A.hardsigmoid(input)


def hardswish(input, inplace: bool = False):
    """x * relu6(x + 3) / 6."""
    return A.hardswish(input)


def softsign(input):
    """x / (1 + |x|)."""
    return input / (F.abs(input) + 1.0)


def tanhshrink(input):
    """x - tanh(x)."""
    return input - F.tanh(input)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """x where x > threshold, else ``value`` (NaN stays NaN and passes the gradient, as
    PyTorch's ``x <= threshold ? value : x``)."""
    return F.where(input <= threshold, F.full_like(input, value), input)


def glu(input, dim: int = -1):
    """a * sigmoid(b), where a and b are the two halves of ``input`` along ``dim``."""
    size = input.shape[dim]
    if isinstance(size, int) and size % 2:
        raise ShapeError(f"glu: halving dim {dim} needs an even size, found {size}"
                         f"{_where(input)}")
    a, b = F.chunk(input, 2, dim)
    return a * F.sigmoid(b)


def softmin(input, dim: Optional[int] = None, dtype=None):
    """softmax(-x) along ``dim``."""
    if dim is None:
        raise TypeError(f"softmin: pass dim explicitly (PyTorch's implicit dim is "
                        f"deprecated){_where(input)}")
    out = F.softmax(-input, dim)
    return out if dtype is None else F.cast(out, dtype)


@autocast_function(LOWER)
def prelu(input, weight):
    """x where x > 0, else weight * x (PyTorch's: at 0 the gradient is the weight's side);
    ``weight`` has 1 element or one per channel (dim 1)."""
    n = weight.shape[0] if weight.ndim else 1
    if n != 1 and input.ndim >= 2:
        weight = F.reshape(weight, *((1, n) + (1,) * (input.ndim - 2)))
    return F.where(input > 0, input, input * weight)


# -- normalisation over groups and instances, bags of embeddings, bilinear maps ---------------
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each sample over groups of ``num_groups`` channels (and all spatial dims),
    then scale and shift per channel, as ``torch.nn.functional.group_norm``."""
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected an input of shape (N, C, *), found "
                         f"{list(input.shape)}{_where(input)}")
    c = input.shape[1]
    if isinstance(c, int) and c % num_groups:
        raise ShapeError(f"group_norm: expected the number of channels ({c}) to be divisible "
                         f"by num_groups ({num_groups}), found input of shape "
                         f"{list(input.shape)}{_where(input)}")
    shape = tuple(input.shape)
    grouped = F.reshape(input, shape[0], num_groups, -1)
    mean = F.mean(grouped, 2, keepdim=True)
    centered = grouped - mean
    var = F.mean(centered * centered, 2, keepdim=True)
    out = F.reshape(centered * F.rsqrt(var + eps), *shape)
    bshape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * F.reshape(weight, *bshape)
    if bias is not None:
        out = out + F.reshape(bias, *bshape)
    return out


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each (sample, channel) over its spatial dims, as
    ``torch.nn.functional.instance_norm`` (input (N, C, *spatial)).

    With ``use_input_stats`` the instance statistics normalise and, when running statistics
    are given, these move towards the batch mean of the instance means and of the unbiased
    instance variances (PyTorch's rule); otherwise the running statistics normalise."""
    if input.ndim < 3:
        raise ShapeError(f"instance_norm: expected an input of shape (N, C, *spatial), found "
                         f"{list(input.shape)}{_where(input)}")
    c = input.shape[1]
    dims = tuple(range(2, input.ndim))
    bshape = (1, c) + (1,) * (input.ndim - 2)
    if use_input_stats:
        sizes = [input.shape[d] for d in dims]
        n = int(np.prod(sizes)) if all(isinstance(s, int) for s in sizes) else None
        if n == 1:
            raise ValueError(f"instance_norm: expected more than 1 spatial element when "
                             f"training, found input of shape {list(input.shape)}"
                             f"{_where(input)}")
        mean = F.mean(input, dims, keepdim=True)
        centered = input - mean
        var = F.mean(centered * centered, dims, keepdim=True)
        out = centered * F.rsqrt(var + eps)
        if running_mean is not None and running_var is not None:
            count = n if n is not None else F.numel(input, dims, dtype=input.dtype)
            unbiased = var * (count / (count - 1)) if n is None else var * (n / (n - 1))
            m = momentum
            batch_mean = F.mean(F.reshape(mean, -1, c), 0)
            batch_var = F.mean(F.reshape(unbiased, -1, c), 0)
            _assign(running_mean, batch_mean * m + running_mean * (1.0 - m))
            _assign(running_var, batch_var * m + running_var * (1.0 - m))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: running statistics are needed when "
                             "use_input_stats=False")
        out = (input - F.reshape(running_mean, *bshape)) * F.rsqrt(
            F.reshape(running_var, *bshape) + eps)
    if weight is not None:
        out = out * F.reshape(weight, *bshape)
    if bias is not None:
        out = out + F.reshape(bias, *bshape)
    return out


def _host_ints(x, what: str, who: str) -> np.ndarray:
    """The values of a concrete integer tensor/array/sequence as a 1-D int64 numpy array."""
    if _is_symbolic(x):
        raise ShapeError(f"{who}: {what} must be concrete (an eager tensor, a numpy array or "
                         f"a list) to lay out the bags, found a symbolic Value{_where(x)}; "
                         f"use a 2-D input of fixed-size bags in graph mode")
    arr = np.asarray(x.numpy() if hasattr(x, "numpy") else x)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{who}: expected integer {what}, found {arr.dtype}{_where(x)}")
    return arr.astype(np.int64)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights=None, include_last_offset: bool = False,
                  padding_idx: Optional[int] = None):
    """Sums, means or maxima of bags of embeddings, as ``torch.nn.functional.embedding_bag``.

    ``input`` is a 2-D (B, N) tensor of B bags of N indices (``offsets`` None), or a 1-D
    tensor of indices cut into bags at ``offsets`` (the start of each bag; with
    ``include_last_offset`` the last entry is the end of the last bag). Entries equal to
    ``padding_idx`` are left out (a mean divides by the others); an empty bag gives zeros.
    ``per_sample_weights`` (the input's shape) scales each entry, with mode "sum" only.
    ``offsets`` must be concrete; ``input`` and the weights may be symbolic. The gradient is
    dense (``sparse`` is accepted and changes nothing)."""
    who = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"{who}: mode must be 'sum', 'mean' or 'max', found {mode!r}")
    if max_norm is not None:
        raise NotImplementedError(f"{who}: max_norm (renormalising the weight rows in place) "
                                  f"is not supported; renormalise the weight explicitly")
    if scale_grad_by_freq:
        raise NotImplementedError(f"{who}: scale_grad_by_freq=True is not supported")
    if input.dtype not in ("int32", "int64", "uint8", "int8", "int16"):
        raise DTypeError(f"{who}: expected integer indices, found {input.dtype}{_where(input)}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"{who}: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for "
                                      f"mode='sum' (got mode='{mode}')")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ShapeError(f"{who}: expected per_sample_weights of the input's shape "
                             f"{list(input.shape)}, found {list(per_sample_weights.shape)}"
                             f"{_where(input)}")
    n_emb = weight.shape[0]
    if not _is_symbolic(input) and input.numel() > 0 and isinstance(n_emb, int):
        lo, hi = int(input.array.min()), int(input.array.max())    # as embedding: no guard
        if lo < 0 or hi >= n_emb:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{who}: index {bad} is out of range for {n_emb} embeddings "
                             f"(expected indices in [0, {n_emb})){_where(input)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += n_emb
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{who}: if input is 2-D, then offsets has to be None, as input "
                             f"is treated as a mini-batch of fixed length sequences")
        idx, psw, present = input, per_sample_weights, None
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError(f"{who}: offsets has to be a 1-D tensor but got None")
        off = _host_ints(offsets, "offsets", who)
        if off.ndim != 1:
            raise ShapeError(f"{who}: offsets has to be a 1-D tensor, found shape "
                             f"{list(off.shape)}")
        total = input.shape[0]
        if not isinstance(total, int):
            raise ShapeError(f"{who}: a 1-D input needs a known length to be cut at offsets, "
                             f"found shape {list(input.shape)}{_where(input)}")
        if off.size and off[0] != 0:
            raise ValueError(f"{who}: offsets[0] has to be 0, i.e., the first sequence in the "
                             f"mini-batch has to start from position 0. However, got "
                             f"{int(off[0])}")
        if include_last_offset:
            starts, ends = off[:-1], np.minimum(off[1:], total)
        else:
            starts, ends = off, np.append(off[1:], total)
        if np.any(ends < starts) or (off.size and off[-1] > total):
            raise ValueError(f"{who}: offsets must be non-decreasing and at most the input's "
                             f"length ({total}), found {off.tolist()}")
        lengths = ends - starts
        width = max(int(lengths.max()) if lengths.size else 0, 1)
        pos = starts[:, None] + np.arange(width)[None, :]
        present = np.arange(width)[None, :] < lengths[:, None]
        pos = np.where(present, pos, 0)
        flat_pos = F.constant(pos.reshape(-1))
        if total == 0:
            idx = F.constant(np.zeros(pos.shape, np.int64))
            psw = None if per_sample_weights is None else F.constant(
                np.zeros(pos.shape, np.dtype(per_sample_weights.dtype)))
        else:
            idx = F.reshape(F.index_select(input, 0, flat_pos), *pos.shape)
            psw = None if per_sample_weights is None else F.reshape(
                F.index_select(per_sample_weights, 0, flat_pos), *pos.shape)
    else:
        raise ShapeError(f"{who}: input has to be a 1-D or 2-D tensor, found shape "
                         f"{list(input.shape)}{_where(input)}")
    b, width = idx.shape
    rows = F.reshape(F.index_select(weight, 0, F.reshape(idx, -1)), b, width, weight.shape[1])
    keep = None if present is None else F.constant(present)
    if padding_idx is not None:
        not_pad = idx != padding_idx
        keep = not_pad if keep is None else F.logical_and(keep, not_pad)
    if psw is not None:
        rows = rows * F.unsqueeze(F.cast(psw, rows.dtype), 2)
    keep3 = None if keep is None else F.unsqueeze(keep, 2)
    if mode == "max":
        lowest = float(np.finfo(np.dtype(rows.dtype)).min) if dtypes.is_float(rows.dtype) \
            else None
        if keep3 is None:
            return F.amax(rows, 1)
        out = F.amax(F.where(keep3, rows, lowest), 1)
        any_key = F.unsqueeze(F.amax(F.cast(keep, "int32"), 1) > 0, 1)
        return F.where(any_key, out, 0.0)
    summed = F.sum(rows if keep3 is None else F.where(keep3, rows, 0.0), 1)
    if mode == "sum":
        return summed
    if keep is None:
        return summed * (1.0 / width) if width else summed
    count = F.unsqueeze(F.sum(F.cast(keep, rows.dtype), 1), 1)
    return summed / F.maximum(count, 1.0)


def bilinear(input1, input2, weight, bias=None):
    """y = x1^T A x2 + b over the last dims, with ``weight`` A of shape
    (out_features, in1_features, in2_features), as ``torch.nn.functional.bilinear``."""
    if weight.ndim != 3:
        raise ShapeError(f"bilinear: expected a 3-D weight (out, in1, in2), found "
                         f"{list(weight.shape)}{_where(input1)}")
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1 or input2.shape[-1] != in2 or \
            tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise ShapeError(f"bilinear: expected inputs (..., {in1}) and (..., {in2}) with the "
                         f"same leading dims, found {list(input1.shape)} and "
                         f"{list(input2.shape)}{_where(input1)}")
    lead = tuple(input1.shape[:-1])
    w = F.reshape(F.permute(weight, 1, 0, 2), in1, out_f * in2)
    t = F.reshape(F.matmul(input1, w), *lead, out_f, in2)
    out = F.sum(t * F.unsqueeze(input2, -2), -1)
    return out + bias if bias is not None else out
