"""A bfloat16-autocast training step against float32, duograph and PyTorch side by side.

The MLP of ``benchmarks/eager_step.py`` (784-H-H-10, ReLU, cross-entropy, plain SGD) on the
same weights in both frameworks; one step is ``zero_grad``, the forward and loss (inside
``autocast("cpu", bfloat16)`` or not), ``backward`` and ``optimizer.step()``. Modes are timed
in alternating rounds (best and median of ``--rounds``, each the mean of ``--number`` steps),
so the ratios are measured under the same load. Also the bare products: a float32 matmul
against bfloat16 (ml_dtypes' own matmul, and duograph's kernel, which upcasts and rounds)
and float16 (numpy's, no BLAS, against duograph's).

    python benchmarks/autocast_step.py [--batch 256] [--hidden 1024] [--rounds 5]
        [--number 5] [--torch-threads 1] [--json out.json]

Run with ``OPENBLAS_NUM_THREADS=1`` for one BLAS thread, as PyTorch's ``--torch-threads 1``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Callable, Dict

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (puts the repository root on sys.path)
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402

LR = 0.01


def _weights(hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = [(hidden, 784), (hidden, hidden), (10, hidden)]
    return [(rng.standard_normal(s).astype(np.float32) / np.sqrt(s[1]),
             np.zeros(s[0], np.float32)) for s in sizes]


def _dg_step(weights, x, y, low: bool) -> Callable:
    model = nn.Sequential(nn.Linear(784, weights[0][0].shape[0]), nn.ReLU(),
                          nn.Linear(*weights[1][0].shape[::-1]), nn.ReLU(),
                          nn.Linear(*weights[2][0].shape[::-1]))
    for layer, (w, b) in zip([model[0], model[2], model[4]], weights):
        layer.weight.data = dg.tensor(w.copy())
        layer.bias.data = dg.tensor(b.copy())
    opt = dg.optim.SGD(model.parameters(), lr=LR)
    xt, yt = dg.tensor(x), dg.tensor(y)

    def step():
        opt.zero_grad()
        with dg.autocast("cpu", enabled=low):
            loss = nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step


def _torch_step(torch, weights, x, y, low: bool) -> Callable:
    tnn = torch.nn
    model = tnn.Sequential(tnn.Linear(784, weights[0][0].shape[0]), tnn.ReLU(),
                           tnn.Linear(*weights[1][0].shape[::-1]), tnn.ReLU(),
                           tnn.Linear(*weights[2][0].shape[::-1]))
    with torch.no_grad():
        for layer, (w, b) in zip([model[0], model[2], model[4]], weights):
            layer.weight.copy_(torch.tensor(w))
            layer.bias.copy_(torch.tensor(b))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    xt, yt = torch.tensor(x), torch.tensor(y)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            loss = tnn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step


def _time(fns: Dict[str, Callable], rounds: int, number: int) -> Dict[str, dict]:
    """Alternating rounds: each round times every function once (``number`` calls), after
    one warm-up call each (plans, caches)."""
    samples = _common.alternate(fns, rounds, number=number)
    return {k: {"best_ms": min(v) * 1e3, "median_ms": statistics.median(v) * 1e3}
            for k, v in samples.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    weights = _weights(args.hidden)
    fns = {"dg_f32": _dg_step(weights, x, y, False), "dg_bf16": _dg_step(weights, x, y, True)}
    try:
        import torch
        torch.set_num_threads(args.torch_threads)
        fns["torch_f32"] = _torch_step(torch, weights, x, y, False)
        fns["torch_bf16"] = _torch_step(torch, weights, x, y, True)
    except ImportError:
        torch = None
    step = _time(fns, args.rounds, args.number)

    n = args.hidden
    a = rng.standard_normal((args.batch, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ab, bb = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    ah, bh = a.astype(np.float16), b.astype(np.float16)
    products = {"f32_numpy": lambda: a @ b, "bf16_numpy": lambda: ab @ bb,
                "bf16_dg": lambda: dg.matmul(dg.tensor(ab), dg.tensor(bb)),
                "f16_dg": lambda: dg.matmul(dg.tensor(ah), dg.tensor(bh))}
    if args.batch * n * n <= 1 << 26:
        products["f16_numpy"] = lambda: ah @ bh          # no BLAS: minutes at large sizes
    mm = _time(products, args.rounds, args.number)

    result = {"settings": vars(args), "load": _common.load(),
              "openblas_threads": _common.blas_threads(),
              "step": step, "matmul": mm}
    print(f"settings: batch {args.batch}, MLP 784-{n}-{n}-10, {args.rounds} rounds x "
          f"{args.number} steps, torch threads {args.torch_threads}, OPENBLAS_NUM_THREADS="
          f"{result['openblas_threads']}, load {result['load'][0]:.1f}")
    print("training step (best / median ms):")
    for k, v in step.items():
        print(f"  {k:10s} {v['best_ms']:9.2f} {v['median_ms']:9.2f}")
    print(f"  ratio bf16/f32: duograph {step['dg_bf16']['best_ms'] / step['dg_f32']['best_ms']:.2f}"
          + (f", PyTorch {step['torch_bf16']['best_ms'] / step['torch_f32']['best_ms']:.2f}"
             if torch is not None else ""))
    print(f"matmul ({args.batch}x{n} @ {n}x{n}) best / median ms:")
    for k, v in mm.items():
        print(f"  {k:10s} {v['best_ms']:9.2f} {v['median_ms']:9.2f}")
    _common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
