"""Memory planning, memory-aware scheduling and rematerialisation (passes/memory.py,
schedule.py, remat.py): exact intervals and offsets on small graphs, the verifier, the MLP
training step against its lower bound, and every plan run through an arena simulator that
keeps each planned value in the bytes the plan gives it (a wrong plan corrupts a result)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import duograph as dg
from duograph.graphlib.rewrite import clone
from duograph.passes import PIPELINES
from duograph.graphlib.registry import REGISTRY
from duograph.passes import optimize
from duograph.passes.memory import MemoryPlanError, peak_live_bytes, plan_memory, verify_plan
from duograph.passes.remat import rematerialize
from duograph.passes.schedule import memory_aware_schedule
from duograph.runtime import Executable
from op_samples import OPS, as_tuple, map_leaves

F32 = np.float32


# -- helpers ------------------------------------------------------------------------------------
def run_in_arena(graph, plan, feeds):
    """Run ``graph`` in ``plan.order`` the way a planned executor must: every arena value
    lives in its bytes of one arena, views stay views, in-place state updates are written
    into the state's own array. Returns (outputs, state arrays by name)."""
    arena = np.zeros(plan.arena_bytes + plan.alignment, np.uint8)
    env = {id(v): np.asarray(feeds[v.name]) for v in graph.inputs if v.name in feeds}
    state = {v.name: np.array(graph.state_init[v], copy=True) for v in graph.state}
    for v in graph.state:
        env[id(v)] = state[v.name]
    with np.errstate(all="ignore"):
        for node in plan.order:
            args = [env[id(x)] for x in node.inputs]
            res = node.op.kernel(np, *args, **node.attrs)
            if not (node.op.multi_output or len(node.outputs) != 1):
                res = (res,)
            for o, r in zip(node.outputs, res):
                kind, where = plan.storage(o)
                if kind == "arena":
                    nbytes = plan.sizes[o]
                    buf = arena[where:where + nbytes].view(o.dtype).reshape(o.shape)
                    buf[...] = r
                    env[id(o)] = buf
                elif kind == "state":
                    env[id(where)][...] = r
                    env[id(o)] = env[id(where)]
                else:                                   # a view, or a constant
                    env[id(o)] = r if kind == "view" else np.array(r)
    outs = [np.array(env[id(o)]) for o in plan.outputs]
    for s, new in graph.updates.values():
        if env[id(new)] is not state[s.name]:
            state[s.name] = np.array(env[id(new)])
    return outs, state


def reference(graph, feeds):
    """Outputs and new state of one run of the plain executor (on a private clone)."""
    work, _ = clone(graph)
    exe = Executable(work, work.outputs)
    outs = exe(**feeds)
    return outs, {name: np.array(exe.state[name]) for name in exe.state}


def assert_same(got, want, rtol=1e-6, atol=1e-6):
    (go, gs), (wo, ws) = got, want
    for a, b in zip(go, wo):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    for name in ws:
        np.testing.assert_allclose(gs[name], ws[name], rtol=rtol, atol=atol, err_msg=name)


def mlp_step(batch, rng=None):
    """Training step of an MLP 784-256-256-10: forward, cross-entropy, grad, SGD update."""
    rng = rng or np.random.default_rng(0)
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", (batch, 784))
        y = dg.placeholder("y", (batch,), "int64")
        sizes = [784, 256, 256, 10]
        ws = [dg.variable(f"w{i}", (rng.standard_normal((a, b)) * 0.05).astype(F32))
              for i, (a, b) in enumerate(zip(sizes, sizes[1:]))]
        bs = [dg.variable(f"b{i}", np.zeros(b, F32)) for i, b in enumerate(sizes[1:])]
        h = x
        for i in range(3):
            h = h @ ws[i] + bs[i]
            if i < 2:
                h = dg.relu(h)
        loss = dg.nn.functional.cross_entropy(h, y)
        grads = dg.grad(loss, ws + bs)
        for p, gr in zip(ws + bs, grads):
            g.update(p, p - 0.1 * gr)
        g.outputs = [loss]
    feeds = {"x": rng.standard_normal((batch, 784)).astype(F32),
             "y": rng.integers(0, 10, batch)}
    return g, feeds


