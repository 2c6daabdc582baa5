"""``SyncBatchNorm``: batch normalisation whose statistics are taken over the batches of every
rank of a process group (``torch.nn.SyncBatchNorm``).

In training, each rank sums its batch per channel (the count, the values, then the squared
deviations from the global mean); two all-reduces of those sums (``all_reduce`` of
``duograph.distributed.nn.functional``, differentiable: its gradient is the all-reduce of
the cotangents) give every rank the mean and the biased variance of the concatenated batch.
Backward is the gradient of the sum of the ranks' losses with respect to this rank's input,
as PyTorch's SyncBatchNorm computes it, so with ``DistributedDataParallel`` (which averages
the parameter gradients) training equals one process on the global batch with
``BatchNorm``. The running statistics follow PyTorch (unbiased variance over the global
count). In eval mode, or without an initialised process group of more than one rank, it is
a plain ``BatchNorm``. It works eagerly, under ``dg.compile`` and on graph Values.

    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)    # every BatchNorm*d in place
"""
from __future__ import annotations

from typing import Optional

from ..distributed import process_group as _pg
from ..distributed.nn import functional as dfn
from ..graphlib import functional as F
from .functional import _assign
from .layers import _BatchNorm
from .module import Module


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True, process_group=None)`` over an input of at least 2 dims
    (N, C, ...); see the module docstring."""

    _dims = tuple(range(2, 9))
    _what = "an input of at least 2 dims (N, C, ...)"

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _world(self) -> int:
        if self.process_group is not None:
            return self.process_group.size
        return _pg.get_world_size() if _pg.is_initialized() else 1

    def forward(self, x):
        if x.ndim < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {x.ndim}D "
                             "input)")
        if not (self.training and self._world() > 1):
            return super().forward(x)
        if isinstance(x.shape[1], int) and x.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: expected {self.num_features} channels in dim 1, "
                             f"found input of shape {list(x.shape)}")
        c = x.shape[1]
        dims = (0,) + tuple(range(2, x.ndim))
        bshape = (1, c) + (1,) * (x.ndim - 2)
        count = F.numel(x, dims, dtype=x.dtype)
        # the count and the per-channel sums of every rank, in one all-reduce
        local = F.cat([F.reshape(count, 1), F.sum(x, dims)], 0)
        total = dfn.all_reduce(local, group=self.process_group)
        n = total[0]
        mean = total[1:] / n
        centered = x - F.reshape(mean, *bshape)
        var = dfn.all_reduce(F.sum(centered * centered, dims), group=self.process_group) / n
        if self.running_mean is not None:
            tracked = None
            if self.num_batches_tracked is not None:
                tracked = self.num_batches_tracked + 1
            m = self.momentum
            if m is None:           # cumulative moving average
                m = 1.0 / F.cast(tracked, self.running_mean.dtype)
            unbiased = var * (n / (n - 1))
            _assign(self.running_mean, mean * m + self.running_mean * (1.0 - m))
            _assign(self.running_var, unbiased * m + self.running_var * (1.0 - m))
            if tracked is not None:
                _assign(self.num_batches_tracked, tracked)
        out = centered * F.reshape(F.rsqrt(var + self.eps), *bshape)
        if self.weight is not None:
            out = out * F.reshape(self.weight, *bshape)
        if self.bias is not None:
            out = out + F.reshape(self.bias, *bshape)
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """``module`` with every ``BatchNorm1d``/``BatchNorm2d`` (itself or inside it)
        replaced by a ``SyncBatchNorm`` holding the same parameters and buffers, as
        ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``; returns the new top module."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group)
            if module.affine:
                out.weight = module.weight
                out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
        for name, child in list(module.named_children()):
            new = cls.convert_sync_batchnorm(child, process_group)
            if new is not child:
                setattr(out, name, new)
        return out
