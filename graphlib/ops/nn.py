"""Neural-network ops: softmax, log_softmax (numerically stable), one_hot."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs, AttrValueError
from ..autodiff import composite_vjp, is_zero_cotangent
from ..dispatch import Scalar
from ..batching import ensure_batched, flatten_batch, leading_batch_rule, lrank, shape_of
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, normalize_dim
from ._common import operand
from .elementwise import cast, exp, maximum, ne, rsqrt, where
from .reduction import mean as reduce_mean, numel, sum, sum as reduce_sum
from .shape import reshape


def _softmax_infer(name):
    def infer(types, attrs):
        (t,) = types
        normalize_dim(attrs["dim"], max(t.ndim, 1), name)
        dt = t.dtype if dtypes.is_float(t.dtype) else dtypes.DEFAULT_FLOAT
        return [TensorType(t.shape, dt)]
    return infer


def _finite_max(xp, x, dim):
    """The max along ``dim`` (kept), 0 where it is -inf (a slice of -infs: NaN either way):
    the shift that keeps exp in range. A +inf max stays, so a slice holding +inf gives NaN
    throughout (inf - inf), as PyTorch's softmax (array methods: the numpy function wrappers
    cost more than the work here)."""
    m = x.max(axis=dim, keepdims=True)
    if dtypes.is_float_array(m):
        m = xp.where(m == -xp.inf, 0, m)
    return m


def _softmax_kernel(xp, x, dim):
    if not dtypes.is_float_array(x):
        x = x.astype(dtypes.DEFAULT_FLOAT)
    if x.ndim == 0:
        return xp.ones_like(x)
    if x.size == 0:    # no max to shift by: the result is empty too
        return x.copy()
    m = _finite_max(xp, x, dim)
    e = xp.exp(x - m)
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax_kernel(xp, x, dim):
    if not dtypes.is_float_array(x):
        x = x.astype(dtypes.DEFAULT_FLOAT)
    if x.ndim == 0:
        return xp.zeros_like(x)
    if x.size == 0:
        return x.copy()
    shifted = x - _finite_max(xp, x, dim)
    return shifted - xp.log(xp.exp(shifted).sum(axis=dim, keepdims=True))


def _softmax_vjp(cts, ins, outs, a, needs):
    (g,), (y,) = cts, outs
    return [y * (g - sum(g * y, a["dim"], keepdim=True))]


def _log_softmax_vjp(cts, ins, outs, a, needs):
    (g,), (y,) = cts, outs
    return [g - exp(y) * sum(g, a["dim"], keepdim=True)]


softmax_op = register(OpDef("softmax", _softmax_infer("softmax"), _softmax_kernel,
                            _softmax_vjp, vjp_reads_output=True,
                            attrs=Attrs(dim=Attr(int))))
log_softmax_op = register(OpDef("log_softmax", _softmax_infer("log_softmax"),
                                _log_softmax_kernel, _log_softmax_vjp, vjp_reads_output=True,
                                attrs=Attrs(dim=Attr(int))))


def _one_hot_infer(types, attrs):
    (t,) = types
    if t.dtype not in ("int32", "int64", "uint8"):
        raise DTypeError(f"one_hot: expected integer class indices, found {t.dtype}")
    return [TensorType(t.shape + (attrs["num_classes"],), "int64")]


def _one_hot_kernel(xp, x, num_classes):
    if x.size and (int(x.min()) < 0 or int(x.max()) >= num_classes):
        raise ValueError(f"one_hot: class values must lie in [0, {num_classes}), found "
                         f"[{int(x.min())}, {int(x.max())}]")
    return (x[..., None] == xp.arange(num_classes)).astype(xp.int64)


one_hot_op = register(OpDef("one_hot", _one_hot_infer, _one_hot_kernel,
                            attrs=Attrs(num_classes=Attr(int, min=0)), batch=leading_batch_rule))


def softmax(x, dim: int):
    """exp(x) / sum(exp(x), dim), shifted by the max for stability."""
    x = operand(x, "softmax")
    return softmax_op(x, dim=normalize_dim(dim, max(x.ndim, 1), "softmax") if x.ndim else 0)


def log_softmax(x, dim: int):
    """x - logsumexp(x, dim), computed stably."""
    x = operand(x, "log_softmax")
    return log_softmax_op(x, dim=normalize_dim(dim, max(x.ndim, 1), "log_softmax")
                          if x.ndim else 0)


def one_hot(indices, num_classes: int = -1):
    """int64 one-hot encoding with a trailing dim of ``num_classes``.

    In graph mode ``num_classes`` must be given (the output shape cannot depend on data); on
    eager tensors -1 means ``indices.max() + 1``, as in PyTorch.
    """
    if num_classes is not None and (isinstance(num_classes, bool)
                                    or not hasattr(num_classes, "__index__")):
        raise TypeError(located(f"one_hot: expected num_classes to be an int, found "
                                f"{type(num_classes).__name__} {num_classes!r}"))
    if num_classes is not None and num_classes < -1:
        raise AttrValueError(located(f"one_hot: expected num_classes to be -1 (the largest "
                                     f"class + 1) or at least 0, found {num_classes}"))
    if num_classes is None or num_classes < 0:
        if hasattr(indices, "item") and hasattr(indices, "numpy"):
            if not indices.numel():
                raise ShapeError(located("one_hot: cannot infer the number of classes from "
                                         "an empty tensor; give num_classes"))
            num_classes = int(indices.amax().item()) + 1
        else:
            raise ShapeError(located("one_hot: num_classes must be given when building a "
                                     "graph (the output shape cannot depend on the data)"))
    return one_hot_op(indices, num_classes=int(num_classes))


stop_gradient_op = register(OpDef(
    "stop_gradient", lambda types, attrs: [types[0]], lambda xp, x: x,
    lambda cts, ins, outs, a, needs: [None], elementwise=True, expr="{0}",
    returns_input=True,
    attrs=Attrs()))


def stop_gradient(x):
    """``x`` itself, with no gradient flowing back through it (``detach`` inside graphs)."""
    return stop_gradient_op(x)


# -- softmax cross-entropy: the loss of classifiers as one forward and one backward kernel ---
# cross_entropy(logits, labels) as log_softmax + gather + masked mean is ~15 small nodes and
# as many kernels per training step, forward and backward; as one op it is two kernels, the
# backward recomputing softmax from the logits (one pass over (N, C)) instead of keeping it.
_SCE_REDUCTIONS = ("mean", "sum", "none")


def _sce_infer(types, attrs):
    x, t = types
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"softmax_cross_entropy: expected floating-point logits, found "
                         f"{x.dtype}")
    if x.ndim != 2:
        raise ShapeError(f"softmax_cross_entropy: expected logits of shape (N, C), found "
                         f"{list(x.shape)}")
    if t.dtype not in ("int32", "int64", "uint8"):
        raise DTypeError(f"softmax_cross_entropy: expected integer class indices as target, "
                         f"found {t.dtype}")
    if t.ndim != 1 or (isinstance(t.shape[0], int) and isinstance(x.shape[0], int)
                       and t.shape[0] != x.shape[0]):
        raise ShapeError(f"softmax_cross_entropy: expected target of shape [{x.shape[0]}] "
                         f"for logits {list(x.shape)}, found {list(t.shape)}")
    if attrs["reduction"] not in _SCE_REDUCTIONS:
        raise ValueError(f"softmax_cross_entropy: reduction must be one of "
                         f"{_SCE_REDUCTIONS}, found {attrs['reduction']!r}")
    shape = (x.shape[0],) if attrs["reduction"] == "none" else ()
    return [TensorType(shape, x.dtype)]


def _out_of_bounds(t, c: int, ignore_index):
    bad = t[(t != ignore_index) & ((t < 0) | (t >= c))]
    return ValueError(f"softmax_cross_entropy: target {int(bad[0])} is out of bounds: "
                      f"class indices must lie in [0, {c}) (or equal ignore_index "
                      f"{ignore_index})")


def _sce_columns(xp, x, t, ignore_index):
    """What both kernels start from, class-major: (valid rows or None when every row
    counts, safe class indices, column indices, the logits transposed to (C, N) and shifted
    by each row's max, or by 0 where that is not finite). Class-major because numpy reduces
    along a short last axis row by row: max over (512, 10) along axis 1 measured 36 us,
    the transposed copy plus the max along axis 0 4 us. Refuses a class index out of range,
    as PyTorch does (gather would read another row's logit or fail without naming the
    loss)."""
    n, c = x.shape
    valid = t != ignore_index
    if bool(valid.all()):
        safe, valid = t, None
    else:
        safe = xp.where(valid, t, 0)
    unsigned = safe.view(f"u{safe.dtype.itemsize}") if safe.dtype.kind == "i" else safe
    if n and int(unsigned.max()) >= c:                     # (negatives wrap to huge)
        raise _out_of_bounds(t, c, ignore_index)
    cols = xp.arange(n)
    xt = xp.ascontiguousarray(x.T)
    if n:
        m = xt.max(axis=0)
        if not math.isfinite(float(m.sum())):              # an inf or NaN row: shift by 0
            m = xp.where(xp.isfinite(m), m, 0)
        xp.subtract(xt, m, out=xt)
    return valid, safe, cols, xt


def _sce_kernel(xp, x, t, *, ignore_index, reduction):
    n = x.shape[0]
    if x.size == 0:
        loss = xp.zeros(n, x.dtype)
        count = int((t != ignore_index).sum())
    else:
        valid, safe, cols, xt = _sce_columns(xp, x, t, ignore_index)
        picked = xt[safe, cols]
        lse = xp.log(xp.exp(xt).sum(axis=0))
        loss = xp.subtract(lse, picked, out=lse)
        if valid is not None:
            loss = xp.where(valid, loss, x.dtype.type(0)).astype(x.dtype, copy=False)
        count = n if valid is None else int(valid.sum())
    if reduction == "none":
        return loss
    total = loss.sum(dtype=x.dtype)
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore", divide="ignore"):      # every target ignored: NaN
        return (total / x.dtype.type(count)).astype(x.dtype)


def _sce_grad(xp, g, x, t, ignore_index, reduction, out):
    """(softmax(x) - one_hot(t)) * weight per row into ``out``: the weight is g / (number
    of counted rows) for a mean, g for a sum, g[i] per row for none; 0 on ignored rows (so
    0 everywhere when every row is ignored, as PyTorch)."""
    if x.size == 0:
        return out
    valid, safe, cols, xt = _sce_columns(xp, x, t, ignore_index)
    p = xp.exp(xt, out=xt)
    p /= p.sum(axis=0)
    p[safe, cols] -= x.dtype.type(1)
    g = g.astype(x.dtype, copy=False)
    if reduction == "none":
        w = g if valid is None else g * valid
    else:
        count = x.shape[0] if valid is None else max(int(valid.sum()), 1)
        w = g / x.dtype.type(count) if reduction == "mean" else g
        if valid is not None:
            w = w * valid
    xp.multiply(p, w.astype(x.dtype, copy=False), out=p)
    out[...] = p.T
    return out


def _sce_vjp(cts, ins, outs, a, needs):
    (g,), (x, t) = cts, ins
    return [softmax_cross_entropy_backward_op(g, x, t, **a), None]


def _sce_rule(op, args, batched, attrs, size):
    """Cross-entropy of (N, C) logits per example: the examples' rows become one (B*N, C)
    problem with reduction none, then each example's rows are reduced as PyTorch does (a
    mean over the rows whose target is not ``ignore_index``)."""
    x, t = args
    bx, bt = batched
    n = shape_of(x)[1] if bx else shape_of(x)[0]
    x = flatten_batch(ensure_batched(x, bx, size), 1)
    t = flatten_batch(ensure_batched(t, bt, size), 1)
    reduction = attrs["reduction"]
    loss = op(x, t, ignore_index=attrs["ignore_index"], reduction="none")
    loss = get_op("reshape")(loss, shape=(size, n))
    if reduction == "none":
        return loss
    total = get_op("sum")(loss, dim=(1,), keepdim=False)
    if reduction == "sum":
        return total
    valid = get_op("ne")(get_op("reshape")(t, shape=(size, n)),
                         Scalar(attrs["ignore_index"], t.dtype))
    count = get_op("sum")(get_op("cast")(valid, dtype=x.dtype), dim=(1,), keepdim=False)
    count = get_op("maximum")(count, Scalar(1.0, x.dtype))
    return get_op("div")(total, count)


softmax_cross_entropy_op = register(OpDef(
    "softmax_cross_entropy", _sce_infer, _sce_kernel, _sce_vjp, nondiff_inputs=(1,),
    autocast="fp32",
    doc="cross-entropy of logits (N, C) against class indices (N,), PyTorch's "
        "ignore_index and reduction; one kernel forward, one backward",
    attrs=Attrs(ignore_index=Attr(int),
                reduction=Attr(str, choices=("mean", "sum", "none"))), batch=_sce_rule))


def _sce_backward_infer(types, attrs):
    g, x, t = types
    (loss,) = _sce_infer([x, t], attrs)
    if tuple(g.shape) != tuple(loss.shape):
        raise ShapeError(f"softmax_cross_entropy_backward: expected a cotangent of shape "
                         f"{list(loss.shape)}, found {list(g.shape)}")
    return [TensorType(x.shape, x.dtype)]


def _sce_backward_kernel(xp, g, x, t, *, ignore_index, reduction):
    return _sce_grad(xp, g, x, t, ignore_index, reduction, xp.empty(x.shape, x.dtype))


def _sce_backward_vjp(cts, ins, outs, a, needs):
    """Second order: d = w * (p - onehot) with p = softmax(x), w the per-row weight; for a
    cotangent c, d<c, d>/dx = w * p * (c - sum(c * p)) and d<c, d>/dg = sum over the
    row(s) of c * (p - onehot) * valid (divided by the count for a mean)."""
    (c,), (g, x, t) = cts, ins
    ignore, reduction = a["ignore_index"], a["reduction"]
    classes = x.shape[1]
    valid = cast(ne(t, ignore), x.dtype)
    safe = where(ne(t, ignore), t, 0)
    p = softmax(x, 1)
    onehot = cast(one_hot(safe, classes), x.dtype)
    if reduction == "none":
        w = valid * g
        count = None
    else:
        count = maximum(reduce_sum(valid), 1.0) if reduction == "mean" else None
        w = valid * (g / count if count is not None else g)
    col = reshape(w, -1, 1)
    grads = [None, None, None]
    if needs[1]:
        grads[1] = col * p * (c - reduce_sum(c * p, 1, keepdim=True))
    if needs[0]:
        per_row = reduce_sum(c * (p - onehot), 1) * valid
        if reduction == "none":
            grads[0] = per_row
        else:
            total = reduce_sum(per_row)
            grads[0] = total / count if count is not None else total
    return grads


def _sce_backward_rule(op, args, batched, attrs, size):
    """The cross-entropy gradient per example: the cotangent of each example's reduced loss
    is spread over its rows (divided by its own count of valid rows for a mean)."""
    g, x, t = args
    bg, bx, bt = batched
    n = shape_of(x)[1] if bx else shape_of(x)[0]
    xs = flatten_batch(ensure_batched(x, bx, size), 1)
    ts = flatten_batch(ensure_batched(t, bt, size), 1)
    reduction = attrs["reduction"]
    g = ensure_batched(g, bg, size)
    if reduction != "none":
        g = get_op("reshape")(g, shape=(size, 1))
        if reduction == "mean":
            valid = get_op("ne")(get_op("reshape")(ts, shape=(size, n)),
                              Scalar(attrs["ignore_index"], ts.dtype))
            count = get_op("sum")(get_op("cast")(valid, dtype=x.dtype), dim=(1,), keepdim=True)
            g = get_op("div")(g, get_op("maximum")(count, Scalar(1.0, x.dtype)))
        g = get_op("expand")(g, shape=(size, n))
    g = get_op("reshape")(g, shape=(-1,))
    out = op(g, xs, ts, ignore_index=attrs["ignore_index"], reduction="none")
    return get_op("reshape")(out, shape=(size, n) + shape_of(out)[1:])


softmax_cross_entropy_backward_op = register(OpDef(
    "softmax_cross_entropy_backward", _sce_backward_infer, _sce_backward_kernel,
    _sce_backward_vjp, nondiff_inputs=(2,),
    doc="d softmax_cross_entropy / d logits: (softmax - one_hot) scaled per row",
    attrs=Attrs(ignore_index=Attr(int),
                reduction=Attr(str, choices=("mean", "sum", "none"))), batch=_sce_backward_rule))


def softmax_cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    """Cross-entropy of ``logits`` (N, C) against class indices ``target`` (N,), as
    ``torch.nn.functional.cross_entropy`` without class weights or label smoothing: rows
    whose target is ``ignore_index`` count for nothing; ``reduction`` is "mean" (over the
    counted rows), "sum" or "none" (per row)."""
    return softmax_cross_entropy_op(logits, target, ignore_index=int(ignore_index),
                                    reduction=reduction)


# -- batch normalisation in training mode: one kernel forward, one backward ------------------
# As composite ops, training-mode batch norm is ~6 nodes forward and ~12 backward, several of
# them writing whole (N, C, H, W) arrays; as two ops (PyTorch's native_batch_norm and its
# backward) the statistics are matrix-vector products and the backward one formula.
def _bn_dims(x):
    return (0,) + tuple(range(2, len(x.shape)))


def _bn_infer(types, attrs):
    x, w, b = types
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"batch_norm_train: expected a floating-point input, found {x.dtype}")
    if x.ndim < 2:
        raise ShapeError(f"batch_norm_train: expected an input of at least 2 dims (N, C, ...), "
                         f"found {list(x.shape)}")
    c = x.shape[1]
    for name, t in (("weight", w), ("bias", b)):
        if tuple(t.shape) != (c,) or t.dtype != x.dtype:
            raise ShapeError(f"batch_norm_train: expected a {name} of shape [{c}] and dtype "
                             f"{x.dtype}, found {t.dtype}{list(t.shape)}")
    stat = TensorType((c,), x.dtype)
    return [TensorType(x.shape, x.dtype), stat, stat]


def _channel_sum(xp, a, dims):
    """The sum over ``dims`` in ``a``'s dtype (a backend may pass a faster one to
    ``_bn_forward`` and ``_bn_backward``)."""
    return a.sum(axis=dims, dtype=a.dtype)


def _bn_count(x) -> int:
    """Elements per channel (static shapes)."""
    return math.prod(x.shape) // x.shape[1] if x.shape[1] else 0


def _bn_rows(x):
    """(x as (N, C*S) rows, per(v): a (C,) vector repeated to a (1, C*S) row). numpy
    broadcasts a (1, C, 1, 1) vector over (N, C, H, W) in runs of H*W elements: x - mean
    over (512, 16, 8, 8) float32 measured 298 us that way, against 131 us for a plain pass;
    over (N, C*S) rows the runs are C*S long."""
    n, c = x.shape[:2]
    s = math.prod(x.shape[2:])
    rows = x.reshape(n, c * s)

    def per(v):
        return v.repeat(s).reshape(1, c * s)
    return rows, per


def _bn_buffers(x, xp=np):
    """New (N, C, ...) and two (C,) arrays for a kernel's results (C-contiguous)."""
    c = x.shape[1]
    return (xp.empty(x.shape, dtype=x.dtype), xp.empty(c, dtype=x.dtype),
            xp.empty(c, dtype=x.dtype))


