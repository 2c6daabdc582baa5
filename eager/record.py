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
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.dispatch import Scalar, constant_value
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Node, Value
from ..graphlib.registry import REGISTRY
from . import tensors as tensor_mod
from .tensors import Tensor


class Recorder:
    """The handle ``record()`` yields: ``graph``, ``value(t)``, ``feeds()``, ``inputs``."""

    def __init__(self, name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
                 params_as_state: bool = True):
        self.name = name
        self.params_as_state = params_as_state
        self._names = {id(t): n for n, t in (names or {}).items()}
        self._entries: List[tuple] = []      # (node, outputs, raw inputs)
        self._graph: Optional[Graph] = None
        self._values: Dict[int, Value] = {}
        self._keep: List[Tensor] = []        # outputs kept alive so ids stay unique
        self.external: List[tuple] = []      # (Value, Tensor) for inputs from outside
        self._open = False

    # called by eager_apply for every op executed while the block is open
    def _add(self, node, outs, raw_inputs) -> None:
        if REGISTRY.get(node.op.name) is not node.op:
            raise GraphError(f"record: {node.op.name} is a custom autograd.Function; it has "
                             "no IR form and cannot be recorded")
        self._entries.append((node, tuple(outs), tuple(raw_inputs), tuple(node.inputs)))
        self._keep.extend(outs)

    def __enter__(self) -> "Recorder":
        tensor_mod._recorders.append(self)
        self._open = True
        return self

    def __exit__(self, *exc) -> None:
        tensor_mod._recorders.remove(self)
        self._open = False
        if exc[0] is None:
            self._build()

    # -- building the graph ----------------------------------------------------------------
    def _external(self, g: Graph, t: Tensor) -> Value:
        name = self._names.get(id(t))
        arr = np.asarray(t.__array__())
        as_state = self.params_as_state and t.requires_grad and t.grad_fn is None
        if name is None:
            prefix = "param" if as_state else "input"
            name = f"{prefix}{sum(1 for v, _ in self.external if v.name.startswith(prefix))}"
        v = g.add_state(name, arr) if as_state else g.add_input(
            name, _tensor_type(t))
        self.external.append((v, t))
        return v

    def _build(self) -> None:
        g = Graph(self.name)
        values = self._values
        produced = set()
        for node, outs, raw, tensors in self._entries:
            in_vals = []
            for x_raw, t in zip(raw, tensors):
                if isinstance(x_raw, Scalar):
                    v = constant_value(g, x_raw.value, x_raw.dtype)
                elif not isinstance(x_raw, Tensor):
                    v = constant_value(g, np.asarray(t.__array__()))
                else:
                    v = values.get(id(t))
                    if v is None:
                        v = self._external(g, t)
                        values[id(t)] = v
                in_vals.append(v)
            new = Node(node.op, in_vals, dict(node.attrs), (), node.source)
            new.outputs = tuple(Value(_tensor_type(o), new, i, g) for i, o in enumerate(outs))
            g.append(new)
            for o, v in zip(outs, new.outputs):
                values[id(o)] = v
                produced.add(id(o))
        consumed = {id(t) for _, _, _, tensors in self._entries for t in tensors}
        g.outputs = [values[id(o)] for _, outs, _, _ in self._entries for o in outs
                     if id(o) not in consumed]
        self._graph = g

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            raise GraphError("record: the graph is built when the `with` block ends")
        return self._graph

    def value(self, t: Tensor) -> Value:
        """The Value of ``rec.graph`` that stands for tensor ``t``."""
        v = self._values.get(id(t))
        if v is None:
            raise GraphError(f"record: this tensor (shape {list(t.shape)}) was neither made "
                             "inside the block nor used by it")
        return v

    def value_or_input(self, t: Tensor) -> Value:
        """Like ``value``, but a tensor the block never touched becomes a new input."""
        v = self._values.get(id(t))
        if v is None:
            v = self._external(self.graph, t)
            self._values[id(t)] = v
        return v

    def feeds(self) -> Dict[str, np.ndarray]:
        """Current data of the placeholder inputs, by name (state lives in the graph)."""
        placeholders = {id(v) for v in self.graph.inputs}
        return {v.name: np.asarray(t.__array__()) for v, t in self.external
                if id(v) in placeholders}

    @property
    def nodes(self) -> list:
        return [e[0] for e in self._entries]


def _tensor_type(t: Tensor):
    from ..graphlib.types import TensorType
    return TensorType(t.shape, t.dtype)


def record(name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
           params_as_state: bool = True) -> Recorder:
    """Capture every op executed inside the ``with`` block as ``rec.graph``."""
    return Recorder(name, names, params_as_state)


_ = dtypes
