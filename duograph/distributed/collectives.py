"""Collectives on tensors, with PyTorch's names and semantics (``torch.distributed``): they
write into the tensors they are given (``all_reduce`` reduces in place, ``broadcast``
overwrites), outside autograd (as PyTorch's do), and return None, or a ``Work`` with
``async_op=True``.

C-contiguous host arrays go to MPI as buffers without copies (``MPI.IN_PLACE`` where the
collective reduces in place). A strided tensor is reduced through a contiguous copy and
written back; dtypes MPI has no type for (float16, bfloat16) travel as float32; device (cupy)
tensors travel through the host (MPI here is not CUDA-aware). Ranks are global ranks, as in
PyTorch, also for collectives over a ``new_group``.
"""
from __future__ import annotations

import enum
from typing import Callable, List, Optional

import numpy as np

from .process_group import DistributedError, ProcessGroup, _group, wait_request


class ReduceOp(enum.Enum):
    """How ``all_reduce``, ``reduce`` and ``reduce_scatter_tensor`` combine the ranks'
    values. AVG is a SUM divided by the group size (floating dtypes only)."""
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


_MPI_OPS = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.PRODUCT: "PROD",
            ReduceOp.MIN: "MIN", ReduceOp.MAX: "MAX", ReduceOp.BAND: "BAND",
            ReduceOp.BOR: "BOR", ReduceOp.BXOR: "BXOR"}
_WIDEN = {"float16": np.float32, "bfloat16": np.float32}


class Work:
    """A collective started with ``async_op=True``: ``wait()`` blocks until it is done (and
    writes the result where it belongs); ``is_completed()`` asks without blocking."""

    def __init__(self, request=None, finish: Optional[Callable[[], None]] = None):
        self._request = request
        self._finish = finish
        self._done = request is None
        if self._done and finish is not None:
            finish()
            self._finish = None

    def is_completed(self) -> bool:
        if not self._done and self._request.Test():
            self._complete()
        return self._done

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._finish()
            self._finish = None

    def wait(self, timeout=None) -> bool:
        if not self._done:
            wait_request(self._request)
            self._complete()
        return True

    def result(self):
        return None


def _op(op) -> ReduceOp:
    if isinstance(op, ReduceOp):
        return op
    try:
        return ReduceOp(str(op).lower().rsplit(".", 1)[-1])
    except ValueError:
        raise ValueError(f"expected a ReduceOp (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR), "
                         f"found {op!r}") from None


class _Buffer:
    """What MPI reads and writes for one tensor or array: its own memory where that is a
    C-contiguous host array of an MPI type, else a staging copy written back by ``store``."""

    def __init__(self, x, who: str, writable: bool = True):
        self.target = x
        arr = getattr(x, "array", x)            # an eager Tensor, or an array
        if not hasattr(arr, "dtype"):
            raise TypeError(f"{who}: expected a tensor or an array, found "
                            f"{type(x).__name__}")
        self.device = hasattr(arr, "get") and not isinstance(arr, np.ndarray)
        self.orig = arr
        host = arr.get() if self.device else arr
        name = host.dtype.name
        self.widened = name in _WIDEN
        if self.widened:
            host = host.astype(_WIDEN[name])
        elif not host.flags.c_contiguous:
            host = np.ascontiguousarray(host)
        self.array = host
        self.staged = self.device or self.widened or host is not arr
        if writable and not self.staged and not arr.flags.writeable:
            raise ValueError(f"{who}: the tensor's memory is read-only")

    def store(self) -> None:
        """Write the staged result back into the tensor (and bump its version)."""
        if self.staged:
            src = self.array.astype(self.orig.dtype, copy=False)
            if self.device:
                import cupy
                self.orig[...] = cupy.asarray(src)
            else:
                self.orig[...] = src
        bump = getattr(self.target, "bump_version", None)
        if bump is not None:
            bump()


def _mpi_op(g: ProcessGroup, op: ReduceOp):
    return getattr(g.mpi, _MPI_OPS[op])


def _check_avg(op: ReduceOp, buf: _Buffer, who: str) -> None:
    if op is ReduceOp.AVG and buf.array.dtype.kind not in "fc":
        raise TypeError(f"{who}: ReduceOp.AVG needs a floating tensor, found "
                        f"{buf.orig.dtype}")


def _finish_reduce(buf: _Buffer, op: ReduceOp, size: int) -> Callable[[], None]:
    def finish():
        if op is ReduceOp.AVG:
            np.divide(buf.array, size, out=buf.array, casting="unsafe")
        buf.store()
    return finish