def four_nodes():
    """%0 = exp(%x); %1 = tanh(%x); %2 = mul(%0, %1); %3 = sin(%2) over f32[16] (64 B each),
    then %4 = sum(%3), returned."""
    g = dg.Graph("four")
    with g:
        x = dg.placeholder("x", (16,))
        a = dg.exp(x)
        b = dg.tanh(x)
        c = a * b
        d = dg.sin(c)
        g.outputs = [d.sum()]
    return g, (a, b, c, d), {"x": np.linspace(-1, 1, 16).astype(F32)}


# -- intervals and offsets ----------------------------------------------------------------------
def test_intervals_and_offsets_without_reuse_are_exact():
    g, (a, b, c, d), feeds = four_nodes()
    plan = plan_memory(g, inplace=False)
    e = g.outputs[0]
    assert [plan.intervals[v] for v in (a, b, c, d, e)] == [
        (0, 2), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert [plan.sizes[v] for v in (a, b, c, d, e)] == [64] * 4 + [4]
    assert [plan.offsets[v] for v in (a, b, c, d, e)] == [0, 64, 128, 0, 64]
    assert (plan.arena_bytes, plan.lower_bound_bytes, plan.no_reuse_bytes) == (192, 192, 320)
    assert plan.aliases == {}
    verify_plan(g, plan)
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))


def test_in_place_reuse_of_dying_inputs_is_exact():
    g, (a, b, c, d), feeds = four_nodes()
    plan = plan_memory(g)
    # %2 takes over %0's bytes (it dies at %2), %3 those of %2: one buffer for a, c, d
    assert {id(k): id(v) for k, v in plan.aliases.items()} == {id(c): id(a), id(d): id(c)}
    e = g.outputs[0]
    assert [plan.offsets[v] for v in (a, b, c, d, e)] == [0, 64, 0, 0, 64]
    assert [plan.intervals[v] for v in (a, b, c, d, e)] == [
        (0, 2), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert (plan.arena_bytes, plan.lower_bound_bytes, plan.no_reuse_bytes) == (128, 128, 320)
    assert plan.storage(c) == ("arena", 0) and plan.storage(g["x"]) == ("input", None)
    verify_plan(g, plan)
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))
    assert "arena" in plan.summary() and "lower bound" in plan.summary()


def test_greedy_by_size_places_largest_first_and_reuses_freed_bytes():
    g = dg.Graph("sizes")
    with g:
        x1, x2, x3 = (dg.placeholder(n, (k,)) for n, k in (("x1", 64), ("x2", 32), ("x3", 16)))
        a, b, c = dg.exp(x1), dg.exp(x2), dg.exp(x3)       # 256, 128, 64 bytes
        s, t, u = a.sum(), b.sum(), c.sum()                # 4 bytes each -> 64 aligned
        v = s + t
        w = v + u
        g.outputs = [w]
    plan = plan_memory(g, inplace=False)
    values = (a, b, c, s, t, u, v, w)
    assert [plan.intervals[x] for x in values] == [
        (0, 3), (1, 4), (2, 5), (3, 6), (4, 6), (5, 7), (6, 7), (7, 8)]
    assert [plan.offsets[x] for x in values] == [0, 256, 384, 448, 0, 64, 128, 0]
    assert (plan.arena_bytes, plan.lower_bound_bytes, plan.no_reuse_bytes) == (512, 512, 768)
    assert plan.strategy.startswith("greedy-by-size")
    verify_plan(g, plan)
    feeds = {n: np.ones(k, F32) for n, k in (("x1", 64), ("x2", 32), ("x3", 16))}
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))


def test_alignment_rounds_sizes_and_offsets():
    g = dg.Graph("align")
    with g:
        x = dg.placeholder("x", (3,))
        a = dg.exp(x)
        b = dg.sin(x)
        g.outputs = [a * b]
    plan = plan_memory(g, inplace=False)
    assert plan.sizes[a] == 12
    assert sorted(plan.offsets.values()) == [0, 64, 128]
    plan16 = plan_memory(g, alignment=16, inplace=False)
    assert sorted(plan16.offsets.values()) == [0, 16, 32] and plan16.arena_bytes == 48
    verify_plan(g, plan16)
    with pytest.raises(ValueError, match="power of two"):
        plan_memory(g, alignment=48)


