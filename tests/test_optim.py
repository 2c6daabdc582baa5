"""Optimizers and schedulers against PyTorch (float64, identical initial weights), eager step()
against graph-mode minimize() and dg.compile, parameter groups, state dicts.

PyTorch is only an oracle: without it the comparisons with it skip, the rest still runs."""
import copy

import numpy as np
import pytest

import duograph as dg
from duograph import nn, optim
from duograph.optim import lr_scheduler as sched

try:
    import torch
except ImportError:  # the oracle is optional
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


def _np(t):
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _models(seed=0):
    """The same small MLP in both frameworks (float64); torch's is None without torch."""
    dg.manual_seed(seed)
    ours = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    if torch is None:
        return ours, None
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                 torch.nn.Linear(4, 2)).double()
    theirs.load_state_dict({k: torch.from_numpy(np.array(_np(v)))
                            for k, v in ours.state_dict().items()})
    return ours, theirs


def _data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 3)), rng.standard_normal((8, 2))


def _assert_same_params(ours, theirs, step, rtol=1e-10):
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(_np(p), _np(tp[name]), rtol=rtol, atol=1e-13,
                                   err_msg=f"{name} after step {step}")


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.5)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.5, weight_decay=0.05, maximize=True)),
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, amsgrad=True)),
    ("Adam", dict(lr=0.05, weight_decay=0.1, betas=(0.8, 0.9))),
    ("Adam", dict(lr=0.05, maximize=True, eps=1e-6)),
    ("AdamW", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1, alpha=0.9)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5, weight_decay=0.1)),
]


def _config_id(c):
    return c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items())


def _torch_steps(theirs, name, kwargs, x, y, steps, groups=None):
    opt = getattr(torch.optim, name)(groups(theirs) if groups else theirs.parameters(),
                                     **kwargs)
    xt, yt = torch.tensor(x), torch.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(theirs(xt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        yield losses[-1]


@needs_torch
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("config", CONFIGS, ids=[_config_id(c) for c in CONFIGS])
def test_optimizer_matches_torch(config, mode):
    name, kwargs = config
    ours, theirs = _models()
    x, y = _data()
    opt = getattr(optim, name)(ours.parameters(), **kwargs)
    reference = _torch_steps(theirs, name, kwargs, x, y, 5)
    if mode == "graph":
        g = dg.Graph("train")
        with g:
            xv = dg.placeholder("x", ("N", 3), "float64")
            yv = dg.placeholder("y", ("N", 2), "float64")
            loss_v = nn.functional.mse_loss(ours(xv), yv)
            opt.minimize(loss_v)
        exe = g.compile(outputs=[loss_v])
    for step in range(5):
        if mode == "eager":
            opt.zero_grad()
            loss = nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y))
            loss.backward()
            opt.step()
            loss = loss.item()
        else:
            loss = float(exe(x=x, y=y)[0])
        tloss = next(reference)
        assert loss == pytest.approx(tloss, rel=1e-10)
        _assert_same_params(ours, theirs, step)


@needs_torch
def test_quadratic_bowl_converges_like_torch():
    """A 2-D quadratic: 5 Adam and SGD-Nesterov steps give the same iterates."""
    a = np.array([[3.0, 0.5], [0.5, 1.0]])
    for name, kwargs in [("Adam", dict(lr=0.3)), ("SGD", dict(lr=0.1, momentum=0.8,
                                                                  nesterov=True))]:
        w = nn.Parameter(np.array([1.0, -2.0]))
        tw = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
        opt = getattr(optim, name)([w], **kwargs)
        topt = getattr(torch.optim, name)([tw], **kwargs)
        for step in range(5):
            opt.zero_grad()
            topt.zero_grad()
            (w @ dg.tensor(a) @ w).backward()
            (tw @ torch.tensor(a) @ tw).backward()
            opt.step()
            topt.step()
            np.testing.assert_allclose(_np(w), _np(tw), rtol=1e-12, err_msg=f"{name} {step}")


