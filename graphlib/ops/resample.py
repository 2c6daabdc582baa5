"""Resampling: interpolate (nearest, linear, bilinear, bicubic, trilinear, area),
pixel_shuffle / pixel_unshuffle, and unfold / fold (im2col and its adjoint).

``interpolate`` is separable: one dim at a time (the last first, the order of PyTorch's CPU
kernel), each a few ``index_select``s of the input with constant source indices, weighted by
constant per-position weights. The indices and weights are computed as PyTorch computes them
(float32 arithmetic for float32 input, with the fused multiply-adds its build uses, its
clamping and rounding rules): nearest indices are PyTorch's exactly, and the float32 values
differ from PyTorch's by a few ulps at most (measured: 7e-7 for bicubic, 5e-7 for bilinear on
unit-scale data; float64 within 6e-15). The gradient (index_select's, a scatter-add) adds the
cotangents at the same places PyTorch's backward does.

``unfold`` and ``fold`` are a pair of ops, each the other's vjp (both are linear).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import flatten_batch, shape_of
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, register
from ..types import TensorType, dim_product, format_shape
from ._common import operand
from .conv import (_embed, _pair, _spatial_out, _window, adaptive_avg_pool2d)
from .creation import constant
from .elementwise import cast, clamp
from .pointwise import round
from .shape import index_select, permute, reshape

# -- interpolate -------------------------------------------------------------------------------

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
_RANK = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}


def _opmath(dtype: str):
    """The dtype PyTorch computes source positions and weights in."""
    return np.float64 if dtype == "float64" else np.float32


def _scale_value(ft, size: int, out: int, scale: Optional[float]):
    """PyTorch's compute_scales_value: 1/scale_factor where given, else size/out."""
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(size) / ft(out)


def _nearest_index(size: int, out: int, scale, exact: bool) -> np.ndarray:
    """Source index of each output position: floor(i * scale) or, nearest-exact,
    floor((i + 0.5) * scale), at most size-1, in float32 as PyTorch's CPU kernel (which has no
    shortcut for out == size: a scale_factor of 1.3 on 2 elements reads element 0 twice)."""
    dst = np.arange(out, dtype=np.int64)
    s = _scale_value(np.float32, size, out, scale)
    if exact:
        pos = ((dst + 0.5) * np.float64(s)).astype(np.float32)
    else:
        pos = dst.astype(np.float32) * s
    return np.minimum(np.floor(pos).astype(np.int64), size - 1)


def _source_position(ft, size: int, out: int, scale, align_corners: bool, cubic: bool):
    """PyTorch's area_pixel_compute_source_index over every output position, in ``ft``."""
    dst = np.arange(out).astype(ft)
    if align_corners:
        s = ft(size - 1) / ft(out - 1) if out > 1 else ft(0)
        return s * dst
    s = _scale_value(ft, size, out, scale)
    # scale * (i + 0.5) - 0.5 with one rounding (PyTorch's build contracts it to an FMA)
    pos = (np.float64(s) * (dst.astype(np.float64) + 0.5) - 0.5).astype(ft)
    return pos if cubic else np.maximum(pos, ft(0))


def _guard(ft, pos, size: int):
    """PyTorch's guard_index_and_lambda: floor index (at most size-1), weight in [0, 1]."""
    index = np.minimum(np.floor(pos).astype(np.int64), size - 1)
    lam = np.clip(pos - index.astype(ft), ft(0), ft(1)).astype(ft)
    return index, lam


def _linear_taps(ft, size, out, scale, align_corners):
    pos = _source_position(ft, size, out, scale, align_corners, False)
    i0, lam = _guard(ft, pos, size)
    i1 = i0 + (i0 < size - 1)
    return [(i0, (ft(1) - lam).astype(ft)), (i1, lam)]


