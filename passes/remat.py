"""Rematerialisation: recompute cheap values near their late uses instead of keeping them.

Opt-in, with a budget: ``rematerialize(graph, budget_bytes)``. Training steps keep forward
activations alive until the backward pass reads them; when one of them is cheap to make
again (an elementwise or shape op whose inputs are alive anyway), recomputing it right before
its late uses frees its bytes across the peak. Ops are pure (random ones too, given their
seed and stream), so a recomputed value equals the one it replaces.

Not in the O2 pipeline (it needs a budget); add it to a pass list as a function:

    exe = graph.compile(passes=["dce", "cse", lambda g: rematerialize(g, 64 << 20)])
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ..graphlib.ir import Graph, Node, Value
from ..graphlib.rewrite import make_node
from .memory import Liveness, align, analyse, assign_offsets
from .result import PassResult
from .schedule import ESTIMATE_DIM


# Nodes built inside ``duograph.utils.checkpoint.checkpoint`` in graph mode, by uid (uids are
# unique in the process; a rewritten or cloned node carries its originals' uids in its
# provenance): the user asked for them to be recomputed rather than kept, whatever they cost.
CHECKPOINTED: set = set()


def mark_checkpointed(nodes) -> None:
    """Let ``rematerialize`` recompute ``nodes`` (a checkpointed region) like cheap ones."""
    CHECKPOINTED.update(n.uid for n in nodes)


def _checkpointed(node: Node) -> bool:
    if not CHECKPOINTED:
        return False
    return node.uid in CHECKPOINTED or any(u in CHECKPOINTED for u in node.provenance or ())


def _cheap(node: Node) -> bool:
    """Elementwise (not random), a fill or a cast (the op's ``cheap`` trait): about as cheap as
    reading the value; or inside a checkpointed region (``mark_checkpointed``)."""
    return len(node.outputs) == 1 and not node.op.random and (
        node.op.cheap or _checkpointed(node))


def _score(live: Liveness, alignment: int) -> Tuple[int, int]:
    """(peak live bytes, steps at the peak): what a rewrite must lower."""
    profile = live.profile(alignment)
    peak = max(profile, default=0)
    return peak, profile.count(peak)


def _candidates(graph: Graph, live: Liveness, step: int, alignment: int
                ) -> List[Tuple[int, int, Value, List[int]]]:
    """Values idle across ``step`` that one cheap node could make again after it:
    (size, gap, value, positions of the late readers), largest first."""
    order = live.order
    readers: Dict[Value, List[int]] = {}          # buffer source -> positions reading it
    for i, node in enumerate(order):
        for key in {live.source(x) for x in node.inputs}:
            readers.setdefault(key, []).append(i)
    fed = {v for v in graph.inputs} | live.external
    pinned = {live.source(k) for k in live.roots}
    found = []
    for key, first in live.define.items():
        if key not in live.buffer or key in pinned or not first < step < live.keep[key]:
            continue
        value = key
        if not _cheap(value.node):
            continue
        uses = readers.get(key, [])
        late = [i for i in uses if i > step]
        if not late or step in uses:
            continue
        at = late[0]
        chain = _chain(value, live, at, fed)
        if chain is not None:
            before = max([i for i in uses if i < step], default=first)
            found.append((align(live.sizes[key], alignment), at - before, value, late, chain))
    found.sort(key=lambda c: (-c[0], -c[1]))
    return found


CHAIN_LIMIT = 64      # nodes one recomputation may clone (a checkpointed region's chain)


def _chain(value: Value, live: Liveness, at: int, fed) -> Optional[set]:
    """The values besides ``value`` that must be made again with it before position ``at``:
    none when its node's inputs are alive there (or fed); else the checkpointed nodes
    (``mark_checkpointed``) back to values that are, at most ``CHAIN_LIMIT`` of them. None
    when no such chain exists."""
    chain: set = set()
    stack = [value]
    while stack:
        v = stack.pop()
        for x in v.node.inputs:
            if x in fed or live.keep.get(x, -1) >= at or x in chain:
                continue
            node = x.node
            if node is None or len(node.outputs) != 1 or node.op.random or \
                    not _checkpointed(node) or len(chain) >= CHAIN_LIMIT:
                return None
            chain.add(x)
            stack.append(x)
    return chain


def _recompute(graph: Graph, live: Liveness, value: Value, late: List[int],
               chain: frozenset = frozenset()):
    """Clone ``value``'s node (and the views of it the late readers use, and the ``chain`` of
    checkpointed values it is made from) before the first late reader, point the late
    readers at the clones, and drop the original node when no reader is left. Returns a
    function undoing all of it."""
    order = live.order
    at = late[0]
    made: Dict[Value, Value] = {}
    new_nodes: List[Node] = []

    def early_view(x: Value) -> bool:
        """``x`` is ``value`` or a view of it, made before the first late reader."""
        return live.source(x) is value and live.define.get(x, at) < at

    def again(v: Value) -> Value:
        if v not in made:
            node = v.node
            if v is value or v in chain:
                ins = [again(x) if x in chain else x for x in node.inputs]
            else:
                ins = [again(x) if early_view(x) else x for x in node.inputs]
            twin = make_node(node.op, ins, dict(node.attrs), node, graph)
            new_nodes.append(twin)
            made.update((o, t) for o, t in zip(node.outputs, twin.outputs))
        return made[v]

    changed: List[Tuple[Node, tuple]] = []
    for i in late:
        node = order[i]
        ins = tuple(again(x) if early_view(x) else x for x in node.inputs)
        if any(a is not b for a, b in zip(ins, node.inputs)):
            changed.append((node, node.inputs))
            node.inputs = ins
    old_nodes = graph.nodes
    nodes = order[:at] + new_nodes + order[at:]
    if not any(x is value for n in nodes for x in n.inputs):
        nodes = [n for n in nodes if n is not value.node]   # nothing early: a move
    graph.nodes = nodes

    def undo():
        graph.nodes = old_nodes
        for node, ins in changed:
            node.inputs = ins
    return undo


def rematerialize(graph: Graph, budget_bytes: int, shapes: Optional[Mapping[str, int]] = None,
                  alignment: int = 64, max_rewrites: int = 64) -> PassResult:
    """Recompute cheap long-lived values before their late uses until the planned arena fits
    ``budget_bytes`` or no recomputation lowers the peak.

    Before (``%a`` idle across the big middle):
        ``%a = tanh(%x); %h = matmul(%a, %w); ...big temporaries...; %s = sum(%a)``
    After (``%a`` dies after its first use; a copy is made for the last one):
        ``%a = tanh(%x); %h = matmul(%a, %w); ...; %a2 = tanh(%x); %s = sum(%a2)``

    Each round takes the first step at the peak of live bytes, tries the values idle across
    it (largest first) whose node is cheap (elementwise, fill or cast; not random; views of
    it that late readers use are made again too) and whose inputs are graph inputs,
    constants, or still alive at the late use, and keeps
    the first recomputation that lowers (peak, number of steps at the peak). At the end the
    rewrites made after the peak last went down are undone. Unbound symbolic dims count as
    ``ESTIMATE_DIM`` unless ``shapes`` binds them.
    """
    undos: list = []                 # the rewrites kept so far, in order
    best: Optional[Tuple[int, int]] = None     # (lowest peak, rewrites kept when reached)
    for _ in range(max_rewrites + 1):
        live = analyse(graph, shapes=shapes, default_dim=ESTIMATE_DIM)
        score = _score(live, alignment)
        if best is None or score[0] < best[0]:
            best = (score[0], len(undos))
        _, arena, _ = assign_offsets(live.buffers(alignment), score[0], search_steps=50)
        if arena <= budget_bytes or len(undos) == max_rewrites:
            break
        step = live.profile(alignment).index(score[0])
        for _, _, value, late, chain in _candidates(graph, live, step, alignment):
            undo = _recompute(graph, live, value, late, chain)
            if _score(analyse(graph, shapes=shapes, default_dim=ESTIMATE_DIM),
                      alignment) < score:
                undos.append(undo)
                break
            undo()
        else:
            break
    # rewrites after the lowest peak only flattened a plateau: they cost work, save nothing
    while len(undos) > best[1]:
        undos.pop()()
    return PassResult(graph, bool(undos),
                      [f"recomputed {len(undos)} values"] if undos else [])
