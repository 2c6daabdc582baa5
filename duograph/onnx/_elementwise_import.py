"""ONNX import handlers: elementwise ops (unary, binary, comparisons, logic, bitwise, casts, Where,
Clip,
the activations that are elementwise).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import numpy as np

from ..graphlib import dtypes
from ..graphlib import functional as F
from ..graphlib.ops import activations as A
from ._import import Ctx, handler, np_dtype_of, refuse
from ._import_helpers import (FLOATS, INTS, NUMERIC, SIGNED, _axis, _check_same, _float_only,
                              _floor, cast)


# -- elementwise unary ---------------------------------------------------------------------------
def _unary(fn, floats_only=True, dtypes_ok=None):
    def run(ctx: Ctx):
        dt = ctx.dtype(0)
        if floats_only and dt not in FLOATS:
            refuse(f"dtype {dt} (this op takes floating-point tensors)")
        if dtypes_ok is not None and dt not in dtypes_ok:
            refuse(f"dtype {dt}")
        return cast(fn(ctx, ctx.x(0)), dt)
    return run


HANDLERS_UNARY = {
    "Abs": (lambda c, x: F.abs(x), False, NUMERIC),
    "Neg": (lambda c, x: F.neg(x), False, SIGNED),
    "Exp": (lambda c, x: F.exp(x), True, None),
    "Log": (lambda c, x: F.log(x), True, None),
    "Sqrt": (lambda c, x: F.sqrt(x), True, None),
    "Reciprocal": (lambda c, x: F.reciprocal(x), True, None),
    "Sin": (lambda c, x: F.sin(x), True, None),
    "Cos": (lambda c, x: F.cos(x), True, None),
    "Tan": (lambda c, x: F.sin(x) / F.cos(x), True, None),
    "Tanh": (lambda c, x: F.tanh(x), True, None),
    "Sinh": (lambda c, x: (F.exp(x) - F.exp(F.neg(x))) * 0.5, True, None),
    "Cosh": (lambda c, x: (F.exp(x) + F.exp(F.neg(x))) * 0.5, True, None),
    "Asinh": (lambda c, x: F.log(x + F.sqrt(x * x + 1.0)), True, None),
    "Acosh": (lambda c, x: F.log(x + F.sqrt(x * x - 1.0)), True, None),
    "Atanh": (lambda c, x: F.log((x + 1.0) / (1.0 - x)) * 0.5, True, None),
    "Sigmoid": (lambda c, x: F.sigmoid(x), True, None),
    "Relu": (lambda c, x: F.relu(x), False, SIGNED),
    "Erf": (lambda c, x: F.erf(x), True, None),
    "Sign": (lambda c, x: F.sign(x), False, NUMERIC),
    "Softsign": (lambda c, x: x / (F.abs(x) + 1.0), True, None),
    "Softplus": (lambda c, x: F.log(F.exp(x) + 1.0), True, None),
    "Mish": (lambda c, x: A.mish(x), True, None),
    # PyTorch's hardswish (its gradient: 0 up to -3, 1 from 3 on), which exports as this
    "HardSwish": (lambda c, x: A.hardswish(x), True, None),
}
for _name, (_fn, _fo, _ok) in HANDLERS_UNARY.items():
    handler(_name)(_unary(_fn, _fo, _ok))


@handler("Identity")
def _identity(ctx):
    return ctx.x(0)


@handler("Not")
def _not(ctx):
    if ctx.dtype(0) != "bool":
        refuse("Not of a non-bool tensor")
    return F.logical_not(ctx.x(0))


@handler("IsNaN")
def _isnan(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    return F.ne(x, x)


@handler("IsInf")
def _isinf(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    inf = ctx.const(np.inf, x.dtype)
    if pos and neg:
        return F.eq(F.abs(x), inf)
    if pos:
        return F.eq(x, inf)
    if neg:
        return F.eq(F.neg(x), inf)
    return F.ne(x, x) if False else F.logical_and(F.eq(x, inf), F.ne(x, x))


@handler("Floor")
def _floor_h(ctx):
    _float_only(ctx)
    return _floor(ctx, ctx.x(0))


@handler("Ceil")
def _ceil(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    return F.neg(_floor(ctx, F.neg(x)))


# ELU, CELU and SELU as PyTorch's elu op: its gradient at 0 is the negative side's (alpha,
# 1, gamma * alpha), where a composition with minimum(x, 0) split it at the tie
@handler("Elu")
def _elu(ctx):
    _float_only(ctx)
    return A.elu(ctx.x(0), ctx.attr("alpha", 1.0))


@handler("Celu")
def _celu(ctx):
    _float_only(ctx)
    a = ctx.attr("alpha", 1.0)
    if a == 0:
        refuse("Celu with alpha 0")
    return A.elu(ctx.x(0), a, 1.0, 1.0 / a)


@handler("Selu")
def _selu(ctx):
    _float_only(ctx)
    a = ctx.attr("alpha", 1.67326319217681884765625)
    g = ctx.attr("gamma", 1.05070102214813232421875)
    return A.elu(ctx.x(0), a, g)


@handler("LeakyRelu")
def _leaky(ctx):
    _float_only(ctx)     # x where x > 0, else alpha * x: the same values, PyTorch's gradient
    return F.leaky_relu(ctx.x(0), ctx.attr("alpha", 0.01))


@handler("ThresholdedRelu")
def _thresholded(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    return F.where(F.gt(x, ctx.const(ctx.attr("alpha", 1.0), x.dtype)), x,
                   ctx.const(0, x.dtype))


@handler("HardSigmoid")
def _hard_sigmoid(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    # PyTorch's hardsigmoid exports as alpha = 1/6 (a float32 attribute), beta = 0.5
    if np.float32(alpha) == np.float32(1.0 / 6.0) and beta == 0.5:
        return A.hardsigmoid(x)
    return F.clamp(x * alpha + beta, 0.0, 1.0)


@handler("Shrink")
def _shrink(ctx):
    x = ctx.x(0)
    if x.dtype not in FLOATS:
        refuse(f"dtype {x.dtype}")
    lam, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    zero = ctx.const(0, x.dtype)
    return F.where(F.lt(x, ctx.const(-lam, x.dtype)), x + bias,
                   F.where(F.gt(x, ctx.const(lam, x.dtype)), x - bias, zero))


@handler("Gelu")
def _gelu(ctx):
    _float_only(ctx)
    return F.gelu(ctx.x(0), ctx.attr("approximate", "none"))


@handler("PRelu")
def _prelu(ctx):
    _float_only(ctx)
    x, s = ctx.x(0), ctx.x(1)      # PyTorch's prelu: at 0, the slope's side takes the gradient
    return F.where(F.gt(x, ctx.const(0, x.dtype)), x, x * s)


# -- elementwise binary --------------------------------------------------------------------------
def _binary(fn, allowed=NUMERIC):
    def run(ctx):
        _check_same(ctx)
        dt = ctx.dtype(0)
        if dt not in allowed:
            refuse(f"dtype {dt}")
        return cast(fn(ctx, ctx.x(0), ctx.x(1)), dt)
    return run


handler("Add")(_binary(lambda c, a, b: F.add(a, b)))
handler("Sub")(_binary(lambda c, a, b: F.sub(a, b)))
handler("Mul")(_binary(lambda c, a, b: F.mul(a, b)))


def _trunc_div(ctx, a, b):
    """Integer division toward zero (C's, ONNX's) in int64: a float64 estimate corrected by
    one step, exact while the estimate is within one of the quotient (|a| < 2**52)."""
    a, b = cast(a, "int64"), cast(b, "int64")
    q = F.cast(F.div(F.cast(a, "float64"), F.cast(b, "float64")), "int64")
    r = a - q * b
    sa, sb = F.sign(a), F.sign(b)
    zero = ctx.const(0, "int64")
    over = F.logical_and(F.ne(r, zero), F.ne(F.sign(r), sa))
    q = F.where(over, q - sa * sb, q)
    r = a - q * b
    under = F.ge(F.abs(r), F.abs(b))
    return F.where(under, q + sa * sb, q)


@handler("Div")
def _div(ctx):
    _check_same(ctx)
    a, b = ctx.x(0), ctx.x(1)
    dt = a.dtype
    if dt in FLOATS:
        return F.div(a, b)
    if dt == "bool":
        refuse("Div of bool")
    if dt in dtypes.WIDE_UNSIGNED:      # toward zero is floor; exact where int64 is not
        return F.floor_divide(a, b)
    return cast(_trunc_div(ctx, a, b), dt)


@handler("Pow")
def _pow(ctx):
    a, b = ctx.x(0), ctx.x(1)
    if a.dtype in INTS and b.dtype in INTS:       # numpy's integer power (wraps)
        return cast(F.pow(cast(a, "int64"), cast(b, "int64")), a.dtype)
    if a.dtype in INTS and b.dtype in FLOATS:     # as ONNX: the float power, truncated
        return cast(F.pow(cast(a, "float64"), cast(b, "float64")), a.dtype)
    if a.dtype not in FLOATS:
        refuse(f"Pow of a {a.dtype} base")
    return cast(F.pow(a, cast(b, a.dtype)), a.dtype)


@handler("Mod")
def _mod(ctx):
    _check_same(ctx)
    a, b = ctx.x(0), ctx.x(1)
    fmod = ctx.attr("fmod", 0)
    if a.dtype in FLOATS:       # C's fmod, or with fmod=0 Python's % (numpy's mod)
        return F.fmod(a, b) if fmod else F.remainder(a, b)
    if a.dtype == "bool":
        refuse(f"Mod of {a.dtype}")
    if a.dtype in dtypes.WIDE_UNSIGNED:     # fmod and mod agree without signs
        return F.remainder(a, b)
    a64, b64 = cast(a, "int64"), cast(b, "int64")
    r = a64 - _trunc_div(ctx, a64, b64) * b64
    if not fmod:                 # the sign of the divisor, as Python's %
        zero = ctx.const(0, "int64")
        fix = F.logical_and(F.ne(r, zero), F.ne(F.lt(r, zero), F.lt(b64, zero)))
        r = F.where(fix, r + b64, r)
    return cast(r, a.dtype)


def _variadic(fn):
    def run(ctx):
        xs = [ctx.x(i) for i in range(len(ctx)) if ctx.has(i)]
        dts = {x.dtype for x in xs}
        if len(dts) > 1:
            refuse(f"operands of different dtypes {sorted(dts)}")
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        if len(xs) == 1:
            out = fn(out, out) if fn in (F.maximum, F.minimum) else out
        return out
    return run


handler("Max")(_variadic(F.maximum))
handler("Min")(_variadic(F.minimum))
handler("Sum")(_variadic(F.add))


@handler("Mean")
def _mean(ctx):
    xs = [ctx.x(i) for i in range(len(ctx)) if ctx.has(i)]
    _float_only(ctx)
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return cast(out / float(len(xs)), xs[0].dtype)


def _compare(fn):
    def run(ctx):
        _check_same(ctx)
        return fn(ctx.x(0), ctx.x(1))
    return run


handler("Equal")(_compare(F.eq))
handler("Less")(_compare(F.lt))
handler("LessOrEqual")(_compare(F.le))
handler("Greater")(_compare(F.gt))
handler("GreaterOrEqual")(_compare(F.ge))


def _logic(fn):
    def run(ctx):
        if ctx.dtype(0) != "bool" or ctx.dtype(1) != "bool":
            refuse("logical ops take bool tensors")
        return fn(ctx.x(0), ctx.x(1))
    return run


handler("And")(_logic(F.logical_and))
handler("Or")(_logic(F.logical_or))
handler("Xor")(_logic(F.ne))


@handler("Where")
def _where(ctx):
    a, b = ctx.x(1), ctx.x(2)
    if a.dtype != b.dtype:
        refuse("branches of different dtypes")
    return cast(F.where(ctx.x(0), a, b), a.dtype)


@handler("Clip")
def _clip(ctx):
    x = ctx.x(0)
    if x.dtype == "bool":
        refuse("Clip of bool")
    if ctx.opset < 11:
        return _clip_numbers(x, ctx.attr("min"), ctx.attr("max"))
    bounds = [ctx.x(i) if ctx.has(i) else None for i in (1, 2)]
    known = [ctx._known[i] if ctx.has(i) else None for i in (1, 2)]
    if all(b is None or (k is not None and k.size == 1) for b, k in zip(bounds, known)):
        return _clip_numbers(x, *(None if k is None else k.reshape(()).item() for k in known))
    lo, hi = (None if b is None else cast(b, x.dtype) for b in bounds)
    return _clip_tensors(x, lo, hi)


def _clip_numbers(x, lo, hi):
    """Clip to known bounds: PyTorch's clamp (the gradient is 1 at the bounds, where
    maximum/minimum would split it at the tie), in x's dtype."""
    if lo is None and hi is None:
        return x
    dt = x.dtype
    if dt in FLOATS:
        lo, hi = (None if b is None else float(b) for b in (lo, hi))
    else:
        lo, hi = (None if b is None else int(b) for b in (lo, hi))
    return cast(F.clamp(x, lo, hi), dt)


