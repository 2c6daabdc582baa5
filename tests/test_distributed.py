"""duograph.distributed and DistributedDataParallel on MPI: scripts run on 2 and 3 ranks
(``mpiexec``; 3 ranks oversubscribe a 2-core machine) and compared with one process.

DDP's promise: the weights after k steps equal one process's whose loss is the mean of the
ranks' losses (each rank's mean over its own part of the batch); with equal parts and no
batch statistics that is one process on the global batch. Batch norm normalises by each
rank's own batch (as in PyTorch without SyncBatchNorm), so the one-process reference there
averages per-part losses. float64 within 1e-12."""
from __future__ import annotations

import time

import numpy as np
import pytest

import duograph as dg
import duograph.distributed as dist
import duograph.nn as nn
from mpi_util import run_ranks

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

MODEL = """
import sys
import numpy as np
import duograph as dg
import duograph.nn as nn
import duograph.distributed as dist

def make(kind):
    dg.manual_seed(0)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.Flatten(), nn.Linear(4 * 5 * 5, 3)).double()
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(6, 8)
            self.a = nn.Linear(8, 3)
            self.b = nn.Linear(8, 3)
        def forward(self, x, use_b):
            h = dg.tanh(self.body(x))
            return self.b(h) if use_b else self.a(h)
    return Branchy().double()

def data(kind, step, n_parts):
    rng = np.random.default_rng(100 + step)
    shape = (4 * n_parts, 6) if kind != "cnn" else (4 * n_parts, 1, 5, 5)
    x = rng.standard_normal(shape)
    y = rng.integers(0, 3, 4 * n_parts)
    return [(x[4 * r:4 * r + 4], y[4 * r:4 * r + 4]) for r in range(n_parts)]

def uses_b(kind, rank, step):
    return kind == "branch" and rank == 1 and step % 2 == 0

def loss_of(model, kind, x, y, rank, step):
    x, y = dg.tensor(x), dg.tensor(y)
    out = model(x, uses_b(kind, rank, step)) if kind == "branch" else model(x)
    return nn.functional.cross_entropy(out, y)
"""

DDP_SCRIPT = MODEL + """
kind, steps, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mode = sys.argv[4] if len(sys.argv) > 4 else "eager"
if mode.endswith("-sleep"):          # waits that test and nap instead of MPI's busy Wait
    dg.config.collective_wait = "sleep"
    mode = mode[:-len("-sleep")]
dist.init_process_group("mpi")
rank, size = dist.get_rank(), dist.get_world_size()
model = make(kind)
if rank != 0:                        # rank 0's weights must win at construction
    for p in model.parameters():
        p.data = p.data + 1.0
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0005)
opt = dg.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
if mode == "graph":          # one training-step graph: the all-reduces are its nodes
    x0, _ = data(kind, 0, size)[rank]
    g = dg.Graph("step")
    with g:
        xv = dg.placeholder("x", x0.shape, "float64")
        yv = dg.placeholder("y", (x0.shape[0],), "int64")
        opt.minimize(nn.functional.cross_entropy(ddp(xv), yv))
    exe = g.compile(passes="O2")
    names = [n.op.name for n in exe.graph.nodes if n.op.ordered]
    k = names.count("all_reduce_start")       # the buckets, each a start/wait pair
    assert k >= 1 and names == ["all_reduce_start"] * k + ["all_reduce_wait"] * k, names
for step in range(steps):
    x, y = data(kind, step, size)[rank]
    if mode == "graph":
        exe(x=x, y=y)
        continue
    opt.zero_grad()
    if kind == "branch":
        out = ddp(dg.tensor(x), uses_b(kind, rank, step))
    else:
        out = ddp(dg.tensor(x))
    nn.functional.cross_entropy(out, dg.tensor(y)).backward()
    opt.step()
if rank == 0:
    np.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
print("rank", rank, "done")
"""


