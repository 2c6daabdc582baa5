"""Passes and runtime inside control-flow regions: fusion in loop bodies and branches
(nested ones too), bodies compiled once per executable (kernels resolved once; at O2 one
planned arena per body, reused by every iteration), carries double-buffered.

A table of bodies that stress buffer reuse (carries swapped, an input returned as it is,
one value returned twice, a captured outer value returned, reverse scans, nesting, 0-d
carries, an empty scan) runs eagerly, in graph mode at O0/O1/O2 and under ``dg.compile``;
every mode must equal a numpy loop to 1e-12, and O1/O2/compile must equal O0 to 1e-12.
Gradients through the loops at O2 equal O0's and the eager tape's."""
import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops.control import OpByOpBody
from duograph.passes import optimize
from duograph.passes.fusion import fused_nodes
from duograph.passes.memory import plan_memory, verify_plan
from duograph.runtime.executable import compile_graph
from duograph.runtime.regions import RegionRunner, _PlannedBody

RNG = np.random.default_rng(7)
TOL = dict(rtol=1e-12, atol=1e-12)
T = 6


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


# -- the table: name -> (inputs, dg function, numpy reference) --------------------------------
def chain(h, xs):
    return dg.scan(lambda c, x: (dg.tanh(c * 0.5 + x) * 1.5 - 0.1, c * c + x), h, xs)


def chain_np(h, xs):
    ys = []
    for x in xs:
        ys.append(h * h + x)
        h = np.tanh(h * 0.5 + x) * 1.5 - 0.1
    return h, np.stack(ys)


def matmul(h, xs, w):
    return dg.scan(lambda c, x: (dg.tanh(c @ w + x), dg.sigmoid(c) * 2.0), h, xs)


def matmul_np(h, xs, w):
    ys = []
    for x in xs:
        ys.append(_sig(h) * 2.0)
        h = np.tanh(h @ w + x)
    return h, np.stack(ys)


def reverse(h, xs, w):
    return dg.scan(lambda c, x: (dg.tanh(c @ w + x) + c * 0.25, dg.exp(-c * c)), h, xs,
                   reverse=True)


def reverse_np(h, xs, w):
    ys = [None] * len(xs)
    for t in range(len(xs) - 1, -1, -1):
        ys[t] = np.exp(-h * h)
        h = np.tanh(h @ w + xs[t]) + h * 0.25
    return h, np.stack(ys)


def swap(a, b, xs):
    # the carries trade places every step: a step that wrote one carry over the other
    # before reading it would give (b, b) or (a, a)
    (p, q), ys = dg.scan(lambda c, x: ((c[1], c[0] * 0.5 + x), c[0] - c[1]), (a, b), xs)
    return p, q, ys


def swap_np(a, b, xs):
    ys = []
    for x in xs:
        ys.append(a - b)
        a, b = b, a * 0.5 + x
    return a, b, np.stack(ys)


def pure_swap(a, b, xs):
    (p, q), ys = dg.scan(lambda c, x: ((c[1], c[0]), c[0]), (a, b), xs)
    return p, q, ys


def pure_swap_np(a, b, xs):
    ys = []
    for _ in xs:
        ys.append(a)
        a, b = b, a
    return a, b, np.stack(ys)


def passthrough(a, b, xs):
    # carry 0 and the y are body inputs returned unchanged
    (p, q), ys = dg.scan(lambda c, x: ((c[0], dg.sin(c[1]) + x), x), (a, b), xs)
    return p, q, ys


def passthrough_np(a, b, xs):
    for x in xs:
        b = np.sin(b) + x
    return a, b, xs.copy()


def twice(a, b, xs):
    # one value returned as both carries and as the y
    def step(c, x):
        v = dg.exp(c[0] * 0.1) + x * c[1]
        return (v, v), v
    (p, q), ys = dg.scan(step, (a, b), xs)
    return p, q, ys


def twice_np(a, b, xs):
    ys = []
    for x in xs:
        v = np.exp(a * 0.1) + x * b
        a, b = v, v
        ys.append(v)
    return a, b, np.stack(ys)


