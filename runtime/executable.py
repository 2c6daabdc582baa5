"""Executable: a graph turned into a flat list of prepared kernel calls over numbered slots.

Building it prunes the graph to what the chosen outputs and state updates need, numbers every
value (a slot), records for each instruction its kernel, input and output slots, attributes
and the slots to free afterwards (each value dies at its last use, as in torch.fx's
Interpreter). Running it checks the feeds, binds symbolic dims, and runs the tight loop.

How a run executes is the executable's ``steps``, one of two types: ``Interpreted`` runs the
instruction list; ``Planned`` (chosen by passing a ``planner``: the face package passes
``duograph.passes.memory.plan_memory`` when the pipeline's ``plan`` option or ``plan=True``
asks for it) asks the planner, per concrete shape signature, for a memory plan and prepares
a ``Program`` (``planned.py``) whose intermediates all live in one preallocated arena,
written by the ops' ``out=`` kernels. Programs are cached per signature (the most recent
``MAX_PROGRAMS``); ``exe.memory_plan`` is the plan of the last run.

Ops with regions (loops, branches) run their ``region_kernel`` over ``exe.regions``, a
``RegionRunner`` (``regions.py``) that compiles each body once into an executable of the
same kind (interpreted, or planned with the same planner: one arena per body, reused by
every iteration); ``exe.regions.arena_bytes()`` is what those arenas hold.

Every level gives the same two promises. Each returned array is the caller's own: it shares
no memory with a feed, a state buffer, a constant or another output (the interpreter copies
the outputs that may, decided once from the ops' view traits; a planned program copies what
it did not write into fresh memory). And the runs of one executable that keeps state, or of
a planned one (one arena), are serialised by ``exe.run_lock``, so concurrent calls from
several threads lose no state update.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from operator import itemgetter
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..graphlib import dtypes
from ..graphlib.errors import FeedError, GraphError, KernelError, kernel_error
from ..graphlib.ir import Graph, Value
from ..graphlib.kernels import direct_kernel, run_kernel, state_written
from ..graphlib.registry import may_view_input
from ..graphlib.types import RUNTIME_DIM, dim_symbols, format_shape, solve_dim
from . import fperr
from .backend import Backend
from .backends import get_backend
from .planned import Program, fast_call, resolve_attrs
from .regions import RegionRunner

# Planned programs (one arena each) kept per executable, most recently used first.
MAX_PROGRAMS = 8


def _has_symbol(v) -> bool:
    return isinstance(v, tuple) and any(isinstance(d, str) for d in v)


class Instruction:
    """One prepared kernel call: input slots -> output slots, then the slots to free."""

    __slots__ = ("node", "kernel", "ins", "outs", "attrs", "symbolic", "dtypes", "shapes",
                 "frees", "multi")

    def __init__(self, node, kernel, ins, outs, frees):
        self.node = node
        self.kernel = direct_kernel(kernel, [x.dtype for x in node.inputs])
        self.ins = ins
        self.outs = outs
        self.attrs = dict(node.attrs)
        self.symbolic = tuple(k for k, v in self.attrs.items()
                              if k in ("shape", "sizes") and _has_symbol(v))
        # dtypes and shapes: a shape with symbols is resolved against the feeds' bindings
        self.dtypes = tuple(np.dtype(o.dtype) for o in node.outputs)
        self.shapes = tuple(tuple(o.shape) for o in node.outputs)
        self.frees = frees
        # A multi-output op's kernel returns a tuple, even when it holds a single array.
        self.multi = bool(node.op.multi_output) or len(node.outputs) != 1


def needed_nodes(graph: Graph, targets: Sequence[Value]) -> List:
    """The nodes of ``graph`` that ``targets`` depend on, in graph order."""
    want = set(targets)
    keep = []
    for node in reversed(graph.nodes):
        if any(o in want for o in node.outputs):
            keep.append(node)
            want.update(node.inputs)
    keep.reverse()
    return keep


class Executable:
    """A compiled graph. Call it with feeds as keyword arguments; it returns a list of arrays."""

    # runs on a device return numpy arrays unless this is set (eager's dg.compile keeps
    # device tensors on their device)
    keep_on_device = False

    def __init__(self, graph: Graph, outputs: Optional[Sequence[Value]] = None,
                 backend="numpy", planner: Optional[Callable] = None,
                 regions: Optional[RegionRunner] = None):
        if outputs is None:
            outputs = list(graph.outputs)
        elif isinstance(outputs, Value):
            outputs = [outputs]
        outputs = list(outputs)
        for i, o in enumerate(outputs):
            if not isinstance(o, Value):
                raise GraphError(f"compile: output {i} is a {type(o).__name__}, not a Value "
                                 "of the graph")
            if o.graph is not graph:
                raise GraphError(f"compile: output {i} ({o!r}) belongs to another graph")
        if not outputs and not graph.updates:
            raise GraphError(f"compile: graph {graph.name!r} has no outputs; pass "
                             "outputs=[...]")
        self.graph = graph
        self.outputs = outputs
        # ``backend``: a name ("numpy", "cupy") or a Backend object; its kernel tables run
        self.runner: Backend = backend if isinstance(backend, Backend) else get_backend(backend)
        self.backend = self.runner.name
        self.xp = self.runner.xp
        # how the kernels of region ops (loops, branches) run their bodies: compiled once
        # each, interpreted or planned as this executable is (nested bodies share it)
        self.regions = regions if regions is not None else RegionRunner(self.runner, planner)
        self.updates = list(graph.updates.values())
        targets = outputs + [new for _, new in self.updates]
        self.nodes = needed_nodes(graph, targets)
        self._build(targets)
        # state owned by the executable (dg.variable) and state bound to live objects
        # (eager parameters, buffers, optimizer slots: read and written in place each run)
        self._owned: Dict[str, np.ndarray] = {
            v.name: self.xp.asarray(graph.state_init[v]).copy() for v in graph.state
            if v not in graph.bindings}
        self._bound = {v.name: (v, graph.bindings[v]) for v in graph.state
                       if v in graph.bindings}
        self.state = StateView(self)
        self._checked: Dict[str, object] = {}    # bound state arrays already validated
        # planner(graph, shapes=..., nodes=..., outputs=...) -> a memory plan; None: interpret
        self.planner = planner
        # the symbolic dims the feeds bind: a plan is made per tuple of their sizes
        # (not RUNTIME_DIM: a loop body's feed may hold a saved loop's rows, of any number)
        self.symbols = tuple(sorted({s for v, _ in self.feeds for d in v.shape
                                     for s in dim_symbols(d) if s != RUNTIME_DIM}))
        # feeds of fully static types, checked by one loop of exact comparisons
        self._static_feeds = None
        if not self.symbols and len(self.feeds) == len(self.feed_names):
            self._static_feeds = [(v.name, s, np.dtype(v.dtype), tuple(v.shape))
                                  for v, s in self.feeds]
        # one run at a time where runs share memory (state, a planned arena)
        self.run_lock = threading.Lock()
        # how a run executes: the interpreter's instruction list, or planned programs
        self.steps = Interpreted() if planner is None else Planned(planner)
        # ``run``'s shortcut for a planned executable of static shapes on numpy: its
        # ``PreparedCall`` over every placeholder in name order (made at the first run)
        self._prepared: Optional[PreparedCall] = None

    # -- preparation ---------------------------------------------------------------------------
    def _build(self, targets):
        graph = self.graph
        slot: Dict[Value, int] = {}

        def number(v):
            slot[v] = len(slot)
            return slot[v]

        used = {i for n in self.nodes for i in n.inputs} | {t for t in targets}
        self.feeds = [(v, number(v)) for v in graph.inputs if v in used]
        self.feed_names = {v.name for v in graph.inputs}
        self._feed_dtypes = {s: np.dtype(v.dtype) for v, s in self.feeds}
        self.state_slots = [(v, number(v)) for v in graph.state]
        updated = {st for st, _ in self.updates}
        # the state a run reads or writes (a training graph may carry slots it never uses)
        self.live_state_slots = [(v, s) for v, s in self.state_slots
                                 if v in used or v in updated]
        for node in self.nodes:
            for o in node.outputs:
                number(o)
        self.num_slots = len(slot)
        self.slot_of = slot
        keep = {slot[t] for t in targets} | {s for _, s in self.state_slots}
        keep |= {s for _, s in self.feeds}
        last_use: Dict[int, int] = {}
        for i, node in enumerate(self.nodes):
            for x in node.inputs:
                last_use[slot[x]] = i
            for o in node.outputs:   # an unused output dies right where it is made
                last_use.setdefault(slot[o], i)
        frees: Dict[int, List[int]] = {}
        for s, i in last_use.items():
            if s not in keep:
                frees.setdefault(i, []).append(s)
        self.instructions = [
            Instruction(node, self.kernel_of(node.op), tuple(slot[x] for x in node.inputs),
                        tuple(slot[o] for o in node.outputs), tuple(frees.get(i, ())))
            for i, node in enumerate(self.nodes)]
        self.output_slots = [slot[o] for o in self.outputs]
        self.update_slots = [(state.name, slot[new]) for state, new in self.updates]
        self.output_copies = self._outputs_to_copy()

    def _outputs_to_copy(self) -> tuple:
        """Indices of the outputs the interpreter copies before returning them: those whose
        array may be (a view of) a feed, a state buffer, a constant, a state update's new
        value or an earlier output. Decided here from the ops' view traits (``view``,
        ``returns_input``), so a run copies nothing where nothing can alias."""
        root: Dict[Value, Value] = {}
        for node in self.nodes:
            if may_view_input(node):
                src = root.get(node.inputs[0], node.inputs[0])
                for o in node.outputs:
                    root[o] = src
        held = set(self.graph.inputs) | set(self.graph.state)
        held.update(root.get(new, new) for _, new in self.updates)
        copies = []
        for i, o in enumerate(self.outputs):
            r = root.get(o, o)
            made_by = None if r in held else r.node
            if r in held or (made_by is not None and (made_by.op.constant
                                                      or made_by.op.external)):
                copies.append(i)
            held.add(r)
        return tuple(copies)

    def kernel_of(self, op):
        """The kernel this executable runs for ``op``: the backend's, or for an op with
        regions its region kernel over bodies compiled by ``self.regions``."""
        if op.region_kernel is not None:
            return self.regions.kernel(op)
        return self.runner.kernels[op]

    def out_kernel_of(self, op):
        """The ``out=`` form this executable runs for ``op`` (None where there is none)."""
        if op.region_kernel is not None:
            return self.regions.out_kernel(op)
        return self.runner.out_kernel(op)

    @property
    def kernel_count(self) -> int:
        """Kernels launched per run (a planned executable prepares constants once)."""
        return self.steps.kernel_count(self)

    @property
    def planned(self) -> bool:
        """Whether runs execute a memory plan over one arena (else: the interpreter)."""
        return isinstance(self.steps, Planned)

    @property
    def memory_plan(self):
        """The memory plan of the last run (arena_bytes, lower_bound_bytes, no_reuse_bytes,
        ``summary()``); before any run, the plan of a graph without symbolic dims. None for
        an interpreted executable, or before the first run binds the symbolic dims (see
        ``plan_for``)."""
        return self.steps.memory_plan(self)

    def plan_for(self, **shapes: int):
        """The memory plan for the symbolic dims ``shapes`` (``exe.plan_for(N=32)``)."""
        if not self.planned:
            raise GraphError(f"{self.graph.name}: this executable is not planned; compile "
                             "with passes='O2' or plan=True")
        missing = [d for d in self.symbols if d not in shapes]
        if missing:
            raise GraphError(f"{self.graph.name}: plan_for needs sizes for the symbolic dims "
                             f"{missing}, found {sorted(shapes)}")
        return self.steps.program(self, {d: int(shapes[d]) for d in self.symbols}).plan

    def is_multi(self, node) -> bool:
        """A multi-output op's kernel returns a tuple, even when it holds a single array."""
        return bool(node.op.multi_output) or len(node.outputs) != 1

    # -- running -------------------------------------------------------------------------------
    def _bind_feeds(self, feeds: dict, env: list) -> Dict[str, int]:
        static = self._static_feeds
        if static is not None and len(feeds) == len(static):
            # the common case: every feed an array of the placeholder's exact static type
            ndarray = self.xp.ndarray
            for name, s, dt, shape in static:
                arr = feeds.get(name)
                if type(arr) is not ndarray or arr.dtype != dt or arr.shape != shape:
                    break
                env[s] = arr
            else:
                return {}
        extra = [k for k in feeds if k not in self.feed_names]
        if extra:
            raise FeedError(f"{self.graph.name}: unknown feed {', '.join(map(repr, extra))}; "
                            f"the graph's placeholders are {sorted(self.feed_names)}")
        bindings: Dict[str, int] = {}
        origin: Dict[str, str] = {}
        derived: list = []        # dims such as 2*N: solved once the plain symbols are bound
        xp = self.xp
        for v, s in self.feeds:
            if v.name not in feeds:
                raise FeedError(f"{self.graph.name}: missing feed for placeholder {v.name!r} "
                                f"(expected {v.type!r})")
            arr = feeds[v.name]
            fast = type(arr) is xp.ndarray and arr.dtype == self._feed_dtypes[s]
            if fast:
                pass                              # the common case, checked cheaply
            elif isinstance(arr, (bool, int, float, list, tuple)) and \
                    not isinstance(arr, np.generic):   # np.float64 subclasses float
                arr = self._python_feed(v, arr)
            elif not hasattr(arr, "dtype") or not hasattr(arr, "shape"):
                raise FeedError(f"{self.graph.name}: feed {v.name!r} must be an array or a "
                                f"number, found {type(arr).__name__}")
            dt = None if fast else (arr.dtype.name if hasattr(arr.dtype, "name")
                                    else str(arr.dtype))
            if dt is not None and dt != v.dtype:
                raise FeedError(f"{self.graph.name}: feed {v.name!r} has dtype {dt}, expected "
                                f"{v.type!r}; convert it with .astype({v.dtype!r})")
            shape = tuple(arr.shape)
            want = v.shape
            ok = len(shape) == len(want)
            if ok:
                for d, w in zip(shape, want):
                    if isinstance(w, str):
                        if RUNTIME_DIM in dim_symbols(w):
                            continue              # any size: never bound, never planned
                        if w in bindings:
                            if bindings[w] != d:
                                self._feed_conflict(v, shape, w, bindings, origin)
                        elif getattr(w, "is_symbol", True):
                            bindings[w] = d
                            origin[w] = v.name
                        else:
                            derived.append((v, shape, w, d))
                    elif w != d:
                        ok = False
            if not ok:
                raise FeedError(f"{self.graph.name}: feed {v.name!r} has shape {list(shape)}, "
                                f"expected {format_shape(want)} ({v.type!r})")
            if not isinstance(arr, xp.ndarray):
                arr = xp.asarray(arr)
            env[s] = arr
        for v, shape, w, d in derived:
            found = solve_dim(w, d, bindings)
            if found is None:
                self._feed_conflict(v, shape, w, bindings, origin)
            for name, size in found.items():
                bindings[name] = size
                origin[name] = v.name
        return bindings

    def _feed_conflict(self, v: Value, shape: tuple, w, bindings, origin) -> None:
        """Raise the FeedError for feed ``v`` whose dim ``w`` disagrees with the sizes the
        other feeds bound (or has no whole solution)."""
        bound = ", ".join(f"{s}={bindings[s]} from feed {origin[s]!r}"
                          for s in dim_symbols(w) if s in bindings)
        raise FeedError(f"{self.graph.name}: feed {v.name!r} has shape {list(shape)}, which "
                        f"does not fit its dim {w}" + (f" with {bound}" if bound else
                                                        " for any whole size") +
                        f" (expected {v.type!r})")

    def _python_feed(self, v: Value, data) -> np.ndarray:
        """A Python number or (nested) list fed to placeholder ``v``, as an array of its dtype.

        Python data is weakly typed, as Python numbers among op operands are: it takes the
        placeholder's dtype when its kind fits (bool < int < float), so ``lr=0.1`` feeds an
        f32[] placeholder. A float for an integer placeholder, or an int outside the dtype's
        range, is a FeedError instead of a silent truncation or wrap-around. numpy arrays and
        numpy scalars carry a dtype of their own and must match exactly.
        """
        where = f"{self.graph.name}: feed {v.name!r}"
        try:
            found = np.asarray(data)
        except ValueError as e:   # ragged nested lists
            raise FeedError(f"{where} cannot be converted to {v.type!r}: {e}") from None
        if found.dtype.kind not in "biuf":
            raise FeedError(f"{where} holds {type(data).__name__} data of numpy dtype "
                            f"{found.dtype}, expected numbers for {v.type!r}")
        order = {"b": 0, "i": 1, "u": 1, "f": 2}
        want = dtypes.kind(v.dtype)
        if found.size and order[found.dtype.kind] > order[want]:
            what = {"i": "int", "u": "int", "f": "float"}[found.dtype.kind]
            raise FeedError(f"{where} is Python {what} data, expected {v.type!r}: "
                            f"converting it to {v.dtype} could lose information, so convert "
                            "it explicitly")
        if found.size and want == "i" and found.dtype.kind in "iu":
            info = np.iinfo(v.dtype)
            lo, hi = found.min(), found.max()
            if lo < info.min or hi > info.max:
                raise FeedError(f"{where} holds values in [{lo}, {hi}], outside the range "
                                f"[{info.min}, {info.max}] of {v.type!r}")
        return found.astype(v.dtype)

    def _resolve(self, ins: Instruction, bindings: Dict[str, int]) -> dict:
        return resolve_attrs(ins.node, ins.attrs, bindings)

    def run(self, feeds: Optional[dict] = None) -> list:
        """Run once: returns the outputs (numpy arrays) and updates the state."""
        prepared = self._prepared
        if prepared is not None and feeds is not None and len(feeds) == len(prepared.names):
            # a planned executable of static shapes on numpy: the prepared call, where it
            # takes these arrays (else the general path below, with its clear errors)
            try:
                arrays = [feeds[n] for n in prepared.names]
            except KeyError:
                arrays = None
            if arrays is not None:
                outs = prepared.call(arrays)
                if outs is not None:
                    return outs
        elif prepared is None and self.planned and not self.symbols and self.xp is np:
            self._prepared = PreparedCall(self, sorted(self.feed_names))
            return self.run(feeds)
        env: list = [None] * self.num_slots
        bindings = self._bind_feeds(feeds or {}, env)
        outs = self.steps.run(self, env, bindings)
        if self.xp is not np and not self.keep_on_device:
            outs = [self.xp.asnumpy(o) for o in outs]
        return outs

    def prepare(self, names: Sequence[str]) -> "PreparedCall":
        """A ``PreparedCall`` of this executable (planned, of static shapes): called with the
        feeds as a sequence in the order of ``names`` (every placeholder once), it runs
        with what does not change between calls decided once."""
        return PreparedCall(self, names)

    def __call__(self, **feeds) -> list:
        """``exe(x=...)``: ``run`` with the feeds as keyword arguments (device outputs stay
        on the device with ``keep_on_device``, as ``run`` leaves them)."""
        return self.run(feeds)

    def trace(self, feeds: Optional[dict] = None,
              timings: Optional[list] = None) -> Dict[Value, object]:
        """Run once through the instruction list with this backend's kernels, keeping every
        value instead of freeing it at its last use: returns each node output (and each feed
        and state input) of ``self.graph`` -> its array. The state is read, never written,
        so a trace does not advance a training step. What ``dg.compare`` matches node by
        node against eager execution. ``timings``: a list that gets (node, seconds) of every
        kernel call."""
        env: list = [None] * self.num_slots
        bindings = self._bind_feeds(feeds or {}, env)
        for v, s in self.state_slots:
            env[s] = self._state_array(v)
        xp = self.xp
        with np.errstate(all="ignore"):
            for ins in self.instructions:
                args = [env[s] for s in ins.ins]
                attrs = self._resolve(ins, bindings) if ins.symbolic else ins.attrs
                t0 = time.perf_counter()
                try:
                    res = run_kernel(ins.kernel, xp, args, attrs, ins.multi, ins.dtypes,
                                     ins.shapes, bindings)
                except Exception as e:
                    raise self._kernel_error(ins, args, e) from e
                if timings is not None:
                    timings.append((ins.node, time.perf_counter() - t0))
                for s, r in zip(ins.outs, res):
                    env[s] = r
        return {v: env[s] for v, s in self.slot_of.items() if env[s] is not None}

    def _state_target(self, name: str):
        owned = self._owned.get(name)
        return owned if owned is not None else self._bound[name][1].array

    def _state_array(self, v: Value):
        owned = self._owned.get(v.name)
        if owned is not None:
            return owned
        _, holder = self._bound[v.name]
        arr = holder.array
        if self._checked.get(v.name) is arr and arr.shape == v.shape:   # checked before
            return arr
        if tuple(arr.shape) != tuple(v.shape) or dtypes.as_dtype(arr.dtype) != v.dtype:
            raise FeedError(f"{self.graph.name}: state {v.name!r} was built as {v.type!r}, but "
                            f"the object bound to it now holds {arr.dtype}{list(arr.shape)}; "
                            "rebuild the graph after changing parameter shapes or dtypes")
        # device arrays (cupy's) have .get(); numpy's do not
        if (hasattr(arr, "get") or not isinstance(arr, np.ndarray)) != (self.xp is not np):
            moved = self._state_elsewhere(v, arr)
            if moved is not None:
                return moved                  # a host scalar read on the device: per run
        self._checked[v.name] = arr
        return arr

    def _state_elsewhere(self, v: Value, arr):
        """Bound state whose array is not on this executable's device: a 0-d host array
        (a learning rate) is read through one device copy, refreshed in place (a fill, no
        transfer: a captured CUDA graph may read it) when the host value changes; anything
        else is refused."""
        host = isinstance(arr, np.ndarray) and not hasattr(arr, "get")
        if self.xp is not np and host and arr.ndim == 0:
            held = self.__dict__.setdefault("_device_scalars", {})
            value = arr.item()
            found = held.get(v.name)
            if found is None:
                found = held[v.name] = [value, self.xp.asarray(arr)]
            elif not (found[0] == value or (found[0] != found[0] and value != value)):
                found[1].fill(value)
                found[0] = value
            return found[1]
        where = "cpu" if host else "cuda"
        raise FeedError(f"{self.graph.name}: state {v.name!r} is on {where}, but this "
                        f"executable runs on {self.runner.device}; compile with "
                        f"device={where!r} or move the tensor with .to("
                        f"{self.runner.device!r})")

    def _kernel_error(self, ins: Instruction, args, e: Exception) -> KernelError:
        return self._kernel_error_for(ins.node, args, e)

    def _kernel_error_for(self, node, args, e: Exception) -> KernelError:
        shapes = ", ".join(f"{getattr(a, 'dtype', '?')}{list(getattr(a, 'shape', ()))}"
                           for a in args)
        where = f"\n  in: {node.source}" if node.source else ""
        return kernel_error(f"{node.op.name} failed at run time: {type(e).__name__}: {e}\n"
                            f"  inputs: ({shapes})  attrs: {node.attrs}{where}", e)

    def __repr__(self):
        n = len(self.outputs)
        planned = ", planned" if self.planned else ""
        return (f"<Executable {self.graph.name!r}: {self.kernel_count} kernels, "
                f"{n} output{'' if n == 1 else 's'}, backend={self.backend}{planned}>")


