"""The ONNX op handlers of the importer, written with duograph's op functions.

Each handler takes a ``Ctx`` (operands, attributes) and returns the outputs. Compositions
are used only where they are exact; everything else is refused with the reason.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..graphlib import functional as F
from ..graphlib.ops import activations as A
from ..graphlib.types import dim_product, dim_quotient
from ._import import (HANDLERS, Ctx, _onnx, check_size, handler, np_dtype_of, refuse,
                      static_shape, tensor_array)
from ._shape_values import ShapeValue, dim_offset, range_length, settle

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64")


def cast(x, dt: str):
    return x if x.dtype == dt else F.cast(x, dt)


def _axis(a: int, ndim: int) -> int:
    if not -max(ndim, 1) <= a < max(ndim, 1):
        refuse(f"axis {a} out of range for {ndim} dims")
    return a % max(ndim, 1)


def _float_only(ctx: Ctx, i: int = 0):
    if ctx.dtype(i) not in FLOATS:
        refuse(f"dtype {ctx.dtype(i)} (this op takes floating-point tensors)")


def _same_dtype(fn):
    """The result in the dtype of the first operand (duograph may promote ints to float)."""
    def run(ctx: Ctx):
        out = fn(ctx)
        return cast(out, ctx.dtype(0))
    return run


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


NUMERIC = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
           "float64")
SIGNED = ("int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")

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


def _floor(ctx, x):
    """floor(x), exactly: through int64 where |x| < 2**52 (larger floats are integers)."""
    big = ctx.const(2.0 ** 52 if x.dtype == "float64" else 2.0 ** 23, x.dtype)
    small = F.lt(F.abs(x), big)
    safe = F.where(small, x, ctx.const(0, x.dtype))
    t = F.cast(F.cast(safe, "int64"), x.dtype)
    fl = F.where(F.gt(t, safe), t - ctx.const(1, x.dtype), t)
    return F.where(small, fl, x)


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
def _check_same(ctx, n=2):
    dts = {ctx.dtype(i) for i in range(n) if ctx.has(i)}
    if len(dts) > 1:
        refuse(f"operands of different dtypes {sorted(dts)}")


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
def _cast_to(ctx, x, dt):
    if dt == x.dtype:
        return x
    if x.dtype in FLOATS and dt in ("uint8", "int32", "int64"):
        # out-of-range and NaN values convert differently everywhere: refuse them at run
        # time? numpy truncates like C; ONNX's reference does the same for in-range values
        return F.cast(x, dt)
    return F.cast(x, dt)


@handler("Cast")
def _cast(ctx):
    return _cast_to(ctx, ctx.x(0), np_dtype_of(ctx.attr("to")))


@handler("CastLike")
def _cast_like(ctx):
    return _cast_to(ctx, ctx.x(0), ctx.dtype(1))


# -- constants and shapes ------------------------------------------------------------------------
@handler("Constant")
def _constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = ctx.attr(key)
        if v is None:
            continue
        if key == "value":
            arr = tensor_array(v, f"the value of Constant {ctx.node.name or ctx.node.output[0]!r}")
        elif key.startswith("value_float"):
            arr = np.asarray(v, dtype=np.float32)
        else:
            arr = np.asarray(v, dtype=np.int64)
        return ctx.const(arr, arr.dtype.name)
    refuse("Constant without a value (sparse and string constants are not supported)")


def _known_shape(dims):
    """A shape's entries as a known array, or as a ShapeValue where some are symbolic."""
    return settle(ShapeValue(dims, 1))


@handler("Shape")
def _shape(ctx):
    shape = ctx.shape()
    n = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return _known_shape(shape[start:end])


@handler("Size")
def _size(ctx):
    return settle(ShapeValue([dim_product(ctx.shape())], 0))


def _sizes(ctx, i: int, what: str) -> tuple:
    """Input ``i`` as sizes (ints or symbolic dims, none negative) for an op's shape."""
    dims = ctx.dims(i, what)
    for d in dims:
        if isinstance(d, int) and d < 0:
            refuse(f"{what} {dims} has a negative size")
    return tuple(dims)


@handler("ConstantOfShape")
def _constant_of_shape(ctx):
    shape = _sizes(ctx, 0, "shape")
    v = ctx.attr("value")
    if v is None:
        arr = np.zeros(1, np.float32)
    else:
        arr = tensor_array(v, "the value of ConstantOfShape "
                              f"{ctx.node.name or ctx.node.output[0]!r}")
        if arr.size != 1:
            refuse(f"its value must hold one element, found shape {list(arr.shape)}")
    return F.full(shape, arr.reshape(-1)[0].item(), dtype=arr.dtype.name)


@handler("Range")
def _range(ctx):
    names = ("start", "limit", "delta")
    if any(isinstance(ctx._known[i], ShapeValue) for i in range(3)):
        return _symbolic_range(ctx, *(ctx.dims(i, n)[0] for i, n in enumerate(names)))
    start, limit, delta = (ctx.known(i, n) for i, n in enumerate(names))
    dt = start.dtype.name
    n = max(int(math.ceil((limit.item() - start.item()) / delta.item())), 0)
    check_size((n,), dt, "the output")
    # start + i * delta, in the dtype (ONNX's definition)
    vals = np.asarray(start.item(), dt) + np.arange(n).astype(dt) * np.asarray(delta.item(), dt)
    return ctx.const(vals.astype(dt), dt)


def _symbolic_range(ctx, start, limit, delta):
    """Range whose bounds are symbolic dims (``arange(x.size(1))``): its length is the
    symbolic dim ceil((limit - start) / delta), its values start + i * delta."""
    dt = ctx.dtype(0)
    if not isinstance(delta, int) or delta == 0:
        refuse(f"a Range with the step {delta} (a symbolic range needs a known, nonzero "
               "step)")
    n = range_length(start, limit, delta)
    counts = _counting(ctx, n)
    out = counts * ctx.const(delta, "int64") + cast(ctx.x(0), "int64")
    return cast(out, dt)


def _counting(ctx, n):
    """0, 1, ..., n-1 in int64, for a length ``n`` that may be a symbolic dim."""
    if isinstance(n, int):
        return ctx.const(np.arange(n), "int64")
    return F.cumsum(F.full((n,), 1, dtype="int64"), 0) - ctx.const(1, "int64")


@handler("EyeLike")
def _eye_like(ctx):
    n, m = static_shape(ctx)
    dt = np_dtype_of(ctx.attr("dtype")) if ctx.attr("dtype") is not None else ctx.dtype(0)
    check_size((n, m), dt, "the output")
    return ctx.const(np.eye(n, m, k=ctx.attr("k", 0)).astype(dt), dt)


@handler("Reshape")
def _reshape(ctx):
    x = ctx.x(0)
    target = ctx.dims(1, "shape")
    allowzero = ctx.attr("allowzero", 0)
    shape = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= x.ndim:
                refuse("a 0 in the target shape past the input's dims")
            shape.append(x.shape[i])
        else:
            shape.append(d)
    return F.reshape(x, *shape) if shape else F.reshape(x, ())


