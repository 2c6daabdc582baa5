"""Memory planning: live intervals, one arena, greedy-by-size offsets, in-place reuse.

``plan_memory(graph)`` walks the schedule (the node order) and gives every intermediate value
its bytes in one preallocated arena; ``verify_plan(graph, plan)`` proves the plan safe.

    plan = plan_memory(graph, shapes={"N": 32})
    print(plan.summary())
    verify_plan(graph, plan)

An executor plans once per input shape signature, over its own pruned node list, and
allocates one arena of ``plan.arena_bytes`` (its start aligned to ``plan.alignment``):

    plan = plan_memory(graph, shapes=bindings, nodes=exe.nodes, outputs=exe.outputs)

Returned values that live in the arena (or view it) must be copied out before the next run
reuses the bytes. Where each node output lives (``plan.storage(value)``), the contract:

- ``"arena"``: the bytes ``[offset, offset + nbytes)`` of the arena, as a C-contiguous array
  of the value's dtype and shape; the kernel writes there (``out=``, or its result is copied
  in). An *alias* (``plan.aliases``: in-place reuse) has the offset of the input it replaces:
  the kernel reads that input and writes its output over the same bytes. Only node kinds
  that allow it take part (``inplace_pairs``): single-output elementwise ops (numpy ufuncs
  allow exact overlap), and ops whose OpDef declares ``inplace_pairs``, whose kernels promise
  to finish reading each element of the input before writing it (or to compute into scratch
  and copy). A kernel that returns a fresh result which the executor then copies is always
  safe.
- ``"view"``: ops with the ``view`` trait (``reshape``, ``permute``, ``expand``, ``getitem``,
  ``split``) and the ``returns_input`` trait (``stop_gradient`` and same-dtype ``cast``,
  which return their input) run as they are and
  their result may be a numpy view of their input: it takes no arena bytes, and the planner
  keeps the viewed buffer intact until the view's last use (a view extends its source's
  lifetime; views of views reach the first source). A kernel that copies instead (``reshape``
  of a non-contiguous array) is also correct. Views are never written.
- ``"state"``: the new value of a state (``plan.inplace_updates``), written straight into the
  state's own buffer by its producer: every read of the old value (direct or through a view)
  is at or before that node, and a producer that reads the old value itself may overwrite
  that input in place (``inplace_pairs``) and reads it exactly (not through a view). The
  executor then skips the copy-back.
- ``"external"``: outputs of ops with the ``external`` trait (``constant``), prepared once
  outside the arena and never written.
- ``"kernel"``: values whose size only their kernel knows, at run time (a dim
  ``RUNTIME_DIM``: the rows a bounded while_loop saves, one per trip); the kernel allocates
  them each run, as the interpreter does (``plan.dynamic``).

Graph inputs (placeholders) and state are fed or bound buffers, never in the arena. Outputs
and state updates stay intact to the end of the run: the index ``len(plan.order)`` stands for
the return. Every other value lives from the node that defines it to its last use, both ends
included (a kernel reads its inputs while it writes its outputs). Sizes are aligned up to
``alignment`` bytes for placement; ``plan.sizes`` holds the exact ``nbytes``.

Offsets come from the greedy-by-size planner of TFLite's arena (Pisarchyk & Lee 2020,
"Efficient Memory Management for Deep Neural Net Inference"): buffers by size, largest first,
each at the lowest offset (first fit; or the smallest gap, best fit) that overlaps no placed
buffer whose interval meets its own. Greedy by size alone can miss: on the MLP step at batch
256 the largest buffer (a 784x256 gradient) taken first at offset 0 pushes the 256x256
activations up, arena 1.38x the lower bound. So ``assign_offsets`` also tries two other
orders (ties by the later end; TVM USMP's greedy by conflicts) and keeps the smallest arena,
then hill-climbs on the order (a seeded, bounded search) while it is above the lower bound.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..graphlib import dtypes
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Node, Value
from ..graphlib.printer import graph_namer
from ..graphlib.registry import may_view_input
from ..graphlib.types import dim_symbols, eval_dim, has_runtime_dim

# The hill climb of assign_offsets stops after this much work (buffers + conflicts visited).
SEARCH_WORK = 1_000_000


def inplace_pairs(node: Node) -> List[Tuple[int, int]]:
    """(output index, input index) pairs ``node``'s kernel may compute in place: what its
    OpDef's ``inplace_pairs`` trait declares, else every input of a single-output elementwise
    op. E.g. ``OpDef(..., inplace_pairs=lambda node: [(0, 0)])`` lets a node's first output
    take its first input's bytes when that input dies there (same size and dtype)."""
    rule = node.op.inplace_pairs
    if rule is not None:
        return [tuple(p) for p in rule(node)]
    if node.op.elementwise and len(node.outputs) == 1:
        return [(0, j) for j in range(len(node.inputs))]
    return []