def _clip_tensors(x, lo, hi):
    """min(max(x, lo), hi) for bounds known at run time, with the gradients of PyTorch's
    clamp(x, lo, hi): x's where lo <= x <= hi (0 for NaN), lo's where x < lo, hi's where
    x > hi."""
    keep, bounded = None, F.stop_gradient(x)
    if lo is not None:
        keep = F.ge(x, lo)
        bounded = F.maximum(bounded, lo)
    if hi is not None:
        keep = F.le(x, hi) if keep is None else F.logical_and(keep, F.le(x, hi))
        bounded = F.minimum(bounded, hi)
    return x if keep is None else F.where(keep, x, bounded)


# -- casts ---------------------------------------------------------------------------------------
# float8 casts that overflow to NaN/inf with saturate=0 (ml_dtypes' rounding); duograph's
# cast to float8_e4m3fn saturates, as PyTorch's does: beyond 464 (448 rounds to even up to
# it) ONNX's saturate=0 gives NaN
_E4M3FN_NAN_ABOVE = 464.0


def _cast_to(ctx, x, dt):
    """ONNX's Cast: float8 targets saturate (``saturate=1``, the default: out-of-range
    values and infinities clip to the largest finite value) or overflow as the format does
    (``saturate=0``); everything else converts as numpy does."""
    if dt == x.dtype:
        return x
    if dt in dtypes.STORAGE_FLOAT_DTYPES and x.dtype in FLOATS:
        if dt == "float8_e8m0fnu":
            refuse(f"casts to float8_e8m0fnu (round_mode {ctx.attr('round_mode', 'up')!r} "
                   "is not implemented)")
        if ctx.attr("saturate", 1):
            top = dtypes.STORAGE_MAX[dt]
            x = F.clamp(x, -top, top)
        elif dt == "float8_e4m3fn":
            x = F.where(F.abs(x) > _E4M3FN_NAN_ABOVE, ctx.const(np.nan, x.dtype), x)
    return F.cast(x, dt)


