"""What a compiled graph costs above its kernels, side by side in one run: issue 11's three
executable targets, each printed against its target.

- **per kernel** (target <= 0.7 us): an O0 executable of a chain of ``--ops`` tanh ops on
  float32[16] against the same numpy calls in a Python loop; (executable - numpy) / ops is
  the interpreter's overhead per instruction;
- **fixed cost of a call** (target <= 3 us, O0 and O2): a one-op graph (O0 interpreted, O2
  planned) against the bare numpy call; the difference is the fixed cost of a call (feed
  checks, plan lookup, output handling);
- **dg.compile call** (target <= 1.5x): a ``dg.compile``d function (the 20-op chain of
  ``compile_overhead.py``, reading two globals) and a compiled ``nn.Sequential`` MLP,
  against the forward executable each replays (``Executable.run`` with the same feeds):
  the compiled call's time over the executable's, so guard checks, cache lookup and
  wrapping the results must cost at most half the executable's own call;
- **compiled calls near JAX's** (issue 24: O2 <= 1.0x, dg.compile <= 1.3x JAX jit): that
  20-op chain as an O2 executable (``chain20_O2``), as ``dg.compile(chain, passes="O2")``
  (``compile_chain_O2``) and under ``jax.jit`` (``jax_chain``) when JAX is installed (else
  the row says so and has no ratios).

Every contender is timed in interleaved rounds (A B C ... A B C ...), best of the rounds;
the load average is printed with the figures.

    python benchmarks/executable_overhead.py [--ops 100] [--rounds 25] [--number 400]
        [--timer wall|cpu] [--json out.json] [--jax-site DIR]

``--jax-site DIR`` appends a site-packages directory holding JAX to ``sys.path`` after
duograph is imported (another environment's site-packages on PYTHONPATH would come first,
and its editable install of duograph would shadow this checkout's).

For one thread each, as the issue's figures: ``OPENBLAS_NUM_THREADS=1`` and
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import timeit
from typing import Callable, Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402

TARGET_PER_KERNEL = 0.7e-6
TARGET_FIXED = 3e-6
TARGET_COMPILE = 1.5

SCALE = 0.5
SHIFT = 1.0


def chain(x):
    """The dg.compile workload: 20 elementwise ops reading two globals."""
    y = x
    for _ in range(5):
        y = (y * SCALE + SHIFT).tanh() * x
    return y


# "cpu": the process's CPU time (every thread's, so work a library hands to a pool of its
# own is counted), which on a machine shared with other work leaves out the time the cores
# were given to other processes
TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


def interleaved(cands: Dict[str, tuple], rounds: int,
                clock=time.perf_counter) -> Dict[str, float]:
    """Seconds per call of each ``name -> (fn, number)``, best of ``rounds`` interleaved."""
    best = {k: float("inf") for k in cands}
    for _ in range(rounds):
        for name, (fn, number) in cands.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number, timer=clock)
                             / number)
    return best


def _compiled(fast: Callable, args: tuple):
    """(compiled call, executable call) of a ``dg.compile``d function, warmed up."""
    with dg.no_grad():
        fast(*args)
        fast(*args)
    spec = fast._last
    feeds = {n: t.array for n, t in zip(spec.input_names, args)}
    run = spec.forward.run
    return (lambda: fast(*args)), (lambda: run(feeds))


def run(ops: int = 100, rounds: int = 25, number: int = 400, timer: str = "wall") -> dict:
    a = np.ones(16, np.float32)
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", (16,))
        y = x
        for _ in range(ops):
            y = dg.tanh(y)
    chain_o0 = g.compile(outputs=[y], passes="O0")

    def numpy_chain():
        z = a
        for _ in range(ops):
            z = np.tanh(z)
        return z

    one = dg.Graph("one")
    with one:
        x1 = dg.placeholder("x", (16,))
        y1 = dg.tanh(x1)
    call_o0 = one.compile(outputs=[y1], passes="O0")
    call_o2 = one.compile(outputs=[y1], passes="O2")

    rng = np.random.default_rng(0)
    xt = dg.tensor(rng.standard_normal(16).astype(np.float32))
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 16))
    xb = dg.tensor(rng.standard_normal((4, 16)).astype(np.float32))
    chain_call, chain_exe = _compiled(dg.compile(chain), (xt,))
    mlp_call, mlp_exe = _compiled(dg.compile(model), (xb,))

    g20 = dg.Graph("chain20")
    with g20:
        x20 = dg.placeholder("x", (16,))
        g20.outputs = [chain(x20)]
    chain20_o2 = g20.compile(passes="O2")
    x16 = xt.array
    chain20_call, _ = _compiled(dg.compile(chain, passes="O2"), (xt,))
    extra = {}
    try:
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        def jax_chain(x):      # the same 20 ops (jax arrays have no .tanh method)
            y = x
            for _ in range(5):
                y = jax.numpy.tanh(y * SCALE + SHIFT) * x
            return y
        jchain = jax.jit(jax_chain)
        jx = jax.numpy.asarray(x16)
        jchain(jx).block_until_ready()
        extra["jax_chain"] = (lambda: jchain(jx).block_until_ready(), number)

    n1 = number * 10
    with dg.no_grad():      # the compiled calls replay their no-grad specialisation
        t = interleaved({
            "chain20_O2": (lambda: chain20_o2(x=x16), number),
            "compile_chain_O2": (chain20_call, number),
            **extra,
            "chain_O0": (lambda: chain_o0(x=a), number),
            "chain_numpy": (numpy_chain, number),
            "kernel_numpy": (lambda: np.tanh(a), n1),
            "call_O0": (lambda: call_o0(x=a), n1),
            "call_O2": (lambda: call_o2(x=a), n1),
            "compile_chain": (chain_call, number),
            "compile_chain_exe": (chain_exe, number),
            "compile_mlp": (mlp_call, number),
            "compile_mlp_exe": (mlp_exe, number),
        }, rounds, TIMERS[timer])
    r = {"ops": ops, "rounds": rounds, "timer": timer, "loadavg": _loadavg(), **t}
    r["per_kernel_overhead"] = (t["chain_O0"] - t["chain_numpy"]) / ops
    r["fixed_O0"] = t["call_O0"] - t["kernel_numpy"]
    r["fixed_O2"] = t["call_O2"] - t["kernel_numpy"]
    r["compile_chain_ratio"] = t["compile_chain"] / t["compile_chain_exe"]
    r["compile_mlp_ratio"] = t["compile_mlp"] / t["compile_mlp_exe"]
    if "jax_chain" in t:
        r["chain20_O2_vs_jax"] = t["chain20_O2"] / t["jax_chain"]
        r["compile_chain_O2_vs_jax"] = t["compile_chain_O2"] / t["jax_chain"]
    r["targets"] = targets(r)
    return r


def targets(r: dict) -> list:
    us = 1e6
    out = []

    def add(name, value, target, detail):
        out.append({"name": name, "ok": value <= target, "detail": detail})

    add("O0 overhead per kernel <= 0.7 us", r["per_kernel_overhead"], TARGET_PER_KERNEL,
        f"{r['per_kernel_overhead'] * us:.2f} us")
    for level in ("O0", "O2"):
        add(f"{level} fixed cost of a call <= 3 us", r[f"fixed_{level}"], TARGET_FIXED,
            f"{r[f'fixed_{level}'] * us:.2f} us")
    for w in ("chain", "mlp"):
        add(f"dg.compile call ({w}) <= 1.5 x its executable", r[f"compile_{w}_ratio"],
            TARGET_COMPILE, f"{r[f'compile_{w}'] * us:.2f} us vs "
            f"{r[f'compile_{w}_exe'] * us:.2f} us = {r[f'compile_{w}_ratio']:.2f}x")
    if "jax_chain" in r:
        add("O2 20-op chain <= 1.0 x JAX jit", r["chain20_O2_vs_jax"], 1.0,
            f"{r['chain20_O2_vs_jax']:.2f}x")
        add("dg.compile O2 20-op chain <= 1.3 x JAX jit", r["compile_chain_O2_vs_jax"], 1.3,
            f"{r['compile_chain_O2_vs_jax']:.2f}x")
    return out


def _loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return None


def report(r: dict) -> str:
    us = 1e6
    load = r.get("loadavg")
    lines = [
        f"executable overhead, best of {r['rounds']} interleaved rounds (microseconds, "
        f"{r.get('timer', 'wall')} time); "
        f"load average {', '.join(f'{v:.2f}' for v in load) if load else 'n/a'}",
        f"  O0 chain of {r['ops']} tanh on float32[16]: {r['chain_O0'] * us:8.2f}   numpy "
        f"loop {r['chain_numpy'] * us:8.2f}   overhead per kernel "
        f"{r['per_kernel_overhead'] * us:6.2f}",
        f"  one tanh: numpy {r['kernel_numpy'] * us:6.2f}   O0 call {r['call_O0'] * us:6.2f} "
        f"(fixed {r['fixed_O0'] * us:5.2f})   O2 call {r['call_O2'] * us:6.2f} "
        f"(fixed {r['fixed_O2'] * us:5.2f})",
        f"  dg.compile, 20-op chain: compiled {r['compile_chain'] * us:7.2f}   executable "
        f"{r['compile_chain_exe'] * us:7.2f}   ratio {r['compile_chain_ratio']:5.2f}x",
        f"  dg.compile, MLP module:  compiled {r['compile_mlp'] * us:7.2f}   executable "
        f"{r['compile_mlp_exe'] * us:7.2f}   ratio {r['compile_mlp_ratio']:5.2f}x",
        f"  20-op chain: O2 executable {r['chain20_O2'] * us:7.2f}   dg.compile O2 "
        f"{r['compile_chain_O2'] * us:7.2f}   " + (
            f"JAX jit {r['jax_chain'] * us:7.2f}" if "jax_chain" in r
            else "JAX jit: not installed (pip install jax[cpu]), no ratio"),
        "targets (issues 11 and 24):"]
    for t in r["targets"]:
        lines.append(f"  {'PASS ' if t['ok'] else 'SHORT'} {t['name']}: {t['detail']}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=100)
    p.add_argument("--rounds", "--repeat", type=int, default=25, dest="rounds")
    p.add_argument("--number", type=int, default=400, help="calls per round (x10 for one op)")
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall")
    p.add_argument("--json", help="also write the figures (seconds) to this file")
    p.add_argument("--jax-site", help="site-packages directory holding JAX (see above)")
    a = p.parse_args(argv)
    if a.jax_site:
        sys.path.append(a.jax_site)
    print(f"duograph from {os.path.dirname(os.path.abspath(dg.__file__))}")
    r = run(a.ops, a.rounds, a.number, a.timer)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
