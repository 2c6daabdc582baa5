"""ONNX export converters: nn ops (matmul, einsum, softmax, one_hot, batch norm in training, the
softmax cross-entropy and their gradients).

Each converter emits the ONNX nodes computing exactly what the op's reference kernel computes
(see ``_export``)."""
from __future__ import annotations

import numpy as np

from ..graphlib.ir import Value
from ..graphlib.registry import get_op
from ._export import CONVERTERS, _compute_dtype, _in, _out, _refuse, converter, onnx_dtype


@converter("matmul")
def _matmul(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("MatMul", a, b), work, out)]


# -- nn ----------------------------------------------------------------------------------------
def _softmax(op_type: str):
    def conv(ex, node, ins):
        x = node.inputs[0]
        out = _out(node)
        work = _compute_dtype(out, ("float32", "float64"))
        name = ex.cast(ins[0], x.dtype, work)
        if x.ndim == 0:
            value = 1 if op_type == "Softmax" else 0
            return [ex.cast(ex.op("Add", ex.op("Mul", name, ex.const(0, work)),
                                  ex.const(value, work)), work, out)]
        y = ex.op(op_type, name, axis=node.attrs["dim"])
        return [ex.cast(y, work, out)]
    return conv


CONVERTERS[get_op("softmax")] = _softmax("Softmax")
CONVERTERS[get_op("log_softmax")] = _softmax("LogSoftmax")


@converter("one_hot")
def _one_hot(ex, node, ins):
    x = ex.cast(ins[0], _in(node), "int64")
    classes = ex.const(np.arange(node.attrs["num_classes"], dtype=np.int64))
    hit = ex.op("Equal", ex.unsqueeze(x, [node.inputs[0].ndim]), classes)
    return [ex.op("Cast", hit, to=onnx_dtype("int64"))]


def _channel_shape(x: Value) -> list:
    return [1, -1] + [1] * (x.ndim - 2)


@converter("batch_norm_train")
def _batch_norm_train(ex, node, ins):
    x = node.inputs[0]
    dt = x.dtype
    work = _compute_dtype(dt, ("float32", "float64"))
    xs, w, b = (ex.cast(n, dt, work) for n in ins)
    axes = [0] + list(range(2, x.ndim))
    mean = ex.reduce("ReduceMean", xs, axes, True)
    centered = ex.op("Sub", xs, mean)
    var = ex.reduce("ReduceMean", ex.op("Mul", centered, centered), axes, True)
    scale = ex.op("Div", ex.reshape(w, _channel_shape(x)),
                  ex.op("Sqrt", ex.op("Add", var, ex.const(node.attrs["eps"], work))))
    y = ex.op("Add", ex.op("Mul", centered, scale), ex.reshape(b, _channel_shape(x)))
    return [ex.cast(y, work, dt), ex.cast(ex.reshape(mean, (x.shape[1],)), work, dt),
            ex.cast(ex.reshape(var, (x.shape[1],)), work, dt)]


@converter("batch_norm_train_backward")
def _batch_norm_train_backward(ex, node, ins):
    dy_v, x, w_v, mean_v, var_v = node.inputs
    dt = x.dtype
    work = _compute_dtype(dt, ("float32", "float64"))
    dy, xs, w, mean, var = (ex.cast(n, dt, work) for n in ins)
    axes = [0] + list(range(2, x.ndim))
    cs = _channel_shape(x)
    invstd = ex.op("Reciprocal", ex.op("Sqrt", ex.op("Add", var, ex.const(
        node.attrs["eps"], work))))
    centered = ex.op("Sub", xs, ex.reshape(mean, cs))
    m_dy = ex.reduce("ReduceMean", dy, axes, False)
    m_dyxc = ex.reduce("ReduceMean", ex.op("Mul", dy, centered), axes, False)
    k1 = ex.reshape(ex.op("Mul", w, invstd), cs)
    inner = ex.op("Sub", ex.op("Sub", dy, ex.reshape(m_dy, cs)),
                  ex.op("Mul", centered, ex.reshape(ex.op("Mul", ex.op(
                      "Mul", invstd, invstd), m_dyxc), cs)))
    dx = ex.op("Mul", k1, inner)
    db = ex.reduce("ReduceSum", dy, axes, False)
    dw = ex.op("Mul", ex.reduce("ReduceSum", ex.op("Mul", dy, centered), axes, False), invstd)
    return [ex.cast(dx, work, dt), ex.cast(dw, work, dt), ex.cast(db, work, dt)]


@converter("softmax_cross_entropy")
def _sce(ex, node, ins):
    if ex.opset < 13:
        _refuse("SoftmaxCrossEntropyLoss with ignore_index needs opset >= 13")
    target = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("SoftmaxCrossEntropyLoss", ins[0], target,
                  ignore_index=node.attrs["ignore_index"], reduction=node.attrs["reduction"])]


@converter("softmax_cross_entropy_backward")
def _sce_backward(ex, node, ins):
    g_v, x, t_v = node.inputs
    dt = x.dtype
    ignore, reduction = node.attrs["ignore_index"], node.attrs["reduction"]
    g = ins[0]
    t = ex.cast(ins[2], t_v.dtype, "int64")
    valid = ex.op("Not", ex.op("Equal", t, ex.const(np.asarray(ignore, np.int64))))
    safe = ex.op("Where", valid, t, ex.const(np.asarray(0, np.int64)))
    classes = x.shape[1]
    if not isinstance(classes, int):
        _refuse("the number of classes must be static")
    onehot = ex.op("Cast", ex.op("Equal", ex.unsqueeze(safe, [1]),
                                 ex.const(np.arange(classes, dtype=np.int64))),
                   to=onnx_dtype(dt))
    p = ex.op("Softmax", ins[1], axis=1)
    validf = ex.op("Cast", valid, to=onnx_dtype(dt))
    if reduction == "none":
        w = ex.op("Mul", g, validf)
    else:
        if reduction == "mean":
            count = ex.op("Max", ex.reduce("ReduceSum", validf, [0], False),
                          ex.const(np.asarray(1, dt)))
            gw = ex.op("Div", g, count)
        else:
            gw = g
        w = ex.op("Mul", validf, gw)
    d = ex.op("Mul", ex.op("Sub", p, onehot), ex.unsqueeze(w, [1]))
    return [d]


@converter("einsum")
def _einsum(ex, node, ins):
    if ex.opset < 12:
        _refuse("einsum needs opset >= 12")
    out = _out(node)
    work = _compute_dtype(out, ("int32", "int64", "float32", "float64"))
    xs = [ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs)]
    y = ex.emit("Einsum", xs, 1, equation=node.attrs["equation"])[0]
    return [ex.cast(y, work, out)]
