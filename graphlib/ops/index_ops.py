"""The advanced-indexing ops, with PyTorch's semantics (the functions that build them from
``x[...]`` are in ``indexing``):

- ``index`` (``x[:, idx]``, ``x[a, b]``): integer tensors at some dims of ``x``, broadcast
  together; their result dims go where the first one stands when they index adjacent dims,
  else in front (numpy's and PyTorch's rule, judged after ints, slices and None are applied,
  as PyTorch does). Negative entries count from the end; out-of-range ones raise IndexError.
- ``index_put`` (``x[idx] = v``, ``x.index_put_``, ``index_copy``, the gradient of ``index``):
  the same places written with ``values`` (last write wins) or accumulated into.
"""
from __future__ import annotations


import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs
from ..batching import ensure_batched, lrank, pad_after_batch, shape_of
from ..errors import ShapeError
from ..ir import Value, current_graph
from ..registry import OpDef, get_op, register
from ..types import TensorType, broadcast_shapes, format_shape
from .creation import zeros
from .shape import (IndexingError, zeros_like_for_grad)


_INT_INDEX = ("int64", "int32")   # as PyTorch: long and int (uint8 and bool are masks)
_AFTER_0 = tuple(range(1, 66))      # every input after the first (index tensors)
_AFTER_1 = tuple(range(2, 67))      # every input after the second


def _is_tensor(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _dtype_of(x) -> str:
    return x.dtype if isinstance(x.dtype, str) else dtypes.as_dtype(x.dtype)


def _symbolic(*xs) -> bool:
    """Whether the call builds a graph (a Value among ``xs``, or inside ``with graph:``)."""
    return current_graph() is not None or any(isinstance(x, Value) for x in xs)


def _wrapped(xp, index, size, dim: int, op: str):
    """``index`` as int64 with negative entries counted from the end; IndexError outside
    ``[-size, size)``, as PyTorch's advanced indexing."""
    index = index.astype(xp.int64, copy=False)
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < -size or hi >= size:
            bad = lo if lo < -size else hi
            raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                             f"size {size}")
        if lo < 0:
            index = xp.where(index < 0, index + size, index)
    return index


def _checked(xp, index, size, dim: int, op: str):
    """``index`` as int64, every entry in ``[0, size)`` (gather and scatter refuse negative
    indices, as PyTorch does)."""
    index = index.astype(xp.int64, copy=False)
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                             f"size {size}")
    return index


# -- index and index_put -----------------------------------------------------------------------


def _check_index_tensor(op, t):
    if t.dtype not in _INT_INDEX:
        raise IndexingError(f"{op}: tensors used as indices must be integer (int64, int32) or "
                            f"bool tensors, found {t.dtype}")


def _advanced_shape(op, shape, index_types, dims):
    if not dims or len(dims) != len(index_types) or list(dims) != sorted(set(dims)) or (
            dims[-1] >= len(shape)):
        raise ShapeError(f"{op}: dims {list(dims)} must be increasing dims of "
                         f"{format_shape(shape)}, one per index tensor")
    for t in index_types:
        _check_index_tensor(op, t)
    b = broadcast_shapes(*(t.shape for t in index_types), op=op)
    if all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1)):
        return tuple(shape[:dims[0]]) + b + tuple(shape[dims[-1] + 1:])
    return b + tuple(s for i, s in enumerate(shape) if i not in dims)


def _index_infer(types, attrs):
    x, *idx = types
    return [TensorType(_advanced_shape("index", x.shape, idx, attrs["dims"]), x.dtype)]


def _key(xp, x, idx, dims, op):
    key = [slice(None)] * (dims[-1] + 1)
    for t, d in zip(idx, dims):
        key[d] = _wrapped(xp, t, x.shape[d], d, op)
    return tuple(key)


def _index_kernel(xp, x, *idx, dims):
    return x[_key(xp, x, idx, dims, "index")]


def _index_vjp(cts, ins, outs, a, needs):
    x, *idx = ins
    zero = zeros_like_for_grad(x, cts[0])
    return [index_put_op(zero, cts[0], *idx, dims=a["dims"], accumulate=True)] + [None] * len(
        idx)


def _broadcast(*shapes):
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = [s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0]
        big = [d for d in dims if d != 1]
        out.append(big[0] if big else 1)
    return tuple(out)


def _advanced_plan(x, idx_args, idx_batched, dims, size):
    """What ``x[..., i0, ..., i1, ...]`` per example needs as one advanced index over the
    batch: the index tensors (a batch ``arange`` in front, each index with a batch dim),
    their dims, and the permutation that puts the result in (batch, logical result) order."""
    ranks = [lrank(t, b) for t, b in zip(idx_args, idx_batched)]
    r = max(ranks)
    idx = [get_op("reshape")(t, shape=(size,) + (1,) * (r - k) + shape_of(t)[1:]) if b else
           get_op("reshape")(t, shape=(1,) * (1 + r - k) + shape_of(t))
           for t, b, k in zip(idx_args, idx_batched, ranks)]
    batch = get_op("arange")(start=0, end=size, step=1, dtype="int64")
    batch = get_op("reshape")(batch, shape=(size,) + (1,) * r)
    new_dims = (0,) + tuple(d + 1 for d in dims)
    contiguous = all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1))
    pre = dims[0] if contiguous else 0
    # the kernel gives (B, *b, *x's dims before dims[0], *after): the dims before move
    # behind b when the example's own result keeps them in front
    b_rank = 1 + len(_broadcast(*[shape_of(t)[1:] if bb else shape_of(t) for t, bb in
                                  zip(idx_args, idx_batched)]))
    perm = None
    if pre:
        perm = (0,) + tuple(range(b_rank, b_rank + pre)) + tuple(range(1, b_rank))
    return [batch] + idx, new_dims, perm, b_rank, pre


