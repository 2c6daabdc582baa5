"""RAdam, NAdam, Adadelta, Adamax, Rprop, ASGD, LBFGS and maximize for RMSprop/Adagrad
against PyTorch, step by step (float64, identical initial weights), eager step() and
graph-mode minimize()."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn, optim

torch = pytest.importorskip("torch")

STEPS = 12
CONFIGS = [
    ("RAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1)),
    ("RAdam", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1, decoupled_weight_decay=True,
                   maximize=True)),
    ("NAdam", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True)),
    ("Adamax", dict(lr=0.05)),
    ("Adamax", dict(lr=0.05, betas=(0.8, 0.95), weight_decay=0.1, maximize=True)),
    ("Rprop", dict(lr=0.01)),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=3, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True)),
    ("RMSprop", dict(lr=0.01, maximize=True, momentum=0.5, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, maximize=True, lr_decay=0.05, weight_decay=0.1)),
]


def _np(t):
    return t.detach().numpy()


def _models():
    dg.manual_seed(0)
    ours = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                 torch.nn.Linear(4, 2)).double()
    theirs.load_state_dict({k: torch.from_numpy(np.array(_np(v)))
                            for k, v in ours.state_dict().items()})
    return ours, theirs


def _data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((8, 3)), rng.standard_normal((8, 2))


def _config_id(c):
    return c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items())


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("config", CONFIGS, ids=[_config_id(c) for c in CONFIGS])
def test_optimizer_matches_torch_step_by_step(config, mode):
    name, kwargs = config
    ours, theirs = _models()
    x, y = _data()
    opt = getattr(optim, name)(ours.parameters(), **kwargs)
    ref = getattr(torch.optim, name)(theirs.parameters(), **kwargs)
    if mode == "graph":
        g = dg.Graph("train")
        with g:
            xv = dg.placeholder("x", ("N", 3), "float64")
            yv = dg.placeholder("y", ("N", 2), "float64")
            loss_v = nn.functional.mse_loss(ours(xv), yv)
            opt.minimize(loss_v)
        exe = g.compile(outputs=[loss_v])
    xt, yt = torch.tensor(x), torch.tensor(y)
    for step in range(STEPS):
        if mode == "eager":
            opt.zero_grad()
            loss = nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y))
            loss.backward()
            opt.step()
            loss = loss.item()
        else:
            loss = float(exe(x=x, y=y)[0])
        ref.zero_grad()
        tloss = torch.nn.functional.mse_loss(theirs(xt), yt)
        tloss.backward()
        ref.step()
        assert loss == pytest.approx(tloss.item(), rel=1e-9)
        tp = dict(theirs.named_parameters())
        for pname, p in ours.named_parameters():
            np.testing.assert_allclose(_np(p), _np(tp[pname]), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{pname} after step {step}")
    # the per-parameter state agrees with PyTorch's, slot by slot
    ours_state = opt.state_dict()["state"]
    for idx, slots in ref.state_dict()["state"].items():
        for key, value in slots.items():
            if key in ours_state[idx]:
                np.testing.assert_allclose(np.asarray(_np(ours_state[idx][key])),
                                           np.asarray(value), rtol=1e-6, err_msg=key)


def test_radam_reaches_its_rectified_branch_in_this_test():
    """rho_t > 5 from step 6 with the default betas' rho_inf (so the rectified update is
    checked above): 2/(1-b2) - 1 - 2 t b2^t / (1 - b2^t) at t = 12."""
    b2 = 0.999
    t = STEPS
    rho_inf = 2 / (1 - b2) - 1
    assert rho_inf - 2 * t * b2 ** t / (1 - b2 ** t) > 5


@pytest.mark.parametrize("name, kwargs", [("NAdam", dict(betas=(1.0, 0.9))),
                                          ("Adadelta", dict(rho=1.5)),
                                          ("Rprop", dict(etas=(1.5, 1.2))),
                                          ("RAdam", dict(lr=-1.0))])
def test_bad_settings_are_refused_as_torch(name, kwargs):
    p = nn.Parameter(np.ones(2))
    with pytest.raises(ValueError):
        getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(2))], **kwargs)
    with pytest.raises(ValueError):
        getattr(optim, name)([p], **kwargs)


@pytest.mark.parametrize("kwargs", [dict(), dict(lr=0.5, max_iter=7, history_size=3),
                                    dict(line_search_fn="strong_wolfe"),
                                    dict(line_search_fn="strong_wolfe", history_size=2,
                                         max_iter=10, tolerance_change=1e-12)])
def test_lbfgs_matches_torch_step_by_step(kwargs):
    ours, theirs = _models()
    x, y = _data()
    opt = optim.LBFGS(ours.parameters(), **kwargs)
    ref = torch.optim.LBFGS(theirs.parameters(), **kwargs)
    xt, yt = torch.tensor(x), torch.tensor(y)
    xd, yd = dg.tensor(x), dg.tensor(y)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(ours(xd), yd)
        loss.backward()
        return loss

    def tclosure():
        ref.zero_grad()
        loss = torch.nn.functional.mse_loss(theirs(xt), yt)
        loss.backward()
        return loss

    for step in range(3):
        loss = opt.step(closure)
        tloss = ref.step(tclosure)
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-8)
        tp = dict(theirs.named_parameters())
        for pname, p in ours.named_parameters():
            np.testing.assert_allclose(_np(p), _np(tp[pname]), rtol=1e-7, atol=1e-10,
                                       err_msg=f"{pname} after step {step}")
        ours_state = opt.state_dict()["state"][0]
        theirs_state = ref.state_dict()["state"][0]
        assert ours_state["func_evals"] == theirs_state["func_evals"]
        assert ours_state["n_iter"] == theirs_state["n_iter"]
    final = nn.functional.mse_loss(ours(xd), yd).item()
    assert final < nn.functional.mse_loss(_models()[0](xd), yd).item()


def test_lbfgs_refuses_graph_mode_and_a_missing_closure():
    ours, _ = _models()
    opt = optim.LBFGS(ours.parameters())
    with pytest.raises(RuntimeError, match="closure"):
        opt.step()
    g = dg.Graph("t")
    with g:
        xv = dg.placeholder("x", (2, 3), "float64")
        loss = ours(xv).sum()
        with pytest.raises(dg.GraphError, match="no graph form"):
            opt.minimize(loss)
    with pytest.raises(ValueError):
        optim.LBFGS(ours.parameters(), line_search_fn="armijo")
