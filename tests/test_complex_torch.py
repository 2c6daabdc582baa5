"""Complex tensors against PyTorch: creation, promotion, arithmetic, matmul,
abs/angle/real/imag/conj and their gradients (PyTorch's convention: the gradient of a real
loss with respect to z = x + iy is dL/dx + i dL/dy), eagerly and in graph mode; and the
ops PyTorch refuses for complex operands, refused here too."""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(7)


def _c(*shape, dtype=np.complex128):
    return (_rng.normal(size=shape) + 1j * _rng.normal(size=shape)).astype(dtype)


A, B, R = _c(3, 4), _c(3, 4), _rng.normal(size=(3, 4))
W = _c(4, 2)

CASES = {
    "mul": (lambda x, y: x * y, (A, B)),
    "div": (lambda x, y: x / y, (A, B)),
    "add_sub_real": (lambda x, y: (x + y) - y * 2.0, (A, R)),
    "mul_real": (lambda x, y: x * y, (A, R)),
    "scalar": (lambda x: x * (1.5 - 2j) + 1j, (A,)),
    "neg_exp": (lambda x: (-x * 0.3).exp(), (A,)),
    "matmul": (lambda x, w: x @ w, (A, W)),
    "sum_mean": (lambda x: x.sum(1) * x.mean(0).sum(), (A,)),
    "conj": (lambda x: x.conj() * x, (A,)),
    "reshape_t": (lambda x: x.reshape(4, 3).transpose(0, 1) * x, (A,)),
    "complex_parts": (lambda x, y: dg_or_torch(x).complex(x, y * 2) * (1 - 1j), (R, R * 3)),
}


def dg_or_torch(x):
    return torch if isinstance(x, torch.Tensor) else dg


REAL_OF = {
    "abs": lambda z: z.abs(),
    "angle": lambda z: z.angle(),
    "real_imag": lambda z: z.real * z.imag,
}


def _real_loss(z, cts):
    """A real loss of a (complex or real) result: sum(re * c1 + im * c2)."""
    lib = dg_or_torch(z)
    c1, c2 = (lib.tensor(c) for c in cts)
    if z.is_complex():
        return (z.real * c1 + z.imag * c2).sum()
    return (z * c1).sum()


def _run(fn, arrays, lib, graph):
    if lib == "torch":
        xs = [torch.tensor(a, requires_grad=True) for a in arrays]
        out = fn(*xs)
        return out, xs
    xs = [dg.tensor(a, requires_grad=True) for a in arrays]
    return fn(*xs), xs


def _grads(name, fn, arrays):
    outs = {}
    for lib in ("torch", "dg"):
        out, xs = _run(fn, arrays, lib, False)
        cts = [np.cos(np.arange(out.numel()).reshape(tuple(out.shape))), np.sin(
            np.arange(out.numel()).reshape(tuple(out.shape)) + 0.5)]
        _real_loss(out, cts).backward()
        value = out.detach().resolve_conj().numpy() if lib == "torch" else out.detach().numpy()
        grads = [x.grad.resolve_conj().numpy() if lib == "torch" else x.grad.numpy()
                 for x in xs]
        outs[lib] = (value, grads, str(out.dtype).replace("torch.", ""))
    return outs


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch_eagerly(name):
    fn, arrays = CASES[name]
    got = _grads(name, fn, arrays)
    (tv, tg, tdt), (dv, dgr, ddt) = got["torch"], got["dg"]
    assert ddt == tdt
    np.testing.assert_allclose(dv, tv, rtol=1e-12, atol=1e-12)
    for g, t in zip(dgr, tg):
        assert g.dtype == t.dtype
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(REAL_OF))
def test_real_valued_functions_of_complex_match_torch(name):
    got = _grads(name, REAL_OF[name], (A,))
    (tv, tg, tdt), (dv, dgr, ddt) = got["torch"], got["dg"]
    assert ddt == tdt == "float64"
    np.testing.assert_allclose(dv, tv, rtol=1e-12)
    np.testing.assert_allclose(dgr[0], tg[0], rtol=1e-10, atol=1e-12)


def test_graph_mode_gradients_match_torch():
    g = dg.Graph("complex")
    with g:
        x = dg.placeholder("x", A.shape, "complex128")
        w = dg.placeholder("w", W.shape, "complex128")
        y = dg.exp(x * 0.5) @ w + 1.0
        loss = (y.real * y.imag).sum() + y.angle().sum() + y.abs().sum()
        gx, gw = dg.grad(loss, [x, w])
    tx, tw = torch.tensor(A, requires_grad=True), torch.tensor(W, requires_grad=True)
    ty = torch.exp(tx * 0.5) @ tw + 1.0
    tloss = (ty.real * ty.imag).sum() + ty.angle().sum() + ty.abs().sum()
    tloss.backward()
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[loss, gx, gw], passes=passes)(x=A, w=W)
        np.testing.assert_allclose(got[0], tloss.item(), rtol=1e-12)
        np.testing.assert_allclose(got[1], tx.grad.numpy(), rtol=1e-10)
        np.testing.assert_allclose(got[2], tw.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("a, b", [("float32", "complex64"), ("float64", "complex64"),
                                  ("int64", "complex128"), ("bool", "complex64"),
                                  ("complex64", "complex128")])
def test_promotion_matches_torch(a, b):
    x = dg.ones(2, dtype=a) * dg.ones(2, dtype=b)
    t = torch.ones(2, dtype=getattr(torch, a)) * torch.ones(2, dtype=getattr(torch, b))
    assert x.dtype == str(t.dtype).replace("torch.", "")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "complex64"])
def test_python_complex_scalars_promote_as_torch(dtype):
    got = (dg.ones(2, dtype=dtype) * 2j).dtype
    want = (torch.ones(2, dtype=getattr(torch, dtype)) * 2j).dtype
    assert got == str(want).replace("torch.", "")


def test_creation_as_torch():
    assert dg.tensor([1 + 2j]).dtype == str(torch.tensor([1 + 2j]).dtype).replace("torch.", "")
    z = dg.zeros(2, 3, dtype=dg.complex128)
    assert z.dtype == "complex128" and z.shape == (2, 3)
    c = dg.complex(dg.tensor([1.0]), dg.tensor([2.0]))
    assert c.dtype == "complex64" and c.numpy().tolist() == [1 + 2j]
    np.testing.assert_array_equal(dg.view_as_real(dg.tensor(A)).numpy(),
                                  torch.view_as_real(torch.tensor(A)).numpy())


@pytest.mark.parametrize("name", ["lt", "relu", "maximum", "floor", "amax"])
def test_what_torch_refuses_for_complex_is_refused(name):
    fn = {"lt": lambda lib, z: z < z, "relu": lambda lib, z: lib.relu(z),
          "maximum": lambda lib, z: lib.maximum(z, z), "floor": lambda lib, z: z.floor(),
          "amax": lambda lib, z: lib.amax(z, 0)}[name]
    with pytest.raises(RuntimeError):
        fn(torch, torch.tensor(A))
    with pytest.raises(dg.UnsupportedDTypeError, match="complex") as info:
        fn(dg, dg.tensor(A))
    assert isinstance(info.value, RuntimeError)     # as PyTorch's


def test_imag_of_a_real_tensor_is_refused_as_torch():
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        torch.imag(torch.ones(2))
    with pytest.raises(dg.DTypeError, match="imag is not implemented"):
        dg.imag(dg.ones(2))