class StateView:
    """``exe.state``: the current state arrays by name (owned or bound), read-only mapping."""

    def __init__(self, exe: "Executable"):
        self._exe = exe

    def __getitem__(self, name: str):
        exe = self._exe
        if name in exe._owned:
            return exe._owned[name]
        if name in exe._bound:
            return exe._bound[name][1].array
        raise KeyError(f"{exe.graph.name}: no state named {name!r}; it has "
                       f"{sorted(list(exe._owned) + list(exe._bound))}")

    def __contains__(self, name) -> bool:
        return name in self._exe._owned or name in self._exe._bound

    def keys(self):
        return list(self._exe._owned) + list(self._exe._bound)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    def values(self):
        return [self[k] for k in self.keys()]

    def __setitem__(self, name: str, value) -> None:
        """Replace an owned state array (same shape and dtype)."""
        exe = self._exe
        if name not in exe._owned:
            raise KeyError(f"{exe.graph.name}: {name!r} is not state owned by this executable")
        old = exe._owned[name]
        arr = exe.xp.asarray(value, dtype=old.dtype)
        if arr.shape != old.shape:
            raise FeedError(f"{exe.graph.name}: state {name!r} has shape {list(old.shape)}, "
                            f"found {list(arr.shape)}")
        exe._owned[name] = arr.copy()

    def __repr__(self):
        return "StateView(" + ", ".join(self.keys()) + ")"


