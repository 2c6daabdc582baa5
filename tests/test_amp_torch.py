"""Mixed precision against PyTorch: ``dg.autocast``'s output dtypes per op equal
``torch.autocast("cpu")``'s (bfloat16 and float16), and ``dg.amp.GradScaler`` equals
``torch.amp.GradScaler`` step by step, including a skipped step on an inf gradient."""
import numpy as np
import pytest

import duograph as dg
import duograph.nn.functional as DF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 8)).astype(np.float32)
W = rng.standard_normal((8, 8)).astype(np.float32)
B = rng.standard_normal(8).astype(np.float32)
X3 = rng.standard_normal((2, 4, 8)).astype(np.float32)
IMG = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
K = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
TGT = rng.integers(0, 8, 4)
PROB = rng.uniform(0.1, 0.9, (4, 8)).astype(np.float32)

# (what, duograph's call, PyTorch's call) on (module, functional, inputs as that framework's
# tensors); ``h`` is a lower-precision intermediate (x @ w) where the op's input matters
CASES = [
    ("matmul", lambda m, F, a: a["x"] @ a["w"], None),
    ("bmm", lambda m, F, a: m.matmul(a["x3"], a["x3"].transpose(1, 2)), None),
    ("einsum", lambda m, F, a: m.einsum("ij,jk->ik", a["x"], a["w"]), None),
    ("linear", lambda m, F, a: F.linear(a["x"], a["w"], a["b"]), None),
    ("conv2d", lambda m, F, a: F.conv2d(a["img"], a["k"]), None),
    ("conv2d_bias", lambda m, F, a: F.conv2d(a["img"], a["k"], a["b"][:4]), None),
    ("conv_transpose2d", lambda m, F, a: F.conv_transpose2d(a["img"], a["k"].transpose(0, 1)),
     None),
    ("sdpa", lambda m, F, a: F.scaled_dot_product_attention(a["x3"], a["x3"], a["x3"]), None),
    ("sum_of_h", lambda m, F, a: (a["x"] @ a["w"]).sum(), None),
    ("mean_of_h", lambda m, F, a: (a["x"] @ a["w"]).mean(), None),
    ("softmax_of_h", lambda m, F, a: m.softmax(a["x"] @ a["w"], -1), None),
    ("log_softmax_of_h", lambda m, F, a: F.log_softmax(a["x"] @ a["w"], -1), None),
    ("exp_of_h", lambda m, F, a: m.exp(a["x"] @ a["w"]), None),
    ("relu_of_h", lambda m, F, a: m.relu(a["x"] @ a["w"]), None),
    ("layer_norm_of_h", lambda m, F, a: F.layer_norm(a["x"] @ a["w"], (8,)), None),
    ("h_plus_f32", lambda m, F, a: (a["x"] @ a["w"]) + a["x"], None),
    ("cat", lambda m, F, a: m.cat([a["x"] @ a["w"], a["x"]]), None),
    ("stack", lambda m, F, a: m.stack([a["x"] @ a["w"], a["x"]]), None),
    ("prod_of_h", lambda m, F, a: (a["x"] @ a["w"]).prod(), None),
    ("cross_entropy", lambda m, F, a: F.cross_entropy(a["x"] @ a["w"], a["t"]), None),
    ("nll_loss", lambda m, F, a: F.nll_loss(a["x"] @ a["w"], a["t"]), None),
    ("mse_loss", lambda m, F, a: F.mse_loss(a["x"] @ a["w"], a["x"]), None),
    ("l1_loss", lambda m, F, a: F.l1_loss(a["x"] @ a["w"], a["x"]), None),
    ("bce_with_logits", lambda m, F, a: F.binary_cross_entropy_with_logits(
        a["x"] @ a["w"], a["p"]), None),
    ("bce", lambda m, F, a: F.binary_cross_entropy(m.sigmoid(a["x"] @ a["w"]), a["p"]), None),
    ("kl_div", lambda m, F, a: F.kl_div(a["x"] @ a["w"], a["p"], reduction="batchmean"), None),
    ("float64_matmul", lambda m, F, a: a["x"].double() @ a["w"].double(), None),
    ("tanh_f32", lambda m, F, a: m.tanh(a["x"]), None),
]


