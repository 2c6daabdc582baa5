"""ONNX import handlers: shapes and creation (Constant, Shape, Size, ConstantOfShape, Range,
EyeLike, Reshape,
Flatten, Transpose, Squeeze/Unsqueeze, Concat, Split, Slice, Expand, Tile, Pad, Trilu, OneHot,
DepthToSpace/SpaceToDepth, CenterCropPad, the window functions).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import math

import numpy as np

from ..graphlib import functional as F
from ..graphlib.types import dim_product
from ._import import check_size, handler, np_dtype_of, refuse, static_shape, tensor_array
from ._import_helpers import FLOATS, _axes_arg, _axis, _counting, _take, cast
from ._shape_values import ShapeValue, dim_offset, range_length, settle


# -- constants and shapes ------------------------------------------------------------------------
@handler("Constant")
def _constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = ctx.attr(key)
        if v is None:
            continue
        if key == "value":
            arr = tensor_array(v, f"the value of Constant {ctx.node.name or ctx.node.output[0]!r}")
        elif key.startswith("value_float"):
            arr = np.asarray(v, dtype=np.float32)
        else:
            arr = np.asarray(v, dtype=np.int64)
        return ctx.const(arr, arr.dtype.name)
    refuse("Constant without a value (sparse and string constants are not supported)")


def _known_shape(dims):
    """A shape's entries as a known array, or as a ShapeValue where some are symbolic."""
    return settle(ShapeValue(dims, 1))


@handler("Shape")
def _shape(ctx):
    shape = ctx.shape()
    n = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return _known_shape(shape[start:end])


@handler("Size")
def _size(ctx):
    return settle(ShapeValue([dim_product(ctx.shape())], 0))


def _sizes(ctx, i: int, what: str) -> tuple:
    """Input ``i`` as sizes (ints or symbolic dims, none negative) for an op's shape."""
    dims = ctx.dims(i, what)
    for d in dims:
        if isinstance(d, int) and d < 0:
            refuse(f"{what} {dims} has a negative size")
    return tuple(dims)


@handler("ConstantOfShape")
def _constant_of_shape(ctx):
    shape = _sizes(ctx, 0, "shape")
    v = ctx.attr("value")
    if v is None:
        arr = np.zeros(1, np.float32)
    else:
        arr = tensor_array(v, "the value of ConstantOfShape "
                              f"{ctx.node.name or ctx.node.output[0]!r}")
        if arr.size != 1:
            refuse(f"its value must hold one element, found shape {list(arr.shape)}")
    return F.full(shape, arr.reshape(-1)[0].item(), dtype=arr.dtype.name)


@handler("Range")
def _range(ctx):
    names = ("start", "limit", "delta")
    if any(isinstance(ctx._known[i], ShapeValue) for i in range(3)):
        return _symbolic_range(ctx, *(ctx.dims(i, n)[0] for i, n in enumerate(names)))
    start, limit, delta = (ctx.known(i, n) for i, n in enumerate(names))
    dt = start.dtype.name
    n = max(int(math.ceil((limit.item() - start.item()) / delta.item())), 0)
    check_size((n,), dt, "the output")
    # start + i * delta, in the dtype (ONNX's definition)
    vals = np.asarray(start.item(), dt) + np.arange(n).astype(dt) * np.asarray(delta.item(), dt)
    return ctx.const(vals.astype(dt), dt)


def _symbolic_range(ctx, start, limit, delta):
    """Range whose bounds are symbolic dims (``arange(x.size(1))``): its length is the
    symbolic dim ceil((limit - start) / delta), its values start + i * delta."""
    dt = ctx.dtype(0)
    if not isinstance(delta, int) or delta == 0:
        refuse(f"a Range with the step {delta} (a symbolic range needs a known, nonzero "
               "step)")
    n = range_length(start, limit, delta)
    counts = _counting(ctx, n)
    out = counts * ctx.const(delta, "int64") + cast(ctx.x(0), "int64")
    return cast(out, dt)


@handler("EyeLike")
def _eye_like(ctx):
    n, m = static_shape(ctx)
    dt = np_dtype_of(ctx.attr("dtype")) if ctx.attr("dtype") is not None else ctx.dtype(0)
    check_size((n, m), dt, "the output")
    return ctx.const(np.eye(n, m, k=ctx.attr("k", 0)).astype(dt), dt)


