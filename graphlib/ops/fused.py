"""The ``fused`` op: one node that runs a sub-graph of elementwise ops as one kernel.

The fusion pass (``passes/fusion.py``) replaces a group of nodes by one ``fused`` node whose
``sub`` attribute holds a ``FusedBody``: a small ``Graph`` whose placeholders are the node's
inputs (``%i0``, ``%i1``...) and whose outputs are the node's outputs. Scalar constants are
folded into the body; a matmul or reduction may open it (an epilogue fusion: the body's first
step calls the producer's kernel, the elementwise chain follows).

    before:  %1 = mul(%x, %x); %2 = tanh(%1); %3 = add(%2, %x)
    after:   %3 = fused(%x) { %a = mul(%i0, %i0); %b = tanh(%a); %c = add(%b, %i0);
                              return (%c) }

``infer`` re-runs the body's inference on the given input types, so ``graph.verify()`` checks
fused nodes like any other. The reference kernel runs the body op by op; how a backend runs
it faster is the backend's business (its fused compiler: the CPU backend's, in
``runtime/cpu/fused.py``, generates cache-sized numpy chunks or numba loops from the ``expr``
templates).

There is no gradient rule (``vjp=None``): fusion runs after autodiff, on graphs whose
backward is already built, so nothing differentiates through a fused node.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..attrs import Attr, Attrs
from ..batching import batch_region, ensure_batched, region_has_random
from ..ir import Graph, Node, Region, Value
from ..kernels import run_kernel
from ..printer import format_attrs
from ..registry import OpDef, register
from ..rewrite import make_node
from ..serialize import register_region_kind
from ..types import TensorType


class FusedBody(Region):
    """The immutable sub-graph of a fused node: a ``Region``, hashable and compared by
    structure.

    Two bodies are equal when they hold the same ops on the same wiring with the same
    attributes and input types, so CSE can merge equal fused nodes. The body is never changed
    after the node is made; backends cache their run plans for it themselves, keyed weakly
    by the body (``runtime.backend.PlanCache``): the IR holds no backend state.
    """

    __slots__ = ()

    def text(self, indent: str = "") -> str:
        """Printed on the node's line: ``fused(%x) { %a = mul(%i0, %i0); ... }``."""
        return " " + self.body_text()

    @property
    def ops(self) -> List[str]:
        """The op names in the body, constants left out."""
        return [n.op.name for n in self.graph.nodes if not n.op.constant]

    # -- types ---------------------------------------------------------------------------------
    def infer(self, types: Sequence[TensorType], op: str = "fused") -> List[TensorType]:
        """The output types for inputs of ``types``, inferred through the body."""
        return super().infer(types, op)

    def inplace_pairs(self) -> List[Tuple[int, int]]:
        """(output k, input j) pairs the kernel may compute in place (output k written over
        input j's bytes): same type, and output k is made at or after the body's last read
        of input j. Every strategy is then exact: chunks and numba loops read each element
        of an input before they write the same element of an output, and a step that reads
        and writes the same element is one ufunc call (numpy allows exact overlap) or a
        kernel call whose fresh result is copied in."""
        homes = set(self.prologue_homes().values())
        return [(k, j) for k, j in self._candidate_pairs() if k not in homes]

    def _candidate_pairs(self) -> List[Tuple[int, int]]:
        g = self.graph
        made, last_read = self._order()
        pairs = []
        for k, o in enumerate(g.outputs):
            if o not in made:
                continue
            for j, x in enumerate(g.inputs):
                if x.type == o.type and last_read.get(x, -1) <= made[o]:
                    pairs.append((k, j))
        return pairs

    def _order(self) -> Tuple[Dict[Value, int], Dict[Value, int]]:
        """(value -> index of the node making it, value -> index of its last read)."""
        made: Dict[Value, int] = {}
        last_read: Dict[Value, int] = {}
        for i, node in enumerate(self.graph.nodes):
            for x in node.inputs:
                last_read[x] = i
            for o in node.outputs:
                made[o] = i
        return made, last_read

    def prologue_homes(self) -> Dict[Value, int]:
        """prologue value -> the output whose buffer the CPU kernel computes it in (an
        epilogue ``relu(x @ w + b)`` runs the matmul straight into the output buffer and the
        chain in place over it): the value itself when it is an output, else the first
        output of its type made at or after its last read that could not overwrite an input
        in place instead (a new weight ``w - lr * (x.T @ g)`` keeps its chance to be written
        into ``w``). A home never overwrites an input (``inplace_pairs`` leaves it out)."""
        g = self.graph
        made, last_read = self._order()
        homes: Dict[Value, int] = {}
        taken = {k for k, _ in self._candidate_pairs()}
        where = {o: k for k, o in enumerate(g.outputs)}
        prologue = [n for n in g.nodes if not n.op.elementwise and not n.op.constant]
        for node in prologue:
            for p in node.outputs:
                k = where.get(p)
                if k is None:
                    k = next((k for k, o in enumerate(g.outputs)
                              if k not in taken and o in made and o is not p
                              and g.nodes[made[o]].op.elementwise and o.type == p.type
                              and made[o] >= last_read.get(p, -1)), None)
                if k is not None and k not in taken:
                    homes[p] = k
                    taken.add(k)
        return homes

    # -- text ----------------------------------------------------------------------------------
    def body_text(self) -> str:
        """``{ %a = mul(%i0, %i1); %b = tanh(%a); return (%b) }``: one line, scalar constants
        written in place."""
        g = self.graph
        names: Dict[Value, str] = {v: f"%{v.name}" for v in g.inputs}
        parts = []
        count = 0
        for node in g.nodes:
            if node.op.constant and not hasattr(node.attrs["value"], "array"):
                names[node.outputs[0]] = repr(node.attrs["value"])
                continue
            for o in node.outputs:
                names[o] = "%" + _letters(count)
                count += 1
            outs = ", ".join(names[o] for o in node.outputs)
            ins = ", ".join(names[x] for x in node.inputs)
            parts.append(f"{outs} = {node.op.name}({ins}){format_attrs(node.attrs)}")
        parts.append("return (" + ", ".join(names[o] for o in g.outputs) + ")")
        return "{ " + "; ".join(parts) + " }"



