"""Losses against PyTorch (values and input gradients, float64) and against numpy formulas,
numerical stability for extreme inputs, graph mode, clear errors; nn.utils.clip_grad_norm_.

PyTorch is only an oracle: without it the comparisons with it skip, the rest still runs."""
import zlib

import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.nn import functional as NF

try:
    import torch
    TF = torch.nn.functional
except ImportError:  # the oracle is optional
    torch = TF = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
REDUCTIONS = ["mean", "sum", "none"]


def _np(t):
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _both(a, grad=False):
    """The same array as a duograph tensor and a torch tensor."""
    return dg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _check(ours_fn, theirs_fn, inputs, rtol=1e-10, atol=1e-12, grad_of=(0,)):
    """Compare values, and gradients w.r.t. the inputs listed in ``grad_of``."""
    pairs = [_both(a, grad=(i in grad_of)) if isinstance(a, np.ndarray) else (a, a)
             for i, a in enumerate(inputs)]
    out = ours_fn(*[p[0] for p in pairs])
    tout = theirs_fn(*[p[1] for p in pairs])
    assert tuple(out.shape) == tuple(tout.shape)
    np.testing.assert_allclose(_np(out), _np(tout), rtol=rtol, atol=atol)
    assert np.all(np.isfinite(_np(out)))
    cot = np.random.default_rng(0).standard_normal(tuple(out.shape))
    (out * dg.tensor(cot)).sum().backward()
    (tout * torch.tensor(cot)).sum().backward()
    for i in grad_of:
        g, tg = pairs[i][0].grad, pairs[i][1].grad
        np.testing.assert_allclose(_np(g), _np(tg), rtol=rtol * 100, atol=atol * 100,
                                   err_msg=f"gradient of input {i}")
        assert np.all(np.isfinite(_np(g)))
    return out


RNG = np.random.default_rng(1234)


# -- regression losses ---------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_and_l1(reduction):
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    _check(nn.MSELoss(reduction=reduction), torch.nn.MSELoss(reduction=reduction), [a, b],
           grad_of=(0, 1))
    _check(nn.L1Loss(reduction=reduction), torch.nn.L1Loss(reduction=reduction), [a, b],
           grad_of=(0, 1))
    _check(lambda x, y: NF.mse_loss(x, y, reduction=reduction),
           lambda x, y: TF.mse_loss(x, y, reduction=reduction), [a, b])


# -- cross entropy and NLL ---------------------------------------------------------------------
def _targets(n_classes, shape, ignore=None, rng=RNG):
    t = rng.integers(0, n_classes, size=shape).astype(np.int64)
    if ignore is not None:
        flat = t.reshape(-1)
        flat[::3] = ignore
        if np.all(flat == ignore):        # keep one target: an all-ignored mean is 0/0
            flat[1] = (ignore + 1) % n_classes if 0 <= ignore < n_classes else 0
    return t


CE_SHAPES = [((5, 4), (5,)), ((2, 4, 3), (2, 3)), ((2, 3, 2, 2), (2, 2, 2))]


@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", CE_SHAPES, ids=["NC", "NCd", "NCdd"])
@pytest.mark.parametrize("weighted", [False, True], ids=["", "weight"])
@pytest.mark.parametrize("ignore", [None, -100, 1], ids=["", "ign-100", "ign1"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2], ids=["", "ls"])
def test_cross_entropy_matches_torch(reduction, shapes, weighted, ignore, smoothing):
    xshape, tshape = shapes
    c = xshape[1]
    # a stable seed (hash() of strings changes per process with PYTHONHASHSEED)
    rng = np.random.default_rng(zlib.crc32(repr((reduction, xshape, weighted, ignore,
                                                 smoothing)).encode()))
    x = rng.standard_normal(xshape) * 3
    t = _targets(c, tshape, ignore, rng)
    w = rng.uniform(0.2, 2.0, c) if weighted else None
    kwargs = dict(reduction=reduction, label_smoothing=smoothing)
    if ignore is not None:
        kwargs["ignore_index"] = ignore
    ours = nn.CrossEntropyLoss(weight=None if w is None else dg.tensor(w), **kwargs)
    theirs = torch.nn.CrossEntropyLoss(weight=None if w is None else torch.tensor(w), **kwargs)
    _check(ours, theirs, [x, t])