@handler("Reshape")
def _reshape(ctx):
    x = ctx.x(0)
    target = ctx.dims(1, "shape")
    allowzero = ctx.attr("allowzero", 0)
    shape = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= x.ndim:
                refuse("a 0 in the target shape past the input's dims")
            shape.append(x.shape[i])
        else:
            shape.append(d)
    return F.reshape(x, *shape) if shape else F.reshape(x, ())


@handler("Flatten")
def _flatten(ctx):
    x = ctx.x(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        refuse(f"axis {ctx.attr('axis', 1)} out of range for {x.ndim} dims")
    shape = tuple(x.shape)
    return F.reshape(x, dim_product(shape[:axis]), dim_product(shape[axis:]))


@handler("Transpose")
def _transpose(ctx):
    x = ctx.x(0)
    perm = ctx.attr("perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    if x.ndim == 0:
        return x
    return F.permute(x, *perm)


@handler("Squeeze")
def _squeeze(ctx):
    x = ctx.x(0)
    axes = _axes_arg(ctx, 1)
    shape = list(x.shape)
    if axes is None:
        new = [d for d in shape if d != 1]
    else:
        axes = {_axis(a, x.ndim) for a in axes}
        for a in axes:
            if shape[a] != 1:
                refuse(f"cannot squeeze axis {a} of size {shape[a]}")
        new = [d for i, d in enumerate(shape) if i not in axes]
    return F.reshape(x, *new) if new else F.reshape(x, ())


@handler("Unsqueeze")
def _unsqueeze(ctx):
    x = ctx.x(0)
    axes = _axes_arg(ctx, 1)
    n = x.ndim + len(axes)
    axes = sorted(a + n if a < 0 else a for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return F.reshape(x, *shape)


@handler("Concat")
def _concat(ctx):
    xs = [ctx.x(i) for i in range(len(ctx)) if ctx.has(i)]
    axis = _axis(ctx.attr("axis"), xs[0].ndim)
    if len({x.dtype for x in xs}) > 1:
        refuse("operands of different dtypes")
    xs = [x for x in xs if not (isinstance(x.shape[axis], int) and x.shape[axis] == 0)] or xs
    return F.cat(xs, axis) if len(xs) > 1 else xs[0]


@handler("Split")
def _split(ctx):
    x = ctx.x(0)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    if ctx.has(1):
        sizes = [int(s) for s in ctx.known(1, "split")]
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    else:
        n = len([o for o in ctx.node.output])
        n = ctx.attr("num_outputs", n)
        size = static_shape(ctx, 0, [axis])[axis]
        step = -(-size // n)
        sizes = [min(step, size - i * step) for i in range(n)]
    outs = F.split(x, sizes, axis)
    return list(outs)


def _slice_index(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, x.ndim)
        size = x.shape[a]
        if st == 0:
            refuse("slice step 0")
        if not isinstance(size, int):
            index[a] = _symbolic_slice(size, s, e, st)
            if index[a] is None:
                index[a] = slice(None)
                flips.append((a, None))
            continue
        if not (isinstance(s, int) and isinstance(e, int)):
            refuse(f"Slice bounds {s}:{e} that are symbolic along a dim of size {size}")
        rng = range(size)[slice(max(min(s, 2**62), -2**62), max(min(e, 2**62), -2**62), st)]
        if st > 0:
            index[a] = slice(rng.start, rng.stop if len(rng) else rng.start, st)
        else:
            flips.append((a, np.asarray(list(rng), np.int64)))
    return index, flips


def _symbolic_slice(size, start, end, step):
    """The Python slice equal to ONNX's start:end:step along a symbolic dim ``size`` (with
    a positive step, ONNX clamps the bounds as Python does); a bound that is ``size`` plus a
    known offset (``x.size(1) - 1``) is that offset counted from the end. None for the
    whole dim reversed (``x.flip(1)``), the only negative step taken."""
    if step < 0:
        last = (start == -1 or start >= 2**62) if isinstance(start, int) else \
            dim_offset(start, size) == -1
        if step == -1 and last and isinstance(end, int) and end <= -2**62:
            return None
        refuse(f"a negative step along the symbolic dim {size} (only a whole reversal)")

    def bound(b, is_end):
        if isinstance(b, int):
            if is_end and b >= 2**62:
                return None
            return max(min(b, 2**62), -2**62)
        offset = dim_offset(b, size)
        if offset is None or offset > 0 or (offset == 0 and not is_end):
            refuse(f"the Slice bound {b} along the symbolic dim {size} (only a number, or "
                   "the dim less a known amount, can be sliced when the graph is built)")
        return None if offset == 0 else offset
    return slice(bound(start, False), bound(end, True), step)


@handler("Slice")
def _slice(ctx):
    x = ctx.x(0)
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = ctx.dims(1, "starts")
        ends = ctx.dims(2, "ends")
        axes = ([int(v) for v in ctx.known(3, "axes")] if ctx.has(3)
                else list(range(len(starts))))
        steps = [int(v) for v in ctx.known(4, "steps")] if ctx.has(4) else [1] * len(starts)
    index, flips = _slice_index(x, starts, ends, axes, steps)
    y = F.getitem(x, tuple(index)) if any(s != slice(None) for s in index) else x
    for a, picks in flips:           # negative steps: pick the entries in that order
        y = F.flip(y, (a,)) if picks is None else F.index_select(y, a, ctx.const(picks,
                                                                                  "int64"))
    return y


@handler("Expand")
def _expand(ctx):
    x = ctx.x(0)
    target = list(_sizes(ctx, 1, "shape"))
    ndim = max(len(target), x.ndim)
    src = [1] * (ndim - x.ndim) + list(x.shape)
    tgt = [1] * (ndim - len(target)) + target
    out = []
    for a, b in zip(src, tgt):
        if a == b or b == 1:
            out.append(a)
        elif a == 1:
            out.append(b)
        elif isinstance(b, str) and isinstance(a, int):
            out.append(a)       # as broadcasting: the symbolic size must be 1 or a
        else:
            refuse(f"cannot broadcast {[str(d) for d in x.shape]} to "
                   f"{[str(d) for d in target]} when the graph is built")
    if ndim > x.ndim:
        x = F.reshape(x, *src)
    return F.expand(x, *out)


@handler("Tile")
def _tile(ctx):
    x = ctx.x(0)
    reps = [int(r) for r in ctx.known(1, "repeats")]
    shape = ctx.shape()
    inter = []
    big = []
    for d, r in zip(shape, reps):
        inter += [1, d]
        big += [r, d]
    y = F.expand(F.reshape(x, *inter), *big) if inter else x
    return F.reshape(y, *[dim_product([d, r]) for d, r in zip(shape, reps)]) if inter else y


@handler("Pad")
def _pad(ctx):
    x = ctx.x(0)
    mode = ctx.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "reflect", "edge", "wrap"):
        refuse(f"mode {mode!r}")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads"))
        value = ctx.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = [int(p) for p in ctx.known(1, "pads")]
        value = ctx.known(2, "constant_value").item() if ctx.has(2) else 0
        axes = _axes_arg(ctx, 3) or list(range(x.ndim))
    axes = [_axis(a, x.ndim) for a in axes]
    if any(p < 0 for p in pads):
        refuse("negative pads")
    full = [(0, 0)] * x.ndim
    k = len(axes)
    for i, a in enumerate(axes):
        full[a] = (pads[i], pads[i + k])
    if mode != "constant":            # numpy's index pattern, gathered along each axis
        shape = static_shape(ctx)
        for a, (lo, hi) in enumerate(full):
            if lo or hi:
                if mode == "reflect" and max(lo, hi) >= shape[a]:
                    refuse(f"reflect padding of {max(lo, hi)} on a dim of {shape[a]}")
                if shape[a] == 0:
                    refuse("padding an empty dim")
                idx = np.pad(np.arange(shape[a]), (lo, hi), mode=mode)
                x = F.index_select(x, a, ctx.const(idx, "int64"))
        return x
    flat = []
    for lo, hi in reversed(full):
        flat += [lo, hi]
    if x.dtype == "bool":
        value = bool(value)
    elif x.dtype not in FLOATS + ("bfloat16",):
        value = int(value)
    return cast(F.pad(x, flat, value=value), x.dtype)


@handler("Trilu")
def _trilu(ctx):
    x = ctx.x(0)
    k = int(ctx.known(1, "k").item()) if ctx.has(1) else 0
    n, m = ctx.shape()[-2:]
    upper = ctx.attr("upper", 1)
    if not (isinstance(n, int) and isinstance(m, int)):      # the mask built at run time
        rows = F.reshape(_counting(ctx, n), n, 1)
        cols = F.reshape(_counting(ctx, m), 1, m)
        diag = cols - rows                   # j - i
        keep = F.ge(diag, ctx.const(k, "int64")) if upper else \
            F.le(diag, ctx.const(k, "int64"))
        return F.where(keep, x, ctx.const(0, x.dtype))
    check_size((n, m), bool, "the mask")
    mask = np.triu(np.ones((n, m), bool), k) if upper else np.tril(np.ones((n, m), bool), k)
    return F.where(ctx.const(mask, "bool"), x, ctx.const(0, x.dtype))


@handler("OneHot")
def _one_hot(ctx):
    idx, depth, values = ctx.x(0), int(ctx.known(1, "depth").item()), ctx.x(2)
    axis = ctx.attr("axis", -1)
    idx = cast(idx, "int64")
    idx = F.where(F.lt(idx, ctx.const(0, "int64")), idx + ctx.const(depth, "int64"), idx)
    check_size((depth,), np.int64, "the depth range")
    hot = F.eq(F.unsqueeze(idx, -1), ctx.const(np.arange(depth), "int64"))
    off, on = F.getitem(values, 0), F.getitem(values, 1)
    y = F.where(hot, on, off)
    nd = y.ndim
    axis = axis + nd if axis < 0 else axis
    if axis != nd - 1:
        perm = list(range(nd - 1))
        perm.insert(axis, nd - 1)
        y = F.permute(y, *perm)
    return y


@handler("DepthToSpace")
def _depth_to_space(ctx):
    x = ctx.x(0)
    b = ctx.attr("blocksize")
    n, c, h, w = static_shape(ctx)
    mode = ctx.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        y = F.permute(F.reshape(x, n, b, b, c // (b * b), h, w), 0, 3, 4, 1, 5, 2)
    else:
        y = F.permute(F.reshape(x, n, c // (b * b), b, b, h, w), 0, 1, 4, 2, 5, 3)
    return F.reshape(y, n, c // (b * b), h * b, w * b)


@handler("SpaceToDepth")
def _space_to_depth(ctx):
    x = ctx.x(0)
    b = ctx.attr("blocksize")
    n, c, h, w = static_shape(ctx)
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        refuse(f"mode {mode!r}")
    y = F.reshape(x, n, c, h // b, b, w // b, b)
    y = F.permute(y, 0, 3, 5, 1, 2, 4) if mode == "DCR" else F.permute(y, 0, 1, 3, 5, 2, 4)
    return F.reshape(y, n, c * b * b, h // b, w // b)


@handler("CenterCropPad")
def _center_crop_pad(ctx):
    """Crop (a centred slice) or zero-pad each listed axis to the given size."""
    x = ctx.x(0)
    shape = static_shape(ctx)
    target = [int(t) for t in ctx.known(1, "shape")]
    axes = [_axis(a, x.ndim) for a in (ctx.attr("axes") or range(x.ndim))]
    if len(axes) != len(target):
        refuse(f"{len(target)} sizes for {len(axes)} axes")
    for a, t in zip(axes, target):
        size = shape[a]
        if t < size:
            start = (size - t) // 2
            x = _take(ctx, x, a, np.arange(start, start + t))
        elif t > size:
            lo = (t - size) // 2
            pad = [0, 0] * (x.ndim - 1 - a) + [lo, t - size - lo]
            x = F.pad(x, pad, value=False if x.dtype == "bool" else 0)
    return cast(x, ctx.dtype(0))


def _window(kind: str):
    """Hann, Hamming and Blackman windows of a known size, computed in float64 (the ONNX
    reference's formulas) and rounded once to the output type."""
    def run(ctx):
        size = int(ctx.known(0, "size").item())
        dt = np_dtype_of(ctx.attr("output_datatype", 1))
        check_size((size,), np.float64, "the window")
        n = np.arange(size, dtype=np.float64)
        period = size if ctx.attr("periodic", 1) else size - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            if kind == "hann":
                w = np.sin(n * np.pi / period) ** 2
            elif kind == "hamming":
                w = 25.0 / 46.0 - np.cos(n * np.pi * 2 / period) * (21.0 / 46.0)
            else:
                w = 0.42 - 0.5 * np.cos(n * np.pi * 2 / period) + \
                    0.08 * np.cos(n * np.pi * 4 / period)
        return ctx.const(w.astype(dt), dt)
    return run


handler("HannWindow")(_window("hann"))
handler("HammingWindow")(_window("hamming"))
handler("BlackmanWindow")(_window("blackman"))
