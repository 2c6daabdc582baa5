"""Elementwise fusion: structure (kernel counts, outputs kept, no cycles), printing, the fused
kernel's CPU strategies, and fused vs unfused numbers on fixed and random graphs."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import duograph as dg
from duograph import passes
from duograph.graphlib.ops.fused import FusedBody, run_ops
from duograph.runtime.cpu import cpu_backend
from duograph.runtime.cpu import (fused_chunks, fused_expr, fused_numba, fused_special,
                                  fused_strategy, numba_support)
from duograph.graphlib.rewrite import clone
from duograph.passes.fusion import fuse_elementwise, fused_nodes

HAVE_NUMBA = numba_support.numba_available()


def _plans_of(body) -> dict:
    """The CPU backend's plans for ``body`` (its cache, held weakly by the body)."""
    return cpu_backend.fused_compiler.plans.get(body) or {}


@pytest.fixture(autouse=True)
def _default_strategy():
    """Each test starts from the default strategy; whatever it sets is undone after."""
    with dg.config.override(fused_strategy="auto", fused_threads=1, cblas=True):
        yield


def set_cpu_strategy(name: str) -> None:
    dg.config.fused_strategy = name


def _fused(exe):
    return fused_nodes(exe.graph)


def _compare(g, outputs, feeds, pipelines=(["fuse"], "O2"), exact=False):
    """Run O0 and each pipeline; returns the executables of the pipelines."""
    ref = g.compile(outputs=outputs)(**feeds)
    exes = []
    for p in pipelines:
        exe = g.compile(outputs=outputs, passes=p)
        got = exe(**feeds)
        for a, b in zip(ref, got):
            assert a.dtype == b.dtype and a.shape == b.shape
            if exact:
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        exes.append(exe)
    return exes


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- structure -------------------------------------------------------------------------------
def test_chain_of_four_ops_becomes_one_kernel():
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", ("N", 8))
        y = dg.exp(dg.tanh(x * 2.0) + 1.0)
    unfused = g.compile(outputs=[y])
    assert unfused.kernel_count == 6          # 4 ops and 2 constants
    fused, o2 = _compare(g, [y], {"x": _x(5, 8)}, exact=True)
    for exe in (fused, o2):
        assert exe.kernel_count == 1
        (node,) = _fused(exe)
        assert node.attrs["sub"].ops == ["mul", "tanh", "add", "exp"]
        assert node.inputs == (exe.graph.inputs[0],)     # the constants were folded in
        assert passes.kernel_count(exe.graph) == 1


def test_value_used_outside_the_chain_stays_an_output():
    g = dg.Graph("shared")
    with g:
        x = dg.placeholder("x", (4, 6))
        a = x * x
        b = dg.tanh(a)              # also read by the reduction below
        c = b + 1.0
        d = c * x
        s = dg.sum(b, dim=1)        # not fused (no elementwise consumer after it)
    fused, = _compare(g, [d, s, a], {"x": _x(4, 6)}, pipelines=(["fuse"],), exact=True)
    (node,) = _fused(fused)
    assert node.attrs["sub"].ops == ["mul", "tanh", "add", "mul"]
    assert len(node.outputs) == 3                       # a (a graph output), b, d
    assert fused.kernel_count == 2


def test_relu_mask_is_computed_in_the_backward_not_kept_from_the_forward():
    """ne(y, 0) of ReLU's gradient reads the ReLU's output y: fused into the forward it
    would be a bool mask held until the backward; it moves to the backward's group."""
    g = dg.Graph("relu_mlp")
    with g:
        x = dg.placeholder("x", (8, 5))
        w1 = dg.placeholder("w1", (5, 6))
        w2 = dg.placeholder("w2", (6, 3))
        h = dg.relu(x @ w1 + 1.0)
        loss = dg.sum((h @ w2) ** 2)
        gw1, gw2 = dg.grad(loss, [w1, w2])
    feeds = {"x": _x(8, 5), "w1": _x(5, 6, seed=1), "w2": _x(6, 3, seed=2)}
    fused, = _compare(g, [loss, gw1, gw2], feeds, pipelines=(["fuse"],))
    forward = [n for n in _fused(fused) if "relu" in n.attrs["sub"].ops]
    backward = [n for n in _fused(fused) if "where" in n.attrs["sub"].ops]
    assert len(forward) == 1 and len(backward) == 1
    assert [o.dtype for o in forward[0].outputs] == ["float32"]        # no bool mask
    assert "ne" in backward[0].attrs["sub"].ops
    assert not any(o.dtype == "bool" for n in fused.graph.nodes for o in n.outputs)


def test_diamond_through_an_unfusible_op_is_not_fused_into_a_cycle():
    g = dg.Graph("diamond")
    with g:
        x = dg.placeholder("x", (3, 5))
        a = dg.exp(x)
        s = dg.softmax(a, dim=1)    # a -> softmax -> c: fusing a with c would be a cycle
        c = a * s
        d = dg.tanh(c)
    fused, = _compare(g, [d], {"x": _x(3, 5)}, pipelines=(["fuse"],), exact=True)
    (node,) = _fused(fused)
    assert node.attrs["sub"].ops == ["mul", "tanh"]
    assert [n.op.name for n in fused.graph.nodes] == ["exp", "softmax", "fused"]


def test_diamond_through_a_matmul_fuses_the_epilogue_only():
    g = dg.Graph("diamond_mm")
    with g:
        x = dg.placeholder("x", (4, 4))
        w = dg.placeholder("w", (4, 4))
        a = dg.exp(x)
        m = a @ w
        c = dg.relu(a + m)
    fused, = _compare(g, [c], {"x": _x(4, 4), "w": _x(4, 4, seed=1)},
                      pipelines=(["fuse"],))
    (node,) = _fused(fused)
    assert node.attrs["sub"].ops == ["matmul", "add", "relu"]
    assert [n.op.name for n in fused.graph.nodes] == ["exp", "fused"]


