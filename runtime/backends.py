"""Array backends: numpy on the CPU (always), cupy on the GPU (optional, imported lazily)."""
from __future__ import annotations

import numpy as np

BACKENDS = ("numpy", "cupy")


def get_backend(name: str):
    """The array module for ``name`` ('numpy' or 'cupy')."""
    if name == "numpy":
        return np
    if name == "cupy":
        try:
            import cupy
        except ImportError as e:
            raise RuntimeError("the cupy backend needs cupy and a CUDA device: "
                               "pip install 'duograph[gpu]'") from e
        return cupy
    raise ValueError(f"unknown backend {name!r}: expected one of {BACKENDS}")
