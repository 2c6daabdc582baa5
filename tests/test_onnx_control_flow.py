"""ONNX export and import of the control-flow ops: cond <-> If, scan <-> Scan/Loop,
while_loop <-> Loop. Exported models are checked with onnx.checker (full_check) and run in
onnxruntime against duograph (the oracle: duograph's own kernels, themselves checked against
numpy loops in test_control_flow.py); imported ONNX control flow runs against onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import duograph as dg  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(3)
W = RNG.standard_normal((3, 3)) * 0.5


def _export_and_run(fn, specs, feeds_list, tmp_path, op_types=()):
    """Export ``fn`` once with ``specs`` (symbolic dims allowed), check the model fully, and
    compare onnxruntime with duograph eagerly on every feeds dict."""
    path = tmp_path / "cf.onnx"
    model = dg.onnx.export(fn, path, *specs)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    kinds = {n.op_type for n in model.graph.node}
    for t in op_types:
        assert t in kinds, (t, kinds)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for feeds in feeds_list:
        want = fn(*[dg.tensor(feeds[n]) for n in names])
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape) and g.dtype == w.numpy().dtype
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=1e-12)
    return model


# -- export ------------------------------------------------------------------------------------
def test_cond_exports_as_if_and_takes_both_branches(tmp_path):
    w = dg.tensor(W)

    def f(x, s):
        # the predicate depends on the data; the true branch reads w and s from outside
        return dg.cond(x.sum() > 0.0, lambda a: (dg.tanh(a @ w) * s, a.sum(1)),
                       lambda a: (dg.exp(a) - 1.0, a.amax(1)), x)
    x = RNG.standard_normal((4, 3))
    feeds = [{"x": x, "s": np.asarray(2.0)}, {"x": -np.abs(x), "s": np.asarray(3.0)},
             {"x": np.abs(x[:2]), "s": np.asarray(0.5)}]
    _export_and_run(f, [dg.onnx.Input(("N", 3), "float64"), dg.onnx.Input((), "float64")],
                    feeds, tmp_path, ("If",))


def test_cond_with_an_integer_predicate(tmp_path):
    def f(k, x):
        return dg.cond(k, lambda a: a * 2.0, lambda a: a - 1.0, x)
    feeds = [{"k": np.asarray(v, np.int64), "x": np.arange(3.0)} for v in (0, 5, -1)]
    _export_and_run(f, [dg.onnx.Input((), "int64"), dg.onnx.Input((3,), "float64")], feeds,
                    tmp_path, ("If",))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_exports_as_scan_with_carries_and_stacked_ys(tmp_path, reverse):
    w = dg.tensor(W)

    def f(xs, h0):
        def step(carry, x):
            h, n = carry
            h = dg.tanh(h @ w + x)
            return (h, n + 1), (h * 2.0, n)
        (h, n), (ys, ns) = dg.scan(step, (h0, dg.tensor(0)), xs, reverse=reverse)
        return h, n, ys, ns
    feeds = [{"xs": RNG.standard_normal((5, b, 3)), "h0": RNG.standard_normal((b, 3))}
             for b in (2, 4)]
    _export_and_run(f, [dg.onnx.Input((5, "B", 3), "float64"),
                        dg.onnx.Input(("B", 3), "float64")], feeds, tmp_path, ("Scan",))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_without_xs_exports_as_loop(tmp_path, reverse):
    def f(h0):
        def step(h, _):
            return h * 0.5 + 1.0, h.sum(-1)
        return dg.scan(step, h0, None, length=4, reverse=reverse)
    feeds = [{"h0": RNG.standard_normal((b, 3))} for b in (1, 3)]
    _export_and_run(f, [dg.onnx.Input(("B", 3), "float64")], feeds, tmp_path, ("Loop",))


def test_fori_loop_with_static_bounds(tmp_path):
    def f(x):
        return dg.fori_loop(0, 5, lambda i, c: c * 1.5 + i, x)
    feeds = [{"x": RNG.standard_normal(b)} for b in (2, 6)]
    _export_and_run(f, [dg.onnx.Input(("N",), "float64")], feeds, tmp_path, ("Scan",))


@pytest.mark.parametrize("bound", [None, 3])
def test_while_loop_exports_as_loop_with_a_data_dependent_trip_count(tmp_path, bound):
    def f(x, limit):
        def cond_fn(c):
            return c[1].sum() < limit            # limit is captured from outside

        def body_fn(c):
            return c[0] + 1, c[1] * 2.0
        return dg.while_loop(cond_fn, body_fn, (dg.tensor(0), x), max_iterations=bound)
    feeds = [{"x": np.abs(RNG.standard_normal(b)) + 0.1, "limit": np.asarray(lim)}
             for b, lim in ((2, 50.0), (5, 7.0), (3, 0.0))]
    model = _export_and_run(f, [dg.onnx.Input(("N",), "float64"),
                                dg.onnx.Input((), "float64")], feeds, tmp_path, ("Loop",))
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert (loop.input[0] == "") == (bound is None)


def test_fori_loop_with_tensor_bounds(tmp_path):
    def f(hi, x):
        return dg.fori_loop(0, hi, lambda i, c: c + dg.cast(i, "float64"), x)
    feeds = [{"hi": np.asarray(v, np.int64), "x": np.arange(3.0)} for v in (0, 4)]
    _export_and_run(f, [dg.onnx.Input((), "int64"), dg.onnx.Input((3,), "float64")], feeds,
                    tmp_path, ("Loop",))


def test_a_loop_inside_a_cond_inside_a_scan(tmp_path):
    def f(xs):
        def step(h, x):
            def grow(v):
                return dg.while_loop(lambda c: c.sum() < 20.0, lambda c: c * 2.0 + x, v)
            h = dg.cond(x.sum() > 0.0, grow, lambda v: v - x, h)
            return h, h.sum()
        return dg.scan(step, dg.ones(3, dtype="float64"), xs)
    feeds = [{"xs": RNG.standard_normal((n, 3))} for n in (6, 6)]
    _export_and_run(f, [dg.onnx.Input((6, 3), "float64")], feeds, tmp_path, ("Scan",))


def test_graph_mode_control_flow_exports(tmp_path):
    g = dg.Graph("g")
    with g:
        x = dg.placeholder("x", (4, "N"), "float64")
        h, ys = dg.scan(lambda c, r: (c + r, c * r), x[0] * 0.0, x)
        y = dg.cond(h.sum() > 0.0, lambda a: a * 2.0, lambda a: -a, ys)
    g.outputs = [h, y]
    path = tmp_path / "g.onnx"
    dg.onnx.export(g, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    exe = g.compile()
    for n in (2, 5):
        xv = RNG.standard_normal((4, n))
        got = sess.run(None, {"x": xv})
        want = exe(x=xv)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12, atol=1e-12)


# -- import ------------------------------------------------------------------------------------
def _ops_in(graph) -> set:
    """Op names of a graph's nodes, inside regions too."""
    names = set()
    for n in graph.nodes:
        names.add(n.op.name)
        for r in n.regions:
            names |= _ops_in(r.graph)
    return names


