"""Neural-network ops: softmax, log_softmax (numerically stable), one_hot."""
from __future__ import annotations

from .. import dtypes
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, normalize_dim
from .elementwise import exp
from .reduction import sum


def _softmax_infer(name):
    def infer(types, attrs):
        (t,) = types
        normalize_dim(attrs["dim"], max(t.ndim, 1), name)
        dt = t.dtype if dtypes.is_float(t.dtype) else dtypes.DEFAULT_FLOAT
        return [TensorType(t.shape, dt)]
    return infer


def _finite_max(xp, x, dim):
    """The max along ``dim`` (kept), 0 where it is not finite: the shift that keeps exp in
    range (array methods: the numpy function wrappers cost more than the work here)."""
    m = x.max(axis=dim, keepdims=True)
    if m.dtype.kind == "f":
        m = xp.where(xp.isfinite(m), m, 0)
    return m


def _softmax_kernel(xp, x, dim):
    if x.dtype.kind != "f":
        x = x.astype(dtypes.DEFAULT_FLOAT)
    if x.ndim == 0:
        return xp.ones_like(x)
    if x.size == 0:    # no max to shift by: the result is empty too
        return x.copy()
    m = _finite_max(xp, x, dim)
    e = xp.exp(x - m)
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax_kernel(xp, x, dim):
    if x.dtype.kind != "f":
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
                            _softmax_vjp))
log_softmax_op = register(OpDef("log_softmax", _softmax_infer("log_softmax"),
                                _log_softmax_kernel, _log_softmax_vjp))


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


one_hot_op = register(OpDef("one_hot", _one_hot_infer, _one_hot_kernel))


def softmax(x, dim: int):
    """exp(x) / sum(exp(x), dim), shifted by the max for stability."""
    return softmax_op(x, dim=normalize_dim(dim, max(x.ndim, 1), "softmax") if x.ndim else 0)


def log_softmax(x, dim: int):
    """x - logsumexp(x, dim), computed stably."""
    return log_softmax_op(x, dim=normalize_dim(dim, max(x.ndim, 1), "log_softmax")
                          if x.ndim else 0)


def one_hot(indices, num_classes: int = -1):
    """int64 one-hot encoding with a trailing dim of ``num_classes``.

    In graph mode ``num_classes`` must be given (the output shape cannot depend on data); on
    eager tensors -1 means ``indices.max() + 1``, as in PyTorch.
    """
    if num_classes is None or num_classes < 0:
        if hasattr(indices, "item") and hasattr(indices, "numpy"):
            num_classes = int(indices.amax().item()) + 1
        else:
            raise ShapeError(located("one_hot: num_classes must be given when building a "
                                     "graph (the output shape cannot depend on the data)"))
    return one_hot_op(indices, num_classes=int(num_classes))


stop_gradient_op = register(OpDef(
    "stop_gradient", lambda types, attrs: [types[0]], lambda xp, x: x,
    lambda cts, ins, outs, a, needs: [None], elementwise=True, expr="{0}"))


def stop_gradient(x):
    """``x`` itself, with no gradient flowing back through it (``detach`` inside graphs)."""
    return stop_gradient_op(x)