def _same(xp, result):
    return result


def _row(ins: Instruction) -> tuple:
    """An instruction's fields as one tuple for the interpreter's loop: (kernel, input
    getter, call, attrs, dtype, static shape or None, output slot, frees, instruction).
    ``call``: 0 for the general path (several outputs, symbolic attrs); for one output run
    inline, 1 for one input and no attrs (the getter returns that input), 2 for several
    inputs and no attrs (it returns a tuple), 3 otherwise."""
    n = len(ins.ins)
    get = itemgetter(*ins.ins) if n else None
    if ins.multi or ins.symbolic:
        call = 0
    elif ins.attrs or not n:
        call = 3
    else:
        call = 1 if n == 1 else 2
    shape = ins.shapes[0] if len(ins.shapes) == 1 else None
    if shape is not None and any(not isinstance(d, int) for d in shape):
        shape = None
    return (ins.kernel, get, call, ins.attrs, ins.dtypes[0] if ins.dtypes else None,
            shape, ins.outs[0] if ins.outs else None, ins.frees, ins)


class Interpreted:
    """An interpreted executable's steps: the instruction list run in order over numbered
    slots, each value freed at its last use (torch.fx's Interpreter)."""

    def __init__(self):
        self.rows = None

    def kernel_count(self, exe: "Executable") -> int:
        return len(exe.instructions)

    def memory_plan(self, exe: "Executable"):
        return None

    def run_rows(self, exe: "Executable", env: list, bindings: Dict[str, int]) -> None:
        """Run the instruction list over ``env`` (feeds and state already bound)."""
        xp = exe.xp
        rows = self.rows
        if rows is None:     # each instruction's fields as one tuple: no lookups per run
            rows = self.rows = [_row(i) for i in exe.instructions]
        ndarray = xp.ndarray
        ins = None
        try:
            for kernel, get, call, attrs, dt, shape, out, frees, ins in rows:
                if call:
                    # one output, static attrs: the kernel's result checked inline
                    if call == 1:
                        res = kernel(xp, get(env))
                    elif call == 2:
                        res = kernel(xp, *get(env))
                    else:
                        res = kernel(xp, *[env[s] for s in ins.ins], **attrs)
                    if type(res) is not ndarray or res.dtype is not dt or res.shape != shape:
                        res = run_kernel(_same, xp, (res,), {}, False, ins.dtypes,
                                         ins.shapes, bindings)[0]
                    env[out] = res
                else:
                    args = [env[s] for s in ins.ins]
                    a = exe._resolve(ins, bindings) if ins.symbolic else attrs
                    got = run_kernel(kernel, xp, args, a, ins.multi, ins.dtypes, ins.shapes,
                                     bindings)
                    for s, r in zip(ins.outs, got):
                        env[s] = r
                for s in frees:
                    env[s] = None
        except Exception as e:
            if ins is None:
                raise
            raise exe._kernel_error(ins, [env[s] for s in ins.ins], e) from e

    def run(self, exe: "Executable", env: list, bindings: Dict[str, int]) -> list:
        if not exe.update_slots and not exe._owned and not exe._bound:
            # no state: runs share nothing, so threads need no lock
            return self._outputs(exe, env, bindings)
        with exe.run_lock:      # reading, computing and writing the state: one run at a time
            return self._run_with_state(exe, env, bindings)

    def _outputs(self, exe: "Executable", env: list, bindings: Dict[str, int]) -> list:
        """Run the rows; the outputs, those that may alias (views of feeds, constants,
        another output) copied."""
        token = fperr.ignore()
        try:
            self.run_rows(exe, env, bindings)
        finally:
            fperr.restore(token)
        outs = [env[s] for s in exe.output_slots]
        for i in exe.output_copies:
            outs[i] = outs[i].copy()
        return outs

    def _run_with_state(self, exe: "Executable", env: list, bindings: Dict[str, int]) -> list:
        for v, s in exe.state_slots:
            env[s] = exe._state_array(v)
        outs = self._outputs(exe, env, bindings)
        # Every state buffer and every returned array is its own: none aliases another, a
        # feed, or a view, so a caller writing into an output never changes the state.
        # (Arrays are not hashable: they are told apart by identity.)
        held = {id(a) for a in exe._owned.values()}
        held.update(id(h.array) for _, h in exe._bound.values())
        outs = [o.copy() if id(o) in held else o for o in outs]
        held.update(id(o) for o in outs)
        held.update(id(env[fs]) for _, fs in exe.feeds)
        for name, s in exe.update_slots:
            new = env[s]
            bound = exe._bound.get(name)
            if bound is not None:         # written into the live object's own array
                target = bound[1].array
                if target is not new:
                    target[...] = new
                state_written(bound[1])
                continue
            if id(new) in held or not getattr(new, "flags", None) or not new.flags.owndata:
                new = new.copy()
            held.add(id(new))
            exe._owned[name] = new
        return outs


