"""First-class sub-graphs: a node holding a Region (the ``call`` op) goes through print,
verify, clone, DCE and CSE inside the region, and gradients (graph mode and eager, first and
second order), all through the one accessor ``Node.regions``."""
import numpy as np
import pytest

import duograph as dg
from duograph import passes
from duograph.graphlib.ir import Region
from duograph.graphlib.ops.control import call, call_op, trace_region
from duograph.graphlib.rewrite import clone
from duograph.graphlib.types import TensorType


def _body(x, w):
    h = dg.tanh(x @ w)
    dg.exp(h) * 3.0                   # traced into the region, read by nothing: DCE drops it
    return h * h + 1.0


def _graph():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (4, 3), "float64")
        w = dg.placeholder("w", (3, 2), "float64")
        y, = call(_body, x, w)
        y2, = call(_body, x, w)             # CSE merges the two equal calls
        loss = dg.sum(y * y2)
    g.outputs = [loss]
    return g, x, w, loss


def _data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 3)), rng.standard_normal((3, 2))


def _reference(xv, wv):
    h = np.tanh(xv @ wv)
    y = h * h + 1.0
    return np.sum(y * y)


def test_region_prints_verifies_and_is_reached_through_regions():
    g, *_ = _graph()
    g.verify()
    calls = [n for n in g.nodes if n.op is call_op]
    assert len(calls) == 2 and all(len(n.regions) == 1 for n in calls)
    text = str(g)
    assert "= call(%x, %w)" in text and "region(%i0: f64[4,3], %i1: f64[3,2])" in text
    assert "matmul(%i0, %i1)" in text
    # equal bodies are equal regions (structural), so CSE can merge their nodes
    assert calls[0].regions[0] == calls[1].regions[0]


def test_verify_descends_into_regions():
    g, *_ = _graph()
    node = next(n for n in g.nodes if n.op is call_op)
    body = node.regions[0].graph
    body.nodes = list(reversed(body.nodes))      # uses before definitions inside the body
    with pytest.raises(dg.GraphError, match="region 0 is broken"):
        g.verify()


def test_regions_must_be_closed():
    outer = dg.Graph("outer")
    with outer:
        z = dg.placeholder("z", (3,))
        with pytest.raises(dg.GraphError, match="different graphs"):
            trace_region(lambda a: a + z, [TensorType((3,), "float32")])


def test_clone_dce_cse_work_inside_regions():
    g, x, w, loss = _graph()
    work, _ = clone(g)
    assert str(work) == str(g)
    n_body = len(next(n for n in work.nodes if n.op is call_op).regions[0].graph.nodes)
    res = passes.dead_code_elimination(work)
    assert res.changed
    body = next(n for n in work.nodes if n.op is call_op).regions[0].graph
    assert len(body.nodes) < n_body and "exp" not in [n.op.name for n in body.nodes]
    # the user's graph keeps its body (regions are immutable, shared by clones)
    assert len(next(n for n in g.nodes if n.op is call_op).regions[0].graph.nodes) == n_body
    res = passes.common_subexpression_elimination(work)
    assert res.changed and sum(n.op is call_op for n in work.nodes) == 1
    work.verify()
    xv, wv = _data()
    for level in ("O0", "O1", "O2"):
        got = g.compile(passes=level)(x=xv, w=wv)[0]
        np.testing.assert_allclose(got, _reference(xv, wv), rtol=1e-12)


def test_gradients_through_a_region_graph_mode_match_the_unrolled_computation():
    g, x, w, loss = _graph()
    with g:
        gx, gw = dg.grad(loss, [x, w])
    xv, wv = _data()
    got = g.compile(outputs=[gx, gw])(x=xv, w=wv)
    u = dg.Graph("unrolled")
    with u:
        ux = dg.placeholder("x", (4, 3), "float64")
        uw = dg.placeholder("w", (3, 2), "float64")
        y = _body(ux, uw)
        ul = dg.sum(y * y)
        ugx, ugw = dg.grad(ul, [ux, uw])
    want = u.compile(outputs=[ugx, ugw])(x=xv, w=wv)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_gradients_through_a_region_eager_first_and_second_order():
    xv, wv = _data()
    body = trace_region(_body, [TensorType((4, 3), "float64"), TensorType((3, 2), "float64")])
    x = dg.tensor(xv, requires_grad=True)
    w = dg.tensor(wv, requires_grad=True)
    y, = call(body, x, w)
    loss = dg.sum(y * y)
    np.testing.assert_allclose(loss.detach().numpy(), _reference(xv, wv), rtol=1e-12)
    gx, = dg.autograd.grad(loss, [x], create_graph=True)
    x2 = dg.tensor(xv, requires_grad=True)
    w2 = dg.tensor(wv, requires_grad=True)
    y2 = _body(x2, w2)
    loss2 = dg.sum(y2 * y2)
    gx2, = dg.autograd.grad(loss2, [x2], create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), gx2.detach().numpy(), rtol=1e-10)
    # second order: d/dw sum(gx) through the region's replayed gradient
    hw, = dg.autograd.grad(dg.sum(gx), [w])
    hw2, = dg.autograd.grad(dg.sum(gx2), [w2])
    np.testing.assert_allclose(hw.detach().numpy(), hw2.detach().numpy(), rtol=1e-10)


def test_region_equality_is_structural_and_typed():
    t = [TensorType((3,), "float32")]
    a = trace_region(lambda v: dg.exp(v) + 1.0, t)
    b = trace_region(lambda v: dg.exp(v) + 1.0, t)
    c = trace_region(lambda v: dg.exp(v) + 2.0, t)
    assert a == b and hash(a) == hash(b) and a != c
    assert isinstance(a, Region) and a.infer(t) == [TensorType((3,), "float32")]
