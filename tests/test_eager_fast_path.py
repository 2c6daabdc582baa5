"""Eager dispatch's fast path (per-signature plans, tensor operators straight to eager_apply,
cached scalars) must behave exactly as the general path: these tests warm the fast path
first, then check what only the general path used to decide."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

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
def test_weak_scalar_dtypes_match_torch(dtype, scalar):
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
        np.testing.assert_array_equal((-0.0 * t).numpy(), (torch.tensor([1.0, -2.0]) * -0.0))


def test_fast_path_gradients_match_torch():
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
