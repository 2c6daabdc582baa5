"""``record()``: capture the ops executed eagerly inside a block as a ``Graph``.

    with dg.record() as rec:
        loss = model(x).sum()
        loss.backward()
    print(rec.graph)                      # the same IR graph mode builds
    exe = rec.graph.compile(outputs=[rec.value(loss), rec.value(w.grad)])
    exe(**rec.feeds())                    # same numbers as the eager run

Tensors created outside the block become graph inputs: leaves that require grad become state
inputs (their values at record time are the initial state), the others placeholders. Name
them with ``record(names={"x": x})``; unnamed ones are called ``input0``, ``param0``...
With ``bind=True`` (what ``compile`` uses) every outside tensor that is not named in
``names`` becomes a state input *bound* to the live tensor instead: running the graph reads
its current data and writes back what the block assigned to it in place (running statistics).

The graph means what the eager code meant: ``detach()`` and ops run under ``no_grad()`` cut
gradients with ``stop_gradient`` nodes (where a gradient could flow), and the seeds eager
random ops draw from the global generator become int64 inputs ``seed0``, ``seed1``... (fed
with the drawn values by ``feeds()``; ``compile`` feeds fresh ones on every call).
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.dispatch import Scalar, constant_value
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Node, Value
from ..graphlib.registry import REGISTRY
from ..graphlib.types import TensorType, has_runtime_dim
from . import grad_mode
from . import tensors as tensor_mod
from .tensors import SeedTensor, Tensor, host_array

_STOP_GRADIENT = REGISTRY["stop_gradient"]


class Recorder:
    """The handle ``record()`` yields: ``graph``, ``value(t)``, ``feeds()``, ``external``."""

    def __init__(self, name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
                 bind: bool = False, keep_values: bool = False):
        self.name = name
        self.bind = bind
        # keep_values: a copy of every op's results as it ran (``eager_values``), which later
        # in-place writes cannot change (``dg.compare`` matches them node by node)
        self.keep_values = keep_values
        self._snapshots: Dict[Tensor, object] = {}
        self.eager_values: Dict[Value, object] = {}
        self._names = {t: n for n, t in (names or {}).items()}
        # ("op", node, outs, raw, tensors, grad_enabled), ("inplace", target, result),
        # ("alias", alias, source), ("detach", alias, source) or ("use", tensor), in
        # execution order
        self._entries: List[tuple] = []
        self._graph: Optional[Graph] = None
        self._failed = False
        self._values: Dict[Tensor, Value] = {}   # tensors hash by identity
        self._keep: List[Tensor] = []        # tensors the entries need kept alive
        self.external: List[tuple] = []      # (Value, Tensor) for tensors from outside
        self.seeds: List[tuple] = []         # (Value, SeedTensor): drawn random seeds
        # (placeholder Value, its final Value, Tensor) for outside tensors that the block
        # modified in place and that are neither state nor bound (bind=True only)
        self.input_updates: List[tuple] = []
        self.decision_values: List[Value] = []   # see _note_use
        # hooks a higher layer registers (duograph.utils.checkpoint marks its regions):
        # on_build(rec) runs when the graph is built; on_backward(graph) when compile has
        # appended the backward nodes to it, before splitting it into forward and backward
        self.on_build: List = []
        self.on_backward: List = []
        self._built: Dict[int, Node] = {}    # index of an "op" entry -> the node built for it

    # called by eager_apply for every op executed while the block is open
    def _add(self, node, outs, raw_inputs) -> None:
        if REGISTRY.get(node.op.name) is not node.op:
            raise GraphError(f"record: {node.op.name} is a custom autograd.Function; it has "
                             "no IR form and cannot be recorded")
        self._entries.append(("op", node, tuple(outs), tuple(raw_inputs), tuple(node.inputs),
                              grad_mode.is_grad_enabled()))
        self._keep.extend(outs)
        if self.keep_values:
            for o in outs:
                self._snapshots[o] = np.array(host_array(o), copy=True)

    # called by Tensor._inplace: `target` now holds the value of `result`
    def _note_inplace(self, target: Tensor, result: Tensor) -> None:
        self._entries.append(("inplace", target, result))
        self._keep.extend((target, result))

    # called by Tensor._inplace: `alias` is a snapshot standing for `source`'s current value
    def _note_alias(self, alias: Tensor, source: Tensor) -> None:
        self._entries.append(("alias", alias, source))
        self._keep.extend((alias, source))

    # called by compile's decision tracer: Python read `t`'s value here; `decision_values`
    # gets the Value `t` held at that moment (before any later in-place change)
    def _note_use(self, t: Tensor) -> None:
        self._entries.append(("use", t))
        self._keep.append(t)

    def inplace_writes(self) -> Dict[int, int]:
        """id(version counter) -> in-place ops recorded on the tensors sharing it (what a
        caller compares with version counters to find writes the graph does not hold)."""
        counts: Dict[int, int] = {}
        for e in self._entries:
            if e[0] == "inplace":
                k = id(e[1]._version)
                counts[k] = counts.get(k, 0) + 1
        return counts

    # called by Tensor.detach: `alias` has `source`'s value but no gradient path
    def _note_detach(self, alias: Tensor, source: Tensor) -> None:
        self._entries.append(("detach", alias, source))
        self._keep.extend((alias, source))

    def __enter__(self) -> "Recorder":
        self._thread = threading.get_ident()     # it records this thread's ops only
        tensor_mod._recorders.append(self)
        return self

    def __exit__(self, *exc) -> None:
        tensor_mod._recorders.remove(self)
        if exc[0] is None:
            self._build()
        else:
            self._failed = True

    # -- building the graph ----------------------------------------------------------------
    def _external(self, g: Graph, t: Tensor) -> Value:
        name = self._names.get(t)
        if isinstance(t, SeedTensor) and name is None:
            v = g.add_input(f"seed{len(self.seeds)}", TensorType((), "int64"))
            self.seeds.append((v, t))
            self.external.append((v, t))
            return v
        if self.bind and name is None:
            v = g.bind_state(t, f"ext{len(self.external)}")
        else:
            as_state = t.requires_grad and t.grad_fn is None and not self.bind
            if name is None:
                prefix = "param" if as_state else "input"
                name = f"{prefix}{sum(1 for v, _ in self.external if v.name.startswith(prefix))}"
            if as_state:
                v = g.add_state(name, host_array(t))
            else:
                v = g.add_input(name, TensorType(t.shape, t.dtype))
        self.external.append((v, t))
        return v

    def _lookup(self, g: Graph, t: Tensor) -> Value:
        v = self._values.get(t)
        if v is None:
            v = self._values[t] = self._external(g, t)
            if t.requires_grad and dtypes.is_differentiable(t.dtype):
                self._carries.add(v)
        return v

    def _stop_gradient(self, g: Graph, v: Value, source) -> Value:
        """``v`` cut from the gradient (one stop_gradient node per value)."""
        cut = self._cut.get(v)
        if cut is None:
            node = Node(_STOP_GRADIENT, (v,), {}, (), source)
            node.outputs = (Value(v.type, node, 0, g),)
            g.append(node)
            cut = self._cut[v] = node.outputs[0]
        return cut

    def _build(self) -> None:
        g = Graph(self.name)
        values = self._values
        self._carries: set = set()     # Values a gradient can flow through
        self._cut: Dict[Value, Value] = {}
        consumed = set()
        made: List[Tensor] = []
        views: Dict[Tensor, tuple] = {}   # view tensor -> (op name, base tensor)
        written: Dict[Value, tuple] = {}  # outside Value -> (Value, Tensor) written in place
        for index, entry in enumerate(self._entries):
            if entry[0] == "use":
                self.decision_values.append(self._lookup(g, entry[1]))
                continue
            if entry[0] in ("alias", "detach"):
                _, alias, source = entry
                v = self._lookup(g, source)
                if entry[0] == "detach" and v in self._carries:
                    v = self._stop_gradient(g, v, None)
                values[alias] = v
                continue
            if entry[0] == "inplace":
                _, target, result = entry
                view = views.get(target)
                if view is not None and np.may_share_memory(target.array, view[1].array):
                    raise GraphError(
                        f"record: an in-place op changed a view ({view[0]}) of another "
                        "tensor; the graph cannot express the change to the base tensor. "
                        "Modify the base tensor itself, or .clone() the view first")
                old = self._lookup(g, target)
                new = values[result] if result in values else self._lookup(g, result)
                values[target] = new
                if old.node is None and old not in written:
                    written[old] = (old, target)
                continue
            _, node, outs, raw, tensors, grad_on = entry
            in_vals = []
            op = node.op
            for i, (x_raw, t) in enumerate(zip(raw, tensors)):
                if isinstance(x_raw, Scalar):
                    v = constant_value(g, x_raw.value, x_raw.dtype)
                elif not isinstance(x_raw, Tensor):
                    v = constant_value(g, np.asarray(host_array(t)))
                else:
                    v = self._lookup(g, t)
                    consumed.add(v)
                    if (not grad_on and v in self._carries and op.vjp is not None
                            and i not in op.nondiff_inputs):
                        v = self._stop_gradient(g, v, node.source)   # ran under no_grad
                in_vals.append(v)
            new = Node(node.op, in_vals, dict(node.attrs), (), node.source)
            out_types = [TensorType(o.shape, o.dtype) for o in outs]
            if op.region_kernel is not None:
                # a loop's saved rows are as many as the trips it makes: the recorded run's
                # count is one case, not the graph's type (RUNTIME_DIM, as in graph mode)
                inferred = op.infer([v.type for v in in_vals], new.attrs)
                out_types = [t if has_runtime_dim(t.shape) else o
                             for o, t in zip(out_types, inferred)]
            new.outputs = tuple(Value(t, new, i, g) for i, t in enumerate(out_types))
            g.append(new)
            self._built[index] = new
            carries = grad_on and op.vjp is not None and any(
                v in self._carries for i, v in enumerate(in_vals)
                if i not in op.nondiff_inputs)
            for o, v in zip(outs, new.outputs):
                values[o] = v
                made.append(o)
                if o in self._snapshots:
                    self.eager_values[v] = self._snapshots.pop(o)
                if carries and dtypes.is_differentiable(o.dtype):
                    self._carries.add(v)
            if node.op.view:
                for o in outs:
                    views[o] = (node.op.name, tensors[0])
        for old, target in written.values():
            final = values[target]
            if old in g.state_init or old in g.bindings:
                g.update(old, final)
            elif self.bind:
                self.input_updates.append((old, final, target))
            else:
                raise GraphError(
                    f"record: {old.name!r} is an input from outside the block and "
                    "was modified in place inside it; that cannot be expressed as "
                    "a graph input (make it a state input with requires_grad, or "
                    "record with bind=True)")
        g.outputs = [values[o] for o in made if values[o] not in consumed
                     and values[o].node is not None]
        self._graph = g
        for hook in self.on_build:
            hook(self)

    def position(self) -> int:
        """Where the recording is now (an index of what it noted), for ``built_nodes``."""
        return len(self._entries)

    def built_nodes(self, start: int, end: int) -> List[Node]:
        """The graph's nodes built for the ops recorded between two ``position()``s."""
        return [self._built[i] for i in range(start, end) if i in self._built]

    def value_if_any(self, t: Tensor) -> Optional[Value]:
        """The Value of ``rec.graph`` standing for ``t``, or None."""
        return self._values.get(t)

    def carries_gradient(self, v: Value) -> bool:
        """Whether a gradient can flow through ``v`` (as it could through its tensor)."""
        return v in self._carries

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            if self._failed:
                raise GraphError("record: the `with` block raised an exception, so no graph "
                                 "was built")
            raise GraphError("record: the graph is built when the `with` block ends")
        return self._graph

    def value(self, t: Tensor) -> Value:
        """The Value of ``rec.graph`` that stands for tensor ``t``."""
        v = self._values.get(t)
        if v is None:
            raise GraphError(f"record: this tensor (shape {list(t.shape)}) was neither made "
                             "inside the block nor used by it")
        return v

    def value_or_input(self, t: Tensor) -> Value:
        """Like ``value``, but a tensor the block never touched becomes a new input."""
        return self._lookup(self.graph, t)

    def feeds(self) -> Dict[str, np.ndarray]:
        """Current data of the placeholder inputs, by name (state lives in the graph)."""
        placeholders = set(self.graph.inputs)
        return {v.name: np.asarray(host_array(t)) for v, t in self.external
                if v in placeholders}

    @property
    def nodes(self) -> list:
        return [e[1] for e in self._entries if e[0] == "op"]


def record(name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
           bind: bool = False, keep_values: bool = False) -> Recorder:
    """Capture every op executed inside the ``with`` block as ``rec.graph``; with
    ``keep_values=True``, ``rec.eager_values`` maps each node output of the graph to a copy
    of the array eager execution computed for it."""
    return Recorder(name, names, bind, keep_values)