def all_reduce(tensor, op=ReduceOp.SUM, group: Optional[ProcessGroup] = None,
               async_op: bool = False):
    """Reduce ``tensor`` over the group's ranks, in place, on every rank."""
    g = _group(group)
    op = _op(op)
    buf = _Buffer(tensor, "all_reduce")
    _check_avg(op, buf, "all_reduce")
    finish = _finish_reduce(buf, op, g.size)
    if g.size == 1 or g.mpi is None:
        return _done(finish, async_op)
    if async_op:
        return Work(g.comm.Iallreduce(g.mpi.IN_PLACE, buf.array, _mpi_op(g, op)), finish)
    g.comm.Allreduce(g.mpi.IN_PLACE, buf.array, _mpi_op(g, op))
    finish()
    return None


def _done(finish, async_op: bool):
    if async_op:
        return Work(None, finish)
    finish()
    return None


def _group_rank(g: ProcessGroup, rank: int, who: str) -> int:
    if rank not in g.ranks:
        raise DistributedError(f"{who}: rank {rank} is not in the group (ranks {g.ranks})")
    return g.ranks.index(rank)


def broadcast(tensor, src: int = 0, group: Optional[ProcessGroup] = None,
              async_op: bool = False, group_src: Optional[int] = None):
    """Every rank's ``tensor`` becomes rank ``src``'s (a global rank)."""
    g = _group(group)
    root = group_src if group_src is not None else _group_rank(g, src, "broadcast")
    buf = _Buffer(tensor, "broadcast")
    if g.size == 1 or g.mpi is None:
        return _done(buf.store, async_op)
    if async_op:
        return Work(g.comm.Ibcast(buf.array, root=root), buf.store)
    g.comm.Bcast(buf.array, root=root)
    buf.store()
    return None


def _root(g: ProcessGroup, rank: Optional[int], group_rank: Optional[int], who: str) -> int:
    """The root's rank in the group: ``group_rank`` when given, else the global ``rank``'s
    place in the group (rank 0 when both are None), as PyTorch resolves dst/src."""
    if group_rank is not None:
        if rank is not None:
            raise ValueError(f"{who}: give the root as a global rank or as a group rank, "
                             "not both")
        if not 0 <= group_rank < g.size:
            raise DistributedError(f"{who}: group rank {group_rank} is not in a group of "
                                   f"{g.size} ranks")
        return group_rank
    return _group_rank(g, 0 if rank is None else rank, who)


def reduce(tensor, dst: Optional[int] = None, op=ReduceOp.SUM,
           group: Optional[ProcessGroup] = None, async_op: bool = False,
           group_dst: Optional[int] = None):
    """Reduce ``tensor`` over the ranks into rank ``dst``'s ``tensor`` (the others keep
    theirs)."""
    g = _group(group)
    op = _op(op)
    root = _root(g, dst, group_dst, "reduce")
    buf = _Buffer(tensor, "reduce")
    _check_avg(op, buf, "reduce")
    if g.size == 1 or g.mpi is None:
        return _done(_finish_reduce(buf, op, g.size), async_op)
    if g.rank == root:
        g.comm.Reduce(g.mpi.IN_PLACE, buf.array, _mpi_op(g, op), root=root)
        _finish_reduce(buf, op, g.size)()
    else:
        g.comm.Reduce(buf.array, None, _mpi_op(g, op), root=root)
    return Work() if async_op else None


def _root_list(g: ProcessGroup, root: int, items, name: str, who: str) -> list:
    """A list argument only the root gives (gather_list, scatter_list): on the root it
    must hold one item per rank; elsewhere it must be empty or None (PyTorch's rule)."""
    if g.rank == root:
        if not items:
            raise ValueError(f"{who}: Argument ``{name}`` must be specified on the "
                             f"{'destination' if who.startswith('gather') else 'source'} "
                             "rank.")
        if len(items) != g.size:
            raise ValueError(f"{who}: expected a {name} of {g.size} items (the group size), "
                             f"found {len(items)}")
        return list(items)
    if items:
        raise ValueError(f"{who}: Argument ``{name}`` must NOT be specified on non-"
                         f"{'destination' if who.startswith('gather') else 'source'} ranks.")
    return []


