"""ONNX export converters of the indexing ops (getitem, gather, index_select,
scatter_add, index_add; index, index_put, scatter).

ONNX forms of the advanced-indexing ops (graphlib/ops/indexing.py).

``index`` is Gather (one index tensor) or GatherND over the indexed dims moved to the front;
``index_put`` is ScatterND the same way (``reduction="add"`` when it accumulates); ``scatter``
is ScatterElements. Negative indices are wrapped with Mod first (ScatterND takes none).
``scatter_reduce``, ``nonzero``, ``masked_take`` and ``masked_scatter`` have no converter:
exporting them is refused with the op's name and the user's line.
"""
from __future__ import annotations

import numpy as np

from ..graphlib.ops.indexing import _advanced_shape
from ..graphlib.types import broadcast_shapes
from ._export import INT64_MAX, _compute_dtype, _in, _out, _refuse, converter


@converter("getitem")
def _getitem(ex, node, ins):
    items = node.attrs["index"]
    starts, ends, axes, steps, drop, new = [], [], [], [], [], []
    axis = 0
    out_axis = 0
    for it in items:
        if it[0] == "n":
            new.append(out_axis)
            out_axis += 1
            continue
        if it[0] == "i":
            k = it[1]
            starts.append(k)
            ends.append(k + 1 if k != -1 else INT64_MAX)
            axes.append(axis)
            steps.append(1)
            drop.append(axis)
        else:
            _, start, stop, step = it
            if not (start in (None, 0) and stop is None and step in (None, 1)):
                step = 1 if step is None else step
                starts.append(0 if start is None else start)
                ends.append(INT64_MAX if stop is None else stop)
                axes.append(axis)
                steps.append(step)
            out_axis += 1
        axis += 1
    x = ins[0]
    if axes:
        x = ex.op("Slice", x, ex.ints(starts), ex.ints(ends), ex.ints(axes), ex.ints(steps))
    x = ex.squeeze(x, drop)
    if new:
        x = ex.unsqueeze(x, new)
    if x == ins[0]:
        x = ex.op("Identity", x)
    return [x]


@converter("getitem_grad")
def _getitem_grad(ex, node, ins):
    from ..graphlib.ops.shape import _python_index
    g, x = node.inputs
    if not all(isinstance(d, int) for d in x.shape):
        _refuse("the scatter of a slice's gradient needs a static shape")
    size = int(np.prod(x.shape, dtype=np.int64))
    where = np.arange(size, dtype=np.int64).reshape(x.shape)[_python_index(node.attrs["index"])]
    zeros = ex.const(np.zeros(size, dtype=g.dtype))
    flat = ex.reshape(ins[0], (int(np.size(where)),))
    y = ex.op("ScatterElements", zeros, ex.const(np.ravel(where)), flat, axis=0)
    return [ex.reshape(y, x.shape)]


@converter("gather")
def _gather(ex, node, ins):
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("GatherElements", ins[0], idx, axis=node.attrs["dim"])]


@converter("index_select")
def _index_select(ex, node, ins):
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("Gather", ins[0], idx, axis=node.attrs["dim"])]


def _scatter_add(ex, node, x, idx, src):
    if ex.opset < 16:
        _refuse("scatter with reduction='add' needs opset >= 16")
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(x, _in(node, 0), work)
    src = ex.cast(src, _in(node, 2), work)
    y = ex.op("ScatterElements", x, idx, src, axis=node.attrs["dim"], reduction="add")
    return [ex.cast(y, work, out)]


@converter("scatter_add")
def _scatter_add_conv(ex, node, ins):
    return _scatter_add(ex, node, ins[0], ex.cast(ins[1], _in(node, 1), "int64"), ins[2])


@converter("index_add")
def _index_add(ex, node, ins):
    dim = node.attrs["dim"]
    src = node.inputs[2]
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    col = ex.unsqueeze(idx, [a for a in range(src.ndim) if a != dim])
    full = ex.op("Expand", col, ex.op("Shape", ins[2]))
    return _scatter_add(ex, node, ins[0], full, ins[2])