def _reference(kind: str, steps: int, n_parts: int) -> dict:
    """One process: each step's loss is the mean of the parts' losses."""
    ns = {}
    exec(MODEL, ns)
    model = ns["make"](kind)
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        parts = ns["data"](kind, step, n_parts)
        total = None
        for r, (x, y) in enumerate(parts):
            loss = ns["loss_of"](model, kind, x, y, r, step) / n_parts
            total = loss if total is None else total + loss
        total.backward()
        opt.step()
    return {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind, ranks, mode", [
    ("mlp", 2, "eager"), ("mlp", 3, "eager"), ("branch", 2, "eager"), ("cnn", 2, "eager"),
    ("mlp", 2, "graph"), ("cnn", 2, "graph"), ("mlp", 2, "eager-sleep"),
    ("mlp", 3, "graph-sleep")])
def test_ddp_trains_as_one_process(tmp_path, kind, ranks, mode):
    """Eager DDP, and the same wrapper in a training-step graph at O2 (``opt.minimize``);
    "-sleep": with ``collective_wait="sleep"`` (waits that test and nap)."""
    out = tmp_path / "w.npz"
    res = run_ranks(ranks, DDP_SCRIPT, tmp_path, args=(kind, 3, out, mode))
    assert res.returncode == 0, res.stderr[-3000:]
    got = dict(np.load(out))
    want = _reference(kind, 3, ranks)
    if kind == "cnn":
        # batch norm's running statistics are rank 0's (broadcast before each forward)
        want = {k: v for k, v in want.items() if "running" not in k and "num_batches" not in k}
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-12, atol=1e-12, err_msg=k)


class _Request:
    """An MPI request stand-in: done after ``tests`` calls of ``Test``."""

    def __init__(self, tests: int):
        self.left, self.tests, self.waits = tests, 0, 0

    def Test(self) -> bool:
        self.tests += 1
        self.left -= 1
        return self.left <= 0

    def Wait(self) -> None:
        self.waits += 1
        self.left = 0


def test_wait_request_spins_in_mpi_or_tests_and_naps():
    """``collective_wait``: "spin" hands the request to MPI's Wait; "sleep" never calls Wait,
    it tests until done, napping between tests once the spin period is over."""
    from duograph.distributed.process_group import _NAP_S, _SPIN_S, wait_request
    spun = _Request(5)
    with dg.config.override(collective_wait="spin"):
        wait_request(spun)
    assert (spun.waits, spun.tests) == (1, 0)
    napped = _Request(4)
    t0 = time.perf_counter()
    with dg.config.override(collective_wait="sleep"):
        wait_request(napped)
    assert (napped.waits, napped.tests) == (0, 4)
    slow = _Request(10**9)
    slow.Test = lambda: time.perf_counter() - t1 > 0.02      # done after 20 ms
    t1 = time.perf_counter()
    with dg.config.override(collective_wait="sleep"):
        wait_request(slow)
    assert time.perf_counter() - t0 < 5 and slow.waits == 0
    assert _SPIN_S < 1e-3 and _NAP_S < 1e-3
    with pytest.raises(ValueError, match="spin, sleep"):
        dg.config.collective_wait = "poll"


def test_no_sync_accumulates_then_averages(tmp_path):
    code = MODEL + """
dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
model = make("mlp")
ddp = nn.parallel.DistributedDataParallel(model)
(x1, y1), (x2, y2) = data("mlp", 0, size)[rank], data("mlp", 1, size)[rank]
with ddp.no_sync():
    loss_of(ddp, "mlp", x1, y1, rank, 0).backward()
local = [p.grad.numpy().copy() for p in model.parameters()]
loss_of(ddp, "mlp", x2, y2, rank, 1).backward()
if rank == 0:
    np.savez(sys.argv[1], *[p.grad.numpy() for p in model.parameters()])
    np.savez(sys.argv[2], *local)
"""
    res = run_ranks(2, code, tmp_path, args=(tmp_path / "g.npz", tmp_path / "l.npz"))
    assert res.returncode == 0, res.stderr[-3000:]
    ns = {}
    exec(MODEL, ns)
    model = ns["make"]("mlp")
    for step in range(2):
        for r, (x, y) in enumerate(ns["data"]("mlp", step, 2)):
            (ns["loss_of"](model, "mlp", x, y, r, step) / 2).backward()
    got = np.load(tmp_path / "g.npz")
    for k, p in enumerate(model.parameters()):
        np.testing.assert_allclose(got[f"arr_{k}"], p.grad.numpy(), rtol=1e-12, atol=1e-12)
    # inside no_sync the gradient stayed rank 0's own
    model0 = ns["make"]("mlp")
    x, y = ns["data"]("mlp", 0, 2)[0]
    ns["loss_of"](model0, "mlp", x, y, 0, 0).backward()
    local = np.load(tmp_path / "l.npz")
    for k, p in enumerate(model0.parameters()):
        np.testing.assert_allclose(local[f"arr_{k}"], p.grad.numpy(), rtol=1e-12)


