"""Redundant casts: what ``dg.autocast`` leaves in a graph, pruned.

Autocast casts each operand where an op needs it, so a graph built under it holds casts to
the dtype a value already has (a value cast twice by two matmuls: CSE merges those) and
chains that go out and back (``bf16 -> f32 -> bf16`` around a float32 op's input). This pass
removes the casts that change nothing; fusion then fuses the remaining casts into their
elementwise neighbours (a cast is elementwise and has a scalar ``expr``).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..graphlib import dtypes
from ..graphlib.ir import Graph
from ..graphlib.registry import REGISTRY
from ..graphlib.rewrite import make_node
from .cleanup import _in_regions, dead_code_elimination
from .result import PassResult


def holds_every_value(src: str, dst: str) -> bool:
    """Whether dtype ``dst`` represents every value of dtype ``src`` exactly (a cast
    ``src -> dst -> src`` is the identity): ``bfloat16 -> float32`` yes, ``float32 ->
    bfloat16`` no, ``float16 <-> bfloat16`` no, ``int32 -> float64`` yes, ``int32 ->
    float32`` no."""
    if src == dst or src == "bool":
        return True
    if dst == "bool":
        return False
    sk, dk = np.dtype(src).kind, np.dtype(dst).kind
    s_float, d_float = dtypes.is_float(src), dtypes.is_float(dst)
    if s_float:
        if not d_float:
            return False
        a, b = ml_dtypes.finfo(src), ml_dtypes.finfo(dst)
        return (b.nmant >= a.nmant and b.maxexp >= a.maxexp and b.minexp <= a.minexp)
    if sk not in "iu":
        return False
    lo, hi = int(np.iinfo(src).min), int(np.iinfo(src).max)
    if d_float:
        limit = 2 ** (ml_dtypes.finfo(dst).nmant + 1)      # every integer up to it is exact
        return -limit <= lo and hi <= limit
    if dk not in "iu":
        return False
    info = np.iinfo(dst)
    return int(info.min) <= lo and hi <= int(info.max)


def _rewrite(graph: Graph) -> int:
    """One sweep; the number of casts replaced."""
    cast = REGISTRY["cast"]
    count = 0
    for node in list(graph.nodes):
        if node.graph is not graph or node.op is not cast:
            continue
        x = node.inputs[0]
        out = node.outputs[0]
        new = None
        if x.dtype == out.dtype:
            new = x                                     # cast to the dtype it has
        else:
            inner = x.node
            if inner is not None and inner.op is cast and holds_every_value(
                    inner.inputs[0].dtype, x.dtype):
                src = inner.inputs[0]                   # cast(cast(v, wider), t)
                if src.dtype == out.dtype:
                    new = src
                else:
                    made = make_node(cast, (src,), {"dtype": out.dtype}, node, graph)
                    graph.insert(graph.index_of(node), made)
                    new = made.outputs[0]
        if new is None:
            continue
        graph.replace_uses(out, new)
        graph.erase(node)
        count += 1
    return count


def remove_redundant_casts(graph: Graph) -> PassResult:
    """Remove casts that change nothing: a cast to the dtype its input has, and a cast of a
    cast whose middle dtype holds every value of the first (``holds_every_value``), which is
    one cast from the first dtype (or none, when it comes back to it). Regions too.

    Before::

        %1: f32[4] = cast(%x: bf16[4]){dtype='float32'}
        %2: bf16[4] = cast(%1){dtype='bfloat16'}
        %3: f32[4] = cast(%y: f32[4]){dtype='float32'}

    After: uses of ``%2`` read ``%x`` and uses of ``%3`` read ``%y``; the casts are gone.
    A narrowing in the middle (``f32 -> bf16 -> f32``) rounds, and is kept."""
    total = 0
    while True:
        made = _rewrite(graph)
        total += made
        if not made:
            break
    regions = _in_regions(graph, lambda body: remove_redundant_casts(body).changed)
    if total:
        dead_code_elimination(graph)
    notes = [f"removed {total} casts"] if total else []
    if regions:
        notes.append(f"in {regions} regions")
    return PassResult(graph, bool(total or regions), notes)