@handler("Cast")
def _cast(ctx):
    return _cast_to(ctx, ctx.x(0), np_dtype_of(ctx.attr("to")))


@handler("CastLike")
def _cast_like(ctx):
    return _cast_to(ctx, ctx.x(0), ctx.dtype(1))


@handler("BitCast")
def _bit_cast(ctx):
    """The same bits read as ``to`` (of the same element size), as ``Tensor.view(dtype)``."""
    x, dt = ctx.x(0), np_dtype_of(ctx.attr("to"))
    sub_byte = ("int4", "uint4", "int2", "uint2", "float4_e2m1fn")   # numpy keeps a byte
    if dtypes.itemsize(x.dtype) != dtypes.itemsize(dt) or x.dtype in sub_byte or (
            dt in sub_byte):
        refuse(f"a bit cast from {x.dtype} to {dt} (ONNX's BitCast keeps the element size)")
    return x if dt == x.dtype else F._view_dtype(x, dt)


# == more handlers, composed from the same op functions ==========================================
_BITS = {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}

for _name, _fn in (("Acos", F.acos), ("Asin", F.asin), ("Atan", F.atan)):
    handler(_name)(_unary(lambda c, x, _fn=_fn: _fn(x), True, None))


@handler("Round")
def _round(ctx):
    """Round half to even: floor, then up where the fraction is above one half, or exactly
    one half and the floor is odd (all steps exact in floating point)."""
    _float_only(ctx)
    return _rint(ctx, ctx.x(0))


