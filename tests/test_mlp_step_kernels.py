"""The CPU kernels of the graph-mode MLP training step against their references: the
memoised in-place gemm (``cblas.GemmUpdate``, the fused SGD update of a weight), the
one-pass ReLU-backward select (``where_bits`` with b = +0), and whole O2 steps against
hand-written numpy with feeds that change object between calls."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.runtime.cpu import cblas
from duograph.runtime.cpu import fused_special, numba_support
from duograph.runtime.cpu import select
from duograph.runtime.cpu.select import where_bits

needs_cblas = pytest.mark.skipif(not cblas.available(), reason="numpy's OpenBLAS not found")


def _operands(rng, m, k, n, ta, tb, dtype=np.float32):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    return (a.T if ta else a), (b.T if tb else b)


@needs_cblas
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_update_memo_matches_plain_call_and_numpy(ta, tb, dtype):
    rng = np.random.default_rng(0)
    a, b = _operands(rng, 7, 13, 5, ta, tb, dtype)
    c0 = rng.standard_normal((7, 5)).astype(dtype)
    plain, memo = c0.copy(), c0.copy()
    g = cblas.GemmUpdate()
    for _ in range(3):               # the later calls take the memoised path
        assert cblas.gemm_update(a, b, plain, -0.25, 1.0)
        assert g(a, b, memo, -0.25, 1.0)
    assert memo.tobytes() == plain.tobytes()
    want = c0.astype(np.float64) - 0.75 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(memo, want, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)


@needs_cblas
def test_gemm_update_memo_follows_new_operands():
    rng = np.random.default_rng(1)
    g = cblas.GemmUpdate()
    c = np.zeros((4, 3), np.float32)
    for trial in range(4):           # a new array each call: never the old pointers
        a = rng.standard_normal((4, 6)).astype(np.float32)
        b = rng.standard_normal((6, 3)).astype(np.float32)
        c[...] = 0
        assert g(a, b, c, 1.0, 0.0)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # the same a and b into another c
    c2 = np.ones((4, 3), np.float32)
    assert g(a, b, c2, 2.0, 1.0)
    np.testing.assert_allclose(c2, 1 + 2 * (a @ b), rtol=1e-5, atol=1e-5)


@needs_cblas
def test_gemm_update_memo_declines_what_plain_call_declines():
    rng = np.random.default_rng(2)
    g = cblas.GemmUpdate()
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)
    c = np.zeros((4, 3), np.float32)
    assert g(a, b, c, 1.0, 0.0)
    c.flags.writeable = False                 # after a memoised call: still checked
    assert not g(a, b, c, 1.0, 0.0)
    c.flags.writeable = True
    assert not g(a, b.astype(np.float64), c, 1.0, 0.0)      # mixed dtypes
    assert not g(a, b, np.zeros((3, 4), np.float32).T, 1.0, 0.0)  # c not C-contiguous
    big = np.zeros((4, 6), np.float32)
    assert not g(big, big[:, :6].T.copy().T, big, 1.0, 0.0)  # c overlaps a
    with dg.config.override(cblas=False):
        before = c.copy()
        assert not g(a, b, c, 1.0, 1.0)
        assert c.tobytes() == before.tobytes()


def _specials(dtype):
    if np.dtype(dtype).kind == "f":
        return np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.5, -2.0, 3e-39, -7.0], dtype)
    return np.array([1, -2, 0, 5, 3, -1, 7, 100, -100]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64,
                                   np.int8, np.uint16])
@pytest.mark.parametrize("scalar", [False, True])
def test_where_bits_zero_branch_is_numpys_where(dtype, scalar):
    a = _specials(dtype)
    c = np.array([1, 1, 1, 1, 0, 0, 1, 0, 1], bool)
    b = dtype(0) if scalar else np.asarray(dtype(0))
    out = np.full_like(a, 9)
    assert where_bits(np, c, a, b, out)
    assert out.tobytes() == np.where(c, a, b).tobytes()
    inplace = a.copy()                                    # out over a
    assert where_bits(np, c, inplace, b, inplace)
    assert inplace.tobytes() == np.where(c, a, b).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_bits_negative_zero_branch_keeps_its_sign(dtype):
    a = _specials(dtype)
    c = np.array([1, 0, 1, 0, 0, 0, 1, 0, 1], bool)
    b = np.asarray(dtype(-0.0))
    out = np.empty_like(a)
    assert where_bits(np, c, a, b, out)
    assert out.tobytes() == np.where(c, a, b).tobytes()


@pytest.mark.parametrize("case", ["same", "bcast_cond", "bcast_a", "scalar_b", "mixed",
                                  "strided", "float_cond"])
def test_where_kernel_gives_the_reference_bytes(case):
    """The CPU backend's ``where`` kernel (bit masks where they apply, numpy's where
    otherwise) returns the reference kernel's dtype, shape and bytes."""
    from duograph.graphlib.ops.elementwise import where_op
    from duograph.runtime.cpu.backend import cpu_backend
    a = np.tile(_specials(np.float32), 3).reshape(3, 9)
    b = np.full((3, 9), -0.0, np.float32)
    c = np.arange(27).reshape(3, 9) % 3 != 1
    if case == "bcast_cond":
        c = c[:1]
    elif case == "bcast_a":
        a = a[:1]
    elif case == "scalar_b":
        b = np.zeros((), np.float32)
    elif case == "mixed":
        b = b.astype(np.float64)
    elif case == "strided":
        a, b, c = a.T, b.T, c.T
    elif case == "float_cond":
        c = c.astype(np.float32)
    fast = cpu_backend.kernels[where_op](np, c, a, b)
    want = where_op.kernel(np, c, a, b)
    assert cpu_backend.kernels[where_op] is not where_op.kernel
    assert fast.dtype == want.dtype and fast.shape == want.shape
    assert fast.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("numba", [True, False])
