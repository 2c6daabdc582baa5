"""Elementwise ops: definition, kernel and gradient side by side, then the public function."""
from __future__ import annotations

import math

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs
from ..batching import leading_batch_rule
from ..errors import DTypeError, located
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes
from ._common import binary, unary, unary_infer
from .creation import zeros_like

_SQRT2 = math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)
_GELU_C = math.sqrt(2.0 / math.pi)

NUMERIC = dtypes.NUMERIC_DTYPES

# -- unary -------------------------------------------------------------------------------------
COMPLEX = dtypes.COMPLEX_DTYPES


def _conj_kernel(xp, x):
    return xp.conj(x)


# the complex conjugate (PyTorch's convention makes it the gradient's companion: the vjp of
# a holomorphic f is g * conj(f'(z))); conj() of a real tensor is the tensor itself
conj_op = register(OpDef("conj", unary_infer(allowed=COMPLEX, name="conj"), _conj_kernel,
                         lambda cts, ins, outs, attrs, needs: [conj(cts[0])],
                         saves_no_data=True, complex_ok=True, attrs=Attrs(),
                         doc="the complex conjugate of a complex tensor", batch=leading_batch_rule))


def conj(x):
    """The complex conjugate, as ``torch.conj`` (a copy, not a lazy view): a real tensor is
    returned as it is."""
    return conj_op(x) if getattr(x, "dtype", None) in COMPLEX else x


def _abs_infer(types, attrs):
    (t,) = types
    if t.dtype not in NUMERIC and t.dtype not in COMPLEX:
        raise DTypeError(f"abs: expected a numeric tensor, found {t.dtype}")
    return [TensorType(t.shape, dtypes.real_of(t.dtype))]


def _abs_vjp(cts, ins, outs, attrs, needs):
    # PyTorch's abs_backward: g * sgn(x), sgn(z) = z / |z| (0 at 0) for complex z
    (g,), (x,), (y,) = cts, ins, outs
    if x.dtype in COMPLEX:
        return [g * where(y == 0, 0.0, x / where(y == 0, 1.0, y))]
    return [g * sign(x)]


neg_op = unary("neg", lambda xp, x: xp.negative(x), lambda g, x, y: -g, expr="(-{0})",
               allowed=NUMERIC + COMPLEX, saves_no_data=True, ufunc="negative",
               complex_ok=True)
abs_op = register(OpDef("abs", _abs_infer, lambda xp, x: xp.abs(x), _abs_vjp,
                        expr="abs({0})", elementwise=True, ufunc="absolute", complex_ok=True,
                        attrs=Attrs()))
exp_op = unary("exp", lambda xp, x: xp.exp(x), lambda g, x, y: g * conj(y), expr="exp({0})",
               float_out=True, vjp_reads_output=True, ufunc="exp", complex_ok=True)
log_op = unary("log", lambda xp, x: xp.log(x), lambda g, x, y: g / x, expr="log({0})",
               float_out=True, ufunc="log")
sqrt_op = unary("sqrt", lambda xp, x: xp.sqrt(x), lambda g, x, y: g * 0.5 / y,
                expr="sqrt({0})", float_out=True, vjp_reads_output=True, ufunc="sqrt")
# -0.5 * y**3, as PyTorch (not -0.5 * y / x: at -0.0 that has the wrong sign of infinity)
rsqrt_op = unary("rsqrt", lambda xp, x: xp.reciprocal(xp.sqrt(x)),
                 lambda g, x, y: g * -0.5 * (y * y * y), expr="(1 / sqrt({0}))",
                 float_out=True, vjp_reads_output=True)
square_op = unary("square", lambda xp, x: xp.multiply(x, x), lambda g, x, y: g * 2.0 * x,
                  expr="({0} * {0})", allowed=NUMERIC)
reciprocal_op = unary("reciprocal", lambda xp, x: xp.reciprocal(x), lambda g, x, y: -g * y * y,
                      expr="(1 / {0})", float_out=True, vjp_reads_output=True, ufunc="reciprocal")
sin_op = unary("sin", lambda xp, x: xp.sin(x), lambda g, x, y: g * cos(x), expr="sin({0})",
               float_out=True, ufunc="sin")
cos_op = unary("cos", lambda xp, x: xp.cos(x), lambda g, x, y: -g * sin(x), expr="cos({0})",
               float_out=True, ufunc="cos")
tanh_op = unary("tanh", lambda xp, x: xp.tanh(x), lambda g, x, y: tanh_backward(g, y),
                expr="tanh({0})", float_out=True, vjp_reads_output=True, ufunc="tanh")


def _sigmoid_kernel(xp, x):
    # split at 0 so that exp never overflows and the negative tail keeps its relative
    # precision (0.5 * (1 + tanh(x / 2)) rounds to 0 from x = -20 in float32):
    # 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, x.dtype.type(1), e) / (1 + e)


sigmoid_op = unary("sigmoid", _sigmoid_kernel, lambda g, x, y: sigmoid_backward(g, y),
                   expr="({0} >= 0 ? 1 / (1 + exp(-{0})) : exp({0}) / (1 + exp({0})))",
                   float_out=True, vjp_reads_output=True)
