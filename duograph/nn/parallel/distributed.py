"""``DistributedDataParallel``: the same model on every rank, each on its own part of the
batch, gradients averaged over the ranks after each backward (PyTorch's
``torch.nn.parallel.DistributedDataParallel``, over MPI).

At construction it checks that every rank wraps the same parameters (names, shapes, dtypes)
and raises on every rank, naming the first difference, where they differ (no rank is left
waiting); then rank 0's parameters and buffers are broadcast to the others.

During backward (eager mode) the parameters' gradients are averaged in buckets of about
``bucket_cap_mb``: a parameter's post-accumulate-grad hook fires as soon as the backward walk
has passed the last op that reads it, and a bucket whose gradients are all there starts a
non-blocking all-reduce (``MPI_Iallreduce``) while the rest of the backward runs. Buckets hold
the parameters in reverse registration order (roughly the order backward reaches them) and
start strictly in bucket order, so every rank issues the same collectives in the same order.
At the end of the backward the remaining buckets start, parameters that got no gradient
contributing zeros, and every all-reduce is waited for. Each bucket also carries one count
per parameter (how many ranks gave it a gradient): a parameter no rank used keeps
``grad=None``, as in PyTorch, and one some ranks used gets the average over all ranks on every
rank. So ranks never diverge and no flag is needed (``find_unused_parameters`` is accepted and
changes nothing). ``no_sync()`` skips the averaging for gradient accumulation.

In graph mode, ``optimizer.minimize(loss)`` on a wrapped model averages the gradients with
all-reduce nodes in the step graph (``duograph.distributed.ddp_state``).
"""
from __future__ import annotations

import contextlib
from typing import List, Optional

import numpy as np

from ...distributed import ddp_state
from ...distributed.process_group import DistributedError, get_default_group, wait_request
from ..module import Module


class _Bucket:
    __slots__ = ("params", "offsets", "numel", "dtype", "buffer", "ready", "work", "index")

    def __init__(self, index: int, params: list, dtype):
        self.index = index
        self.params = params
        self.dtype = dtype
        self.offsets = []
        n = 0
        for p in params:
            self.offsets.append(n)
            n += p.array.size
        self.numel = n
        # the gradients, then one use count per parameter
        self.buffer = np.zeros(n + len(params), dtype)
        self.ready = set()
        self.work = None


