"""nn layers against PyTorch (values and gradients, float64, copied weights), finite
differences, graph mode against eager, and shape errors that name the layer.

PyTorch is only an oracle: without it the tests that compare against it skip and the rest
(finite differences, graph vs eager, numpy references, errors) still run."""
import copy

import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.nn import functional as NF

try:
    import torch
except ImportError:  # the oracle is optional
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")

THIS_FILE = "test_nn_layers.py"


def _np(t):
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _copy_into_torch(ours, theirs):
    """Give the torch module our parameters and buffers (both float64 afterwards)."""
    ours.double()
    theirs.double()
    theirs.load_state_dict({k: torch.from_numpy(np.array(_np(v)))
                            for k, v in ours.state_dict().items()})


def _inputs(specs, rng):
    """Arrays from (shape, kind) specs: kind "f" float64 normal, "i<n>" ints in [0, n)."""
    out = []
    for shape, kind in specs:
        if kind == "f":
            out.append(rng.standard_normal(shape))
        else:
            out.append(rng.integers(0, int(kind[1:]), size=shape).astype(np.int64))
    return out


def _first(out):
    return out[0] if isinstance(out, tuple) else out


# Each case: name -> (duograph factory, torch factory, input specs, train mode)
CASES = {
    "linear": (lambda: nn.Linear(4, 3), lambda: torch.nn.Linear(4, 3), [((5, 4), "f")], True),
    "linear_nobias_3d": (lambda: nn.Linear(4, 3, bias=False),
                         lambda: torch.nn.Linear(4, 3, bias=False), [((2, 3, 4), "f")], True),
    "bn1d_train": (lambda: nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3),
                   [((6, 3), "f")], True),
    "bn1d_3d_train": (lambda: nn.BatchNorm1d(3, momentum=0.3),
                      lambda: torch.nn.BatchNorm1d(3, momentum=0.3), [((4, 3, 5), "f")], True),
    "bn1d_eval": (lambda: nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3),
                  [((6, 3), "f")], False),
    "bn1d_cumulative": (lambda: nn.BatchNorm1d(3, momentum=None),
                        lambda: torch.nn.BatchNorm1d(3, momentum=None), [((5, 3), "f")], True),
    "bn1d_noaffine_nostats": (
        lambda: nn.BatchNorm1d(3, affine=False, track_running_stats=False),
        lambda: torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False),
        [((6, 3), "f")], False),
    "bn2d_train": (lambda: nn.BatchNorm2d(2), lambda: torch.nn.BatchNorm2d(2),
                   [((3, 2, 3, 3), "f")], True),
    "bn2d_eval": (lambda: nn.BatchNorm2d(2), lambda: torch.nn.BatchNorm2d(2),
                  [((3, 2, 3, 3), "f")], False),
    "layernorm": (lambda: nn.LayerNorm(4), lambda: torch.nn.LayerNorm(4),
                  [((2, 3, 4), "f")], True),
    "layernorm_2d_shape": (lambda: nn.LayerNorm((3, 4), eps=1e-3),
                           lambda: torch.nn.LayerNorm((3, 4), eps=1e-3), [((2, 3, 4), "f")],
                           True),
    "layernorm_plain": (lambda: nn.LayerNorm(4, elementwise_affine=False),
                        lambda: torch.nn.LayerNorm(4, elementwise_affine=False),
                        [((3, 4), "f")], True),
    "layernorm_nobias": (lambda: nn.LayerNorm(4, bias=False),
                         lambda: torch.nn.LayerNorm(4, bias=False), [((3, 4), "f")], True),
    "embedding": (lambda: nn.Embedding(7, 3), lambda: torch.nn.Embedding(7, 3),
                  [((2, 4), "i7")], True),
    "embedding_padding": (lambda: nn.Embedding(7, 3, padding_idx=2),
                          lambda: torch.nn.Embedding(7, 3, padding_idx=2), [((9,), "i7")], True),
    "flatten": (lambda: nn.Flatten(), lambda: torch.nn.Flatten(), [((2, 3, 2, 2), "f")], True),
    "flatten_dims": (lambda: nn.Flatten(0, 1), lambda: torch.nn.Flatten(0, 1),
                     [((2, 3, 2), "f")], True),
    "identity": (lambda: nn.Identity(3, x=1), lambda: torch.nn.Identity(3, x=1),
                 [((2, 3), "f")], True),
    "relu": (lambda: nn.ReLU(), lambda: torch.nn.ReLU(), [((3, 5), "f")], True),
    "leaky_relu": (lambda: nn.LeakyReLU(0.2), lambda: torch.nn.LeakyReLU(0.2),
                   [((3, 5), "f")], True),
    "gelu": (lambda: nn.GELU(), lambda: torch.nn.GELU(), [((3, 5), "f")], True),
    "gelu_tanh": (lambda: nn.GELU("tanh"), lambda: torch.nn.GELU("tanh"), [((3, 5), "f")],
                  True),
    "sigmoid": (lambda: nn.Sigmoid(), lambda: torch.nn.Sigmoid(), [((3, 5), "f")], True),
    "tanh": (lambda: nn.Tanh(), lambda: torch.nn.Tanh(), [((3, 5), "f")], True),
    "softmax": (lambda: nn.Softmax(dim=1), lambda: torch.nn.Softmax(dim=1),
                [((2, 4, 3), "f")], True),
    "log_softmax": (lambda: nn.LogSoftmax(dim=-1), lambda: torch.nn.LogSoftmax(dim=-1),
                    [((3, 4), "f")], True),
    "sequential_mlp": (lambda: nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)),
                       lambda: torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(),
                                                   torch.nn.Linear(5, 2)), [((3, 4), "f")],
                       True),
    "mha_self": (lambda: nn.MultiheadAttention(4, 2),      # both default to (L, N, E)
                 lambda: torch.nn.MultiheadAttention(4, 2),
                 [((2, 3, 4), "f")], True),
    "mha_self_batch_first": (lambda: nn.MultiheadAttention(4, 2, batch_first=True),
                             lambda: torch.nn.MultiheadAttention(4, 2, batch_first=True),
                             [((2, 3, 4), "f")], True),
}
CONV_CASES = {
    "conv2d": (lambda: nn.Conv2d(2, 3, 3), lambda: torch.nn.Conv2d(2, 3, 3),
               [((2, 2, 5, 5), "f")], True),
    "conv2d_strided_padded": (
        lambda: nn.Conv2d(2, 4, (3, 2), stride=2, padding=1, bias=False),
        lambda: torch.nn.Conv2d(2, 4, (3, 2), stride=2, padding=1, bias=False),
        [((1, 2, 5, 6), "f")], True),
    "conv2d_groups_dilation": (
        lambda: nn.Conv2d(4, 4, 3, padding="same", dilation=2, groups=2),
        lambda: torch.nn.Conv2d(4, 4, 3, padding="same", dilation=2, groups=2),
        [((1, 4, 5, 5), "f")], True),
    "conv2d_unbatched": (lambda: nn.Conv2d(2, 3, 3), lambda: torch.nn.Conv2d(2, 3, 3),
                         [((2, 4, 4), "f")], True),
    "maxpool": (lambda: nn.MaxPool2d(2), lambda: torch.nn.MaxPool2d(2),
                [((2, 2, 4, 4), "f")], True),
    "maxpool_padded": (lambda: nn.MaxPool2d(3, stride=2, padding=1),
                       lambda: torch.nn.MaxPool2d(3, stride=2, padding=1),
                       [((1, 2, 5, 5), "f")], True),
    "avgpool": (lambda: nn.AvgPool2d(2), lambda: torch.nn.AvgPool2d(2),
                [((2, 2, 4, 4), "f")], True),
    "avgpool_padded": (lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                       lambda: torch.nn.AvgPool2d(3, stride=2, padding=1,
                                                  count_include_pad=False),
                       [((1, 2, 5, 5), "f")], True),
    "adaptive_avgpool": (lambda: nn.AdaptiveAvgPool2d((2, 3)),
                         lambda: torch.nn.AdaptiveAvgPool2d((2, 3)), [((2, 2, 5, 7), "f")],
                         True),
    "adaptive_avgpool_1": (lambda: nn.AdaptiveAvgPool2d(1),
                           lambda: torch.nn.AdaptiveAvgPool2d(1), [((2, 3, 4, 4), "f")], True),
}
ALL_CASES = {**CASES, **{k: v for k, v in CONV_CASES.items()}}


