"""Convolution and pooling over NCHW images: conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d.

Kernels read image patches through ``as_strided`` views (im2col: one copy, at the reshape
before one batched matmul) and loop only over the kh*kw kernel offsets, never over pixels.
Each gradient is an op of its own whose vjp is written with the forward ops, so gradients of
gradients work (the pairs are adjoint linear maps):

    conv2d(x, w)               -> conv2d_input_grad(g, w),  conv2d_weight_grad(x, g)
    conv2d_input_grad(g, w)    -> conv2d(c, w),             conv2d_weight_grad(c, g)
    conv2d_weight_grad(x, g)   -> conv2d_input_grad(g, c),  conv2d(x, c)
    max_pool2d(x)              -> max_pool2d_backward(g, x)   (g goes to each window's argmax)
    max_pool2d_backward(g, x) <-> max_pool2d_gather(c, x)     (x only chooses the winners)
    avg_pool2d                <-> avg_pool2d_backward
    adaptive_avg_pool2d       <-> adaptive_avg_pool2d_backward

The public functions normalise the attributes once: ``stride``, ``dilation`` and
``kernel_size`` are pairs; conv2d's ``padding`` is (top, bottom, left, right) ('same' may pad
unevenly), the pools' is (height, width). Gradient ops carry the shape they produce as
``shape``, where the runtime binds a symbolic batch dim from the feeds.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, dim_add, dim_ceil_div, dim_floor_div, format_shape
from .reduction import sum as reduce_sum
from .shape import reshape
from ._common import operand

IntOrPair = Union[int, Tuple[int, int]]

# -- geometry ----------------------------------------------------------------------------------


def _out_dim(size, kernel: int, stride: int, dilation: int, pad_lo: int, pad_hi: int,
             ceil_mode: bool = False):
    """Output length along one spatial dim (PyTorch's formula); 0 or less means empty.

    The windows start at t * stride for the t with t * stride < size + c, where c is
    pad_lo + pad_hi - span + 1 (floor mode) or min(pad_lo + pad_hi - span + stride, pad_lo)
    (ceil mode: partial windows count, but the last must start inside the input or the left
    padding). A symbolic ``size`` gives that count as a symbolic dim (``H-2``,
    ``ceiling(H/2)``...), simplified by sympy."""
    span = dilation * (kernel - 1) + 1
    c = pad_lo + pad_hi - span + 1
    if ceil_mode:
        c = min(pad_lo + pad_hi - span + stride, pad_lo)
    if not isinstance(size, str):
        if size + pad_lo + pad_hi < span:
            return 0
        return -(-(size + c) // stride)
    if ceil_mode:
        return dim_ceil_div(dim_add(size, c), stride)
    # PyTorch's floor((size + pads - span) / stride) + 1, which sympy keeps readable
    return dim_add(dim_floor_div(dim_add(size, c - 1), stride), 1)


def _spatial_out(name: str, shape, kernel, stride, dilation, padding, ceil_mode=False):
    """(H_out, W_out) for an input ``shape``; ``padding`` is (top, bottom, left, right)."""
    pt, pb, pl, pr = padding
    ho = _out_dim(shape[2], kernel[0], stride[0], dilation[0], pt, pb, ceil_mode)
    wo = _out_dim(shape[3], kernel[1], stride[1], dilation[1], pl, pr, ceil_mode)
    if (isinstance(ho, int) and ho <= 0) or (isinstance(wo, int) and wo <= 0):
        spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        padded = tuple(s + a + b if isinstance(s, int) else s
                       for s, a, b in ((shape[2], pt, pb), (shape[3], pl, pr)))
        raise ShapeError(
            f"{name}: the output would be empty: input {format_shape(shape)} padded to "
            f"{padded[0]}x{padded[1]} is smaller than the kernel, which spans "
            f"{spans[0]}x{spans[1]} (kernel_size {tuple(kernel)}, dilation {tuple(dilation)}); "
            f"expected a padded input at least as large as the kernel span")
    return ho, wo


def _check_image(name: str, t, what: str = "input"):
    if t.ndim != 4:
        raise ShapeError(f"{name}: expected a 4-D {what} [N,C,H,W] (or 3-D [C,H,W]), found "
                         f"{format_shape(t.shape)}")


def _check_float(name: str, *types):
    first = types[0]
    for t in types:
        if not dtypes.is_float(t.dtype):
            raise DTypeError(f"{name}: expected floating-point tensors, found {t.dtype}; "
                             f"cast it first (x.cast('float32'))")
        if t.dtype != first.dtype:
            found = ", ".join(t.dtype for t in types)
            raise DTypeError(f"{name}: expected operands of one dtype, found {found}; "
                             f"cast them to the same dtype")


def _window(a, i: int, j: int, stride, dilation, out_hw):
    """The strided slice of padded ``a`` that kernel offset (i, j) sees at every output pixel."""
    (sh, sw), (dh, dw), (ho, wo) = stride, dilation, out_hw
    return a[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]


def _embed(xp, x, rows: int, cols: int, top: int, left: int, fill=0):
    """``x`` placed at (top, left) in a new (N, C, rows, cols) array filled with ``fill``."""
    n, c, h, w = x.shape
    if fill == 0:
        out = xp.zeros((n, c, rows, cols), dtype=x.dtype)
    else:
        out = xp.full((n, c, rows, cols), fill, dtype=x.dtype)
    out[:, :, top:top + h, left:left + w] = x
    return out


# -- conv2d ------------------------------------------------------------------------------------


def _flat_rows(stride, padded_width: int, out_width: int) -> bool:
    """Whether im2col reads whole padded rows (see ``_im2col``): stride 1 and little waste."""
    return stride == (1, 1) and padded_width <= 2 * out_width


def _im2col(xp, x, kernel, stride, padding, dilation, groups: int, out_hw):
    """Patches of ``x`` as a (groups, C/groups*kh*kw, N*L) array, and the row length used.

    Channel-major, so that one matmul per group (batched over groups) covers the whole batch.
    With stride 1, L = H_out * W_padded and each patch row is one contiguous run of a
    flattened padded image: output pixel (r, q) sits at r * W_padded + q and the columns
    q >= W_out are discarded afterwards (copying long runs is much faster than copying
    W_out-long pieces). Otherwise L = H_out * W_out and the row length is W_out.
    """
    n, c, h, w = x.shape
    (kh, kw), (dh, dw), (pt, pb, pl, pr), (ho, wo) = kernel, dilation, padding, out_hw
    cg = c // groups
    wp = w + pl + pr
    if _flat_rows(stride, wp, wo):
        hp = h + pt + pb + 1         # one spare row: the last runs read (kw-1)*dw past the end
        xpad = _embed(xp, x, hp, wp, pt, pl)
        it = xpad.itemsize
        view = xp.lib.stride_tricks.as_strided(
            xpad, (groups, cg, kh, kw, n, ho * wp),
            (cg * hp * wp * it, hp * wp * it, dh * wp * it, dw * it, c * hp * wp * it, it))
        return view.reshape(groups, cg * kh * kw, n * ho * wp), wp
    if any(padding):
        x = _embed(xp, x, h + pt + pb, wp, pt, pl)
    s = x.strides
    view = xp.lib.stride_tricks.as_strided(
        x, (groups, cg, kh, kw, n, ho, wo),
        (cg * s[1], s[1], dh * s[2], dw * s[3], s[0], stride[0] * s[2], stride[1] * s[3]))
    return view.reshape(groups, cg * kh * kw, n * ho * wo), wo


def _grad_rows(xp, g, groups: int, row: int):
    """Output cotangent ``g`` channel-major, as (groups, C_out/groups, N*H_out*row), zero in
    the columns past W_out (the layout ``_im2col`` gives its patches)."""
    n, o, ho, wo = g.shape
    if row != wo:
        rows = xp.zeros((o, n, ho, row), dtype=g.dtype)
        rows[..., :wo] = g.transpose(1, 0, 2, 3)
    else:
        rows = xp.ascontiguousarray(g.transpose(1, 0, 2, 3))
    return rows.reshape(groups, o // groups, n * ho * row)


def _conv2d_infer(types, attrs):
    x, w = types[0], types[1]
    b = types[2] if len(types) > 2 else None
    _check_float("conv2d", *types)
    _check_image("conv2d", x)
    if w.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D weight [C_out,C_in/groups,kH,kW], found "
                         f"{format_shape(w.shape)}")
    if not all(isinstance(d, int) for d in w.shape):
        raise ShapeError(f"conv2d: the weight needs a static shape, found "
                         f"{format_shape(w.shape)}")
    groups = attrs["groups"]
    out_ch, per_group, kh, kw = w.shape
    channels = x.shape[1]
    if out_ch % groups:
        raise ShapeError(f"conv2d: weight {format_shape(w.shape)} has {out_ch} output "
                         f"channels, which groups={groups} does not divide")
    if isinstance(channels, int):
        if channels % groups:
            raise ShapeError(f"conv2d: input {format_shape(x.shape)} has {channels} channels, "
                             f"which groups={groups} does not divide")
        if channels // groups != per_group:
            raise ShapeError(
                f"conv2d: input {format_shape(x.shape)} has {channels} channels, so with "
                f"groups={groups} expected weight with {channels // groups} input channels "
                f"per group, found {per_group} (weight {format_shape(w.shape)})")
    if b is not None and tuple(b.shape) != (out_ch,):
        raise ShapeError(f"conv2d: expected a bias of shape [{out_ch}] (one per output "
                         f"channel), found {format_shape(b.shape)}")
    ho, wo = _spatial_out("conv2d", x.shape, (kh, kw), attrs["stride"], attrs["dilation"],
                          attrs["padding"])
    return [TensorType((x.shape[0], out_ch, ho, wo), x.dtype)]


def _conv2d_kernel(xp, x, w, b=None, *, stride, padding, dilation, groups):
    ho, wo = _spatial_out("conv2d", x.shape, tuple(w.shape[2:]), stride, dilation, padding)
    cols, row = _im2col(xp, x, tuple(w.shape[2:]), stride, padding, dilation, groups,
                        (ho, wo))
    return conv2d_from_patches(xp, cols, row, w, b, x.shape[0], (ho, wo), groups)


def conv2d_from_patches(xp, cols, row: int, w, b, n: int, out_hw, groups: int):
    """conv2d's result from its patches (``_im2col``'s layout: (groups, C/groups*kh*kw,
    N*H_out*row)): one batched matmul, the transposing copy, the bias. A backend with its
    own patch copy reuses this."""
    out_ch, cg, kh, kw = w.shape
    ho, wo = out_hw
    wmat = w.reshape(groups, out_ch // groups, cg * kh * kw)
    res = xp.matmul(wmat, cols).reshape(out_ch, n, ho, row)[..., :wo]
    out = xp.empty((n, out_ch, ho, wo), dtype=res.dtype)
    xp.copyto(out, res.transpose(1, 0, 2, 3))
    if b is not None:
        # over (N, C*H*W) rows with the bias repeated to a row: numpy broadcasts a
        # (1, C, 1, 1) bias in runs of W_out elements (a (512, 32, 4, 4) output: 365 ->
        # 165 us with the transposing copy)
        flat = out.reshape(n, -1)
        flat += b.astype(out.dtype, copy=False).repeat(ho * wo).reshape(1, -1)
    return out


def _conv2d_vjp(cts, ins, outs, a, needs):
    (g,), x, w = cts, ins[0], ins[1]
    grads = [conv2d_input_grad_op(g, w, shape=tuple(x.shape), **a) if needs[0] else None,
             conv2d_weight_grad_op(x, g, shape=tuple(w.shape), **a) if needs[1] else None]
    if len(ins) > 2:
        grads.append(reduce_sum(g, (0, 2, 3)) if needs[2] else None)
    return grads


conv2d_op = register(OpDef("conv2d", _conv2d_infer, _conv2d_kernel, _conv2d_vjp,
                           doc="2-D cross-correlation over NCHW images (torch conv2d)",
                           attrs=Attrs(stride=Attr("dims", min=1), padding=Attr("dims", min=0),
                                       dilation=Attr("dims", min=1), groups=Attr(int, min=1))))


def _conv_attrs(attrs) -> dict:
    return {k: v for k, v in attrs.items() if k != "shape"}


def _grad_infer(name: str):
    def infer(types, attrs):
        _check_float(name, *types)
        for t in types:
            _check_image(name, t, "operand")
        return [TensorType(attrs["shape"], types[0].dtype)]
    return infer


def patch_cotangents(xp, g, w, groups: int, row: int):
    """The cotangents of conv2d's patches, (groups, C/groups*kh*kw, N*H_out*row): one
    matmul per group of the weight's transpose by ``g`` (rows of length ``row``)."""
    out_ch, cg, kh, kw = w.shape
    wmat = w.reshape(groups, out_ch // groups, cg * kh * kw)
    return xp.matmul(wmat.swapaxes(-1, -2), _grad_rows(xp, g, groups, row))


def _conv2d_input_grad_kernel(xp, g, w, *, shape, stride, padding, dilation, groups):
    n, c, h, wd = shape
    out_ch, cg, kh, kw = w.shape
    (dh, dw), (pt, pb, pl, pr) = dilation, padding
    ho, wo = g.shape[2:]
    wp = wd + pl + pr
    flat = _flat_rows(stride, wp, wo)
    row = wp if flat else wo
    dcols = patch_cotangents(xp, g, w, groups, row)
    dcols = dcols.reshape(c, kh, kw, n, ho * row)
    if flat:                         # each offset adds one contiguous run (see _im2col)
        hp, length = h + pt + pb + 1, ho * wp
        gx = xp.zeros((c, n, hp * wp), dtype=g.dtype)
        for i in range(kh):
            for j in range(kw):
                start = i * dh * wp + j * dw
                gx[:, :, start:start + length] += dcols[:, i, j]
        gx = gx.reshape(c, n, hp, wp)
    else:                            # col2im: each offset adds one strided window
        gx = xp.zeros((c, n, h + pt + pb, wp), dtype=g.dtype)
        dcols = dcols.reshape(c, kh, kw, n, ho, wo)
        for i in range(kh):
            for j in range(kw):
                _window(gx, i, j, stride, dilation, (ho, wo))[...] += dcols[:, i, j]
    return xp.ascontiguousarray(gx[:, :, pt:pt + h, pl:pl + wd].transpose(1, 0, 2, 3))


def _conv2d_input_grad_vjp(cts, ins, outs, a, needs):
    (c,), (g, w) = cts, ins
    conv = _conv_attrs(a)
    return [conv2d_op(c, w, **conv) if needs[0] else None,
            conv2d_weight_grad_op(c, g, shape=tuple(w.shape), **conv) if needs[1] else None]


conv2d_input_grad_op = register(OpDef(
    "conv2d_input_grad", _grad_infer("conv2d_input_grad"), _conv2d_input_grad_kernel,
    _conv2d_input_grad_vjp, doc="gradient of conv2d for its input (a transposed conv)",
    attrs=Attrs(shape=Attr("shape"), stride=Attr("dims", min=1),
                padding=Attr("dims", min=0), dilation=Attr("dims", min=1),
                groups=Attr(int, min=1))))


def _conv2d_weight_grad_kernel(xp, x, g, *, shape, stride, padding, dilation, groups):
    cols, row = _im2col(xp, x, tuple(shape[2:]), stride, padding, dilation, groups,
                        tuple(g.shape[2:]))
    return weight_grad_from_patches(xp, cols, row, g, groups, shape)


def weight_grad_from_patches(xp, cols, row: int, g, groups: int, shape):
    """conv2d's weight gradient from the input's patches (``_im2col``'s layout)."""
    rows = _grad_rows(xp, g, groups, row)                 # (G, C_out/G, N*L)
    # patches @ rows^T, then transposed: BLAS runs this orientation markedly faster
    grad_t = xp.matmul(cols, rows.swapaxes(-1, -2))       # (G, C/G*kh*kw, C_out/G)
    return xp.ascontiguousarray(grad_t.swapaxes(-1, -2)).reshape(shape)


def _conv2d_weight_grad_vjp(cts, ins, outs, a, needs):
    (c,), (x, g) = cts, ins
    conv = _conv_attrs(a)
    return [conv2d_input_grad_op(g, c, shape=tuple(x.shape), **conv) if needs[0] else None,
            conv2d_op(x, c, **conv) if needs[1] else None]


conv2d_weight_grad_op = register(OpDef(
    "conv2d_weight_grad", _grad_infer("conv2d_weight_grad"), _conv2d_weight_grad_kernel,
    _conv2d_weight_grad_vjp, doc="gradient of conv2d for its weight",
    attrs=Attrs(shape=Attr("shape"), stride=Attr("dims", min=1),
                padding=Attr("dims", min=0), dilation=Attr("dims", min=1),
                groups=Attr(int, min=1))))

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
        index = xp.where(~better, index, xp.asarray(k, dtype=xp.int32))
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

max_pool2d_op = register(OpDef(
    "max_pool2d", _max_pool2d_infer, _max_pool2d_kernel,
    lambda cts, ins, outs, a, needs: [max_pool2d_backward_op(cts[0], ins[0], **a)],
    doc="max over sliding windows (torch max_pool2d)",
    attrs=Attrs(**_POOL_ATTRS)))


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
    attrs=Attrs(**_POOL_ATTRS)))


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
    attrs=Attrs(**_POOL_ATTRS)))


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
    attrs=Attrs(**_AVG_POOL_ATTRS)))


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
    attrs=Attrs(shape=Attr("shape"), **_AVG_POOL_ATTRS)))


