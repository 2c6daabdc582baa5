"""Sorting and selection (PyTorch's names, signatures and return types): ``sort``,
``argsort``, ``topk``, ``kthvalue``, ``median``, ``mode``, ``unique``; and the closeness
tests ``isclose``, ``allclose``, ``equal``.

Conventions (PyTorch's where it documents them): sorting is stable, so equal elements keep
their order (ascending and descending alike); NaN sorts as the largest value (last ascending,
first descending), so ``kthvalue`` and ``topk`` see it as such and ``median`` returns NaN for
a slice holding one. Where PyTorch leaves the index of a tie unspecified (``kthvalue``,
``median`` along a dim, ``topk``), duograph returns the first one in stable sorted order;
``mode`` returns the last index of the value, as PyTorch does.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..errors import DTypeError, GraphError, ShapeError, composite, located
from ..ir import Value, current_graph
from ..registry import OpDef, register
from ..types import TensorType, normalize_dim
from ._common import operand
from .creation import constant
from .elementwise import (abs, cast, isfinite, isnan, logical_and, logical_not, logical_or,
                          where)
from .reduction import numel, sum as sum_
from .scan import accumulate
from .shape import gather, getitem, reshape, scatter_add, unsqueeze, zeros_like_for_grad

sort_result = namedtuple("sort", ["values", "indices"])
topk_result = namedtuple("topk", ["values", "indices"])
kthvalue_result = namedtuple("kthvalue", ["values", "indices"])
median_result = namedtuple("median", ["values", "indices"])
mode_result = namedtuple("mode", ["values", "indices"])


def _dim_infer(name, values_shape=None):
    def infer(types, attrs):
        (t,) = types
        dim = attrs["dim"]
        if not 0 <= dim < t.ndim:
            raise ShapeError(f"{name}: dim {dim} out of range for {t!r}")
        shape = values_shape(t.shape, attrs) if values_shape else t.shape
        return [TensorType(shape, t.dtype), TensorType(shape, "int64")]
    return infer


def _sort_keys(xp, x):
    """What numpy sorts: half floats as float32 (bfloat16 has no numpy sort)."""
    return x.astype(np.float32) if x.dtype in dtypes.HALF_NP else x


def _stable_argsort(xp, x, dim, descending):
    keys = _sort_keys(xp, x)
    if not descending:
        return xp.argsort(keys, axis=dim, kind="stable")
    # descending and stable: sort the reversed slice ascending, reverse the result, and map
    # the positions back (ties keep their order; NaN, last ascending, comes first)
    n = x.shape[dim]
    rev = xp.argsort(xp.flip(keys, axis=dim), axis=dim, kind="stable")
    return (n - 1) - xp.flip(rev, axis=dim)


def _sort_kernel(xp, x, dim, descending=False, stable=False):
    idx = _stable_argsort(xp, x, dim, descending).astype(xp.int64, copy=False)
    return xp.take_along_axis(x, idx, axis=dim), idx


def _select_vjp(cts, ins, outs, a, needs):
    """Values picked from the input at ``indices`` along ``dim``: scatter the cotangent back."""
    (g, _), (x,), (_, idx) = cts, ins, outs
    if not a.get("keepdim", True) and g.ndim < x.ndim:
        g, idx = unsqueeze(g, a["dim"]), unsqueeze(idx, a["dim"])
    return [scatter_add(zeros_like_for_grad(x, g), a["dim"], idx, g)]


sort_op = register(OpDef(
    "sort", _dim_infer("sort"), _sort_kernel, _select_vjp, multi_output=True,
    vjp_reads_output=True,
    attrs=Attrs(dim=Attr(int, min=0), descending=Attr(bool, default=False),
                stable=Attr(bool, default=False))))


def _mode_shape(shape, attrs):
    dim = attrs["dim"]
    return tuple(1 if i == dim else s for i, s in enumerate(shape)) if attrs["keepdim"] else \
        tuple(s for i, s in enumerate(shape) if i != dim)


def _mode_kernel(xp, x, dim, keepdim=False):
    # sort each slice, measure runs of equal values; the first longest run is the smallest
    # most frequent value, and its end (stable order) is the value's last index in the slice
    if x.shape[dim] == 0:
        raise ValueError(f"mode: cannot take the mode of an empty dim {dim}")
    moved = xp.moveaxis(x, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    order = xp.argsort(_sort_keys(xp, rows), axis=1, kind="stable")
    s = xp.take_along_axis(rows, order, axis=1)
    n = rows.shape[1]
    start = xp.ones(rows.shape, dtype=bool)
    start[:, 1:] = s[:, 1:] != s[:, :-1]
    pos = xp.arange(n)
    run_start = accumulate(xp, "maximum", xp.where(start, pos, 0), 1)
    length = pos - run_start
    best = xp.argmax(length, axis=1)[:, None]
    values = xp.take_along_axis(s, best, axis=1)[:, 0].reshape(moved.shape[:-1])
    indices = xp.take_along_axis(order, best, axis=1)[:, 0].reshape(moved.shape[:-1])
    indices = indices.astype(xp.int64, copy=False)
    if keepdim:
        values, indices = xp.expand_dims(values, dim), xp.expand_dims(indices, dim)
    return values, indices


mode_op = register(OpDef(
    "mode", _dim_infer("mode", _mode_shape), _mode_kernel, _select_vjp, multi_output=True,
    vjp_reads_output=True,
    attrs=Attrs(dim=Attr(int, min=0), keepdim=Attr(bool, default=False))))


def _median_all_infer(types, attrs):
    t = types[0]
    if t.ndim and 0 in [s for s in t.shape if isinstance(s, int)]:
        raise ShapeError(f"median: expected a non-empty tensor, found {t!r}")
    return [TensorType((), t.dtype)]


def _median_all_kernel(xp, x):
    flat = x.reshape(-1)
    if flat.size == 0:
        raise ValueError("median: expected a non-empty tensor")
    s = xp.sort(_sort_keys(xp, flat), kind="stable")
    if dtypes.is_float_array(x) and xp.isnan(s[-1]):
        return xp.asarray(np.nan, dtype=x.dtype)
    return xp.asarray(s[(flat.size - 1) // 2]).astype(x.dtype)


def _median_all_vjp(cts, ins, outs, a, needs):
    # PyTorch's rule for the median of all elements (evenly_distribute_backward): the
    # gradient is shared evenly between the elements equal to it (NaNs when it is NaN),
    # selected (0 elsewhere, even under an infinite cotangent)
    (g,), (x,), (y,) = cts, ins, outs
    mask = x == y
    if dtypes.is_float(x.dtype):
        mask = logical_or(mask, logical_and(isnan(x), isnan(y)))
    return [where(mask, g / sum_(cast(mask, g.dtype)), 0.0)]


median_all_op = register(OpDef("median_all", _median_all_infer, _median_all_kernel,
                               _median_all_vjp, vjp_reads_output=True, attrs=Attrs()))


# -- public functions --------------------------------------------------------------------------
def _operand_1d(x, name):
    """``x`` and whether it was 0-d (then viewed as one element along dim 0)."""
    x = operand(x, name)
    return (reshape(x, 1), True) if x.ndim == 0 else (x, False)


def _dim_of(x, dim, name, zero_d):
    if isinstance(dim, (tuple, list)) or dim is None:
        raise TypeError(located(f"{name}: expected an int dim, found {dim!r}"))
    return 0 if zero_d and normalize_dim(dim, 1, name) == 0 else normalize_dim(dim, x.ndim,
                                                                               name)


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """Sort along ``dim``; returns ``(values, indices)``. Always stable (equal elements keep
    their order, which ``stable=True`` asks PyTorch for); NaN sorts as the largest value."""
    x, zero_d = _operand_1d(x, "sort")
    d = _dim_of(x, dim, "sort", zero_d)
    values, indices = sort_op(x, dim=d, descending=bool(descending), stable=bool(stable))
    if zero_d:
        values, indices = reshape(values), reshape(indices)
    return sort_result(values, indices)


@composite("argsort")
def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """The indices that sort ``x`` along ``dim`` (``sort(...).indices``)."""
    return sort(x, dim, descending, stable=stable).indices


def _slice_along(x, dim, index):
    return getitem(x, (slice(None),) * dim + (index,))


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (``largest=False``: smallest) elements along ``dim`` as
    ``(values, indices)``, in sorted order (also when ``sorted=False``, which lets PyTorch
    return any order). NaN counts as the largest value."""
    x, zero_d = _operand_1d(x, "topk")
    d = _dim_of(x, dim, "topk", zero_d)
    size = x.shape[d]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(located(f"topk: expected an int k, found {type(k).__name__}"))
    if isinstance(size, int) and not 0 <= k <= size:
        raise ShapeError(located(f"topk: k ({k}) out of range for dim {dim} of size {size}"))
    values, indices = sort(x, d, descending=bool(largest), stable=True)
    values, indices = (_slice_along(values, d, slice(0, int(k))),
                       _slice_along(indices, d, slice(0, int(k))))
    if zero_d:
        values, indices = reshape(values), reshape(indices)
    return topk_result(values, indices)