def test_no_cycle_on_random_diamonds_and_graph_stays_valid():
    g = dg.Graph("many")
    with g:
        x = dg.placeholder("x", (4, 4))
        a = dg.sin(x)
        b = dg.softmax(a, dim=0)
        c = a + b
        d = dg.cos(c) * a
        e = dg.log_softmax(d, dim=1)
        f = e * d + a
    c2, _ = clone(g, [f])
    c2, changed = fuse_elementwise(c2)
    assert changed
    c2.verify()
    _compare(g, [f], {"x": _x(4, 4)}, pipelines=(["fuse"],), exact=True)


def test_horizontal_fusion_of_siblings_reading_one_large_input():
    """exp(x) and tanh(x) * 2 are separate consumers of x: with x large they become one
    kernel with two outputs (x read once); with x small, or with a path between the two
    through a reduction (a cycle), they stay apart."""
    def siblings(shape):
        g = dg.Graph("siblings")
        with g:
            x = dg.placeholder("x", shape)
            a = dg.exp(x)
            b = dg.tanh(x) * 2.0
            g.outputs = [a, b]
        return g

    big = siblings((256, 256))
    (exe,) = _compare(big, big.outputs, {"x": _x(256, 256)}, pipelines=[["fuse"]], exact=True)
    (node,) = _fused(exe)
    assert sorted(node.attrs["sub"].ops) == ["exp", "mul", "tanh"]
    assert len(node.outputs) == 2 and exe.kernel_count == 1
    no, _ = passes.fusion.fuse_elementwise(siblings((256, 256)), horizontal=False)
    assert len(fused_nodes(no)) == 1 and "exp" in [n.op.name for n in no.nodes]

    small = siblings((16, 16))
    (exe,) = _compare(small, small.outputs, {"x": _x(16, 16)}, pipelines=[["fuse"]])
    assert [n.attrs["sub"].ops for n in _fused(exe)] == [["tanh", "mul"]]

    g = dg.Graph("through_a_sum")
    with g:
        x = dg.placeholder("x", (256, 256))
        a = dg.exp(x)
        s = dg.amax(a)                     # not elementwise, reads a
        b = dg.tanh(x) * s                 # a sibling of a, but after s
        g.outputs = [b, a]
    (exe,) = _compare(g, g.outputs, {"x": _x(256, 256)}, pipelines=[["fuse"]])
    exe.graph.verify()
    for node in _fused(exe):
        assert "exp" not in node.attrs["sub"].ops or "tanh" not in node.attrs["sub"].ops


@pytest.mark.parametrize("rows", [8, 600])       # one direct step; many chunks
def test_bound_epilogue_runs_the_matmul_in_its_home_output(rows):
    """A fused ``relu(x @ w + b)`` bound to its shapes (what the planned runtime does) runs
    the matmul with out= straight into the relu output and the chain in place over it;
    results equal the general path, also with the matmul value returned too."""
    for also_h in (False, True):
        g = dg.Graph("epilogue")
        with g:
            x = dg.placeholder("x", (rows, 32))
            w = dg.placeholder("w", (32, 128))
            b = dg.placeholder("b", (128,))
            h = x @ w
            y = dg.relu(h + b)
            g.outputs = [y, dg.tanh(y) > 0.5] + ([h] if also_h else [])
        work = passes.optimize(g, ["fuse"])
        (node,) = fused_nodes(work)
        body = node.attrs["sub"]
        feeds = {"x": _x(rows, 32), "w": _x(32, 128, seed=1), "b": _x(128, seed=2)}
        arrays = [feeds[v.name] for v in node.inputs]
        want = cpu_backend.fused_compiler.run(body, arrays)
        runner = cpu_backend.fused_compiler.bind(body, [a.shape for a in arrays])
        assert runner is not None
        (matmul,) = [n for n in body.graph.nodes if n.op.name == "matmul"]
        (relu,) = [n for n in body.graph.nodes if n.op.name == "relu"]
        home = matmul.outputs[0] if also_h else relu.outputs[0]
        index = [id(o) for o in body.graph.outputs].index(id(home))
        homes = body.prologue_homes()
        assert len(homes) == 1 and next(iter(homes)) is matmul.outputs[0]
        assert homes[matmul.outputs[0]] == index
        outs = [np.full(o.shape, 7, o.dtype) for o in want]
        assert runner(arrays, outs)
        for a, b_ in zip(outs, want):
            np.testing.assert_array_equal(a, b_)


def test_single_ops_are_left_alone():
    g = dg.Graph("single")
    with g:
        x = dg.placeholder("x", (3,))
        y = dg.softmax(dg.exp(x), dim=0)
    c, _ = clone(g, [y])
    c, changed = fuse_elementwise(c)
    assert not changed and [n.op.name for n in c.nodes] == ["exp", "softmax"]


def test_epilogues_after_matmul_sum_and_mean():
    g = dg.Graph("epi")
    with g:
        x = dg.placeholder("x", ("N", 6))
        w = dg.placeholder("w", (6, 3))
        b = dg.placeholder("b", (3,))
        h = dg.relu(x @ w + b) * 0.5
        s = dg.tanh(dg.sum(x, dim=1, keepdim=True)) * x
        m = dg.exp(dg.mean(x)) + 1.0
    feeds = {"x": _x(5, 6), "w": _x(6, 3, seed=1), "b": _x(3, seed=2)}
    fused, = _compare(g, [h, s, m], feeds, pipelines=(["fuse"],))
    ops = sorted(tuple(n.attrs["sub"].ops) for n in _fused(fused))
    assert ops == [("matmul", "add", "relu", "mul"), ("mean", "exp", "add"),
                   ("sum", "tanh", "mul")]
    assert fused.kernel_count == 3


