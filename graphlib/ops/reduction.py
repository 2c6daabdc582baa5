"""Reductions over one, several or all dims, with ``keepdim`` (PyTorch names and defaults)."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import index_example
from ..errors import DimError, DTypeError, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, normalize_dim, normalize_dims, reduction_dims
from .elementwise import cast, exp, isnan, logical_and, where
from .shape import expand, gather, reshape, squeeze
from ._common import operand


def _reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def _check_dims(name, t, dims):
    for d in dims:
        if d >= max(t.ndim, 1) and not (t.ndim == 0 and d == 0):
            raise DimError(f"{name}: dim {d} out of range for {t!r}")


def _reduce_infer(name, out_dtype=None, float_only=False):
    def infer(types, attrs):
        (t,) = types
        dims = attrs["dim"]
        _check_dims(name, t, dims)
        if float_only and not dtypes.is_differentiable(t.dtype):
            raise DTypeError(f"{name}: expected a floating-point tensor, found {t.dtype}; "
                             f"cast it first (x.cast('float32'))")
        dt = out_dtype(t.dtype, attrs) if out_dtype else t.dtype
        return [TensorType(_reduced_shape(t.shape, dims, attrs["keepdim"]), dt)]
    return infer


def _acc(xp, x):
    """Accumulate float16 and bfloat16 in float32, as PyTorch does."""
    return xp.float32 if x.dtype in dtypes.HALF_NP else None


def _acc_back(out, x):
    """A half input accumulated in float32 gives a result of its dtype again."""
    return out.astype(x.dtype) if out.dtype != x.dtype and x.dtype in dtypes.HALF_NP else out


def _axis(dims, ndim):
    return tuple(dims) if ndim else None


def expand_back(g, x, dims, keepdim):
    """Broadcast a reduced tensor ``g`` back to the shape of ``x``."""
    if not keepdim:
        g = reshape(g, _reduced_shape(x.shape, dims, True))
    return expand(g, *x.shape)


def _count(x, dims):
    n = 1
    for d in dims:
        size = x.shape[d]
        if not isinstance(size, int):
            return numel(x, dims)
        n *= size
    return n


# -- sum ---------------------------------------------------------------------------------------
def _sum_dtype(dt, attrs):
    if attrs.get("dtype"):
        return attrs["dtype"]
    return dt if dtypes.is_differentiable(dt) else "int64"


_NP_NAMES = {np.dtype(n): n for n in dtypes.DTYPE_NAMES}   # dtype.name takes microseconds


_SAME_ACC = (np.dtype("float32"), np.dtype("float64"), np.dtype("complex64"),
             np.dtype("complex128"))   # summed in their own dtype


def _sum_kernel(xp, x, dim, keepdim, dtype=None):
    if dtype is None and x.dtype in _SAME_ACC:       # x.sum(dtype=x.dtype), without the
        return x.sum(axis=_axis(dim, x.ndim), keepdims=keepdim)   # dtype argument
    out_dtype = dtype or (_NP_NAMES.get(x.dtype) or x.dtype.name
                          if dtypes.is_float_array(x) else "int64")
    acc = "float32" if out_dtype in ("float16", "bfloat16") else out_dtype
    out = x.sum(axis=_axis(dim, x.ndim), keepdims=keepdim, dtype=acc)
    return out if acc == out_dtype else out.astype(out_dtype)


sum_op = register(OpDef(
    "sum", _reduce_infer("sum", _sum_dtype), _sum_kernel,
    lambda cts, ins, outs, a, needs: [
        expand_back(cts[0], ins[0], a["dim"], a["keepdim"])],
    saves_no_data=True, epilogue_host=True,
    complex_ok=True,
    attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool), dtype=Attr("dtype", default=None))))


def _mean_kernel(xp, x, dim, keepdim):
    return _acc_back(xp.mean(x, axis=_axis(dim, x.ndim), keepdims=keepdim, dtype=_acc(xp, x)),
                     x)


mean_op = register(OpDef(
    "mean", _reduce_infer("mean", float_only=True), _mean_kernel,
    lambda cts, ins, outs, a, needs: [
        expand_back(cts[0], ins[0], a["dim"], a["keepdim"]) / _count(ins[0], a["dim"])],
    saves_no_data=True, epilogue_host=True,
    complex_ok=True, attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool))))


def _extreme_vjp(cts, ins, outs, a, needs):
    # PyTorch's amax/amin rule (scale_grad_by_count): g shared evenly between the elements
    # equal to the result (a NaN result matches none: NaN), the mask multiplied in
    (g,), (x,), (y,) = cts, ins, outs
    dims, keepdim = a["dim"], a["keepdim"]
    mask = cast(x == expand_back(y, x, dims, keepdim), g.dtype)
    ties = sum(mask, dims, keepdim=True)
    return [mask * expand_back(g, x, dims, keepdim) / ties]


def _evenly_vjp(cts, ins, outs, a, needs):
    # PyTorch's max()/min() over every element (evenly_distribute_backward): g shared evenly
    # between the elements equal to the result, or between the NaNs where the result is NaN,
    # selected (0 elsewhere, whatever g is)
    (g,), (x,), (y,) = cts, ins, outs
    dims, keepdim = a["dim"], a["keepdim"]
    y, g = expand_back(y, x, dims, keepdim), expand_back(g, x, dims, keepdim)
    hit = where(isnan(y), isnan(x), x == y)
    share = g / sum(cast(hit, g.dtype), dims, keepdim=True)
    return [where(hit, share, 0.0)]


def _amax_kernel(xp, x, dim, keepdim):
    return xp.amax(x, axis=_axis(dim, x.ndim), keepdims=keepdim)


def _amin_kernel(xp, x, dim, keepdim):
    return xp.amin(x, axis=_axis(dim, x.ndim), keepdims=keepdim)


_EXTREME_ATTRS = Attrs(dim=Attr("dims"), keepdim=Attr(bool))
amax_op = register(OpDef("amax", _reduce_infer("amax"), _amax_kernel, _extreme_vjp,
                         vjp_reads_output=True, attrs=_EXTREME_ATTRS))
amin_op = register(OpDef("amin", _reduce_infer("amin"), _amin_kernel, _extreme_vjp,
                         vjp_reads_output=True, attrs=_EXTREME_ATTRS))
# max() and min() of every element: amax and amin with PyTorch's other gradient rule
max_op = register(OpDef("max", _reduce_infer("max"), _amax_kernel, _evenly_vjp,
                        vjp_reads_output=True, attrs=_EXTREME_ATTRS))
min_op = register(OpDef("min", _reduce_infer("min"), _amin_kernel, _evenly_vjp,
                        vjp_reads_output=True, attrs=_EXTREME_ATTRS))


def _prod_kernel(xp, x, dim, keepdim):
    acc = _acc(xp, x) or (None if dtypes.is_float_array(x) else xp.int64)
    return _acc_back(xp.prod(x, axis=_axis(dim, x.ndim), keepdims=keepdim, dtype=acc), x)


def _prod_vjp(cts, ins, outs, a, needs):
    # d prod / d x_i = the product of the others, computed without dividing by zero and so
    # that it stays differentiable where the slice holds zeros. With p the product of the
    # non-zeros and z the sum of the zero entries (0, but with gradient 1):
    # no zero -> p / x_i; one zero -> p at the zero, z * p / x_i elsewhere; two zeros ->
    # (z - x_i) * p at each zero (the other zero times p), 0 elsewhere; more -> 0.
    (g,), (x,) = cts, ins
    dims, keepdim = a["dim"], a["keepdim"]
    is_zero = x == 0
    zeros = sum(cast(is_zero, "int64"), dims, keepdim=True)
    safe = where(is_zero, 1.0, x)
    p = prod(safe, dims, keepdim=True)
    z = sum(where(is_zero, x, 0.0), dims, keepdim=True)
    others = where(zeros == 0, p / safe,
                   where(zeros == 1, where(is_zero, p, z * p / safe),
                         where(logical_and(zeros == 2, is_zero), (z - x) * p, 0.0)))
    return [expand_back(g, x, dims, keepdim) * others]


prod_op = register(OpDef("prod", _reduce_infer("prod", _sum_dtype), _prod_kernel, _prod_vjp,
                         autocast="fp32",
                         attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool))))


def _var_kernel(xp, x, dim, keepdim, correction):
    return _acc_back(xp.var(x, axis=_axis(dim, x.ndim), keepdims=keepdim, ddof=correction,
                            dtype=_acc(xp, x)), x)


def _std_kernel(xp, x, dim, keepdim, correction):
    return _acc_back(xp.std(x, axis=_axis(dim, x.ndim), keepdims=keepdim, ddof=correction,
                            dtype=_acc(xp, x)), x)


def _var_backward(g, x, dims, keepdim, c):
    """PyTorch's var_backward: ``2 / (n - c) * g * (x - mean)``, in IEEE arithmetic (n == c
    gives inf: NaN where x is its mean, as PyTorch, not a ZeroDivisionError); over every
    dim with n - c <= 0, NaN where x is its mean and inf elsewhere."""
    centered = x - mean(x, dims, keepdim=True)
    g = expand_back(g, x, dims, keepdim)
    n = _count(x, dims)
    if not isinstance(n, int):
        return g * centered * (2.0 / (n - c))
    if n - c <= 0 and len(dims) == x.ndim:
        return g * where(centered == 0, math.nan, math.inf)
    scale = 2.0 / (n - c) if n != c else math.inf
    return g * centered * scale


def _var_vjp(cts, ins, outs, a, needs):
    return [_var_backward(cts[0], ins[0], a["dim"], a["keepdim"], a["correction"])]


def _std_vjp(cts, ins, outs, a, needs):
    # PyTorch's std_backward: var's rule for g / (2 * std), 0 where std is 0 (a constant
    # slice: no 0/0), selected
    (g,), (x,), (y,) = cts, ins, outs
    zero = y == 0
    g_var = where(zero, 0.0, g / (2.0 * where(zero, 1.0, y)))
    return [_var_backward(g_var, x, a["dim"], a["keepdim"], a["correction"])]


var_op = register(OpDef("var", _reduce_infer("var", float_only=True), _var_kernel, _var_vjp,
                        attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool),
                                    correction=Attr("number"))))
std_op = register(OpDef("std", _reduce_infer("std", float_only=True), _std_kernel, _std_vjp,
                        vjp_reads_output=True,
                        attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool),
                                    correction=Attr("number"))))


def _arg_infer(name):
    def infer(types, attrs):
        (t,) = types
        dim, keepdim = attrs["dim"], attrs["keepdim"]
        if dim is None:
            shape = tuple(1 for _ in t.shape) if keepdim else ()
        else:
            _check_dims(name, t, (dim,))
            shape = _reduced_shape(t.shape, (dim,), keepdim) if t.ndim else ()
        return [TensorType(shape, "int64")]
    return infer


def _arg_kernel(fn_name):
    def kernel(xp, x, dim, keepdim):
        fn = getattr(xp, fn_name)
        if dim is None:
            r = fn(x.reshape(-1))
            return r.reshape((1,) * x.ndim) if keepdim else r
        if x.ndim == 0:
            return xp.zeros((), dtype=xp.int64)
        return fn(x, axis=dim, keepdims=keepdim)
    return kernel


argmax_op = register(OpDef("argmax", _arg_infer("argmax"), _arg_kernel("argmax"),
                           attrs=Attrs(dim=Attr(int, default=None), keepdim=Attr(bool))))
argmin_op = register(OpDef("argmin", _arg_infer("argmin"), _arg_kernel("argmin"),
                           attrs=Attrs(dim=Attr(int, default=None), keepdim=Attr(bool))))


def _logsumexp_kernel(xp, x, dim, keepdim):
    if not dtypes.is_float_array(x):
        x = x.astype(dtypes.DEFAULT_FLOAT)
    axis = _axis(dim, x.ndim)
    if x.size == 0:    # no max to shift by: log of an empty sum is -inf
        return xp.full_like(xp.sum(x, axis=axis, keepdims=keepdim), -xp.inf)
    m = xp.amax(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    s = xp.sum(xp.exp(x - m), axis=axis, keepdims=True, dtype=_acc(xp, x))
    out = _acc_back(xp.log(s) + m, x)
    return out if keepdim else xp.squeeze(out, axis=axis)


def _logsumexp_vjp(cts, ins, outs, a, needs):
    (g,), (x,), (y,) = cts, ins, outs
    dims, keepdim = a["dim"], a["keepdim"]
    return [expand_back(g, x, dims, keepdim) * exp(x - expand_back(y, x, dims, keepdim))]


def _lse_dtype(dt, attrs):
    return dt if dtypes.is_float(dt) else dtypes.DEFAULT_FLOAT


logsumexp_op = register(OpDef("logsumexp", _reduce_infer("logsumexp", _lse_dtype),
                              _logsumexp_kernel, _logsumexp_vjp, vjp_reads_output=True,
                              attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool))))


def _numel_infer(types, attrs):
    _check_dims("numel", types[0], attrs["dim"])
    return [TensorType((), attrs["dtype"])]


def _numel_kernel(xp, x, dim, dtype):
    n = 1
    for d in dim:
        n *= x.shape[d]
    return xp.asarray(n, dtype=dtype)


def _numel_rule(op, args, batched, attrs, size):
    """The count is the same for every example: counted on one, broadcast to the batch."""
    (x,) = args
    out = op(index_example(x, 0), **attrs)
    return get_op("expand")(out, shape=(size,))


numel_op = register(OpDef("numel", _numel_infer, _numel_kernel, nondiff_inputs=(0,),
                          attrs=Attrs(dim=Attr("dims"), dtype=Attr("dtype")), batch=_numel_rule))


# -- public functions --------------------------------------------------------------------------
def _dims(x, dim, name):
    return reduction_dims(dim, x.ndim, name)


def sum(x, dim=None, keepdim: bool = False, *, dtype=None):
    """Sum over ``dim`` (an int, a tuple, or None for all). Integers and bools sum to int64."""
    x = operand(x, "sum")
    return sum_op(x, dim=_dims(x, dim, "sum"), keepdim=keepdim,
                  dtype=dtypes.as_dtype(dtype) if dtype is not None else None)


def mean(x, dim=None, keepdim: bool = False):
    """Arithmetic mean over ``dim`` (floating-point tensors only, as in PyTorch)."""
    x = operand(x, "mean")
    return mean_op(x, dim=_dims(x, dim, "mean"), keepdim=keepdim)


def max_all(x):
    """The largest element (``max(x)``): NaN if any is NaN; ties share the gradient evenly,
    and a NaN result gives it to the NaNs, as PyTorch's ``max()``."""
    x = operand(x, "max")
    return max_op(x, dim=_dims(x, None, "max"), keepdim=False)