PARAMS = [pytest.param(name, id=name) for name in ALL_CASES]


def _build(name, seed=0, oracle=True):
    """Our layer in float64 with non-trivial state, and (``oracle``) torch's with the same
    parameters and buffers (None without ``oracle``)."""
    ours_f, theirs_f, specs, train = ALL_CASES[name]
    dg.manual_seed(seed)
    ours = ours_f()
    theirs = theirs_f() if oracle else None
    if name == "bn1d_eval" or name == "bn2d_eval":       # non-trivial running statistics
        rng = np.random.default_rng(seed + 1)
        ours.running_mean.copy_(dg.tensor(rng.standard_normal(ours.num_features)))
        ours.running_var.copy_(dg.tensor(rng.uniform(0.5, 2.0, ours.num_features)))
    if isinstance(ours, (nn.BatchNorm1d, nn.BatchNorm2d)) and ours.affine:
        rng = np.random.default_rng(seed + 2)
        with dg.no_grad():
            ours.weight.copy_(dg.tensor(rng.uniform(0.5, 1.5, ours.num_features)))
            ours.bias.copy_(dg.tensor(rng.standard_normal(ours.num_features)))
    if isinstance(ours, nn.MultiheadAttention):
        rng = np.random.default_rng(seed + 3)
        with dg.no_grad():
            ours.in_proj_bias.copy_(dg.tensor(rng.standard_normal(12) * 0.1))
    if oracle:
        _copy_into_torch(ours, theirs)
        theirs.train(train)
    else:
        ours.double()
    ours.train(train)
    return ours, theirs, specs


def _call(module, *xs):
    if torch is not None and isinstance(module, torch.nn.MultiheadAttention):
        return module(xs[0], xs[0], xs[0])[0]
    return _first(module(*xs))