def test_symbolic_shapes_take_sizes_from_shapes_and_name_unbound_values():
    g = dg.Graph("sym")
    with g:
        x = dg.placeholder("x", ("N", 16))
        a = dg.exp(x)
        flat = dg.tanh(a).reshape(-1)               # f32[N*16]
        g.outputs = [flat * 2.0]
    plan = plan_memory(g, shapes={"N": 64})
    assert plan.sizes[a] == 64 * 16 * 4
    assert plan.sizes[flat] == 64 * 16 * 4
    verify_plan(g, plan)
    with pytest.raises(MemoryPlanError, match=r"%0 .*f32\[N,16\].*'N'"):
        plan_memory(g)
    with pytest.raises(MemoryPlanError, match="shapes="):
        plan_memory(g, shapes={"M": 3})


# -- legality of in-place reuse, views and state updates -----------------------------------
def test_no_in_place_reuse_of_an_input_still_needed_later():
    g = dg.Graph("later")
    with g:
        x = dg.placeholder("x", (8,))
        a = dg.exp(x)
        b = -a                  # a is read again below: b may not take its bytes
        c = a * b
        g.outputs = [c.sum()]
    plan = plan_memory(g)
    assert b not in plan.aliases
    assert {id(k): id(v) for k, v in plan.aliases.items()} == {id(c): id(a)}
    feeds = {"x": np.arange(8, dtype=F32) / 8}
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))
    # the same plan with b forced over a: the verifier refuses it, the arena run corrupts a
    plan.aliases = {b: a}
    plan.offsets[b] = plan.offsets[a]
    plan.offsets[c] = plan.arena_bytes
    plan.arena_bytes += 64
    with pytest.raises(MemoryPlanError, match=r"%1 may not overwrite %0 in place.*still needed"):
        verify_plan(g, plan)
    got, _ = run_in_arena(g, plan, feeds)
    assert not np.allclose(got[0], reference(g, feeds)[0][0])


def test_views_extend_their_source_and_block_in_place_writes():
    g = dg.Graph("views")
    with g:
        x = dg.placeholder("x", (4, 4))
        a = dg.exp(x)
        t = dg.permute(a, 1, 0)         # a view of a: a's bytes live as long as t
        b = dg.sin(a)                   # a is last read here, but t is read later
        c = b + t
        y = dg.exp(x * 2.0)
        z = y + dg.permute(y, 1, 0)     # y dies here, but is also read transposed
        g.outputs = [c, dg.tanh(z)]
    plan = plan_memory(g)
    assert plan.views[t] is a
    assert plan.intervals[a] == (0, 3)          # kept until c reads the view
    assert b not in plan.aliases and z not in plan.aliases
    assert plan.storage(t) == ("view", a)
    verify_plan(g, plan)
    feeds = {"x": np.arange(16, dtype=F32).reshape(4, 4) / 16}
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))


def test_outputs_are_never_aliases_and_keep_their_bytes_to_the_end():
    g = dg.Graph("outs")
    with g:
        x = dg.placeholder("x", (8,))
        a = dg.exp(x)
        b = dg.sin(a)           # a dies here, but b is returned: no alias
        c = dg.cos(b)           # b is returned: c may not take its bytes
        d = c.sum()
        g.outputs = [b, d]
    plan = plan_memory(g)
    assert plan.aliases == {}
    assert [plan.intervals[v] for v in (a, b, c, d)] == [(0, 1), (1, 4), (2, 3), (3, 4)]
    verify_plan(g, plan)


def test_state_updates_in_place_only_when_the_old_value_is_no_longer_read():
    g = dg.Graph("state")
    with g:
        x = dg.placeholder("x", (4,))
        w = dg.variable("w", np.ones(4, F32))
        v = dg.variable("v", np.ones(4, F32))
        u = dg.variable("u", np.ones(4, F32))
        g.update(w, w - 0.5 * x)          # last read of w is its own elementwise producer
        v_new = v * 2.0                   # v is read again below: not in place
        g.update(v, v_new)
        late = v + x
        u_new = u + 1.0                   # u's new value is also returned: not in place
        g.update(u, u_new)
        g.outputs = [late, u_new]
    plan = plan_memory(g)
    assert [s.name for s, _ in plan.inplace_updates] == ["w"]
    assert plan.storage(v_new)[0] == "arena"
    verify_plan(g, plan)
    feeds = {"x": np.arange(4, dtype=F32)}
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds))
    # forcing v in place breaks the late read of v: the verifier says so
    plan.inplace_updates.append((v, v_new))
    del plan.offsets[v_new]
    with pytest.raises(MemoryPlanError, match="state %v cannot take .* still read"):
        verify_plan(g, plan)