def _rint(ctx, x):
    fl = _floor(ctx, x)
    frac = x - fl
    half = ctx.const(0.5, x.dtype)
    one = ctx.const(1, x.dtype)
    odd = F.ne(_floor(ctx, fl * 0.5) * 2.0, fl)
    up = F.logical_or(F.gt(frac, half), F.logical_and(F.eq(frac, half), odd))
    return F.where(up, fl + one, fl)


def _bitwise(fn):
    def run(ctx):
        _check_same(ctx, len(ctx))
        if ctx.dtype(0) not in INTS:
            refuse(f"dtype {ctx.dtype(0)} (Bitwise ops take integer tensors)")
        return fn(*[ctx.x(i) for i in range(len(ctx))])
    return run


handler("BitwiseAnd")(_bitwise(F.bitwise_and))
handler("BitwiseOr")(_bitwise(F.bitwise_or))
handler("BitwiseXor")(_bitwise(F.bitwise_xor))
handler("BitwiseNot")(_bitwise(F.bitwise_not))


@handler("BitShift")
def _bit_shift(ctx):
    """x << s as x * 2**s and x >> s as floor(x / 2**s), in int64 and wrapped back to the
    type; 2**s is built from the bits of s. Shifts by a negative amount or by the width or
    more give 0 (or -1: a right shift of a negative value), as ONNX's tests require."""
    _check_same(ctx)
    x, s = ctx.x(0), ctx.x(1)
    dt = x.dtype
    if dt not in INTS:
        refuse(f"dtype {dt} (BitShift takes integer tensors)")
    left = ctx.attr("direction") == "LEFT"
    if ctx.attr("direction") not in ("LEFT", "RIGHT"):
        refuse(f"direction {ctx.attr('direction')!r}")
    if dt in dtypes.WIDE_UNSIGNED:          # logical shifts; by the width or more: 0
        return (F.bitwise_left_shift if left else F.bitwise_right_shift)(x, s)
    width = _BITS[dt]
    x64, s64 = cast(x, "int64"), cast(s, "int64")
    zero = ctx.const(0, "int64")
    valid = F.logical_and(F.ge(s64, zero), F.lt(s64, ctx.const(min(width, 63), "int64")))
    safe = F.where(valid, s64, zero)
    p = F.ones_like(safe)
    for k in range(6):                       # the bits of s: 2**s = prod 2**(2**k)
        bit = F.ne(F.bitwise_and(safe, ctx.const(1 << k, "int64")), zero)
        p = F.where(bit, p * ctx.const(1 << (1 << k), "int64"), p)
    if left:
        y = F.where(valid, x64 * p, zero)
        if width == 64:                       # 1 << 63 does not fit: shift by 62, then 1
            top = F.eq(s64, ctx.const(63, "int64"))
            y = F.where(top, x64 * ctx.const(1 << 62, "int64") * ctx.const(2, "int64"), y)
    else:
        neg = F.lt(x64, zero)
        sat = F.where(neg, ctx.const(-1, "int64"), zero)
        y = F.where(valid, F.floor_divide(x64, p), sat)
    return cast(y, dt)