def _cubic_taps(ft, size, out, scale, align_corners):
    a = ft(-0.75)
    pos = _source_position(ft, size, out, scale, align_corners, True)
    i, t = _guard(ft, pos, size)

    def fma(p, q, r):      # p * q + r rounded once (PyTorch's build contracts to FMAs)
        return (np.float64(p) * np.float64(q) + np.float64(r)).astype(ft) if ft is np.float32 \
            else p * q + r

    def conv1(x):          # |x| <= 1: ((A + 2) x - (A + 3)) x x + 1
        return fma(fma(a + ft(2), x, -(a + ft(3))) * x, x, ft(1))

    def conv2(x):          # 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A
        return fma(fma(fma(a, x, -(ft(5) * a)), x, ft(8) * a), x, -(ft(4) * a))
    weights = [conv2(t + ft(1)), conv1(t), conv1(ft(1) - t), conv2(ft(2) - t)]
    return [(np.clip(i - 1 + k, 0, size - 1), w.astype(ft)) for k, w in enumerate(weights)]


def _resample_dim(x, axis: int, taps):
    """sum_k x[..., idx_k, ...] * w_k along ``axis`` (the weights broadcast along it)."""
    trailing = x.ndim - 1 - axis
    out = None
    for idx, w in taps:
        picked = index_select(x, axis, constant(idx))
        term = picked * constant(w.astype(np.dtype(x.dtype)).reshape((-1,) + (1,) * trailing))
        out = term if out is None else out + term
    return out