def min_all(x):
    """The smallest element (``min(x)``), with the gradient rule of ``max_all``."""
    x = operand(x, "min")
    return min_op(x, dim=_dims(x, None, "min"), keepdim=False)


def _selected(x, index, d, keepdim):
    """``x`` at ``index`` (keepdim-shaped) along ``d``: the values a max(dim)/min(dim)
    selects, so the gradient goes to the returned index only, as PyTorch's."""
    if x.ndim == 0:
        return x
    values = gather(x, d, index)
    return values if keepdim else squeeze(values, d)


def max_dim(x, dim, keepdim: bool = False):
    """(values, indices) of the largest element along ``dim`` (the first one where they
    tie, or the first NaN); the gradient goes to the returned index, as PyTorch's."""
    x = operand(x, "max")
    d = normalize_dim(dim, max(x.ndim, 1), "max")
    index = argmax_op(x, dim=d, keepdim=True)
    values = _selected(x, index, d, keepdim)
    return values, index if keepdim or x.ndim == 0 else squeeze(index, d)


def min_dim(x, dim, keepdim: bool = False):
    """(values, indices) of the smallest element along ``dim``, as ``max_dim``."""
    x = operand(x, "min")
    d = normalize_dim(dim, max(x.ndim, 1), "min")
    index = argmin_op(x, dim=d, keepdim=True)
    values = _selected(x, index, d, keepdim)
    return values, index if keepdim or x.ndim == 0 else squeeze(index, d)