def test_print_shows_the_fused_body_and_verify_passes():
    g = dg.Graph("p")
    with g:
        x = dg.placeholder("x", ("N", 4))
        y = dg.placeholder("y", (4,))
        z = dg.tanh(x * y) + 0.5
    exe = g.compile(outputs=[z], passes="O2")
    text = str(exe.graph)
    assert "= fused(%x, %y) { %a = mul(%i0, %i1); %b = tanh(%a); %c = add(%b, 0.5); " \
           "return (%c) }" in text
    assert "sub=" not in text
    exe.graph.verify()
    # verify re-runs inference through the body: a wrong stored type is caught
    node = _fused(exe)[0]
    bad = dg.TensorType(("N", 5), "float32")
    good = node.outputs[0].type
    node.outputs[0].type = bad
    with pytest.raises(dg.GraphError, match="differ from the inferred"):
        exe.graph.verify()
    node.outputs[0].type = good


def test_equal_bodies_are_equal_and_merged_by_cse():
    g = dg.Graph("cse")
    with g:
        x = dg.placeholder("x", (3,))
        a = dg.tanh(x * 2.0) + 1.0
        b = dg.tanh(x * 2.0) + 1.0
        out = a * b
    c, _ = clone(g, [a, b])
    c, _ = passes.dead_code_elimination(c)        # the clone holds `out` too
    c, _ = fuse_elementwise(c)
    n1, n2 = fused_nodes(c)
    assert n1.attrs["sub"] == n2.attrs["sub"] and hash(n1.attrs["sub"]) == hash(n2.attrs["sub"])
    assert n1.attrs["sub"] is not n2.attrs["sub"]
    c, changed = passes.common_subexpression_elimination(c)
    assert changed and len(fused_nodes(c)) == 1
    _compare(g, [out], {"x": _x(3)})


def test_broadcasting_and_scalar_constants_inside_fused_nodes():
    g = dg.Graph("bcast")
    with g:
        x = dg.placeholder("x", ("N", 8))
        b = dg.placeholder("b", (8,))
        col = dg.placeholder("col", ("N", 1))
        s = dg.placeholder("s", ())
        bias = b * 2.0                          # a small value computed inside the body
        y = dg.relu(x + bias) * 0.5 - col * s
        z = dg.where(y > 0.1, y, dg.sigmoid(y)) / (col * col + 1.0)
    feeds = {"x": _x(70, 8), "b": _x(8, seed=1), "col": _x(70, 1, seed=2),
             "s": np.float32(0.3)}
    fused, o2 = _compare(g, [z], feeds)
    (node,) = _fused(fused)
    assert len(node.inputs) == 4 and fused.kernel_count == 1


def test_mixed_dtypes_and_bool_values_in_a_body():
    g = dg.Graph("mixed")
    with g:
        x = dg.placeholder("x", (5, 3))
        i = dg.placeholder("i", (5, 3), "int32")
        y = dg.cast(i, "float32") * x + i            # int32 + float32 promotes
        z = dg.where(dg.logical_and(y > 0, x < 1.0), y, -y) / 3
    feeds = {"x": _x(5, 3), "i": np.arange(15, dtype=np.int32).reshape(5, 3) - 7}
    _compare(g, [z], feeds, exact=True)


# -- the fused kernel's strategies -----------------------------------------------------------
def _gelu_graph(shape=("N",)):
    g = dg.Graph("gelu")
    with g:
        x = dg.placeholder("x", shape)
        y = x * x
        y = y * x * 0.044715
        y = (x + y) * math.sqrt(2 / math.pi)
        y = 0.5 * x * (dg.tanh(y) + 1.0)
    return g, y


@pytest.mark.parametrize("shape,chunk", [((1000,), 64), ((37, 50), 128), ((3, 4), 4)])
def test_numpy_chunks_match_unfused_bitwise(monkeypatch, shape, chunk):
    monkeypatch.setattr(fused_chunks, "CHUNK", chunk)   # many chunks and a short tail
    monkeypatch.setattr(fused_chunks, "DIRECT_SHORT_MAX", 0)
    set_cpu_strategy("numpy")
    g, y = _gelu_graph(tuple("N" if i == 0 else d for i, d in enumerate(shape)))
    _compare(g, [y], {"x": _x(*shape) * 3}, pipelines=(["fuse"],), exact=True)


@pytest.mark.parametrize("chunked", [False, True])
def test_value_read_twice_where_it_dies_frees_its_scratch_once(monkeypatch, chunked):
    """mul(a, a) is a's last read: its scratch buffer goes back to the pool once, not once
    per operand (twice would hand it to c and to d, both alive, at the same time)."""
    if chunked:
        monkeypatch.setattr(fused_chunks, "CHUNK", 64)
        monkeypatch.setattr(fused_chunks, "DIRECT_SHORT_MAX", 0)
    set_cpu_strategy("numpy")
    g = dg.Graph("twice")
    with g:
        x = dg.placeholder("x", (1000,))
        a = dg.exp(x)
        c = a * a
        d = dg.tanh(x)
        y = c + d
    _compare(g, [y], {"x": _x(1000)}, pipelines=(["fuse"],), exact=True)


def test_numpy_chunks_on_non_contiguous_and_broadcast_inputs(monkeypatch):
    monkeypatch.setattr(fused_chunks, "CHUNK", 16)
    monkeypatch.setattr(fused_chunks, "DIRECT_SHORT_MAX", 0)
    set_cpu_strategy("numpy")
    g = dg.Graph("nc")
    with g:
        x = dg.placeholder("x", (9, 7))
        b = dg.placeholder("b", (9, 1))
        t = dg.permute(x, 1, 0)                   # a strided view: chunks along its rows
        y = dg.tanh(t * 2.0) + dg.permute(b, 1, 0)
        z = dg.sqrt(dg.abs(y)) * y
    _compare(g, [z, y], {"x": _x(9, 7), "b": _x(9, 1, seed=3)}, pipelines=(["fuse"],),
             exact=True)


def test_numpy_chunks_split_over_threads(monkeypatch):
    monkeypatch.setattr(fused_chunks, "CHUNK", 256)
    monkeypatch.setattr(fused_chunks, "DIRECT_SHORT_MAX", 0)
    dg.config.fused_threads = 3
    monkeypatch.setattr(fused_chunks, "THREAD_MIN_ELEMENTS", 1000)
    set_cpu_strategy("numpy")
    g, y = _gelu_graph()
    _compare(g, [y], {"x": _x(5000)}, pipelines=(["fuse"],), exact=True)


