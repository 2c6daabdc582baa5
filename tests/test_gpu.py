"""The cuda backend on a real GPU (every test marked ``gpu``: skipped without cupy and a
device, see conftest.py). Run on the device machine by benchmarks/gpu_device_run.sh.

- the op table on the GPU against the CPU: graph mode (interpreted and planned, O0 and O2,
  values and gradients) and eager (values and gradients);
- generated ElementwiseKernels for fused regions and elementwise ops;
- the digits MLP and CNN in three modes on cuda against the CPU curve;
- the memory plan in one device arena, state updated in place on the device;
- CUDA-graph capture and replay of a training step, and its fallback;
- eager plumbing on the real device: moves, mixing errors, DLPack with torch and JAX.
"""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg
import duograph.nn as nn
from duograph.runtime.backends import get_backend
from duograph.runtime.cpu import cpu_backend
from op_samples import (F64, OPS, as_tuple, assert_matches, build, grad_targets,
                        map_leaves, tanh_loss_grads)

pytestmark = pytest.mark.gpu


def _cupy():
    import cupy
    return cupy


def _samples(select):
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if select(op, s)]


FORWARD = _samples(lambda op, s: not op.random)
# svd's gradient under the table's loss (tanh of u and vh) depends on the singular vectors'
# signs, which LAPACK and cuSOLVER choose differently: test_svd_on_the_gpu checks it with a
# loss that does not
GRAD = _samples(lambda op, s: bool(grad_targets(op, s)) and op.name != "svd")


def _gauge(op, outs):
    """Outputs in a canonical form where the op defines them only up to a choice: svd's
    (u[..., :, k], vh[..., k, :]) pairs flipped so that u's largest entry in column k is
    positive (LAPACK and cuSOLVER pick different signs; both are right)."""
    if op.name != "svd":
        return outs
    u, s, vh = (np.array(o) for o in outs)
    pick = np.take_along_axis(u, np.abs(u).argmax(axis=-2)[..., None, :], axis=-2)
    sign = np.where(pick < 0, -1.0, 1.0).astype(u.dtype)
    return [u * sign, s, vh * np.swapaxes(sign, -1, -2)]


def _loose(tol):
    """GPU math libraries differ from numpy's by a few ulp (and cuBLAS sums in another
    order): float32 gets 1e-4 relative."""
    out = dict(tol)
    out["float32"] = (max(tol["float32"][0], 1e-4), max(tol["float32"][1], 1e-5))
    out["float64"] = (max(tol["float64"][0], 1e-9), max(tol["float64"][1], 1e-11))
    return out


# -- 1. the op table, graph mode ----------------------------------------------------------------
@pytest.mark.parametrize("op, sample", FORWARD)
def test_op_table_graph_mode_on_the_gpu_equals_the_cpu(op, sample):
    built = build(op, sample)
    want = dg.compile_graph(built.graph, built.outputs, backend=cpu_backend)(**built.feeds)
    cuda = get_backend("cuda")
    from duograph.passes.memory import plan_memory
    for planner in (None, plan_memory):
        got = dg.compile_graph(built.graph, built.outputs, backend=cuda,
                               planner=planner)(**built.feeds)
        for k, (g, w) in enumerate(zip(_gauge(op, got), _gauge(op, want))):
            assert_matches(g, w, _loose(op.tol), f"{op.name} output {k} on cuda: ")


@pytest.mark.parametrize("op, sample", GRAD)
def test_op_table_gradients_on_the_gpu_equal_the_cpu(op, sample):
    """Forward and gradient graphs at O0 and O2 (fused: generated kernels) on cuda."""
    built = build(op, sample)
    grads = tanh_loss_grads(built, grad_targets(op, sample))[:-1]
    outputs = list(built.outputs) + grads
    want = built.graph.compile(outputs=outputs)(**built.feeds)
    for passes in ("O0", "O2"):
        got = built.graph.compile(outputs=outputs, passes=passes,
                                  device="cuda")(**built.feeds)
        for k, (a, w) in enumerate(zip(got, want)):
            assert_matches(a, w, _loose(op.tol), f"{passes} output {k} on cuda: ")


