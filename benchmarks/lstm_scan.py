"""An LSTM training step three ways, side by side in one run: ``nn.LSTM`` on ``dg.scan``
(graph mode, O2), the same LSTM unrolled into one graph (a Python loop over time, O2), and
PyTorch's ``nn.LSTM`` (eager, CPU).

Each step is forward, mean-squared-error loss, backward and an SGD update, on the same
weights and data; the losses of the three must agree. Reported per contender:

- first call: building the graph, compiling it and running the first step (PyTorch: the
  first step);
- step: the median of ``--steps`` steps, best over ``--rounds`` rounds that alternate the
  contenders (scan, unrolled, torch, scan, ...), so all three see the same machine load;
- memory: the memory plan's arena bytes of the duograph executables, and for scan the
  arenas of its loop bodies (each planned once and reused by every iteration: ``+ body``);
  and the peak bytes numpy allocated during one step (tracemalloc; PyTorch's own
  allocations are not traced, so its cell is empty);
- nodes: the number of top-level nodes of the optimised graph.

    python benchmarks/lstm_scan.py [--seq 32] [--batch 16] [--hidden 32] [--steps 10]
                                   [--rounds 3] [--torch-threads N] [--json PATH]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph.graphlib import functional as F  # noqa: E402


def unrolled_lstm(m, x):
    """``m`` (a one-layer dg.nn.LSTM) applied with a Python loop over time: the graph it
    builds holds every step's nodes."""
    n = x.shape[1]
    h = F.zeros((n, m.hidden_size), dtype=x.dtype)
    c = F.zeros((n, m.hidden_size), dtype=x.dtype)
    xw = dg.nn.functional.linear(x, m.weight_ih_l0, m.bias_ih_l0)
    step = m._cell(0, 0)
    outs = []
    for t in range(x.shape[0]):
        (h, c), y = step((h, c), xw[t])
        outs.append(y)
    return F.stack(outs)


class DuographContender:
    """One duograph form of the step: built and run once (the first call), then timed."""

    def __init__(self, kind, state, x, target, lr):
        t0 = time.perf_counter()
        m = dg.nn.LSTM(x.shape[2], target.shape[2]).double()
        m.load_state_dict(state)
        opt = dg.optim.SGD(m.parameters(), lr=lr)
        g = dg.Graph(f"lstm_{kind}")
        with g:
            xv = dg.placeholder("x", x.shape, "float64")
            tv = dg.placeholder("t", target.shape, "float64")
            out = m(xv)[0] if kind == "scan" else unrolled_lstm(m, xv)
            loss = dg.mean((out - tv) ** 2)
            opt.minimize(loss)
        self.exe = g.compile(outputs=[loss], passes="O2")
        self.x, self.target = x, target
        self.losses = [self.step()]
        self.first = time.perf_counter() - t0

    def step(self):
        return float(self.exe(x=self.x, t=self.target)[0])

    def report(self):
        exe = self.exe
        tracemalloc.start()
        self.step()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        plan = exe.memory_plan
        regions = getattr(exe, "regions", None)
        return dict(first=self.first, losses=self.losses, peak=peak,
                    arena=int(plan.arena_bytes) if plan is not None else None,
                    body_arena=regions.arena_bytes() if regions is not None else None,
                    nodes=len(exe.graph.nodes))


class TorchContender:
    def __init__(self, tm, x, target, lr):
        import torch
        t0 = time.perf_counter()
        self.tm = tm
        self.opt = torch.optim.SGD(tm.parameters(), lr=lr)
        self.xs, self.ts = torch.tensor(x), torch.tensor(target)
        self.losses = [self.step()]
        self.first = time.perf_counter() - t0

    def step(self):
        self.opt.zero_grad()
        loss = ((self.tm(self.xs)[0] - self.ts) ** 2).mean()
        loss.backward()
        self.opt.step()
        return loss.item()

    def report(self):
        return dict(first=self.first, losses=self.losses, arena=None, body_arena=None,
                    peak=None, nodes=None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--input", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of --steps steps per contender, alternating contenders")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    import torch
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    tm = torch.nn.LSTM(args.input, args.hidden).double()
    state = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.seq, args.batch, args.input))
    target = rng.standard_normal((args.seq, args.batch, args.hidden))
    lr = 0.1
    who = {"scan O2": DuographContender("scan", state, x, target, lr),
           "unrolled O2": DuographContender("unrolled", state, x, target, lr),
           "torch": TorchContender(tm, x, target, lr)}
    best = {name: float("inf") for name in who}
    for _ in range(max(1, args.rounds)):
        for name, c in who.items():
            times = []
            for _ in range(max(1, args.steps - 1)):
                t1 = time.perf_counter()
                c.losses.append(c.step())
                times.append(time.perf_counter() - t1)
            best[name] = min(best[name], float(np.median(times)))
    res = {}
    for name, c in who.items():
        res[name] = c.report()
        res[name]["step"] = best[name]
    ref = res["torch"]["losses"]
    for name, r in res.items():
        np.testing.assert_allclose(r["losses"], ref, rtol=1e-8, err_msg=name)
    print(f"LSTM training step: seq {args.seq}, batch {args.batch}, input {args.input}, "
          f"hidden {args.hidden}, float64, {args.rounds} rounds of {args.steps - 1} steps "
          f"(losses agree to 1e-8)")
    print(f"{'':<12} {'first call':>11} {'step':>10} {'step/torch':>10} {'arena':>20} "
          f"{'numpy peak':>11} {'nodes':>6}")
    for name, r in res.items():
        mb = (lambda b: "" if b is None else f"{b / 2**20:.2f} MB")
        arena = mb(r["arena"])
        if r["body_arena"]:
            arena += f" + {mb(r['body_arena'])} body"
        print(f"{name:<12} {r['first'] * 1e3:9.1f} ms {r['step'] * 1e3:7.2f} ms "
              f"{r['step'] / res['torch']['step']:9.2f}x {arena:>20} "
              f"{mb(r['peak']):>11} {'' if r['nodes'] is None else r['nodes']:>6}")
    s, u = res["scan O2"], res["unrolled O2"]
    print(f"scan / unrolled: first call {s['first'] / u['first']:.2f}x, step "
          f"{s['step'] / u['step']:.2f}x")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({name: {k: v for k, v in r.items() if k != "losses"}
                       for name, r in res.items()}, f, indent=1)


if __name__ == "__main__":
    main()
