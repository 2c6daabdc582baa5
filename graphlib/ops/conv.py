"""Convolution over NCHW images: conv2d and its two gradient ops; and, built on them, conv1d,
conv3d and conv_transpose1d/2d/3d. The pools live in ``pool`` (registered after these ops);
their names are importable from here too, where the runtime and ``nn`` look them up.

Kernels read image patches through ``as_strided`` views (im2col: one copy, at the reshape
before one batched matmul) and loop only over the kh*kw kernel offsets, never over pixels.
Each gradient is an op of its own whose vjp is written with the forward ops, so gradients of
gradients work (the pairs are adjoint linear maps):

    conv2d(x, w)               -> conv2d_input_grad(g, w),  conv2d_weight_grad(x, g)
    conv2d_input_grad(g, w)    -> conv2d(c, w),             conv2d_weight_grad(c, g)
    conv2d_weight_grad(x, g)   -> conv2d_input_grad(g, c),  conv2d(x, c)

The public functions normalise the attributes once: ``stride`` and ``dilation`` are pairs;
conv2d's ``padding`` is (top, bottom, left, right) ('same' may pad unevenly). Gradient ops
carry the shape they produce as ``shape``, where the runtime binds a symbolic batch dim from
the feeds.
"""
from __future__ import annotations

from typing import Union

from ..attrs import Attr, Attrs
from ..autocast import LOWER, autocast_function
from ..batching import ensure_batched, flatten_batch, lrank, shape_of
from ..errors import ShapeError, composite, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, format_shape
from ._common import operand
from ._window import (IntOrPair, _batched, _batched_nd, _check_float, _check_image, _conv_attrs,
                      _embed, _grad_infer, _ntuple, _out_dim, _pair, _spatial_out, _window)
from .reduction import sum as reduce_sum
from .shape import getitem, pad as pad_fn, permute, reshape, stack, unsqueeze


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


def _channels_into_groups(x, size: int):
    """(B, N, C, H, W) -> (N, B*C, H, W): the batch's channels side by side, so that a
    convolution with ``B`` times the groups keeps each example's channels apart."""
    b, n, c, h, w = shape_of(x)
    x = get_op("permute")(x, dims=(1, 0, 2, 3, 4))
    return get_op("reshape")(x, shape=(n, b * c, h, w))


