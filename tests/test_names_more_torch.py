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


def test_linear_algebra_methods_match_torch():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    spd = a @ a.T
    low = np.linalg.cholesky(spd)
    b = rng.normal(size=(3, 2))
    d, t = dg.tensor(a), torch.tensor(a)
    for name, args in [("det", ()), ("logdet", ()), ("inverse", ()), ("pinverse", ()),
                       ("matrix_power", (3,))]:
        _close(getattr(d, name)(*args), getattr(t, name)(*args), 1e-9)
        _close(getattr(dg, name)(d, *args), getattr(torch, name)(t, *args), 1e-9)
    for got, want in zip(d.slogdet(), t.slogdet()):
        _close(got, want, 1e-9)
    _close(dg.tensor(spd).cholesky(), torch.tensor(spd).cholesky(), 1e-9)
    _close(dg.tensor(b).cholesky_solve(dg.tensor(low)),
           torch.tensor(b).cholesky_solve(torch.tensor(low)), 1e-9)
    _close(dg.tensor(low).cholesky_inverse(), torch.tensor(low).cholesky_inverse(), 1e-9)
    q, r = d.qr()
    _close(q @ r, t, 1e-9)
    u, s, v = d.svd()
    _close(s, t.svd().S, 1e-9)
    _close((u * s) @ v.mT, t, 1e-9)
    tau = np.array([1.1, 0.4])
    _close(d.orgqr(dg.tensor(tau)), t.orgqr(torch.tensor(tau)), 1e-9)


def test_cholesky_solve_gradients_match_torch():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    low = np.linalg.cholesky(a @ a.T)
    b = rng.normal(size=(3, 2))
    db, dl = dg.tensor(b, requires_grad=True), dg.tensor(low, requires_grad=True)
    tb, tl = torch.tensor(b, requires_grad=True), torch.tensor(low, requires_grad=True)
    (dg.cholesky_solve(db, dl) ** 2).sum().backward()
    (torch.cholesky_solve(tb, tl) ** 2).sum().backward()
    _close(db.grad, tb.grad, 1e-9)
    _close(dl.grad, torch.tril(tl.grad), 1e-9)


def test_type_questions_match_torch():
    for data in ([1.5], [0], [[2]], [1, 2], []):
        d, t = dg.tensor(data), torch.tensor(data)
        for name in ("is_complex", "is_conj", "is_neg"):
            assert getattr(dg, name)(d) == getattr(torch, name)(t)
            assert getattr(d, name)() == getattr(t, name)()
        assert dg.is_same_size(d, d) and d.is_same_size(d)
        assert dg.resolve_conj(d) is d and d.resolve_neg() is d
        if len(data) == 1:
            assert dg.is_nonzero(d) == torch.is_nonzero(t)
        else:
            with pytest.raises(RuntimeError):
                torch.is_nonzero(t)
            with pytest.raises(RuntimeError, match="is_nonzero"):
                dg.is_nonzero(d)
    with pytest.raises(TypeError, match="is_complex"):
        dg.is_complex([1.0])
    _close(dg.sub(dg.tensor([3.0, 1.0]), dg.tensor([1.0, 2.0]), alpha=2),
           torch.sub(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 2.0]), alpha=2))
    _close(dg.add(dg.tensor([3, 1]), dg.tensor([1, 2]), alpha=3),
           torch.add(torch.tensor([3, 1]), torch.tensor([1, 2]), alpha=3))
    assert np.isnan(dg.nan) and dg.inf == torch.inf and dg.pi == torch.pi and dg.e == torch.e


def test_doc_examples_port_compares_values_not_spellings():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "benchmarks" / "doc_examples_port.py"
    spec = importlib.util.spec_from_file_location("doc_examples_port", path)
    port = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(port)
    examples = port._examples(torch.heaviside.__doc__)
    assert examples
    want = [port._plain(v) for v in port._run_isolated(examples, torch)]
    got = [port._plain(v) for v in port._run_isolated(examples, dg)]
    assert all(port._same(w, g) for w, g in zip(want, got))
    assert not port._same(port._plain(torch.tensor([1.0])), port._plain(dg.tensor([1.5])))
    assert not port._same(port._plain(torch.tensor([1.0])), port._plain(dg.tensor([1])))
    assert port._same(port._plain(torch.float64), port._plain(dg.float64))


def test_resize_and_masked_scatter_broadcast_as_torch():
    for sizes, start in (((2, 3), 6), ((6,), 4), ((2,), 5), (((3, 2),), 6)):
        ours = dg.arange(1.0, start + 1.0).resize_(*sizes)
        theirs = torch.arange(1.0, start + 1.0).resize_(*sizes)
        assert tuple(ours.shape) == tuple(theirs.shape)
        keep = min(start, theirs.numel())         # PyTorch leaves the rest uninitialised
        np.testing.assert_array_equal(ours.numpy().reshape(-1)[:keep],
                                      theirs.numpy().reshape(-1)[:keep])
    assert tuple(dg.arange(6).resize_as_(dg.zeros(3, 2)).shape) == (3, 2)
    with pytest.raises(RuntimeError, match="require grad"):
        dg.ones(3, requires_grad=True).resize_(2)
    with pytest.raises(RuntimeError, match="require grad"):
        torch.ones(3, requires_grad=True).resize_(2)
    mask = [[0, 0, 0, 1, 1], [1, 1, 0, 1, 1]]
    src = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    ours = dg.tensor([0] * 5).masked_scatter(dg.tensor(mask, dtype=dg.bool), dg.tensor(src))
    theirs = torch.tensor([0] * 5).masked_scatter(torch.tensor(mask, dtype=torch.bool),
                                                  torch.tensor(src))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(RuntimeError):
        dg.tensor([0] * 5).masked_scatter_(dg.tensor(mask, dtype=dg.bool), dg.tensor(src))
    with pytest.raises(RuntimeError):
        torch.tensor([0] * 5).masked_scatter_(torch.tensor(mask, dtype=torch.bool),
                                              torch.tensor(src))
