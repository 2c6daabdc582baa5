"""torch.linalg's inverses, solvers and factorisations against PyTorch: what the op table
cannot say (errors raised at run time, named tuples, dg.compile, batched gradients).
The values and float64 gradients of every sample are checked in test_ops_torch.py."""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")
L = dg.linalg


def _singular():
    a = np.eye(3)
    a[2] = a[1]
    return np.stack([np.eye(3) * 2, a])


@pytest.mark.parametrize("name, args", [
    ("inv", (_singular(),)), ("solve", (_singular(), np.ones((2, 3)))),
    ("cholesky", (-np.eye(2),))])
def test_run_time_failures_are_linalg_errors_as_torch(name, args):
    with pytest.raises(torch.linalg.LinAlgError):
        getattr(torch.linalg, name)(*map(torch.tensor, args))
    with pytest.raises(L.LinAlgError, match=f"linalg.{name}") as info:
        getattr(L, name)(*map(dg.tensor, args))
    assert isinstance(info.value, RuntimeError)
    g = dg.Graph(name)
    with g:
        xs = [dg.placeholder(f"x{i}", a.shape, "float64") for i, a in enumerate(args)]
        y = getattr(L, name)(*xs)
    with pytest.raises(L.LinAlgError, match="singular|positive-definite"):
        g.compile(outputs=[y])(**{f"x{i}": a for i, a in enumerate(args)})


def test_batch_element_is_named():
    with pytest.raises(L.LinAlgError, match=r"Batch element \[1\]"):
        L.inv(dg.tensor(_singular()))


@pytest.mark.parametrize("name, exc", [("inv", RuntimeError), ("det", RuntimeError),
                                       ("eigh", RuntimeError), ("cholesky", RuntimeError)])
def test_non_square_is_refused_as_torch(name, exc):
    x = np.zeros((2, 3))
    with pytest.raises(exc, match="square"):
        getattr(torch.linalg, name)(torch.tensor(x))
    with pytest.raises(exc, match="square"):
        getattr(L, name)(dg.tensor(x))


def test_named_tuples_have_torch_fields():
    a = np.eye(3) * 2.0
    for name, fields in (("slogdet", ("sign", "logabsdet")), ("qr", ("Q", "R")),
                         ("eigh", ("eigenvalues", "eigenvectors")),
                         ("lstsq", ("solution", "residuals", "rank", "singular_values"))):
        args = (a,) * (2 if name == "lstsq" else 1)
        ours = getattr(L, name)(*map(dg.tensor, args))
        theirs = getattr(torch.linalg, name)(*map(torch.tensor, args))
        assert ours._fields == fields
        for field in fields:
            np.testing.assert_allclose(getattr(ours, field).numpy(),
                                       getattr(theirs, field).numpy(), atol=1e-12)


def test_compiled_solve_and_slogdet_with_gradients_match_torch():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 3, 3)) + 3 * np.eye(3)
    b = rng.normal(size=(3, 2))

    def f(x, y):
        return (L.solve(x, y) ** 2).sum() + L.slogdet(x).logabsdet.sum()
    xa, xb = dg.tensor(a, requires_grad=True), dg.tensor(b, requires_grad=True)
    out = dg.compile(f)(xa, xb)
    out.backward()
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tout = (torch.linalg.solve(ta, tb) ** 2).sum() + torch.linalg.slogdet(ta).logabsdet.sum()
    tout.backward()
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-12)
    np.testing.assert_allclose(xa.grad.numpy(), ta.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(xb.grad.numpy(), tb.grad.numpy(), rtol=1e-10)


def test_qr_mode_r_has_no_gradient():
    a = dg.tensor(np.random.default_rng(1).normal(size=(4, 3)), requires_grad=True)
    q, r = L.qr(a, mode="r")
    assert q.shape == (0,) and not r.requires_grad
    with pytest.raises(RuntimeError):
        r.sum().backward()
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.linalg.qr(torch.ones(4, 3, requires_grad=True), mode="complete")[0].sum().backward()
    with pytest.raises(ValueError, match="not differentiable"):
        L.qr(a, mode="complete").Q.sum().backward()
