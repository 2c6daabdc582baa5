"""``ZeroRedundancyOptimizer``: an optimizer whose state is split across the ranks (ZeRO
stage 1, PyTorch's ``torch.distributed.optim.ZeroRedundancyOptimizer``).

Each parameter group's parameters are laid end to end in one flat vector, padded to a
multiple of the group size; rank r owns the r-th equal slice. ``step()`` takes the own slice
of the (already averaged: use it with DistributedDataParallel, as in PyTorch) gradients,
runs the wrapped optimizer class on that slice alone, so only the slice's state (momentum,
moments) lives on this rank, then all-gathers the updated slices into every rank's
parameters. The optimizer classes here (SGD, Adam, AdamW, RMSprop, Adagrad) update each
element on its own, so the result is the unsplit optimizer's; the state takes about
1/world_size of its memory per rank (``state_bytes()``). A parameter without a gradient
counts as a zero gradient in its slice (PyTorch's local optimizer skips it instead).
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..eager.tensors import Parameter, Tensor
from ..optim.optimizer import Optimizer
from .process_group import DistributedError, _group


class ZeroRedundancyOptimizer(Optimizer):
    """``optimizer_class(**defaults)`` over this rank's slice of every parameter group (see
    the module docstring). ``param_groups`` are the full groups: a scheduler or a changed
    ``lr`` there reaches the slices at the next ``step()``."""

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False,
                 **defaults):
        if overlap_with_ddp:
            raise ValueError("ZeroRedundancyOptimizer: overlap_with_ddp is not supported; "
                             "step() after backward")
        self.optimizer_class = optimizer_class
        self.process_group = _group(process_group)
        super().__init__(params, defaults)
        g = self.process_group
        self.rank, self.world = g.rank, g.size
        self._layout: List[tuple] = []       # per group: (sizes, total, slice length)
        shards = []
        for group in self.param_groups:
            ps = group["params"]
            dtypes = {p.array.dtype for p in ps}
            if len(dtypes) != 1:
                raise DistributedError(f"ZeroRedundancyOptimizer: a parameter group holds "
                                       f"several dtypes {sorted(map(str, dtypes))}; give each "
                                       "dtype its own group")
            sizes = [p.array.size for p in ps]
            total = sum(sizes)
            per = -(-total // self.world)
            self._layout.append((sizes, total, per))
            flat = self._flat([p.array for p in ps], per)
            own = Parameter(Tensor._wrap(flat[self.rank * per:(self.rank + 1) * per].copy()))
            shards.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": [own]})
        self.optim = optimizer_class(shards, **defaults)

    def _flat(self, arrays, per: int) -> np.ndarray:
        flat = np.zeros(per * self.world, arrays[0].dtype)
        off = 0
        for a in arrays:
            flat[off:off + a.size] = np.asarray(a).reshape(-1)
            off += a.size
        return flat

    def step(self, closure=None):
        """Update this rank's slices with the wrapped optimizer, then gather every rank's
        slices into the parameters; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            from ..eager import grad_mode
            with grad_mode.enable_grad():
                loss = closure()
        g = self.process_group
        for group, local, (sizes, total, per) in zip(self.param_groups,
                                                     self.optim.param_groups, self._layout):
            for k, v in group.items():
                if k != "params":
                    local[k] = v
            ps = group["params"]
            grads = [p.grad.array if p.grad is not None else np.zeros(p.array.shape,
                                                                       p.array.dtype)
                     for p in ps]
            own = local["params"][0]
            own.grad = Tensor._wrap(self._flat(grads, per)[self.rank * per:
                                                           (self.rank + 1) * per].copy())
        self.optim.step()
        for group, local, (sizes, total, per) in zip(self.param_groups,
                                                     self.optim.param_groups, self._layout):
            own = np.ascontiguousarray(local["params"][0].array)
            whole = np.empty(per * self.world, own.dtype)
            if self.world > 1 and g.mpi is not None:
                g.comm.Allgather(own, whole)
            else:
                whole[:] = own
            off = 0
            for p, n in zip(group["params"], sizes):
                p.array[...] = whole[off:off + n].reshape(p.array.shape)
                p.bump_version()
                off += n
        return loss

    def state_bytes(self) -> int:
        """Bytes of optimizer state held on this rank (its slices' slots)."""
        return sum(t.array.nbytes for s in self.optim.state.values() for t in s.values())

    def state_dict(self) -> dict:
        """This rank's slice state (``load_state_dict`` on the same rank of the same world
        restores it)."""
        return {"rank": self.rank, "world_size": self.world, "local": self.optim.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("world_size") != self.world or state_dict.get("rank") != self.rank:
            raise DistributedError(
                f"ZeroRedundancyOptimizer.load_state_dict: the state is rank "
                f"{state_dict.get('rank')}'s of {state_dict.get('world_size')}; this is rank "
                f"{self.rank} of {self.world}")
        self.optim.load_state_dict(state_dict["local"])
