"""Optimizers whose update rules are written once with op functions.

``step()`` runs a rule eagerly on each parameter and its ``.grad``; ``minimize(loss)`` inside
a graph adds the gradient nodes and the same rule's nodes, binding parameters, optimizer
slots and the learning rate as state inputs, so one graph holds the whole training step. The
learning rate is read from ``param_groups`` on every run, so schedulers work in graph mode
without rebuilding; other hyperparameters are fixed when the graph is built.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List

import numpy as np

from ..eager import grad_mode
from ..eager import tensors as _eager_tensors
from ..eager.tensors import Tensor
from ..graphlib import functional as F
from ..graphlib.autodiff import grad as symbolic_grad
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Value
from ..graphlib.builder import placeholder
from ..nn.module import _zeros_like_grad


class _LearningRate:
    """Holder binding a param group's learning rate as a graph state input."""

    def __init__(self, group: dict, dtype: str):
        self.group, self.dtype = group, dtype
        self._memo = (None, None)      # (the lr object, its read-only array)

    @property
    def array(self) -> np.ndarray:
        # read at every run of a graph: a Python number (immutable) that is the same object
        # gives the same array, so the executable's check of it is not redone per run (~3 us)
        lr = self.group["lr"]
        seen, arr = self._memo
        if seen is lr and type(lr) in (float, int):
            return arr
        arr = np.asarray(lr, dtype=self.dtype)
        if type(lr) in (float, int):
            arr = arr.copy()
            arr.flags.writeable = False
            self._memo = (lr, arr)
        return arr


