"""Memory-aware scheduling: another topological order of the nodes with a lower peak.

The order of a graph's nodes is its schedule: the runtime runs them in that order and the
memory plan follows it, so the bytes live at once depend on it. A greedy list scheduler
(as in the scheduling of XLA and TVM) builds an order node by node, each time running, among
the nodes whose inputs are ready, the one that frees the most bytes net of what it allocates.

Random ops may move: their kernels are pure functions of their seed input and their
``stream`` attribute, so reordering them never changes their numbers. Ordered side effects
(collectives) keep their order among themselves: the dependency graph chains each to the next.
A non-blocking collective's start runs as soon as it is ready and its wait as late as
possible (only when nothing else is ready), so communication overlaps the most work.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Set

import networkx as nx

from ..graphlib.collective_hooks import async_role
from ..graphlib.ir import Graph, Node, Value
from .memory import align, analyse, peak_live_bytes
from .result import PassResult

# Unbound symbolic dims count as this size when comparing schedules (the batch dim is the
# usual symbol, and the choice rarely depends on its exact value).
ESTIMATE_DIM = 64


def _dependency_graph(nodes: List[Node]) -> nx.DiGraph:
    """Node positions as a DAG: an edge producer -> consumer for every value read, and one
    from each ordered side effect (collective) to the next."""
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(nodes)))
    made: Dict[Value, int] = {}
    last_ordered = None
    for i, node in enumerate(nodes):
        if node.op.ordered:
            if last_ordered is not None:
                dag.add_edge(last_ordered, i)
            last_ordered = i
        for x in node.inputs:
            j = made.get(x)
            if j is not None:
                dag.add_edge(j, i)
        for o in node.outputs:
            made[o] = i
    return dag


def greedy_order(graph: Graph, shapes: Optional[Mapping[str, int]] = None,
                 depth_first: bool = False, alignment: int = 64) -> List[Node]:
    """A topological order of ``graph.nodes`` picking, among ready nodes, the one with the
    largest (bytes it frees - bytes it allocates); ties go to the earlier node, or with
    ``depth_first`` to the node reading the most recently made value.

    Byte counts follow the planner: views allocate nothing and keep their source alive,
    constants are outside the arena, a state's new value allocates nothing once every other
    read of the state has run (it is then written in place), and until then its node waits
    while any other node is ready.
    """
    nodes = list(graph.nodes)
    live = analyse(graph, nodes, None, shapes, default_dim=ESTIMATE_DIM)
    dag = _dependency_graph(nodes)
    waiting = dict(dag.in_degree())
    size = {k: align(s, alignment) for k, s in live.sizes.items()}
    arena = {k for k in live.sizes if k not in live.views and k not in live.external}
    # the buffers each node reads (a view reads its source's buffer) and their reader counts
    reads: List[Set[Value]] = [{live.source(x) for x in node.inputs} for node in nodes]
    readers: Dict[Value, int] = {}
    for r in reads:
        for key in r:
            readers[key] = readers.get(key, 0) + 1
    pinned = {live.source(k) for k in live.roots}
    state_of = {new: state for state, new in graph.updates.values()}

    def early_update(i: int) -> bool:
        """Whether node i makes a state's new value while the old one has other readers
        left: run now, the new value would need an arena buffer to the end of the run;
        run later, it is written into the state's buffer."""
        for o in nodes[i].outputs:
            state = state_of.get(o)
            if state is not None and readers.get(state, 0) - (state in reads[i]) > 0:
                return True
        return False

    def gain(i: int) -> int:
        freed = sum(size[k] for k in reads[i]
                    if k in arena and k not in pinned and readers[k] == 1)
        made = 0
        for o in nodes[i].outputs:
            key = o
            if key in arena and not (key in state_of and not early_update(i)):
                made += size[key]
        return freed - made

    made_at: Dict[Value, int] = {}            # value -> its position in the new order
    urgency = [{"start": 1, "wait": -1}.get(async_role(n.op), 0) for n in nodes]

    def priority(i: int) -> tuple:
        recent = 0
        if depth_first:
            recent = max((made_at.get(x, -1) for x in nodes[i].inputs), default=-1)
        return (urgency[i], not early_update(i), gain(i), recent, -i)

    ready = [i for i, d in waiting.items() if d == 0]
    order: List[Node] = []
    while ready:
        pick = max(ready, key=priority)
        ready.remove(pick)
        node = nodes[pick]
        made_at.update((o, len(order)) for o in node.outputs)
        order.append(node)
        for k in reads[pick]:
            readers[k] -= 1
        for succ in dag.successors(pick):
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    return order


def memory_aware_schedule(graph: Graph, shapes: Optional[Mapping[str, int]] = None
                          ) -> PassResult:
    """Reorder the nodes (a valid topological order) when that lowers the peak live bytes.

    Before (three 4 MB branches live at once, peak 12 MB):
        ``%a = exp(%x); %b = sin(%x); %c = cos(%x); %ra = sum(%a); %rb = sum(%b); ...``
    After (one branch at a time, peak 4 MB):
        ``%a = exp(%x); %ra = sum(%a); %b = sin(%x); %rb = sum(%b); %c = cos(%x); ...``

    Two greedy orders (ties to the earlier node; depth first) are compared with the current
    one by ``peak_live_bytes`` (the memory plan's lower bound; unbound symbols count as
    ``ESTIMATE_DIM``), and the graph keeps its order unless one is strictly lower.
    """
    if len(graph.nodes) < 3:
        return PassResult(graph, False)
    best_peak = peak_live_bytes(graph, graph.nodes, shapes, default_dim=ESTIMATE_DIM)
    best = None
    for depth_first in (False, True):
        order = greedy_order(graph, shapes, depth_first)
        peak = peak_live_bytes(graph, order, shapes, default_dim=ESTIMATE_DIM)
        if peak < best_peak:
            best_peak, best = peak, order
    if best is None or all(a is b for a, b in zip(best, graph.nodes)):
        return PassResult(graph, False)
    graph.nodes = best
    return PassResult(graph, True, [f"peak {best_peak} bytes (estimated)"])

