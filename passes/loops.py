"""Loop-invariant code motion: nodes of a loop body that read only values the loop passes
unchanged to every iteration (and constants) are computed once, before the loop node.

Which inputs of a node are loop-invariant is a fact about its op, declared by the
``loop_invariant_from`` trait of its OpDef (``scan``, ``while_loop``): from that index on,
the node's inputs reach every region at the same positions on every iteration, and inputs
appended at the end are new such values. No op is known here by name.

Before::

    %1 = scan(%h, %xs, %w)
      region(%i0, %i1, %cap0) { %0 = transpose(%cap0); %1 = matmul(%i0, %0); ... }

After::

    %0 = transpose(%w)
    %1 = scan(%h, %xs, %w, %0)
      region(%i0, %i1, %cap0, %hoisted0) { %1 = matmul(%i0, %hoisted0); ... }
"""
from __future__ import annotations

from typing import Dict

from ..graphlib.ir import Graph, Node, Region, Value
from ..graphlib.rewrite import clone
from .result import PassResult


def _hoistable(n: Node, outer_of: Dict[Value, Value]) -> bool:
    if n.op.random or n.op.ordered or n.op.constant or n.regions or not n.inputs:
        return False
    if not any(x in outer_of for x in n.inputs):
        return False
    return all(x in outer_of or (x.node is not None and x.node.op.constant)
               for x in n.inputs)


def _hoist(graph: Graph, node: Node) -> int:
    start = node.op.loop_invariant_from(node)
    keys = [k for k, v in node.attrs.items() if isinstance(v, Region)]
    bodies = {k: clone(node.attrs[k].graph)[0] for k in keys}
    if any(len(b.inputs) != len(node.inputs) for b in bodies.values()):
        return 0
    inputs = list(node.inputs)
    moved = 0
    for k in keys:
        body = bodies[k]
        outer_of = {body.inputs[i]: inputs[i] for i in range(start, len(inputs))}
        consts: Dict[Node, Value] = {}
        for n in list(body.nodes):
            if not _hoistable(n, outer_of):
                continue
            ins = []
            for x in n.inputs:
                if x in outer_of:
                    ins.append(outer_of[x])
                    continue
                c = consts.get(x.node)
                if c is None:
                    c = consts[x.node] = graph.copy_node(x.node, (), before=node).outputs[0]
                ins.append(c)
            new = graph.create_node(n.op, ins, dict(n.attrs), like=n, before=node)
            for o, no in zip(n.outputs, new.outputs):
                inputs.append(no)
                for other_key, other in bodies.items():
                    v = other.add_input(f"hoisted{len(inputs) - 1}", no.type)
                    if other_key == k:
                        body.replace_uses(o, v)
                        outer_of[v] = no
            body.erase(n)
            moved += 1
    if moved:
        attrs = dict(node.attrs)
        for k in keys:
            attrs[k] = node.attrs[k].with_graph(bodies[k])
        node.attrs = attrs
        node.inputs = inputs
    return moved


def loop_invariant_code_motion(graph: Graph) -> PassResult:
    """Move the nodes of loop bodies that read only loop-invariant values (and constants)
    out of the loop, in front of its node (also inside nested regions' loops)."""
    moved = 0
    for node in list(graph.nodes):
        if node.op.loop_invariant_from is not None and node.regions:
            moved += _hoist(graph, node)
    from .cleanup import _in_regions
    nested = _in_regions(graph, lambda g: loop_invariant_code_motion(g).changed)
    notes = [f"hoisted {moved} nodes out of loops"] if moved else []
    return PassResult(graph, bool(moved or nested), notes)