@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", CE_SHAPES[:2], ids=["NC", "NCd"])
def test_nll_loss_matches_torch(reduction, shapes):
    xshape, tshape = shapes
    c = xshape[1]
    logp = np.log(RNG.dirichlet(np.ones(c), size=int(np.prod(xshape)) // c))
    logp = np.moveaxis(logp.reshape((xshape[0],) + xshape[2:] + (c,)), -1, 1)
    t = _targets(c, tshape, ignore=-100)
    w = RNG.uniform(0.2, 2.0, c)
    _check(nn.NLLLoss(reduction=reduction), torch.nn.NLLLoss(reduction=reduction), [logp, t])
    t2 = np.where(t == -100, 2, t)
    _check(nn.NLLLoss(weight=dg.tensor(w), reduction=reduction, ignore_index=2),
           torch.nn.NLLLoss(weight=torch.tensor(w), reduction=reduction, ignore_index=2),
           [logp, t2])


@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probability_targets(reduction, smoothing):
    x = RNG.standard_normal((4, 3, 2))
    p = RNG.dirichlet(np.ones(3), size=(4, 2)).transpose(0, 2, 1).copy()
    w = RNG.uniform(0.5, 2.0, 3)
    _check(lambda a, b: NF.cross_entropy(a, b, reduction=reduction,
                                         label_smoothing=smoothing),
           lambda a, b: TF.cross_entropy(a, b, reduction=reduction,
                                         label_smoothing=smoothing), [x, p], grad_of=(0, 1))
    _check(lambda a, b: NF.cross_entropy(a, b, weight=dg.tensor(w), reduction=reduction),
           lambda a, b: TF.cross_entropy(a, b, weight=torch.tensor(w), reduction=reduction),
           [x, p])


@needs_torch
def test_cross_entropy_is_stable_for_extreme_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 999.0], [0.0, 0.0, -1000.0]])
    t = np.array([1, 2, 0])
    for red in REDUCTIONS:
        _check(nn.CrossEntropyLoss(reduction=red), torch.nn.CrossEntropyLoss(reduction=red),
               [x, t])
        _check(nn.CrossEntropyLoss(reduction=red, label_smoothing=0.1),
               torch.nn.CrossEntropyLoss(reduction=red, label_smoothing=0.1), [x, t])
    out = nn.CrossEntropyLoss()(dg.tensor(x.astype(np.float32)), dg.tensor(t))
    assert np.isfinite(out.item())


@needs_torch
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_cross_entropy_all_ignored_gives_nan_like_torch():
    x = RNG.standard_normal((2, 3))
    t = np.array([-100, -100])
    out = nn.CrossEntropyLoss()(dg.tensor(x), dg.tensor(t))
    tout = torch.nn.CrossEntropyLoss()(torch.tensor(x), torch.tensor(t))
    assert np.isnan(out.item()) and np.isnan(tout.item())
    out = nn.CrossEntropyLoss(reduction="sum")(dg.tensor(x), dg.tensor(t))
    assert out.item() == 0.0


def test_cross_entropy_all_ignored_has_zero_gradient_like_torch():
    x = dg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    with np.errstate(invalid="ignore"):
        loss = nn.CrossEntropyLoss()(x, dg.tensor(np.array([-100, -100])))
        loss.backward()
    assert np.isnan(loss.item())
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))


def test_cross_entropy_refuses_class_indices_out_of_range():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    for bad in (4, -1):
        t = np.array([0, bad, 1])
        with pytest.raises(dg.KernelError, match=rf"target {bad} is out of bounds.*\[0, 4\)"):
            NF.cross_entropy(dg.tensor(x), dg.tensor(t))
        g = dg.Graph("ce")
        with g:
            xv, tv = dg.placeholder("x", (3, 4)), dg.placeholder("t", (3,), "int64")
            loss = NF.cross_entropy(xv, tv)
        for passes in ("O0", "O2"):
            with pytest.raises(dg.KernelError, match=rf"target {bad} is out of bounds"):
                g.compile(outputs=[loss], passes=passes)(x=x, t=t)


