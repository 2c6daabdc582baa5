"""``duograph.distributed``: data-parallel training on several processes over MPI, with
PyTorch's names (``torch.distributed``).

    import duograph as dg
    import duograph.distributed as dist
    dist.init_process_group("mpi")
    t = dg.ones(3) * dist.get_rank()
    dist.all_reduce(t)                      # in place, on every rank

Run with ``mpiexec -n 4 python script.py`` or ``duograph run -n 4 script.py``;
``pip install 'duograph[distributed]'`` installs mpi4py and mpich. mpi4py is imported (and
MPI initialised) only by ``init_process_group``.
"""
from . import graph_ops  # noqa: F401  (installs the runner of the IR's collectives)
from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor,
                          all_gather_object, all_reduce, all_to_all, all_to_all_single,
                          broadcast, broadcast_object_list, gather, gather_object, irecv,
                          isend, recv, reduce, reduce_scatter_tensor, scatter,
                          scatter_object_list, send)
from .process_group import (DistributedError, ProcessGroup, barrier, destroy_process_group,
                            get_backend, get_default_group, get_process_group_ranks, get_rank,
                            get_world_size, init_process_group, is_available, is_initialized,
                            is_mpi_available, new_group)

GroupMember = ProcessGroup

__all__ = [
    "ReduceOp", "Work", "ProcessGroup", "DistributedError", "init_process_group",
    "destroy_process_group", "is_available", "is_initialized", "is_mpi_available",
    "get_rank", "get_world_size", "get_backend", "get_default_group", "barrier", "new_group",
    "get_process_group_ranks", "all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "reduce_scatter_tensor", "send", "recv", "isend", "irecv",
    "broadcast_object_list", "all_gather_object", "gather", "scatter", "all_to_all",
    "all_to_all_single", "gather_object", "scatter_object_list",
]
