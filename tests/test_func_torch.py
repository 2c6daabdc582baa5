"""duograph.func and duograph.autograd.functional against torch.func and
torch.autograd.functional: per-sample gradients of an MLP (vmap(grad) with functional_call),
Jacobians, Hessians and jvps of composite functions in float64, nested vmap, in_dims and
out_dims variants, model ensembling, and the error messages for bad in_dims."""
import numpy as np
import pytest

import duograph as dg
import duograph.autograd.functional as AF
import duograph.nn.functional as DF
from duograph import func

torch = pytest.importorskip("torch")
TF = torch.autograd.functional

_rng = np.random.default_rng(27)


def _np(x):
    if isinstance(x, (tuple, list)):
        return [_np(y) for y in x]
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _close(got, want, tol=1e-10):
    got, want = _np(got), _np(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, tol)
    elif isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _close(got[k], want[k], tol)
    else:
        assert np.shape(got) == np.shape(want), (np.shape(got), np.shape(want))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _models(i=10, h=16, c=4):
    dm = dg.nn.Sequential(dg.nn.Linear(i, h), dg.nn.Tanh(), dg.nn.Linear(h, c)).double()
    tm = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.Tanh(),
                             torch.nn.Linear(h, c)).double()
    with torch.no_grad():
        for (_, p), (_, q) in zip(dm.named_parameters(), tm.named_parameters()):
            q.copy_(torch.tensor(_np(p)))
    return dm, tm


def test_per_sample_gradients_of_an_mlp_equal_torch_func():
    dm, tm = _models()
    x, y = _rng.standard_normal((8, 10)), _rng.integers(0, 4, 8)

    def loss_dg(params, xi, yi):
        return DF.cross_entropy(func.functional_call(dm, params, (xi.unsqueeze(0),)),
                                yi.unsqueeze(0))

    def loss_t(params, xi, yi):
        return torch.nn.functional.cross_entropy(
            torch.func.functional_call(tm, params, (xi.unsqueeze(0),)), yi.unsqueeze(0))
    pd = {k: v.detach() for k, v in dm.named_parameters()}
    pt = {k: v.detach() for k, v in tm.named_parameters()}
    got = func.vmap(func.grad(loss_dg), in_dims=(None, 0, 0))(pd, dg.tensor(x), dg.tensor(y))
    want = torch.func.vmap(torch.func.grad(loss_t), in_dims=(None, 0, 0))(
        pt, torch.tensor(x), torch.tensor(y))
    _close(got, want, 1e-12)
    # with the value and the loss per example as well
    (g2, v2) = func.vmap(func.grad_and_value(loss_dg), in_dims=(None, 0, 0))(
        pd, dg.tensor(x), dg.tensor(y))
    (gt2, vt2) = torch.func.vmap(torch.func.grad_and_value(loss_t), in_dims=(None, 0, 0))(
        pt, torch.tensor(x), torch.tensor(y))
    _close(g2, gt2, 1e-12)
    _close(v2, vt2, 1e-12)


def _composites(m):
    sm = (lambda v, d: torch.softmax(v, d)) if m is torch else (lambda v, d: v.softmax(d))
    return {
        "tanh_matmul_sum": lambda x, w: ((x @ w).tanh()).sum(-1) * x.exp().sum(),
        "softmax_exp": lambda x, w: sm((x @ w).exp(), -1) * (x * x).sum(),
        "sin_mul": lambda x, w: (x.sin() @ w) * (w * w).sum(0),
    }


@pytest.mark.parametrize("name", ["tanh_matmul_sum", "softmax_exp", "sin_mul"])
@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobians_equal_torch(name, transform):
    x, w = _rng.standard_normal((3, 4)), _rng.standard_normal((4, 2))
    fd, ft = _composites(dg)[name], _composites(torch)[name]
    got = getattr(func, transform)(fd, argnums=(0, 1))(dg.tensor(x), dg.tensor(w))
    want = getattr(torch.func, transform)(ft, argnums=(0, 1))(torch.tensor(x), torch.tensor(w))
    _close(got, want)
    got = AF.jacobian(fd, (dg.tensor(x), dg.tensor(w)))
    want = TF.jacobian(ft, (torch.tensor(x), torch.tensor(w)))
    _close(got, want)


