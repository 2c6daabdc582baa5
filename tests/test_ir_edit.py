"""The IR editing API and use lists: Values hash by identity and know their readers."""
import numpy as np
import pytest

import duograph as dg
from duograph import passes
from duograph.graphlib.registry import REGISTRY
from duograph.graphlib.rewrite import clone


def _chain():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (3,))
        a = dg.exp(x)
        b = a * 2.0
        c = a + b
    g.outputs = [c]
    return g, x, a, b, c


def _check_uses(g):
    """Use lists equal what a scan of the graph finds."""
    expected = {}
    for node in g.nodes:
        for x in node.inputs:
            expected.setdefault(x, {})
            expected[x][node] = expected[x].get(node, 0) + 1
    for v in list(g.inputs) + list(g.state) + [o for n in g.nodes for o in n.outputs]:
        assert v._uses == expected.get(v, {}), v


def test_values_work_as_set_members_and_dict_keys():
    g, x, a, b, c = _chain()
    s = {x, a, b, c, a}
    assert len(s) == 4 and a in s
    d = {a: 1, b: 2}
    assert d[a] == 1 and d[b] == 2 and c not in d


def test_use_lists_follow_building_and_rewiring():
    g, x, a, b, c = _chain()
    _check_uses(g)
    assert a.uses == [b.node, c.node]
    assert x.uses == [a.node]
    c.node.inputs = (b, b)
    assert a.uses == [b.node] and b.uses == [c.node] and b._uses[c.node] == 2
    _check_uses(g)


def test_replace_uses_costs_uses_not_graph_size():
    g = dg.Graph("big")
    with g:
        x = dg.placeholder("x", (3,))
        y = dg.exp(x)
        z = dg.neg(x)
        h = z
        for _ in range(2000):
            h = dg.sin(h)
        out = y + 1.0
    g.outputs = [out, h]
    calls = []
    node_cls = type(out.node)
    setter = node_cls.inputs.fset

    def counting(node, values):
        calls.append(node)
        setter(node, values)
    node_cls_inputs = node_cls.inputs
    try:
        node_cls.inputs = property(node_cls.inputs.fget, counting)
        g.replace_uses(y, z)
    finally:
        node_cls.inputs = node_cls_inputs
    assert calls == [out.node]           # only the one reader was touched
    assert out.node.inputs[0] is z and y.uses == []
    _check_uses(g)


def test_create_copy_erase_keep_order_and_uses():
    g, x, a, b, c = _chain()
    neg = g.create_node(REGISTRY["neg"], (a,), like=b.node, before=b.node)
    assert g.nodes.index(neg) == g.nodes.index(b.node) - 1
    assert neg.source is b.node.source
    twin = g.copy_node(b.node, (neg.outputs[0], b.node.inputs[1]), before=b.node)
    g.replace_uses(b, twin.outputs[0])
    with pytest.raises(dg.GraphError, match="still read by"):
        g.erase(neg)
    g.erase(b.node)
    assert b.node.graph is None
    g.verify()
    _check_uses(g)
    exe = g.compile()
    xv = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(exe(x=xv)[0], np.exp(xv) + (-np.exp(xv)) * 2, rtol=1e-6)


def test_verify_catches_inputs_changed_behind_the_ir():
    g, x, a, b, c = _chain()
    c.node._inputs = (b, b)            # bypasses the use lists
    with pytest.raises(dg.GraphError, match="use list"):
        g.verify()


def test_dropped_nodes_leave_no_uses_and_passes_keep_them_right():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (4,))
        y = dg.exp(x) + dg.exp(x)
        dead = dg.neg(x)
        z = (y * 1.0) ** 2
    work, _ = clone(g, [z])
    for p in ("dce", "fold", "simplify", "cse", "dce", "fuse", "schedule"):
        res = passes.PASSES[p](work)
        assert isinstance(res, passes.PassResult)
        work = res.graph
        work.verify()
        _check_uses(work)
    assert dead.node.graph is g


def test_simplify_runs_to_a_fixed_point():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (4,))
        y = x
        for _ in range(12):           # each round exposes the next x * 1
            y = dg.reshape(dg.reshape(y * 1.0, (2, 2)), (4,))
    work, _ = clone(g, [y])
    res = passes.algebraic_simplification(work)
    assert res.changed and res.notes
    assert [n.op.name for n in res.graph.nodes if n.op.name != "constant"] == []


def test_grad_after_a_pass_that_drops_stop_gradient_raises():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (3,))
        out = dg.sum(x * dg.stop_gradient(x)) / 2.0
    work = passes.optimize(g, ["simplify"], outputs=[out])
    assert work.gradient_blockers
    with work:
        with pytest.raises(dg.GraphError, match="do not preserve gradients"):
            dg.grad(work.outputs[0], [work.inputs[0]])
    # gradients taken before the pass are right: d/dx sum(x * sg(x)) / 2 = x / 2
    with g:
        gx, = dg.grad(out, [x])
    xv = np.array([1.0, -2.0, 3.0], np.float32)
    got = g.compile(outputs=[gx], passes="O2")(x=xv)[0]
    np.testing.assert_allclose(got, xv / 2)


def test_pass_results_unpack_and_report_notes():
    g, x, a, b, c = _chain()
    res = passes.dead_code_elimination(g)
    graph, changed = res
    assert graph is g and changed is False
    pm = passes.PassManager("O2")
    work = pm.run(clone(g)[0])
    assert any(s.notes for s in pm.stats)
    assert work.gradient_blockers == []
