"""Control flow ops with regions: cond, scan, while_loop, fori_loop. References are numpy
loops, finite differences and the same computation unrolled (torch has no cond/scan)."""
import json

import numpy as np
import pytest

import duograph as dg
from duograph import passes
from duograph.graphlib.ops.control import cond_op, scan_op, while_op
from duograph.graphlib.rewrite import clone

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)) * 0.5
XS = RNG.standard_normal((5, 3))
H0 = RNG.standard_normal(3) * 0.1


def _fd(f, x, eps=1e-6):
    """Central finite differences of the scalar f at x (float64)."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _rnn_numpy(w, xs, h, reverse=False):
    ys = [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in order:
        h = np.tanh(h @ w + xs[t])
        ys[t] = h * 2.0
    return h, np.stack(ys)


def _loss_numpy(w, xs, h, reverse=False):
    h, ys = _rnn_numpy(w, xs, h, reverse)
    return float(np.sum(ys * ys) + np.sum(np.sin(h)))


# -- cond --------------------------------------------------------------------------------------
@pytest.mark.parametrize("taken", [True, False])
def test_cond_eager_values_gradients_and_pytrees(taken):
    x = dg.tensor(np.arange(3.0) + 0.5, requires_grad=True)
    w = dg.tensor(np.full(3, 2.0), requires_grad=True)     # captured from outside

    def yes(pair, scale):
        a, b = pair
        return {"s": dg.sin(a) * w, "t": b * scale}

    def no(pair, scale):
        a, b = pair
        return {"s": a * a, "t": b + scale}
    out = dg.cond(dg.tensor(taken), yes, no, (x, x * 3.0), dg.tensor(4.0, dtype="float64"))
    assert set(out) == {"s", "t"}
    xv = np.arange(3.0) + 0.5
    want_s = np.sin(xv) * 2.0 if taken else xv * xv
    want_t = xv * 3.0 * 4.0 if taken else xv * 3.0 + 4.0
    np.testing.assert_allclose(out["s"].detach().numpy(), want_s, rtol=1e-12)
    np.testing.assert_allclose(out["t"].detach().numpy(), want_t, rtol=1e-12)
    (out["s"].sum() + out["t"].sum()).backward()
    want_gx = (np.cos(xv) * 2.0 + 12.0) if taken else (2 * xv + 3.0)
    np.testing.assert_allclose(x.grad.numpy(), want_gx, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), np.sin(xv) if taken else np.zeros(3),
                               rtol=1e-12)


def _cond_graph():
    g = dg.Graph("c")
    with g:
        a = dg.placeholder("a", (3,), "float64")
        p = dg.placeholder("p", (), "bool")
        b = dg.placeholder("b", (3,), "float64")
        r = dg.cond(p, lambda t: dg.sin(t) * b, lambda t: dg.exp(t) * 2.0, a)
        loss = dg.sum(r * r)
        ga, gb = dg.grad(loss, [a, b])
        hga, = dg.grad(dg.sum(ga), [a])            # second order
    return g, (a, p, b), (r, loss, ga, gb, hga)


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_cond_graph_mode_first_and_second_order_against_finite_differences(level):
    g, _, outs = _cond_graph()
    g.verify()
    f = g.compile(outputs=list(outs), passes=level)
    av, bv = np.array([0.3, -0.2, 0.7]), np.array([1.5, -0.5, 2.0])
    for taken in (True, False):
        def loss(a, b=bv):
            r = np.sin(a) * b if taken else np.exp(a) * 2.0
            return np.sum(r * r)
        r, lv, ga, gb, hga = f(a=av, p=taken, b=bv)
        np.testing.assert_allclose(lv, loss(av), rtol=1e-12)
        np.testing.assert_allclose(ga, _fd(loss, av), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gb, _fd(lambda b: loss(av, b), bv), rtol=1e-6, atol=1e-8)
        gsum = (lambda a: np.sum(_fd(loss, a, 1e-5)))
        np.testing.assert_allclose(hga, _fd(gsum, av, 1e-4), rtol=1e-4, atol=1e-6)


def test_cond_checks_branch_types_and_names_the_functions():
    x = dg.tensor(np.ones(3))

    def first(v):
        return v

    def second(v):
        return v.sum()
    with pytest.raises(dg.GraphError, match=r"cond: the result leaf 0 of .*first.* is f64\[3\], "
                                            r"but .*second.* gives f64\[\]"):
        dg.cond(dg.tensor(True), first, second, x)
    with pytest.raises(dg.GraphError, match=r"structure") as e:
        dg.cond(dg.tensor(True), lambda v: (v, v), lambda v: v, x)
    assert "test_control_flow.py" in str(e.value)
    with pytest.raises(dg.ShapeError, match=r"cond: the predicate must be a scalar"):
        dg.cond(dg.tensor([True, False]), first, first, x)


def test_cond_records_one_node_and_compile_does_not_rerecord():
    w = dg.tensor(np.full(3, 2.0), requires_grad=True)

    def f(p, x):
        return dg.cond(p, lambda v: v * w, lambda v: v - 1.0, x)
    x = dg.tensor(np.arange(3.0))
    with dg.record() as rec:
        f(dg.tensor(True), x)
    assert [n.op.name for n in rec.graph.nodes].count("cond") == 1
    fast = dg.compile(f)
    a = fast(dg.tensor(True), x)
    b = fast(dg.tensor(False), x)
    c = fast(dg.tensor(True), x)
    np.testing.assert_allclose(a.detach().numpy(), np.arange(3.0) * 2)
    np.testing.assert_allclose(b.detach().numpy(), np.arange(3.0) - 1)
    np.testing.assert_allclose(c.detach().numpy(), np.arange(3.0) * 2)
    assert fast.specializations == ["first call [0 guards, 3 calls]"]   # recorded once


def test_cond_with_a_constant_predicate_folds_away():
    g = dg.Graph("k")
    with g:
        a = dg.placeholder("a", (3,), "float64")
        r = dg.cond(dg.constant(False), lambda t: dg.sin(t), lambda t: dg.exp(t) + 1.0, a)
    g.outputs = [r]
    work, _ = clone(g)
    res = passes.constant_folding(work)
    assert res.changed and not any(n.op is cond_op for n in work.nodes)
    assert "exp" in [n.op.name for n in work.nodes]
    work.verify()
    av = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(g.compile(passes="O2")(a=av)[0], np.exp(av) + 1.0, rtol=1e-12)


# -- scan --------------------------------------------------------------------------------------
def _step(w):
    def step(h, x):
        h = dg.tanh(h @ w + x)
        return h, h * 2.0
    return step


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_eager_matches_numpy_and_finite_differences(reverse):
    w = dg.tensor(W, requires_grad=True)
    xs = dg.tensor(XS, requires_grad=True)
    h0 = dg.tensor(H0, requires_grad=True)
    h, ys = dg.scan(_step(w), h0, xs, reverse=reverse)
    hw, yw = _rnn_numpy(W, XS, H0, reverse)
    np.testing.assert_allclose(h.detach().numpy(), hw, rtol=1e-12)
    np.testing.assert_allclose(ys.detach().numpy(), yw, rtol=1e-12)
    loss = (ys * ys).sum() + dg.sin(h).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), _fd(lambda v: _loss_numpy(v, XS, H0, reverse), W),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(xs.grad.numpy(),
                               _fd(lambda v: _loss_numpy(W, v, H0, reverse), XS),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(h0.grad.numpy(),
                               _fd(lambda v: _loss_numpy(W, XS, v, reverse), H0),
                               rtol=1e-6, atol=1e-8)


def _scan_and_unrolled_graphs():
    graphs = []
    for unrolled in (False, True):
        g = dg.Graph("u" if unrolled else "s")
        with g:
            w = dg.placeholder("w", (3, 3), "float64")
            xs = dg.placeholder("xs", (5, 3), "float64")
            h0 = dg.placeholder("h0", (3,), "float64")
            if unrolled:
                h, ys = h0, []
                for t in range(5):
                    h, y = _step(w)(h, xs[t])
                    ys.append(y)
                ys = dg.stack(ys)
            else:
                h, ys = dg.scan(_step(w), h0, xs)
            loss = dg.sum(ys * ys) + dg.sum(dg.sin(h))
            gw, gx, gh = dg.grad(loss, [w, xs, h0])
            ggw, = dg.grad(dg.sum(gw * gw) + dg.sum(gx), [w])
        graphs.append((g, [loss, gw, gx, gh, ggw]))
    return graphs


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_scan_graph_mode_first_and_second_order_equal_the_unrolled_graph(level):
    (gs, outs_s), (gu, outs_u) = _scan_and_unrolled_graphs()
    gs.verify()
    assert sum(n.op is scan_op for n in gs.nodes) >= 3       # forward, saved carries, reverse
    feeds = dict(w=W, xs=XS, h0=H0)
    got = gs.compile(outputs=outs_s, passes=level)(**feeds)
    want = gu.compile(outputs=outs_u, passes="O0")(**feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[1], _fd(lambda v: _loss_numpy(v, XS, H0), W), rtol=1e-6,
                               atol=1e-8)


def test_scan_pytrees_int_carry_xs_none_and_length_zero():
    def step(c, _):
        n, acc = c["n"], c["acc"]
        return {"n": n + 1, "acc": acc * 2.0}, (n, acc)
    c, (ns, accs) = dg.scan(step, {"n": dg.tensor(0), "acc": dg.tensor(1.5)}, None, length=4)
    assert int(c["n"].item()) == 4 and float(c["acc"].item()) == 24.0
    np.testing.assert_array_equal(ns.numpy(), [0, 1, 2, 3])
    np.testing.assert_allclose(accs.numpy(), [1.5, 3.0, 6.0, 12.0])
    c, ys = dg.scan(lambda c, x: (c + x, c * x), dg.tensor(np.zeros(2)),
                    dg.tensor(np.zeros((0, 2))))
    assert tuple(ys.shape) == (0, 2) and np.all(c.numpy() == 0)


def test_scan_checks_the_carry_with_a_clear_error():
    with pytest.raises(dg.GraphError, match=r"scan: carry leaf 0 returned by .*grow.* is "
                                            r"f64\[2\], but init's is f64\[\]") as e:
        def grow(c, x):
            return c + x, c
        dg.scan(grow, dg.tensor(0.0, dtype="float64"), dg.tensor(np.ones((3, 2))))
    assert "test_control_flow.py" in str(e.value)
    with pytest.raises(dg.GraphError, match=r"must return a pair \(carry, y\)"):
        dg.scan(lambda c, x: c, dg.tensor(0.0), dg.tensor(np.ones(3)))
    with pytest.raises(ValueError, match="give length="):
        dg.scan(lambda c, x: (c, c), dg.tensor(0.0), None)


def test_scan_under_compile_records_one_node_whatever_the_values():
    w = dg.tensor(W, requires_grad=True)

    def f(xs):
        h, ys = dg.scan(_step(w), dg.tensor(np.zeros(3)), xs)
        return ys.sum()
    fast = dg.compile(f)
    for k in range(3):
        xs = RNG.standard_normal((5, 3))
        np.testing.assert_allclose(fast(dg.tensor(xs)).item(),
                                   np.sum(_rnn_numpy(W, xs, np.zeros(3))[1]), rtol=1e-10)
    assert fast.specializations == ["first call [0 guards, 3 calls]"]   # recorded once


# -- while_loop, fori_loop ---------------------------------------------------------------------
def test_while_loop_values_gradients_and_the_unbounded_error():
    x = dg.tensor(np.array([0.3, 0.5]), requires_grad=True)

    def cond_fn(c):
        return c[1].sum() < 4.0

    def body_fn(c):
        return c[0] + 1, c[1] * 1.5 + 0.1
    n, y = dg.while_loop(cond_fn, body_fn, (dg.tensor(0), x), max_iterations=20)

    def ref(v):
        k = 0
        while v.sum() < 4.0 and k < 20:
            v, k = v * 1.5 + 0.1, k + 1
        return k, v
    k, v = ref(np.array([0.3, 0.5]))
    assert int(n.item()) == k and k > 2
    np.testing.assert_allclose(y.detach().numpy(), v, rtol=1e-12)
    (y * y).sum().backward()
    want = _fd(lambda a: np.sum(ref(a)[1] ** 2), [0.3, 0.5])
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    # bounded: stops after max_iterations trips
    n2, _ = dg.while_loop(cond_fn, body_fn, (dg.tensor(0), x), max_iterations=2)
    assert int(n2.item()) == 2
    _, y3 = dg.while_loop(cond_fn, body_fn, (dg.tensor(0), x))
    with pytest.raises(dg.GraphError, match="max_iterations=N"):
        y3.sum().backward()


def test_while_loop_graph_mode_gradient_second_order():
    g = dg.Graph("w")
    with g:
        a = dg.placeholder("a", (2,), "float64")
        y = dg.while_loop(lambda v: dg.sum(v) < 3.0, lambda v: v * v + 0.5, a,
                          max_iterations=10)
        loss = dg.sum(dg.sin(y))
        ga, = dg.grad(loss, [a])
        hh, = dg.grad(dg.sum(ga), [a])
    g.verify()

    def ref(v):
        k = 0
        while v.sum() < 3.0 and k < 10:
            v, k = v * v + 0.5, k + 1
        return np.sum(np.sin(v))
    av = np.array([0.2, 0.4])
    lv, gv, hv = g.compile(outputs=[loss, ga, hh], passes="O2")(a=av)
    np.testing.assert_allclose(lv, ref(av), rtol=1e-12)
    np.testing.assert_allclose(gv, _fd(ref, av), rtol=1e-6)
    np.testing.assert_allclose(hv, _fd(lambda v: np.sum(_fd(ref, v, 1e-5)), av, 1e-4),
                               rtol=1e-3)


def test_fori_loop_static_bounds_is_a_scan_and_dynamic_bounds_a_while_loop():
    x = dg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = dg.fori_loop(1, 4, lambda i, c: c * dg.cast(i, "float64") + 1.0, x)
    np.testing.assert_allclose(y.detach().numpy(), ((np.array([1.0, 2.0]) + 1) * 2 + 1) * 3 + 1)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
    z = dg.fori_loop(dg.tensor(0), dg.tensor(3), lambda i, c: c + dg.cast(i, "float64"),
                     dg.tensor(0.0, dtype="float64"))
    assert float(z.item()) == 3.0
    g = dg.Graph("f")
    with g:
        v = dg.placeholder("v", (2,), "float64")
        r = dg.fori_loop(0, 3, lambda i, c: dg.sin(c), v)
    assert [n.op for n in g.nodes].count(scan_op) == 1
    np.testing.assert_allclose(g.compile(outputs=[r])(v=np.ones(2))[0],
                               np.sin(np.sin(np.sin(np.ones(2)))), rtol=1e-12)


# -- nesting, serialisation, passes ------------------------------------------------------------
def _nested(w, xs, h0):
    """A while loop inside a cond inside a scan."""
    def step(h, x):
        def shrink(v):
            return dg.while_loop(lambda u: dg.sum(u * u) > 1.0, lambda u: u * 0.5, v,
                                 max_iterations=8)
        h = dg.cond(dg.sum(x) > 0.0, shrink, lambda v: v * w, dg.tanh(h + x))
        return h, dg.sum(h)
    return dg.scan(step, h0, xs)


def _nested_numpy(w, xs, h):
    ys = []
    for x in xs:
        v = np.tanh(h + x)
        if x.sum() > 0:
            k = 0
            while np.sum(v * v) > 1.0 and k < 8:
                v, k = v * 0.5, k + 1
        else:
            v = v * w
        h = v
        ys.append(v.sum())
    return h, np.array(ys)


def test_nested_loop_in_cond_in_scan_all_modes_gradients_and_json():
    w0 = np.array([1.5, -2.0, 3.0])
    xs0 = RNG.standard_normal((6, 3)) * 2
    h00 = np.array([0.5, 2.0, -1.0])
    hw, yw = _nested_numpy(w0, xs0, h00)
    # eager
    w = dg.tensor(w0, requires_grad=True)
    h, ys = _nested(w, dg.tensor(xs0), dg.tensor(h00))
    np.testing.assert_allclose(h.detach().numpy(), hw, rtol=1e-12)
    np.testing.assert_allclose(ys.detach().numpy(), yw, rtol=1e-12)
    ys.sum().backward()
    gw_fd = _fd(lambda v: np.sum(_nested_numpy(v, xs0, h00)[1]), w0)
    np.testing.assert_allclose(w.grad.numpy(), gw_fd, rtol=1e-6, atol=1e-9)
    # graph mode, through JSON, every level
    g = dg.Graph("nested")
    with g:
        wv = dg.placeholder("w", (3,), "float64")
        xv = dg.placeholder("xs", (6, 3), "float64")
        hv = dg.placeholder("h0", (3,), "float64")
        h, ys = _nested(wv, xv, hv)
        loss = dg.sum(ys)
        gw, = dg.grad(loss, [wv])
    g.outputs = [h, ys, gw]
    g.verify()
    back = dg.Graph.from_json(g.to_json())
    assert str(back) == str(g)
    text = str(g)
    assert "scan(" in text and "cond(" in text and "while_loop(" in text
    work, _ = clone(g)
    assert str(work) == str(g)
    feeds = dict(w=w0, xs=xs0, h0=h00)
    for graph in (g, back):
        for level in ("O0", "O1", "O2"):
            got = graph.compile(passes=level)(**feeds)
            np.testing.assert_allclose(got[0], hw, rtol=1e-12)
            np.testing.assert_allclose(got[1], yw, rtol=1e-12)
            np.testing.assert_allclose(got[2], gw_fd, rtol=1e-6, atol=1e-9)
    assert json.loads(g.to_json())      # plain JSON


def test_dce_and_cse_run_inside_loop_bodies():
    g = dg.Graph("d")
    with g:
        xs = dg.placeholder("xs", (4, 3), "float64")

        def step(c, x):
            dg.exp(x) * 5.0                     # read by nothing: DCE drops it in the body
            a, b = dg.sin(x), dg.sin(x)          # CSE merges them in the body
            return c + a * b, c
        c, ys = dg.scan(step, dg.zeros(3, dtype="float64"), xs)
    g.outputs = [c, ys]
    work, _ = clone(g)
    body = next(n for n in work.nodes if n.op is scan_op).regions[0].graph
    n0 = len(body.nodes)
    assert passes.dead_code_elimination(work).changed
    assert passes.common_subexpression_elimination(work).changed
    body = next(n for n in work.nodes if n.op is scan_op).regions[0].graph
    assert len(body.nodes) == n0 - 4 and [n.op.name for n in body.nodes].count("sin") == 1
    work.verify()
    xv = RNG.standard_normal((4, 3))
    want = np.sum(np.sin(xv) ** 2, axis=0)
    np.testing.assert_allclose(g.compile(passes="O2")(xs=xv)[0], want, rtol=1e-12)


def test_onnx_export_writes_cond_as_if(tmp_path):
    # values in onnxruntime: tests/test_onnx_control_flow.py
    pytest.importorskip("onnx")
    g = dg.Graph("o")
    with g:
        a = dg.placeholder("a", (3,), "float32")
        r = dg.cond(dg.sum(a) > 0.0, lambda t: t * 2.0, lambda t: t, a)
    g.outputs = [r]
    model = dg.onnx.export(g, str(tmp_path / "c.onnx"))
    assert "If" in {n.op_type for n in model.graph.node}


def test_while_op_is_registered_with_regions():
    assert while_op.name == "while_loop" and while_op.vjp is not None


@pytest.mark.parametrize("length", [10, 9, 3])
def test_scan_checkpoint_recomputes_segments_with_the_same_gradients(length):
    xs0 = RNG.standard_normal((length, 3))
    grads = []
    for ckpt in (False, True):
        w = dg.tensor(W, requires_grad=True)
        xs = dg.tensor(xs0, requires_grad=True)
        h0 = dg.tensor(H0, requires_grad=True)
        h, ys = dg.scan(_step(w), h0, xs, checkpoint=ckpt)
        loss = (ys * ys).sum() + dg.sin(h).sum()
        gw, gx, gh = dg.autograd.grad(loss, [w, xs, h0], create_graph=True)
        hw, = dg.autograd.grad((gw * gw).sum() + gx.sum(), [w])     # second order
        grads.append([t.detach().numpy() for t in (gw, gx, gh, hw)])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[1][0], _fd(lambda v: _loss_numpy(v, xs0, H0), W),
                               rtol=1e-6, atol=1e-8)
    # graph mode: no scan over all the steps but the forward itself (which saves the
    # segment starts) and, without checkpointing (length < 4), the reverse scan: the
    # forward loop does not run a second time
    g = dg.Graph("ck")
    with g:
        wv = dg.placeholder("w", (3, 3), "float64")
        xv = dg.placeholder("xs", (length, 3), "float64")
        h, ys = dg.scan(_step(wv), dg.zeros(3, dtype="float64"), xv, checkpoint=True)
        gw, = dg.grad(dg.sum(ys * ys) + dg.sum(dg.sin(h)), [wv])
    lengths = [n.attrs["length"] for n in g.nodes if n.op is scan_op]
    assert lengths.count(length) == (1 if length >= 4 else 2), lengths
    got = g.compile(outputs=[gw], passes="O2")(w=W, xs=xs0)[0]
    np.testing.assert_allclose(got, _fd(lambda v: _loss_numpy(v, xs0, np.zeros(3)), W),
                               rtol=1e-6, atol=1e-8)


def test_a_body_returning_one_value_as_carry_and_y_gets_both_cotangents():
    w = dg.tensor(W, requires_grad=True)

    def step(h, x):
        h = dg.tanh(h @ w + x)
        return h, h                       # the same Value twice: both cotangents count
    h, ys = dg.scan(step, dg.tensor(H0), dg.tensor(XS))
    (ys.sum() + h.sum() * 3.0).backward()

    def ref(v):
        hh, out = H0, []
        for x in XS:
            hh = np.tanh(hh @ v + x)
            out.append(hh)
        return np.sum(out) + hh.sum() * 3.0
    np.testing.assert_allclose(w.grad.numpy(), _fd(ref, W), rtol=1e-6, atol=1e-8)


def test_loop_invariant_code_motion_hoists_body_nodes_that_read_only_captured_values():
    g = dg.Graph("licm")
    with g:
        w = dg.placeholder("w", (3, 3), "float64")
        xs = dg.placeholder("xs", (5, 3), "float64")

        def step(h, x):
            m = dg.exp(w * 0.5).T             # invariant: computed once, before the loop
            h = dg.tanh(h @ m + x)
            return h, h

        def body(c):
            k, v = c
            return k + 1, v * dg.sum(dg.sin(w))   # invariant inside a while body too
        h, ys = dg.scan(step, dg.zeros(3, dtype="float64"), xs)
        _, v = dg.while_loop(lambda c: c[0] < 3, body, (dg.zeros((), dtype="int64"), h))
        gw, = dg.grad(dg.sum(ys) + dg.sum(h), [w])
    g.outputs = [ys, v, gw]
    work, _ = clone(g)
    res = passes.loop_invariant_code_motion(work)
    assert res.changed
    passes.dead_code_elimination(work)          # the constant 0.5 left behind in the body
    work.verify()
    first = next(n for n in work.nodes if n.op is scan_op)
    assert [n.op.name for n in first.regions[0].graph.nodes] == ["matmul", "add", "tanh"]
    loop = next(n for n in work.nodes if n.op is while_op)
    assert "sin" not in [n.op.name for n in loop.attrs["body"].graph.nodes]
    wv, xv = RNG.standard_normal((3, 3)), RNG.standard_normal((5, 3))
    want = g.compile(passes="O0")(w=wv, xs=xv)
    for level in ("O1", "O2"):
        exe = g.compile(passes=level)
        for a, b in zip(exe(w=wv, xs=xv), want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    h = np.zeros(3)
    for x in xv:
        h = np.tanh(h @ np.exp(wv * 0.5).T + x)
    np.testing.assert_allclose(want[1], h * np.sum(np.sin(wv)) ** 3, rtol=1e-12)


def test_constant_folding_and_simplification_run_inside_bodies():
    g = dg.Graph("fs")
    with g:
        xs = dg.placeholder("xs", (4, 3), "float64")

        def step(c, x):
            k = dg.exp(dg.constant(0.0, dtype="float64")) * 2.0     # folds to 2.0
            return c + x * 1.0 * k, c                              # x * 1.0 simplifies
        c, ys = dg.scan(step, dg.zeros(3, dtype="float64"), xs)
    g.outputs = [c, ys]
    work, _ = clone(g)
    assert passes.constant_folding(work).changed
    assert passes.algebraic_simplification(work).changed
    passes.dead_code_elimination(work)
    body = next(n for n in work.nodes if n.op is scan_op).regions[0].graph
    assert "exp" not in [n.op.name for n in body.nodes]
    assert [n.op.name for n in body.nodes].count("mul") == 1
    work.verify()
    xv = RNG.standard_normal((4, 3))
    np.testing.assert_allclose(work.compile()(xs=xv)[0], 2.0 * xv.sum(0), rtol=1e-12)


def test_readme_control_flow_block_runs_and_prints_what_it_shows(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Control flow: cond, scan", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    shown = re.findall(r"```text\n(.*?)```", section, flags=re.S)[0]
    (tmp_path / "cf.py").write_text(code)
    proc = subprocess.run([sys.executable, "cf.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == shown.splitlines()


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_over_a_symbolic_length_runs_at_any_length_with_gradients(reverse):
    """``scan`` over xs of leading dim ``T`` (a symbol) in graph mode: one graph, the ys
    ``(T, 3)``, run at two lengths against numpy and (for w and xs) finite differences;
    JSON keeps it; nn.LSTM builds over a ``("T", "B", 3)`` placeholder."""
    g = dg.Graph("sym_scan")
    with g:
        w = dg.placeholder("w", (3, 3), "float64")
        xs = dg.placeholder("xs", ("T", 3), "float64")
        h0 = dg.placeholder("h0", (3,), "float64")
        h, ys = dg.scan(lambda h, x: (dg.tanh(h @ w + x), dg.tanh(h @ w + x) * 2.0), h0, xs,
                        reverse=reverse)
        loss = dg.sum(ys * ys) + dg.sum(dg.sin(h))
        gw, gxs = dg.grad(loss, [w, xs])
    g.outputs = [h, ys, loss, gw, gxs]
    assert str(ys.type.shape[0]) == "T" and str(gxs.type.shape[0]) == "T"
    back = dg.Graph.from_json(g.to_json())
    for graph in (g, back):
        run = graph.compile()
        for length in (2, 5):
            x = XS[:length]
            got = run(w=W, xs=x, h0=H0)
            want_h, want_ys = _rnn_numpy(W, x, H0, reverse)
            np.testing.assert_allclose(got[0], want_h, rtol=1e-12)
            np.testing.assert_allclose(got[1], want_ys, rtol=1e-12)
            np.testing.assert_allclose(got[3], _fd(lambda v: _loss_numpy(v, x, H0, reverse), W),
                                       rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(got[4], _fd(lambda v: _loss_numpy(W, v, H0, reverse), x),
                                       rtol=1e-6, atol=1e-8)
    dg.manual_seed(0)
    lstm = dg.nn.LSTM(3, 4, bidirectional=True)
    g = dg.Graph("sym_lstm")
    with g:
        x = dg.placeholder("x", ("T", "B", 3), "float32")
        y, (h_n, _) = lstm(x)
    g.outputs = [y, h_n]
    assert [str(d) for d in y.type.shape] == ["T", "B", "8"]
    xv = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    got = g.compile()(x=xv)
    want, (want_h, _) = lstm(dg.tensor(xv))
    np.testing.assert_allclose(got[0], want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want_h.detach().numpy(), rtol=1e-5, atol=1e-6)