@needs_torch
def test_float32_parameters_stay_float32_and_track_torch():
    w = nn.Parameter(np.array([1.0, -2.0, 0.5], np.float32))
    tw = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    opt, topt = optim.Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    for _ in range(5):
        for o in (opt, topt):
            o.zero_grad()
        (w * w * dg.tensor(np.array([1.0, 2.0, 3.0], np.float32))).sum().backward()
        (tw * tw * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        opt.step()
        topt.step()
    assert w.dtype == "float32"
    np.testing.assert_allclose(_np(w), _np(tw), rtol=1e-6)


# -- parameter groups -----------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_parameter_groups_with_their_own_lr(name, mode):
    ours, theirs = _models()
    x, y = _data()
    extra = dict(momentum=0.9) if name == "SGD" else dict(betas=(0.5, 0.9))

    def groups(m):
        return [{"params": m[0].parameters(), "lr": 0.2, **extra},
                {"params": m[2].parameters()}]

    opt = getattr(optim, name)(groups(ours), lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.2, 0.01]
    if name == "SGD":
        assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[1]["momentum"] == 0
    reference = _torch_steps(theirs, name, dict(lr=0.01), x, y, 4, groups)
    if mode == "graph":
        g = dg.Graph("groups")
        with g:
            loss_v = nn.functional.mse_loss(ours(dg.placeholder("x", (8, 3), "float64")),
                                            dg.placeholder("y", (8, 2), "float64"))
            opt.minimize(loss_v)
        assert {"lr0", "lr1"} <= {v.name for v in g.state}
        exe = g.compile(outputs=[loss_v])
    for step in range(4):
        if mode == "eager":
            opt.zero_grad()
            nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y)).backward()
            opt.step()
        else:
            exe(x=x, y=y)
        next(reference)
        _assert_same_params(ours, theirs, step)


def test_add_param_group_and_group_errors():
    a, b = nn.Parameter(np.zeros(2)), nn.Parameter(np.zeros(3))
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert opt.param_groups[1]["momentum"] == 0.9 and opt.param_groups[1]["lr"] == 0.5
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.Adam([a], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([a], betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="leaf"):
        optim.SGD([a * 2], lr=0.1)


def test_zero_grad_set_to_none_or_zeros():
    ours, _ = _models()
    x, y = _data()
    opt = optim.SGD(ours.parameters(), lr=0.1)
    nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y)).backward()
    opt.zero_grad(set_to_none=False)
    for p in ours.parameters():
        assert p.grad is not None and p.grad.shape == p.shape and not np.any(_np(p.grad))
    before = [_np(p).copy() for p in ours.parameters()]
    opt.step()                                   # zero gradients: nothing moves
    for b, p in zip(before, ours.parameters()):
        np.testing.assert_array_equal(b, _np(p))
    ours[0].bias.grad = dg.tensor(np.full(4, np.nan))
    opt.zero_grad(set_to_none=False)             # zeros, not nan * 0
    np.testing.assert_array_equal(_np(ours[0].bias.grad), 0.0)
    opt.zero_grad()
    assert all(p.grad is None for p in ours.parameters())
    opt.step()                                   # no gradients: skipped
    for b, p in zip(before, ours.parameters()):
        np.testing.assert_array_equal(b, _np(p))


def test_step_with_closure_returns_the_loss():
    ours, _ = _models()
    x, y = _data()
    opt = optim.SGD(ours.parameters(), lr=0.1)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y))
        loss.backward()
        return loss

    first = opt.step(closure).item()
    second = opt.step(closure).item()
    assert second < first


def test_parameters_without_gradient_are_skipped_in_both_modes():
    ours, _ = _models()
    ours[0].weight.requires_grad_(False)
    x, y = _data()
    opt = optim.Adam(ours.parameters(), lr=0.1)
    frozen = _np(ours[0].weight).copy()
    nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y)).backward()
    opt.step()
    np.testing.assert_array_equal(_np(ours[0].weight), frozen)
    unused = nn.Parameter(np.ones(3))
    opt2 = optim.SGD(list(ours.parameters()) + [unused], lr=0.1, momentum=0.9)
    g = dg.Graph("unused")
    with g:
        loss_v = nn.functional.mse_loss(ours(dg.placeholder("x", (8, 3), "float64")),
                                        dg.placeholder("y", (8, 2), "float64"))
        opt2.minimize(loss_v)
    g.compile(outputs=[loss_v])(x=x, y=y)
    np.testing.assert_array_equal(_np(ours[0].weight), frozen)
    np.testing.assert_array_equal(_np(unused), 1.0)