# -- 2. the op table, eager ---------------------------------------------------------------------
def _eager(op, sample, device, grad_leaves=()):
    """The sample on eager tensors of ``device`` (ops without tensor operands: created on
    it, as under ``device=``)."""
    from duograph.eager.dispatch import pop_default_device, push_default_device
    token = push_default_device(device)
    try:
        return _eager_on(op, sample, device, grad_leaves)
    finally:
        pop_default_device(token)


def _eager_on(op, sample, device, grad_leaves=()):
    made = []

    def to_tensor(a):
        t = dg.tensor(a, dtype=a.dtype.name, device=device)
        if len(made) in grad_leaves:
            t.requires_grad_(True)
        made.append(t)
        return t
    args, kwargs = map_leaves(sample.args, sample.kwargs, to_tensor)
    return list(as_tuple(op.fn(*args, **kwargs))), made


@pytest.mark.parametrize("op, sample", FORWARD)
def test_op_table_eager_on_the_gpu_equals_the_cpu(op, sample):
    want, _ = _eager(op, sample, "cpu")
    got, _ = _eager(op, sample, "cuda")
    assert all(g.device == "cuda" for g in got), "an output left the device"
    got = _gauge(op, [g.detach().cpu().numpy() for g in got])
    want = _gauge(op, [w.detach().numpy() for w in want])
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, _loose(op.tol), f"eager output {k} on cuda: ")


def test_svd_on_the_gpu():
    """svd on cuSOLVER: the factors rebuild the input, and the gradient of a loss that
    does not depend on the singular vectors' signs equals the CPU's, in graph mode and
    eagerly."""
    x = np.random.default_rng(0).standard_normal((2, 4, 3))

    def loss(u, s, vh):
        return (s * s).sum() + ((u * s[..., None, :]) @ vh).sum()
    g = dg.Graph("svd")
    with g:
        xp_ = dg.placeholder("x", x.shape, "float64")
        u, s, vh = dg.linalg.svd(xp_, full_matrices=False)
        rebuilt = (u * s[..., None, :]) @ vh
        gx, = dg.grad(loss(u, s, vh), [xp_])
    want = g.compile(outputs=[rebuilt, gx])(x=x)
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[rebuilt, gx], passes=passes, device="cuda")(x=x)
        np.testing.assert_allclose(got[0], x, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-11)
    grads = {}
    for device in ("cpu", "cuda"):
        t = dg.tensor(x, device=device, requires_grad=True)
        loss(*dg.linalg.svd(t, full_matrices=False)).backward()
        grads[device] = t.grad.cpu().numpy()
    np.testing.assert_allclose(grads["cuda"], grads["cpu"], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("op, sample", GRAD)
def test_op_table_eager_gradients_on_the_gpu_equal_the_cpu(op, sample):
    targets = grad_targets(op, sample)
    results = {}
    for device in ("cpu", "cuda"):
        outs, made = _eager(op, sample, device, targets)
        loss = None
        for o in outs:
            if o.dtype == F64:
                term = (dg.tanh(o) * o).sum()
                loss = term if loss is None else loss + term
        loss.backward()
        results[device] = [made[i].grad for i in targets]
    for k, (g, w) in enumerate(zip(results["cuda"], results["cpu"])):
        assert g.device == "cuda"
        assert_matches(g.cpu().numpy(), w.numpy(), _loose(op.tol), f"eager grad {k}: ")


def test_random_ops_use_the_device_generator_with_explicit_seeds():
    """Same seed, same numbers (on the device's generator); another seed, others."""
    g = dg.Graph("rand")
    with g:
        s = dg.placeholder("seed", (), "int64")
        u = dg.uniform(4096, seed=s)
    exe = g.compile(outputs=[u], device="cuda")
    one = exe(seed=np.int64(3))[0]
    two = exe(seed=np.int64(3))[0]
    other = exe(seed=np.int64(4))[0]
    np.testing.assert_array_equal(one, two)
    assert not np.array_equal(one, other)
    assert 0.45 < one.mean() < 0.55 and one.min() >= 0.0 and one.max() < 1.0
    dg.manual_seed(5)
    a = dg.rand(100, device="cuda")
    dg.manual_seed(5)
    b = dg.rand(100, device="cuda")
    assert a.device == "cuda"
    np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy())


