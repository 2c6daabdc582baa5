"""Where one compiled call of the 20-op chain on 16 floats spends its microseconds: each
layer of an O2 executable call and of a ``dg.compile(passes="O2")`` call timed on its own,
inner to outer (a layer's time includes the layers inside it), best of interleaved rounds,
after the warm-up that takes the fused region past its tier-up to one numba call.

    python benchmarks/call_breakdown.py [--rounds 7] [--number 20000] [--timer wall|cpu]
        [--jax-site DIR]
    python benchmarks/call_breakdown.py --latency 5000 [--cache-dir DIR]

``--latency N``: instead, N calls of the O2 executable from a fresh one, each timed on its
own: median, 99th percentile and max per-call latency, the slowest call's index, and the
call from which the fused region ran its numba kernel (the tier-up). Run it in a fresh
process with an empty ``--cache-dir`` (the default: a new temporary directory) for the cold
cache, then again with the same directory for the warm one.

Layers of ``exe(x=x)``: the numba kernel alone; the small kernel's call (argument
handling); the fused step's bound runner (strategy check, tier state); the generated
prepared call (feed checks, run lock, floating-point state, output reuse); ``exe.run``
(the feeds dict to the prepared call); ``exe(x=x)`` (keyword arguments). For reference: the
same region by numpy's straight-line plan (20 ufunc calls), and the general
``PreparedCall.__call__`` the generated function replaces. Layers of ``compiled(xt)``: the
guards' check; the outputs-only replay (``_replay``: externals' check, the prepared call,
wrapping the result); the whole call (signature check against the last specialisation, lock).
JAX jit of the same chain where JAX is importable.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402

SCALE, SHIFT = 0.5, 1.0
# "cpu": the process's CPU time, which on a shared machine leaves out the time the cores
# were given to other processes
TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


def chain(x, tanh):
    y = x
    for _ in range(5):
        y = tanh(y * SCALE + SHIFT) * x
    return y


def layers() -> dict:
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    g = dg.Graph("chain20")
    with g:
        g.outputs = [chain(dg.placeholder("x", (16,)), dg.tanh)]
    exe = g.compile(passes="O2")
    compiled = dg.compile(lambda t: chain(t, lambda v: v.tanh()), passes="O2")
    xt = dg.tensor(x)
    for _ in range(1100):     # past dg.config.cpu.numba_small_after
        exe(x=x)
        compiled(xt)
    _drain()                  # the small kernel compiled in the background is in place
    exe(x=x)
    compiled(xt)
    prog = exe._prepared.program
    (step,) = prog.steps
    runner = step[3][0]
    small = getattr(runner, "state", [None, None])[1]
    kernel = small.__closure__[[c for c in small.__code__.co_freevars].index("fn")] \
        .cell_contents if small is not None else None
    direct = [c.cell_contents for c in runner.__closure__
              if type(c.cell_contents).__name__ == "DirectPlan"]
    outs = [np.empty(16, np.float32)]
    spec = compiled._last
    cands = {}
    if kernel is not None:
        cands["numba kernel alone"] = lambda: kernel(16, 1, x, outs[0])
        cands["small kernel call"] = lambda: small((x,), outs)
    if direct:
        cands["numpy straight-line plan (reference)"] = lambda: direct[0]((x,), outs)
    cands["fused step runner"] = lambda: runner((x,), outs)
    cands["generated prepared call"] = lambda: exe._prepared.call([x])
    cands["general PreparedCall (reference)"] = lambda: exe._prepared([x])
    cands["exe.run(feeds)"] = lambda: exe.run({"x": x})
    cands["exe(x=x)"] = lambda: exe(x=x)
    if spec.check is not None:
        cands["dg.compile guard check"] = spec.check
    cands["dg.compile _replay"] = lambda: compiled._replay(spec, (xt,))
    cands["compiled(xt)"] = lambda: compiled(xt)
    try:
        import jax
        import jax.numpy as jnp
        jitted = jax.jit(lambda v: chain(v, jnp.tanh))
        xj = jax.device_put(jnp.asarray(x))
        jitted(xj).block_until_ready()
        cands["JAX jit"] = lambda: jitted(xj).block_until_ready()
    except ImportError:
        pass
    return cands


def _drain() -> None:
    try:
        from duograph.runtime.cpu import tier_up
    except ImportError:       # a duograph that compiles small kernels on the caller's path
        return
    tier_up.drain(600)


def latency(n: int) -> None:
    """Per-call latency of ``n`` calls of a fresh O2 executable of the chain (module doc)."""
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    g = dg.Graph("chain20")
    with g:
        g.outputs = [chain(dg.placeholder("x", (16,)), dg.tanh)]
    exe = g.compile(passes="O2")
    clock = time.perf_counter
    times = np.empty(n)
    switched = None
    load0 = os.getloadavg()[0]
    for i in range(n):
        t0 = clock()
        exe(x=x)
        times[i] = clock() - t0
        if switched is None:
            (step,) = exe._prepared.program.steps
            if getattr(step[3][0], "state", [None, None])[1] is not None:
                switched = i + 1
    us = times * 1e6
    print(f"duograph from {os.path.dirname(os.path.abspath(dg.__file__))}; {n} calls of "
          f"exe(x=x), the 20-op chain on 16 float32, each timed (perf_counter); cache "
          f"{dg.config.cache_dir}; numba_small_after {dg.config.cpu.numba_small_after}; "
          f"load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"  median {np.median(us):.1f} us  p99 {np.percentile(us, 99):.1f} us  "
          f"max {us.max():.1f} us (call {int(us.argmax()) + 1})  first {us[0]:.1f} us  "
          f"sum {us.sum() / 1e6:.3f} s  numba kernel from call "
          f"{switched if switched is not None else 'never'}")
    print(f"  median of calls 2-100 {np.median(us[1:100]):.1f} us, "
          f"of the last 1000 {np.median(us[-1000:]):.1f} us")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall")
    p.add_argument("--jax-site", help="site-packages directory holding JAX, appended to "
                   "sys.path after duograph is imported")
    p.add_argument("--latency", type=int, metavar="N",
                   help="time N calls one by one instead (median, max, the tier-up call)")
    p.add_argument("--cache-dir", help="generated-kernel cache for --latency (default: a new "
                   "empty temporary directory, a cold cache)")
    a = p.parse_args(argv)
    if a.latency:
        dg.config.cache_dir = a.cache_dir or tempfile.mkdtemp(prefix="duograph-cold-")
        latency(a.latency)
        return
    if a.jax_site:
        sys.path.append(a.jax_site)
    cands = layers()
    best = {k: float("inf") for k in cands}
    load0 = os.getloadavg()[0]
    for _ in range(a.rounds):
        for k, fn in cands.items():
            best[k] = min(best[k], timeit.timeit(fn, number=a.number, timer=TIMERS[a.timer])
                          / a.number)
    print(f"duograph from {os.path.dirname(os.path.abspath(dg.__file__))}; best of {a.rounds} "
          f"interleaved rounds x {a.number} calls, {a.timer} time; threads: as the environment "
          "sets them; "
          f"load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    for k, t in best.items():
        print(f"  {t * 1e6:8.2f} us  {k}")


if __name__ == "__main__":
    main()
