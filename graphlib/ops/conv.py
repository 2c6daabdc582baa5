"""Convolution and pooling over NCHW images: conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d;
and, built on them, conv1d, conv3d, conv_transpose1d/2d/3d, the 1-D and 3-D pools, pooling
indices with max_unpool2d, and adaptive_max_pool2d (see the section at the end of the file).

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
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, register
from ..types import TensorType, dim_add, dim_ceil_div, dim_floor_div, format_shape
from ._common import operand
from .reduction import sum as reduce_sum
from .shape import gather, getitem, pad as pad_fn, permute, reshape, stack, unsqueeze

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
            found = ", ".join(str(t.dtype) for t in types)
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

# -- 1-D and 3-D convolution, transposed convolution (compositions of the 2-D ops) -------------


def _ntuple(value, n: int, name: str, arg: str, minimum: int) -> tuple:
    """``value`` (an int or n ints) as an n-tuple of ints >= ``minimum``."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if hasattr(value, "__index__") and not isinstance(value, bool):
        out = (int(value.__index__()),) * n
    elif isinstance(value, (tuple, list)) and len(value) == n and all(
            hasattr(v, "__index__") and not isinstance(v, bool) for v in value):
        out = tuple(int(v.__index__()) for v in value)
    else:
        raise TypeError(located(f"{name}: expected {arg} as an int or {n} ints, found "
                                f"{value!r}"))
    if min(out) < minimum:
        raise ShapeError(located(f"{name}: expected {arg} >= {minimum}, found {value!r}"))
    return out


def _groups(groups, name: str) -> int:
    if not hasattr(groups, "__index__") or isinstance(groups, bool) or int(groups) < 1:
        raise ShapeError(located(f"{name}: expected groups to be a positive int, found "
                                 f"{groups!r}"))
    return int(groups)


def _batched_nd(x, spatial: int, fn, name: str, like=()):
    """Run ``fn`` on an (N, C, *spatial) ``x``; an unbatched (C, *spatial) ``x`` gets a batch
    dim and loses it after. ``like``: the weight (and bias) ``x`` must share a float dtype
    with, checked here so the error names ``name``, not the op ``fn`` is built from."""
    x = operand(x, name)
    if like:
        try:
            _check_float(name, x, *[operand(t, name) for t in like if t is not None])
        except DTypeError as e:
            raise DTypeError(located(str(e))) from None
    if x.ndim == spatial + 1:
        out = fn(reshape(x, 1, *x.shape))
        return reshape(out, *out.shape[1:])
    if x.ndim != spatial + 2:
        letters = "DHW"[3 - spatial:]
        raise ShapeError(located(
            f"{name}: expected a {spatial + 2}-D input [N,C,{','.join(letters)}] (or "
            f"{spatial + 1}-D [C,{','.join(letters)}]), found {format_shape(x.shape)}"))
    return fn(x)


def _check_weight(name: str, weight, spatial: int, layout: str):
    weight = operand(weight, name, "weight")
    if weight.ndim != spatial + 2:
        raise ShapeError(located(f"{name}: expected a {spatial + 2}-D weight [{layout}], found "
                                 f"{format_shape(weight.shape)}"))
    if not all(isinstance(d, int) for d in weight.shape):
        raise ShapeError(located(f"{name}: the weight needs a static shape, found "
                                 f"{format_shape(weight.shape)}"))
    return weight


def _conv_same_pads(name, stride, dilation, kernel):
    if any(s != 1 for s in stride):
        raise ShapeError(located(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions (stride {stride}); give the padding as "
                                 f"numbers"))
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _conv_pads(name, padding, stride, dilation, kernel, n):
    """[(before, after)] per spatial dim for conv's ``padding`` (ints, 'valid' or 'same')."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * n
        if padding == "same":
            return _conv_same_pads(name, stride, dilation, kernel)
        raise ShapeError(located(f"{name}: expected padding 'valid', 'same', an int or {n} "
                                 f"ints, found {padding!r}"))
    return [(p, p) for p in _ntuple(padding, n, name, "padding", 0)]


@composite("conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D convolution (cross-correlation, as torch.nn.functional.conv1d) of an (N, C, L)
    ``input`` with ``weight`` [C_out, C_in/groups, kL] plus an optional ``bias`` [C_out]:
    conv2d over a unit height. ``padding`` is an int, 'valid' or 'same'."""
    stride = _ntuple(stride, 1, "conv1d", "stride", 1)
    dilation = _ntuple(dilation, 1, "conv1d", "dilation", 1)
    groups = _groups(groups, "conv1d")
    weight = _check_weight("conv1d", weight, 1, "C_out,C_in/groups,kL")
    (pads,) = _conv_pads("conv1d", padding, stride, dilation, weight.shape[2:], 1)
    w2 = reshape(weight, weight.shape[0], weight.shape[1], 1, weight.shape[2])
    inputs = (w2,) if bias is None else (w2, bias)

    def run(x):
        x4 = reshape(x, x.shape[0], x.shape[1], 1, x.shape[2])
        out = conv2d_op(x4, *inputs, stride=(1,) + stride, padding=(0, 0) + pads,
                        dilation=(1,) + dilation, groups=groups)
        return reshape(out, out.shape[0], out.shape[1], out.shape[3])
    return _batched_nd(input, 1, run, "conv1d", (weight, bias))