def _load_and_compare(model, feeds_list, want_ops, passes=("O0", "O2")):
    """Import ``model``; every pass level must run equal to onnxruntime on every feeds."""
    onnx.checker.check_model(model, full_check=True)
    g = dg.onnx.load(model)
    assert set(want_ops) <= _ops_in(g), _ops_in(g)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for level in passes:
        exe = g.compile(passes=level)
        for feeds in feeds_list:
            want = sess.run(None, feeds)
            got = exe(**feeds)
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            for a, b in zip(got, want):
                assert np.asarray(a).shape == b.shape
                np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)
    return g


def test_exported_control_flow_imports_back_as_the_same_ops(tmp_path):
    w = dg.tensor(W)

    def f(xs, limit):
        def step(h, x):
            h = dg.cond(x.sum() > 0.0, lambda v: dg.tanh(v @ w + x), lambda v: v - x, h)
            return h, h.sum()
        h, ys = dg.scan(step, xs[0] * 0.0, xs, reverse=True)
        n, v = dg.while_loop(lambda c: c[1].sum() < limit, lambda c: (c[0] + 1, c[1] * 2.0),
                             (dg.tensor(0), dg.abs(h) + 0.1))
        return ys, n, v
    path = tmp_path / "rt.onnx"
    dg.onnx.export(f, path, dg.onnx.Input((5, "B", 3), "float64"),
                   dg.onnx.Input((), "float64"))
    feeds = [{"xs": RNG.standard_normal((5, b, 3)), "limit": np.asarray(lim)}
             for b, lim in ((3, 30.0), (4, 2.0))]
    _load_and_compare(onnx.load(path), feeds, {"cond", "scan", "while_loop"})


def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def _model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_if_reading_outer_names_imports_as_cond():
    D = TensorProto.DOUBLE
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [_vi("t", D, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [_vi("e", D, [3])])
    nodes = [helper.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(nodes, [_vi("p", TensorProto.BOOL, []), _vi("x", D, [3])], [_vi("y", D, [3])])
    feeds = [{"p": np.asarray(v), "x": RNG.standard_normal(3)} for v in (True, False)]
    _load_and_compare(m, feeds, {"cond"})


def test_if_with_branches_of_different_shapes_is_refused():
    D = TensorProto.DOUBLE
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [_vi("t", D, [3])])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1)],
                               "else", [], [_vi("e", D, [1])])
    nodes = [helper.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(nodes, [_vi("p", TensorProto.BOOL, []), _vi("x", D, [3])], [_vi("y", D, None)])
    with pytest.raises(dg.onnx.OnnxImportError, match="If.*cond"):
        dg.onnx.load(m)


def _loop_body(scan_out: bool, stop_in_body: bool):
    """Body (i, c, acc) -> (c', acc + x * i[, acc]); c' = c, or sum(acc) < limit."""
    D = TensorProto.DOUBLE
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=D),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["acc", "xi"], ["acc2"])]
    if stop_in_body:
        nodes += [helper.make_node("ReduceSum", ["acc2"], ["s"], keepdims=0),
                  helper.make_node("Less", ["s", "limit"], ["c2"])]
    else:
        nodes += [helper.make_node("Identity", ["c"], ["c2"])]
    outs = [_vi("c2", TensorProto.BOOL, []), _vi("acc2", D, [3])]
    if scan_out:
        nodes.append(helper.make_node("Identity", ["acc"], ["seen"]))
        outs.append(_vi("seen", D, [3]))
    return helper.make_graph(nodes, "body", [_vi("i", TensorProto.INT64, []),
                                             _vi("c", TensorProto.BOOL, []),
                                             _vi("acc", D, [3])], outs)


