"""Sampling an image at arbitrary points: ``grid_sample`` and the grids of affine maps,
``affine_grid`` (torch.nn.functional's), written with gathers and elementwise ops so both
differentiate with respect to the image and the grid."""
from __future__ import annotations

from .. import dtypes
from ..errors import DTypeError, ShapeError, composite, located
from ._common import operand
from .elementwise import abs, cast, clamp, floor, fmod, logical_and, where
from .layout import einsum
from .creation import linspace
from .pointwise import round
from .shape import expand, gather, reshape, stack, unsqueeze

_MODES = ("bilinear", "nearest")
_PADDINGS = ("zeros", "border", "reflection")


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1.0) * (0.5 * (size - 1))
    return ((coord + 1.0) * size - 1.0) * 0.5


def _reflect(coord, twice_low: int, twice_high: int):
    if twice_low == twice_high:
        return coord * 0.0
    low = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    coord = abs(coord - low)
    extra = fmod(coord, span)
    flips = floor(coord / span)
    even = fmod(flips, 2.0) == 0
    return where(even, extra + low, span - extra + low)


def _source(coord, size: int, padding_mode: str, align_corners: bool):
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        coord = clamp(coord, 0.0, float(size - 1))
    elif padding_mode == "reflection":
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1))
        else:
            coord = _reflect(coord, -1, 2 * size - 1)
        coord = clamp(coord, 0.0, float(size - 1))
    return coord


def _pick(flat, ix, iy, h: int, w: int, n: int, c: int):
    """``flat`` (N, C, H*W) at integer positions (ix, iy) of shape (N, Ho, Wo): (N, C, Ho,
    Wo) values, 0 where the position falls outside the image."""
    inside = logical_and(logical_and(ix >= 0, ix <= w - 1), logical_and(iy >= 0, iy <= h - 1))
    index = cast(clamp(iy, 0, h - 1) * w + clamp(ix, 0, w - 1), "int64")
    ho, wo = ix.shape[1], ix.shape[2]
    index = expand(reshape(index, n, 1, ho * wo), n, c, ho * wo)
    values = reshape(gather(flat, 2, index), n, c, ho, wo)
    return where(unsqueeze(inside, 1), values, 0.0)


@composite("grid_sample")
def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners=None):
    """Sample the (N, C, H, W) ``input`` at the points of ``grid`` (N, Ho, Wo, 2), whose
    last dim holds (x, y) in [-1, 1] (-1 the left/top edge: pixel centres with
    ``align_corners=True``, pixel edges otherwise, the default), as
    ``torch.nn.functional.grid_sample``: ``mode`` 'bilinear' or 'nearest' (half-way points
    round to even, as PyTorch), ``padding_mode`` 'zeros', 'border' or 'reflection' for
    points outside. Differentiable with respect to ``input`` and (bilinear) ``grid``.
    4-D inputs only; 5-D (volumetric) and 'bicubic' are refused."""
    x, g = operand(input, "grid_sample"), operand(grid, "grid_sample", "grid")
    if mode not in _MODES:
        raise NotImplementedError(located(f"grid_sample: expected mode 'bilinear' or "
                                          f"'nearest' (bicubic is not supported), found "
                                          f"{mode!r}"))
    if padding_mode not in _PADDINGS:
        raise ValueError(located(f"grid_sample: expected padding_mode to be 'zeros', 'border', "
                                 f"or 'reflection', but got: '{padding_mode}'"))
    if x.ndim != 4 or g.ndim != 4 or g.shape[-1] != 2:
        raise ShapeError(located(f"grid_sample: expected a 4-D input (N, C, H, W) and a grid "
                                 f"(N, H_out, W_out, 2), found {list(x.shape)} and "
                                 f"{list(g.shape)} (5-D inputs are not supported)"))
    if x.shape[0] != g.shape[0]:
        raise ShapeError(located(f"grid_sample: expected grid and input to have same batch "
                                 f"size, but got input with sizes {list(x.shape)} and grid "
                                 f"with sizes {list(g.shape)}"))
    if not dtypes.is_float(x.dtype) or x.dtype != g.dtype:
        raise DTypeError(located(f"grid_sample: expected input and grid of one floating-point "
                                 f"dtype, found {x.dtype} and {g.dtype}"))
    align = bool(align_corners)
    n, c, h, w = x.shape
    fx = _source(g[..., 0], w, padding_mode, align)
    fy = _source(g[..., 1], h, padding_mode, align)
    flat = reshape(x, n, c, h * w)
    if mode == "nearest":
        return _pick(flat, round(fx), round(fy), h, w, n, c)
    x0, y0 = floor(fx), floor(fy)
    x1, y1 = x0 + 1.0, y0 + 1.0
    wx1, wy1 = fx - x0, fy - y0
    wx0, wy0 = 1.0 - wx1, 1.0 - wy1
    out = None
    for ix, iy, weight in ((x0, y0, wx0 * wy0), (x1, y0, wx1 * wy0), (x0, y1, wx0 * wy1),
                           (x1, y1, wx1 * wy1)):
        term = _pick(flat, ix, iy, h, w, n, c) * unsqueeze(weight, 1)
        out = term if out is None else out + term
    return out


@composite("affine_grid")
def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) of the affine maps ``theta`` (N, 2, 3) for an output
    of ``size`` (N, C, H, W), as ``torch.nn.functional.affine_grid`` (4-D sizes only)."""
    t = operand(theta, "affine_grid", "theta")
    size = tuple(int(s) for s in size)
    if len(size) != 4:
        raise NotImplementedError(located(f"affine_grid: only 4-D sizes (N, C, H, W) are "
                                          f"supported, found {list(size)}"))
    if t.ndim != 3 or tuple(t.shape[1:]) != (2, 3) or t.shape[0] != size[0]:
        raise ShapeError(located(f"affine_grid: expected a batch of 2D affine matrices of "
                                 f"shape Nx2x3 for size {list(size)}. Got {list(t.shape)}."))
    if not dtypes.is_float(t.dtype):
        raise DTypeError(located(f"affine_grid: expected a floating-point theta, found "
                                 f"{t.dtype}"))
    n, _, h, w = size

    def axis(steps: int):
        if steps <= 1:
            return linspace(-1.0, 1.0, 1, dtype=t.dtype) * 0.0
        ramp = linspace(-1.0, 1.0, steps, dtype=t.dtype)
        return ramp if align_corners else ramp * ((steps - 1) / steps)
    xs = expand(reshape(axis(w), 1, w), h, w)
    ys = expand(reshape(axis(h), h, 1), h, w)
    base = stack([xs, ys, xs * 0.0 + 1.0], -1)                       # (H, W, 3)
    return einsum("hwk,njk->nhwj", base, t)
