"""ONNX export converters: shapes and creation (reshape, permute, expand, sum_to, cat, split, pad,
flip, constants, arange/eye/linspace, full, random ops refused).

Each converter emits the ONNX nodes computing exactly what the op's reference kernel computes
(see ``_export``)."""
from __future__ import annotations

import numpy as np

from ..graphlib.ir import ConstArray
from ._export import INT64_MIN, _compute_dtype, _in, _onnx, _out, _refuse, converter


# -- shapes ------------------------------------------------------------------------------------
@converter("reshape")
def _reshape(ex, node, ins):
    return [ex.reshape(ins[0], node.outputs[0].shape)]


@converter("permute")
def _permute(ex, node, ins):
    return [ex.op("Transpose", ins[0], perm=list(node.attrs["dims"]))]


@converter("expand")
def _expand(ex, node, ins):
    src, dst = node.inputs[0].shape, node.outputs[0].shape
    lead = len(dst) - len(src)
    target = [1 if i >= lead and src[i - lead] == d else d for i, d in enumerate(dst)]
    return [ex.op("Expand", ins[0], ex.shape_tensor(target))]


@converter("sum_to")
def _sum_to(ex, node, ins):
    src, dst = node.inputs[0].shape, node.outputs[0].shape
    lead = len(src) - len(dst)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(dst)
                                if d == 1 and src[lead + i] != 1]
    if not axes:
        return [ex.op("Identity", ins[0])]
    dt = _in(node)
    work = _compute_dtype(dt)
    y = ex.reduce("ReduceSum", ex.cast(ins[0], dt, work), axes, True)
    if lead:
        y = ex.squeeze(y, list(range(lead)))
    return [ex.cast(y, work, dt)]


@converter("cat")
def _cat(ex, node, ins):
    out = _out(node)
    parts = [ex.cast(n, t.dtype, out) for n, t in zip(ins, node.inputs)]
    return [ex.op("Concat", *parts, axis=node.attrs["dim"])]


@converter("split")
def _split(ex, node, ins):
    sizes = node.attrs["sizes"]
    if ex.opset < 13:
        _refuse("split needs opset >= 13")
    split = ex.shape_tensor(sizes)
    return ex.emit("Split", [ins[0], split], len(sizes), axis=node.attrs["dim"])


@converter("pad")
def _pad(ex, node, ins):
    x = node.inputs[0]
    pad = node.attrs["pad"]
    begin, end = [0] * x.ndim, [0] * x.ndim
    for k in range(len(pad) // 2):
        begin[x.ndim - 1 - k] = pad[2 * k]
        end[x.ndim - 1 - k] = pad[2 * k + 1]
    value = ex.const(np.asarray(node.attrs["value"]).astype(x.dtype))
    dt = x.dtype
    work = _compute_dtype(dt, ("int32", "int64", "float32", "float64", "bool", "uint8"))
    y = ex.op("Pad", ex.cast(ins[0], dt, work), ex.ints(begin + end),
              ex.cast(value, dt, work), mode="constant")
    return [ex.cast(y, work, dt)]


# -- creation ----------------------------------------------------------------------------------
def _reference(node) -> np.ndarray:
    """The node's value, computed by its own reference kernel (no inputs, static shape)."""
    if any(not isinstance(d, int) for d in node.outputs[0].shape):
        _refuse("a created tensor of symbolic shape")
    return np.asarray(node.op.kernel(np, **node.attrs))


@converter("constant", "arange", "eye", "linspace")
def _created(ex, node, ins):
    value = node.attrs.get("value")
    if isinstance(value, ConstArray):
        arr = value.array.astype(node.attrs["dtype"])
    else:
        arr = _reference(node).astype(_out(node))
    return [ex.const(arr, hint="const")]


@converter("full")
def _full(ex, node, ins):
    shape, dt = node.outputs[0].shape, _out(node)
    if all(isinstance(d, int) for d in shape):
        return [ex.const(np.full(shape, node.attrs["fill_value"], dtype=dt))]
    value = _onnx().numpy_helper.from_array(np.asarray([node.attrs["fill_value"]], dtype=dt))
    return [ex.op("ConstantOfShape", ex.shape_tensor(shape), value=value)]


@converter("full_like")
def _full_like(ex, node, ins):
    dt = _out(node)
    value = _onnx().numpy_helper.from_array(np.asarray([node.attrs["fill_value"]], dtype=dt))
    return [ex.op("ConstantOfShape", ex.op("Shape", ins[0]), value=value)]


@converter("uniform", "normal", "bernoulli", "randint")
def _random(ex, node, ins):
    _refuse("random ops have no exact ONNX form (ONNX's random ops do not reproduce "
            "duograph's seeded streams); export the model in eval mode or without them")


@converter("flip")
def _flip(ex, node, ins):
    dims = node.attrs["dims"]
    if not dims:
        return [ex.op("Identity", ins[0])]
    n = len(dims)
    return [ex.op("Slice", ins[0], ex.ints([-1] * n), ex.ints([INT64_MIN] * n),
                  ex.ints(dims), ex.ints([-1] * n))]
