"""ONNX import handlers: convolution, pooling and resampling (Conv, ConvTranspose, MaxPool,
AveragePool,
LpPool, the global pools, in 1-D, 2-D and 3-D; Resize, Upsample).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import math

import numpy as np

from ..graphlib import functional as F
from ..graphlib.types import dim_product, dim_quotient
from ..graphlib.ops.conv import conv2d_input_grad_op, conv2d_op
from ._import import HANDLERS, _onnx, check_size, handler, refuse, static_shape
from ._import_helpers import FLOATS, _axis, _counting, _float_only, _take, cast, static_shape_of


def _pads_2d(ctx, kernel, strides, dilations, in_hw):
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0, 0, 0, 0]))
        return pads[0], pads[2], pads[1], pads[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    out = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        if not isinstance(size, int):
            refuse("auto_pad over symbolic sizes")
        o = -(-size // s)
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return out[0][0], out[0][1], out[1][0], out[1][1]


@handler("Conv")
def _conv(ctx):
    x, w = ctx.x(0), ctx.x(1)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D convolution (duograph has 2-D)")
    _float_only(ctx)
    kernel = static_shape(ctx, 1)[2:]
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    ins = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return conv2d_op(*ins, stride=tuple(strides), padding=(pt, pb, pl, pr),
                     dilation=tuple(dil), groups=ctx.attr("group", 1))


@handler("ConvInteger")
def _conv_integer(ctx):
    """(x - x_zero_point) conv (w - w_zero_point) in int32, computed in float64 (exact: every
    product and partial sum of 8-bit values is an integer far below 2**53), padded with
    zeros after the shift, as the ONNX reference pads."""
    x, w = ctx.x(0), ctx.x(1)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D convolution (duograph has 2-D)")
    shifted = []
    for v, zp in ((x, 2), (w, 3)):
        if v.dtype not in ("uint8", "int8"):
            refuse(f"ConvInteger of {v.dtype} (ONNX takes uint8 and int8)")
        f = F.cast(v, "float64")
        if ctx.has(zp):
            if ctx.x(zp).ndim and zp == 2:
                refuse("a per-channel x_zero_point")
            f = f - F.cast(ctx.x(zp), "float64") if ctx.x(zp).ndim == 0 or zp == 2 else \
                f - F.reshape(F.cast(ctx.x(zp), "float64"), (-1, 1, 1, 1))
        shifted.append(f)
    kernel = static_shape(ctx, 1)[2:]
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    y = conv2d_op(*shifted, stride=tuple(strides), padding=(pt, pb, pl, pr),
                  dilation=tuple(dil), groups=ctx.attr("group", 1))
    return F.cast(y, "int32")


def _pool_common(ctx):
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D pooling (duograph has 2-D)")
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    if pt != pb or pl != pr:
        refuse("asymmetric pads")
    return x, kernel, strides, dil, (pt, pl)


@handler("MaxPool")
def _max_pool(ctx):
    if len([o for o in ctx.node.output if o]) > 1:
        refuse("the Indices output")
    x = ctx.x(0)
    if x.ndim == 4 and x.dtype in FLOATS:      # any pads: -inf borders, then no padding
        kernel = list(ctx.attr("kernel_shape"))
        strides = list(ctx.attr("strides", [1, 1]))
        dil = list(ctx.attr("dilations", [1, 1]))
        pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
        if (pt != pb or pl != pr or pt > kernel[0] // 2 or pl > kernel[1] // 2) and \
                not ctx.attr("ceil_mode", 0) and not ctx.attr("storage_order", 0):
            x = F.pad(x, [pl, pr, pt, pb], value=-math.inf)
            return F.max_pool2d(x, kernel, strides, (0, 0), dil, False)
    x, kernel, strides, dil, pad = _pool_common(ctx)
    if ctx.attr("storage_order", 0):
        refuse("storage_order=1")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        refuse("padding more than half the kernel")
    return F.max_pool2d(x, kernel, strides, pad, dil, bool(ctx.attr("ceil_mode", 0)))


@handler("AveragePool")
def _avg_pool(ctx):
    x = ctx.x(0)
    if x.ndim == 4 and x.dtype in FLOATS and not ctx.attr("ceil_mode", 0):
        kernel = list(ctx.attr("kernel_shape"))
        strides = list(ctx.attr("strides", [1, 1]))
        dil = list(ctx.attr("dilations", [1, 1]))
        pads = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
        pt, pb, pl, pr = pads
        if pt != pb or pl != pr or pt > kernel[0] // 2 or pl > kernel[1] // 2 or dil != [1, 1]:
            return _window_mean(ctx, x, kernel, strides, dil, pads,
                                bool(ctx.attr("count_include_pad", 0)))
    x, kernel, strides, dil, pad = _pool_common(ctx)
    if dil != [1, 1]:
        refuse("dilations")
    if ctx.attr("ceil_mode", 0):
        refuse("ceil_mode=1")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        refuse("padding more than half the kernel")
    return F.avg_pool2d(x, kernel, strides, pad, False,
                        bool(ctx.attr("count_include_pad", 0)))


@handler("GlobalAveragePool")
def _gap(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    # no spatial dims: the mean over none of them (ONNX's reference), not over every dim
    return F.mean(x, tuple(range(2, x.ndim)), keepdim=True) if x.ndim > 2 else x


@handler("GlobalMaxPool")
def _gmp(ctx):
    x = ctx.x(0)
    return F.amax(x, tuple(range(2, x.ndim)), keepdim=True) if x.ndim > 2 else x


# -- Resize: per axis, a gather (nearest) or a matrix of interpolation weights (linear, cubic) ---
def _resize_coeffs(mode, nearest_mode, a, antialias, ratio, scale):
    """The weights on the neighbours of one output position (ONNX's Resize reference)."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        table = {"round_prefer_floor": (ratio <= 0.5, ratio > 0.5),
                 "round_prefer_ceil": (ratio < 0.5, ratio >= 0.5),
                 "floor": (1, 0), "ceil": (0, 1)}
        return np.array(table[nearest_mode], dtype=np.float64)
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    if not antialias:
        r1, r2 = ratio + 1, 2 - ratio
        return np.array([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                         ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                         ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
                         ((a * r2 - 5 * a) * r2 + 8 * a) * r2 - 4 * a])
    s = min(scale, 1.0)

    def w(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x * x + 1
        return a * x ** 3 - 5 * a * x * x + 8 * a * x - 4 * a if x < 2 else 0.0
    start = int(np.floor(-2 / s) + 1)
    c = np.array([w(s * (i - ratio)) for i in range(start, 2 - start)])
    return c / c.sum()


def _resize_matrix(ctx, n_in, n_out, scale, roi, coord, mode, nearest_mode, a, antialias,
                   exclude_outside):
    """(weights (n_out, n_in), extrapolated (n_out,) bool or None) of one axis."""
    check_size((n_out, n_in), np.float64, "the resize weights")
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    extrap = None
    if coord == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        x = (np.full(n_out, (roi[1] - roi[0]) * (n_in - 1) / 2) if width == 1
             else y * (roi[1] - roi[0]) * (n_in - 1) / (width - 1))
        x = x + roi[0] * (n_in - 1)
        extrap = (x < 0) | (x > n_in - 1)
    elif coord == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    else:
        refuse(f"coordinate_transformation_mode {coord!r}")
    fl = np.floor(x).astype(np.int64)
    ratios = np.where(x == fl, 1.0, x - fl)
    coeffs = np.stack([_resize_coeffs(mode, nearest_mode, a, antialias, float(r), scale)
                       for r in ratios])
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    weights = np.zeros((n_out, n_in))
    np.add.at(weights, (np.repeat(np.arange(n_out), n), np.clip(idx, 0, n_in - 1).ravel()),
              coeffs.ravel())
    return weights, extrap


def _repeat_factors(ctx, shape, axes, scales, sizes, mode, coord, nearest_mode, policy, roi):
    """{axis: k} when this Resize repeats each element k times along some symbolic dims
    (nearest neighbour by whole factors, which torch's ``interpolate(scale_factor=2)``
    exports): then no size need be known. None where it does something else. With a whole
    factor k, half_pixel's source coordinate (i + 0.5) / k - 0.5 lies strictly within half
    a step of i // k, so any round_* mode picks it; asymmetric's i / k floors to it."""
    resized = {}
    for i, d in enumerate(axes):
        if sizes is not None:
            k = dim_quotient(sizes[i], shape[d])
        else:
            k = float(scales[i])
            k = int(k) if k.is_integer() else None
        if not isinstance(k, int) or k < 1:
            return None
        if k > 1:
            resized[d] = k
    if all(isinstance(shape[d], int) for d in resized) or mode != "nearest" or \
            policy != "stretch" or roi is not None and coord == "tf_crop_and_resize":
        return None
    if coord in ("half_pixel", "pytorch_half_pixel") and nearest_mode.startswith("round"):
        return resized
    if coord == "asymmetric" and nearest_mode == "floor":
        return resized
    return None


def _repeat_axes(ctx, x, factors):
    """``x`` with each element repeated ``k`` times along each axis of ``factors``: a
    gather of i // k for i < k * size (the size may be symbolic)."""
    for d, k in factors.items():
        n = dim_product([x.shape[d], k])
        picks = F.floor_divide(_counting(ctx, n), ctx.const(k, "int64"))
        x = F.index_select(x, d, picks)
    return x


@handler("Resize")
def _resize(ctx):
    x = ctx.x(0)
    shape = ctx.shape()          # symbolic dims only along axes that keep their size
    r = len(shape)
    if ctx.opset < 11:
        refuse("Resize before opset 11")
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        refuse(f"mode {mode!r}")
    antialias = bool(ctx.attr("antialias", 0))
    if antialias and mode == "nearest":
        refuse("antialias with mode 'nearest'")
    if mode != "nearest" and x.dtype not in FLOATS:
        refuse(f"{mode} interpolation of {x.dtype}")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    if nearest_mode not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        refuse(f"nearest_mode {nearest_mode!r}")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    axes = [_axis(a, r) for a in (ctx.attr("axes") or range(r))]
    roi = ctx.known(1, "roi").astype(np.float64) if ctx.has(1) else None
    if roi is not None and roi.size == 0:
        roi = None
    scales = ctx.known(2, "scales").astype(np.float64) if ctx.has(2) else None
    if scales is not None and scales.size == 0:
        scales = None
    sizes = ctx.dims(3, "sizes") if ctx.has(3) else None
    if (scales is None) == (sizes is None):
        refuse("exactly one of scales and sizes must be given")
    factors = _repeat_factors(ctx, shape, axes, scales, sizes, mode, coord, nearest_mode,
                              policy, roi)
    if factors is not None:              # nearest, by whole factors, over symbolic dims
        return _repeat_axes(ctx, x, factors)
    for i, d in enumerate(axes):
        kept = sizes[i] == shape[d] if sizes is not None else float(scales[i]) == 1.0
        if not isinstance(shape[d], int) and not (kept and policy == "stretch"):
            refuse(f"resizing the symbolic dim {shape[d]} (axis {d}): its output size "
                   "needs the input's size known (give it in input_shapes)")
        if not kept and sizes is not None and not isinstance(sizes[i], int):
            refuse(f"the output size {sizes[i]} (axis {d}) differs from the input's "
                   f"{shape[d]}: a resized size must be a number")
    full_roi = [0.0] * r + [1.0] * r
    if roi is not None:
        for i, d in enumerate(axes):
            full_roi[d], full_roi[r + d] = roi[i], roi[len(axes) + i]
    scale = [1.0] * r
    out = list(shape)
    if sizes is not None:
        for i, d in enumerate(axes):
            out[d] = sizes[i]
            scale[d] = sizes[i] / shape[d] if isinstance(shape[d], int) else 1.0
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                refuse(f"keep_aspect_ratio_policy {policy!r}")
            pick = min if policy == "not_larger" else max
            s = pick(scale[d] for d in axes)
            for d in axes:
                scale[d] = s
                out[d] = int(s * shape[d] + 0.5)
    else:
        for i, d in enumerate(axes):
            scale[d] = float(scales[i])
            out[d] = int(scales[i] * shape[d]) if isinstance(shape[d], int) else shape[d]
    extrapolation = ctx.attr("extrapolation_value", 0.0)
    a = ctx.attr("cubic_coeff_a", -0.75)
    y = x if mode == "nearest" else cast(x, "float64")
    for d in range(r):
        if math.isclose(scale[d], 1.0) and out[d] == shape[d] and (
                math.isclose(full_roi[d], 0.0) and math.isclose(full_roi[r + d], 1.0)):
            continue
        if not isinstance(shape[d], int):
            refuse(f"a region of interest along the symbolic dim {shape[d]} (axis {d})")
        if out[d] == 0:
            refuse("an empty output")
        w, extrap = _resize_matrix(ctx, shape[d], out[d], scale[d], [full_roi[d],
                                   full_roi[r + d]], coord, mode, nearest_mode, a, antialias,
                                   bool(ctx.attr("exclude_outside", 0)))
        if mode == "nearest":             # one source per output: a gather, exact
            y = F.index_select(y, d, ctx.const(np.argmax(w, axis=1), "int64"))
        else:
            moved = F.transpose(y, d, -1) if d != r - 1 else y
            moved = F.matmul(moved, ctx.const(w.T.copy(), "float64"))
            y = F.transpose(moved, d, -1) if d != r - 1 else moved
        if extrap is not None and extrap.any():
            where_shape = [1] * r
            where_shape[d] = out[d]
            y = F.where(ctx.const(extrap.reshape(where_shape), "bool"),
                        ctx.const(extrapolation, y.dtype), y)
    return cast(y, x.dtype)


# -- 1-D convolution and pooling as 2-D ones over a height of 1 ----------------------------------
def _lift_1d(fn, weight: bool):
    """Run a 2-D handler on (N, C, L) inputs as (N, C, 1, L): the attributes get a leading
    1 (kernel, strides, dilations, output_shape), 0 (output_padding) or 0-pads."""
    def run(ctx):
        x = ctx.x(0)
        if x.ndim != 3:
            return fn(ctx)
        helper = _onnx().helper
        lead = {"kernel_shape": 1, "strides": 1, "dilations": 1, "output_shape": 1,
                "output_padding": 0}
        attrs = dict(ctx.attrs)
        for name, first in lead.items():
            if name in attrs:
                attrs[name] = helper.make_attribute(name, [first] + list(ctx.attr(name)))
        if "pads" in attrs:
            lo, hi = ctx.attr("pads")
            attrs["pads"] = helper.make_attribute("pads", [0, lo, 0, hi])
        ctx.attrs = attrs
        ins = list(ctx.ins)
        ins[0] = F.unsqueeze(x, 2)
        if weight:
            ins[1] = F.unsqueeze(ctx.x(1), 2)
        ctx.ins = ins
        out = fn(ctx)
        if isinstance(out, (list, tuple)):
            return type(out)(F.squeeze(o, 2) if o is not None else None for o in out)
        return F.squeeze(out, 2)
    return run


for _name, _weight in (("Conv", True), ("MaxPool", False), ("AveragePool", False)):
    handler(_name)(_lift_1d(HANDLERS[_name], _weight))


@handler("ConvTranspose")
def _conv_transpose(ctx):
    """ConvTranspose as conv2d's input gradient (a transposed convolution): the weight
    (C_in, C_out/groups, kh, kw) is conv2d's (out, in/groups, kh, kw) read the other way."""
    x, w = ctx.x(0), ctx.x(1)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D ConvTranspose (needs op conv_transpose3d)")
    _float_only(ctx)
    n, c_in, h, wd = static_shape(ctx)
    _, cg, kh, kw = static_shape(ctx, 1)
    groups = ctx.attr("group", 1)
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    out_pad = list(ctx.attr("output_padding", [0, 0]))
    auto = ctx.attr("auto_pad", "NOTSET")
    eff = [(kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1]
    full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, (h, wd), out_pad, eff)]
    if ctx.attr("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(ctx.attr("output_shape") or [])[-2:] or [i * s for i, s in
                                                                zip((h, wd), strides)]
        pads, grow = [], []
        for f, t, st in zip(full, target, strides):
            total = f - t
            if total < 0 and -total >= st:
                refuse(f"output_shape {target}: more than stride - 1 past the full output")
            grow.append(max(0, -total))       # extra rows at the end, as output_padding
            total = max(total, 0)
            half = total // 2
            pads.append((total - half, half) if auto != "SAME_UPPER" else (half, total - half))
        (pt, pb), (pl, pr) = pads
        full = [f + g for f, g in zip(full, grow)]
    elif auto == "VALID":
        pt = pb = pl = pr = 0
    else:
        pt, pl, pb, pr = list(ctx.attr("pads", [0, 0, 0, 0]))
    if min(pt, pb, pl, pr) < 0:
        refuse("negative pads")
    if any(op >= s for op, s in zip(out_pad, strides)):
        refuse(f"output_padding {out_pad} not below the strides {strides}")
    shape = (n, cg * groups, full[0] - pt - pb, full[1] - pl - pr)
    y = conv2d_input_grad_op(x, w, shape=shape, stride=tuple(strides),
                             padding=(pt, pb, pl, pr), dilation=tuple(dil), groups=groups)
    if ctx.has(2):
        y = y + F.reshape(ctx.x(2), 1, -1, 1, 1)
    return y


