"""The batching rules of scan (recurrent layers), training-mode batch norm, fold/unfold and
masked_scatter against torch.func in float64: per-sample gradients of an LSTM and a GRU model
(vmap(grad) with functional_call; torch.func.grad per example, since torch.func.vmap refuses
nn.LSTM and nn.GRU), vmap over batch norm in training mode (per-example
statistics, and torch.func's refusal of shared running statistics), and vmap of the image and
mask ops. Each also checks that vmap ran the batch rule, not the per-example loop."""
import warnings

import numpy as np
import pytest

import duograph as dg
import duograph.nn.functional as DF
from duograph import func
from duograph.func import batched as batched_mod

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(270)


def _np(x):
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _close(got, want, tol=1e-10):
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _close(got[k], want[k], tol)
        return
    got, want = _np(got), _np(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


class _Batched:
    """``with _Batched():`` fails if vmap falls back to the per-example loop inside."""

    def __enter__(self):
        batched_mod.FALLBACK_OPS.clear()
        self.catch = warnings.catch_warnings()
        self.catch.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        self.catch.__exit__(*exc)
        if exc[0] is None:
            assert not batched_mod.FALLBACK_OPS, sorted(batched_mod.FALLBACK_OPS)


def _recurrent(kind, i=5, h=7, c=3):
    dcell, tcell = getattr(dg.nn, kind), getattr(torch.nn, kind)

    class D(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = dcell(i, h, batch_first=True)
            self.head = dg.nn.Linear(h, c)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y[:, -1])

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = tcell(i, h, batch_first=True)
            self.head = torch.nn.Linear(h, c)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y[:, -1])
    dm, tm = D().double(), T().double()
    with torch.no_grad():
        for (n, p), (m, q) in zip(dm.named_parameters(), tm.named_parameters()):
            assert n == m
            q.copy_(torch.tensor(_np(p)))
    return dm, tm


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_per_sample_gradients_of_a_recurrent_model_equal_torch_func(kind):
    dm, tm = _recurrent(kind)
    x, y = _rng.standard_normal((6, 4, 5)), _rng.integers(0, 3, 6)

    def ld(p, xi, yi):
        return DF.cross_entropy(func.functional_call(dm, p, (xi.unsqueeze(0),)),
                                yi.unsqueeze(0))

    def lt(p, xi, yi):
        return torch.nn.functional.cross_entropy(
            torch.func.functional_call(tm, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
    with _Batched():
        got = func.vmap(func.grad(ld), in_dims=(None, 0, 0))(
            {k: v.detach() for k, v in dm.named_parameters()}, dg.tensor(x), dg.tensor(y))
    # torch.func.vmap refuses nn.LSTM/GRU (its fused kernel writes into an unbatched
    # buffer: "output with shape [1, 28] doesn't match the broadcast shape [6, 1, 28]"), so
    # torch's per-sample gradients are torch.func.grad run on each example
    pt = {k: v.detach() for k, v in tm.named_parameters()}
    per = [torch.func.grad(lt)(pt, torch.tensor(x[i]), torch.tensor(y[i])) for i in range(6)]
    _close(got, {k: torch.stack([g[k] for g in per]) for k in pt})


def test_vmap_over_an_lstm_with_batched_initial_state_equals_torch():
    dm, tm = _recurrent("LSTM")
    x = _rng.standard_normal((3, 2, 4, 5))          # 3 examples of (N=2, T=4, 5)
    h0, c0 = _rng.standard_normal((2, 3, 1, 2, 7))  # per example (layers=1, N=2, H=7)
    with _Batched():
        got = func.vmap(lambda xi, h, c: dm.rnn(xi, (h, c))[0])(
            dg.tensor(x), dg.tensor(h0), dg.tensor(c0))
    want = torch.stack([tm.rnn(torch.tensor(x[i]), (torch.tensor(h0[i]),
                                                    torch.tensor(c0[i])))[0]
                        for i in range(3)])      # (torch.func.vmap refuses nn.LSTM)
    _close(got, want)


def test_batch_norm_in_training_mode_under_vmap_equals_torch_func():
    # track_running_stats=False: each example normalised by its own statistics
    dbn = dg.nn.BatchNorm2d(3, track_running_stats=False).double()
    tbn = torch.nn.BatchNorm2d(3, track_running_stats=False).double()
    w, b = _rng.standard_normal(3), _rng.standard_normal(3)
    with torch.no_grad():
        tbn.weight.copy_(torch.tensor(w))
        tbn.bias.copy_(torch.tensor(b))
    dbn.weight.data = dg.tensor(w)
    dbn.bias.data = dg.tensor(b)
    x = _rng.standard_normal((4, 2, 3, 5, 5))        # 4 examples of (N=2, C=3, 5, 5)
    with _Batched():
        got = func.vmap(dbn)(dg.tensor(x))
    _close(got, torch.func.vmap(tbn)(torch.tensor(x)))
    # per-example weight gradients through it
    pd = {k: v.detach() for k, v in dbn.named_parameters()}
    pt = {k: v.detach() for k, v in tbn.named_parameters()}

    def ld(p, xi):
        return (func.functional_call(dbn, p, (xi,)).tanh() ** 2).sum()

    def lt(p, xi):
        return (torch.func.functional_call(tbn, p, (xi,)).tanh() ** 2).sum()
    with _Batched():
        got = func.vmap(func.grad(ld), in_dims=(None, 0))(pd, dg.tensor(x))
    _close(got, torch.func.vmap(torch.func.grad(lt), in_dims=(None, 0))(pt, torch.tensor(x)))
    # per-example weights and biases (an ensemble) with the functional form
    ws, bs = _rng.standard_normal((4, 3)), _rng.standard_normal((4, 3))
    with _Batched():
        got = func.vmap(lambda xi, wi, bi: DF.batch_norm(xi, None, None, wi, bi, True))(
            dg.tensor(x), dg.tensor(ws), dg.tensor(bs))
    want = torch.func.vmap(
        lambda xi, wi, bi: torch.nn.functional.batch_norm(xi, None, None, wi, bi, True))(
        torch.tensor(x), torch.tensor(ws), torch.tensor(bs))
    _close(got, want)


def test_batch_norm_with_shared_running_statistics_is_refused_as_torch():
    x = _rng.standard_normal((4, 3, 5))
    dbn, tbn = dg.nn.BatchNorm1d(3).double(), torch.nn.BatchNorm1d(3).double()
    with pytest.raises(RuntimeError, match="running_mean or running_var") as want:
        torch.func.vmap(lambda xi: tbn(xi.unsqueeze(0)))(torch.tensor(x))
    first = str(want.value).splitlines()[0]
    with pytest.raises(RuntimeError) as got:
        func.vmap(lambda xi: dbn(xi.unsqueeze(0)))(dg.tensor(x))
    assert str(got.value).splitlines()[0] == first
    # eval mode reads the running statistics: fine in both
    dbn.eval()
    tbn.eval()
    _close(func.vmap(lambda xi: dbn(xi.unsqueeze(0)))(dg.tensor(x)),
           torch.func.vmap(lambda xi: tbn(xi.unsqueeze(0)))(torch.tensor(x)))


def test_fold_unfold_and_masked_scatter_under_vmap_equal_torch():
    x = _rng.standard_normal((3, 2, 4, 6, 5))
    with _Batched():
        cols = func.vmap(lambda a: DF.unfold(a, (2, 3), padding=1, stride=(1, 2)))(
            dg.tensor(x))
    tcols = torch.func.vmap(
        lambda a: torch.nn.functional.unfold(a, (2, 3), padding=1, stride=(1, 2)))(
        torch.tensor(x))
    _close(cols, tcols)
    with _Batched():
        got = func.vmap(lambda c: DF.fold(c, (6, 5), (2, 3), padding=1, stride=(1, 2)))(cols)
    _close(got, torch.func.vmap(lambda c: torch.nn.functional.fold(
        c, (6, 5), (2, 3), padding=1, stride=(1, 2)))(tcols))
    a, m = _rng.standard_normal((4, 3, 5)), _rng.standard_normal((4, 3, 5)) > 0.2
    src = _rng.standard_normal((4, 20))
    with _Batched():
        got = func.vmap(dg.masked_scatter)(dg.tensor(a), dg.tensor(m), dg.tensor(src))
    _close(got, torch.func.vmap(torch.Tensor.masked_scatter)(
        torch.tensor(a), torch.tensor(m), torch.tensor(src)))
    # a mask shared by the examples
    with _Batched():
        got = func.vmap(dg.masked_scatter, in_dims=(0, None, 0))(
            dg.tensor(a), dg.tensor(m[0]), dg.tensor(src))
    _close(got, torch.func.vmap(torch.Tensor.masked_scatter, in_dims=(0, None, 0))(
        torch.tensor(a), torch.tensor(m[0]), torch.tensor(src)))