# PyTorch's threshold_backward: 0 where y <= 0, else g (so NaN passes g). y = max(x, 0) is
# never negative, so that is ``y != 0``: one comparison, in the where(mask, g, 0) form the
# backends' fast selections (a bit-mask where, the masked matmul epilogue) recognise.
relu_op = unary("relu", lambda xp, x: xp.maximum(x, 0), lambda g, x, y: where(y != 0, g, 0.0),
                expr="max({0}, 0)", allowed=NUMERIC, vjp_reads_output=True)
leaky_relu_op = unary(
    "leaky_relu",
    lambda xp, x, negative_slope: xp.where(x > 0, x, x * negative_slope),
    lambda g, x, y, negative_slope: where(x > 0, g, g * negative_slope),
    expr="({0} > 0 ? {0} : {0} * {negative_slope})", float_out=True,
    attrs=Attrs(negative_slope=Attr("number")))


def _gelu_kernel(xp, x, approximate):
    if approximate == "tanh":
        inner = _GELU_C * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + xp.tanh(inner))
    return 0.5 * x * (1.0 + xpu.erf(xp, x / _SQRT2))


def _gelu_vjp(g, x, y, approximate):
    if approximate == "tanh":
        t = tanh(_GELU_C * (x + 0.044715 * x * x * x))
        dinner = _GELU_C * (1.0 + 3 * 0.044715 * x * x)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner)
    cdf = 0.5 * (1.0 + erf(x * (1.0 / _SQRT2)))
    pdf = exp(-0.5 * x * x) * _INV_SQRT2PI
    return g * (cdf + x * pdf)


gelu_op = unary("gelu", _gelu_kernel, _gelu_vjp, float_out=True,
                expr="gelu_{approximate}({0})",
                attrs=Attrs(approximate=Attr(str, choices=("none", "tanh"))))


def _softplus_kernel(xp, x, beta, threshold):
    bx = x * beta
    # log1p(exp(bx)) computed stably: max(bx, 0) + log1p(exp(-|bx|)).
    soft = (xp.maximum(bx, 0) + xp.log1p(xp.exp(-xp.abs(bx)))) / beta
    return xp.where(bx > threshold, x, soft)


softplus_op = unary(
    "softplus", _softplus_kernel,
    lambda g, x, y, beta, threshold: where(x * beta > threshold, g, g * sigmoid(x * beta)),
    float_out=True,
    attrs=Attrs(beta=Attr(float), threshold=Attr(float)))
erf_op = unary("erf", lambda xp, x: xpu.erf(xp, x),
               lambda g, x, y: g * _TWO_OVER_SQRTPI * exp(-(x * x)), expr="erf({0})",
               float_out=True)
def _sign_kernel(xp, x):
    s = xp.sign(x)
    # PyTorch's sign of NaN is 0 ((0 < x) - (x < 0)), numpy's NaN
    return xp.where(s == s, s, s.dtype.type(0)) if s.dtype.kind == "f" else s


# sign is piecewise constant: its gradient is 0 (None: nothing flows back), as in PyTorch,
# so rules built on it (abs) have second derivatives. sign(NaN) is 0, as PyTorch's, so that
# abs'(NaN) = 0 too.
sign_op = unary("sign", _sign_kernel, lambda g, x, y: None,
                expr="({0} > 0 ? 1 : ({0} < 0 ? -1 : 0))", allowed=NUMERIC)
# -- more math (PyTorch's names, gradients and integer-to-float32 promotion) -----------------
_LN2, _LN10 = math.log(2.0), math.log(10.0)
tan_op = unary("tan", lambda xp, x: xp.tan(x), lambda g, x, y: g * (1.0 + y * y),
               expr="tan({0})", float_out=True, vjp_reads_output=True, ufunc="tan")
asin_op = unary("asin", lambda xp, x: xp.arcsin(x), lambda g, x, y: g * rsqrt(1.0 - x * x),
                expr="asin({0})", float_out=True, ufunc="arcsin")
acos_op = unary("acos", lambda xp, x: xp.arccos(x), lambda g, x, y: -g * rsqrt(1.0 - x * x),
                expr="acos({0})", float_out=True, ufunc="arccos")
atan_op = unary("atan", lambda xp, x: xp.arctan(x), lambda g, x, y: g / (1.0 + x * x),
                expr="atan({0})", float_out=True, ufunc="arctan")
sinh_op = unary("sinh", lambda xp, x: xp.sinh(x), lambda g, x, y: g * cosh(x),
                expr="sinh({0})", float_out=True, ufunc="sinh")
cosh_op = unary("cosh", lambda xp, x: xp.cosh(x), lambda g, x, y: g * sinh(x),
                expr="cosh({0})", float_out=True, ufunc="cosh")
asinh_op = unary("asinh", lambda xp, x: xp.arcsinh(x), lambda g, x, y: g * rsqrt(x * x + 1.0),
                 expr="asinh({0})", float_out=True, ufunc="arcsinh")
