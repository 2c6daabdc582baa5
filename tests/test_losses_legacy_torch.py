"""The deprecated ``size_average``/``reduce`` loss arguments: PyTorch's mapping to
``reduction``, its deprecation warning, its positional order, for modules and functions."""
import warnings

import numpy as np
import pytest

import duograph as dg
from duograph import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3))
Y = RNG.standard_normal((4, 3))
P = 1 / (1 + np.exp(-X))
T01 = (RNG.random((4, 3)) > 0.5).astype(np.float64)
LOGP = X - np.log(np.exp(X).sum(1, keepdims=True))
CLS = np.array([0, 2, 1, 2])

# name -> (input, target) arrays
LOSSES = {"MSELoss": (X, Y), "L1Loss": (X, Y), "CrossEntropyLoss": (X, CLS),
          "NLLLoss": (LOGP, CLS), "BCELoss": (P, T01), "BCEWithLogitsLoss": (X, T01),
          "KLDivLoss": (LOGP, np.exp(LOGP[::-1].copy()))}
FUNCTIONS = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "CrossEntropyLoss": "cross_entropy",
             "NLLLoss": "nll_loss", "BCELoss": "binary_cross_entropy",
             "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div"}
LEGACY = [dict(size_average=False), dict(reduce=False), dict(size_average=True),
          dict(size_average=False, reduce=True), dict(size_average=True, reduce=False),
          dict(reduce=True)]


def _run(make, lib, name, kwargs):
    a, b = LOSSES[name]
    conv = dg.tensor if lib is dg else torch.tensor
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = make(**kwargs)(conv(a), conv(b)) if callable(make) else None
    msgs = [str(w.message) for w in caught if "size_average" in str(w.message)]
    return np.asarray(out.detach().numpy()), msgs


@pytest.mark.parametrize("kwargs", LEGACY, ids=str)
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_legacy_arguments_map_to_reduction_like_torch(name, kwargs):
    ours, ours_msgs = _run(getattr(nn, name), dg, name, kwargs)
    theirs, their_msgs = _run(getattr(torch.nn, name), torch, name, kwargs)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert ours_msgs and ours_msgs[0] == their_msgs[0]
    fn = FUNCTIONS[name]
    f_ours, f_msgs = _run(lambda **kw: lambda a, b: getattr(nn.functional, fn)(a, b, **kw), dg,
                          name, kwargs)
    f_theirs, _ = _run(lambda **kw: lambda a, b: getattr(torch.nn.functional, fn)(a, b, **kw),
                       torch, name, kwargs)
    np.testing.assert_allclose(f_ours, f_theirs, rtol=1e-12)
    assert f_msgs and f_msgs[0] == their_msgs[0]


def test_no_warning_without_legacy_arguments_and_positional_order_as_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.MSELoss()(dg.tensor(X), dg.tensor(Y))
        nn.CrossEntropyLoss(reduction="sum")(dg.tensor(X), dg.tensor(CLS))
    # PyTorch's positions: MSELoss(size_average, reduce, reduction)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        loss = nn.MSELoss(False)
    assert loss.reduction == torch.nn.MSELoss(False).reduction == "sum"
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert nn.CrossEntropyLoss(None, None, -100, False).reduction == "none"
    assert nn.NLLLoss(None, None, 3).ignore_index == 3
    assert nn.KLDivLoss(None, None, "batchmean").reduction == "batchmean"
