"""Rematerialisation: recompute values near their late uses instead of keeping them.

Two rewrites, both in the O2 pipeline as the ``remat`` pass (``remat_o2``):

- **Checkpointed regions** (``recompute_checkpointed``): the nodes that
  ``duograph.utils.checkpoint.checkpoint`` built in a graph (graph mode, ``record()``,
  ``dg.compile``) are a region with inputs and outputs; every value made inside it that a node
  outside it reads (the backward part of a training step) is made again, by a copy of the
  region's nodes it comes from, right before the first such reader. The region's interior
  values then die inside the forward; what stays alive for backward is the region's inputs
  and outputs, as ``torch.utils.checkpoint`` keeps. Random ops are copied with their seed
  input and stream, so a recomputed dropout draws the same mask.
- **Cheap values, unmarked graphs** (``rematerialize(..., fusable_only=True)``): a value an
  elementwise op makes from values alive anyway at its late readers, all of which are
  elementwise too (fusion folds the copy into them: no extra pass over memory), is made again
  there when that lowers the planned peak. It never raises the peak, and the work it adds is
  one elementwise expression inside a kernel that runs anyway.

``rematerialize(graph, budget_bytes)`` is also usable alone, with a budget, recomputing any
cheap op (and checkpointed chains) until the arena fits:

    exe = graph.compile(passes=["dce", "cse", lambda g: rematerialize(g, 64 << 20)])

Ops are pure (random ones too, given their seed and stream), so a recomputed value equals
the one it replaces.
"""
from __future__ import annotations

import itertools
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..graphlib.ir import Graph, Node, Value
from ..graphlib.rewrite import make_node
from .memory import Liveness, align, analyse, assign_offsets
from .result import PassResult
from .schedule import ESTIMATE_DIM


# Nodes built inside ``duograph.utils.checkpoint.checkpoint`` while a graph is built, by uid
# (uids are unique in the process; a rewritten node carries its originals' uids in its
# provenance) -> the number of their region: the user asked for them to be recomputed
# rather than kept, whatever they cost. ``_REGION_OUTPUTS``: per region, the (uid, output
# index) of the values the checkpointed function returned (None: not known). ``_RECOMPUTED``:
# the uids of the copies ``recompute_checkpointed`` made (they belong to no region).
CHECKPOINTED: Dict[int, int] = {}
_REGION_OUTPUTS: Dict[int, Optional[frozenset]] = {}
_RECOMPUTED: set = set()
_region_numbers = itertools.count(1)


def mark_checkpointed(nodes: Sequence[Node], outputs: Optional[Sequence[Value]] = None) -> int:
    """Make ``nodes`` a checkpointed region whose results are ``outputs`` (the Values the
    checkpointed function returned): ``recompute_checkpointed`` makes its other values again
    for their readers outside it, and ``rematerialize`` may recompute its nodes like cheap
    ones. Returns the region's number."""
    region = next(_region_numbers)
    for n in nodes:
        CHECKPOINTED[n.uid] = region
    _REGION_OUTPUTS[region] = None if outputs is None else frozenset(
        (v.node.uid, v.index) for v in outputs if isinstance(v, Value) and v.node is not None)
    return region


def region_of(node: Node) -> Optional[int]:
    """The checkpointed region ``node`` belongs to (itself or all the nodes it stands for),
    or None."""
    if not CHECKPOINTED:
        return None
    region = CHECKPOINTED.get(node.uid)
    if region is not None:
        return region
    provenance = node.provenance or ()
    if any(u in _RECOMPUTED for u in provenance):
        return None           # a copy made for backward (or a node standing for one)
    found = {CHECKPOINTED.get(u) for u in provenance}
    return found.pop() if len(found) == 1 else None


def _checkpointed(node: Node) -> bool:
    return region_of(node) is not None


def _region_output(v: Value, outputs: frozenset) -> bool:
    node = v.node
    return any((u, v.index) in outputs for u in (node.uid,) + tuple(node.provenance or ()))


