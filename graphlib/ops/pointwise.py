"""More elementwise ops with PyTorch's names and semantics: round(decimals=), nan_to_num,
lerp, xlogy, and the bit shifts (bitwise_left_shift, bitwise_right_shift)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..errors import DTypeError, located
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes
from ._common import binary, operand, unary, unary_infer
from .creation import zeros_like
from .elementwise import cast, isfinite, logical_and, where

NUMERIC = dtypes.NUMERIC_DTYPES


def _zero_grad(g, x, y, **attrs):
    return zeros_like(g)


# -- round(decimals=) ----------------------------------------------------------------------------
def _round_kernel(xp, x, decimals):
    if not dtypes.is_float_array(x):
        return x.copy()
    half = x.dtype in dtypes.HALF_NP
    work = x.astype(np.float32) if half else x
    if decimals == 0:
        out = xp.rint(work)
    elif decimals > 0:      # as PyTorch: nearbyint(x * 10**d) / 10**d (half to even)
        scale = work.dtype.type(10.0 ** decimals)
        out = xp.rint(work * scale) / scale
    else:                   # nearbyint(x / 10**-d) * 10**-d
        scale = work.dtype.type(10.0 ** -decimals)
        out = xp.rint(work / scale) * scale
    return out.astype(x.dtype) if half else out


_round_check = unary_infer(allowed=NUMERIC, name="round")


def _round_infer(types, attrs):
    (t,) = _round_check(types, attrs)
    if attrs["decimals"] != 0 and not dtypes.is_float(t.dtype):
        raise DTypeError(f"round: decimals={attrs['decimals']} needs a floating-point tensor "
                         f"(as in PyTorch), found {t.dtype}")
    return [t]


round_op = register(OpDef(
    "round", _round_infer, _round_kernel,
    lambda cts, ins, outs, attrs, needs: [_zero_grad(cts[0], None, None)],
    expr="({decimals} == 0 ? rint({0}) : ({decimals} > 0 ? "
         "rint({0} * pow(10, {decimals})) / pow(10, {decimals}) : "
         "rint({0} / pow(10, -({decimals}))) * pow(10, -({decimals}))))",
    elementwise=True, saves_no_data=True, attrs=Attrs(decimals=Attr(int, default=0))))


def round(x, decimals: int = 0):
    """Round to the nearest integer, or to ``decimals`` decimal places (negative: tens,
    hundreds...); halves round to even, as ``torch.round``. Integers (decimals=0 only) are
    unchanged; the gradient is 0."""
    if isinstance(decimals, bool) or not isinstance(decimals, (int, np.integer)):
        raise TypeError(located(f"round: decimals must be an int, found {decimals!r}"))
    return round_op(x, decimals=int(decimals))


# -- nan_to_num ------------------------------------------------------------------------------------
def _nan_to_num_kernel(xp, x, nan, posinf, neginf):
    if not dtypes.is_float_array(x):
        return x.copy()
    t = x.dtype.type
    out = xp.where(xp.isnan(x), t(nan), x)
    out = xp.where(out == t(np.inf), t(posinf), out)
    return xp.where(out == t(-np.inf), t(neginf), out)


nan_to_num_op = unary(
    "nan_to_num", _nan_to_num_kernel,
    # PyTorch's rule multiplies the mask in (grad * isfinite(x)): an infinite cotangent
    # gives NaN at the replaced values, as there
    lambda g, x, y, **attrs: g * cast(isfinite(x), g.dtype),
    expr="(isnan({0}) ? {nan} : ({0} == inf ? {posinf} : ({0} == -inf ? {neginf} : {0})))",
    allowed=dtypes.DTYPE_NAMES,
    attrs=Attrs(nan=Attr("number", default=0.0), posinf=Attr("number", default=None),
                neginf=Attr("number", default=None)))


def _finfo(dtype: str):
    if dtype == "bfloat16":
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np.dtype(dtype))


def _number(v, name, what):
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        raise TypeError(located(f"{name}: {what} must be a Python number or None, found "
                                f"{type(v).__name__}"))
    return float(v)


def nan_to_num(x, nan: float = 0.0, posinf=None, neginf=None):
    """NaN -> ``nan``, +inf -> ``posinf``, -inf -> ``neginf`` (by default the largest and the
    lowest finite values of the dtype), as ``torch.nan_to_num``. Integer and bool tensors are
    unchanged. The gradient is 0 where x is not finite."""
    x = operand(x, "nan_to_num")
    nan = _number(nan, "nan_to_num", "nan")
    posinf = _number(posinf, "nan_to_num", "posinf")
    neginf = _number(neginf, "nan_to_num", "neginf")
    if nan is None:
        nan = 0.0
    if dtypes.is_float(x.dtype):
        info = _finfo(x.dtype)
        posinf = float(info.max) if posinf is None else posinf
        neginf = float(info.min) if neginf is None else neginf
    return nan_to_num_op(x, nan=nan, posinf=posinf, neginf=neginf)


# -- lerp ------------------------------------------------------------------------------------------
def _lerp_infer(types, attrs):
    start, end, weight = types
    for what, t in (("input", start), ("end", end), ("weight", weight)):
        if not dtypes.is_float(t.dtype):
            raise DTypeError(f"lerp: expected a floating-point {what}, found {t.dtype} (as in "
                             "PyTorch, lerp is defined for floats only)")
    for what, t in (("end", end), ("weight", weight)):
        if t.dtype != start.dtype:
            raise DTypeError(f"lerp: expected dtype {start.dtype} for {what} (the input's), "
                             f"found {t.dtype}; cast it first")
    return [TensorType(broadcast_shapes(start.shape, end.shape, weight.shape, op="lerp"),
                       start.dtype)]


def _lerp_kernel(xp, a, b, w):
    # PyTorch's two-sided formula: exact at w == 0 and w == 1
    diff = b - a
    return xp.where(xp.abs(w) < 0.5, a + w * diff, b - diff * (1 - w))


def _lerp_vjp(cts, ins, outs, attrs, needs):
    g, (a, b, w) = cts[0], ins
    return [g * (1.0 - w) if needs[0] else None, g * w if needs[1] else None,
            g * (b - a) if needs[2] else None]


lerp_op = register(OpDef(
    "lerp", _lerp_infer, _lerp_kernel, _lerp_vjp,
    expr="(abs({2}) < 0.5 ? {0} + {2} * ({1} - {0}) : {1} - ({1} - {0}) * (1 - {2}))",
    elementwise=True, promote=True, attrs=Attrs()))


def lerp(input, end, weight):
    """input + weight * (end - input), as ``torch.lerp``: ``weight`` is a number or a float
    tensor; input, end (and a tensor weight) must have the same float dtype."""
    if isinstance(weight, (bool, np.bool_)) or not (
            isinstance(weight, (int, float, np.number)) or hasattr(weight, "dtype")):
        raise TypeError(located(f"lerp: weight must be a number or a tensor, found "
                                f"{type(weight).__name__}"))
    if isinstance(weight, (int, np.number)) and not isinstance(weight, float):
        weight = float(weight)
    return lerp_op(input, end, weight)


# -- xlogy -----------------------------------------------------------------------------------------
def _xlogy_kernel(xp, x, y):
    # PyTorch: NaN where y is NaN, else 0 where x == 0, else x * log(y)
    t = x.dtype.type
    safe = xp.where(x == 0, t(1), y)
    return xp.where(xp.isnan(y), y, xp.where(x == 0, t(0), x * xp.log(safe)))


def _xlogy_grad_x(g, x, y, out):
    # PyTorch: xlogy(g, y), and 0 where x == 0 and y <= 0
    return where(logical_and(x == 0, y <= 0), 0.0, xlogy(g, y))


xlogy_op = binary("xlogy", _xlogy_kernel, (_xlogy_grad_x, lambda g, x, y, out: g * x / y),
                  expr="(isnan({1}) ? {1} : ({0} == 0 ? 0 : {0} * log({1})))",
                  float_out=True)


def xlogy(input, other):
    """x * log(y), 0 where x == 0 (even where y is 0 or inf) and NaN where y is NaN, as
    ``torch.xlogy``; integers give float32."""
    return xlogy_op(input, other)


# -- shifts ----------------------------------------------------------------------------------------
_UNSIGNED = {"int8": "uint8", "int16": "uint16", "int32": "uint32", "int64": "uint64",
             "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}


def _shift_infer(name):
    def infer(types, attrs):
        a, b = types
        for t in (a, b):
            if dtypes.is_float(t.dtype):
                raise DTypeError(f"{name}: expected integer operands, found {t.dtype} (as in "
                                 "PyTorch, shifts are defined for integers only)")
        dt = dtypes.result_dtype(a.dtype, b.dtype)
        if dt == "bool":
            raise DTypeError(f"{name}: expected integer operands, found bool and bool")
        return [TensorType(broadcast_shapes(a.shape, b.shape, op=name), dt)]
    return infer


def _shift_prepare(xp, a, b):
    dt = dtypes.result_dtype(a.dtype.name, b.dtype.name)
    a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    return a, xp.where(ok, b, 0).astype(_UNSIGNED[dt]), ok, bits


def _lshift_kernel(xp, a, b):
    # PyTorch: shifts outside [0, bits) give 0; the bits of a negative value shift as
    # unsigned (two's complement)
    a, s, ok, bits = _shift_prepare(xp, a, b)
    u = xp.left_shift(a.view(_UNSIGNED[a.dtype.name]), s).view(a.dtype)
    return xp.where(ok, u, a.dtype.type(0))


def _rshift_kernel(xp, a, b):
    # PyTorch: arithmetic shift; shifts outside [0, bits) give the sign fill (-1 or 0 for
    # signed types, 0 for uint8)
    a, s, ok, bits = _shift_prepare(xp, a, b)
    shifted = xp.right_shift(a, s.astype(a.dtype))
    if a.dtype.kind == "u":
        fill = xp.zeros_like(shifted)
    else:
        fill = xp.right_shift(a, a.dtype.type(bits - 1))
    return xp.where(ok, shifted, fill)


bitwise_left_shift_op = register(OpDef(
    "bitwise_left_shift", _shift_infer("bitwise_left_shift"), _lshift_kernel,
    elementwise=True, promote=True, attrs=Attrs()))
bitwise_right_shift_op = register(OpDef(
    "bitwise_right_shift", _shift_infer("bitwise_right_shift"), _rshift_kernel,
    elementwise=True, promote=True, attrs=Attrs()))


def bitwise_left_shift(input, other):
    """``input << other`` on integers, as PyTorch: shifts of ``bits`` or more, or negative
    shifts, give 0."""
    return bitwise_left_shift_op(input, other)


def bitwise_right_shift(input, other):
    """``input >> other`` on integers (arithmetic), as PyTorch: shifts of ``bits`` or more,
    or negative shifts, give the sign fill (-1 for negative values, else 0)."""
    return bitwise_right_shift_op(input, other)
