"""In-place graph surgery for passes: cloning a graph, replacing uses, adding nodes.

Passes run on a private clone (``clone``) that the compiler owns, so the user's graph is
never changed; ``replace_uses`` redirects every use of a value (node inputs, outputs, state
updates) to another, and ``make_node`` builds a node for a rewrite, copying the source
location of the node it replaces (PyTensor's ``copy_stack_trace``).
"""
from __future__ import annotations

from typing import Dict, Iterable, Sequence, Tuple

from .ir import Graph, Node, Value


def clone(graph: Graph, outputs: Sequence[Value] = None) -> Tuple[Graph, Dict[Value, Value]]:
    """A copy of ``graph`` sharing no Value or Node with it (regions, immutable, are
    shared); ``outputs`` (default ``graph.outputs``) become the copy's outputs. Returns
    (copy, old value -> new value)."""
    g = Graph(graph.name)
    m: Dict[Value, Value] = {}
    for v in graph.inputs:
        m[v] = g.add_input(v.name, v.type)
    for v in graph.state:
        holder = graph.bindings.get(v)
        if holder is not None:
            m[v] = g.bind_state(holder, v.name)
        else:
            m[v] = g.add_state(v.name, graph.state_init[v])
    for node in graph.nodes:
        new = Node(node.op, [m[x] for x in node.inputs], dict(node.attrs), (), node.source,
                   node.provenance)
        new.outputs = tuple(Value(o.type, new, i, g, o.name) for i, o in enumerate(node.outputs))
        g.append(new)
        m.update(zip(node.outputs, new.outputs))
    outs = graph.outputs if outputs is None else outputs
    g.outputs = [m[o] for o in outs]
    for state, new_value in graph.updates.values():
        g.updates[m[state]] = (m[state], m[new_value])
    g._random_streams = graph._random_streams
    g.gradient_blockers = list(graph.gradient_blockers)
    return g, m


def make_node(op, inputs: Sequence[Value], attrs: dict, like: Node, graph: Graph) -> Node:
    """A new node of ``graph`` (not yet placed) with inferred outputs and ``like``'s source."""
    types = op.infer([x.type for x in inputs], attrs)
    node = Node(op, inputs, attrs, (), like.source, like.provenance)
    node.outputs = tuple(Value(t, node, i, graph) for i, t in enumerate(types))
    return node


def replace_uses(graph: Graph, old: Value, new: Value) -> None:
    """Make every user of ``old`` read ``new`` instead (nodes, outputs, state updates);
    O(uses), through the graph's use lists (``Graph.replace_uses``)."""
    graph.replace_uses(old, new)


def replace_all(graph: Graph, mapping: Dict[Value, Value]) -> None:
    """``replace_uses`` for many values at once (old Value -> new Value); a chain
    old -> mid -> new ends at new. O(uses of the replaced values)."""
    for old in list(mapping):
        new, seen = mapping[old], {old}
        while new in mapping and new not in seen:
            seen.add(new)
            new = mapping[new]
        graph.replace_uses(old, new)


def live_roots(graph: Graph) -> Iterable[Value]:
    """The values a graph must compute: its outputs and its state updates."""
    yield from graph.outputs
    for _, value in graph.updates.values():
        yield value
