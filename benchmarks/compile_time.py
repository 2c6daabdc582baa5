"""O2 compile time against graph size: the pass pipeline on chains of n elementwise nodes.

    python benchmarks/compile_time.py [--sizes 1000 10000 100000]

Prints, per size, the seconds of the whole O2 pipeline (passes and the verifier run after
each), the fusion pass alone, and the time per node, so near-linear growth shows as a flat
last column.
"""
import argparse
import time

import duograph as dg
from duograph import passes
from duograph.graphlib.rewrite import clone


def chain(nodes: int) -> dg.Graph:
    """A chain of about ``nodes`` elementwise nodes (exp, add, tanh, mul), one input."""
    g = dg.Graph("chain")
    with g:
        h = dg.placeholder("x", (64,))
        for i in range(nodes // 2):
            h = dg.tanh(h) * 1.5 if i % 2 else dg.exp(h) + 0.1
    g.outputs = [h]
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    args = parser.parse_args()
    print(f"{'nodes':>8} {'O2 s':>8} {'fuse s':>8} {'us/node':>8}")
    for n in args.sizes:
        g = chain(n)
        work, _ = clone(g)
        pm = passes.PassManager("O2")
        t0 = time.perf_counter()
        pm.run(work)
        total = time.perf_counter() - t0
        fuse = sum(s.seconds for s in pm.stats if s.name == "fuse")
        print(f"{len(g.nodes):>8} {total:>8.2f} {fuse:>8.2f} {total / len(g.nodes) * 1e6:>8.1f}")


if __name__ == "__main__":
    main()