def test_loop_with_a_data_dependent_trip_count_imports_as_while_loop():
    D, I = TensorProto.DOUBLE, TensorProto.INT64
    nodes = [helper.make_node("Loop", ["m", "c0", "a0"], ["acc"],
                              body=_loop_body(False, True))]
    m = _model(nodes, [_vi("m", I, []), _vi("c0", TensorProto.BOOL, []), _vi("a0", D, [3]),
                       _vi("x", D, [3]), _vi("limit", D, [])], [_vi("acc", D, [3])])
    feeds = [{"m": np.asarray(mm, np.int64), "c0": np.asarray(c), "a0": np.zeros(3),
              "x": np.abs(RNG.standard_normal(3)) + 0.5, "limit": np.asarray(lim)}
             for mm, c, lim in ((100, True, 40.0), (3, True, 1e9), (100, False, 40.0),
                                (0, True, 40.0))]
    _load_and_compare(m, feeds, {"while_loop"})


def test_loop_with_scan_outputs_and_a_fixed_trip_count_imports_as_scan():
    D = TensorProto.DOUBLE
    m_node = helper.make_node("Constant", [], ["m"],
                              value=onnx.numpy_helper.from_array(np.asarray(4, np.int64)))
    nodes = [m_node, helper.make_node("Loop", ["m", "", "a0"], ["acc", "seen"],
                              body=_loop_body(True, False))]
    m = _model(nodes, [_vi("a0", D, [3]), _vi("x", D, [3])],
               [_vi("acc", D, [3]), _vi("seen", D, [4, 3])])
    feeds = [{"a0": RNG.standard_normal(3), "x": RNG.standard_normal(3)} for _ in range(2)]
    _load_and_compare(m, feeds, {"scan"})


def test_loop_with_scan_outputs_and_a_data_dependent_stop_is_refused():
    D = TensorProto.DOUBLE
    m_node = helper.make_node("Constant", [], ["m"],
                              value=onnx.numpy_helper.from_array(np.asarray(4, np.int64)))
    nodes = [m_node, helper.make_node("Loop", ["m", "", "a0"], ["acc", "seen"],
                              body=_loop_body(True, True))]
    m = _model(nodes, [_vi("a0", D, [3]), _vi("x", D, [3]), _vi("limit", D, [])],
               [_vi("acc", D, [3]), _vi("seen", D, None)])
    with pytest.raises(dg.onnx.OnnxImportError, match="data-dependent length"):
        dg.onnx.load(m)


@pytest.mark.parametrize("directions", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_scan_with_axes_and_directions_imports_as_scan(directions):
    D = TensorProto.DOUBLE
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s2"]),
         helper.make_node("Mul", ["s2", "w"], ["y"])], "body",
        [_vi("s", D, [2]), _vi("xt", D, [2])], [_vi("s2", D, [2]), _vi("y", D, [2])])
    din, dout = directions
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[din],
                              scan_output_axes=[-1], scan_output_directions=[dout])]
    m = _model(nodes, [_vi("s0", D, [2]), _vi("xs", D, [2, 5]), _vi("w", D, [2])],
               [_vi("sf", D, [2]), _vi("ys", D, [2, 5])])
    feeds = [{"s0": RNG.standard_normal(2), "xs": RNG.standard_normal((2, 5)),
              "w": RNG.standard_normal(2)} for _ in range(2)]
    _load_and_compare(m, feeds, {"scan"})


@pytest.mark.parametrize("direction", [0, 1])
def test_opset8_batched_scan_imports_as_a_scan_of_scans(direction):
    D = TensorProto.DOUBLE
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s2"]),
         helper.make_node("Mul", ["s2", "xt"], ["y"])], "body",
        [_vi("s", D, [2]), _vi("xt", D, [2])], [_vi("s2", D, [2]), _vi("y", D, [2])])
    nodes = [helper.make_node("Scan", ["", "s0", "xs"], ["sf", "ys"], body=body,
                              num_scan_inputs=1, directions=[direction])]
    m = _model(nodes, [_vi("s0", D, [3, 2]), _vi("xs", D, [3, 4, 2])],
               [_vi("sf", D, [3, 2]), _vi("ys", D, [3, 4, 2])], opset=8)
    m.ir_version = 3
    feeds = [{"s0": RNG.standard_normal((3, 2)), "xs": RNG.standard_normal((3, 4, 2))}]
    _load_and_compare(m, feeds, {"scan"})
