"""Pictures on a machine without Graphviz, and models in Netron.

``graph.render("g.svg")`` draws through Graphviz's ``dot`` program where it is installed;
where it is not (a fresh machine), the renderer here draws the same nodes (op and output
types, inputs and state coloured as Graphviz does) with networkx's layered layout and
matplotlib: the nodes in topological generations from top to bottom, the edges as arrows.
Regions (fused bodies, loop bodies) are drawn as their own nodes, without the clusters
Graphviz draws around them. matplotlib and networkx are loaded only when a picture is drawn.

``view(path_or_graph)`` opens a model in Netron (the ``netron`` package, the ``viz`` extra),
as users of ONNX expect: an ONNX file as it is, a duograph ``Graph`` exported to ONNX first.
``duograph inspect --view FILE`` (an ONNX file, or a saved graph) calls it.
"""
from __future__ import annotations

import io
import os
import tempfile
from typing import Optional

from .graphlib.dot import install_fallback_renderer, to_networkx
from .graphlib.errors import DuographError
from .graphlib.files import write_bytes

__all__ = ["render_with_matplotlib", "view"]


def _layers(g) -> dict:
    """Node -> its topological generation (a node of a cycle-free picture is below all the
    nodes it reads)."""
    import networkx as nx
    return {n: k for k, gen in enumerate(nx.topological_generations(g)) for n in gen}


def render_with_matplotlib(graph, path: str, fmt: str, plan=None, timings=None) -> str:
    """Draw ``graph`` to ``path`` in ``fmt`` (svg, png or pdf) with networkx and matplotlib;
    returns the path. The file is written whole or not at all."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise DuographError(f"render {path!r}: neither Graphviz's `dot` program nor "
                            "matplotlib is installed; install one (apt install graphviz, or "
                            "pip install matplotlib), or write the .dot source") from None
    import networkx as nx
    g, _ = to_networkx(graph, plan, timings)
    layer = _layers(g)
    nx.set_node_attributes(g, layer, "layer")
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal") if g else {}
    pos = {n: (x, -y) for n, (x, y) in pos.items()}            # inputs at the top
    rows = max(layer.values(), default=0) + 1
    widest = max((sum(1 for v in layer.values() if v == r) for r in range(rows)), default=1)
    fig = Figure(figsize=(max(4.0, 2.2 * widest), max(3.0, 1.1 * rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(graph.name, fontsize=9)
    if g:
        nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowsize=8, width=0.8,
                               edge_color="#888888", node_size=900,
                               style=[d.get("style", "solid") for *_, d in g.edges(data=True)])
    for n, (x, y) in pos.items():
        d = g.nodes[n]
        shape = d.get("shape", "box")
        box = dict(boxstyle="round,pad=0.3" if shape == "ellipse" else "square,pad=0.3",
                   fc=d.get("fillcolor", "white") if shape != "plaintext" else "none",
                   ec="#555555" if shape != "plaintext" else "none", lw=0.6)
        ax.text(x, y, str(d.get("label", n)), ha="center", va="center", fontsize=6,
                bbox=box, family="monospace")
    if pos:
        xs = [p[0] for p in pos.values()]
        ys = [p[1] for p in pos.values()]
        pad = 0.15 * max(max(xs) - min(xs), max(ys) - min(ys), 1e-3)
        ax.set_xlim(min(xs) - pad, max(xs) + pad)
        ax.set_ylim(min(ys) - pad, max(ys) + pad)
    buffer = io.BytesIO()
    from matplotlib import rc_context
    with rc_context({"svg.fonttype": "none"}):      # the labels stay text in an SVG
        fig.savefig(buffer, format=fmt, bbox_inches="tight")
    write_bytes(path, buffer.getvalue())
    return str(path)


install_fallback_renderer(render_with_matplotlib)


def _netron():
    try:
        import netron
    except ImportError:
        raise DuographError("viewing a model needs Netron: pip install netron (or pip install "
                            "'duograph[viz]')") from None
    return netron


def view(target, browse: bool = True, wait: bool = True, port: Optional[int] = None) -> str:
    """Open ``target`` (an ONNX file's path, or a duograph ``Graph``) in Netron; a Graph is
    exported to ONNX (a temporary file) first. ``wait``: block until Netron's server is
    stopped (Ctrl-C), as ``netron FILE`` does. Returns the file shown."""
    netron = _netron()
    if hasattr(target, "nodes") and hasattr(target, "outputs"):        # a Graph
        from . import onnx as dg_onnx
        name = "".join(c if c.isalnum() else "_" for c in target.name) or "graph"
        path = os.path.join(tempfile.mkdtemp(prefix="duograph-view-"), f"{name}.onnx")
        dg_onnx.export(target, path)
    else:
        path = os.fspath(target)
        if not os.path.isfile(path):
            raise DuographError(f"view: {path!r} is not a file")
    if port is None:
        netron.start(path, browse=browse)
    else:
        netron.start(path, address=port, browse=browse)
    if wait:
        netron.wait()
    return path
