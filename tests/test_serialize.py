"""Lossless JSON: every op-sample graph and its gradient graph, O2 graphs with fused regions,
a training step with state: the loaded graph prints identically, verifies, and runs to
bit-identical results. Bad files get GraphFormatError; nothing in a file is executed."""
import json
import os
import re

import numpy as np
import pytest
from hang_guard import finishes

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


# -- bounded reads: no hang, no unbounded memory, no raw RecursionError ----------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_load_graph_refuses_a_fifo_at_once(tmp_path):
    fifo = tmp_path / "g.dg"
    os.mkfifo(fifo)
    error = finishes(lambda: dg.load_graph(fifo), unblock=fifo)
    assert isinstance(error, GraphFormatError) and "FIFO" in str(error), error


_READ_DEV_ZERO = """
import resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))   # a regression fails, not swaps
import duograph as dg
tracemalloc.start()
try:
    dg.load_graph("/dev/zero")
except dg.GraphFormatError as e:
    print(type(e).__name__, e)
print("peak", tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.skipif(not os.path.exists("/dev/zero") or os.name != "posix",
                    reason="/dev/zero, rlimits")
def test_load_graph_refuses_dev_zero_without_reading_it():
    """Before: /dev/zero was read until a MemoryError (5.4 GB). Run in a process of its own
    with a memory limit and a timeout, so a regression fails instead of taking the
    machine's memory."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _READ_DEV_ZERO], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GraphFormatError" in out.stdout and "character device" in out.stdout, out.stdout
    peak = int(out.stdout.split("peak")[-1])
    assert peak < 1 << 20, peak


def test_load_graph_refuses_an_oversized_header_from_its_prefix(tmp_path):
    from duograph.graphlib.files import MAX_HEADER_BYTES
    path = tmp_path / "g.dg"
    for length in (MAX_HEADER_BYTES + 1, 89_000_000, 2 ** 63):
        path.write_bytes(length.to_bytes(8, "little") + b"{" * (1 << 20))
        with pytest.raises(GraphFormatError, match=f"header of {length} bytes, more than "
                                                   f"the {MAX_HEADER_BYTES}"):
            dg.load_graph(path)


def test_load_graph_checks_the_data_length_before_reading_it(tmp_path):
    g, _ = small_mlp_step()
    path = tmp_path / "g.dg"
    dg.save_graph(g, path)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)                     # bytes after the data the header describes
    with pytest.raises(GraphFormatError, match="corrupt: its header describes"):
        dg.load_graph(path)


def _nested_file(tmp_path, header: bytes):
    path = tmp_path / "nested.dg"
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    return path


def test_deep_json_nesting_is_a_graph_format_error(tmp_path):
    """Before: a RecursionError escaped from json.loads."""
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(GraphFormatError, match="nested too deeply"):
        dg.load_graph(_nested_file(tmp_path, deep))
    doc = "[" * 200_000 + "]" * 200_000
    header = json.dumps({"__metadata__": {"duograph.graph": doc}}).encode()
    with pytest.raises(GraphFormatError, match="nested too deeply"):
        dg.load_graph(_nested_file(tmp_path, header))
    with pytest.raises(GraphFormatError, match="nested too deeply"):
        dg.Graph.from_json(doc)


def test_save_graph_refuses_a_header_load_graph_would_refuse(tmp_path, monkeypatch):
    import duograph.graphlib.serialize as ser
    g, _ = small_mlp_step()
    monkeypatch.setattr(ser, "MAX_HEADER_BYTES", 256)
    with pytest.raises(GraphFormatError, match="more than the 256 a graph file may have"):
        dg.save_graph(g, tmp_path / "g.dg")
    assert not (tmp_path / "g.dg").exists()


# -- attributes are checked against the op schemas on load -------------------------------------

def _leaky_graph():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (4,))
        y = dg.nn.functional.leaky_relu(dg.exp(x) - 2.0, 0.5) * 3.0   # fused at O2
    g.outputs = [y]
    return g


def _find(doc_graph, op):
    return next(n for n in doc_graph["nodes"] if n["op"] == op)


