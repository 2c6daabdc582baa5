"""``graph.verify()``: SSA, topological order and types, with the nodes around a failure."""
from __future__ import annotations

from .collective_hooks import async_role
from .errors import GraphError
from .ir import install_service
from .printer import Namer, graph_namer, node_to_text


def _context(graph, index: int, namer: Namer) -> str:
    lo, hi = max(0, index - 2), min(len(graph.nodes), index + 3)
    lines = []
    for i in range(lo, hi):
        mark = "-> " if i == index else "   "
        lines.append(mark + node_to_text(graph.nodes[i], namer, source=True, indent=""))
    return "\n".join(lines)


def verify(graph) -> None:
    """Raise GraphError when the graph breaks an IR invariant; return None when it holds."""
    # Name every value as ``print(graph)`` does, so the context below matches the full text.
    namer = graph_namer(graph)
    defined = set(graph.inputs) | set(graph.state)
    if len(defined) != len(graph.inputs) + len(graph.state):
        raise GraphError(f"graph {graph.name!r}: an input is listed twice")
    reads = {}      # value -> {node: times it reads it}: what the use lists must hold
    last_seq, last_index = 0, -1     # the previous ordered side effect (collective)
    for index, node in enumerate(graph.nodes):
        def fail(msg):
            raise GraphError(f"graph {graph.name!r}, node {index} ({node.op.name}): {msg}\n"
                             + _context(graph, index, namer))
        for i, x in enumerate(node.inputs):
            if x not in defined:
                fail(f"input {i} ({namer.name(x)}) is used before it is defined (or is not "
                     "in the graph)")
        for i, o in enumerate(node.outputs):
            if o in defined:
                fail(f"output {i} ({namer.name(o)}) is defined twice (SSA broken)")
            if o.node is not node or o.index != i:
                fail(f"output {i} does not point back to its producer")
        for r, region in enumerate(node.regions):
            try:
                verify(region.graph)
            except GraphError as e:
                fail(f"region {r} is broken:\n{e}")
            try:
                _check_closed(region.graph)
            except GraphError as e:
                fail(f"region {r}: {e}")
        try:
            types = node.op.infer([x.type for x in node.inputs], node.attrs)
        except Exception as e:  # noqa: BLE001 - reported with context
            fail(f"type inference fails: {e}")
        if [t for t in types] != [o.type for o in node.outputs]:
            fail(f"stored output types {[o.type for o in node.outputs]} differ from the "
                 f"inferred {list(types)}")
        if node.op.ordered:
            seq = node.attrs.get("seq", 0)
            if seq <= last_seq:
                fail(f"collectives out of order: seq {seq} runs after seq {last_seq} (node "
                     f"{last_index}); every rank must run collectives in the order they were "
                     "built, so no pass may reorder them")
            last_seq, last_index = seq, index
            if async_role(node.op):
                _check_pair(node, fail)
        for o in node.outputs:
            defined.add(o)
        if node.graph is not graph:
            fail("the node is in the order but not placed in this graph (append it through "
                 "Graph.append/insert/create_node, or assign graph.nodes)")
        for x in node.inputs:
            reads.setdefault(x, {})
            reads[x][node] = reads[x].get(node, 0) + 1
            if node not in x._uses:
                fail(f"the use list of {namer.name(x)} misses this node (inputs changed "
                     "behind the IR's back)")
    values = list(graph.inputs) + list(graph.state) + [o for n in graph.nodes for o in n.outputs]
    for v in values:
        if v._uses != reads.get(v, {}):
            stale = [n.op.name for n in v._uses if n not in reads.get(v, {})]
            raise GraphError(f"graph {graph.name!r}: the use list of {namer.name(v)} lists "
                             f"nodes that do not read it ({stale}): inputs changed behind "
                             "the IR's back")
    for i, o in enumerate(graph.outputs):
        if o not in defined:
            raise GraphError(f"graph {graph.name!r}: output {i} ({o!r}) is not defined in the "
                             "graph")
    for state, new in graph.updates.values():
        if new not in defined:
            raise GraphError(f"graph {graph.name!r}: the update of {state.name!r} is not "
                             "defined in the graph")
        if new.type != state.type:
            raise GraphError(f"graph {graph.name!r}: the update of {state.name!r} has type "
                             f"{new.type!r}, expected {state.type!r}")


def _check_pair(node, fail) -> None:
    """A non-blocking collective's start is read by exactly one node, its wait; a wait
    reads a start's output and names that start's seq."""
    if async_role(node.op) == "start":
        users = list(node.outputs[0]._uses)
        if len(users) != 1 or async_role(users[0].op) != "wait":
            fail(f"a collective start needs exactly one wait reading its buffer (and no other "
                 f"reader), found {[u.op.name for u in users]}")
        return
    src = node.inputs[0].node
    if src is None or async_role(src.op) != "start":
        fail("a collective wait must read the output of a collective start")
    if node.attrs.get("start") != src.attrs.get("seq"):
        fail(f"the wait names start seq {node.attrs.get('start')}, but reads the start of "
             f"seq {src.attrs.get('seq')}")


def _check_closed(graph) -> None:
    """A region reads only its own inputs and the values its nodes make (what it needs
    from outside is passed in as an input)."""
    own = set(graph.inputs) | set(graph.state)
    for node in graph.nodes:
        for x in node.inputs:
            if x not in own:
                raise GraphError(f"node {node.op.name} reads {x!r}, which is not defined in "
                                 "the region (captured values must be region inputs)")
        own.update(node.outputs)


install_service("verify", verify)       # graph.verify()