# x * x - 1, as PyTorch: +inf (not -inf) at x = -1
acosh_op = unary("acosh", lambda xp, x: xp.arccosh(x),
                 lambda g, x, y: g * rsqrt(x * x - 1.0), expr="acosh({0})",
                 float_out=True, ufunc="arccosh")
atanh_op = unary("atanh", lambda xp, x: xp.arctanh(x), lambda g, x, y: g / (1.0 - x * x),
                 expr="atanh({0})", float_out=True, ufunc="arctanh")
log1p_op = unary("log1p", lambda xp, x: xp.log1p(x), lambda g, x, y: g / (1.0 + x),
                 expr="log1p({0})", float_out=True, ufunc="log1p")
expm1_op = unary("expm1", lambda xp, x: xp.expm1(x), lambda g, x, y: g * (y + 1.0),
                 expr="expm1({0})", float_out=True, vjp_reads_output=True, ufunc="expm1")
log2_op = unary("log2", lambda xp, x: xp.log2(x), lambda g, x, y: g / (x * _LN2),
                expr="log2({0})", float_out=True, ufunc="log2")
log10_op = unary("log10", lambda xp, x: xp.log10(x), lambda g, x, y: g / (x * _LN10),
                 expr="log10({0})", float_out=True, ufunc="log10")
exp2_op = unary("exp2", lambda xp, x: xp.exp2(x), lambda g, x, y: g * y * _LN2,
                expr="exp2({0})", float_out=True, vjp_reads_output=True, ufunc="exp2")
# rounding keeps the dtype (integers pass through) and has a zero gradient (zeros, as
# PyTorch gives, not "no gradient")
def _zero_grad(g, x, y):
    return zeros_like(g)


floor_op = unary("floor", lambda xp, x: xp.floor(x) if x.dtype.kind == "f" else x.copy(),
                 _zero_grad, expr="floor({0})", allowed=NUMERIC, saves_no_data=True)
ceil_op = unary("ceil", lambda xp, x: xp.ceil(x) if x.dtype.kind == "f" else x.copy(),
                _zero_grad, expr="ceil({0})", allowed=NUMERIC, saves_no_data=True)
trunc_op = unary("trunc", lambda xp, x: xp.trunc(x) if x.dtype.kind == "f" else x.copy(),
                 _zero_grad, expr="trunc({0})", allowed=NUMERIC, saves_no_data=True)
frac_op = unary("frac", lambda xp, x: x - xp.trunc(x), lambda g, x, y: g,
                expr="({0} - trunc({0}))", allowed=dtypes.FLOAT_DTYPES)
isnan_op = unary("isnan", lambda xp, x: xp.isnan(x), None, out_dtype="bool",
                 expr="isnan({0})", ufunc="isnan")
isinf_op = unary("isinf", lambda xp, x: xp.isinf(x), None, out_dtype="bool",
                 expr="isinf({0})", ufunc="isinf")
isfinite_op = unary("isfinite", lambda xp, x: xp.isfinite(x), None, out_dtype="bool",
                    expr="isfinite({0})", ufunc="isfinite")
logical_not_op = unary("logical_not", lambda xp, x: xp.logical_not(x), None, out_dtype="bool",
                       expr="(!{0})", ufunc="logical_not")


def _clamp_dtype(dtype: str, min, max) -> str:
    """The bounds are Python numbers and promote weakly, as binary ops' operands do: an
    integer tensor clamped to float bounds gives the default float (as in PyTorch)."""
    for bound in (min, max):
        if bound is not None:
            dtype = dtypes.weak_result_dtype(dtype, bound)
    return dtype


_clamp_check = unary_infer(allowed=NUMERIC, name="clamp")


def _clamp_infer(types, attrs):
    (t,) = _clamp_check(types, attrs)
    return [t.with_dtype(_clamp_dtype(t.dtype, attrs["min"], attrs["max"]))]


def _clamp_kernel(xp, x, min, max):
    dt = _clamp_dtype(x.dtype.name, min, max)
    if x.dtype.name != dt:
        x = x.astype(dt)
    if min is not None and max is not None:
        return xp.clip(x, min, max)
    if min is not None:
        return xp.maximum(x, min)
    return xp.minimum(x, max)


def _clamp_vjp(cts, ins, outs, attrs, needs):
    (g,), (x,), min, max = cts, ins, attrs["min"], attrs["max"]
    keep = None
    if min is not None:
        keep = x >= min
    if max is not None:
        keep = (x <= max) if keep is None else logical_and(keep, x <= max)
    return [where(keep, g, 0.0)]


clamp_op = register(OpDef("clamp", _clamp_infer, _clamp_kernel, _clamp_vjp, elementwise=True,
                          attrs=Attrs(min=Attr("number", default=None),
                                      max=Attr("number", default=None))))


class NegativeIntegerPowerError(DTypeError, RuntimeError):
    """An integer tensor raised to a negative integer power (PyTorch raises a RuntimeError
    there, so this is both a DTypeError and a RuntimeError)."""