# -- quantization: integers from floats by a scale and a zero point (rounding half to even) --
_QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767),
           "int32": (-2 ** 31, 2 ** 31 - 1), "uint16": (0, 65535), "int4": (-8, 7),
           "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


def _along(ctx, param, x_shape, axis: int, block: int, what: str):
    """A scale or zero point broadcast against x: one value, one per index of ``axis``, or
    (``block`` > 0) one per block of ``block`` indices along ``axis``."""
    shape = tuple(param.shape)
    nd = len(x_shape)
    if (len(shape) == 0 or shape == (1,)) and not block:
        return F.reshape(param, ())             # per tensor: the axis does not matter
    axis = _axis(axis, nd)
    if block:
        if len(shape) != nd:
            refuse(f"blocked {what} must have x's rank {nd}, found shape {list(shape)}")
        size = x_shape[axis]
        if not isinstance(size, int):
            refuse(f"blocked quantization along the symbolic dim {size}")
        idx = np.arange(size) // block
        if idx[-1] >= shape[axis]:
            refuse(f"{what} of shape {list(shape)} has too few blocks of {block} for "
                   f"{size} along axis {axis}")
        return F.index_select(param, axis, ctx.const(idx, "int64"))
    if len(shape) != 1:
        refuse(f"{what} of shape {list(shape)}: expected a scalar, one value per index of "
               f"axis {axis}, or blocks")
    view = [1] * nd
    view[axis] = shape[0]
    return F.reshape(param, tuple(view))


@handler("QuantizeLinear")
def _quantize_linear(ctx):
    """y = saturate(round_half_even(x / scale) + zero_point), computed in float32."""
    x = ctx.x(0)
    _float_only(ctx)
    if ctx.attr("precision", 0):
        refuse("precision other than the scale's")
    if ctx.has(2):
        out = ctx.dtype(2)
    elif ctx.attr("output_dtype", 0):
        out = np_dtype_of(ctx.attr("output_dtype"))
    else:
        out = "uint8"
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    if out in dtypes.STORAGE_FLOAT_DTYPES and out != "float8_e8m0fnu":
        # float targets: x / scale + zero_point, cast as Cast casts (saturate attribute)
        scale = _along(ctx, F.cast(ctx.x(1), "float32"), ctx.shape(0), axis, block,
                       "y_scale")
        q = F.cast(x, "float32") / scale
        if ctx.has(2):
            q = q + _along(ctx, F.cast(ctx.x(2), "float32"), ctx.shape(0), axis, block,
                           "y_zero_point")
        return _cast_to(ctx, q, out)
    if out not in _QRANGE or out == "int32":
        refuse(f"quantization to {out}")
    if not ctx.attr("saturate", 1):
        refuse("saturate=0")
    lo, hi = _QRANGE[out]
    scale = _along(ctx, F.cast(ctx.x(1), "float32"), ctx.shape(0), axis, block, "y_scale")
    q = _rint(ctx, F.cast(x, "float32") / scale)
    if ctx.has(2):
        q = q + _along(ctx, F.cast(ctx.x(2), "float32"), ctx.shape(0), axis, block,
                       "y_zero_point")
    return F.cast(F.clamp(q, float(lo), float(hi)), out)