def amax(x, dim=None, keepdim: bool = False):
    """Maximum over ``dim``; ties share the gradient evenly."""
    x = operand(x, "amax")
    return amax_op(x, dim=_dims(x, dim, "amax"), keepdim=keepdim)


def amin(x, dim=None, keepdim: bool = False):
    """Minimum over ``dim``; ties share the gradient evenly."""
    x = operand(x, "amin")
    return amin_op(x, dim=_dims(x, dim, "amin"), keepdim=keepdim)


def prod(x, dim=None, keepdim: bool = False):
    """Product over ``dim``."""
    x = operand(x, "prod")
    if isinstance(dim, (tuple, list)) and len(dim) == 0 and x.ndim:
        raise TypeError(located("prod: expected an int (or a tuple of them) or None as dim, "
                                "found an empty tuple; torch.prod takes one int dim"))
    return prod_op(x, dim=_dims(x, dim, "prod"), keepdim=keepdim)


def _correction(correction, name: str):
    """The correction as given: an int, or a float used exactly (1.5 stays 1.5, as in
    PyTorch); integral floats become ints, so equal graphs print the same."""
    if isinstance(correction, bool) or not isinstance(correction, (int, float, np.integer,
                                                                   np.floating)):
        raise TypeError(located(f"{name}: correction must be a number, found "
                                f"{type(correction).__name__}"))
    c = float(correction)
    return int(c) if c.is_integer() else c


