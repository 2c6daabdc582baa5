"""Pooling over NCHW images: max_pool2d, avg_pool2d, adaptive_avg_pool2d and their gradient
ops; and, built on them, the 1-D and 3-D pools, pooling indices with max_unpool2d, and
adaptive_max_pool2d.

Kernels read windows through ``as_strided`` views and loop only over the kernel offsets,
never over pixels. Each gradient is an op of its own whose vjp is written with the forward
ops, so gradients of gradients work:

    max_pool2d(x)              -> max_pool2d_backward(g, x)   (g goes to each window's argmax)
    max_pool2d_backward(g, x) <-> max_pool2d_gather(c, x)     (x only chooses the winners)
    avg_pool2d                <-> avg_pool2d_backward
    adaptive_avg_pool2d       <-> adaptive_avg_pool2d_backward

The public functions normalise the attributes once: ``stride``, ``dilation`` and
``kernel_size`` are pairs, the padding is (height, width). Gradient ops carry the shape they
produce as ``shape``, where the runtime binds a symbolic batch dim from the feeds.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import ensure_batched, flatten_batch, lrank, shape_of
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, format_shape
from ._common import operand
from ._window import (IntOrPair, _batched, _batched_nd, _check_float, _check_image, _conv_attrs,
                      _embed, _grad_infer, _ntuple, _pair, _spatial_out, _window)
from .shape import gather, reshape

# -- pooling -----------------------------------------------------------------------------------


def _pool_pads(attrs):
    ph, pw = attrs["padding"]
    return (ph, ph, pw, pw)


def _pool_infer(name: str, float_only: bool, dilated: bool):
    def infer(types, attrs):
        (t,) = types
        _check_image(name, t)
        if float_only:
            _check_float(name, t)
        elif t.dtype == "bool":
            raise DTypeError(f"{name}: expected a numeric tensor, found bool")
        kernel, padding = attrs["kernel_size"], attrs["padding"]
        dilation = attrs["dilation"] if dilated else (1, 1)
        if any(p > k // 2 for p, k in zip(padding, kernel)):     # PyTorch's rule
            raise ShapeError(f"{name}: padding {tuple(padding)} must be at most half the "
                             f"kernel size {tuple(kernel)}")
        ho, wo = _spatial_out(name, t.shape, kernel, attrs["stride"], dilation,
                              _pool_pads(attrs), attrs["ceil_mode"])
        return [TensorType(t.shape[:2] + (ho, wo), t.dtype)]
    return infer


def _pool_layout(shape, kernel, stride, padding, dilation, ceil_mode):
    """(H_out, W_out) and the padded extent (rows, cols) every window fits in."""
    h, w = shape[2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    ho, wo = _spatial_out("pool", shape, kernel, stride, dilation, (ph, ph, pw, pw),
                          ceil_mode)
    rows = max((ho - 1) * sh + dh * (kh - 1) + 1, h + ph)
    cols = max((wo - 1) * sw + dw * (kw - 1) + 1, w + pw)
    return (ho, wo), (rows, cols)


def _lowest(xp, dtype):
    return -np.inf if dtypes.is_float_array(dtype) else np.iinfo(dtype).min


def _pool_source(xp, x, rows: int, cols: int, padding, fill):
    """``x`` padded to (rows, cols) with ``fill``: ``x`` itself where no padding is needed."""
    if (rows, cols) == tuple(x.shape[2:]):
        return x
    return _embed(xp, x, rows, cols, padding[0], padding[1], fill)


def _tap_valid(xp, size: int, out: int, stride: int, pad: int, dilation: int, tap: int):
    """Which windows' tap ``tap`` falls inside the input (not the padding), along one dim."""
    pos = np.arange(out) * stride - pad + tap * dilation
    return xp.asarray((pos >= 0) & (pos < size))