def _inputs(make, long):
    return {"x": make(X), "w": make(W), "b": make(B), "x3": make(X3), "img": make(IMG),
            "k": make(K), "t": long(TGT), "p": make(PROB)}


def _dtype_name(t) -> str:
    """A tensor's (or a torch dtype's) dtype as duograph names it."""
    return str(getattr(t, "dtype", t)).replace("torch.", "")


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_autocast_output_dtype_matches_torch(case, low):
    name, call, _ = case
    ours_in = _inputs(dg.tensor, lambda a: dg.tensor(a.astype(np.int64)))
    theirs_in = _inputs(torch.tensor, lambda a: torch.tensor(a, dtype=torch.int64))
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        expected = _dtype_name(call(torch, TF, theirs_in))
    with dg.autocast("cpu", dtype=low):
        found = call(dg, DF, ours_in).dtype
    assert found == expected, f"{name} under autocast({low}): {found}, PyTorch {expected}"
    # outside the block, nothing is cast
    assert call(dg, DF, ours_in).dtype == _dtype_name(call(torch, TF, theirs_in))


def test_autocast_values_close_to_torch():
    """The lower-precision result is PyTorch's up to bfloat16 rounding of the sums."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = TF.linear(torch.tensor(X), torch.tensor(W), torch.tensor(B)).float()
    with dg.autocast("cpu"):
        found = DF.linear(dg.tensor(X), dg.tensor(W), dg.tensor(B))
    assert found.dtype == "bfloat16"
    np.testing.assert_allclose(found.float().numpy(), expected.numpy(), rtol=2e-2, atol=5e-2)


def test_autocast_state_functions_match_torch():
    assert dg.is_autocast_enabled("cpu") == torch.is_autocast_enabled("cpu") is False
    assert dg.get_autocast_dtype("cpu") == _dtype_name(torch.get_autocast_dtype("cpu"))
    with torch.autocast("cpu"), dg.autocast("cpu"):
        assert dg.is_autocast_enabled("cpu") and torch.is_autocast_enabled("cpu")
        assert dg.is_autocast_enabled() == torch.is_autocast_enabled()     # "cuda"
        with torch.autocast("cpu", enabled=False), dg.autocast("cpu", enabled=False):
            assert not dg.is_autocast_enabled("cpu")
            assert not torch.is_autocast_enabled("cpu")
            assert (dg.tensor(X) @ dg.tensor(W)).dtype == "float32"
    with torch.autocast("cpu", dtype=torch.float16), dg.autocast("cpu", dtype=dg.float16):
        assert dg.get_autocast_dtype("cpu") == _dtype_name(torch.get_autocast_dtype("cpu"))


def test_autocast_unsupported_dtype_warns_and_disables_like_torch():
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("cpu", dtype=torch.float64):
            assert not torch.is_autocast_enabled("cpu")
    with pytest.warns(UserWarning, match="not supported"):
        with dg.autocast("cpu", dtype=dg.float64):
            assert not dg.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError, match="Invalid device string: 'tpu-like'"):
        torch.autocast("tpu-like")
    with pytest.raises(RuntimeError, match="Invalid device string: 'tpu-like'"):
        dg.autocast("tpu-like")
    with pytest.raises(TypeError, match="device_type to be str"):
        dg.autocast(0)


# -- GradScaler ----------------------------------------------------------------------------

def _pair(seed=0):
    g = np.random.default_rng(seed)
    w1 = g.standard_normal((6, 4)).astype(np.float32) * 0.5
    w2 = g.standard_normal((1, 6)).astype(np.float32) * 0.5
    ours = dg.nn.Sequential(dg.nn.Linear(4, 6), dg.nn.Tanh(), dg.nn.Linear(6, 1))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    for (a, b), w in zip([(ours[0], theirs[0]), (ours[2], theirs[2])], [w1, w2]):
        a.weight.data = dg.tensor(w)
        a.bias.data = dg.tensor(np.zeros(w.shape[0], np.float32))
        with torch.no_grad():
            b.weight.copy_(torch.tensor(w))
            b.bias.zero_()
    return ours, theirs


@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # the inf step's products
def test_grad_scaler_matches_torch_step_by_step():
    ours, theirs = _pair()
    opt_o = dg.optim.SGD(ours.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(theirs.parameters(), lr=0.1)
    kw = dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    so, st = dg.amp.GradScaler("cpu", **kw), torch.amp.GradScaler("cpu", **kw)
    g = np.random.default_rng(1)
    skipped = 0
    for step in range(7):
        x = g.standard_normal((5, 4)).astype(np.float32)
        if step == 3:
            x[0, 0] = np.inf            # an inf gradient: the step is skipped
        opt_o.zero_grad()
        opt_t.zero_grad()
        with dg.autocast("cpu"):
            lo = ours(dg.tensor(x)).float().pow(2).mean()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lt = theirs(torch.tensor(x)).float().pow(2).mean()
        so.scale(lo).backward()
        st.scale(lt).backward()
        before = ours[0].weight.detach().numpy().copy()
        so.unscale_(opt_o)
        st.unscale_(opt_t)
        np.testing.assert_allclose(ours[0].weight.grad.numpy(),
                                   theirs[0].weight.grad.numpy(), rtol=3e-2, atol=3e-2,
                                   equal_nan=True)
        so.step(opt_o)
        st.step(opt_t)
        if step == 3:
            skipped += 1
            np.testing.assert_array_equal(ours[0].weight.detach().numpy(), before)
        so.update()
        st.update()
        assert so.get_scale() == st.get_scale(), step
        assert so.state_dict() == st.state_dict(), step
        np.testing.assert_allclose(ours[0].weight.detach().numpy(),
                                   theirs[0].weight.detach().numpy(), rtol=3e-2, atol=3e-2)
    assert skipped == 1
    # grown after steps 0-1, backed off at step 3 (the tracker restarts), grown after 4-5
    assert so.get_scale() == 2.0 ** 10 * 2 * 0.5 * 2


@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # float16 scaled sums overflow
def test_grad_scaler_errors_match_torch():
    ours, theirs = _pair()
    opt_o = dg.optim.SGD(ours.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(theirs.parameters(), lr=0.1)
    so, st = dg.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    for scaler, opt in ((so, opt_o), (st, opt_t)):
        with pytest.raises(AssertionError, match="_scale is None"):
            scaler.step(opt)
    x = np.ones((2, 4), np.float32)
    so.scale(ours(dg.tensor(x)).sum()).backward()
    st.scale(theirs(torch.tensor(x)).sum()).backward()
    for scaler, opt in ((so, opt_o), (st, opt_t)):
        scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="already been called on this optimizer"):
            scaler.unscale_(opt)
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
            scaler.step(opt)
        with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
            scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
            scaler.step(opt, closure=lambda: 0)
        scaler.update()
    for cls in (dg.amp.GradScaler, torch.amp.GradScaler):
        with pytest.raises(AssertionError, match="growth factor must be > 1.0"):
            cls("cpu", growth_factor=0.9)
        with pytest.raises(AssertionError, match="backoff factor must be < 1.0"):
            cls("cpu", backoff_factor=1.5)
        with pytest.raises(RuntimeError, match="state dict is empty"):
            cls("cpu").load_state_dict({})
        assert cls("cpu", enabled=False).state_dict() == {}
        assert cls("cpu", enabled=False).get_scale() == 1.0
    half = dg.nn.Linear(2, 1).half()
    opt_h = dg.optim.SGD(half.parameters(), lr=0.1)
    scaler = dg.amp.GradScaler("cpu")
    scaler.scale(half(dg.ones(1, 2).half()).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt_h)


def test_grad_scaler_state_dict_round_trip_like_torch():
    so, st = dg.amp.GradScaler("cpu", growth_interval=3), torch.amp.GradScaler(
        "cpu", growth_interval=3)
    st.scale(torch.ones(()))
    so.scale(dg.ones(()))
    assert so.state_dict() == st.state_dict()
    state = dict(st.state_dict(), scale=8.0, _growth_tracker=2)
    fresh_o, fresh_t = dg.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    fresh_o.load_state_dict(state)
    fresh_t.load_state_dict(state)
    assert fresh_o.state_dict() == fresh_t.state_dict()
    assert fresh_o.get_scale() == fresh_t.get_scale() == 8.0
    scaled = fresh_o.scale(dg.ones(3, dtype=dg.bfloat16))
    assert scaled.dtype == "bfloat16" and float(scaled[0].float()) == 8.0
    assert fresh_t.scale(torch.ones(3, dtype=torch.bfloat16)).dtype == torch.bfloat16
