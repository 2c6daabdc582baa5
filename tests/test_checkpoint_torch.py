"""Activation checkpointing against ``torch.utils.checkpoint``: a checkpointed transformer
block (same weights) gives PyTorch's outputs and gradients, with one recomputation per
checkpoint in both frameworks."""
import numpy as np
import pytest

import duograph as dg
from duograph.utils.checkpoint import checkpoint, checkpoint_sequential

torch = pytest.importorskip("torch")
tcp = pytest.importorskip("torch.utils.checkpoint")


def _blocks():
    tb = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).double()
    ours = dg.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).double()
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in tb.state_dict().items()})
    return ours, tb


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_transformer_block_matches_torch(use_reentrant):
    ours, tb = _blocks()
    x = np.random.default_rng(0).standard_normal((2, 5, 16))
    calls = {"dg": 0, "torch": 0}

    def f_dg(t):
        calls["dg"] += 1
        return ours(t)

    def f_torch(t):
        calls["torch"] += 1
        return tb(t)
    xd = dg.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yd = checkpoint(f_dg, xd, use_reentrant=use_reentrant)
    yt = tcp.checkpoint(f_torch, xt, use_reentrant=use_reentrant)
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    (yd * yd).sum().backward()
    (yt * yt).sum().backward()
    assert calls == {"dg": 2, "torch": 2}          # forward + one recomputation each
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-10)
    theirs = dict(tb.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-10, err_msg=name)


def test_checkpoint_sequential_matches_torch():
    tm = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(6, 6),
                                                             torch.nn.Tanh())]).double()
    ours = dg.nn.Sequential(*[m for _ in range(4) for m in (dg.nn.Linear(6, 6),
                                                            dg.nn.Tanh())]).double()
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((3, 6))
    xd, xt = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    checkpoint_sequential(ours, 2, xd, use_reentrant=False).sum().backward()
    tcp.checkpoint_sequential(tm, 2, xt, use_reentrant=False).sum().backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
    for (n, p), (_, q) in zip(ours.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, err_msg=n)