def _bn_forward(xp, x, w, b, eps, out=None, channel_sum=_channel_sum):
    """(y, mean, biased var) over every dim but 1, into ``out`` when given."""
    dims = _bn_dims(x)
    y, mean, var = out if out is not None else _bn_buffers(x, xp)
    n = x.dtype.type(_bn_count(x))
    rows, per = _bn_rows(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = channel_sum(xp, x, dims) / n
        xc = rows - per(m)
        v = channel_sum(xp, xp.square(xc).reshape(x.shape), dims) / n
        scale = w / xp.sqrt(v + x.dtype.type(eps))
    y2 = y.reshape(rows.shape)
    xp.multiply(xc, per(scale), out=y2)
    y2 += per(b)
    mean[...] = m
    var[...] = v
    return y, mean, var


def _half_in_float32(xp, fn, *arrays):
    """``fn`` over float16 arrays computed in float32, results cast back (PyTorch's
    accumulation type: float16 sums over a batch overflow or lose every digit)."""
    half = arrays[0].dtype
    res = fn(*[a.astype(xp.float32) for a in arrays])
    return tuple(r.astype(half) for r in res)


def _bn_kernel(xp, x, w, b, *, eps):
    if x.dtype in dtypes.HALF_NP:
        return _half_in_float32(xp, lambda *a: _bn_forward(xp, *a, eps), x, w, b)
    return _bn_forward(xp, x, w, b, eps)


def _bn_vjp(cts, ins, outs, a, needs):
    (dy, dmean, dvar), (x, w, _) = cts, ins
    dx, dw, db = batch_norm_train_backward_op(dy, x, w, outs[1], outs[2], eps=a["eps"])
    if needs[0] and not (is_zero_cotangent(dmean) and is_zero_cotangent(dvar)):
        # the batch statistics read by the loss too: d mean/dx = 1/n, d var/dx = 2 (x-m)/n
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        if all(isinstance(d, int) for d in x.shape):
            n = float(_bn_count(x))
        else:
            n = numel(x, _bn_dims(x), dtype=x.dtype)
        if not is_zero_cotangent(dmean):
            dx = dx + reshape(dmean, *bshape) / n
        if not is_zero_cotangent(dvar):
            dx = dx + reshape(dvar, *bshape) * (x - reshape(outs[1], *bshape)) * 2.0 / n
    return [dx if needs[0] else None, dw if needs[1] else None, db if needs[2] else None]


def _bn_fold(x, size):
    """(B, N, C, ...) -> (N, B*C, ...): each example's channels become channels of one
    batch norm, so each keeps its own statistics (over its N and spatial dims)."""
    sh = shape_of(x)
    x = get_op("permute")(x, dims=(1, 0) + tuple(range(2, len(sh))))
    return reshape(x, sh[1], size * sh[2], *sh[3:])


def _bn_unfold(y, size):
    """(N, B*C, ...) -> (B, N, C, ...), the inverse of ``_bn_fold``."""
    sh = shape_of(y)
    y = reshape(y, sh[0], size, sh[1] // size, *sh[2:])
    return get_op("permute")(y, dims=(1, 0) + tuple(range(2, len(sh) + 1)))


def _bn_channels(v, b, size):
    """A (C,) vector per example as the (B*C,) vector of the folded batch norm."""
    return reshape(ensure_batched(v, b, size), -1)


def _bn_rule(op, args, batched, attrs, size):
    """Training-mode batch norm per example (torch.func's semantics): each example's
    statistics over its own N and spatial dims, its own weight and bias when batched."""
    x, w, b = args
    if lrank(x, batched[0]) < 2:
        return NotImplemented
    x = ensure_batched(x, batched[0], size)
    y, mean, var = op(_bn_fold(x, size), _bn_channels(w, batched[1], size),
                      _bn_channels(b, batched[2], size), **attrs)
    c = shape_of(x)[2]
    return _bn_unfold(y, size), reshape(mean, size, c), reshape(var, size, c)


batch_norm_train_op = register(OpDef(
    "batch_norm_train", _bn_infer, _bn_kernel, _bn_vjp, multi_output=True,
    vjp_reads_output=True,
    doc="batch normalisation with batch statistics: (y, mean, biased variance)",
    attrs=Attrs(eps=Attr(float, min=0)), batch=_bn_rule))


def _bn_backward_infer(types, attrs):
    dy, x, w, mean, var = types
    if tuple(dy.shape) != tuple(x.shape):
        raise ShapeError(f"batch_norm_train_backward: expected a cotangent of shape "
                         f"{list(x.shape)}, found {list(dy.shape)}")
    c = TensorType((x.shape[1],), x.dtype)
    return [TensorType(x.shape, x.dtype), c, c]


def _bn_backward(xp, dy, x, w, mean, var, eps, out=None, channel_sum=_channel_sum):
    """(dx, dweight, dbias) of y = (x - mean) / sqrt(var + eps) * w + b over the batch:
    dx = w / sqrt(var + eps) * (dy - mean(dy) - (x - mean) / (var + eps) * mean(dy (x - mean)))
    """
    dims = _bn_dims(x)
    dx, dw, db = out if out is not None else _bn_buffers(x, xp)
    n = x.dtype.type(_bn_count(x))
    rows, per = _bn_rows(x)
    dy2 = dy.reshape(rows.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        invstd = x.dtype.type(1) / xp.sqrt(var + x.dtype.type(eps))
        sum_dy = channel_sum(xp, dy, dims)
        xc = rows - per(mean)
        t = xp.multiply(dy2, xc)
        dot = channel_sum(xp, t.reshape(x.shape), dims)
        k1 = w * invstd
        k2 = k1 * invstd * invstd * dot / n
        k3 = k1 * sum_dy / n
    dx2 = dx.reshape(rows.shape)
    xp.multiply(dy2, per(k1), out=dx2)
    xp.multiply(xc, per(k2), out=xc)
    dx2 -= xc
    dx2 -= per(k3)
    dw[...] = dot * invstd
    db[...] = sum_dy
    return dx, dw, db


def _bn_backward_kernel(xp, dy, x, w, mean, var, *, eps):
    if x.dtype in dtypes.HALF_NP:
        return _half_in_float32(xp, lambda *a: _bn_backward(xp, *a, eps), dy, x, w, mean, var)
    return _bn_backward(xp, dy, x, w, mean, var, eps)


def _bn_backward_formula(dy, x, w, mean, var, eps):
    """``_bn_backward`` in differentiable ops (for gradients of the gradient)."""
    dims = _bn_dims(x)
    c = x.shape[1]
    bshape = (1, c) + (1,) * (x.ndim - 2)
    invstd = rsqrt(var + eps)
    xc = x - reshape(mean, *bshape)
    m_dy = reduce_mean(dy, dims)
    m_dyxc = reduce_mean(dy * xc, dims)
    dx = reshape(w * invstd, *bshape) * (dy - reshape(m_dy, *bshape) - xc * reshape(
        invstd * invstd * m_dyxc, *bshape))
    db = sum(dy, dims)
    dw = sum(dy * xc, dims) * invstd
    return dx, dw, db


def _bn_backward_vjp(cts, ins, outs, a, needs):
    return composite_vjp(lambda *xs: _bn_backward_formula(*xs, a["eps"]), cts, ins, needs)


def _bn_backward_rule(op, args, batched, attrs, size):
    """The batch-norm gradient per example, on ``_bn_rule``'s folded layout."""
    dy, x, w, mean, var = args
    if lrank(x, batched[1]) < 2:
        return NotImplemented
    dy, x = (ensure_batched(a, f, size) for a, f in zip((dy, x), batched[:2]))
    dx, dw, db = op(_bn_fold(dy, size), _bn_fold(x, size),
                    *[_bn_channels(v, f, size) for v, f in zip((w, mean, var), batched[2:])],
                    **attrs)
    c = shape_of(x)[2]
    return _bn_unfold(dx, size), reshape(dw, size, c), reshape(db, size, c)


batch_norm_train_backward_op = register(OpDef(
    "batch_norm_train_backward", _bn_backward_infer, _bn_backward_kernel, _bn_backward_vjp,
    multi_output=True, doc="(dx, dweight, dbias) of batch_norm_train",
    attrs=Attrs(eps=Attr(float, min=0)), batch=_bn_backward_rule))


def batch_norm_train(x, weight, bias, eps: float = 1e-5):
    """Batch normalisation with the statistics of this batch (every dim but 1): returns
    (y, mean, biased variance), the latter two of shape (C,)."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise ValueError(located(f"batch_norm_train: expected eps > 0 (a float), found "
                                 f"{eps!r}"))
    return batch_norm_train_op(x, weight, bias, eps=float(eps))
