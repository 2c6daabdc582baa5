"""Activations whose gradient PyTorch defines by its own backward kernel, at the kinks too:
ELU (with SELU and CELU), hardtanh (ReLU6), hardsigmoid, hardswish, SiLU and Mish.

As compositions of other ops their gradients came from the parts, which differ from
PyTorch's exactly where it matters: ties split by ``minimum`` at 0 (ELU gave half of its
gradient there), ``clamp``'s bounds that keep the gradient (hardtanh's drop it), 0/1 masks
multiplied into an infinite cotangent (NaN where PyTorch selects 0). Each is one op here:
forward as PyTorch computes it, gradient rule as its ``*_backward`` kernel
(``torch/_decomp/decompositions.py`` writes them out), with selections, not masks.
"""
from __future__ import annotations

from ..attrs import Attr, Attrs
from ..registry import OpDef, register
from ._common import unary, unary_infer
from .elementwise import (NUMERIC, _clamp_dtype, exp, logical_and, sigmoid, softplus,
                          tanh, where)

# -- ELU, SELU, CELU: aten's elu(x, alpha, scale, input_scale) ---------------------------------
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elu_kernel(xp, x, alpha, scale, input_scale):
    # scale * x for x > 0 (NaN too), else scale * alpha * expm1(x * input_scale); the
    # exponential is taken of min(x, 0) only, so it never overflows
    neg = xp.expm1(xp.minimum(x, 0) * input_scale) * (alpha * scale)
    return xp.where(x <= 0, neg, x * scale)


def _elu_vjp(g, x, y, alpha, scale, input_scale):
    # PyTorch's elu_backward: x <= 0 -> g * input_scale * alpha * scale * exp(x * input_scale),
    # else (NaN too) g * scale; the exponential again of the non-positive side only
    nonpositive = x <= 0
    neg = where(nonpositive, x, 0.0)
    return where(nonpositive, g * (input_scale * alpha * scale) * exp(neg * input_scale),
                 g * scale)


elu_op = unary(
    "elu", _elu_kernel, _elu_vjp, float_out=True,
    expr="({0} <= 0 ? expm1(min({0}, 0) * {input_scale}) * ({alpha} * {scale}) : "
         "{0} * {scale})",
    attrs=Attrs(alpha=Attr("number"), scale=Attr("number"), input_scale=Attr("number")))


def elu(x, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0):
    """``scale * x`` for x > 0, else ``scale * alpha * (exp(x * input_scale) - 1)``: ELU,
    and SELU and CELU through ``scale`` and ``input_scale`` (aten's ``elu``). At 0 the
    gradient is the negative side's, ``scale * alpha * input_scale``, as PyTorch's."""
    return elu_op(x, alpha=alpha, scale=scale, input_scale=input_scale)   # the schema checks


# -- hardtanh (ReLU6) ----------------------------------------------------------------------------
_hardtanh_check = unary_infer(allowed=NUMERIC, name="hardtanh")


def _hardtanh_infer(types, attrs):
    (t,) = _hardtanh_check(types, attrs)
    return [t.with_dtype(_clamp_dtype(t.dtype, attrs["min_val"], attrs["max_val"]))]


def _hardtanh_kernel(xp, x, min_val, max_val):
    dt = _clamp_dtype(x.dtype.name, min_val, max_val)
    return xp.clip(x if x.dtype.name == dt else x.astype(dt), min_val, max_val)


def _hardtanh_vjp(cts, ins, outs, attrs, needs):
    # PyTorch's hardtanh_backward: 0 where x <= min_val or x >= max_val, else g (NaN passes
    # g). Read from the output y = clip(x): x <= min_val exactly where y == min_val, and so
    # on, and a NaN stays NaN, so one selection of g keeps the where(mask, g, 0) form.
    (g,), (y,), lo, hi = cts, outs, attrs["min_val"], attrs["max_val"]
    return [where(logical_and(y != lo, y != hi), g, 0.0)]