class MemoryPlanError(GraphError):
    """A memory plan cannot be made (an unbound symbolic dim) or is unsafe (verify_plan)."""


def is_view_node(node: Node) -> bool:
    """Whether ``node``'s outputs may share their first input's memory: its op's ``view``
    trait, or ``returns_input`` (the kernel may return the input itself) holds (the
    registry's ``may_view_input``, which the runtime asks too)."""
    return may_view_input(node)


def align(nbytes: int, alignment: int) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``: ``align(12, 64) == 64``."""
    return -(-nbytes // alignment) * alignment


def printed_names(graph: Graph) -> Dict[Value, str]:
    """value -> the name ``print(graph)`` gives it (``%x``, ``%12``)."""
    return graph_namer(graph).names


def value_nbytes(value: Value, shapes: Mapping[str, int], name: str = "",
                 default_dim: Optional[int] = None) -> int:
    """Exact bytes of ``value``; symbols (and derived dims such as ``N*6``) take their sizes
    from ``shapes``; an unbound one raises MemoryPlanError naming the value, unless
    ``default_dim`` is given (an estimate for passes that run before the shapes are known)."""
    n = 1
    for d in value.type.shape:
        size = d if isinstance(d, int) else eval_dim(d, shapes)
        if size is None and default_dim is not None:
            bound = dict(shapes)
            for sym in dim_symbols(d):
                bound.setdefault(sym, default_dim)
            size = eval_dim(d, bound)
            size = default_dim if size is None else size
        if size is None:
            missing = sorted({s for s in dim_symbols(d) if s not in shapes})
            example = ", ".join(f"{s!r}: 32" for s in missing) or f"{d!r}: 32"
            raise MemoryPlanError(
                f"plan_memory: {name or repr(value)} has type {value.type!r}, whose dim {d!r} "
                f"needs the symbol(s) {missing} that shapes={dict(shapes)} does not bind; "
                f"pass e.g. shapes={{{example}}}")
        n *= size
    return n * dtypes.itemsize(value.dtype)


# -- liveness -----------------------------------------------------------------------------------
@dataclass
class Liveness:
    """Where each value of a schedule is defined, read and stored (shared by the passes).

    Keys are the Values themselves (identity-hashed). ``last`` is the last node reading the
    value itself, ``keep`` the last index its bytes must stay intact (``last``, the last use
    of any view of it, or ``end`` for outputs and updates). ``buffer`` maps each arena value
    to the arena value that first owned its bytes (itself, or the head of its in-place chain).
    """
    order: List[Node]
    end: int
    define: Dict[Value, int] = field(default_factory=dict)
    last: Dict[Value, int] = field(default_factory=dict)
    keep: Dict[Value, int] = field(default_factory=dict)
    sizes: Dict[Value, int] = field(default_factory=dict)
    views: Dict[Value, Value] = field(default_factory=dict)
    external: Set[Value] = field(default_factory=set)
    roots: Set[Value] = field(default_factory=set)
    outputs: List[Value] = field(default_factory=list)
    aliases: Dict[Value, Value] = field(default_factory=dict)
    state_new: Dict[Value, Value] = field(default_factory=dict)   # new -> state
    buffer: Dict[Value, Value] = field(default_factory=dict)
    dynamic: Set[Value] = field(default_factory=set)     # sized at run time: no arena bytes

    def source(self, key: Value) -> Value:
        """The first non-view value a view chain starting at ``key`` reads."""
        while key in self.views:
            key = self.views[key]
        return key

    def buffers(self, alignment: int) -> Dict[Value, Tuple[int, int, int]]:
        """owner -> (first, last, aligned size) of each arena buffer."""
        out: Dict[Value, Tuple[int, int, int]] = {}
        for key, owner in self.buffer.items():
            first, last, size = out.get(owner, (self.define[owner], -1,
                                                align(self.sizes[owner], alignment)))
            out[owner] = (first, max(last, self.keep[key]), size)
        return out

    def profile(self, alignment: int) -> List[int]:
        """Aligned bytes of arena buffers live at each step ``0..end`` (an alias counts once)."""
        diff = [0] * (self.end + 2)
        for first, last, size in self.buffers(alignment).values():
            diff[first] += size
            diff[last + 1] -= size
        out, running = [], 0
        for step in range(self.end + 1):
            running += diff[step]
            out.append(running)
        return out


def analyse(graph: Graph, nodes: Optional[Sequence[Node]] = None,
            outputs: Optional[Sequence[Value]] = None, shapes: Optional[Mapping] = None,
            inplace: bool = True, views: bool = True,
            default_dim: Optional[int] = None) -> Liveness:
    """Live intervals, sizes, views, in-place aliases and in-place state updates of the
    schedule ``nodes`` (default ``graph.nodes``); see the module docstring for the rules."""
    order = list(graph.nodes if nodes is None else nodes)
    outs = list(graph.outputs if outputs is None else outputs)
    shapes = dict(shapes or {})
    live = Liveness(order, len(order), outputs=outs)
    for i, node in enumerate(order):
        for x in node.inputs:
            live.last[x] = i
        view = views and is_view_node(node)
        for o in node.outputs:
            key = o
            live.define[key] = i
            live.last.setdefault(key, i)        # an unread output dies where it is made
            if has_runtime_dim(o.shape) and default_dim is None:
                live.dynamic.add(key)           # its kernel allocates it, each run
                live.sizes[key] = 0
                continue
            try:
                live.sizes[key] = value_nbytes(o, shapes, "", default_dim)
            except MemoryPlanError:         # named as print(graph) names it (costly: only now)
                value_nbytes(o, shapes, printed_names(graph).get(key, ""), default_dim)
                raise
            if view:
                live.views[key] = node.inputs[0]
            elif node.op.external:
                live.external.add(key)
    updates = list(graph.updates.values())
    for v in outs + [new for _, new in updates]:
        live.roots.add(v)
        live.last[v] = live.end
    live.keep = dict(live.last)
    for node in reversed(order):                # later views first: chains reach the source
        for o in node.outputs:
            src = live.views.get(o)
            if src is not None:
                live.keep[src] = max(live.keep.get(src, -1), live.keep[o])
    if inplace:
        _inplace_updates(live, updates)
    for i, node in enumerate(order):
        taken = _inplace_sources(live, node, i) if inplace else {}
        for k, o in enumerate(node.outputs):
            key = o
            if (key in live.views or key in live.external or key in live.state_new
                    or key in live.dynamic):
                continue
            src = taken.get(k)
            if src is not None:
                live.aliases[key] = src
                live.buffer[key] = live.buffer[src]
            else:
                live.buffer[key] = key
    return live


def _inplace_updates(live: Liveness, updates: Iterable[Tuple[Value, Value]]) -> None:
    """Mark the new values that can be written straight into their state's buffer."""
    out_ids = {v for v in live.outputs}
    for state, new in updates:
        key = new
        if (key not in live.define or key in live.views or key in live.external
                or key in out_ids or key in live.state_new or key in live.dynamic):
            continue
        at = live.define[key]
        read = live.keep.get(state, -1)
        if read > at:
            continue
        node = new.node
        if read == at and not _overwrites(node, new, state, live.source):
            continue
        live.state_new[key] = state