def test_minimize_needs_a_symbolic_loss():
    ours, _ = _models()
    x, y = _data()
    opt = optim.SGD(ours.parameters(), lr=0.1)
    loss = nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y))
    with pytest.raises(dg.GraphError, match="backward"):
        opt.minimize(loss)


# -- state dicts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)),
                                         ("Adam", dict(lr=0.05, amsgrad=True)),
                                         ("RMSprop", dict(lr=0.01, centered=True,
                                                          momentum=0.5)),
                                         ("Adagrad", dict(lr=0.1, lr_decay=0.1))])
def test_state_dict_round_trip_continues_identically(name, kwargs):
    x, y = _data()
    model, _ = _models()
    opt = getattr(optim, name)(model.parameters(), **kwargs)

    def train(m, o, steps):
        for _ in range(steps):
            o.zero_grad()
            nn.functional.mse_loss(m(dg.tensor(x)), dg.tensor(y)).backward()
            o.step()

    train(model, opt, 2)
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    assert sorted(saved_opt) == ["param_groups", "state"]
    assert saved_opt["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert saved_opt["param_groups"][0]["lr"] == kwargs["lr"]
    assert set(saved_opt["state"]) == {0, 1, 2, 3}
    train(model, opt, 3)

    restored, _ = _models(seed=5)                  # different initial weights
    restored.load_state_dict(saved_model)
    opt2 = getattr(optim, name)(restored.parameters(), lr=123.0)
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    train(restored, opt2, 3)
    for (n, a), b in zip(model.named_parameters(), restored.parameters()):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-13, err_msg=n)


@needs_torch
@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)),
                                         ("Adam", dict(lr=0.05))])
def test_load_a_torch_optimizer_state_dict(name, kwargs):
    """A checkpoint written by torch's optimizer continues identically here."""
    ours, theirs = _models()
    x, y = _data()
    reference = _torch_steps(theirs, name, kwargs, x, y, 5)
    next(reference), next(reference)
    topt_state = reference.gi_frame.f_locals["opt"].state_dict()
    ours.load_state_dict({k: _np(v) for k, v in theirs.state_dict().items()})
    opt = getattr(optim, name)(ours.parameters(), **kwargs)
    opt.load_state_dict(topt_state)
    for step in range(3):
        opt.zero_grad()
        nn.functional.mse_loss(ours(dg.tensor(x)), dg.tensor(y)).backward()
        opt.step()
        next(reference)
        _assert_same_params(ours, theirs, step)


def test_load_state_dict_mismatch_errors():
    a, b = nn.Parameter(np.zeros(2)), nn.Parameter(np.zeros(3))
    opt = optim.SGD([a, b], lr=0.1)
    other = optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    with pytest.raises(ValueError, match="parameter groups"):
        opt.load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="sizes"):
        optim.SGD([a], lr=0.1).load_state_dict(opt.state_dict())


# -- eager step() == graph minimize() == dg.compile --------------------------------------------
@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)),
                                         ("Adam", dict(lr=0.05))])