class DistributedDataParallel(Module):
    """``module`` replicated across the ranks of ``process_group`` (the default group):
    see the module docstring."""

    # test the started buckets' requests at each ready gradient (False: MPI progresses them
    # only in the final wait; a measurement switch of benchmarks/distributed.py)
    _poll_in_backward = True

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: Optional[float] = 25, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False, init_sync: bool = True, **kwargs):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected an nn.Module, found "
                            f"{type(module).__name__}")
        self.module = module
        self.process_group = process_group or get_default_group()
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self.bucket_bytes = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._check_same_model(named)
        if init_sync:
            self._broadcast_state()
        self._buckets = self._make_buckets([p for _, p in named])
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._next = 0
        self._armed = False
        self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready)
                         for _, p in named]
        ddp_state.register([p for _, p in named],
                           ddp_state.DDPInfo(self.process_group, self.bucket_bytes, self))

    # -- construction ------------------------------------------------------------------------
    def _check_same_model(self, named) -> None:
        g = self.process_group
        mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in named]
        mine += [("buffer " + n, tuple(b.shape), str(b.dtype))
                 for n, b in self.module.named_buffers()]
        if g.size == 1 or g.mpi is None:
            return
        everyone = g.comm.allgather(mine)
        ref = everyone[0]
        for r, theirs in enumerate(everyone):
            if theirs == ref:
                continue
            for k in range(max(len(ref), len(theirs))):
                a = ref[k] if k < len(ref) else None
                b = theirs[k] if k < len(theirs) else None
                if a != b:
                    raise DistributedError(
                        f"DistributedDataParallel: the ranks wrap different models: entry "
                        f"{k} is {_describe(a)} on rank {g.ranks[0]} but {_describe(b)} on "
                        f"rank {g.ranks[r]}")

    def _broadcast_state(self) -> None:
        g = self.process_group
        if g.size == 1 or g.mpi is None:
            return
        for t in list(self.module.parameters()) + list(self.module.buffers()):
            _bcast(g, t)

    def _make_buckets(self, params: list) -> List[_Bucket]:
        buckets: List[_Bucket] = []
        current: list = []
        size = 0
        for p in reversed(params):
            nbytes = p.array.nbytes
            if current and (p.array.dtype != current[0].array.dtype or
                            size + nbytes > self.bucket_bytes):
                buckets.append(_Bucket(len(buckets), current, current[0].array.dtype))
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            buckets.append(_Bucket(len(buckets), current, current[0].array.dtype))
        return buckets

    # -- forward -----------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self.process_group.size > 1:
            g = self.process_group
            for b in self.module.buffers():
                _bcast(g, b)
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally, without averaging them; the
        first backward after the block averages what was accumulated."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # -- backward ----------------------------------------------------------------------------
    def _grad_ready(self, p) -> None:
        if not self.require_backward_grad_sync:
            return
        if not self._armed:
            self._armed = True
            from ...eager import autograd
            autograd.queue_callback(self._finish)
        bucket = self._bucket_of[id(p)]
        bucket.ready.add(id(p))
        self._launch_ready()
        # MPI moves a non-blocking collective along only inside MPI calls (MPICH runs no
        # progress thread by default): test the started buckets at each gradient, so their
        # all-reduces advance while the backward computes
        if self._poll_in_backward:
            for b in self._buckets[:self._next]:
                if b.work is not None and b.work.Test():
                    b.work = None

    def _launch_ready(self) -> None:
        while self._next < len(self._buckets):
            b = self._buckets[self._next]
            if len(b.ready) < len(b.params):
                return
            self._launch(b)
            self._next += 1

    def _launch(self, b: _Bucket) -> None:
        buf = b.buffer
        for k, (p, off) in enumerate(zip(b.params, b.offsets)):
            n = p.array.size
            used = id(p) in b.ready and p.grad is not None
            if used:
                buf[off:off + n] = p.grad.array.reshape(-1)
            else:
                buf[off:off + n] = 0
            buf[b.numel + k] = 1 if used else 0
        g = self.process_group
        if g.size > 1 and g.mpi is not None:
            b.work = g.comm.Iallreduce(g.mpi.IN_PLACE, buf, g.mpi.SUM)

    def _finish(self) -> None:
        """End of backward: start the buckets not started yet (their missing gradients as
        zeros), wait for every all-reduce, write the averages into ``.grad``."""
        self._armed = False
        while self._next < len(self._buckets):
            self._launch(self._buckets[self._next])
            self._next += 1
        self._next = 0
        size = self.process_group.size
        from ...eager.tensors import Tensor
        for b in self._buckets:
            if b.work is not None:
                wait_request(b.work)
            b.work = None
            buf = b.buffer
            for k, (p, off) in enumerate(zip(b.params, b.offsets)):
                if buf[b.numel + k] == 0:       # no rank gave it a gradient
                    continue
                avg = (buf[off:off + p.array.size] / size).astype(p.array.dtype, copy=False)
                avg = avg.reshape(p.array.shape)
                if p.grad is None:
                    p.grad = Tensor._wrap(np.array(avg))
                else:
                    p.grad.array[...] = avg
                    p.grad.bump_version()
            b.ready.clear()

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True):
        return self.module.load_state_dict(state_dict, strict)


def _bcast(g, t) -> None:
    arr = t.array
    if arr.flags.c_contiguous and isinstance(arr, np.ndarray) and arr.flags.writeable:
        g.comm.Bcast(arr, root=0)
    else:
        host = np.ascontiguousarray(arr.get() if hasattr(arr, "get") else arr)
        g.comm.Bcast(host, root=0)
        arr[...] = host if isinstance(arr, np.ndarray) else type(arr)(host)
    t.bump_version()


def _describe(entry) -> str:
    if entry is None:
        return "missing"
    name, shape, dtype = entry
    return f"{name!r} {dtype}{list(shape)}"
