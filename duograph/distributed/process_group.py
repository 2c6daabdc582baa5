"""Process groups on MPI (mpi4py): PyTorch's ``torch.distributed`` names over an MPI
communicator.

``init_process_group(backend="mpi")`` imports ``mpi4py.MPI`` (which initialises MPI: never at
import time) and wraps ``COMM_WORLD`` as the default group. It also makes an uncaught exception
on any rank end the whole job: the traceback is printed with the rank, then
``COMM_WORLD.Abort`` stops every rank (a plain mpi4py script whose rank raises while another
waits in a collective hangs forever). Run a script on several processes with
``mpiexec -n 4 python train.py`` or ``duograph run -n 4 train.py``.

Without mpi4py a script still runs as one process: ``init_process_group`` makes a group of one
rank and warns once how to install MPI, unless the environment says an MPI launcher started
several ranks (then running each as a separate job would be silently wrong: it raises).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from typing import List, Optional, Sequence

from ..graphlib.config import config

INSTALL = "pip install 'duograph[distributed]' (mpi4py and mpich)"


class DistributedError(RuntimeError):
    """A misuse of duograph.distributed (not initialised, a bad rank, differing ranks)."""


class _LocalComm:
    """A communicator of one rank (no MPI installed): every collective is the identity."""

    rank = 0
    size = 1

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 1


class ProcessGroup:
    """A set of ranks that run collectives together: an MPI communicator (``comm``), this
    process's ``rank`` in it and its ``size``; ``ranks`` are the members' global ranks."""

    def __init__(self, comm, ranks: Sequence[int], mpi=None):
        self.comm = comm
        self.mpi = mpi
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.ranks = list(ranks)

    def __repr__(self) -> str:
        return f"ProcessGroup(rank={self.rank}, size={self.size}, ranks={self.ranks})"


class _State:
    def __init__(self):
        self.default: Optional[ProcessGroup] = None
        self.backend: Optional[str] = None
        self.hooked = False
        self.lock = threading.Lock()


_state = _State()


def is_available() -> bool:
    """Whether mpi4py can be imported (without initialising MPI)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def is_initialized() -> bool:
    return _state.default is not None


def is_mpi_available() -> bool:
    return is_available()


def _launched_size() -> int:
    """How many ranks an MPI launcher started, from the variables launchers set on each rank
    (MPICH's Hydra and Slurm's PMI, Open MPI); 1 without a launcher. Not a duograph
    setting: read here, not through ``dg.config``."""
    for found in (os.environ.get("PMI_SIZE"), os.environ.get("OMPI_COMM_WORLD_SIZE")):
        if found is not None and found.isdigit():
            return int(found)
    return 1


def init_process_group(backend: str = "mpi", init_method=None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None,
                       group_name: str = "", pg_options=None, device_id=None) -> None:
    """Join the default process group: every rank the MPI launcher started.

    ``backend`` is "mpi" (PyTorch's "gloo" is accepted and means MPI here: duograph has no
    transport of its own). ``world_size`` and ``rank``, when given, must be MPI's own."""
    if backend not in ("mpi", "gloo", None):
        raise ValueError(f"init_process_group: backend {backend!r} is not available; "
                         "duograph runs collectives on MPI (backend='mpi')")
    with _state.lock:
        if _state.default is not None:
            raise DistributedError("init_process_group: the default process group is already "
                                   "initialised (call destroy_process_group first)")
        if not is_available():
            launched = _launched_size()
            if launched > 1:
                raise DistributedError(
                    f"init_process_group: an MPI launcher started {launched} ranks, but mpi4py "
                    f"is not installed, so each would train alone: {INSTALL}")
            warnings.warn(f"duograph.distributed: mpi4py is not installed; running as one "
                          f"process (world size 1). For several processes: {INSTALL}",
                          RuntimeWarning, stacklevel=2)
            group = ProcessGroup(_LocalComm(), [0])
        else:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
            group = ProcessGroup(comm, range(comm.Get_size()), MPI)
            _install_abort_on_error(MPI)
        if world_size not in (-1, None) and world_size != group.size:
            raise DistributedError(f"init_process_group: world_size={world_size}, but MPI "
                                   f"started {group.size} ranks")
        if rank not in (-1, None) and rank != group.rank:
            raise DistributedError(f"init_process_group: rank={rank}, but MPI gave this "
                                   f"process rank {group.rank}")
        _state.default = group
        _state.backend = "mpi"


