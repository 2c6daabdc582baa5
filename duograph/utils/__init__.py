"""``duograph.utils``: ``duograph.utils.data`` is ``duograph.data`` (as ``torch.utils.data``);
``duograph.utils.checkpoint``: activation checkpointing (``torch.utils.checkpoint``)."""
from . import data  # noqa: F401
from . import checkpoint  # noqa: F401