def test_verifier_catches_overlap_misalignment_and_overflow():
    g, (a, b, c, d), _ = four_nodes()
    plan = plan_memory(g, inplace=False)
    plan.offsets[b] = plan.offsets[a]
    with pytest.raises(MemoryPlanError, match=r"%0 .* and %1 .* overlap in the arena"):
        verify_plan(g, plan)
    plan = plan_memory(g, inplace=False)
    plan.offsets[b] = 96
    with pytest.raises(MemoryPlanError, match="%1 is at offset 96, not a multiple of 64"):
        verify_plan(g, plan)
    plan = plan_memory(g, inplace=False)
    plan.arena_bytes = 128
    with pytest.raises(MemoryPlanError, match="outside the arena"):
        verify_plan(g, plan)
    plan = plan_memory(g, inplace=False)
    del plan.offsets[c]
    with pytest.raises(MemoryPlanError, match="%2 .* exactly one storage"):
        verify_plan(g, plan)


# -- the MLP training step ----------------------------------------------------------------------
@pytest.mark.parametrize("batch", [32, 256])
def test_mlp_training_step_plan_is_near_the_lower_bound(batch):
    g, feeds = mlp_step(batch)
    plan = plan_memory(g)
    verify_plan(g, plan)
    print(f"\nbatch {batch}: {plan.summary()}")
    assert plan.arena_bytes <= 1.05 * plan.lower_bound_bytes
    assert plan.arena_bytes <= 0.5 * plan.no_reuse_bytes
    assert sorted(s.name for s, _ in plan.inplace_updates) == ["b0", "b1", "b2",
                                                                 "w0", "w1", "w2"]
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds), rtol=1e-5)


def test_mlp_schedule_lowers_the_peak_and_keeps_results():
    g, feeds = mlp_step(32)
    work, _ = clone(g)
    before = plan_memory(work)
    work, changed = memory_aware_schedule(work)
    work.verify()
    after = plan_memory(work)
    verify_plan(work, after)
    assert changed and after.lower_bound_bytes < 0.8 * before.lower_bound_bytes
    assert after.arena_bytes <= 1.05 * after.lower_bound_bytes
    assert len(after.inplace_updates) == 6
    want = reference(g, feeds)
    assert_same(run_in_arena(work, after, feeds), want, rtol=1e-5)
    assert_same(reference(work, feeds), want, rtol=1e-5)


def test_o2_pipeline_schedules_and_agrees_with_o0():
    assert "schedule" in PIPELINES["O2"]
    g, feeds = mlp_step(16)
    (loss0,), state0 = reference(g, feeds)
    exe = g.compile(passes="O2")
    assert "schedule" in [s.name for s in exe.pass_stats]
    (loss2,) = exe(**feeds)
    np.testing.assert_allclose(loss2, loss0, rtol=1e-5)
    np.testing.assert_allclose(exe.state["w0"], state0["w0"], rtol=1e-5, atol=1e-7)


def test_fused_nodes_update_state_in_place():
    """After O2 the SGD updates are fused matmul epilogues (``sub(w, 0.1 * (a.T @ g))``).
    A fused body declares the pairs it may compute in place (``FusedBody.inplace_pairs``:
    an output made at or after the body's last read of an input of its type), so the new
    weights are written straight into the state; without the rule they need arena buffers."""
    g, feeds = mlp_step(32)
    work = optimize(g, "O2")
    assert "fused" in [n.op.name for n in work.nodes]
    plan = plan_memory(work)
    verify_plan(work, plan)
    assert len(plan.inplace_updates) == 6
    assert_same(run_in_arena(work, plan, feeds), reference(g, feeds), rtol=1e-5)
    fused_op = REGISTRY["fused"]
    rule, fused_op.inplace_pairs = fused_op.inplace_pairs, None
    try:
        without = plan_memory(work)
    finally:
        fused_op.inplace_pairs = rule
    assert without.inplace_updates == []
    assert plan.arena_bytes < 0.2 * without.arena_bytes


