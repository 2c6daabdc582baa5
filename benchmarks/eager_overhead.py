"""Per-op cost of eager execution on tiny tensors, side by side in one run.

A chain of small elementwise ops on shape (16,) tensors, where the arrays are so small that
the time is almost all framework overhead (dispatch, type inference, autograd recording).
Measured for duograph eager, plain numpy and PyTorch eager (when installed), each mode
written once for both frameworks: forward on tensors that need no grad, forward inside
``no_grad()`` on tensors that require it, forward with the tape, and forward + backward;
printed as microseconds per op and as ratios to PyTorch and numpy.

    python benchmarks/eager_overhead.py [--ops 32] [--repeat 7] [--number 200]
        [--timer wall|cpu] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
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


MODES = ("fwd", "fwd_ctx", "fwd_grad", "fwd_bwd")
MODE_DOC = {
    "fwd": "forward, tensors that need no grad (no context manager)",
    "fwd_ctx": "forward inside no_grad(), tensors that require grad",
    "fwd_grad": "forward only, tensors that require grad (the tape is recorded)",
    "fwd_bwd": "forward + sum + backward",
}


TIMERS = {"wall": time.perf_counter, "cpu": time.thread_time}


def _timer(fn, number: int, clock=time.perf_counter) -> float:
    return timeit.timeit(fn, number=number, timer=clock) / number


def _cases(fw, n_ops: int, xs, ws):
    """The four modes' closures for one framework (``dg`` or ``torch``), built alike."""
    x, w = fw.tensor(xs), fw.tensor(ws)
    xg, wg = fw.tensor(xs, requires_grad=True), fw.tensor(ws, requires_grad=True)

    def fwd():
        chain(x, w, n_ops)

    def fwd_ctx():
        with fw.no_grad():
            chain(xg, wg, n_ops)

    def fwd_grad():
        chain(xg, wg, n_ops)

    def fwd_bwd():
        xg.grad = wg.grad = None
        chain(xg, wg, n_ops).sum().backward()
    return {"fwd": fwd, "fwd_ctx": fwd_ctx, "fwd_grad": fwd_grad, "fwd_bwd": fwd_bwd}


def run(n_ops: int = 32, repeat: int = 7, number: int = 200, timer: str = "wall") -> dict:
    """Best-of-``repeat`` seconds per chain for every framework and mode. The rounds
    alternate (each round times every framework and mode once), so every figure sees the
    same machine load; duograph and PyTorch run the same closures (``_cases``). ``timer``
    "cpu" reads this thread's CPU time instead of the wall clock: on a machine shared with
    other work it leaves out the time the core was given to other processes (PyTorch runs
    on this thread too: ``set_num_threads(1)``)."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(16).astype(np.float32)
    ws = rng.standard_normal(16).astype(np.float32)
    results = {"n_ops": n_ops, "shape": [16], "timer": timer}
    clock = TIMERS[timer]
    cases = {"duograph": _cases(dg, n_ops, xs, ws)}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        cases["torch"] = _cases(torch, n_ops, xs, ws)
        results["torch_version"] = torch.__version__
    cases["numpy"] = {"fwd": lambda: numpy_forward(xs, ws, n_ops),
                      "fwd_bwd": lambda: numpy_forward_backward(xs, ws, n_ops)}
    for fns in cases.values():          # warm up: plans, caches
        for fn in fns.values():
            fn()
    best: dict = {}
    for _ in range(repeat):
        for mode in MODES:
            for name, fns in cases.items():
                if mode in fns:
                    key = f"{name}_{mode}"
                    t = _timer(fns[mode], number, clock)
                    best[key] = min(best.get(key, t), t)
    results.update(best)
    return results


def report(r: dict) -> str:
    n = r["n_ops"]
    lines = [f"eager overhead: chain of {n} elementwise ops on float32[16], "
             f"best of alternating rounds, microseconds per op ({r.get('timer', 'wall')} "
             "clock)",
             f"{'mode':<10}{'duograph':>10}{'torch':>10}{'numpy':>10}"
             f"{'dg/torch':>10}{'dg/numpy':>10}"]

    def us(key):
        t = r.get(key)
        return None if t is None else t / n * 1e6

    def col(v):
        return f"{v:10.2f}" if v is not None else f"{'-':>10}"
    for mode in MODES:
        d, t, np_t = us(f"duograph_{mode}"), us(f"torch_{mode}"), us(f"numpy_{mode}")
        lines.append(f"{mode:<10}{col(d)}{col(t)}{col(np_t)}"
                     f"{col(d / t if t else None)}{col(d / np_t if np_t else None)}")
    lines.append("")
    lines += [f"  {mode:<9} {MODE_DOC[mode]}" for mode in MODES]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=32)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall",
                   help="wall clock (default) or this thread's CPU time (a loaded machine)")
    p.add_argument("--json", help="also write the raw figures to this file")
    a = p.parse_args(argv)
    r = run(a.ops, a.repeat, a.number, a.timer)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
