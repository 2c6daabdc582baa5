"""Device plumbing without a GPU: a stand-in "cuda" device (``fake_device.py``: numpy
arrays of a subclass, an array module returning them) runs the real code paths of moving
tensors and modules between devices, refusing mixed devices, optimizers on device state,
checkpoints loaded to a chosen device, graph mode and ``dg.compile`` on the device; and
DLPack interop with PyTorch on the CPU. The same checks on a real GPU are in
``test_gpu.py`` (marked ``gpu``)."""
import io

import numpy as np
import pytest
from fake_device import FakeDeviceArray, fake_cuda

import duograph as dg
import duograph.nn as nn

torch = pytest.importorskip("torch")


@pytest.fixture
def cuda():
    with fake_cuda() as backend:
        yield backend


def _on_device(t) -> bool:
    return t.device == "cuda" and isinstance(t.array, FakeDeviceArray)


def test_tensors_move_between_devices_and_gradients_follow(cuda):
    x = dg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x.cuda()
    assert _on_device(y) and y.is_cuda and x.device == "cpu"
    assert x.to("cuda:0").device == "cuda" and y.cpu().device == "cpu"
    assert y.to("cuda") is y and x.cpu() is x
    z = dg.tensor([[1.0, 2.0]], device="cuda")
    assert _on_device(z) and repr(z).endswith("device='cuda')")
    loss = (dg.tanh(y) * 2.0).sum()
    assert _on_device(loss)
    loss.backward()
    assert x.grad.device == "cpu"         # the gradient comes back through the move
    np.testing.assert_allclose(x.grad.numpy(), 2 * (1 - np.tanh([1.0, -2.0, 3.0]) ** 2),
                               rtol=1e-5)
    with pytest.raises(RuntimeError, match="on cuda; call .cpu"):
        y.detach().numpy()
    np.testing.assert_allclose(y.detach().cpu().numpy(), [1.0, -2.0, 3.0])


def test_mixing_devices_names_both_and_the_line(cuda):
    a = dg.ones(3)
    b = dg.ones(3, device="cuda")
    with pytest.raises(RuntimeError) as info:
        a + b                                          # the line the error must name
    msg = str(info.value)
    assert "cpu" in msg and "cuda" in msg and "test_device_plumbing.py:" in msg
    with pytest.raises(RuntimeError, match="cpu and cuda|cuda and cpu"):
        dg.matmul(b.reshape(1, 3), a.reshape(3, 1))


def test_a_zero_dim_cpu_tensor_joins_the_device_as_in_pytorch(cuda):
    b = dg.ones(3, device="cuda")
    s = dg.tensor(2.5)
    out = b * s
    assert _on_device(out)
    np.testing.assert_allclose(out.cpu().numpy(), [2.5, 2.5, 2.5])
    w = dg.tensor(3.0, requires_grad=True)
    (b * w).sum().backward()
    assert w.grad.device == "cpu" and float(w.grad.numpy()) == 3.0


