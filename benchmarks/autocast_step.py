"""A bfloat16-autocast training step against float32, duograph and PyTorch side by side.

The MLP of ``benchmarks/eager_step.py`` (784-H-H-10, ReLU, cross-entropy, plain SGD) on the
same weights in both frameworks; one step is ``zero_grad``, the forward and loss (inside
``autocast("cpu", bfloat16)`` or not), ``backward`` and ``optimizer.step()``. Modes are timed
in alternating rounds (best and median of ``--rounds``, each the mean of ``--number`` steps),
so the ratios are measured under the same load. Also the bare products: a float32 matmul
against bfloat16 (ml_dtypes' own matmul, and duograph's kernel, which upcasts and rounds)
and float16 (numpy's, no BLAS, against duograph's). And elementwise ops and a reduction
(add, tanh, var over rows) on a batch x hidden array: float32, duograph's bfloat16/float16
(computed in float32 in cache-sized chunks, rounded once: ``runtime/cpu/half.py``), the
numpy/ml_dtypes loops duograph used before, and PyTorch's bfloat16 where installed.
``--only elementwise`` runs that table alone.

    python benchmarks/autocast_step.py [--batch 256] [--hidden 1024] [--rounds 5]
        [--number 5] [--torch-threads 1] [--only step|elementwise] [--json out.json]

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


def _step_and_matmul(args, torch) -> dict:

    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    weights = _weights(args.hidden)
    fns = {"dg_f32": _dg_step(weights, x, y, False), "dg_bf16": _dg_step(weights, x, y, True)}
    if torch is not None:
        fns["torch_f32"] = _torch_step(torch, weights, x, y, False)
        fns["torch_bf16"] = _torch_step(torch, weights, x, y, True)
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

    print(f"training step, MLP 784-{n}-{n}-10 (best / median ms):")
    for k, v in step.items():
        print(f"  {k:10s} {v['best_ms']:9.2f} {v['median_ms']:9.2f}")
    print(f"  ratio bf16/f32: duograph {step['dg_bf16']['best_ms'] / step['dg_f32']['best_ms']:.2f}"
          + (f", PyTorch {step['torch_bf16']['best_ms'] / step['torch_f32']['best_ms']:.2f}"
             if torch is not None else ""))
    print(f"matmul ({args.batch}x{n} @ {n}x{n}) best / median ms:")
    for k, v in mm.items():
        print(f"  {k:10s} {v['best_ms']:9.2f} {v['median_ms']:9.2f}")
    return {"step": step, "matmul": mm}


def _elementwise(args, torch) -> dict:
    """add, tanh and var over rows: float32, duograph's half kernels, the numpy/ml_dtypes
    loops, PyTorch's bfloat16."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((args.batch, args.hidden)).astype(np.float32)
    b = rng.standard_normal((args.batch, args.hidden)).astype(np.float32)
    table = {}
    for label, dtype in (("bf16", ml_dtypes.bfloat16), ("f16", np.float16)):
        ah, bh = a.astype(dtype), b.astype(dtype)
        ta, tb = dg.tensor(ah), dg.tensor(bh)
        fns = {"f32_dg": None, f"{label}_dg": None, f"{label}_numpy": None}
        for op in ("add", "tanh", "var"):
            t32a, t32b = dg.tensor(a), dg.tensor(b)
            fns = {
                "f32_dg": _op_call(op, t32a, t32b),
                f"{label}_dg": _op_call(op, ta, tb),
                f"{label}_numpy": {"add": lambda: ah + bh, "tanh": lambda: np.tanh(ah),
                                   "var": lambda: ah.var(axis=1, ddof=1)}[op]}
            if torch is not None and label == "bf16":
                xa = torch.from_numpy(a).to(torch.bfloat16)
                xb = torch.from_numpy(b).to(torch.bfloat16)
                fns["bf16_torch"] = {"add": lambda: xa + xb, "tanh": lambda: torch.tanh(xa),
                                     "var": lambda: xa.var(dim=1)}[op]
            table[f"{op}_{label}"] = _time(fns, args.rounds, args.number)
    print(f"elementwise ({args.batch}x{args.hidden}), best ms and ratio to float32:")
    for key, row in table.items():
        base = row["f32_dg"]["best_ms"]
        print(f"  {key:10s} " + "  ".join(f"{k} {v['best_ms']:.3f} ({v['best_ms'] / base:.2f}x)"
                                          for k, v in row.items()))
    return table


def _op_call(op: str, x, y):
    if op == "add":
        return lambda: x + y
    if op == "tanh":
        return lambda: dg.tanh(x)
    return lambda: x.var(1)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", choices=("step", "elementwise"), default=None)
    args = ap.parse_args(argv)
    result = {"settings": vars(args), "load": _common.load(),
              "openblas_threads": _common.blas_threads()}
    try:
        import torch
        torch.set_num_threads(args.torch_threads)
    except ImportError:
        torch = None
    print(f"settings: batch {args.batch}, hidden {args.hidden}, {args.rounds} rounds x "
          f"{args.number} calls, torch threads {args.torch_threads}, OPENBLAS_NUM_THREADS="
          f"{result['openblas_threads']}, load {result['load'][0]:.1f}")
    if args.only != "elementwise":
        result.update(_step_and_matmul(args, torch))
    if args.only != "step":
        result["elementwise"] = _elementwise(args, torch)
    _common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
