"""ONNX export converters: elementwise ops (unary and binary arithmetic, activations, comparisons,
logic, bitwise, casts, where, clamp, pow, round, nan_to_num, lerp, xlogy; the bit shifts and
the dtype view are refused by name: no exact ONNX form).

Each converter emits the ONNX nodes computing exactly what the op's reference kernel computes
(see ``_export``)."""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.registry import get_op
from ._export import (CONVERTERS, _FLOATS, Exporter, _compute_dtype, _in, _out, _refuse,
                      converter, onnx_dtype, refused)


def _unary_float(op_type: str):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        work = _compute_dtype(out, ("float32", "float64"))
        x = ex.cast(ins[0], _in(node), work)
        return [ex.cast(ex.op(op_type, x), work, out)]
    return conv


for _name, _op_type in (("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("sin", "Sin"),
                        ("cos", "Cos"), ("tanh", "Tanh"), ("sigmoid", "Sigmoid"),
                        ("erf", "Erf"), ("reciprocal", "Reciprocal")):
    CONVERTERS[get_op(_name)] = _unary_float(_op_type)


def _unary_numeric(build: Callable, allowed=("int32", "int64", "float32", "float64")):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        work = _compute_dtype(out, allowed)
        x = ex.cast(ins[0], _in(node), work)
        return [ex.cast(build(ex, x, work), work, out)]
    return conv


for _name, _op_type in (("tan", "Tan"), ("asin", "Asin"), ("acos", "Acos"), ("atan", "Atan"),
                        ("sinh", "Sinh"), ("cosh", "Cosh"), ("asinh", "Asinh"),
                        ("acosh", "Acosh"), ("atanh", "Atanh")):
    CONVERTERS[get_op(_name)] = _unary_float(_op_type)
# log2, log10, exp2 through natural log / exp (within an ulp)
refused("ONNX has no form of it that keeps its accuracy near 0", "log1p", "expm1")
refused("ONNX has no such special function", "erfc", "erfinv", "lgamma", "digamma",
        "polygamma", "i0", "i1")
refused("ONNX's Max and Min propagate NaN, which fmax and fmin ignore", "fmax", "fmin")
refused("ONNX has no integer gcd or lcm", "gcd", "lcm")
refused("ONNX has no bit-level float functions", "nextafter", "signbit")
refused("not written yet: Where over Equal and Greater (no gradient, rarely exported)",
        "heaviside")
CONVERTERS[get_op("log2")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Div", ex.op("Log", x), ex.const(math.log(2.0), dt)),
    ("float32", "float64"))
CONVERTERS[get_op("log10")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Div", ex.op("Log", x), ex.const(math.log(10.0), dt)),
    ("float32", "float64"))
CONVERTERS[get_op("exp2")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Pow", ex.const(2.0, dt), x), ("float32", "float64"))


def _rounding(op_type: str):
    """Floor/Ceil on floats; integers pass through; trunc as sign(x) * floor(|x|)."""
    def conv(ex, node, ins):
        out = _out(node)
        if not out.startswith("float"):
            return [ex.op("Identity", ins[0])]
        work = _compute_dtype(out, ("float32", "float64"))
        x = ex.cast(ins[0], _in(node), work)
        if op_type == "Trunc":
            y = ex.op("Mul", ex.op("Sign", x), ex.op("Floor", ex.op("Abs", x)))
        elif op_type == "Frac":
            y = ex.op("Sub", x, ex.op("Mul", ex.op("Sign", x), ex.op("Floor", ex.op("Abs", x))))
        else:
            y = ex.op(op_type, x)
        return [ex.cast(y, work, out)]
    return conv


for _name, _op_type in (("floor", "Floor"), ("ceil", "Ceil"), ("trunc", "Trunc"),
                        ("frac", "Frac")):
    CONVERTERS[get_op(_name)] = _rounding(_op_type)


def _float_test(build: Callable, integers: bool):
    """IsNaN/IsInf on floats; integers are never NaN or infinite (the answer ``integers``)."""
    def conv(ex, node, ins):
        dt = _in(node)
        if not dt.startswith("float"):
            same = ex.op("Equal", ins[0], ins[0])       # all True, in the input's shape
            return [same if integers else ex.op("Not", same)]
        x = ex.cast(ins[0], dt, _compute_dtype(dt, ("float32", "float64")))
        return [build(ex, x)]
    return conv


CONVERTERS[get_op("isnan")] = _float_test(lambda ex, x: ex.op("IsNaN", x), False)
CONVERTERS[get_op("isinf")] = _float_test(lambda ex, x: ex.op("IsInf", x), False)
CONVERTERS[get_op("isfinite")] = _float_test(
    lambda ex, x: ex.op("Not", ex.op("Or", ex.op("IsNaN", x), ex.op("IsInf", x))), True)
# logsigmoid(x) = min(x, 0) - softplus(-|x|) (ONNX has no LogSigmoid)
CONVERTERS[get_op("logsigmoid")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Sub", ex.op("Min", x, ex.const(0, dt)),
                            ex.op("Softplus", ex.op("Neg", ex.op("Abs", x)))),
    ("float32", "float64"))
CONVERTERS[get_op("neg")] = _unary_numeric(lambda ex, x, dt: ex.op("Neg", x))
CONVERTERS[get_op("abs")] = _unary_numeric(lambda ex, x, dt: ex.op("Abs", x))
CONVERTERS[get_op("square")] = _unary_numeric(lambda ex, x, dt: ex.op("Mul", x, x))
# sign(NaN) is 0, as PyTorch's (ONNX's Sign keeps NaN)
CONVERTERS[get_op("sign")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Where", ex.op("IsNaN", x), ex.const(0, dt), ex.op("Sign", x))
    if dt.startswith("float") else ex.op("Sign", x))
CONVERTERS[get_op("relu")] = _unary_numeric(lambda ex, x, dt: ex.op("Max", x, ex.const(0, dt)))


@converter("rsqrt")
def _rsqrt(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    return [ex.cast(ex.op("Reciprocal", ex.op("Sqrt", x)), work, out)]


@converter("leaky_relu")
def _leaky_relu(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    slope = node.attrs["negative_slope"]
    # x where x > 0, else x * slope (LeakyRelu computes the same, written out for any slope)
    y = ex.op("Where", ex.op("Greater", x, ex.const(0, work)), x,
              ex.op("Mul", x, ex.const(slope, work)))
    return [ex.cast(y, work, out)]


@converter("gelu")
def _gelu(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)

    def c(v):
        return ex.const(v, work)
    if node.attrs["approximate"] == "tanh":
        x3 = ex.op("Mul", ex.op("Mul", x, x), x)
        inner = ex.op("Mul", c(math.sqrt(2.0 / math.pi)),
                      ex.op("Add", x, ex.op("Mul", c(0.044715), x3)))
        t = ex.op("Tanh", inner)
    else:
        t = ex.op("Erf", ex.op("Div", x, c(math.sqrt(2.0))))
    y = ex.op("Mul", ex.op("Mul", c(0.5), x), ex.op("Add", c(1.0), t))
    return [ex.cast(y, work, out)]


@converter("softplus")
def _softplus(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    beta, threshold = node.attrs["beta"], node.attrs["threshold"]
    bx = ex.op("Mul", x, ex.const(beta, work))
    # max(bx, 0) + log(1 + exp(-|bx|)), divided by beta; x itself past the threshold
    soft = ex.op("Add", ex.op("Max", bx, ex.const(0, work)),
                 ex.op("Log", ex.op("Add", ex.const(1, work),
                                    ex.op("Exp", ex.op("Neg", ex.op("Abs", bx))))))
    soft = ex.op("Div", soft, ex.const(beta, work))
    y = ex.op("Where", ex.op("Greater", bx, ex.const(threshold, work)), x, soft)
    return [ex.cast(y, work, out)]


def _float_in(ex, node, ins):
    """(input cast to its float compute dtype, that dtype, the output dtype)."""
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    return ex.cast(ins[0], _in(node), work), work, out


@converter("elu")
def _elu(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    a = node.attrs
    # scale * x for x > 0, else scale * alpha * (exp(min(x, 0) * input_scale) - 1)
    neg = ex.op("Mul", ex.op("Min", x, ex.const(0, work)), ex.const(a["input_scale"], work))
    neg = ex.op("Mul", ex.op("Sub", ex.op("Exp", neg), ex.const(1, work)),
                ex.const(a["alpha"] * a["scale"], work))
    y = ex.op("Where", ex.op("LessOrEqual", x, ex.const(0, work)), neg,
              ex.op("Mul", x, ex.const(a["scale"], work)))
    return [ex.cast(y, work, out)]


@converter("hardtanh")
def _hardtanh(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    x = ex.op("Max", x, ex.const(node.attrs["min_val"], work))
    return [ex.cast(ex.op("Min", x, ex.const(node.attrs["max_val"], work)), work, out)]


def _relu6_of_x_plus_3(ex, x, work):
    shifted = ex.op("Add", x, ex.const(3, work))
    return ex.op("Min", ex.op("Max", shifted, ex.const(0, work)), ex.const(6, work))


@converter("hardsigmoid")
def _hardsigmoid(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    y = ex.op("Div", _relu6_of_x_plus_3(ex, x, work), ex.const(6, work))
    return [ex.cast(y, work, out)]


@converter("hardswish")
def _hardswish(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    y = ex.op("Div", ex.op("Mul", x, _relu6_of_x_plus_3(ex, x, work)), ex.const(6, work))
    return [ex.cast(y, work, out)]


@converter("silu")
def _silu(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    return [ex.cast(ex.op("Mul", x, ex.op("Sigmoid", x)), work, out)]


@converter("mish")
def _mish(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    soft = ex.op("Add", ex.op("Max", x, ex.const(0, work)),
                 ex.op("Log", ex.op("Add", ex.const(1, work),
                                    ex.op("Exp", ex.op("Neg", ex.op("Abs", x))))))
    return [ex.cast(ex.op("Mul", x, ex.op("Tanh", soft)), work, out)]


@converter("logical_not")
def _logical_not(ex, node, ins):
    return [ex.op("Not", ex.cast(ins[0], _in(node), "bool"))]


@converter("clamp")
def _clamp(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    lo, hi = node.attrs["min"], node.attrs["max"]
    if lo is not None:
        x = ex.op("Max", x, ex.const(lo, work))
    if hi is not None:
        x = ex.op("Min", x, ex.const(hi, work))
    return [ex.cast(x, work, out)]


@converter("pow_scalar")
def _pow_scalar(ex, node, ins):
    out = _out(node)
    e = node.attrs["exponent"]
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    if e == 2:
        y = ex.op("Mul", x, x)
    elif e == 1:
        y = ex.op("Identity", x)
    elif dtypes.is_float(out):
        y = ex.op("Pow", x, ex.const(e, work))
    elif isinstance(e, int) and e >= 0:
        y = ex.op("Pow", x, ex.const(e, work))
    else:
        _refuse(f"integer power with exponent {e!r}")
    return [ex.cast(y, work, out)]


@converter("cast")
def _cast(ex, node, ins):
    src, dst = _in(node), _out(node)
    if src == dst:
        return [ex.op("Identity", ins[0])]
    return [ex.op("Cast", ins[0], to=onnx_dtype(dst))]


@converter("stop_gradient", "to_device")
def _identity(ex, node, ins):
    return [ex.op("Identity", ins[0])]


def _binary_arith(op_type: str, bool_op: Optional[str] = None, float_only: bool = False):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        if out == "bool":
            if bool_op is None:
                _refuse(f"{node.op.name} of bool operands")
            a, b = (ex.cast(n, t.dtype, "bool") for n, t in zip(ins, node.inputs))
            return [ex.op(bool_op, a, b)]
        work = _compute_dtype(out, ("float32", "float64") if float_only else
                              ("int32", "int64", "float32", "float64"))
        a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
        return [ex.cast(ex.op(op_type, a, b), work, out)]
    return conv


CONVERTERS[get_op("add")] = _binary_arith("Add", "Or")
CONVERTERS[get_op("sub")] = _binary_arith("Sub")
CONVERTERS[get_op("mul")] = _binary_arith("Mul", "And")
CONVERTERS[get_op("div")] = _binary_arith("Div", float_only=True)
CONVERTERS[get_op("maximum")] = _binary_arith("Max", "Or")
CONVERTERS[get_op("minimum")] = _binary_arith("Min", "And")


@converter("tanh_backward", "sigmoid_backward")
def _activation_backward(ex, node, ins):
    """``grad * (1 - y * y)`` and ``grad * y * (1 - y)``, in the kernels' order."""
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    g, y = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    one = ex.const(1, work)
    if node.op is get_op("tanh_backward"):
        res = ex.op("Mul", g, ex.op("Sub", one, ex.op("Mul", y, y)))
    else:
        res = ex.op("Mul", ex.op("Mul", g, y), ex.op("Sub", one, y))
    return [ex.cast(res, work, out)]


@converter("fmod")
def _fmod(ex, node, ins):
    """C's fmod (the dividend's sign): ONNX Mod with fmod=1, exact for ints and floats."""
    out = _out(node)
    if out == "bool":
        _refuse("fmod of bool operands")
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("Mod", a, b, fmod=1), work, out)]


@converter("remainder")
def _remainder(ex, node, ins):
    """Python's % (the divisor's sign): integers are ONNX Mod with fmod=0; floats are numpy's
    algorithm on fmod: r = fmod(a, b), plus b where r is nonzero and its sign differs from
    b's, and a zero takes b's sign (onnx's reference evaluator keeps that -0.0; onnxruntime
    1.32 returns +0.0 there)."""
    out = _out(node)
    if out == "bool":
        _refuse("remainder of bool operands")
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    if not work.startswith("float"):
        return [ex.cast(ex.op("Mod", a, b, fmod=0), work, out)]
    r = ex.op("Mod", a, b, fmod=1)
    zero = ex.const(0.0, work)
    b_neg = ex.op("Less", b, zero)
    flip = ex.op("And", ex.op("Not", ex.op("Equal", r, zero)),
                 ex.op("Xor", ex.op("Less", r, zero), b_neg))
    r = ex.op("Where", flip, ex.op("Add", r, b), r)
    signed_zero = ex.op("Mul", ex.op("Abs", r), ex.op("Sign", b))    # +-0 where r is 0
    r = ex.op("Where", ex.op("Equal", r, zero), signed_zero, r)
    return [ex.cast(r, work, out)]


@converter("pow")
def _pow(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("Pow", a, b), work, out)]


def _common_dtype(a: str, b: str) -> str:
    """The dtype numpy compares ``a`` and ``b`` in (duograph compares mixed operands exactly
    as they are, which numpy does in their common type)."""
    return np.result_type(np.dtype(a), np.dtype(b)).name


def _compare(op_type: str, negate: bool = False):
    def conv(ex: Exporter, node, ins):
        dt = _common_dtype(_in(node, 0), _in(node, 1))
        if op_type != "Equal" or dt not in ("bool",):
            dt = _compute_dtype(dt)
        a, b = (ex.cast(n, t.dtype, dt) for n, t in zip(ins, node.inputs))
        y = ex.op(op_type, a, b)
        return [ex.op("Not", y) if negate else y]
    return conv


CONVERTERS[get_op("eq")] = _compare("Equal")
CONVERTERS[get_op("ne")] = _compare("Equal", negate=True)
CONVERTERS[get_op("lt")] = _compare("Less")
CONVERTERS[get_op("le")] = _compare("LessOrEqual")
CONVERTERS[get_op("gt")] = _compare("Greater")
CONVERTERS[get_op("ge")] = _compare("GreaterOrEqual")


def _logic(op_type: str):
    def conv(ex, node, ins):
        a, b = (ex.cast(n, t.dtype, "bool") for n, t in zip(ins, node.inputs))
        return [ex.op(op_type, a, b)]
    return conv


CONVERTERS[get_op("logical_and")] = _logic("And")
CONVERTERS[get_op("logical_or")] = _logic("Or")
CONVERTERS[get_op("logical_xor")] = _logic("Xor")


def _bitwise(op_type: str, logical: str):
    """Bools: ONNX's logical op; integers (in the result dtype): Bitwise* (opset 18)."""
    def conv(ex, node, ins):
        out = _out(node)
        if out == "bool":
            return [ex.op(logical, *ins)]
        if ex.opset < 18:
            _refuse(f"{node.op.name} on integers needs opset >= 18 ({op_type})")
        args = [ex.cast(n, t.dtype, out) for n, t in zip(ins, node.inputs)]
        return [ex.op(op_type, *args)]
    return conv


CONVERTERS[get_op("bitwise_and")] = _bitwise("BitwiseAnd", "And")
CONVERTERS[get_op("bitwise_or")] = _bitwise("BitwiseOr", "Or")
CONVERTERS[get_op("bitwise_xor")] = _bitwise("BitwiseXor", "Xor")
CONVERTERS[get_op("bitwise_not")] = _bitwise("BitwiseNot", "Not")


@converter("where")
def _where(ex, node, ins):
    out = _out(node)
    a = ex.cast(ins[1], _in(node, 1), out)
    b = ex.cast(ins[2], _in(node, 2), out)
    return [ex.op("Where", ins[0], a, b)]


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


@converter("bitwise_left_shift", "bitwise_right_shift")
def _shift(ex, node, ins):
    _refuse(f"{node.op.name}: ONNX's BitShift takes unsigned integers only and leaves shifts "
            "past the bit width undefined, where PyTorch defines them")


@converter("view_dtype")
def _view_dtype(ex, node, ins):
    _refuse("view(dtype): ONNX has no bit reinterpretation of a tensor")