@composite("conv3d")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """3-D convolution (cross-correlation, as torch.nn.functional.conv3d) of an
    (N, C, D, H, W) ``input`` with ``weight`` [C_out, C_in/groups, kD, kH, kW] plus an optional
    ``bias`` [C_out]. ``padding`` is an int, a triple, 'valid' or 'same'.

    Computed as one conv2d: the kD depth taps of each output depth are stacked as channels
    (group by group), so the (N*D_out) images meet a weight [C_out, kD*C_in/groups, kH, kW]."""
    name = "conv3d"
    stride = _ntuple(stride, 3, name, "stride", 1)
    dilation = _ntuple(dilation, 3, name, "dilation", 1)
    groups = _groups(groups, name)
    weight = _check_weight(name, weight, 3, "C_out,C_in/groups,kD,kH,kW")
    out_ch, cg, kd, kh, kw = weight.shape
    pads = _conv_pads(name, padding, stride, dilation, weight.shape[2:], 3)
    if bias is not None:
        bias = operand(bias, name, "bias")
        if tuple(bias.shape) != (out_ch,):
            raise ShapeError(located(f"{name}: expected a bias of shape [{out_ch}] (one per "
                                     f"output channel), found {format_shape(bias.shape)}"))

    def run(x):
        n, c, d, h, w = x.shape
        if isinstance(c, int) and c % groups:
            raise ShapeError(located(f"{name}: input {format_shape(x.shape)} has {c} channels, "
                                     f"which groups={groups} does not divide"))
        if isinstance(c, int) and c // groups != cg:
            raise ShapeError(located(
                f"{name}: input {format_shape(x.shape)} has {c} channels, so with "
                f"groups={groups} expected a weight with {c // groups} input channels per "
                f"group, found {cg} (weight {format_shape(weight.shape)})"))
        if out_ch % groups:
            raise ShapeError(located(f"{name}: weight {format_shape(weight.shape)} has "
                                     f"{out_ch} output channels, which groups={groups} does "
                                     f"not divide"))
        if not isinstance(d, int):
            raise ShapeError(located(f"{name}: expected a static depth, found input "
                                     f"{format_shape(x.shape)}"))
        (p0, p1) = pads[0]
        do = _out_dim(d, kd, stride[0], dilation[0], p0, p1)
        if do <= 0:
            raise ShapeError(located(
                f"{name}: the output would be empty: input {format_shape(x.shape)} has depth "
                f"{d} padded to {d + p0 + p1}, less than the kernel's depth span "
                f"{dilation[0] * (kd - 1) + 1}"))
        if p0 or p1:
            x = pad_fn(x, (0, 0, 0, 0, p0, p1))
        taps = [getitem(x, (slice(None), slice(None),
                            slice(i * dilation[0], i * dilation[0] + stride[0] * (do - 1) + 1,
                                  stride[0])))
                for i in range(kd)]                              # kd x (N, C, D_out, H, W)
        t = stack(taps, 1)                                       # (N, kd, C, D_out, H, W)
        t = reshape(t, -1, kd, groups, cg, do, h, w)
        t = permute(t, 0, 4, 2, 1, 3, 5, 6)                      # (N, D_out, G, kd, C/G, H, W)
        t = reshape(t, -1, groups * kd * cg, h, w)
        w2 = reshape(permute(weight, 0, 2, 1, 3, 4), out_ch, kd * cg, kh, kw)
        inputs = (w2,) if bias is None else (w2, bias)
        y = conv2d_op(t, *inputs, stride=stride[1:], padding=pads[1] + pads[2],
                      dilation=dilation[1:], groups=groups)      # (N*D_out, C_out, H_o, W_o)
        y = reshape(y, -1, do, out_ch, y.shape[2], y.shape[3])
        return permute(y, 0, 2, 1, 3, 4)
    return _batched_nd(input, 3, run, name, (weight, bias))


