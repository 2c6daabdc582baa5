"""Per-op cost of eager execution on tiny tensors, side by side in one run.

A chain of small elementwise ops on shape (16,) tensors, where the arrays are so small that
the time is almost all framework overhead (dispatch, type inference, autograd recording).
Measured for duograph eager, plain numpy and PyTorch eager (when installed), forward only
and forward+backward; printed as microseconds per op and as ratios to numpy and PyTorch.

    python benchmarks/eager_overhead.py [--ops 32] [--repeat 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402


def chain(x, w, n_ops: int):
    """n_ops elementwise ops: (x * w + 1).tanh() * x ... (4 ops per round)."""
    y = x
    for _ in range(n_ops // 4):
        y = (y * w + 1.0).tanh() * x
    return y


def numpy_forward(x, w, n_ops: int):
    y = x
    for _ in range(n_ops // 4):
        y = np.tanh(y * w + np.float32(1.0)) * x
    return y


def numpy_forward_backward(x, w, n_ops: int):
    """The same chain with a hand-written backward pass (what autograd must match)."""
    saved = []
    y = x
    for _ in range(n_ops // 4):
        t = np.tanh(y * w + np.float32(1.0))
        saved.append((y, t))
        y = t * x
    g = np.ones_like(y)
    gw = np.zeros_like(w)
    gx = np.zeros_like(x)
    for y_in, t in reversed(saved):
        gx += g * t
        gt = g * x
        ga = gt * (np.float32(1.0) - t * t)
        gw += ga * y_in
        g = ga * w
    gx += g
    return y.sum(), gx, gw


def best_of(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def run(n_ops: int = 32, repeat: int = 7, number: int = 200) -> dict:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(16).astype(np.float32)
    ws = rng.standard_normal(16).astype(np.float32)
    results = {"n_ops": n_ops, "shape": [16]}

    x = dg.tensor(xs)
    w = dg.tensor(ws)
    xg = dg.tensor(xs, requires_grad=True)
    wg = dg.tensor(ws, requires_grad=True)

    def dg_fwd():
        chain(x, w, n_ops)

    def dg_fwd_bwd():
        xg.grad = wg.grad = None
        chain(xg, wg, n_ops).sum().backward()

    results["duograph_fwd"] = best_of(dg_fwd, repeat, number)
    results["duograph_fwd_bwd"] = best_of(dg_fwd_bwd, repeat, number)
    results["numpy_fwd"] = best_of(lambda: numpy_forward(xs, ws, n_ops), repeat, number)
    results["numpy_fwd_bwd"] = best_of(lambda: numpy_forward_backward(xs, ws, n_ops),
                                       repeat, number)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tx = torch.tensor(xs)
        tw = torch.tensor(ws)
        txg = torch.tensor(xs, requires_grad=True)
        twg = torch.tensor(ws, requires_grad=True)

        def torch_fwd():
            with torch.no_grad():
                chain(tx, tw, n_ops)

        def torch_fwd_bwd():
            txg.grad = twg.grad = None
            chain(txg, twg, n_ops).sum().backward()

        results["torch_fwd"] = best_of(torch_fwd, repeat, number)
        results["torch_fwd_bwd"] = best_of(torch_fwd_bwd, repeat, number)
        results["torch_version"] = torch.__version__
    return results


def report(r: dict) -> str:
    n = r["n_ops"]
    lines = [f"eager overhead: chain of {n} elementwise ops on float32[16], "
             "best of repeats, microseconds per op",
             f"{'mode':<12}{'duograph':>10}{'numpy':>10}{'torch':>10}"
             f"{'dg/numpy':>10}{'dg/torch':>10}"]
    for mode in ("fwd", "fwd_bwd"):
        d = r[f"duograph_{mode}"] / n * 1e6
        np_t = r[f"numpy_{mode}"] / n * 1e6
        t = r.get(f"torch_{mode}")
        t_s = f"{t / n * 1e6:10.2f}" if t is not None else f"{'-':>10}"
        ratio_t = f"{d / (t / n * 1e6):10.2f}" if t is not None else f"{'-':>10}"
        lines.append(f"{mode:<12}{d:10.2f}{np_t:10.2f}{t_s}{d / np_t:10.2f}{ratio_t}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=32)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--json", help="also write the raw figures to this file")
    a = p.parse_args(argv)
    r = run(a.ops, a.repeat, a.number)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
