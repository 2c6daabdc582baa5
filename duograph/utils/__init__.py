"""``duograph.utils``: ``duograph.utils.data`` is ``duograph.data`` (as ``torch.utils.data``)."""
from . import data  # noqa: F401