def test_a_parameter_no_rank_used_keeps_no_gradient(tmp_path):
    code = MODEL + """
dist.init_process_group()
rank = dist.get_rank()
model = make("branch")
ddp = nn.parallel.DistributedDataParallel(model)
x, y = data("branch", 1, 2)[rank]
loss_of(ddp, "branch", x, y, rank, 1).backward()      # step 1: nobody uses b
assert model.b.weight.grad is None and model.b.bias.grad is None, "b got a gradient"
assert model.a.weight.grad is not None
print("ok", rank)
"""
    res = run_ranks(2, code, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("ok") == 2


def test_differing_models_are_refused_on_every_rank(tmp_path):
    code = MODEL + """
dist.init_process_group()
rank = dist.get_rank()
model = make("mlp") if rank == 0 else nn.Sequential(nn.Linear(6, 16), nn.Tanh(),
                                                    nn.Linear(16, 4)).double()
nn.parallel.DistributedDataParallel(model)
"""
    start = time.monotonic()
    res = run_ranks(2, code, tmp_path, timeout=60)
    assert res.returncode != 0
    assert time.monotonic() - start < 30
    assert "DistributedError" in res.stderr and "'2.weight'" in res.stderr
    assert "float64[3, 16]" in res.stderr and "float64[4, 16]" in res.stderr


def test_a_failing_rank_ends_the_job(tmp_path):
    """Rank 1 raises while rank 0 waits in a collective: the job ends within seconds with
    rank 1's message (an mpi4py script would hang)."""
    code = """
import duograph as dg
import duograph.distributed as dist
dist.init_process_group()
if dist.get_rank() == 1:
    raise ValueError("rank one gives up")
dist.barrier()
t = dg.ones(3)
dist.all_reduce(t)
"""
    start = time.monotonic()
    res = run_ranks(2, code, tmp_path, timeout=60)
    assert res.returncode != 0
    assert time.monotonic() - start < 30
    assert "rank one gives up" in res.stderr and "rank 1" in res.stderr


def test_collectives_on_tensors(tmp_path):
    code = """
import numpy as np
import duograph as dg
import duograph.distributed as dist
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
t = dg.tensor(np.arange(6.0).reshape(2, 3) * (r + 1))
dist.all_reduce(t.T, op=dist.ReduceOp.AVG)           # strided: through a copy
assert np.allclose(t.numpy(), np.arange(6.0).reshape(2, 3) * (n + 1) / 2), t
for op, want in ((dist.ReduceOp.MAX, n), (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT, 6)):
    u = dg.tensor(np.array([r + 1], np.int64))
    w = dist.all_reduce(u, op=op, async_op=True)
    w.wait()
    assert u.numpy()[0] == want, (op, u)
h = dg.tensor(np.array([1.5], np.float16))
dist.all_reduce(h)
assert h.dtype == "float16" and h.numpy()[0] == 1.5 * n
out = dg.zeros(2 * n)
dist.all_gather_into_tensor(out, dg.tensor(np.array([r, r + 10.0], np.float32)))
assert out.numpy().tolist() == sum(([k, k + 10.0] for k in range(n)), [])
part = dg.zeros(2)
dist.reduce_scatter_tensor(part, dg.tensor(np.arange(2.0 * n, dtype=np.float32)))
assert part.numpy().tolist() == [2.0 * r * n, (2.0 * r + 1) * n]
got = [dg.zeros(1) for _ in range(n)]
dist.all_gather(got, dg.tensor(np.array([float(r)], np.float32)))
assert [g.numpy()[0] for g in got] == list(range(n))
b = dg.tensor(np.array([r * 5.0]))
dist.broadcast(b, src=n - 1)
assert b.numpy()[0] == (n - 1) * 5.0
sub = dist.new_group([0, n - 1])
if r in (0, n - 1):
    s = dg.ones(1)
    dist.all_reduce(s, group=sub)
    assert s.numpy()[0] == 2 and dist.get_world_size(sub) == 2
else:
    assert sub is None
if r == 0:
    dist.send(dg.tensor(np.array([42.0])), dst=1)
elif r == 1:
    x = dg.zeros(1, dtype="float64")
    assert dist.recv(x) == 0 and x.numpy()[0] == 42.0
objs = [None]
if r == 0:
    objs = [{"epoch": 3}]
dist.broadcast_object_list(objs, src=0)
assert objs == [{"epoch": 3}]
print("ok", r)
"""
    res = run_ranks(3, code, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("ok") == 3


def test_one_process_without_a_launcher():
    """Without mpiexec the default group is one rank (MPI's singleton start); collectives
    are identities and DDP trains as the plain module."""
    if not dist.is_available():
        pytest.skip("needs mpi4py")
    import subprocess
    import sys
    code = ("import numpy as np, duograph as dg, duograph.distributed as dist, "
            "duograph.nn as nn\n"
            "dist.init_process_group()\n"
            "assert dist.get_world_size() == 1 and dist.get_rank() == 0\n"
            "t = dg.ones(2); dist.all_reduce(t, op=dist.ReduceOp.AVG)\n"
            "m = nn.Linear(3, 1); d = nn.parallel.DistributedDataParallel(m)\n"
            "d(dg.ones((2, 3))).sum().backward()\n"
            "assert np.allclose(m.weight.grad.numpy(), 2.0)\n"
            "print('ok', t.numpy().tolist())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ok [1.0, 1.0]" in res.stdout


def test_uninitialised_group_says_what_to_do():
    if dist.is_initialized():
        pytest.skip("a group is initialised in this process")
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2))


def test_post_accumulate_grad_hooks_fire_during_backward():
    """A leaf's post-accumulate-grad hook runs as soon as its gradient is complete, before
    the backward reaches the ops of earlier layers (what DDP overlaps its all-reduce with)."""
    w1 = dg.tensor(np.ones((3, 3)), requires_grad=True)
    w2 = dg.tensor(np.full((3, 3), 2.0), requires_grad=True)
    seen = []
    w1.register_post_accumulate_grad_hook(lambda t: seen.append(("w1", t.grad is not None)))
    handle = w2.register_post_accumulate_grad_hook(
        lambda t: seen.append(("w2", w1.grad is None)))
    from duograph.eager import autograd
    autograd.queue_callback(lambda: seen.append("end"))
    ((dg.tensor(np.ones((2, 3))) @ w1).relu() @ w2).sum().backward()
    assert seen == [("w2", True), ("w1", True), "end"]
    np.testing.assert_allclose(w1.grad.numpy(), np.full((3, 3), 12.0))
    handle.remove()
    seen.clear()
    ((dg.tensor(np.ones((2, 3))) @ w1) @ w2).sum().backward()
    assert seen == [("w1", True)]
    with pytest.raises(RuntimeError, match="leaf"):
        (w1 * 2).register_post_accumulate_grad_hook(print)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True),
                                                     (9, 3, False), (2, 3, False),
                                                     (11, 4, True), (1, 2, True)])