def test_op_by_op_strategy_is_the_reference():
    set_cpu_strategy("ops")
    g, y = _gelu_graph()
    _compare(g, [y], {"x": _x(300)}, pipelines=(["fuse"],), exact=True)


def test_run_ops_serves_any_array_module():
    g, y = _gelu_graph()
    exe = g.compile(outputs=[y], passes=["fuse"])
    body = _fused(exe)[0].attrs["sub"]
    assert isinstance(body, FusedBody)
    x = _x(10)
    (got,) = run_ops(body.graph, np, [x])
    np.testing.assert_array_equal(got, g.compile(outputs=[y])(x=x)[0])


@pytest.mark.parametrize("strategy", ["numpy", "ops", "auto"])
def test_out_kernel_writes_into_given_arrays(strategy):
    set_cpu_strategy(strategy)
    g = dg.Graph("out")
    with g:
        x = dg.placeholder("x", (6, 4))
        w = dg.placeholder("w", (4, 4))
        h = x @ w
        a = dg.tanh(h) * 2.0
        b = a + h                             # h (the matmul) is an output too
    exe = g.compile(outputs=[h, b], passes=["fuse"])
    (node,) = _fused(exe)
    feeds = {"x": _x(6, 4), "w": _x(4, 4, seed=1)}
    ref = g.compile(outputs=[h, b])(**feeds)
    outs = [np.full((6, 4), np.nan, np.float32),
            np.full((4, 6), np.nan, np.float32).T]       # a non-contiguous one
    order = [[id(v) for v in exe.graph.outputs].index(id(o)) for o in node.outputs]
    out_kernel = cpu_backend.out_kernel(node.op)
    assert out_kernel(np, feeds["x"], feeds["w"], out=outs, **node.attrs)
    for k, o in zip(order, outs):
        np.testing.assert_allclose(o, ref[k], rtol=1e-6)


@pytest.mark.gpu
def test_fused_nodes_run_op_by_op_on_cupy():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    g, y = _gelu_graph()
    x = _x(1000)
    ref = g.compile(outputs=[y])(x=x)[0]
    got = g.compile(outputs=[y], passes=["fuse"], device="cuda")(x=x)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_scalar_shaped_and_empty_bodies():
    g = dg.Graph("tiny")
    with g:
        x = dg.placeholder("x", ())
        e = dg.placeholder("e", (0, 3))
        y = dg.exp(x * 2.0) - 1.0
        z = dg.tanh(e) * 2.0
    _compare(g, [y, z], {"x": np.float32(0.3), "e": np.zeros((0, 3), np.float32)},
             exact=True)


