"""``duograph.utils.data``: the same module as ``duograph.data`` (PyTorch's path to it)."""
import sys

from .. import data as _data

sys.modules[__name__] = _data