def _install_abort_on_error(MPI) -> None:
    """An uncaught exception (main thread or another) prints its traceback with the rank and
    aborts every rank of the job, instead of leaving the others waiting forever."""
    if _state.hooked:
        return
    _state.hooked = True
    previous = sys.excepthook
    rank = MPI.COMM_WORLD.Get_rank()

    def abort(kind, value, tb):
        # the one-line summary first: the launcher may tear the job down before a long
        # traceback of this rank (or of another rank failing at the same time) is forwarded
        try:
            sys.stderr.write(f"duograph.distributed: uncaught {kind.__name__} on rank {rank}: "
                             f"{value}; aborting the job\n")
            sys.stderr.flush()
            previous(kind, value, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            time.sleep(0.5)         # let the launcher forward what was written
        finally:
            MPI.COMM_WORLD.Abort(1)
    sys.excepthook = abort

    def thread_abort(args):
        abort(args.exc_type, args.exc_value, args.exc_traceback)
    threading.excepthook = thread_abort


def destroy_process_group(group: Optional[ProcessGroup] = None) -> None:
    """Leave the default group (or free ``group``'s communicator). MPI itself is finalised
    by mpi4py at exit."""
    if group is None or group is _state.default:
        _state.default = None
        _state.backend = None
        return
    if group.mpi is not None and group.comm is not group.mpi.COMM_WORLD:
        group.comm.Free()


def get_default_group() -> ProcessGroup:
    g = _state.default
    if g is None:
        raise DistributedError("duograph.distributed: the default process group is not "
                               "initialised; call dg.distributed.init_process_group() first "
                               "(and run with `mpiexec -n N python script.py` or "
                               "`duograph run -n N script.py`)")
    return g


def _group(group: Optional[ProcessGroup]) -> ProcessGroup:
    return get_default_group() if group is None else group


def get_rank(group: Optional[ProcessGroup] = None) -> int:
    """This process's rank in ``group`` (the default group: its global rank)."""
    return _group(group).rank


def get_world_size(group: Optional[ProcessGroup] = None) -> int:
    return _group(group).size


def get_backend(group: Optional[ProcessGroup] = None) -> str:
    _group(group)
    return "mpi"


def barrier(group: Optional[ProcessGroup] = None, async_op: bool = False, device_ids=None):
    g = _group(group)
    if g.size > 1:
        g.comm.Barrier()
    return None


def new_group(ranks: Optional[Sequence[int]] = None, timeout=None, backend=None,
              pg_options=None) -> Optional[ProcessGroup]:
    """A group of the global ``ranks`` (all when None), as an MPI communicator split. Every
    rank must call it (as in PyTorch); ranks outside get None."""
    world = get_default_group()
    members: List[int] = list(range(world.size)) if ranks is None else sorted(set(ranks))
    bad = [r for r in members if not 0 <= r < world.size]
    if bad:
        raise DistributedError(f"new_group: ranks {bad} are not in the world of "
                               f"{world.size} ranks")
    if world.mpi is None:
        return ProcessGroup(_LocalComm(), [0]) if 0 in members else None
    inside = world.rank in members
    color = 0 if inside else world.mpi.UNDEFINED
    comm = world.comm.Split(color, members.index(world.rank) if inside else 0)
    if not inside:
        return None
    return ProcessGroup(comm, members, world.mpi)


def get_process_group_ranks(group: ProcessGroup) -> List[int]:
    return list(group.ranks)


# the sleeping wait (``dg.config.collective_wait = "sleep"``): tests for this long first (a
# collective that is about to finish costs no sleep), then sleeps this long between tests
_SPIN_S = 100e-6
_NAP_S = 50e-6


def wait_request(request) -> None:
    """Complete an MPI request as ``dg.config.collective_wait`` says: "spin" calls MPI's
    ``Wait`` (MPICH busy-polls the core until the peers arrive); "sleep" tests it, and after
    ``_SPIN_S`` sleeps ``_NAP_S`` between tests, so a rank that waits for a lagging peer
    leaves the core to other processes (the peer itself, on a machine with fewer free cores
    than ranks) at up to one nap of extra latency."""
    if config.collective_wait != "sleep":
        request.Wait()
        return
    test = request.Test
    if test():
        return
    start = time.perf_counter()
    while not test():
        if time.perf_counter() - start > _SPIN_S:
            time.sleep(_NAP_S)
