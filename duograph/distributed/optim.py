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

In graph mode, ``minimize(loss)`` puts the same step into the training-step graph: the
gradients of a group, flattened and padded, go through one ``reduce_scatter`` (op "avg"
where a ``DistributedDataParallel`` wraps the parameters, which then need no all-reduce of
their own; else this rank's slice is taken as it is), the wrapped optimizer's rule updates
the own slice (a state of the graph, with its slots), and one ``all_gather`` of the updated
slices gives every parameter its new value.
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..eager.tensors import Parameter, Tensor
from ..graphlib import functional as F
from ..graphlib.autodiff import grad as symbolic_grad
from ..graphlib.errors import GraphError
from ..graphlib.ir import Value
from ..graphlib.ops.collectives import all_gather, reduce_scatter
from ..optim.optimizer import Optimizer, _as_type, _LearningRate
from . import ddp_state
from .graph_ops import group_id
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

    def minimize(self, loss: Value) -> None:
        """Add the sharded step for ``loss`` (a scalar Value) to its graph: reduce-scatter
        the gradients, update the own slice, all-gather the parameters (see the module
        docstring)."""
        if not isinstance(loss, Value):
            raise GraphError(f"{type(self).__name__}.minimize: expected a symbolic loss "
                             f"Value, found {type(loss).__name__}; eagerly call "
                             "loss.backward() and step()")
        g = loss.graph
        gid = group_id(self.process_group)
        bound = [[g.bind_state(p) for p in group["params"]] for group in self.param_groups]
        grads = symbolic_grad(loss, [v for vs in bound for v in vs])
        with g:
            k = 0
            for gi, (group, local, (sizes, total, per), values) in enumerate(zip(
                    self.param_groups, self.optim.param_groups, self._layout, bound)):
                ps = group["params"]
                mine = grads[k:k + len(ps)]
                k += len(ps)
                flat = [F.reshape(gv if gv is not None else F.zeros_like(v), -1)
                        for gv, v in zip(mine, values)]
                if per * self.world > total:
                    flat.append(F.zeros(per * self.world - total, dtype=values[0].dtype))
                flat = F.cat(flat, 0) if len(flat) > 1 else flat[0]
                infos = [ddp_state.info(p) for p in ps]
                if all(i is not None and i.sync for i in infos):
                    shard_grad = reduce_scatter(flat, "avg", gid)
                elif any(i is not None and i.sync for i in infos):
                    raise DistributedError("ZeroRedundancyOptimizer.minimize: a parameter "
                                           "group mixes parameters DistributedDataParallel "
                                           "wraps with others; wrap the whole model")
                else:
                    shard_grad = flat[self.rank * per:(self.rank + 1) * per]
                own = local["params"][0]
                ov = g.bind_state(own, f"zero{gi}.shard")
                state = self.optim._slots_of(own, local)
                svals = {name: g.bind_state(t, f"zero{gi}.{name}") for name, t in state.items()}
                holder = self._lr_holders.get(id(group))
                if holder is None:
                    holder = self._lr_holders[id(group)] = _LearningRate(group, ov.dtype)
                lr = g.bind_state(holder, f"lr{gi}" if len(self.param_groups) > 1 else "lr")
                for key, value in group.items():     # the full group's settings win
                    if key != "params":
                        local[key] = value
                new_own, new_state = self.optim.rule(ov, shard_grad, svals, local, lr)
                new_own = _as_type(new_own, ov)
                g.update(ov, new_own)
                for name, v in new_state.items():
                    g.update(svals[name], _as_type(v, svals[name]))
                whole = all_gather(new_own, gid) if self.world > 1 else new_own
                off = 0
                for v, n in zip(values, sizes):
                    g.update(v, F.reshape(whole[off:off + n], *v.type.shape))
                    off += n

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
