"""Lossless JSON: every op-sample graph and its gradient graph, O2 graphs with fused regions,
a training step with state: the loaded graph prints identically, verifies, and runs to
bit-identical results. Bad files get GraphFormatError; nothing in a file is executed."""
import json
import os

import numpy as np
import pytest

import duograph as dg
from duograph import passes
from duograph.graphlib.ops.control import call
from duograph.graphlib.serialize import GraphFormatError
from op_samples import OPS, build, grad_targets, tanh_loss_grads
from steps import small_mlp_step


def _samples(select):
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if select(op, s)]


def _identical(got, want):
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _round_trip(graph, feeds, outputs=None, tmp_path=None):
    """JSON text and the safetensors file: same text, verified, bit-identical runs."""
    if outputs is not None:
        graph.outputs = list(outputs)
    text = graph.to_json()            # before running: a run updates bound state in place
    loaded = [dg.Graph.from_json(text)]
    if tmp_path is not None:
        path = tmp_path / "g.dg"
        dg.save_graph(graph, path)
        loaded.append(dg.load_graph(path))
    want = graph.compile()(**feeds)
    for g2 in loaded:
        assert str(g2) == str(graph)
        assert g2.to_text(source=True) == graph.to_text(source=True)
        g2.verify()
        assert g2.to_json() == text       # a second trip changes nothing
        _identical(g2.compile()(**feeds), want)
    return loaded[0]


@pytest.mark.parametrize("op, sample", _samples(lambda op, s: True))
def test_every_op_sample_graph_round_trips(op, sample):
    built = build(op, sample)
    _round_trip(built.graph, built.feeds, built.outputs)


@pytest.mark.parametrize("op, sample", _samples(lambda op, s: bool(grad_targets(op, s))))
def test_every_gradient_graph_round_trips(op, sample):
    built = build(op, sample)
    _round_trip(built.graph, built.feeds, tanh_loss_grads(built, grad_targets(op, sample)))


def test_training_step_with_state_round_trips_and_trains_identically(tmp_path):
    g, feeds = small_mlp_step()
    path = tmp_path / "step.dg"
    dg.save_graph(g, path)
    g2 = dg.load_graph(path)
    assert str(g2) == str(g) and len(g2.state) == len(g.state) and g2.updates
    a, b = g.compile(passes="O2"), g2.compile(passes="O2")
    for _ in range(3):            # state is updated between runs: the curves stay identical
        _identical(b(**feeds), a(**feeds))
    for name in b.state:
        np.testing.assert_array_equal(b.state[name], a.state[name])


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_go_through_json_and_train_identically(how):
    import copy
    import pickle
    g, feeds = small_mlp_step()
    opt = passes.optimize(g, "O2")           # fused regions too
    for graph in (g, opt):
        g2 = pickle.loads(pickle.dumps(graph)) if how == "pickle" else copy.deepcopy(graph)
        assert g2 is not graph and str(g2) == str(graph)
        assert not set(map(id, g2.nodes)) & set(map(id, graph.nodes))
        a, b = graph.compile(passes="O0"), g2.compile(passes="O0")
        for _ in range(2):
            _identical(b(**feeds), a(**feeds))


def test_o2_graphs_with_fused_regions_round_trip(tmp_path):
    g, feeds = small_mlp_step()
    opt = passes.optimize(g, "O2")
    assert any(n.regions for n in opt.nodes), "O2 should hold fused regions"
    _round_trip(opt, feeds, tmp_path=tmp_path)


def test_call_regions_and_symbolic_dims_round_trip(tmp_path):
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", ("N", 3), "float64")
        y, = call(lambda a: dg.exp(a) * 2.0 + float("inf"), x)
        z = dg.cat([x, y], 0)
    feeds = {"x": np.linspace(-1, 1, 6).reshape(2, 3)}
    _round_trip(g, feeds, [z], tmp_path)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d.update(format="other"), "not a duograph graph"),
    (lambda d: d["graph"]["nodes"][0].update(op="os.system"), "unknown op 'os.system'"),
    (lambda d: d["graph"]["nodes"][1].update(inputs=[999]), "not defined before it"),
    (lambda d: d["graph"]["nodes"][0]["attrs"].update(value={"pickle": "x"}),
     "bad attribute value"),
    (lambda d: d["graph"]["inputs"][0]["type"].update(dtype="complex256"), "unknown dtype"),
    (lambda d: d["graph"].pop("outputs"), "missing 'outputs'"),
    (lambda d: d["graph"]["nodes"][1]["outputs"][0].update(shape=[7]),
     "not valid IR"),
])
def test_malformed_documents_are_refused_clearly(mutate, match):
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (3,))
        y = dg.exp(x + 1.0)
    g.outputs = [y]
    doc = json.loads(g.to_json())
    mutate(doc)
    with pytest.raises(GraphFormatError, match=match):
        dg.Graph.from_json(json.dumps(doc))


def test_truncated_and_foreign_files_are_refused(tmp_path):
    g, _ = small_mlp_step()
    path = tmp_path / "g.dg"
    dg.save_graph(g, path)
    raw = path.read_bytes()
    for cut in (0, 5, 100, len(raw) // 2, len(raw) - 1):
        bad = tmp_path / f"cut{cut}.dg"
        bad.write_bytes(raw[:cut])
        with pytest.raises(GraphFormatError):
            dg.load_graph(bad)
    junk = tmp_path / "junk.dg"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(GraphFormatError):
        dg.load_graph(junk)
    with pytest.raises(GraphFormatError, match="not valid JSON"):
        dg.Graph.from_json("{")
    with pytest.raises(GraphFormatError, match="cannot read"):
        dg.load_graph(tmp_path / "missing.dg")


def test_nothing_in_a_file_is_executed(tmp_path, monkeypatch):
    """A file naming modules, pickles or code gets refused as data, never run."""
    marker = tmp_path / "ran"
    payload = f"__import__('os').system('touch {marker}')"
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (3,))
        y = dg.exp(x)
    g.outputs = [y]
    doc = json.loads(g.to_json())
    for attack in ({"dim": payload}, {"region": "builtins.eval", "graph": payload},
                   {"array": {"dtype": "float32", "shape": [1], "data": payload}}):
        doc["graph"]["nodes"][0]["attrs"] = {"x": attack}
        with pytest.raises(GraphFormatError):
            dg.Graph.from_json(json.dumps(doc))
    doc = json.loads(g.to_json())
    doc["graph"]["inputs"][0]["type"]["shape"] = [{"sym": payload}]
    try:
        dg.Graph.from_json(json.dumps(doc))
    except (GraphFormatError, dg.DuographError, ValueError, TypeError):
        pass
    assert not os.path.exists(marker)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    g, _ = small_mlp_step()
    path = tmp_path / "g.dg"
    dg.save_graph(g, path)
    dg.save_graph(g, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.dg"]
