"""Input checks shared by the layer files (``layers``, ``conv_layers``, ``misc_layers``,
``rnn``): errors that name the layer, its repr and the user's line."""
from __future__ import annotations

from typing import Iterable

from ..graphlib.errors import ShapeError
from .module import Module


def _shape_error(layer: Module, message: str) -> ShapeError:
    """A ShapeError naming the layer (its class and repr) and the user's line."""
    from ..graphlib.source import user_source
    return ShapeError(f"{type(layer).__name__}: {message}\n  layer: {layer!r}"
                      f"\n  in: {user_source()}")


_IMAGE = "a 4-D (N, C, H, W) or 3-D (C, H, W) input"


def _check_input(layer: Module, x, ndims: Iterable[int], what: str):
    if x.ndim not in tuple(ndims):
        raise _shape_error(layer, f"expected {what}, found an input of shape {list(x.shape)}")
