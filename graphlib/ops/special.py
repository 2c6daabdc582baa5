"""PyTorch's special and number-theoretic elementwise functions (``erfc``, ``erfinv``,
``lgamma``, ``digamma``, ``polygamma``, ``i0``, ``sinc``, ``logit``, ``deg2rad``,
``heaviside``, ``fmax``/``fmin``, ``gcd``/``lcm``, ``ldexp``, ``nextafter``, ``logaddexp2``,
``signbit``, ``isposinf``/``isneginf``...), with PyTorch's dtypes (integers give float32),
refusals and gradients. The special functions' kernels are the array module's
``scipy.special`` ones (``xp.special``); the rest are written with other ops.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs
from ..errors import DTypeError, composite, located
from ._common import binary, operand, unary
from .creation import constant
from .elementwise import (cast, exp, exp2, isinf, isnan, log, log2, logical_and,
                          logical_or, lt, gt, maximum, sin, where, isfinite, ge)
from .nn import stop_gradient

_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)
_SQRTPI_OVER_TWO = math.sqrt(math.pi) / 2.0


def _special_kernel(name: str, *leading):
    """``xp.special.<name>(*leading, x)`` in ``x``'s dtype (half precision computed in
    float32, as scipy has no half loops)."""
    def kernel(xp, x, **attrs):
        args = [attrs[a] for a in leading]
        work = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        return xp.asarray(xpu.special(xp, name)(*args, work)).astype(x.dtype, copy=False)
    return kernel


erfc_op = unary("erfc", _special_kernel("erfc"),
                lambda g, x, y: -g * _TWO_OVER_SQRTPI * exp(-(x * x)), float_out=True)
erfinv_op = unary("erfinv", _special_kernel("erfinv"),
                  lambda g, x, y: g * _SQRTPI_OVER_TWO * exp(y * y), float_out=True,
                  vjp_reads_output=True)
polygamma_op = unary("polygamma", _special_kernel("polygamma", "n"),
                     lambda g, x, y, n: g * polygamma_op(x, n=n + 1), float_out=True,
                     attrs=Attrs(n=Attr(int)))
digamma_op = unary("digamma", _special_kernel("psi"),
                   lambda g, x, y: g * polygamma_op(x, n=1), float_out=True)
lgamma_op = unary("lgamma", _special_kernel("gammaln"),
                  lambda g, x, y: g * digamma_op(x), float_out=True)


def _i1_grad(g, x, y):
    # I1'(x) = I0(x) - I1(x) / x, which is 1/2 at 0
    at_zero = x == 0
    safe = where(at_zero, 1.0, x)
    return g * where(at_zero, 0.5, i0_op(x) - i1_op(x) / safe)


i1_op = unary("i1", _special_kernel("i1"), _i1_grad, float_out=True)
i0_op = unary("i0", _special_kernel("i0"), lambda g, x, y: g * i1_op(x), float_out=True)
signbit_op = unary("signbit", lambda xp, x: xp.signbit(x), None, out_dtype="bool",
                   ufunc="signbit")


def erfc(input):
    """``erfc(input) -> Tensor``: the complementary error function ``1 - erf(x)``, accurate
    where ``erf(x)`` is near 1, as ``torch.erfc`` (integers give float32)."""
    return erfc_op(input)


def erfinv(input):
    """``erfinv(input) -> Tensor``: the inverse error function on (-1, 1) (+-inf at +-1, NaN
    outside), as ``torch.erfinv`` (integers give float32)."""
    return erfinv_op(input)


def lgamma(input):
    """``lgamma(input) -> Tensor``: ``log(|gamma(x)|)``, as ``torch.lgamma`` (integers give
    float32); its gradient is ``digamma``."""
    return lgamma_op(input)


def digamma(input):
    """``digamma(input) -> Tensor``: the logarithmic derivative of the gamma function, as
    ``torch.digamma`` (integers give float32; -inf at 0, NaN at the negative integers); its
    gradient is ``polygamma(1, x)``."""
    return digamma_op(input)


def polygamma(n: int, input):
    """``polygamma(n, input) -> Tensor``: the ``n``-th derivative of ``digamma`` (``n >= 0``),
    as ``torch.polygamma`` (integers give float32); its gradient is ``polygamma(n + 1, x)``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(located(f"polygamma: expected n to be an int, found "
                                f"{type(n).__name__}"))
    if n < 0:
        raise RuntimeError(located(f"polygamma: expected n >= 0, found {n}"))
    return polygamma_op(input, n=int(n))


