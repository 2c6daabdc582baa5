"""What a compiled graph costs above its kernels, side by side in one run.

- per kernel: an O0 executable of a chain of ``--ops`` tanh ops on float32[16] against the
  same numpy calls in a Python loop; (executable - numpy) / ops is the interpreter's overhead
  per instruction;
- per call: a one-op graph (O0 interpreted, O2 planned) against the bare numpy call; the
  difference is the fixed cost of a call (feed checks, plan lookup, output handling).

    python benchmarks/executable_overhead.py [--ops 100] [--repeat 7] [--json out.json]
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


def best(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def run(ops: int = 100, repeat: int = 7, number: int = 2000) -> dict:
    a = np.ones(16, np.float32)
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", (16,))
        y = x
        for _ in range(ops):
            y = dg.tanh(y)
    chain = g.compile(outputs=[y], passes="O0")

    def numpy_chain():
        z = a
        for _ in range(ops):
            z = np.tanh(z)
        return z

    r = {"ops": ops, "chain_O0": best(lambda: chain(x=a), repeat, number),
         "chain_numpy": best(numpy_chain, repeat, number)}
    one = dg.Graph("one")
    with one:
        x1 = dg.placeholder("x", (16,))
        y1 = dg.tanh(x1)
    r["kernel_numpy"] = best(lambda: np.tanh(a), repeat, number * 10)
    for level in ("O0", "O2"):
        exe = one.compile(outputs=[y1], passes=level)
        r[f"call_{level}"] = best(lambda: exe(x=a), repeat, number * 10)
    r["per_kernel_overhead"] = (r["chain_O0"] - r["chain_numpy"]) / ops
    r["fixed_O0"] = r["call_O0"] - r["kernel_numpy"]
    r["fixed_O2"] = r["call_O2"] - r["kernel_numpy"]
    return r


def report(r: dict) -> str:
    us = 1e6
    return "\n".join([
        "executable overhead on float32[16], best of repeats (microseconds)",
        f"  O0 chain of {r['ops']} tanh: {r['chain_O0'] * us:8.2f}   numpy loop "
        f"{r['chain_numpy'] * us:8.2f}   overhead per kernel "
        f"{r['per_kernel_overhead'] * us:6.2f}",
        f"  one tanh: numpy {r['kernel_numpy'] * us:6.2f}   O0 call {r['call_O0'] * us:6.2f} "
        f"(fixed {r['fixed_O0'] * us:5.2f})   O2 call {r['call_O2'] * us:6.2f} "
        f"(fixed {r['fixed_O2'] * us:5.2f})"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=100)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", help="also write the figures (seconds) to this file")
    a = p.parse_args(argv)
    r = run(a.ops, a.repeat)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