def test_eager_graph_and_compile_paths_agree(name, kwargs):
    x, y = _data()
    m_eager, _ = _models()
    m_graph, m_comp = copy.deepcopy(m_eager), copy.deepcopy(m_eager)
    o_eager = getattr(optim, name)(m_eager.parameters(), **kwargs)
    o_graph = getattr(optim, name)(m_graph.parameters(), **kwargs)
    o_comp = getattr(optim, name)(m_comp.parameters(), **kwargs)

    g = dg.Graph("step")
    with g:
        xv = dg.placeholder("x", ("N", 3), "float64")
        yv = dg.placeholder("y", ("N", 2), "float64")
        loss_v = nn.functional.mse_loss(m_graph(xv), yv)
        o_graph.minimize(loss_v)
    exe = g.compile(outputs=[loss_v])

    @dg.compile
    def compiled_loss(xb, yb):
        return nn.functional.mse_loss(m_comp(xb), yb)

    curves = {"eager": [], "graph": [], "compile": []}
    for step in range(5):
        xb, yb = x[step % 2 * 4:][:6], y[step % 2 * 4:][:6]     # two batch sizes
        o_eager.zero_grad()
        loss = nn.functional.mse_loss(m_eager(dg.tensor(xb)), dg.tensor(yb))
        loss.backward()
        o_eager.step()
        curves["eager"].append(loss.item())
        curves["graph"].append(float(exe(x=xb, y=yb)[0]))
        o_comp.zero_grad()
        loss = compiled_loss(dg.tensor(xb), dg.tensor(yb))
        loss.backward()
        o_comp.step()
        curves["compile"].append(loss.item())
        for other in (m_graph, m_comp):
            for (n, a), b in zip(m_eager.named_parameters(), other.parameters()):
                np.testing.assert_allclose(_np(b), _np(a), rtol=1e-11, err_msg=f"{n} {step}")
    np.testing.assert_allclose(curves["graph"], curves["eager"], rtol=1e-12)
    np.testing.assert_allclose(curves["compile"], curves["eager"], rtol=1e-12)
    assert curves["eager"][-1] < curves["eager"][0]
    # the optimizer slots agree too
    for p_e, p_g in zip(m_eager.parameters(), m_graph.parameters()):
        for k, v in o_eager.state[p_e].items():
            np.testing.assert_allclose(_np(o_graph.state[p_g][k]), _np(v), rtol=1e-11)


def test_graph_training_step_with_batchnorm_updates_everything():
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    ref = copy.deepcopy(model)
    opt, ref_opt = optim.Adam(model.parameters(), lr=0.01), optim.Adam(ref.parameters(),
                                                                        lr=0.01)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    t = rng.integers(0, 3, 6)
    g = dg.Graph("bn_step")
    with g:
        loss_v = nn.functional.cross_entropy(model(dg.placeholder("x", ("N", 3))),
                                             dg.placeholder("t", ("N",), "int64"))
        opt.minimize(loss_v)
    exe = g.compile(outputs=[loss_v])
    for _ in range(3):
        got = float(exe(x=x, t=t)[0])
        ref_opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(dg.tensor(x)), dg.tensor(t))
        loss.backward()
        ref_opt.step()
        assert got == pytest.approx(loss.item(), rel=1e-5)
    for (n, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-5, atol=1e-6, err_msg=n)
    assert int(model[1].num_batches_tracked.item()) == 3


# -- schedulers -----------------------------------------------------------------------------------
SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[2, 5, 9], gamma=0.3)),
    ("MultiStepLR", dict(milestones=[3, 3, 7], gamma=0.5)),
    ("ExponentialLR", dict(gamma=0.8)),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01)),
    ("CosineAnnealingLR", dict(T_max=12)),
    ("LinearLR", dict(start_factor=0.25, total_iters=4)),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.1, total_iters=6)),
]


def _two_group_optimizers():
    a, b = nn.Parameter(np.zeros(2)), nn.Parameter(np.zeros(2))
    ours = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, momentum=0.9)
    if torch is None:
        return ours, None
    ta, tb = (torch.zeros(2, requires_grad=True) for _ in range(2))
    theirs = torch.optim.SGD([{"params": [ta]}, {"params": [tb], "lr": 0.05}], lr=0.1,
                             momentum=0.9)
    return ours, theirs


@needs_torch
@pytest.mark.parametrize("name,kwargs", SCHEDULERS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULERS)])
def test_scheduler_matches_torch(name, kwargs):
    ours, theirs = _two_group_optimizers()
    s = getattr(sched, name)(ours, **kwargs)
    ts = getattr(torch.optim.lr_scheduler, name)(theirs, **kwargs)
    assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
    for epoch in range(12):
        theirs.step()
        ours.step()
        s.step()
        ts.step()
        np.testing.assert_allclose(s.get_last_lr(), ts.get_last_lr(), rtol=1e-10, atol=1e-15,
                                   err_msg=f"{name} epoch {epoch}")
        np.testing.assert_allclose([g["lr"] for g in ours.param_groups],
                                   [g["lr"] for g in theirs.param_groups], rtol=1e-10,
                                   atol=1e-15)
    assert [g["initial_lr"] for g in ours.param_groups] == [0.1, 0.05]


