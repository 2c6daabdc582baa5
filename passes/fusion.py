"""Elementwise fusion: chains and trees of elementwise ops become one ``fused`` node.

Greedy, producer -> consumer: walking the graph in order, each elementwise node joins the
group of each producer it reads (an elementwise group, or a matmul/sum/mean whose epilogue
it becomes) when the merged group

- creates no cycle: no path leaves the group and comes back (checked with networkx on the
  graph with every group contracted to one node);
- can run as one loop: every value the group hands out (read by a node outside it, or a
  graph output or state update) has the group's full iteration shape; smaller, broadcast
  values stay inside it;
- starts any matmul or reduction it holds from values made outside the group.

Then, horizontally, sibling groups of elementwise ops that read the same large value (at
least ``HORIZONTAL_MIN_ELEMENTS`` elements, symbolic dims counted as ``ESTIMATE_DIM``) and
iterate over its shape merge into one node with several outputs, under the same rules: the
shared value is then read once, chunk by chunk, while it is in cache. Smaller siblings stay
apart: there a fused kernel's fixed cost outweighs the bandwidth it saves.

Scalar constants are folded into the body; every other outside value becomes an input.
A value still needed outside the group stays an output of the fused node, so nothing is
recomputed. Groups of a single op are left alone: fusing them saves no kernel.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import networkx as nx

from ..graphlib.errors import ShapeError
from ..graphlib.ir import ConstArray, Graph, Node, Region, Value
from ..graphlib.ops.fused import FusedBody, make_fused_node
from ..graphlib.rewrite import clone, live_roots, replace_all
from ..graphlib.types import broadcast_shapes
from .cleanup import dead_code_elimination
from .result import PassResult
from .schedule import ESTIMATE_DIM

# Horizontal fusion only for shared inputs at least this large (elements): one float32
# chunk of the fused kernels (CHUNK, 64K elements) is about where reading the input once
# starts to repay a fused kernel's fixed cost.
HORIZONTAL_MIN_ELEMENTS = 1 << 16


def _elementwise(node: Node) -> bool:
    return (node.op.elementwise and not node.op.random and len(node.outputs) == 1
            and not node.op.constant)


def _scalar_constant(v: Value) -> bool:
    n = v.node
    return (n is not None and n.op.constant
            and not isinstance(n.attrs["value"], ConstArray))


class _Groups:
    """Disjoint groups of node indices, with the graph contracted group by group.

    Each group keeps what ``can_merge`` needs (its elementwise iteration shape, its hosts,
    the outputs read outside it), updated as groups merge, so a merge test costs what the
    two groups hand out, not their size: fusing an n-node chain is near-linear. Constants
    are left out of the contracted graph: a node without inputs can lie on no path between
    two groups, and a shared constant read by every node would make each cycle search walk
    the whole graph.
    """

    def __init__(self, graph: Graph, epilogues: bool):
        self.nodes = graph.nodes
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.roots = set(live_roots(graph))
        self.epilogues = epilogues
        self.group = list(range(len(self.nodes)))          # node index -> group id
        self.members: Dict[int, List[int]] = {i: [i] for i in range(len(self.nodes))}
        self.shape: Dict[int, object] = {}      # group -> elementwise iteration shape
        self.hosts: Dict[int, List[int]] = {}   # group -> its non-elementwise members
        self.outs: Dict[int, List[Value]] = {}  # group -> member outputs read outside it
        for i, n in enumerate(self.nodes):
            self._summarise(i)
        self.dag = nx.DiGraph()
        self.dag.add_nodes_from(range(len(self.nodes)))
        for i, n in enumerate(self.nodes):
            for x in n.inputs:
                j = self.producer(x)
                if j is not None and self.nodes[j].inputs:
                    self.dag.add_edge(j, i)

    def _summarise(self, i: int) -> None:
        """The summary of the one-node group ``i``."""
        n = self.nodes[i]
        ew = _elementwise(n)
        self.shape[i] = tuple(n.outputs[0].shape) if ew else None
        self.hosts[i] = [] if ew else [i]
        self.outs[i] = [o for o in n.outputs if o in self.roots or o.uses]

    def producer(self, v: Value):
        return self.index.get(v.node) if v.node is not None else None

    def is_host(self, i: int) -> bool:
        """Whether node ``i`` may host an epilogue (its op's ``epilogue_host`` trait): its
        elementwise consumers fused after it, the fused kernel calling its own kernel first,
        then running the chain on its result."""
        return self.epilogues and self.nodes[i].op.epilogue_host

    def outside_outputs(self, member_ids: List[int]) -> List[Value]:
        """Outputs of the members read outside them (or graph outputs, state updates)."""
        inside = {self.nodes[i] for i in member_ids}
        outs = []
        for i in sorted(member_ids):
            for o in self.nodes[i].outputs:
                if o in self.roots or any(u not in inside for u in o.uses):
                    outs.append(o)
        return outs

    def _union_outs(self, a: int, b: int) -> List[Value]:
        """The outputs the merged group a+b would hand out: those of a and b still read
        outside both (a value no group reads was never one of them)."""
        group, index = self.group, self.index
        return [o for o in self.outs[a] + self.outs[b]
                if o in self.roots or any(group[index[u]] not in (a, b) for u in o.uses)]

    def can_merge(self, a: int, b: int) -> bool:
        hosts = self.hosts[a] + self.hosts[b]
        for i in hosts:                  # a matmul/reduction must start the group
            for x in self.nodes[i].inputs:
                j = self.producer(x)
                if j is not None and self.group[j] in (a, b):
                    return False
        shapes = [sh for sh in (self.shape[a], self.shape[b]) if sh is not None]
        try:
            full = broadcast_shapes(*shapes, op="fuse")
        except ShapeError:
            return False
        host_outs = {o for i in hosts for o in self.nodes[i].outputs}
        for o in self._union_outs(a, b):
            if o not in host_outs and tuple(o.shape) != tuple(full):
                return False
        return not self._creates_cycle(a, b)

    def _creates_cycle(self, a: int, b: int) -> bool:
        """Whether contracting groups a and b would close a cycle: a path between them
        that passes through another group."""
        dag = self.dag
        for s, t in ((a, b), (b, a)):
            direct = dag.has_edge(s, t)
            if direct:
                dag.remove_edge(s, t)
            try:
                if _has_path(dag, s, t):
                    return True
            finally:
                if direct:
                    dag.add_edge(s, t)
        return False

    def split(self, i: int) -> int:
        """Take node ``i`` out of its group into a group of its own; only the edges of the
        two groups are rebuilt. Returns the rest's group id."""
        gid = self.group[i]
        rest = [m for m in self.members.pop(gid) if m != i]
        rest_id = gid if gid != i else rest[0]
        self.dag.remove_node(gid)
        for g in (self.shape, self.hosts, self.outs):
            g.pop(gid, None)
        self.members[rest_id] = rest
        for m in rest:
            self.group[m] = rest_id
        self.members[i] = [i]
        self.group[i] = i
        self._summarise(i)
        self._summarise(rest_id)
        for m in rest:                   # the rest's summary, member by member
            if m != rest_id:
                self._summarise(m)
                self._absorb(rest_id, m)
        self.outs[rest_id] = self.outside_outputs(rest)
        for g in (rest_id, i):
            self.dag.add_node(g)
            for m in self.members[g]:
                node = self.nodes[m]
                for x in node.inputs:
                    j = self.producer(x)
                    if j is not None and self.nodes[j].inputs and self.group[j] != g:
                        self.dag.add_edge(self.group[j], g)
                for o in node.outputs if node.inputs else ():
                    for u in o.uses:
                        k = self.group[self.index[u]]
                        if k != g:
                            self.dag.add_edge(g, k)
        return rest_id

    def _absorb(self, a: int, m: int) -> None:
        """Fold the one-node summary of ``m`` (already computed) into group ``a``'s."""
        shapes = [sh for sh in (self.shape[a], self.shape.pop(m)) if sh is not None]
        self.shape[a] = broadcast_shapes(*shapes, op="fuse") if shapes else None
        self.hosts[a] = self.hosts[a] + self.hosts.pop(m)
        self.outs.pop(m)

    def merge(self, a: int, b: int) -> None:
        outs = self._union_outs(a, b)
        shapes = [sh for sh in (self.shape[a], self.shape[b]) if sh is not None]
        if len(self.members[b]) > len(self.members[a]):
            a, b = b, a                  # relabel the smaller group
        nx.contracted_nodes(self.dag, a, b, self_loops=False, copy=False)
        for i in self.members[b]:
            self.group[i] = a
        self.members[a].extend(self.members.pop(b))
        self.shape[a] = broadcast_shapes(*shapes, op="fuse") if shapes else None
        self.shape.pop(b)
        self.hosts[a] = self.hosts[a] + self.hosts.pop(b)
        self.outs[a] = outs
        self.outs.pop(b)


def _has_path(dag: nx.DiGraph, source: int, target: int) -> bool:
    """Whether ``dag`` has a path source -> target: a search from both ends, growing the
    smaller frontier and, on a tie, the one grown less recently. (networkx's ``has_path``
    grows the forward side on every tie, so from the head of a chain it walks the whole
    rest of it while the backward side would have stopped at once.)"""
    if source == target:
        return True
    ends = [(dag.succ, {source}, [source]), (dag.pred, {target}, [target])]
    side = 0                                   # 0: forward from source, 1: back from target
    while ends[0][2] and ends[1][2]:
        if len(ends[0][2]) != len(ends[1][2]):
            side = 0 if len(ends[0][2]) < len(ends[1][2]) else 1
        step, seen, fringe = ends[side]
        met = ends[1 - side][1]
        grown = []
        for v in fringe:
            for w in step[v]:
                if w in met:
                    return True
                if w not in seen:
                    seen.add(w)
                    grown.append(w)
        ends[side] = (step, seen, grown)
        side = 1 - side
    return False


def _elements(v: Value) -> int:
    n = 1
    for d in v.shape:
        n *= d if isinstance(d, int) else ESTIMATE_DIM
    return n


def _fuse_siblings(groups: _Groups) -> None:
    """Merge elementwise groups that read the same large outside value over its shape."""
    nodes = groups.nodes
    readers: Dict[Value, List[int]] = {}    # value -> one member index per reader group
    for gid, member_ids in groups.members.items():
        if not all(_elementwise(nodes[i]) for i in member_ids):
            continue
        inside = {nodes[i] for i in member_ids}
        seen = set()
        for i in member_ids:
            for x in nodes[i].inputs:
                if (x in seen or _scalar_constant(x)
                        or (x.node is not None and x.node in inside)
                        or _elements(x) < HORIZONTAL_MIN_ELEMENTS
                        or tuple(x.shape) != tuple(nodes[i].outputs[0].shape)):
                    continue
                seen.add(x)
                readers.setdefault(x, []).append(member_ids[0])
    for key, firsts in readers.items():
        for i in firsts[1:]:
            a, b = groups.group[firsts[0]], groups.group[i]
            if a != b and groups.can_merge(a, b):
                groups.merge(min(a, b), max(a, b))


def _body(groups: _Groups, member_ids: List[int], outs: List[Value]) -> Tuple[FusedBody, list]:
    """The fused body of the members (in graph order) and the outside values it reads."""
    nodes = [groups.nodes[i] for i in member_ids]
    inside = {n for n in nodes}
    sub = Graph("fused")
    m: Dict[Value, Value] = {}
    inputs: List[Value] = []
    for node in nodes:
        for x in node.inputs:
            if x in m:
                continue
            if _scalar_constant(x):
                c = x.node
                copy = Node(c.op, (), dict(c.attrs), (), c.source)
                copy.outputs = (Value(x.type, copy, 0, sub),)
                sub.append(copy)
                m[x] = copy.outputs[0]
            elif x.node is None or x.node not in inside:
                m[x] = sub.add_input(f"i{len(inputs)}", x.type)
                inputs.append(x)
        new = Node(node.op, [m[x] for x in node.inputs], dict(node.attrs), (), node.source)
        new.outputs = tuple(Value(o.type, new, k, sub) for k, o in enumerate(node.outputs))
        sub.append(new)
        for o, n in zip(node.outputs, new.outputs):
            m[o] = n
    sub.outputs = [m[o] for o in outs]
    return FusedBody(sub), inputs


def _move_to_consumers(groups: _Groups) -> None:
    """Move a group's member into the group of its one consumer where that saves an output:
    the member is elementwise, its result is read by one elementwise node outside the group
    (and is no graph output), and every value it reads is in memory anyway (an output of
    the group, or made elsewhere). A ReLU's ``gt(y, 0)`` is the case: the greedy walk puts
    it in the forward group (it reads y), which then writes a mask that lives until the
    backward's ``where`` reads it; moved into the backward's group it reads y, which lives
    that long anyway. Moved only where the consumer's group takes it (no cycle, one
    iteration shape); otherwise it stays."""
    nodes = groups.nodes
    for gid in list(groups.members):
        members = groups.members.get(gid)
        if members is None or len(members) < 2:
            continue
        outs = {o for o in groups.outside_outputs(members)}
        for i in list(members):
            node = nodes[i]
            if not _elementwise(node) or node.outputs[0] not in outs:
                continue
            out = node.outputs[0]
            readers = out.uses
            if out in groups.roots or len(readers) != 1 or not _elementwise(readers[0]):
                continue
            held = all(_scalar_constant(x) or groups.producer(x) is None
                       or groups.group[groups.producer(x)] != groups.group[i]
                       or x in outs for x in node.inputs)
            if not held:
                continue
            rest = groups.split(i)
            target = groups.group[groups.index[readers[0]]]
            if groups.can_merge(target, i):
                groups.merge(target, i)
            else:                          # put it back where it was
                groups.merge(rest, i)


def _fuse_in_regions(graph: Graph, epilogues: bool, horizontal: bool) -> int:
    """Fuse inside the regions of ``graph``'s nodes (loop bodies, branches; nested ones
    too), each rewritten on a copy and swapped in as a new region where fusion changed it
    (regions are immutable and shared between clones). Fused bodies are kernels, not
    programs: they are left alone. Returns how many fused nodes were made."""
    made = 0
    for node in graph.nodes:
        attrs = None
        for key, region in node.attrs.items():
            if not isinstance(region, Region) or isinstance(region, FusedBody):
                continue
            body, _ = clone(region.graph)
            before = len(fused_nodes(body))
            inner = _fuse_in_regions(body, epilogues, horizontal)
            if _fuse_top(body, epilogues, horizontal).changed or inner:
                if attrs is None:
                    attrs = dict(node.attrs)
                attrs[key] = region.with_graph(body)
                made += inner + len(fused_nodes(body)) - before
        if attrs is not None:
            node.attrs = attrs
    return made


def fuse_elementwise(graph: Graph, epilogues: bool = True,
                     horizontal: bool = True) -> PassResult:
    """Fuse chains and trees of elementwise ops (and the epilogues of matmul, sum and mean;
    and siblings reading one large value, with ``horizontal``) into ``fused`` nodes; see the
    module docstring for the rules. Runs inside the regions of loops and branches too
    (recursively), so a loop body's chains become fused nodes the runtime runs with the
    backend's fused kernels on every iteration.

    Before: ``%1 = mul(%x, %x); %2 = mul(%1, 0.5); %3 = tanh(%2); return (%3, %1)``
    After:  ``%1, %3 = fused(%x) { %a = mul(%i0, %i0); %b = mul(%a, 0.5);
    %c = tanh(%b); return (%a, %c) }; return (%3, %1)``
    """
    inner = _fuse_in_regions(graph, epilogues, horizontal)
    result = _fuse_top(graph, epilogues, horizontal)
    if inner:
        result.changed = True
        result.notes.append(f"{inner} fused nodes in regions")
    return result


def _fuse_top(graph: Graph, epilogues: bool, horizontal: bool) -> PassResult:
    """``fuse_elementwise`` on the nodes of ``graph`` itself (not inside regions)."""
    _, pruned = dead_code_elimination(graph)    # never fuse (so keep alive) dead values
    groups = _Groups(graph, epilogues)
    nodes = graph.nodes
    for i, node in enumerate(nodes):
        if not _elementwise(node):
            continue
        for x in node.inputs:
            j = groups.producer(x)
            if j is None or _scalar_constant(x):
                continue
            a, b = groups.group[j], groups.group[i]
            if a == b:
                continue
            if not (_elementwise(nodes[j]) or groups.is_host(j)):
                continue
            if groups.can_merge(a, b):
                groups.merge(a, b)
    _move_to_consumers(groups)
    if horizontal:
        _fuse_siblings(groups)

    fused: Dict[int, Node] = {}           # group id -> its fused node
    mapping: Dict[Value, Value] = {}
    for gid, member_ids in groups.members.items():
        if sum(1 for i in member_ids if _elementwise(nodes[i])) == 0 or len(member_ids) < 2:
            continue
        member_ids = sorted(member_ids)          # graph order
        outs = groups.outside_outputs(member_ids)
        if not outs:
            continue
        body, inputs = _body(groups, member_ids, outs)
        fnode = make_fused_node(inputs, body, nodes[member_ids[-1]], graph)
        fnode.provenance = tuple(sorted({u for i in member_ids for u in nodes[i].provenance}))
        fused[gid] = fnode
        for o, f in zip(outs, fnode.outputs):
            mapping[o] = f
    if not fused:
        return PassResult(graph, pruned)

    # the new node list: untouched nodes and fused nodes, re-sorted (a fused node must come
    # after everything it reads, which may sit between its first and last member)
    items: List[Node] = []
    first: Dict[int, int] = {}
    for i, node in enumerate(nodes):
        gid = groups.group[i]
        if gid in fused:
            if gid not in first:
                first[gid] = i
                items.append(fused[gid])
        else:
            items.append(node)
    graph.nodes = items
    replace_all(graph, mapping)
    position = {n: k for k, n in enumerate(items)}
    order = nx.DiGraph()
    order.add_nodes_from(range(len(items)))
    for k, n in enumerate(items):
        for x in n.inputs:
            p = position.get(x.node) if x.node is not None else None
            if p is not None:
                order.add_edge(p, k)
    graph.nodes = [items[k] for k in nx.lexicographical_topological_sort(order)]
    dead_code_elimination(graph)
    return PassResult(graph, True, [f"{len(fused)} fused nodes"])


def fused_nodes(graph: Graph) -> List[Node]:
    """The fused nodes of ``graph`` (for tests and reports)."""
    return [n for n in graph.nodes if n.op.name == "fused"]
