"""Graph mode (define-then-run): a 2-layer MLP regression trained by one training-step graph.

The whole step -- forward pass, loss, symbolic gradients and the SGD update of every weight --
is ONE graph. The weights are state (``dg.variable``): the executable keeps them between
calls and ``g.update`` binds their new values, so each call of the executable is one step.

    python examples/graph_mode.py
"""
from __future__ import annotations

import numpy as np

import duograph as dg

HIDDEN = 32
STEPS = 500
LEARNING_RATE = 0.2


def make_data(rng: np.random.Generator, n: int = 256):
    """Synthetic regression: y = sin(2 x0) + 0.5 x1^2, plus a little noise."""
    x = rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32)
    y = np.sin(2.0 * x[:, :1]) + 0.5 * x[:, 1:] ** 2
    y = y + 0.01 * rng.standard_normal(y.shape)
    return x, y.astype(np.float32)


def build_train_step(rng: np.random.Generator) -> tuple:
    """The training-step graph and its loss Value."""
    g = dg.Graph("mlp_train_step")
    with g:
        # Data: "N" is a symbolic batch size, bound by the feeds at run time.
        x = dg.placeholder("x", shape=("N", 2))
        y = dg.placeholder("y", shape=("N", 1))
        lr = dg.placeholder("lr", shape=())
        # Weights: state that persists between runs.
        w1 = dg.variable("w1", rng.standard_normal((2, HIDDEN)).astype(np.float32) * 0.7)
        b1 = dg.variable("b1", np.zeros(HIDDEN, np.float32))
        w2 = dg.variable("w2", rng.standard_normal((HIDDEN, 1)).astype(np.float32) * 0.2)
        b2 = dg.variable("b2", np.zeros(1, np.float32))
        params = [w1, b1, w2, b2]

        hidden = dg.tanh(x @ w1 + b1)
        prediction = hidden @ w2 + b2
        loss = dg.mean((prediction - y) ** 2)

        grads = dg.grad(loss, params)
        for param, grad in zip(params, grads):
            g.update(param, param - lr * grad)
    g.outputs = [loss]      # what g.compile() returns by default
    return g, loss


def main() -> float:
    rng = np.random.default_rng(0)
    x, y = make_data(rng)
    g, loss = build_train_step(rng)
    g.verify()
    print(g)
    step = g.compile()
    print(f"\n{step}\n")
    first = None
    for i in range(STEPS + 1):
        (loss_value,) = step(x=x, y=y, lr=LEARNING_RATE)   # one SGD step per call
        first = float(loss_value) if first is None else first
        if i % 100 == 0:
            print(f"step {i:4d}  loss {float(loss_value):.5f}")
    final = float(loss_value)
    print(f"\nloss {first:.4f} -> {final:.4f}; the trained weights are in step.state: "
          f"{sorted(step.state)}")
    assert final < 0.01 and final < first / 10, f"training did not converge: {first} -> {final}"
    return final


if __name__ == "__main__":
    main()
