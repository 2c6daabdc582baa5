"""The planned runtime: executables whose intermediates live in one arena laid out by the
memory planner (``g.compile(passes="O2")`` or ``plan=True``).

1. the op table, forward and gradient graphs: planned runs equal interpreted ones exactly
   (``out=`` kernels are bit-for-bit the kernels), also on a second run over the same arena;
2. every plan an executable makes passes the verifier; ``exe.memory_plan``,
   ``exe.kernel_count`` and ``plan_for`` for graph executables and ``dg.compile``;
3. returned arrays are the caller's: later runs never change them;
4. in-place reuse never corrupts a value still needed (chains that read an input after a
   sibling could have overwritten it, state swaps, views of state);
5. steady state: a run allocates far less than the arena (tracemalloc sees numpy's buffers).
"""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.passes.memory import verify_plan
from steps import training_step
from op_samples import (F64, OPS, Sample, assert_matches, build, grad_targets, reference,
                        tanh_loss_grads)


def _samples(select):
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if select(op, s)]


FORWARD = _samples(lambda op, s: not op.random)
GRAD = _samples(lambda op, s: bool(grad_targets(op, s)))


def assert_identical(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}{got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    np.testing.assert_array_equal(got, want, err_msg=what)


def run_both(graph, outputs, feeds):
    """(interpreted results, planned results of run 1, planned results of run 2)."""
    plain = graph.compile(outputs=outputs)
    planned = graph.compile(outputs=outputs, plan=True)
    assert not plain.planned and planned.planned
    first = planned(**feeds)
    snapshot = [np.array(a, copy=True) for a in first]
    second = planned(**feeds)
    for a, b in zip(first, snapshot):      # the second run never wrote into the first's
        assert_identical(a, b, "first result after a second run: ")
    verify_plan(planned.graph, planned.memory_plan)
    return plain(**feeds), first, second


# -- 1. the op table -------------------------------------------------------------------------
@pytest.mark.parametrize("op, sample", FORWARD)
def test_planned_forward_equals_interpreter(op, sample: Sample):
    built = build(op, sample)
    want, first, second = run_both(built.graph, built.outputs, built.feeds)
    for k, (w, a, b) in enumerate(zip(want, first, second)):
        assert_identical(a, w, f"output {k}: ")
        assert_identical(b, w, f"output {k} (run 2): ")
    for k, (a, r) in enumerate(zip(first, reference(op, sample))):
        assert_matches(a, r, op.tol, f"output {k} vs numpy: ")


@pytest.mark.parametrize("op, sample", GRAD)
def test_planned_gradients_equal_interpreter(op, sample: Sample):
    targets = grad_targets(op, sample)
    built = build(op, sample)
    rng = np.random.default_rng(0)
    feeds = dict(built.feeds)
    with built.graph:
        loss = None
        for k, v in enumerate(built.outputs):
            if v.dtype != F64:
                continue
            feeds[f"ct{k}"] = rng.normal(size=v.shape)
            term = dg.sum(v * dg.placeholder(f"ct{k}", v.shape, F64))
            loss = term if loss is None else loss + term
        grads = dg.grad(loss, [built.inputs[i] for i in targets])
    want, first, second = run_both(built.graph, list(grads) + [loss], feeds)
    for k, (w, a, b) in enumerate(zip(want, first, second)):
        assert_identical(a, w, f"gradient {k}: ")
        assert_identical(b, w, f"gradient {k} (run 2): ")


@pytest.mark.parametrize("op, sample", GRAD)
def test_op_table_agrees_between_o0_o1_o2(op, sample: Sample):
    """Forward and gradient graphs of every sample through each pipeline: O1 and O2 (fused,
    rescheduled, planned) agree with O0 within the op's tolerance."""
    built = build(op, sample)
    grads = tanh_loss_grads(built, grad_targets(op, sample))[:-1]
    outputs = list(built.outputs) + grads
    want = built.graph.compile(outputs=outputs)(**built.feeds)
    for passes in ("O1", "O2"):
        got = built.graph.compile(outputs=outputs, passes=passes)(**built.feeds)
        for k, (a, w) in enumerate(zip(got, want)):
            assert_matches(a, w, op.tol, f"{passes} output {k}: ")


# -- 2. plans: inspectable and verified ---------------------------------------------------------
def mlp_step(hidden=64, lr=0.1, seed=0):
    dg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.GELU(), nn.Linear(hidden, 5))
    g, loss = training_step(model, 20, lr)
    return g, loss, model


def batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 20)).astype(np.float32),
            rng.integers(0, 5, n).astype(np.int64))


def test_o2_training_step_is_planned_and_matches_o0():
    losses = {}
    for level in ("O0", "O2"):
        g, loss, model = mlp_step()
        exe = g.compile(outputs=[loss], passes=level)
        got = []
        for i in range(5):
            x, y = batch(16 + 8 * (i % 2), seed=i)       # two shape signatures
            got.append(float(exe(x=x, y=y)[0]))
        losses[level] = (got, [p.array.copy() for p in model.parameters()])
        if level == "O2":
            assert exe.planned and exe.memory_plan is not None
            assert exe.memory_plan.shapes == {"N": 16}    # the last run's
            assert exe.plan_for(N=24).shapes == {"N": 24}
            for n in (16, 24):
                verify_plan(exe.graph, exe.plan_for(N=n))
            plan = exe.memory_plan
            assert plan.arena_bytes <= 1.05 * plan.lower_bound_bytes
            assert plan.arena_bytes <= 0.5 * plan.no_reuse_bytes
            # the SGD (momentum) updates are written straight into the parameters' buffers
            assert len(plan.inplace_updates) >= 6
            fused = [n for n in exe.graph.nodes if n.op.name == "fused"]
            assert fused and exe.kernel_count < len(g.nodes)
            assert "fused(" in exe.graph.to_text()
        else:
            assert not exe.planned and exe.memory_plan is None
    np.testing.assert_allclose(losses["O2"][0], losses["O0"][0], rtol=1e-5)
    for a, b in zip(losses["O2"][1], losses["O0"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_plan_for_needs_every_symbol_and_a_planned_executable():
    g, loss, _ = mlp_step()
    exe = g.compile(outputs=[loss], passes="O2")
    assert exe.memory_plan is None            # "N" is not bound before the first run
    with pytest.raises(dg.DuographError, match="symbolic dims"):
        exe.plan_for()
    with pytest.raises(dg.DuographError, match="not planned"):
        g.compile(outputs=[loss]).plan_for(N=3)
    static = dg.Graph("static")
    with static:
        a = dg.placeholder("a", (4, 4))
        static.outputs = [dg.tanh(a @ a) * 2.0]
    planned = static.compile(plan=True)
    assert planned.memory_plan is not None and planned.memory_plan.shapes == {}


def test_plan_false_turns_planning_off_at_o2():
    g, loss, _ = mlp_step()
    exe = g.compile(outputs=[loss], passes="O2", plan=False)
    assert not exe.planned and exe.memory_plan is None
    x, y = batch(8)
    assert np.isfinite(exe(x=x, y=y)[0])


def test_dg_compile_exposes_the_plan_and_kernel_count():
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))

    def loss_fn(x):
        return (model(x) ** 2).mean()

    fast = dg.compile(loss_fn, passes="O2")
    x = dg.randn(8, 6)
    loss = fast(x)
    loss.backward()
    plan = fast.memory_plan
    assert plan is not None and plan.arena_bytes > 0
    assert plan.arena_bytes <= plan.no_reuse_bytes
    assert fast.kernel_count > 0
    want = loss_fn(x)
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-6)


# -- 3. and 4. results stay the caller's; in-place reuse never corrupts ----------------------
def test_outputs_are_copied_out_of_the_arena():
    g = dg.Graph("outs")
    with g:
        x = dg.placeholder("x", (32,))
        a = dg.exp(x)
        b = dg.reshape(a * 2.0, (4, 8))      # a view of an arena buffer
        g.outputs = [a, b, dg.sum(b)]
    exe = g.compile(plan=True)
    x1, x2 = np.ones(32, np.float32), np.zeros(32, np.float32)
    a1, b1, s1 = exe(x=x1)
    a2, b2, _ = exe(x=x2)
    np.testing.assert_allclose(a1, np.exp(x1))
    np.testing.assert_allclose(b1, (2 * np.exp(x1)).reshape(4, 8))
    np.testing.assert_allclose(a2, np.ones(32))
    for p in (a1, b1, s1):
        for q in (a2, b2):
            assert not np.shares_memory(p, q)
    arena = exe.steps.last_program.arena
    assert not any(np.shares_memory(arena, r) for r in (a1, b1, s1, a2, b2))