def _adaptive_infer(types, attrs):
    (t,) = types
    _check_image("adaptive_avg_pool2d", t)
    _check_float("adaptive_avg_pool2d", t)
    return [TensorType(t.shape[:2] + tuple(attrs["output_size"]), t.dtype)]


def _adaptive_matrix(xp, size: int, out: int, dtype):
    """(out, size) averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out)).
    (Used by the ONNX exporter; the kernels average window by window instead.)"""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return xp.asarray(inside / (end - start)[:, None], dtype=dtype)


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
    attrs=Attrs(output_size=Attr("dims", min=1))))


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
    attrs=Attrs(shape=Attr("shape"), output_size=Attr("dims", min=1))))

# -- public functions --------------------------------------------------------------------------


def _pair(value, name: str, arg: str, minimum: int) -> Tuple[int, int]:
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if hasattr(value, "__index__") and not isinstance(value, bool):
        pair = (int(value.__index__()),) * 2
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
            hasattr(v, "__index__") and not isinstance(v, bool) for v in value):
        pair = (int(value[0].__index__()), int(value[1].__index__()))
    else:
        raise TypeError(located(f"{name}: expected {arg} as an int or a pair of ints, found "
                                f"{value!r}"))
    if min(pair) < minimum:
        raise ShapeError(located(f"{name}: expected {arg} >= {minimum}, found {value!r}"))
    return pair