def test_cross_entropy_of_class_indices_is_one_node_forward_and_one_backward():
    """(N, C) logits without class weights or label smoothing: softmax_cross_entropy, whose
    gradient is one softmax_cross_entropy_backward node (not log_softmax + gather + ...)."""
    g = dg.Graph("ce")
    with g:
        x = dg.placeholder("x", ("N", 10))
        t = dg.placeholder("t", ("N",), "int64")
        loss = NF.cross_entropy(x, t)
        (gx,) = dg.grad(loss, [x])
    names = [n.op.name for n in g.nodes]
    assert names.count("softmax_cross_entropy") == 1
    assert names.count("softmax_cross_entropy_backward") == 1
    assert not {"log_softmax", "gather", "scatter_add"} & set(names)
    xs = RNG.standard_normal((6, 10)).astype(np.float32)
    ts = RNG.integers(0, 10, 6)
    got_loss, got_gx = g.compile(outputs=[loss, gx], passes="O2")(x=xs, t=ts)
    p = np.exp(xs - xs.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = -np.log(p[np.arange(6), ts]).mean()
    np.testing.assert_allclose(got_loss, want, rtol=1e-6)
    p[np.arange(6), ts] -= 1
    np.testing.assert_allclose(got_gx, p / 6, rtol=1e-5, atol=1e-7)


@needs_torch
def test_cross_entropy_float32_and_int32_targets():
    x = RNG.standard_normal((6, 5)).astype(np.float32)
    t = RNG.integers(0, 5, 6).astype(np.int32)
    out = nn.CrossEntropyLoss()(dg.tensor(x), dg.tensor(t))
    assert out.dtype == "float32"
    ref = TF.cross_entropy(torch.tensor(x), torch.tensor(t).long())
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-6)


# -- binary cross entropy ---------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_matches_torch(reduction):
    p = RNG.uniform(0.05, 0.95, (4, 3))
    y = RNG.uniform(0, 1, (4, 3))
    w = RNG.uniform(0.5, 2.0, (4, 3))
    _check(nn.BCELoss(reduction=reduction), torch.nn.BCELoss(reduction=reduction), [p, y])
    _check(nn.BCELoss(weight=dg.tensor(w[0]), reduction=reduction),
           torch.nn.BCELoss(weight=torch.tensor(w[0]), reduction=reduction), [p, y])


@needs_torch
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_bce_clamps_log_at_minus_100_like_torch():
    p = np.array([0.0, 1.0, 1e-50, 0.5])
    y = np.array([1.0, 0.0, 1.0, 1.0])
    out = nn.BCELoss(reduction="none")(dg.tensor(p), dg.tensor(y))
    tout = torch.nn.BCELoss(reduction="none")(torch.tensor(p), torch.tensor(y))
    np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-12)


@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits_matches_torch(reduction):
    x = RNG.standard_normal((4, 3)) * 3
    y = (RNG.uniform(0, 1, (4, 3)) > 0.5).astype(np.float64)
    pw = RNG.uniform(0.5, 3.0, 3)
    w = RNG.uniform(0.5, 2.0, 3)
    _check(nn.BCEWithLogitsLoss(reduction=reduction),
           torch.nn.BCEWithLogitsLoss(reduction=reduction), [x, y], grad_of=(0, 1))
    _check(nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=dg.tensor(pw),
                                weight=dg.tensor(w)),
           torch.nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=torch.tensor(pw),
                                      weight=torch.tensor(w)), [x, y], grad_of=(0, 1))


@needs_torch
def test_bce_with_logits_large_logits_stay_finite():
    x = np.array([1000.0, -1000.0, 800.0, -800.0, 0.0, 50.0])
    y = np.array([0.0, 1.0, 1.0, 0.0, 0.5, 0.0])
    pw = np.array([2.0])
    for red in REDUCTIONS:
        _check(nn.BCEWithLogitsLoss(reduction=red),
               torch.nn.BCEWithLogitsLoss(reduction=red), [x, y])
        _check(nn.BCEWithLogitsLoss(reduction=red, pos_weight=dg.tensor(pw)),
               torch.nn.BCEWithLogitsLoss(reduction=red, pos_weight=torch.tensor(pw)), [x, y])
    out = nn.BCEWithLogitsLoss()(dg.tensor(x.astype(np.float32)),
                                 dg.tensor(y.astype(np.float32)))
    assert np.isfinite(out.item())