def test_c_templates_translate_to_python():
    tr = fused_expr.c_to_python
    assert tr("(x0 > 0 ? x0 : x0 * 0.01)", "F") == "((x0 if (x0 > F(0)) else (x0 * F(0.01))))"
    assert tr("((float32)x0)", "F") == "(np.float32(x0))"
    assert tr("(!x0 && x1 || x2)", "F") == "((((not x0) and x1) or x2))"
    assert tr("max(x0, -2.5e-3)", "F") == "_maximum(x0, (-F(2.5e-3)))"
    with pytest.raises(ValueError):
        tr("frobnicate(x0)", "F")


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_numba_kernel_matches_unfused_and_keeps_nans():
    set_cpu_strategy("numba")
    g = dg.Graph("nb")
    with g:
        x = dg.placeholder("x", ("N", 16))
        b = dg.placeholder("b", (16,))
        y = dg.gelu(x + b, approximate="tanh")
        z = dg.where(y > 0.0, dg.sigmoid(y), dg.relu(x) - dg.tanh(x) * 0.5)
    x = _x(40, 16) * 4
    x[0, :4] = [np.nan, np.inf, -np.inf, 20.0]
    feeds = {"x": x, "b": _x(16, seed=1)}
    ref = g.compile(outputs=[y, z])(**feeds)
    exe = g.compile(outputs=[y, z], passes=["fuse"])
    got = exe(**feeds)
    body = _fused(exe)[0].attrs["sub"]
    assert any(isinstance(p, fused_numba.NumbaPlan) for p in _plans_of(body).values())
    for a, c in zip(ref, got):
        np.testing.assert_allclose(c, a, rtol=2e-6, atol=2e-6)   # rational tanh: a few ulp
        np.testing.assert_array_equal(np.isnan(c), np.isnan(a))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_numba_kernel_writes_in_place_through_the_input_it_overwrites():
    """An SGD update p - lr * g planned in place over p: the numba kernel gets p once (its
    variant for that alias), and the numbers are those of the out-of-place kernel."""
    set_cpu_strategy("numba")
    g = dg.Graph("sgd")
    with g:
        p = dg.variable("p", np.zeros((300, 300), np.float32))
        grad = dg.placeholder("g", (300, 300))
        g.update(p, p - 0.1 * (grad * grad))
        g.outputs = [dg.sum(grad)]
    start = _x(300, 300)
    gs = _x(300, 300, seed=1)
    exe = g.compile(passes="O2")
    exe.state["p"] = start
    exe(g=gs)
    want = start - np.float32(0.1) * (gs * gs)
    np.testing.assert_allclose(exe.state["p"], want, rtol=1e-6, atol=1e-7)
    plans = [pl for node in _fused(exe) for pl in _plans_of(node.attrs["sub"]).values()
             if isinstance(pl, fused_numba.NumbaPlan)]
    assert plans and any(alias for pl in plans for alias in pl.fns)
    exe(g=gs)                                   # a second step, from the updated p
    np.testing.assert_allclose(exe.state["p"], want - np.float32(0.1) * (gs * gs),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_numba_float32_tanh_is_within_a_few_ulp_and_exact_where_it_saturates():
    # the rational tanh with multiply-add contraction: every 97th float32 in (-10, 10)
    set_cpu_strategy("numba")
    g = dg.Graph("tanh")
    with g:
        x = dg.placeholder("x", ("N",))
        y = dg.tanh(x) + 0.0
        z = 0.5 * x * (1.0 + dg.tanh(x))           # -inf * (1 + tanh(-inf)) is NaN
    bits = np.arange(0, np.float32(10).view(np.int32), 97, dtype=np.int32)
    pos = bits.view(np.float32)
    xs = np.concatenate([pos, -pos, np.float32([np.inf, -np.inf, np.nan, 9.0, -9.0, 20.0])])
    exe = g.compile(outputs=[y, z], passes=["fuse"])
    got_y, got_z = exe(x=xs)
    assert any(isinstance(p, fused_numba.NumbaPlan)
               for node in _fused(exe) for p in _plans_of(node.attrs["sub"]).values())
    ref = np.tanh(xs.astype(np.float64))
    finite = np.isfinite(xs)
    ulps = np.abs(got_y[finite] - ref[finite]) / np.spacing(
        np.abs(ref[finite]).astype(np.float32))
    assert ulps.max() <= 6
    assert np.abs(got_y[~np.isnan(xs)]).max() == 1.0
    np.testing.assert_array_equal(got_y[-6:], [1.0, -1.0, np.nan, 1.0, -1.0, 1.0])
    with np.errstate(invalid="ignore"):
        ref_z = 0.5 * xs * (1.0 + np.tanh(xs))
    np.testing.assert_array_equal(np.isnan(got_z), np.isnan(ref_z))
    assert np.isnan(got_z[-5])                      # -inf


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_auto_keeps_small_arrays_and_libm_ops_on_numpy():
    g = dg.Graph("auto")
    with g:
        x = dg.placeholder("x", ("N",))
        y = dg.log(dg.exp(x * 0.5) + 1.0)          # exp/log: scalar libm calls in numba
        z = dg.tanh(x * 2.0) + 1.0
    exe = g.compile(outputs=[y, z], passes=["fuse"])
    exe(x=_x(fused_numba.NUMBA_MIN_ELEMENTS))
    exe(x=_x(100))
    for node in _fused(exe):
        plans = [p for k, p in _plans_of(node.attrs["sub"]).items() if k is not None]
        assert all(isinstance(p, (fused_chunks.ChunkPlan, fused_chunks.DirectPlan))
                   for p in plans) or (
            node.attrs["sub"].ops == ["mul", "tanh", "add"])


# -- whole programs --------------------------------------------------------------------------
def _mlp_step(pipeline, steps=3):
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((12, 16)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((16, 4)) * 0.3).astype(np.float32)
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", ("N", 12))
        t = dg.placeholder("t", ("N", 4))
        v1 = dg.variable("w1", w1)
        b1 = dg.variable("b1", np.zeros(16, np.float32))
        v2 = dg.variable("w2", w2)
        h = dg.gelu(x @ v1 + b1, approximate="tanh")
        loss = dg.mean((h @ v2 - t) ** 2)
        grads = dg.grad(loss, [v1, b1, v2])
        for p, gr in zip([v1, b1, v2], grads):
            g.update(p, p - 0.1 * gr)
    exe = g.compile(outputs=[loss], passes=pipeline)
    xs, ts = _x(32, 12, seed=3), _x(32, 4, seed=4)
    losses = [float(exe(x=xs, t=ts)[0]) for _ in range(steps)]
    return exe, losses, {k: exe.state[k].copy() for k in ("w1", "b1", "w2")}


def test_gelu_mlp_training_step_fused_and_unfused_agree():
    _, ref_losses, ref_state = _mlp_step("O0")
    for pipeline in (["fuse"], "O2"):
        exe, losses, state = _mlp_step(pipeline)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
        for k in ref_state:
            np.testing.assert_allclose(state[k], ref_state[k], rtol=1e-6, atol=1e-7)
        assert len(_fused(exe)) >= 3
        assert exe.kernel_count < 20
    assert _mlp_step("O0")[0].kernel_count > 40


_UNARY = ["exp", "tanh", "sigmoid", "relu", "neg", "abs", "square", "sin", "sqrt_abs"]
_BINARY = ["add", "sub", "mul", "maximum", "minimum", "div_safe", "where"]
_SHAPES = [(6, 5), (5,), (6, 1), (1, 5), ()]


@st.composite
def elementwise_dags(draw):
    """Random DAGs of elementwise ops with broadcasting operands, scalar constants,
    values read more than once, and a few unfusible ops in between."""
    n = draw(st.integers(2, 14))
    steps = []
    for i in range(n):
        steps.append((draw(st.sampled_from(["unary", "binary", "binary", "const", "cut"])),
                      draw(st.sampled_from(_UNARY)), draw(st.sampled_from(_BINARY)),
                      draw(st.integers(0, i + 2)), draw(st.integers(0, i + 2)),
                      draw(st.sampled_from([0.5, 2.0, -1.0, 3.0]))))
    outs = draw(st.lists(st.integers(0, n + 2), min_size=1, max_size=3, unique=True))
    return steps, outs


def _build_dag(steps, outs):
    g = dg.Graph("dag")
    with g:
        vals = [dg.placeholder("x", (6, 5)), dg.placeholder("y", (5,)),
                dg.placeholder("z", (6, 1))]
        for kind, un, bi, a, b, c in steps:
            x, y = vals[a % len(vals)], vals[b % len(vals)]
            if kind == "unary":
                x = dg.clamp(x, -4.0, 4.0)
                v = dg.sqrt(dg.abs(x)) if un == "sqrt_abs" else getattr(dg, un)(x)
            elif kind == "binary" and bi == "div_safe":
                v = x / (dg.abs(y) + 1.0)
            elif kind == "binary" and bi == "where":
                v = dg.where(x > y, x, y * c)
            elif kind == "binary":
                v = getattr(dg, bi)(x, y)
            elif kind == "const":
                v = x * c + c
            else:   # something fusion must work around
                v = dg.softmax(x, dim=-1) if x.ndim else x * 1.0
            vals.append(v)
        outputs = [vals[3 + o % (len(vals) - 3)] for o in outs] if len(vals) > 3 else vals
    return g, outputs


@settings(max_examples=60, deadline=None)
@given(elementwise_dags())
def test_random_elementwise_dags_agree_fused_and_unfused(dag):
    g, outputs = _build_dag(*dag)
    feeds = {"x": _x(6, 5, seed=1), "y": _x(5, seed=2), "z": _x(6, 1, seed=3)}
    fused, o2 = _compare(g, outputs, feeds)
    assert fused.kernel_count <= g.compile(outputs=outputs).kernel_count
    fused.graph.verify()


@settings(max_examples=15, deadline=None)
@given(elementwise_dags())
def test_random_dags_in_many_chunks_are_bitwise_equal(dag):
    old = fused_chunks.CHUNK, fused_chunks.DIRECT_SHORT_MAX
    fused_chunks.CHUNK, fused_chunks.DIRECT_SHORT_MAX = 4, 0
    set_cpu_strategy("numpy")
    try:
        g, outputs = _build_dag(*dag)
        feeds = {"x": _x(6, 5, seed=1), "y": _x(5, seed=2), "z": _x(6, 1, seed=3)}
        _compare(g, outputs, feeds, pipelines=(["fuse"],), exact=True)
    finally:
        fused_chunks.CHUNK, fused_chunks.DIRECT_SHORT_MAX = old


# -- an SGD step on a matmul gradient as one gemm ---------------------------------------------
def test_cblas_gemm_update_matches_numpy_and_refuses_what_it_cannot_do():
    from duograph.runtime.cpu import cblas as _cblas
    if not _cblas.available():
        pytest.skip("numpy is not built on its bundled OpenBLAS here")
    rng = np.random.default_rng(7)
    for dtype, tol in (("float32", 1e-5), ("float64", 1e-12)):
        for a_f, b_f in ((False, False), (True, False), (False, True), (True, True)):
            a = rng.standard_normal((6, 5)).astype(dtype)
            b = rng.standard_normal((5, 4)).astype(dtype)
            a = np.asfortranarray(a) if a_f else a
            b = np.asfortranarray(b) if b_f else b
            c = rng.standard_normal((6, 4)).astype(dtype)
            want = -0.3 * (a.astype(np.float64) @ b) + c
            assert _cblas.gemm_update(a, b, c, -0.3, 1.0)
            np.testing.assert_allclose(c, want, rtol=tol, atol=tol)
    a, b = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    assert not _cblas.gemm_update(a, b, a, 1.0, 1.0)                   # c overlaps a
    assert not _cblas.gemm_update(a, b, np.ones((4, 4)), 1.0, 1.0)     # dtypes differ
    assert not _cblas.gemm_update(a, b, np.ones((8, 4), np.float32)[::2], 1.0, 1.0)
    assert not _cblas.gemm_update(a[:, ::2], b[::2], np.ones((4, 4), np.float32), 1.0, 1.0)


@pytest.mark.parametrize("cblas", [True, False])
def test_sgd_step_on_a_matmul_gradient_runs_as_one_gemm(monkeypatch, cblas):
    """W - lr * (dz.T @ x), fused and planned in place over W, is one BLAS gemm (alpha =
    -lr, beta = 1) where numpy's BLAS can be called, numpy's path otherwise; the weights
    after two steps are those of the unfused graph either way."""
    from duograph.runtime.cpu import cblas as _cblas
    if cblas and not _cblas.available():
        pytest.skip("numpy is not built on its bundled OpenBLAS here")
    dg.config.cblas = cblas
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((5, 7)).astype(np.float32)
    xs = rng.standard_normal((3, 7)).astype(np.float32)
    runs = {}
    for level in ("O0", "O2"):
        g = dg.Graph("sgd")
        with g:
            w = dg.variable("w", w0.copy())
            x = dg.placeholder("x", ("N", 7))
            lr = dg.placeholder("lr", ())
            loss = dg.sum(dg.tanh(x @ dg.transpose(w, 0, 1)))
            (gw,) = dg.grad(loss, [w])
            g.update(w, w - lr * gw)
            g.outputs = [loss]
        exe = g.compile(passes=level)
        for _ in range(2):
            exe(x=xs, lr=np.float32(0.1))
        runs[level] = (exe, exe.state["w"].copy())
    np.testing.assert_allclose(runs["O2"][1], runs["O0"][1], rtol=1e-5, atol=1e-6)
    exe = runs["O2"][0]
    bodies = [n.attrs["sub"] for n in _fused(exe) if "matmul" in n.attrs["sub"].ops]
    updates = [b for b in bodies if b.ops == ["matmul", "mul", "sub"]]
    assert updates
    bound = fused_special._bind_gemm_update(updates[0], [(5, 3), (3, 7), (), (5, 7)], "auto")
    assert (bound is not None) == cblas


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_numba_compile_failure_falls_back_to_numpy_chunks_with_a_warning(monkeypatch):
    set_cpu_strategy("numba")

    def broken(source):
        raise RuntimeError("no compiler today")
    monkeypatch.setattr(fused_numba, "load_kernel", broken)
    g = dg.Graph("fallback")
    with g:
        x = dg.placeholder("x", ("N",))
        y = dg.tanh(x * 2.0) + 1.0
    xs = _x(1000)
    exe = g.compile(outputs=[y], passes=["fuse"])
    with pytest.warns(RuntimeWarning, match="no compiler today"):
        (got,) = exe(x=xs)
    np.testing.assert_allclose(got, np.tanh(xs * 2) + 1, rtol=1e-6)
    (again,) = exe(x=xs)                       # the plan stays on numpy, no second warning
    np.testing.assert_allclose(again, got)
    plans = [p for n in _fused(exe) for p in _plans_of(n.attrs["sub"]).values()
             if isinstance(p, fused_numba.NumbaPlan)]
    assert plans and all(p.failed for p in plans)


def test_path_search_agrees_with_networkx_on_random_dags():
    import networkx as nx
    from duograph.passes.fusion import _has_path
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(2, 30))
        dag = nx.DiGraph()
        dag.add_nodes_from(range(n))
        for _ in range(int(rng.integers(0, 3 * n))):
            a, b = sorted(rng.choice(n, 2, replace=False))
            dag.add_edge(int(a), int(b))
        for _ in range(10):
            s, t = (int(v) for v in rng.choice(n, 2))
            assert _has_path(dag, s, t) == nx.has_path(dag, s, t), (trial, s, t)