def _groups_into_batch(y, size: int):
    """(N, B*C, H, W) -> (B, N, C, H, W), the inverse of ``_channels_into_groups``."""
    n, bc, h, w = shape_of(y)
    y = get_op("reshape")(y, shape=(n, size, bc // size, h, w))
    return get_op("permute")(y, dims=(1, 0, 2, 3, 4))


def _conv_rule(op, args, batched, attrs, size):
    """conv2d: with only the images batched, the batch joins N; with batched weights each
    example's channels become groups of one convolution (``groups * B``)."""
    x, w = args[0], args[1]
    bx, bw = batched[0], batched[1]
    bias = args[2:]
    if lrank(x, bx) != 4 or lrank(w, bw) != 4:
        return NotImplemented
    if not bw and not any(batched[2:]):
        n = shape_of(x)[1]
        out = op(flatten_batch(x, 1), w, *bias, **attrs)
        return get_op("reshape")(out, shape=(size, n) + shape_of(out)[1:])
    xs = _channels_into_groups(ensure_batched(x, bx, size), size)
    w = ensure_batched(w, bw, size)
    ws = get_op("reshape")(w, shape=(size * shape_of(w)[1],) + shape_of(w)[2:])
    if bias:
        b = ensure_batched(bias[0], batched[2], size)
        bias = (get_op("reshape")(b, shape=(-1,)),)
    out = op(xs, ws, *bias, **dict(attrs, groups=attrs["groups"] * size))
    return _groups_into_batch(out, size)


conv2d_op = register(OpDef("conv2d", _conv2d_infer, _conv2d_kernel, _conv2d_vjp,
                           doc="2-D cross-correlation over NCHW images (torch conv2d)",
                           autocast="lower",
                           epilogue_host=True,
                           attrs=Attrs(stride=Attr("dims", min=1), padding=Attr("dims", min=0),
                                       dilation=Attr("dims", min=1), groups=Attr(int, min=1)),
                                       batch=_conv_rule))


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


def _conv_input_grad_rule(op, args, batched, attrs, size):
    """The input gradient of conv2d per example (``shape`` is one example's input shape)."""
    g, w = args
    bg, bw = batched
    if lrank(g, bg) != 4 or lrank(w, bw) != 4:
        return NotImplemented
    n, c, h, wd = attrs["shape"]
    if not bw:
        out = op(flatten_batch(g, 1), w, **dict(attrs, shape=(size * n, c, h, wd)))
        return get_op("reshape")(out, shape=(size, n, c, h, wd))
    gs = _channels_into_groups(ensure_batched(g, bg, size), size)
    ws = get_op("reshape")(w, shape=(size * shape_of(w)[1],) + shape_of(w)[2:])
    out = op(gs, ws, **dict(attrs, shape=(n, size * c, h, wd), groups=attrs["groups"] * size))
    return _groups_into_batch(out, size)


conv2d_input_grad_op = register(OpDef(
    "conv2d_input_grad", _grad_infer("conv2d_input_grad"), _conv2d_input_grad_kernel,
    _conv2d_input_grad_vjp, doc="gradient of conv2d for its input (a transposed conv)",
    attrs=Attrs(shape=Attr("shape"), stride=Attr("dims", min=1),
                padding=Attr("dims", min=0), dilation=Attr("dims", min=1),
                groups=Attr(int, min=1)), batch=_conv_input_grad_rule))


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


def _conv_weight_grad_rule(op, args, batched, attrs, size):
    """Per-example weight gradients of conv2d: each example's channels are groups of one
    weight-gradient convolution."""
    x, g = args
    if lrank(x, batched[0]) != 4 or lrank(g, batched[1]) != 4:
        return NotImplemented
    xs = _channels_into_groups(ensure_batched(x, batched[0], size), size)
    gs = _channels_into_groups(ensure_batched(g, batched[1], size), size)
    co, ci, kh, kw = attrs["shape"]
    out = op(xs, gs, **dict(attrs, shape=(size * co, ci, kh, kw),
                            groups=attrs["groups"] * size))
    return get_op("reshape")(out, shape=(size, co, ci, kh, kw))


conv2d_weight_grad_op = register(OpDef(
    "conv2d_weight_grad", _grad_infer("conv2d_weight_grad"), _conv2d_weight_grad_kernel,
    _conv2d_weight_grad_vjp, doc="gradient of conv2d for its weight",
    attrs=Attrs(shape=Attr("shape"), stride=Attr("dims", min=1),
                padding=Attr("dims", min=0), dilation=Attr("dims", min=1),
                groups=Attr(int, min=1)), batch=_conv_weight_grad_rule))


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


def _groups(groups, name: str) -> int:
    if not hasattr(groups, "__index__") or isinstance(groups, bool) or int(groups) < 1:
        raise ShapeError(located(f"{name}: expected groups to be a positive int, found "
                                 f"{groups!r}"))
    return int(groups)


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
@autocast_function(LOWER)
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
@autocast_function(LOWER)
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
@autocast_function(LOWER)
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """1-D transposed convolution (as torch.nn.functional.conv_transpose1d; the gradient of
    conv1d for its input) of an (N, C_in, L) ``input`` with ``weight``
    [C_in, C_out/groups, kL]: L_out = (L-1)*stride - 2*padding + dilation*(kL-1) +
    output_padding + 1."""
    return _conv_transpose_nd("conv_transpose1d", 1, input, weight, bias, stride, padding,
                              output_padding, groups, dilation)


@composite("conv_transpose2d")
@autocast_function(LOWER)
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """2-D transposed convolution (as torch.nn.functional.conv_transpose2d; the gradient of
    conv2d for its input) of an (N, C_in, H, W) ``input`` with ``weight``
    [C_in, C_out/groups, kH, kW]: H_out = (H-1)*stride - 2*padding + dilation*(kH-1) +
    output_padding + 1 (likewise W_out)."""
    return _conv_transpose_nd("conv_transpose2d", 2, input, weight, bias, stride, padding,
                              output_padding, groups, dilation)


@composite("conv_transpose3d")
@autocast_function(LOWER)
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


# The pools, registered after the convolutions (the op order is as before the split), keep
# their old address here too: the CPU backend, ONNX and nn reach them as ``ops.conv.<name>``.
from .pool import (_adaptive_windows, _lowest, _max_pool2d_backward_kernel,  # noqa: E402,F401
                   _max_pool2d_gather_kernel, _max_pool2d_kernel, _pool_layout,
                   adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool2d_backward_op,
                   adaptive_avg_pool2d_op, adaptive_max_pool1d, adaptive_max_pool2d,
                   adaptive_max_pool2d_indices_op, avg_pool1d, avg_pool2d, avg_pool2d_backward_op,
                   avg_pool2d_op, avg_pool3d, max_pool1d, max_pool2d, max_pool2d_backward_op,
                   max_pool2d_gather_op, max_pool2d_indices_op, max_pool2d_op,
                   max_pool2d_with_indices, max_pool3d, max_unpool2d, max_unpool2d_op)