# -- values and gradients against PyTorch ------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name", PARAMS)
def test_layer_matches_torch(name):
    ours, theirs, specs = _build(name)
    rng = np.random.default_rng(42)
    arrays = _inputs(specs, rng)
    xs = [dg.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    ts = [torch.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    for step in range(2):        # twice: running statistics must keep agreeing
        out, tout = _call(ours, *xs), _call(theirs, *ts)
        assert tuple(out.shape) == tuple(tout.shape)
        assert out.dtype == "float64"
        np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-9, atol=1e-10)
        cot = rng.standard_normal(tuple(out.shape))
        (out * dg.tensor(cot)).sum().backward()
        (tout * torch.tensor(cot)).sum().backward()
        for x, t in zip(xs, ts):
            if t.grad is not None:
                np.testing.assert_allclose(_np(x.grad), _np(t.grad), rtol=1e-8, atol=1e-10)
        ours_p = dict(ours.named_parameters())
        for pname, tp in theirs.named_parameters():
            assert ours_p[pname].grad is not None, pname
            np.testing.assert_allclose(_np(ours_p[pname].grad), _np(tp.grad), rtol=1e-8,
                                       atol=1e-10, err_msg=pname)
        theirs_b = dict(theirs.named_buffers())
        for bname, b in ours.named_buffers():
            np.testing.assert_allclose(_np(b), _np(theirs_b[bname]), rtol=1e-10,
                                       err_msg=bname)
        for x, t in zip(xs, ts):
            x.grad, t.grad = None, None


@needs_torch
def test_batchnorm_running_stats_and_num_batches_tracked():
    bn = nn.BatchNorm2d(3, momentum=0.2).double()
    ref = torch.nn.BatchNorm2d(3, momentum=0.2).double()
    rng = np.random.default_rng(0)
    for k in range(3):
        x = rng.standard_normal((4, 3, 2, 2)) * (k + 1) + k
        bn(dg.tensor(x))
        ref(torch.tensor(x))
        assert int(bn.num_batches_tracked.item()) == k + 1
    np.testing.assert_allclose(_np(bn.running_mean), _np(ref.running_mean), rtol=1e-12)
    np.testing.assert_allclose(_np(bn.running_var), _np(ref.running_var), rtol=1e-12)
    bn.eval()
    x = rng.standard_normal((2, 3, 2, 2))
    before = _np(bn.running_mean).copy()
    out = bn(dg.tensor(x))
    ref.eval()
    np.testing.assert_allclose(_np(out), _np(ref(torch.tensor(x))), rtol=1e-10)
    np.testing.assert_array_equal(_np(bn.running_mean), before)      # eval: no update
    assert int(bn.num_batches_tracked.item()) == 3
    assert not any(p.requires_grad for p in bn.buffers())


def _bn_reference(x, mean, var, momentum, eps=1e-5):
    """BatchNorm in training, in numpy: output and the new running statistics."""
    dims = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, v = x.mean(axis=dims), x.var(axis=dims)
    n = x.size // x.shape[1]
    out = (x - mu.reshape(shape)) / np.sqrt(v.reshape(shape) + eps)
    return (out, (1 - momentum) * mean + momentum * mu,
            (1 - momentum) * var + momentum * v * n / (n - 1))


def _bn_eval_reference(x, mean, var, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)


@pytest.mark.parametrize("mode", ["eager", "graph", "compiled"])
def test_batchnorm_train_and_eval_against_numpy(mode):
    """Training normalises with the batch and updates the running statistics (unbiased
    variance); eval normalises with the running statistics and changes nothing."""
    bn = nn.BatchNorm2d(3, momentum=0.25).double()
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3, 2, 3)) * (k + 1) + k for k in range(3)]

    def runner(module):
        if mode == "eager":
            return lambda a: _np(module(dg.tensor(a)))
        if mode == "compiled":
            fn = dg.compile(module)
            return lambda a: _np(fn(dg.tensor(a)))
        g = dg.Graph(f"bn_{module.training}")
        with g:
            y = module(dg.placeholder("x", ("N", 3, 2, 3), "float64"))
        exe = g.compile(outputs=[y])
        return lambda a: exe(x=a)[0]

    run = runner(bn)           # compiled: one function, guarded on the training flags
    mean, var = np.zeros(3), np.ones(3)
    for k, x in enumerate(batches):
        out, mean, var = _bn_reference(x, mean, var, 0.25)
        np.testing.assert_allclose(run(x), out, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(bn.running_mean), mean, rtol=1e-12)
        np.testing.assert_allclose(_np(bn.running_var), var, rtol=1e-12)
        assert int(bn.num_batches_tracked.item()) == k + 1
    bn.eval()
    if mode == "graph":        # a graph is built for one mode: build the eval one
        run = runner(bn)
    x = rng.standard_normal((2, 3, 2, 3))
    before = _np(bn.running_var).copy()
    np.testing.assert_allclose(run(x), _bn_eval_reference(x, mean, var), rtol=1e-10)
    np.testing.assert_array_equal(_np(bn.running_var), before)
    assert int(bn.num_batches_tracked.item()) == 3
    bn.train()                 # and back: the batch statistics again
    out, _, _ = _bn_reference(x, mean, var, 0.25)
    if mode == "graph":
        run = runner(bn)
    np.testing.assert_allclose(run(x), out, rtol=1e-10, atol=1e-12)
    assert int(bn.num_batches_tracked.item()) == 4


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_dropout_train_and_eval_in_eager_and_compiled_modes(mode):
    """A fresh mask on every training call (compiled calls draw new seeds too); identity in
    eval. (Graph mode: test_dropout_in_graph_mode_fresh_mask_each_run_and_eval_identity.)"""
    dg.manual_seed(0)
    drop = nn.Dropout(0.5)
    run = dg.compile(drop) if mode == "compiled" else drop
    x = dg.ones(40, 50)
    masks = [_np(run(x)) for _ in range(3)]
    for m in masks:
        assert set(np.unique(m)) <= {0.0, 2.0} and abs(np.mean(m == 0) - 0.5) < 0.05
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    drop.eval()
    np.testing.assert_array_equal(_np(run(x)), _np(x))
    drop.train()
    assert np.any(_np(run(x)) == 0)


def test_batchnorm_one_value_per_channel_is_an_error():
    bn = nn.BatchNorm1d(3)
    with pytest.raises(dg.ShapeError, match=r"more than 1 value per channel"):
        bn(dg.randn(1, 3))
    bn.eval()
    assert bn(dg.randn(1, 3)).shape == (1, 3)        # fine in eval mode


def test_dropout_train_and_eval():
    dg.manual_seed(0)
    p = 0.3
    drop = nn.Dropout(p)
    x = dg.ones(200, 100)
    out = _np(drop(x))
    zeros = np.mean(out == 0)
    assert abs(zeros - p) < 0.02
    np.testing.assert_allclose(out[out != 0], 1.0 / (1.0 - p), rtol=1e-6)
    drop.eval()
    assert drop(x) is x or np.array_equal(_np(drop(x)), _np(x))
    assert np.all(_np(nn.Dropout(0.0)(x)) == 1.0)
    assert np.all(_np(nn.Dropout(1.0)(x)) == 0.0)
    with pytest.raises(ValueError, match="Dropout"):
        nn.Dropout(1.5)