def test_results_a_step_writes_are_fresh_arrays_not_copies():
    """exp(x) is returned: its step writes straight into a new array each run (no copy out
    of the arena); the reshape of it views that array; the exp still feeds the tanh."""
    g = dg.Graph("fresh")
    with g:
        x = dg.placeholder("x", (16,))
        e = dg.exp(x)
        g.outputs = [e, dg.reshape(e, (4, 4)), dg.tanh(e)]
    exe = g.compile(plan=True)
    prog_runs = []
    for value in (0.0, 1.0):
        outs = exe(x=np.full(16, value, np.float32))
        prog_runs.append(outs)
        e_out, r_out, t_out = outs
        np.testing.assert_allclose(e_out, np.exp(value))
        np.testing.assert_allclose(r_out, np.full((4, 4), np.exp(value)))
        np.testing.assert_allclose(t_out, np.tanh(np.exp(value)), rtol=1e-6)
        assert e_out.base is None and t_out.base is None        # owned, not arena views
    prog = exe.steps.last_program
    assert len(prog.fresh) == 2 and prog.copy_outputs == [False, True, False]
    np.testing.assert_allclose(prog_runs[0][0], 1.0)           # not overwritten by run 2


def _gelu_graph(n: int):
    g = dg.Graph("gelu")
    with g:
        x = dg.placeholder("x", (n,))
        g.outputs = [0.5 * x * (1.0 + dg.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))]
    return g


@pytest.mark.parametrize("strategy", ["auto", "numpy", "ops"])
def test_returned_array_is_reused_only_once_nobody_holds_it(strategy):
    """A fresh result dropped by the caller is written again by the next run (no page
    faults for a new big array per call); one the caller still holds, directly or through
    a view, a memoryview or a feed, never is. Values stay right either way."""
    n = 1 << 14                   # past NUMBA_MIN_PLANNED: the numba plan where it serves
    with dg.config.override(fused_strategy=strategy):
        exe = _gelu_graph(n).compile(passes="O2")
        x = np.linspace(-3, 3, n, dtype=np.float32)
        (first,) = exe(x=x)
        want = first.copy()
        (held,) = exe(x=x)
        assert held is not first                          # first was still held
        ident = id(held)
        del first, held
        (again,) = exe(x=x)
        assert id(again) == ident                         # dropped: written again
        np.testing.assert_array_equal(again, want)
        view = again[::2]
        (other,) = exe(x=x * 2)
        assert other is not again and not np.shares_memory(other, again)
        np.testing.assert_array_equal(view, want[::2])    # the view's bytes untouched
        del view
        mv = memoryview(other)
        (third,) = exe(x=x)
        assert not np.shares_memory(third, np.asarray(mv))
        del mv
        fed = third
        (fourth,) = exe(x=fed)                            # held as a feed: not its own out
        assert fourth is not fed
        np.testing.assert_array_equal(fed, want)


def test_inplace_reuse_keeps_values_still_needed():
    """exp(x) dies at the mul, which may overwrite it; x2 = x*x is read again at the end, so
    nothing may take its bytes before that: the numbers say whether a buffer was reused
    too early."""
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", (64,))
        x2 = x * x
        e = dg.exp(x2)
        m = e * 3.0
        t = dg.tanh(m)
        s = dg.sin(t)
        g.outputs = [s + x2, dg.amax(m, dim=0)]
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(64).astype(np.float32)
    for passes in (None, "O2"):
        exe = g.compile(passes=passes, plan=True)
        got, top = exe(x=xs)
        sq = xs * xs
        want = np.sin(np.tanh(np.exp(sq) * 3.0)) + sq
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(top, np.max(np.exp(sq) * 3.0), rtol=1e-6)
        plan = exe.memory_plan
        verify_plan(exe.graph, plan)
        if passes is None:
            assert plan.aliases, "the chain should reuse buffers in place"


def test_where_in_place_over_its_true_branch():
    """where(c, a, b) may overwrite a (it dies there): the out= kernel must still read it."""
    g = dg.Graph("where")
    with g:
        x = dg.placeholder("x", (16,))
        b = dg.placeholder("b", (16,))
        a = dg.exp(x)
        g.outputs = [dg.where(x > 0, a, b) * 1.0]
    exe = g.compile(plan=True)
    xs = np.linspace(-1, 1, 16).astype(np.float32)
    bs = -np.ones(16, np.float32)
    (got,) = exe(x=xs, b=bs)
    np.testing.assert_allclose(got, np.where(xs > 0, np.exp(xs), bs), rtol=1e-6)


