"""nn.RNN, nn.LSTM, nn.GRU on dg.scan: equal to PyTorch (copied weights) in values and
gradients, eagerly, in graph mode and under dg.compile; training steps agree."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

CONFIGS = [
    dict(),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False, num_layers=3),
    dict(bidirectional=True),
]


def _pair(cls, kw, seed=0):
    torch.manual_seed(seed)
    tm = getattr(torch.nn, cls)(4, 5, **kw).double()
    dm = getattr(dg.nn, cls)(4, 5, **kw).double()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert list(sd) == [n for n, _ in dm.named_parameters()]      # PyTorch's names, in order
    dm.load_state_dict(sd)
    return tm, dm


def _loss(out, h, lstm):
    hn = h[0] if lstm else h
    extra = h[1].sum() * 0.5 if lstm else 0.0
    return (out * out).sum() + (hn * 1.5).sum() + extra


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items())
                         or "default")
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_rnn_layers_equal_torch_values_and_gradients_eagerly(cls, kw):
    tm, dm = _pair(cls, kw)
    lstm = cls == "LSTM"
    rng = np.random.default_rng(1)
    shape = (2, 6, 4) if kw.get("batch_first") else (6, 2, 4)
    x = rng.standard_normal(shape)
    d = 2 if kw.get("bidirectional") else 1
    hshape = (kw.get("num_layers", 1) * d, 2, 5)
    h0 = rng.standard_normal(hshape) * 0.3
    c0 = rng.standard_normal(hshape) * 0.3
    tx = torch.tensor(x, requires_grad=True)
    dx = dg.tensor(x, requires_grad=True)
    th0 = (torch.tensor(h0), torch.tensor(c0)) if lstm else torch.tensor(h0)
    dh0 = (dg.tensor(h0), dg.tensor(c0)) if lstm else dg.tensor(h0)
    to, th = tm(tx, th0)
    do, dh = dm(dx, dh0)
    np.testing.assert_allclose(do.detach().numpy(), to.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    for a, b in zip(dh if lstm else [dh], th if lstm else [th]):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)
    _loss(to, th, lstm).backward()
    _loss(do, dh, lstm).backward()
    np.testing.assert_allclose(dx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    dparams = dict(dm.named_parameters())
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(dparams[name].grad.numpy(), p.grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_unbatched_input_and_default_state(cls):
    tm, dm = _pair(cls, dict(num_layers=2))
    x = np.random.default_rng(2).standard_normal((7, 4))
    to, th = tm(torch.tensor(x))
    do, dh = dm(dg.tensor(x))
    np.testing.assert_allclose(do.detach().numpy(), to.detach().numpy(), rtol=1e-10)
    a, b = (dh[1], th[1]) if cls == "LSTM" else (dh, th)
    assert tuple(a.shape) == tuple(b.shape) == (2, 5)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10)


def test_lstm_trains_the_same_in_eager_compile_and_graph_mode():
    tm, _ = _pair("LSTM", dict(num_layers=2, batch_first=True))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 4))
    target = rng.standard_normal((3, 5, 5))
    losses = {}
    m = torch.nn.LSTM(4, 5, num_layers=2, batch_first=True).double()
    m.load_state_dict(tm.state_dict())
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    losses["torch"] = []
    for _ in range(4):
        opt.zero_grad()
        loss = ((m(torch.tensor(x))[0] - torch.tensor(target)) ** 2).mean()
        loss.backward()
        opt.step()
        losses["torch"].append(loss.item())
    for mode in ("eager", "compiled", "graph"):
        m = dg.nn.LSTM(4, 5, num_layers=2, batch_first=True).double()
        m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        opt = dg.optim.SGD(m.parameters(), lr=0.5)

        def loss_fn(xs, ts):
            return ((m(xs)[0] - ts) ** 2).mean()
        losses[mode] = []
        if mode == "graph":
            g = dg.Graph("lstm_train")
            with g:
                loss = loss_fn(dg.placeholder("x", (3, 5, 4), "float64"),
                               dg.placeholder("t", (3, 5, 5), "float64"))
                opt.minimize(loss)
            assert sum(n.op.name == "scan" for n in g.nodes) >= 4    # forward and reverse
            exe = g.compile(outputs=[loss], passes="O2")
            for _ in range(4):
                losses[mode].append(float(exe(x=x, t=target)[0]))
            continue
        fn = dg.compile(loss_fn) if mode == "compiled" else loss_fn
        for _ in range(4):
            opt.zero_grad()
            loss = fn(dg.tensor(x), dg.tensor(target))
            loss.backward()
            opt.step()
            losses[mode].append(loss.item())
    for mode in ("eager", "compiled", "graph"):
        np.testing.assert_allclose(losses[mode], losses["torch"], rtol=1e-9, err_msg=mode)
    assert losses["torch"][-1] < losses["torch"][0]


def test_gru_graph_mode_is_one_scan_per_layer_and_direction():
    tm, dm = _pair("GRU", dict(num_layers=2, bidirectional=True))
    x = np.random.default_rng(4).standard_normal((6, 2, 4))
    g = dg.Graph("gru")
    with g:
        xv = dg.placeholder("x", (6, 2, 4), "float64")
        out, h = dm(xv)
    g.outputs = [out, h]
    assert sum(n.op.name == "scan" for n in g.nodes) == 4
    to, th = tm(torch.tensor(x))
    for level in ("O0", "O2"):
        got = g.compile(passes=level)(x=x)
        np.testing.assert_allclose(got[0], to.detach().numpy(), rtol=1e-10)
        np.testing.assert_allclose(got[1], th.detach().numpy(), rtol=1e-10)


def test_rnn_bad_input_raises_clear_errors():
    m = dg.nn.LSTM(4, 5)
    with pytest.raises(dg.ShapeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(dg.zeros(3, 2, 7))
    with pytest.raises(dg.ShapeError, match=r"expected hidden size \[1, 2, 5\], got \[1, 3, 5\]"):
        m(dg.zeros(3, 2, 4), (dg.zeros(1, 3, 5), dg.zeros(1, 3, 5)))
    with pytest.raises(TypeError, match=r"hx must be a tuple \(h_0, c_0\)"):
        m(dg.zeros(3, 2, 4), dg.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        dg.nn.RNN(4, 5, nonlinearity="sigmoid")
    with pytest.raises(dg.ShapeError, match="2-D \\(unbatched\\) or 3-D"):
        dg.nn.GRU(4, 5)(dg.zeros(4))