@pytest.mark.parametrize("name", ["tanh_matmul_sum", "softmax_exp", "sin_mul"])
def test_hessians_equal_torch(name):
    x, w = _rng.standard_normal((3, 4)), _rng.standard_normal((4, 2))
    fd, ft = _composites(dg)[name], _composites(torch)[name]
    got = func.hessian(lambda a: fd(a, dg.tensor(w)).sum())(dg.tensor(x))
    want = torch.func.hessian(lambda a: ft(a, torch.tensor(w)).sum())(torch.tensor(x))
    _close(got, want)
    got = AF.hessian(lambda a, b: fd(a, b).sum(), (dg.tensor(x), dg.tensor(w)))
    want = TF.hessian(lambda a, b: ft(a, b).sum(), (torch.tensor(x), torch.tensor(w)))
    _close(got, want)
    # jacrev(jacfwd) and jacrev(jacrev) compose to the same thing
    got = func.jacrev(func.jacfwd(lambda a: fd(a, dg.tensor(w)).sum()))(dg.tensor(x))
    _close(got, want[0][0])
    got = func.jacrev(func.jacrev(lambda a: fd(a, dg.tensor(w)).sum()))(dg.tensor(x))
    _close(got, want[0][0])


def test_jvp_vjp_hvp_equal_torch():
    x, w = _rng.standard_normal((3, 4)), _rng.standard_normal((4, 2))
    tx, tw = _rng.standard_normal((3, 4)), _rng.standard_normal((4, 2))
    fd, ft = _composites(dg)["softmax_exp"], _composites(torch)["softmax_exp"]
    D = (dg.tensor(x), dg.tensor(w))
    T = (torch.tensor(x), torch.tensor(w))
    DV = (dg.tensor(tx), dg.tensor(tw))
    TV = (torch.tensor(tx), torch.tensor(tw))
    _close(func.jvp(fd, D, DV), torch.func.jvp(ft, T, TV))
    _close(AF.jvp(fd, D, DV), TF.jvp(ft, T, TV))
    ct = _rng.standard_normal((3, 2))
    out, fn = func.vjp(fd, *D)
    outt, fnt = torch.func.vjp(ft, *T)
    _close(out, outt)
    _close(fn(dg.tensor(ct)), fnt(torch.tensor(ct)))
    _close(AF.vjp(fd, D, dg.tensor(ct)), TF.vjp(ft, T, torch.tensor(ct)))

    def sd(a, b):
        return fd(a, b).sum()

    def st(a, b):
        return ft(a, b).sum()
    _close(AF.hvp(sd, D, DV), TF.hvp(st, T, TV))
    _close(AF.vhp(sd, D, DV), TF.vhp(st, T, TV))


def test_has_aux_and_argnums_equal_torch():
    x, w = _rng.standard_normal(4), _rng.standard_normal((4, 3))

    def fd(a, b):
        y = (a @ b).tanh()
        return y.sum(), {"y": y}

    def ft(a, b):
        y = (a @ b).tanh()
        return y.sum(), {"y": y}
    D, T = (dg.tensor(x), dg.tensor(w)), (torch.tensor(x), torch.tensor(w))
    _close(func.grad(fd, argnums=(0, 1), has_aux=True)(*D),
           torch.func.grad(ft, argnums=(0, 1), has_aux=True)(*T))
    _close(func.grad_and_value(fd, argnums=1, has_aux=True)(*D),
           torch.func.grad_and_value(ft, argnums=1, has_aux=True)(*T))
    _close(func.jacrev(fd, has_aux=True)(*D), torch.func.jacrev(ft, has_aux=True)(*T))
    out, fn, aux = func.vjp(fd, *D, has_aux=True)
    outt, fnt, auxt = torch.func.vjp(ft, *T, has_aux=True)
    _close((out, aux), (outt, auxt))
    _close(fn(dg.tensor(1.0, dtype="float64")), fnt(torch.tensor(1.0, dtype=torch.float64)))


@pytest.mark.parametrize("in_dims,out_dims", [
    (0, 0), (1, 0), ((0, None), 1), ((1, None), -1), ((-1, None), 0)])