def _pow_scalar_dtype(dtype: str, exponent) -> str:
    """Weak-scalar promotion; integers to a negative integer power are refused, as in
    PyTorch (``x.float() ** -2`` or ``x ** -2.0`` give floats)."""
    dt = dtypes.weak_result_dtype(dtype, exponent)
    if not dtypes.is_float(dt) and exponent < 0:
        raise NegativeIntegerPowerError(
            f"pow: integers to negative integer powers are not allowed (as in PyTorch): "
            f"found a {dtype} tensor ** {exponent}; use a float exponent ({exponent}.0) or "
            f"cast the tensor to a float dtype first")
    return dt


def _pow_scalar_infer(types, attrs):
    (t,) = types
    return [TensorType(t.shape, _pow_scalar_dtype(t.dtype, attrs["exponent"]))]


def _pow_scalar_kernel(xp, x, exponent):
    dt = _pow_scalar_dtype(x.dtype.name, exponent)
    x = x if x.dtype.name == dt else x.astype(dt)
    # PyTorch computes x ** 0.5 as sqrt(x) and x ** -0.5 as rsqrt(x): NaN at -inf (C's pow
    # gives inf, 0) and -0.0 / -inf at -0.0 (pow: 0.0 / inf); the gradient follows
    if exponent == 0.5:
        return xp.sqrt(x)
    if exponent == -0.5:
        return xp.reciprocal(xp.sqrt(x))
    return xp.power(x, exponent)


def _pow_scalar_vjp(cts, ins, outs, attrs, needs):
    e = attrs["exponent"]
    (g,), (x,) = cts, ins
    if e == 0:     # x ** 0 == 1: a zero gradient (not "no gradient"), as PyTorch gives
        return [zeros_like(g)]
    if e == 1:
        return [g]
    if e == 2:
        return [g * 2.0 * x]
    return [g * e * pow(x, e - 1)]


pow_scalar_op = register(OpDef("pow_scalar", _pow_scalar_infer, _pow_scalar_kernel,
                               _pow_scalar_vjp,
                               expr="({exponent} == 0.5 ? sqrt({0}) : ({exponent} == -0.5 ? "
                                    "1 / sqrt({0}) : pow({0}, {exponent})))", elementwise=True,
                               attrs=Attrs(exponent=Attr("number"))))


def _cast_infer(types, attrs):
    return [TensorType(types[0].shape, attrs["dtype"])]


def _same_dtype(node) -> bool:
    """A cast to the input's own dtype returns the input itself (``astype(copy=False)``)."""
    return node.inputs[0].dtype == node.outputs[0].dtype


def _cast_kernel(xp, x, dtype):
    if x.dtype.kind == "c" and dtype not in COMPLEX:
        x = x.real
    if dtype == "float8_e4m3fn" and dtypes.is_float_array(x):
        # PyTorch's .to(float8_e4m3fn) saturates: +-inf and out-of-range values become
        # +-448 (ml_dtypes would give NaN); NaN stays NaN
        x = xp.clip(x, -448.0, 448.0)
    return x.astype(dtype, copy=False)


cast_op = register(OpDef("cast", _cast_infer, _cast_kernel,
                         lambda cts, ins, outs, attrs, needs: [cts[0]],
                         expr="(({dtype}){0})", elementwise=True, saves_no_data=True,
                         returns_input=_same_dtype, cheap=True, complex_ok=True,
                         storage_ok=True, attrs=Attrs(dtype=Attr("dtype"))))

# -- binary ------------------------------------------------------------------------------------
add_op = binary("add", lambda xp, a, b: xp.add(a, b),
                (lambda g, a, b, y: g, lambda g, a, b, y: g), expr="({0} + {1})",
                saves_no_data=True, ufunc="add", complex_ok=True)
sub_op = binary("sub", lambda xp, a, b: xp.subtract(a, b),
                (lambda g, a, b, y: g, lambda g, a, b, y: -g), expr="({0} - {1})",
                bool_ok=False, saves_no_data=True, ufunc="subtract", complex_ok=True)
mul_op = binary("mul", lambda xp, a, b: xp.multiply(a, b),
                (lambda g, a, b, y: g * conj(b), lambda g, a, b, y: g * conj(a)),
                expr="({0} * {1})", ufunc="multiply", complex_ok=True)
div_op = binary("div", lambda xp, a, b: xp.true_divide(a, b),
                (lambda g, a, b, y: g / conj(b), lambda g, a, b, y: -g * conj(y / b)),
                expr="({0} / {1})", float_out=True, vjp_reads_output=True, ufunc="true_divide",
                complex_ok=True)

# The gradients of tanh and sigmoid as one op each (PyTorch's aten ``tanh_backward`` and
# ``sigmoid_backward``): their vjp rules run one kernel instead of three ops, and the ops'
# own vjps keep higher-order gradients. ``grad`` is the output's cotangent, ``y`` the output.
tanh_backward_op = binary(
    "tanh_backward", lambda xp, g, y: g * (1 - y * y),
    (lambda c, g, y, out: tanh_backward(c, y), lambda c, g, y, out: c * g * y * -2.0),
    expr="({0} * (1 - {1} * {1}))", float_out=True)
