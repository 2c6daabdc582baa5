"""Sequence classification with nn.LSTM (built on dg.scan), trained in eager, compiled and
graph mode with the same model code.

The data is generated: noisy sequences of 12 steps whose shape says the class (0: a rising
ramp, 1: a falling ramp, 2: a bump in the middle). The LSTM reads a sequence, a Linear
layer classifies its last hidden state.

    python examples/train_sequence.py [--mode all|eager|compiled|graph] [--steps 40]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402

LENGTH, CLASSES = 12, 3


def make_data(n: int, seed: int):
    """``n`` sequences, shape (LENGTH, n, 1) (time first, as nn.LSTM), and their labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, n)
    t = np.linspace(-1.0, 1.0, LENGTH)
    shapes = np.stack([t, -t, 1.5 * np.exp(-8 * t * t) - 0.5])
    x = shapes[y] + rng.normal(0, 1.0, (n, LENGTH))
    return x.T[:, :, None].astype(np.float32), y.astype(np.int64)


class Classifier(nn.Module):
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x):
        _, (h, _) = self.lstm(x)           # h: (1, N, hidden)
        return self.head(h[0])


def train(mode: str, steps: int, seed: int = 0):
    dg.manual_seed(seed)
    model = Classifier()
    opt = dg.optim.Adam(model.parameters(), lr=0.03)
    loss_fn = nn.CrossEntropyLoss()
    x, y = make_data(192, seed)
    xt, yt = make_data(192, seed + 1)
    if mode == "graph":
        g = dg.Graph("sequence_train_step")
        with g:
            loss = loss_fn(model(dg.placeholder("x", x.shape)),
                           dg.placeholder("y", y.shape, "int64"))
            opt.minimize(loss)
        exe = g.compile(outputs=[loss], passes="O2")
        step = (lambda: float(exe(x=x, y=y)[0]))
    else:
        fn = (lambda a, b: loss_fn(model(a), b))
        fn = dg.compile(fn) if mode == "compiled" else fn
        xs, ys = dg.tensor(x), dg.tensor(y)

        def step():
            opt.zero_grad()
            loss = fn(xs, ys)
            loss.backward()
            opt.step()
            return loss.item()
    losses = [step() for _ in range(steps)]
    with dg.no_grad():
        pred = model(dg.tensor(xt)).numpy().argmax(1)
    return losses, float((pred == yt).mean())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("all", "eager", "compiled", "graph"), default="all")
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args(argv)
    modes = ("eager", "compiled", "graph") if args.mode == "all" else (args.mode,)
    for mode in modes:
        losses, acc = train(mode, args.steps)
        print(f"{mode:<9} loss {losses[0]:.3f} -> {losses[-1]:.3f}, held-out accuracy "
              f"{acc:.1%}")


if __name__ == "__main__":
    main()
