"""``duograph.amp`` (``torch.amp``): mixed precision.

- ``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: ops run in a
  lower precision where PyTorch's autocast lists say it is safe (``autocast_mode``);
- ``GradScaler``: loss scaling for float16 gradients, with skipped steps on inf/NaN
  (``grad_scaler``).
"""
from .autocast_mode import (autocast, get_autocast_dtype, is_autocast_available,  # noqa: F401
                            is_autocast_enabled)
from .grad_scaler import GradScaler, OptState  # noqa: F401

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "is_autocast_available",
           "GradScaler"]