# -- KL divergence ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    logq = np.log(RNG.dirichlet(np.ones(4), size=3))
    p = RNG.dirichlet(np.ones(4), size=3)
    p[0, 1] = 0.0                                  # a zero target contributes nothing
    target = np.log(p + 1e-300) if log_target else p
    _check(nn.KLDivLoss(reduction=reduction, log_target=log_target),
           torch.nn.KLDivLoss(reduction=reduction, log_target=log_target), [logq, target],
           grad_of=(0,))


@needs_torch
def test_kl_div_target_gradient():
    logq = np.log(RNG.dirichlet(np.ones(4), size=3))
    p = RNG.dirichlet(np.ones(4), size=3)
    _check(nn.KLDivLoss(reduction="batchmean"), torch.nn.KLDivLoss(reduction="batchmean"),
           [logq, p], grad_of=(0, 1))
    _check(nn.KLDivLoss(reduction="sum", log_target=True),
           torch.nn.KLDivLoss(reduction="sum", log_target=True), [logq, np.log(p)],
           grad_of=(0, 1))


# -- numpy formulas (no oracle needed) ---------------------------------------------------------
def _log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def _reduce_np(loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.size if denominator is None else denominator)


def _cross_entropy_np(x, t, w, ignore, smoothing, reduction):
    """PyTorch's documented formula for class indices (N, C), in float64."""
    n, c = x.shape
    logp = _log_softmax(x)
    w = np.ones(c) if w is None else w
    valid = t != ignore
    safe = np.where(valid, t, 0)
    wt = w[safe] * valid
    nll = -logp[np.arange(n), safe] * wt
    smooth = -(logp * w).sum(axis=1) * valid
    denominator = wt.sum()
    return (_reduce_np(nll, reduction, denominator) * (1 - smoothing)
            + _reduce_np(smooth, reduction, denominator) * smoothing / c)


LOSS_CASES = {
    "mse": (lambda r: nn.MSELoss(reduction=r), lambda x, y, r: _reduce_np((x - y) ** 2, r)),
    "l1": (lambda r: nn.L1Loss(reduction=r), lambda x, y, r: _reduce_np(np.abs(x - y), r)),
    "bce_logits_pos_weight": (
        lambda r: nn.BCEWithLogitsLoss(reduction=r, weight=np.array([1.0, 2.0, 0.5]),
                                       pos_weight=np.array([3.0, 1.0, 0.25])),
        lambda x, y, r: _reduce_np(
            (np.array([3.0, 1.0, 0.25]) * y * np.logaddexp(0, -x)
             + (1 - y) * np.logaddexp(0, x)) * np.array([1.0, 2.0, 0.5]), r)),
    "bce": (lambda r: nn.BCELoss(reduction=r),
            lambda p, y, r: _reduce_np(-(y * np.maximum(np.log(p), -100)
                                         + (1 - y) * np.maximum(np.log1p(-p), -100)), r)),
    "kl_div": (lambda r: nn.KLDivLoss(reduction=r),
               lambda q, p, r: _reduce_np(np.where(p > 0, p * (np.log(np.where(p > 0, p, 1))
                                                                - q), 0.0), r)),
}


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_losses_match_numpy_formulas_even_for_extreme_inputs(name, reduction):
    rng = np.random.default_rng(7)
    make, reference = LOSS_CASES[name]
    x = rng.standard_normal((4, 3)) * 3
    y = rng.uniform(0, 1, (4, 3))
    if name == "bce_logits_pos_weight":
        x[0] = [800.0, -800.0, 0.0]               # exp(800) overflows: the formula must not
        y = np.round(y)
    elif name == "bce":
        x = np.array([[0.0, 1.0, 1e-50], [0.3, 0.5, 0.9], [0.2, 1e-12, 1 - 1e-12],
                      [0.6, 0.4, 0.7]])           # log(0) is clamped at -100, as PyTorch
    elif name == "kl_div":
        x = _log_softmax(x)
        y = rng.dirichlet(np.ones(3), size=4)
        y[1, 2] = 0.0                             # a zero target contributes nothing
    out = _np(make(reduction)(dg.tensor(x), dg.tensor(y)))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, reference(x, y, reduction), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["", "weight"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2], ids=["", "ls"])