# -- 3. generated kernels ---------------------------------------------------------------------
def _gelu_graph(n):
    g = dg.Graph("gelu")
    with g:
        x = dg.placeholder("x", (n,))
        y = 0.5 * x * (1.0 + dg.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return g, y


def test_fused_regions_run_one_generated_kernel():
    from duograph.runtime.cuda import fused
    g, y = _gelu_graph(100_000)
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    want = g.compile(outputs=[y])(x=x)[0]
    before = len(fused._raw)
    exe = g.compile(outputs=[y], passes="O2", device="cuda")
    got = exe(x=x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(fused._raw) > before, "no grid-stride kernel was generated"
    # a broadcast input (a bias row) goes through the ElementwiseKernel
    g2 = dg.Graph("bias")
    with g2:
        h = dg.placeholder("h", (64, 32))
        b = dg.placeholder("b", (32,))
        z = dg.tanh(h + b) * 2.0
    rng = np.random.default_rng(1)
    feeds = {"h": rng.standard_normal((64, 32)).astype(np.float32),
             "b": rng.standard_normal(32).astype(np.float32)}
    before = len(fused._kernels)
    got = g2.compile(outputs=[z], passes="O2", device="cuda")(**feeds)[0]
    np.testing.assert_allclose(got, np.tanh(feeds["h"] + feeds["b"]) * 2, rtol=1e-5, atol=1e-6)
    assert len(fused._kernels) > before, "no ElementwiseKernel was generated"


def test_generated_single_op_kernels():
    cupy = _cupy()
    x = dg.tensor(np.linspace(-4, 4, 1001).astype(np.float32), device="cuda")
    for fn in (dg.sigmoid, lambda t: dg.nn.functional.gelu(t, approximate="tanh")):
        got = fn(x).cpu().numpy()
        want = fn(x.cpu()).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert isinstance(fn(x).array, cupy.ndarray)


# -- 4. training on the device ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_digits_three_modes_on_cuda_match_the_cpu(kind):
    pytest.importorskip("sklearn")
    from test_train_digits import train_digits
    quiet = dict(progress=False, log=lambda *a: None, epochs=2)
    want = train_digits.train(kind=kind, mode="eager", **quiet)["losses"]
    for mode in ("eager", "compiled", "graph"):
        res = train_digits.train(kind=kind, mode=mode, device="cuda", **quiet)
        np.testing.assert_allclose(res["losses"], want, rtol=2e-4, err_msg=mode)
        assert all(p.device == "cuda" for p in res["model"].parameters())
        assert res["test_accuracy"] > 0.8, (mode, res["test_accuracy"])


# -- 5. memory plan and CUDA graphs -------------------------------------------------------------
def _mlp_step(batch=64, device="cuda", static=True):
    """(an SGD-momentum training step graph of a small MLP on ``device``, feeds, model);
    ``static``: placeholders of fixed batch size (what CUDA-graph capture needs)."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    model.to(device)
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = dg.Graph("step")
    n = batch if static else "N"
    with g:
        x = dg.placeholder("x", (n, 64))
        y = dg.placeholder("y", (n,), "int64")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.minimize(loss)
    g.outputs = [loss]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((batch, 64)).astype(np.float32),
             "y": rng.integers(0, 10, batch).astype(np.int64)}
    return g, feeds, model


def test_memory_plan_in_one_device_arena_and_state_in_place():
    cupy = _cupy()
    g, feeds, model = _mlp_step()
    exe = g.compile(passes="O2", device="cuda")
    assert exe.planned
    ptrs = [p.array.data.ptr for p in model.parameters()]
    losses = [float(exe(**feeds)[0]) for _ in range(3)]
    assert losses[2] < losses[0]
    plan = exe.memory_plan
    assert plan.arena_bytes > 0 and plan.arena_bytes <= plan.no_reuse_bytes
    prog = exe.steps.last_program
    assert isinstance(prog.arena, cupy.ndarray)
    assert [p.array.data.ptr for p in model.parameters()] == ptrs     # updated in place
    # the CPU's plan for the same graph has the same size
    g2, feeds2, _ = _mlp_step(device="cpu")
    cpu_exe = g2.compile(passes="O2")
    cpu_losses = [float(cpu_exe(**feeds2)[0]) for _ in range(3)]
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-4)
    assert cpu_exe.memory_plan.arena_bytes == plan.arena_bytes
    # device feeds are accepted too
    dev = {k: cupy.asarray(v) for k, v in feeds.items()}
    assert np.isfinite(exe(**dev)[0])


def test_cuda_graph_replay_equals_uncaptured_steps():
    from duograph.runtime.cuda import capture
    g1, feeds, m1 = _mlp_step()
    g2, _, m2 = _mlp_step()
    assert not g1.compile(passes="O2", device="cuda").symbols
    plain = g1.compile(passes="O2", device="cuda")
    captured_exe = g2.compile(passes="O2", device="cuda")
    step = capture(captured_exe, feeds, warmup=1)
    assert step.captured, step.reason
    # the warm-up ran the step once (capturing runs nothing): bring the plain run level
    want = [float(plain(**feeds)[0])]
    for _ in range(5):
        w = float(plain(**feeds)[0])
        (got,) = step(feeds, host=True)
        np.testing.assert_allclose(float(got), w, rtol=1e-5)
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert want


def test_cuda_graph_falls_back_where_capture_is_impossible():
    """einsum runs cupy's own cuBLAS calls, which cupy refuses while a stream captures: the
    step runs uncaptured with the same results and says why."""
    from duograph.runtime.cuda import capture
    g = dg.Graph("sync")
    with g:
        a = dg.placeholder("a", (4, 8))
        b = dg.placeholder("b", (8, 3))
        z = dg.einsum("ij,jk->ik", a, b)
    exe = g.compile(outputs=[z], passes="O2", device="cuda")
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((4, 8)).astype(np.float32),
             "b": rng.standard_normal((8, 3)).astype(np.float32)}
    step = capture(exe, feeds)
    want = exe(**feeds)[0]
    got = step(feeds, host=True)[0]
    np.testing.assert_array_equal(got, want)
    assert step.captured or "cuBLAS" in step.reason, step.reason


def test_random_ops_from_a_device_seed_are_captured():
    """uniform, normal, bernoulli and randint read their seed on the device (Philox): a step
    with them is captured, and each replay draws from the seed its feed holds, as the
    uncaptured executable does; another seed, other numbers."""
    from duograph.runtime.cuda import capture
    g = dg.Graph("noise")
    with g:
        x = dg.placeholder("x", (64,))
        s = dg.placeholder("seed", (), "int64")
        u = x * dg.uniform(64, seed=s)
        n = dg.normal(64, seed=s) + x
        k = dg.bernoulli(dg.full_like(x, 0.3), seed=s)
        r = dg.randint(0, 10, (64,), seed=s)
    exe = g.compile(outputs=[u, n, k, r], passes="O2", device="cuda")
    x_np = np.linspace(-1, 1, 64).astype(np.float32)
    step = capture(exe, {"x": x_np, "seed": np.int64(5)})
    assert step.captured, step.reason
    runs = {}
    for seed in (5, 6, 5):
        got = step({"x": x_np, "seed": np.int64(seed)}, host=True)
        want = exe(x=x_np, seed=np.int64(seed))
        for a, w in zip(got, want):
            np.testing.assert_array_equal(a, w)
        runs.setdefault(seed, []).append(got)
    for a, b in zip(runs[5][0], runs[5][1]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(runs[5][0][0], runs[6][0][0])
    u5, n5, k5, r5 = runs[5][0]
    assert np.all((u5 >= np.minimum(x_np, 0)) & (u5 <= np.maximum(x_np, 0)))
    assert set(np.unique(k5)) <= {0.0, 1.0} and r5.min() >= 0 and r5.max() < 10
    assert r5.dtype == np.int64 and k5.dtype == np.float32


def test_a_training_step_with_dropout_is_captured():
    """Dropout's mask comes from the graph's seed state, which the step advances on the
    device: the captured step replays the uncaptured one's losses, step after step."""
    from duograph.runtime.cuda import capture

    def build():
        dg.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.5),
                              nn.Linear(64, 4)).to("cuda")
        opt = dg.optim.SGD(model.parameters(), lr=0.1)
        g = dg.Graph("drop")
        with g:
            x = dg.placeholder("x", (16, 32))
            y = dg.placeholder("y", (16,), "int64")
            loss = nn.functional.cross_entropy(model(x), y)
            opt.minimize(loss)
        g.outputs = [loss]
        return g.compile(passes="O2", device="cuda")
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((16, 32)).astype(np.float32),
             "y": rng.integers(0, 4, 16).astype(np.int64)}
    plain, exe = build(), build()
    step = capture(exe, feeds, warmup=1)
    assert step.captured, step.reason
    want = [float(plain(**feeds)[0]) for _ in range(4)]     # (the warm-up ran step 1)
    got = [want[0]] + [float(step(feeds, host=True)[0]) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(set(want)) == 4


def test_capture_refuses_symbolic_shapes_and_cpu_executables():
    from duograph.runtime.cuda import capture
    g, feeds, _ = _mlp_step(static=False)
    exe = g.compile(passes="O2", device="cuda")
    with pytest.raises(ValueError, match="symbolic"):
        capture(exe, feeds)
    cpu_graph, y = _gelu_graph(4)
    with pytest.raises(ValueError, match="device='cuda'"):
        capture(cpu_graph.compile(outputs=[y], passes="O2"), {"x": np.zeros(4, np.float32)})


# -- 6. eager plumbing on the device ------------------------------------------------------------
def test_device_mixing_error_and_scalars_on_the_gpu():
    a = dg.ones(3)
    b = dg.ones(3, device="cuda")
    assert b.device == "cuda"
    with pytest.raises(RuntimeError, match="cpu and cuda|cuda and cpu"):
        a + b
    assert (b * dg.tensor(2.0)).device == "cuda"


def test_dlpack_zero_copy_with_torch_and_jax_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    t = dg.arange(6, dtype="float32", device="cuda")
    tt = torch.from_dlpack(t)
    assert tt.is_cuda and tt.data_ptr() == t.array.data.ptr
    src = torch.arange(4, dtype=torch.float32, device="cuda")
    back = dg.from_dlpack(src)
    assert back.device == "cuda" and back.array.data.ptr == src.data_ptr()
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return
    if not any(d.platform == "gpu" for d in jax.devices()):
        return
    j = jnp.arange(5.0, dtype=jnp.float32)
    dj = dg.from_dlpack(j)
    assert dj.device == "cuda"
    np.testing.assert_array_equal(dj.cpu().numpy(), np.arange(5.0, dtype=np.float32))
    back_j = jax.dlpack.from_dlpack(dg.arange(3, dtype="float32", device="cuda"))
    np.testing.assert_array_equal(np.asarray(back_j), [0.0, 1.0, 2.0])


# -- 7. CUDA graphs after the capture (the same checks run on a fake cupy in
#       test_cuda_graphs_fake.py) -------------------------------------------------------------
def test_cuda_graph_sees_a_new_learning_rate_new_state_arrays_and_0d_feeds():
    from duograph.runtime.cuda import capture
    cupy = _cupy()

    def build():
        dg.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("cuda")
        opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        g = dg.Graph("step")
        with g:
            x = dg.placeholder("x", (16, 8))
            y = dg.placeholder("y", (16,), "int64")
            scale = dg.placeholder("scale", ())
            loss = nn.functional.cross_entropy(model(x) * scale, y)
            opt.minimize(loss)
        g.outputs = [loss]
        return g.compile(passes="O2", device="cuda"), model, opt
    (plain, m1, o1), (exe, m2, o2) = build(), build()
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((16, 8)).astype(np.float32),
             "y": rng.integers(0, 4, 16).astype(np.int64), "scale": np.float32(1.5)}
    step = capture(exe, feeds, warmup=1)          # a 0-d numpy feed ("scale")
    assert step.captured, step.reason
    plain(**feeds)
    for k in range(4):
        if k == 1:
            o1.param_groups[0]["lr"] = 0.25
            o2.param_groups[0]["lr"] = 0.25
        if k == 2:
            for m in (m1, m2):
                w = next(iter(m.parameters()))
                w.data = cupy.full(w.shape, 0.05, np.float32)
        want = float(plain(**feeds)[0])
        (got,) = step(feeds, host=True)
        np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert step.captured, step.reason
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(),
                                   rtol=1e-5, atol=1e-6)