def test_in_dims_and_out_dims_equal_torch(in_dims, out_dims):
    x, w = _rng.standard_normal((5, 5, 5)), _rng.standard_normal((5, 3))
    shared_w = isinstance(in_dims, tuple)

    def fd(a, b):
        return (a @ b).exp().sum(0) if not shared_w else (a @ b).tanh()

    def ft(a, b):
        return (a @ b).exp().sum(0) if not shared_w else (a @ b).tanh()
    wd = w if shared_w else np.stack([w] * 5, axis=0 if in_dims == 0 else 1)
    got = func.vmap(fd, in_dims, out_dims)(dg.tensor(x), dg.tensor(wd))
    want = torch.func.vmap(ft, in_dims, out_dims)(torch.tensor(x), torch.tensor(wd))
    _close(got, want)


def test_nested_vmap_and_pytrees_equal_torch():
    x, y = _rng.standard_normal((3, 4, 5)), _rng.standard_normal((4, 5))

    def fd(d):
        return {"s": (d["a"] * d["b"]).softmax(-1), "t": [d["a"].sum(), d["b"].exp()]}

    def ft(d):
        return {"s": torch.softmax(d["a"] * d["b"], -1), "t": [d["a"].sum(), d["b"].exp()]}
    in_dims = ({"a": 0, "b": None},)
    got = func.vmap(func.vmap(fd, in_dims), ({"a": 0, "b": None},))(
        {"a": dg.tensor(x), "b": dg.tensor(y)})
    want = torch.func.vmap(torch.func.vmap(ft, in_dims), ({"a": 0, "b": None},))(
        {"a": torch.tensor(x), "b": torch.tensor(y)})
    _close(got, want)
    # vmap of matmul-vector products in both positions, nested over two batch dims
    a, b = _rng.standard_normal((2, 3, 4, 5)), _rng.standard_normal((2, 5))
    got = func.vmap(func.vmap(lambda p, q: p @ q, (0, None)), (0, 0))(dg.tensor(a),
                                                                      dg.tensor(b))
    want = torch.func.vmap(torch.func.vmap(lambda p, q: p @ q, (0, None)), (0, 0))(
        torch.tensor(a), torch.tensor(b))
    _close(got, want)


def test_ensembles_with_stack_module_state_equal_torch():
    models = [_models() for _ in range(3)]
    dparams, dbufs = func.stack_module_state([m[0] for m in models])
    tparams, tbufs = torch.func.stack_module_state([m[1] for m in models])
    _close(dparams, tparams)
    x = _rng.standard_normal((6, 10))
    base_d, base_t = models[0]

    def fd(p, b, xx):
        return func.functional_call(base_d, (p, b), (xx,))

    def ft(p, b, xx):
        return torch.func.functional_call(base_t, (p, b), (xx,))
    got = func.vmap(fd, in_dims=(0, 0, None))(dparams, dbufs, dg.tensor(x))
    want = torch.func.vmap(ft, in_dims=(0, 0, None))(tparams, tbufs, torch.tensor(x))
    _close(got, want)


def _message(fn):
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("case", ["structure", "non_tensor", "out_of_range", "sizes",
                                  "no_inputs", "bad_type", "float_dim"])
def test_bad_in_dims_raise_torchs_messages(case):
    def f(a, b=None):
        return a

    def build(m, t):
        x = t(np.zeros((2, 3)))
        y = t(np.zeros((4, 3)))
        return {
            "structure": lambda: m.vmap(f, in_dims=(0, 0, 0))(x, x),
            "non_tensor": lambda: m.vmap(f, in_dims=(0, 0))(x, 3.0),
            "out_of_range": lambda: m.vmap(f, in_dims=2)(x),
            "sizes": lambda: m.vmap(f)(x, y),
            "no_inputs": lambda: m.vmap(f)(),
            "bad_type": lambda: m.vmap(f, in_dims=[0])(x),
            "float_dim": lambda: m.vmap(f, in_dims=(0.5,))(x),
        }[case]
    got = _message(build(func, dg.tensor))
    want = _message(build(torch.func, torch.tensor))
    if case == "structure":     # the structures are printed in each library's own notation
        got, want = got.split(" in_dims has")[0], want.split(" in_dims has")[0]
        assert "in_dims has structure (*, *, *) but inputs has structure (*, *)" in _message(
            build(func, dg.tensor))
    assert got == want


