"""Learning-rate schedulers against PyTorch's: the lr (and cycled momentum) sequences over
many steps, two parameter groups, chained and sequential compositions, state dicts."""
import math

import numpy as np
import pytest

import duograph as dg
from duograph.optim import lr_scheduler as sched

torch = pytest.importorskip("torch")
tsched = torch.optim.lr_scheduler


def _optimizers(kind="sgd"):
    """Our and torch's optimizer over two parameter groups with different lrs."""
    ours = [dg.nn.Parameter(np.zeros(2, np.float32)), dg.nn.Parameter(np.zeros(3, np.float32))]
    theirs = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    if kind == "adam":
        return (dg.optim.Adam([{"params": [ours[0]]}, {"params": [ours[1]], "lr": 0.01}],
                              lr=0.1),
                torch.optim.Adam([{"params": [theirs[0]]},
                                  {"params": [theirs[1]], "lr": 0.01}], lr=0.1))
    return (dg.optim.SGD([{"params": [ours[0]]}, {"params": [ours[1]], "lr": 0.01}], lr=0.1,
                         momentum=0.9),
            torch.optim.SGD([{"params": [theirs[0]]}, {"params": [theirs[1]], "lr": 0.01}],
                            lr=0.1, momentum=0.9))


def _cos_or_half(epoch):
    return 0.5 if epoch % 3 else math.cos(epoch / 10)


# name -> (factory over (module, optimizer), optimizer kind, steps)
CASES = {
    "lambda": (lambda m, o: m.LambdaLR(o, lambda e: 0.95 ** e), "sgd", 40),
    "lambda_per_group": (lambda m, o: m.LambdaLR(o, [lambda e: 1 / (e + 1), _cos_or_half]),
                         "sgd", 30),
    "multiplicative": (lambda m, o: m.MultiplicativeLR(o, lambda e: 0.9), "sgd", 30),
    "step": (lambda m, o: m.StepLR(o, 3, 0.5), "sgd", 20),
    "multistep": (lambda m, o: m.MultiStepLR(o, [2, 5, 5, 9], 0.3), "sgd", 15),
    "constant": (lambda m, o: m.ConstantLR(o, 0.25, 4), "sgd", 10),
    "linear": (lambda m, o: m.LinearLR(o, 0.2, 0.9, 7), "sgd", 12),
    "exponential": (lambda m, o: m.ExponentialLR(o, 0.9), "sgd", 30),
    "cosine": (lambda m, o: m.CosineAnnealingLR(o, 7, 0.001), "sgd", 40),
    "polynomial": (lambda m, o: m.PolynomialLR(o, 8, 2.0), "sgd", 12),
    "polynomial_default": (lambda m, o: m.PolynomialLR(o), "sgd", 8),
    "warm_restarts": (lambda m, o: m.CosineAnnealingWarmRestarts(o, 5), "sgd", 40),
    "warm_restarts_mult": (lambda m, o: m.CosineAnnealingWarmRestarts(o, 3, 2, 1e-4), "sgd",
                           50),
    "cyclic_sgd": (lambda m, o: m.CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=4), "sgd", 40),
    "cyclic_triangular2": (lambda m, o: m.CyclicLR(o, [0.001, 0.002], 0.05, 3, 5,
                                                   mode="triangular2"), "sgd", 50),
    "cyclic_exp_range_adam": (lambda m, o: m.CyclicLR(o, 0.001, 0.01, 5, mode="exp_range",
                                                      gamma=0.97), "adam", 40),
    "cyclic_custom": (lambda m, o: m.CyclicLR(o, 0.001, 0.01, 4, scale_fn=lambda x: 0.9 ** x,
                                              scale_mode="iterations",
                                              cycle_momentum=False), "sgd", 30),
    "onecycle_sgd": (lambda m, o: m.OneCycleLR(o, [0.5, 0.1], total_steps=30), "sgd", 29),
    "onecycle_adam_linear": (lambda m, o: m.OneCycleLR(o, 0.01, epochs=4, steps_per_epoch=6,
                                                       pct_start=0.25,
                                                       anneal_strategy="linear"), "adam", 23),
    "onecycle_three_phase": (lambda m, o: m.OneCycleLR(o, 0.3, total_steps=20,
                                                       three_phase=True, div_factor=10.0,
                                                       final_div_factor=100.0), "sgd", 19),
    "sequential": (lambda m, o: m.SequentialLR(o, [m.LinearLR(o, 0.1, total_iters=4),
                                                   m.ExponentialLR(o, 0.9)], [4]), "sgd", 25),
    "sequential_three": (lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, 0.5, 3), m.CosineAnnealingLR(o, 6), m.StepLR(o, 2, 0.5)],
        [3, 9]), "sgd", 25),
    "chained": (lambda m, o: m.ChainedScheduler([m.ConstantLR(o, 0.1, 4),
                                                 m.ExponentialLR(o, 0.9)]), "sgd", 20),
    "chained_cosine_step": (lambda m, o: m.ChainedScheduler(
        [m.CosineAnnealingLR(o, 5), m.MultiStepLR(o, [3, 7], 0.5)], optimizer=o), "sgd", 20),
}


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