def test_dropout_gradient_uses_the_same_mask():
    dg.manual_seed(3)
    x = dg.tensor(np.ones((50, 20)), requires_grad=True)
    out = nn.Dropout(0.5)(x)
    out.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), _np(out))


def test_dropout_is_reproducible_with_manual_seed():
    x = dg.ones(10, 10)
    dg.manual_seed(7)
    a = _np(nn.Dropout(0.5)(x))
    dg.manual_seed(7)
    b = _np(nn.Dropout(0.5)(x))
    np.testing.assert_array_equal(a, b)


def test_dropout_in_graph_mode_fresh_mask_each_run_and_eval_identity():
    drop = nn.Dropout(0.5)
    g = dg.Graph("drop")
    with g:
        x = dg.placeholder("x", (40, 50))
        y = drop(x)
    exe = g.compile(outputs=[y])
    ones = np.ones((40, 50), np.float32)
    first, = exe(x=ones)
    second, = exe(x=ones)
    assert set(np.unique(first)) <= {0.0, 2.0} and abs(np.mean(first == 0) - 0.5) < 0.05
    assert not np.array_equal(first, second)
    drop.eval()
    g2 = dg.Graph("drop_eval")
    with g2:
        x = dg.placeholder("x", (40, 50))
        y = drop(x)
    out, = g2.compile(outputs=[y])(x=ones)
    np.testing.assert_array_equal(out, ones)


def test_embedding_padding_idx_row_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=1)
    np.testing.assert_array_equal(_np(emb.weight)[1], 0.0)
    idx = dg.tensor(np.array([[1, 2, 1], [0, 1, 4]]))
    out = emb(idx)
    assert out.shape == (2, 3, 3)
    (out * 3.0).sum().backward()
    grad = _np(emb.weight.grad)
    np.testing.assert_array_equal(grad[1], 0.0)
    np.testing.assert_array_equal(grad[2], 3.0)
    np.testing.assert_array_equal(grad[3], 0.0)
    assert nn.Embedding(5, 3, padding_idx=-1).padding_idx == 4


def test_embedding_rejects_float_indices_naming_the_layer():
    emb = nn.Embedding(5, 3)
    with pytest.raises(dg.DTypeError) as info:
        emb(dg.randn(2))
    assert "Embedding" in str(info.value) and THIS_FILE in str(info.value)


@pytest.mark.parametrize("bad", [5, -1])
def test_embedding_index_out_of_range(bad):
    emb = nn.Embedding(5, 3)
    with pytest.raises(IndexError, match=rf"(?s)index {bad} is out of range.*Embedding"):
        emb(dg.tensor(np.array([[0, bad]])))
    if torch is not None:        # the same inputs are an error there too
        with pytest.raises(IndexError):
            torch.nn.Embedding(5, 3)(torch.tensor([[0, bad]]))


# -- MultiheadAttention ------------------------------------------------------------------------
def _mha_pair(e=8, h=2, seed=0, bias=True):
    dg.manual_seed(seed)
    ours = nn.MultiheadAttention(e, h, bias=bias, batch_first=True)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=True, bias=bias)
    if bias:
        rng = np.random.default_rng(seed)
        with dg.no_grad():
            ours.in_proj_bias.copy_(dg.tensor(rng.standard_normal(3 * e) * 0.1))
            ours.out_proj.bias.copy_(dg.tensor(rng.standard_normal(e) * 0.1))
    _copy_into_torch(ours, theirs)
    return ours, theirs


def _compare_mha(ours, theirs, q, k, v, rtol=1e-9, **kwargs):
    tk = {key: (torch.tensor(val) if isinstance(val, np.ndarray) else val)
          for key, val in kwargs.items()}
    dk = {key: (dg.tensor(val) if isinstance(val, np.ndarray) else val)
          for key, val in kwargs.items()}
    dq, dkk, dv = (dg.tensor(a, requires_grad=True) for a in (q, k, v))
    tq, tkk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out, w = ours(dq, dkk, dv, **dk)
    tout, tw = theirs(tq, tkk, tv, **tk)
    np.testing.assert_allclose(_np(out), _np(tout), rtol=rtol, atol=1e-10)
    if tw is None:
        assert w is None
    else:
        np.testing.assert_allclose(_np(w), _np(tw), rtol=rtol, atol=1e-10)
    cot = np.random.default_rng(9).standard_normal(tuple(out.shape))
    (out * dg.tensor(cot)).sum().backward()
    (tout * torch.tensor(cot)).sum().backward()
    for a, b in ((dq, tq), (dkk, tkk), (dv, tv)):
        np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-8, atol=1e-10)
    ours_p = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(_np(ours_p[name].grad), _np(p.grad), rtol=1e-8, atol=1e-10,
                                   err_msg=name)
    ours.zero_grad()
    theirs.zero_grad()


@needs_torch
def test_mha_cross_attention_weights_and_gradients():
    ours, theirs = _mha_pair()
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8)), \
        rng.standard_normal((2, 5, 8))
    _compare_mha(ours, theirs, q, k, v)
    _compare_mha(ours, theirs, q, k, v, need_weights=True, average_attn_weights=False)
    _compare_mha(ours, theirs, q, k, v, need_weights=False)


@needs_torch
def test_mha_boolean_mask_true_means_masked_out_as_torch():
    ours, theirs = _mha_pair()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 8))
    mask = np.array([[False, True, False, True], [False, False, True, True],
                     [True, False, False, False], [False, True, True, False]])
    _compare_mha(ours, theirs, x, x, x, attn_mask=mask)
    out, w = ours(dg.tensor(x), dg.tensor(x), dg.tensor(x), attn_mask=dg.tensor(mask))
    np.testing.assert_array_equal(_np(w)[:, mask], 0.0)       # masked keys get no weight