def test_per_sample_gradients_of_a_cnn_and_conv_ensembles_equal_torch():
    dnet = dg.nn.Sequential(dg.nn.Conv2d(2, 4, 3, padding=1), dg.nn.ReLU(), dg.nn.MaxPool2d(2),
                            dg.nn.Conv2d(4, 3, 3), dg.nn.Tanh(), dg.nn.Flatten(),
                            dg.nn.Linear(12, 3)).double()
    tnet = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 3, 3),
                               torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(12, 3)).double()
    with torch.no_grad():
        for (_, p), (_, q) in zip(dnet.named_parameters(), tnet.named_parameters()):
            q.copy_(torch.tensor(_np(p)))
    x, y = _rng.standard_normal((5, 2, 8, 8)), _rng.integers(0, 3, 5)

    def ld(p, xi, yi):
        return DF.cross_entropy(func.functional_call(dnet, p, (xi.unsqueeze(0),)),
                                yi.unsqueeze(0))

    def lt(p, xi, yi):
        return torch.nn.functional.cross_entropy(
            torch.func.functional_call(tnet, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
    got = func.vmap(func.grad(ld), in_dims=(None, 0, 0))(
        {k: v.detach() for k, v in dnet.named_parameters()}, dg.tensor(x), dg.tensor(y))
    want = torch.func.vmap(torch.func.grad(lt), in_dims=(None, 0, 0))(
        {k: v.detach() for k, v in tnet.named_parameters()}, torch.tensor(x), torch.tensor(y))
    _close(got, want)
    # a batch of weights (an ensemble) through conv2d, and its per-member gradients
    w, b, xs = (_rng.standard_normal((3, 4, 2, 3, 3)), _rng.standard_normal((3, 4)),
                _rng.standard_normal((2, 2, 6, 6)))

    def cd(ww, bb):
        return DF.conv2d(dg.tensor(xs), ww, bb, padding=1).tanh().sum()

    def ct(ww, bb):
        return torch.nn.functional.conv2d(torch.tensor(xs), ww, bb, padding=1).tanh().sum()
    _close(func.vmap(func.grad(cd, argnums=(0, 1)))(dg.tensor(w), dg.tensor(b)),
           torch.func.vmap(torch.func.grad(ct, argnums=(0, 1)))(torch.tensor(w),
                                                                torch.tensor(b)))


def test_nested_grads_keep_levels_apart_as_torch():
    x = _rng.standard_normal(3)

    def fd(a):
        return (a * func.grad(lambda b: (a * b).sum())(a)).sum()

    def ft(a):
        return (a * torch.func.grad(lambda b: (a * b).sum())(a)).sum()
    _close(func.grad(fd)(dg.tensor(x)), torch.func.grad(ft)(torch.tensor(x)))
    _close(func.vmap(func.grad(fd))(dg.tensor(np.stack([x, 2 * x]))),
           torch.func.vmap(torch.func.grad(ft))(torch.tensor(np.stack([x, 2 * x]))))


def test_per_example_hessians_equal_torch():
    x = _rng.standard_normal((4, 3))

    def fd(a):
        return a.exp().sum() * a.tanh().sum() + (a.sigmoid() * a).sum()

    def ft(a):
        return a.exp().sum() * a.tanh().sum() + (a.sigmoid() * a).sum()
    _close(func.vmap(func.hessian(fd))(dg.tensor(x)),
           torch.func.vmap(torch.func.hessian(ft))(torch.tensor(x)))
    _close(func.vmap(func.jacrev(func.jacrev(fd)))(dg.tensor(x)),
           torch.func.vmap(torch.func.hessian(ft))(torch.tensor(x)))


def test_autograd_functional_create_graph_is_differentiable_as_torch():
    x = _rng.standard_normal(3)
    xd = dg.tensor(x).requires_grad_()
    xt = torch.tensor(x).requires_grad_()

    def f(a):
        return a.exp() * a.sin().sum()
    jd = AF.jacobian(f, xd, create_graph=True)
    jt = TF.jacobian(f, xt, create_graph=True)
    _close(jd, jt)
    (jd * jd).sum().backward()
    (jt * jt).sum().backward()
    _close(xd.grad, xt.grad)
    assert not AF.jacobian(f, xd).requires_grad