def _max_pool_argmax(xp, x, kernel_size, stride, padding, dilation, ceil_mode):
    """Index (i*kw + j) of each window's winner, as PyTorch: the first maximum, except that a
    NaN always takes over (the last NaN wins); padding never wins."""
    out_hw, (rows, cols) = _pool_layout(x.shape, kernel_size, stride, padding, dilation,
                                        ceil_mode)
    xpad = _pool_source(xp, x, rows, cols, padding, _lowest(xp, x.dtype))
    kh, kw = kernel_size
    h, w = x.shape[2:]
    best = _window(xpad, 0, 0, stride, dilation, out_hw).copy()
    index = xp.zeros(best.shape, dtype=xp.int32)
    seen = None                  # windows whose winner so far is an input element
    if any(padding):             # a window's tap 0 may lie in the padding
        valid_rows = [_tap_valid(xp, h, out_hw[0], stride[0], padding[0], dilation[0], i)
                      for i in range(kh)]
        valid_cols = [_tap_valid(xp, w, out_hw[1], stride[1], padding[1], dilation[1], j)
                      for j in range(kw)]
        seen = valid_rows[0][:, None] & valid_cols[0][None, :]
    for k in range(1, kh * kw):
        win = xp.ascontiguousarray(_window(xpad, k // kw, k % kw, stride, dilation, out_hw))
        better = win > best
        if dtypes.is_float_array(x):
            better |= xp.isnan(win)
        if seen is not None:     # the first input element of a window beats its padding
            valid = valid_rows[k // kw][:, None] & valid_cols[k % kw][None, :]
            better |= valid & ~seen
            seen = seen | valid
        best = xp.where(better, win, best)
        # (a typed scalar, not a 0-d array: on a device that would be a host -> device
        # copy per window position, which a CUDA-graph capture refuses)
        index = xp.where(~better, index, xp.int32(k))
    return index, out_hw, (rows, cols)


def _max_pool2d_kernel(xp, x, kernel_size, stride, padding, dilation, ceil_mode):
    out_hw, (rows, cols) = _pool_layout(x.shape, kernel_size, stride, padding, dilation,
                                        ceil_mode)
    xpad = _pool_source(xp, x, rows, cols, padding, _lowest(xp, x.dtype))
    kh, kw = kernel_size
    out = _window(xpad, 0, 0, stride, dilation, out_hw).copy()
    for k in range(1, kh * kw):
        xp.maximum(out, _window(xpad, k // kw, k % kw, stride, dilation, out_hw), out=out)
    return out


_max_pool2d_infer = _pool_infer("max_pool2d", False, True)

# The attributes of the pooling ops (their kernels' keyword arguments).
_POOL_ATTRS = dict(kernel_size=Attr("dims", min=1), stride=Attr("dims", min=1),
                   padding=Attr("dims", min=0), dilation=Attr("dims", min=1),
                   ceil_mode=Attr(bool))
_AVG_POOL_ATTRS = dict(kernel_size=Attr("dims", min=1), stride=Attr("dims", min=1),
                       padding=Attr("dims", min=0), ceil_mode=Attr(bool),
                       count_include_pad=Attr(bool), dilation=Attr("dims", default=(1, 1), min=1))

def _images_rule(op, args, batched, attrs, size):
    """NCHW image ops (pooling and its gradients): each example's N images join the batch's
    into one N of ``size * N`` images (an unbatched operand is broadcast first); a ``shape``
    attribute (the input's, for gradients) grows the same way."""
    if any(lrank(x, b) != 4 for x, b in zip(args, batched)):
        return NotImplemented
    n = shape_of(args[0])[1] if batched[0] else shape_of(args[0])[0]
    flat = [flatten_batch(ensure_batched(x, b, size), 1) for x, b in zip(args, batched)]
    if "shape" in attrs:
        shape = tuple(attrs["shape"])
        attrs = dict(attrs, shape=(size * shape[0],) + shape[1:])
    out = op(*flat, **attrs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    outs = tuple(get_op("reshape")(o, shape=(size, n) + shape_of(o)[1:]) for o in outs)
    return outs if isinstance(out, (tuple, list)) else outs[0]


max_pool2d_op = register(OpDef(
    "max_pool2d", _max_pool2d_infer, _max_pool2d_kernel,
    lambda cts, ins, outs, a, needs: [max_pool2d_backward_op(cts[0], ins[0], **a)],
    doc="max over sliding windows (torch max_pool2d)",
    attrs=Attrs(**_POOL_ATTRS), batch=_images_rule))


def _max_pool2d_backward_infer(types, attrs):
    g, x = types
    _check_float("max_pool2d_backward", g)
    _check_image("max_pool2d_backward", x)
    return [TensorType(x.shape, g.dtype)]


def _max_pool2d_backward_kernel(xp, g, x, kernel_size, stride, padding, dilation, ceil_mode):
    n, c, h, w = x.shape
    index, out_hw, (rows, cols) = _max_pool_argmax(xp, x, kernel_size, stride, padding,
                                                   dilation, ceil_mode)
    kh, kw = kernel_size
    zero = xp.zeros((), dtype=g.dtype)
    gx = xp.zeros((n, c, rows, cols), dtype=g.dtype)
    for k in range(kh * kw):
        win = _window(gx, k // kw, k % kw, stride, dilation, out_hw)
        win += xp.where(index == k, g, zero)
    ph, pw = padding
    if (rows, cols) == (h, w):
        return gx
    return xp.ascontiguousarray(gx[:, :, ph:ph + h, pw:pw + w])


max_pool2d_backward_op = register(OpDef(
    "max_pool2d_backward", _max_pool2d_backward_infer, _max_pool2d_backward_kernel,
    lambda cts, ins, outs, a, needs: [max_pool2d_gather_op(cts[0], ins[1], **a), None],
    nondiff_inputs=(1,), doc="routes each window's cotangent to its argmax in x",
    attrs=Attrs(**_POOL_ATTRS), batch=_images_rule))


def _max_pool2d_gather_infer(types, attrs):
    c, x = types
    _check_float("max_pool2d_gather", c)
    (pooled,) = _max_pool2d_infer([x], attrs)
    return [pooled.with_dtype(c.dtype)]


def _max_pool2d_gather_kernel(xp, c, x, kernel_size, stride, padding, dilation, ceil_mode):
    index, out_hw, (rows, cols) = _max_pool_argmax(xp, x, kernel_size, stride, padding,
                                                   dilation, ceil_mode)
    cpad = _pool_source(xp, c, rows, cols, padding, 0)
    kh, kw = kernel_size
    out = xp.zeros(index.shape, dtype=c.dtype)
    for k in range(kh * kw):
        out = xp.where(index == k, _window(cpad, k // kw, k % kw, stride, dilation, out_hw),
                       out)
    return out


max_pool2d_gather_op = register(OpDef(
    "max_pool2d_gather", _max_pool2d_gather_infer, _max_pool2d_gather_kernel,
    lambda cts, ins, outs, a, needs: [max_pool2d_backward_op(cts[0], ins[1], **a), None],
    nondiff_inputs=(1,), doc="picks c at each window's argmax in x (adjoint of the backward)",
    attrs=Attrs(**_POOL_ATTRS), batch=_images_rule))


def _avg_divisor(xp, size: int, kernel: int, stride: int, pad: int, out: int,
                 count_include_pad: bool, dtype):
    """Per-window element counts along one dim, as PyTorch counts them."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    if count_include_pad:
        count = end - start
    else:
        count = np.minimum(end, size) - np.maximum(start, 0)
    return xp.asarray(count, dtype=dtype)


def _avg_divisors(xp, shape, kernel_size, stride, padding, count_include_pad, out_hw, dtype):
    h, w = shape[2:]
    rows = _avg_divisor(xp, h, kernel_size[0], stride[0], padding[0], out_hw[0],
                        count_include_pad, dtype)
    cols = _avg_divisor(xp, w, kernel_size[1], stride[1], padding[1], out_hw[1],
                        count_include_pad, dtype)
    return rows[:, None] * cols[None, :]


def _avg_pool2d_kernel(xp, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       dilation=(1, 1)):
    out_hw, (rows, cols) = _pool_layout(x.shape, kernel_size, stride, padding, dilation,
                                        ceil_mode)
    xpad = _embed(xp, x, rows, cols, padding[0], padding[1])
    kh, kw = kernel_size
    out = _window(xpad, 0, 0, stride, dilation, out_hw).copy()
    for k in range(1, kh * kw):
        out += _window(xpad, k // kw, k % kw, stride, dilation, out_hw)
    out /= _avg_divisors(xp, x.shape, kernel_size, stride, padding, count_include_pad, out_hw,
                         x.dtype)
    return out


avg_pool2d_op = register(OpDef(
    "avg_pool2d", _pool_infer("avg_pool2d", True, False), _avg_pool2d_kernel,
    lambda cts, ins, outs, a, needs: [
        avg_pool2d_backward_op(cts[0], shape=tuple(ins[0].shape), **a)],
    doc="mean over sliding windows (torch avg_pool2d)",
    attrs=Attrs(**_AVG_POOL_ATTRS), batch=_images_rule))


def _avg_pool2d_backward_kernel(xp, g, shape, kernel_size, stride, padding, ceil_mode,
                                count_include_pad, dilation=(1, 1)):
    out_hw, (rows, cols) = _pool_layout(shape, kernel_size, stride, padding, dilation,
                                        ceil_mode)
    g = g / _avg_divisors(xp, shape, kernel_size, stride, padding, count_include_pad, out_hw,
                          g.dtype)
    n, c, h, w = shape
    kh, kw = kernel_size
    gx = xp.zeros((n, c, rows, cols), dtype=g.dtype)
    for k in range(kh * kw):
        _window(gx, k // kw, k % kw, stride, dilation, out_hw)[...] += g
    ph, pw = padding
    return xp.ascontiguousarray(gx[:, :, ph:ph + h, pw:pw + w])


avg_pool2d_backward_op = register(OpDef(
    "avg_pool2d_backward", _grad_infer("avg_pool2d_backward"), _avg_pool2d_backward_kernel,
    lambda cts, ins, outs, a, needs: [avg_pool2d_op(cts[0], **_conv_attrs(a))],
    doc="gradient of avg_pool2d (spreads each window's cotangent evenly over it)",
    attrs=Attrs(shape=Attr("shape"), **_AVG_POOL_ATTRS), batch=_images_rule))


def _adaptive_infer(types, attrs):
    (t,) = types
    _check_image("adaptive_avg_pool2d", t)
    _check_float("adaptive_avg_pool2d", t)
    return [TensorType(t.shape[:2] + tuple(attrs["output_size"]), t.dtype)]


def _adaptive_windows(size: int, out: int):
    """(start, end) of each of ``out`` windows: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _adaptive_kernel(xp, x, output_size):
    n, c, h, w = x.shape
    oh, ow = output_size
    if h % oh == 0 and w % ow == 0:      # equal windows: a plain mean over a reshape
        return x.reshape(n, c, oh, h // oh, ow, w // ow).mean(axis=(3, 5))
    # uneven windows: a mean per window, rows then columns (never a product with an
    # averaging matrix: its zeros would spread one NaN/inf to every output)
    rows = xp.stack([x[:, :, a:b, :].mean(axis=2) for a, b in _adaptive_windows(h, oh)], 2)
    return xp.stack([rows[..., a:b].mean(axis=3) for a, b in _adaptive_windows(w, ow)], 3)


adaptive_avg_pool2d_op = register(OpDef(
    "adaptive_avg_pool2d", _adaptive_infer, _adaptive_kernel,
    lambda cts, ins, outs, a, needs: [
        adaptive_avg_pool2d_backward_op(cts[0], shape=tuple(ins[0].shape), **a)],
    doc="mean over output_size windows that cover the input (torch adaptive_avg_pool2d)",
    attrs=Attrs(output_size=Attr("dims", min=1)), batch=_images_rule))


def _adaptive_backward_kernel(xp, g, shape, output_size):
    n, c, h, w = shape
    oh, ow = output_size
    if h % oh == 0 and w % ow == 0:
        kh, kw = h // oh, w // ow
        spread = xp.broadcast_to((g / (kh * kw))[:, :, :, None, :, None],
                                 (n, c, oh, kh, ow, kw))
        return spread.reshape(n, c, h, w)
    # each window's cotangent spread evenly over it (added where windows overlap), columns
    # then rows, so that a NaN/inf cotangent stays in its own window
    spread = xp.zeros((n, c, oh, w), dtype=g.dtype)
    for j, (a, b) in enumerate(_adaptive_windows(w, ow)):
        spread[..., a:b] += g[..., j:j + 1] / (b - a)
    out = xp.zeros((n, c, h, w), dtype=g.dtype)
    for i, (a, b) in enumerate(_adaptive_windows(h, oh)):
        out[:, :, a:b, :] += spread[:, :, i:i + 1, :] / (b - a)
    return out


adaptive_avg_pool2d_backward_op = register(OpDef(
    "adaptive_avg_pool2d_backward", _grad_infer("adaptive_avg_pool2d_backward"),
    _adaptive_backward_kernel,
    lambda cts, ins, outs, a, needs: [
        adaptive_avg_pool2d_op(cts[0], output_size=a["output_size"])],
    doc="gradient of adaptive_avg_pool2d",
    attrs=Attrs(shape=Attr("shape"), output_size=Attr("dims", min=1)), batch=_images_rule))


def _pool_args(name, kernel_size, stride, padding):
    kernel = _pair(kernel_size, name, "kernel_size", 1)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _pair(stride, name, "stride", 1)
    return kernel, stride, _pair(padding, name, "padding", 0)


def max_pool2d(input, kernel_size: IntOrPair, stride: Optional[IntOrPair] = None,
               padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Maximum over sliding ``kernel_size`` windows (as torch.nn.functional.max_pool2d);
    ``stride`` defaults to ``kernel_size``; padding counts as -inf. The gradient goes to one
    winner per window (the first maximum in row-major order). ``return_indices`` also gives
    each winner's flat H*W index in the input (for max_unpool2d)."""
    if return_indices:
        return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation,
                                       ceil_mode)
    kernel, stride, padding = _pool_args("max_pool2d", kernel_size, stride, padding)
    dilation = _pair(dilation, "max_pool2d", "dilation", 1)
    return _batched(input, lambda x: max_pool2d_op(
        x, kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
        ceil_mode=bool(ceil_mode)), "max_pool2d")


def avg_pool2d(input, kernel_size: IntOrPair, stride: Optional[IntOrPair] = None,
               padding: IntOrPair = 0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """Mean over sliding ``kernel_size`` windows (as torch.nn.functional.avg_pool2d);
    ``count_include_pad`` says whether the zero padding counts in each window's divisor."""
    kernel, stride, padding = _pool_args("avg_pool2d", kernel_size, stride, padding)
    return _batched(input, lambda x: avg_pool2d_op(
        x, kernel_size=kernel, stride=stride, padding=padding, ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad)), "avg_pool2d")


def adaptive_avg_pool2d(input, output_size: Union[int, Tuple[Optional[int], Optional[int]]]):
    """Mean over the windows that split the input into ``output_size`` cells (as
    torch.nn.functional.adaptive_avg_pool2d): cell i covers [floor(i*H/out), ceil((i+1)*H/out)).
    A None in ``output_size`` keeps that input size."""
    input = operand(input, "adaptive_avg_pool2d")
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        sizes = list(output_size)
        for k, s in enumerate(sizes):
            if s is None:
                size = input.shape[input.ndim - 2 + k]
                if not isinstance(size, int):
                    raise ShapeError(located(f"adaptive_avg_pool2d: output_size None needs a "
                                             f"static input size, found "
                                             f"{format_shape(input.shape)}"))
                sizes[k] = size
        output_size = tuple(sizes)
    out = _pair(output_size, "adaptive_avg_pool2d", "output_size", 1)
    return _batched(input,
                    lambda x: adaptive_avg_pool2d_op(x, output_size=out),
                    "adaptive_avg_pool2d")


# -- 1-D and 3-D pooling, pooling indices, unpooling, adaptive max pooling ---------------------


def _max_pool2d_indices_infer(types, attrs):
    (pooled,) = _max_pool2d_infer(types, attrs)
    return [pooled.with_dtype("int64")]


def _max_pool2d_indices_kernel(xp, x, kernel_size, stride, padding, dilation, ceil_mode):
    index, (ho, wo), _ = _max_pool_argmax(xp, x, kernel_size, stride, padding, dilation,
                                          ceil_mode)
    index = index.astype(xp.int64)
    kw = kernel_size[1]
    rows = xp.arange(ho, dtype=xp.int64)[:, None] * stride[0] - padding[0] \
        + (index // kw) * dilation[0]
    cols = xp.arange(wo, dtype=xp.int64)[None, :] * stride[1] - padding[1] \
        + (index % kw) * dilation[1]
    return rows * x.shape[3] + cols


max_pool2d_indices_op = register(OpDef(
    "max_pool2d_indices", _max_pool2d_indices_infer, _max_pool2d_indices_kernel,
    doc="flat (H*W) index in x of each max_pool2d window's winner (return_indices=True)",
    attrs=Attrs(**_POOL_ATTRS), batch=_images_rule))


def _max_unpool2d_infer(types, attrs):
    x, idx = types
    _check_image("max_unpool2d", x)
    _check_float("max_unpool2d", x)
    if idx.dtype not in ("int64", "int32"):
        raise DTypeError(f"max_unpool2d: expected integer indices, found {idx.dtype}")
    if tuple(idx.shape) != tuple(x.shape):
        raise ShapeError(f"max_unpool2d: expected indices of the input's shape "
                         f"{format_shape(x.shape)}, found {format_shape(idx.shape)}")
    return [TensorType(tuple(x.shape[:2]) + tuple(attrs["output_size"]), x.dtype)]


def _max_unpool2d_kernel(xp, x, idx, output_size):
    n, c = x.shape[:2]
    size = output_size[0] * output_size[1]
    flat = idx.reshape(n, c, -1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= size):
        bad = int(flat.min()) if int(flat.min()) < 0 else int(flat.max())
        raise IndexError(f"max_unpool2d: found an invalid max index {bad} (output planes "
                         f"{output_size[0]}x{output_size[1]} hold {size} elements)")
    out = xp.zeros((n * c, size), dtype=x.dtype)
    planes = xp.arange(n * c)[:, None]
    out[planes, flat.reshape(n * c, -1).astype(xp.int64)] = x.reshape(n * c, -1)
    return out.reshape(n, c, *output_size)


def _max_unpool2d_vjp(cts, ins, outs, a, needs):
    (g,), (x, idx) = cts, ins
    flat = reshape(g, g.shape[0], g.shape[1], -1)
    picked = gather(flat, 2, reshape(idx, idx.shape[0], idx.shape[1], -1))
    return [reshape(picked, *x.shape), None]


max_unpool2d_op = register(OpDef(
    "max_unpool2d", _max_unpool2d_infer, _max_unpool2d_kernel, _max_unpool2d_vjp,
    autocast="fp32",
    nondiff_inputs=(1,), doc="x placed at its flat (H*W) indices in a zero image",
    attrs=Attrs(output_size=Attr("dims", min=1)), batch=_images_rule))


def _adaptive_max_infer(types, attrs):
    (t,) = types
    _check_image("adaptive_max_pool2d", t)
    if t.dtype == "bool":
        raise DTypeError("adaptive_max_pool2d: expected a numeric tensor, found bool")
    return [TensorType(t.shape[:2] + tuple(attrs["output_size"]), "int64")]


def _adaptive_max_kernel(xp, x, output_size):
    """Flat (H*W) index of each window's maximum: the first maximum, a NaN taking over (the
    last NaN wins), as PyTorch."""
    n, c, h, w = x.shape
    oh, ow = output_size
    out = xp.empty((n, c, oh, ow), dtype=xp.int64)
    is_float = dtypes.is_float_array(x)
    for i, (r0, r1) in enumerate(_adaptive_windows(h, oh)):
        for j, (c0, c1) in enumerate(_adaptive_windows(w, ow)):
            win = x[:, :, r0:r1, c0:c1].reshape(n, c, -1)
            at = xp.argmax(win, axis=2)
            if is_float:
                nan = xp.isnan(win)
                last = win.shape[2] - 1 - xp.argmax(nan[:, :, ::-1], axis=2)
                at = xp.where(nan.any(axis=2), last, at)
            width = c1 - c0
            out[:, :, i, j] = (r0 + at // width) * w + c0 + at % width
    return out


adaptive_max_pool2d_indices_op = register(OpDef(
    "adaptive_max_pool2d_indices", _adaptive_max_infer, _adaptive_max_kernel,
    doc="flat (H*W) index of each adaptive_max_pool2d window's maximum",
    attrs=Attrs(output_size=Attr("dims", min=1)), batch=_images_rule))


def _gather_flat(x, idx):
    """x (N, C, H, W) read at the flat (H*W) indices ``idx`` (N, C, h, w): torch's gradient
    convention (the cotangent added at each index)."""
    flat = reshape(x, x.shape[0], x.shape[1], -1)
    picked = gather(flat, 2, reshape(idx, idx.shape[0], idx.shape[1], -1))
    return reshape(picked, *idx.shape)


@composite("max_pool1d")
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Maximum over sliding windows of an (N, C, L) input (as torch.nn.functional.max_pool1d):
    max_pool2d over a unit height. ``return_indices`` also gives each winner's index in L."""
    name = "max_pool1d"
    kernel = _ntuple(kernel_size, 1, name, "kernel_size", 1)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _ntuple(stride, 1, name, "stride", 1)
    attrs = dict(kernel_size=(1,) + kernel, stride=(1,) + stride,
                 padding=(0,) + _ntuple(padding, 1, name, "padding", 0),
                 dilation=(1,) + _ntuple(dilation, 1, name, "dilation", 1),
                 ceil_mode=bool(ceil_mode))

    def run(x):
        x4 = reshape(x, x.shape[0], x.shape[1], 1, x.shape[2])
        out = max_pool2d_op(x4, **attrs)
        out = reshape(out, out.shape[0], out.shape[1], out.shape[3])
        if not return_indices:
            return out
        idx = max_pool2d_indices_op(x4, **attrs)
        return out, reshape(idx, idx.shape[0], idx.shape[1], idx.shape[3])
    x = operand(input, name)
    if x.ndim == 2:
        res = run(reshape(x, 1, *x.shape))
        if return_indices:
            return tuple(reshape(r, *r.shape[1:]) for r in res)
        return reshape(res, *res.shape[1:])
    if x.ndim != 3:
        raise ShapeError(located(f"{name}: expected a 3-D input [N,C,L] (or 2-D [C,L]), "
                                 f"found {format_shape(x.shape)}"))
    return run(x)


@composite("avg_pool1d")
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """Mean over sliding windows of an (N, C, L) input (as torch.nn.functional.avg_pool1d)."""
    name = "avg_pool1d"
    kernel = _ntuple(kernel_size, 1, name, "kernel_size", 1)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _ntuple(stride, 1, name, "stride", 1)
    padding = _ntuple(padding, 1, name, "padding", 0)

    def run(x):
        x4 = reshape(x, x.shape[0], x.shape[1], 1, x.shape[2])
        out = avg_pool2d_op(x4, kernel_size=(1,) + kernel, stride=(1,) + stride,
                            padding=(0,) + padding, ceil_mode=bool(ceil_mode),
                            count_include_pad=bool(count_include_pad))
        return reshape(out, out.shape[0], out.shape[1], out.shape[3])
    return _batched_nd(input, 1, run, name)


def _pool3d_args(name, kernel_size, stride, padding, dilation=1):
    kernel = _ntuple(kernel_size, 3, name, "kernel_size", 1)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _ntuple(stride, 3, name, "stride", 1)
    return (kernel, stride, _ntuple(padding, 3, name, "padding", 0),
            _ntuple(dilation, 3, name, "dilation", 1))


def _separable_3d(x, op, hw_attrs, d_attrs):
    """A 3-D pool as the 2-D pool over (H, W) and then the 2-D pool over (D, H_out*W_out)
    with a unit second window: the windows are boxes, so this is exact."""
    n, c, d, h, w = x.shape
    y = op(reshape(x, -1, c * d, h, w), **hw_attrs)              # (N, C*D, Ho, Wo)
    ho, wo = y.shape[2], y.shape[3]
    y = op(reshape(y, -1, c, d, ho * wo), **d_attrs)             # (N, C, Do, Ho*Wo)
    return reshape(y, -1, c, y.shape[2], ho, wo)


@composite("max_pool3d")
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Maximum over sliding (kD, kH, kW) windows of an (N, C, D, H, W) input (as
    torch.nn.functional.max_pool3d); the gradient goes to one winner per window (the first
    maximum in (d, h, w) order). ``return_indices`` is not supported."""
    name = "max_pool3d"
    if return_indices:
        raise ValueError(located(f"{name}: return_indices=True is not supported (max_pool2d "
                                 f"and max_pool1d support it)"))
    kernel, stride, padding, dilation = _pool3d_args(name, kernel_size, stride, padding,
                                                     dilation)
    hw = dict(kernel_size=kernel[1:], stride=stride[1:], padding=padding[1:],
              dilation=dilation[1:], ceil_mode=bool(ceil_mode))
    dd = dict(kernel_size=(kernel[0], 1), stride=(stride[0], 1), padding=(padding[0], 0),
              dilation=(dilation[0], 1), ceil_mode=bool(ceil_mode))
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(located(f"{name}: padding {padding} must be at most half the kernel "
                                 f"size {kernel}"))
    return _batched_nd(input, 3, lambda x: _separable_3d(x, max_pool2d_op, hw, dd), name)


@composite("avg_pool3d")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """Mean over sliding (kD, kH, kW) windows of an (N, C, D, H, W) input (as
    torch.nn.functional.avg_pool3d; ``count_include_pad`` as there)."""
    name = "avg_pool3d"
    kernel, stride, padding, _ = _pool3d_args(name, kernel_size, stride, padding)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(located(f"{name}: padding {padding} must be at most half the kernel "
                                 f"size {kernel}"))
    common = dict(ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))
    hw = dict(kernel_size=kernel[1:], stride=stride[1:], padding=padding[1:], **common)
    dd = dict(kernel_size=(kernel[0], 1), stride=(stride[0], 1), padding=(padding[0], 0),
              **common)
    return _batched_nd(input, 3, lambda x: _separable_3d(x, avg_pool2d_op, hw, dd), name)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode: bool = False):
    """(max_pool2d's result, the flat H*W index in the input of each window's winner), as
    torch.nn.functional.max_pool2d(..., return_indices=True)."""
    kernel, stride, padding = _pool_args("max_pool2d", kernel_size, stride, padding)
    attrs = dict(kernel_size=kernel, stride=stride, padding=padding,
                 dilation=_pair(dilation, "max_pool2d", "dilation", 1),
                 ceil_mode=bool(ceil_mode))
    x = operand(input, "max_pool2d")
    unbatched = x.ndim == 3
    if unbatched:
        x = reshape(x, 1, *x.shape)
    out, idx = max_pool2d_op(x, **attrs), max_pool2d_indices_op(x, **attrs)
    if unbatched:
        return reshape(out, *out.shape[1:]), reshape(idx, *idx.shape[1:])
    return out, idx


@composite("max_unpool2d")
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool2d with return_indices (as torch.nn.functional.max_unpool2d):
    each value placed at its flat (H*W) index in a zero image of size
    (H-1)*stride - 2*padding + kernel_size (or ``output_size``, its last two entries)."""
    name = "max_unpool2d"
    kernel, stride, padding = _pool_args(name, kernel_size, stride, padding)
    x = operand(input, name)
    indices = operand(indices, name, "indices")
    if x.ndim not in (3, 4):
        raise ShapeError(located(f"{name}: expected a 4-D input [N,C,H,W] (or 3-D [C,H,W]), "
                                 f"found {format_shape(x.shape)}"))
    h, w = x.shape[-2:]
    default = tuple((s - 1) * st - 2 * p + k for s, st, p, k in zip((h, w), stride, padding,
                                                                     kernel))
    if output_size is None:
        size = default
    else:
        size = tuple(int(s) for s in tuple(output_size)[-2:])
        if len(tuple(output_size)) not in (2, x.ndim):
            raise ShapeError(located(f"{name}: expected output_size of 2 or {x.ndim} entries, "
                                     f"found {tuple(output_size)}"))
        for s, dflt, st in zip(size, default, stride):
            if not dflt - st < s < dflt + st:
                raise ShapeError(located(
                    f"{name}: output_size {tuple(output_size)} must lie between "
                    f"{tuple(dd - s_ + 1 for dd, s_ in zip(default, stride))} and "
                    f"{tuple(dd + s_ - 1 for dd, s_ in zip(default, stride))}"))
    if x.ndim == 3:
        out = max_unpool2d_op(reshape(x, 1, *x.shape), reshape(indices, 1, *indices.shape),
                              output_size=size)
        return reshape(out, *out.shape[1:])
    return max_unpool2d_op(x, indices, output_size=size)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Maximum over the windows that split the input into ``output_size`` cells (as
    torch.nn.functional.adaptive_max_pool2d): cell i covers [floor(i*H/out),
    ceil((i+1)*H/out)); a None in ``output_size`` keeps that input size. The gradient goes to
    each window's maximum (added where windows share it)."""
    name = "adaptive_max_pool2d"
    x = operand(input, name)
    if x.ndim not in (3, 4):
        raise ShapeError(located(f"{name}: expected a 4-D input [N,C,H,W] (or 3-D [C,H,W]), "
                                 f"found {format_shape(x.shape)}"))
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        output_size = tuple(x.shape[x.ndim - 2 + k] if s is None else s
                            for k, s in enumerate(output_size))
    out_hw = _pair(output_size, name, "output_size", 1)
    unbatched = x.ndim == 3
    if unbatched:
        x = reshape(x, 1, *x.shape)
    idx = adaptive_max_pool2d_indices_op(x, output_size=out_hw)
    out = _gather_flat(x, idx)
    if unbatched:
        out, idx = reshape(out, *out.shape[1:]), reshape(idx, *idx.shape[1:])
    return (out, idx) if return_indices else out


@composite("adaptive_avg_pool1d")
def adaptive_avg_pool1d(input, output_size):
    """Mean over the windows that split an (N, C, L) input into ``output_size`` cells (as
    torch.nn.functional.adaptive_avg_pool1d): adaptive_avg_pool2d over a unit height."""
    name = "adaptive_avg_pool1d"
    (out,) = _ntuple(output_size, 1, name, "output_size", 1)

    def run(x):
        y = adaptive_avg_pool2d_op(reshape(x, x.shape[0], x.shape[1], 1, x.shape[2]),
                                   output_size=(1, out))
        return reshape(y, y.shape[0], y.shape[1], out)
    return _batched_nd(input, 1, run, name)


@composite("adaptive_max_pool1d")
def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """Maximum over the windows that split an (N, C, L) input into ``output_size`` cells (as
    torch.nn.functional.adaptive_max_pool1d); ``return_indices`` also gives each maximum's
    index in L."""
    name = "adaptive_max_pool1d"
    (out,) = _ntuple(output_size, 1, name, "output_size", 1)
    x = operand(input, name)
    if x.ndim not in (2, 3):
        raise ShapeError(located(f"{name}: expected a 3-D input [N,C,L] (or 2-D [C,L]), found "
                                 f"{format_shape(x.shape)}"))
    x4 = reshape(x, *x.shape[:-1], 1, x.shape[-1])
    res = adaptive_max_pool2d(x4, (1, out), return_indices)
    drop = lambda t: reshape(t, *t.shape[:-2], out)     # noqa: E731
    return tuple(drop(t) for t in res) if return_indices else drop(res)