def _index_rule(op, args, batched, attrs, size):
    """Advanced indexing per example: the batch becomes one more indexed dim (an arange)."""
    x, idx_args = args[0], args[1:]
    if any(t.dtype == "bool" for t in idx_args):
        return NotImplemented
    x = ensure_batched(x, batched[0], size)
    idx, dims, perm, _, _ = _advanced_plan(x, idx_args, batched[1:], attrs["dims"], size)
    out = op(x, *idx, dims=dims)
    if perm is not None:
        rest = tuple(range(len(perm), len(shape_of(out))))
        out = get_op("permute")(out, dims=perm + rest)
    return out


index_op = register(OpDef(
    "index", _index_infer, _index_kernel, _index_vjp, nondiff_inputs=_AFTER_0,
    attrs=Attrs(dims=Attr("dims", min=0)),
    doc="x[..., i0, ..., i1, ...]: integer tensors at ``dims`` (PyTorch's advanced indexing)",
    batch=_index_rule))


def _index_put_infer(types, attrs):
    x, v, *idx = types
    target = _advanced_shape("index_put", x.shape, idx, attrs["dims"])
    if broadcast_shapes(v.shape, target, op="index_put") != tuple(target):
        raise ShapeError(f"index_put: values of shape {format_shape(v.shape)} do not "
                         f"broadcast to the indexed shape {format_shape(target)}")
    return [TensorType(x.shape, x.dtype)]


def _index_put_kernel(xp, x, v, *idx, dims, accumulate=False):
    out = x.copy()
    key = _key(xp, x, idx, dims, "index_put")
    v = v.astype(x.dtype, copy=False)
    if accumulate:
        xpu.add_at(xp, out, key, xp.broadcast_to(v, out[key].shape))
    else:
        out[key] = v
    return out


def _index_put_vjp(cts, ins, outs, a, needs):
    g = cts[0]
    x, v, *idx = ins
    dims = a["dims"]
    gx = gv = None
    if needs[0]:
        gx = g if a.get("accumulate", False) else _zero_at(g, idx, dims)
    if needs[1]:
        gv = index_op(g, *idx, dims=dims)
    return [gx, gv] + [None] * len(idx)


def _zero_at(g, idx, dims):
    return index_put_op(g, zeros(dtype=g.dtype), *idx, dims=dims, accumulate=False)


def _index_put_rule(op, args, batched, attrs, size):
    """``index_put`` per example: the values are laid out as ``_index_rule``'s kernel
    result (batch, index dims, the dims before them, the rest) and put with a batch arange."""
    x, v, idx_args = args[0], args[1], args[2:]
    if any(t.dtype == "bool" for t in idx_args):
        return NotImplemented
    x = ensure_batched(x, batched[0], size)
    dims = attrs["dims"]
    idx, new_dims, perm, b_rank, pre = _advanced_plan(x, idx_args, batched[2:], dims, size)
    logical = shape_of(x)[1:]
    b = _broadcast(*[shape_of(t)[1:] if bb else shape_of(t) for t, bb in
                     zip(idx_args, batched[2:])])
    contiguous = pre > 0 or all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1))
    if contiguous:
        result = logical[:dims[0]] + b + logical[dims[-1] + 1:]
    else:
        result = b + tuple(s for i, s in enumerate(logical) if i not in dims)
    v = ensure_batched(v, batched[1], size)
    v = pad_after_batch(v, len(result) - lrank(v, True))
    v = get_op("expand")(v, shape=(size,) + result)
    if perm is not None:       # the inverse of _index_rule's permutation
        n = len(shape_of(v))
        inverse = [0] * n
        full = perm + tuple(range(len(perm), n))
        for i, p in enumerate(full):
            inverse[p] = i
        v = get_op("permute")(v, dims=tuple(inverse))
    return op(x, v, *idx, dims=new_dims, accumulate=attrs.get("accumulate", False))


index_put_op = register(OpDef(
    "index_put", _index_put_infer, _index_put_kernel, _index_put_vjp,
    nondiff_inputs=_AFTER_1,
    attrs=Attrs(dims=Attr("dims", min=0), accumulate=Attr(bool, default=False)),
    doc="x with x[..., i0, ..., i1, ...] = values (or += values when ``accumulate``)",
    batch=_index_put_rule))


def _scalar_as(x, value):
    """A Python number converted as PyTorch converts it into x's dtype."""
    dt = _dtype_of(x)
    if isinstance(value, np.generic):
        value = value.item()
    if dt == "bool":
        return bool(value)
    if dtypes.is_float(dt):
        return float(value)
    return int(value)