@needs_torch
def test_mha_causal_mask():
    ours, theirs = _mha_pair(seed=1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 8))
    causal = np.triu(np.ones((5, 5), dtype=bool), k=1)      # torch: True = not allowed
    _compare_mha(ours, theirs, x, x, x, attn_mask=causal)
    _compare_mha(ours, theirs, x, x, x, attn_mask=causal, is_causal=True, need_weights=False)
    # duograph also accepts is_causal alone
    out, w = ours(dg.tensor(x), is_causal=True)
    tout, tw = theirs(*(torch.tensor(x),) * 3, attn_mask=torch.tensor(causal))
    np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-9)
    np.testing.assert_allclose(_np(w), _np(tw), rtol=1e-9, atol=1e-12)
    # the future does not influence the past
    x2 = x.copy()
    x2[:, -1] += 10.0
    out2, _ = ours(dg.tensor(x2), is_causal=True)
    np.testing.assert_allclose(_np(out2)[:, :-1], _np(out)[:, :-1], rtol=1e-12)


@needs_torch
def test_mha_float_mask_key_padding_mask_and_3d_mask():
    ours, theirs = _mha_pair(seed=2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 8))
    _compare_mha(ours, theirs, x, x, x, attn_mask=rng.standard_normal((4, 4)))
    kpm = np.array([[False, False, True, True], [False, False, False, True]])
    _compare_mha(ours, theirs, x, x, x, key_padding_mask=kpm)
    mask3 = rng.random((2 * 2, 4, 4)) < 0.3
    mask3[..., 0] = False                                 # every query sees some key
    _compare_mha(ours, theirs, x, x, x, attn_mask=mask3, key_padding_mask=kpm)


@needs_torch
def test_mha_without_bias_and_unbatched_and_seq_first():
    ours, theirs = _mha_pair(bias=False)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8))
    out, w = ours(dg.tensor(x), dg.tensor(x), dg.tensor(x))
    tout, tw = theirs(*(torch.tensor(x),) * 3)
    np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_np(w), _np(tw), rtol=1e-9)
    seq_first = nn.MultiheadAttention(8, 2, bias=False, batch_first=False).double()
    seq_first.load_state_dict(ours.state_dict())
    xb = rng.standard_normal((2, 3, 8))
    a = _np(ours(dg.tensor(xb))[0])
    b = _np(seq_first(dg.tensor(xb.transpose(1, 0, 2)))[0])
    np.testing.assert_allclose(a, b.transpose(1, 0, 2), rtol=1e-12)


@needs_torch
def test_scaled_dot_product_attention_matches_torch_functional():
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2, 2, 3, 4)) for _ in range(3))
    keep = np.array([[True, False, True], [True, True, False], [False, False, False]])
    tf = torch.nn.functional.scaled_dot_product_attention
    cases = [dict(), dict(is_causal=True), dict(attn_mask=keep),
             dict(attn_mask=rng.standard_normal((3, 3))), dict(scale=0.3)]
    for kw in cases:
        dq, dk_, dv = (dg.tensor(a, requires_grad=True) for a in (q, k, v))
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        dkw = {a: dg.tensor(b) if isinstance(b, np.ndarray) else b for a, b in kw.items()}
        tkw = {a: torch.tensor(b) if isinstance(b, np.ndarray) else b for a, b in kw.items()}
        out = nn.functional.scaled_dot_product_attention(dq, dk_, dv, **dkw)
        tout = tf(tq, tk, tv, **tkw)
        np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-9, atol=1e-12, err_msg=str(kw))
        out.sum().backward()
        tout.sum().backward()
        for a, b in ((dq, tq), (dk_, tk), (dv, tv)):
            np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-8, atol=1e-12,
                                       err_msg=str(kw))


def test_transformer_block_runs_backprops_and_is_causal():
    dg.manual_seed(0)
    block = nn.TransformerBlock(8, 2, mlp_ratio=2.0).double()
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 5, 8)), requires_grad=True)
    out = block(x, is_causal=True)
    assert out.shape == (2, 5, 8) and out.dtype == "float64"
    (out ** 2).mean().backward()
    assert x.grad is not None and np.all(np.isfinite(_np(x.grad)))
    for name, p in block.named_parameters():
        assert p.grad is not None and np.all(np.isfinite(_np(p.grad))), name
        assert np.any(_np(p.grad) != 0), name
    # causality: the last position does not change the first ones
    x2 = _np(x).copy()
    x2[:, -1] = 5.0
    out2 = block(dg.tensor(x2), is_causal=True)
    np.testing.assert_allclose(_np(out2)[:, :-1], _np(out)[:, :-1], rtol=1e-10)
    mask = np.triu(np.ones((5, 5), dtype=bool), 1)
    np.testing.assert_allclose(_np(block(x, attn_mask=dg.tensor(mask))), _np(out), rtol=1e-12)


@needs_torch
def test_transformer_block_matches_torch_pre_norm_layer():
    dg.manual_seed(1)
    ours = nn.TransformerBlock(8, 2, mlp_ratio=2.0)
    theirs = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                              activation="gelu", batch_first=True,
                                              norm_first=True)
    ours.double()
    theirs.double()
    names = {"ln1": "norm1", "ln2": "norm2", "attn": "self_attn", "mlp.0": "linear1",
             "mlp.2": "linear2"}
    sd = {}
    for k, v in ours.state_dict().items():
        for a, b in names.items():
            if k.startswith(a + "."):
                sd[b + k[len(a):]] = torch.from_numpy(np.array(_np(v)))
    theirs.load_state_dict(sd)
    theirs.eval()                       # the fast path is off for float64 on CPU anyway
    x = np.random.default_rng(1).standard_normal((2, 4, 8))
    np.testing.assert_allclose(_np(ours(dg.tensor(x))), _np(theirs(torch.tensor(x))),
                               rtol=1e-9, atol=1e-10)