# -- 8. the capturable cuBLAS matmul (runtime/cuda/blas.py) -----------------------------------
def test_capturable_matmul_equals_cupys_and_is_captured():
    """The backend's matmul (cuBLAS through ctypes) equals cupy.matmul on vectors, batches,
    broadcasts and transposed or sliced views in float16/32/64, into ``out`` too, and runs
    inside a stream capture, where cupy.matmul refuses."""
    cupy = _cupy()
    xp = get_backend("cuda").xp
    assert xp.matmul is not cupy.matmul, "no capturable matmul: cuBLAS was not found"
    rng = np.random.default_rng(0)

    def r(*shape, dtype="float32"):
        return cupy.asarray(rng.standard_normal(shape).astype(dtype))
    cases = [(r(3, 4), r(4, 5)), (r(4, 3).T, r(5, 4).T), (r(6, 4)[::2], r(4, 10)[:, ::2]),
             (r(4), r(4, 5)), (r(3, 4), r(4)), (r(4), r(4)), (r(2, 3, 4), r(4, 5)),
             (r(3, 4), r(2, 4, 5)), (r(1, 3, 3, 4), r(2, 1, 4, 5)),
             (r(2, 4, 3).transpose(0, 2, 1), r(2, 4, 5)),
             (r(64, 96, dtype="float64"), r(96, 32, dtype="float64")),
             (r(64, 96, dtype="float16"), r(96, 32, dtype="float16")), (r(0, 3), r(3, 2)),
             (r(3, 0), r(0, 2))]
    for a, b in cases:
        want = cupy.matmul(a, b)
        got = xp.matmul(a, b)
        tol = 2e-2 if a.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(want), rtol=tol, atol=tol)
        out = cupy.empty_like(want)
        assert xp.matmul(a, b, out=out) is out
        np.testing.assert_allclose(cupy.asnumpy(out), cupy.asnumpy(want), rtol=tol, atol=tol)
    a, b = r(32, 64), r(64, 16)
    out = cupy.zeros((32, 16), np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        xp.matmul(a, b, out=out)         # first use outside the capture: handle, workspace
        stream.synchronize()
        out.fill(0)
        stream.begin_capture()
        xp.matmul(a, b, out=out)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(out), cupy.asnumpy(a @ b), rtol=1e-5, atol=1e-5)