def _plan(node, first_index: int):
    """(x's permutation putting the indexed dims first, the broadcast index shape, the
    permutation taking ``B + rest`` to the result's dim order)."""
    x = node.inputs[0]
    dims = list(node.attrs["dims"])
    b = broadcast_shapes(*(v.shape for v in node.inputs[first_index:]), op=node.op.name)
    perm = dims + [d for d in range(x.ndim) if d not in dims]
    nb = len(b)
    consecutive = all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1))
    if consecutive and dims[0] > 0:
        p = dims[0]
        tail = x.ndim - dims[-1] - 1
        out_perm = [nb + i for i in range(p)] + list(range(nb)) + [nb + p + j
                                                                  for j in range(tail)]
    else:
        out_perm = list(range(nb + x.ndim - len(dims)))
    return perm, b, out_perm


def _transpose(ex, name, perm):
    if perm == sorted(perm):
        return name
    return ex.op("Transpose", name, perm=list(perm))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _stacked(ex, node, ins, first_index, b):
    """The index tensors (int64, wrapped into [0, size)) broadcast to ``b`` and stacked on a
    new last axis, as GatherND and ScatterND take them."""
    x = node.inputs[0]
    shape = ex.shape_tensor(b)
    cols = []
    for k, (name, d) in enumerate(zip(ins[first_index:], node.attrs["dims"])):
        idx = ex.cast(name, _in(node, first_index + k), "int64")
        idx = ex.op("Mod", idx, ex.dim(x.shape[d]))
        cols.append(ex.unsqueeze(ex.op("Expand", idx, shape), [len(b)]))
    return cols[0] if len(cols) == 1 else ex.op("Concat", *cols, axis=-1)


@converter("index")
def _index(ex, node, ins):
    dims = node.attrs["dims"]
    if len(dims) == 1:      # Gather takes negative indices as they are
        idx = ex.cast(ins[1], _in(node, 1), "int64")
        return [ex.op("Gather", ins[0], idx, axis=dims[0])]
    perm, b, out_perm = _plan(node, 1)
    y = ex.op("GatherND", _transpose(ex, ins[0], perm), _stacked(ex, node, ins, 1, b))
    return [_transpose(ex, y, out_perm)]


@converter("index_put")
def _index_put(ex, node, ins):
    accumulate = node.attrs.get("accumulate", False)
    if accumulate and ex.opset < 16:
        _refuse("index_put with accumulate=True needs opset >= 16 (ScatterND reduction)")
    x = node.inputs[0]
    perm, b, out_perm = _plan(node, 2)
    target = _advanced_shape("index_put", x.shape, [v.type for v in node.inputs[2:]],
                             node.attrs["dims"])
    values = ex.cast(ins[1], _in(node, 1), _out(node))
    values = ex.op("Expand", values, ex.shape_tensor(target))
    values = _transpose(ex, values, _inverse(out_perm))
    attrs = {"reduction": "add"} if accumulate else {}
    y = ex.op("ScatterND", _transpose(ex, ins[0], perm), _stacked(ex, node, ins, 2, b),
              values, **attrs)
    return [_transpose(ex, y, _inverse(perm))]


@converter("scatter")
def _scatter(ex, node, ins):
    reduce = node.attrs.get("reduce")
    if reduce is not None and ex.opset < 16:
        _refuse("scatter with reduce= needs opset >= 16 (ScatterElements reduction)")
    x, index, src = node.inputs
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    part = ex.cast(ins[2], _in(node, 2), _out(node))
    if src.ndim == 0:
        part = ex.op("Expand", part, ex.op("Shape", idx))
    elif tuple(src.shape) != tuple(index.shape):
        part = ex.op("Slice", part, ex.ints([0] * src.ndim), ex.op("Shape", idx))
    attrs = {"reduction": {"add": "add", "multiply": "mul"}[reduce]} if reduce else {}
    return [ex.op("ScatterElements", ins[0], idx, part, axis=node.attrs["dim"], **attrs)]