# -- finite differences ------------------------------------------------------------------------
# the padding row has no gradient by design (finite differences do see it)
GRADCHECK = [n for n in CASES if n not in ("bn2d_eval", "embedding_padding")]


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GRADCHECK]
                         + [pytest.param(n, id=n) for n in CONV_CASES if "unbatched" not in n])
def test_layer_gradcheck(name):
    ours, _, specs = _build(name, oracle=False)
    arrays = _inputs(specs, np.random.default_rng(5))
    if name.startswith("maxpool"):        # distinct values: no ties at window maxima
        arrays[0] = np.random.default_rng(5).permutation(arrays[0].size).reshape(
            arrays[0].shape) / 7.0
    xs = [dg.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    params = [p for p in ours.parameters()]

    def fn(*args):
        # "* 1.0": gradcheck keeps a view of the output of a layer that returns its input (or
        # a view of it) while it perturbs that input (eager/autograd.py gradcheck)
        return _call(ours, *args[:len(xs)]) * 1.0

    dg.autograd.gradcheck(fn, xs + params, eps=1e-6, atol=1e-6, rtol=1e-4)


def test_dropout_gradcheck_with_a_fixed_seed():
    drop = nn.Dropout(0.4)
    x = dg.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)

    def fn(t):
        dg.manual_seed(11)
        return drop(t)

    dg.autograd.gradcheck(fn, [x])


def test_transformer_block_gradcheck_small():
    dg.manual_seed(2)
    block = nn.TransformerBlock(4, 2, mlp_ratio=1.0).double()
    x = dg.tensor(np.random.default_rng(2).standard_normal((1, 2, 4)), requires_grad=True)
    wanted = [block.attn.in_proj_weight, block.ln1.weight, block.mlp[0].bias]
    dg.autograd.gradcheck(lambda t, *ps: block(t, is_causal=True).sum(), [x] + wanted)