def _transposed_geometry(name, size, k, s, p, op, d):
    """(output size, (pad_before, pad_after) for conv2d_input_grad, zeros to append) along one
    dim of a transposed conv; the pads keep conv2d over the output landing on ``size``."""
    out = (size - 1) * s - 2 * p + d * (k - 1) + op + 1
    if out <= 0:
        raise ShapeError(located(f"{name}: the output would be empty: input size {size}, "
                                 f"kernel {k}, stride {s}, padding {p}, dilation {d}, "
                                 f"output_padding {op} give {out}"))
    if op <= p:
        return out, (p, p - op), 0
    return out, (p, 0), op - p


def _transposed_args(name, spatial, weight, bias, stride, padding, output_padding, groups,
                     dilation):
    """conv_transpose{1,2,3}d's arguments checked and normalised: (weight, bias, stride,
    padding, output_padding, groups, dilation) with per-dim tuples."""
    letters = "kD,kH,kW".split(",")[3 - spatial:]
    stride = _ntuple(stride, spatial, name, "stride", 1)
    padding = _ntuple(padding, spatial, name, "padding", 0)
    output_padding = _ntuple(output_padding, spatial, name, "output_padding", 0)
    dilation = _ntuple(dilation, spatial, name, "dilation", 1)
    groups = _groups(groups, name)
    weight = _check_weight(name, weight, spatial, "C_in,C_out/groups," + ",".join(letters))
    for o, s, d in zip(output_padding, stride, dilation):
        if o >= s and o >= d:
            raise ShapeError(located(f"{name}: output_padding {output_padding} must be smaller "
                                     f"than either stride {stride} or dilation {dilation}"))
    in_ch, cg = weight.shape[:2]
    out_ch = cg * groups
    if in_ch % groups:
        raise ShapeError(located(f"{name}: weight {format_shape(weight.shape)} has {in_ch} "
                                 f"input channels, which groups={groups} does not divide"))
    if bias is not None:
        bias = operand(bias, name, "bias")
        if tuple(bias.shape) != (out_ch,):
            raise ShapeError(located(f"{name}: expected a bias of shape [{out_ch}] (one per "
                                     f"output channel), found {format_shape(bias.shape)}"))
    return weight, bias, stride, padding, output_padding, groups, dilation


def _check_transposed_input(name, x, weight):
    """The input's channels (dim 1) against the weight's dim 0, where static."""
    c, in_ch = x.shape[1], weight.shape[0]
    if isinstance(c, int) and c != in_ch:
        raise ShapeError(located(f"{name}: input {format_shape(x.shape)} has {c} channels, "
                                 f"expected {in_ch} (weight {format_shape(weight.shape)})"))


def _conv_transpose_nd(name, spatial, input, weight, bias, stride, padding, output_padding,
                       groups, dilation):
    """conv_transpose{1,2}d as conv2d_input_grad (the adjoint of conv2d)."""
    weight, bias, stride, padding, output_padding, groups, dilation = _transposed_args(
        name, spatial, weight, bias, stride, padding, output_padding, groups, dilation)
    in_ch, cg = weight.shape[:2]
    out_ch = cg * groups

    def run(x):
        _check_transposed_input(name, x, weight)
        c = x.shape[1]
        sizes = x.shape[2:]
        if not all(isinstance(s, int) for s in sizes):
            raise ShapeError(located(f"{name}: expected static spatial sizes, found input "
                                     f"{format_shape(x.shape)}"))
        geo = [_transposed_geometry(name, *a) for a in zip(
            sizes, weight.shape[2:], stride, padding, output_padding, dilation)]
        x4, w4 = x, weight
        s2, d2 = stride, dilation
        if spatial == 1:
            x4 = reshape(x, x.shape[0], c, 1, sizes[0])
            w4 = reshape(weight, in_ch, cg, 1, weight.shape[2])
            geo = [(1, (0, 0), 0)] + geo
            s2, d2 = (1,) + stride, (1,) + dilation
        shape = (x.shape[0], out_ch) + tuple(o - extra for o, _, extra in geo)
        y = conv2d_input_grad_op(x4, w4, shape=shape, stride=s2, dilation=d2,
                                 padding=geo[0][1] + geo[1][1], groups=groups)
        extras = [extra for _, _, extra in geo]
        if any(extras):
            y = pad_fn(y, (0, extras[1], 0, extras[0]))
        if bias is not None:
            y = y + reshape(bias, 1, out_ch, 1, 1)
        if spatial == 1:
            y = reshape(y, y.shape[0], out_ch, y.shape[3])
        return y
    return _batched_nd(input, spatial, run, name, (weight, bias))


