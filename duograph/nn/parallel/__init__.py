"""``duograph.nn.parallel``: ``DistributedDataParallel`` (PyTorch's name and arguments)."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
