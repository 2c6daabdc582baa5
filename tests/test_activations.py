"""The activation functions and modules PyTorch code uses, against torch: values and
gradients, eager and graph mode, from the same inputs and weights."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.nn import functional as NF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

X = np.random.default_rng(0).uniform(-4.0, 4.0, size=(3, 4, 5))   # kinks are measure zero

CASES = [
    ("silu", {}), ("mish", {}), ("elu", {}), ("elu", {"alpha": 0.5}), ("selu", {}),
    ("celu", {"alpha": 1.5}), ("hardtanh", {}), ("hardtanh", {"min_val": -2.0, "max_val": 0.5}),
    ("relu6", {}), ("hardsigmoid", {}), ("hardswish", {}), ("softsign", {}),
    ("tanhshrink", {}), ("threshold", {"threshold": 0.3, "value": -1.0}), ("glu", {"dim": 1}),
    ("softmin", {"dim": 2}),
]


@pytest.mark.parametrize("name, kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_functional_forms_match_torch_values_and_gradients(name, kw):
    tx = torch.tensor(X, requires_grad=True)
    ty = getattr(TF, name)(tx, **kw)
    ty.pow(2).sum().backward()
    x = dg.tensor(X, requires_grad=True)
    y = getattr(NF, name)(x, **kw)
    (y ** 2).sum().backward()
    # torch's hardsigmoid multiplies by a float32 1/6 even in float64 (documented difference)
    rtol = 1e-7 if name == "hardsigmoid" else 1e-10
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=1e-12)
    g = dg.Graph("act")                                  # graph mode, O2 fused
    with g:
        xv = dg.placeholder("x", X.shape, "float64")
        yv = getattr(NF, name)(xv, **kw)
        gx, = dg.grad(dg.sum(yv * yv), [xv])
    out, grad = g.compile(outputs=[yv, gx], passes="O2")(x=X)
    np.testing.assert_allclose(out, ty.detach().numpy(), rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=rtol, atol=1e-12)


MODULES = [("SiLU", (), {}), ("Mish", (), {}), ("ELU", (0.7,), {}), ("SELU", (), {}),
           ("CELU", (), {"alpha": 2.0}), ("Hardtanh", (-0.5, 0.5), {}), ("ReLU6", (), {}),
           ("Hardsigmoid", (), {}), ("Hardswish", (), {}), ("Softsign", (), {}),
           ("Tanhshrink", (), {}), ("Threshold", (0.1, 20.0), {}), ("GLU", (), {"dim": 1}),
           ("Softmin", (), {"dim": 1})]


@pytest.mark.parametrize("name, args, kw", MODULES, ids=[m[0] for m in MODULES])
def test_modules_take_pytorchs_arguments_and_match(name, args, kw):
    ours, theirs = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    np.testing.assert_allclose(ours(dg.tensor(X)).numpy(), theirs(torch.tensor(X)).numpy(),
                               rtol=1e-7 if name == "Hardsigmoid" else 1e-12, atol=1e-12)
    assert name in repr(ours)


@pytest.mark.parametrize("channels", [1, 4])
def test_prelu_matches_torch_with_its_weight_and_gradient(channels):
    ours, theirs = nn.PReLU(channels).double(), torch.nn.PReLU(channels).double()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert ours.weight.shape == tuple(theirs.weight.shape)
    x, tx = dg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    (y ** 2).sum().backward()
    ty.pow(2).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)


def test_mistakes_are_refused_naming_the_function():
    with pytest.raises(ValueError, match="hardtanh: min_val"):
        NF.hardtanh(dg.tensor(X), 1.0, -1.0)
    with pytest.raises(dg.ShapeError, match="glu: halving dim 2 needs an even size, found 5"):
        NF.glu(dg.tensor(X), dim=2)
    with pytest.raises(TypeError, match="softmin: pass dim"):
        NF.softmin(dg.tensor(X))