def test_state_swap_and_views_of_state_when_planned():
    g = dg.Graph("swap")
    with g:
        a = dg.variable("a", np.arange(6, dtype=np.float32).reshape(2, 3))
        b = dg.variable("b", np.ones((2, 3), np.float32))
        g.update(a, b)
        g.update(b, dg.reshape(dg.reshape(a, (3, 2)), (2, 3)))   # a view of the old a
        g.outputs = [a + 0.0]
    exe = g.compile(passes="O2")
    assert exe.planned
    (old_a,) = exe()
    np.testing.assert_array_equal(old_a, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(exe.state["a"], np.ones((2, 3)))
    np.testing.assert_array_equal(exe.state["b"], np.arange(6).reshape(2, 3))
    exe()
    np.testing.assert_array_equal(exe.state["a"], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(exe.state["b"], np.ones((2, 3)))


def test_bound_parameters_are_updated_in_place_and_versions_bumped():
    g, loss, model = mlp_step()
    exe = g.compile(outputs=[loss], passes="O2")
    w = model[0].weight
    before_data, before_version = w.array, w._version[0]
    first = w.array.copy()
    x, y = batch(8)
    exe(x=x, y=y)
    assert w.array is before_data                  # the same buffer, written in place
    assert w._version[0] > before_version
    assert not np.array_equal(w.array, first)


def test_kernel_result_of_the_wrong_shape_is_a_clear_error():
    """A kernel returning a broadcastable but wrong shape is refused, never broadcast
    silently into the planned buffer."""
    from duograph.graphlib.registry import REGISTRY
    from duograph.runtime.cpu import cpu_backend
    g = dg.Graph("bad")
    with g:
        x = dg.placeholder("x", (4, 3))
        g.outputs = [dg.softplus(x) * 2.0]
    op = REGISTRY["softplus"]
    original = cpu_backend.kernel(op)
    cpu_backend.register_kernel(op, lambda xp, x, **attrs: xp.zeros((3,), x.dtype))
    try:
        exe = g.compile(plan=True)
        with pytest.raises(dg.KernelError, match=r"softplus .*shape \[3\], planned \[4, 3\]"):
            exe(x=np.ones((4, 3), np.float32))
    finally:
        cpu_backend.register_kernel(op, original)


# -- 5. steady state ----------------------------------------------------------------------------
def test_steady_state_allocates_far_less_than_the_arena():
    g, loss, _ = mlp_step(hidden=256)
    exe = g.compile(outputs=[loss], passes="O2")
    x, y = batch(64)
    exe(x=x, y=y)
    exe(x=x, y=y)
    tracemalloc.start()
    try:
        exe(x=x, y=y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    plan = exe.memory_plan
    # kernels without an out= form (log_softmax in the loss, ...) still allocate their small
    # results; the big activations and gradients never are
    assert peak < 0.25 * plan.no_reuse_bytes, (peak, plan.summary())


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "uint8"])
def test_where_out_kernel_is_bit_exact_in_and_out_of_place(dtype):
    """The out= form of where moves bits with masks: NaNs, -0.0 and infinities come
    through exactly as numpy's where gives them, with b a scalar, a row or a full array,
    and with out being a or b."""
    from duograph.graphlib.registry import REGISTRY
    from duograph.runtime.cpu import cpu_backend
    kernel = cpu_backend.out_kernel(REGISTRY["where"])
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((16, 9)) * 40).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    c = rng.random((16, 9)) > 0.5
    specials = (0.0, -0.0, np.nan) if np.dtype(dtype).kind == "f" else (0, 3)
    for b in ([np.asarray(v, dtype) for v in specials]
              + [(rng.standard_normal(9) * 40).astype(dtype),
                 (rng.standard_normal((16, 9)) * 40).astype(dtype)]):
        want = np.where(c, a, b).view(f"u{np.dtype(dtype).itemsize}")
        for alias in ("none", "a", "b"):
            aa, bb = a.copy(), b.copy()
            if alias == "b" and bb.shape != a.shape:
                continue
            out = {"none": np.empty_like(a), "a": aa, "b": bb}[alias]
            assert kernel(np, c, aa, bb, out=out)
            np.testing.assert_array_equal(out.view(want.dtype), want, err_msg=alias)


