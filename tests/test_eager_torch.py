"""PyTorch as an oracle for eager mode: values and gradients of composite functions (float64),
higher-order gradients through ``create_graph``, and the same through ``dg.compile``.

Each composite is written once against a namespace ``lib`` (``duograph`` or ``torch``) and
the methods both tensor types share, so the two runs do exactly the same maths.
"""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")


def mlp(lib, x, w1, b1, w2):
    h = (x @ w1 + b1).tanh()
    return ((h @ w2).sigmoid() ** 2).mean()


def cross_entropy(lib, x, w):
    logits = x @ w
    logp = logits.log_softmax(1)
    return -(logp[:, 0].sum() + logp[:, 1].mean())


def leaky_where(lib, x, w):
    y = x * w
    return lib.where(y > 0, y, y * 0.1).sum() + (y.exp() / y.exp().sum()).amax()


def shapes(lib, x, w):
    y = x.reshape(3, 4).permute(1, 0) * w[:, :3].sum(0)
    return lib.cat([y, y[1:] * 2], 0).logsumexp(1).sum() + y.abs().mean()


def norms(lib, x, w):
    z = (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1e-5).sqrt()
    return (z @ w).relu().pow(3).sum() / x.numel() + (x * x).sum().rsqrt()


def classic(lib, x):
    return ((x * 2) ** 2).mean()


RNG = np.random.default_rng(7)
CASES = [
    ("mlp", mlp, [(5, 4), (4, 6), (6,), (6, 1)]),
    ("cross_entropy", cross_entropy, [(6, 3), (3, 4)]),
    ("leaky_where", leaky_where, [(3, 4), (4,)]),
    ("shapes", shapes, [(12,), (4, 4)]),
    ("norms", norms, [(4, 5), (5, 3)]),
    ("classic", classic, [(3,)]),
]


def _arrays(shapes_):
    return [RNG.standard_normal(s) for s in shapes_]


def _torch_run(fn, arrays):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(torch, *ts)
    grads = torch.autograd.grad(out, ts, allow_unused=True)
    return out.item(), [np.zeros_like(a) if g is None else g.numpy()
                        for a, g in zip(arrays, grads)]


@pytest.mark.parametrize("name, fn, shapes_", CASES, ids=[c[0] for c in CASES])
def test_eager_values_and_gradients_match_torch(name, fn, shapes_):
    arrays = _arrays(shapes_)
    want, want_grads = _torch_run(fn, arrays)
    ts = [dg.tensor(a, requires_grad=True) for a in arrays]
    out = fn(dg, *ts)
    out.backward()
    np.testing.assert_allclose(out.item(), want, rtol=1e-12)
    for i, (t, g) in enumerate(zip(ts, want_grads)):
        got = np.zeros_like(g) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(got, g, rtol=1e-10, atol=1e-12, err_msg=f"operand {i}")


@pytest.mark.parametrize("name, fn, shapes_", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_compiled_values_and_gradients_match_torch(name, fn, shapes_):
    fast = dg.compile(lambda *xs: fn(dg, *xs))
    for _ in range(2):          # the recording call, then a replay
        arrays = _arrays(shapes_)
        want, want_grads = _torch_run(fn, arrays)
        ts = [dg.tensor(a, requires_grad=True) for a in arrays]
        out = fast(*ts)
        out.backward()
        np.testing.assert_allclose(out.item(), want, rtol=1e-12)
        for t, g in zip(ts, want_grads):
            np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-10, atol=1e-12)
    assert len(fast) == 1


def test_second_derivatives_match_torch():
    a = RNG.standard_normal(4)

    def f(lib, x):
        return (x.sin() * x ** 3).sum() + (x * x).exp().mean()

    tx = torch.tensor(a, requires_grad=True)
    (tg,) = torch.autograd.grad(f(torch, tx), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    x = dg.tensor(a, requires_grad=True)
    (g,) = dg.autograd.grad(f(dg, x), x, create_graph=True)
    (h,) = dg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-10)


def test_hooks_and_retain_grad_match_torch():
    a = RNG.standard_normal(3)
    results = []
    for lib, make in ((torch, lambda v: torch.tensor(v, requires_grad=True)),
                      (dg, lambda v: dg.tensor(v, requires_grad=True))):
        x = make(a)
        y = x * 3
        y.retain_grad()
        y.register_hook(lambda g: g * 2)
        x.register_hook(lambda g: g + 1)
        (y * y).sum().backward()
        results.append((x.grad.detach().numpy().copy(), y.grad.detach().numpy().copy()))
    (tx, ty), (dx, dy) = results
    np.testing.assert_allclose(dx, tx, rtol=1e-12)
    np.testing.assert_allclose(dy, ty, rtol=1e-12)


def test_membership_test_on_eager_tensors_compares_values_as_torch():
    """Unlike a symbolic Value (tests/test_ir.py), an eager tensor answers ``in`` by value."""
    for a, b in ((1.0, 1.0), (1.0, 2.0)):
        assert (dg.tensor([a]) in [dg.tensor([b])]) == (torch.tensor([a]) in [torch.tensor([b])])
