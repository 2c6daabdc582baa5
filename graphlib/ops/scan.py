"""Scans along one dim (PyTorch's names, dtypes and gradients): ``cumsum``, ``cumprod``,
``cummax``, ``cummin``, ``logcumsumexp``.

A 0-d input is scanned as a 1-element vector (``dim`` 0 or -1), as in PyTorch; the ops
themselves see at least one dim. ``cumsum`` and ``logcumsumexp`` carry a ``reverse``
attribute (scan from the end) that their own gradients use.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..errors import DTypeError, ShapeError
from ..registry import OpDef, register
from ..types import TensorType, normalize_dim
from ._common import operand
from .creation import full_like
from .elementwise import abs, cast, exp, log, where
from .shape import cat, getitem, reshape, scatter_add, zeros_like_for_grad

cummax_result = namedtuple("cummax", ["values", "indices"])
cummin_result = namedtuple("cummin", ["values", "indices"])


def _scan_infer(name, out_dtype=None, float_only=False):
    def infer(types, attrs):
        (t,) = types
        if not 0 <= attrs["dim"] < t.ndim:
            raise ShapeError(f"{name}: dim {attrs['dim']} out of range for {t!r}")
        if float_only and not dtypes.is_float(t.dtype):
            raise DTypeError(f"{name}: expected a floating-point tensor, found {t.dtype}; "
                             f"cast it first (x.float())")
        return [TensorType(t.shape, out_dtype(t.dtype) if out_dtype else t.dtype)]
    return infer


def _int_to_int64(dt):
    return dt if dtypes.is_float(dt) else "int64"


def _flipped(xp, fn, x, dim, reverse):
    """``fn(x)`` scanning from the end of ``dim`` when ``reverse``."""
    if not reverse:
        return fn(x)
    return xp.flip(fn(xp.flip(x, axis=dim)), axis=dim)


def _acc_dtype(x, out):
    """float16/bfloat16 accumulate in float32 (as PyTorch); integers and bools in int64."""
    if x.dtype in dtypes.HALF_NP:
        return np.float32
    return out


def accumulate(xp, ufunc_name: str, x, axis: int):
    """``xp.<ufunc>.accumulate(x, axis)``, or the same scan written as a loop over ``axis``
    for an array module whose ufunc has no ``accumulate`` (cupy has it for a few only)."""
    fn = getattr(xp, ufunc_name)
    try:
        return fn.accumulate(x, axis=axis)
    except (AttributeError, NotImplementedError, TypeError):
        pass
    moved = xp.moveaxis(x, axis, 0)
    out = xp.empty_like(moved)
    for i in range(moved.shape[0]):
        out[i] = moved[i] if i == 0 else fn(out[i - 1], moved[i])
    return xp.moveaxis(out, 0, axis)


# -- cumsum ------------------------------------------------------------------------------------
def _cumsum_kernel(xp, x, dim, reverse=False):
    out = np.int64 if not dtypes.is_float_array(x) else x.dtype
    acc = _acc_dtype(x, out)
    r = _flipped(xp, lambda a: xp.cumsum(a, axis=dim, dtype=acc), x, dim, reverse)
    return r.astype(out, copy=False)


cumsum_op = register(OpDef(
    "cumsum", _scan_infer("cumsum", _int_to_int64), _cumsum_kernel,
    lambda cts, ins, outs, a, needs: [
        cumsum_op(cts[0], dim=a["dim"], reverse=not a.get("reverse", False))],
    saves_no_data=True,
    attrs=Attrs(dim=Attr(int, min=0), reverse=Attr(bool, default=False))))


# -- cumprod -----------------------------------------------------------------------------------
def _cumprod_kernel(xp, x, dim):
    out = np.int64 if not dtypes.is_float_array(x) else x.dtype
    return xp.cumprod(x, axis=dim, dtype=_acc_dtype(x, out)).astype(out, copy=False)


def _shift(t, dim, step, fill=0.0):
    """``t`` moved one place along ``dim`` (``step`` 1: towards the end, -1: towards the
    start), the freed place filled with ``fill``."""
    n = t.shape[dim]
    if isinstance(n, int) and n == 0:
        return t
    lead = (slice(None),) * dim
    pad = full_like(getitem(t, lead + (slice(0, 1),)), fill)
    if step > 0:
        return cat([pad, getitem(t, lead + (slice(None, -1),))], dim)
    return cat([getitem(t, lead + (slice(1, None),)), pad], dim)


def _linrec_infer(types, attrs):
    a, b = types
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"linear_recurrence: coefficients {a!r} and inputs {b!r} must have "
                         f"the same shape")
    if not 0 <= attrs["dim"] < b.ndim:
        raise ShapeError(f"linear_recurrence: dim {attrs['dim']} out of range for {b!r}")
    return [TensorType(b.shape, dtypes.result_dtype(a.dtype, b.dtype))]


def _linrec_kernel(xp, a, b, dim, reverse=False):
    """h_i = b_i + a_i h_(i-1) along ``dim`` (``reverse``: h_i = b_i + a_i h_(i+1))."""
    dt = xp.result_type(a, b)
    work = xp.float32 if dt in dtypes.HALF_NP else dt
    am = xp.moveaxis(a, dim, 0).astype(work)
    bm = xp.moveaxis(b, dim, 0).astype(work)
    h = xp.empty(bm.shape, dtype=work)
    n = bm.shape[0]
    prev = None
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        h[i] = bm[i] if prev is None else bm[i] + am[i] * prev
        prev = h[i]
    return xp.ascontiguousarray(xp.moveaxis(h, 0, dim)).astype(dt, copy=False)


def _linrec_vjp(cts, ins, outs, attrs, needs):
    # h_i = b_i + a_i h_(i-1): the adjoint l_i = c_i + a_(i+1) l_(i+1) runs the other way;
    # dL/db = l, dL/da_i = l_i h_(i-1) (mirrored for reverse)
    (c,), (a, _), (h,) = cts, ins, outs
    dim, rev = attrs["dim"], attrs.get("reverse", False)
    step = 1 if rev else -1
    lam = linrec_op(_shift(a, dim, step), c, dim=dim, reverse=not rev)
    return [lam * _shift(h, dim, -step) if needs[0] else None, lam if needs[1] else None]


linrec_op = register(OpDef(
    "linear_recurrence", _linrec_infer, _linrec_kernel, _linrec_vjp, vjp_reads_output=True,
    doc="h_i = b_i + a_i h_(i-1) along dim (reverse: h_(i+1)); the adjoint of scans",
    attrs=Attrs(dim=Attr(int, min=0), reverse=Attr(bool, default=False))))


def _cumprod_vjp(cts, ins, outs, a, needs):
    # y_k = prod_(j<=k) x_j, so dL/dx_i = E_i R_i with E_i = prod_(j<i) x_j (the exclusive
    # cumprod) and R_i = sum_(k>=i) g_k prod_(i<j<=k) x_j = g_i + x_(i+1) R_(i+1) (a reverse
    # linear recurrence). No division: exact with any number of zeros, and differentiable to
    # every order.
    (g,), (x,) = cts, ins
    dim = a["dim"]
    e = cumprod_op(_shift(x, dim, 1, fill=1.0), dim=dim)
    r = linrec_op(_shift(x, dim, -1), g, dim=dim, reverse=True)
    return [e * r]


cumprod_op = register(OpDef(
    "cumprod", _scan_infer("cumprod", _int_to_int64), _cumprod_kernel, _cumprod_vjp,
    attrs=Attrs(dim=Attr(int, min=0))))


# -- cummax / cummin ---------------------------------------------------------------------------
def _cumext_infer(name):
    base = _scan_infer(name)

    def infer(types, attrs):
        (t,) = base(types, attrs)
        return [t, TensorType(t.shape, "int64")]
    return infer


def _cumext_kernel(largest):
    def kernel(xp, x, dim):
        # PyTorch's rule: an element replaces the running extreme when it is >= (<=) it or
        # is NaN; after a NaN the running value stays NaN, and later NaNs take the index.
        values = accumulate(xp, "maximum" if largest else "minimum", x, dim)
        n = x.shape[dim]
        if n == 0:
            return values, xp.zeros(x.shape, dtype=xp.int64)
        shape = [1] * x.ndim
        shape[dim] = n
        pos = xp.arange(n, dtype=xp.int64).reshape(shape)
        head = [slice(None)] * x.ndim
        head[dim] = slice(0, n - 1)
        first = [slice(None)] * x.ndim
        first[dim] = slice(0, 1)
        prev = xp.concatenate([values[tuple(first)], values[tuple(head)]], axis=dim)
        better = (x >= prev) if largest else (x <= prev)
        if dtypes.is_float_array(x):
            better = better | xp.isnan(x)
        indices = accumulate(xp, "maximum", xp.where(better, pos, 0), dim)
        return values, indices.astype(xp.int64, copy=False)
    return kernel


def _cumext_vjp(cts, ins, outs, a, needs):
    (g, _), (x,), (_, idx) = cts, ins, outs
    return [scatter_add(zeros_like_for_grad(x, g), a["dim"], idx, g)]


cummax_op = register(OpDef(
    "cummax", _cumext_infer("cummax"), _cumext_kernel(True), _cumext_vjp,
    multi_output=True, vjp_reads_output=True, attrs=Attrs(dim=Attr(int, min=0))))
cummin_op = register(OpDef(
    "cummin", _cumext_infer("cummin"), _cumext_kernel(False), _cumext_vjp,
    multi_output=True, vjp_reads_output=True, attrs=Attrs(dim=Attr(int, min=0))))


# -- logcumsumexp ------------------------------------------------------------------------------
def _lcse_kernel(xp, x, dim, reverse=False):
    work = x.astype(np.float32) if x.dtype in dtypes.HALF_NP else x
    r = _flipped(xp, lambda a: accumulate(xp, "logaddexp", a, dim), work, dim, reverse)
    return r.astype(x.dtype, copy=False)


_LOWEST = {"float16": -65504.0, "bfloat16": -3.3895313892515355e38,
           "float32": float(np.finfo(np.float32).min), "float64": float(np.finfo(np.float64).min)}


def _lcse_vjp(cts, ins, outs, a, needs):
    # dL/dx_i = sum_{k>=i} g_k exp(x_i - y_k), computed in log space for the positive and
    # the negative parts of g separately (PyTorch's and TensorFlow's stable form)
    (g,), (x,), (y,) = cts, ins, outs
    dim, rev = a["dim"], not a.get("reverse", False)
    lowest = _LOWEST.get(g.dtype, _LOWEST["float64"])
    log_abs = log(abs(g))
    pos = where(g > 0, log_abs, lowest)
    neg = where(g < 0, log_abs, lowest)
    out_pos = exp(logcumsumexp_op(pos - y, dim=dim, reverse=rev) + x)
    out_neg = exp(logcumsumexp_op(neg - y, dim=dim, reverse=rev) + x)
    return [out_pos - out_neg]


logcumsumexp_op = register(OpDef(
    "logcumsumexp", _scan_infer("logcumsumexp", float_only=True), _lcse_kernel, _lcse_vjp,
    vjp_reads_output=True,
    attrs=Attrs(dim=Attr(int, min=0), reverse=Attr(bool, default=False))))


# -- public functions --------------------------------------------------------------------------
def _scan(op, x, dim, name, dtype=None, **attrs):
    """Apply a scan op along ``dim``; a 0-d ``x`` as a 1-element vector; ``dtype`` casts the
    input first (PyTorch's ``dtype=``)."""
    x = operand(x, name)
    if dim is None:
        raise TypeError(f"{name}: expected an int dim, found None")
    d = normalize_dim(dim, max(x.ndim, 1), name)
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
        x = cast(x, dtype)
    out = op(x, dim=d, **attrs) if x.ndim else op(reshape(x, 1), dim=0, **attrs)
    if not x.ndim:
        out = tuple(reshape(o) for o in out) if isinstance(out, tuple) else reshape(out)
    if dtype is not None and out.dtype != dtype:
        # an integer dtype= is the result's dtype (accumulated in int64 and wrapped back,
        # which gives the same bits as accumulating in it)
        out = cast(out, dtype)
    return out


def cumsum(x, dim, *, dtype=None):
    """Cumulative sum along ``dim``; integers and bools sum to int64, as in PyTorch
    (``dtype=`` casts the input first)."""
    return _scan(cumsum_op, x, dim, "cumsum", dtype)


def cumprod(x, dim, *, dtype=None):
    """Cumulative product along ``dim``; integers and bools multiply in int64. The gradient
    is exact where the slice holds zeros."""
    return _scan(cumprod_op, x, dim, "cumprod", dtype)


def cummax(x, dim):
    """Running maximum along ``dim`` as ``(values, indices)``; a tie takes the later index
    and NaN propagates (PyTorch's rules)."""
    return cummax_result(*_scan(cummax_op, x, dim, "cummax"))


def cummin(x, dim):
    """Running minimum along ``dim`` as ``(values, indices)``; a tie takes the later index
    and NaN propagates (PyTorch's rules)."""
    return cummin_result(*_scan(cummin_op, x, dim, "cummin"))


def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along ``dim``, computed stably (floating-point tensors only)."""
    return _scan(logcumsumexp_op, x, dim, "logcumsumexp")
