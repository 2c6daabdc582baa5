"""Eager tensors: creation, attributes, conversions, in-place ops, devices."""
import numpy as np
import pytest

import duograph as dg


def test_tensor_from_list_defaults_to_float32_and_int64():
    assert dg.tensor([1.0, 2.0]).dtype == "float32"
    assert dg.tensor([1, 2]).dtype == "int64"
    assert dg.tensor([True, False]).dtype == "bool"
    assert dg.tensor(3.0).shape == ()
    assert dg.tensor([[1, 2]], dtype="float64").dtype == "float64"


def test_tensor_copies_but_from_numpy_shares_memory():
    arr = np.arange(4, dtype=np.float32)
    copied = dg.tensor(arr)
    shared = dg.from_numpy(arr)
    arr[0] = 100.0
    assert copied.numpy()[0] == 0.0
    assert shared.numpy()[0] == 100.0
    assert shared.dtype == "float32"


def test_from_numpy_rejects_unsupported_dtype():
    with pytest.raises(TypeError, match="unsupported dtype"):
        dg.from_numpy(np.zeros(2, dtype=np.longdouble))


def test_creation_functions():
    assert dg.zeros(2, 3).shape == (2, 3)
    assert dg.zeros((2, 3)).numpy().sum() == 0
    assert dg.ones(4).numpy().tolist() == [1, 1, 1, 1]
    assert dg.full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    assert dg.empty(3).shape == (3,)
    assert dg.arange(5).numpy().tolist() == [0, 1, 2, 3, 4]
    assert dg.arange(5).dtype == "int64"
    assert dg.arange(0, 1, 0.25).dtype == "float32"
    np.testing.assert_allclose(dg.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5))
    np.testing.assert_array_equal(dg.eye(3).numpy(), np.eye(3))
    x = dg.ones(2, 3, dtype="float64")
    assert dg.zeros_like(x).dtype == "float64"
    assert dg.ones_like(x).numpy().sum() == 6
    assert dg.full_like(x, 2).numpy().sum() == 12
    assert dg.randint(0, 10, (50,)).numpy().max() < 10
    assert dg.rand(100).numpy().min() >= 0


def test_manual_seed_makes_random_reproducible():
    dg.manual_seed(123)
    a = dg.randn(5).numpy().copy()
    b = dg.rand(3).numpy().copy()
    dg.manual_seed(123)
    np.testing.assert_array_equal(dg.randn(5).numpy(), a)
    np.testing.assert_array_equal(dg.rand(3).numpy(), b)
    assert not np.array_equal(dg.randn(5).numpy(), a)


def test_attributes_and_conversions():
    x = dg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.shape == (2, 3)
    assert x.size() == (2, 3)
    assert x.size(1) == 3
    assert x.ndim == 2 and x.dim() == 2
    assert x.numel() == 6
    assert x.device == "cpu"
    assert x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert x[1, 2].item() == 6.0
    assert isinstance(x.sum().item(), float)
    assert x.long().dtype == "int64"
    assert x.half().dtype == "float16"
    assert x.double().dtype == "float64"
    assert x.to("float64").dtype == "float64"
    assert x.float().dtype == "float32"
    assert x.cpu() is x
    np.testing.assert_array_equal(np.asarray(x), x.numpy())
    assert float(dg.tensor(2.5)) == 2.5
    assert int(dg.tensor(3)) == 3


def test_numpy_refuses_requires_grad_and_suggests_detach():
    x = dg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"detach\(\)"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1.0]


def test_item_of_many_elements_is_an_error():
    with pytest.raises(ValueError, match="one-element"):
        dg.tensor([1.0, 2.0]).item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(dg.tensor([1.0, 2.0]))


