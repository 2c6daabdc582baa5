"""What the ONNX import handlers of every op family share: dtype groups and small checks."""
from __future__ import annotations

import numpy as np

from ..graphlib import functional as F
from ._import import Ctx, refuse


FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")


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


NUMERIC = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
           "float64", "uint16", "uint32", "uint64")
SIGNED = ("int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _axes_arg(ctx, index: int, attr: str = "axes"):
    """Axes from an attribute (old opsets) or an input (new ones), or None."""
    if ctx.has(index):
        return [int(a) for a in np.ravel(ctx.known(index, "axes"))]
    v = ctx.attr(attr)
    return None if v is None else [int(a) for a in v]


def _check_same(ctx, n=2):
    dts = {ctx.dtype(i) for i in range(n) if ctx.has(i)}
    if len(dts) > 1:
        refuse(f"operands of different dtypes {sorted(dts)}")


def _counting(ctx, n):
    """0, 1, ..., n-1 in int64, for a length ``n`` that may be a symbolic dim."""
    if isinstance(n, int):
        return ctx.const(np.arange(n), "int64")
    return F.cumsum(F.full((n,), 1, dtype="int64"), 0) - ctx.const(1, "int64")


def _floor(ctx, x):
    """floor(x), exactly: through int64 where |x| < 2**52 (larger floats are integers)."""
    big = ctx.const(2.0 ** 52 if x.dtype == "float64" else 2.0 ** 23, x.dtype)
    small = F.lt(F.abs(x), big)
    safe = F.where(small, x, ctx.const(0, x.dtype))
    t = F.cast(F.cast(safe, "int64"), x.dtype)
    fl = F.where(F.gt(t, safe), t - ctx.const(1, x.dtype), t)
    return F.where(small, fl, x)


def _take(ctx, x, axis, idx):
    return F.index_select(x, axis, ctx.const(np.asarray(idx, np.int64), "int64"))


def static_shape_of(v):
    if not all(isinstance(d, int) for d in v.shape):
        refuse("a mean over a symbolic number of elements")
    return tuple(v.shape)