def var(x, dim=None, *, correction: int = 1, keepdim: bool = False, unbiased=None):
    """Variance over ``dim`` with Bessel's ``correction`` (1 = unbiased, the default)."""
    x = operand(x, "var")
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return var_op(x, dim=_dims(x, dim, "var"), keepdim=keepdim,
                  correction=_correction(correction, "var"))


def std(x, dim=None, *, correction: int = 1, keepdim: bool = False, unbiased=None):
    """Standard deviation over ``dim`` with Bessel's ``correction`` (default 1)."""
    x = operand(x, "std")
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return std_op(x, dim=_dims(x, dim, "std"), keepdim=keepdim,
                  correction=_correction(correction, "std"))


def argmax(x, dim=None, keepdim: bool = False):
    """Index of the maximum along ``dim`` (over the flattened tensor when dim is None)."""
    x = operand(x, "argmax")
    if dim is not None:   # one int dim, as torch.argmax (a tuple is a TypeError there too)
        dim = normalize_dim(dim, max(x.ndim, 1), "argmax")
    return argmax_op(x, dim=dim, keepdim=keepdim)


def argmin(x, dim=None, keepdim: bool = False):
    """Index of the minimum along ``dim`` (over the flattened tensor when dim is None)."""
    x = operand(x, "argmin")
    if dim is not None:   # one int dim, as torch.argmin (a tuple is a TypeError there too)
        dim = normalize_dim(dim, max(x.ndim, 1), "argmin")
    return argmin_op(x, dim=dim, keepdim=keepdim)


def logsumexp(x, dim, keepdim: bool = False):
    """log(sum(exp(x), dim)), computed stably."""
    x = operand(x, "logsumexp")
    return logsumexp_op(x, dim=_dims(x, dim, "logsumexp"), keepdim=keepdim)


def numel(x, dim=None, dtype="float32"):
    """Number of elements of ``x`` over ``dim`` as a 0-d tensor (works for symbolic dims)."""
    x = operand(x, "numel")
    try:
        dtype = dtypes.as_dtype(dtype)
    except TypeError as e:
        raise TypeError(located(f"numel: {e}")) from None
    return numel_op(x, dim=normalize_dims(dim, x.ndim, "numel"), dtype=dtype)