def test_scheduler_state_dict_round_trip():
    ours, _ = _two_group_optimizers()
    s = sched.StepLR(ours, step_size=2, gamma=0.5)
    for _ in range(3):
        s.step()
    state = s.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 3
    other, _ = _two_group_optimizers()
    s2 = sched.StepLR(other, step_size=7, gamma=0.9)
    # as in PyTorch the schedulers are chainable (they scale the groups' current lr), so a
    # resume loads the optimizer's state (its learning rates) too
    other.load_state_dict(ours.state_dict())
    s2.load_state_dict(state)
    for _ in range(4):
        s.step()
        s2.step()
        assert s2.get_last_lr() == s.get_last_lr()


@needs_torch
@pytest.mark.parametrize("kwargs", [dict(), dict(mode="max", patience=1, factor=0.5),
                                    dict(patience=2, threshold=0.1, threshold_mode="abs",
                                         cooldown=2, min_lr=0.004),
                                    dict(patience=0, factor=0.5, min_lr=[0.02, 0.01]),
                                    dict(patience=1, eps=0.05)])
def test_reduce_lr_on_plateau_matches_torch(kwargs):
    ours, theirs = _two_group_optimizers()
    s = sched.ReduceLROnPlateau(ours, **kwargs)
    ts = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs, **kwargs)
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.89, 0.9, 0.9, 0.9, 0.9, 0.5, 0.6, 0.6, 0.6, 0.6,
               0.7, 0.8, 0.8, 0.8, 0.8]
    for epoch, m in enumerate(metrics):
        s.step(m)
        ts.step(m)
        np.testing.assert_allclose([g["lr"] for g in ours.param_groups],
                                   [g["lr"] for g in theirs.param_groups], rtol=1e-12,
                                   err_msg=f"epoch {epoch}")
        assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
    s.step(dg.tensor(np.float64(0.1)))                # a 0-d tensor metric works too
    again, _ = _two_group_optimizers()
    s2 = sched.ReduceLROnPlateau(again)
    s2.load_state_dict(s.state_dict())
    assert s2.best == s.best and s2.num_bad_epochs == s.num_bad_epochs


def test_scheduler_argument_errors():
    ours, _ = _two_group_optimizers()
    with pytest.raises(TypeError, match="Optimizer"):
        sched.StepLR(object(), step_size=1)
    with pytest.raises(ValueError, match="LinearLR"):
        sched.LinearLR(ours, start_factor=0.0)
    with pytest.raises(ValueError, match="factor"):
        sched.ReduceLROnPlateau(ours, factor=1.5)


def test_scheduler_changes_the_lr_of_a_compiled_graph_without_rebuilding():
    """A StepLR drives a graph-mode training step built once, and an eager twin: the same
    parameters after every epoch (eager agrees with PyTorch: test_optimizer_matches_torch)."""
    ours, _ = _models()
    twin = copy.deepcopy(ours)
    x, y = _data()
    opt = optim.SGD(ours.parameters(), lr=0.2, momentum=0.5)
    twin_opt = optim.SGD(twin.parameters(), lr=0.2, momentum=0.5)
    s = sched.StepLR(opt, step_size=2, gamma=0.5)
    twin_s = sched.StepLR(twin_opt, step_size=2, gamma=0.5)
    g = dg.Graph("scheduled")
    with g:
        loss_v = nn.functional.mse_loss(ours(dg.placeholder("x", (8, 3), "float64")),
                                        dg.placeholder("y", (8, 2), "float64"))
        opt.minimize(loss_v)
    assert "lr" in {v.name for v in g.state}
    exe = g.compile(outputs=[loss_v])
    n_nodes = len(g.nodes)
    for epoch in range(6):
        exe(x=x, y=y)
        twin_opt.zero_grad()
        nn.functional.mse_loss(twin(dg.tensor(x)), dg.tensor(y)).backward()
        twin_opt.step()
        _assert_same_params(ours, twin, epoch, rtol=1e-12)
        s.step()
        twin_s.step()
    assert len(g.nodes) == n_nodes
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2 * 0.5 ** 3)
    # setting the lr by hand also reaches the compiled graph; lr 0 freezes the parameters
    opt.param_groups[0]["lr"] = 0.0
    before = [_np(p).copy() for p in ours.parameters()]
    before_momentum = [_np(opt.state[p]["momentum_buffer"]).copy()
                       for p in ours.parameters()]
    exe(x=x, y=y)
    for b, p in zip(before, ours.parameters()):
        np.testing.assert_array_equal(_np(p), b)
    assert not all(np.array_equal(_np(opt.state[p]["momentum_buffer"]), m)
                   for p, m in zip(ours.parameters(), before_momentum))