@handler("DequantizeLinear")
def _dequantize_linear(ctx):
    """y = (x - zero_point) * scale, in the scale's dtype (or ``output_dtype``)."""
    x = ctx.x(0)
    if x.dtype not in _QRANGE and x.dtype not in dtypes.STORAGE_FLOAT_DTYPES:
        refuse(f"dequantization of {x.dtype}")
    scale_dt = ctx.dtype(1)
    out = np_dtype_of(ctx.attr("output_dtype")) if ctx.attr("output_dtype", 0) else scale_dt
    if out not in FLOATS:
        refuse(f"output dtype {out}")
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    wide = "float64" if x.dtype == "int32" else "float32"
    v = F.cast(x, wide)
    if ctx.has(2):
        v = v - _along(ctx, F.cast(ctx.x(2), wide), ctx.shape(0), axis, block,
                       "x_zero_point")
    scale = _along(ctx, ctx.x(1), ctx.shape(0), axis, block, "x_scale")
    return F.cast(F.cast(v, scale_dt) * scale, out)


@handler("MatMulInteger")
def _matmul_integer(ctx):
    """(A - a_zero_point) @ (B - b_zero_point) in int32, zero points broadcast as numpy."""
    return _integer_matmul(ctx, 0, 2, 1, 3)


def _integer_matmul(ctx, a: int, a_zp: int, b: int, b_zp: int):
    ops = []
    for x, zp in ((a, a_zp), (b, b_zp)):
        if ctx.dtype(x) not in ("uint8", "int8"):
            refuse(f"integer matmul of {ctx.dtype(x)} (ONNX takes uint8 and int8)")
        v = F.cast(ctx.x(x), "int32")
        if ctx.has(zp):
            v = v - F.cast(ctx.x(zp), "int32")
        ops.append(v)
    return F.matmul(*ops)


@handler("QLinearMatMul")
def _qlinear_matmul(ctx):
    """The int32 product of the zero-point-shifted operands, rescaled by
    a_scale * b_scale / y_scale (computed in the scales' dtype, as the ONNX reference does),
    rounded half to even, shifted by y_zero_point and saturated to its type."""
    c = _integer_matmul(ctx, 0, 2, 3, 5)
    out = ctx.dtype(7) if ctx.has(7) else ctx.dtype(0)
    if out not in ("uint8", "int8"):
        refuse(f"QLinearMatMul to {out}")
    scales = [ctx.x(i) for i in (1, 4, 6)]
    if len({s.dtype for s in scales}) > 1 or scales[0].dtype not in FLOATS:
        refuse(f"scales of dtypes {[s.dtype for s in scales]}")
    m = F.cast(scales[0] * scales[1] / scales[2], "float64")
    d = F.cast(c, "float64") * m
    if ctx.has(7):
        d = d + F.cast(ctx.x(7), "float64")
    lo, hi = _QRANGE[out]
    return F.cast(F.clamp(_rint(ctx, d), float(lo), float(hi)), out)


@handler("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx):
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto 0..255."""
    x = ctx.x(0)
    if x.dtype != "float32":
        refuse(f"dtype {x.dtype} (DynamicQuantizeLinear takes float32)")
    zero = ctx.const(0.0, "float32")
    hi = F.maximum(F.amax(x), zero)
    lo = F.minimum(F.amin(x), zero)
    # an all-zero x: scale 1 (onnxruntime; the ONNX reference takes 1/255)
    scale = F.where(F.eq(hi, lo), ctx.const(1.0, "float32"),
                    (hi - lo) / ctx.const(255.0, "float32"))
    zp = _rint(ctx, F.clamp(zero - lo / scale, 0.0, 255.0))
    y = F.clamp(_rint(ctx, x / scale) + zp, 0.0, 255.0)
    return F.cast(y, "uint8"), scale, F.cast(zp, "uint8")