@handler("Flatten")
def _flatten(ctx):
    x = ctx.x(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        refuse(f"axis {ctx.attr('axis', 1)} out of range for {x.ndim} dims")
    shape = tuple(x.shape)
    return F.reshape(x, dim_product(shape[:axis]), dim_product(shape[axis:]))


@handler("Transpose")
def _transpose(ctx):
    x = ctx.x(0)
    perm = ctx.attr("perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    if x.ndim == 0:
        return x
    return F.permute(x, *perm)


def _axes_arg(ctx, index: int, attr: str = "axes"):
    """Axes from an attribute (old opsets) or an input (new ones), or None."""
    if ctx.has(index):
        return [int(a) for a in np.ravel(ctx.known(index, "axes"))]
    v = ctx.attr(attr)
    return None if v is None else [int(a) for a in v]


@handler("Squeeze")
def _squeeze(ctx):
    x = ctx.x(0)
    axes = _axes_arg(ctx, 1)
    shape = list(x.shape)
    if axes is None:
        new = [d for d in shape if d != 1]
    else:
        axes = {_axis(a, x.ndim) for a in axes}
        for a in axes:
            if shape[a] != 1:
                refuse(f"cannot squeeze axis {a} of size {shape[a]}")
        new = [d for i, d in enumerate(shape) if i not in axes]
    return F.reshape(x, *new) if new else F.reshape(x, ())


@handler("Unsqueeze")
def _unsqueeze(ctx):
    x = ctx.x(0)
    axes = _axes_arg(ctx, 1)
    n = x.ndim + len(axes)
    axes = sorted(a + n if a < 0 else a for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return F.reshape(x, *shape)


@handler("Concat")
def _concat(ctx):
    xs = [ctx.x(i) for i in range(len(ctx)) if ctx.has(i)]
    axis = _axis(ctx.attr("axis"), xs[0].ndim)
    if len({x.dtype for x in xs}) > 1:
        refuse("operands of different dtypes")
    xs = [x for x in xs if not (isinstance(x.shape[axis], int) and x.shape[axis] == 0)] or xs
    return F.cat(xs, axis) if len(xs) > 1 else xs[0]


@handler("Split")
def _split(ctx):
    x = ctx.x(0)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    if ctx.has(1):
        sizes = [int(s) for s in ctx.known(1, "split")]
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    else:
        n = len([o for o in ctx.node.output])
        n = ctx.attr("num_outputs", n)
        size = static_shape(ctx, 0, [axis])[axis]
        step = -(-size // n)
        sizes = [min(step, size - i * step) for i in range(n)]
    outs = F.split(x, sizes, axis)
    return list(outs)


def _slice_index(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, x.ndim)
        size = x.shape[a]
        if st == 0:
            refuse("slice step 0")
        if not isinstance(size, int):
            index[a] = _symbolic_slice(size, s, e, st)
            if index[a] is None:
                index[a] = slice(None)
                flips.append((a, None))
            continue
        if not (isinstance(s, int) and isinstance(e, int)):
            refuse(f"Slice bounds {s}:{e} that are symbolic along a dim of size {size}")
        rng = range(size)[slice(max(min(s, 2**62), -2**62), max(min(e, 2**62), -2**62), st)]
        if st > 0:
            index[a] = slice(rng.start, rng.stop if len(rng) else rng.start, st)
        else:
            flips.append((a, np.asarray(list(rng), np.int64)))
    return index, flips


def _symbolic_slice(size, start, end, step):
    """The Python slice equal to ONNX's start:end:step along a symbolic dim ``size`` (with
    a positive step, ONNX clamps the bounds as Python does); a bound that is ``size`` plus a
    known offset (``x.size(1) - 1``) is that offset counted from the end. None for the
    whole dim reversed (``x.flip(1)``), the only negative step taken."""
    if step < 0:
        last = (start == -1 or start >= 2**62) if isinstance(start, int) else \
            dim_offset(start, size) == -1
        if step == -1 and last and isinstance(end, int) and end <= -2**62:
            return None
        refuse(f"a negative step along the symbolic dim {size} (only a whole reversal)")

    def bound(b, is_end):
        if isinstance(b, int):
            if is_end and b >= 2**62:
                return None
            return max(min(b, 2**62), -2**62)
        offset = dim_offset(b, size)
        if offset is None or offset > 0 or (offset == 0 and not is_end):
            refuse(f"the Slice bound {b} along the symbolic dim {size} (only a number, or "
                   "the dim less a known amount, can be sliced when the graph is built)")
        return None if offset == 0 else offset
    return slice(bound(start, False), bound(end, True), step)


@handler("Slice")
def _slice(ctx):
    x = ctx.x(0)
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = ctx.dims(1, "starts")
        ends = ctx.dims(2, "ends")
        axes = ([int(v) for v in ctx.known(3, "axes")] if ctx.has(3)
                else list(range(len(starts))))
        steps = [int(v) for v in ctx.known(4, "steps")] if ctx.has(4) else [1] * len(starts)
    index, flips = _slice_index(x, starts, ends, axes, steps)
    y = F.getitem(x, tuple(index)) if any(s != slice(None) for s in index) else x
    for a, picks in flips:           # negative steps: pick the entries in that order
        y = F.flip(y, (a,)) if picks is None else F.index_select(y, a, ctx.const(picks,
                                                                                  "int64"))
    return y


def _fix_negative(ctx, idx, size, x=None, axis=None):
    """Indices with negatives counted from the end (ONNX allows them); along a symbolic dim
    the size is ``x``'s along ``axis``, read at run time."""
    idx = cast(idx, "int64")
    if isinstance(size, int):
        n = ctx.const(size, "int64")
    elif x is not None:
        n = F.numel(x, (axis,), dtype="int64")
    else:
        refuse("indices into a symbolic dim")
    return F.where(F.lt(idx, ctx.const(0, "int64")), idx + n, idx)


@handler("Gather")
def _gather(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    if idx.dtype not in ("int32", "int64"):
        refuse(f"indices of dtype {idx.dtype}")
    idx = _fix_negative(ctx, idx, x.shape[axis], x, axis)
    flat = F.reshape(idx, -1) if idx.ndim != 1 else idx
    y = F.index_select(x, axis, flat)
    if idx.ndim != 1:
        shape = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:])
        y = F.reshape(y, *shape) if shape else F.reshape(y, ())
    return y


@handler("GatherElements")
def _gather_elements(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis], x, axis)
    return F.gather(x, axis, idx)


@handler("ScatterElements", "Scatter")
def _scatter_elements(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("add", "none"):
        refuse(f"reduction {reduction!r} (duograph has scatter_add only)")
    x, idx, src = ctx.x(0), ctx.x(1), ctx.x(2)
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis])
    if reduction == "none":
        return _overwrite(ctx, x, lambda t, u: F.scatter_add(t, axis, idx, u), src)
    return cast(F.scatter_add(x, axis, idx, src), x.dtype)


def _overwrite(ctx, x, add, src):
    """Scatter without reduction from an adding scatter: the written places of ``x`` are
    zeroed and the updates added there (ONNX leaves repeated indices undefined; with
    known indices they are refused)."""
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    counts = add(cast(F.zeros_like(x), "int32"), cast(F.ones_like(src), "int32"))
    if ctx.eager and int(counts.numpy().max(initial=0)) > 1:
        refuse("repeated indices (ONNX leaves their result undefined)")
    hit = F.gt(counts, ctx.const(0, "int32"))
    return cast(add(F.where(hit, ctx.const(0, x.dtype), x), src), x.dtype)


@handler("Expand")
def _expand(ctx):
    x = ctx.x(0)
    target = list(_sizes(ctx, 1, "shape"))
    ndim = max(len(target), x.ndim)
    src = [1] * (ndim - x.ndim) + list(x.shape)
    tgt = [1] * (ndim - len(target)) + target
    out = []
    for a, b in zip(src, tgt):
        if a == b or b == 1:
            out.append(a)
        elif a == 1:
            out.append(b)
        elif isinstance(b, str) and isinstance(a, int):
            out.append(a)       # as broadcasting: the symbolic size must be 1 or a
        else:
            refuse(f"cannot broadcast {[str(d) for d in x.shape]} to "
                   f"{[str(d) for d in target]} when the graph is built")
    if ndim > x.ndim:
        x = F.reshape(x, *src)
    return F.expand(x, *out)


@handler("Tile")
def _tile(ctx):
    x = ctx.x(0)
    reps = [int(r) for r in ctx.known(1, "repeats")]
    shape = ctx.shape()
    inter = []
    big = []
    for d, r in zip(shape, reps):
        inter += [1, d]
        big += [r, d]
    y = F.expand(F.reshape(x, *inter), *big) if inter else x
    return F.reshape(y, *[dim_product([d, r]) for d, r in zip(shape, reps)]) if inter else y


@handler("Pad")
def _pad(ctx):
    x = ctx.x(0)
    mode = ctx.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "reflect", "edge", "wrap"):
        refuse(f"mode {mode!r}")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads"))
        value = ctx.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = [int(p) for p in ctx.known(1, "pads")]
        value = ctx.known(2, "constant_value").item() if ctx.has(2) else 0
        axes = _axes_arg(ctx, 3) or list(range(x.ndim))
    axes = [_axis(a, x.ndim) for a in axes]
    if any(p < 0 for p in pads):
        refuse("negative pads")
    full = [(0, 0)] * x.ndim
    k = len(axes)
    for i, a in enumerate(axes):
        full[a] = (pads[i], pads[i + k])
    if mode != "constant":            # numpy's index pattern, gathered along each axis
        shape = static_shape(ctx)
        for a, (lo, hi) in enumerate(full):
            if lo or hi:
                if mode == "reflect" and max(lo, hi) >= shape[a]:
                    refuse(f"reflect padding of {max(lo, hi)} on a dim of {shape[a]}")
                if shape[a] == 0:
                    refuse("padding an empty dim")
                idx = np.pad(np.arange(shape[a]), (lo, hi), mode=mode)
                x = F.index_select(x, a, ctx.const(idx, "int64"))
        return x
    flat = []
    for lo, hi in reversed(full):
        flat += [lo, hi]
    if x.dtype == "bool":
        value = bool(value)
    elif x.dtype not in FLOATS + ("bfloat16",):
        value = int(value)
    return cast(F.pad(x, flat, value=value), x.dtype)


@handler("Trilu")
def _trilu(ctx):
    x = ctx.x(0)
    k = int(ctx.known(1, "k").item()) if ctx.has(1) else 0
    n, m = ctx.shape()[-2:]
    upper = ctx.attr("upper", 1)
    if not (isinstance(n, int) and isinstance(m, int)):      # the mask built at run time
        rows = F.reshape(_counting(ctx, n), n, 1)
        cols = F.reshape(_counting(ctx, m), 1, m)
        diag = cols - rows                   # j - i
        keep = F.ge(diag, ctx.const(k, "int64")) if upper else \
            F.le(diag, ctx.const(k, "int64"))
        return F.where(keep, x, ctx.const(0, x.dtype))
    check_size((n, m), bool, "the mask")
    mask = np.triu(np.ones((n, m), bool), k) if upper else np.tril(np.ones((n, m), bool), k)
    return F.where(ctx.const(mask, "bool"), x, ctx.const(0, x.dtype))


@handler("OneHot")
def _one_hot(ctx):
    idx, depth, values = ctx.x(0), int(ctx.known(1, "depth").item()), ctx.x(2)
    axis = ctx.attr("axis", -1)
    idx = cast(idx, "int64")
    idx = F.where(F.lt(idx, ctx.const(0, "int64")), idx + ctx.const(depth, "int64"), idx)
    check_size((depth,), np.int64, "the depth range")
    hot = F.eq(F.unsqueeze(idx, -1), ctx.const(np.arange(depth), "int64"))
    off, on = F.getitem(values, 0), F.getitem(values, 1)
    y = F.where(hot, on, off)
    nd = y.ndim
    axis = axis + nd if axis < 0 else axis
    if axis != nd - 1:
        perm = list(range(nd - 1))
        perm.insert(axis, nd - 1)
        y = F.permute(y, *perm)
    return y