sigmoid_backward_op = binary(
    "sigmoid_backward", lambda xp, g, y: g * y * (1 - y),
    (lambda c, g, y, out: sigmoid_backward(c, y),
     lambda c, g, y, out: c * g * (1.0 - 2.0 * y)),
    expr="({0} * {1} * (1 - {1}))", float_out=True)


def tanh_backward(grad, y):
    """``grad * (1 - y * y)``: the gradient of ``tanh`` at the input whose tanh is ``y``, for
    the output cotangent ``grad`` (PyTorch's ``aten.tanh_backward``), as one op."""
    return tanh_backward_op(grad, y)


def sigmoid_backward(grad, y):
    """``grad * y * (1 - y)``: the gradient of ``sigmoid`` at the input whose sigmoid is
    ``y``, for the output cotangent ``grad`` (PyTorch's ``aten.sigmoid_backward``), as one
    op."""
    return sigmoid_backward_op(grad, y)


def _pow_grad_base(g, a, b, y):
    """d/da a**b = b * a**(b-1), and 0 where b == 0 (so 0**0 gives 0, as PyTorch)."""
    return where(b == 0, 0.0, g * b * pow(a, b - 1.0))


def _pow_grad_exponent(g, a, b, y):
    """d/db a**b = a**b * log(a), as PyTorch: 0 where a == 0 and b >= 0; NaN for a < 0
    (log of a negative base); -inf/inf for 0 ** negative (inf * log 0)."""
    log_a = where(a > 0, log(where(a > 0, a, 1.0)), where(a == 0, -math.inf, math.nan))
    # the 0 is selected before g multiplies in: an infinite g gives NaN there, as PyTorch's
    return g * where(logical_and(a == 0, b >= 0), 0.0, y * log_a)


pow_op = binary("pow", lambda xp, a, b: xp.power(a, b),
                (_pow_grad_base, _pow_grad_exponent), expr="pow({0}, {1})",
                vjp_reads_output=True, ufunc="power")


def _winner(g, mine, theirs, loses):
    """PyTorch's rule: ``g / 2`` where the operands tie, 0 where ``mine`` loses, else ``g``
    (so a NaN on either side passes ``g`` to both). Selections, not 0/1 masks multiplied in:
    an infinite ``g`` gives 0, not NaN, where ``mine`` loses."""
    return where(mine == theirs, g * 0.5, where(loses(mine, theirs), 0.0, g))


maximum_op = binary("maximum", lambda xp, a, b: xp.maximum(a, b),
                    (lambda g, a, b, y: _winner(g, a, b, lt),
                     lambda g, a, b, y: _winner(g, b, a, lt)), expr="max({0}, {1})",
                    ufunc="maximum")
minimum_op = binary("minimum", lambda xp, a, b: xp.minimum(a, b),
                    (lambda g, a, b, y: _winner(g, a, b, gt),
                     lambda g, a, b, y: _winner(g, b, a, gt)), expr="min({0}, {1})",
                    ufunc="minimum")

eq_op = binary("eq", lambda xp, a, b: xp.equal(a, b), out_dtype="bool", expr="({0} == {1})",
               complex_ok=True,
               ufunc="equal", compare="==")
ne_op = binary("ne", lambda xp, a, b: xp.not_equal(a, b), out_dtype="bool", expr="({0} != {1})",
               complex_ok=True,
               ufunc="not_equal", compare="!=")
lt_op = binary("lt", lambda xp, a, b: xp.less(a, b), out_dtype="bool", expr="({0} < {1})",
               ufunc="less", compare="<")
le_op = binary("le", lambda xp, a, b: xp.less_equal(a, b), out_dtype="bool",
               expr="({0} <= {1})", ufunc="less_equal", compare="<=")
gt_op = binary("gt", lambda xp, a, b: xp.greater(a, b), out_dtype="bool", expr="({0} > {1})",
               ufunc="greater", compare=">")
ge_op = binary("ge", lambda xp, a, b: xp.greater_equal(a, b), out_dtype="bool",
               expr="({0} >= {1})", ufunc="greater_equal", compare=">=")
logical_and_op = binary("logical_and", lambda xp, a, b: xp.logical_and(a, b), out_dtype="bool",
                        expr="({0} && {1})", ufunc="logical_and")
logical_or_op = binary("logical_or", lambda xp, a, b: xp.logical_or(a, b), out_dtype="bool",
                       expr="({0} || {1})", ufunc="logical_or")
# Division's relatives, with PyTorch's sign conventions: remainder takes the divisor's sign
# (Python's %), fmod the dividend's (C's); floor_divide rounds down (Python's //).
remainder_op = binary("remainder", lambda xp, a, b: xp.remainder(a, b),
                      (lambda g, a, b, y: g,
                       lambda g, a, b, y: -g * floor_divide(a, b)),
                      expr="remainder({0}, {1})", bool_ok=False, ufunc="remainder")