def test_relu_backward_passes_nan_and_blocks_at_zero(dtype, numba):
    """The ReLU backward (the CPU vjp kernel for relu's rule, with numba's one pass and
    without): g where y != 0, +0 elsewhere, so a NaN cotangent passes where the input was
    positive (PyTorch's threshold_backward), and the bytes are the rule's."""
    values = np.array([1.0, -1.0, 0.0, 2.0, -0.0, 3.0, np.inf, np.nan], dtype)
    gs = np.array([np.nan, np.nan, 5.0, -0.0, 7.0, 2.0, -np.inf, 1.0], dtype)
    want = np.array([np.nan, 0.0, 0.0, -0.0, 0.0, 2.0, -np.inf, 1.0], dtype)
    for rows in (3, select.NUMBA_MIN_ELEMENTS // 8):      # numpy's kernels, then numba's
        with dg.config.override(numba=numba):
            x = dg.tensor(np.tile(values, (rows, 1)), requires_grad=True)
            x.relu().backward(dg.tensor(np.tile(gs, (rows, 1))))
        assert x.grad.dtype == np.dtype(dtype).name
        assert x.grad.numpy().tobytes() == np.tile(want, (rows, 1)).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("numba", [True, False])
def test_relu_forward_gives_maximums_bytes(dtype, numba):
    """The CPU relu kernel (numba's one pass on large float arrays) gives the bytes of
    ``np.maximum(x, 0)``: NaNs with their payload and sign, +0 for -0.0, infinities."""
    values = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0], dtype)
    x = np.tile(values, (select.NUMBA_MIN_ELEMENTS // 8, 1))
    with dg.config.override(numba=numba):
        y = dg.tensor(x).relu().numpy()
    assert y.dtype == x.dtype and y.tobytes() == np.maximum(x, 0).tobytes()


def _mlp_reference_steps(state, xs, ys, lr):
    """Plain float64 numpy SGD steps of the MLP, the losses."""
    W = [state[f"{i}.weight"].astype(np.float64) for i in (0, 2, 4)]
    bs = [state[f"{i}.bias"].astype(np.float64) for i in (0, 2, 4)]
    losses = []
    for x, y in zip(xs, ys):
        hs, zs = [x.astype(np.float64)], []
        for i in range(3):
            z = hs[-1] @ W[i].T + bs[i]
            zs.append(z)
            hs.append(np.maximum(z, 0) if i < 2 else z)
        z = zs[-1] - zs[-1].max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        losses.append(-np.log(p[np.arange(len(y)), y]).mean())
        d = p.copy()
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        for i in (2, 1, 0):
            gW, gb = d.T @ hs[i], d.sum(0)
            if i:
                d = (d @ W[i]) * (zs[i - 1] > 0)
            W[i] -= lr * gW
            bs[i] -= lr * gb
    return losses, W


@pytest.mark.parametrize("passes", ["O0", "O2"])
@pytest.mark.parametrize("batch", [3, 40])
def test_mlp_training_step_graph_matches_numpy(passes, batch):
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 4))
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    g = dg.Graph("mlp_step")
    with g:
        xv = dg.placeholder("x", ("N", 20))
        yv = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(xv), yv)
        opt.minimize(loss)
    exe = g.compile(outputs=[loss], passes=passes)
    rng = np.random.default_rng(batch)
    xs = [rng.standard_normal((batch, 20)).astype(np.float32) for _ in range(4)]
    ys = [rng.integers(0, 4, batch).astype(np.int64) for _ in range(4)]
    xs[2] = xs[1]                              # the same feed object twice, then a new one
    got = [float(exe(x=x, y=y)[0]) for x, y in zip(xs, ys)]
    want, W = _mlp_reference_steps(state, xs, ys, 0.1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    final = {k: v.numpy() for k, v in model.state_dict().items()}
    for i, w in zip((0, 2, 4), W):
        np.testing.assert_allclose(final[f"{i}.weight"], w, rtol=1e-4, atol=1e-5)


def test_graph_sgd_step_reads_each_new_learning_rate():
    """The learning-rate holder memoises its array per lr object: a changed lr (float, int,
    numpy scalar, the same value again) still reaches the next run of a compiled step."""
    w = nn.Parameter(dg.tensor(np.array([1.0, 2.0], np.float32)))
    opt = dg.optim.SGD([w], lr=0.5)
    g = dg.Graph("sgd_lr")
    with g:
        xv = dg.placeholder("x", (2,))
        loss = (w * xv).sum()
        opt.minimize(loss)
    exe = g.compile(outputs=[loss], passes="O2")
    x = np.array([1.0, -1.0], np.float32)
    want = np.array([1.0, 2.0])
    for lr in (0.5, 0.5, 0.25, 1, np.float64(0.125), 0.125, 2.0):
        opt.param_groups[0]["lr"] = lr
        exe(x=x)
        want = want - float(lr) * x
        np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-6)


