"""torch.fft against PyTorch: values, dtypes and gradients (of real losses of the
complex or real results, PyTorch's convention for complex inputs), eagerly and in graph
mode. The op table (test_ops_torch.py) checks the values of more samples."""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(3)
XR = _rng.normal(size=(3, 6))
XC = XR + 1j * _rng.normal(size=(3, 6))

CASES = [
    ("fft", lambda L, x: L.fft.fft(x), XC), ("fft_real", lambda L, x: L.fft.fft(x), XR),
    ("fft_pad_ortho", lambda L, x: L.fft.fft(x, n=8, dim=0, norm="ortho"), XC),
    ("fft_trim", lambda L, x: L.fft.fft(x, n=4), XC),
    ("ifft", lambda L, x: L.fft.ifft(x, norm="forward"), XC),
    ("ifft_real", lambda L, x: L.fft.ifft(x), XR),
    ("rfft", lambda L, x: L.fft.rfft(x), XR),
    ("rfft_odd_ortho", lambda L, x: L.fft.rfft(x, n=9, norm="ortho"), XR),
    ("rfft_dim0", lambda L, x: L.fft.rfft(x, dim=0), XR),
    ("irfft", lambda L, x: L.fft.irfft(x), XC),
    ("irfft_odd", lambda L, x: L.fft.irfft(x, n=7, norm="ortho"), XC),
    ("irfft_dim0", lambda L, x: L.fft.irfft(x, n=5, dim=0, norm="forward"), XC),
    ("fft2", lambda L, x: L.fft.fft2(x), XC),
    ("ifft2_s", lambda L, x: L.fft.ifft2(x, s=(4, 5)), XC),
    ("fftn_real", lambda L, x: L.fft.fftn(x, norm="forward"), XR),
    ("ifftn_dim", lambda L, x: L.fft.ifftn(x, dim=(1,)), XC),
    ("rfft2", lambda L, x: L.fft.rfft2(x), XR), ("irfft2", lambda L, x: L.fft.irfft2(x), XC),
    ("rfftn_s", lambda L, x: L.fft.rfftn(x, s=(2, 6)), XR),
    ("irfftn_s", lambda L, x: L.fft.irfftn(x, s=(3, 10)), XC),
    ("fftshift", lambda L, x: L.fft.fftshift(x), XC),
    ("ifftshift", lambda L, x: L.fft.ifftshift(x, dim=1), XC),
    ("complex64", lambda L, x: L.fft.fft(x), XC.astype(np.complex64)),
    ("float32", lambda L, x: L.fft.rfft(x), XR.astype(np.float32)),
]


def _loss(out, lib, cts):
    c1, c2 = (lib.tensor(c.astype(np.float64)) for c in cts)
    if out.is_complex():
        return (out.real * c1 + out.imag * c2).sum()
    return (out * c1).sum()


def _cts(shape):
    n = int(np.prod(shape))
    return (np.cos(np.arange(n)).reshape(shape), np.sin(np.arange(n) + 1.0).reshape(shape))


@pytest.mark.parametrize("name, fn, x", CASES, ids=[c[0] for c in CASES])
def test_values_dtypes_and_gradients_match_torch(name, fn, x):
    t, d = torch.tensor(x, requires_grad=True), dg.tensor(x, requires_grad=True)
    out_t, out_d = fn(torch, t), fn(dg, d)
    assert out_d.dtype == str(out_t.dtype).replace("torch.", "")
    tol = 1e-4 if x.dtype in (np.complex64, np.float32) else 1e-10
    np.testing.assert_allclose(out_d.detach().numpy(), out_t.detach().resolve_conj().numpy(),
                               rtol=tol, atol=tol)
    cts = _cts(tuple(out_t.shape))
    _loss(out_t, torch, cts).backward()
    _loss(out_d, dg, cts).backward()
    np.testing.assert_allclose(d.grad.numpy(), t.grad.resolve_conj().numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("name", ["irfft_odd", "rfft_odd_ortho", "fft2"])
def test_graph_mode_gradients_match_eager(name):
    fn, x = next((c[1], c[2]) for c in CASES if c[0] == name)
    d = dg.tensor(x, requires_grad=True)
    out = fn(dg, d)
    cts = _cts(tuple(out.shape))
    _loss(out, dg, cts).backward()
    g = dg.Graph(name)
    with g:
        p = dg.placeholder("x", x.shape, x.dtype.name)
        y = fn(dg, p)
        (gx,) = dg.grad(_loss(y, dg, cts), [p])
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[y, gx], passes=passes)(x=x)
        np.testing.assert_allclose(got[0], out.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], d.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_refusals_as_torch():
    with pytest.raises(RuntimeError, match="rfft expects a real"):
        torch.fft.rfft(torch.tensor(XC))
    with pytest.raises(dg.DTypeError, match="rfft expects a real"):
        dg.fft.rfft(dg.tensor(XC))
    with pytest.raises(ValueError, match="Invalid normalization mode"):
        dg.fft.fft(dg.tensor(XC), norm="none")
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.tensor(XC), n=0)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        dg.fft.fft(dg.tensor(XC), n=0)


def test_frequencies_and_integer_input_as_torch():
    for n, d in ((5, 1.0), (6, 0.25)):
        np.testing.assert_allclose(dg.fft.fftfreq(n, d).numpy(), torch.fft.fftfreq(n, d).numpy())
        np.testing.assert_allclose(dg.fft.rfftfreq(n, d).numpy(),
                                   torch.fft.rfftfreq(n, d).numpy())
    ints = np.arange(6)
    got, want = dg.fft.fft(dg.tensor(ints)), torch.fft.fft(torch.tensor(ints))
    assert got.dtype == "complex64" and want.dtype == torch.complex64
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-5)