handler("ConvTranspose")(_lift_1d(HANDLERS["ConvTranspose"], True))


@handler("LpPool")
def _lp_pool(ctx):
    """(sum over each window of |x|**p) ** (1/p): the sum as a depthwise conv2d with a kernel
    of ones (any pads, strides, dilations)."""
    _float_only(ctx)
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D pooling (needs a 2-D or 1-D input)")
    if ctx.attr("ceil_mode", 0):
        refuse("ceil_mode=1")
    c = static_shape(ctx)[1]
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    p = ctx.attr("p", 2)
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    powered = F.pow(F.abs(x), ctx.const(p, x.dtype))
    total = conv2d_op(powered, ones, stride=tuple(strides), padding=(pt, pb, pl, pr),
                      dilation=tuple(dil), groups=c)
    return F.pow(total, ctx.const(1.0 / p, x.dtype))


handler("LpPool")(_lift_1d(HANDLERS["LpPool"], False))


def _window_mean(ctx, x, kernel, strides, dil, pads, include_pad):
    """Average pooling with any pads and dilations: window sums as a depthwise conv2d with a
    kernel of ones, over the count of (real, or with include_pad all) places."""
    c = static_shape(ctx)[1]
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    conv = dict(stride=tuple(strides), padding=(pads[0], pads[1], pads[2], pads[3]),
                dilation=tuple(dil), groups=c)
    total = conv2d_op(x, ones, **conv)
    if include_pad:
        return total / float(np.prod(kernel))
    count = conv2d_op(F.ones_like(x), ones, **conv)
    return total / count


