"""Pictures on a fresh machine (issue 25): without Graphviz's ``dot`` program,
``graph.render`` draws .svg/.png/.pdf with networkx and matplotlib; ``duograph inspect --view``
opens an ONNX file or a saved graph in Netron (the launch is replaced by a recorder here: no
server starts)."""
import sys
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import duograph as dg
from duograph import cli
from duograph.graphlib import dot as dot_module

pytest.importorskip("matplotlib")


def _graph():
    g = dg.Graph("picture")
    with g:
        x = dg.placeholder("x", ("N", 3), "float32")
        w = g.add_state("w", np.eye(3, dtype=np.float32))
        _, ys = dg.scan(lambda c, r: (c + r, dg.tanh(c)), dg.zeros((3,)), x @ w)
    g.outputs = [dg.relu(ys)]
    return g


@pytest.fixture
def no_graphviz(monkeypatch):
    monkeypatch.setattr(dot_module.shutil, "which", lambda name: None)


def test_render_without_graphviz_draws_svg_png_and_pdf(tmp_path, no_graphviz):
    g = _graph()
    svg = g.render(tmp_path / "g.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    for label in ("matmul", "scan", "relu", "f32[N,3]", "output 0"):
        assert label in text, (label, text[:300])
    png = g.render(tmp_path / "g.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    pdf = g.render(tmp_path / "g.pdf")
    assert open(pdf, "rb").read(5) == b"%PDF-"
    with pytest.raises(dg.DuographError, match=r"Graphviz's `dot` program is not installed.*"
                                               r"only svg, png, pdf are drawn"):
        g.render(tmp_path / "g.gif")
    assert not (tmp_path / "g.gif").exists()


def test_inspect_svg_works_without_graphviz(tmp_path, no_graphviz, capsys):
    path = tmp_path / "g.json"
    path.write_text(_graph().to_json())
    assert cli.main(["inspect", str(path), "--svg", str(tmp_path / "p.svg"), "--no-ir"]) == 0
    assert f"picture: {tmp_path / 'p.svg'}" in capsys.readouterr().out
    assert (tmp_path / "p.svg").stat().st_size > 1000


@pytest.fixture
def fake_netron(monkeypatch):
    calls = []
    fake = types.ModuleType("netron")
    fake.start = lambda file, address=None, browse=True: calls.append(("start", file, browse))
    fake.wait = lambda: calls.append(("wait",))
    monkeypatch.setitem(sys.modules, "netron", fake)
    return calls


def test_inspect_view_opens_an_onnx_file_and_a_saved_graph_in_netron(tmp_path, fake_netron,
                                                                     capsys):
    onnx = pytest.importorskip("onnx")
    g = _graph()
    model_path = tmp_path / "m.onnx"
    dg.onnx.export(g, model_path)
    assert cli.main(["inspect", "--view", str(model_path)]) == 0
    assert fake_netron == [("start", str(model_path), True), ("wait",)]
    assert "in Netron" in capsys.readouterr().out
    fake_netron.clear()
    saved = tmp_path / "g.json"
    saved.write_text(g.to_json())
    assert cli.main(["inspect", "--view", str(saved)]) == 0
    (kind, shown, _), wait = fake_netron
    assert kind == "start" and wait == ("wait",) and shown.endswith("picture.onnx")
    model = onnx.load(shown)                      # the graph, exported for Netron
    assert {"MatMul", "Scan", "Max"} <= {n.op_type for n in model.graph.node}   # relu: Max


def test_view_without_netron_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "netron", None)        # import netron fails
    from duograph.pictures import view
    with pytest.raises(dg.DuographError, match="pip install netron"):
        view(_graph())
    with pytest.raises(dg.DuographError, match="pip install netron"):
        view(tmp_path / "missing.onnx")