def _overwrites(node: Node, out: Value, x: Value, source: Callable[[Value], Value]) -> bool:
    """Whether ``node`` may write ``out`` over its input ``x``: the kernel allows that pair
    (``inplace_pairs``) and reads ``x``'s bytes through no other input (a view of them)."""
    pairs = inplace_pairs(node)
    if not any(node.outputs[k] is out and node.inputs[j] is x for k, j in pairs
               if k < len(node.outputs) and j < len(node.inputs)):
        return False
    return all(y is x or source(y) is not source(x) for y in node.inputs)


def _inplace_sources(live: Liveness, node: Node, at: int) -> Dict[int, Value]:
    """Output index -> the input whose arena buffer that output takes over."""
    taken: Dict[int, Value] = {}
    used: Set[Value] = set()
    for k, j in inplace_pairs(node):
        if k in taken or k >= len(node.outputs) or j >= len(node.inputs):
            continue
        out, x = node.outputs[k], node.inputs[j]
        key = x
        if (out in live.roots or out in live.state_new or out in live.dynamic  # own bytes
                or key in used or key not in live.buffer or key in live.roots
                or live.keep[key] != at or x.dtype != out.dtype
                or live.sizes[key] != live.sizes[out]
                or not _overwrites(node, out, x, live.source)):
            continue
        taken[k] = key
        used.add(key)
    return taken