def test_repr_like_pytorch():
    assert repr(dg.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(dg.tensor([1.0], requires_grad=True)) == "tensor([1.], requires_grad=True)"
    assert "dtype=float64" in repr(dg.tensor([1.0], dtype="float64"))
    y = dg.tensor([1.0], requires_grad=True) * 2
    assert "grad_fn=<mul>" in repr(y)


def test_operators_and_methods_shared_with_graph_values():
    a = dg.tensor([1.0, 2.0, 3.0])
    b = dg.tensor([4.0, 5.0, 6.0])
    np.testing.assert_allclose((a + b).numpy(), [5, 7, 9])
    np.testing.assert_allclose((a - 1).numpy(), [0, 1, 2])
    np.testing.assert_allclose((2 * a).numpy(), [2, 4, 6])
    np.testing.assert_allclose((a / 2).numpy(), [0.5, 1, 1.5])
    np.testing.assert_allclose((a ** 2).numpy(), [1, 4, 9])
    np.testing.assert_allclose((2 ** a).numpy(), [2, 4, 8])
    np.testing.assert_allclose((-a).numpy(), [-1, -2, -3])
    assert (a @ b).item() == 32.0
    assert (a < b).dtype == "bool"
    assert a.reshape(3, 1).shape == (3, 1)
    assert a.reshape(3, 1).T.shape == (1, 3)
    assert a.sum(dim=0, keepdim=True).shape == (1,)
    np.testing.assert_allclose(a[1:].numpy(), [2, 3])
    values, indices = dg.tensor([[1.0, 5.0], [7.0, 2.0]]).max(dim=1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]


def test_numpy_array_on_the_left_defers_to_tensor():
    out = np.ones(3, dtype=np.float32) + dg.tensor([1.0, 2.0, 3.0])
    assert isinstance(out, dg.Tensor)
    np.testing.assert_allclose(out.numpy(), [2, 3, 4])


def test_inplace_ops_update_data_and_version():
    x = dg.tensor([1.0, 2.0])
    v0 = x.version
    x.add_(1).mul_(2)
    np.testing.assert_allclose(x.numpy(), [4, 6])
    assert x.version == v0 + 2
    x.zero_()
    assert x.numpy().tolist() == [0, 0]
    x.fill_(3)
    x.clamp_(max=2.0)
    assert x.numpy().tolist() == [2, 2]
    x.copy_(dg.tensor([5.0, 6.0]))
    assert x.numpy().tolist() == [5, 6]
    x += 1
    assert x.numpy().tolist() == [6, 7]
    x.sub_(1).div_(2)
    assert x.numpy().tolist() == [2.5, 3]


def test_inplace_on_leaf_that_requires_grad_is_refused():
    x = dg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        x.add_(1)
    with dg.no_grad():
        x.add_(1)
    assert x.detach().numpy().tolist() == [2.0]


def test_views_share_the_version_counter():
    x = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    v = x.reshape(4)
    x.add_(1)
    assert v.version == x.version


def test_mixing_devices_or_unknown_device_errors():
    with pytest.raises(ValueError, match="unknown device"):
        dg.zeros(2, device="tpu")


def test_shape_error_points_at_user_line():
    a = dg.ones(2, 3)
    b = dg.ones(4, 5)
    with pytest.raises(dg.ShapeError) as info:
        a @ b
    msg = str(info.value)
    assert "matmul" in msg and "test_eager_tensor.py" in msg


@pytest.mark.gpu
def test_cuda_round_trip():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    x = dg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    y = (x * x).sum()
    y.backward()
    assert x.grad.device == "cuda"
    np.testing.assert_allclose(x.grad.cpu().numpy(), [2.0, 4.0])


def test_like_creators_take_dtype_device_and_requires_grad():
    x = dg.ones(2, 3, dtype="float64")
    assert dg.rand_like(x, requires_grad=True).requires_grad
    assert dg.randn_like(x, dtype="float32").dtype == "float32"
    assert dg.empty_like(x).shape == (2, 3)
    r = dg.eager.randint_like(dg.zeros(50, dtype="int32"), 3)
    assert r.dtype == "int32" and 0 <= r.numpy().min() and r.numpy().max() < 3
    dg.manual_seed(4)
    a = dg.eager.randint_like(x, 0, 100).tolist()
    dg.manual_seed(4)
    assert dg.eager.randint_like(x, 0, 100).tolist() == a


def test_to_reports_unknown_targets_and_missing_gpu_clearly():
    x = dg.tensor([1.0])
    with pytest.raises(TypeError, match="neither a dtype nor a device"):
        x.to("tpu")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs cupy"):
            x.to("cuda")


def test_any_and_all():
    x = dg.tensor([[0.0, 1.0], [0.0, 0.0]])
    assert x.any().item() is True and x.all().item() is False
    assert x.any(dim=1).tolist() == [True, False]
    assert x.all(dim=0, keepdim=True).tolist() == [[False, False]]
    assert dg.zeros(0).all().item() is True and dg.zeros(0).any().item() is False
    assert dg.tensor([True, True]).all().item() is True


def test_setitem_without_autograd_writes_in_place():
    x = dg.zeros(2, 3)
    v0 = x.version
    x[0] = 1.0
    x[1, 1:] = dg.tensor([2.0, 3.0])
    x[x == 0] = -1.0
    assert x.tolist() == [[1.0, 1.0, 1.0], [-1.0, 2.0, 3.0]]
    assert x.version == v0 + 3


def test_one_method_surface_with_graph_values():
    from duograph.graphlib.methods import TensorMethods
    assert issubclass(dg.Tensor, TensorMethods) and issubclass(dg.Value, TensorMethods)
    shared = [name for name in vars(dg.Tensor) if not name.startswith("_")
              and name in vars(TensorMethods)]
    assert shared == [], f"Tensor redefines methods of the shared surface: {shared}"
    g = dg.Graph("surface")
    with g:
        p = dg.placeholder("p", (2, 3))
        values, indices = p.max(dim=1)
    assert values.shape == (2,) and indices.dtype == "int64"
