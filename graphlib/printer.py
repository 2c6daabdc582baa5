"""The text form of a graph: one line per node, readable like a jaxpr or MLIR.

    graph mlp(%x: f32[N,4], %w: f32[4,3]) {
      %0: f32[N,3] = matmul(%x, %w)
      %1: f32[N,3] = relu(%0)
      ...
      return (%4, %9)
    }
"""
from __future__ import annotations

from typing import Dict, Optional

from .ir import ConstArray, Region, install_service


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, ConstArray):
        return repr(v)
    return repr(v) if isinstance(v, str) else str(v)


def format_attrs(attrs: dict) -> str:
    # a region (a sub-graph) is printed after the call instead, by node_to_text
    shown = [(k, v) for k, v in attrs.items() if not isinstance(v, Region)]
    if not shown:
        return ""
    return "{" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in shown) + "}"


class Namer:
    """Stable names at print time: inputs by their name, everything else %0, %1, ..."""

    def __init__(self):
        self.names: Dict[object, str] = {}   # identity-hashed Values
        self.count = 0

    def name(self, v) -> str:
        n = self.names.get(v)
        if n is None:
            if getattr(v, "name", None):
                n = f"%{v.name}"
            else:
                n = f"%{self.count}"
                self.count += 1
            self.names[v] = n
        return n


def node_to_text(node, namer: Namer, source: bool = False, indent: str = "  ") -> str:
    outs = ", ".join(f"{namer.name(o)}: {o.type!r}" for o in node.outputs)
    ins = ", ".join(namer.name(i) for i in node.inputs)
    line = f"{indent}{outs} = {node.op.name}({ins}){format_attrs(node.attrs)}"
    blocks = ""
    for region in node.regions:     # fused(%3, %5) { %a = mul(%i0, %i1); ... } inline,
        text = region.text(indent)  # other bodies as indented blocks on the next lines
        if text.startswith("\n"):
            blocks += text
        else:
            line += text
    if source and node.source is not None:
        line = f"{line:<72}  # {node.source.short()}"
    return line + blocks


def graph_namer(graph) -> Namer:
    """A Namer that has named every value of ``graph`` as ``print(graph)`` does (inputs,
    state, then node by node), for messages that quote the printout."""
    namer = Namer()
    for v in list(graph.inputs) + list(graph.state):
        namer.name(v)
    for node in graph.nodes:
        for v in node.outputs:
            namer.name(v)
        for v in node.inputs:
            namer.name(v)
    return namer


def graph_to_text(graph, source: bool = False, outputs=None, namer: Optional[Namer] = None,
                  indent: str = "", keyword: str = "graph") -> str:
    """The text form; a region's body is printed the same way, indented, under
    ``keyword`` ``region``."""
    namer = namer or Namer()
    sig = ", ".join(f"{namer.name(v)}: {v.type!r}" for v in graph.inputs)
    title = f"{keyword} {graph.name}" if keyword == "graph" else keyword
    lines = [f"{indent}{title}({sig})"
             + (" state(" + ", ".join(f"{namer.name(v)}: {v.type!r}" for v in graph.state)
                + ")" if graph.state else "") + " {"]
    for node in graph.nodes:
        lines.append(node_to_text(node, namer, source, indent + "  "))
    outs = list(outputs) if outputs is not None else list(graph.outputs)
    for state, new in graph.updates.values():
        lines.append(f"{indent}  {namer.name(state)} <- {namer.name(new)}")
    lines.append(f"{indent}  return (" + ", ".join(namer.name(o) for o in outs) + ")")
    lines.append(indent + "}")
    return "\n".join(lines)


install_service("to_text", graph_to_text)     # print(graph), Region.text
