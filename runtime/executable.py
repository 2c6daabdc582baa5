"""Executable: a graph turned into a flat list of prepared kernel calls over numbered slots.

Building it prunes the graph to what the chosen outputs and state updates need, numbers every
value (a slot), records for each instruction its kernel, input and output slots, attributes
and the slots to free afterwards (each value dies at its last use, as in torch.fx's
Interpreter). Running it checks the feeds, binds symbolic dims, and runs the tight loop.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from ..graphlib.errors import FeedError, GraphError, KernelError
from ..graphlib.ir import Graph, Value
from ..graphlib.types import format_shape
from .backends import get_backend


def _has_symbol(v) -> bool:
    return isinstance(v, tuple) and any(isinstance(d, str) for d in v)


class Instruction:
    __slots__ = ("node", "kernel", "ins", "outs", "attrs", "symbolic", "types", "frees")

    def __init__(self, node, ins, outs, frees):
        self.node = node
        self.kernel = node.op.kernel
        self.ins = ins
        self.outs = outs
        self.attrs = dict(node.attrs)
        self.symbolic = tuple(k for k, v in self.attrs.items() if k == "shape" and _has_symbol(v))
        self.types = tuple((np.dtype(o.dtype), o.shape if all(isinstance(d, int)
                                                                for d in o.shape) else None)
                           for o in node.outputs)
        self.frees = frees


def needed_nodes(graph: Graph, targets: Sequence[Value]) -> List:
    """The nodes of ``graph`` that ``targets`` depend on, in graph order."""
    want = {id(t) for t in targets}
    keep = []
    for node in reversed(graph.nodes):
        if any(id(o) in want for o in node.outputs):
            keep.append(node)
            want.update(id(i) for i in node.inputs)
    keep.reverse()
    return keep


class Executable:
    """A compiled graph. Call it with feeds as keyword arguments; it returns a list of arrays."""

    def __init__(self, graph: Graph, outputs: Optional[Sequence[Value]] = None,
                 backend: str = "numpy"):
        if outputs is None:
            outputs = list(graph.outputs)
        elif isinstance(outputs, Value):
            outputs = [outputs]
        outputs = list(outputs)
        for i, o in enumerate(outputs):
            if not isinstance(o, Value):
                raise GraphError(f"compile: output {i} is a {type(o).__name__}, not a Value "
                                 "of the graph")
            if o.graph is not graph:
                raise GraphError(f"compile: output {i} ({o!r}) belongs to another graph")
        if not outputs and not graph.updates:
            raise GraphError(f"compile: graph {graph.name!r} has no outputs; pass "
                             "outputs=[...]")
        self.graph = graph
        self.outputs = outputs
        self.backend = backend
        self.xp = get_backend(backend)
        self.updates = list(graph.updates.values())
        targets = outputs + [new for _, new in self.updates]
        self.nodes = needed_nodes(graph, targets)
        self._build(targets)
        self.state: Dict[str, np.ndarray] = {
            v.name: self.xp.asarray(graph.state_init[id(v)]).copy() for v in graph.state}

    # -- preparation ---------------------------------------------------------------------------
    def _build(self, targets):
        graph = self.graph
        slot: Dict[int, int] = {}

        def number(v):
            slot[id(v)] = len(slot)
            return slot[id(v)]

        used = {id(i) for n in self.nodes for i in n.inputs} | {id(t) for t in targets}
        self.feeds = [(v, number(v)) for v in graph.inputs if id(v) in used]
        self.feed_names = {v.name for v in graph.inputs}
        self.state_slots = [(v, number(v)) for v in graph.state]
        for node in self.nodes:
            for o in node.outputs:
                number(o)
        self.num_slots = len(slot)
        keep = {slot[id(t)] for t in targets} | {s for _, s in self.state_slots}
        keep |= {s for _, s in self.feeds}
        last_use: Dict[int, int] = {}
        for i, node in enumerate(self.nodes):
            for x in node.inputs:
                last_use[slot[id(x)]] = i
            for o in node.outputs:   # an unused output dies right where it is made
                last_use.setdefault(slot[id(o)], i)
        frees: Dict[int, List[int]] = {}
        for s, i in last_use.items():
            if s not in keep:
                frees.setdefault(i, []).append(s)
        self.instructions = [
            Instruction(node, tuple(slot[id(x)] for x in node.inputs),
                        tuple(slot[id(o)] for o in node.outputs), tuple(frees.get(i, ())))
            for i, node in enumerate(self.nodes)]
        self.output_slots = [slot[id(o)] for o in self.outputs]
        self.update_slots = [(state.name, slot[id(new)]) for state, new in self.updates]

    @property
    def kernel_count(self) -> int:
        """Kernels launched per run."""
        return len(self.instructions)

    # -- running -------------------------------------------------------------------------------
    def _bind_feeds(self, feeds: dict, env: list) -> Dict[str, int]:
        extra = [k for k in feeds if k not in self.feed_names]
        if extra:
            raise FeedError(f"{self.graph.name}: unknown feed {', '.join(map(repr, extra))}; "
                            f"the graph's placeholders are {sorted(self.feed_names)}")
        bindings: Dict[str, int] = {}
        origin: Dict[str, str] = {}
        xp = self.xp
        for v, s in self.feeds:
            if v.name not in feeds:
                raise FeedError(f"{self.graph.name}: missing feed for placeholder {v.name!r} "
                                f"(expected {v.type!r})")
            arr = feeds[v.name]
            if isinstance(arr, (bool, int, float, list, tuple, np.generic)):
                arr = np.asarray(arr, dtype=v.dtype)
            elif not hasattr(arr, "dtype") or not hasattr(arr, "shape"):
                raise FeedError(f"{self.graph.name}: feed {v.name!r} must be an array or a "
                                f"number, found {type(arr).__name__}")
            dt = arr.dtype.name if hasattr(arr.dtype, "name") else str(arr.dtype)
            if dt != v.dtype:
                raise FeedError(f"{self.graph.name}: feed {v.name!r} has dtype {dt}, expected "
                                f"{v.type!r}; convert it with .astype({v.dtype!r})")
            shape = tuple(arr.shape)
            want = v.shape
            ok = len(shape) == len(want)
            if ok:
                for d, w in zip(shape, want):
                    if isinstance(w, str):
                        if w in bindings and bindings[w] != d:
                            raise FeedError(
                                f"{self.graph.name}: feed {v.name!r} has shape {list(shape)}, "
                                f"but {w}={bindings[w]} from feed {origin[w]!r} (expected "
                                f"{v.type!r})")
                        bindings[w] = d
                        origin[w] = v.name
                    elif w != d:
                        ok = False
            if not ok:
                raise FeedError(f"{self.graph.name}: feed {v.name!r} has shape {list(shape)}, "
                                f"expected {format_shape(want)} ({v.type!r})")
            if not isinstance(arr, xp.ndarray):
                arr = xp.asarray(arr)
            env[s] = arr
        return bindings

    def _resolve(self, ins: Instruction, bindings: Dict[str, int]) -> dict:
        attrs = dict(ins.attrs)
        for k in ins.symbolic:
            dims = []
            for d in attrs[k]:
                if isinstance(d, str):
                    if d not in bindings:
                        raise KernelError(
                            f"{ins.node.op.name}: the symbolic dim {d!r} is not bound by any "
                            f"feed\n  in: {ins.node.source}")
                    d = bindings[d]
                dims.append(d)
            attrs[k] = tuple(dims)
        return attrs

    def run(self, feeds: Optional[dict] = None) -> list:
        """Run once: returns the outputs (numpy arrays) and updates the state."""
        feeds = feeds or {}
        env: list = [None] * self.num_slots
        bindings = self._bind_feeds(feeds, env)
        for v, s in self.state_slots:
            env[s] = self.state[v.name]
        xp = self.xp
        ndarray = xp.ndarray
        with np.errstate(all="ignore"):
            for ins in self.instructions:
                args = [env[s] for s in ins.ins]
                attrs = self._resolve(ins, bindings) if ins.symbolic else ins.attrs
                try:
                    res = ins.kernel(xp, *args, **attrs)
                except Exception as e:
                    raise self._kernel_error(ins, args, e) from e
                if len(ins.outs) == 1:
                    res = (res,)
                for s, r, (dt, shape) in zip(ins.outs, res, ins.types):
                    if type(r) is not ndarray:
                        r = xp.asarray(r)
                    if r.dtype != dt:
                        r = r.astype(dt)
                    if shape is not None and r.shape != shape:
                        raise self._kernel_error(ins, args, ValueError(
                            f"kernel returned shape {list(r.shape)}, inferred {list(shape)}"))
                    env[s] = r
                for s in ins.frees:
                    env[s] = None
        outs = [env[s] for s in self.output_slots]
        for name, s in self.update_slots:
            new = env[s]
            if new is self.state[name] or not getattr(new, "flags", None) or \
                    not new.flags.owndata or any(new is env[fs] for _, fs in self.feeds):
                new = new.copy()
            self.state[name] = new
        if xp is not np:
            outs = [xp.asnumpy(o) for o in outs]
        return outs

    def __call__(self, **feeds) -> list:
        return self.run(feeds)

    def _kernel_error(self, ins: Instruction, args, e: Exception) -> KernelError:
        node = ins.node
        shapes = ", ".join(f"{getattr(a, 'dtype', '?')}{list(getattr(a, 'shape', ()))}"
                           for a in args)
        where = f"\n  in: {node.source}" if node.source else ""
        return KernelError(f"{node.op.name} failed at run time: {type(e).__name__}: {e}\n"
                           f"  inputs: ({shapes})  attrs: {node.attrs}{where}")

    def __repr__(self):
        return (f"<Executable {self.graph.name!r}: {self.kernel_count} kernels, "
                f"{len(self.outputs)} outputs, backend={self.backend}>")


def compile_graph(graph: Graph, outputs=None, backend: str = "numpy", device=None,
                  **options) -> Executable:
    """Build an Executable for ``graph`` (installed as ``Graph.compile`` by duograph)."""
    if options:
        raise TypeError(f"compile: unexpected options {sorted(options)}")
    if device is not None:
        backend = {"cpu": "numpy", "cuda": "cupy", "gpu": "cupy"}.get(device, device)
    return Executable(graph, outputs, backend)