def test_fused_inplace_pairs_respect_the_last_read():
    """An output made before the body's last read of an input may not take its bytes."""
    g = dg.Graph("order")
    with g:
        x = dg.placeholder("x", (64,))
        y = dg.placeholder("y", (64,))
        a = dg.exp(x)                 # made first...
        b = a * x + y                 # ...x is still read here
        g.outputs = [a, b]
    work = optimize(g, "O2")
    (node,) = [n for n in work.nodes if n.op.name == "fused"]
    body = node.attrs["sub"]
    outs = {id(o): k for k, o in enumerate(body.graph.outputs)}
    ins = {id(v): j for j, v in enumerate(body.graph.inputs)}
    ka, kb = outs[id(body.graph.outputs[0])], outs[id(body.graph.outputs[1])]
    pairs = set(body.inplace_pairs())
    jx = ins[id(body.graph.inputs[0])]
    assert (ka, jx) not in pairs          # exp(x) written over x would corrupt a * x
    assert (kb, jx) in pairs              # the last step may overwrite x
    assert len(pairs) == 2                # and y, both by b


# -- scheduling ---------------------------------------------------------------------------------
def branches(k=3, n=128):
    """k big elementwise branches of one input, all made before any is reduced."""
    g = dg.Graph("branches")
    with g:
        x = dg.placeholder("x", (n, n))
        big = [fn(x) for fn in (dg.exp, dg.sin, dg.cos, dg.tanh)[:k]]
        sums = [b.sum() for b in big]
        out = sums[0]
        for s in sums[1:]:
            out = out + s
        g.outputs = [out]
    return g, {"x": np.random.default_rng(0).standard_normal((n, n)).astype(F32)}


def test_schedule_reduces_independent_branches_one_after_another():
    g, feeds = branches(3)
    work, _ = clone(g)
    before = peak_live_bytes(work)
    work, changed = memory_aware_schedule(work)
    work.verify()
    after = peak_live_bytes(work)
    assert changed
    assert before >= 3 * 128 * 128 * 4 and after < 1.1 * 128 * 128 * 4
    names = [n.op.name for n in work.nodes]
    assert names[:2] == ["exp", "sum"]          # each branch is reduced before the next
    verify_plan(work, plan_memory(work))
    np.testing.assert_allclose(Executable(work, work.outputs)(**feeds)[0],
                               g.compile()(**feeds)[0], rtol=1e-5)


def test_schedule_leaves_a_graph_alone_when_nothing_is_gained():
    g = four_nodes()[0]
    order = list(g.nodes)
    g, changed = memory_aware_schedule(g)
    assert not changed and all(a is b for a, b in zip(order, g.nodes))


# -- rematerialisation --------------------------------------------------------------------------
def activation_graph(view=False):
    """%a = tanh(x) is read early and once more at the end (or a transposed view of it is),
    across big temporaries."""
    rng = np.random.default_rng(0)
    g = dg.Graph("remat")
    with g:
        x = dg.placeholder("x", (128, 128))
        w = dg.variable("w", (rng.standard_normal((128, 128)) * 0.1).astype(F32))
        a = dg.tanh(x)
        if view:
            a = dg.permute(a, 1, 0)
        h = a @ w
        t = dg.exp(dg.sigmoid(h @ w) @ w)
        g.outputs = [dg.sum(t @ w) + dg.sum(a * 2.0)]
    return g, {"x": rng.standard_normal((128, 128)).astype(F32)}


@pytest.mark.parametrize("view", [False, True])
def test_remat_recomputes_a_cheap_activation_to_fit_a_budget(view):
    g, feeds = activation_graph(view)
    work, _ = clone(g)
    before = plan_memory(work)
    assert before.arena_bytes == 3 * 65536
    work, changed = rematerialize(work, budget_bytes=2 * 65536 + 1024)
    work.verify()
    after = plan_memory(work)
    verify_plan(work, after)
    assert changed and after.arena_bytes <= 2 * 65536 + 1024
    names = [n.op.name for n in work.nodes]
    assert names.count("tanh") == 2 and names.count("permute") == (2 if view else 0)
    want = reference(g, feeds)
    assert_same(reference(work, feeds), want, rtol=1e-6)
    assert_same(run_in_arena(work, after, feeds), want, rtol=1e-6)