def test_views_are_reused_only_while_they_see_the_same_array():
    """A view step (permute, reshape...) keeps its result while its input is the same array
    (a view follows the data); a new array, or a kernel that had to copy, recomputes it."""
    g = dg.Graph("views")
    with g:
        x = dg.placeholder("x", (4, 6))
        t = dg.permute(x, (1, 0))                 # a view of the feed
        r = dg.reshape(t, (24,))                  # must copy: t is not contiguous
        g.outputs = [t * 1.0, r * 1.0]
    exe = g.compile(plan=True)
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t1, r1 = exe(x=a)
    a *= -1.0                                     # the same array, new contents
    t2, r2 = exe(x=a)
    np.testing.assert_array_equal(t2, -t1)
    np.testing.assert_array_equal(r2, -r1)       # the copying reshape was not reused
    b = np.ones((4, 6), np.float32)               # another array
    t3, r3 = exe(x=b)
    np.testing.assert_array_equal(t3, np.ones((6, 4)))
    np.testing.assert_array_equal(r3, np.ones(24))


def test_planned_executable_is_safe_to_call_from_threads():
    """Runs of one planned executable share its arena: they take turns."""
    import threading
    g = dg.Graph("threads")
    with g:
        x = dg.placeholder("x", (64, 64))
        h = dg.tanh(x @ x) * 2.0
        g.outputs = [dg.sum(h * h, dim=1)]
    exe = g.compile(passes="O2")
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4)]
    want = [g.compile()(x=f)[0] for f in feeds]
    errors = []

    def work(k):
        for _ in range(30):
            (got,) = exe(x=feeds[k])
            if not np.array_equal(got, want[k]):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,to", [((128, 256), (256,)), ((7, 3, 5), (3, 5)),
                                   ((4, 6, 1), (1, 6, 1)), ((2, 3, 4, 5), (3, 1, 1))])
def test_prepared_sum_to_is_the_out_form_bit_for_bit(dtype, xs, to):
    """The planned runtime's prepared ``sum_to`` (axes and BLAS split found once) writes
    the bits of the out= form and of the kernel, NaN and infinities included, and arrays it
    was not made for (another dtype, a strided view) the general path's."""
    from duograph.graphlib.ops.shape import sum_to_op
    from duograph.runtime.cpu import cpu_backend
    from duograph.runtime.cpu.kernels import sum_to
    from duograph.runtime.cpu.out_kernels import _sum_to_out
    runner = cpu_backend.prepare_out(sum_to_op, {"shape": to}, [xs])
    assert runner is not None
    rng = np.random.default_rng(len(xs))
    x = rng.standard_normal(xs).astype(dtype)
    x.reshape(-1)[::7] = np.inf
    x.reshape(-1)[::11] = np.nan
    x.reshape(-1)[::13] = -0.0
    want = np.asarray(sum_to(np, x, to))
    out = np.full(to, 7, dtype)
    assert runner((x,), (out,))
    via_out = np.full(to, 7, dtype)
    assert _sum_to_out(np, x, out=via_out, shape=to)
    bits = f"u{np.dtype(dtype).itemsize}"
    np.testing.assert_array_equal(out.view(bits), want.reshape(to).view(bits))
    np.testing.assert_array_equal(out.view(bits), via_out.view(bits))
    other = "float64" if dtype == "float32" else "float32"
    cast = np.full(to, 7, other)
    assert runner((x,), (cast,))
    np.testing.assert_array_equal(cast, want.reshape(to).astype(other))
    strided = np.stack([x, x], axis=-1)[..., 0]              # not C-contiguous
    out[...] = 7
    assert runner((strided,), (out,))
    np.testing.assert_array_equal(out, np.asarray(sum_to(np, strided, to)).reshape(to))
    ints = np.arange(math.prod(xs), dtype=np.int64).reshape(xs)
    got = np.zeros(to, np.int64)
    assert runner((ints,), (got,))
    np.testing.assert_array_equal(got, np.asarray(sum_to(np, ints, to)).reshape(to))