def _cosine(base, t, t_max=4, eta_min=0.2):
    return eta_min + (base - eta_min) * (1 + np.cos(np.pi * t / t_max)) / 2


CLOSED_FORMS = [   # name, arguments, lr as a function of (base lr, epoch)
    ("StepLR", dict(step_size=2, gamma=0.5), lambda b, t: b * 0.5 ** (t // 2)),
    ("MultiStepLR", dict(milestones=[1, 4], gamma=0.1),
     lambda b, t: b * 0.1 ** ((t >= 1) + (t >= 4))),
    ("ExponentialLR", dict(gamma=0.5), lambda b, t: b * 0.5 ** t),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.2), _cosine),
    ("LinearLR", dict(start_factor=0.25, total_iters=3),
     lambda b, t: b * (0.25 + 0.75 * min(t, 3) / 3)),
]


@pytest.mark.parametrize("name,kwargs,lr", CLOSED_FORMS, ids=[c[0] for c in CLOSED_FORMS])
def test_scheduler_closed_forms(name, kwargs, lr):
    """The documented schedules (base lr 1 and 2 in two groups), without an oracle."""
    a, b = nn.Parameter(np.zeros(1)), nn.Parameter(np.zeros(1))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 2.0}], lr=1.0)
    s = getattr(sched, name)(opt, **kwargs)
    for epoch in range(7):
        got = [g["lr"] for g in opt.param_groups]
        assert s.get_last_lr() == got
        np.testing.assert_allclose(got, [lr(1.0, epoch), lr(2.0, epoch)], rtol=1e-12,
                                   atol=1e-15, err_msg=f"epoch {epoch}")
        opt.step()
        s.step()


def test_reduce_lr_on_plateau_patience_cooldown_and_min_lr():
    opt = optim.SGD([nn.Parameter(np.zeros(1))], lr=1.0)
    s = sched.ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1, min_lr=0.2)
    lrs = []
    for metric in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6]:
        s.step(metric)
        lrs.append(opt.param_groups[0]["lr"])
    # two bad epochs reduce; the cooldown epoch after a reduction does not count as bad
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2, 0.2]


OPTIMIZER_MODES = ["eager", "graph", "compiled"]


def _train_in_mode(mode, name, kwargs, steps=4, groups=False):
    """Loss curve and final parameters of ``steps`` training steps in one mode."""
    model, _ = _models()
    x, y = _data()
    if groups:
        params = [{"params": model[0].parameters(), "lr": kwargs["lr"] * 3},
                  {"params": model[2].parameters()}]
    else:
        params = model.parameters()
    opt = getattr(optim, name)(params, **kwargs)
    losses = []
    if mode == "graph":
        g = dg.Graph("train")
        with g:
            loss_v = nn.functional.mse_loss(model(dg.placeholder("x", ("N", 3), "float64")),
                                            dg.placeholder("y", ("N", 2), "float64"))
            opt.minimize(loss_v)
        exe = g.compile(outputs=[loss_v])
    compiled = dg.compile(lambda a, b: nn.functional.mse_loss(model(a), b))
    for step in range(steps):
        xb, yb = x[step % 2:], y[step % 2:]              # two batch sizes
        if mode == "graph":
            losses.append(float(exe(x=xb, y=yb)[0]))
            continue
        opt.zero_grad()
        fn = compiled if mode == "compiled" else (
            lambda a, b: nn.functional.mse_loss(model(a), b))
        loss = fn(dg.tensor(xb), dg.tensor(yb))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {k: _np(v).copy() for i, p in enumerate(model.parameters())
             for k, v in ((f"{i}.{k}", v) for k, v in opt.state[p].items())}
    return losses, [_np(p).copy() for p in model.parameters()], state


