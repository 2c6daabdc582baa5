"""The names PyTorch code types without thinking exist and mean what they mean in PyTorch."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["long", "int", "float", "double", "half", "bool", "short",
                                  "int8", "int16", "bfloat16"])
def test_dtype_aliases_are_pytorchs(name):
    assert getattr(dg, name) == str(getattr(torch, name)).replace("torch.", "")
    assert dg.zeros(2, dtype=getattr(dg, name)).dtype == getattr(dg, name)


def test_device_objects_work_wherever_device_strings_do():
    d = dg.device("cuda:1")
    assert (d, d.type, d.index, repr(d)) == ("cuda", "cuda", 1, "device(type='cuda', index=1)")
    assert dg.device("cpu") == "cpu" and dg.device("cpu").index is None
    assert dg.tensor([1.0], device=dg.device("cpu")).device == "cpu"
    assert dg.tensor([1.0]).to(dg.device("cpu")).device == "cpu"
    with pytest.raises(RuntimeError, match="expected one of cpu, cuda"):
        dg.device("tpu")
    assert dg.cuda.is_available() == (dg.cuda.device_count() > 0)


def test_utils_data_is_the_data_module():
    import duograph.utils.data as d
    assert d is dg.data and dg.utils.data.DataLoader is dg.data.DataLoader


def test_variable_shares_the_tensor_and_inference_mode_is_no_grad():
    t = dg.tensor([1.0, 2.0])
    v = dg.autograd.Variable(t, requires_grad=True)
    assert v is not t and v.requires_grad and not t.requires_grad   # as PyTorch
    with dg.inference_mode():
        assert not (v * 2).requires_grad
    with dg.inference_mode(False):
        assert (v * 2).requires_grad

    @dg.inference_mode
    def bare():
        return (v * 2).requires_grad

    @dg.inference_mode()
    def called():
        return (v * 2).requires_grad
    assert not bare() and not called() and (v * 2).requires_grad
    np.testing.assert_array_equal(v.detach().numpy(), [1.0, 2.0])


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
@pytest.mark.parametrize("a, b", [([7, -7, 7, -7, 0], [3, 3, -3, -3, 5]),
                                  ([5.5, -5.5, 7.25, -0.5, 3.0], [2.0, 2.0, -1.5, 4.0, -3.0])])
def test_div_rounding_modes_and_the_mod_operators_match_torch(mode, a, b):
    x, y = dg.tensor(a), dg.tensor(b)
    tx, ty = torch.tensor(a), torch.tensor(b)
    for got, want in [(dg.div(x, y, rounding_mode=mode), torch.div(tx, ty, rounding_mode=mode)),
                      (x % y, tx % ty), (x // y, tx // ty), (7 % y, 7 % ty),
                      (dg.fmod(x, y), torch.fmod(tx, ty))]:
        assert str(got.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="rounding_mode"):
        dg.div(x, y, rounding_mode="round")