def captured(a, b, xs, w):
    # a captured outer value returned as a carry (and read by the next step)
    (p, q), ys = dg.scan(lambda c, x: ((w, c[1] * c[0] + x), w * 2.0), (a, b), xs)
    return p, q, ys


def captured_np(a, b, xs, w):
    for x in xs:
        a, b = w, b * a + x
    return a, b, np.stack([w * 2.0] * len(xs))


def scalar(s, xs1):
    # 0-d carry, 1-d xs: each step reads a 0-d row
    return dg.scan(lambda c, x: (c * 0.5 + dg.sin(x), c * x), s, xs1)


def scalar_np(s, xs1):
    ys = []
    for x in xs1:
        ys.append(s * x)
        s = s * 0.5 + np.sin(x)
    return s, np.array(ys)


def empty(h, xs0):
    return dg.scan(lambda c, x: (dg.tanh(c + x), c * 2.0), h, xs0)


def empty_np(h, xs0):
    return h.copy(), np.zeros((0,) + h.shape)


def nested(h, xs, m, w):
    # a scan inside a cond inside a scan
    def step(c, x):
        def inner(v):
            fin, _ = dg.scan(lambda u, r: (dg.tanh(u * 0.9 + r), u), v, m)
            return fin
        c = dg.cond(dg.sum(x) > 0.0, inner, lambda v: v * w, dg.tanh(c + x))
        return c, dg.sum(c * c)
    return dg.scan(step, h, xs)


def nested_np(h, xs, m, w):
    ys = []
    for x in xs:
        v = np.tanh(h + x)
        if x.sum() > 0:
            for r in m:
                v = np.tanh(v * 0.9 + r)
        else:
            v = v * w
        h = v
        ys.append(np.sum(v * v))
    return h, np.array(ys)


def loop(a, b, w):
    # a while loop whose body swaps two carries and returns a captured value
    def body(s):
        p, q, k, r = s
        return q, p * 0.5 + dg.tanh(r), k + 1, w
    out = dg.while_loop(lambda s: s[2] < 5, body, (a, b, dg.tensor(0, dtype="int64")
                                                   if not isinstance(a, dg.Value) else
                                                   dg.zeros((), dtype="int64"), b),
                        max_iterations=9)
    return out[0], out[1], out[3]


def loop_np(a, b, w):
    r = b
    for _ in range(5):
        a, b, r = b, a * 0.5 + np.tanh(r), w
    return a, b, r


def branch(a, b, p):
    # cond returning an input unchanged and one value twice
    def yes(u, v):
        t = u * 2.0
        return u, t, t

    def no(u, v):
        return v, v, u + v
    return dg.cond(p, yes, no, a, b)


def branch_np(a, b, p):
    return (a, a * 2.0, a * 2.0) if p else (b, b, a + b)


H = RNG.standard_normal((4, 3)) * 0.5
XS = RNG.standard_normal((T, 4, 3))
W = RNG.standard_normal((3, 3)) * 0.5
A, B = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
M = RNG.standard_normal((3, 4, 3)) * 0.5
NX = RNG.standard_normal((T, 4, 3))
NX[::2] = np.abs(NX[::2])               # both branches are taken
NX[1::2] = -np.abs(NX[1::2])

