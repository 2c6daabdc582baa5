"""ONNX export converters: convolution and pooling (conv2d and its gradients, max/avg pools,
unfold, adaptive average pooling).

Each converter emits the ONNX nodes computing exactly what the op's reference kernel computes
(see ``_export``)."""
from __future__ import annotations

import numpy as np

from ._export import _compute_dtype, _in, _refuse, converter


# -- convolution and pooling -------------------------------------------------------------------
@converter("conv2d")
def _conv2d(ex, node, ins):
    a = node.attrs
    pt, pb, pl, pr = a["padding"]
    return [ex.op("Conv", *ins, strides=list(a["stride"]), pads=[pt, pl, pb, pr],
                  dilations=list(a["dilation"]), group=a["groups"])]


@converter("conv2d_input_grad")
def _conv2d_input_grad(ex, node, ins):
    a = node.attrs
    g, w = node.inputs
    pt, pb, pl, pr = a["padding"]
    shape = a["shape"]
    extra = []
    for axis in range(2):
        size, out = shape[2 + axis], g.shape[2 + axis]
        stride, dil = a["stride"][axis], a["dilation"][axis]
        span = dil * (w.shape[2 + axis] - 1) + 1
        lo, hi = (pt, pb) if axis == 0 else (pl, pr)
        if not isinstance(size, int) or not isinstance(out, int):
            if stride != 1:
                _refuse("a strided transposed convolution needs static spatial sizes")
            extra.append(0)
            continue
        extra.append(size - (stride * (out - 1) + span - lo - hi))
    if any(e < 0 or e >= max(a["stride"][i], a["dilation"][i]) for i, e in enumerate(extra)):
        _refuse(f"output padding {extra} out of ONNX's range")
    attrs = dict(strides=list(a["stride"]), pads=[pt, pl, pb, pr],
                 dilations=list(a["dilation"]), output_padding=extra if any(extra) else None)
    groups = a["groups"]
    if groups == 1:
        return [ex.op("ConvTranspose", *ins, **attrs)]
    # one ConvTranspose per group, concatenated: the same sums, and every runtime (onnx's
    # reference evaluator has no grouped ConvTranspose) runs it
    per = w.shape[0] // groups
    parts = []
    for i in range(groups):
        lo, hi = ex.ints([i * per]), ex.ints([(i + 1) * per])
        gi = ex.op("Slice", ins[0], lo, hi, ex.ints([1]))
        wi = ex.op("Slice", ins[1], lo, hi, ex.ints([0]))
        parts.append(ex.op("ConvTranspose", gi, wi, **attrs))
    return [ex.op("Concat", *parts, axis=1)]


@converter("conv2d_weight_grad")
def _conv2d_weight_grad(ex, node, ins):
    a = node.attrs
    if a["groups"] != 1:
        _refuse("the weight gradient of a grouped convolution")
    pt, pb, pl, pr = a["padding"]
    kh, kw = a["shape"][2:]
    # dw[o, c] = sum over n of x[n, c] (*) g[n, o]: a convolution of x (C, N, H, W) with g
    # (O, N, Ho, Wo) as the kernel, strides and dilations swapped
    xt = ex.op("Transpose", ins[0], perm=[1, 0, 2, 3])
    gt = ex.op("Transpose", ins[1], perm=[1, 0, 2, 3])
    y = ex.op("Conv", xt, gt, strides=list(a["dilation"]), dilations=list(a["stride"]),
              pads=[pt, pl, pb, pr])
    y = ex.op("Slice", y, ex.ints([0, 0]), ex.ints([kh, kw]), ex.ints([2, 3]))
    return [ex.op("Transpose", y, perm=[1, 0, 2, 3])]


@converter("max_pool2d")
def _max_pool2d(ex, node, ins):
    a = node.attrs
    ph, pw = a["padding"]
    dt = _in(node)
    work = dt if dt in ("float32", "float64", "uint8") else "float64"
    if dt == "int64":
        _refuse("max pooling of int64 (no exact ONNX kernel)")
    y = ex.op("MaxPool", ex.cast(ins[0], dt, work), kernel_shape=list(a["kernel_size"]),
              strides=list(a["stride"]), pads=[ph, pw, ph, pw],
              dilations=list(a["dilation"]), ceil_mode=int(a["ceil_mode"]))
    return [ex.cast(y, work, dt)]


@converter("max_pool2d_indices")
def _max_pool2d_indices(ex, node, ins):
    """MaxPool's second output (indices into the flattened N*C*H*W input, padding not
    counted) modulo H*W: PyTorch's per-plane H*W index."""
    a = node.attrs
    x = node.inputs[0]
    ph, pw = a["padding"]
    h, w = x.shape[2:]
    if not isinstance(h, int) or not isinstance(w, int):
        _refuse("pooling indices over symbolic spatial sizes")
    if x.dtype not in ("float32", "float64"):
        _refuse(f"MaxPool indices of {x.dtype}")
    _, idx = ex.emit("MaxPool", [ins[0]], 2, kernel_shape=list(a["kernel_size"]),
                     strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                     dilations=list(a["dilation"]), ceil_mode=int(a["ceil_mode"]))
    return [ex.op("Mod", idx, ex.const(np.asarray(h * w, dtype=np.int64)))]


