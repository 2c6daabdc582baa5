"""PyTorch as the oracle for uint16/32/64 and the float8 dtypes: casts (rounding,
saturation), the ops PyTorch has kernels for, its promotion refusals, and DLPack."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

WIDE = ["uint16", "uint32", "uint64"]
FLOAT8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def _grid():
    """Every float8 value's neighbourhood: ties, overflow, subnormals, specials."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-600, 600, 2001), rng.standard_normal(500) * 10,
                        2.0 ** np.arange(-20, 17), -(2.0 ** np.arange(-20, 17)),
                        [448, 449, 464, 465, 480, 57344, 61440, 1e9, np.inf, -np.inf,
                         np.nan, 0.0, -0.0, 240, 247, 248, 250]])
    return x.astype(np.float32)


@pytest.mark.parametrize("name", FLOAT8)
@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16", "float64"])
def test_float8_casts_match_torch_bit_for_bit(name, src):
    x = _grid()
    t = torch.from_numpy(x).to(getattr(torch, src))
    want = t.to(getattr(torch, name)).view(torch.uint8).numpy()
    got = dg.tensor(x).cast(src).cast(name).numpy().view(np.uint8)
    back = dg.tensor(got.view(np.dtype(name))).cast("float32").numpy()
    want_f = torch.from_numpy(want).view(getattr(torch, name)).float().numpy()
    nan = np.isnan(want_f)              # NaN payloads differ (e5m2: 0x7e here, 0x7f there)
    assert np.isnan(back[nan]).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])      # bytes: -0.0 counts
    np.testing.assert_array_equal(back, want_f)


@pytest.mark.parametrize("name", WIDE)
def test_wide_unsigned_ops_torch_has_match_it(name):
    x = np.array([0, 1, 7, np.iinfo(name).max], name)
    y = np.array([3, 2, 7, 2], name)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    dx, dy = dg.tensor(x), dg.tensor(y)
    for fn in (lambda a, b: a * b, lambda a, b: a & b, lambda a, b: a | b,
               lambda a, b: a == b, lambda a, b: a / b, lambda a, b: a * 3,
               lambda a, b: a * 2.5, lambda a, b: a.sum(), lambda a, b: a.float()):
        want, got = fn(tx, ty), fn(dx, dy)
        assert got.dtype == str(want.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_promotion_refusals_match_torch():
    for a, b in [("uint16", "int32"), ("uint64", "int64"), ("uint32", "uint16"),
                 ("float8_e4m3fn", "float32"), ("float8_e5m2", "float8_e4m3fn")]:
        with pytest.raises(RuntimeError, match="Promotion for"):
            torch.promote_types(getattr(torch, a), getattr(torch, b))
        with pytest.raises(dg.DTypeError, match="Promotion for"):
            dg.dtypes.result_dtype(a, b)


@pytest.mark.parametrize("name", FLOAT8 + ["float8_e8m0fnu", "uint16", "uint32", "uint64"])
def test_dlpack_both_ways_keeps_the_dtype_and_the_bytes(name):
    t = torch.tensor([1.0, 2.0, 448.0, 0.5]).to(getattr(torch, name))
    d = dg.from_dlpack(t)
    assert d.dtype == name
    back = torch.from_dlpack(d)
    assert back.dtype == t.dtype
    assert back.view(torch.uint8).equal(t.view(torch.uint8))