# -- the plan -----------------------------------------------------------------------------------
@dataclass(repr=False)
class MemoryPlan:
    """Where every value of a schedule lives: arena offsets, aliases, views, state writes.

    Dict keys are the Values themselves (identity-hashed, as everywhere in the engine).
    ``plan.storage(value)`` answers for one value.
    """
    order: List[Node]                         # the schedule the plan is for
    outputs: List[Value]                      # values kept to the end (with the updates)
    offsets: Dict[Value, int]                   # arena values (aliases too) -> byte offset
    sizes: Dict[Value, int]                     # node outputs -> exact nbytes
    intervals: Dict[Value, Tuple[int, int]]     # node outputs -> (defined at, bytes kept until)
    aliases: Dict[Value, Value]                 # in place: output -> input it overwrites
    views: Dict[Value, Value]                   # view -> the value it views
    inplace_updates: List[Tuple[Value, Value]]  # (state, new value written into its buffer)
    external: List[Value]                     # constants: prepared once, outside the arena
    arena_bytes: int
    lower_bound_bytes: int                    # max bytes live at once (aligned, aliases once)
    no_reuse_bytes: int                       # every non-view intermediate in its own buffer
    alignment: int
    shapes: Dict[str, int]
    names: Dict[Value, str]                     # printed names (``%12``) for messages
    strategy: str = "greedy-by-size"
    dynamic: Set[Value] = field(default_factory=set)     # sized at run time by their kernel

    def name(self, value: Value) -> str:
        return self.names.get(value) or repr(value)

    def offset(self, value: Value) -> Optional[int]:
        """The arena offset of ``value``, or None when it is not in the arena."""
        return self.offsets.get(value)

    def storage(self, value: Value) -> Tuple[str, object]:
        """How the executor holds one value: ``("arena", offset)``, ``("view", source
        Value)``, ``("state", state Value)``, ``("external", None)`` for constants,
        ``("kernel", None)`` for values sized at run time, or ``("input", None)`` for
        placeholders and state."""
        key = value
        if key in self.offsets:
            return "arena", self.offsets[key]
        if key in self.dynamic:
            return "kernel", None
        if key in self.views:
            return "view", self.views[key]
        for state, new in self.inplace_updates:
            if new is value:
                return "state", state
        if key in self.sizes:
            return "external", None
        return "input", None

    def summary(self) -> str:
        """A few lines: arena vs lower bound vs no reuse, and what went where."""
        def mb(n):
            return f"{n / 2**20:8.3f} MiB ({n:,} B)"
        lb = self.lower_bound_bytes or 1
        nr = self.no_reuse_bytes or 1
        updates = ", ".join(s.name or "?" for s, _ in self.inplace_updates) or "none"
        return "\n".join([
            f"memory plan: {len(self.order)} nodes, alignment {self.alignment}, "
            f"{self.strategy}",
            f"  arena        {mb(self.arena_bytes)}",
            f"  lower bound  {mb(self.lower_bound_bytes)}  arena/lower bound "
            f"{self.arena_bytes / lb:.3f}",
            f"  no reuse     {mb(self.no_reuse_bytes)}  arena/no reuse "
            f"{self.arena_bytes / nr:.3f}",
            f"  values: {len(self.offsets)} in the arena ({len(self.aliases)} in place), "
            f"{len(self.views)} views, {len(self.external)} constants",
            f"  state updated in place: {updates}"])

    def __repr__(self) -> str:
        return (f"<MemoryPlan: arena {self.arena_bytes} B, lower bound "
                f"{self.lower_bound_bytes} B, no reuse {self.no_reuse_bytes} B>")


