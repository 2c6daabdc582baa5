"""Module-level in-place functions, ParameterList/ParameterDict, nn.init.orthogonal_ and the
full backward hooks, against PyTorch."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name, args", [("sqrt_", ()), ("exp_", ()), ("relu_", ()),
                                        ("clamp_", (0.1, 0.5)), ("tanh_", ()),
                                        ("selu_", ()), ("celu_", (0.5,)),
                                        ("threshold_", (0.3, -1.0)), ("zero_", ())])
def test_module_level_inplace_functions_match_torch(name, args):
    data = np.array([0.2, 0.7, 1.5, -0.4])
    data = np.abs(data) if name == "sqrt_" else data
    x = dg.tensor(data)
    t = torch.tensor(data)
    out = getattr(dg, name)(x, *args)
    getattr(torch, name)(t, *args)
    assert out is x
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name, args", [("relu_", ()), ("elu_", (0.7,)),
                                        ("leaky_relu_", (0.2,)), ("hardtanh_", (-0.5, 0.5)),
                                        ("selu_", ()), ("celu_", ()),
                                        ("threshold_", (0.1, 2.0))])
def test_functional_inplace_activations_match_torch(name, args):
    data = np.array([-1.2, -0.1, 0.3, 2.0])
    x = dg.tensor(data)
    t = torch.tensor(data)
    assert getattr(dg.nn.functional, name)(x, *args) is x
    getattr(torch.nn.functional, name)(t, *args)
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-12)


def test_inplace_function_gradient_and_refusals_match_torch():
    w = dg.tensor([0.5, 2.0], requires_grad=True)
    y = w * 3
    dg.exp_(y)
    y.sum().backward()
    tw = torch.tensor([0.5, 2.0], requires_grad=True, dtype=torch.float32)
    ty = tw * 3
    torch.exp_(ty)
    ty.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="leaf"):
        dg.sqrt_(w)
    with pytest.raises(RuntimeError, match="leaf"):
        torch.sqrt_(tw)
    with pytest.raises(TypeError, match="input"):
        dg.sqrt_([1.0])


def test_parameter_list_and_dict_register_like_torch():
    pl = dg.nn.ParameterList([dg.nn.Parameter(dg.ones(2)), dg.zeros(3)])
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.zeros(3)])
    assert [n for n, _ in pl.named_parameters()] == [n for n, _ in tl.named_parameters()]
    assert type(pl[1]) is dg.nn.Parameter and pl[1].requires_grad == tl[1].requires_grad
    pl.append(dg.ones(1))
    tl.append(torch.ones(1))
    assert len(pl) == len(tl) == 3 and pl[-1].shape == (1,)
    assert [tuple(p.shape) for p in pl[1:]] == [tuple(p.shape) for p in tl[1:]]
    with pytest.raises(IndexError):
        pl[3]
    pd = dg.nn.ParameterDict({"b": dg.ones(2), "a": dg.nn.Parameter(dg.zeros(1))})
    td = torch.nn.ParameterDict({"b": torch.ones(2), "a": torch.nn.Parameter(torch.zeros(1))})
    pd["c"] = dg.ones(3)
    td["c"] = torch.ones(3)
    assert list(pd.keys()) == list(td.keys())
    assert [n for n, _ in pd.named_parameters()] == [n for n, _ in td.named_parameters()]
    assert list(pd.state_dict()) == list(td.state_dict())
    assert pd.pop("b").shape == (2,) and "b" not in pd and len(pd) == 2

    class M(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = dg.nn.ParameterList([dg.nn.Parameter(dg.ones(2) * i) for i in range(3)])

        def forward(self, x):
            for w in self.ws:
                x = x * w
            return x.sum()
    m = M()
    m(dg.ones(2)).backward()
    assert all(w.grad is not None for w in m.ws)
    assert list(m.state_dict()) == ["ws.0", "ws.1", "ws.2"]


def test_orthogonal_init_matches_torch_properties():
    for shape in [(3, 5), (5, 3), (4, 2, 3)]:
        t = dg.empty(*shape)
        dg.nn.init.orthogonal_(t, gain=2.0)
        flat = t.numpy().reshape(shape[0], -1).astype(np.float64)
        rows, cols = flat.shape
        gram = flat @ flat.T if rows <= cols else flat.T @ flat
        np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-5)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        dg.nn.init.orthogonal_(dg.empty(3))
    with pytest.raises(ValueError, match="2 or more dimensions"):
        torch.nn.init.orthogonal_(torch.empty(3))


def _hooked_pair():
    dg.manual_seed(0)
    lin = dg.nn.Linear(3, 2).double()
    tlin = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        tlin.weight.copy_(torch.from_numpy(lin.weight.detach().numpy()))
        tlin.bias.copy_(torch.from_numpy(lin.bias.detach().numpy()))
    return lin, tlin


def test_full_backward_hooks_see_and_replace_gradients_as_torch():
    lin, tlin = _hooked_pair()
    seen = {"dg": [], "torch": []}

    def make(key):
        def pre(module, grad_output):
            seen[key].append(("pre", [g.detach().numpy().copy() for g in grad_output]))
            return (grad_output[0] * 2,)

        def full(module, grad_input, grad_output):
            seen[key].append(("full", [g.detach().numpy().copy() for g in grad_input],
                              [g.detach().numpy().copy() for g in grad_output]))
            return (grad_input[0] + 1,)
        return pre, full

    for key, mod in (("dg", lin), ("torch", tlin)):
        pre, full = make(key)
        mod.register_full_backward_pre_hook(pre)
        mod.register_full_backward_hook(full)
    data = np.arange(6.0).reshape(2, 3) / 5
    x = dg.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    (lin(x) ** 2).sum().backward()
    (tlin(tx) ** 2).sum().backward()
    assert [s[0] for s in seen["dg"]] == [s[0] for s in seen["torch"]] == ["pre", "full"]
    for a, b in zip(seen["dg"], seen["torch"]):
        for u, v in zip(a[1:], b[1:]):
            for p, q in zip(u, v):
                np.testing.assert_allclose(p, q, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), rtol=1e-12)


def test_full_backward_hook_with_inputs_that_need_no_grad_as_torch():
    lin, tlin = _hooked_pair()
    got = {}
    lin.register_full_backward_hook(lambda m, gi, go: got.update(dg=(gi, go)))
    tlin.register_full_backward_hook(lambda m, gi, go: got.update(torch=(gi, go)))
    data = np.ones((2, 3))
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        lin(dg.tensor(data)).sum().backward()
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        tlin(torch.tensor(data)).sum().backward()
    assert got["dg"][0] == got["torch"][0] == (None,)
    np.testing.assert_allclose(got["dg"][1][0].numpy(), got["torch"][1][0].numpy())
    bad = lin.register_full_backward_hook(lambda m, gi, go: (dg.ones(2, 3),))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="should always return"):
        lin(dg.tensor(data)).sum().backward()
    bad.remove()
    handle = lin.register_full_backward_hook(lambda m, gi, go: 1 / 0)
    handle.remove()
    with pytest.warns(UserWarning):
        lin(dg.tensor(data)).sum().backward()


@pytest.mark.parametrize("name, args", [
    ("gt_", ([0.0, 5.0, 1.0],)), ("le_", ([0.0, 5.0, 1.0],)), ("ne_", ([1.0, 5.0, 3.0],)),
    ("logical_not_", ()), ("clamp_min_", (1.5,)), ("clamp_max_", (1.5,)),
    ("cumsum_", (0,)), ("addcmul_", ([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])),
    ("addcdiv_", ([1.0, 2.0, 3.0], [2.0, 4.0, 8.0])), ("lerp_", ([3.0, 3.0, 3.0], 0.25)),
    ("copysign_", ([-1.0, 1.0, -1.0],)), ("greater_equal_", ([2.0, 2.0, 2.0],))])
def test_derived_inplace_methods_match_torch(name, args):
    x, t = dg.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    dargs = [dg.tensor(a) if isinstance(a, list) else a for a in args]
    targs = [torch.tensor(a) if isinstance(a, list) else a for a in args]
    assert getattr(x, name)(*dargs) is x
    getattr(t, name)(*targs)
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6)
    assert x.dtype == "float32"