fmod_op = binary("fmod", lambda xp, a, b: xp.fmod(a, b),
                 (lambda g, a, b, y: g, lambda g, a, b, y: -g * trunc(div(a, b))),
                 expr="fmod({0}, {1})", bool_ok=False, ufunc="fmod")
# a zero gradient, as PyTorch's div(rounding_mode="floor") (and so remainder's rule, which
# reads it, keeps second derivatives)
floor_divide_op = binary("floor_divide", lambda xp, a, b: xp.floor_divide(a, b),
                         (lambda g, a, b, y: _zero_grad(g, a, y),
                          lambda g, a, b, y: _zero_grad(g, b, y)),
                         expr="floor_divide({0}, {1})", bool_ok=False, saves_no_data=True,
                         ufunc="floor_divide")
def _atan2_recip(a, b):
    """1 / (a * a + b * b), and 0 where that sum is 0 (PyTorch's atan2_backward: so the
    gradient at (0, 0) is 0, not 0 * inf)."""
    d = a * a + b * b
    nonzero = d != 0
    return where(nonzero, reciprocal(where(nonzero, d, 1.0)), 0.0)


atan2_op = binary("atan2", lambda xp, a, b: xp.arctan2(a, b),
                  (lambda g, a, b, y: g * b * _atan2_recip(a, b),
                   lambda g, a, b, y: g * -a * _atan2_recip(a, b)),
                  expr="atan2({0}, {1})", float_out=True, ufunc="arctan2")
hypot_op = binary("hypot", lambda xp, a, b: xp.hypot(a, b),
                  (lambda g, a, b, y: g * a / y, lambda g, a, b, y: g * b / y),
                  expr="hypot({0}, {1})", float_out=True, vjp_reads_output=True, ufunc="hypot")
logical_xor_op = binary("logical_xor", lambda xp, a, b: xp.logical_xor(a, b),
                        out_dtype="bool", expr="(({0} != 0) != ({1} != 0))", ufunc="logical_xor")
# Bitwise on integers, logical on bools (as PyTorch's &, |, ^, ~); floats are refused.
bitwise_and_op = binary("bitwise_and", lambda xp, a, b: xp.bitwise_and(a, b),
                        expr="({0} & {1})", allowed_kinds="bi", ufunc="bitwise_and")
bitwise_or_op = binary("bitwise_or", lambda xp, a, b: xp.bitwise_or(a, b),
                       expr="({0} | {1})", allowed_kinds="bi", ufunc="bitwise_or")
bitwise_xor_op = binary("bitwise_xor", lambda xp, a, b: xp.bitwise_xor(a, b),
                        expr="({0} ^ {1})", allowed_kinds="bi", ufunc="bitwise_xor")
bitwise_not_op = unary("bitwise_not", lambda xp, x: xp.invert(x), None, expr="(~{0})",
                       allowed=("bool",) + dtypes.INT_DTYPES, ufunc="invert")


def _where_infer(types, attrs):
    c, a, b = types
    if c.dtype != "bool":
        raise DTypeError(f"where: expected a bool condition, found {c.dtype}")
    shape = broadcast_shapes(c.shape, a.shape, b.shape, op="where")
    return [TensorType(shape, dtypes.result_dtype(a.dtype, b.dtype))]


def _where_vjp(cts, ins, outs, attrs, needs):
    g, c = cts[0], ins[0]
    return [None, where(c, g, 0.0) if needs[1] else None,
            where(c, 0.0, g) if needs[2] else None]


def _where_kernel(xp, c, a, b):
    if a.dtype != b.dtype:
        dt = dtypes.result_dtype(a.dtype.name, b.dtype.name)
        a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    return xp.where(c, a, b)


where_op = register(OpDef("where", _where_infer, _where_kernel,
                          _where_vjp, expr="({0} ? {1} : {2})", elementwise=True,
                          promote=(1, 2), nondiff_inputs=(0,),
                          complex_ok=True, attrs=Attrs()))


# -- public functions --------------------------------------------------------------------------
def neg(x):
    """``-x``, elementwise. Keeps the input's dtype; bool is refused. ``negative`` is an alias."""
    return neg_op(x)


def abs(x):
    """The absolute value ``|x|``, elementwise. Keeps the input's dtype; bool is refused.
    ``absolute`` is an alias."""
    return abs_op(x)


def exp(x):
    """The exponential ``e ** x``, elementwise. Integer and bool inputs give float32, as in
    PyTorch."""
    return exp_op(x)


def log(x):
    """The natural logarithm, elementwise (-inf at 0, NaN below). Integer and bool inputs give
    float32, as in PyTorch."""
    return log_op(x)


def sqrt(x):
    """The square root, elementwise (NaN below 0). Integer and bool inputs give float32, as in
    PyTorch."""
    return sqrt_op(x)


def rsqrt(x):
    """``1 / sqrt(x)``, elementwise. Integer and bool inputs give float32, as in PyTorch."""
    return rsqrt_op(x)


def square(x):
    """``x * x``, elementwise. Keeps the input's dtype; bool is refused."""
    return square_op(x)


