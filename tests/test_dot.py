"""Pictures: graph.to_dot() through networkx and pydot; regions as clusters; render."""
import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops.control import call

pydot = pytest.importorskip("pydot")


def _graph():
    g = dg.Graph("pic")
    with g:
        x = dg.placeholder("x", ("N", 4))
        y = dg.tanh(x * 2.0) + dg.exp(x)
        z, = call(lambda a: dg.relu(a) * 3.0, y)
    g.outputs = [z]
    return g


def test_dot_shows_ops_types_sources_and_region_clusters():
    g = _graph()
    dot = g.to_dot()
    text = dot.to_string()
    assert isinstance(dot, pydot.Dot)
    for op in ("tanh", "exp", "add", "call", "relu"):
        assert f'label="{op}\\nf32[N,4]"' in text
    assert "test_dot.py:15" in text                       # the user's line as a tooltip
    clusters = dot.get_subgraphs()
    assert len(clusters) == 1 and "call body" in clusters[0].to_string()
    assert "relu" in clusters[0].to_string() and "tanh" not in clusters[0].to_string()


def test_fused_regions_and_plan_colouring():
    g = _graph()
    exe = g.compile(passes="O2")
    dot = exe.graph.to_dot()
    labels = [c.get_label() for c in dot.get_subgraphs()]
    assert '"fused body"' in labels and '"call body"' in labels
    exe(x=np.ones((3, 4), np.float32))
    plan = exe.memory_plan
    coloured = exe.graph.to_dot(plan=plan).to_string()
    assert coloured != dot.to_string() or not plan.offsets
    timed = g.to_dot(timings={n: float(i) for i, n in enumerate(g.nodes)}).to_string()
    assert "#ff87" in timed                       # the slowest node is the strongest shade


def test_render_writes_dot_and_explains_a_missing_graphviz(tmp_path, monkeypatch):
    g = _graph()
    path = g.render(str(tmp_path / "g.dot"))
    assert open(path).read().startswith("strict digraph")
    monkeypatch.setattr("shutil.which", lambda name: None)
    # svg/png/pdf are drawn without Graphviz (duograph.pictures: networkx + matplotlib,
    # tests/test_pictures.py); other formats say how to install it
    with pytest.raises(dg.DuographError, match="Graphviz's `dot` program is not installed"):
        g.render(str(tmp_path / "g.gif"))