@handler("DepthToSpace")
def _depth_to_space(ctx):
    x = ctx.x(0)
    b = ctx.attr("blocksize")
    n, c, h, w = static_shape(ctx)
    mode = ctx.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        y = F.permute(F.reshape(x, n, b, b, c // (b * b), h, w), 0, 3, 4, 1, 5, 2)
    else:
        y = F.permute(F.reshape(x, n, c // (b * b), b, b, h, w), 0, 1, 4, 2, 5, 3)
    return F.reshape(y, n, c // (b * b), h * b, w * b)


@handler("SpaceToDepth")
def _space_to_depth(ctx):
    x = ctx.x(0)
    b = ctx.attr("blocksize")
    n, c, h, w = static_shape(ctx)
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        refuse(f"mode {mode!r}")
    y = F.reshape(x, n, c, h // b, b, w // b, b)
    y = F.permute(y, 0, 3, 5, 1, 2, 4) if mode == "DCR" else F.permute(y, 0, 1, 3, 5, 2, 4)
    return F.reshape(y, n, c * b * b, h // b, w // b)


@handler("Dropout")
def _dropout(ctx):
    x = ctx.x(0)
    training = bool(ctx.known(2, "training_mode").item()) if ctx.has(2) else False
    if training or (ctx.opset < 7 and not ctx.attr("is_test", 0)):
        ratio = float(ctx.known(1).item()) if ctx.has(1) else ctx.attr("ratio", 0.5)
        if ratio != 0:
            refuse("training-mode dropout (random)")
    outs = [F.stop_gradient(x) if not ctx.eager else x]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        outs.append(F.full_like(x, True, dtype="bool"))
    return outs


# -- reductions ----------------------------------------------------------------------------------
def _reduce_axes(ctx, x):
    uses_input = ctx.node.op_type == "ReduceSum" and ctx.opset >= 13 or ctx.opset >= 18
    axes = _axes_arg(ctx, 1) if uses_input else (
        None if ctx.attr("axes") is None else list(ctx.attr("axes")))
    if axes is None or (len(axes) == 0):
        if axes is not None and ctx.attr("noop_with_empty_axes", 0):
            return None
        if axes is None and ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted({_axis(a, x.ndim) for a in axes}))


def _reduction(kind):
    def run(ctx):
        x = ctx.x(0)
        keep = bool(ctx.attr("keepdims", 1))
        axes = _reduce_axes(ctx, x)
        dt = x.dtype
        if dt == "bool":
            refuse("reductions of bool")
        if axes is None:
            if kind in ("sum", "mean", "max", "min", "prod"):
                return x
            if kind == "l1":
                return F.abs(x)
            if kind in ("l2",):
                return cast(F.sqrt(x * x), dt)
            if kind == "sumsq":
                return x * x
            if kind == "logsum":
                return F.log(x)
            if kind == "logsumexp":
                return x
        if x.ndim == 0:
            axes = None
        if kind == "sum":
            y = F.sum(x, axes, keep)
        elif kind == "mean":
            if dt not in FLOATS:
                refuse(f"ReduceMean of {dt}")
            y = F.mean(x, axes, keep)
        elif kind == "max":
            y = F.amax(x, axes, keep)
        elif kind == "min":
            y = F.amin(x, axes, keep)
        elif kind == "prod":
            y = F.prod(x, axes, keep)
        elif kind == "l1":
            y = F.sum(F.abs(x), axes, keep)
        elif kind == "l2":
            y = F.sqrt(cast(F.sum(x * x, axes, keep), dt)) if dt in FLOATS else \
                refuse(f"ReduceL2 of {dt}")
        elif kind == "sumsq":
            y = F.sum(x * x, axes, keep)
        elif kind == "logsum":
            if dt not in FLOATS:
                refuse(f"ReduceLogSum of {dt}")
            y = F.log(F.sum(x, axes, keep))
        else:
            if dt not in FLOATS:
                refuse(f"ReduceLogSumExp of {dt}")
            y = F.logsumexp(x, axes if axes is not None else (), keep) if axes else x
        return cast(y, dt)
    return run


for _n, _k in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"),
               ("ReduceMin", "min"), ("ReduceProd", "prod"), ("ReduceL1", "l1"),
               ("ReduceL2", "l2"), ("ReduceSumSquare", "sumsq"), ("ReduceLogSum", "logsum"),
               ("ReduceLogSumExp", "logsumexp")):
    handler(_n)(_reduction(_k))


def _arg(fn):
    def run(ctx):
        x = ctx.x(0)
        if ctx.attr("select_last_index", 0):
            refuse("select_last_index=1")
        if x.dtype == "bool":
            refuse("ArgMax/ArgMin of bool")
        axis = _axis(ctx.attr("axis", 0), x.ndim)
        return fn(x, axis, bool(ctx.attr("keepdims", 1)))
    return run


handler("ArgMax")(_arg(F.argmax))
handler("ArgMin")(_arg(F.argmin))


@handler("CumSum")
def _cumsum(ctx):
    x = ctx.x(0)
    axis = _axis(int(ctx.known(1, "axis").item()), x.ndim)
    n = ctx.shape()[axis]
    excl, rev = ctx.attr("exclusive", 0), ctx.attr("reverse", 0)
    if not isinstance(n, int):            # a symbolic length: duograph's scan op
        if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
            refuse(f"CumSum of {x.dtype}")
        y = F.flip(x, (axis,)) if rev else x
        y = cast(F.cumsum(y, axis), x.dtype)
        if excl:
            y = _shift_exclusive(ctx, y, axis, n, 0)
        return F.flip(y, (axis,)) if rev else y
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    if rev:
        tri = (i > j) if excl else (i >= j)
    else:
        tri = (i < j) if excl else (i <= j)
    if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
        refuse(f"CumSum of {x.dtype}")
    m = ctx.const(tri.astype(x.dtype), x.dtype)
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    y = F.matmul(F.permute(x, *perm), m) if x.ndim > 1 else F.matmul(x, m)
    if x.ndim > 1:
        inv = [0] * x.ndim
        for k, p in enumerate(perm):
            inv[p] = k
        y = F.permute(y, *inv)
    return cast(y, x.dtype)


# -- linear algebra and nn ---------------------------------------------------------------------
@handler("MatMul")
def _matmul(ctx):
    _check_same(ctx)
    if ctx.dtype(0) not in ("int32", "int64", "float16", "bfloat16", "float32", "float64"):
        refuse(f"MatMul of {ctx.dtype(0)}")
    return F.matmul(ctx.x(0), ctx.x(1))


@handler("Gemm")
def _gemm(ctx):
    a, b = ctx.x(0), ctx.x(1)
    if ctx.attr("transA", 0):
        a = F.transpose(a, 0, 1)
    if ctx.attr("transB", 0):
        b = F.transpose(b, 0, 1)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    y = F.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if ctx.has(2):
        c = ctx.x(2)
        y = y + (c * beta if beta != 1.0 else c)
    return cast(y, a.dtype)


def _pads_2d(ctx, kernel, strides, dilations, in_hw):
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0, 0, 0, 0]))
        return pads[0], pads[2], pads[1], pads[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    out = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        if not isinstance(size, int):
            refuse("auto_pad over symbolic sizes")
        o = -(-size // s)
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return out[0][0], out[0][1], out[1][0], out[1][1]


@handler("Conv")
def _conv(ctx):
    x, w = ctx.x(0), ctx.x(1)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D convolution (duograph has 2-D)")
    _float_only(ctx)
    kernel = static_shape(ctx, 1)[2:]
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    from ..graphlib.ops.conv import conv2d_op
    ins = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return conv2d_op(*ins, stride=tuple(strides), padding=(pt, pb, pl, pr),
                     dilation=tuple(dil), groups=ctx.attr("group", 1))


def _pool_common(ctx):
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D pooling (duograph has 2-D)")
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    if pt != pb or pl != pr:
        refuse("asymmetric pads")
    return x, kernel, strides, dil, (pt, pl)


@handler("MaxPool")
def _max_pool(ctx):
    if len([o for o in ctx.node.output if o]) > 1:
        refuse("the Indices output")
    x = ctx.x(0)
    if x.ndim == 4 and x.dtype in FLOATS:      # any pads: -inf borders, then no padding
        kernel = list(ctx.attr("kernel_shape"))
        strides = list(ctx.attr("strides", [1, 1]))
        dil = list(ctx.attr("dilations", [1, 1]))
        pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
        if (pt != pb or pl != pr or pt > kernel[0] // 2 or pl > kernel[1] // 2) and \
                not ctx.attr("ceil_mode", 0) and not ctx.attr("storage_order", 0):
            x = F.pad(x, [pl, pr, pt, pb], value=-math.inf)
            return F.max_pool2d(x, kernel, strides, (0, 0), dil, False)
    x, kernel, strides, dil, pad = _pool_common(ctx)
    if ctx.attr("storage_order", 0):
        refuse("storage_order=1")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        refuse("padding more than half the kernel")
    return F.max_pool2d(x, kernel, strides, pad, dil, bool(ctx.attr("ceil_mode", 0)))


@handler("AveragePool")
def _avg_pool(ctx):
    x = ctx.x(0)
    if x.ndim == 4 and x.dtype in FLOATS and not ctx.attr("ceil_mode", 0):
        kernel = list(ctx.attr("kernel_shape"))
        strides = list(ctx.attr("strides", [1, 1]))
        dil = list(ctx.attr("dilations", [1, 1]))
        pads = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
        pt, pb, pl, pr = pads
        if pt != pb or pl != pr or pt > kernel[0] // 2 or pl > kernel[1] // 2 or dil != [1, 1]:
            return _window_mean(ctx, x, kernel, strides, dil, pads,
                                bool(ctx.attr("count_include_pad", 0)))
    x, kernel, strides, dil, pad = _pool_common(ctx)
    if dil != [1, 1]:
        refuse("dilations")
    if ctx.attr("ceil_mode", 0):
        refuse("ceil_mode=1")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        refuse("padding more than half the kernel")
    return F.avg_pool2d(x, kernel, strides, pad, False,
                        bool(ctx.attr("count_include_pad", 0)))


@handler("GlobalAveragePool")
def _gap(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    # no spatial dims: the mean over none of them (ONNX's reference), not over every dim
    return F.mean(x, tuple(range(2, x.ndim)), keepdim=True) if x.ndim > 2 else x


@handler("GlobalMaxPool")
def _gmp(ctx):
    x = ctx.x(0)
    return F.amax(x, tuple(range(2, x.ndim)), keepdim=True) if x.ndim > 2 else x


def _channel(v, ndim):
    return F.reshape(v, *([1, -1] + [1] * (ndim - 2)))


@handler("BatchNormalization")
def _batch_norm(ctx):
    x, s, b, mean, var = (ctx.x(i) for i in range(5))
    _float_only(ctx)
    if ctx.attr("training_mode", 0) or len([o for o in ctx.node.output if o]) > 1:
        refuse("training mode")
    eps = ctx.attr("epsilon", 1e-5)
    dt = x.dtype
    scale = cast(s, dt) * F.rsqrt(cast(var, dt) + eps)
    y = (x - _channel(cast(mean, dt), x.ndim)) * _channel(scale, x.ndim) + \
        _channel(cast(b, dt), x.ndim)
    return cast(y, dt)


@handler("InstanceNormalization")
def _instance_norm(ctx):
    x, s, b = ctx.x(0), ctx.x(1), ctx.x(2)
    _float_only(ctx)
    axes = tuple(range(2, x.ndim))
    if axes:
        m = F.mean(x, axes, keepdim=True)
        v = F.var(x, axes, correction=0, keepdim=True)
    else:       # no spatial dims: each element is its own instance (ONNX's reference)
        m, v = x, F.zeros_like(x)
    y = (x - m) * F.rsqrt(v + ctx.attr("epsilon", 1e-5))
    return cast(y * _channel(s, x.ndim) + _channel(b, x.ndim), x.dtype)


def _norm_input(ctx):
    """(x in its working dtype, the normalised axes, epsilon, x's dtype) for the
    normalisations with ``axis``, ``epsilon`` and ``stash_type`` (float32 statistics for
    float16 inputs)."""
    x = ctx.x(0)
    _float_only(ctx)
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    stash = ctx.attr("stash_type", 1)
    dt = x.dtype
    if stash != 1 and dt != "float64":
        refuse(f"stash_type {stash}")
    work = "float32" if stash == 1 and dt == "float16" else dt
    return cast(x, work), tuple(range(axis, x.ndim)), ctx.attr("epsilon", 1e-5), dt


@handler("LayerNormalization")
def _layer_norm(ctx):
    xw, axes, eps, dt = _norm_input(ctx)
    m = F.mean(xw, axes, keepdim=True)
    d = xw - m
    v = F.mean(d * d, axes, keepdim=True)
    inv = F.rsqrt(v + eps)
    y = cast(d * inv, dt) * ctx.x(1)
    if ctx.has(2):
        y = y + ctx.x(2)
    outs = [cast(y, dt)]
    names = [o for o in ctx.node.output]
    if len(names) > 1:
        outs.append(m)
    if len(names) > 2:
        outs.append(inv)
    return outs


@handler("MeanVarianceNormalization")
def _mvn(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    axes = tuple(_axis(a, x.ndim) for a in ctx.attr("axes", [0, 2, 3]))
    m = F.mean(x, axes, keepdim=True)
    d = x - m
    v = F.mean(d * d, axes, keepdim=True)
    return cast(d / (F.sqrt(v) + 1e-9), x.dtype)


@handler("LpNormalization")
def _lp_norm(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    if p == 1:
        n = F.sum(F.abs(x), axis, keepdim=True)
    elif p == 2:
        n = F.sqrt(F.sum(x * x, axis, keepdim=True))
    else:
        refuse(f"p={p}")
    zero = ctx.const(0, x.dtype)
    return cast(F.where(F.eq(n, zero), zero, x / F.where(F.eq(n, zero), 1.0, n)), x.dtype)


def _softmax(fn):
    def run(ctx):
        x = ctx.x(0)
        _float_only(ctx)
        if ctx.opset < 13:
            axis = _axis(ctx.attr("axis", 1), x.ndim)
            shape = static_shape(ctx)
            a = int(np.prod(shape[:axis], dtype=np.int64))
            y = fn(F.reshape(x, a, -1), 1)
            return F.reshape(y, *shape)
        return fn(x, _axis(ctx.attr("axis", -1), x.ndim))
    return run


handler("Softmax")(_softmax(F.softmax))
handler("LogSoftmax")(_softmax(F.log_softmax))


@handler("Hardmax")
def _hardmax(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    if ctx.opset < 13:
        refuse("Hardmax before opset 13")
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    n = static_shape(ctx, 0, [axis])[axis]
    idx = F.argmax(x, axis, keepdim=True)
    shape = [1] * x.ndim
    shape[axis] = n
    rng = ctx.const(np.arange(n).reshape(shape), "int64")
    return F.cast(F.eq(idx, rng), x.dtype)


@handler("Einsum")
def _einsum(ctx):
    refuse("Einsum is not supported")


@handler("Swish")
def _swish(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    return cast(x * F.sigmoid(x * ctx.attr("alpha", 1.0)), x.dtype)


@handler("RMSNormalization")
def _rms_norm(ctx):
    xw, axes, eps, dt = _norm_input(ctx)
    inv = F.rsqrt(F.mean(xw * xw, axes, keepdim=True) + eps)
    return cast(cast(xw * inv, dt) * ctx.x(1), dt)


def _nll(ctx, logp, target, weight, reduction, ignore_index):
    """Negative log-likelihood of log-probabilities (N, C, d1...) at class indices (N, d1...)
    with optional class weights: ONNX's NegativeLogLikelihoodLoss."""
    target = cast(target, "int64")
    dt = logp.dtype
    if ignore_index is not None:
        valid = F.ne(target, ctx.const(ignore_index, "int64"))
        safe = F.where(valid, target, ctx.const(0, "int64"))
    else:
        valid, safe = None, target
    picked = F.squeeze(F.gather(logp, 1, F.unsqueeze(safe, 1)), 1)
    w = F.index_select(weight, 0, F.reshape(safe, -1)) if weight is not None else None
    if w is not None:
        w = F.reshape(w, *safe.shape) if safe.ndim != 1 else w
    if valid is not None:
        vw = F.cast(valid, dt)
        w = vw if w is None else w * vw
    loss = F.neg(picked) if w is None else F.neg(picked) * w
    if reduction == "none":
        return cast(loss, dt)
    total = F.sum(loss)
    if reduction == "sum":
        return cast(total, dt)
    if reduction != "mean":
        refuse(f"reduction {reduction!r}")
    count = F.sum(w) if w is not None else float(np.prod(static_shape_of(safe)))
    return cast(total / count, dt)


def static_shape_of(v):
    if not all(isinstance(d, int) for d in v.shape):
        refuse("a mean over a symbolic number of elements")
    return tuple(v.shape)


@handler("NegativeLogLikelihoodLoss")
def _nll_h(ctx):
    _float_only(ctx)
    return _nll(ctx, ctx.x(0), ctx.x(1), ctx.x(2) if ctx.has(2) else None,
                ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))


@handler("SoftmaxCrossEntropyLoss")
def _sce(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    logp = F.log_softmax(x, 1)
    loss = _nll(ctx, logp, ctx.x(1), ctx.x(2) if ctx.has(2) else None,
                ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))
    if len([o for o in ctx.node.output if o]) > 1:
        return [loss, logp]
    return loss


def _select_last(fn):
    def run(ctx):
        x = ctx.x(0)
        if x.dtype == "bool":
            refuse("ArgMax/ArgMin of bool")
        axis = _axis(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        if not ctx.attr("select_last_index", 0):
            return fn(x, axis, keep)
        n = static_shape(ctx, 0, [axis])[axis]
        flipped = F.index_select(x, axis, ctx.const(np.arange(n)[::-1].copy(), "int64"))
        return ctx.const(n - 1, "int64") - fn(flipped, axis, keep)
    return run


handler("ArgMax")(_select_last(F.argmax))
handler("ArgMin")(_select_last(F.argmin))


# == more handlers, composed from the same op functions ==========================================
_BITS = {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}

for _name, _fn in (("Acos", F.acos), ("Asin", F.asin), ("Atan", F.atan)):
    handler(_name)(_unary(lambda c, x, _fn=_fn: _fn(x), True, None))


@handler("Round")
def _round(ctx):
    """Round half to even: floor, then up where the fraction is above one half, or exactly
    one half and the floor is odd (all steps exact in floating point)."""
    _float_only(ctx)
    x = ctx.x(0)
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
    width = _BITS[dt]
    left = ctx.attr("direction") == "LEFT"
    if ctx.attr("direction") not in ("LEFT", "RIGHT"):
        refuse(f"direction {ctx.attr('direction')!r}")
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


_REDUCE_MAX_MIN = {k: HANDLERS[k] for k in ("ReduceMax", "ReduceMin")}


@handler("ReduceMax", "ReduceMin")
def _reduce_max_min_bool(ctx):
    """ReduceMax/Min, and of bool tensors as any/all (through uint8)."""
    x = ctx.x(0)
    fn = _REDUCE_MAX_MIN[ctx.node.op_type]
    axes = _reduce_axes(ctx, x)
    if axes and any(x.shape[a] == 0 for a in axes):    # the empty set: the identity
        keep = bool(ctx.attr("keepdims", 1))
        shape = [1 if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes]
        if not all(isinstance(d, int) for d in shape):
            refuse("an empty reduction with symbolic dims")
        big = ctx.node.op_type == "ReduceMin"
        if x.dtype == "bool":
            fill = big
        elif x.dtype in FLOATS:
            fill = np.inf if big else -np.inf
        else:
            info = np.iinfo(x.dtype)
            fill = info.max if big else info.min
        return ctx.const(np.full(shape, fill, dtype=x.dtype), x.dtype)
    if x.dtype != "bool":
        return fn(ctx)
    ctx.ins = [cast(x, "uint8")] + list(ctx.ins[1:])
    return F.ne(fn(ctx), ctx.const(0, "uint8"))


# -- Attention (opset 23/24): scaled dot-product attention as matmul, softmax, matmul ------------
def _heads(ctx, x, n):
    """(B, S, n*D) -> (B, n, S, D)."""
    b, s, hidden = static_shape_of(x)
    if not n or hidden % n:
        refuse(f"hidden size {hidden} is not a multiple of the {n} heads")
    return F.permute(F.reshape(x, b, s, n, hidden // n), 0, 2, 1, 3)


def _neg_inf_where(ctx, allowed, dt):
    """0 where ``allowed``, -inf elsewhere (a select, never 0 * inf)."""
    return F.where(allowed, ctx.const(0, dt), ctx.const(-np.inf, dt))


@handler("Attention")
def _attention(ctx):
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    dt = q.dtype
    if dt not in FLOATS:
        refuse(f"dtype {dt} (Attention here takes float16, bfloat16, float32, float64)")
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left < -1 or right < -1:
        refuse(f"window sizes {left}, {right} (each -1 or at least 0)")
    mask = ctx.x(3) if ctx.has(3) else None
    past_k = ctx.x(4) if ctx.has(4) else None
    past_v = ctx.x(5) if ctx.has(5) else None
    nonpad = ctx.x(6) if ctx.has(6) else None
    if (past_k is None) != (past_v is None):
        refuse("past_key without past_value (or the reverse)")
    if nonpad is not None and past_k is not None:
        refuse("nonpad_kv_seqlen with past_key/past_value")
    three_d = q.ndim == 3
    if three_d:
        q = _heads(ctx, q, ctx.attr("q_num_heads"))
        k = _heads(ctx, k, ctx.attr("kv_num_heads"))
        v = _heads(ctx, v, ctx.attr("kv_num_heads"))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        refuse("Q, K, V must all be 3-D or all 4-D")
    batch, hq, lq, dq = static_shape_of(q)
    scale = ctx.attr("scale")
    scale = 1.0 / math.sqrt(dq) if scale is None else scale
    root = np.asarray(math.sqrt(scale), dtype=dt)        # the spec scales Q and K by sqrt
    if past_k is not None:
        k = F.cat([past_k, k], 2)
        v = F.cat([past_v, v], 2)
    present_k, present_v = k, v
    lkv = static_shape_of(k)[2]
    bias = None
    if mask is not None:
        width = static_shape_of(mask)[-1]
        if width < lkv:
            pad = [0, lkv - width] + [0, 0] * (mask.ndim - 1)
            mask = F.pad(mask, pad, value=False if mask.dtype == "bool" else -math.inf)
        bias = _neg_inf_where(ctx, mask, dt) if mask.dtype == "bool" else cast(mask, dt)
    i = np.arange(lq).reshape(lq, 1)
    j = np.arange(lkv).reshape(1, lkv)
    if nonpad is not None:
        lens = F.reshape(cast(nonpad, "int64"), -1, 1, 1, 1)
    if ctx.attr("is_causal", 0):
        if nonpad is not None:          # per batch: key j <= i + (nonpad[b] - lq)
            allowed = F.le(ctx.const(j - i + lq, "int64"), lens)
        else:
            offset = static_shape_of(past_k)[2] if past_k is not None else 0
            allowed = ctx.const(j <= i + offset, "bool")
        causal = _neg_inf_where(ctx, allowed, dt)
        bias = causal if bias is None else bias + causal
    if left >= 0 or right >= 0:         # a sliding window around query i's position
        if nonpad is not None:          # diff = (i + nonpad[b] - lq) - j
            diff = lens + ctx.const(i - j - lq, "int64")
        else:
            offset = static_shape_of(past_k)[2] if past_k is not None else 0
            diff = ctx.const(i + offset - j, "int64")
        allowed = F.eq(diff, diff)                       # all True, diff's shape
        if left >= 0:
            allowed = F.logical_and(allowed, F.le(diff, ctx.const(left, "int64")))
        if right >= 0:
            allowed = F.logical_and(allowed, F.le(F.neg(diff), ctx.const(right, "int64")))
        window = _neg_inf_where(ctx, allowed, dt)
        bias = window if bias is None else bias + window
    if nonpad is not None:
        padding = _neg_inf_where(ctx, F.lt(ctx.const(j, "int64"), lens), dt)
        bias = padding if bias is None else bias + padding
    hk = static_shape_of(k)[1]
    if hq != hk:
        if hq % hk:
            refuse(f"{hq} query heads over {hk} key/value heads")
        r = hq // hk

        def repeat(t):
            b, h, n, d = static_shape_of(t)
            t = F.expand(F.reshape(t, b, h, 1, n, d), b, h, r, n, d)
            return F.reshape(t, b, h * r, n, d)
        k, v = repeat(k), repeat(v)
    qk = F.matmul(q * ctx.const(root, dt), F.transpose(k * ctx.const(root, dt), -1, -2))
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        qk = F.tanh(qk / ctx.const(softcap, dt)) * ctx.const(softcap, dt)
    logits = qk if bias is None else qk + bias
    mode = ctx.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        refuse(f"qk_matmul_output_mode {mode}")
    qk_out = logits if mode == 2 else qk
    precision = ctx.attr("softmax_precision")
    sdt = np_dtype_of(precision) if precision else dt
    if sdt not in FLOATS:
        refuse(f"softmax_precision {sdt}")
    probs = F.softmax(cast(logits, sdt), -1)
    if bias is not None:                 # a row with no key allowed: zeros, never NaN
        dead = F.eq(F.amax(bias, -1, keepdim=True), ctx.const(-np.inf, dt))
        probs = F.where(dead, ctx.const(0, sdt), probs)
    if mode == 3:
        qk_out = probs
    y = F.matmul(cast(probs, dt), v)
    if three_d:
        b, h, n, d = static_shape_of(y)
        y = F.reshape(F.permute(y, 0, 2, 1, 3), b, n, h * d)
    return y, present_k, present_v, cast(qk_out, dt)


# -- Resize: per axis, a gather (nearest) or a matrix of interpolation weights (linear, cubic) ---
def _resize_coeffs(mode, nearest_mode, a, antialias, ratio, scale):
    """The weights on the neighbours of one output position (ONNX's Resize reference)."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        table = {"round_prefer_floor": (ratio <= 0.5, ratio > 0.5),
                 "round_prefer_ceil": (ratio < 0.5, ratio >= 0.5),
                 "floor": (1, 0), "ceil": (0, 1)}
        return np.array(table[nearest_mode], dtype=np.float64)
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    if not antialias:
        r1, r2 = ratio + 1, 2 - ratio
        return np.array([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                         ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                         ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
                         ((a * r2 - 5 * a) * r2 + 8 * a) * r2 - 4 * a])
    s = min(scale, 1.0)

    def w(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x * x + 1
        return a * x ** 3 - 5 * a * x * x + 8 * a * x - 4 * a if x < 2 else 0.0
    start = int(np.floor(-2 / s) + 1)
    c = np.array([w(s * (i - ratio)) for i in range(start, 2 - start)])
    return c / c.sum()


def _resize_matrix(ctx, n_in, n_out, scale, roi, coord, mode, nearest_mode, a, antialias,
                   exclude_outside):
    """(weights (n_out, n_in), extrapolated (n_out,) bool or None) of one axis."""
    check_size((n_out, n_in), np.float64, "the resize weights")
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    extrap = None
    if coord == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        x = (np.full(n_out, (roi[1] - roi[0]) * (n_in - 1) / 2) if width == 1
             else y * (roi[1] - roi[0]) * (n_in - 1) / (width - 1))
        x = x + roi[0] * (n_in - 1)
        extrap = (x < 0) | (x > n_in - 1)
    elif coord == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    else:
        refuse(f"coordinate_transformation_mode {coord!r}")
    fl = np.floor(x).astype(np.int64)
    ratios = np.where(x == fl, 1.0, x - fl)
    coeffs = np.stack([_resize_coeffs(mode, nearest_mode, a, antialias, float(r), scale)
                       for r in ratios])
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    weights = np.zeros((n_out, n_in))
    np.add.at(weights, (np.repeat(np.arange(n_out), n), np.clip(idx, 0, n_in - 1).ravel()),
              coeffs.ravel())
    return weights, extrap


def _repeat_factors(ctx, shape, axes, scales, sizes, mode, coord, nearest_mode, policy, roi):
    """{axis: k} when this Resize repeats each element k times along some symbolic dims
    (nearest neighbour by whole factors, which torch's ``interpolate(scale_factor=2)``
    exports): then no size need be known. None where it does something else. With a whole
    factor k, half_pixel's source coordinate (i + 0.5) / k - 0.5 lies strictly within half
    a step of i // k, so any round_* mode picks it; asymmetric's i / k floors to it."""
    resized = {}
    for i, d in enumerate(axes):
        if sizes is not None:
            k = dim_quotient(sizes[i], shape[d])
        else:
            k = float(scales[i])
            k = int(k) if k.is_integer() else None
        if not isinstance(k, int) or k < 1:
            return None
        if k > 1:
            resized[d] = k
    if all(isinstance(shape[d], int) for d in resized) or mode != "nearest" or \
            policy != "stretch" or roi is not None and coord == "tf_crop_and_resize":
        return None
    if coord in ("half_pixel", "pytorch_half_pixel") and nearest_mode.startswith("round"):
        return resized
    if coord == "asymmetric" and nearest_mode == "floor":
        return resized
    return None


def _repeat_axes(ctx, x, factors):
    """``x`` with each element repeated ``k`` times along each axis of ``factors``: a
    gather of i // k for i < k * size (the size may be symbolic)."""
    for d, k in factors.items():
        n = dim_product([x.shape[d], k])
        picks = F.floor_divide(_counting(ctx, n), ctx.const(k, "int64"))
        x = F.index_select(x, d, picks)
    return x


@handler("Resize")
def _resize(ctx):
    x = ctx.x(0)
    shape = ctx.shape()          # symbolic dims only along axes that keep their size
    r = len(shape)
    if ctx.opset < 11:
        refuse("Resize before opset 11")
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        refuse(f"mode {mode!r}")
    antialias = bool(ctx.attr("antialias", 0))
    if antialias and mode == "nearest":
        refuse("antialias with mode 'nearest'")
    if mode != "nearest" and x.dtype not in FLOATS:
        refuse(f"{mode} interpolation of {x.dtype}")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    if nearest_mode not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        refuse(f"nearest_mode {nearest_mode!r}")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    axes = [_axis(a, r) for a in (ctx.attr("axes") or range(r))]
    roi = ctx.known(1, "roi").astype(np.float64) if ctx.has(1) else None
    if roi is not None and roi.size == 0:
        roi = None
    scales = ctx.known(2, "scales").astype(np.float64) if ctx.has(2) else None
    if scales is not None and scales.size == 0:
        scales = None
    sizes = ctx.dims(3, "sizes") if ctx.has(3) else None
    if (scales is None) == (sizes is None):
        refuse("exactly one of scales and sizes must be given")
    factors = _repeat_factors(ctx, shape, axes, scales, sizes, mode, coord, nearest_mode,
                              policy, roi)
    if factors is not None:              # nearest, by whole factors, over symbolic dims
        return _repeat_axes(ctx, x, factors)
    for i, d in enumerate(axes):
        kept = sizes[i] == shape[d] if sizes is not None else float(scales[i]) == 1.0
        if not isinstance(shape[d], int) and not (kept and policy == "stretch"):
            refuse(f"resizing the symbolic dim {shape[d]} (axis {d}): its output size "
                   "needs the input's size known (give it in input_shapes)")
        if not kept and sizes is not None and not isinstance(sizes[i], int):
            refuse(f"the output size {sizes[i]} (axis {d}) differs from the input's "
                   f"{shape[d]}: a resized size must be a number")
    full_roi = [0.0] * r + [1.0] * r
    if roi is not None:
        for i, d in enumerate(axes):
            full_roi[d], full_roi[r + d] = roi[i], roi[len(axes) + i]
    scale = [1.0] * r
    out = list(shape)
    if sizes is not None:
        for i, d in enumerate(axes):
            out[d] = sizes[i]
            scale[d] = sizes[i] / shape[d] if isinstance(shape[d], int) else 1.0
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                refuse(f"keep_aspect_ratio_policy {policy!r}")
            pick = min if policy == "not_larger" else max
            s = pick(scale[d] for d in axes)
            for d in axes:
                scale[d] = s
                out[d] = int(s * shape[d] + 0.5)
    else:
        for i, d in enumerate(axes):
            scale[d] = float(scales[i])
            out[d] = int(scales[i] * shape[d]) if isinstance(shape[d], int) else shape[d]
    extrapolation = ctx.attr("extrapolation_value", 0.0)
    a = ctx.attr("cubic_coeff_a", -0.75)
    y = x if mode == "nearest" else cast(x, "float64")
    for d in range(r):
        if math.isclose(scale[d], 1.0) and out[d] == shape[d] and (
                math.isclose(full_roi[d], 0.0) and math.isclose(full_roi[r + d], 1.0)):
            continue
        if not isinstance(shape[d], int):
            refuse(f"a region of interest along the symbolic dim {shape[d]} (axis {d})")
        if out[d] == 0:
            refuse("an empty output")
        w, extrap = _resize_matrix(ctx, shape[d], out[d], scale[d], [full_roi[d],
                                   full_roi[r + d]], coord, mode, nearest_mode, a, antialias,
                                   bool(ctx.attr("exclude_outside", 0)))
        if mode == "nearest":             # one source per output: a gather, exact
            y = F.index_select(y, d, ctx.const(np.argmax(w, axis=1), "int64"))
        else:
            moved = F.transpose(y, d, -1) if d != r - 1 else y
            moved = F.matmul(moved, ctx.const(w.T.copy(), "float64"))
            y = F.transpose(moved, d, -1) if d != r - 1 else moved
        if extrap is not None and extrap.any():
            where_shape = [1] * r
            where_shape[d] = out[d]
            y = F.where(ctx.const(extrap.reshape(where_shape), "bool"),
                        ctx.const(extrapolation, y.dtype), y)
    return cast(y, x.dtype)


# -- 1-D convolution and pooling as 2-D ones over a height of 1 ----------------------------------
def _lift_1d(fn, weight: bool):
    """Run a 2-D handler on (N, C, L) inputs as (N, C, 1, L): the attributes get a leading
    1 (kernel, strides, dilations, output_shape), 0 (output_padding) or 0-pads."""
    def run(ctx):
        x = ctx.x(0)
        if x.ndim != 3:
            return fn(ctx)
        helper = _onnx().helper
        lead = {"kernel_shape": 1, "strides": 1, "dilations": 1, "output_shape": 1,
                "output_padding": 0}
        attrs = dict(ctx.attrs)
        for name, first in lead.items():
            if name in attrs:
                attrs[name] = helper.make_attribute(name, [first] + list(ctx.attr(name)))
        if "pads" in attrs:
            lo, hi = ctx.attr("pads")
            attrs["pads"] = helper.make_attribute("pads", [0, lo, 0, hi])
        ctx.attrs = attrs
        ins = list(ctx.ins)
        ins[0] = F.unsqueeze(x, 2)
        if weight:
            ins[1] = F.unsqueeze(ctx.x(1), 2)
        ctx.ins = ins
        out = fn(ctx)
        if isinstance(out, (list, tuple)):
            return type(out)(F.squeeze(o, 2) if o is not None else None for o in out)
        return F.squeeze(out, 2)
    return run


for _name, _weight in (("Conv", True), ("MaxPool", False), ("AveragePool", False)):
    handler(_name)(_lift_1d(HANDLERS[_name], _weight))


@handler("ConvTranspose")
def _conv_transpose(ctx):
    """ConvTranspose as conv2d's input gradient (a transposed convolution): the weight
    (C_in, C_out/groups, kh, kw) is conv2d's (out, in/groups, kh, kw) read the other way."""
    x, w = ctx.x(0), ctx.x(1)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D ConvTranspose (needs op conv_transpose3d)")
    _float_only(ctx)
    n, c_in, h, wd = static_shape(ctx)
    _, cg, kh, kw = static_shape(ctx, 1)
    groups = ctx.attr("group", 1)
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    out_pad = list(ctx.attr("output_padding", [0, 0]))
    auto = ctx.attr("auto_pad", "NOTSET")
    eff = [(kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1]
    full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, (h, wd), out_pad, eff)]
    if ctx.attr("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(ctx.attr("output_shape") or [])[-2:] or [i * s for i, s in
                                                                zip((h, wd), strides)]
        pads, grow = [], []
        for f, t, st in zip(full, target, strides):
            total = f - t
            if total < 0 and -total >= st:
                refuse(f"output_shape {target}: more than stride - 1 past the full output")
            grow.append(max(0, -total))       # extra rows at the end, as output_padding
            total = max(total, 0)
            half = total // 2
            pads.append((total - half, half) if auto != "SAME_UPPER" else (half, total - half))
        (pt, pb), (pl, pr) = pads
        full = [f + g for f, g in zip(full, grow)]
    elif auto == "VALID":
        pt = pb = pl = pr = 0
    else:
        pt, pl, pb, pr = list(ctx.attr("pads", [0, 0, 0, 0]))
    if min(pt, pb, pl, pr) < 0:
        refuse("negative pads")
    if any(op >= s for op, s in zip(out_pad, strides)):
        refuse(f"output_padding {out_pad} not below the strides {strides}")
    shape = (n, cg * groups, full[0] - pt - pb, full[1] - pl - pr)
    from ..graphlib.ops.conv import conv2d_input_grad_op
    y = conv2d_input_grad_op(x, w, shape=shape, stride=tuple(strides),
                             padding=(pt, pb, pl, pr), dilation=tuple(dil), groups=groups)
    if ctx.has(2):
        y = y + F.reshape(ctx.x(2), 1, -1, 1, 1)
    return y


handler("ConvTranspose")(_lift_1d(HANDLERS["ConvTranspose"], True))


# -- GatherND / ScatterND: index tuples flattened to one index into the leading dims ------------
def _nd_flatten(ctx, x, idx, batch_dims):
    """(x as (B, M, rest...), idx as (B, L) flat indices into the M = prod(x.shape[b:b+k])
    positions, idx's leading shape, rest)."""
    shape = static_shape_of(x)
    ishape = static_shape_of(idx)
    k = ishape[-1]
    b = batch_dims
    if b + k > len(shape):
        refuse(f"index tuples of {k} into {len(shape) - b} dims")
    if ishape[:b] != shape[:b]:
        refuse(f"batch dims {ishape[:b]} and {shape[:b]} differ")
    if idx.dtype not in ("int32", "int64"):
        refuse(f"indices of dtype {idx.dtype}")
    sizes = shape[b:b + k]
    idx = cast(idx, "int64")
    lead = ishape[:-1]
    batch = int(np.prod(shape[:b], dtype=np.int64))
    m = int(np.prod(sizes, dtype=np.int64))
    rest = tuple(shape[b + k:])
    strides = np.cumprod((sizes[1:] + (1,))[::-1])[::-1].astype(np.int64)
    sz = ctx.const(np.asarray(sizes, np.int64), "int64")
    idx = F.where(F.lt(idx, ctx.const(0, "int64")), idx + sz, idx)
    flat = F.sum(idx * ctx.const(strides, "int64"), -1)
    per = int(np.prod(ishape[b:-1], dtype=np.int64))
    flat = F.reshape(flat, batch, per) + ctx.const(
        (np.arange(batch, dtype=np.int64) * m).reshape(batch, 1), "int64")
    return F.reshape(x, batch * m, *rest), F.reshape(flat, -1), lead, rest


@handler("GatherND")
def _gather_nd(ctx):
    x, idx = ctx.x(0), ctx.x(1)
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, ctx.attr("batch_dims", 0))
    return F.reshape(F.index_select(data, 0, flat), *(tuple(lead) + rest))


@handler("ScatterND")
def _scatter_nd(ctx):
    x, idx, upd = ctx.x(0), ctx.x(1), ctx.x(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add"):
        refuse(f"reduction {reduction!r} (duograph has index_add only)")
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, 0)
    src = F.reshape(upd, -1, *rest)
    if reduction == "add":
        y = F.index_add(data, 0, flat, src)
    else:
        y = _overwrite(ctx, data, lambda t, u: F.index_add(t, 0, flat, u), src)
    return F.reshape(cast(y, x.dtype), *static_shape_of(x))


def _take(ctx, x, axis, idx):
    return F.index_select(x, axis, ctx.const(np.asarray(idx, np.int64), "int64"))


@handler("CenterCropPad")
def _center_crop_pad(ctx):
    """Crop (a centred slice) or zero-pad each listed axis to the given size."""
    x = ctx.x(0)
    shape = static_shape(ctx)
    target = [int(t) for t in ctx.known(1, "shape")]
    axes = [_axis(a, x.ndim) for a in (ctx.attr("axes") or range(x.ndim))]
    if len(axes) != len(target):
        refuse(f"{len(target)} sizes for {len(axes)} axes")
    for a, t in zip(axes, target):
        size = shape[a]
        if t < size:
            start = (size - t) // 2
            x = _take(ctx, x, a, np.arange(start, start + t))
        elif t > size:
            lo = (t - size) // 2
            pad = [0, 0] * (x.ndim - 1 - a) + [lo, t - size - lo]
            x = F.pad(x, pad, value=False if x.dtype == "bool" else 0)
    return cast(x, ctx.dtype(0))


@handler("RotaryEmbedding")
def _rotary(ctx):
    """Rotary position embedding (opset 23): rotate pairs of features by the cached angles."""
    x, cos, sin = ctx.x(0), ctx.x(1), ctx.x(2)
    _float_only(ctx)
    shape = static_shape(ctx)
    if x.ndim == 4:
        x = F.permute(x, 0, 2, 1, 3)
    elif x.ndim == 3:
        heads = ctx.attr("num_heads", 0)
        if not heads or shape[2] % heads:
            refuse(f"num_heads {heads} for a hidden size of {shape[2]}")
        x = F.reshape(x, shape[0], shape[1], heads, shape[2] // heads)
    else:
        refuse(f"a {x.ndim}-D input (3-D or 4-D)")
    b, s, h, d = static_shape_of(x)
    rd = ctx.attr("rotary_embedding_dim", 0) or d
    if rd % 2 or rd > d:
        refuse(f"rotary_embedding_dim {rd} for heads of {d}")
    if ctx.has(3):
        pos = ctx.x(3)
        pshape = static_shape_of(pos)
        cos = F.reshape(F.index_select(cos, 0, F.reshape(cast(pos, "int64"), -1)),
                        *pshape, rd // 2)
        sin = F.reshape(F.index_select(sin, 0, F.reshape(cast(pos, "int64"), -1)),
                        *pshape, rd // 2)
    if static_shape_of(cos)[-1] != rd // 2 or static_shape_of(sin)[-1] != rd // 2:
        refuse(f"cos/sin caches of width {static_shape_of(cos)[-1]} for a rotary dim of {rd}")
    cos, sin = F.unsqueeze(cos, 2), F.unsqueeze(sin, 2)
    rot = _take(ctx, x, 3, np.arange(rd)) if rd < d else x
    interleaved = bool(ctx.attr("interleaved", 0))
    if interleaved:
        x1, x2 = _take(ctx, rot, 3, np.arange(0, rd, 2)), _take(ctx, rot, 3, np.arange(1, rd, 2))
    else:
        x1, x2 = _take(ctx, rot, 3, np.arange(rd // 2)), _take(ctx, rot, 3, np.arange(rd // 2, rd))
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rot = F.reshape(F.stack([real, imag], -1), b, s, h, rd)
    else:
        rot = F.cat([real, imag], -1)
    if rd < d:
        rot = F.cat([rot, _take(ctx, x, 3, np.arange(rd, d))], -1)
    rot = cast(rot, ctx.dtype(0))
    if len(shape) == 3:
        return F.reshape(rot, *shape)
    return F.permute(rot, 0, 2, 1, 3)


@handler("LpPool")
def _lp_pool(ctx):
    """(sum over each window of |x|**p) ** (1/p): the sum as a depthwise conv2d with a kernel
    of ones (any pads, strides, dilations)."""
    _float_only(ctx)
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"{x.ndim - 2}-D pooling (needs a 2-D or 1-D input)")
    if ctx.attr("ceil_mode", 0):
        refuse("ceil_mode=1")
    c = static_shape(ctx)[1]
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    p = ctx.attr("p", 2)
    pt, pb, pl, pr = _pads_2d(ctx, kernel, strides, dil, x.shape[2:])
    from ..graphlib.ops.conv import conv2d_op
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    powered = F.pow(F.abs(x), ctx.const(p, x.dtype))
    total = conv2d_op(powered, ones, stride=tuple(strides), padding=(pt, pb, pl, pr),
                      dilation=tuple(dil), groups=c)
    return F.pow(total, ctx.const(1.0 / p, x.dtype))


handler("LpPool")(_lift_1d(HANDLERS["LpPool"], False))


def _window_mean(ctx, x, kernel, strides, dil, pads, include_pad):
    """Average pooling with any pads and dilations: window sums as a depthwise conv2d with a
    kernel of ones, over the count of (real, or with include_pad all) places."""
    from ..graphlib.ops.conv import conv2d_op
    c = static_shape(ctx)[1]
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    conv = dict(stride=tuple(strides), padding=(pads[0], pads[1], pads[2], pads[3]),
                dilation=tuple(dil), groups=c)
    total = conv2d_op(x, ones, **conv)
    if include_pad:
        return total / float(np.prod(kernel))
    count = conv2d_op(F.ones_like(x), ones, **conv)
    return total / count


def _window(kind: str):
    """Hann, Hamming and Blackman windows of a known size, computed in float64 (the ONNX
    reference's formulas) and rounded once to the output type."""
    def run(ctx):
        size = int(ctx.known(0, "size").item())
        dt = np_dtype_of(ctx.attr("output_datatype", 1))
        check_size((size,), np.float64, "the window")
        n = np.arange(size, dtype=np.float64)
        period = size if ctx.attr("periodic", 1) else size - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            if kind == "hann":
                w = np.sin(n * np.pi / period) ** 2
            elif kind == "hamming":
                w = 25.0 / 46.0 - np.cos(n * np.pi * 2 / period) * (21.0 / 46.0)
            else:
                w = 0.42 - 0.5 * np.cos(n * np.pi * 2 / period) + \
                    0.08 * np.cos(n * np.pi * 4 / period)
        return ctx.const(w.astype(dt), dt)
    return run


handler("HannWindow")(_window("hann"))
handler("HammingWindow")(_window("hamming"))
handler("BlackmanWindow")(_window("blackman"))


@handler("SwiGLU")
def _swiglu(ctx):
    """a * sigmoid(alpha * a) * b."""
    _float_only(ctx)
    _check_same(ctx)
    a, b = ctx.x(0), ctx.x(1)
    if tuple(a.shape) != tuple(b.shape):
        refuse(f"operands of shapes {list(a.shape)} and {list(b.shape)} (no broadcasting)")
    return cast(a * F.sigmoid(a * ctx.attr("alpha", 1.0)) * b, a.dtype)


@handler("LRN")
def _lrn(ctx):
    """x / (bias + alpha/size * (sum of squares over the neighbouring channels)) ** beta; the
    channel sums as a matmul by a 0/1 band matrix."""
    _float_only(ctx)
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"a {x.ndim}-D input (LRN takes 4-D)")
    c = static_shape(ctx)[1]
    size = ctx.attr("size")
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2) + 1
    check_size((c, c), np.float64, "the channel band")
    k = np.arange(c)
    band = ((k[None, :] >= k[:, None] - lo) & (k[None, :] < k[:, None] + hi)).astype(x.dtype)
    sq = F.permute(F.matmul(F.permute(x * x, 0, 2, 3, 1), ctx.const(band.T.copy(), x.dtype)),
                   0, 3, 1, 2)
    scale = sq * (ctx.attr("alpha", 1e-4) / size) + ctx.attr("bias", 1.0)
    return cast(x / F.pow(scale, ctx.const(ctx.attr("beta", 0.75), x.dtype)), x.dtype)


@handler("GroupNormalization")
def _group_norm(ctx):
    """Mean and variance over each group of channels (and the spatial dims), then the
    per-channel (opset 21; per-group before) scale and bias."""
    _float_only(ctx)
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    shape = static_shape(ctx)
    n, c = shape[:2]
    g = ctx.attr("num_groups")
    if not g or c % g:
        refuse(f"{c} channels in {g} groups")
    stash = ctx.attr("stash_type", 1)
    work = "float32" if stash == 1 and x.dtype == "float16" else x.dtype
    if stash not in (1,):
        refuse(f"stash_type {stash}")
    xg = F.reshape(cast(x, work), n, g, -1)
    mean = F.mean(xg, -1, keepdim=True)
    centred = xg - mean
    var = F.mean(centred * centred, -1, keepdim=True)
    y = F.reshape(centred * F.rsqrt(var + ctx.attr("epsilon", 1e-5)), *shape)
    if static_shape_of(scale)[0] == g and g != c:           # opset 18: one per group
        scale = F.reshape(F.expand(F.reshape(scale, g, 1), g, c // g), c)
        bias = F.reshape(F.expand(F.reshape(bias, g, 1), g, c // g), c)
    per = (1, c) + (1,) * (len(shape) - 2)
    y = y * F.reshape(cast(scale, work), *per) + F.reshape(cast(bias, work), *per)
    return cast(y, x.dtype)


@handler("Upsample")
def _upsample(ctx):
    """Upsample (deprecated) in 'nearest' mode with whole scales: each element repeated."""
    x = ctx.x(0)
    shape = static_shape(ctx)
    scales = ctx.known(1, "scales") if ctx.has(1) else ctx.attr("scales")
    scales = [float(s) for s in np.asarray(scales).ravel()]
    if ctx.attr("mode", "nearest") != "nearest" or any(not s.is_integer() for s in scales):
        refuse(f"mode {ctx.attr('mode', 'nearest')!r} with scales {scales} (only 'nearest' "
               "with whole scales)")
    for d, s in enumerate(scales):
        if s != 1:
            check_size((int(shape[d] * s),), np.int64, f"the index of axis {d}")
            x = _take(ctx, x, d, np.arange(int(shape[d] * s)) // int(s))
    return x


# -- cumulative products, top-k, einsum, scatter reductions --------------------------------------
def _shift_exclusive(ctx, y, axis, n, fill):
    """``y`` moved one place along ``axis`` with ``fill`` in front (an exclusive scan)."""
    shape = list(y.shape)
    shape[axis] = 1
    first = F.full(tuple(shape), fill, dtype=y.dtype)
    if ctx.eager:
        from .. import eager
        first = eager.tensor(np.full(shape, fill, dtype=y.dtype))
    if isinstance(n, int) and n <= 1:
        return first if n == 1 else y
    index = [slice(None)] * y.ndim
    index[axis] = slice(0, -1)
    return F.cat([first, F.getitem(y, tuple(index))], axis)


@handler("CumProd")
def _cumprod(ctx):
    """CumProd with its exclusive (a leading 1) and reverse (from the end) attributes."""
    x = ctx.x(0)
    if x.dtype not in FLOATS and x.dtype not in ("int32", "int64"):
        refuse(f"CumProd of {x.dtype}")
    axis = _axis(int(np.asarray(ctx.known(1, "axis")).item()), x.ndim)
    n = ctx.shape()[axis]
    rev = bool(ctx.attr("reverse", 0))
    y = F.flip(x, (axis,)) if rev else x
    y = cast(F.cumprod(y, axis), x.dtype)
    if ctx.attr("exclusive", 0):
        y = _shift_exclusive(ctx, y, axis, n, 1)
    return F.flip(y, (axis,)) if rev else y


@handler("TopK")
def _topk(ctx):
    """TopK through duograph's stable sort: among equal values the lower index comes first,
    as ONNX requires; ``sorted=0`` (any order allowed) gives the sorted order too."""
    x = ctx.x(0)
    if x.dtype == "bool":
        refuse("TopK of bool")
    if ctx.opset < 10:
        k = int(ctx.attr("k"))
    else:
        k = int(np.asarray(ctx.known(1, "K")).reshape(-1)[0])
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    size = static_shape(ctx, 0, [axis])[axis]
    if not 0 <= k <= size:
        refuse(f"K={k} out of range for an axis of size {size}")
    values, indices = F.topk(x, k, axis, largest=bool(ctx.attr("largest", 1)), sorted=True)
    return [values, cast(indices, "int64")]


@handler("Einsum")
def _einsum(ctx):
    eq = ctx.attr("equation").replace(" ", "")
    ops = [ctx.x(i) for i in range(len(ctx.ins))]
    dt = ops[0].dtype
    if any(o.dtype != dt for o in ops):
        refuse(f"operands of different dtypes {[o.dtype for o in ops]}")
    if dt not in FLOATS and dt not in ("int32", "int64"):
        refuse(f"Einsum of {dt}")
    if dt == "bfloat16":          # accumulated in float32 and rounded once, as PyTorch
        ops = [F.cast(o, "float32") for o in ops]
    try:
        y = F.einsum(eq, *ops)
    except Exception as e:        # duograph's own error names what it cannot do
        refuse(f"equation {eq!r}: {str(e).splitlines()[0]}")
    return cast(y, dt)


_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@handler("ScatterElements", "Scatter")
def _scatter_elements_reduce(ctx):
    """ScatterElements; the reductions add, mul, max and min combine the updates with the
    data's own value (scatter_reduce with include_self=True)."""
    reduction = ctx.attr("reduction", "none")
    if reduction == "none":
        return _scatter_elements(ctx)
    if reduction not in _SCATTER_REDUCE:
        refuse(f"reduction {reduction!r}")
    x, idx, src = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    axis = _axis(ctx.attr("axis", 0), x.ndim)
    idx = _fix_negative(ctx, idx, x.shape[axis])
    return cast(F.scatter_reduce(x, axis, idx, src, _SCATTER_REDUCE[reduction]), x.dtype)


@handler("ScatterND")
def _scatter_nd_reduce(ctx):
    """ScatterND; mul, max and min as scatter_reduce over the flattened index tuples."""
    reduction = ctx.attr("reduction", "none")
    if reduction in ("none", "add"):
        return _scatter_nd(ctx)
    if reduction not in _SCATTER_REDUCE:
        refuse(f"reduction {reduction!r}")
    x, idx, upd = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype == "bool":
        refuse("scattering bool tensors")
    data, flat, lead, rest = _nd_flatten(ctx, x, idx, 0)
    src = F.reshape(upd, -1, *rest)
    index = F.expand(F.reshape(flat, -1, *([1] * len(rest))), *static_shape_of(src))
    y = F.scatter_reduce(data, 0, index, src, _SCATTER_REDUCE[reduction])
    return F.reshape(cast(y, x.dtype), *static_shape_of(x))


# -- N-D (2-D and 3-D) convolution and pooling with any pads and ceil_mode ----------------------
def _pads_nd(ctx, kernel, strides, dil, sizes):
    """[(before, after)] per spatial dim from ``pads`` or ``auto_pad``."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * 2 * n))
        return [(pads[i], pads[i + n]) for i in range(n)]
    if auto == "VALID":
        return [(0, 0)] * n
    out = []
    for size, k, s, d in zip(sizes, kernel, strides, dil):
        if not isinstance(size, int):
            refuse("auto_pad over symbolic sizes")
        o = -(-size // s)
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return out


def _torch_pad(pads):
    """[(before, after)] per spatial dim as F.pad's list (last dim first)."""
    out = []
    for lo, hi in reversed(pads):
        out += [lo, hi]
    return out


def _pool_geometry(ctx, x):
    """(kernel, strides, dilations, pads, output sizes, extra end padding) of a pooling node
    by ONNX's rule: ceil_mode rounds the output size up, dropping a last window that would
    start past the input and its leading pad."""
    sizes = tuple(ctx.shape(0))[2:]
    if not all(isinstance(d, int) for d in sizes):
        refuse(f"symbolic spatial dims {list(ctx.shape(0))} (load with input_shapes=...)")
    n = len(sizes)
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != n:
        refuse(f"kernel_shape {kernel} for {n} spatial dims")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    pads = _pads_nd(ctx, kernel, strides, dil, sizes)
    if min(min(p) for p in pads) < 0:
        refuse("negative pads")
    ceil = bool(ctx.attr("ceil_mode", 0))
    outs, extra = [], []
    for size, k, s, d, (lo, hi) in zip(sizes, kernel, strides, dil, pads):
        span = size + lo + hi - (k - 1) * d - 1
        if span < 0:
            refuse(f"the window ({k} with dilation {d}) is larger than the padded input")
        o = -(-span // s) + 1 if ceil else span // s + 1
        if ceil and (o - 1) * s >= size + lo:
            o -= 1
        outs.append(o)
        extra.append(max(0, (o - 1) * s + (k - 1) * d + 1 - (size + lo + hi)))
    return kernel, strides, dil, pads, outs, extra


def _window_counts(sizes, kernel, strides, dil, pads, outs, include_pad):
    """How many places each (box) window averages over, as an array of the output's spatial
    shape: the taps inside the input (or, with ``include_pad``, inside the padded input)."""
    total = np.ones((), np.float64)
    for size, k, s, d, (lo, hi), o in zip(sizes, kernel, strides, dil, pads, outs):
        pos = np.arange(o)[:, None] * s - lo + np.arange(k)[None, :] * d
        lo_ok, hi_ok = (-lo, size + hi) if include_pad else (0, size)
        count = ((pos >= lo_ok) & (pos < hi_ok)).sum(1).astype(np.float64)
        total = np.multiply.outer(total, count)
    return total


def _depthwise_sum(ctx, x, kernel, strides, dil):
    """Window sums over an already padded ``x``: a depthwise convolution with ones."""
    c = x.shape[1]
    if not isinstance(c, int):
        refuse(f"a symbolic channel count in {list(x.shape)}")
    check_size((c, 1) + tuple(kernel), np.float64, "the window kernel")
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), x.dtype)
    if len(kernel) == 2:
        from ..graphlib.ops.conv import conv2d_op
        return conv2d_op(x, ones, stride=tuple(strides), padding=(0, 0, 0, 0),
                         dilation=tuple(dil), groups=c)
    return F.conv3d(x, ones, None, tuple(strides), 0, tuple(dil), c)


def _nd_pool(kind: str):
    """MaxPool / AveragePool over 2-D and 3-D float inputs with any pads, dilations and
    ceil_mode: the input padded explicitly (-inf for max, zeros for the sums), the windows
    taken without padding, averages divided by each window's count."""
    prev = HANDLERS["MaxPool" if kind == "max" else "AveragePool"]

    def run(ctx):
        x = ctx.x(0)
        if x.ndim not in (4, 5) or x.dtype not in FLOATS:
            return prev(ctx)
        indices = len([o for o in ctx.node.output if o]) > 1
        if kind == "avg" and x.ndim == 4 and not ctx.attr("ceil_mode", 0):
            return prev(ctx)
        if kind == "max" and not indices and not all(isinstance(d, int)
                                                      for d in x.shape[2:]):
            return _symbolic_max_pool(ctx, x)
        kernel, strides, dil, pads, outs, extra = _pool_geometry(ctx, x)
        full = [(lo, hi + e) for (lo, hi), e in zip(pads, extra)]
        if kind == "max":
            xp = F.pad(x, _torch_pad(full), value=-math.inf) if any(map(any, full)) else x
            pool = F.max_pool2d if x.ndim == 4 else F.max_pool3d
            if not indices:
                return pool(xp, kernel, strides, 0, dil, False)
            if x.ndim != 4:
                refuse("the Indices output of a 3-D MaxPool")
            y, flat = F.max_pool2d(xp, kernel, strides, 0, dil, False, return_indices=True)
            return [y, _onnx_pool_indices(ctx, x, flat, full, static_shape_of(xp))]
        xz = F.pad(x, _torch_pad(full)) if any(map(any, full)) else x
        total = _depthwise_sum(ctx, xz, kernel, strides, dil)
        count = _window_counts(tuple(ctx.shape(0))[2:], kernel, strides, dil, pads, outs,
                               bool(ctx.attr("count_include_pad", 0)))
        return cast(total / ctx.const(count, x.dtype), x.dtype)
    return run


def _symbolic_max_pool(ctx, x):
    """MaxPool over symbolic spatial dims: with explicit pads and floor rounding the windows
    need no extra end padding, so the sizes need not be known (ceil_mode and auto_pad
    SAME_* do need them)."""
    n = x.ndim - 2
    if ctx.attr("ceil_mode", 0) or ctx.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        refuse(f"ceil_mode or auto_pad over the symbolic spatial dims "
               f"{[str(d) for d in x.shape[2:]]} (load with input_shapes=...)")
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != n:
        refuse(f"kernel_shape {kernel} for {n} spatial dims")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    flat = list(ctx.attr("pads", [0] * 2 * n)) if ctx.attr("auto_pad", "NOTSET") == "NOTSET" \
        else [0] * 2 * n
    full = list(zip(flat[:n], flat[n:]))
    if min(min(p) for p in full) < 0:
        refuse("negative pads")
    xp = F.pad(x, _torch_pad(full), value=-math.inf) if any(map(any, full)) else x
    pool = F.max_pool2d if x.ndim == 4 else F.max_pool3d
    return pool(xp, kernel, strides, 0, dil, False)


def _onnx_pool_indices(ctx, x, flat, full, padded_shape):
    """max_pool2d's flat H*W indices into the padded input as ONNX's Indices: flattened over
    the whole (N, C, H, W) input, row-major (storage_order 0) or column-major over H, W."""
    n, c, h, w = static_shape(ctx)
    wp = padded_shape[3]
    flat = cast(flat, "int64")
    row = F.floor_divide(flat, ctx.const(wp, "int64")) - ctx.const(full[0][0], "int64")
    col = F.remainder(flat, ctx.const(wp, "int64")) - ctx.const(full[1][0], "int64")
    inner = row * ctx.const(w, "int64") + col if not ctx.attr("storage_order", 0) else \
        col * ctx.const(h, "int64") + row
    check_size((n, c), np.int64, "the index base")
    base = (np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1)
    return inner + ctx.const(base, "int64")


handler("MaxPool")(_lift_1d(_nd_pool("max"), False))
handler("AveragePool")(_lift_1d(_nd_pool("avg"), False))


def _conv_nd_wrap():
    prev = HANDLERS["Conv"]

    def run(ctx):
        """Conv over (N, C, D, H, W): conv3d after explicit zero padding."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        w = ctx.x(1)
        kernel = list(static_shape(ctx, 1)[2:])
        strides = list(ctx.attr("strides", [1] * 3))
        dil = list(ctx.attr("dilations", [1] * 3))
        pads = _pads_nd(ctx, kernel, strides, dil, x.shape[2:])
        if min(min(p) for p in pads) < 0:
            refuse("negative pads")
        if any(map(any, pads)):
            x = F.pad(x, _torch_pad(pads))
        b = ctx.x(2) if ctx.has(2) else None
        return F.conv3d(x, w, b, tuple(strides), 0, tuple(dil), ctx.attr("group", 1))
    return run


def _conv_transpose_nd_wrap():
    prev = HANDLERS["ConvTranspose"]

    def run(ctx):
        """ConvTranspose over (N, C, D, H, W) with symmetric pads: conv_transpose3d."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        auto = ctx.attr("auto_pad", "NOTSET")
        if ctx.attr("output_shape") is not None or auto not in ("NOTSET", "", "VALID"):
            refuse("output_shape or auto_pad SAME_* on a 3-D ConvTranspose")
        pads = [0] * 6 if auto == "VALID" else list(ctx.attr("pads", [0] * 6))
        if pads[:3] != pads[3:]:
            refuse(f"asymmetric pads {pads} on a 3-D ConvTranspose")
        strides = list(ctx.attr("strides", [1] * 3))
        out_pad = list(ctx.attr("output_padding", [0] * 3))
        if any(op >= s for op, s in zip(out_pad, strides)):
            refuse(f"output_padding {out_pad} not below the strides {strides}")
        b = ctx.x(2) if ctx.has(2) else None
        return F.conv_transpose3d(x, ctx.x(1), b, tuple(strides), tuple(pads[:3]),
                                  tuple(out_pad), ctx.attr("group", 1),
                                  tuple(ctx.attr("dilations", [1] * 3)))
    return run


handler("Conv")(_conv_nd_wrap())
handler("ConvTranspose")(_conv_transpose_nd_wrap())


# -- data-dependent output sizes: only for values known when the graph is built -----------------
def _data_dependent(ctx, what):
    if not ctx.eager:
        refuse(f"the output size of {what} depends on the input values, and duograph graphs "
               "have shapes fixed when the graph is built (only a constant input is "
               "computed)")


@handler("NonZero")
def _nonzero(ctx):
    _data_dependent(ctx, "NonZero")
    arr = np.asarray(ctx.x(0).numpy())
    return ctx.const(np.array(np.nonzero(arr), dtype=np.int64).reshape(arr.ndim, -1), "int64")


@handler("Unique")
def _unique(ctx):
    """Unique of a known tensor (numpy's unique; sorted=0 keeps first-occurrence order)."""
    _data_dependent(ctx, "Unique")
    arr = np.asarray(ctx.x(0).numpy())
    axis = ctx.attr("axis")
    if axis is not None:
        axis = _axis(axis, arr.ndim)
    y, first, inverse, counts = np.unique(arr, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [ctx.const(y, str(arr.dtype)), ctx.const(first, "int64"),
            ctx.const(inverse, "int64"), ctx.const(counts, "int64")]


def _lp_pool_3d_wrap():
    prev = HANDLERS["LpPool"]

    def run(ctx):
        """LpPool over (N, C, D, H, W): (window sums of |x|**p) ** (1/p), the sums a
        depthwise conv3d with ones over the zero-padded input."""
        x = ctx.x(0)
        if x.ndim != 5:
            return prev(ctx)
        _float_only(ctx)
        kernel, strides, dil, pads, _, extra = _pool_geometry(ctx, x)
        full = [(lo, hi + e) for (lo, hi), e in zip(pads, extra)]
        p = ctx.attr("p", 2)
        powered = F.pow(F.abs(x), ctx.const(p, x.dtype))
        if any(map(any, full)):
            powered = F.pad(powered, _torch_pad(full))
        total = _depthwise_sum(ctx, powered, kernel, strides, dil)
        return F.pow(total, ctx.const(1.0 / p, x.dtype))
    return run


handler("LpPool")(_lp_pool_3d_wrap())


# -- GridSample: the ONNX reference's rules, composed from gathers ------------------------------
def _gs_reflect(ctx, x, lo: float, hi: float):
    """x reflected by the near border until inside [lo, hi] (the reference's _gs_reflect)."""
    dt = x.dtype
    c = lambda v: ctx.const(v, dt)          # noqa: E731
    rng = hi - lo
    if rng <= 0:
        return F.where(F.lt(x, c(lo)), c(lo), F.where(F.gt(x, c(hi)), c(hi), x))

    def fold(dx):                           # dx >= 0: (r, whether the fold count is even)
        n = _floor(ctx, dx / rng)
        even = F.eq(n - _floor(ctx, n * 0.5) * 2.0, c(0))
        return dx - n * rng, even
    r_lo, even_lo = fold(F.maximum(c(lo) - x, c(0)))
    r_hi, even_hi = fold(F.maximum(x - c(hi), c(0)))
    below = F.where(even_lo, c(lo) + r_lo, c(hi) - r_lo)
    above = F.where(even_hi, c(hi) - r_hi, c(lo) + r_hi)
    return F.where(F.lt(x, c(lo)), below, F.where(F.gt(x, c(hi)), above, x))


def _gs_tap(ctx, i, size: int, lo: float, hi: float, padding: str):
    """(a valid int64 index, the mask of taps that read data) for integer-valued float taps
    ``i`` along a dim of ``size`` (the reference's _pixel_at_array)."""
    dt = i.dtype
    if padding == "zeros":
        ok = F.logical_and(F.ge(i, ctx.const(0, dt)), F.lt(i, ctx.const(size, dt)))
        idx = F.clamp(i, 0.0, float(size - 1))
        return cast(idx, "int64"), ok
    if padding == "border":
        return cast(F.clamp(i, 0.0, float(size - 1)), "int64"), None
    f = _gs_reflect(ctx, i, lo, hi)           # int(): toward zero; f >= lo >= -0.5
    return cast(F.clamp(_floor(ctx, F.maximum(f, ctx.const(0, dt))), 0.0,
                        float(size - 1)), "int64"), None


def _gs_cubic(ctx, t):
    a = -0.75
    one = ctx.const(1, t.dtype)
    two = ctx.const(2, t.dtype)
    t1, t2, t3 = t + 1.0, one - t, two - t
    return [((t1 * a - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((t * (a + 2)) - (a + 3)) * t * t + 1.0,
            ((t2 * (a + 2)) - (a + 3)) * t2 * t2 + 1.0,
            ((t3 * a - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


@handler("GridSample")
def _grid_sample(ctx):
    """GridSample (2-D and 3-D; nearest, linear, cubic; zeros, border, reflection padding)
    as the ONNX reference computes it: each output point is a weighted sum of gathered input
    points, the taps padded one by one."""
    x, grid = ctx.x(0), ctx.x(1)
    _float_only(ctx)
    if grid.dtype != x.dtype:
        refuse(f"grid of dtype {grid.dtype} with data of dtype {x.dtype}")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "linear"),
                                                          ctx.attr("mode", "linear"))
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border",
                                                                      "reflection"):
        refuse(f"mode {mode!r} with padding_mode {padding!r}")
    shape = static_shape(ctx)
    gshape = static_shape(ctx, 1)
    nd = len(shape) - 2
    if nd not in (2, 3) or len(gshape) != nd + 2 or gshape[-1] != nd or gshape[0] != shape[0]:
        refuse(f"data {list(shape)} with grid {list(gshape)}")
    n, c, dims = shape[0], shape[1], shape[2:]
    out_sp = gshape[1:-1]
    p = int(np.prod(out_sp, dtype=np.int64))
    flat_g = F.reshape(grid, n, p, nd)
    dt = x.dtype
    per_dim = []                                 # per data dim: [(index, weight, mask)]
    for k, size in enumerate(dims):
        g = F.reshape(F.narrow(flat_g, 2, nd - 1 - k, 1), n, p)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        v = (g + 1.0) / 2.0 * float(size - 1) if align else ((g + 1.0) * float(size) - 1.0) / 2.0
        if mode == "nearest":
            v = F.round(v)
        outside = F.logical_or(F.lt(v, ctx.const(lo, dt)), F.gt(v, ctx.const(hi, dt)))
        if padding == "border":
            v = F.where(outside, F.clamp(v, 0.0, float(size - 1)), v)
        elif padding == "reflection":
            v = F.where(outside, _gs_reflect(ctx, v, lo, hi), v)
        if mode == "nearest":                   # astype(int32): toward zero
            t = F.where(F.lt(v, ctx.const(0, dt)), F.neg(_floor(ctx, F.neg(v))),
                        _floor(ctx, v))
            idx, ok = _gs_tap(ctx, t, size, lo, hi, padding)
            per_dim.append([(idx, None, ok)])
            continue
        base = _floor(ctx, v)
        frac = v - base
        if mode == "linear":
            offsets, weights = (0, 1), [ctx.const(1, dt) - frac, frac]
        else:
            offsets, weights = (-1, 0, 1, 2), _gs_cubic(ctx, frac)
        taps = []
        for off, w in zip(offsets, weights):
            idx, ok = _gs_tap(ctx, base + float(off), size, lo, hi, padding)
            taps.append((idx, w, ok))
        per_dim.append(taps)
    data = F.reshape(x, n, c, int(np.prod(dims, dtype=np.int64)))
    strides = [int(np.prod(dims[k + 1:], dtype=np.int64)) for k in range(nd)]
    total = None
    for combo in itertools.product(*per_dim):
        flat, weight, mask = None, None, None
        for (idx, w, ok), s in zip(combo, strides):
            term = idx * ctx.const(s, "int64") if s != 1 else idx
            flat = term if flat is None else flat + term
            if w is not None:
                weight = w if weight is None else weight * w
            if ok is not None:
                mask = ok if mask is None else F.logical_and(mask, ok)
        picked = F.gather(data, 2, F.expand(F.reshape(flat, n, 1, p), n, c, p))
        if mask is not None:
            picked = F.where(F.reshape(mask, n, 1, p), picked, ctx.const(0, dt))
        if weight is not None:
            picked = picked * F.reshape(weight, n, 1, p)
        total = picked if total is None else total + picked
    return cast(F.reshape(total, n, c, *out_sp), dt)


@handler("AffineGrid")
def _affine_grid(ctx):
    """AffineGrid: theta (N, 2, 3) or (N, 3, 4) times the homogeneous base grid (x first)."""
    _float_only(ctx)
    theta = ctx.x(0)
    size = [int(s) for s in np.asarray(ctx.known(1, "size")).reshape(-1)]
    nd = len(size) - 2
    if nd not in (2, 3) or static_shape(ctx) != (size[0], nd, nd + 1):
        refuse(f"theta {list(ctx.shape(0))} with size {size}")
    spatial = size[2:]
    axes = []
    for s in spatial:
        if ctx.attr("align_corners", 0):
            a = np.arange(s, dtype=np.float64) * (2.0 / (s - 1)) - 1 if s > 1 else \
                np.array([-1.0])
        else:
            a = (np.arange(s, dtype=np.float64) * 2 + 1) / s - 1
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")          # (D,) H, W
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] +
                    [np.ones(mesh[0].size)], 1)      # (P, nd + 1): x, y(, z), 1
    b = ctx.const(base.T.copy(), theta.dtype)
    y = F.matmul(theta, b)                           # (N, nd, P)
    return F.reshape(F.transpose(y, 1, 2), size[0], *spatial, nd)
