"""An LSTM training step three ways, side by side in one run: ``nn.LSTM`` on ``dg.scan``
(graph mode, O2), the same LSTM unrolled into one graph (a Python loop over time, O2), and
PyTorch's ``nn.LSTM`` (eager, CPU).

Each step is forward, mean-squared-error loss, backward and an SGD update, on the same
weights and data; the losses of the three must agree. Reported per contender:

- first call: building the graph, compiling it and running the first step (PyTorch: the
  first step);
- step: the median time of the following steps;
- memory: the memory plan's arena bytes of the duograph executables (the buffers of the
  top-level graph; a scan's body buffers are made by its kernel per step and are not in
  it), and the peak bytes numpy allocated during one step (tracemalloc; PyTorch's own
  allocations are not traced, so its cell is empty);
- nodes: the number of top-level nodes of the optimised graph.

    python benchmarks/lstm_scan.py [--seq 32] [--batch 16] [--hidden 32] [--steps 10]
                                   [--torch-threads N]
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


def duograph_contender(kind, state, x, target, lr, steps):
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
    exe = g.compile(outputs=[loss], passes="O2")
    losses = [float(exe(x=x, t=target)[0])]
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps - 1):
        t1 = time.perf_counter()
        losses.append(float(exe(x=x, t=target)[0]))
        times.append(time.perf_counter() - t1)
    tracemalloc.start()
    exe(x=x, t=target)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    plan = exe.memory_plan
    arena = int(plan.arena_bytes) if plan is not None else None
    return dict(first=first, step=float(np.median(times)), losses=losses, arena=arena,
                peak=peak, nodes=len(exe.graph.nodes) if hasattr(exe, "graph") else None)


def torch_contender(tm, x, target, lr, steps):
    import torch
    t0 = time.perf_counter()
    opt = torch.optim.SGD(tm.parameters(), lr=lr)
    xs, ts = torch.tensor(x), torch.tensor(target)
    losses, times = [], []
    for k in range(steps):
        t1 = time.perf_counter()
        opt.zero_grad()
        loss = ((tm(xs)[0] - ts) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if k == 0:
            first = time.perf_counter() - t0
        else:
            times.append(time.perf_counter() - t1)
    return dict(first=first, step=float(np.median(times)), losses=losses, arena=None,
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
    res = {"scan O2": duograph_contender("scan", state, x, target, lr, args.steps),
           "unrolled O2": duograph_contender("unrolled", state, x, target, lr, args.steps),
           "torch": torch_contender(tm, x, target, lr, args.steps)}
    ref = res["torch"]["losses"]
    for name, r in res.items():
        np.testing.assert_allclose(r["losses"], ref, rtol=1e-8, err_msg=name)
    print(f"LSTM training step: seq {args.seq}, batch {args.batch}, input {args.input}, "
          f"hidden {args.hidden}, float64, {args.steps} steps (losses agree to 1e-8)")
    print(f"{'':<12} {'first call':>11} {'step':>10} {'step/torch':>10} {'arena':>10} "
          f"{'numpy peak':>11} {'nodes':>6}")
    for name, r in res.items():
        mb = (lambda b: "" if b is None else f"{b / 2**20:.2f} MB")
        print(f"{name:<12} {r['first'] * 1e3:9.1f} ms {r['step'] * 1e3:7.2f} ms "
              f"{r['step'] / res['torch']['step']:9.2f}x {mb(r['arena']):>10} "
              f"{mb(r['peak']):>11} {'' if r['nodes'] is None else r['nodes']:>6}")
    s, u = res["scan O2"], res["unrolled O2"]
    print(f"scan / unrolled: first call {s['first'] / u['first']:.2f}x, step "
          f"{s['step'] / u['step']:.2f}x")


if __name__ == "__main__":
    main()