def gather(tensor, gather_list: Optional[List] = None, dst: Optional[int] = None,
           group: Optional[ProcessGroup] = None, async_op: bool = False,
           group_dst: Optional[int] = None):
    """Rank ``dst``'s ``gather_list[r]`` becomes rank r's ``tensor`` (the other ranks give
    no list)."""
    g = _group(group)
    root = _root(g, dst, group_dst, "gather")
    outs = [_Buffer(t, "gather") for t in _root_list(g, root, gather_list, "gather_list",
                                                   "gather")]
    send = _Buffer(tensor, "gather", writable=False)
    for o in outs:
        _same_shape(o.array, send.array, "gather")
    whole = np.empty((g.size,) + send.array.shape, send.array.dtype) if outs else None
    if g.size == 1 or g.mpi is None:
        whole[0] = send.array
    else:
        g.comm.Gather(send.array, whole, root=root)
    for o, part in zip(outs, whole if outs else ()):
        o.array[...] = part
        o.store()
    return Work() if async_op else None


def scatter(tensor, scatter_list: Optional[List] = None, src: Optional[int] = None,
            group: Optional[ProcessGroup] = None, async_op: bool = False,
            group_src: Optional[int] = None):
    """Rank r's ``tensor`` becomes rank ``src``'s ``scatter_list[r]`` (the other ranks give
    no list)."""
    g = _group(group)
    root = _root(g, src, group_src, "scatter")
    ins = [_Buffer(t, "scatter", writable=False)
           for t in _root_list(g, root, scatter_list, "scatter_list", "scatter")]
    out = _Buffer(tensor, "scatter")
    for i in ins:
        _same_shape(i.array, out.array, "scatter")
    whole = np.stack([i.array for i in ins]) if ins else None
    if g.size == 1 or g.mpi is None:
        out.array[...] = whole[0]
    else:
        g.comm.Scatter(whole, out.array, root=root)
    out.store()
    return Work() if async_op else None


def _alltoallv(g: ProcessGroup, send: np.ndarray, send_counts, recv: np.ndarray,
               recv_counts) -> None:
    """MPI Alltoallv of flat element counts (rank order) between two flat arrays."""
    displ = lambda counts: np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)  # noqa
    if g.size == 1 or g.mpi is None:
        recv[...] = send
        return
    g.comm.Alltoallv([send, (list(send_counts), list(displ(send_counts)))],
                     [recv, (list(recv_counts), list(displ(recv_counts)))])


def all_to_all(output_tensor_list: List, input_tensor_list: List,
               group: Optional[ProcessGroup] = None, async_op: bool = False):
    """Rank r's ``output_tensor_list[i]`` becomes rank i's ``input_tensor_list[r]`` (tensors
    of one dtype; each pair's sizes must agree)."""
    g = _group(group)
    for name, items in (("output_tensor_list", output_tensor_list),
                        ("input_tensor_list", input_tensor_list)):
        if len(items) != g.size:
            raise ValueError(f"all_to_all: expected a {name} of {g.size} tensors (the group "
                             f"size), found {len(items)}")
    ins = [_Buffer(t, "all_to_all", writable=False) for t in input_tensor_list]
    outs = [_Buffer(t, "all_to_all") for t in output_tensor_list]
    dtypes = {b.array.dtype for b in ins + outs}
    if len(dtypes) != 1:
        raise ValueError(f"all_to_all: expected tensors of one dtype, found "
                         f"{sorted(str(d) for d in dtypes)}")
    send = np.concatenate([b.array.reshape(-1) for b in ins])
    recv = np.empty(sum(b.array.size for b in outs), send.dtype)
    _alltoallv(g, send, [b.array.size for b in ins], recv, [b.array.size for b in outs])
    at = 0
    for b in outs:
        b.array.reshape(-1)[...] = recv[at:at + b.array.size]
        at += b.array.size
        b.store()
    return Work() if async_op else None