def test_distributed_sampler_shares(n, replicas, drop_last):
    """Shuffled shares cover the dataset once per epoch (padding aside), agree across ranks
    for one (seed, epoch) and change with it."""
    from duograph.utils.data import DistributedSampler
    data = list(range(n))
    shares = [list(DistributedSampler(data, replicas, r, shuffle=False, drop_last=drop_last))
              for r in range(replicas)]
    sizes = {len(s) for s in shares}
    assert len(sizes) == 1
    samplers = [DistributedSampler(data, replicas, r, seed=7, drop_last=drop_last)
                for r in range(replicas)]
    epochs = []
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        got = [list(s) for s in samplers]
        flat = sorted(i for share in got for i in share)
        if drop_last:
            assert len(flat) == len(set(flat)) == replicas * (n // replicas)
        else:
            assert set(flat) == set(range(n)) and len(flat) == replicas * -(-n // replicas)
        assert all(len(share) == len(samplers[0]) for share in got)
        epochs.append(got)
    assert epochs[0] == [list(s) for s in [DistributedSampler(data, replicas, r, seed=7,
                                                               drop_last=drop_last)
                                           for r in range(replicas)]]
    if n > 3:
        assert epochs[0] != epochs[1]
    with pytest.raises(ValueError, match="rank"):
        DistributedSampler(data, replicas, replicas)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True),
                                                     (9, 3, False), (2, 3, False),
                                                     (11, 4, True), (1, 2, True)])