def reciprocal(x):
    """1 / x (integers give the default float dtype)."""
    return reciprocal_op(x)


def sin(x):
    """The sine of ``x`` (radians), elementwise. Integer and bool inputs give float32, as in
    PyTorch."""
    return sin_op(x)


def cos(x):
    """The cosine of ``x`` (radians), elementwise. Integer and bool inputs give float32, as in
    PyTorch."""
    return cos_op(x)


def tanh(x):
    """The hyperbolic tangent, elementwise. Integer and bool inputs give float32, as in PyTorch."""
    return tanh_op(x)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow and keeping both tails (as PyTorch)."""
    return sigmoid_op(x)


def relu(x):
    """``max(x, 0)``, elementwise. Keeps the input's dtype; bool is refused."""
    return relu_op(x)


def leaky_relu(x, negative_slope: float = 0.01):
    """x where x > 0, else negative_slope * x."""
    return leaky_relu_op(x, negative_slope=negative_slope)   # the schema checks the type


def gelu(x, approximate: str = "none"):
    """Gaussian error linear unit: exact (erf) by default, or approximate="tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(located(f"gelu: approximate must be 'none' or 'tanh', found "
                                 f"{approximate!r}"))
    return gelu_op(x, approximate=approximate)


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta * x)) / beta, linear where beta * x > threshold (as PyTorch)."""
    return softplus_op(x, beta=beta, threshold=threshold)   # the schema checks the types


def erf(x):
    """The error function, elementwise. Integer and bool inputs give float32, as in PyTorch."""
    return erf_op(x)


def sign(x):
    """-1, 0 or 1 (0 for NaN, as PyTorch gives; its gradient is 0)."""
    return sign_op(x)


def logical_not(x):
    """Elementwise not, as bool (nonzero counts as True)."""
    return logical_not_op(x)


def bitwise_not(x):
    """``~x``: bitwise not of an integer tensor, logical not of a bool tensor."""
    return bitwise_not_op(x)


def bitwise_and(a, b):
    """``a & b``: bitwise and of integers, logical and of bools (floats are refused)."""
    return bitwise_and_op(a, b)


def bitwise_or(a, b):
    """``a | b``: bitwise or of integers, logical or of bools (floats are refused)."""
    return bitwise_or_op(a, b)


def bitwise_xor(a, b):
    """``a ^ b``: bitwise exclusive or of integers, logical xor of bools."""
    return bitwise_xor_op(a, b)


def _scalar_attr(v, name):
    if v is None:
        return None
    if hasattr(v, "shape") and not isinstance(v, (int, float)):
        raise TypeError(located(f"clamp: {name} must be a Python number, found "
                                f"{type(v).__name__}; use dg.minimum/dg.maximum for tensor "
                                "bounds"))
    return float(v) if isinstance(v, float) else v


def clamp(x, min=None, max=None):
    """Clamp every element into [min, max] (either bound may be None)."""
    if min is None and max is None:
        raise ValueError(located("clamp: at least one of min and max must be given"))
    return clamp_op(x, min=_scalar_attr(min, "min"), max=_scalar_attr(max, "max"))


clip = clamp


def pow(x, exponent):
    """x ** exponent; a Python number exponent becomes an attribute (``pow_scalar``)."""
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and (
            hasattr(x, "dtype") and not isinstance(x, (int, float))):
        return pow_scalar_op(x, exponent=exponent)
    return pow_op(x, exponent)


def cast(x, dtype):
    """Convert to ``dtype`` (numpy casting: floats to ints truncate toward zero)."""
    try:
        dtype = dtypes.as_dtype(dtype)
    except TypeError as e:
        raise TypeError(f"cast: {e}") from None
    return cast_op(x, dtype=dtype)


def add(a, b, *, alpha=1):
    """a + b, broadcast (Python numbers are weak scalars); ``alpha`` scales ``b`` first
    (``a + alpha * b``), as ``torch.add``."""
    if alpha != 1:
        b = mul_op(b, alpha)
    return add_op(a, b)


def sub(a, b, *, alpha=1):
    """a - b, broadcast (two bool tensors are refused, as in PyTorch); ``alpha`` scales
    ``b`` first (``a - alpha * b``), as ``torch.sub``."""
    if alpha != 1:
        b = mul_op(b, alpha)
    return sub_op(a, b)


def mul(a, b):
    """``a * b``, broadcast; the dtype follows PyTorch's promotion (Python numbers are weak
    scalars). ``multiply`` is an alias."""
    return mul_op(a, b)


def div(a, b, *, rounding_mode=None):
    """True division (integer operands give the default float dtype); ``rounding_mode``
    "floor" rounds the quotient down (``//``), "trunc" toward zero, as ``torch.div``."""
    if rounding_mode is None:
        return div_op(a, b)
    if rounding_mode == "floor":
        return floor_divide_op(a, b)
    if rounding_mode == "trunc":
        q = floor_divide_op(a, b)
        r = remainder_op(a, b)
        # floor and trunc differ where the remainder is nonzero and the signs differ
        fix = logical_and(r != 0, logical_xor(a < 0, b < 0))
        return where(fix, q + 1, q)
    raise ValueError(located(f"div: expected rounding_mode None, 'trunc' or 'floor', found "
                             f"{rounding_mode!r}"))


