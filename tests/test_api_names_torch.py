"""Issue 28's everyday names against PyTorch: layers, losses, cells, Tensor methods,
process settings, and the external op suite's cases."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = dg.nn.functional


def _t(a, grad=False):
    return dg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _close(a, b, tol=1e-10):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("name, kwargs", [
    ("smooth_l1_loss", {}), ("smooth_l1_loss", {"beta": 0.3, "reduction": "sum"}),
    ("smooth_l1_loss", {"beta": 0.0}), ("huber_loss", {"delta": 0.4}),
    ("huber_loss", {"reduction": "none"}), ("pairwise_distance", {}),
    ("cosine_similarity", {"dim": 0})])
def test_losses_and_distances_values_and_grads_match_torch(name, kwargs):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    (da, ta), (db, tb) = _t(a, True), _t(b, True)
    out, want = getattr(F, name)(da, db, **kwargs), getattr(TF, name)(ta, tb, **kwargs)
    _close(out, want)
    out.sum().backward()
    want.sum().backward()
    _close(da.grad, ta.grad)
    _close(db.grad, tb.grad)


@pytest.mark.parametrize("cls, args", [
    ("SmoothL1Loss", {"beta": 0.5}), ("HuberLoss", {"delta": 2.0}),
    ("CosineSimilarity", {"dim": 1}), ("PairwiseDistance", {"p": 1.0})])
def test_loss_and_distance_modules_match_torch(cls, args):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    _close(getattr(dg.nn, cls)(**args)(*_t(a)[:1], dg.tensor(b)),
           getattr(torch.nn, cls)(**args)(torch.tensor(a), torch.tensor(b)))


@pytest.mark.parametrize("cls", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch_batched_and_unbatched_with_grads(cls):
    dg.manual_seed(0)
    cell = getattr(dg.nn, cls)(3, 4).double()
    ref = getattr(torch.nn, cls)(3, 4).double()
    assert [n for n, _ in cell.named_parameters()] == [n for n, _ in ref.named_parameters()]
    with torch.no_grad():
        for p, q in zip(cell.parameters(), ref.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy()))
    rng = np.random.default_rng(2)
    for shape in [(5, 3), (3,)]:
        x = rng.standard_normal(shape)
        h = rng.standard_normal(shape[:-1] + (4,))
        hx_dg = (dg.tensor(h), dg.tensor(h * 0.5)) if cls == "LSTMCell" else dg.tensor(h)
        hx_t = (torch.tensor(h), torch.tensor(h * 0.5)) if cls == "LSTMCell" else \
            torch.tensor(h)
        out, want = cell(dg.tensor(x), hx_dg), ref(torch.tensor(x), hx_t)
        outs = out if isinstance(out, tuple) else (out,)
        wants = want if isinstance(want, tuple) else (want,)
        for o, w in zip(outs, wants):
            _close(o, w)
        sum(o.sum() for o in outs).backward()
        sum(w.sum() for w in wants).backward()
        for p, q in zip(cell.parameters(), ref.parameters()):
            _close(p.grad, q.grad)
        cell.zero_grad()
        ref.zero_grad()
    out = cell(dg.tensor(rng.standard_normal((2, 3))))    # zeros when hx is omitted
    assert (out[0] if isinstance(out, tuple) else out).shape == (2, 4)
    with pytest.raises(ValueError, match="1D or 2D"):
        cell(dg.ones(1, 2, 3, dtype="float64"))


def test_rmsnorm_module_and_function_match_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    mod, ref = dg.nn.RMSNorm([3, 4]), torch.nn.RMSNorm([3, 4])
    _close(mod(dg.tensor(x)), ref(torch.tensor(x)), 1e-6)
    assert [n for n, _ in mod.named_parameters()] == ["weight"]
    _close(F.rms_norm(dg.tensor(x), (4,), eps=1e-3), TF.rms_norm(torch.tensor(x), (4,),
                                                                  eps=1e-3), 1e-6)


def test_dropout2d_zeroes_whole_channels_and_scales():
    dg.manual_seed(0)
    layer = dg.nn.Dropout2d(0.5)
    y = layer(dg.ones(64, 8, 3, 3)).numpy()
    per_channel = y.reshape(64, 8, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))
    assert 0.35 < (per_channel[..., 0] == 0).mean() < 0.65
    layer.eval()
    assert np.all(layer(dg.ones(2, 3, 2, 2)).numpy() == 1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        dg.nn.Dropout2d(1.5)
    with pytest.raises(ValueError):
        torch.nn.Dropout2d(1.5)


def test_softplus_module_matches_torch():
    x = np.linspace(-30, 30, 13)
    _close(dg.nn.Softplus(beta=2.0, threshold=5.0)(dg.tensor(x)),
           torch.nn.Softplus(beta=2.0, threshold=5.0)(torch.tensor(x)))


def test_tensor_methods_match_torch():
    x = np.arange(24.0).reshape(2, 3, 4)
    d, t = _t(x)
    assert d.stride() == t.stride() and d.stride(1) == t.stride(1)
    assert d.is_floating_point() and not dg.tensor([1]).is_floating_point()
    assert dg.is_floating_point(d) and dg.is_tensor(d) and not dg.is_tensor(x)
    assert d.bfloat16().dtype == "bfloat16"
    for args in [(2, 2, 1), (1, 2, 1), (0, 1, 1), (-1, 3, 2)]:
        _close(d.unfold(*args), t.unfold(*args))
    with pytest.raises(RuntimeError):
        d.unfold(2, 5, 1)
    with pytest.raises(RuntimeError):
        t.unfold(2, 5, 1)
    g, tg = _t(x, True)
    (g.unfold(2, 3, 1) ** 2).sum().backward()
    (tg.unfold(2, 3, 1) ** 2).sum().backward()
    _close(g.grad, tg.grad)
    a, b = np.array([-7.5, 7.5, -3.0, 3.0]), np.array([2.0, -2.0, 2.0, 2.0])
    for mode in ("trunc", "floor"):
        _close(dg.tensor(a).div(dg.tensor(b), rounding_mode=mode),
               torch.tensor(a).div(torch.tensor(b), rounding_mode=mode))
        _close(dg.tensor(a).divide(dg.tensor(b), rounding_mode=mode),
               torch.tensor(a).divide(torch.tensor(b), rounding_mode=mode))
    i = dg.tensor([-7, 7])
    i.div_(2, rounding_mode="trunc")
    assert i.numpy().tolist() == [-3, 3]


def test_bincount_matches_torch():
    x = np.array([0, 1, 1, 3, 5, 1])
    w = np.linspace(0, 1, 6).astype(np.float32)
    for kwargs in [{}, {"minlength": 9}]:
        _close(dg.bincount(dg.tensor(x), **kwargs), torch.bincount(torch.tensor(x), **kwargs))
    _close(dg.bincount(dg.tensor(x), dg.tensor(w)), torch.bincount(torch.tensor(x),
                                                                  torch.tensor(w)), 1e-6)
    _close(dg.bincount(dg.tensor(x), dg.tensor(x)), torch.bincount(torch.tensor(x),
                                                                  torch.tensor(x)))
    for bad in ([-1, 2], [[1]]):
        with pytest.raises(RuntimeError, match="non-negative"):
            torch.bincount(torch.tensor(bad))
        with pytest.raises(RuntimeError, match="non-negative"):
            dg.bincount(dg.tensor(bad))


def test_default_dtype_and_threads_as_torch():
    assert dg.get_default_dtype() == "float32"
    try:
        dg.set_default_dtype(dg.float64)
        assert dg.tensor([1.5]).dtype == "float64" and dg.randn(2).dtype == "float64"
        assert dg.sqrt(dg.tensor([4])).dtype == "float64"
        torch.set_default_dtype(torch.float64)
        # the default complex dtype follows, as PyTorch's
        assert dg.tensor([1 + 2j]).dtype == str(torch.tensor([1 + 2j]).dtype)[6:] == "complex128"
        assert (dg.tensor([1.0]) * 1j).dtype == "complex128"
    finally:
        dg.set_default_dtype(dg.float32)
        torch.set_default_dtype(torch.float32)
    assert dg.tensor([1 + 2j]).dtype == "complex64"
    assert dg.tensor([1.5]).dtype == "float32" and dg.sqrt(dg.tensor([4])).dtype == "float32"
    with pytest.raises(TypeError):
        dg.set_default_dtype(dg.int64)
    with pytest.raises(TypeError):
        torch.set_default_dtype(torch.int64)
    before = dg.get_num_threads()
    assert before >= 1
    dg.set_num_threads(1)
    try:
        assert dg.get_num_threads() == 1
    finally:
        dg.set_num_threads(before)
    with pytest.raises(ValueError):
        dg.set_num_threads(0)


def test_sdpa_grouped_query_attention_matches_torch():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 4, 3, 8))
    k, v = rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 5, 8))
    (dq, tq), (dk, tk), (dv, tv) = _t(q, True), _t(k, True), _t(v, True)
    out = F.scaled_dot_product_attention(dq, dk, dv, enable_gqa=True)
    want = TF.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    _close(out, want, 1e-9)
    out.sum().backward()
    want.sum().backward()
    _close(dk.grad, tk.grad, 1e-9)
    bad = dg.tensor(rng.standard_normal((2, 3, 5, 8)))
    with pytest.raises(RuntimeError, match="must divide"):
        F.scaled_dot_product_attention(dq, bad, bad, enable_gqa=True)
    with pytest.raises(RuntimeError, match="must divide"):
        TF.scaled_dot_product_attention(tq, torch.tensor(bad.numpy()),
                                        torch.tensor(bad.numpy()), enable_gqa=True)
    # is_causal together with a mask: PyTorch 2.13's CPU kernels apply both; so does duograph
    mask = rng.standard_normal((3, 5))
    _close(F.scaled_dot_product_attention(dq, dk, dv, attn_mask=dg.tensor(mask),
                                          is_causal=True, enable_gqa=True),
           TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(mask),
                                           is_causal=True, enable_gqa=True), 1e-9)


def test_cross_entropy_with_class_probabilities_matches_torch():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 5))
    p = rng.random((4, 5))
    p /= p.sum(1, keepdims=True)
    (dx, tx), (dp, tp) = _t(x, True), _t(p)
    for kwargs in [{}, {"label_smoothing": 0.1}, {"reduction": "sum"}]:
        _close(F.cross_entropy(dx, dp, **kwargs), TF.cross_entropy(tx, tp, **kwargs))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_with_negative_amounts_matches_torch(mode):
    x = np.arange(2 * 3 * 5 * 6, dtype=np.float64).reshape(2, 3, 5, 6)
    for pad in [(-1, 2, 1, -2), (2, -1, -1, 1)]:
        _close(F.pad(dg.tensor(x), pad, mode=mode), TF.pad(torch.tensor(x), pad, mode=mode))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_uint8_within_one_of_torch(mode):
    u = np.random.default_rng(6).integers(0, 256, (2, 3, 7, 9)).astype(np.uint8)
    for kwargs in [{"scale_factor": 2}, {"size": (5, 4)}, {"size": (13, 20),
                                                           "align_corners": True}]:
        got = F.interpolate(dg.tensor(u), mode=mode, **kwargs).numpy()
        want = TF.interpolate(torch.tensor(u), mode=mode, **kwargs).numpy()
        assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape
        assert np.abs(got.astype(int) - want).max() <= 1


@pytest.mark.parametrize("padding, kind", [("bad", RuntimeError), (-1, RuntimeError),
                                           ((1, 2, 3), RuntimeError), (1.5, TypeError)])
def test_bad_conv_padding_raises_torchs_error_types(padding, kind):
    x, w = np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3))
    with pytest.raises(kind):
        TF.conv2d(torch.tensor(x), torch.tensor(w), padding=padding)
    with pytest.raises(kind):
        F.conv2d(dg.tensor(x), dg.tensor(w), padding=padding)


def test_bad_pad_arguments_raise_torchs_error_types():
    x = np.ones((2, 1, 5, 6))
    for args, kind in [(((1,),), RuntimeError), (((1, 1), "foo"), NotImplementedError),
                       (((6, 6), "reflect"), RuntimeError)]:
        pad = args[0]
        mode = args[1] if len(args) > 1 else "constant"
        with pytest.raises(kind):
            TF.pad(torch.tensor(x), pad, mode=mode)
        with pytest.raises(kind):
            F.pad(dg.tensor(x), pad, mode=mode)


def _loss_inputs():
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal((5, 4)) for _ in range(3))
    sign = np.where(rng.random(5) < 0.5, -1.0, 1.0)
    return a, b, c, sign


@pytest.mark.parametrize("case", [
    ("margin_ranking_loss", lambda a, b, c, s: ((a[:, 0], b[:, 0], s), {"margin": 0.3})),
    ("triplet_margin_loss", lambda a, b, c, s: ((a, b, c), {"margin": 0.5})),
    ("triplet_margin_loss", lambda a, b, c, s: ((a, b, c), {"swap": True, "p": 1.0})),
    ("cosine_embedding_loss", lambda a, b, c, s: ((a, b, s), {"margin": 0.2})),
    ("hinge_embedding_loss", lambda a, b, c, s: ((a[:, 0], s), {"margin": 0.7})),
    ("soft_margin_loss", lambda a, b, c, s: ((a[:, 0], s), {})),
    ("poisson_nll_loss", lambda a, b, c, s: ((a, np.abs(b) * 3), {"full": True})),
    ("poisson_nll_loss", lambda a, b, c, s: ((np.abs(a), np.abs(b)), {"log_input": False})),
    ("gaussian_nll_loss", lambda a, b, c, s: ((a, b, np.abs(c) + 1e-7), {"full": True})),
    ("hardshrink", lambda a, b, c, s: ((a, 0.4), {})),
    ("softshrink", lambda a, b, c, s: ((a, 0.4), {})),
    ("local_response_norm", lambda a, b, c, s: ((a.reshape(1, 5, 4), 3), {})),
    ("channel_shuffle", lambda a, b, c, s: ((a.reshape(1, 4, 5), 2), {})),
], ids=lambda c: c[0])
def test_more_functional_losses_match_torch_with_grads(case):
    name, make = case
    args, kwargs = make(*_loss_inputs())
    # the first operand requires grad (PyTorch refuses gradients for some targets)
    ours = [dg.tensor(x, requires_grad=i == 0) if isinstance(x, np.ndarray) else x
            for i, x in enumerate(args)]
    theirs = [torch.tensor(x, requires_grad=i == 0) if isinstance(x, np.ndarray) else x
              for i, x in enumerate(args)]
    if name == "channel_shuffle":
        want = torch.nn.ChannelShuffle(args[1])(theirs[0])
    else:
        want = getattr(TF, name)(*theirs, **kwargs)
    out = getattr(F, name)(*ours, **kwargs)
    _close(out, want)
    (out * out).sum().backward()
    (want * want).sum().backward()
    for o, t in zip(ours, theirs):
        if isinstance(o, dg.Tensor) and t.grad is not None:
            _close(o.grad, t.grad, 1e-9)


@pytest.mark.parametrize("cls, args, inputs", [
    ("MarginRankingLoss", {"margin": 0.1}, 3), ("CosineEmbeddingLoss", {}, 3),
    ("TripletMarginLoss", {"margin": 0.2}, 3), ("SoftMarginLoss", {}, 2),
    ("HingeEmbeddingLoss", {}, 2), ("PoissonNLLLoss", {}, 2), ("Hardshrink", {}, 1),
    ("Softshrink", {"lambd": 0.2}, 1)])
def test_more_loss_modules_match_torch(cls, args, inputs):
    a, b, c, s = _loss_inputs()
    if cls in ("MarginRankingLoss",):
        xs = (a[:, 0], b[:, 0], s)
    elif cls == "CosineEmbeddingLoss":
        xs = (a, b, s)
    elif cls in ("SoftMarginLoss", "HingeEmbeddingLoss"):
        xs = (a[:, 0], s)
    else:
        xs = (a, b, c)[:inputs]
    _close(getattr(dg.nn, cls)(**args)(*[dg.tensor(x) for x in xs]),
           getattr(torch.nn, cls)(**args)(*[torch.tensor(x) for x in xs]))


def test_batchnorm3d_alpha_dropout_and_lrn_modules():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 2, 2, 2)).astype(np.float32)
    bn, tbn = dg.nn.BatchNorm3d(3), torch.nn.BatchNorm3d(3)
    _close(bn(dg.tensor(x)), tbn(torch.tensor(x)), 1e-5)
    _close(bn.running_var, tbn.running_var, 1e-6)
    with pytest.raises(RuntimeError):
        bn(dg.tensor(x[0]))
    dg.manual_seed(0)
    y = dg.nn.AlphaDropout(0.2)(dg.tensor(rng.standard_normal(200000)))
    assert abs(float(y.mean().item())) < 0.02 and abs(float(y.std().item()) - 1) < 0.02
    layer = dg.nn.AlphaDropout(0.2).eval()
    assert np.array_equal(layer(dg.tensor(x)).numpy(), x)
    _close(dg.nn.LocalResponseNorm(2)(dg.tensor(x)), torch.nn.LocalResponseNorm(2)(
        torch.tensor(x)), 1e-6)


def test_rng_state_seed_and_printoptions():
    state = dg.get_rng_state()
    assert state.dtype == "uint8" and isinstance(torch.get_rng_state(), torch.Tensor)
    a = dg.randn(4)
    dg.set_rng_state(state)
    np.testing.assert_array_equal(dg.randn(4).numpy(), a.numpy())
    with pytest.raises(TypeError):
        dg.set_rng_state([1, 2])
    s = dg.seed()
    assert isinstance(s, int) and s >= 0
    try:
        dg.set_printoptions(precision=2)
        assert repr(dg.tensor([1.23456])) == "tensor([1.23])"
        dg.set_printoptions(sci_mode=True)
        assert "e+00" in repr(dg.tensor([1.23456]))
    finally:
        dg.set_printoptions(profile="default", sci_mode=False)
    assert repr(dg.tensor([1.23456])) == "tensor([1.2346])"
    with pytest.raises(ValueError):
        dg.set_printoptions(profile="long")


def test_small_tensor_methods_as_torch():
    d, t = _t(np.arange(6.0).reshape(2, 3))
    assert d.get_device() == t.get_device() == -1
    assert d.storage_offset() == t.storage_offset() == 0
    assert d.data_ptr() == d.numpy().__array_interface__["data"][0]
    assert d.pin_memory() is d
    e = d.new_empty(4, 2)
    assert e.shape == tuple(t.new_empty(4, 2).shape) and e.dtype == "float64"
    _close(d.mT, t.mT)
    _close(d.reshape_as(dg.ones(3, 2)), t.reshape_as(torch.ones(3, 2)))
    _close(dg.ones(2, 3).sum_to_size(1, 3), torch.ones(2, 3).sum_to_size(1, 3))
    _close(dg.tensor([2.0, 3.0], dtype="float32").float_power(2),
           torch.tensor([2.0, 3.0]).float_power(2))
    with pytest.raises(RuntimeError):
        dg.ones(3).mT


def test_finfo_and_iinfo_as_torch():
    for name in ("float16", "bfloat16", "float32", "float64", "complex64", "complex128",
                 "float8_e4m3fn", "float8_e5m2"):
        ours, theirs = dg.finfo(getattr(dg, name)), torch.finfo(getattr(torch, name))
        for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
            assert getattr(ours, field) == getattr(theirs, field), (name, field)
        assert ours.dtype == theirs.dtype
    assert dg.finfo().dtype == "float32" and dg.finfo().eps == torch.finfo().eps
    for name in ("int8", "uint8", "int16", "int32", "int64", "uint16", "uint32", "uint64"):
        ours, theirs = dg.iinfo(getattr(dg, name)), torch.iinfo(getattr(torch, name))
        assert (ours.bits, ours.min, ours.max) == (theirs.bits, theirs.min, theirs.max), name
    assert repr(dg.iinfo(dg.int8)) == repr(torch.iinfo(torch.int8)).replace("torch.", "")
    for call, bad in ((dg.finfo, dg.int32), (dg.iinfo, dg.float32), (dg.iinfo, "bool")):
        with pytest.raises(TypeError):
            call(bad)
    for call, bad in ((torch.finfo, torch.int32), (torch.iinfo, torch.float32),
                      (torch.iinfo, torch.bool)):
        with pytest.raises(TypeError):
            call(bad)
