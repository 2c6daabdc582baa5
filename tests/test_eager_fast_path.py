"""Eager dispatch's fast path (per-signature plans, tensor operators straight to eager_apply,
cached scalars) must behave exactly as the general path: these tests warm the fast path
first, then check what only the general path used to decide."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import duograph as dg


def _t(values, dtype=np.float32, requires_grad=False):
    return dg.tensor(np.asarray(values, dtype=dtype), requires_grad=requires_grad)


def test_kernel_registered_after_warm_up_is_used():
    """A plan remembers the kernel it was made for: one registered later replaces it."""
    from duograph.graphlib.registry import REGISTRY
    from duograph.runtime.cpu import cpu_backend
    op = REGISTRY["sub"]
    a, b = _t([5.0, 7.0]), _t([1.0, 2.0])
    for _ in range(3):
        np.testing.assert_array_equal((a - b).numpy(), [4.0, 5.0])
    original = cpu_backend.kernel(op)
    cpu_backend.register_kernel(op, lambda xp, x, y: xp.zeros_like(x))
    try:
        np.testing.assert_array_equal((a - b).numpy(), [0.0, 0.0])
    finally:
        cpu_backend.register_kernel(op, original)
    np.testing.assert_array_equal((a - b).numpy(), [4.0, 5.0])


def test_operators_inside_a_graph_build_nodes():
    """``t * t`` inside ``with graph:`` is captured into the graph, not run eagerly, even
    once the eager fast path is warm for that signature."""
    t = _t([1.0, 2.0, 3.0])
    _ = t * t + 1.0
    g = dg.Graph("capture")
    with g:
        y = -(t * t + 1.0) / t
        assert isinstance(y, dg.Value)
        g.outputs = [y]
    (out,) = g.compile()()
    np.testing.assert_allclose(out, -(t.numpy() ** 2 + 1.0) / t.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype,scalar", [(np.int64, 2), (np.int64, 2.0), (np.int64, True),
                                          (np.int32, 3), (np.bool_, 2), (np.bool_, 1.5),
                                          (np.float16, 2), (np.float64, 0.5)])
def test_weak_scalar_dtypes_match_torch(torch, dtype, scalar):
    """Operator fast path and general path give PyTorch's weak-scalar dtypes and values."""
    data = np.array([1, 0, 1], dtype=dtype)
    t, tt = dg.tensor(data), torch.tensor(data)
    for _ in range(2):      # cold, then warm
        for got, want in ((t * scalar, tt * scalar), (scalar * t, scalar * tt),
                          (t + scalar, tt + scalar), (scalar + t, scalar + tt)):
            assert got.dtype == str(want.dtype).replace("torch.", "")
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_signed_zero_scalars_stay_apart():
    t = _t([1.0, -2.0])
    with np.errstate(divide="ignore"):
        _signed_zero_checks(t)


def _signed_zero_checks(t):
    for _ in range(2):
        np.testing.assert_array_equal((t / 0.0).numpy(), [np.inf, -np.inf])
        np.testing.assert_array_equal((t / -0.0).numpy(), [-np.inf, np.inf])
        got, want = (-0.0 * t).numpy(), np.array([1.0, -2.0], np.float32) * -0.0
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_fast_path_gradients_match_torch(torch):
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    for _ in range(3):
        x, w = dg.tensor(xs, requires_grad=True), dg.tensor(ws, requires_grad=True)
        tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
        for a, b, tanh in ((x, w, dg.tanh), (tx, tw, torch.tanh)):
            y = a
            for _ in range(3):
                y = tanh(y * b + 1.0) * a - 0.5 / (b * b + 1.0)
            (-y).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_modified_saved_tensors_still_refused():
    """The quick saved-version check still finds an input or an output changed in place."""
    x = _t([0.5, 1.0], requires_grad=True)
    a = x * 1.0
    y = a * a               # saves its inputs
    a.add_(1.0)
    with pytest.raises(RuntimeError, match=r"mul .*modified by an in-place"):
        y.sum().backward()
    z = (x * 1.0).tanh()    # saves its output
    z.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"tanh .*output 0.*modified by an in-place"):
        z.sum().backward()


