"""The CPU backend's compiler for fused regions: strategies picked by measurement
(``benchmarks/fusion.py``).

A fused body is split into its *prologue* (a matmul or reduction whose epilogue was fused: run
whole with the backend's kernel for it) and its elementwise *region*. The region runs with one of:

- ``numpy`` (the default without numba): generated Python that walks the iteration space in
  cache-sized chunks (``CHUNK`` elements) and calls numpy ufuncs with ``out=`` into a few
  scratch buffers reused across chunks and runs, so intermediates stay in L2 and nothing is
  allocated per op. Ops without an exact ufunc form call their own kernel on the chunk.
  Results are bitwise those of the unfused graph.
- ``direct`` (what ``numpy`` uses when the iteration space fits in one chunk): the same
  ufunc calls, straight-line over whole arrays, no loop, slicing or reshaping; numpy's own
  broadcasting handles smaller operands. Small fused kernels are all overhead, so this
  path keeps each one to a few microseconds plus its ufuncs.
- ``numba``: one ``@njit`` loop generated from the ops' ``expr`` templates, compiled once and
  cached on disk across processes, single-threaded by default (``config.numba_parallel``).
  Used where it measured faster. There is no SVML here, so numba's ``np.tanh``, ``exp`` and
  ``log`` are scalar libm calls (tanh ~17 ns an element, 20-40x slower than numpy's SIMD
  loops): the generated code computes float32 tanh (and sigmoid, tanh-GELU) with a
  vectorisable rational approximation (Eigen's, a few ulp), and bodies with other
  transcendental ops stay on numpy. Python float literals are cast to the compute dtype, so
  float32 code never promotes to float64.

- ``small`` (a planned program's ``direct`` region, strategy ``auto``): the straight-line
  numpy plan, and, for a region of ``NUMBA_SMALL_MIN_OPS`` ops or more (fewer save about a
  microsecond a call), one compiled numba call for the whole region
  (``fused_numba.small_kernel``: a 20-op chain on 16 floats is ~1 us of kernel instead of
  20 ufunc calls) once it is ready. At the region's ``dg.config.cpu.numba_small_after``-th
  call (16; seeded by ``DUOGRAPH_NUMBA_SMALL``) the kernel is queued on the compile thread
  (``tier_up``: numba's import and the compilation, seconds with an empty cache, never run
  on the caller's path); numpy's plan serves every call until the kernel is published by one
  store, and a failed compilation leaves the region on numpy (warned once). A region that
  runs fewer times never pays numba's import (the first call of a small graph stays in tens
  of milliseconds); the kernel's source and machine code are cached on disk, so a later
  process loads them (on the same thread). Compiled without fast-math flags: ops numpy
  computes exactly keep numpy's bits; transcendental ops (float32 tanh by the rational
  approximation below, at most 6 ulp) may differ from numpy's in the last bits from the
  switch on, which, being timed by the compile thread, is not a fixed call.
  ``numba_small_after = 1`` compiles synchronously at the first call (deterministic bits
  from the first call, for tests), ``0`` never; without numba the numpy plan stays.

``dg.config.fused_strategy`` (seeded by ``DUOGRAPH_FUSED``) forces one: ``auto``,
``numpy``, ``numba`` or ``ops`` (op by op, the reference). Every op a region or prologue
calls as a whole runs the CPU backend's kernel for it (``tables.KERNELS``), so a fused body
gives the bits the unfused graph gives on this backend.

The compiler is split by responsibility; this module holds its entry points (``run``,
``bind`` and the prologue binding, ``CPUFusedCompiler``):

- ``fused_layout.py``: a body split into prologue and region, its iteration space, the
  backend's plan cache (``PLANS``, keyed weakly by the body);
- ``fused_strategy.py``: which plan a region gets (numba, straight-line numpy, chunks);
- ``fused_chunks.py``: the numpy code generators (``DirectPlan``, ``ChunkPlan``);
- ``fused_numba.py``: the numba code generator (``NumbaPlan``) and its disk cache;
- ``fused_expr.py``: the ``expr`` templates translated to Python (``c_to_python``);
- ``fused_special.py``: runners for special bodies (gemm updates, swapped and masked
  epilogues);
- ``numba_support.py`` and ``autotune.py``: whether numba serves, and the timing decisions.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ...graphlib.ir import Value
from ...graphlib.ops.fused import eval_nodes
from ...graphlib.types import TensorType
from ..backend import FusedCompiler
from .fused_chunks import DirectPlan, _direct
from .fused_expr import c_to_python
from .fused_layout import PLANS, Layout, _region_shapes
from .fused_numba import NUMBA_MIN_PLANNED, NUMBA_SMALL_MIN_OPS, small_kernel
from .fused_special import _bind_gemm_update, _bind_masked, _bind_swapped, _spare_homes
from .fused_strategy import _layout, _numba_first, _plan
from . import tier_up
from .options import options
from .tables import KERNELS, OUT_KERNELS
from .workspace import Scratch

__all__ = ["CPUFusedCompiler", "bind", "c_to_python", "run"]
_plans_of = PLANS.get               # body -> its plans, or None (bound once)


def run(body, arrays: Sequence, out: Optional[Sequence[np.ndarray]] = None) -> Tuple:
    """Run ``body`` on numpy ``arrays``: prologue whole, then the region's cached plan.
    ``out`` (one preallocated array per output, as the planned runtime gives) receives the
    results instead of fresh arrays."""
    plans = _plans_of(body)
    lay = None if plans is None else plans.get(None)
    if lay is None:
        lay = _layout(body)
        plans = PLANS(body)
    if lay.direct:
        plan = _plan(body, lay, arrays, plans=plans)
        if plan is not False:
            return tuple(plan(arrays, out))
    env: Dict[Value, object] = {v: a for v, a in zip(body.graph.inputs, arrays)}
    if lay.prologue:
        eval_nodes(lay.prologue, env, np, body.graph.outputs + lay.region_inputs, KERNELS)
    ins = [env[v] for v in lay.region_inputs]
    where = {o: k for k, o in enumerate(lay.outputs)}
    if lay.region:
        plan = _plan(body, lay, ins, plans=plans)
        if plan is False:       # no chunked form: the region's kernels op by op
            for c in lay.constants:
                env[c.outputs[0]] = KERNELS[c.op](np, **c.attrs)
            eval_nodes(lay.region, env, np, lay.outputs, KERNELS)   # prologue outputs too
        else:
            region_out = None if out is None else [out[where[v]]
                                                   for v in lay.region_outputs]
            for v, r in zip(lay.region_outputs, plan(ins, region_out)):
                env[v] = r
    results = [env[o] for o in lay.outputs]
    if out is not None:
        for r, o in zip(results, out):
            if r is not o:
                np.copyto(o, r, casting="unsafe")
        return tuple(out)
    return tuple(results)


def bind(body, in_shapes: Sequence[tuple]):
    """A runner ``runner(arrays, outs) -> bool`` for a body whose inputs will always have
    ``in_shapes`` (the planned runtime knows every shape of a program in advance), skipping
    the per-call plan lookup; it returns False (the caller then takes the general path)
    once the strategy has been changed. None when no such shortcut applies: only small
    regions without a prologue, whose plan (``DirectPlan``) depends on shapes alone."""
    strategy = options.fused_strategy
    if strategy not in ("auto", "numpy"):
        return None
    lay = _layout(body)
    plans = PLANS(body)         # (the runners hold the body, so its entry lives as long)
    if not lay.direct:
        update = _bind_gemm_update(body, in_shapes, strategy)
        if update is not None:
            return update
        return _bind_prologue(body, lay, in_shapes, strategy)
    found = _region_shapes(lay, in_shapes)
    if found is None:
        return None
    shapes, consts, full = found
    n = math.prod(full)
    if not _direct(lay, n) or _numba_first(strategy, n):
        # the cached plan of these inputs (numba from NUMBA_MIN_PLANNED elements on)

        def planned(arrays, outs) -> bool:
            if options.fused_strategy != strategy:
                return False
            plan = _plan(body, lay, arrays, NUMBA_MIN_PLANNED, plans=plans)
            if plan is False:
                return False
            plan(arrays, outs, remember=True)
            return True
        return planned
    plan = DirectPlan(lay, shapes, consts, full)
    if strategy != "auto" or len(lay.region) < NUMBA_SMALL_MIN_OPS:
        def runner(arrays, outs) -> bool:
            if options.fused_strategy != strategy:
                return False
            plan(arrays, outs)
            return True
        return runner
    # numpy's straight-line plan first; from its ``numba_small_after``-th call (a region that
    # runs again and again) one compiled numba call instead, when the region has that form:
    # compiled on the compile thread (``tier_up``) while numpy's plan goes on serving, then
    # swapped in by one store of ``state[1]``; ``numba_small_after = 1`` compiles here, now
    state = [0, None]      # calls counted (-1: decided), the compiled call

    def tiered(arrays, outs) -> bool:
        if options.fused_strategy != strategy:
            return False
        fast = state[1]
        if fast is not None and options.numba and fast(arrays, outs):
            return True
        plan(arrays, outs)
        if state[0] >= 0:
            after = options.numba_small_after
            state[0] += 1
            if after and state[0] >= after:
                state[0] = -1
                if after == 1:
                    state[1] = small_kernel(lay, arrays, shapes, consts, full)
                else:
                    _compile_later(state, lay, arrays, shapes, consts, full)
        return True
    tiered.state = state
    return tiered


def _compile_later(state: list, lay: Layout, arrays: Sequence, shapes, consts,
                   full: tuple) -> None:
    """Queue ``small_kernel`` of a tiered runner's region on the compile thread, over copies
    of this call's arrays (the caller goes on writing its own); the finished kernel (or None:
    the region stays on numpy) is published by the single store ``state[1] = fast``."""
    sample = [np.array(a, copy=True) for a in arrays]

    def job() -> None:
        state[1] = small_kernel(lay, sample, shapes, consts, full)
    tier_up.submit(job)


def _bind_prologue(body, lay: Layout, in_shapes: Sequence[tuple], strategy: str):
    """``bind`` for a body opened by a matmul or reduction: the prologue writes with its
    ``out=`` kernel into its home output (``FusedBody.prologue_homes``) or a buffer made
    here, once; the region then runs over it (a DirectPlan when small, else the cached
    chunk or numba plan). None where the prologue is not simple (several outputs, or
    inputs that are not the body's own)."""
    g = body.graph
    index = {v: j for j, v in enumerate(g.inputs)}
    types = {v: TensorType(tuple(s), v.dtype) for v, s in zip(g.inputs, in_shapes)}
    homes = body.prologue_homes()
    plans = PLANS(body)
    steps = []          # (kernel, out_kernel, input indices, attrs, home k or scratch array)
    made: Dict[Value, tuple] = {}
    temps = []          # (shape, dtype) of the prologue values without a home
    for node in lay.prologue:
        if len(node.outputs) != 1 or any(x not in index for x in node.inputs):
            return None
        (t,) = node.op.infer([types[x] for x in node.inputs], node.attrs)
        if any(not isinstance(d, int) for d in t.shape):
            return None
        p = node.outputs[0]
        home = homes.get(p)
        if home is not None:
            target = home
        else:               # a temporary of this call: a slot of the thread's scratch
            target = ("scratch", len(temps))
            temps.append((t.shape, t.dtype))
        steps.append((KERNELS[node.op], OUT_KERNELS.get(node.op),
                      tuple(index[x] for x in node.inputs), dict(node.attrs), target))
        made[p] = (len(steps) - 1, t.shape)
    sources = []        # region input -> ("in", j) or ("pro", step)
    shapes = []
    for v in lay.region_inputs:
        if v in index:
            sources.append((0, index[v]))
            shapes.append(tuple(in_shapes[index[v]]))
        elif v in made:
            sources.append((1, made[v][0]))
            shapes.append(made[v][1])
        else:
            return None
    where = {o: k for k, o in enumerate(lay.outputs)}
    region_out = [where[v] for v in lay.region_outputs]
    plan = None
    if lay.region:
        found = _region_shapes(lay, shapes)
        if found is None:
            return None
        rshapes, consts, full = found
        n = math.prod(full)
        if _direct(lay, n) and not _numba_first(strategy, n):
            plan = DirectPlan(lay, rshapes, consts, full)
    # outputs that are prologue values without a home of their own are copied at the end
    copies = [(k, made[o][0]) for k, o in enumerate(lay.outputs)
              if o in made and homes.get(o) != k]
    spares = _spare_homes(body, homes)
    scratch = Scratch(temps) if temps else None
    if len(steps) == 1 and spares.get(0) is not None:
        masked = _bind_masked(body, lay, steps[0], made[lay.prologue[0].outputs[0]][1],
                              spares[0], in_shapes, strategy)
        if masked is not None:
            return masked

    def runner(arrays, outs) -> bool:
        if options.fused_strategy != strategy:
            return False
        results = []
        temp = None if scratch is None else scratch.arrays()
        for s, (kernel, out_kernel, ins, attrs, target) in enumerate(steps):
            args = [arrays[j] for j in ins]
            if type(target) is int:
                buf = outs[target]
            else:
                # no home fixed at planning time: the output that could have been one is
                # used when the plan gave it a buffer apart from every input (it was only
                # kept free in case it was written over an input in place)
                k = spares.get(s)
                buf = temp[target[1]]
                if k is not None:
                    o = outs[k]
                    if not any(np.may_share_memory(o, a) for a in arrays):
                        buf = o
            if out_kernel is None or not out_kernel(np, *args, out=buf, **attrs):
                np.copyto(buf, kernel(np, *args, **attrs), casting="unsafe")
            results.append(buf)
        if lay.region:
            ins = [arrays[j] if kind == 0 else results[j] for kind, j in sources]
            region_outs = [outs[k] for k in region_out]
            if plan is not None:
                plan(ins, region_outs)
            else:
                chunked = _plan(body, lay, ins, NUMBA_MIN_PLANNED, plans=plans)
                if chunked is False:
                    return False
                chunked(ins, region_outs, remember=True)
        for k, step in copies:
            np.copyto(outs[k], results[step], casting="unsafe")
        return True
    if len(steps) == 1 and not copies and lay.region and strategy == "auto":
        swapped = _bind_swapped(body, lay, steps[0], sources, region_out, strategy, runner)
        if swapped is not None:
            return swapped
    return runner


class CPUFusedCompiler(FusedCompiler):
    """The CPU backend's compiler for fused bodies: ``run`` and ``bind`` above, or op by op
    with the backend's kernels when ``config.fused_strategy`` is ``"ops"``. Its plans, per
    body, are in ``plans`` (``fused_layout.PLANS``, held weakly by the body)."""

    plans = PLANS

    def run(self, body, arrays: Sequence, out: Optional[Sequence] = None) -> Tuple:
        if options.fused_strategy == "ops":
            return super().run(body, arrays, out)
        return run(body, arrays, out)

    def bind(self, body, in_shapes: Sequence[tuple]):
        return bind(body, in_shapes)
