"""Run under ``mpiexec -n N`` by tests/test_distributed_graph.py (and imported by it for the
one-process reference): graph-mode DDP training of an MLP, and the differentiable
collectives' values and gradients. Rank 0 writes its results to OUT_DIR as .npy files.

    mpiexec -n 2 python graph_ddp.py OUT_DIR float64
"""
import json
import os
import sys

import numpy as np

import duograph as dg
from duograph import nn

STEPS = 3
GLOBAL_BATCH = 12


def data(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((GLOBAL_BATCH, 6)).astype(dtype)
    y = rng.standard_normal((GLOBAL_BATCH, 4)).astype(dtype)
    return x, y


def train(dtype, rank=0, world=1, group=None, bucket_bytes=None):
    """Weights after STEPS graph-O2 steps (SGD with momentum) on this rank's block of the
    global batch, its gradients averaged over ``world`` ranks when ``bucket_bytes`` is
    given (DDP); the pass report's notes of ddp_buckets."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(),
                          nn.Linear(8, 4))
    model = model.double() if dtype == "float64" else model.float()
    if bucket_bytes is not None:
        from duograph.distributed import ddp_state
        ddp_state.register(model.parameters(),
                           ddp_state.DDPInfo(group, bucket_bytes, wrapper=None))
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = dg.Graph("step")
    with g:
        xv = dg.placeholder("x", ("N", 6), dtype)
        yv = dg.placeholder("y", ("N", 4), dtype)
        loss = ((model(xv) - yv) ** 2).mean()
        opt.minimize(loss)
    g.outputs = [loss]
    exe = g.compile(passes="O2")
    x, y = data(dtype)
    per = GLOBAL_BATCH // world
    for _ in range(STEPS):
        exe(x=x[rank * per:(rank + 1) * per], y=y[rank * per:(rank + 1) * per])
    notes = []
    for stat in exe.pass_report.stats:
        if stat.name == "ddp_buckets":
            notes = list(stat.notes)
    return [p.detach().numpy().copy() for p in model.parameters()], notes


def collectives(dist):
    """Values and gradients of the differentiable collectives, eagerly and in a graph."""
    import duograph.distributed.nn.functional as dfn
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    x = dg.tensor(np.arange(3.0) + 10 * rank, requires_grad=True)
    s = dfn.all_reduce(x * (rank + 1))
    parts = dfn.all_gather(x * x)
    rs = dfn.reduce_scatter(dg.zeros(2), [x[:2] * (r + 1) for r in range(world)])
    b = dfn.broadcast(x * 2, src=world - 1)
    (s.sum() + sum(p.sum() for p in parts) + rs.sum() + b.sum()).backward()
    out["sum"], out["grad"] = s.detach().numpy(), x.grad.numpy()
    out["gather"] = np.stack([p.detach().numpy() for p in parts])
    out["scatter"], out["bcast"] = rs.detach().numpy(), b.detach().numpy()
    g = dg.Graph("coll")
    with g:
        v = dg.placeholder("v", (3,), "float64")
        g.outputs = [dfn.all_gather(dfn.all_reduce(v, dist.ReduceOp.MAX))[-1]]
    out["graph"] = g.compile(passes="O2")(v=np.arange(3.0) * (rank + 1))[0]
    return out


def main(out_dir, dtype):
    import duograph.distributed as dist
    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    weights, notes = train(dtype, rank, world, dist.get_default_group(), bucket_bytes=600)
    results = collectives(dist)
    if rank == 0:
        for i, w in enumerate(weights):
            np.save(os.path.join(out_dir, f"w{i}.npy"), w)
        for k, v in results.items():
            np.save(os.path.join(out_dir, f"c_{k}.npy"), v)
        with open(os.path.join(out_dir, "notes.json"), "w") as f:
            json.dump(notes, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