def test_distributed_sampler_unshuffled_is_pytorchs(n, replicas, drop_last):
    torch = pytest.importorskip("torch")
    from duograph.utils.data import DistributedSampler
    data = list(range(n))
    for r in range(replicas):
        ours = DistributedSampler(data, replicas, r, shuffle=False, drop_last=drop_last)
        theirs = torch.utils.data.DistributedSampler(data, replicas, r, shuffle=False,
                                                     drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_duograph_run_launches_the_ranks(tmp_path):
    """``duograph run -n 2 script.py args`` is mpiexec over this interpreter; its status is
    the job's."""
    import subprocess
    import sys
    from mpi_util import mpiexec
    mpiexec()
    script = tmp_path / "hello.py"
    script.write_text("import sys, duograph.distributed as dist\n"
                      "dist.init_process_group()\n"
                      "sys.stdout.write(f'rank {dist.get_rank()} of {dist.get_world_size()} "
                      "{sys.argv[1:]}\\n')\n"
                      "sys.exit(3 if 'fail' in sys.argv else 0)\n")
    run = [sys.executable, "-m", "duograph", "run", "-n", "2", str(script)]
    res = subprocess.run(run + ["a"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(filter(None, res.stdout.split("\n"))) == ["rank 0 of 2 ['a']",
                                                              "rank 1 of 2 ['a']"]
    assert subprocess.run(run + ["fail"], capture_output=True, timeout=120).returncode != 0
    bad = subprocess.run([sys.executable, "-m", "duograph", "run", "-n", "2",
                          str(tmp_path / "missing.py")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "no script" in bad.stderr


def test_ddp_with_a_compiled_forward_and_adam(tmp_path):
    """``dg.compile`` of the wrapped model and another optimizer: the same weights as one
    process on the global batch."""
    code = MODEL + """
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
model = make("mlp")
ddp = nn.parallel.DistributedDataParallel(model)
fwd = dg.compile(ddp)
opt = dg.optim.Adam(ddp.parameters(), lr=0.01)
for step in range(3):
    x, y = data("mlp", step, n)[r]
    opt.zero_grad()
    nn.functional.cross_entropy(fwd(dg.tensor(x)), dg.tensor(y)).backward()
    opt.step()
if r == 0:
    np.savez(sys.argv[1], **{k: v.numpy() for k, v in model.state_dict().items()})
"""
    res = run_ranks(2, code, tmp_path, args=(tmp_path / "w.npz",))
    assert res.returncode == 0, res.stderr[-3000:]
    ns = {}
    exec(MODEL, ns)
    model = ns["make"]("mlp")
    opt = dg.optim.Adam(model.parameters(), lr=0.01)
    for step in range(3):
        opt.zero_grad()
        loss = None
        for r, (x, y) in enumerate(ns["data"]("mlp", step, 2)):
            part = ns["loss_of"](model, "mlp", x, y, r, step) / 2
            loss = part if loss is None else loss + part
        loss.backward()
        opt.step()
    got = np.load(tmp_path / "w.npz")
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(got[k], v.numpy(), rtol=1e-12, atol=1e-12, err_msg=k)


def test_zero_redundancy_optimizer_equals_plain_ddp(tmp_path):
    """ZeRO-1 with Adam over DDP gives plain DDP's weights, with each rank holding its part
    of the optimizer state."""
    code = MODEL + """
from duograph.distributed.optim import ZeroRedundancyOptimizer
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
results = {}
for zero in (False, True):
    model = make("mlp")
    ddp = nn.parallel.DistributedDataParallel(model)
    if zero:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), dg.optim.Adam, lr=0.01)
    else:
        opt = dg.optim.Adam(ddp.parameters(), lr=0.01)
    for step in range(3):
        x, y = data("mlp", step, n)[r]
        opt.zero_grad()
        loss_of(ddp, "mlp", x, y, r, step).backward()
        opt.step()
    results[zero] = [p.detach().numpy().copy() for p in model.parameters()]
    if zero:
        state = opt.state_bytes()
    else:
        full = sum(t.array.nbytes for s in opt.state.values() for t in s.values())
for a, b in zip(results[False], results[True]):
    assert np.allclose(a, b, rtol=1e-12, atol=1e-13), abs(a - b).max()
assert state < 0.6 * full, (state, full)
print("ok", r, state, full)
"""
    res = run_ranks(2, code, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("ok") == 2


def test_gather_scatter_all_to_all_and_object_collectives(tmp_path):
    """reduce, gather, scatter, all_to_all, all_to_all_single, all_gather_object,
    broadcast_object_list, gather_object, scatter_object_list with PyTorch's semantics on 2
    ranks (rank-dependent values, a non-zero root, uneven all_to_all sizes, PyTorch's
    errors for lists given on the wrong rank)."""
    code = """
import numpy as np
import duograph as dg
import duograph.distributed as dist
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
t = dg.tensor(np.array([1.0, 2.0]) * (r + 1))
dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
assert t.numpy().tolist() == ([2.0, 4.0] if r == 1 else [1.0, 2.0]), t
# gather to rank 1; a list on the other rank is refused as in PyTorch
if r == 0:
    try:
        dist.gather(dg.ones(2), [dg.zeros(2), dg.zeros(2)], dst=1)
        raise AssertionError("no error")
    except ValueError as e:
        assert "must NOT be specified on non-destination ranks" in str(e)
outs = [dg.zeros(3, dtype="int64") for _ in range(n)] if r == 1 else None
dist.gather(dg.tensor(np.arange(3) + 10 * r), outs, dst=1)
if r == 1:
    assert [o.numpy().tolist() for o in outs] == [[0, 1, 2], [10, 11, 12]]
# scatter from rank 1
got = dg.zeros(2)
parts = [dg.tensor(np.full(2, 5.0 + k, np.float32)) for k in range(n)] if r == 1 else None
dist.scatter(got, parts, src=1)
assert got.numpy().tolist() == [5.0 + r] * 2
# all_to_all with uneven sizes: rank r sends r + k + 1 items to rank k
ins = [dg.tensor(np.full(r + k + 1, 100 * r + k, np.int32)) for k in range(n)]
outs = [dg.zeros(k + r + 1, dtype="int32") for k in range(n)]
dist.all_to_all(outs, ins)
assert [o.numpy().tolist() for o in outs] == [[100 * k + r] * (k + r + 1) for k in range(n)]
# all_to_all_single: equal splits, then explicit ones (rows of 2)
x = dg.tensor(np.arange(4.0 * n).reshape(2 * n, 2) + 100 * r)
y = dg.zeros(2 * n, 2, dtype="float64")
dist.all_to_all_single(y, x)
want = np.concatenate([np.arange(4.0 * n).reshape(2 * n, 2)[2 * r:2 * r + 2] + 100 * k
                       for k in range(n)])
assert np.array_equal(y.numpy(), want), y
send = [1, 2] if r == 0 else [3, 1]          # rows rank r sends to ranks 0, 1
recv = [send_k[r] for send_k in ([1, 2], [3, 1])]
x = dg.tensor(np.full((sum(send), 2), float(r)))
y = dg.zeros(sum(recv), 2, dtype="float64")
dist.all_to_all_single(y, x, recv, send)
assert y.numpy()[:, 0].tolist() == [0.0] * recv[0] + [1.0] * recv[1], y
# objects, pickled
objs = [None, None]
dist.all_gather_object(objs, {"rank": r, "xs": list(range(r + 1))})
assert objs == [{"rank": 0, "xs": [0]}, {"rank": 1, "xs": [0, 1]}]
lst = ["a", 1] if r == 1 else [None, None]
dist.broadcast_object_list(lst, src=1)
assert lst == ["a", 1]
gathered = [None] * n if r == 0 else None
dist.gather_object(("from", r), gathered, dst=0)
assert gathered == ([("from", 0), ("from", 1)] if r == 0 else None)
out = [None]
dist.scatter_object_list(out, [{"k": k} for k in range(n)] if r == 0 else None, src=0)
assert out == [{"k": r}]
print("ok", r)
"""
    res = run_ranks(2, code, tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stdout.count("ok") == 2


def test_sync_batch_norm_is_pytorchs_batch_norm_on_the_concatenated_batch(tmp_path):
    """SyncBatchNorm on 2 ranks (each 3 of the 6 samples): its output, its input gradient
    (of the sum of the ranks' losses), the summed weight and bias gradients and the running
    statistics are torch.nn.BatchNorm2d's on the whole batch; convert_sync_batchnorm
    swaps BatchNorm layers keeping their parameters. PyTorch's figures are computed here and
    handed to the ranks in a file (the rank scripts never import PyTorch)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 4, 5, 5)) * 2 + 1
    W = rng.standard_normal((6, 4, 5, 5))
    tb = torch.nn.BatchNorm2d(4, momentum=0.3).double()
    with torch.no_grad():
        tb.weight.copy_(torch.linspace(0.5, 2.0, 4, dtype=torch.float64))
    tx = torch.tensor(X, requires_grad=True)
    tout = tb(tx)
    (tout * torch.tensor(W)).sum().backward()
    ref = dict(X=X, W=W, out=tout.detach().numpy(), xgrad=tx.grad.numpy(),
               wgrad=tb.weight.grad.numpy(), bgrad=tb.bias.grad.numpy(),
               mean=tb.running_mean.numpy(), var=tb.running_var.numpy())
    tb.eval()
    ref["eval"] = tb(torch.tensor(X)).detach().numpy()
    np.savez(tmp_path / "ref.npz", **ref)
    code = f"""
import numpy as np
import duograph as dg
import duograph.nn as nn
import duograph.distributed as dist
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
ref = np.load({str(tmp_path / "ref.npz")!r})
X, W = ref["X"], ref["W"]
mine = slice(3 * r, 3 * r + 3)
model = nn.Sequential(nn.Identity(), nn.BatchNorm2d(4, momentum=0.3)).double()
model[1].weight.data = dg.tensor(np.linspace(0.5, 2.0, 4))
model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
sbn = model[1]
assert type(sbn) is nn.SyncBatchNorm
assert np.allclose(sbn.weight.detach().numpy(), np.linspace(0.5, 2, 4))
x = dg.tensor(X[mine], requires_grad=True)
out = model(x)
(out * dg.tensor(W[mine])).sum().backward()
def close(a, b):
    return np.allclose(a, b, rtol=1e-10, atol=1e-12)
assert close(out.detach().numpy(), ref["out"][mine])
assert close(x.grad.numpy(), ref["xgrad"][mine])
for p, key in ((sbn.weight, "wgrad"), (sbn.bias, "bgrad")):
    g = p.grad.detach().clone()
    dist.all_reduce(g)
    assert close(g.numpy(), ref[key])
assert close(sbn.running_mean.numpy(), ref["mean"])
assert close(sbn.running_var.numpy(), ref["var"])
assert int(sbn.num_batches_tracked.numpy()) == 1
sbn.eval()                                       # eval: the running statistics, locally
assert close(sbn(dg.tensor(X[mine])).detach().numpy(), ref["eval"][mine])
print("ok", r)
"""
    res = run_ranks(2, code, tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stdout.count("ok") == 2


def test_sync_batch_norm_alone_is_batch_norm():
    """Without a process group of several ranks SyncBatchNorm is BatchNorm (as PyTorch's
    falls back); fewer than 2 dims are refused with PyTorch's message."""
    import duograph.nn as nn
    x = np.random.default_rng(0).standard_normal((4, 3, 2)).astype(np.float32)
    sbn, bn = nn.SyncBatchNorm(3), nn.BatchNorm1d(3)
    np.testing.assert_allclose(sbn(dg.tensor(x)).detach().numpy(),
                               bn(dg.tensor(x)).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(sbn.running_var.numpy(), bn.running_var.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="expected at least 2D input"):
        sbn(dg.ones(3))
