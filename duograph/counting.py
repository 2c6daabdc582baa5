"""Ops whose result size depends on the input's values, so they run eagerly only:
``bincount``."""
from __future__ import annotations

import numpy as np

from .eager.tensors import Tensor
from .graphlib import dtypes
from .graphlib.errors import DTypeError, GraphError, ShapeError


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """How often each value 0, 1, ..., max(input) occurs in the 1-D non-negative integer
    ``input`` (at least ``minlength`` bins), or the sum of ``weights`` per value, as
    ``torch.bincount``: int64 counts; float32 sums for float32 weights, float64 for any other
    weights. No gradient (PyTorch has none). Eager tensors only: the length depends on the
    values, so a graph cannot hold it (use ``dg.index_add`` into a fixed size there)."""
    if not isinstance(input, Tensor):
        if hasattr(input, "graph"):
            raise GraphError("bincount: the output length depends on the input's values, so "
                             "it is eager-only; in a graph use dg.index_add into a fixed size")
        raise TypeError(f"bincount(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if input.ndim != 1 or dtypes.kind(input.dtype) != "i":
        if dtypes.kind(input.dtype) != "i":
            raise DTypeError(f"bincount: expected an integer input, found {input.dtype}")
        raise ShapeError(f"bincount only supports 1-d non-negative integral inputs, found "
                         f"shape {list(input.shape)}")
    if not isinstance(minlength, int) or minlength < 0:
        raise ValueError(f"bincount: minlength should be >= 0, found {minlength!r}")
    values = np.asarray(input.detach().cpu().numpy()).astype(np.int64)
    if values.size and values.min() < 0:
        raise ShapeError("bincount only supports 1-d non-negative integral inputs, found "
                         f"{int(values.min())}")      # a RuntimeError, as PyTorch's
    if weights is None:
        return Tensor._wrap(np.bincount(values, minlength=minlength).astype(np.int64))
    if not isinstance(weights, Tensor) or tuple(weights.shape) != tuple(input.shape):
        raise ShapeError(f"bincount: weights should be 1-d and have the same length as input, "
                         f"found {list(getattr(weights, 'shape', []))} for input "
                         f"{list(input.shape)}")
    out_dtype = "float32" if weights.dtype == "float32" else "float64"
    w = np.asarray(weights.detach().cpu().numpy(), dtype=np.float64)
    return Tensor._wrap(np.bincount(values, weights=w, minlength=minlength).astype(out_dtype))
