"""Half-precision elementwise ops against PyTorch's CPU kernels, which compute bfloat16 and
float16 in float32 and round once: +, -, *, / and maximum equal PyTorch's bit for bit; the
transcendental ones differ only where the float32 functions of numpy and PyTorch (Sleef)
round differently, by one unit in the last place of the half dtype at most."""
import ml_dtypes
import numpy as np
import pytest

import duograph as dg
from duograph.runtime.cpu import half

torch = pytest.importorskip("torch")

N = 2 * half.CHUNK + 7
DTYPES = [(ml_dtypes.bfloat16, torch.bfloat16), (np.float16, torch.float16)]


def _pair(dtype, tdtype, seed):
    x = (np.random.default_rng(seed).standard_normal(N) * 3).astype(np.float32).astype(dtype)
    t = torch.from_numpy(x.astype(np.float32)).to(tdtype)
    return x, t


def _bits(a):
    return np.asarray(a).view(np.uint16).astype(np.int32)


def _torch_bits(t):
    return t.view(torch.int16).numpy().view(np.uint16).astype(np.int32)


@pytest.mark.parametrize("dtype,tdtype", DTYPES, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum"])
def test_arithmetic_equals_pytorch_bit_for_bit(dtype, tdtype, name):
    (a, ta), (b, tb) = _pair(dtype, tdtype, 0), _pair(dtype, tdtype, 1)
    got = getattr(dg, name)(dg.tensor(a), dg.tensor(b)).numpy()
    want = getattr(torch, name)(ta, tb)
    np.testing.assert_array_equal(_bits(got), _torch_bits(want))


@pytest.mark.parametrize("dtype,tdtype", DTYPES, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["tanh", "exp", "sigmoid", "sin"])
def test_transcendental_within_one_ulp_of_pytorch(dtype, tdtype, name):
    x, t = _pair(dtype, tdtype, 2)
    got = _bits(getattr(dg, name)(dg.tensor(x)).numpy())
    want = _torch_bits(getattr(torch, name)(t))
    differ = got != want
    assert np.abs(got - want).max() <= 1               # same sign: adjacent bit patterns
    assert differ.mean() < 0.01, differ.mean()