def recompute_checkpointed(graph: Graph) -> PassResult:
    """Make each checkpointed region's interior values again for their readers outside the
    region (``mark_checkpointed``), so only the region's inputs and outputs stay alive.

    Before (``%a`` kept from the forward to the backward):
        ``%a = tanh(%h0)  # region``; ``%h1 = matmul(%a, %w)  # region, its output``; ...;
        ``%gw = matmul(transpose(%a), %g)``
    After (``%a`` dies in the forward; the backward makes ``%a2`` from the region's input):
        ``%a = tanh(%h0)``; ``%h1 = matmul(%a, %w)``; ...; ``%a2 = tanh(%h0)``;
        ``%gw = matmul(transpose(%a2), %g)``

    The copies go right before the first outside reader of any of the region's values,
    as PyTorch recomputes a whole checkpointed function when backward first needs it. A
    region whose outputs are unknown, whose outside readers come before its end, or that
    holds nodes with sub-graphs, is left as it is.
    """
    order = graph.nodes
    members: Dict[int, List[Node]] = {}
    for n in order:
        region = region_of(n)
        if region is not None:
            members.setdefault(region, []).append(n)
    if not members:
        return PassResult(graph, False, [])
    pos = {n: i for i, n in enumerate(order)}
    kept = set(graph.outputs) | {new for _, new in graph.updates.values()}
    inserts: Dict[int, List[Node]] = {}
    regions = made_values = 0
    for region, nodes in members.items():
        outputs = _REGION_OUTPUTS.get(region)
        if outputs is None:
            continue
        inside = set(nodes)
        late: Dict[Value, List[Node]] = {}
        for n in nodes:
            if n.op.constant:           # prepared once, outside the arena (CSE may share it)
                continue
            for v in n.outputs:
                if v in kept or _region_output(v, outputs):
                    continue
                # readers outside: in no checkpointed region (another region's nodes are
                # forward ones: they read the value itself)
                readers = [u for u in v.uses if u not in inside and region_of(u) is None]
                if readers:
                    late[v] = readers
        if not late:
            continue
        at = min(pos[u] for readers in late.values() for u in readers)
        need: set = set()
        stack = list(late)
        while stack:
            node = stack.pop().node
            if node in need:
                continue
            need.add(node)
            for x in node.inputs:
                if x.node in inside and x not in kept and not x.node.op.constant and \
                        not _region_output(x, outputs):
                    stack.append(x)
        if max(pos[n] for n in need) >= at or any(n.regions for n in need):
            continue
        made: Dict[Value, Value] = {}
        clones = inserts.setdefault(at, [])
        for n in sorted(need, key=pos.__getitem__):
            twin = make_node(n.op, [made.get(x, x) for x in n.inputs], dict(n.attrs), n, graph)
            twin.provenance = tuple(twin.provenance) + (twin.uid,)
            _RECOMPUTED.add(twin.uid)
            made.update(zip(n.outputs, twin.outputs))
            clones.append(twin)
        for reader in {u: None for readers in late.values() for u in readers}:
            reader.inputs = tuple(made[x] if x in late else x for x in reader.inputs)
        regions += 1
        made_values += len(late)
    if not inserts:
        return PassResult(graph, False, [])
    nodes: List[Node] = []
    for i, n in enumerate(order):
        nodes.extend(inserts.get(i, ()))
        nodes.append(n)
    graph.nodes = nodes
    return PassResult(graph, True, [f"recomputed {made_values} values of {regions} "
                                    f"checkpointed regions"])


def _cheap(node: Node, fusable_only: bool = False) -> bool:
    """Elementwise (not random), a fill or a cast (the op's ``cheap`` trait): about as cheap as
    reading the value; or inside a checkpointed region (``mark_checkpointed``). With
    ``fusable_only``: an elementwise op outside any checkpointed region."""
    if len(node.outputs) != 1 or node.op.random:
        return False
    if fusable_only:
        return node.op.elementwise and not _checkpointed(node)
    return node.op.cheap or _checkpointed(node)


def _score(live: Liveness, alignment: int) -> Tuple[int, int]:
    """(peak live bytes, steps at the peak): what a rewrite must lower."""
    profile = live.profile(alignment)
    peak = max(profile, default=0)
    return peak, profile.count(peak)


def _candidates(graph: Graph, live: Liveness, step: int, alignment: int,
                fusable_only: bool = False) -> List[Tuple[int, int, Value, List[int]]]:
    """Values idle across ``step`` that one cheap node could make again after it:
    (size, gap, value, positions of the late readers), largest first. ``fusable_only``:
    elementwise values whose late readers are all elementwise and whose inputs are alive
    there (no chain)."""
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
        if not _cheap(value.node, fusable_only):
            continue
        uses = readers.get(key, [])
        late = [i for i in uses if i > step]
        if not late or step in uses:
            continue
        if fusable_only and not all(order[i].op.elementwise for i in late):
            continue
        at = late[0]
        chain = _chain(value, live, at, fed)
        if chain is not None and not (fusable_only and chain):
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
                  alignment: int = 64, max_rewrites: int = 64, fusable_only: bool = False,
                  max_tries: Optional[int] = None) -> PassResult:
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
    ``ESTIMATE_DIM`` unless ``shapes`` binds them. ``fusable_only`` keeps to the O2 policy
    (see the module docstring); ``max_tries`` bounds the candidates tried per round.
    """
    undos: list = []                 # the rewrites kept so far, in order
    best: Optional[Tuple[int, int]] = None     # (lowest peak, rewrites kept when reached)
    for _ in range(max_rewrites + 1):
        live = analyse(graph, shapes=shapes, default_dim=ESTIMATE_DIM)
        score = _score(live, alignment)
        if best is None or score[0] < best[0]:
            best = (score[0], len(undos))
        if len(undos) == max_rewrites:
            break
        if budget_bytes > 0:        # (no arena fits a budget of 0: no need to lay one out)
            _, arena, _ = assign_offsets(live.buffers(alignment), score[0], search_steps=50)
            if arena <= budget_bytes:
                break
        step = live.profile(alignment).index(score[0])
        found = _candidates(graph, live, step, alignment, fusable_only)
        for _, _, value, late, chain in found[:max_tries]:
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


def remat_o2(graph: Graph) -> PassResult:
    """The O2 ``remat`` pass: every checkpointed region's interior values made again for
    backward (``recompute_checkpointed``), then cheap elementwise values recomputed inside the
    elementwise kernels that read them late, where that lowers the planned peak
    (``rematerialize(..., fusable_only=True)``): never a higher peak, never an extra kernel."""
    first = recompute_checkpointed(graph)
    second = rematerialize(graph, 0, fusable_only=True, max_rewrites=16, max_tries=8)
    return PassResult(graph, first.changed or second.changed,
                      list(first.notes) + list(second.notes))