def test_grad_mode_is_per_thread():
    seen = {}

    def worker():
        with dg.no_grad():
            seen["inner"] = dg.is_grad_enabled()
            ready.set()
            done.wait(5)

    ready, done = threading.Event(), threading.Event()
    th = threading.Thread(target=worker)
    th.start()
    ready.wait(5)
    try:
        assert seen["inner"] is False
        assert dg.is_grad_enabled() is True
        x = _t([1.0, 2.0], requires_grad=True)
        assert (x * x).requires_grad
    finally:
        done.set()
        th.join()


# -- named methods, the scalar shortcut and the tape's backward walk (issue 11, second pass) --
_UNARY_METHODS = ("abs", "exp", "log", "sqrt", "rsqrt", "square", "reciprocal", "sin", "cos",
                  "tanh", "sigmoid", "relu")


@pytest.mark.parametrize("name", _UNARY_METHODS)
def test_unary_methods_match_torch_values_and_gradients(torch, name):
    """The shared methods that dispatch straight to the eager handler give PyTorch's values
    and gradients, cold and warm."""
    xs = np.array([0.5, 1.5, 2.0], np.float32)
    for _ in range(2):
        x, tx = dg.tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
        y, ty = getattr(x, name)(), getattr(tx, name)()
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_unary_methods_build_nodes_for_values_and_inside_graphs():
    """Outside eager execution the methods still take the dispatch chain: a Value builds a
    node, and an eager tensor inside ``with graph:`` is captured."""
    t = _t([0.25, 0.5])
    t.tanh()                                    # warm the eager path
    g = dg.Graph("methods")
    with g:
        p = dg.placeholder("p", (2,))
        y = p.tanh().exp() + t.sigmoid()
        assert isinstance(y, dg.Value)
        g.outputs = [y]
    (out,) = g.compile()(p=np.array([1.0, 2.0], np.float32))
    want = np.exp(np.tanh([1.0, 2.0])) + 1.0 / (1.0 + np.exp(-t.numpy()))
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_unary_method_dtype_errors_still_name_op_and_line():
    """A refused dtype through the direct method path raises the op's error with the user's
    source line, as the general path does."""
    b = dg.tensor(np.array([True, False]))
    with pytest.raises(Exception, match=r"(?s)relu.*test_eager_fast_path\.py"):
        b.relu()


def test_operator_scalar_shortcut_keeps_dtypes_and_zero_signs():
    """``tensor <op> number`` served from the per-dtype scalar table (after warm-up) gives
    what the general path gives: weak dtypes per tensor dtype, float zeros by sign."""
    f32, i64 = _t([1.0, -2.0]), dg.tensor(np.array([3, 4], np.int64))
    for _ in range(3):
        assert (i64 * 2).dtype == "int64" and (i64 * 2.0).dtype == "float32"
        assert (i64 + True).dtype == "int64" and (f32 + 1).dtype == "float32"
        np.testing.assert_array_equal((2.5 - i64).numpy(), [-0.5, -1.5])
        np.testing.assert_array_equal((f32 * 3).numpy(), [3.0, -6.0])
    with np.errstate(divide="ignore"):
        _signed_zero_checks(f32)


def test_operator_scalar_shortcut_records_constants_inside_record():
    """Inside record() a Python number stays a constant of the graph (not a state input),
    even once the scalar table holds that number."""
    x = _t([1.0, 2.0])
    for _ in range(3):
        _ = x * 3.5 + 1.25
    with dg.record(names={"x": x}) as rec:
        y = x * 3.5 + 1.25
    g = rec.graph
    assert [v.name for v in g.inputs] == ["x"] and list(g.state) == []
    (got,) = g.compile(outputs=[rec.value(y)])(**rec.feeds())
    np.testing.assert_allclose(got, [4.75, 8.25])


