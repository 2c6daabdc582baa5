"""ONNX forms of the advanced-indexing ops (graphlib/ops/indexing.py).

``index`` is Gather (one index tensor) or GatherND over the indexed dims moved to the front;
``index_put`` is ScatterND the same way (``reduction="add"`` when it accumulates); ``scatter``
is ScatterElements. Negative indices are wrapped with Mod first (ScatterND takes none).
``scatter_reduce``, ``nonzero``, ``masked_take`` and ``masked_scatter`` have no converter:
exporting them is refused with the op's name and the user's line.
"""
from __future__ import annotations

from ..graphlib.ops.indexing import _advanced_shape
from ..graphlib.types import broadcast_shapes
from ._export import _in, _out, _refuse, converter


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
