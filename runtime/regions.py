"""Region bodies compiled once: what the region kernels of loops and branches run.

An op with regions (``cond``, ``scan``, ``while_loop``, ``call``) declares a
``region_kernel(xp, bodies, *arrays, out=None, **attrs)`` (the OpDef trait): its loop or
branch, written against ``bodies(region, arrays) -> body``. The op's own ``kernel`` passes
bodies that run the region op by op on every call (the reference). A ``RegionRunner`` is
the runtime's ``bodies``:

- each region is compiled once into an ``Executable`` of its graph, with the runner's
  backend and planner (so nested regions use the same runner): kernels resolved once, the
  backend's kernels (fused bodies through its fused compiler) instead of the reference ones;
- per input signature (shapes and dtypes) a body is prepared once: interpreted (the
  instruction list, a fresh slot list per call), or, when the runner has a planner (an
  executable at O2, or ``plan=True``), a ``Program`` over an arena of its own, planned once
  and reused by every iteration. The planned body binds its results to the buffers the loop
  hands it (``out``), so the producers write straight into them (a scan's next carry, its
  row of the stacked ys); results it cannot bind (a body input returned as it is, a view, a
  constant, a value returned twice) are copied in.

The loops in the region kernels double-buffer their carries, so a body never writes a
buffer it reads in the same step. Executables make one runner each (a body's arena is
reused only under its top-level executable's run); backends keep one without a planner for
eager execution.

A body whose inputs do not match the region's declared types exactly (a region typed only
by rank), or that returns nothing, runs op by op with the backend's kernels instead.
"""
from __future__ import annotations

import weakref
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from ..graphlib.errors import FeedError, GraphError
from ..graphlib.ir import Region
from ..graphlib.ops.control import OpByOpBody, give_results
from ..graphlib.types import eval_dim

# Prepared bodies kept per region (one per input signature), oldest dropped first: as the
# executables' MAX_PROGRAMS.
MAX_BODIES = 8


class RegionRunner:
    """``bodies(region, arrays)`` for the region kernels: each region compiled once (an
    ``Executable`` with this runner's backend and ``planner``), each input signature
    prepared once. See the module docstring."""

    # The Executable class bodies compile into: ``executable.py`` (which sits above the
    # backends, as it looks them up by name) installs it when the runtime package loads, so
    # this module, below the backends, imports none of them.
    executable: Optional[Callable] = None

    def __init__(self, backend, planner: Optional[Callable] = None):
        self.backend = backend
        self.planner = planner
        # regions compare by structure: equal regions share one compiled body, which is
        # exact (same ops, wiring, attributes and input types), and an entry lives as long
        # as its region
        self._compiled: "weakref.WeakKeyDictionary[Region, _Compiled]" = \
            weakref.WeakKeyDictionary()
        self._kernels: Dict[object, Callable] = {}
        self._outs: Dict[object, Callable] = {}

    def __call__(self, region: Region, arrays: Sequence):
        comp = self._compiled.get(region)
        if comp is None:
            comp = self._compiled[region] = _Compiled(region, self)
        key = tuple([(a.shape, a.dtype) for a in arrays])
        body = comp.bodies.get(key)
        if body is None:
            if len(comp.bodies) >= MAX_BODIES:          # the oldest signature goes
                del comp.bodies[next(iter(comp.bodies))]
            body = comp.bodies[key] = comp.prepare(region, arrays)
        return body

    def kernel(self, op) -> Callable:
        """The plain kernel of region op ``op`` over this runner's bodies."""
        k = self._kernels.get(op)
        if k is None:
            bodies = self

            def k(xp, *arrays, **attrs):
                return op.region_kernel(xp, bodies, *arrays, **attrs)
            self._kernels[op] = k
        return k

    def out_kernel(self, op) -> Callable:
        """The ``out=`` form of region op ``op``: its results written into the node's
        planned buffers."""
        k = self._outs.get(op)
        if k is None:
            bodies = self

            def k(xp, *arrays, out, **attrs):
                op.region_kernel(xp, bodies, *arrays,
                                 out=out if isinstance(out, (tuple, list)) else (out,), **attrs)
                return True
            self._outs[op] = k
        return k

    def arena_bytes(self) -> int:
        """The arena bytes of the bodies compiled so far (each planned signature's, summed
        over the regions: they are allocated once and reused by every iteration)."""
        total = 0
        for comp in list(self._compiled.values()):
            for body in comp.bodies.values():
                total += getattr(body, "arena_bytes", 0)
        return total