def remainder(a, b):
    """a - floor(a / b) * b: the result has the divisor's sign (Python's ``%``)."""
    return remainder_op(a, b)


def fmod(a, b):
    """a - trunc(a / b) * b: the result has the dividend's sign (C's fmod)."""
    return fmod_op(a, b)


def floor_divide(a, b):
    """floor(a / b), as ``//`` (integers stay integers)."""
    return floor_divide_op(a, b)


def atan2(a, b):
    """The angle of the point (b, a), in (-pi, pi]."""
    return atan2_op(a, b)


arctan2 = atan2


def hypot(a, b):
    """sqrt(a**2 + b**2) without overflow."""
    return hypot_op(a, b)


def logical_xor(a, b):
    """Elementwise exclusive or, as bool (nonzero counts as True)."""
    return logical_xor_op(a, b)


def maximum(a, b):
    """Elementwise maximum; ties share the gradient."""
    return maximum_op(a, b)


def minimum(a, b):
    """Elementwise minimum; ties share the gradient."""
    return minimum_op(a, b)


def eq(a, b):
    """``a == b``, elementwise. Broadcast; the result is a bool tensor."""
    return eq_op(a, b)


def ne(a, b):
    """``a != b``, elementwise. Broadcast; the result is a bool tensor."""
    return ne_op(a, b)


def lt(a, b):
    """``a < b``, elementwise. Broadcast; the result is a bool tensor."""
    return lt_op(a, b)


def le(a, b):
    """``a <= b``, elementwise. Broadcast; the result is a bool tensor."""
    return le_op(a, b)


def gt(a, b):
    """``a > b``, elementwise. Broadcast; the result is a bool tensor."""
    return gt_op(a, b)


def ge(a, b):
    """``a >= b``, elementwise. Broadcast; the result is a bool tensor."""
    return ge_op(a, b)


def logical_and(a, b):
    """Elementwise logical and, as bool (nonzero counts as True). Broadcast."""
    return logical_and_op(a, b)


def logical_or(a, b):
    """Elementwise logical or, as bool (nonzero counts as True). Broadcast."""
    return logical_or_op(a, b)


def where(condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (broadcast together)."""
    return where_op(condition, a, b)


def _unary_function(op, doc: str):
    def fn(x):
        return op(x)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = doc
    return fn


tan = _unary_function(tan_op, "Tangent, elementwise.")
asin = _unary_function(asin_op, "Arcsine, elementwise (NaN outside [-1, 1]).")
acos = _unary_function(acos_op, "Arccosine, elementwise (NaN outside [-1, 1]).")
atan = _unary_function(atan_op, "Arctangent, elementwise.")
sinh = _unary_function(sinh_op, "Hyperbolic sine, elementwise.")
cosh = _unary_function(cosh_op, "Hyperbolic cosine, elementwise.")
asinh = _unary_function(asinh_op, "Inverse hyperbolic sine, elementwise.")
acosh = _unary_function(acosh_op, "Inverse hyperbolic cosine, elementwise (NaN below 1).")
atanh = _unary_function(atanh_op, "Inverse hyperbolic tangent, elementwise.")
log1p = _unary_function(log1p_op, "log(1 + x), accurate for small x.")
expm1 = _unary_function(expm1_op, "exp(x) - 1, accurate for small x.")
log2 = _unary_function(log2_op, "Base-2 logarithm, elementwise.")
log10 = _unary_function(log10_op, "Base-10 logarithm, elementwise.")
exp2 = _unary_function(exp2_op, "2 ** x, elementwise.")
floor = _unary_function(floor_op, "Round down (integers unchanged); gradient 0.")
ceil = _unary_function(ceil_op, "Round up (integers unchanged); gradient 0.")
trunc = _unary_function(trunc_op, "Round toward zero (integers unchanged); gradient 0.")
fix = trunc
frac = _unary_function(frac_op, "x - trunc(x) (floating point only).")
isnan = _unary_function(isnan_op, "True where x is NaN.")
isinf = _unary_function(isinf_op, "True where x is +inf or -inf.")
isfinite = _unary_function(isfinite_op, "True where x is neither NaN nor infinite.")
arcsin, arccos, arctan = asin, acos, atan
arcsinh, arccosh, arctanh = asinh, acosh, atanh


# -- logsigmoid ----------------------------------------------------------------------------------
def _logsigmoid_kernel(xp, x):
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow, no log(0)
    return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))


logsigmoid_op = unary("logsigmoid", _logsigmoid_kernel,
                      lambda g, x, y: g * sigmoid(-x), float_out=True,
                      expr="(min({0}, 0) - log1p(exp(-abs({0}))))")


def logsigmoid(x):
    """log(sigmoid(x)), computed stably (as ``torch.nn.functional.logsigmoid``); its
    gradient is sigmoid(-x)."""
    return logsigmoid_op(x)