@pytest.mark.parametrize("value, found", [
    ("1+1", "found str '1+1'"), ({"list": [0.1]}, "found list [0.1]"), (None, "found NoneType"),
])
def test_a_bad_attribute_in_a_file_is_refused_naming_node_and_attribute(tmp_path, value, found):
    """Before: a string negative_slope was spliced into the generated numba source at O2 (and
    ran, returning [2, 2, 2, 2]) while O0 failed at run time."""
    doc = json.loads(_leaky_graph().to_json())
    nodes = doc["graph"]["nodes"]
    index = next(i for i, n in enumerate(nodes) if n["op"] == "leaky_relu")
    nodes[index]["attrs"]["negative_slope"] = value
    message = (f"graph 't', node {index} (leaky_relu): attribute negative_slope must be a "
               f"number (bool, int or float), found")
    with pytest.raises(GraphFormatError, match=re.escape(message)) as info:
        dg.Graph.from_json(json.dumps(doc))
    assert found in str(info.value)
    # the same through a saved file (the JSON in the safetensors metadata)
    from safetensors.numpy import save
    path = tmp_path / "bad.dg"
    path.write_bytes(save({}, metadata={"duograph.graph": json.dumps(doc)}))
    with pytest.raises(GraphFormatError, match=re.escape(message)):
        dg.load_graph(path)


def test_unknown_missing_and_out_of_range_attributes_are_refused():
    doc = json.loads(_leaky_graph().to_json())
    node = _find(doc["graph"], "leaky_relu")
    node["attrs"]["slope"] = 0.1
    with pytest.raises(GraphFormatError, match="attribute slope is not an attribute of "
                                               "leaky_relu"):
        dg.Graph.from_json(json.dumps(doc))
    g = dg.Graph("p")
    with g:
        x = dg.placeholder("x", (2, 3))
        g.outputs = [dg.softmax(x, 1)]
    doc = json.loads(g.to_json())
    node = _find(doc["graph"], "softmax")
    node["attrs"].pop("dim")
    with pytest.raises(GraphFormatError, match=r"node 0 \(softmax\): attribute dim is "
                                               "required"):
        dg.Graph.from_json(json.dumps(doc))
    node["attrs"]["dim"] = 1.5
    with pytest.raises(GraphFormatError, match="attribute dim must be an int, found float"):
        dg.Graph.from_json(json.dumps(doc))


def test_attributes_inside_regions_are_checked_too():
    g = dg.Graph("outer")
    with g:
        x = dg.placeholder("x", (3,))
        y, = call(lambda a: dg.nn.functional.leaky_relu(dg.exp(a), 0.2), x)
    g.outputs = [y]
    doc = json.loads(g.to_json())
    outer = doc["graph"]["nodes"][0]
    (attr, region), = [(k, v) for k, v in outer["attrs"].items()
                       if isinstance(v, dict) and "region" in v]
    inner = region["graph"]
    _find(inner, "leaky_relu")["attrs"]["negative_slope"] = "0.2"
    with pytest.raises(GraphFormatError) as info:
        dg.Graph.from_json(json.dumps(doc))
    msg = str(info.value)
    assert msg.startswith(f"graph 'outer', node 0 ({outer['op']}), attribute {attr!r} > graph "
                          f"{inner['name']!r}, node "), msg
    assert "(leaky_relu): attribute negative_slope must be a number" in msg, msg


def test_a_file_normalised_attribute_loads_and_runs_alike():
    """Lists where the schema wants a tuple (as an older writer might store them) are
    normalised on load as when building, so the loaded graph runs as the built one."""
    g = dg.Graph("s")
    with g:
        x = dg.placeholder("x", (2, 3))
        g.outputs = [dg.sum(x, dim=(0, 1))]
    doc = json.loads(g.to_json())
    node = _find(doc["graph"], "sum")
    node["attrs"]["dim"] = {"list": [0, 1]}
    loaded = dg.Graph.from_json(json.dumps(doc))
    assert loaded.nodes[0].attrs["dim"] == (0, 1)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    _identical(loaded.compile()(**feeds), g.compile()(**feeds))


def test_complex_constants_round_trip(tmp_path):
    """A complex Python scalar and complex64/complex128 arrays (safetensors has no
    complex128: stored as float64 pairs) survive JSON and graph files."""
    g = dg.Graph("complex")
    with g:
        p = dg.placeholder("p", (2,), "complex128")
        r = p * (1 + 2j) + dg.constant(np.array([1j, 2], np.complex128))
        s = dg.cast(p, "complex64") * dg.constant(np.array([3j, -1], np.complex64))
    g.outputs = [r, s]
    feed = np.array([1 - 1j, 0.5j])
    want = g.compile()(p=feed)
    path = tmp_path / "complex.dg"
    dg.save_graph(g, path)
    for back in (dg.load_graph(path), dg.graphlib.serialize.from_json(
            dg.graphlib.serialize.to_json(g))):
        got = back.compile()(p=feed)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
