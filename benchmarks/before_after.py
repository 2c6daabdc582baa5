"""One benchmark, two checkouts, side by side in one run: before/after ratios.

Runs ``benchmarks/<script>`` of an old checkout (a git worktree at the old commit, with its
own virtual environment) and of this one alternately, ``--rounds`` times each (A B A B ...,
so both see the same machine load), collects their ``--json`` figures, keeps the best of the
rounds for every timing and prints old, new and new/old::

    git worktree add ../old 10daec3 && (cd ../old && python -m venv .venv &&
        .venv/bin/pip install -e .)
    python benchmarks/before_after.py --old ../old eager_overhead.py -- --repeat 5
    python benchmarks/before_after.py --old ../old passes.py -- --quick

A ratio below 1 means this checkout is faster. Timings are the JSON leaves whose key matches
``--select`` (default: ``best``, the best-of-rounds seconds of ``passes.py``, and the
``duograph_*`` seconds of ``eager_overhead.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def leaves(tree, prefix: str = "") -> Dict[str, float]:
    """Every numeric leaf of a JSON tree, keyed by its slash-joined path."""
    out: Dict[str, float] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(leaves(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        out[prefix] = float(tree)
    return out


def run_once(checkout: str, python: str, script: str, args: List[str]) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [python, os.path.join(checkout, "benchmarks", script), *args, "--json", path]
        proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        with open(path) as f:
            return leaves(json.load(f))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="the old checkout (a git worktree)")
    p.add_argument("--old-python", help="its Python (default <old>/.venv/bin/python)")
    p.add_argument("--python", default=sys.executable, help="this checkout's Python")
    p.add_argument("--rounds", type=int, default=3, help="runs of each checkout, alternating")
    p.add_argument("--select", default=r"(^|/)(best|duograph_\w+)$",
                   help="regex over JSON paths: which leaves are timings")
    p.add_argument("script", help="the benchmark, e.g. passes.py")
    p.add_argument("args", nargs=argparse.REMAINDER, help="after --: the benchmark's options")
    a = p.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    old_python = a.old_python or os.path.join(a.old, ".venv", "bin", "python")
    best: Dict[str, Dict[str, float]] = {"old": {}, "new": {}}
    pick = re.compile(a.select)
    for _ in range(a.rounds):
        for side, checkout, python in (("old", a.old, old_python), ("new", HERE, a.python)):
            for key, value in run_once(checkout, python, a.script, args).items():
                if pick.search(key):
                    prev = best[side].get(key)
                    best[side][key] = value if prev is None else min(prev, value)
    common = [k for k in best["new"] if k in best["old"]]
    if not common:
        raise SystemExit("no timing is named alike in both runs: adjust --select")
    width = max(len(k) for k in common)
    print(f"{a.script} {' '.join(args)}: best of {a.rounds} alternating rounds, seconds")
    print(f"{'figure':<{width}}  {'old':>12}  {'new':>12}  {'new/old':>8}")
    for k in common:
        o, n = best["old"][k], best["new"][k]
        print(f"{k:<{width}}  {o:12.6g}  {n:12.6g}  {n / o if o else float('nan'):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