@composite("conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """1-D transposed convolution (as torch.nn.functional.conv_transpose1d; the gradient of
    conv1d for its input) of an (N, C_in, L) ``input`` with ``weight``
    [C_in, C_out/groups, kL]: L_out = (L-1)*stride - 2*padding + dilation*(kL-1) +
    output_padding + 1."""
    return _conv_transpose_nd("conv_transpose1d", 1, input, weight, bias, stride, padding,
                              output_padding, groups, dilation)


@composite("conv_transpose2d")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """2-D transposed convolution (as torch.nn.functional.conv_transpose2d; the gradient of
    conv2d for its input) of an (N, C_in, H, W) ``input`` with ``weight``
    [C_in, C_out/groups, kH, kW]: H_out = (H-1)*stride - 2*padding + dilation*(kH-1) +
    output_padding + 1 (likewise W_out)."""
    return _conv_transpose_nd("conv_transpose2d", 2, input, weight, bias, stride, padding,
                              output_padding, groups, dilation)


@composite("conv_transpose3d")
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """3-D transposed convolution (as torch.nn.functional.conv_transpose3d) of an
    (N, C_in, D, H, W) ``input`` with ``weight`` [C_in, C_out/groups, kD, kH, kW].

    Computed as one conv_transpose2d over the N*D input planes, the kD depth taps as extra
    output channels, then each tap's planes placed at depth d*stride + tap*dilation (a zero
    interleave and a shift) and summed; the padding is cropped last."""
    name = "conv_transpose3d"
    weight, bias, stride, padding, output_padding, groups, dilation = _transposed_args(
        name, 3, weight, bias, stride, padding, output_padding, groups, dilation)
    in_ch, cg, kd, kh, kw = weight.shape
    out_ch = cg * groups

    def run(x):
        n, c, d, h, w = x.shape
        if not isinstance(d, int):
            raise ShapeError(located(f"{name}: expected a static depth, found input "
                                     f"{format_shape(x.shape)}"))
        _check_transposed_input(name, x, weight)
        dout, _, _ = _transposed_geometry(name, d, kd, stride[0], padding[0],
                                          output_padding[0], dilation[0])
        planes = reshape(permute(x, 0, 2, 1, 3, 4), -1, in_ch, h, w)       # (N*D, C_in, H, W)
        # weight [C_in, C_out/G, kD, kH, kW] as [C_in, (C_out/G)*kD, kH, kW]
        w2 = reshape(weight, in_ch, cg * kd, kh, kw)
        y = conv_transpose2d(planes, w2, None, stride[1:], padding[1:], output_padding[1:],
                             groups, dilation[1:])              # (N*D, G*(C_out/G)*kD, Ho, Wo)
        ho, wo = y.shape[2], y.shape[3]
        y = reshape(y, -1, d, out_ch, kd, ho, wo)
        full = (d - 1) * stride[0] + dilation[0] * (kd - 1) + 1
        total = None
        for i in range(kd):
            tap = getitem(y, (slice(None), slice(None), slice(None), i))   # (N, D, C_out, ..)
            if stride[0] > 1:          # d -> d*stride: interleave stride-1 zero planes
                tap = pad_fn(unsqueeze(tap, 2), (0, 0, 0, 0, 0, 0, 0, stride[0] - 1))
                tap = reshape(tap, -1, d * stride[0], out_ch, ho, wo)
                tap = getitem(tap, (slice(None), slice(0, (d - 1) * stride[0] + 1)))
            before = i * dilation[0]
            tap = pad_fn(tap, (0, 0, 0, 0, 0, 0, before, full - before - tap.shape[1]))
            total = tap if total is None else total + tap
        # crop the padding (and extend by output_padding) along depth
        end = padding[0] + dout
        if end > full:
            total = pad_fn(total, (0, 0, 0, 0, 0, 0, 0, end - full))
        total = getitem(total, (slice(None), slice(padding[0], end)))
        out = permute(total, 0, 2, 1, 3, 4)
        if bias is not None:
            out = out + reshape(bias, 1, out_ch, 1, 1, 1)
        return out
    return _batched_nd(input, 3, run, name, (weight, bias))


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
    attrs=Attrs(**_POOL_ATTRS)))


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
    nondiff_inputs=(1,), doc="x placed at its flat (H*W) indices in a zero image",
    attrs=Attrs(output_size=Attr("dims", min=1))))


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
    attrs=Attrs(output_size=Attr("dims", min=1))))


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