def test_remat_does_nothing_within_budget_or_when_nothing_helps():
    g, _ = activation_graph()
    work, _ = clone(g)
    work, changed = rematerialize(work, budget_bytes=1 << 30)
    assert not changed
    g2, _, _ = four_nodes()
    work, changed = rematerialize(clone(g2)[0], budget_bytes=0)
    assert not changed


# -- random graphs ------------------------------------------------------------------------------
_UNARY = ["exp", "tanh", "sigmoid", "relu", "neg", "sin"]
_BINARY = ["add", "sub", "mul", "maximum"]


@st.composite
def random_dags(draw):
    """Steps of a random DAG: elementwise ops, views, reductions, over two inputs."""
    n = draw(st.integers(2, 14))
    steps = []
    for i in range(n):
        steps.append((draw(st.sampled_from(["unary", "binary", "view", "reduce", "state"])),
                      draw(st.sampled_from(_UNARY)), draw(st.sampled_from(_BINARY)),
                      draw(st.integers(0, i + 1)), draw(st.integers(0, i + 1))))
    outs = draw(st.lists(st.integers(0, n + 1), min_size=1, max_size=3))
    return steps, outs


def build_random(steps, outs):
    g = dg.Graph("random")
    with g:
        vals = [dg.placeholder("x", (4, 4)), dg.placeholder("y", (4, 4))]
        s = dg.variable("s", np.full((4, 4), 0.5, F32))
        for kind, un, bi, i, j in steps:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            if kind == "unary":
                v = getattr(dg, un)(dg.clamp(a, -3.0, 3.0))
            elif kind == "binary":
                v = getattr(dg, bi)(a, b)
            elif kind == "view":
                v = dg.permute(a, 1, 0).reshape(16).reshape(4, 4)
            elif kind == "reduce":
                v = a - a.mean(dim=1, keepdim=True)
            else:
                v = s * a
            vals.append(v)
        g.update(s, s - 0.1 * vals[-1])
        g.outputs = [vals[k % len(vals)] for k in outs]
    return g


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.sampled_from(["none", "schedule", "remat"]))
def test_random_dags_plan_verify_and_run_in_the_arena(dag, rewrite):
    g = build_random(*dag)
    if rewrite == "schedule":
        g, _ = memory_aware_schedule(g)
    elif rewrite == "remat":
        g, _ = rematerialize(g, budget_bytes=0)
    g.verify()
    plan = plan_memory(g)
    verify_plan(g, plan)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.no_reuse_bytes
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((4, 4)).astype(F32),
             "y": rng.standard_normal((4, 4)).astype(F32)}
    assert_same(run_in_arena(g, plan, feeds), reference(g, feeds), rtol=1e-5, atol=1e-5)


def test_every_op_sample_runs_correctly_from_its_plan():
    """Each op of the sample table between elementwise copies (so its inputs are arena
    values that may die there, and its outputs intermediates): plan, verify, run."""
    planned = aliased = 0
    for op in OPS:
        if op.random:
            continue
        for sample in op.samples:
            g, feeds = dg.Graph(op.name), {}

            def operand(array, feeds=feeds):
                name = f"in{len(feeds)}"
                feeds[name] = array
                v = dg.placeholder(name, array.shape, array.dtype.name)
                return v * 1 if array.dtype.kind == "f" else v
            with g:
                args, kwargs = map_leaves(sample.args, sample.kwargs, operand)
                outs = as_tuple(op.fn(*args, **kwargs))
                g.outputs = [o * 1 if o.dtype.startswith("float") else o for o in outs]
            plan = plan_memory(g)
            verify_plan(g, plan)
            assert_same(run_in_arena(g, plan, feeds), reference(g, feeds), rtol=1e-5,
                        atol=1e-6)
            planned += 1
            aliased += len(plan.aliases)
    assert planned > 300 and aliased > 50