@pytest.mark.parametrize("config", CONFIGS + [("SGD", dict(lr=0.1, momentum=0.9)),
                                              ("Adam", dict(lr=0.05))],
                         ids=[_config_id(c) for c in CONFIGS] + ["SGD-groups", "Adam-groups"])
def test_every_optimizer_gives_the_same_numbers_in_three_modes(config, request):
    """step() eagerly, step() after a dg.compile'd forward, and minimize() in one graph."""
    name, kwargs = config
    groups = request.node.callspec.id.endswith("groups")
    runs = {m: _train_in_mode(m, name, kwargs, groups=groups) for m in OPTIMIZER_MODES}
    losses, params, state = runs["eager"]
    if not kwargs.get("maximize"):
        assert losses[-1] < losses[0]
    for mode in ("graph", "compiled"):
        np.testing.assert_allclose(runs[mode][0], losses, rtol=1e-11, err_msg=mode)
        for a, b in zip(runs[mode][1], params):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14, err_msg=mode)
        assert sorted(runs[mode][2]) == sorted(state)
        for k, v in state.items():
            np.testing.assert_allclose(runs[mode][2][k], v, rtol=1e-11, atol=1e-14,
                                       err_msg=f"{mode} slot {k}")


def test_optimizer_repr():
    ours, _ = _two_group_optimizers()
    text = repr(ours)
    assert text.startswith("SGD (\nParameter Group 0\n") and "    lr: 0.05" in text