class Optimizer:
    """Base class: parameter groups, state, zero_grad, step, minimize, state dicts."""

    slots: tuple = ()          # names of per-parameter state tensors, created at first step

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: List[dict] = []
        self.state: Dict[Tensor, Dict[str, Tensor]] = {}   # param -> slots, as PyTorch
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)
        self._lr_holders: Dict[int, _LearningRate] = {}

    def add_param_group(self, group: dict) -> None:
        """Add a parameter group: a dict with ``params`` (a tensor or an iterable of leaf
        tensors) and optional settings, the optimizer's defaults filling the rest. A parameter
        already in another group raises ValueError, a non-leaf TypeError."""
        group = dict(group)
        ps = group["params"]
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
        for p in group["params"]:
            if not isinstance(p, Tensor) or not p.is_leaf:
                raise TypeError(f"{type(self).__name__}: can only optimise leaf tensors, "
                                f"found {type(p).__name__}")
        seen = {p for g in self.param_groups for p in g["params"]}
        if any(p in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        if group.get("lr") is None or group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {group.get('lr')}")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradient of every parameter of every group: to None with
        ``set_to_none=True`` (the default, as in PyTorch 2), else to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = _zeros_like_grad(p.grad)

    # -- the rule (written once, with op functions) ---------------------------------------------
    def _init_slots(self, p: Tensor, group: dict) -> Dict[str, Tensor]:
        # float64: bias corrections such as 1 - beta2 ** step lose digits in float32
        # on the parameter's device, as every slot (a device graph updates it in place)
        state = {"step": Tensor._wrap(np.zeros_like(p.array, shape=(), dtype=np.float64))}
        for name in self.slots:
            state[name] = Tensor._wrap(np.zeros_like(p.array))
        return state

    def rule(self, p, g, state: dict, group: dict, lr):
        """Return (new parameter, {slot: new value}) from parameter, gradient and slots."""
        raise NotImplementedError

    def _slots_of(self, p: Tensor, group: dict) -> Dict[str, Tensor]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = self._init_slots(p, group)
        return state

    # -- eager ------------------------------------------------------------------------------
    def step(self, closure=None):
        """Update every parameter that has a gradient; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        program = self.step_program and not _eager_tensors._recorders
        for gi, group in enumerate(self.param_groups):
            params, grads = [], []
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                ga = g.array
                if ga.shape != p.array.shape:
                    raise ValueError(f"{type(self).__name__}: gradient shape "
                                     f"{list(g.shape)} does not match parameter "
                                     f"shape {list(p.shape)}")
                params.append(p)
                grads.append(ga)
            if not params or (program and self._run_program(gi, group, params, grads)):
                continue
            with grad_mode.no_grad():
                for p in params:
                    state = self._slots_of(p, group)
                    new_p, new_state = self.rule(p.detach(), p.grad.detach(), state, group,
                                                 float(group["lr"]))
                    _write(p, new_p)
                    for k, v in new_state.items():
                        _write(state[k], v)
        return loss

    # -- eager, as the graph-mode rule ----------------------------------------------------------
    step_program = False
    """Whether ``step()`` runs each parameter group's update as one planned program of
    ``rule`` (``_run_program``) where it can, instead of the rule op by op."""

    def _run_program(self, gi: int, group: dict, params: list, grads: list) -> bool:
        """Update ``params`` (those of group ``gi`` that have a gradient; ``grads`` their
        gradients' arrays) by running ``rule``
        as graph mode runs it: recorded once into a graph with the parameters and slots as
        state, built by the runtime with a memory plan (the backend's ``out=`` forms of the
        rule's ops, the new values written into the parameters' and slots' own arrays), and
        called through the executable's prepared call (``Executable.prepare``: each step
        only checks and binds the arrays and runs the kernels). Rebuilt when the parameters,
        their arrays' types, shapes or dtypes, their gradients', their slots or the group's
        settings change (the prepared call declines arrays of other types).
        Without passes, so the bits are those of the rule run op by op. False (nothing
        done) off the CPU (``step`` does not ask inside ``record()``: the ops must be
        recorded there)."""
        # the parameters' ids: the program holds them (bound state), so no id is reused
        key = (tuple([v for k, v in group.items() if k != "params" and k != "lr"]),
               [id(p) for p in params])
        programs = self.__dict__.setdefault("_programs", {})
        found = programs.get(gi)
        if found is not None and found[0] == key:
            state = self.state
            for p, slots, k, t in found[2]:     # a slot tensor replaced since: bound anew
                if state.get(p) is not slots or slots.get(k) is not t:
                    found = None
                    break
        else:
            found = None
        if found is None:
            found = programs[gi] = (key, *self._build_program(group, params))
        call = found[1]
        if call is None:
            return False
        if call(grads) is None:           # another array type, dtype or shape: built anew
            found = programs[gi] = (key, *self._build_program(group, params))
            call = found[1]
            if call is None:
                return False
            if call(grads) is None:       # what the program cannot take: the clear error
                call.exe.run(dict(zip(call.names, grads)))
        return True

    def _build_program(self, group: dict, params: list) -> tuple:
        """(the executable's prepared call, the slots it binds as (param, slots, name,
        tensor)) for ``_run_program``; (None, ()) off the CPU."""
        if any(p.device != "cpu" or p.grad.device != "cpu" for p in params):
            return None, ()
        with grad_mode.no_grad():
            return self._record_program(group, params)

    def _record_program(self, group: dict, params: list) -> tuple:
        graph = Graph(f"{type(self).__name__.lower()}_step")
        lrs: Dict[str, Value] = {}
        feeds, bound = [], []
        with graph:
            for i, p in enumerate(params):
                pv = graph.bind_state(p, f"p{i}")
                gv = placeholder(f"g{i}", tuple(p.shape), p.grad.dtype)
                state = self._slots_of(p, group)
                svals = {k: graph.bind_state(t, f"p{i}.{k}") for k, t in state.items()}
                lr = lrs.get(p.dtype)
                if lr is None:
                    lr = lrs[p.dtype] = graph.bind_state(_LearningRate(group, p.dtype),
                                                         f"lr_{p.dtype}")
                new_p, new_state = self.rule(pv, gv, svals, group, lr)
                graph.update(pv, _as_type(new_p, pv))
                for k, v in new_state.items():
                    graph.update(svals[k], _as_type(v, svals[k]))
                bound.extend((p, state, k, state[k]) for k, v in svals.items()
                             if v.uses or k in new_state)      # the slots the rule uses
                feeds.append(f"g{i}")
        return graph.compile(outputs=[], passes="O0", plan=True).prepare(feeds), bound

    # -- graph mode -----------------------------------------------------------------------------
    def minimize(self, loss: Value) -> None:
        """Add gradient and update nodes for ``loss`` (a scalar Value) to its graph."""
        if not isinstance(loss, Value):
            raise GraphError(f"{type(self).__name__}.minimize: expected a symbolic loss "
                             f"Value, found {type(loss).__name__}; eagerly call "
                             "loss.backward() and step()")
        g = loss.graph
        pairs = []
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.requires_grad:
                    pairs.append((gi, group, p, g.bind_state(p)))
        grads = symbolic_grad(loss, [v for _, _, _, v in pairs])
        names = {v: v.name for _, _, _, v in pairs}
        with g:
            grads = _ddp_average([p for _, _, p, _ in pairs], grads)
            for (gi, group, p, pv), gv in zip(pairs, grads):
                state = self._slots_of(p, group)
                svals = {k: g.bind_state(t, f"{names[pv]}.{k}") for k, t in state.items()}
                holder = self._lr_holders.get(id(group))
                if holder is None:
                    holder = self._lr_holders[id(group)] = _LearningRate(group, pv.dtype)
                lr = g.bind_state(holder, f"lr{gi}" if len(self.param_groups) > 1 else "lr")
                new_p, new_state = self.rule(pv, gv, svals, group, lr)
                g.update(pv, _as_type(new_p, pv))
                for k, v in new_state.items():
                    g.update(svals[k], _as_type(v, svals[k]))

    # -- state dicts --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"state": {index: {slot: tensor}}, "param_groups": [...]} as PyTorch."""
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(p, len(index))
                ids.append(index[p])
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": ids})
        state = {index[p]: {k: t.detach() for k, t in s.items()}
                 for p, s in self.state.items() if p in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the settings of each parameter group and the per-parameter state (momentum
        buffers, moment estimates, step counts) from ``state_dict()``'s output. The groups
        must match this optimizer's in number and size (ValueError otherwise)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"load_state_dict: the checkpoint has {len(groups)} parameter "
                             f"groups, this optimizer {len(self.param_groups)}")
        params = []
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("load_state_dict: parameter group sizes differ")
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
            params.extend(zip(theirs["params"], mine["params"]))
        saved = {int(k): v for k, v in state_dict["state"].items()}
        group_of = {p: g for g in self.param_groups for p in g["params"]}
        for idx, p in params:
            if idx in saved:
                slots = self._slots_of(p, group_of[p])
                if "step" not in saved[idx] and saved[idx]:
                    # a checkpoint without step counts (PyTorch's SGD): its slots exist, so
                    # at least one step was taken
                    _write(slots["step"], Tensor._wrap(np.ones((), slots["step"].array.dtype)))
                for k, v in saved[idx].items():
                    arr = v.__array__() if isinstance(v, Tensor) else np.asarray(v)
                    if k in slots:
                        _write(slots[k], Tensor._wrap(np.array(arr, dtype=slots[k].array.dtype)))
                    else:
                        slots[k] = Tensor._wrap(np.array(arr)).to(device=p.device)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


def _ddp_average(params, grads) -> list:
    """The gradients, each of a parameter a ``DistributedDataParallel`` wraps (with gradient
    sync on) averaged over the wrapper's group by an all_reduce node that the ``ddp_buckets``
    pass may group with others (``bucket``: the wrapper's bucket bytes)."""
    from ..distributed import ddp_state
    from ..distributed.graph_ops import group_id
    from ..graphlib.ops.collectives import all_reduce
    out = []
    for p, gv in zip(params, grads):
        info = ddp_state.info(p)
        if info is not None and info.sync and gv is not None:
            gv = all_reduce(gv, "avg", group_id(info.group), bucket=info.bucket_bytes or -1)
        out.append(gv)
    return out


def _write(target: Tensor, new) -> None:
    data = new.array if isinstance(new, Tensor) else new
    if type(data) is not type(target.array) and not np.isscalar(data):
        data = Tensor._wrap(np.asarray(data) if isinstance(data, (list, tuple)) else data) \
            .to(device=target.device).array       # a state loaded from another device
    target.array[...] = data
    target._version[0] += 1


def _as_type(v, like):
    return F.cast(v, like.dtype) if v.dtype != like.dtype else v


# -- the optimizers ---------------------------------------------------------------------------
class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

    slots = ("momentum_buffer",)
    step_program = True

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def rule(self, p, g, state, group, lr):
        """SGD's update: weight decay, momentum (Nesterov when asked) and ``p - lr * g``,
        as ``torch.optim.SGD``; see ``Optimizer.rule``."""
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        new = {}
        m = group["momentum"]
        if m:
            step = state["step"]
            buf = F.where(step == 0, g, state["momentum_buffer"] * m
                          + g * (1.0 - group["dampening"]))
            new["momentum_buffer"] = buf
            new["step"] = step + 1.0
            g = g + buf * m if group["nesterov"] else buf
        return p - g * lr, new


class Adam(Optimizer):
    """Adam (Kingma & Ba), with L2 weight decay folded into the gradient; amsgrad optional."""

    slots = ("exp_avg", "exp_avg_sq")
    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False):
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"{type(self).__name__}: invalid betas {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        if group is not None and group.get("amsgrad"):
            state["max_exp_avg_sq"] = Tensor._wrap(np.zeros_like(p.array))
        return state

    def rule(self, p, g, state, group, lr):
        """Adam's update (AdamW's when ``decoupled``; AMSGrad when asked), as
        ``torch.optim.Adam``; see ``Optimizer.rule``."""
        b1, b2 = group["betas"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd and self.decoupled:
            p = p * (1.0 - lr * wd)
        elif wd:
            g = g + wd * p
        step = state["step"] + 1.0
        m = state["exp_avg"] * b1 + g * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        new = {"step": step, "exp_avg": m, "exp_avg_sq": v}
        if group["amsgrad"]:
            v = F.maximum(state["max_exp_avg_sq"], v)
            new["max_exp_avg_sq"] = v
        # bias corrections in float64 (PyTorch computes them in Python floats)
        bc1 = F.cast(1.0 - F.pow(b1, step), p.dtype)
        bc2_sqrt = F.cast(F.sqrt(1.0 - F.pow(b2, step)), p.dtype)
        denom = F.sqrt(v) / bc2_sqrt + group["eps"]
        return p - (m / denom) * (lr / bc1), new


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter); default weight_decay 0.01."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class RMSprop(Optimizer):
    """RMSprop with optional momentum and centering (PyTorch's formulation)."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 capturable: bool = False, foreach=None, maximize: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        zeros = lambda: Tensor._wrap(np.zeros_like(p.array))  # noqa: E731
        state["square_avg"] = zeros()
        if group is None or group.get("momentum", 0):
            state["momentum_buffer"] = zeros()
        if group is None or group.get("centered"):
            state["grad_avg"] = zeros()
        return state

    def rule(self, p, g, state, group, lr):
        """RMSprop's update (centered and with momentum when asked), as
        ``torch.optim.RMSprop``; see ``Optimizer.rule``."""
        a = group["alpha"]
        if group.get("maximize"):
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        sq = state["square_avg"] * a + g * g * (1.0 - a)
        new = {"step": state["step"] + 1.0, "square_avg": sq}
        if group["centered"]:
            ga = state["grad_avg"] * a + g * (1.0 - a)
            new["grad_avg"] = ga
            avg = F.sqrt(sq - ga * ga) + group["eps"]
        else:
            avg = F.sqrt(sq) + group["eps"]
        if group["momentum"]:
            buf = state["momentum_buffer"] * group["momentum"] + g / avg
            new["momentum_buffer"] = buf
            return p - buf * lr, new
        return p - (g / avg) * lr, new


class Adagrad(Optimizer):
    """Adagrad with learning-rate decay and an initial accumulator value."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        init = group["initial_accumulator_value"] if group is not None else 0.0
        state["sum"] = Tensor._wrap(np.full_like(p.array, init))
        return state

    def rule(self, p, g, state, group, lr):
        """Adagrad's update with learning-rate decay, as ``torch.optim.Adagrad``; see
        ``Optimizer.rule``."""
        if group.get("maximize"):
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step = state["step"] + 1.0
        clr = lr / F.cast((step - 1.0) * group["lr_decay"] + 1.0, p.dtype)
        total = state["sum"] + g * g
        return p - (g / (F.sqrt(total) + group["eps"])) * clr, {"step": step, "sum": total}


_ = (math, Iterable)