def _letters(i: int) -> str:
    """0 -> a, 25 -> z, 26 -> ba, ...: short names for values inside a body."""
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return s


def eval_nodes(nodes: Sequence[Node], env: Dict[Value, object], xp,
               keep: Sequence = (), kernels: Optional[Mapping] = None) -> None:
    """Run ``nodes`` op by op (any array module), reading and writing ``env`` (value ->
    array) and dropping each value at its last use unless it is in ``keep``. ``kernels``
    maps an OpDef to the kernel to run (a backend's table); by default each op's own
    reference kernel."""
    last: Dict[Value, int] = {}
    for i, node in enumerate(nodes):
        for x in node.inputs:
            last[x] = i
    kept = {v for v in keep}
    for i, node in enumerate(nodes):
        op = node.op
        kernel = op.kernel if kernels is None else kernels[op]
        res = run_kernel(kernel, xp, [env[x] for x in node.inputs], node.attrs,
                         op.multi_output, [np.dtype(o.dtype) for o in node.outputs])
        for o, r in zip(node.outputs, res):
            env[o] = r
        for x in node.inputs:
            if last.get(x) == i and x not in kept:
                env.pop(x, None)


def run_ops(graph: Graph, xp, arrays: Sequence, kernels: Optional[Mapping] = None) -> Tuple:
    """Evaluate ``graph`` op by op (with ``kernels``, as ``eval_nodes``): the reference."""
    env: Dict[Value, object] = {v: a for v, a in zip(graph.inputs, arrays)}
    eval_nodes(graph.nodes, env, xp, graph.outputs, kernels)
    return tuple(env[o] for o in graph.outputs)


def _fused_infer(types, attrs):
    return attrs["sub"].infer(types)


def _fused_kernel(xp, *arrays, sub: FusedBody):
    return run_ops(sub.graph, xp, arrays)


register_region_kind("fused", FusedBody)

# vjp=None on purpose: fusion runs after autodiff, so no gradient flows through fused nodes.
# The body declares which outputs may overwrite which inputs (FusedBody.inplace_pairs).
def _fused_rule(op, args, batched, attrs, size):
    """A fused node over a batch: its body replayed with its ops' rules."""
    body = attrs["sub"]
    if region_has_random(body):
        return NotImplemented
    outs, got = batch_region(body, list(args), list(batched), size)
    return tuple(ensure_batched(o, b, size) for o, b in zip(outs, got))


fused_op = register(OpDef("fused", _fused_infer, _fused_kernel, None, multi_output=True,
                          inplace_pairs=lambda node: node.attrs["sub"].inplace_pairs(),
                          doc="a fused sub-graph of elementwise ops run as one kernel",
                          attrs=Attrs(sub=Attr("region")), batch=_fused_rule))


def make_fused_node(inputs: Sequence, body: FusedBody, like: Node, graph: Graph) -> Node:
    """A fused node over ``inputs`` running ``body``, placed nowhere yet, with ``like``'s
    source location."""
    return make_node(fused_op, inputs, {"sub": body}, like, graph)

