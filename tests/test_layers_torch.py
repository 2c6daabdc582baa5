"""PyTorch's transformer modules, GroupNorm, InstanceNorm, EmbeddingBag, Bilinear and
Unflatten against torch 2.x with copied weights (state_dict names must match, so
``load_state_dict`` of torch's weights works): values and gradients (parameters and inputs) in
float64, in eager mode, under dg.compile and in graph mode."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _causal(n):
    return np.triu(np.full((n, n), -np.inf), 1)


def _pad(b, s, lengths):
    m = np.zeros((b, s), bool)
    for i, n in enumerate(lengths):
        m[i, n:] = True
    return m


def _lib_nn(lib):
    return nn if lib is dg else torch.nn


def _enc_layer(lib, **kw):
    return _lib_nn(lib).TransformerEncoderLayer(8, 2, 16, dropout=0.0, **kw)


def _dec_layer(lib, **kw):
    return _lib_nn(lib).TransformerDecoderLayer(8, 2, 16, dropout=0.0, **kw)


def _silu(lib):
    return dg.nn.functional.silu if lib is dg else torch.nn.functional.silu


# name -> (factory(lib), positional inputs, keyword inputs, train mode)
# inputs: ("f", shape) float64 normal (gets a gradient); ("i<n>", shape) int64 in [0, n);
# ("a", array) that array as a tensor; ("static", array) an array kept concrete in graph mode
CASES = {
    "encoder_layer": (lambda lib: _enc_layer(lib), [("f", (5, 3, 8))],
                      {"src_mask": ("a", _causal(5)),
                       "src_key_padding_mask": ("a", _pad(3, 5, [5, 3, 4]))}, True),
    "encoder_layer_norm_first_gelu_batch_first": (
        lambda lib: _enc_layer(lib, norm_first=True, activation="gelu", batch_first=True),
        [("f", (3, 5, 8))], {"src_mask": ("a", np.triu(np.ones((5, 5), bool), 1))}, True),
    "encoder_layer_callable_activation_nobias": (
        lambda lib: _enc_layer(lib, activation=_silu(lib), bias=False),
        [("f", (4, 2, 8))], {}, True),
    "encoder_layer_unbatched_eval": (
        lambda lib: _lib_nn(lib).TransformerEncoderLayer(8, 2, 16), [("f", (5, 8))],
        {"src_key_padding_mask": ("a", np.array([False, False, False, True, True]))}, False),
    "encoder_layer_is_causal": (lambda lib: _enc_layer(lib), [("f", (5, 2, 8))],
                                {"src_mask": ("a", _causal(5)), "is_causal": True}, True),
    "encoder_stack_with_norm": (
        lambda lib: _lib_nn(lib).TransformerEncoder(_enc_layer(lib), 2,
                                                    _lib_nn(lib).LayerNorm(8)),
        [("f", (5, 3, 8))], {"mask": ("a", _causal(5)), "is_causal": True}, True),
    "encoder_stack_padding_eval": (
        lambda lib: _lib_nn(lib).TransformerEncoder(
            _lib_nn(lib).TransformerEncoderLayer(8, 2, 16, batch_first=True), 2,
            enable_nested_tensor=False),
        [("f", (3, 5, 8))], {"src_key_padding_mask": ("a", _pad(3, 5, [5, 2, 4]))}, False),
    "decoder_layer": (lambda lib: _dec_layer(lib), [("f", (4, 3, 8)), ("f", (5, 3, 8))],
                      {"tgt_mask": ("a", _causal(4)),
                       "memory_key_padding_mask": ("a", _pad(3, 5, [5, 3, 1]))}, True),
    "decoder_layer_norm_first_batch_first": (
        lambda lib: _dec_layer(lib, norm_first=True, batch_first=True, activation="gelu"),
        [("f", (3, 4, 8)), ("f", (3, 6, 8))],
        {"tgt_mask": ("a", _causal(4)), "tgt_is_causal": True,
         "tgt_key_padding_mask": ("a", _pad(3, 4, [4, 4, 2]))}, True),
    "decoder_stack": (
        lambda lib: _lib_nn(lib).TransformerDecoder(_dec_layer(lib), 2,
                                                    _lib_nn(lib).LayerNorm(8)),
        [("f", (4, 2, 8)), ("f", (5, 2, 8))], {"tgt_mask": ("a", _causal(4))}, True),
    "transformer": (
        lambda lib: _lib_nn(lib).Transformer(8, 2, 2, 1, 16, dropout=0.0),
        [("f", (5, 2, 8)), ("f", (4, 2, 8))],
        {"tgt_mask": ("a", _causal(4)), "src_key_padding_mask": ("a", _pad(2, 5, [5, 3])),
         "memory_key_padding_mask": ("a", _pad(2, 5, [5, 3]))}, True),
    "transformer_batch_first_norm_first": (
        lambda lib: _lib_nn(lib).Transformer(8, 2, 1, 2, 16, dropout=0.0, batch_first=True,
                                             norm_first=True, activation="gelu"),
        [("f", (2, 5, 8)), ("f", (2, 3, 8))], {"tgt_mask": ("a", _causal(3))}, True),
    "groupnorm": (lambda lib: _lib_nn(lib).GroupNorm(2, 6), [("f", (3, 6, 4))], {}, True),
    "groupnorm_plain_2d": (lambda lib: _lib_nn(lib).GroupNorm(3, 3, eps=1e-3, affine=False),
                           [("f", (2, 3, 4, 5))], {}, True),
    "instancenorm1d": (lambda lib: _lib_nn(lib).InstanceNorm1d(3), [("f", (2, 3, 6))], {},
                       True),
    "instancenorm1d_unbatched": (lambda lib: _lib_nn(lib).InstanceNorm1d(3, affine=True),
                                 [("f", (3, 6))], {}, True),
    "instancenorm2d_stats": (
        lambda lib: _lib_nn(lib).InstanceNorm2d(4, affine=True, track_running_stats=True,
                                                momentum=0.3),
        [("f", (2, 4, 3, 5))], {}, True),
    "instancenorm2d_stats_eval": (
        lambda lib: _lib_nn(lib).InstanceNorm2d(4, affine=True, track_running_stats=True),
        [("f", (2, 4, 3, 5))], {}, False),
    "embeddingbag_mean_2d": (lambda lib: _lib_nn(lib).EmbeddingBag(10, 3),
                             [("i10", (4, 5))], {}, True),
    "embeddingbag_sum_offsets_weights": (
        lambda lib: _lib_nn(lib).EmbeddingBag(10, 3, mode="sum"),
        [("a", np.array([1, 2, 4, 5, 4, 3, 2, 9])), ("static", np.array([0, 2, 2, 5])),
         ("f", (8,))], {}, True),
    "embeddingbag_max_padding": (
        lambda lib: _lib_nn(lib).EmbeddingBag(10, 3, mode="max", padding_idx=2),
        [("a", np.array([2, 1, 2, 3, 4, 5, 2, 2, 9])), ("static", np.array([0, 3, 3, 6]))],
        {}, True),
    "embeddingbag_mean_last_offset": (
        lambda lib: _lib_nn(lib).EmbeddingBag(10, 3, include_last_offset=True, padding_idx=0),
        [("a", np.array([0, 1, 2, 3, 0, 5, 6])), ("static", np.array([0, 3, 3, 7]))], {},
        True),
    "bilinear": (lambda lib: _lib_nn(lib).Bilinear(3, 4, 5), [("f", (2, 6, 3)), ("f", (2, 6, 4))],
                 {}, True),
    "bilinear_nobias_1d": (lambda lib: _lib_nn(lib).Bilinear(3, 2, 4, bias=False),
                           [("f", (3,)), ("f", (2,))], {}, True),
    "unflatten": (lambda lib: _lib_nn(lib).Unflatten(1, (2, 3)), [("f", (4, 6, 2))], {}, True),
    "unflatten_neg": (lambda lib: _lib_nn(lib).Unflatten(-1, (2, -1)), [("f", (4, 6))], {},
                      True),
}


def _materialise(spec, rng):
    kind, what = spec
    if kind == "f":
        return rng.standard_normal(what)
    if kind.startswith("i"):
        return rng.integers(0, int(kind[1:]), size=what).astype(np.int64)
    return what


def _case(name):
    factory, args, kwargs, train = CASES[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    arrays = [(spec[0], _materialise(spec, rng)) for spec in args]
    kw = {k: (v if not isinstance(v, tuple) else (v[0], _materialise(v, rng)))
          for k, v in kwargs.items()}
    dg.manual_seed(1)
    ours = factory(dg).double()
    theirs = factory(torch).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    # torch's weights into ours: the port a PyTorch user does
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    ours.train(train)
    theirs.train(train)
    return ours, theirs, arrays, kw


def _torch_call(theirs, arrays, kw):
    targs = [torch.tensor(a, requires_grad=k == "f") for k, a in arrays]
    tkw = {k: (torch.tensor(v[1]) if isinstance(v, tuple) else v) for k, v in kw.items()}
    out = theirs(*targs, **tkw)
    return out, targs


def _float_inputs(arrays):
    return [i for i, (k, _) in enumerate(arrays) if k == "f"]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch_values_and_gradients(name, mode):
    ours, theirs, arrays, kw = _case(name)
    tout, targs = _torch_call(theirs, arrays, kw)
    cot = np.random.default_rng(5).standard_normal(tuple(tout.shape))
    (tout * torch.tensor(cot)).sum().backward()

    xs = [dg.tensor(a, requires_grad=k == "f") for k, a in arrays]
    dkw = {k: (dg.tensor(v[1]) if isinstance(v, tuple) else v) for k, v in kw.items()}
    fn = dg.compile(ours) if mode == "compiled" else ours
    out = fn(*xs, **dkw)
    (out * dg.tensor(cot)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    theirs_p = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs_p[pname].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=pname)
    for i in _float_inputs(arrays):
        np.testing.assert_allclose(xs[i].grad.numpy(), targs[i].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=f"input {i}")
    theirs_b = dict(theirs.named_buffers())
    for bname, b in ours.named_buffers():
        np.testing.assert_allclose(b.numpy(), theirs_b[bname].numpy(), rtol=1e-12,
                                   err_msg=bname)


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_mode_matches_torch(name):
    ours, theirs, arrays, kw = _case(name)
    tout, targs = _torch_call(theirs, arrays, kw)
    cot = np.random.default_rng(6).standard_normal(tuple(tout.shape))
    (tout * torch.tensor(cot)).sum().backward()

    feeds = {}
    g = dg.Graph(name)
    with g:
        args = []
        for i, (k, a) in enumerate(arrays):
            if k == "static":
                args.append(dg.tensor(a))
            else:
                feeds[f"x{i}"] = a
                args.append(dg.placeholder(f"x{i}", a.shape, a.dtype.name))
        dkw = {}
        for key, v in kw.items():
            if isinstance(v, tuple):
                feeds[key] = v[1]
                dkw[key] = dg.placeholder(key, v[1].shape, v[1].dtype.name)
            else:
                dkw[key] = v
        y = ours(*args, **dkw)
        loss = dg.sum(y * dg.constant(cot))
        names = [n for n, _ in ours.named_parameters()]
        wrt = [g.bound_value(p) for p in ours.parameters()] + [
            args[i] for i in _float_inputs(arrays)]
        grads = dg.grad(loss, wrt) if wrt else []
    got = g.compile(outputs=[y] + list(grads))(**feeds)
    np.testing.assert_allclose(got[0], tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    theirs_p = dict(theirs.named_parameters())
    expected = [theirs_p[n].grad.numpy() for n in names] + [
        targs[i].grad.numpy() for i in _float_inputs(arrays)]
    for gv, want in zip(got[1:], expected):
        np.testing.assert_allclose(gv, want, rtol=1e-9, atol=1e-11)
    theirs_b = dict(theirs.named_buffers())
    for bname, b in ours.named_buffers():
        np.testing.assert_allclose(b.numpy(), theirs_b[bname].numpy(), rtol=1e-12,
                                   err_msg=bname)


def test_generate_square_subsequent_mask_matches_torch():
    for n in (0, 1, 4):
        ours = nn.Transformer.generate_square_subsequent_mask(n)
        theirs = torch.nn.Transformer.generate_square_subsequent_mask(n)
        assert ours.dtype == "float32"
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype="float64").dtype == "float64"
    with pytest.raises(TypeError):
        nn.Transformer.generate_square_subsequent_mask(3, dtype="int64")


def test_defaults_and_layer_copies_as_torch():
    ours, theirs = nn.TransformerEncoderLayer(16, 4), torch.nn.TransformerEncoderLayer(16, 4)
    assert ours.linear1.out_features == theirs.linear1.out_features == 2048
    assert ours.dropout.p == theirs.dropout.p == 0.1
    assert ours.self_attn.batch_first is False and ours.norm_first is False
    assert ours.norm1.eps == theirs.norm1.eps
    enc = nn.TransformerEncoder(ours, 3)
    assert enc.layers[0] is not ours and enc.layers[0].linear1.weight is not \
        enc.layers[1].linear1.weight
    np.testing.assert_array_equal(enc.layers[2].linear1.weight.detach().numpy(),
                                  ours.linear1.weight.detach().numpy())
    t = nn.Transformer()
    tt = torch.nn.Transformer()
    assert [(k, tuple(v.shape)) for k, v in t.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in tt.state_dict().items()]
    # every matrix is xavier-uniform initialised, as PyTorch
    w = t.encoder.layers[0].linear1.weight.detach().numpy()
    assert np.abs(w).max() <= np.sqrt(6 / (512 + 2048)) + 1e-7
    inorm, tinorm = nn.InstanceNorm2d(3), torch.nn.InstanceNorm2d(3)
    assert (inorm.affine, inorm.track_running_stats) == (tinorm.affine,
                                                         tinorm.track_running_stats)
    assert list(inorm.state_dict()) == list(tinorm.state_dict()) == []
    assert list(nn.InstanceNorm1d(3, track_running_stats=True).state_dict()) == list(
        torch.nn.InstanceNorm1d(3, track_running_stats=True).state_dict())


def test_bad_arguments_raise_like_torch():
    with pytest.raises(RuntimeError, match="relu/gelu"):
        torch.nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError):
        torch.nn.GroupNorm(4, 6)
    with pytest.raises(ValueError):
        nn.GroupNorm(4, 6)
    t = nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(RuntimeError, match="batch number"):
        t(dg.randn(5, 2, 8), dg.randn(4, 3, 8))
    with pytest.raises(RuntimeError, match="d_model"):
        t(dg.randn(5, 2, 8), dg.randn(4, 2, 6))
    bag = nn.EmbeddingBag(5, 2)
    tbag = torch.nn.EmbeddingBag(5, 2)
    with pytest.raises(ValueError):
        tbag(torch.tensor([[1, 2]]), torch.tensor([0]))
    with pytest.raises(ValueError):
        bag(dg.tensor([[1, 2]]), dg.tensor([0]))
    with pytest.raises(ValueError):
        tbag(torch.tensor([1, 2]))
    with pytest.raises(ValueError):
        bag(dg.tensor([1, 2]))
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        tbag(torch.tensor([[1, 2]]), per_sample_weights=torch.ones(1, 2))
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        bag(dg.tensor([[1, 2]]), per_sample_weights=dg.ones(1, 2))
    with pytest.raises(IndexError):
        bag(dg.tensor([[1, 7]]))
    with pytest.raises(ValueError, match="offsets\\[0\\]"):
        bag(dg.tensor([1, 2, 3]), dg.tensor([1, 2]))
    with pytest.raises(ValueError):
        nn.InstanceNorm1d(3)(dg.randn(2, 3, 1))
    with pytest.raises(ValueError):
        torch.nn.InstanceNorm1d(3)(torch.randn(2, 3, 1))
    with pytest.raises((ValueError, RuntimeError)):
        nn.InstanceNorm1d(3, affine=True)(dg.randn(2, 4, 5))


def test_embedding_bag_empty_bags_give_zeros_like_torch():
    for mode in ("sum", "mean", "max"):
        tbag = torch.nn.EmbeddingBag(6, 2, mode=mode)
        bag = nn.EmbeddingBag(6, 2, mode=mode)
        bag.load_state_dict({k: v.detach().numpy() for k, v in tbag.state_dict().items()})
        idx, off = np.array([1, 2, 3]), np.array([0, 0, 3, 3])
        want = tbag(torch.tensor(idx), torch.tensor(off)).detach().numpy()
        got = bag(dg.tensor(idx), dg.tensor(off)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.all(got[[0, 2, 3]] == 0)