def _interp_sizes(x, size, scale_factor, recompute_scale_factor, mode):
    """(output sizes, scale factors or None per dim), as torch.nn.functional.interpolate."""
    dim = x.ndim - 2
    spatial = list(x.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError(located("interpolate: only one of size or scale_factor should be "
                                 "defined"))
    if not all(isinstance(s, int) for s in spatial):
        raise ShapeError(located(f"interpolate: expected static spatial sizes, found input "
                                 f"{format_shape(x.shape)}"))
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(located("interpolate: recompute_scale_factor is not meaningful "
                                     "with an explicit size"))
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * dim
        if len(sizes) != dim:
            raise ValueError(located(
                f"interpolate: input and output must have the same number of spatial dims, "
                f"but got input with spatial dims of {spatial} and output size of "
                f"{list(sizes)}; give input as (N, C, d1, ..., dK) and size as (o1, ..., oK)"))
        sizes = [int(s) for s in sizes]
        scales = [None] * dim
    elif scale_factor is not None:
        scales = list(scale_factor) if isinstance(scale_factor, (list, tuple)) \
            else [scale_factor] * dim
        if len(scales) != dim:
            raise ValueError(located(
                f"interpolate: input and scale_factor must have the same number of spatial "
                f"dims, but got input with spatial dims of {spatial} and scale_factor of "
                f"{list(scales)}"))
        scales = [float(s) for s in scales]
        sizes = [math.floor(float(s) * f) for s, f in zip(spatial, scales)]
        if recompute_scale_factor or mode == "area":
            scales = [None] * dim
    else:
        raise ValueError(located("interpolate: either size or scale_factor should be defined"))
    if any(s <= 0 for s in sizes) or any(s <= 0 for s in spatial):
        raise ShapeError(located(f"interpolate: input and output sizes should be greater than "
                                 f"0, but got input {spatial} and output {sizes}"))
    return sizes, scales


@composite("interpolate")
def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: Optional[bool] = None,
                recompute_scale_factor: Optional[bool] = None, antialias: bool = False):
    """Resample the spatial dims of an (N, C, ...) input to ``size`` (or by ``scale_factor``),
    as torch.nn.functional.interpolate.

    Modes: 'nearest' (source index floor(i * in/out), PyTorch's rule), 'nearest-exact'
    (floor((i + 0.5) * in/out)), 'linear' (3-D input), 'bilinear' (4-D), 'bicubic' (4-D; cubic
    convolution with A = -0.75, taps clamped at the border), 'trilinear' (5-D), 'area'
    (adaptive average pooling; 3-D or 4-D). ``align_corners`` (interpolating modes only) maps
    the corner pixels' centres onto each other. A ``scale_factor`` gives the output size
    floor(in * scale_factor) and, unless ``recompute_scale_factor``, is also the scale the
    source positions use (as PyTorch). ``antialias`` is not supported."""
    x = operand(input, "interpolate")
    if mode not in _MODES:
        raise NotImplementedError(located(f"interpolate: expected mode to be one of "
                                          f"{', '.join(_MODES)}, found {mode!r}"))
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError(located("interpolate: align_corners can only be set with the "
                                     "interpolating modes: linear, bilinear, bicubic, "
                                     "trilinear"))
    elif align_corners is None:
        align_corners = False
    if antialias:
        raise NotImplementedError(located("interpolate: antialias=True is not supported"))
    if x.ndim not in (3, 4, 5):
        raise NotImplementedError(located(
            f"interpolate: expected a 3-D, 4-D or 5-D input (N, C, ...) for mode {mode!r}, "
            f"found {format_shape(x.shape)}"))
    if mode in _RANK and x.ndim != _RANK[mode]:
        raise NotImplementedError(located(
            f"interpolate: got a {x.ndim}-D input, but mode {mode!r} needs a "
            f"{_RANK[mode]}-D input (N, C, ...): found {format_shape(x.shape)}"))
    if x.dtype == "uint8" and mode in ("bilinear", "bicubic"):
        # images: PyTorch resamples uint8 for these two modes, bicubic in two passes (width,
        # then height) rounded to uint8 between them. Computed in float32 and rounded to
        # nearest here; PyTorch's CPU kernel uses fixed-point weights, so a value may differ
        # from its by 1.
        def to_uint8(t):
            return cast(clamp(round(t), 0, 255), "uint8")
        sizes, _ = _interp_sizes(x, size, scale_factor, recompute_scale_factor, mode)
        if mode == "bicubic" and size is None:
            scale_factor = None      # the two passes take the sizes (PyTorch's scales kept)
        if mode == "bicubic":
            wide = to_uint8(interpolate(cast(x, "float32"), (x.shape[2], sizes[1]),
                                        mode=mode, align_corners=align_corners))
            return to_uint8(interpolate(cast(wide, "float32"), tuple(sizes), mode=mode,
                                        align_corners=align_corners))
        return to_uint8(interpolate(cast(x, "float32"), size, scale_factor, mode,
                                    align_corners, recompute_scale_factor, antialias))
    if not dtypes.is_float(x.dtype) and mode != "nearest" and mode != "nearest-exact":
        raise DTypeError(located(f"interpolate: mode {mode!r} expects a floating-point input, "
                                 f"found {x.dtype}"))
    sizes, scales = _interp_sizes(x, size, scale_factor, recompute_scale_factor, mode)
    if mode == "area":
        if x.ndim == 5:
            raise NotImplementedError(located("interpolate: mode 'area' supports 3-D and 4-D "
                                              "inputs (adaptive_avg_pool3d is missing)"))
        if x.ndim == 3:
            x4 = reshape(x, x.shape[0], x.shape[1], 1, x.shape[2])
            out = adaptive_avg_pool2d(x4, (1, sizes[0]))
            return reshape(out, out.shape[0], out.shape[1], out.shape[3])
        return adaptive_avg_pool2d(x, tuple(sizes))
    ft = _opmath(x.dtype)
    for k in reversed(range(x.ndim - 2)):          # the last dim first, as PyTorch's kernel
        axis, n, out, scale = 2 + k, x.shape[2 + k], sizes[k], scales[k]
        if mode in ("nearest", "nearest-exact"):
            idx = _nearest_index(n, out, scale, mode == "nearest-exact")
            if out == n and np.array_equal(idx, np.arange(n)):
                continue
            x = index_select(x, axis, constant(idx))
        elif mode == "bicubic":
            x = _resample_dim(x, axis, _cubic_taps(ft, n, out, scale, align_corners))
        else:
            x = _resample_dim(x, axis, _linear_taps(ft, n, out, scale, align_corners))
    return x


# -- pixel_shuffle -----------------------------------------------------------------------------


def _factor(value, name: str) -> int:
    if not hasattr(value, "__index__") or isinstance(value, bool) or int(value) < 1:
        raise ValueError(located(f"{name}: expected a positive int factor, found {value!r}"))
    return int(value)