class Planned:
    """A planned executable's steps: per concrete shape signature, a memory plan from
    ``planner`` and a ``Program`` over one arena (the most recent ``MAX_PROGRAMS`` kept);
    one run at a time per executable (``exe.run_lock``), since a program's arena is
    shared."""

    def __init__(self, planner: Callable):
        self.planner = planner
        self.programs: "OrderedDict[tuple, Program]" = OrderedDict()
        self.last_program: Optional[Program] = None

    def kernel_count(self, exe: "Executable") -> int:
        return sum(1 for n in exe.nodes if not n.op.constant)

    def memory_plan(self, exe: "Executable"):
        if self.last_program is not None:
            return self.last_program.plan
        if exe.symbols:
            return None
        return self.program(exe, {}).plan

    def program(self, exe: "Executable", bindings: Dict[str, int]) -> Program:
        key = tuple(bindings.get(d) for d in exe.symbols)
        prog = self.programs.get(key)
        if prog is None:
            shapes = {d: bindings[d] for d in exe.symbols if d in bindings}
            plan = self.planner(exe.graph, shapes=shapes, nodes=exe.nodes,
                                outputs=exe.outputs)
            prog = Program(exe, plan, shapes)
            self.programs[key] = prog
            while len(self.programs) > MAX_PROGRAMS:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        return prog

    def run(self, exe: "Executable", fed: list, bindings: Dict[str, int]) -> list:
        with exe.run_lock:
            prog = self.last_program
            if prog is None or exe.symbols:       # without symbols there is one program
                prog = self.last_program = self.program(exe, bindings)
            env = prog.env.copy()
            for _, s in exe.feeds:
                env[s] = fed[s]
            for v, s in exe.live_state_slots:
                env[s] = exe._state_array(v)
            return self.execute(exe, prog, env)

    @staticmethod
    def execute(exe: "Executable", prog: Program, env: list) -> list:
        """Run ``prog`` over ``env`` (feeds and state bound, ``exe.run_lock`` held): its
        steps, then the outputs (copied where they must be) and the new state written
        back."""
        token = fperr.ignore()
        try:
            prog.run(exe, env)
        finally:
            fperr.restore(token)
        if len(exe.output_slots) == 1:
            o = env[exe.output_slots[0]]
            outs = [o.copy() if prog.copy_outputs[0] else o]
        else:
            outs = []
            seen = set()
            for s, copy in zip(exe.output_slots, prog.copy_outputs):
                o = env[s]
                if copy or id(o) in seen:     # arrays, told apart by identity
                    o = o.copy()
                seen.add(id(o))
                outs.append(o)
        if prog.writebacks:
            Planned._write_back(exe, prog, env)
        for bump in prog.bumps:
            bump()
        return outs

    @staticmethod
    def _write_back(exe: "Executable", prog: Program, env: list) -> None:
        # new state values: copy those that may view a state, feed or constant first, so
        # a swap (a <- b, b <- a) reads the old values; then write each into its buffer
        # (the holders' versions are bumped by ``execute``: ``prog.bumps``)
        news = [(name, env[s] if in_arena else env[s].copy())
                for name, s, in_arena in prog.writebacks]
        for name, new in news:
            exe._state_target(name)[...] = new