def test_cross_entropy_matches_the_numpy_formula(reduction, weighted, smoothing):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 4)) * 3
    x[0] = [1000.0, -1000.0, 0.0, 999.0]          # extreme logits stay exact
    t = np.array([1, 3, -100, 0, 2, 3])
    w = rng.uniform(0.2, 2.0, 4) if weighted else None
    loss = nn.CrossEntropyLoss(weight=w, reduction=reduction, label_smoothing=smoothing)
    out = _np(loss(dg.tensor(x), dg.tensor(t)))
    np.testing.assert_allclose(out, _cross_entropy_np(x, t, w, -100, smoothing, reduction),
                               rtol=1e-12, atol=1e-12)
    nll = nn.NLLLoss(weight=w, reduction=reduction, ignore_index=-100)
    np.testing.assert_allclose(_np(nll(dg.tensor(_log_softmax(x)), dg.tensor(t))),
                               _cross_entropy_np(x, t, w, -100, 0.0, reduction), rtol=1e-12,
                               atol=1e-12)


def test_loss_weights_are_buffers_as_in_torch():
    w = np.array([1.0, 2.0, 3.0])
    ce = nn.CrossEntropyLoss(weight=dg.tensor(w))
    assert list(ce.state_dict()) == ["weight"] and repr(ce) == "CrossEntropyLoss()"
    assert ce.float().weight.dtype == "float32"
    assert list(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == ["pos_weight"]
    assert list(nn.NLLLoss().state_dict()) == []
    with pytest.raises(TypeError, match="weight"):
        nn.BCELoss(weight=[1.0, 2.0])


# -- finite differences -------------------------------------------------------------------------
def test_losses_gradcheck():
    rng = np.random.default_rng(3)
    x = dg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    t = dg.tensor(np.array([0, 3, -100]))
    w = dg.tensor(rng.uniform(0.5, 2, 4))
    y = dg.tensor(rng.uniform(0, 1, (3, 4)))
    dg.autograd.gradcheck(lambda a: NF.cross_entropy(a, t, w, label_smoothing=0.1), [x])
    pw = dg.tensor(rng.uniform(0.5, 2, 4))
    dg.autograd.gradcheck(lambda a: NF.binary_cross_entropy_with_logits(a, y, pos_weight=pw),
                          [x])
    p = dg.tensor(rng.uniform(0.1, 0.9, (3, 4)), requires_grad=True)
    dg.autograd.gradcheck(lambda a: NF.binary_cross_entropy(a, y), [p])
    dg.autograd.gradcheck(lambda a: NF.kl_div(a, y, "batchmean"), [x])
    dg.autograd.gradcheck(lambda a: NF.mse_loss(a, y) + NF.l1_loss(a, y), [x])


# -- graph mode ---------------------------------------------------------------------------------
def test_losses_in_graph_mode_match_eager():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3, 2))
    t = _targets(3, (5, 2), ignore=-100, rng=rng)
    y = rng.uniform(0, 1, (5, 3, 2))
    w = dg.tensor(rng.uniform(0.5, 2, 3))
    losses = {
        "ce": lambda a, b, c: nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(a, b),
        "ce_none": lambda a, b, c: nn.CrossEntropyLoss(reduction="none")(a, b),
        "nll": lambda a, b, c: nn.NLLLoss()(a, b),
        "bce_logits": lambda a, b, c: nn.BCEWithLogitsLoss()(a, c),
        "kl": lambda a, b, c: nn.KLDivLoss(reduction="batchmean")(a, c),
        "mse": lambda a, b, c: nn.MSELoss()(a, c),
    }
    g = dg.Graph("losses")
    with g:
        xa = dg.placeholder("x", ("N", 3, 2), "float64")
        ta = dg.placeholder("t", ("N", 2), "int64")
        ya = dg.placeholder("y", ("N", 3, 2), "float64")
        outs = {k: f(xa, ta, ya) for k, f in losses.items()}
        grads = {k: dg.grad(dg.sum(v), [xa])[0] for k, v in outs.items()}
    exe = g.compile(outputs=list(outs.values()) + list(grads.values()))
    got = exe(x=x, t=t, y=y)
    for i, (k, f) in enumerate(losses.items()):
        xe = dg.tensor(x, requires_grad=True)
        out = f(xe, dg.tensor(t), dg.tensor(y))
        out.sum().backward()
        np.testing.assert_allclose(got[i], _np(out), rtol=1e-12, err_msg=k)
        np.testing.assert_allclose(got[len(losses) + i], _np(xe.grad), rtol=1e-10, atol=1e-14,
                                   err_msg=k)