def _batched(x, fn, name: str):
    """Run ``fn`` on a 4-D ``x``; a 3-D (unbatched) ``x`` gets a batch dim and loses it after."""
    x = operand(x, name)
    if x.ndim == 3:
        out = fn(reshape(x, 1, *x.shape))
        return reshape(out, *out.shape[1:])
    return fn(x)


def conv2d(input, weight, bias=None, stride: IntOrPair = 1,
           padding: Union[IntOrPair, str] = 0, dilation: IntOrPair = 1, groups: int = 1):
    """2-D convolution (cross-correlation, as torch.nn.functional.conv2d) of an NCHW ``input``
    with ``weight`` [C_out, C_in/groups, kH, kW] plus an optional ``bias`` [C_out].

    ``padding`` is an int, a pair, 'valid' (none) or 'same' (output size = input size;
    stride 1 only; an odd total puts the extra row/column at the bottom/right)."""
    stride = _pair(stride, "conv2d", "stride", 1)
    dilation = _pair(dilation, "conv2d", "dilation", 1)
    if not hasattr(groups, "__index__") or isinstance(groups, bool) or int(groups) < 1:
        raise ShapeError(located(f"conv2d: expected groups to be a positive int, found "
                                 f"{groups!r}"))
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise ShapeError(located(f"conv2d: padding='same' is not supported for "
                                         f"strided convolutions (stride {stride}); give "
                                         f"the padding as numbers"))
            if weight.ndim != 4:
                raise ShapeError(located(f"conv2d: expected a 4-D weight [C_out,C_in/groups,"
                                         f"kH,kW], found {format_shape(weight.shape)}"))
            pads = ()
            for k, d in zip(weight.shape[2:], dilation):
                total = d * (k - 1)
                pads += (total // 2, total - total // 2)
        else:
            raise ShapeError(located(f"conv2d: expected padding 'valid', 'same', an int or a "
                                     f"pair, found {padding!r}"))
    else:
        ph, pw = _pair(padding, "conv2d", "padding", 0)
        pads = (ph, ph, pw, pw)
    inputs = (weight,) if bias is None else (weight, bias)
    return _batched(input, lambda x: conv2d_op(
        x, *inputs, stride=stride, padding=pads, dilation=dilation, groups=int(groups)), "conv2d")


def _pool_args(name, kernel_size, stride, padding):
    kernel = _pair(kernel_size, name, "kernel_size", 1)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _pair(stride, name, "stride", 1)
    return kernel, stride, _pair(padding, name, "padding", 0)


def max_pool2d(input, kernel_size: IntOrPair, stride: Optional[IntOrPair] = None,
               padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False):
    """Maximum over sliding ``kernel_size`` windows (as torch.nn.functional.max_pool2d);
    ``stride`` defaults to ``kernel_size``; padding counts as -inf. The gradient goes to one
    winner per window (the first maximum in row-major order)."""
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
