"""Differentiable collectives (``torch.distributed.nn``): see ``functional``."""
from . import functional  # noqa: F401