@handler("Upsample")
def _upsample(ctx):
    """Upsample (deprecated) in 'nearest' mode with whole scales: each element repeated."""
    x = ctx.x(0)
    shape = static_shape(ctx)
    scales = ctx.known(1, "scales") if ctx.has(1) else ctx.attr("scales")
    scales = [float(s) for s in np.asarray(scales).ravel()]
    if ctx.attr("mode", "nearest") != "nearest" or any(not s.is_integer() for s in scales):
        refuse(f"mode {ctx.attr('mode', 'nearest')!r} with scales {scales} (only 'nearest' "
               "with whole scales)")
    for d, s in enumerate(scales):
        if s != 1:
            check_size((int(shape[d] * s),), np.int64, f"the index of axis {d}")
            x = _take(ctx, x, d, np.arange(int(shape[d] * s)) // int(s))
    return x


# -- N-D (2-D and 3-D) convolution and pooling with any pads and ceil_mode ----------------------
def _pads_nd(ctx, kernel, strides, dil, sizes):
    """[(before, after)] per spatial dim from ``pads`` or ``auto_pad``."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * 2 * n))
        return [(pads[i], pads[i + n]) for i in range(n)]
    if auto == "VALID":
        return [(0, 0)] * n
    out = []
    for size, k, s, d in zip(sizes, kernel, strides, dil):
        if not isinstance(size, int):
            refuse("auto_pad over symbolic sizes")
        o = -(-size // s)
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return out


def _torch_pad(pads):
    """[(before, after)] per spatial dim as F.pad's list (last dim first)."""
    out = []
    for lo, hi in reversed(pads):
        out += [lo, hi]
    return out


def _pool_geometry(ctx, x):
    """(kernel, strides, dilations, pads, output sizes, extra end padding) of a pooling node
    by ONNX's rule: ceil_mode rounds the output size up, dropping a last window that would
    start past the input and its leading pad."""
    sizes = tuple(ctx.shape(0))[2:]
    if not all(isinstance(d, int) for d in sizes):
        refuse(f"symbolic spatial dims {list(ctx.shape(0))} (load with input_shapes=...)")
    n = len(sizes)
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != n:
        refuse(f"kernel_shape {kernel} for {n} spatial dims")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    pads = _pads_nd(ctx, kernel, strides, dil, sizes)
    if min(min(p) for p in pads) < 0:
        refuse("negative pads")
    ceil = bool(ctx.attr("ceil_mode", 0))
    outs, extra = [], []
    for size, k, s, d, (lo, hi) in zip(sizes, kernel, strides, dil, pads):
        span = size + lo + hi - (k - 1) * d - 1
        if span < 0:
            refuse(f"the window ({k} with dilation {d}) is larger than the padded input")
        o = -(-span // s) + 1 if ceil else span // s + 1
        if ceil and (o - 1) * s >= size + lo:
            o -= 1
        outs.append(o)
        extra.append(max(0, (o - 1) * s + (k - 1) * d + 1 - (size + lo + hi)))
    return kernel, strides, dil, pads, outs, extra


def _window_counts(sizes, kernel, strides, dil, pads, outs, include_pad):
    """How many places each (box) window averages over, as an array of the output's spatial
    shape: the taps inside the input (or, with ``include_pad``, inside the padded input)."""
    total = np.ones((), np.float64)
    for size, k, s, d, (lo, hi), o in zip(sizes, kernel, strides, dil, pads, outs):
        pos = np.arange(o)[:, None] * s - lo + np.arange(k)[None, :] * d
        lo_ok, hi_ok = (-lo, size + hi) if include_pad else (0, size)
        count = ((pos >= lo_ok) & (pos < hi_ok)).sum(1).astype(np.float64)
        total = np.multiply.outer(total, count)
    return total


def _depthwise_sum(ctx, x, kernel, strides, dil):
    """Window sums over an already padded ``x``: a depthwise convolution with ones."""
    c = x.shape[1]
    if not isinstance(c, int):
        refuse(f"a symbolic channel count in {list(x.shape)}")
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    if len(kernel) == 2:
        return conv2d_op(x, ones, stride=tuple(strides), padding=(0, 0, 0, 0),
                         dilation=tuple(dil), groups=c)
    return F.conv3d(x, ones, None, tuple(strides), 0, tuple(dil), c)


def _nd_pool(kind: str):
    """MaxPool / AveragePool over 2-D and 3-D float inputs with any pads, dilations and
    ceil_mode: the input padded explicitly (-inf for max, zeros for the sums), the windows
    taken without padding, averages divided by each window's count."""
    prev = HANDLERS["MaxPool" if kind == "max" else "AveragePool"]

    def run(ctx):
        x = ctx.x(0)
        if x.ndim not in (4, 5) or x.dtype not in FLOATS:
            return prev(ctx)
        indices = len([o for o in ctx.node.output if o]) > 1
        if kind == "avg" and x.ndim == 4 and not ctx.attr("ceil_mode", 0):
            return prev(ctx)
        if kind == "max" and not indices and not all(isinstance(d, int)
                                                      for d in x.shape[2:]):
            return _symbolic_max_pool(ctx, x)
        kernel, strides, dil, pads, outs, extra = _pool_geometry(ctx, x)
        full = [(lo, hi + e) for (lo, hi), e in zip(pads, extra)]
        if kind == "max":
            xp = F.pad(x, _torch_pad(full), value=-math.inf) if any(map(any, full)) else x
            pool = F.max_pool2d if x.ndim == 4 else F.max_pool3d
            if not indices:
                return pool(xp, kernel, strides, 0, dil, False)
            if x.ndim != 4:
                refuse("the Indices output of a 3-D MaxPool")
            y, flat = F.max_pool2d(xp, kernel, strides, 0, dil, False, return_indices=True)
            return [y, _onnx_pool_indices(ctx, x, flat, full, static_shape_of(xp))]
        xz = F.pad(x, _torch_pad(full)) if any(map(any, full)) else x
        total = _depthwise_sum(ctx, xz, kernel, strides, dil)
        count = _window_counts(tuple(ctx.shape(0))[2:], kernel, strides, dil, pads, outs,
                               bool(ctx.attr("count_include_pad", 0)))
        return cast(total / ctx.const(count, x.dtype), x.dtype)
    return run


def _symbolic_max_pool(ctx, x):
    """MaxPool over symbolic spatial dims: with explicit pads and floor rounding the windows
    need no extra end padding, so the sizes need not be known (ceil_mode and auto_pad
    SAME_* do need them)."""
    n = x.ndim - 2
    if ctx.attr("ceil_mode", 0) or ctx.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        refuse(f"ceil_mode or auto_pad over the symbolic spatial dims "
               f"{[str(d) for d in x.shape[2:]]} (load with input_shapes=...)")
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != n:
        refuse(f"kernel_shape {kernel} for {n} spatial dims")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    flat = list(ctx.attr("pads", [0] * 2 * n)) if ctx.attr("auto_pad", "NOTSET") == "NOTSET" \
        else [0] * 2 * n
    full = list(zip(flat[:n], flat[n:]))
    if min(min(p) for p in full) < 0:
        refuse("negative pads")
    xp = F.pad(x, _torch_pad(full), value=-math.inf) if any(map(any, full)) else x
    pool = F.max_pool2d if x.ndim == 4 else F.max_pool3d
    return pool(xp, kernel, strides, 0, dil, False)


def _onnx_pool_indices(ctx, x, flat, full, padded_shape):
    """max_pool2d's flat H*W indices into the padded input as ONNX's Indices: flattened over
    the whole (N, C, H, W) input, row-major (storage_order 0) or column-major over H, W."""
    n, c, h, w = static_shape(ctx)
    wp = padded_shape[3]
    flat = cast(flat, "int64")
    row = F.floor_divide(flat, ctx.const(wp, "int64")) - ctx.const(full[0][0], "int64")
    col = F.remainder(flat, ctx.const(wp, "int64")) - ctx.const(full[1][0], "int64")
    inner = row * ctx.const(w, "int64") + col if not ctx.attr("storage_order", 0) else \
        col * ctx.const(h, "int64") + row
    check_size((n, c), np.int64, "the index base")
    base = (np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1)
    return inner + ctx.const(base, "int64")


handler("MaxPool")(_lift_1d(_nd_pool("max"), False))
handler("AveragePool")(_lift_1d(_nd_pool("avg"), False))


def _conv_nd_wrap():
    prev = HANDLERS["Conv"]

    def run(ctx):
        """Conv over (N, C, D, H, W): conv3d after explicit zero padding."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        w = ctx.x(1)
        kernel = list(static_shape(ctx, 1)[2:])
        strides = list(ctx.attr("strides", [1] * 3))
        dil = list(ctx.attr("dilations", [1] * 3))
        pads = _pads_nd(ctx, kernel, strides, dil, x.shape[2:])
        if min(min(p) for p in pads) < 0:
            refuse("negative pads")
        if any(map(any, pads)):
            x = F.pad(x, _torch_pad(pads))
        b = ctx.x(2) if ctx.has(2) else None
        return F.conv3d(x, w, b, tuple(strides), 0, tuple(dil), ctx.attr("group", 1))
    return run


def _conv_transpose_nd_wrap():
    prev = HANDLERS["ConvTranspose"]

    def run(ctx):
        """ConvTranspose over (N, C, D, H, W) with symmetric pads: conv_transpose3d."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        auto = ctx.attr("auto_pad", "NOTSET")
        if ctx.attr("output_shape") is not None or auto not in ("NOTSET", "", "VALID"):
            refuse("output_shape or auto_pad SAME_* on a 3-D ConvTranspose")
        pads = [0] * 6 if auto == "VALID" else list(ctx.attr("pads", [0] * 6))
        if pads[:3] != pads[3:]:
            refuse(f"asymmetric pads {pads} on a 3-D ConvTranspose")
        strides = list(ctx.attr("strides", [1] * 3))
        out_pad = list(ctx.attr("output_padding", [0] * 3))
        if any(op >= s for op, s in zip(out_pad, strides)):
            refuse(f"output_padding {out_pad} not below the strides {strides}")
        b = ctx.x(2) if ctx.has(2) else None
        return F.conv_transpose3d(x, ctx.x(1), b, tuple(strides), tuple(pads[:3]),
                                  tuple(out_pad), ctx.attr("group", 1),
                                  tuple(ctx.attr("dilations", [1] * 3)))
    return run


handler("Conv")(_conv_nd_wrap())
handler("ConvTranspose")(_conv_transpose_nd_wrap())


def _lp_pool_3d_wrap():
    prev = HANDLERS["LpPool"]

    def run(ctx):
        """LpPool over (N, C, D, H, W): (window sums of |x|**p) ** (1/p), the sums a
        depthwise conv3d with ones over the zero-padded input."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        kernel, strides, dil, pads, _, extra = _pool_geometry(ctx, x)
        full = [(lo, hi + e) for (lo, hi), e in zip(pads, extra)]
        p = ctx.attr("p", 2)
        powered = F.pow(F.abs(x), ctx.const(p, x.dtype))
        if any(map(any, full)):
            powered = F.pad(powered, _torch_pad(full))
        total = _depthwise_sum(ctx, powered, kernel, strides, dil)
        return F.pow(total, ctx.const(1.0 / p, x.dtype))
    return run


handler("LpPool")(_lp_pool_3d_wrap())


@handler("MaxUnpool")
def _max_unpool(ctx):
    """MaxPool's inverse: zeros of the unpooled shape ((in - 1) * stride - pads + kernel)
    with each value written at its index (MaxPool's Indices: positions in that flattened
    N*C*H*W tensor), one scatter over the flattened output; an ``output_shape`` larger than
    that shape pads the result with zeros at the end of each spatial dim (as the ONNX
    reference and its node tests do)."""
    x, idx = ctx.x(0), ctx.x(1)
    _float_only(ctx)
    shape = static_shape(ctx)
    kernel = list(ctx.attr("kernel_shape"))
    nd = len(kernel)
    if len(shape) != nd + 2:
        refuse(f"X of shape {list(shape)} for a {nd}-D kernel")
    strides = list(ctx.attr("strides", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    out = list(shape[:2]) + [(shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i]
                             + kernel[i] for i in range(nd)]
    want = out
    if ctx.has(2):
        want = [int(d) for d in np.asarray(ctx.known(2, "output_shape")).reshape(-1)]
        if len(want) != nd + 2 or want[:2] != out[:2] or any(
                w < o for w, o in zip(want[2:], out[2:])):
            refuse(f"output_shape {want} for an unpooled shape of {out}")
    total = math.prod(out)
    check_size((math.prod(want),), x.dtype, "MaxUnpool's output")
    flat = F.zeros((total,), dtype=x.dtype)
    y = F.reshape(F.scatter(flat, 0, F.reshape(cast(idx, "int64"), (-1,)),
                            F.reshape(x, (-1,))), tuple(out))
    if want != out:
        extra = []
        for w, o in reversed(list(zip(want[2:], out[2:]))):
            extra += [0, w - o]
        y = F.pad(y, tuple(extra))
    return y
