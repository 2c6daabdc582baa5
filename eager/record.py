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
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..graphlib.dispatch import Scalar, constant_value
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Node, Value
from ..graphlib.registry import REGISTRY
from ..graphlib.types import TensorType
from . import tensors as tensor_mod
from .tensors import Tensor


class Recorder:
    """The handle ``record()`` yields: ``graph``, ``value(t)``, ``feeds()``, ``external``."""

    def __init__(self, name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
                 bind: bool = False):
        self.name = name
        self.bind = bind
        self._names = {id(t): n for n, t in (names or {}).items()}
        self._entries: List[tuple] = []      # ("op", node, outs, raw, tensors) or ("inplace",)
        self._graph: Optional[Graph] = None
        self._values: Dict[int, Value] = {}
        self._keep: List[Tensor] = []        # tensors kept alive so ids stay unique
        self.external: List[tuple] = []      # (Value, Tensor) for tensors from outside

    # called by eager_apply for every op executed while the block is open
    def _add(self, node, outs, raw_inputs) -> None:
        if REGISTRY.get(node.op.name) is not node.op:
            raise GraphError(f"record: {node.op.name} is a custom autograd.Function; it has "
                             "no IR form and cannot be recorded")
        self._entries.append(("op", node, tuple(outs), tuple(raw_inputs), tuple(node.inputs)))
        self._keep.extend(outs)

    # called by Tensor._inplace: `target` now holds the value of `result`
    def _note_inplace(self, target: Tensor, result: Tensor) -> None:
        self._entries.append(("inplace", target, result))
        self._keep.extend((target, result))

    # called by Tensor._inplace: `alias` is a snapshot standing for `source`'s current value
    def _note_alias(self, alias: Tensor, source: Tensor) -> None:
        self._entries.append(("alias", alias, source))
        self._keep.extend((alias, source))

    def __enter__(self) -> "Recorder":
        tensor_mod._recorders.append(self)
        return self

    def __exit__(self, *exc) -> None:
        tensor_mod._recorders.remove(self)
        if exc[0] is None:
            self._build()

    # -- building the graph ----------------------------------------------------------------
    def _external(self, g: Graph, t: Tensor) -> Value:
        name = self._names.get(id(t))
        if self.bind and name is None:
            v = g.bind_state(t, f"ext{len(self.external)}")
        else:
            as_state = t.requires_grad and t.grad_fn is None and not self.bind
            if name is None:
                prefix = "param" if as_state else "input"
                name = f"{prefix}{sum(1 for v, _ in self.external if v.name.startswith(prefix))}"
            if as_state:
                v = g.add_state(name, np.asarray(t.__array__()))
            else:
                v = g.add_input(name, TensorType(t.shape, t.dtype))
        self.external.append((v, t))
        return v

    def _lookup(self, g: Graph, t: Tensor) -> Value:
        v = self._values.get(id(t))
        if v is None:
            v = self._values[id(t)] = self._external(g, t)
        return v

    def _build(self) -> None:
        g = Graph(self.name)
        values = self._values
        consumed = set()
        made: List[Tensor] = []
        for entry in self._entries:
            if entry[0] == "alias":
                _, alias, source = entry
                values[id(alias)] = self._lookup(g, source)
                continue
            if entry[0] == "inplace":
                _, target, result = entry
                old = self._lookup(g, target)
                new = values[id(result)] if id(result) in values else self._lookup(g, result)
                values[id(target)] = new
                if old.node is None:            # an input from outside: write it back
                    if id(old) in g.state_init or id(old) in g.bindings:
                        g.update(old, new)
                    else:
                        raise GraphError(
                            f"record: {old.name!r} is an input from outside the block and "
                            "was modified in place inside it; that cannot be expressed as "
                            "a graph input (make it a state input with requires_grad, or "
                            "record with bind=True)")
                continue
            _, node, outs, raw, tensors = entry
            in_vals = []
            for x_raw, t in zip(raw, tensors):
                if isinstance(x_raw, Scalar):
                    v = constant_value(g, x_raw.value, x_raw.dtype)
                elif not isinstance(x_raw, Tensor):
                    v = constant_value(g, np.asarray(t.__array__()))
                else:
                    v = self._lookup(g, t)
                    consumed.add(id(v))
                in_vals.append(v)
            new = Node(node.op, in_vals, dict(node.attrs), (), node.source)
            new.outputs = tuple(Value(TensorType(o.shape, o.dtype), new, i, g)
                                for i, o in enumerate(outs))
            g.append(new)
            for o, v in zip(outs, new.outputs):
                values[id(o)] = v
                made.append(o)
        g.outputs = [values[id(o)] for o in made if id(values[id(o)]) not in consumed
                     and values[id(o)].node is not None]
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
        return self._lookup(self.graph, t)

    def feeds(self) -> Dict[str, np.ndarray]:
        """Current data of the placeholder inputs, by name (state lives in the graph)."""
        placeholders = {id(v) for v in self.graph.inputs}
        return {v.name: np.asarray(t.__array__()) for v, t in self.external
                if id(v) in placeholders}

    @property
    def nodes(self) -> list:
        return [e[1] for e in self._entries if e[0] == "op"]


def record(name: str = "recorded", names: Optional[Dict[str, Tensor]] = None,
           bind: bool = False) -> Recorder:
    """Capture every op executed inside the ``with`` block as ``rec.graph``."""
    return Recorder(name, names, bind)
