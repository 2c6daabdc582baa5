"""ONNX converters for round, nan_to_num, lerp, xlogy, flip and einsum (exact ONNX forms);
the bit shifts and the dtype view are refused by name (no exact ONNX form)."""
from __future__ import annotations

import numpy as np

from ..graphlib import dtypes
from ._export import _compute_dtype, _in, _out, _refuse, converter

_FLOATS = ("float32", "float64")
INT64_MIN = int(np.iinfo(np.int64).min)


@converter("round")
def _round(ex, node, ins):
    """ONNX Round rounds halves to even, as PyTorch; decimals scale around it as PyTorch
    (x * 10**d, or x / 10**-d, in the tensor's float type)."""
    out, d = _out(node), node.attrs.get("decimals", 0)
    if not dtypes.is_float(out):
        return [ex.op("Identity", ins[0])]
    work = _compute_dtype(out, _FLOATS)
    x = ex.cast(ins[0], _in(node), work)
    if d == 0:
        y = ex.op("Round", x)
    elif d > 0:
        scale = ex.const(10.0 ** d, work)
        y = ex.op("Div", ex.op("Round", ex.op("Mul", x, scale)), scale)
    else:
        scale = ex.const(10.0 ** -d, work)
        y = ex.op("Mul", ex.op("Round", ex.op("Div", x, scale)), scale)
    return [ex.cast(y, work, out)]


@converter("nan_to_num")
def _nan_to_num(ex, node, ins):
    out, a = _out(node), node.attrs
    if not dtypes.is_float(out):
        return [ex.op("Identity", ins[0])]
    work = _compute_dtype(out, _FLOATS)
    x = ex.cast(ins[0], _in(node), work)
    y = ex.op("Where", ex.op("IsNaN", x), ex.const(a.get("nan", 0.0), work), x)
    y = ex.op("Where", ex.op("IsInf", x, detect_negative=0), ex.const(a["posinf"], work), y)
    y = ex.op("Where", ex.op("IsInf", x, detect_positive=0), ex.const(a["neginf"], work), y)
    return [ex.cast(y, work, out)]


@converter("lerp")
def _lerp(ex, node, ins):
    """PyTorch's two-sided formula: start + w * (end - start) where |w| < 0.5, else
    end - (end - start) * (1 - w)."""
    out = _out(node)
    work = _compute_dtype(out, _FLOATS)
    a, b, w = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    diff = ex.op("Sub", b, a)
    small = ex.op("Less", ex.op("Abs", w), ex.const(0.5, work))
    lo = ex.op("Add", a, ex.op("Mul", w, diff))
    hi = ex.op("Sub", b, ex.op("Mul", diff, ex.op("Sub", ex.const(1.0, work), w)))
    return [ex.cast(ex.op("Where", small, lo, hi), work, out)]


@converter("xlogy")
def _xlogy(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, _FLOATS)
    x, y = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    zero = ex.const(0.0, work)
    prod = ex.op("Mul", x, ex.op("Log", y))
    r = ex.op("Where", ex.op("Equal", x, zero), zero, prod)
    return [ex.cast(ex.op("Where", ex.op("IsNaN", y), y, r), work, out)]


@converter("flip")
def _flip(ex, node, ins):
    dims = node.attrs["dims"]
    if not dims:
        return [ex.op("Identity", ins[0])]
    n = len(dims)
    return [ex.op("Slice", ins[0], ex.ints([-1] * n), ex.ints([INT64_MIN] * n),
                  ex.ints(dims), ex.ints([-1] * n))]


@converter("einsum")
def _einsum(ex, node, ins):
    if ex.opset < 12:
        _refuse("einsum needs opset >= 12")
    out = _out(node)
    work = _compute_dtype(out, ("int32", "int64", "float32", "float64"))
    xs = [ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs)]
    y = ex.emit("Einsum", xs, 1, equation=node.attrs["equation"])[0]
    return [ex.cast(y, work, out)]


@converter("bitwise_left_shift", "bitwise_right_shift")
def _shift(ex, node, ins):
    _refuse(f"{node.op.name}: ONNX's BitShift takes unsigned integers only and leaves shifts "
            "past the bit width undefined, where PyTorch defines them")


@converter("view_dtype")
def _view_dtype(ex, node, ins):
    _refuse("view(dtype): ONNX has no bit reinterpretation of a tensor")