def pixel_shuffle(input, upscale_factor: int):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each group of r*r channels becomes an r x r
    block of pixels (as torch.nn.functional.pixel_shuffle)."""
    name = "pixel_shuffle"
    r = _factor(upscale_factor, name)
    x = operand(input, name)
    if x.ndim < 3:
        raise ShapeError(located(f"{name}: expected an input with at least 3 dims "
                                 f"(*, C*r*r, H, W), found {format_shape(x.shape)}"))
    lead, (c, h, w) = tuple(x.shape[:-3]), tuple(x.shape[-3:])
    if not isinstance(c, int) or c % (r * r):
        raise ShapeError(located(f"{name}: expected the channel dim (-3) divisible by "
                                 f"upscale_factor**2 = {r * r}, found input "
                                 f"{format_shape(x.shape)}"))
    t = reshape(x, -1, c // (r * r), r, r, h, w)
    t = permute(t, 0, 1, 4, 2, 5, 3)
    return reshape(t, *lead, c // (r * r), _mul(h, r), _mul(w, r))


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse of pixel_shuffle (as
    torch.nn.functional.pixel_unshuffle)."""
    name = "pixel_unshuffle"
    r = _factor(downscale_factor, name)
    x = operand(input, name)
    if x.ndim < 3:
        raise ShapeError(located(f"{name}: expected an input with at least 3 dims "
                                 f"(*, C, H*r, W*r), found {format_shape(x.shape)}"))
    lead, (c, h, w) = tuple(x.shape[:-3]), tuple(x.shape[-3:])
    if not (isinstance(h, int) and isinstance(w, int)) or h % r or w % r:
        raise ShapeError(located(f"{name}: expected height and width divisible by "
                                 f"downscale_factor {r}, found input {format_shape(x.shape)}"))
    t = reshape(x, -1, c, h // r, r, w // r, r)
    t = permute(t, 0, 1, 3, 5, 2, 4)
    return reshape(t, *lead, _mul(c, r * r), h // r, w // r)


def _mul(d, k: int):
    return dim_product((d, k))


# -- unfold / fold -----------------------------------------------------------------------------


def _fold_geometry(name, out_hw, kernel, dilation, padding, stride):
    pads = (padding[0], padding[0], padding[1], padding[1])
    return _spatial_out(name, (1, 1) + tuple(out_hw), kernel, stride, dilation, pads)


def _unfold_infer(types, attrs):
    (x,) = types
    if x.ndim != 4:
        raise ShapeError(f"unfold: expected a 4-D input [N,C,H,W], found "
                         f"{format_shape(x.shape)}")
    if x.dtype == "bool":
        raise DTypeError("unfold: expected a numeric tensor, found bool")
    kh, kw = attrs["kernel_size"]
    c = x.shape[1]
    if not all(isinstance(d, int) for d in x.shape[1:]):
        raise ShapeError(f"unfold: expected static channel and spatial sizes, found "
                         f"{format_shape(x.shape)}")
    ho, wo = _fold_geometry("unfold", x.shape[2:], attrs["kernel_size"], attrs["dilation"],
                            attrs["padding"], attrs["stride"])
    return [TensorType((x.shape[0], c * kh * kw, ho * wo), x.dtype)]


def _unfold_kernel(xp, x, kernel_size, dilation, padding, stride):
    n, c, h, w = x.shape
    (kh, kw), (ph, pw) = kernel_size, padding
    ho, wo = _fold_geometry("unfold", (h, w), kernel_size, dilation, padding, stride)
    xpad = _embed(xp, x, h + 2 * ph, w + 2 * pw, ph, pw) if ph or pw else x
    out = xp.empty((n, c, kh * kw, ho, wo), dtype=x.dtype)
    for k in range(kh * kw):
        out[:, :, k] = _window(xpad, k // kw, k % kw, stride, dilation, (ho, wo))
    return out.reshape(n, c * kh * kw, ho * wo)


_FOLD_ATTRS = dict(kernel_size=Attr("dims", min=1), dilation=Attr("dims", min=1),
                   padding=Attr("dims", min=0), stride=Attr("dims", min=1))

def _per_image_rule(op, args, batched, attrs, size):
    """unfold and fold per example: each example's N images join the batch's into one N
    of ``size * N`` (the ops treat images independently)."""
    (x,) = args
    n = shape_of(x)[1]
    out = op(flatten_batch(x, 1), **attrs)
    return reshape(out, size, n, *shape_of(out)[1:])


unfold_op = register(OpDef(
    "unfold", _unfold_infer, _unfold_kernel,
    lambda cts, ins, outs, a, needs: [fold_op(cts[0], output_size=tuple(ins[0].shape[2:]),
                                              **a)],
    doc="sliding blocks of an image as columns (torch.nn.functional.unfold, im2col)",
    attrs=Attrs(**_FOLD_ATTRS), batch=_per_image_rule))


def _fold_infer(types, attrs):
    (x,) = types
    if x.ndim != 3:
        raise ShapeError(f"fold: expected a 3-D input [N, C*kH*kW, L], found "
                         f"{format_shape(x.shape)}")
    if x.dtype == "bool":
        raise DTypeError("fold: expected a numeric tensor, found bool")
    kh, kw = attrs["kernel_size"]
    ckk, length = x.shape[1:]
    ho, wo = _fold_geometry("fold", attrs["output_size"], attrs["kernel_size"],
                            attrs["dilation"], attrs["padding"], attrs["stride"])
    if not isinstance(ckk, int) or ckk % (kh * kw):
        raise ShapeError(f"fold: expected the size of dim 1 ({ckk}) divisible by the kernel "
                         f"size {kh}*{kw}, found input {format_shape(x.shape)}")
    if length != ho * wo:
        raise ShapeError(f"fold: expected input's dim 2 to match the {ho}*{wo} = {ho * wo} "
                         f"sliding blocks of output_size {tuple(attrs['output_size'])} "
                         f"(kernel_size {tuple(attrs['kernel_size'])}, dilation "
                         f"{tuple(attrs['dilation'])}, padding {tuple(attrs['padding'])}, "
                         f"stride {tuple(attrs['stride'])}), found {length}")
    return [TensorType((x.shape[0], ckk // (kh * kw)) + tuple(attrs["output_size"]), x.dtype)]


def _fold_kernel(xp, x, output_size, kernel_size, dilation, padding, stride):
    n, ckk, _ = x.shape
    (kh, kw), (ph, pw), (h, w) = kernel_size, padding, output_size
    c = ckk // (kh * kw)
    ho, wo = _fold_geometry("fold", (h, w), kernel_size, dilation, padding, stride)
    cols = x.reshape(n, c, kh * kw, ho, wo)
    out = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
    for k in range(kh * kw):
        _window(out, k // kw, k % kw, stride, dilation, (ho, wo))[...] += cols[:, :, k]
    return xp.ascontiguousarray(out[:, :, ph:ph + h, pw:pw + w])


fold_op = register(OpDef(
    "fold", _fold_infer, _fold_kernel,
    lambda cts, ins, outs, a, needs: [unfold_op(cts[0], **{k: v for k, v in a.items()
                                                          if k != "output_size"})],
    doc="columns summed back into an image (torch.nn.functional.fold, col2im)",
    attrs=Attrs(output_size=Attr("dims", min=1), **_FOLD_ATTRS), batch=_per_image_rule))


def _fold_args(name, kernel_size, dilation, padding, stride):
    return dict(kernel_size=_pair(kernel_size, name, "kernel_size", 1),
                dilation=_pair(dilation, name, "dilation", 1),
                padding=_pair(padding, name, "padding", 0),
                stride=_pair(stride, name, "stride", 1))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding ``kernel_size`` blocks of an (N, C, H, W) input as the columns of an
    (N, C*kH*kW, L) tensor (as torch.nn.functional.unfold); a 3-D (C, H, W) input gives
    (C*kH*kW, L)."""
    attrs = _fold_args("unfold", kernel_size, dilation, padding, stride)
    x = operand(input, "unfold")
    if x.ndim == 3:
        out = unfold_op(reshape(x, 1, *x.shape), **attrs)
        return reshape(out, *out.shape[1:])
    return unfold_op(x, **attrs)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The adjoint of unfold (as torch.nn.functional.fold): an (N, C*kH*kW, L) tensor of
    blocks summed into an (N, C, *output_size) image (overlaps add up); a 2-D input gives
    (C, *output_size)."""
    attrs = _fold_args("fold", kernel_size, dilation, padding, stride)
    size = _pair(output_size, "fold", "output_size", 1)
    x = operand(input, "fold")
    if x.ndim == 2:
        out = fold_op(reshape(x, 1, *x.shape), output_size=size, **attrs)
        return reshape(out, *out.shape[1:])
    return fold_op(x, output_size=size, **attrs)