@pytest.mark.parametrize("name", sorted(CASES))
def test_lr_sequence_matches_torch(name):
    factory, kind, steps = CASES[name]
    ours, theirs = _optimizers(kind)
    s, ts = factory(sched, ours), factory(tsched, theirs)
    np.testing.assert_allclose(s.get_last_lr(), ts.get_last_lr(), rtol=1e-12, atol=1e-15)
    for i in range(steps):
        ours.step()
        theirs.step()
        s.step()
        ts.step()
        np.testing.assert_allclose(s.get_last_lr(), ts.get_last_lr(), rtol=1e-12, atol=1e-15,
                                   err_msg=f"step {i}")
        np.testing.assert_allclose([g["lr"] for g in ours.param_groups],
                                   [g["lr"] for g in theirs.param_groups], rtol=1e-12,
                                   atol=1e-15)
        np.testing.assert_allclose(_momenta(ours), _momenta(theirs), rtol=1e-12,
                                   err_msg=f"momentum at step {i}")


def test_onecycle_past_total_steps_raises_like_torch():
    ours, theirs = _optimizers()
    s, ts = sched.OneCycleLR(ours, 0.1, total_steps=3), tsched.OneCycleLR(theirs, 0.1,
                                                                          total_steps=3)
    for _ in range(3):
        s.step()
        ts.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        ts.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        s.step()


@pytest.mark.parametrize("bad", [dict(), dict(total_steps=0), dict(total_steps=5, pct_start=2.0),
                                 dict(total_steps=5, anneal_strategy="exp"),
                                 dict(epochs=2)])
def test_onecycle_bad_arguments_raise_value_error(bad):
    ours, theirs = _optimizers()
    with pytest.raises(ValueError):
        tsched.OneCycleLR(theirs, 0.1, **bad)
    with pytest.raises(ValueError):
        sched.OneCycleLR(ours, 0.1, **bad)


def test_cycle_momentum_needs_an_optimizer_with_momentum():
    p = dg.nn.Parameter(np.zeros(2, np.float32))
    opt = dg.optim.Adagrad([p], lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        sched.CyclicLR(opt, 0.01, 0.1)
    sched.CyclicLR(opt, 0.01, 0.1, cycle_momentum=False)


def test_warm_restarts_fractional_epochs_match_torch():
    ours, theirs = _optimizers()
    s = sched.CosineAnnealingWarmRestarts(ours, 4, 2)
    ts = tsched.CosineAnnealingWarmRestarts(theirs, 4, 2)
    for epoch in np.arange(0, 20, 0.35):
        s.step(float(epoch))
        ts.step(float(epoch))
        np.testing.assert_allclose(s.get_last_lr(), ts.get_last_lr(), rtol=1e-12)


def test_sequential_and_chained_refuse_bad_children():
    ours, _ = _optimizers()
    other, _ = _optimizers()
    a = sched.ExponentialLR(ours, 0.9)
    with pytest.raises(ValueError, match="milestone"):
        sched.SequentialLR(ours, [a, sched.StepLR(ours, 2)], [2, 4])
    with pytest.raises(ValueError, match="same optimizer"):
        sched.ChainedScheduler([a, sched.StepLR(other, 2)])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        sched.SequentialLR(ours, [a, sched.ReduceLROnPlateau(ours)], [3])


def test_lambda_scheduler_drives_a_graph_mode_training_step():
    """The learning rate is a state input of a graph-mode step: a LambdaLR changes it every
    run without rebuilding the graph."""
    w = dg.nn.Parameter(np.ones(3, np.float32))
    opt = dg.optim.SGD([w], lr=0.5)
    s = sched.LambdaLR(opt, lambda e: 1.0 / (e + 1))
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", (3,), "float32")
        loss = dg.sum(x * w)       # a Parameter used in a graph becomes a state input
        opt.minimize(loss)
    exe = g.compile(outputs=[loss])
    expected = np.ones(3)
    for e in range(4):
        exe(x=np.full(3, 2.0, np.float32))
        expected = expected - 2.0 * 0.5 / (e + 1)
        np.testing.assert_allclose(w.detach().numpy(), expected, rtol=1e-6)
        s.step()