@converter("unfold")
def _unfold(ex, node, ins):
    """A Gather of constant positions from the zero-padded, flattened planes."""
    from ..graphlib.ops.resample import _fold_geometry
    a = node.attrs
    x = node.inputs[0]
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = (a["kernel_size"], a["padding"], a["stride"],
                                              a["dilation"])
    ho, wo = _fold_geometry("unfold", (h, w), a["kernel_size"], a["dilation"], a["padding"],
                            a["stride"])
    hp, wp = h + 2 * ph, w + 2 * pw
    rows = (np.arange(kh)[:, None, None, None] * dh + np.arange(ho)[None, None, :, None] * sh)
    cols = (np.arange(kw)[None, :, None, None] * dw + np.arange(wo)[None, None, None, :] * sw)
    index = (rows * wp + cols).reshape(kh * kw, ho * wo).astype(np.int64)
    dt = x.dtype
    work = _compute_dtype(dt, ("int32", "int64", "float32", "float64", "bool", "uint8"))
    xw = ex.cast(ins[0], dt, work)
    if ph or pw:
        zero = ex.cast(ex.const(np.zeros((), dtype=dt)), dt, work)
        xw = ex.op("Pad", xw, ex.ints([0, 0, ph, pw, 0, 0, ph, pw]), zero, mode="constant")
    flat = ex.reshape(xw, (n, c, hp * wp))
    picked = ex.op("Gather", flat, ex.const(index), axis=2)
    return [ex.cast(ex.reshape(picked, (n, c * kh * kw, ho * wo)), work, dt)]


@converter("avg_pool2d")
def _avg_pool2d(ex, node, ins):
    a = node.attrs
    ph, pw = a["padding"]
    if a["ceil_mode"]:
        _refuse("avg_pool2d with ceil_mode=True (ONNX counts the windows' overhang "
                "differently)")
    if tuple(a.get("dilation", (1, 1))) != (1, 1):
        _refuse("avg_pool2d with dilation")
    return [ex.op("AveragePool", ins[0], kernel_shape=list(a["kernel_size"]),
                  strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                  count_include_pad=int(a["count_include_pad"]))]


def _adaptive_sizes(node, shape):
    h, w = shape[2:]
    if not isinstance(h, int) or not isinstance(w, int):
        _refuse("adaptive pooling over symbolic spatial sizes")
    return (h, w), tuple(node.attrs["output_size"])


@converter("adaptive_avg_pool2d")
def _adaptive(ex, node, ins):
    """Window by window, as the kernel: an AveragePool along a dim whose windows are even, else
    a ReduceMean per window (rows, then columns). Never a product with an averaging matrix,
    whose zeros would spread one NaN/inf to every output (0 * NaN)."""
    from ..graphlib.ops.conv import _adaptive_windows
    sizes, outs = _adaptive_sizes(node, node.inputs[0].shape)
    if all(s % o == 0 for s, o in zip(sizes, outs)):
        k = [s // o for s, o in zip(sizes, outs)]
        return [ex.op("AveragePool", ins[0], kernel_shape=k, strides=k)]
    y = ins[0]
    for axis, size, out in ((2, sizes[0], outs[0]), (3, sizes[1], outs[1])):
        if size % out == 0:
            k = [size // out if d == axis else 1 for d in (2, 3)]
            y = ex.op("AveragePool", y, kernel_shape=k, strides=k)
            continue
        parts = [ex.reduce("ReduceMean", ex.op("Slice", y, ex.ints([lo]), ex.ints([hi]),
                                               ex.ints([axis])), [axis], True)
                 for lo, hi in _adaptive_windows(size, out)]
        y = ex.op("Concat", *parts, axis=axis)
    return [y]


@converter("adaptive_avg_pool2d_backward")
def _adaptive_backward(ex, node, ins):
    """Each window's cotangent spread evenly over it (columns, then rows), as the kernel: every
    window's share is padded with zeros to the full size and the shares are summed, so a NaN/inf
    cotangent stays in its own window."""
    from ..graphlib.ops.conv import _adaptive_windows
    g = node.inputs[0]
    sizes, outs = _adaptive_sizes(node, node.attrs["shape"])
    y = ins[0]
    for axis, size, out in ((3, sizes[1], outs[1]), (2, sizes[0], outs[0])):
        shares = []
        for j, (lo, hi) in enumerate(_adaptive_windows(size, out)):
            part = ex.op("Slice", y, ex.ints([j]), ex.ints([j + 1]), ex.ints([axis]))
            part = ex.op("Div", part, ex.const(np.asarray(hi - lo, dtype=g.dtype)))
            reps = [hi - lo if d == axis else 1 for d in range(4)]
            part = ex.op("Tile", part, ex.ints(reps))
            pads = [0] * 8
            pads[axis], pads[4 + axis] = lo, size - hi
            if lo or size - hi:
                part = ex.op("Pad", part, ex.ints(pads), mode="constant")
            shares.append(part)
        y = ex.op("Sum", *shares) if len(shares) > 1 else shares[0]
    return [y]