CASES = {
    "chain": (chain, chain_np, dict(h=H, xs=XS)),
    "matmul": (matmul, matmul_np, dict(h=H, xs=XS, w=W)),
    "reverse": (reverse, reverse_np, dict(h=H, xs=XS, w=W)),
    "swap": (swap, swap_np, dict(a=A, b=B, xs=XS)),
    "pure_swap": (pure_swap, pure_swap_np, dict(a=A, b=B, xs=XS)),
    "passthrough": (passthrough, passthrough_np, dict(a=A, b=B, xs=XS)),
    "twice": (twice, twice_np, dict(a=A, b=B, xs=XS)),
    "captured": (captured, captured_np, dict(a=A, b=B, xs=XS, w=RNG.standard_normal((4, 3)))),
    "scalar": (scalar, scalar_np, dict(s=np.array(0.3), xs1=RNG.standard_normal(T))),
    "empty": (empty, empty_np, dict(h=H, xs0=np.zeros((0, 4, 3)))),
    "nested": (nested, nested_np, dict(h=H, xs=NX, m=M, w=RNG.standard_normal((4, 3)))),
    "while": (loop, loop_np, dict(a=A, b=B, w=RNG.standard_normal((4, 3)))),
    "cond_true": (branch, branch_np, dict(a=A, b=B, p=np.array(True))),
    "cond_false": (branch, branch_np, dict(a=A, b=B, p=np.array(False))),
}


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in _flat(x)]
    return [out]


def _graph(fn, feeds):
    g = dg.Graph("cf")
    with g:
        vals = {k: dg.placeholder(k, v.shape, v.dtype.name) for k, v in feeds.items()}
        g.outputs = _flat(fn(**vals))
    return g


def _eager(fn, feeds):
    return [o.detach().numpy() for o in _flat(fn(**{k: dg.tensor(v) for k, v in
                                                     feeds.items()}))]


@pytest.mark.parametrize("name", list(CASES))
def test_every_mode_equals_numpy_and_O0(name):
    fn, ref, feeds = CASES[name]
    want = [np.asarray(w) for w in _flat(ref(**feeds))]
    g = _graph(fn, feeds)
    g.verify()
    got = {"eager": _eager(fn, feeds)}
    for level in ("O0", "O1", "O2"):
        exe = g.compile(passes=level)
        got[level] = exe(**feeds)
        again = exe(**feeds)             # a second run reuses the bodies' buffers
        for a, b in zip(got[level], again):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {level}: second run")
    for passes in (None, "O2"):
        fast = dg.compile(lambda **kw: tuple(_flat(fn(**kw))), passes=passes)
        ins = {k: dg.tensor(v) for k, v in feeds.items()}
        fast(**ins)
        got[f"compile {passes}"] = [o.numpy() for o in _flat(fast(**ins))]
    for mode, outs in got.items():
        assert len(outs) == len(want), mode
        for k, (a, w) in enumerate(zip(outs, want)):
            assert a.shape == w.shape and a.dtype == w.dtype, (mode, k)
            np.testing.assert_allclose(a, w, **TOL, err_msg=f"{name} {mode} output {k}")
            np.testing.assert_allclose(a, got["O0"][k], **TOL,
                                       err_msg=f"{name} {mode} output {k} vs O0")