def test_sum_to_is_prepared_only_where_blas_sums():
    """No prepared form for sum_to with nothing to sum, or a reduced dim between kept
    ones (numpy's sum serves those)."""
    from duograph.graphlib.ops.shape import sum_to_op
    from duograph.runtime.cpu import cpu_backend
    assert cpu_backend.prepare_out(sum_to_op, {"shape": (3, 4)}, [(3, 4)]) is None
    assert cpu_backend.prepare_out(sum_to_op, {"shape": (1, 4, 1)}, [(3, 4, 5)]) is not None
    assert cpu_backend.prepare_out(sum_to_op, {"shape": (3, 1, 5)}, [(3, 4, 5)]) is None


# -- 6. the prepared call ---------------------------------------------------------------------
def _prepared_graph():
    """A graph with two feeds, owned state, bound state (an eager tensor) and two outputs,
    one a view of a feed."""
    t = dg.tensor(np.full((2, 3), 2.0, np.float32))
    g = dg.Graph("prep")
    with g:
        x = dg.placeholder("x", (2, 3))
        y = dg.placeholder("y", (2, 3))
        s = dg.variable("s", np.zeros((2, 3), np.float32))
        b = g.bind_state(t, "t")
        g.update(s, s + x * y)
        g.update(b, b * x)
        g.outputs = [x * y + b, dg.reshape(x, (3, 2))]
    return g, t


def test_prepared_call_runs_as_run_does():
    """``exe.prepare(names)`` takes the feeds in the order of ``names`` and gives what
    ``exe.run`` gives: the same outputs (the caller's own arrays), the same state updates,
    the bound tensor written in place with its version bumped."""
    rng = np.random.default_rng(0)
    feeds = [(rng.standard_normal((2, 3)).astype(np.float32),
              rng.standard_normal((2, 3)).astype(np.float32)) for _ in range(3)]
    g, t = _prepared_graph()
    ref_g, ref_t = _prepared_graph()
    exe, ref = g.compile(passes="O2"), ref_g.compile(passes="O2")
    call = exe.prepare(["y", "x"])
    buffer = t.array
    for x, y in feeds:
        version = t._version[0]
        got, want = call([y, x]), ref(x=x, y=y)
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
        assert not np.shares_memory(got[1], x)               # a view of a feed: copied
        assert t.array is buffer and t._version[0] > version
        assert t.array.tobytes() == ref_t.array.tobytes()
        assert exe.state["s"].tobytes() == ref.state["s"].tobytes()
    first = got[0].copy()
    call([y, x])
    assert got[0].tobytes() == first.tobytes()      # a later call never writes into it
    assert exe.memory_plan is not None


def test_prepared_call_declines_other_arrays_and_runs_nothing():
    """A feed or a state array of another type, dtype or shape: the call returns None and
    leaves the state as it was (the caller takes ``exe.run`` and its clear error); a state
    array replaced by one of the same type is read."""
    g, t = _prepared_graph()
    exe = g.compile(passes="O2")
    call = exe.prepare(["x", "y"])
    x = np.ones((2, 3), np.float32)
    for bad in (x.astype(np.float64), np.ones((3, 2), np.float32), x.tolist(),
                dg.tensor(x)):
        assert call([bad, x]) is None
        assert call([x, bad]) is None
    assert not exe.state["s"].any() and t._version[0] == 0
    with pytest.raises(dg.FeedError, match="feed 'x' has dtype float64"):
        exe.run({"x": x.astype(np.float64), "y": x})
    t.array = np.full((2, 3), 3.0, np.float32)       # another array of the same type: read
    (out, _) = call([x, x])
    np.testing.assert_array_equal(out, np.full((2, 3), 4.0))
    np.testing.assert_array_equal(t.array, np.full((2, 3), 3.0))
    t.array = np.ones((3, 3), np.float32)
    assert call([x, x]) is None
    assert exe.state["s"].tolist() == [[1.0] * 3] * 2


def test_prepare_needs_every_placeholder_once_and_a_planned_static_executable():
    g, _ = _prepared_graph()
    exe = g.compile(passes="O2")
    for names in (["x"], ["x", "y", "z"], ["x", "x", "y"]):
        with pytest.raises(dg.FeedError, match=r"every placeholder once.*\['x', 'y'\]"):
            exe.prepare(names)
    with pytest.raises(dg.GraphError, match="not planned"):
        g.compile(passes="O0").prepare(["x", "y"])
    h = dg.Graph("sym")
    with h:
        v = dg.placeholder("v", ("N", 3))
        h.outputs = [v * 2.0]
    with pytest.raises(dg.GraphError, match=r"symbolic in \['N'\]"):
        h.compile(passes="O2").prepare(["v"])
