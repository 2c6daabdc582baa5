"""Small IR surgery shared by compile and the passes: copying part of a graph."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .ir import Graph, Node, Value


def extract(nodes: Sequence[Node], name: str = "extracted",
            prefix: str = "in") -> Tuple[Graph, List[Value], Dict[Value, Value]]:
    """Copy ``nodes`` (in order) into a new graph.

    Every value the nodes read but do not produce becomes a placeholder of the new graph
    (``in0``, ``in1``...). Returns the graph, the original values behind those placeholders
    (in order) and a map original value -> new value.
    """
    g = Graph(name)
    mapping: Dict[Value, Value] = {}
    boundary: List[Value] = []
    for node in nodes:
        ins = []
        for x in node.inputs:
            v = mapping.get(x)
            if v is None:
                v = g.add_input(f"{prefix}{len(boundary)}", x.type)
                boundary.append(x)
                mapping[x] = v
            ins.append(v)
        new = Node(node.op, ins, dict(node.attrs), (), node.source, node.provenance)
        new.outputs = tuple(Value(o.type, new, i, g) for i, o in enumerate(node.outputs))
        g.append(new)
        for o, n in zip(node.outputs, new.outputs):
            mapping[o] = n
    return g, boundary, mapping