def kthvalue(x, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest element (1-based) along ``dim`` as ``(values, indices)``; NaN
    counts as the largest value."""
    x, zero_d = _operand_1d(x, "kthvalue")
    d = _dim_of(x, dim, "kthvalue", zero_d)
    size = x.shape[d]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(located(f"kthvalue: expected an int k, found {type(k).__name__}"))
    if isinstance(size, int) and not 1 <= k <= size:
        raise ShapeError(located(f"kthvalue: k ({k}) out of range for dim {dim} of size "
                                 f"{size} (expected 1..{size})"))
    values, indices = sort(x, d, stable=True)
    index = slice(int(k) - 1, int(k)) if keepdim else int(k) - 1
    values, indices = _slice_along(values, d, index), _slice_along(indices, d, index)
    if zero_d:
        values, indices = reshape(values), reshape(indices)
    return kthvalue_result(values, indices)


def median(x, dim=None, keepdim: bool = False):
    """``median(x)``: the lower median of all elements (NaN if any is NaN), its gradient
    shared between the elements equal to it. ``median(x, dim)``: ``(values, indices)`` of
    the lower median along ``dim`` (the first NaN of a slice that holds one)."""
    if dim is None:
        x = operand(x, "median")
        return median_all_op(x)
    x, zero_d = _operand_1d(x, "median")
    d = _dim_of(x, dim, "median", zero_d)
    n = x.shape[d]
    if isinstance(n, int) and n == 0:
        raise ShapeError(located(f"median: cannot take the median of an empty dim {dim}"))
    values, indices = sort(x, d, stable=True)
    # the lower median's place in the sorted slice, or its first NaN (NaNs sort last)
    nans = sum_(cast(x != x, "int64"), d, keepdim=True)
    size = n if isinstance(n, int) else numel(x, (d,), dtype="int64")
    pos = where(nans > 0, size - nans, (size - 1) // 2)
    values, indices = gather(values, d, pos), gather(indices, d, pos)
    if not keepdim:
        values, indices = _slice_along(values, d, 0), _slice_along(indices, d, 0)
    if zero_d:
        values, indices = reshape(values), reshape(indices)
    return median_result(values, indices)


def mode(x, dim: int = -1, keepdim: bool = False):
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and its
    last index, as ``(values, indices)``."""
    x, zero_d = _operand_1d(x, "mode")
    d = _dim_of(x, dim, "mode", zero_d)
    values, indices = mode_op(x, dim=d, keepdim=bool(keepdim) and not zero_d)
    if zero_d:
        values, indices = reshape(values), reshape(indices)
    return mode_result(values, indices)


def _concrete(x, name):
    """The data of an eager tensor as a numpy array, for the functions whose result shape
    depends on values; a clear error for a symbolic Value (graph mode)."""
    if isinstance(x, Value) or current_graph() is not None:
        raise GraphError(located(
            f"{name}: the result's shape depends on the values, which a graph does not know "
            f"when it is built; call {name} in eager mode (on tensors), or outside the graph"))
    return np.asarray(x)


def unique(x, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim=None):
    """The distinct elements of ``x`` (``dim``: distinct slices along it), in ascending order
    (also for ``sorted=False``, as PyTorch's CPU kernel); with ``return_inverse`` the index
    of each element's value, with ``return_counts`` how often each occurs. NaNs are never
    equal, so each stays (as in PyTorch). Eager mode only: the result's shape depends on the
    data. Not differentiable (as in PyTorch)."""
    x = operand(x, "unique")
    arr = _concrete(x, "unique")
    dt = x.dtype if isinstance(x.dtype, str) else dtypes.as_dtype(x.dtype)
    if dim is not None:
        dim = normalize_dim(dim, max(arr.ndim, 1), "unique")
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.shape[dim] == 0:
            vals = arr
            inv = np.zeros(0, np.int64)
            counts = np.zeros(0, np.int64)
        else:
            vals, inv, counts = np.unique(arr, return_inverse=True, return_counts=True,
                                          axis=dim, equal_nan=False)
    else:
        vals, inv, counts = np.unique(arr.reshape(-1), return_inverse=True,
                                      return_counts=True, equal_nan=False)
        inv = inv.reshape(arr.shape)
    out = [constant(np.asarray(vals, dtype=arr.dtype), dtype=dt)]
    if return_inverse:
        out.append(constant(np.asarray(inv, np.int64).reshape(-1) if dim is not None
                            else np.asarray(inv, np.int64), dtype="int64"))
    if return_counts:
        out.append(constant(np.asarray(counts, np.int64), dtype="int64"))
    device = getattr(x, "device", "cpu")
    if str(device) != "cpu":            # the results live where the input does
        out = [o.to(device) for o in out]
    return out[0] if len(out) == 1 else tuple(out)


def _same_dtype(name, a, b):
    a, b = operand(a, name), operand(b, name, "other")
    if a.dtype != b.dtype:
        raise DTypeError(located(f"{name}: expected both inputs to have the same dtype, "
                                 f"found {a.dtype} and {b.dtype}"))
    return a, b


def isclose(x, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """Elementwise ``|x - other| <= atol + rtol * |other|`` (or equal, infinities
    included), as a bool tensor; NaNs are close to each other only with ``equal_nan``.
    Integers and bools are compared in float32, as PyTorch does."""
    x, other = _same_dtype("isclose", x, other)
    if rtol < 0 or atol < 0:
        raise ValueError(located(f"isclose: rtol and atol must be >= 0, found rtol={rtol}, "
                                 f"atol={atol}"))
    close = x == other
    if equal_nan and dtypes.is_float(x.dtype):
        close = logical_or(close, logical_and(isnan(x), isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    if not dtypes.is_float(x.dtype):
        x, other = cast(x, dtypes.DEFAULT_FLOAT), cast(other, dtypes.DEFAULT_FLOAT)
    allowed = atol + abs(rtol * other)
    actual = abs(x - other)
    return logical_or(close, logical_and(isfinite(actual), actual <= allowed))


def _all_true(t, name) -> bool:
    if isinstance(t, Value):
        raise GraphError(located(
            f"{name}: returns a Python bool, which needs the values: a graph being built does "
            f"not have them; use isclose/eq and reduce them in the graph instead"))
    return bool(sum_(cast(logical_not(t), "int64")) == 0)


def allclose(x, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element of ``x`` is close to ``other`` (``isclose``): a Python bool."""
    return _all_true(isclose(x, other, rtol, atol, equal_nan), "allclose")


def equal(x, other) -> bool:
    """Whether ``x`` and ``other`` have the same shape and the same elements (NaN is not
    equal to NaN): a Python bool, as ``torch.equal``."""
    x, other = operand(x, "equal"), operand(other, "equal", "other")
    if tuple(x.shape) != tuple(other.shape):
        return False
    return _all_true(x == other, "equal")