def test_backward_records_nothing_without_create_graph(torch):
    """Backward without create_graph leaves gradients with no history; with it, the
    gradient is differentiable again (second derivative checked against torch)."""
    xs = np.array([0.3, -0.7], np.float32)
    x = dg.tensor(xs, requires_grad=True)
    (x.tanh() * x).sum().backward()
    assert x.grad.grad_fn is None and not x.grad.requires_grad
    x.grad = None
    tx = torch.tensor(xs, requires_grad=True)
    (g,) = dg.autograd.grad((x.tanh() * x).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((tx.tanh() * tx).sum(), tx, create_graph=True)
    assert g.grad_fn is not None
    g.sum().backward()
    tg.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_backward_walk_hooks_retain_grad_and_repeated_leaves_match_torch(torch):
    """Hooks on an intermediate and on a leaf, retain_grad, a leaf reached along several
    paths (its cotangents summed on arrays) and a 0-d leaf used twice: all as PyTorch."""
    xs = np.array([0.5, -1.0, 2.0], np.float32)
    results = []
    for lib in (dg, torch):
        x = lib.tensor(xs, requires_grad=True)
        s = lib.tensor(np.float32(1.5), requires_grad=True)
        a = x * s
        a.retain_grad()
        a.register_hook(lambda g: g * 2.0)
        x.register_hook(lambda g: g + 1.0)
        y = (a * x + a.tanh() * s + x).sum() * s
        y.backward()
        results.append((x.grad.numpy(), s.grad.numpy(), a.grad.numpy()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert isinstance(results[0][1], np.ndarray) and results[0][1].shape == ()


def test_backward_walk_multi_output_and_grad_of_intermediates(torch):
    """A multi-output op (one output unused) and ``autograd.grad`` asked for an
    intermediate and a leaf, against torch."""
    xs = np.arange(6, dtype=np.float32).reshape(2, 3) / 5.0
    x, tx = dg.tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
    outs = []
    for lib, v in ((dg, x), (torch, tx)):
        mid = v * 2.0
        values, _ = lib.max(mid, dim=1)
        loss = (values * values).sum() + mid.sum()
        outs.append(lib.autograd.grad(loss, [mid, v]))
    for got, want in zip(*outs):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_requires_grad_toggled_after_recording_is_read_at_backward():
    """Which leaves get a gradient is decided when backward runs, as in torch: a leaf
    switched off after its op was recorded gets none."""
    x, w = _t([1.0, 2.0], requires_grad=True), _t([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    w.requires_grad_(False)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    assert w.grad is None


def test_fast_operators_on_parameters(torch):
    """Parameters take the operator fast path with the same results and the same tape."""
    p = dg.nn.Parameter(dg.tensor([1.0, 2.0]))
    base = _t([0.5, 0.25], requires_grad=True)
    for _ in range(2):
        y = (p * base - base / p).tanh()
        y.sum().backward()
    tp = torch.tensor([1.0, 2.0], requires_grad=True)
    tb = torch.tensor([0.5, 0.25], requires_grad=True)
    for _ in range(2):
        (tp * tb - tb / tp).tanh().sum().backward()
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(base.grad.numpy(), tb.grad.numpy(), rtol=1e-5)


# -- backward: the backend's vjp kernels, tanh_backward / sigmoid_backward ---------------
def _grads(fn, arrays, monkeypatch=None, kernels=True):
    """Leaf gradients of ``fn(*leaves).sum()`` as numpy arrays, with the CPU backend's vjp
    kernels as they are, or (``kernels=False``) with none: the op rules only."""
    from duograph.eager import device as eager_device
    from duograph.runtime.backend import VjpKernelTable
    if not kernels:
        monkeypatch.setattr(eager_device.backend_for("cpu"), "vjp_kernels", VjpKernelTable())
    leaves = [dg.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    return [t.grad.numpy() for t in leaves]


_ARRAY_RULE_CASES = [
    ("mul_sub_neg", lambda a, b: -(a * b - b * 2.5) * a, [(3, 4), (3, 4)]),
    ("bcast", lambda a, b: (a * b - b) * a, [(3, 1), (4,)]),
    ("tanh_sigmoid", lambda a, b: (a * b).tanh() * (a - b).sigmoid(), [(5,), (5,)]),
    ("sum_dims", lambda a, b: (a * b).sum(dim=1) * a.sum(dim=(0, 2), keepdim=True).sum(),
     [(2, 3, 4), (2, 3, 4)]),
    ("shared", lambda a, b: (a * a).tanh() * a - a * b, [(6,), (6,)]),
    ("matmul", lambda a, b: (a @ b).tanh() * 2.0, [(3, 4), (4, 5)]),
    ("linear", lambda x, w: (x @ w.T).sigmoid() * 0.5, [(5, 7), (3, 7)]),
    ("linear_wide", lambda x, w: (x @ w.T * 0.1).tanh(), [(32, 96), (48, 96)]),
    ("permute", lambda a, b: a.permute(1, 0) * b - a.T @ (b.T @ b), [(3, 4), (4, 3)]),
    ("weight_twice", lambda x, w: (x @ w.T) @ w, [(6, 5), (4, 5)]),
    ("relu", lambda a, b: (a * b).relu() * a - (b - 0.5).relu(), [(4, 6), (4, 6)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, fn, shapes", _ARRAY_RULE_CASES,
                         ids=[c[0] for c in _ARRAY_RULE_CASES])
def test_vjp_kernels_match_op_rules_bit_for_bit(torch, monkeypatch, name, fn, shapes, dtype):
    """The CPU backend's vjp kernels give exactly what the op rules give, and torch
    agrees."""
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    fast = _grads(fn, arrays)
    slow = _grads(fn, arrays, monkeypatch, kernels=False)
    for f, s in zip(fast, slow):
        assert f.dtype == s.dtype and f.shape == s.shape
        np.testing.assert_array_equal(f, s)
        assert f.flags.writeable
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for f, t in zip(fast, leaves):
        np.testing.assert_allclose(f, t.grad.numpy(), rtol=tol, atol=tol)


def test_vjp_kernels_fall_back_on_mixed_dtypes(torch):
    """float32 * float64 takes the op rules (promotion, casts back to each input's dtype)."""
    a = dg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    b = dg.tensor(np.array([3.0, 5.0]), requires_grad=True)
    (a * b).tanh().sum().backward()
    ta = torch.tensor([1.0, 2.0], requires_grad=True)
    tb = torch.tensor([3.0, 5.0], dtype=torch.float64, requires_grad=True)
    (ta * tb).tanh().sum().backward()
    assert a.grad.dtype == "float32" and b.grad.dtype == "float64"
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_vjp_kernels_keep_hooks_retain_grad_and_grad(torch):
    """Cotangents the walk keeps as arrays (a vjp kernel's) reach hooks, retain_grad and
    grad() as tensors."""
    x = _t([0.5, -1.0, 2.0], requires_grad=True)
    w = _t([1.5, 0.25, -0.5], requires_grad=True)
    seen = []
    h = x * w
    h.register_hook(lambda g: seen.append(g) or g * 2.0)
    u = h.tanh()
    u.retain_grad()
    y = (u * x - w).sum()
    gh, = dg.autograd.grad(y, [h], retain_graph=True)
    y.backward()
    tx = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    tw = torch.tensor([1.5, 0.25, -0.5], requires_grad=True)
    th = tx * tw
    th.register_hook(lambda g: g * 2.0)
    tu = th.tanh()
    tu.retain_grad()
    ty = (tu * tx - tw).sum()
    tgh, = torch.autograd.grad(ty, [th], retain_graph=True)
    ty.backward()
    assert len(seen) == 2 and all(isinstance(g, dg.Tensor) for g in seen)
    assert isinstance(u.grad, dg.Tensor)
    np.testing.assert_allclose(u.grad.numpy(), tu.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gh.numpy(), tgh.numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


def test_sum_backward_grad_is_writable_and_accumulates():
    """sum's vjp kernel broadcasts a view; a leaf's .grad is still its own array."""
    x = _t([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x.sum().backward()
    x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 2.0, np.float32))
    x.grad.add_(1.0)
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 3.0, np.float32))


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_activation_backward_ops_higher_order_match_torch(torch, name):
    """tanh and sigmoid differentiate through tanh_backward / sigmoid_backward, whose own
    vjps give the second and third derivatives."""
    xs = np.array([-2.0, -0.3, 0.0, 0.7, 1.9])
    x = dg.tensor(xs, requires_grad=True)
    tx = torch.tensor(xs, requires_grad=True)
    g1, = dg.autograd.grad(getattr(x, name)().sum(), x, create_graph=True)
    t1, = torch.autograd.grad(getattr(tx, name)().sum(), tx, create_graph=True)
    g2, = dg.autograd.grad((g1 * g1).sum(), x, create_graph=True)
    t2, = torch.autograd.grad((t1 * t1).sum(), tx, create_graph=True)
    g3, = dg.autograd.grad(g2.sum(), x)
    t3, = torch.autograd.grad(t2.sum(), tx)
    for g, t in ((g1, t1), (g2, t2), (g3, t3)):
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-12,
                                   atol=1e-14)


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_activation_backward_ops_match_aten(torch, name):
    """The ops compute what aten's tanh_backward / sigmoid_backward compute, eager and in a
    graph (O2, where the expr template may fuse them)."""
    from duograph.graphlib.ops import elementwise as E
    fn = getattr(E, f"{name}_backward")
    aten = getattr(torch.ops.aten, f"{name}_backward")
    rng = np.random.default_rng(3)
    g, y = rng.standard_normal((2, 3)), rng.uniform(-0.9, 0.9, (2, 3))
    want = aten(torch.tensor(g), torch.tensor(y)).numpy()
    np.testing.assert_allclose(fn(dg.tensor(g), dg.tensor(y)).numpy(), want, rtol=1e-14)
    graph = dg.Graph(f"{name}_backward")
    with graph:
        pg, py = dg.placeholder("g", (2, 3), "float64"), dg.placeholder("y", (2, 3), "float64")
        out = fn(pg * 1.0, py).tanh()
    got, = graph.compile(outputs=[out], passes="O2")(g=g, y=y)
    np.testing.assert_allclose(got, np.tanh(want), rtol=1e-12)


@pytest.mark.parametrize("exact", [True, False])
def test_linear_weight_gradient_form_keeps_the_op_rules_bits(monkeypatch, exact):
    """``x @ w.T``'s weight gradient is computed as ``(g.T @ x).T`` only where that has the
    bits of ``x.T @ g``; forcing the check either way still gives the op rules' bits, and
    the check is made for the transposed weight only."""
    from duograph.runtime.cpu import autotune
    from duograph.runtime.cpu.backend import cpu_backend
    assert cpu_backend.autotune is autotune       # the one module of timing decisions
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((16, 40), (24, 40))]
    if exact and not autotune.swap_is_exact(arrays[0].T, np.ones((16, 24), np.float32)):
        pytest.skip("this BLAS sums the two forms of the product differently")
    asked = []

    def swap_is_exact(at, g):
        asked.append((at.shape, g.shape))
        return exact
    monkeypatch.setattr(autotune, "swap_is_exact", swap_is_exact)
    fn = _ARRAY_RULE_CASES[[c[0] for c in _ARRAY_RULE_CASES].index("linear_wide")][1]
    leaves = [dg.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    fast = [t.grad.numpy() for t in leaves]
    assert asked == [((40, 16), (16, 24))]       # for the weight, once: x.T and g
    slow = _grads(fn, arrays, monkeypatch, kernels=False)
    for f, s in zip(fast, slow):
        assert f.tobytes() == s.tobytes()