_SGD_SETTINGS = [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.5),
                 dict(momentum=0.9, nesterov=True), dict(weight_decay=0.05),
                 dict(momentum=0.5, weight_decay=0.05, maximize=True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("settings", _SGD_SETTINGS, ids=lambda d: "-".join(d) or "plain")
def test_sgd_step_program_gives_the_rules_bits(monkeypatch, dtype, settings):
    """SGD's eager step runs its rule as one planned program per parameter group (the
    backend's ``out=`` forms, the new values written into the parameter's and slots' own
    arrays) with exactly the bits of the rule run op by op (``step_program = False``); the
    version counters move as they did; ``.grad`` is untouched."""
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((7, 5)).astype(dtype)
    b0 = rng.standard_normal(5).astype(dtype)
    grads = [(rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal(5).astype(dtype))
             for _ in range(3)]

    def run(program):
        monkeypatch.setattr(optim.SGD, "step_program", program)
        w = dg.tensor(w0.copy(), requires_grad=True)
        b = dg.tensor(b0.copy(), requires_grad=True)
        arrays = (w.array, b.array)
        opt = optim.SGD([w, b], lr=0.1, **settings)
        versions = []
        for k, (gw, gb) in enumerate(grads):
            w.grad, b.grad = dg.tensor(gw.copy()), dg.tensor(gb.copy())
            opt.param_groups[0]["lr"] = 0.1 / (k + 1)       # changed between steps
            opt.step()
            versions.append((w._version[0], b._version[0]))
            assert w.grad.numpy().tobytes() == gw.tobytes()  # the gradient is untouched
        if program:
            assert (w.array, b.array) == arrays and "_programs" in vars(opt)  # in place
        slots = [opt.state[t][k].numpy().tobytes() for t in (w, b) for k in ("step",
                                                                               "momentum_buffer")]
        monkeypatch.undo()
        return [w.detach().numpy().copy(), b.detach().numpy().copy()], versions, slots

    fast, v_fast, s_fast = run(True)
    slow, v_slow, s_slow = run(False)
    assert [f.tobytes() for f in fast] == [s.tobytes() for s in slow]
    assert v_fast == v_slow and s_fast == s_slow


def test_sgd_step_program_follows_parameters_and_settings():
    """The program is rebuilt when a parameter has no gradient this step, or a setting
    changes; a parameter whose gradient is None is left alone."""
    w = dg.tensor(np.ones(3, np.float32), requires_grad=True)
    b = dg.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = optim.SGD([w, b], lr=0.5)
    w.grad = dg.tensor(np.full(3, 2.0, np.float32))
    opt.step()
    np.testing.assert_array_equal(w.detach().numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(b.detach().numpy(), [1.0, 1.0])
    b.grad = dg.tensor(np.full(2, 4.0, np.float32))
    opt.param_groups[0]["weight_decay"] = 0.5
    opt.step()      # w: 0 - 0.5 * (2 + 0.5 * 0); b: 1 - 0.5 * (4 + 0.5 * 1)
    np.testing.assert_array_equal(w.detach().numpy(), [-1.0, -1.0, -1.0])
    np.testing.assert_array_equal(b.detach().numpy(), [-1.25, -1.25])


def test_plain_sgd_in_place_leaves_grad_and_respects_record():
    """The in-place step never writes ``.grad``; inside ``record()`` the ops are recorded
    (the rule runs), so a compiled training step still updates the weight."""
    w = dg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    w.grad = dg.tensor(np.full(3, 2.0, np.float32))
    opt.step()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(w.detach().numpy(), [0.0, 0.0, 0.0])
    with dg.record(bind=True) as rec:
        opt.step()
    assert any(n.op.name == "sub" for n in rec.graph.nodes)
    np.testing.assert_array_equal(w.detach().numpy(), [-1.0, -1.0, -1.0])


def test_sgd_step_program_is_built_once_and_follows_replaced_slots(monkeypatch):
    """One program for repeated steps; a momentum buffer replaced by the user is the one the
    next step reads and writes (as the rule run op by op does)."""
    w = dg.tensor(np.ones(3), requires_grad=True)
    opt = optim.SGD([w], lr=0.5, momentum=0.5)
    built = []
    build = optim.SGD._build_program
    monkeypatch.setattr(optim.SGD, "_build_program",
                        lambda self, *a: built.append(1) or build(self, *a))
    for _ in range(3):
        w.grad = dg.tensor(np.full(3, 2.0))
        opt.step()
    assert built == [1]
    buf = dg.tensor(np.full(3, 10.0))
    opt.state[w]["momentum_buffer"] = buf
    before = w.detach().numpy().copy()
    opt.step()      # buf = 10 * 0.5 + 2 = 7; w -= 0.5 * 7
    assert built == [1, 1]
    np.testing.assert_array_equal(buf.numpy(), np.full(3, 7.0))
    np.testing.assert_array_equal(w.detach().numpy(), before - 3.5)


def test_sgd_step_program_is_rebuilt_for_other_gradient_and_parameter_arrays(monkeypatch):
    """The step program's prepared call declines a gradient of another dtype or a parameter
    array of another shape, and the program is built anew for them (the values those of
    the rule run op by op)."""
    w = dg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    built = []
    build = optim.SGD._build_program
    monkeypatch.setattr(optim.SGD, "_build_program",
                        lambda self, *a: built.append(1) or build(self, *a))
    w.grad = dg.tensor(np.full(3, 2.0, np.float32))
    opt.step()
    opt.step()
    assert built == [1]
    w.grad = dg.tensor(np.full(3, 0.5, np.float64))
    opt.step()      # 1 - 2 * 0.5 * 2 - 0.5 * 0.5
    assert built == [1, 1] and w.dtype == "float32"
    np.testing.assert_array_equal(w.detach().numpy(), np.full(3, -1.25, np.float32))
    w.array = np.zeros(4, np.float32)
    w.grad = dg.tensor(np.full(4, 1.0, np.float32))
    opt.step()
    assert built == [1, 1, 1]
    np.testing.assert_array_equal(w.detach().numpy(), np.full(4, -0.5, np.float32))