def _splits(sizes, n0: int, size: int, name: str) -> list:
    if sizes is None or len(sizes) == 0:
        if n0 % size:
            raise ValueError(f"all_to_all_single: dim 0 of {name} ({n0}) must divide by the "
                             f"group size {size} when no split sizes are given")
        return [n0 // size] * size
    sizes = [int(k) for k in sizes]
    if len(sizes) != size or sum(sizes) != n0 or min(sizes) < 0:
        raise ValueError(f"all_to_all_single: {name} split sizes {sizes} must be {size} "
                         f"sizes (the group size) that sum to dim 0 ({n0})")
    return sizes


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group: Optional[ProcessGroup] = None, async_op: bool = False):
    """Split ``input`` along dim 0 (equally, or by ``input_split_sizes``) and send part i
    to rank i; ``output`` receives rank i's part for this rank at block i along dim 0."""
    g = _group(group)
    send = _Buffer(input, "all_to_all_single", writable=False)
    out = _Buffer(output, "all_to_all_single")
    if send.array.dtype != out.array.dtype or send.array.shape[1:] != out.array.shape[1:]:
        raise ValueError(f"all_to_all_single: input {send.array.dtype}"
                         f"{list(send.array.shape)} and output {out.array.dtype}"
                         f"{list(out.array.shape)} need one dtype and the same dims after 0")
    row = int(np.prod(send.array.shape[1:], dtype=np.int64))
    ins = _splits(input_split_sizes, send.array.shape[0], g.size, "input")
    outs = _splits(output_split_sizes, out.array.shape[0], g.size, "output")
    recv = out.array if not out.staged else np.empty_like(out.array)
    _alltoallv(g, np.ascontiguousarray(send.array).reshape(-1), [k * row for k in ins],
               recv.reshape(-1), [k * row for k in outs])
    if recv is not out.array:
        out.array[...] = recv
    out.store()
    return Work() if async_op else None


def _same_shape(a, b, who: str) -> None:
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        raise ValueError(f"{who}: expected tensors of one shape and dtype, found "
                         f"{a.dtype}{list(a.shape)} and {b.dtype}{list(b.shape)}")


def all_gather(tensor_list: List, tensor, group: Optional[ProcessGroup] = None,
               async_op: bool = False):
    """``tensor_list[r]`` becomes rank r's ``tensor``, on every rank."""
    g = _group(group)
    if len(tensor_list) != g.size:
        raise ValueError(f"all_gather: expected a list of {g.size} tensors (the group size), "
                         f"found {len(tensor_list)}")
    send = _Buffer(tensor, "all_gather", writable=False)
    outs = [_Buffer(t, "all_gather") for t in tensor_list]
    for o in outs:
        _same_shape(o.array, send.array, "all_gather")
    whole = np.empty((g.size,) + send.array.shape, send.array.dtype)
    if g.size == 1 or g.mpi is None:
        whole[0] = send.array
    else:
        g.comm.Allgather(send.array, whole)
    for o, part in zip(outs, whole):
        o.array[...] = part
        o.store()
    return Work() if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group: Optional[ProcessGroup] = None,
                           async_op: bool = False):
    """The ranks' ``input_tensor`` concatenated along dim 0 (or stacked, when
    ``output_tensor`` has one more dim) into ``output_tensor``."""
    g = _group(group)
    send = _Buffer(input_tensor, "all_gather_into_tensor", writable=False)
    out = _Buffer(output_tensor, "all_gather_into_tensor")
    if out.array.size != g.size * send.array.size or out.array.dtype != send.array.dtype:
        raise ValueError(f"all_gather_into_tensor: the output needs {g.size} x the input's "
                         f"elements of its dtype ({send.array.dtype}); found "
                         f"{out.array.dtype}{list(out.array.shape)} for an input of "
                         f"{list(send.array.shape)}")
    if g.size == 1 or g.mpi is None:
        out.array.reshape(-1)[...] = send.array.reshape(-1)
        return _done(out.store, async_op)
    if async_op:
        return Work(g.comm.Iallgather(send.array, out.array), out.store)
    g.comm.Allgather(send.array, out.array)
    out.store()
    return None


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM,
                          group: Optional[ProcessGroup] = None, async_op: bool = False):
    """Reduce ``input`` (the group size x ``output``'s elements, rank r's part being the r-th
    block along dim 0) over the ranks and give rank r its block in ``output``."""
    g = _group(group)
    op = _op(op)
    send = _Buffer(input, "reduce_scatter_tensor", writable=False)
    out = _Buffer(output, "reduce_scatter_tensor")
    _check_avg(op, out, "reduce_scatter_tensor")
    if send.array.size != g.size * out.array.size or out.array.dtype != send.array.dtype:
        raise ValueError(f"reduce_scatter_tensor: the input needs {g.size} x the output's "
                         f"elements of its dtype; found input "
                         f"{send.array.dtype}{list(send.array.shape)} and output "
                         f"{out.array.dtype}{list(out.array.shape)}")
    finish = _finish_reduce(out, op, g.size)
    if g.size == 1 or g.mpi is None:
        out.array.reshape(-1)[...] = send.array.reshape(-1)
        return _done(finish, async_op)
    if async_op:
        return Work(g.comm.Ireduce_scatter_block(send.array, out.array, _mpi_op(g, op)),
                    finish)
    g.comm.Reduce_scatter_block(send.array, out.array, _mpi_op(g, op))
    finish()
    return None