# -- graph mode vs eager -------------------------------------------------------------------------
@pytest.mark.parametrize("name", PARAMS)
def test_graph_mode_matches_eager(name):
    ours, _, specs = _build(name, oracle=False)
    arrays = _inputs(specs, np.random.default_rng(7))
    eager_mod = copy.deepcopy(ours)
    xs = [dg.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    out = _call(eager_mod, *xs)
    cot = np.random.default_rng(8).standard_normal(tuple(out.shape))
    (out * dg.tensor(cot)).sum().backward()

    g = dg.Graph(name)
    with g:
        phs = [dg.placeholder(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
        y = _call(ours, *phs)
        loss = dg.sum(y * dg.constant(cot))
        names = [n for n, p in ours.named_parameters()]
        pvals = [g.bound_value(p) for p in ours.parameters()]
        assert all(v is not None for v in pvals)
        grads = dg.grad(loss, pvals) if pvals else []
    assert tuple(y.shape) == tuple(out.shape)
    exe = g.compile(outputs=[y] + list(grads))
    got = exe(**{f"x{i}": a for i, a in enumerate(arrays)})
    np.testing.assert_allclose(got[0], _np(out), rtol=1e-10, atol=1e-12)
    eager_p = dict(eager_mod.named_parameters())
    for pname, gv in zip(names, got[1:]):
        np.testing.assert_allclose(gv, _np(eager_p[pname].grad), rtol=1e-9, atol=1e-12,
                                   err_msg=pname)
    # buffers (BatchNorm running statistics) are updated the same way in graph mode
    eager_b = dict(eager_mod.named_buffers())
    for bname, b in ours.named_buffers():
        np.testing.assert_allclose(_np(b), _np(eager_b[bname]), rtol=1e-12, err_msg=bname)


@needs_torch
def test_batchnorm_running_stats_update_in_graph_mode_like_torch():
    bn = nn.BatchNorm1d(3)
    ref = torch.nn.BatchNorm1d(3)
    _copy_into_torch(bn, ref)
    g = dg.Graph("bn")
    with g:
        x = dg.placeholder("x", ("N", 3), "float64")
        y = bn(x)
    assert {v.name for v in g.state} >= {"running_mean", "running_var", "num_batches_tracked"}
    exe = g.compile(outputs=[y])
    rng = np.random.default_rng(0)
    for n in (4, 6, 5):                  # a symbolic batch dim: several batch sizes
        xb = rng.standard_normal((n, 3)) * 2 + 1
        out, = exe(x=xb)
        tout = ref(torch.tensor(xb))
        np.testing.assert_allclose(out, _np(tout), rtol=1e-10)
        np.testing.assert_allclose(_np(bn.running_mean), _np(ref.running_mean), rtol=1e-12)
        np.testing.assert_allclose(_np(bn.running_var), _np(ref.running_var), rtol=1e-12)
    assert int(bn.num_batches_tracked.item()) == 3
    # an eval-mode graph reads the running statistics and does not change them
    bn.eval()
    ref.eval()
    g2 = dg.Graph("bn_eval")
    with g2:
        x = dg.placeholder("x", ("N", 3), "float64")
        y = bn(x)
    before = _np(bn.running_var).copy()
    out, = g2.compile(outputs=[y])(x=xb)
    np.testing.assert_allclose(out, _np(ref(torch.tensor(xb))), rtol=1e-10)
    np.testing.assert_array_equal(_np(bn.running_var), before)


def test_graph_mode_state_names_follow_the_module_tree():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    g = dg.Graph("names")
    with g:
        x = dg.placeholder("x", ("N", 3))
        model(x)
    names = [v.name for v in g.state]
    assert names[:7] == ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias",
                         "1.running_mean"]


def test_graph_mode_shared_parameter_is_one_state_input():
    lin = nn.Linear(3, 3)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    g = dg.Graph("shared")
    with g:
        model(dg.placeholder("x", (2, 3)))
    assert [v.name for v in g.state] == ["0.weight", "0.bias"]


# -- errors name the layer and the user's line ---------------------------------------------------
def _assert_names(info, layer):
    text = str(info.value)
    assert layer in text, text
    assert THIS_FILE in text, text


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_shape_errors_name_the_layer_and_line(mode):
    count = iter(range(100))

    def make(shape, dtype="float32"):
        if mode == "eager":
            return dg.zeros(*shape, dtype=dtype)
        return dg.placeholder(f"x{next(count)}", shape, dtype)

    g = dg.Graph("errors")
    with g:
        cases = [
            (nn.Linear(4, 3), (2, 5), "Linear"),
            (nn.Linear(4, 3), (), "Linear"),
            (nn.BatchNorm1d(3), (2, 4), "BatchNorm1d"),
            (nn.BatchNorm1d(3), (2, 3, 4, 5), "BatchNorm1d"),
            (nn.BatchNorm2d(3), (2, 3, 4), "BatchNorm2d"),
            (nn.LayerNorm(4), (2, 5), "LayerNorm"),
            (nn.MultiheadAttention(4, 2), (2, 3, 5), "MultiheadAttention"),
            (nn.MultiheadAttention(4, 2), (2, 3, 4, 1), "MultiheadAttention"),
            (nn.Sequential(nn.Linear(2, 3), nn.Linear(4, 1)), (5, 2), "Linear"),
            (nn.Conv2d(3, 4, 3), (1, 2, 5, 5), "Conv2d"),
            (nn.Conv2d(3, 4, 3), (5, 5), "Conv2d"),
            (nn.MaxPool2d(2), (4, 4), "MaxPool2d"),
            (nn.AvgPool2d(2), (4,), "AvgPool2d"),
            (nn.AdaptiveAvgPool2d(2), (4,), "AdaptiveAvgPool2d"),
        ]
        for layer, shape, name in cases:
            with pytest.raises(dg.ShapeError) as info:
                layer(make(shape))
            _assert_names(info, name)


def test_linear_error_message_is_explicit():
    with pytest.raises(dg.ShapeError) as info:
        nn.Linear(4, 3)(dg.zeros(2, 5))
    text = str(info.value)
    assert "4 features" in text and "[2, 5]" in text and "Linear(in_features=4" in text


def test_op_errors_inside_custom_modules_name_the_module():
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(np.ones((3, 3), np.float32))

        def forward(self, x):
            return x @ self.w

    with pytest.raises(dg.ShapeError) as info:
        Custom()(dg.zeros(2, 4))
    _assert_names(info, "Custom")
    with pytest.raises(dg.ShapeError) as info:
        nn.Sequential(nn.Identity(), Custom())(dg.zeros(2, 4))
    assert str(info.value).count("layer:") == 1
    _assert_names(info, "Custom")


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError, match="MultiheadAttention"):
        nn.MultiheadAttention(5, 2)
    with pytest.raises(ValueError, match="Conv2d"):
        nn.Conv2d(3, 4, 3, groups=2)


# -- initialisation ----------------------------------------------------------------------------
def test_default_initialisation_ranges_match_torch():
    dg.manual_seed(0)
    lin = nn.Linear(100, 50)
    bound = 1 / np.sqrt(100)
    w = _np(lin.weight)
    assert w.dtype == np.float32 and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(_np(lin.bias)).max() <= bound
    emb = nn.Embedding(1000, 10)
    assert abs(_np(emb.weight).std() - 1.0) < 0.05
    ln = nn.LayerNorm(5)
    assert np.all(_np(ln.weight) == 1) and np.all(_np(ln.bias) == 0)
    dg.manual_seed(0)
    a = _np(nn.Linear(3, 3).weight)
    dg.manual_seed(0)
    np.testing.assert_array_equal(a, _np(nn.Linear(3, 3).weight))


def test_default_initialisation_of_conv_attention_and_norms_as_torch_documents():
    dg.manual_seed(1)
    conv = nn.Conv2d(6, 8, (3, 5), groups=2)
    bound = 1 / np.sqrt(3 * 3 * 5)                  # fan_in = in_channels / groups * kh * kw
    for t in (conv.weight, conv.bias):
        a = _np(t)
        assert a.dtype == np.float32 and np.abs(a).max() <= bound
        assert np.abs(a).max() > 0.8 * bound
    mha = nn.MultiheadAttention(8, 2)
    w = _np(mha.in_proj_weight)                     # xavier_uniform over (3 * 8, 8)
    assert np.abs(w).max() <= np.sqrt(6 / (24 + 8)) and np.abs(w).max() > 0.8 * np.sqrt(6 / 32)
    assert not np.any(_np(mha.in_proj_bias)) and not np.any(_np(mha.out_proj.bias))
    assert np.abs(_np(mha.out_proj.weight)).max() <= 1 / np.sqrt(8)
    for bn in (nn.BatchNorm1d(4), nn.BatchNorm2d(4)):
        assert np.all(_np(bn.weight) == 1) and np.all(_np(bn.bias) == 0)
        assert np.all(_np(bn.running_mean) == 0) and np.all(_np(bn.running_var) == 1)
        assert bn.num_batches_tracked.dtype == "int64" and bn.num_batches_tracked.item() == 0
    emb = nn.Embedding(6, 3, padding_idx=2)
    assert np.all(_np(emb.weight)[2] == 0) and np.all(_np(emb.weight)[[0, 1, 3]] != 0)


def test_init_functions():
    t = nn.Parameter(np.zeros((20, 30), np.float32))
    nn.init.xavier_uniform_(t)
    assert np.abs(_np(t)).max() <= np.sqrt(6 / 50)
    nn.init.constant_(t, 0.5)
    assert np.all(_np(t) == 0.5)
    nn.init.kaiming_normal_(t, nonlinearity="relu")
    assert abs(_np(t).std() - np.sqrt(2 / 30)) < 0.05
    # the gains torch.nn.init.calculate_gain documents
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert nn.init.calculate_gain("relu") == pytest.approx(np.sqrt(2))
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(np.sqrt(2 / 1.04))


# -- training-mode batch norm as one op forward and one backward -------------------------------
def test_training_batch_norm_is_one_node_each_way():
    bn = nn.BatchNorm2d(4)
    g = dg.Graph("bn")
    with g:
        x = dg.placeholder("x", ("N", 4, 3, 3))
        loss = dg.sum(bn(x) ** 2)
        dg.grad(loss, [x])
    names = [n.op.name for n in g.nodes]
    assert names.count("batch_norm_train") == 1
    assert names.count("batch_norm_train_backward") == 1
    assert "rsqrt" not in names                 # (the composite form's)


@needs_torch
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_batch_norm_gradient_of_gradient_matches_torch(mode):
    """A gradient penalty through a training-mode BatchNorm: the fused backward op's own
    gradient (traced from its formula and replayed on the operands)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 3, 2, 2))
    w, b = rng.standard_normal(3) + 1.0, rng.standard_normal(3)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.batch_norm(tx, None, None, torch.tensor(w), torch.tensor(b),
                                        training=True)
    (tg,) = torch.autograd.grad((ty ** 3).sum(), [tx], create_graph=True)
    (th,) = torch.autograd.grad((tg * tg).sum(), [tx])
    if mode == "eager":
        xd = dg.tensor(x, requires_grad=True)
        y = NF.batch_norm(xd, None, None, dg.tensor(w), dg.tensor(b), training=True)
        (gx,) = dg.autograd.grad((y * y * y).sum(), [xd], create_graph=True)
        (gx * gx).sum().backward()
        got_g, got_h = gx.detach().numpy(), xd.grad.numpy()
    else:
        g = dg.Graph("penalty")
        with g:
            xv = dg.placeholder("x", x.shape, "float64")
            y = NF.batch_norm(xv, None, None, dg.constant(w), dg.constant(b), training=True)
            (gx,) = dg.grad(dg.sum(y * y * y), [xv])
            (hx,) = dg.grad(dg.sum(gx * gx), [xv])
        got_g, got_h = g.compile(outputs=[gx, hx])(x=x)
    np.testing.assert_allclose(got_g, tg.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got_h, th.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("use_numba", [True, False])
@pytest.mark.parametrize("dtype, tol", [("float32", 2e-5), ("float64", 1e-11)])
def test_batch_norm_kernels_numba_and_numpy_agree(monkeypatch, use_numba, dtype, tol):
    """batch_norm_train's CPU kernels (numba loops where numba is installed and on, numpy
    with BLAS sums otherwise) and the reference kernels, against the formulas in float64:
    forward (y, mean, var) and backward (dx, dw, db)."""
    from duograph.graphlib.ops import nn as ops_nn
    from duograph.runtime.cpu import cpu_backend
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((7, 3, 4, 5)) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    forward, backward = ops_nn.batch_norm_train_op, ops_nn.batch_norm_train_backward_op
    with dg.config.override(numba=use_numba):
        y, mean, var = cpu_backend.kernels[forward](np, x, w, b, eps=1e-5)
        dx, dw, db = cpu_backend.kernels[backward](np, dy, x, w, mean, var, eps=1e-5)
    ref = forward.kernel(np, x, w, b, eps=1e-5) + backward.kernel(np, dy, x, w, mean, var,
                                                                  eps=1e-5)
    for got, want in zip((y, mean, var, dx, dw, db), ref):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    m, v = x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3))
    sh = (1, 3, 1, 1)
    xhat = (x64 - m.reshape(sh)) / np.sqrt(v.reshape(sh) + 1e-5)
    want_dx = w.reshape(sh) / np.sqrt(v.reshape(sh) + 1e-5) * (
        dy64 - dy64.mean(axis=(0, 2, 3)).reshape(sh)
        - xhat * (dy64 * xhat).mean(axis=(0, 2, 3)).reshape(sh))
    for got, want in ((y, xhat * w.reshape(sh) + b.reshape(sh)), (mean, m), (var, v),
                      (dx, want_dx), (dw, (dy64 * xhat).sum(axis=(0, 2, 3))),
                      (db, dy64.sum(axis=(0, 2, 3)))):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


def test_float16_batch_norm_accumulates_in_float32():
    """A float16 batch whose channel sums overflow float16 (values ~100, 4096 per channel):
    the statistics are computed in float32, as PyTorch does, and cast back."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((64, 4, 8, 8)) * 3 + 100).astype(np.float16)
    c = rng.standard_normal(x.shape).astype(np.float16)
    xt = dg.tensor(x, requires_grad=True)
    y = NF.batch_norm(xt, None, None, dg.tensor(np.ones(4, np.float16)),
                      dg.tensor(np.zeros(4, np.float16)), training=True)
    (y * dg.tensor(c)).sum().backward()
    assert y.dtype == "float16" and xt.grad.dtype == "float16"
    x32 = x.astype(np.float64)
    m, v = x32.mean(axis=(0, 2, 3), keepdims=True), x32.var(axis=(0, 2, 3), keepdims=True)
    xhat = (x32 - m) / np.sqrt(v + 1e-5)
    c64 = c.astype(np.float64)
    want_dx = (c64 - c64.mean(axis=(0, 2, 3), keepdims=True)
               - xhat * (c64 * xhat).mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(v + 1e-5)
    np.testing.assert_allclose(y.detach().numpy().astype(np.float64), xhat, atol=4e-3)
    np.testing.assert_allclose(xt.grad.numpy().astype(np.float64), want_dx, atol=4e-3)
