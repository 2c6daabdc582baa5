"""Gradient buckets for data-parallel training: many small all-reduces become a few large
non-blocking ones, each started as soon as its last gradient is computed and waited for just
before the first node that reads its result.

``optimizer.minimize`` on a model wrapped by ``DistributedDataParallel`` averages each
gradient with its own all_reduce node (``bucket`` attribute: the bucket size in bytes, or -1
for ``dg.config.ddp_bucket_cap_mb``). This pass takes those nodes in the order their
gradients become ready in the backward (the last layer's first), fills buckets up to the
size (PyTorch's DDP does the same with ``bucket_cap_mb``), and replaces each bucket by an
``all_reduce_start`` of its gradients (copied into one flat buffer, MPI Iallreduce), placed
right after the bucket's last gradient is made, and an ``all_reduce_wait`` followed by a
split, placed just before the first reader of the bucket's results (the optimizer update):
the rest of the backward runs between the two while MPI reduces. The collectives get fresh
``seq`` numbers in their new order. The report lists the buckets and, for each, how many
nodes run between its start and its wait (the work its communication can overlap).

Before: ``%g1 = ...; %g2 = ...; %a1 = all_reduce(%g1); %a2 = all_reduce(%g2); %u = f(%a1)``
After:  ``%g2 = ...; %g1 = ...; %h = all_reduce_start(%g2, %g1); ...; %a = all_reduce_wait(%h);
%s = split(%a); %a2 = reshape(%s.0); %a1 = reshape(%s.1); %u = f(%a1)``

The pass leaves the graph alone when it holds other collectives (their relative order
with the new nodes would have to be chosen).
"""
from __future__ import annotations

import heapq
from typing import Dict, List

import numpy as np

from ..graphlib import functional as F
from ..graphlib.collective_hooks import async_role, next_sequence
from ..graphlib.config import config
from ..graphlib.ir import Graph, Node
from ..graphlib.ops.collectives import all_reduce_op, all_reduce_start, all_reduce_wait
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
    # build each bucket's nodes (appended at the end), then order them
    starts: List[Node] = []
    tails: List[List[Node]] = []          # each bucket's wait, split and reshapes
    end = len(nodes)
    first_reader = [min((pos[u] for n in b for u in n.outputs[0]._uses if u in pos),
                        default=end) for b in buckets]
    for bucket in buckets:
        first = len(graph.nodes)
        group = bucket[0].attrs.get("group", 0)
        with graph:
            handle = all_reduce_start([n.inputs[0] for n in bucket],
                                      bucket[0].attrs.get("op", "avg"), group)
            mid = len(graph.nodes)
            total = all_reduce_wait(handle, group)
            sizes = [n.outputs[0].type.numel() for n in bucket]
            parts = F.split(total, sizes) if len(bucket) > 1 else [total]
            news = [F.reshape(p, *n.outputs[0].type.shape) for p, n in zip(parts, bucket)]
        for n in graph.nodes[first:]:
            n.source = bucket[-1].source
        starts.append(handle.node)
        tails.append(list(graph.nodes[mid:]))
        for n, v in zip(bucket, news):
            graph.replace_uses(n.outputs[0], v)
    # where each new node should go: a start right after its bucket's last gradient, a
    # wait (and its split) right before the first reader of the bucket's results
    key: Dict[Node, tuple] = {n: (pos[n], 0) for n in nodes}
    # (the waits in the starts' order: the first bucket started is the first done)
    for k, (bucket, start, tail) in enumerate(zip(buckets, starts, tails)):
        key[start] = (max(ready(n) for n in bucket), 1, k)
        at = min(first_reader[k:])
        for j, n in enumerate(tail):
            key[n] = (at, -1, k, j)
    for bucket in buckets:
        for n in bucket:
            graph.erase(n)
    graph.nodes = _stable_order(graph, key)
    seq_of = {}
    for n in graph.nodes:                 # fresh order numbers, along the new order
        if n.op.ordered:
            old = n.attrs["seq"]
            n.attrs = dict(n.attrs, seq=next_sequence())
            seq_of[old] = n.attrs["seq"]
    for n in graph.nodes:
        if async_role(n.op) == "wait":
            n.attrs = dict(n.attrs, start=seq_of[n.attrs["start"]])
    return PassResult(graph, True, _report(graph, buckets, starts))


def _stable_order(graph: Graph, key: Dict[Node, tuple]) -> List[Node]:
    """The graph's nodes in a topological order that follows ``key`` (smallest first)
    wherever the dependencies allow it."""
    nodes = list(graph.nodes)
    made = {o: n for n in nodes for o in n.outputs}
    waiting = {n: len({made[x] for x in n.inputs if x in made}) for n in nodes}
    readers: Dict[Node, List[Node]] = {n: [] for n in nodes}
    for n in nodes:
        for m in {made[x] for x in n.inputs if x in made}:
            readers[m].append(n)
    tie = {n: i for i, n in enumerate(nodes)}
    ready = [(key[n], tie[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order: List[Node] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for r in readers[n]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, (key[r], tie[r], r))
    return order


def _report(graph: Graph, buckets, starts) -> List[str]:
    """One note per bucket: its gradients, bytes, and how many nodes run between its start
    and its wait (what its communication can overlap)."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    notes = [f"{len(buckets)} buckets from "
             f"{sum(len(b) for b in buckets)} gradient all-reduces"]
    for k, (bucket, start) in enumerate(zip(buckets, starts)):
        nbytes = sum(_bytes(n.outputs[0].type) for n in bucket)
        (wait,) = start.outputs[0]._uses
        between = index[wait] - index[start] - 1
        notes.append(f"bucket {k}: {len(bucket)} gradients, {nbytes} bytes; {between} nodes "
                     f"run between its start and its wait")
    return notes