# -- errors ----------------------------------------------------------------------------------------
def test_loss_errors_are_clear():
    x = dg.randn(4, 3)
    with pytest.raises(dg.ShapeError, match=r"(?s)cross_entropy.*\[4\].*\[5\].*test_losses"):
        nn.CrossEntropyLoss()(x, dg.tensor(np.zeros(5, np.int64)))
    with pytest.raises(dg.ShapeError, match=r"(?s)mse_loss.*\[4, 3\].*\[3\].*layer: MSELoss"):
        nn.MSELoss()(x, dg.randn(3))
    with pytest.raises(dg.ShapeError, match="cross_entropy"):
        nn.CrossEntropyLoss()(dg.randn(4), dg.tensor(np.zeros(4, np.int64)))
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        NF.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        NF.cross_entropy(x, dg.tensor(np.zeros(4, np.int64)), label_smoothing=1.5)
    with pytest.raises(dg.DTypeError, match="cross_entropy"):
        NF.cross_entropy(x, dg.randn(4))


@needs_torch
def test_loss_repr_matches_torch_for_defaults():
    assert repr(nn.CrossEntropyLoss()) == repr(torch.nn.CrossEntropyLoss())
    assert repr(nn.MSELoss()) == repr(torch.nn.MSELoss())


# -- clip_grad_norm_ -----------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    rng = np.random.default_rng(5)
    grads = [rng.standard_normal(s) for s in [(3, 4), (4,), (2, 2, 2)]]
    ours = [nn.Parameter(np.zeros(g.shape)) for g in grads]
    theirs = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad = dg.tensor(g.copy())
        tp.grad = torch.tensor(g.copy())
    no_grad = nn.Parameter(np.zeros(2))            # parameters without a gradient are skipped
    total = nn.utils.clip_grad_norm_(ours + [no_grad], max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(_np(total), _np(ttotal), rtol=1e-12)
    assert tuple(total.shape) == ()
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(_np(p.grad), _np(tp.grad), rtol=1e-12)


def test_clip_grad_norm_single_tensor_generator_and_nonfinite():
    p = nn.Parameter(np.zeros(3))
    p.grad = dg.tensor(np.array([3.0, 4.0, 0.0]))
    total = nn.utils.clip_grad_norm_(p, 1.0)
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(_np(p.grad), [0.6, 0.8, 0.0], rtol=1e-5)
    lin = nn.Linear(2, 2)
    lin(dg.randn(3, 2)).sum().backward()
    total = nn.utils.clip_grad_norm_(lin.parameters(), 1e-3)
    now = np.sqrt(sum(np.sum(_np(q.grad) ** 2) for q in lin.parameters()))
    assert now == pytest.approx(1e-3, rel=1e-3) and total.item() > 1e-3
    q = nn.Parameter(np.zeros(2))
    q.grad = dg.tensor(np.array([np.inf, 1.0]))
    with pytest.raises(RuntimeError, match="non-finite|nan|inf"):
        nn.utils.clip_grad_norm_(q, 1.0, error_if_nonfinite=True)
    assert nn.utils.clip_grad_norm_([], 1.0).item() == 0.0