def i0(input):
    """``i0(input) -> Tensor``: the modified Bessel function of the first kind of order 0,
    as ``torch.i0`` (integers give float32); its gradient is ``i1``."""
    return i0_op(input)


def signbit(input):
    """``signbit(input) -> Tensor``: bool, True where the sign bit is set (negative numbers,
    -0.0 and NaNs with a sign), as ``torch.signbit``."""
    return signbit_op(input)


def _float(x, op: str, what: str = "input"):
    x = operand(x, op, what)
    x = constant(x) if isinstance(x, np.ndarray) else x
    return x if dtypes.is_float(x.dtype) or dtypes.is_complex(x.dtype) else cast(
        x, dtypes.DEFAULT_FLOAT)


@composite("deg2rad")
def deg2rad(input):
    """``deg2rad(input) -> Tensor``: degrees to radians (``x * pi / 180``), as
    ``torch.deg2rad`` (integers give float32)."""
    return _float(input, "deg2rad") * (math.pi / 180.0)


@composite("rad2deg")
def rad2deg(input):
    """``rad2deg(input) -> Tensor``: radians to degrees (``x * 180 / pi``), as
    ``torch.rad2deg`` (integers give float32)."""
    return _float(input, "rad2deg") * (180.0 / math.pi)


@composite("sinc")
def sinc(input):
    """``sinc(input) -> Tensor``: the normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (where
    the gradient is 0), as ``torch.sinc`` (integers give float32)."""
    x = _float(input, "sinc")
    at_zero = x == 0
    scaled = where(at_zero, 1.0, x * math.pi)
    return where(at_zero, 1.0, sin(scaled) / scaled)


@composite("logit")
def logit(input, eps=None):
    """``logit(input, eps=None) -> Tensor``: ``log(x / (1 - x))``, with ``x`` clamped to
    ``[eps, 1 - eps]`` first when ``eps`` is given (the gradient is 0 outside), as
    ``torch.logit`` (integers give float32)."""
    x = _float(input, "logit")
    if eps is not None:
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise TypeError(located(f"logit: expected eps to be a float or None, found "
                                    f"{type(eps).__name__}"))
        x = where(lt(x, eps), 0.0 * x + eps, where(gt(x, 1.0 - eps), 0.0 * x + (1.0 - eps),
                                                   x))
    return log(x / (1.0 - x))


@composite("isposinf")
def isposinf(input):
    """``isposinf(input) -> Tensor``: bool, True where the element is +inf, as
    ``torch.isposinf``."""
    x = operand(input, "isposinf")
    return logical_and(isinf(x), gt(x, 0))


@composite("isneginf")
def isneginf(input):
    """``isneginf(input) -> Tensor``: bool, True where the element is -inf, as
    ``torch.isneginf``."""
    x = operand(input, "isneginf")
    return logical_and(isinf(x), lt(x, 0))


# -- binary --------------------------------------------------------------------------------
def _same_dtype(op: str, a, b):
    a, b = operand(a, op), operand(b, op, "other")
    da, db = getattr(a, "dtype", None), getattr(b, "dtype", None)
    da, db = dtypes.as_dtype(da), dtypes.as_dtype(db)
    if da != db:
        raise DTypeError(located(f"{op}: expected input and other of one dtype (PyTorch "
                                 f"does not promote here), found {da} and {db}"))
    return a, b, da


def _heaviside_kernel(xp, a, b):
    return xp.where(a == 0, b, a > 0).astype(a.dtype)


heaviside_op = binary("heaviside", _heaviside_kernel, None, allowed_kinds="biuf")


def _fmax_grads(g, a, b, y):
    return where(logical_or(ge(a, b), isnan(b)), g, 0.0)


def _fmin_grads(g, a, b, y):
    return where(logical_or(ge(b, a), isnan(b)), g, 0.0)