def send(tensor, dst: int, group: Optional[ProcessGroup] = None, tag: int = 0) -> None:
    """Send ``tensor`` to rank ``dst`` (blocking until MPI has taken it)."""
    g = _group(group)
    g.comm.Send(_Buffer(tensor, "send", writable=False).array,
                dest=_group_rank(g, dst, "send"), tag=tag)


def recv(tensor, src: Optional[int] = None, group: Optional[ProcessGroup] = None,
         tag: int = 0) -> int:
    """Receive into ``tensor`` from rank ``src`` (any rank when None); returns the sender's
    rank."""
    g = _group(group)
    buf = _Buffer(tensor, "recv")
    status = g.mpi.Status()
    source = g.mpi.ANY_SOURCE if src is None else _group_rank(g, src, "recv")
    g.comm.Recv(buf.array, source=source, tag=tag, status=status)
    buf.store()
    return g.ranks[status.Get_source()]


def isend(tensor, dst: int, group: Optional[ProcessGroup] = None, tag: int = 0) -> Work:
    g = _group(group)
    buf = _Buffer(tensor, "isend", writable=False)
    return Work(g.comm.Isend(buf.array, dest=_group_rank(g, dst, "isend"), tag=tag))


def irecv(tensor, src: Optional[int] = None, group: Optional[ProcessGroup] = None,
          tag: int = 0) -> Work:
    g = _group(group)
    buf = _Buffer(tensor, "irecv")
    source = g.mpi.ANY_SOURCE if src is None else _group_rank(g, src, "irecv")
    return Work(g.comm.Irecv(buf.array, source=source, tag=tag), buf.store)


def broadcast_object_list(object_list: list, src: Optional[int] = None,
                          group: Optional[ProcessGroup] = None, device=None,
                          group_src: Optional[int] = None) -> None:
    """Every rank's ``object_list`` items become rank ``src``'s (pickled, as PyTorch's are;
    the lists must have one length on every rank)."""
    g = _group(group)
    root = _root(g, src, group_src, "broadcast_object_list")
    if g.size == 1 or g.mpi is None:
        return
    got = g.comm.bcast(list(object_list) if g.rank == root else None, root=root)
    if len(got) != len(object_list):
        raise ValueError(f"broadcast_object_list: rank {g.ranks[root]} sent {len(got)} "
                         f"objects, but this rank's list holds {len(object_list)}")
    object_list[:] = got


def all_gather_object(object_list: list, obj, group: Optional[ProcessGroup] = None) -> None:
    """``object_list[r]`` becomes rank r's ``obj`` (pickled, as PyTorch's are)."""
    g = _group(group)
    if len(object_list) != g.size:
        raise ValueError(f"all_gather_object: expected a list of {g.size} items (the group "
                         f"size), found {len(object_list)}")
    object_list[:] = [obj] if g.size == 1 or g.mpi is None else g.comm.allgather(obj)


def gather_object(obj, object_gather_list: Optional[list] = None, dst: Optional[int] = None,
                  group: Optional[ProcessGroup] = None,
                  group_dst: Optional[int] = None) -> None:
    """Rank ``dst``'s ``object_gather_list[r]`` becomes rank r's ``obj`` (pickled); the
    other ranks give no list."""
    g = _group(group)
    root = _root(g, dst, group_dst, "gather_object")
    _root_list(g, root, object_gather_list, "gather_list", "gather_object")
    got = [obj] if g.size == 1 or g.mpi is None else g.comm.gather(obj, root=root)
    if g.rank == root:
        object_gather_list[:] = got


def scatter_object_list(scatter_object_output_list: list,
                        scatter_object_input_list: Optional[list] = None,
                        src: Optional[int] = None, group: Optional[ProcessGroup] = None,
                        group_src: Optional[int] = None) -> None:
    """``scatter_object_output_list[0]`` becomes rank ``src``'s
    ``scatter_object_input_list[r]`` on rank r (pickled)."""
    g = _group(group)
    root = _root(g, src, group_src, "scatter_object_list")
    if not isinstance(scatter_object_output_list, list) or not scatter_object_output_list:
        raise ValueError("scatter_object_list: Expected argument scatter_object_output_list "
                         "to be a list of size at least 1.")
    items = _root_list(g, root, scatter_object_input_list, "scatter_list", "scatter_object")
    got = items[0] if g.size == 1 or g.mpi is None else g.comm.scatter(
        items if g.rank == root else None, root=root)
    scatter_object_output_list[0] = got