class PreparedCall:
    """``exe.prepare(names)``: a planned executable of static shapes, called with its feeds
    as a sequence in the order of ``names``; what does not change between calls is decided
    once (the program, each feed's slot and type, each state's slot), so a call only checks
    and binds the arrays and runs the program's steps (an optimizer's step program, a
    compiled function's call).

    ``call(arrays)`` returns the outputs as ``exe.run`` does, or None, having run nothing,
    where a feed is not an array of its placeholder's exact type or a state array is not of
    its state's: the caller then takes ``exe.run``, which converts Python data and raises
    the clear error for what is wrong (or, for an optimizer, rebuilds its program)."""

    def __init__(self, exe: "Executable", names: Sequence[str]):
        if not exe.planned or exe.symbols:
            raise GraphError(f"{exe.graph.name}: prepare() needs a planned executable of "
                             f"static shapes; this one is "
                             + ("not planned" if not exe.planned
                                else f"symbolic in {list(exe.symbols)}"))
        names = list(names)
        unknown = [n for n in names if n not in exe.feed_names]
        missing = sorted(exe.feed_names.difference(names))
        if unknown or missing or len(set(names)) != len(names):
            raise FeedError(f"{exe.graph.name}: prepare() takes every placeholder once, in "
                            f"any order; found {names}, the placeholders are "
                            f"{sorted(exe.feed_names)}")
        slots = {v.name: (v, s) for v, s in exe.feeds}
        self.exe = exe
        self.names = tuple(names)
        # (position among the arrays, slot, dtype, shape) of each feed the program reads
        self.feeds = tuple((i, slots[n][1], np.dtype(slots[n][0].dtype),
                            tuple(slots[n][0].shape)) for i, n in enumerate(names)
                           if n in slots)
        # (slot, state name, holder or None for owned state, dtype, shape)
        self.state = tuple((s, v.name, exe._bound[v.name][1] if v.name in exe._bound
                            else None, np.dtype(v.dtype), tuple(v.shape))
                           for v, s in exe.live_state_slots)
        self.seen = [None] * len(self.state)     # the state arrays checked at the last call
        with exe.run_lock:
            self.program = exe.steps.last_program = exe.steps.program(exe, {})
        # a program without state whose steps are all prepared: one generated function
        # (``call``: that function where there is one, else this object's ``__call__``)
        fast = fast_call(exe, self.program, self.feeds)
        self.call = fast if fast is not None else self.__call__

    def __call__(self, arrays: Sequence) -> Optional[list]:
        exe = self.exe
        prog = self.program
        ndarray = exe.xp.ndarray
        env = prog.env.copy()
        for i, s, dt, shape in self.feeds:
            a = arrays[i]
            if type(a) is not ndarray or a.dtype != dt or a.shape != shape:
                return None
            env[s] = a
        seen = self.seen
        owned = exe._owned
        with exe.run_lock:
            k = 0
            for s, name, holder, dt, shape in self.state:
                arr = owned[name] if holder is None else holder.array
                if arr is not seen[k] or arr.shape != shape:
                    if type(arr) is not ndarray or arr.dtype != dt or arr.shape != shape:
                        return None
                    seen[k] = arr
                env[s] = arr
                k += 1
            exe.steps.last_program = prog
            return Planned.execute(exe, prog, env)


def compile_graph(graph: Graph, outputs=None, backend="numpy", device=None,
                  planner: Optional[Callable] = None, **options) -> Executable:
    """Build an Executable for ``graph``; with a ``planner``, a planned one (see the module
    docstring). ``backend`` is a name ("numpy", "cupy") or a ``Backend`` object.
    ``duograph``'s ``Graph.compile`` joins the passes and this."""
    if options:
        raise TypeError(f"compile: unexpected options {sorted(options)}")
    if device is not None:
        backend = {"cpu": "numpy", "cuda": "cupy", "gpu": "cupy"}.get(device, device)
    return Executable(graph, outputs, backend, planner)


# region bodies compile into Executables (regions.py sits below the backends and imports none)
RegionRunner.executable = Executable