def test_returned_arrays_are_independent_of_the_bodies_buffers():
    fn, _, feeds = CASES["passthrough"]
    exe = _graph(fn, feeds).compile(passes="O2")
    first = [o.copy() for o in exe(**feeds)]
    out = exe(**feeds)
    for o in out:
        o[...] = 123.0                  # the caller owns what it got
    for a, b in zip(first, exe(**feeds)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(feeds["a"], A)    # feeds are never written


# -- gradients through the loops --------------------------------------------------------------
GRAD_CASES = ["chain", "matmul", "reverse", "swap", "twice", "captured", "nested", "while"]


@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients_at_O2_equal_O0_and_the_eager_tape(name):
    fn, _, feeds = CASES[name]
    wrt = [k for k in feeds if k not in ("xs0",)]
    g = dg.Graph("grad")
    with g:
        vals = {k: dg.placeholder(k, v.shape, v.dtype.name) for k, v in feeds.items()}
        outs = _flat(fn(**vals))
        loss = sum(dg.sum(dg.sin(o) * (k + 1.0)) for k, o in enumerate(outs))
        grads = dg.grad(loss, [vals[k] for k in wrt])
    g.outputs = [loss] + list(grads)
    o0 = g.compile(passes="O0")(**feeds)
    o2 = g.compile(passes="O2")(**feeds)
    ts = {k: dg.tensor(v, requires_grad=True) for k, v in feeds.items()}
    eloss = sum(dg.sum(dg.sin(o) * (k + 1.0)) for k, o in enumerate(_flat(fn(**ts))))
    eloss.backward()
    eager = [eloss.detach().numpy()] + [ts[k].grad.numpy() if ts[k].grad is not None
                                        else np.zeros_like(feeds[k]) for k in wrt]
    for k, (a, b, e) in enumerate(zip(o0, o2, eager)):
        np.testing.assert_allclose(b, a, **TOL, err_msg=f"{name}: O2 vs O0, output {k}")
        np.testing.assert_allclose(e, a, rtol=1e-11, atol=1e-12,
                                   err_msg=f"{name}: eager vs O0, output {k}")


def test_matmul_scan_gradient_against_finite_differences_at_O2():
    fn, ref, feeds = CASES["matmul"]
    g = dg.Graph("fd")
    with g:
        vals = {k: dg.placeholder(k, v.shape, "float64") for k, v in feeds.items()}
        h, ys = fn(**vals)
        loss = dg.sum(ys * ys) + dg.sum(dg.sin(h))
        gw, gh = dg.grad(loss, [vals["w"], vals["h"]])
    g.outputs = [gw, gh]
    gw, gh = g.compile(passes="O2")(**feeds)

    def f(w=feeds["w"], h=feeds["h"]):
        hh, ys = ref(h, feeds["xs"], w)
        return np.sum(ys * ys) + np.sum(np.sin(hh))
    for got, key in ((gw, "w"), (gh, "h")):
        x0 = feeds[key]
        fd = np.zeros_like(x0)
        for i in np.ndindex(x0.shape):
            d = np.zeros_like(x0)
            d[i] = 1e-6
            fd[i] = (f(**{key: x0 + d}) - f(**{key: x0 - d})) / 2e-6
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


# -- what the passes and the runtime do -------------------------------------------------------
def _regions(graph):
    for node in graph.nodes:
        for r in node.regions:
            if not fused_nodes(r.graph) and not r.graph.nodes:
                continue
            yield node, r
            yield from _regions(r.graph)


def test_O2_fuses_inside_loop_bodies_and_nested_regions():
    fn, _, feeds = CASES["nested"]
    g = _graph(fn, feeds)
    exe = g.compile(passes="O2")
    scans = [n for n in exe.graph.nodes if n.regions and n.op.loop_invariant_from]
    assert scans
    body = scans[0].regions[0].graph
    assert fused_nodes(body), body
    conds = [n for n in body.nodes if n.op.static_region is not None]
    assert conds
    inner = [n for r in conds[0].regions for n in r.graph.nodes if n.regions
             and n.op.loop_invariant_from]
    assert inner and fused_nodes(inner[0].regions[0].graph), "the innermost body is fused too"
    # the O0 graph keeps its bodies as they were traced
    o0 = g.compile(passes="O0")
    assert not any(fused_nodes(r.graph) for n in o0.graph.nodes for r in n.regions)


def test_lstm_step_bodies_are_fused_and_report_fused_nodes_in_regions():
    from duograph.passes import PassManager
    m = dg.nn.LSTM(3, 5).double()
    g = dg.Graph("lstm")
    with g:
        x = dg.placeholder("x", (4, 2, 3), "float64")
        loss = dg.sum(m(x)[0] ** 2)
        dg.optim.SGD(m.parameters(), lr=0.1).minimize(loss)
    pm = PassManager("O2")
    out = pm.run(g)
    notes = [n for s in pm.stats if s.name == "fuse" for n in s.notes]
    assert any("in regions" in n for n in notes), notes
    for node in out.nodes:
        for r in node.regions:
            if node.op.loop_invariant_from:
                chains = [n for n in r.graph.nodes if n.op.elementwise and any(
                    x.node is not None and x.node.op.elementwise and not x.node.op.constant
                    for x in n.inputs)]
                assert not chains, f"unfused elementwise chains left in a loop body: {chains}"


def test_bodies_are_compiled_and_planned_once_whatever_the_trip_count():
    fn, _, feeds = CASES["matmul"]
    for length in (3, 12):
        f = dict(feeds, xs=RNG.standard_normal((length, 4, 3)))
        g = optimize(_graph(fn, f), "O2")
        calls = []

        def planner(graph, **kw):
            calls.append(graph)
            return plan_memory(graph, **kw)
        exe = compile_graph(g, planner=planner)
        for _ in range(3):
            exe(**f)
        # the top-level graph and the one body: each planned once, for every run and step
        assert len(calls) == 2, calls
        verify_plan(calls[1], plan_memory(calls[1]))
        comp = list(exe.regions._compiled.values())
        assert len(comp) == 1 and len(comp[0].bodies) == 1
        (body,) = comp[0].bodies.values()
        assert isinstance(body, _PlannedBody)
        arena = body.prog.arena
        exe(**f)
        assert body.prog.arena is arena          # the same buffers, run after run
        assert exe.regions.arena_bytes() == body.arena_bytes > 0


def test_interpreted_levels_resolve_body_kernels_once_and_never_fall_back():
    fn, _, feeds = CASES["nested"]
    exe = _graph(fn, feeds).compile(passes="O0")
    exe(**feeds)
    bodies = [b for c in exe.regions._compiled.values() for b in c.bodies.values()]
    assert bodies and not any(isinstance(b, OpByOpBody) for b in bodies)
    assert not any(isinstance(b, _PlannedBody) for b in bodies)


def test_the_reference_kernels_run_bodies_op_by_op_and_own_their_results():
    # the ops' plain kernels (constant folding, a backend without a runner) pass op-by-op
    # bodies: an input returned as it is, or one value returned twice, comes back as an
    # array of its own
    from duograph.graphlib.ir import Region
    from duograph.graphlib.ops.control import call_op, cond_op, scan_op
    from duograph.runtime.backends import get_backend
    fn, ref, feeds = CASES["twice"]
    g = _graph(fn, feeds)
    node = next(n for n in g.nodes if n.op is scan_op)
    args = [feeds[v.name] for v in node.inputs]
    got = scan_op.kernel(np, *args, **node.attrs)
    for a, w in zip(got, _flat(ref(**feeds))):
        np.testing.assert_allclose(a, w, **TOL)
    g = _graph(branch, CASES["cond_true"][2])
    node = next(n for n in g.nodes if n.op is cond_op)
    a, b = A.copy(), B.copy()
    got = cond_op.kernel(np, np.array(True), a, b, **node.attrs)
    assert got[0] is not a and not np.shares_memory(got[0], a)
    assert not np.shares_memory(got[1], got[2])
    np.testing.assert_array_equal(got[0], A)
    body = dg.Graph("body")
    with body:
        u = dg.placeholder("u", (4, 3), "float64")
        body.outputs = [u, dg.tanh(u)]
    got = call_op.kernel(np, a, body=Region(body))
    assert not np.shares_memory(got[0], a)
    np.testing.assert_array_equal(got[1], np.tanh(a))
    x = RNG.standard_normal((4, 3))
    runner = RegionRunner(get_backend("numpy"))
    prepared = runner(Region(body), [x])
    assert not isinstance(prepared, OpByOpBody)
    out = [np.empty((4, 3)), np.empty((4, 3))]
    assert prepared([x], out)[0] is out[0]
    np.testing.assert_array_equal(out[0], x)


def test_eager_loops_run_compiled_bodies():
    from duograph.runtime.backends import get_backend
    runner = get_backend("numpy").kernels.regions
    xv = RNG.standard_normal((5, 3))
    c, ys = dg.scan(lambda c, x: (c * 0.5 + x, c), dg.tensor(np.zeros(3)), dg.tensor(xv))
    assert runner._compiled, "the eager scan's body was compiled by the backend's runner"
    want = np.zeros(3)
    for x in xv:
        want = want * 0.5 + x
    np.testing.assert_allclose(c.numpy(), want, **TOL)


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_trip_counts_of_every_parity_land_the_carry_in_the_output(level):
    # the carry buffers alternate: 0, 1, 2 and 3 trips (and scans of 1, 2, 3 steps) must
    # each leave the final carry, not the spare one, in what the node returns
    g = dg.Graph("trips")
    with g:
        a = dg.placeholder("a", (3,), "float64")
        b = dg.placeholder("b", (3,), "float64")
        n = dg.placeholder("n", (), "int64")
        xs = dg.placeholder("xs", (3, 3), "float64")
        wa, wb, _ = dg.while_loop(lambda s: s[2] < n, lambda s: (s[1], s[0] * 2.0 + 1.0,
                                                                 s[2] + 1),
                                  (a, b, dg.zeros((), dtype="int64")))
        outs = [wa, wb]
        for length in (1, 2, 3):
            (sa, sb), _ = dg.scan(lambda c, x: ((c[1], c[0] * 2.0 + x), c[0]), (a, b),
                                  xs[:length])
            outs += [sa, sb]
        g.outputs = outs
    exe = g.compile(passes=level)
    av, bv, xv = np.arange(3.0), np.arange(3.0) + 10, RNG.standard_normal((3, 3))
    for trips in range(4):
        got = exe(a=av, b=bv, n=np.array(trips), xs=xv)
        p, q = av, bv
        for _ in range(trips):
            p, q = q, p * 2.0 + 1.0
        np.testing.assert_array_equal(got[0], p)
        np.testing.assert_array_equal(got[1], q)
        for k, length in enumerate((1, 2, 3)):
            p, q = av, bv
            for t in range(length):
                p, q = q, p * 2.0 + xv[t]
            np.testing.assert_array_equal(got[2 + 2 * k], p)
            np.testing.assert_array_equal(got[3 + 2 * k], q)


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_symbolic_batch_and_a_strided_xs_plan_one_body_per_signature(level):
    g = dg.Graph("sym")
    with g:
        x = dg.placeholder("x", (3, "N", 5), "float64")
        h0 = dg.placeholder("h", ("N", 3), "float64")
        xs = dg.permute(x, (2, 1, 0))             # (5, N, 3): each row a strided view

        def step(c, xt):
            flat = dg.reshape(c, (-1,)) * 0.5
            return dg.tanh(c @ W + xt) + dg.reshape(flat, c.shape), dg.sum(c, dim=1)
        g.outputs = list(dg.scan(step, h0, xs))
    exe = g.compile(passes=level)
    for n in (2, 4, 2):
        xv, hv = RNG.standard_normal((3, n, 5)), RNG.standard_normal((n, 3))
        got = exe(x=xv, h=hv)
        c, ys = hv, []
        for t in range(5):
            ys.append(c.sum(1))
            c = np.tanh(c @ W + xv.transpose(2, 1, 0)[t]) + c * 0.5
        np.testing.assert_allclose(got[0], c, **TOL)
        np.testing.assert_allclose(got[1], np.stack(ys), **TOL)
    bodies = [b for comp in exe.regions._compiled.values() for b in comp.bodies.values()]
    assert len(bodies) == 2               # N = 2 and N = 4
    assert all(isinstance(b, _PlannedBody) == (level == "O2") for b in bodies)


def test_cse_after_licm_merges_what_several_bodies_hoisted():
    """An LSTM's forward and backward scans both read the recurrent weight transposed: licm
    hoists one transpose out of each body, and the CSE after licm keeps one."""
    m = dg.nn.LSTM(4, 8)
    opt = dg.optim.SGD(m.parameters(), lr=0.1)
    g = dg.Graph("lstm_licm_cse")
    with g:
        x = dg.placeholder("x", (5, 3, 4), "float32")
        opt.minimize(dg.sum(m(x)[0]))
    exe = g.compile(outputs=[], passes="O1")
    perms = [(n.inputs[0], tuple(n.attrs.items())) for n in exe.graph.nodes
             if n.op.name == "permute"]
    assert len(perms) == len(set(perms)), "two equal hoisted permutes survived"
