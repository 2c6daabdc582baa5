"""Pictures of graphs: ``graph.to_dot()`` (a pydot graph built from a networkx DiGraph) and
``graph.render(path)`` (through Graphviz's ``dot`` program, or, where it is not installed,
the networkx + matplotlib renderer ``duograph.pictures`` installs).

Each node shows its op and its output types; the user's source line is its tooltip. A node
holding regions (a fused kernel, a ``call``) is drawn as a cluster around its body. Nodes
may be coloured by a memory plan (``plan=``: the arena offset of their first output) or by
per-node timings (``timings=``: node -> seconds).
"""
from __future__ import annotations

import shutil
from typing import Dict, Mapping, Optional

from .errors import DuographError
from .files import write_bytes, write_text
from .ir import install_service
from .printer import Namer


def _pydot():
    try:
        import pydot    # optional (the viz extra): loaded only to draw
    except ImportError:
        raise DuographError("graph pictures need pydot: pip install pydot (or "
                            "pip install 'duograph[viz]')") from None
    return pydot


def _shade(fraction: float) -> str:
    """White (0) to a strong orange (1), as a Graphviz colour."""
    f = min(max(fraction, 0.0), 1.0)
    g = int(255 - 120 * f)
    b = int(255 - 230 * f)
    return f"#ff{g:02x}{b:02x}"


def _add_graph(nx_graph, graph, prefix: str, clusters: list, heat: Dict[object, float],
               namer=None) -> Dict[object, str]:
    """Add ``graph``'s values and nodes to ``nx_graph`` under ``prefix``; returns the id of
    the picture node that makes each value."""
    namer = namer or Namer()
    made: Dict[object, str] = {}
    for v in list(graph.inputs) + list(graph.state):
        key = f"{prefix}v{len(made)}"
        kind = "state" if any(v is s for s in graph.state) else "input"
        nx_graph.add_node(key, label=f"{namer.name(v)}\n{v.type!r}", shape="ellipse",
                          style="filled", fillcolor="#dde8f7" if kind == "input" else "#e3f2d9",
                          tooltip=kind)
        made[v] = key
    for i, node in enumerate(graph.nodes):
        key = f"{prefix}n{i}"
        outs = ", ".join(repr(o.type) for o in node.outputs)
        tip = str(node.source) if node.source is not None else "(no source line)"
        attrs = dict(label=f"{node.op.name}\n{outs}", shape="box", tooltip=tip,
                     style="filled", fillcolor=_shade(heat.get(node, 0.0)))
        nx_graph.add_node(key, **attrs)
        for x in node.inputs:
            if x in made:
                nx_graph.add_edge(made[x], key)
        for r, region in enumerate(node.regions):
            inner = f"{key}r{r}_"
            members = _add_graph(nx_graph, region.graph, inner, clusters, {}, Namer())
            clusters.append((f"{key}_{r}", f"{node.op.name} body",
                             [k for k in nx_graph.nodes if str(k).startswith(inner)]))
            for o in region.graph.outputs:
                if o in members:
                    nx_graph.add_edge(members[o], key, style="dashed")
        for o in node.outputs:
            made[o] = key
    for k, o in enumerate(graph.outputs):
        key = f"{prefix}out{k}"
        nx_graph.add_node(key, label=f"output {k}", shape="plaintext")
        if o in made:
            nx_graph.add_edge(made[o], key)
    return made


def to_networkx(graph, plan=None, timings: Optional[Mapping] = None):
    """``(networkx.DiGraph, clusters)``: the picture's nodes (attributes ``label``,
    ``shape``, ``fillcolor``, ``tooltip``) and edges, and the regions' clusters as
    ``(name, label, member nodes)``; ``plan`` and ``timings`` colour as in ``to_dot``."""
    import networkx as nx   # loaded only to draw: importing graphlib need not pay for it
    heat: Dict[object, float] = {}
    if timings:
        top = max(timings.values()) or 1.0
        heat = {n: t / top for n, t in timings.items()}
    elif plan is not None:
        offsets = {}
        for node in graph.nodes:
            off = getattr(plan, "offsets", {}).get(node.outputs[0]) if node.outputs \
                else None
            if off is not None:
                offsets[node] = off
        top = max(offsets.values(), default=0) or 1
        heat = {n: o / top for n, o in offsets.items()}
    g = nx.DiGraph(name=graph.name)
    clusters: list = []
    _add_graph(g, graph, "", clusters, heat)
    return g, clusters


def to_dot(graph, plan=None, timings: Optional[Mapping] = None):
    """The graph as a ``pydot.Dot``: ops with output types, source lines as tooltips,
    regions as clusters; coloured by ``plan`` (a MemoryPlan: arena offset of each node's
    first output) or by ``timings`` (node -> seconds)."""
    from networkx.drawing.nx_pydot import to_pydot  # needs pydot (optional), so here
    pydot = _pydot()
    g, clusters = to_networkx(graph, plan, timings)
    dot = to_pydot(g)
    dot.set_rankdir("TB")
    dot.set_name(f'"{graph.name}"')
    for name, label, members in clusters:
        cluster = pydot.Cluster(name, label=f'"{label}"', style="rounded", color="gray")
        for member in members:
            for found in dot.get_node(member) or dot.get_node(f'"{member}"'):
                cluster.add_node(found)
                dot.del_node(found.get_name())
        dot.add_subgraph(cluster)
    return dot


# Where Graphviz's ``dot`` program is missing (a fresh machine), ``render`` draws .svg, .png
# and .pdf with the function installed here by ``duograph.pictures`` (networkx's layout and
# matplotlib, ``fallback(graph, path, fmt, **options) -> path``); graphlib imports neither.
_FALLBACK: Dict[str, object] = {}
FALLBACK_FORMATS = ("svg", "png", "pdf")


def install_fallback_renderer(fn) -> None:
    """Register the renderer ``render`` uses when Graphviz is not installed."""
    _FALLBACK["render"] = fn


def render(graph, path: str, **options) -> str:
    """Write the picture of ``graph`` to ``path`` (format from its extension: .svg, .png,
    .pdf, or .dot for the source) and return the path. Without Graphviz's ``dot`` program,
    .svg/.png/.pdf are drawn by the installed fallback (networkx and matplotlib: a simpler
    layered picture, no clusters)."""
    fmt = str(path).rsplit(".", 1)[-1].lower()
    if fmt in ("dot", "gv"):
        write_text(path, to_dot(graph, **options).to_string())
        return str(path)
    if shutil.which("dot") is None:
        fallback = _FALLBACK.get("render")
        if fallback is not None and fmt in FALLBACK_FORMATS:
            return fallback(graph, path, fmt, **options)
        raise DuographError(f"render {path!r}: Graphviz's `dot` program is not installed. "
                            "Install Graphviz (apt install graphviz, brew install graphviz, "
                            "conda install graphviz), or write the .dot source with "
                            f"graph.render('{str(path).rsplit('.', 1)[0]}.dot')"
                            + ("" if fmt in FALLBACK_FORMATS else
                               f"; without it only {', '.join(FALLBACK_FORMATS)} are drawn "
                               "(with networkx and matplotlib)"))
    write_bytes(path, to_dot(graph, **options).create(format=fmt))
    return str(path)


install_service("to_dot", to_dot)       # graph.to_dot()
install_service("render", render)       # graph.render(path)
