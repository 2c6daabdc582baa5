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
