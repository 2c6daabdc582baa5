"""Cost of one ``dg.compile``d call (guard checks, lookup, replay), side by side in one run.

Three workloads on tiny tensors, where the time is almost all overhead:

- ``chain``: a plain function, 20 elementwise ops on shape (16,), reading two globals;
- ``mlp``: a compiled ``nn.Sequential`` (Linear-ReLU-Linear-ReLU-Linear, 16 wide), whose
  guards cover every submodule's attributes, parameters and hooks;
- ``closure``: a lambda over that module (the module reached through a closure cell).

Each is timed as the compiled call and as the forward executable it replays
(``Executable.run`` with the same feeds), and printed as microseconds and as the ratio
compiled / executable; the number of Python guards of the specialisation is shown too.

    python benchmarks/compile_overhead.py [--repeat 7] [--number 2000]
"""
from __future__ import annotations

import argparse
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402

SCALE = 0.5
SHIFT = 1.0


def chain(x):
    y = x
    for _ in range(5):
        y = (y * SCALE + SHIFT).tanh() * x
    return y


def best_of(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def measure(name, fast, args, repeat, number):
    with dg.no_grad():
        fast(*args)
        fast(*args)
        spec = fast._last
        feeds = {n: t.array for n, t in zip(spec.input_names, args)}
        t_call = best_of(lambda: fast(*args), repeat, number)
        t_exe = best_of(lambda: spec.forward.run(feeds), repeat, number)
    guards = len(getattr(spec, "guards", ()) or ())
    print(f"{name:<10} {t_call * 1e6:9.2f} us {t_exe * 1e6:9.2f} us {t_call / t_exe:7.2f}x "
          f"{guards:7d}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    a = parser.parse_args()
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal(16).astype(np.float32))
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 16))
    xb = dg.tensor(rng.standard_normal((4, 16)).astype(np.float32))
    print(f"{'workload':<10} {'compiled':>12} {'executable':>12} {'ratio':>8} {'guards':>7}")
    measure("chain", dg.compile(chain), (x,), a.repeat, a.number)
    measure("mlp", dg.compile(model), (xb,), a.repeat, a.number)
    measure("closure", dg.compile(lambda t: model(t)), (xb,), a.repeat, a.number)


if __name__ == "__main__":
    main()