fmax_op = binary("fmax", lambda xp, a, b: xp.fmax(a, b),
                 (_fmax_grads, lambda g, a, b, y: g - _fmax_grads(g, a, b, y)), ufunc="fmax")
fmin_op = binary("fmin", lambda xp, a, b: xp.fmin(a, b),
                 (_fmin_grads, lambda g, a, b, y: g - _fmin_grads(g, a, b, y)), ufunc="fmin")
gcd_op = binary("gcd", lambda xp, a, b: xp.gcd(a, b), None, allowed_kinds="iu", ufunc="gcd")
lcm_op = binary("lcm", lambda xp, a, b: xp.lcm(a, b), None, allowed_kinds="iu", ufunc="lcm")
nextafter_op = binary("nextafter", lambda xp, a, b: xp.nextafter(a, b), None,
                      allowed_kinds="f", ufunc="nextafter")


def heaviside(input, values):
    """``heaviside(input, values) -> Tensor``: 0 where ``input < 0``, ``values`` where it is
    0, 1 where it is > 0, as ``torch.heaviside`` (operands of one dtype; no gradient, as in
    PyTorch)."""
    a, b, _ = _same_dtype("heaviside", input, values)
    return heaviside_op(a, b)


def fmax(input, other):
    """``fmax(input, other) -> Tensor``: the elementwise maximum, ignoring NaN (NaN only where
    both are NaN), as ``torch.fmax``; the gradient goes to ``input`` on ties, as PyTorch's."""
    return fmax_op(input, other)


def fmin(input, other):
    """``fmin(input, other) -> Tensor``: the elementwise minimum, ignoring NaN (NaN only where
    both are NaN), as ``torch.fmin``; the gradient goes to ``input`` on ties."""
    return fmin_op(input, other)


def gcd(input, other):
    """``gcd(input, other) -> Tensor``: the elementwise greatest common divisor of integer
    tensors (``gcd(0, 0) = 0``), as ``torch.gcd``; floats are refused."""
    return gcd_op(input, other)


def lcm(input, other):
    """``lcm(input, other) -> Tensor``: the elementwise least common multiple of integer
    tensors, as ``torch.lcm``; floats are refused."""
    return lcm_op(input, other)


def nextafter(input, other):
    """``nextafter(input, other) -> Tensor``: the next representable float after ``input``
    towards ``other``, as ``torch.nextafter`` (float operands of one dtype)."""
    a, b, _ = _same_dtype("nextafter", input, other)
    return nextafter_op(a, b)


@composite("ldexp")
def ldexp(input, other):
    """``ldexp(input, other) -> Tensor``: ``input * 2 ** other``, as ``torch.ldexp``
    (integers give float32), with its gradients. A deliberate difference: PyTorch 2.13's
    gradient for an integer ``other`` computes ``2 ** other`` in integers (0 for a negative
    exponent); duograph's is ``2 ** other``."""
    a, b = operand(input, "ldexp"), operand(other, "ldexp", "other")
    b = constant(b) if isinstance(b, np.ndarray) else b
    return a * exp2(_float(b, "ldexp", "other"))


@composite("logaddexp2")
def logaddexp2(input, other):
    """``log2(2 ** input + 2 ** other)`` without overflow, as ``torch.logaddexp2``
    (floating-point operands; the gradient is the base-2 softmax of the pair)."""
    a, b = operand(input, "logaddexp2"), operand(other, "logaddexp2", "other")
    for x, what in ((a, "input"), (b, "other")):
        if not dtypes.is_float(dtypes.as_dtype(x.dtype)):
            raise DTypeError(located(f"logaddexp2: expected floating-point {what}, found "
                                     f"{x.dtype}"))
    m = stop_gradient(maximum(a, b))
    m = where(isfinite(m), m, 0.0)
    return m + log2(exp2(a - m) + exp2(b - m))


__all__ = ["erfc", "erfinv", "lgamma", "digamma", "polygamma", "i0", "signbit", "deg2rad",
           "rad2deg", "sinc", "logit", "isposinf", "isneginf", "heaviside", "fmax", "fmin",
           "gcd", "lcm", "nextafter", "ldexp", "logaddexp2"]