def _train(device, opt_cls, steps=3, **opt_kw):
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model.to(device)
    opt = opt_cls(model.parameters(), **opt_kw)
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=device)
    t = dg.tensor(rng.integers(0, 3, 5), device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        losses.append(float(loss.cpu().item()))
    return model, opt, losses


@pytest.mark.parametrize("opt_cls, kw", [(dg.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                         (dg.optim.Adam, dict(lr=0.01)),
                                         (dg.optim.AdamW, dict(lr=0.01, amsgrad=True)),
                                         (dg.optim.Adagrad, dict(lr=0.1))])
def test_module_to_device_trains_with_state_on_the_device(cuda, opt_cls, kw):
    """Module.to("cuda") moves parameters in place; the optimizer's slots live on the
    parameters' device; losses equal the CPU run's."""
    _, _, want = _train("cpu", opt_cls, **kw)
    model, opt, got = _train("cuda", opt_cls, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p in model.parameters():
        assert _on_device(p)
        for name, slot in opt.state[p].items():
            assert _on_device(slot), name
    model.cpu()
    assert all(p.device == "cpu" for p in model.parameters())


def test_checkpoints_load_to_the_chosen_device(cuda):
    model, opt, _ = _train("cuda", dg.optim.Adam, lr=0.01)
    buf = io.BytesIO()
    dg.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    data = buf.getvalue()
    on_cpu = dg.load(io.BytesIO(data))
    on_gpu = dg.load(io.BytesIO(data), map_location="cuda:0")
    for k, t in on_cpu["model"].items():
        assert t.device == "cpu"
        assert _on_device(on_gpu["model"][k])
        np.testing.assert_array_equal(on_gpu["model"][k].cpu().numpy(), t.numpy())
        np.testing.assert_array_equal(model.state_dict()[k].cpu().numpy(), t.numpy())
    assert dg.load(io.BytesIO(data), map_location=dg.device("cpu"))["model"]
    # a CPU checkpoint loaded into a device model and optimizer
    fresh, fresh_opt, _ = _train("cuda", dg.optim.Adam, steps=1, lr=0.01)
    fresh.load_state_dict(on_cpu["model"])
    fresh_opt.load_state_dict(on_cpu["opt"])
    for p in fresh.parameters():
        assert _on_device(p)
        assert all(_on_device(s) for s in fresh_opt.state[p].values())
    with pytest.raises(TypeError, match="not both"):
        dg.load(io.BytesIO(data), device="cpu", map_location="cuda")
    with pytest.raises(ValueError, match="unknown device"):
        dg.load(io.BytesIO(data), map_location="tpu")


def test_graph_mode_runs_on_the_device_with_numpy_or_device_feeds(cuda):
    g = dg.Graph("dev")
    with g:
        x = dg.placeholder("x", (4, 3))
        w = dg.variable("w", np.full((3, 2), 0.5, np.float32))
        y = dg.relu(x @ w + 1.0)
        loss = dg.sum(y * y)
        (gw,) = dg.grad(loss, [w])
        dg.assign(w, w - 0.1 * gw)
    feed = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    want = g.compile(outputs=[y], passes="O2")(x=feed)[0]
    for passes in ("O0", "O2"):
        exe = g.compile(outputs=[y], passes=passes, device="cuda")
        assert exe.backend == "fakecuda"
        got = exe(x=feed)[0]                      # numpy in, numpy out
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, want, rtol=1e-6)
        got2 = exe(x=FakeDeviceArray.__new__(FakeDeviceArray, feed.shape, feed.dtype,
                                             feed.copy()))[0]
        assert np.all(np.isfinite(got2))
        state = exe.state["w"]
        assert isinstance(exe._owned["w"], FakeDeviceArray)
        assert np.asarray(state).shape == (3, 2)
        # keep_on_device: exe(...) leaves the outputs on the device, as exe.run does (a
        # copy of each output to the host per call cost 21 ms for 16M floats on a GPU)
        exe.keep_on_device = True
        kept = exe(x=feed)[0]
        assert isinstance(kept, FakeDeviceArray), type(kept)
        assert isinstance(exe.run({"x": feed})[0], FakeDeviceArray)


def test_dg_compile_runs_device_tensors_on_the_device(cuda):
    lin = nn.Linear(3, 2)
    lin.cuda()

    @dg.compile
    def step(x):
        return dg.tanh(lin(x)).sum()
    x = dg.tensor(np.ones((4, 3), np.float32), device="cuda")
    want = dg.tanh(lin(x)).sum()
    want.backward()
    want_grad = lin.weight.grad.detach().cpu().numpy()
    for _ in range(2):                 # recorded, then replayed
        lin.weight.grad = None
        got = step(x)
        assert _on_device(got)
        np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().cpu().numpy(),
                                   rtol=1e-6)
        got.backward()
        assert _on_device(lin.weight.grad)
        np.testing.assert_allclose(lin.weight.grad.cpu().numpy(), want_grad, rtol=1e-5)


def test_dlpack_shares_memory_with_torch_both_ways():
    t = dg.tensor([1.0, 2.0, 3.0])
    tt = torch.from_dlpack(t)
    tt[0] = 7.0                          # the same memory: no copy
    assert t.tolist() == [7.0, 2.0, 3.0]
    assert t.__dlpack_device__()[0] == 1
    src = torch.arange(4, dtype=torch.float64)
    back = dg.from_dlpack(src)
    src[1] = 9.0
    assert back.dtype == "float64" and back.tolist() == [0.0, 9.0, 2.0, 3.0]
    assert not back.requires_grad
    assert dg.from_dlpack(np.ones(2, np.int32)).dtype == "int32"
    with pytest.raises(RuntimeError, match="requires grad"):
        torch.from_dlpack(dg.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="__dlpack__"):
        dg.from_dlpack([1, 2])


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_digits_training_on_the_device_in_three_modes_matches_the_cpu(cuda, kind):
    """examples/train_digits.py with device="cuda" (the stand-in device): eager, dg.compile
    and graph mode give the CPU's loss curve, and the model ends on the device."""
    pytest.importorskip("sklearn")
    from test_train_digits import train_digits
    quiet = dict(progress=False, log=lambda *a: None, epochs=1)
    want = train_digits.train(kind=kind, mode="eager", **quiet)["losses"]
    for mode in ("eager", "compiled", "graph"):
        res = train_digits.train(kind=kind, mode=mode, device="cuda", **quiet)
        np.testing.assert_allclose(res["losses"], want, rtol=1e-5, err_msg=mode)
        assert all(_on_device(p) for p in res["model"].parameters()), mode


def test_graph_state_on_another_device_is_a_clear_error(cuda):
    lin = nn.Linear(3, 2).cuda()
    g = dg.Graph("mixed")
    with g:
        x = dg.placeholder("x", (1, 3))
        y = lin(x)
    with pytest.raises(dg.FeedError, match="is on cuda, but this executable runs on cpu"):
        g.compile(outputs=[y])(x=np.ones((1, 3), np.float32))
    got = g.compile(outputs=[y], device="cuda")(x=np.ones((1, 3), np.float32))[0]
    with dg.no_grad():
        want = lin(dg.ones(1, 3, device="cuda")).cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_creation_and_random_ops_honour_the_device(cuda):
    """device= reaches ops without tensor inputs and random ops (whose host seed does not
    decide the device); the same seed gives the same numbers as on the CPU here (the stand-in
    device draws with numpy's generator: a real GPU draws with cupy's)."""
    for make in (lambda: dg.rand(3, device="cuda"), lambda: dg.randn(2, 2, device="cuda"),
                 lambda: dg.arange(4, device="cuda"), lambda: dg.zeros(2, device="cuda"),
                 lambda: dg.full((2,), 3.0, device="cuda"), lambda: dg.eye(2, device="cuda"),
                 lambda: dg.randint(0, 5, (3,), device="cuda")):
        assert _on_device(make())
    x = dg.ones(3, device="cuda")
    assert _on_device(dg.rand_like(x)) and _on_device(dg.zeros_like(x))
    assert _on_device(nn.Dropout(0.5)(x))
    dg.manual_seed(1)
    a = dg.rand(5, device="cuda").cpu().numpy()
    dg.manual_seed(1)
    np.testing.assert_array_equal(a, dg.rand(5).numpy())
    assert dg.ones(2).device == "cpu"           # and the default is back


def test_a_host_learning_rate_is_one_device_scalar_refreshed_in_place(cuda):
    """Graph mode on a device reads a host 0-d state (the optimizer's learning rate) through
    one device array, updated in place when the value changes (so a captured CUDA graph
    reading it sees the change)."""
    lin = nn.Linear(3, 1).cuda()
    opt = dg.optim.SGD(lin.parameters(), lr=0.5)
    g = dg.Graph("lr")
    with g:
        x = dg.placeholder("x", (2, 3))
        loss = dg.sum(lin(x) ** 2)
        opt.minimize(loss)
    exe = g.compile(outputs=[loss], device="cuda")
    feed = np.ones((2, 3), np.float32)
    exe(x=feed)
    held = dict(exe._device_scalars)
    assert list(held) == ["lr"]          # (the step counts live on the device)
    (name, (value, dev)), = held.items()
    assert value == 0.5 and isinstance(dev, FakeDeviceArray)
    opt.param_groups[0]["lr"] = 0.25
    exe(x=feed)
    assert exe._device_scalars[name][1] is dev and float(dev) == 0.25


def test_composite_ops_build_their_constants_on_the_device(cuda):
    """tril, pad, interpolate... make masks and index tables with constant(): those follow
    the device of the tensors they meet, while a user's CPU tensor still refuses to mix."""
    x = dg.tensor(np.arange(9, dtype=np.float32).reshape(3, 3), device="cuda")
    assert _on_device(dg.tril(x)) and _on_device(nn.functional.pad(x[None], (1, 1),
                                                                   mode="reflect"))
    np.testing.assert_array_equal(dg.triu(x).cpu().numpy(), np.triu(x.cpu().numpy()))
    with pytest.raises(RuntimeError, match="cpu and cuda|cuda and cpu"):
        x + dg.arange(3, dtype="float32")