class _Compiled:
    """One region compiled: its executable (None when the body returns nothing) and its
    bodies per input signature."""

    __slots__ = ("exe", "bodies", "runner", "index", "__weakref__")

    def __init__(self, region: Region, runner: RegionRunner):
        g = region.graph
        self.runner = runner
        self.bodies: Dict[tuple, object] = {}
        self.index = {v: k for k, v in enumerate(g.inputs)}
        try:
            self.exe = runner.executable(g, list(g.outputs), runner.backend, runner.planner,
                                         regions=runner) if g.outputs else None
        except GraphError:
            self.exe = None

    def prepare(self, region: Region, arrays: Sequence):
        """The body for inputs like ``arrays``: planned or interpreted as the executable
        is, or op by op where it cannot take them."""
        exe, backend = self.exe, self.runner.backend
        if exe is None:
            return OpByOpBody(region, backend.xp, arrays, backend.kernels)
        env = [None] * exe.num_slots
        try:
            bindings = exe._bind_feeds({v.name: a for v, a in zip(exe.graph.inputs, arrays)},
                                       env)
        except FeedError:
            return OpByOpBody(region, backend.xp, arrays, backend.kernels)
        in_slots = tuple((self.index[v], s) for v, s in exe.feeds)
        types = [(tuple(eval_dim(d, bindings) if isinstance(d, str) else d
                        for d in o.shape), np.dtype(o.dtype)) for o in exe.outputs]
        if exe.planned:
            return _PlannedBody(exe, exe.steps.program(exe, bindings), in_slots, types)
        return _InterpretedBody(exe, in_slots, bindings, types)


class _InterpretedBody:
    """A body run through its executable's instruction list (kernels resolved once)."""

    __slots__ = ("exe", "in_slots", "bindings", "types", "nslots")

    def __init__(self, exe, in_slots, bindings, types):
        self.exe, self.in_slots, self.bindings, self.types = exe, in_slots, bindings, types
        self.nslots = exe.num_slots

    def __call__(self, arrays: Sequence, out=None) -> tuple:
        exe = self.exe
        env = [None] * self.nslots
        for k, s in self.in_slots:
            env[s] = arrays[k]
        exe.steps.run_rows(exe, env, self.bindings)
        return give_results(exe.xp, [env[s] for s in exe.output_slots], arrays, out)


class _PlannedBody:
    """A body run as one planned ``Program`` (its arena allocated once, reused by every
    call), whose results are written straight into the caller's buffers where a step
    writes them, and copied in otherwise."""

    __slots__ = ("exe", "prog", "in_slots", "types", "bound", "copies", "arena_bytes")

    def __init__(self, exe, prog, in_slots, types):
        self.exe, self.prog, self.in_slots, self.types = exe, prog, in_slots, types
        self.arena_bytes = int(prog.plan.arena_bytes)
        written = {s for s, _ in prog.fresh}
        bound, copies = [], []
        for k, s in enumerate(exe.output_slots):
            if s in written:
                written.discard(s)          # a value returned twice is bound once
                bound.append((s, k))
            else:
                copies.append((k, s))
        self.bound, self.copies = tuple(bound), tuple(copies)

    def __call__(self, arrays: Sequence, out=None) -> tuple:
        exe = self.exe
        xp = exe.xp
        if out is None:
            out = [xp.empty(shape, dt) for shape, dt in self.types]
        env = list(self.prog.env)
        for k, s in self.in_slots:
            env[s] = arrays[k]
        for s, k in self.bound:
            env[s] = out[k]
        self.prog.run_steps(exe, env)
        for k, s in self.copies:
            xp.copyto(out[k], env[s])
        return tuple(out)
