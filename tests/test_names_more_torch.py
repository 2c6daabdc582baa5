"""Issue 28's second batch of names against PyTorch: the Tensor methods and the in-place
forms (method and module-level) of the special functions, and the torch-level functions
that are not op functions (dtype questions, spellings of nn.functional's)."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")


def _close(a, b, tol=1e-10):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


X = np.array([[0.3, -1.25, 2.5], [0.75, 1.5, -0.5]])
P = np.array([[0.2, 0.45, 0.9], [0.6, 0.05, 0.7]])
I1 = np.array([[4, -6, 9], [0, 12, 7]])
I2 = np.array([[6, 4, -3], [5, 0, 21]])


@pytest.mark.parametrize("name, data, args", [
    ("erfc", X, ()), ("erfinv", P, ()), ("lgamma", X, ()), ("digamma", X, ()),
    ("polygamma", X, (1,)), ("i0", X, ()), ("sinc", X, ()), ("logit", P, ()),
    ("logit", P, (0.3,)), ("deg2rad", X, ()), ("rad2deg", X, ()), ("signbit", X, ()),
    ("isposinf", X, ()), ("isneginf", X, ()), ("heaviside", X, (P,)), ("fmax", X, (P,)),
    ("fmin", X, (P,)), ("gcd", I1, (I2,)), ("lcm", I1, (I2,)), ("nextafter", X, (P,)),
    ("ldexp", X, (I1,)), ("logaddexp2", X, (P,)), ("logical_and", I1, (I2,)),
    ("logical_or", I1, (I2 * 0,)), ("absolute", X, ()), ("negative", I1, ())])
def test_methods_and_inplace_forms_match_torch(name, data, args):
    def conv(a, lib):
        return lib.tensor(a) if isinstance(a, np.ndarray) else a
    d, t = dg.tensor(data), torch.tensor(data)
    dargs, targs = [conv(a, dg) for a in args], [conv(a, torch) for a in args]
    _close(getattr(d, name)(*dargs), getattr(t, name)(*targs), 1e-8)
    if hasattr(torch.Tensor, name + "_") and name not in ("ldexp",):
        d2, t2 = dg.tensor(data), torch.tensor(data)
        assert getattr(d2, name + "_")(*dargs) is d2
        getattr(t2, name + "_")(*targs)
        _close(d2, t2, 1e-8)
    if hasattr(torch, name + "_") and name not in ("ldexp",):
        d3, t3 = dg.tensor(data), torch.tensor(data)
        getattr(dg, name + "_")(d3, *dargs)
        getattr(torch, name + "_")(t3, *targs)
        _close(d3, t3, 1e-8)


def test_ldexp_inplace_on_floats_matches_torch():
    d, t = dg.tensor(X), torch.tensor(X)
    e = np.array([1, 2, 0])
    d.ldexp_(dg.tensor(e))
    t.ldexp_(torch.tensor(e))
    _close(d, t)
    d2 = dg.tensor(X)
    dg.ldexp_(d2, dg.tensor(e))
    _close(d2, t)


def test_special_gradients_match_torch_eagerly():
    for name in ("erfc", "lgamma", "digamma", "i0", "sinc", "deg2rad"):
        d, t = dg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
        getattr(dg, name)(d).sum().backward()
        getattr(torch, name)(t).sum().backward()
        _close(d.grad, t.grad, 1e-9)


def test_inplace_forms_refuse_leaves_that_require_grad():
    d = dg.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError):
        d.erfc_()
    with pytest.raises(TypeError, match="erfc_"):
        dg.erfc_(X)


@pytest.mark.parametrize("name, data, args, kwargs", [
    ("kron", X, (P[:1],), {}), ("inner", X, (P,), {}), ("vdot", X[0], (P[0],), {}),
    ("addmv", X[:, 0], (P, X[0]), {"beta": 0.5}), ("addr", X, (X[:, 0], P[0]), {"alpha": 2}),
    ("addbmm", X, (np.ones((2, 2, 2)), np.ones((2, 2, 3))), {}),
    ("diag_embed", X, (1,), {}), ("diagflat", X, (), {}), ("hsplit", X, (3,), {}),
    ("vsplit", X, (2,), {}), ("select", X, (1, -1), {}), ("msort", X, (), {}),
    ("ravel", X, (), {}), ("broadcast_to", X[0], ((2, 3),), {}), ("char", I1, (), {}),
    ("cdouble", X, (), {}), ("cfloat", X, (), {})])
def test_product_methods_match_torch(name, data, args, kwargs):
    def conv(a, lib):
        return lib.tensor(a) if isinstance(a, np.ndarray) else a
    got = getattr(dg.tensor(data), name)(*[conv(a, dg) for a in args], **kwargs)
    want = getattr(torch.tensor(data), name)(*[conv(a, torch) for a in args], **kwargs)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        _close(g, w)


def test_aminmax_and_inplace_products_match_torch():
    d, t = dg.tensor(X), torch.tensor(X)
    for dim in (None, 0):
        got, want = d.aminmax(dim=dim), t.aminmax(dim=dim)
        _close(got.min, want.min)
        _close(got.max, want.max)
    d, t = dg.tensor(X[:, 0].copy()), torch.tensor(X[:, 0].copy())
    d.addmv_(dg.tensor(P), dg.tensor(X[0]), alpha=2)
    t.addmv_(torch.tensor(P), torch.tensor(X[0]), alpha=2)
    _close(d, t)
    d2 = dg.tensor(X[:, 0].copy())
    dg.addmv_(d2, dg.tensor(P), dg.tensor(X[0]), alpha=2)
    _close(d2, t)