def _conflicts(items: List[Tuple[int, int, int]]) -> List[List[int]]:
    """For each buffer (first, last, size), the buffers whose intervals meet its own."""
    by_start = sorted(range(len(items)), key=lambda i: items[i][0])
    out: List[List[int]] = [[] for _ in items]
    for n, i in enumerate(by_start):
        last = items[i][1]
        for j in by_start[n + 1:]:
            if items[j][0] > last:
                break
            out[i].append(j)
            out[j].append(i)
    return out


def _place(items: List[Tuple[int, int, int]], conflicts: List[List[int]],
           order: Sequence[int], best_fit: bool) -> Tuple[List[int], int]:
    """Place buffers in ``order``, each at the lowest offset (or into the smallest gap) free
    of every placed buffer it conflicts with. Returns (offset per buffer, arena bytes)."""
    offsets: List[int] = [-1] * len(items)
    arena = 0
    for i in order:
        size = items[i][2]
        if size == 0:
            offsets[i] = 0
            continue
        busy = sorted((offsets[j], offsets[j] + items[j][2]) for j in conflicts[i]
                      if offsets[j] >= 0)
        chosen, gap_best, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size:
                if not best_fit:
                    chosen = cursor
                    break
                if gap_best is None or gap < gap_best:
                    chosen, gap_best = cursor, gap
            cursor = max(cursor, hi)
        if chosen is None:
            chosen = cursor
        offsets[i] = chosen
        arena = max(arena, chosen + size)
    return offsets, arena


def assign_offsets(buffers: Dict[Hashable, Tuple[int, int, int]], lower_bound: int = 0,
                   search_steps: int = 200) -> Tuple[Dict[Hashable, int], int, str]:
    """Offsets for buffers ``key -> (first, last, aligned size)`` in one arena.

    Greedy by size (TFLite; Pisarchyk & Lee 2020): largest first, first fit and best fit;
    the same with ties broken by the later end; and greedy by conflicts (TVM's USMP: by the
    bytes of the buffers each one meets). The smallest arena wins; while it is above
    ``lower_bound``, a seeded hill climb swaps two places in the order (TVM's
    ``hill_climb``) for at most ``search_steps`` tries (fewer on large graphs: see
    ``SEARCH_WORK``). Returns (offsets, arena, strategy).
    """
    keys = list(buffers)
    items = [buffers[k] for k in keys]
    n = len(items)
    conflicts = _conflicts(items)
    met = [size + sum(items[j][2] for j in conflicts[i]) for i, (_, _, size) in enumerate(items)]
    orders = {
        "greedy-by-size": sorted(range(n), key=lambda i: (-items[i][2], items[i][0],
                                                          -items[i][1])),
        "greedy-by-size (later end first)": sorted(range(n), key=lambda i: (-items[i][2],
                                                                            -items[i][1])),
        "greedy-by-conflicts": sorted(range(n), key=lambda i: (-met[i], -items[i][2])),
    }
    best = None
    for name, order in orders.items():
        for best_fit in (False, True):
            offsets, arena = _place(items, conflicts, order, best_fit)
            if best is None or arena < best[1]:
                label = f"{name}, {'best' if best_fit else 'first'} fit"
                best = (offsets, arena, label, order, best_fit)
    offsets, arena, label, order, best_fit = best
    rng = random.Random(0)
    tries = 0
    # each try re-places everything: cap the work (~0.2 s) on large graphs
    search_steps = min(search_steps, SEARCH_WORK // (n + sum(map(len, conflicts)) + 1))
    while arena > lower_bound and tries < search_steps and n > 1:
        tries += 1
        trial = list(order)
        i, j = rng.randrange(n), rng.randrange(n)
        trial[i], trial[j] = trial[j], trial[i]
        got, size = _place(items, conflicts, trial, best_fit)
        if size <= arena:
            if size < arena:
                label = f"{best[2]}, then hill climbing"
            offsets, arena, order = got, size, trial
    return {k: offsets[i] for i, k in enumerate(keys)}, arena, label


def plan_memory(graph: Graph, shapes: Optional[Mapping[str, int]] = None,
                alignment: int = 64, inplace: bool = True,
                nodes: Optional[Sequence[Node]] = None,
                outputs: Optional[Sequence[Value]] = None, views: bool = True,
                search_steps: int = 200) -> MemoryPlan:
    """Plan one arena for the intermediates of ``graph`` run in the order ``nodes``.

    ``shapes`` binds symbolic dims (``{"N": 32}``); ``nodes`` (default ``graph.nodes``) is the
    schedule, e.g. the executor's pruned list; ``outputs`` (default ``graph.outputs``) the
    values returned; ``inplace`` allows in-place reuse and in-place state updates; ``views``
    False gives view ops buffers of their own (the executor then copies their results);
    ``search_steps`` bounds the hill climb that runs while the arena exceeds the lower bound.

    Example: ``%0 = exp(%x); %1 = tanh(%x); %2 = mul(%0, %1); %3 = sin(%2); %4 = sum(%3)``
    over f32[16] (64 B each), returning ``%4``: ``%2`` takes the bytes of ``%0`` (in place),
    ``%3`` those of ``%2``, ``%1`` is at 64 and ``%4`` reuses them once ``%1`` is dead:
    arena 128 B, lower bound 128 B, no reuse 320 B.
    """
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"plan_memory: alignment must be a power of two, found {alignment}")
    shapes = dict(shapes or {})
    live = analyse(graph, nodes, outputs, shapes, inplace, views)
    profile = live.profile(alignment)
    buffer_offsets, arena, strategy = assign_offsets(live.buffers(alignment),
                                                     max(profile, default=0), search_steps)
    no_reuse = sum(align(live.sizes[k], alignment) for k in live.sizes
                   if k not in live.views and k not in live.external and k not in live.dynamic)
    intervals = {k: (live.define[k], live.keep[k]) for k in live.define}
    return MemoryPlan(
        order=live.order, outputs=list(live.outputs),
        offsets={k: buffer_offsets[owner] for k, owner in live.buffer.items()},
        sizes=dict(live.sizes), intervals=intervals, aliases=dict(live.aliases),
        views=dict(live.views),
        inplace_updates=[(state, k) for k, state in live.state_new.items()],
        external=[k for k in live.external if k in live.define],
        arena_bytes=arena, lower_bound_bytes=max(profile, default=0), no_reuse_bytes=no_reuse,
        alignment=alignment, shapes=shapes, names=printed_names(graph), strategy=strategy,
        dynamic={k for k in live.dynamic if k in live.define})


