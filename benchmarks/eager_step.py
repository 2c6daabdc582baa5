"""The eager MLP training step split into its parts, duograph against PyTorch, side by side.

The MLP of ``benchmarks/passes.py`` (784-256-256-10, ReLU, cross-entropy, plain SGD) on the
same weights in both frameworks. Each part is timed the same way for both, in alternating
rounds (best of rounds, microseconds):

- ``fwd_nograd``: the forward pass and the loss inside ``no_grad()``;
- ``fwd``: the same with the tape recorded;
- ``fwd_bwd``: ``zero_grad()``, forward, ``loss.backward()``;
- ``step``: all of it and ``optimizer.step()``;
- ``opt_step``: ``optimizer.step()`` alone, on the gradients of the last backward.

    python benchmarks/eager_step.py [--batch 32 128] [--rounds 7] [--number 50]
        [--torch-threads 1] [--parts opt_step ...] [--timer wall|cpu] [--json out.json]

``--timer cpu`` reads this thread's CPU time instead of the wall clock: on a machine shared
with other work it leaves out the time the core was given to other processes (it counts
this thread only: use it with one BLAS thread and ``--torch-threads 1``).

Run with ``OPENBLAS_NUM_THREADS=1`` for one BLAS thread, as PyTorch's ``--torch-threads 1``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402

LR = 0.01
PARTS = ("fwd_nograd", "fwd", "fwd_bwd", "step", "opt_step")
TIMERS = {"wall": time.perf_counter, "cpu": time.thread_time}


def _parts(loss: Callable, opt, no_grad) -> Dict[str, Callable]:
    """The timed parts of one framework's step, from its loss closure, optimizer and
    no-grad context (written once, so both frameworks run the same sequence)."""
    def fwd_nograd():
        with no_grad():
            return loss()

    def fwd_bwd():
        opt.zero_grad()
        loss().backward()

    def step():
        fwd_bwd()
        opt.step()
    return {"fwd_nograd": fwd_nograd, "fwd": loss, "fwd_bwd": fwd_bwd, "step": step,
            "opt_step": opt.step}


def duograph_parts(state: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    model.load_state_dict({k: dg.tensor(v.copy()) for k, v in state.items()})
    xt, yt = dg.tensor(x), dg.tensor(y)
    return _parts(lambda: nn.functional.cross_entropy(model(xt), yt),
                  dg.optim.SGD(model.parameters(), lr=LR), dg.no_grad)


def torch_parts(state: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    xt, yt = torch.tensor(x), torch.tensor(y)
    return _parts(lambda: torch.nn.functional.cross_entropy(model(xt), yt),
                  torch.optim.SGD(model.parameters(), lr=LR), torch.no_grad)


def measure(cands: Dict[str, Dict[str, Callable]], rounds: int, number: int,
            parts=PARTS, clock=time.perf_counter) -> dict:
    """Best time per call (us) of every part of every contender, rounds alternating."""
    best = {c: {p: float("inf") for p in parts} for c in cands}
    for fns in cands.values():
        for _ in range(3):
            fns["step"]()                      # warm: plans, caches, gradients exist
    for _ in range(rounds):
        for part in parts:
            for name, fns in cands.items():
                fn = fns[part]
                t = clock()
                for _ in range(number):
                    fn()
                best[name][part] = min(best[name][part], (clock() - t) / number * 1e6)
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall")
    p.add_argument("--json", help="also write the figures (us) to this file")
    args = p.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(args.torch_threads)
    except ImportError:
        torch = None
    dg.manual_seed(args.seed)
    ref = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    state = {k: np.array(v.numpy(), copy=True) for k, v in ref.state_dict().items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"eager MLP training step by parts, best of {args.rounds} alternating rounds of "
          f"{args.number} calls (us, {args.timer} time); load average at start {load:.2f}")
    out = {}
    for batch in args.batch:
        rng = np.random.default_rng(args.seed)
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        y = rng.integers(0, 10, batch).astype(np.int64)
        cands = {"duograph": duograph_parts(state, x, y)}
        if torch is not None:
            cands["torch"] = torch_parts(state, x, y)
        best = measure(cands, args.rounds, args.number, args.parts, TIMERS[args.timer])
        out[batch] = best
        print(f"batch {batch}")
        print(f"  {'part':12s}{'duograph':>10s}{'torch':>10s}{'ratio':>8s}")
        for part in args.parts:
            d = best["duograph"][part]
            t = best.get("torch", {}).get(part)
            ratio = f"{d / t:8.2f}" if t else f"{'-':>8s}"
            tt = f"{t:10.1f}" if t else f"{'-':>10s}"
            print(f"  {part:12s}{d:10.1f}{tt}{ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(b): v for b, v in out.items()}, f, indent=1)


if __name__ == "__main__":
    main()
