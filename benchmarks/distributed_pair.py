"""Scaling efficiency of graph-mode DDP measured inside one 2-rank job, for a shared machine.

``benchmarks/distributed.py`` times the 1- and 2-rank steps in separate jobs, which a changing
load can hit differently. Here one ``mpiexec -n 2`` job alternates, round after round:

- ``solo``: rank 0 alone runs the graph step without DDP while rank 1 naps (it tests a
  non-blocking barrier every millisecond, so it takes no core): the 1-rank time;
- ``pair no-DDP``: both ranks run that step at once, without communication: what sharing
  the machine alone costs (the ceiling of the efficiency);
- ``pair DDP spin`` and ``pair DDP sleep``: both ranks run the graph-mode DDP step at O2
  (one bucket, its wait with ``dg.config.collective_wait`` "spin" or "sleep").

For each: the best and the median round (milliseconds per step, wall) and rank 0's CPU time
per step; efficiency is solo over the pair's time, by best and by median rounds. The model is
``--model`` (the CNN or the MLP of ``distributed.py``) at ``--per-rank`` samples per rank,
BLAS on one thread per rank; the load average is printed before and after.

    python benchmarks/distributed_pair.py [--model cnn] [--per-rank 64] [--rounds 8]
        [--steps 10] [--bind] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from distributed import _data, _load, _models  # noqa: E402


def rank_main(a) -> None:
    import duograph as dg
    import duograph.distributed as dist
    import duograph.nn as nn
    dist.init_process_group("mpi")
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    x, y = _data(a.model, a.per_rank, rank)

    def build(ddp: bool):
        dg.manual_seed(0)
        model = _models(nn, a.model)
        if ddp:
            model = nn.parallel.DistributedDataParallel(model)
        opt = dg.optim.SGD(model.parameters(), lr=0.01)
        graph = dg.Graph(f"{a.model}_step")
        with graph:
            xv = dg.placeholder("x", x.shape)
            yv = dg.placeholder("y", y.shape, "int64")
            opt.minimize(nn.functional.cross_entropy(model(xv), yv))
        return graph.compile(passes="O2")
    plain, ddp = build(False), build(True)

    def ddp_sleep():
        with dg.config.override(collective_wait="sleep"):
            ddp(x=x, y=y)
    contenders = [("solo", lambda: plain(x=x, y=y), (0,)),
                  ("pair no-DDP", lambda: plain(x=x, y=y), (0, 1)),
                  ("pair DDP spin", lambda: ddp(x=x, y=y), (0, 1)),
                  ("pair DDP sleep", ddp_sleep, (0, 1))]
    for _, fn, _ in contenders:
        fn()
        fn()

    def napping_barrier():
        request = comm.Ibarrier()
        while not request.Test():
            time.sleep(1e-3)
    times: dict = {}
    for _ in range(a.rounds):
        for key, fn, who in contenders:
            napping_barrier()
            if rank in who:
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(a.steps):
                    fn()
                times.setdefault(key, []).append(((time.perf_counter() - t0) / a.steps,
                                                  (time.process_time() - c0) / a.steps))
            napping_barrier()
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(times, f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--per-rank", type=int, default=64)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--bind", action="store_true",
                   help="pin each rank to its own core (mpiexec -bind-to core)")
    p.add_argument("--json")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.rank_main:
        rank_main(a)
        return 0
    from duograph.cli import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("benchmarks/distributed_pair.py needs mpiexec: "
                         "pip install 'duograph[distributed]'")
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--rank-main", "--out", out,
           "--model", a.model, "--per-rank", str(a.per_rank), "--rounds", str(a.rounds),
           "--steps", str(a.steps)]
    before = _load()
    subprocess.run([mpiexec, *(["-bind-to", "core"] if a.bind else []), "-n", "2", *cmd],
                   check=True, env=env, timeout=1200)
    with open(out) as f:
        times = json.load(f)
    print(f"{a.model} graph step, {a.per_rank} samples per rank, {a.rounds} rounds of "
          f"{a.steps} steps, one 2-rank job{' (ranks pinned)' if a.bind else ''}; load "
          f"average before {before}, after {_load()} ({os.cpu_count()} CPUs)")
    print(f"  {'':<16}{'best ms':>10}{'median ms':>11}{'rank 0 CPU ms (median)':>24}")
    report: dict = {"model": a.model, "per_rank": a.per_rank, "bind": a.bind, "figures": {}}
    for key, rows in times.items():
        wall = sorted(r[0] for r in rows)
        cpu = sorted(r[1] for r in rows)
        best, median = wall[0], wall[len(wall) // 2]
        report["figures"][key] = {"best": best, "median": median, "cpu": cpu[len(cpu) // 2]}
        print(f"  {key:<16}{best * 1e3:>10.2f}{median * 1e3:>11.2f}"
              f"{cpu[len(cpu) // 2] * 1e3:>24.2f}")
    solo = report["figures"]["solo"]
    print("efficiency (solo / pair), by best and by median rounds:")
    for key in ("pair no-DDP", "pair DDP spin", "pair DDP sleep"):
        fig = report["figures"][key]
        eff = (solo["best"] / fig["best"], solo["median"] / fig["median"])
        report["figures"][key]["efficiency"] = eff
        print(f"  {key:<16}{eff[0]:>8.2f}{eff[1]:>8.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
