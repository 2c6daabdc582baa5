"""ONNX export converters: reductions, scans, sorting and norms (sum/mean/max..., var/std, argmax,
cumsum, cumprod, sort, median, vector_norm, logsumexp, numel).

Each converter emits the ONNX nodes computing exactly what the op's reference kernel computes
(see ``_export``)."""
from __future__ import annotations

import math

import numpy as np

from ..graphlib import dtypes
from ..graphlib.ir import Value
from ..graphlib.registry import get_op
from ._export import CONVERTERS, _compute_dtype, _out, _refuse, converter, onnx_dtype, refused


# -- reductions --------------------------------------------------------------------------------
def _reduction(op_type: str, accumulate: bool):
    def conv(ex, node, ins):
        x = node.inputs[0]
        out = _out(node)
        dims, keep = node.attrs["dim"], node.attrs["keepdim"]
        work = _compute_dtype(out)
        name = ex.cast(ins[0], x.dtype, work if accumulate else _compute_dtype(x.dtype))
        if x.ndim == 0 or not dims:
            return [ex.cast(ex.op("Identity", name), work, out)]
        y = ex.reduce(op_type, name, dims, keep)
        return [ex.cast(y, work if accumulate else _compute_dtype(x.dtype), out)]
    return conv


CONVERTERS[get_op("sum")] = _reduction("ReduceSum", True)
CONVERTERS[get_op("prod")] = _reduction("ReduceProd", True)
CONVERTERS[get_op("mean")] = _reduction("ReduceMean", True)
CONVERTERS[get_op("amax")] = _reduction("ReduceMax", False)
CONVERTERS[get_op("amin")] = _reduction("ReduceMin", False)
# max and min: amax and amin with another gradient rule
CONVERTERS[get_op("max")] = _reduction("ReduceMax", False)
CONVERTERS[get_op("min")] = _reduction("ReduceMin", False)


def _count(ex, v: Value, dims, dtype: str) -> str:
    """The number of elements of ``v`` over ``dims`` as a 0-d ``dtype`` tensor."""
    sizes = [v.shape[d] for d in dims]
    if all(isinstance(s, int) for s in sizes):
        return ex.const(np.asarray(int(np.prod(sizes, dtype=np.int64)), dtype=dtype))
    shape = ex.op("Shape", ex.name_of(v)) if v in ex.names else None
    parts = [ex.op("Gather", shape, ex.ints([d]), axis=0) for d in dims]
    prod = parts[0] if len(parts) == 1 else ex.reduce("ReduceProd", ex.op(
        "Concat", *parts, axis=0), [0], False)
    if len(parts) == 1:
        prod = ex.squeeze(prod, [0])
    return ex.op("Cast", prod, to=onnx_dtype(dtype))


@converter("var", "std")
def _var(ex, node, ins):
    x = node.inputs[0]
    out = _out(node)
    dims, keep, corr = node.attrs["dim"], node.attrs["keepdim"], node.attrs["correction"]
    work = _compute_dtype(out, ("float32", "float64"))
    name = ex.cast(ins[0], x.dtype, work)
    if x.ndim == 0 or not dims:
        dims = ()
        centered = ex.op("Sub", name, name)
        sq = ex.op("Mul", centered, centered)
        total = sq
    else:
        mean = ex.reduce("ReduceMean", name, dims, True)
        centered = ex.op("Sub", name, mean)
        total = ex.reduce("ReduceSum", ex.op("Mul", centered, centered), dims, keep)
    n = _count(ex, x, dims, work)
    y = ex.op("Div", total, ex.op("Sub", n, ex.const(corr, work)))
    if node.op is get_op("std"):
        y = ex.op("Sqrt", y)
    return [ex.cast(y, work, out)]


@converter("argmax", "argmin")
def _arg(ex, node, ins):
    x = node.inputs[0]
    dim, keep = node.attrs["dim"], node.attrs["keepdim"]
    op_type = "ArgMax" if node.op is get_op("argmax") else "ArgMin"
    name = ex.cast(ins[0], x.dtype, _compute_dtype(x.dtype))
    if x.ndim == 0:
        return [ex.const(np.zeros((), np.int64))]
    if dim is None:
        flat = ex.reshape(name, (-1,)) if x.ndim != 1 else name
        y = ex.op(op_type, flat, axis=0, keepdims=0)
        if keep:
            y = ex.reshape(y, (1,) * x.ndim)
        return [y]
    return [ex.op(op_type, name, axis=dim, keepdims=int(keep))]


# -- scans, sorting and norms (cumprod needs opset 26's CumProd)
refused("ONNX has no exact form of it", "cummax", "cummin", "logcumsumexp", "mode", "svd")
@converter("cumsum")
def _cumsum(ex, node, ins):
    x, out = node.inputs[0], _out(node)
    work = _compute_dtype(out)          # integers sum in int64, float16 in float32
    y = ex.op("CumSum", ex.cast(ins[0], x.dtype, work),
              ex.const(np.asarray(node.attrs["dim"], np.int64)),
              reverse=int(node.attrs.get("reverse", False)))
    return [ex.cast(y, work, out)]


