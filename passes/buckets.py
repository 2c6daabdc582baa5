"""Gradient buckets for data-parallel training: many small all-reduces become a few large
ones, each started as soon as its last gradient is computed.

``optimizer.minimize`` on a model wrapped by ``DistributedDataParallel`` averages each
gradient with its own all_reduce node (``bucket`` attribute: the bucket size in bytes, or -1
for ``dg.config.ddp_bucket_cap_mb``). This pass takes those nodes in the order their
gradients become ready in the backward (the last layer's first), fills buckets up to the
size (PyTorch's DDP does the same with ``bucket_cap_mb``), and replaces each bucket by one
``all_reduce`` of the concatenated flat gradients followed by a split, placed right after
the bucket's last gradient is made: the rest of the backward runs after it and does not wait
for it. The report lists the buckets and, for each, how many nodes after its start do not
depend on any bucket's result (the work it can overlap with).

Before: ``%g1 = ...; %g2 = ...; %a1 = all_reduce(%g1); %a2 = all_reduce(%g2)``
After:  ``%g2 = ...; %g1 = ...; %f = cat(reshape(%g2), reshape(%g1)); %a = all_reduce(%f);
%s = split(%a); %a2 = reshape(%s.0); %a1 = reshape(%s.1)``

The pass leaves the graph alone when it holds other collectives (their relative order
with the new nodes would have to be chosen).
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ..graphlib import functional as F
from ..graphlib.config import config
from ..graphlib.ir import Graph, Node, Value
from ..graphlib.ops.collectives import all_reduce, all_reduce_op
from ..graphlib.types import TensorType
from .result import PassResult


def _bytes(t: TensorType) -> int:
    n = t.numel()
    return -1 if n is None else n * np.dtype(t.dtype).itemsize


def _cap(node: Node) -> int:
    b = node.attrs.get("bucket", 0)
    return b if b > 0 else int(config.ddp_bucket_cap_mb * 1024 * 1024)


def _candidate(node: Node) -> bool:
    return (node.op is all_reduce_op and node.attrs.get("bucket", 0) != 0
            and _bytes(node.outputs[0].type) >= 0)


def bucket_all_reduces(graph: Graph) -> PassResult:
    """Group the DDP gradient all-reduces into buckets in backward-ready order (see the
    module docstring)."""
    nodes = list(graph.nodes)
    cands = [n for n in nodes if _candidate(n)]
    if len(cands) < 1:
        return PassResult(graph, False)
    if any(n.op.ordered and not _candidate(n) for n in nodes):
        return PassResult(graph, False, ["left alone: the graph holds other collectives"])
    pos: Dict[Node, int] = {n: i for i, n in enumerate(nodes)}

    def ready(n: Node) -> int:
        src = n.inputs[0].node
        return pos.get(src, -1) if src is not None else -1

    order = sorted(cands, key=lambda n: (ready(n), pos[n]))
    buckets: List[List[Node]] = []
    size = 0
    for n in order:
        key = (n.attrs.get("op"), n.attrs.get("group"), n.outputs[0].dtype)
        last = buckets[-1] if buckets else None
        if last is None or size >= _cap(last[0]) or key != (
                last[0].attrs.get("op"), last[0].attrs.get("group"), last[0].outputs[0].dtype):
            buckets.append([])
            size = 0
        buckets[-1].append(n)
        size += _bytes(n.outputs[0].type)
    # build each bucket's nodes (appended at the end), then move them after their anchor
    made: List[List[Node]] = []
    starts: List[Node] = []
    for bucket in buckets:
        first = len(graph.nodes)
        with graph:
            flats = [F.reshape(n.inputs[0], -1) for n in bucket]
            flat = F.cat(flats, 0) if len(flats) > 1 else flats[0]
            total = all_reduce(flat, bucket[0].attrs.get("op", "avg"),
                               bucket[0].attrs.get("group", 0))
            sizes = [n.outputs[0].type.numel() for n in bucket]
            parts = F.split(total, sizes) if len(bucket) > 1 else [total]
            news = [F.reshape(p, *n.outputs[0].type.shape) for p, n in zip(parts, bucket)]
        new_nodes = list(graph.nodes[first:])
        for n in new_nodes:
            n.source = bucket[-1].source
        starts.append(total.node)
        made.append(new_nodes)
        for n, v in zip(bucket, news):
            graph.replace_uses(n.outputs[0], v)
    for bucket in buckets:
        for n in bucket:
            graph.erase(n)
    # the order: each bucket's nodes right after its last gradient's producer
    rest = list(graph.nodes)
    added = {n for group in made for n in group}
    rest = [n for n in rest if n not in added]
    after: Dict[int, List[Node]] = {}
    for bucket, group in zip(buckets, made):
        anchor = max(ready(n) for n in bucket)
        after.setdefault(anchor, []).extend(group)
    new_order: List[Node] = list(after.get(-1, []))
    for n in rest:
        new_order.append(n)
        if n in pos:
            new_order.extend(after.get(pos[n], []))
    graph.nodes = new_order
    return PassResult(graph, True, _report(graph, buckets, starts))


def _report(graph: Graph, buckets, starts) -> List[str]:
    """One note per bucket: its gradients, bytes, and the nodes after its start that need
    no bucket's result (what its communication can overlap)."""
    waits = set()
    start_set = set(starts)
    index: Dict[Node, int] = {}
    free_after = []
    for i, n in enumerate(graph.nodes):
        index[n] = i
        if n in start_set or any(x in waits for x in n.inputs):
            waits.update(n.outputs)
    independent = [i for i, n in enumerate(graph.nodes)
                   if not any(o in waits for o in n.outputs)]
    for s in starts:
        at = index[s]
        free_after.append(sum(1 for i in independent if i > at))
    notes = [f"{len(buckets)} buckets from "
             f"{sum(len(b) for b in buckets)} gradient all-reduces"]
    for k, (bucket, free) in enumerate(zip(buckets, free_after)):
        nbytes = sum(_bytes(n.outputs[0].type) for n in bucket)
        notes.append(f"bucket {k}: {len(bucket)} gradients, {nbytes} bytes; {free} backward "
                     f"nodes run after its start")
    return notes