def test_fusing_a_long_chain_is_near_linear():
    """Counted, not timed: the cycle search visits a bounded number of groups per merge
    on a chain (it used to walk the rest of the chain on every merge)."""
    from duograph.passes import fusion
    visits = []
    real = fusion._has_path

    def counting(dag, s, t):
        before = len(visits)
        succ = dag.succ

        class Counter(dict):
            def __getitem__(self, k):
                visits.append(k)
                return succ[k]
        dag_view = type("V", (), {"succ": Counter(), "pred": _CountPred(dag.pred, visits)})
        result = real(dag_view, s, t)
        assert len(visits) - before <= 8
        return result
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", (64,))
        h = x
        for i in range(400):
            h = dg.tanh(h) * 1.5 if i % 2 else dg.exp(h) + 0.1
    work, _ = clone(g, [h])
    fusion._has_path = counting
    try:
        work, changed = fuse_elementwise(work)
    finally:
        fusion._has_path = real
    assert changed and len(fused_nodes(work)) == 1
    assert len(visits) > 400          # the search ran on every merge, a few steps each


class _CountPred:
    def __init__(self, pred, visits):
        self.pred, self.visits = pred, visits

    def __getitem__(self, k):
        self.visits.append(k)
        return self.pred[k]


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


def _relu_backward_body(rows, n, m, dtype):
    g = dg.Graph("relu_bwd")
    with g:
        gv = dg.placeholder("g", (rows, n), dtype)
        wv = dg.placeholder("w", (n, m), dtype)
        zv = dg.placeholder("z", (rows, m), dtype)
        g.outputs = [dg.where(zv > 0, gv @ wv, 0.0)]
    (node,) = fused_nodes(passes.optimize(g, ["fuse"]))
    return node