def peak_live_bytes(graph: Graph, nodes: Optional[Sequence[Node]] = None,
                    shapes: Optional[Mapping[str, int]] = None, alignment: int = 64,
                    default_dim: Optional[int] = 64) -> int:
    """The most arena bytes live at once over the schedule ``nodes`` (the plan's lower
    bound), with unbound symbols estimated as ``default_dim``: what scheduling minimises."""
    live = analyse(graph, nodes, None, shapes, default_dim=default_dim)
    return max(live.profile(alignment), default=0)


# -- the verifier -------------------------------------------------------------------------------
def verify_plan(graph: Graph, plan: MemoryPlan) -> None:
    """Prove ``plan`` safe for ``graph``: raise MemoryPlanError naming the values, or return.

    Liveness is recomputed here from the graph and ``plan.order`` (only the plan's offsets,
    aliases, views and in-place updates are checked, never trusted): each node output has
    one storage; offsets are aligned and fit the arena; each alias, view and in-place state
    update is legal; and no two arena values whose live intervals meet share a byte, except
    an output with the input it legally overwrites in place.

    Before: a plan putting ``%0`` and ``%1`` (both read by ``%2 = mul(%0, %1)``) at offset 0.
    After: ``MemoryPlanError: %0 ... and %1 ... overlap in the arena while both are live``.
    """
    names = printed_names(graph)

    def nm(key: int) -> str:
        return names.get(key) or repr(key)

    def fail(msg: str):
        raise MemoryPlanError(f"verify_plan: {msg}")

    order, end = plan.order, len(plan.order)
    known = {v for v in list(graph.inputs) + list(graph.state)}
    define: Dict[Value, int] = {}
    last: Dict[Value, int] = {}
    for i, node in enumerate(order):
        for x in node.inputs:
            if x not in known and x not in define:
                fail(f"node {i} ({node.op.name}) reads {nm(x)} before it is defined")
            last[x] = i
        for o in node.outputs:
            if o in define:
                fail(f"{nm(o)} is defined twice in the order")
            define[o] = i
            last.setdefault(o, i)
    for v in list(plan.outputs) + [new for _, new in graph.updates.values()]:
        last[v] = end
    keep = dict(last)
    for key, src in plan.views.items():
        node = key.node if key in define else None
        if node is None or not is_view_node(node) or node.inputs[0] is not src:
            fail(f"{nm(key)} is planned as a view of {nm(src)}, but it is not made by a view "
                 "op reading it")
    for node in reversed(order):
        for o in node.outputs:
            if o in plan.views:
                src = plan.views[o]
                keep[src] = max(keep.get(src, -1), keep[o])

    def source(key: Value) -> Value:
        while key in plan.views:
            key = plan.views[key]
        return key

    state_new = {new: state for state, new in plan.inplace_updates}
    dynamic = set(plan.dynamic)
    for key in define:
        homes = [key in plan.offsets, key in plan.views, key in state_new,
                 key.node.op.external and key not in plan.offsets, key in dynamic]
        if sum(homes) != 1:
            fail(f"{nm(key)} ({key.type!r}) must have exactly one storage (arena, view, state, "
                 f"constant or its kernel); it has {sum(homes)}")
        if (key in dynamic) != has_runtime_dim(key.shape):
            fail(f"{nm(key)} ({key.type!r}) is left to its kernel only when its size is known "
                 "at run time alone")
    for key, off in plan.offsets.items():
        nbytes = plan.sizes[key]
        if off % plan.alignment:
            fail(f"{nm(key)} is at offset {off}, not a multiple of {plan.alignment}")
        if off < 0 or off + nbytes > plan.arena_bytes:
            fail(f"{nm(key)} occupies bytes [{off}, {off + nbytes}), outside the arena of "
                 f"{plan.arena_bytes} bytes")
    out_ids = {v for v in plan.outputs}
    for key, src in plan.aliases.items():
        out, x = (key if key in define else None), src
        node = out.node if out is not None else None
        at = define.get(key)
        why = None
        if node is None or x is None or all(y is not x for y in node.inputs):
            why = "the input is not read by the node making the output"
        elif not any(node.outputs[k] is out and node.inputs[j] is x
                     for k, j in inplace_pairs(node)):
            why = f"{node.op.name} does not compute this output in place over this input"
        elif key in out_ids:
            why = "the output is returned by the graph"
        elif keep.get(src) != at:
            why = (f"the input's bytes are still needed until node {keep.get(src)}, after the "
                   f"node {at} writing over them")
        elif x.dtype != out.dtype or plan.sizes.get(src) != plan.sizes[key]:
            why = "dtypes or sizes differ"
        elif plan.offsets.get(src) != plan.offsets.get(key):
            why = "their offsets differ"
        elif any(y is not x and source(y) is src for y in node.inputs):
            why = "the node also reads the input through a view"
        if why:
            fail(f"{nm(key)} may not overwrite {nm(src)} in place: {why}")
    seen_states: Set[Value] = set()
    for state, new in plan.inplace_updates:
        key, at = new, define.get(new)
        read = keep.get(state, -1)
        why = None
        if at is None or key in plan.views or key in out_ids:
            why = "the new value is not an intermediate of its own"
        elif state in seen_states:
            why = "the state is updated in place twice"
        elif read > at:
            why = f"the old value is still read at node {read}, after node {at} writes it"
        elif read == at and not _overwrites(new.node, new, state, source):
            why = ("its producer reads the old value but may not overwrite it in place "
                   "(inplace_pairs), or reads it through a view too")
        if why:
            fail(f"state {nm(state)} cannot take {nm(key)} in place: {why}")
        seen_states.add(state)
    items = sorted(((off, define[k], off + plan.sizes[k], k) for k, off in plan.offsets.items()
                    if plan.sizes[k] > 0), key=lambda item: item[:3])
    for i, (lo, _, hi, a) in enumerate(items):
        for lo2, _, hi2, b in items[i + 1:]:
            if lo2 >= hi:
                break
            if define[a] > keep[b] or define[b] > keep[a]:
                continue
            if plan.aliases.get(a) is b or plan.aliases.get(b) is a:
                continue
            fail(f"{nm(a)} ({a.type!r}, bytes [{lo}, {hi}), live at nodes {define[a]}.."
                 f"{keep[a]}) and {nm(b)} ({b.type!r}, bytes [{lo2}, {hi2}), live at nodes "
                 f"{define[b]}..{keep[b]}) overlap in the arena while both are live")