hardtanh_op = register(OpDef(
    "hardtanh", _hardtanh_infer, _hardtanh_kernel, _hardtanh_vjp, elementwise=True,
    expr="min(max({0}, {min_val}), {max_val})", vjp_reads_output=True,
    attrs=Attrs(min_val=Attr("number"), max_val=Attr("number"))))


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """``x`` clamped to [min_val, max_val], with PyTorch's gradient: 0 at the bounds (where
    ``clamp``'s is 1) and beyond them."""
    return hardtanh_op(x, min_val=min_val, max_val=max_val)


# -- hardsigmoid, hardswish ----------------------------------------------------------------------
def _hardsigmoid_kernel(xp, x):
    return xp.clip(x + 3, 0, 6) / 6


def _hardsigmoid_vjp(g, x, y):
    # PyTorch's hardsigmoid_backward: g / 6 strictly inside (-3, 3), else 0 (NaN too)
    return where(logical_and(x > -3.0, x < 3.0), g * (1.0 / 6.0), 0.0)


hardsigmoid_op = unary("hardsigmoid", _hardsigmoid_kernel, _hardsigmoid_vjp, float_out=True,
                       expr="(min(max({0} + 3, 0), 6) / 6)")


def hardsigmoid(x):
    """``relu6(x + 3) / 6`` (computed exactly, without PyTorch's float32 1/6), with PyTorch's
    gradient: 1/6 strictly inside (-3, 3), 0 at the edges and beyond."""
    return hardsigmoid_op(x)


def _hardswish_kernel(xp, x):
    return x * xp.clip(x + 3, 0, 6) / 6


def _hardswish_vjp(g, x, y):
    # PyTorch's hardswish_backward: 0 for x <= -3, g * (x / 3 + 0.5) for x < 3, else g
    # (NaN too)
    return where(x <= -3.0, 0.0, where(x < 3.0, g * (x / 3.0 + 0.5), g))


hardswish_op = unary("hardswish", _hardswish_kernel, _hardswish_vjp, float_out=True,
                     expr="({0} * min(max({0} + 3, 0), 6) / 6)")


def hardswish(x):
    """``x * relu6(x + 3) / 6``, with PyTorch's gradient: 0 up to -3, ``x / 3 + 1/2``
    inside, 1 from 3 on."""
    return hardswish_op(x)


# -- SiLU, Mish ----------------------------------------------------------------------------------
def _silu_kernel(xp, x):
    e = xp.exp(-xp.abs(x))              # sigmoid split at 0, as the sigmoid op's kernel
    return x * (xp.where(x >= 0, x.dtype.type(1), e) / (1 + e))


def _silu_vjp(g, x, y):
    # PyTorch's silu_backward: g * s * (1 + x * (1 - s)), one product (the product rule of
    # x * sigmoid(x) adds inf and -inf under an infinite cotangent)
    s = sigmoid(x)
    return g * (s * (1.0 + x * (1.0 - s)))


silu_op = unary("silu", _silu_kernel, _silu_vjp, float_out=True,
                expr="({0} * ({0} >= 0 ? 1 / (1 + exp(-{0})) : exp({0}) / (1 + exp({0}))))")


def silu(x):
    """``x * sigmoid(x)`` (swish), with PyTorch's gradient formula."""
    return silu_op(x)


def _mish_kernel(xp, x):
    soft = xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))     # softplus, without overflow
    return x * xp.tanh(soft)


def _mish_vjp(g, x, y):
    # PyTorch's mish_backward: g * (t + x * sigmoid(x) * (1 - t * t)), t = tanh(softplus(x))
    t = tanh(softplus(x))
    return g * (t + x * sigmoid(x) * (1.0 - t * t))


mish_op = unary("mish", _mish_kernel, _mish_vjp, float_out=True,
                expr="({0} * tanh(max({0}, 0) + log1p(exp(-abs({0})))))")


def mish(x):
    """``x * tanh(softplus(x))``, with PyTorch's gradient formula."""
    return mish_op(x)