def _specials(a, rng):
    """``a`` with NaN, +-inf, -0.0 and +0.0 sprinkled in."""
    flat = a.reshape(-1)
    for v in (np.nan, np.inf, -np.inf, -0.0, 0.0):
        flat[rng.integers(0, flat.size, max(1, flat.size // 16))] = v
    return a


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # inf - inf in the matmul
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows,n,m", [(1, 1, 1), (7, 5, 3), (33, 17, 129), (128, 10, 256)])
@pytest.mark.parametrize("strategy", ["auto", "numpy"])     # a numba loop; numpy passes
def test_bound_relu_backward_masks_the_product_in_place(dtype, rows, n, m, strategy):
    """``where(z > 0, g @ w, 0)`` bound to its shapes writes the product straight into the
    output and applies the mask there, also when the output is z's own buffer: the bits
    equal numpy's matmul then where, and the general path's, with NaN, infinities and
    signed zeros in z and g."""
    with dg.config.override(fused_strategy=strategy):
        _check_relu_backward(dtype, rows, n, m)


def _check_relu_backward(dtype, rows, n, m):
    node = _relu_backward_body(rows, n, m, dtype)
    body = node.attrs["sub"]
    rng = np.random.default_rng(rows * 1000 + m)
    feeds = {"g": _specials(rng.standard_normal((rows, n)).astype(dtype), rng),
             "w": rng.standard_normal((n, m)).astype(dtype),
             "z": _specials(rng.standard_normal((rows, m)).astype(dtype), rng)}
    feeds["g"][0] = -0.0                      # a row of -0.0: products of signed zeros
    arrays = [feeds[v.name] for v in node.inputs]
    want = np.where(feeds["z"] > 0, np.matmul(feeds["g"], feeds["w"]), np.zeros((), dtype))
    (general,) = cpu_backend.fused_compiler.run(body, arrays)
    np.testing.assert_array_equal(_bits(general), _bits(want))
    runner = cpu_backend.fused_compiler.bind(body, [a.shape for a in arrays])
    assert runner is not None and "_bind_masked" in runner.__qualname__
    out = np.full(want.shape, 7, dtype)
    assert runner(arrays, [out])
    np.testing.assert_array_equal(_bits(out), _bits(want))
    # in place: the output is z's buffer (what the planner gives it)
    zi = [v.name for v in node.inputs].index("z")
    inplace = list(arrays)
    inplace[zi] = arrays[zi].copy()
    assert runner(inplace, [inplace[zi]])
    np.testing.assert_array_equal(_bits(inplace[zi]), _bits(want))
    # an output overlapping the product's operands: declined, nothing written
    gi = [v.name for v in node.inputs].index("g")
    if n == m:
        assert not runner(arrays, [arrays[gi]])


@pytest.mark.parametrize("rows", [8, 600])
def test_bound_prologue_uses_a_spare_output_only_when_it_overlaps_no_input(rows):
    """``relu(h @ w + b)`` with h of the result's type: the output is kept free for an
    in-place write over h, so it is no home; bound, the matmul runs into it when the plan
    gave it its own buffer, and into scratch when it is h's buffer. Both equal the general
    path bit for bit."""
    g = dg.Graph("layer2")
    with g:
        h = dg.placeholder("h", (rows, 64))
        w = dg.placeholder("w", (64, 64))
        b = dg.placeholder("b", (64,))
        g.outputs = [dg.relu(h @ w + b)]
    (node,) = fused_nodes(passes.optimize(g, ["fuse"]))
    body = node.attrs["sub"]
    assert body.prologue_homes() == {}
    assert fused_special._spare_homes(body, {}) == {0: 0}
    feeds = {"h": _x(rows, 64), "w": _x(64, 64, seed=1), "b": _x(64, seed=2)}
    feeds["h"][:3] = np.nan
    arrays = [feeds[v.name] for v in node.inputs]
    (want,) = cpu_backend.fused_compiler.run(body, arrays)
    runner = cpu_backend.fused_compiler.bind(body, [a.shape for a in arrays])
    assert runner is not None
    out = np.full(want.shape, 7, np.float32)
    assert runner(arrays, [out])
    np.testing.assert_array_equal(_bits(out), _bits(want))
    hi = [v.name for v in node.inputs].index("h")
    inplace = list(arrays)
    inplace[hi] = arrays[hi].copy()
    assert runner(inplace, [inplace[hi]])
    np.testing.assert_array_equal(_bits(inplace[hi]), _bits(want))


# -- planned executables: numba from NUMBA_MIN_PLANNED, and the call memo --------------------
def _numba_plans(exe):
    return [p for node in _fused(exe) for k, p in _plans_of(node.attrs["sub"]).items()
            if k is not None and isinstance(p, fused_numba.NumbaPlan)]


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_planned_bias_relu_runs_numba_from_the_planned_threshold():
    """A Linear's bias + ReLU epilogue over 128 x 256 (below NUMBA_MIN_ELEMENTS, above
    NUMBA_MIN_PLANNED) runs one numba loop at O2, with O0's bits, and numpy's plan in an
    unplanned executable; NaN, -0.0 and negative values go through ReLU as numpy's."""
    rows, cols = 128, 256
    assert fused_numba.NUMBA_MIN_PLANNED <= rows * cols < fused_numba.NUMBA_MIN_ELEMENTS
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 32)).astype(np.float32)
    w = rng.standard_normal((32, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    b[:3] = [np.nan, -0.0, -np.inf]
    g = dg.Graph("bias_relu")
    with g:
        xv = dg.placeholder("x", (rows, 32))
        y = dg.relu(dg.matmul(xv, dg.constant(w)) + dg.constant(b))
    ref = g.compile(outputs=[y])(x=x)[0]
    planned = g.compile(outputs=[y], passes="O2")
    unplanned = g.compile(outputs=[y], passes=["fuse"])
    for _ in range(3):                    # the second and third calls hit the memo
        got = planned(x=x)[0]
        np.testing.assert_array_equal(got, ref)
        assert np.array_equal(np.signbit(got), np.signbit(ref))
    np.testing.assert_array_equal(unplanned(x=x)[0], ref)
    assert _numba_plans(planned)
    assert not _numba_plans(unplanned)


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (the `fast` extra)")
def test_numba_plan_memo_rereads_scalars_and_follows_new_arrays():
    """A remembered call on the same arrays skips the preparation but still reads a
    one-element input's current value; other arrays, or a call without ``remember``,
    are prepared anew; an output written over its input keeps the alias kernel."""
    n = 4 * fused_numba.NUMBA_MIN_PLANNED
    g = dg.Graph("axpy")
    with g:
        p = dg.placeholder("p", (n,))
        s = dg.placeholder("s", ())
        q = dg.placeholder("q", (n,))
        y = p - s * q
    exe = g.compile(outputs=[y], passes=["fuse"])
    (node,) = _fused(exe)
    body = node.attrs["sub"]
    lay = fused_strategy._layout(body)
    rng = np.random.default_rng(0)
    pa, qa = rng.standard_normal((2, n)).astype(np.float32)
    sa = np.array(0.5, np.float32)

    def order(pv, sv, qv):                # the body's inputs in the fused node's order
        arrays = {"p": pv, "s": sv, "q": qv}
        return [arrays[v.name] for v in node.inputs]
    assert sorted(v.name for v in node.inputs) == ["p", "q", "s"]
    ins = order(pa, sa, qa)
    plan = fused_strategy._plan(body, lay, ins, fused_numba.NUMBA_MIN_PLANNED)
    assert isinstance(plan, fused_numba.NumbaPlan)
    out = np.empty(n, np.float32)
    for scale in (0.5, 0.25, -2.0):
        sa[()] = scale                    # a learning rate changed in place
        plan(ins, [out], remember=True)
        np.testing.assert_array_equal(out, pa - np.float32(scale) * qa)
    assert plan._memo is not None and any(a is pa for a in plan._memo[0])
    other = pa.copy() + 1
    plan(order(other, sa, qa), [out], remember=True)
    np.testing.assert_array_equal(out, other - sa * qa)
    assert any(a is other for a in plan._memo[0])
    # in place: the output is the first input's own buffer (the SGD update's form)
    expect = other - sa * qa
    for _ in range(2):
        plan(order(other, sa, qa), [other], remember=True)
        np.testing.assert_array_equal(other, expect)
        expect = expect - sa * qa
    fresh = plan(order(pa, sa, qa))          # no ``out``: nothing remembered
    np.testing.assert_array_equal(fresh[0], pa - sa * qa)
    assert plan._memo[1][0]() is other       # (outputs held weakly)


def test_numba_float32_gelu_tanh_error_bound():
    """The fused float32 GELU-tanh chain with the rational tanh (what O2 runs on numba):
    its largest absolute error against the chain in float64, over every 9973rd float32 in
    (-12, 12), is below 1e-6 (measured 8.4e-7 at x = 4.26; numpy's exact float32 ops give
    4.7e-7: the approximation adds at most ~4e-7). Relative error is no measure here: near
    x = -5 the result is ~1e-6 and 1 + tanh cancels in float32 for exact tanh too."""
    set_cpu_strategy("numba")
    g = dg.Graph("gelu")
    with g:
        x = dg.placeholder("x", ("N",))
        g.outputs = [0.5 * x * (1.0 + dg.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))]
    bits = np.arange(0, np.float32(12).view(np.int32), 9973, dtype=np.int32)
    xs = np.concatenate([bits.view(np.float32), -bits.view(np.float32)])
    exe = g.compile(passes="O2")
    (got,) = exe(x=xs)
    assert any(isinstance(p, fused_numba.NumbaPlan)
               for node in _fused(exe) for p in _plans_of(node.attrs["sub"]).values())
    x64 = xs.astype(np.float64)
    want = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    err = np.abs(got - want)
    assert err.max() < 1e-6
    assert err.max() > 0          # (the approximation is there: not exact float64 maths)
