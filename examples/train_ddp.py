"""Data-parallel training on several processes (MPI): every rank trains the same model on its
share of the data, and DistributedDataParallel averages the gradients after each backward.

    duograph run -n 2 examples/train_ddp.py        # or: mpiexec -n 2 python examples/train_ddp.py
    python examples/train_ddp.py                   # one process: the same script, unchanged

Needs ``pip install 'duograph[distributed]'`` (mpi4py, mpich) for several processes.
"""
import os
import tempfile

import numpy as np

import duograph as dg
import duograph.distributed as dist
import duograph.nn as nn
from duograph.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("mpi")
rank = dist.get_rank()
rng = np.random.default_rng(0)                      # the same data on every rank
x = rng.standard_normal((512, 20)).astype(np.float32)
y = (x[:, :2].sum(axis=1) > 0).astype(np.int64)
data = TensorDataset(dg.tensor(x), dg.tensor(y))
sampler = DistributedSampler(data)                  # this rank's share of it
loader = DataLoader(data, batch_size=32, sampler=sampler)

dg.manual_seed(rank)                                # different inits: DDP starts from rank 0's
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2)))
opt = dg.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for epoch in range(4):
    sampler.set_epoch(epoch)                        # a new shuffle, the same on every rank
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()    # averaged over the ranks
        opt.step()
    with dg.no_grad():
        acc = float((model(dg.tensor(x)).argmax(1) == dg.tensor(y)).float().mean())
    if rank == 0:
        print(f"epoch {epoch}: accuracy {acc:.3f} on {dist.get_world_size()} process(es)")

# save from rank 0, then every rank loads the same file
where = [os.path.join(tempfile.mkdtemp(), "model.dgt") if rank == 0 else None]
dist.broadcast_object_list(where, src=0)
if rank == 0:
    dg.save(model.module.state_dict(), where[0])
dist.barrier()
model.module.load_state_dict(dg.load(where[0]))
if rank == 0:
    print(f"saved and reloaded {where[0]}")