@needs_cblas
def test_gemm_update_memo_sees_an_array_reshaped_in_place():
    rng = np.random.default_rng(3)
    g = cblas.GemmUpdate()
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 6)).astype(np.float32)
    c = np.zeros((4, 6), np.float32)
    assert g(a, b, c, 1.0, 0.0)
    a.shape = (2, 12)                         # the same object, a new shape: checked again
    assert not g(a, b, c, 1.0, 0.0)           # (2, 12) @ (6, 6) does not fit
    b.shape = (12, 3)
    c.shape = (8, 3)
    assert not g(a, b, c, 1.0, 0.0)           # c is (8, 3), the product (2, 3)
    c2 = np.zeros((2, 3), np.float32)
    assert g(a, b, c2, 1.0, 0.0)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-5, atol=1e-5)


def _linear_relu_step(batch, passes):
    dg.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = dg.optim.SGD(model.parameters(), lr=0.05)
    g = dg.Graph("linear_relu_step")
    with g:
        xv = dg.placeholder("x", ("N", 784))
        yv = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(xv), yv)
        opt.minimize(loss)
    return model, g.compile(outputs=[loss], passes=passes)


@pytest.mark.skipif(not numba_support.numba_available(), reason="numba is not installed")
@pytest.mark.parametrize("batch", [32, 128])
def test_swapped_linear_epilogue_gives_the_unswapped_bits(monkeypatch, batch):
    """A Linear's ``relu(x @ W.T + b)`` run as ``W @ x.T`` with the epilogue reading the
    product transposed (where that measured faster) gives the bits of the form as written:
    three O2 training steps with the swap forced on and forced off agree exactly, and both
    agree with O0 to float32 rounding."""
    from duograph.runtime.cpu.autotune import same_bits
    rng = np.random.default_rng(batch)
    xs = [rng.standard_normal((batch, 784)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 10, batch).astype(np.int64) for _ in range(3)]
    w = (rng.standard_normal((256, 784)) * 0.05).astype(np.float32)
    if not same_bits(xs[0], w.T):
        pytest.skip("this BLAS sums x @ W.T and W @ x.T differently: the swap never runs")
    results = {}
    for name, faster in (("on", True), ("off", False)):
        asked = []

        def decide(new, old, arrays, outs, _faster=faster, _asked=asked):
            _asked.append(arrays[0].shape)
            return _faster
        monkeypatch.setattr(fused_special, "_runs_faster", decide)
        model, exe = _linear_relu_step(batch, "O2")
        losses = [exe(x=x, y=y)[0] for x, y in zip(xs, ys)]
        assert asked == [(batch, 784)]            # decided once, for the first layer
        results[name] = losses, {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model, exe = _linear_relu_step(batch, "O0")
    ref = [exe(x=x, y=y)[0] for x, y in zip(xs, ys)]
    (on, won), (off, woff) = results["on"], results["off"]
    for a, b, r in zip(on, off, ref):
        assert a.tobytes() == b.tobytes()
        np.testing.assert_allclose(a, r, rtol=1e-5)
    for k in won:
        assert won[k].tobytes() == woff[k].tobytes(), k


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_out_kernel_gives_the_reference_bytes(dtype):
    """The planned sigmoid (``out=`` form; -|x| as one copysign) gives the reference
    kernel's bytes, written apart and over its input, NaNs and signed zeros included."""
    from duograph.graphlib.ops.elementwise import sigmoid_op
    from duograph.runtime.cpu.out_kernels import table
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(512) * 30, _specials(dtype),
                        [1e-45, -1e-45, 88.7, -88.7, 1e30, -1e30]]).astype(dtype)
    out_form = table()[sigmoid_op]
    want = sigmoid_op.kernel(np, x).tobytes()
    out = np.empty_like(x)
    assert out_form(np, x, out) is not False
    assert out.tobytes() == want
    inplace = x.copy()
    assert out_form(np, inplace, inplace) is not False
    assert inplace.tobytes() == want