@converter("cumprod")
def _cumprod(ex, node, ins):
    if ex.opset < 26:
        _refuse("cumprod needs opset >= 26 (CumProd)")
    x, out = node.inputs[0], _out(node)
    work = _compute_dtype(out)          # integers multiply in int64, float16 in float32
    y = ex.op("CumProd", ex.cast(ins[0], x.dtype, work),
              ex.const(np.asarray(node.attrs["dim"], np.int64)))
    return [ex.cast(y, work, out)]


def _topk_all(ex, name, n, axis: int, largest: bool):
    """(values, indices) of a full sort along ``axis`` by TopK (equal elements keep their
    order, ascending and descending, as duograph's stable sort)."""
    return ex.emit("TopK", (name, ex.dim(n)), 2, axis=axis, largest=int(largest), sorted=1)


@converter("sort")
def _sort(ex, node, ins):
    x = node.inputs[0]
    work = _compute_dtype(x.dtype)
    if work not in ("int32", "int64", "float32", "float64"):
        _refuse(f"sort of {x.dtype} has no exact ONNX form")
    dim = node.attrs["dim"]
    values, indices = _topk_all(ex, ex.cast(ins[0], x.dtype, work), x.shape[dim], dim,
                                node.attrs.get("descending", False))
    return [ex.cast(values, work, x.dtype), indices]


@converter("median_all")
def _median_all(ex, node, ins):
    x = node.inputs[0]
    n = 1
    for d in x.shape:
        if not isinstance(d, int):
            _refuse("median of a tensor with symbolic dims")
        n *= d
    work = _compute_dtype(x.dtype)
    if work not in ("int32", "int64", "float32", "float64"):
        _refuse(f"median of {x.dtype} has no exact ONNX form")
    flat = ex.reshape(ex.cast(ins[0], x.dtype, work), (n,))
    values, _ = _topk_all(ex, flat, n, 0, False)
    y = ex.op("Gather", values, ex.const(np.asarray((n - 1) // 2, np.int64)), axis=0)
    if dtypes.is_float(work):           # NaN anywhere: the median is NaN
        nan = ex.reduce("ReduceMax", ex.op("Cast", ex.op("IsNaN", flat),
                                           to=onnx_dtype("int32")), [0], False)
        y = ex.op("Where", ex.op("Cast", nan, to=onnx_dtype("bool")),
                  ex.const(np.asarray(np.nan, work)), y)
    return [ex.cast(y, work, x.dtype)]


@converter("vector_norm")
def _vector_norm(ex, node, ins):
    x, out = node.inputs[0], _out(node)
    p, dims, keep = node.attrs["ord"], node.attrs["dim"], node.attrs["keepdim"]
    work = _compute_dtype(out, ("float32", "float64"))
    a = ex.op("Abs", ex.cast(ins[0], x.dtype, work))

    def red(op_type, name):
        return ex.reduce(op_type, name, dims, keep) if dims and x.ndim else name
    if math.isinf(p):
        y = red("ReduceMax" if p > 0 else "ReduceMin", a)
    elif p == 0:
        nz = ex.op("Not", ex.op("Equal", a, ex.const(np.asarray(0, work))))
        y = red("ReduceSum", ex.op("Cast", nz, to=onnx_dtype(work)))
    elif p == 1:
        y = red("ReduceSum", a)
    elif p == 2:
        y = ex.op("Sqrt", red("ReduceSum", ex.op("Mul", a, a)))
    else:
        y = ex.op("Pow", red("ReduceSum", ex.op("Pow", a, ex.const(np.asarray(p, work)))),
                  ex.const(np.asarray(1.0 / p, work)))
    return [ex.cast(y, work, out)]


def _finite_shift(ex, m: str, dtype: str) -> str:
    """``m`` with 0 where it is not finite (inf or NaN)."""
    bad = ex.op("Or", ex.op("IsInf", m), ex.op("IsNaN", m))
    return ex.op("Where", bad, ex.const(0, dtype), m)


@converter("logsumexp")
def _logsumexp(ex, node, ins):
    x = node.inputs[0]
    out = _out(node)
    dims, keep = node.attrs["dim"], node.attrs["keepdim"]
    work = _compute_dtype(out, ("float32", "float64"))
    name = ex.cast(ins[0], x.dtype, work)
    if x.ndim == 0 or not dims:
        return [ex.cast(ex.op("Identity", name), work, out)]
    m = _finite_shift(ex, ex.reduce("ReduceMax", name, dims, True), work)
    s = ex.reduce("ReduceSum", ex.op("Exp", ex.op("Sub", name, m)), dims, True)
    y = ex.op("Add", ex.op("Log", s), m)
    if not keep:
        y = ex.squeeze(y, list(dims))
    return [ex.cast(y, work, out)]


@converter("numel")
def _numel(ex, node, ins):
    return [_count(ex, node.inputs[0], node.attrs["dim"], _out(node))]
