"""Where duograph once differed silently from PyTorch: each case against torch itself, in
eager mode, dg.compile and graph mode."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

INTS = np.array([1, 2, 0x1337, -5, 0, 255], np.int32)
BITWISE = [
    ("and_scalar", lambda a: a & 0x1337),
    ("or_scalar", lambda a: a | 6),
    ("xor_scalar", lambda a: a ^ 3),
    ("rand", lambda a: 0x0F & a),
    ("invert", lambda a: ~a),
    ("and_tensor", lambda a: a & (a + 7)),
    ("xor_tensor", lambda a: a ^ (a * 3)),
    ("bool_and", lambda a: (a > 1) & (a < 300)),
    ("bool_or", lambda a: (a > 1) | (a < -1)),
    ("bool_xor", lambda a: (a > 1) ^ (a < 300)),
    ("bool_invert", lambda a: ~(a > 1)),
]


@pytest.mark.parametrize("name, fn", BITWISE, ids=[n for n, _ in BITWISE])
def test_bitwise_operators_match_torch_in_every_mode(name, fn):
    want = fn(torch.tensor(INTS))
    eager = fn(dg.tensor(INTS))
    compiled = dg.compile(fn)(dg.tensor(INTS))
    g = dg.Graph("bits")
    with g:
        x = dg.placeholder("x", INTS.shape, "int32")
        y = fn(x)
    graph = [g.compile(outputs=[y], passes=p)(x=INTS)[0] for p in ("O0", "O1", "O2")]
    for got in [eager.numpy(), compiled.numpy()] + graph:
        assert str(got.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got, want.numpy())


def test_bitwise_operators_refuse_floats_as_torch_does():
    with pytest.raises(NotImplementedError):      # torch: "bitwise_and_cpu" not implemented
        torch.tensor([1.0]) & torch.tensor([1.0])
    with pytest.raises(TypeError, match=r"bitwise_and: unsupported dtype float32"):
        dg.tensor([1.0]) & dg.tensor([1.0])
    with pytest.raises(TypeError, match=r"bitwise_not"):
        ~dg.tensor([1.0])
