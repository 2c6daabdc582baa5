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

``dg.config.fused_strategy`` (seeded by ``DUOGRAPH_FUSED``) forces one: ``auto``,
``numpy``, ``numba`` or ``ops`` (op by op, the reference). Every op a region or prologue
calls as a whole runs the CPU backend's kernel for it (``tables.KERNELS``), so a fused body
gives the bits the unfused graph gives on this backend.
"""
from __future__ import annotations

import hashlib
import importlib
import math
import re
import sys
import threading
import types
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...graphlib.config import config
from ...graphlib.ir import Value
from ...graphlib.ops.fused import eval_nodes
from ...graphlib.registry import get_op
from ..backend import FusedCompiler, split_body
from ..kernel_cache import cache_dir, write_verified
from . import autotune
from .tables import KERNELS, OUT_KERNELS

# Elements per chunk (float32: 256 KiB per buffer; the few live ones stay in a 2 MiB L2):
# 64K-128K measured fastest here, 8K-16K lose to per-call overhead, 1M+ spill the cache.
CHUNK = 1 << 16
# Regions run straight-line over whole arrays (DirectPlan) up to CHUNK elements, and short
# ones (at most DIRECT_SHORT_OPS ops) up to DIRECT_SHORT_MAX: measured here (a 2-op SGD
# update vs the 10-op GELU chain, float32), chunks lose to whole arrays by 10-25% on a short
# chain up to ~500K elements and win only at millions, while a long chain gains from
# chunks from ~200K on (benchmarks/fusion.py has the sweep).
DIRECT_SHORT_OPS = 3
DIRECT_SHORT_MAX = 1 << 20
# Threads splitting the chunks of one large fused kernel (numpy's ufuncs release the GIL:
# ``config.fused_threads``), from THREAD_MIN_ELEMENTS on; below it the hand-off costs more
# than a second core gives. Off by default (1): two threads measured 1.6x faster on an idle
# 2-core machine, but slower than one next to BLAS (its threads spin on the cores after each
# matmul) or other work.
THREAD_MIN_ELEMENTS = 1 << 20
# Below this many elements a numba kernel saves under ~50 us a call, which rarely repays
# its first compilation (~1 s; later processes load it from the disk cache in ~0.1 s).
NUMBA_MIN_ELEMENTS = 1 << 16
# A planned executable (O2) runs the same kernels step after step, so there the bar is lower:
# from 8K elements a numba region saves several microseconds a call (a float32 bias + ReLU
# over 128 x 256: 3.4 us as one loop, 23-26 us as numpy's add and maximum, whose NaN-aware
# loop is the slow one), which repays a compilation within a training run.
NUMBA_MIN_PLANNED = 1 << 13
# numba kernels run on one thread by default: with parallel=True, numba's OpenMP threads
# and OpenBLAS's threads spin-wait on each other's cores after every call, which measured
# a 12x slower MLP training step on 2 cores. ``config.numba_parallel = True`` turns it on.
# LLVM may contract a * b + c into one fused multiply-add (one rounding instead of two, as
# float reassociation allows): the float32 GELU-tanh chain measured 3.4 -> 2.2 ms on 4M
# elements. No other fast-math flag: NaN and infinity semantics stay IEEE's, and the others
# (arcp, reassoc, nsz, afn) measured no faster here.
NUMBA_FASTMATH = {"contract"}
STRATEGIES = ("auto", "numpy", "numba", "ops")


# -- layout: prologue, region, inputs and outputs of a body ----------------------------------
class Layout:
    """A body split once into prologue nodes, constants and the elementwise region."""

    __slots__ = ("prologue", "constants", "region", "region_inputs", "region_outputs",
                 "outputs", "direct")

    def __init__(self, graph):
        (self.prologue, self.constants, self.region, self.region_inputs,
         self.region_outputs) = split_body(graph)
        self.outputs = list(graph.outputs)
        # no prologue, and the region reads the body's inputs in order: no remapping needed
        self.direct = (not self.prologue and len(self.region_outputs) == len(self.outputs)
                       and len(self.region_inputs) == len(graph.inputs)
                       and all(a is b for a, b in zip(self.region_inputs, graph.inputs)))


def _layout(body) -> Layout:
    lay = body._plans.get(None)
    if lay is None:
        lay = body._plans[None] = Layout(body.graph)
    return lay


def _plan(body, lay: Layout, ins: Sequence[np.ndarray],
          numba_min: Optional[int] = None, transposed: bool = False):
    """The cached plan for region inputs like ``ins``. ``transposed``: a 2-D input that is
    the transpose of a C-contiguous array may be read as such by a numba plan (the caller
    guarantees no output overlaps it)."""
    # the switches a plan depends on are part of its key: a change takes effect at once
    key = (config.fused_strategy, config.numba, config.numba_parallel, numba_min, transposed,
           tuple([(a.shape, a.dtype.char, a.flags.c_contiguous) for a in ins]))
    plan = body._plans.get(key)
    if plan is None:
        with body._lock:
            plan = body._plans.get(key)
            if plan is None:
                plan = body._plans[key] = _build(lay, ins, numba_min, transposed)
    return plan


def run(body, arrays: Sequence, out: Optional[Sequence[np.ndarray]] = None) -> Tuple:
    """Run ``body`` on numpy ``arrays``: prologue whole, then the region's cached plan.
    ``out`` (one preallocated array per output, as the planned runtime gives) receives the
    results instead of fresh arrays."""
    lay = body._plans.get(None) or _layout(body)
    if lay.direct:
        plan = _plan(body, lay, arrays)
        if plan is not False:
            return tuple(plan(arrays, out))
    env: Dict[Value, object] = {v: a for v, a in zip(body.graph.inputs, arrays)}
    if lay.prologue:
        eval_nodes(lay.prologue, env, np, body.graph.outputs + lay.region_inputs, KERNELS)
    ins = [env[v] for v in lay.region_inputs]
    where = {o: k for k, o in enumerate(lay.outputs)}
    if lay.region:
        plan = _plan(body, lay, ins)
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


def _outputs(full: tuple, dtypes, out, contiguous: bool) -> Tuple[list, list]:
    """(arrays to return, arrays to write): fresh ones, or the caller's ``out``; a
    non-contiguous ``out`` where the plan needs reshaped views gets a temporary (the
    caller copies it back)."""
    if out is None:
        outs = [np.empty(full, d) for d in dtypes]
        return outs, outs
    work = [o if (o.flags.c_contiguous or not contiguous) else np.empty(full, d)
            for o, d in zip(out, dtypes)]
    return list(out), work


def _copy_back(outs: list, work: list) -> None:
    for o, w in zip(outs, work):
        if o is not w:
            np.copyto(o, w)


def _direct(lay: Layout, n: int) -> bool:
    """Whether a region of ``n`` elements runs straight-line (DirectPlan) or in chunks."""
    return n <= CHUNK or (len(lay.region) <= DIRECT_SHORT_OPS and n <= DIRECT_SHORT_MAX)


def _region_shapes(lay: Layout, in_shapes: Sequence[tuple]):
    """(shape of every region value, constant arrays, the iteration shape) for region
    inputs of ``in_shapes``, or None when the region cannot run as one loop (outputs of
    different shapes, an empty iteration space)."""
    shapes: Dict[Value, tuple] = {v: tuple(s) for v, s in zip(lay.region_inputs, in_shapes)}
    consts: Dict[Value, np.ndarray] = {}
    for c in lay.constants:
        arr = np.asarray(KERNELS[c.op](np, **c.attrs))
        consts[c.outputs[0]] = arr
        shapes[c.outputs[0]] = arr.shape
    try:
        for n in lay.region:
            s = np.broadcast_shapes(*[shapes[x] for x in n.inputs])
            for o in n.outputs:
                shapes[o] = s
        out_shapes = [shapes[v] for v in lay.region_outputs]
        full = np.broadcast_shapes(*out_shapes)
    except ValueError:
        return None
    if any(s != full for s in out_shapes) or math.prod(full) == 0:
        return None
    return shapes, consts, full


def bind(body, in_shapes: Sequence[tuple]):
    """A runner ``runner(arrays, outs) -> bool`` for a body whose inputs will always have
    ``in_shapes`` (the planned runtime knows every shape of a program in advance), skipping
    the per-call plan lookup; it returns False (the caller then takes the general path)
    once the strategy has been changed. None when no such shortcut applies: only small
    regions without a prologue, whose plan (``DirectPlan``) depends on shapes alone."""
    strategy = config.fused_strategy
    if strategy not in ("auto", "numpy"):
        return None
    lay = _layout(body)
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
            if config.fused_strategy != strategy:
                return False
            plan = _plan(body, lay, arrays, NUMBA_MIN_PLANNED)
            if plan is False:
                return False
            plan(arrays, outs, remember=True)
            return True
        return planned
    plan = DirectPlan(lay, shapes, consts, full)

    def runner(arrays, outs) -> bool:
        if config.fused_strategy != strategy:
            return False
        plan(arrays, outs)
        return True
    return runner


def _numba_first(strategy: str, n: int) -> bool:
    """Whether a planned region of ``n`` elements tries a numba plan before numpy's."""
    return strategy == "auto" and n >= NUMBA_MIN_PLANNED and numba_available()


def _bind_gemm_update(body, in_shapes: Sequence[tuple], strategy: str):
    """A runner for ``P - s * (A @ B)`` (or ``P + s * (A @ B)``): an SGD step on a weight
    whose gradient is that product, as one gemm with alpha = -s (or s) and beta = 1 into the
    output, over P's own buffer when the plan updates P in place (see ``_cblas``). None for
    any other body, or where numpy's BLAS cannot be called."""
    from . import cblas as _cblas
    if not _cblas.available():
        return None
    g = body.graph
    nodes = [n for n in g.nodes if not n.op.constant]
    if len(nodes) != 3 or [n.op.name for n in nodes[:2]] != ["matmul", "mul"] \
            or nodes[2].op.name not in ("sub", "add") or len(g.outputs) != 1 \
            or g.outputs[0] is not nodes[2].outputs[0]:
        return None
    mm, mul, last = nodes
    index = {v: j for j, v in enumerate(g.inputs)}
    prod, scaled = mm.outputs[0], mul.outputs[0]
    if any(x not in index for x in mm.inputs) or not any(x is prod for x in mul.inputs):
        return None
    scale = mul.inputs[1] if mul.inputs[0] is prod else mul.inputs[0]
    if last.op.name == "sub" and last.inputs[1] is scaled:
        base, sign = last.inputs[0], -1.0
    elif last.op.name == "add" and any(x is scaled for x in last.inputs):
        base, sign = last.inputs[1] if last.inputs[0] is scaled else last.inputs[0], 1.0
    else:
        return None
    if base not in index or base is scale:
        return None
    shapes = [tuple(s) for s in in_shapes]
    ia, ib, ip = index[mm.inputs[0]], index[mm.inputs[1]], index[base]
    if len(shapes[ia]) != 2 or len(shapes[ib]) != 2 \
            or shapes[ip] != (shapes[ia][0], shapes[ib][1]):
        return None
    if len({v.dtype for v in (mm.inputs[0], mm.inputs[1], prod, scaled, base, scale)}) != 1:
        return None
    if scale in index and math.prod(shapes[index[scale]]) == 1:
        js, fixed = index[scale], None
    elif scale.node is not None and scale.node.op.constant \
            and not hasattr(scale.node.attrs["value"], "array"):
        js, fixed = None, float(scale.node.attrs["value"])
    else:
        return None

    gemm = _cblas.GemmUpdate()

    def runner(arrays, outs) -> bool:
        if config.fused_strategy != strategy:
            return False
        p, out = arrays[ip], outs[0]
        if out is not p and np.may_share_memory(out, p):
            return False
        s = fixed if js is None else float(arrays[js].reshape(-1)[0])
        if out is not p:
            np.copyto(out, p)
        # False: nothing but P's copy written; the general path then computes the whole body
        return gemm(arrays[ia], arrays[ib], out, sign * s, 1.0)
    return runner


def _bind_prologue(body, lay: Layout, in_shapes: Sequence[tuple], strategy: str):
    """``bind`` for a body opened by a matmul or reduction: the prologue writes with its
    ``out=`` kernel into its home output (``FusedBody.prologue_homes``) or a buffer made
    here, once; the region then runs over it (a DirectPlan when small, else the cached
    chunk or numba plan). None where the prologue is not simple (several outputs, or
    inputs that are not the body's own)."""
    from ...graphlib.types import TensorType
    g = body.graph
    index = {v: j for j, v in enumerate(g.inputs)}
    types = {v: TensorType(tuple(s), v.dtype) for v, s in zip(g.inputs, in_shapes)}
    homes = body.prologue_homes()
    steps = []          # (kernel, out_kernel, input indices, attrs, home k or scratch array)
    made: Dict[Value, tuple] = {}
    for node in lay.prologue:
        if len(node.outputs) != 1 or any(x not in index for x in node.inputs):
            return None
        (t,) = node.op.infer([types[x] for x in node.inputs], node.attrs)
        if any(not isinstance(d, int) for d in t.shape):
            return None
        p = node.outputs[0]
        home = homes.get(p)
        target = home if home is not None else np.empty(t.shape, t.dtype)
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
    if len(steps) == 1 and spares.get(0) is not None:
        masked = _bind_masked(body, lay, steps[0], made[lay.prologue[0].outputs[0]][1],
                              spares[0], in_shapes, strategy)
        if masked is not None:
            return masked

    def runner(arrays, outs) -> bool:
        if config.fused_strategy != strategy:
            return False
        results = []
        for s, (kernel, out_kernel, ins, attrs, target) in enumerate(steps):
            args = [arrays[j] for j in ins]
            if type(target) is int:
                buf = outs[target]
            else:
                # no home fixed at planning time: the output that could have been one is
                # used when the plan gave it a buffer apart from every input (it was only
                # kept free in case it was written over an input in place)
                k = spares.get(s)
                buf = target
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
                chunked = _plan(body, lay, ins, NUMBA_MIN_PLANNED)
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


def _bind_swapped(body, lay: Layout, step, sources, region_out, strategy: str, general):
    """A runner for ``epilogue(x @ W.T)``, a Linear layer with its bias and activation
    fused, that computes the product as ``W @ x.T`` into a scratch and runs the epilogue's
    numba loop reading that scratch transposed: OpenBLAS multiplies a C-contiguous ``x``
    by a transposed ``W`` slower than the swapped form at small batches (784 -> 256,
    float32, 128 rows: 602 -> 563 us with a bias + ReLU epilogue), and the epilogue pass
    does the transposition for free. Chosen per shape at the first call, and only where
    both products give the same bits (``autotune.same_bits``), the whole body gave the
    same bits both ways on those operands, and the swapped run was faster; otherwise, and
    for operands of other layouts, ``general`` runs. None for other bodies."""
    _, _, ins, attrs, _ = step
    node = lay.prologue[0]
    product = node.outputs[0]
    if node.op.name != "matmul" or attrs or len(ins) != 2 or not numba_available() \
            or any(o is product for o in body.graph.outputs) \
            or sum(1 for kind, _ in sources if kind == 1) != 1:
        return None
    ia, ib = ins
    scratch: Dict[tuple, np.ndarray] = {}
    choices: Dict[tuple, bool] = {}

    def swapped(arrays, outs) -> bool:
        a, b = arrays[ia], arrays[ib]
        key = (a.shape, b.shape, a.dtype)
        held = scratch.get(key)
        if held is None:
            zt = np.empty((b.shape[1], a.shape[0]), a.dtype)
            held = scratch[key] = (zt, zt.T)   # one view object: the plan's memo sees it
        zt, product_view = held
        np.matmul(b.T, a.T, out=zt)
        rins = [arrays[j] if kind == 0 else product_view for kind, j in sources]
        plan = _plan(body, lay, rins, NUMBA_MIN_PLANNED, transposed=True)
        if plan is False:
            return False
        plan(rins, [outs[k] for k in region_out], remember=True)
        return True

    def choose(arrays, outs) -> bool:
        a, b = arrays[ia], arrays[ib]
        if any(np.may_share_memory(o, x) for o in outs for x in arrays) \
                or not autotune.same_bits(a, b):
            return False              # (an output over an input: the body runs once only)
        if not general(arrays, outs):
            return False
        want = [o.copy() for o in outs]
        if not swapped(arrays, outs) or not all(
                np.array_equal(o, w, equal_nan=True) for o, w in zip(outs, want)):
            general(arrays, outs)
            return False
        return _runs_faster(swapped, general, arrays, outs)

    def runner(arrays, outs) -> bool:
        if config.fused_strategy != strategy:
            return False
        a, b = arrays[ia], arrays[ib]
        if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 \
                or b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind != "f" \
                or a.dtype.itemsize < 4 or not a.flags.c_contiguous \
                or b.flags.c_contiguous or not b.T.flags.c_contiguous \
                or a.shape[0] < 2 or b.shape[1] < 2 \
                or a.shape[0] * b.shape[1] < NUMBA_MIN_PLANNED:
            return general(arrays, outs)
        key = (a.shape, b.shape, a.dtype)
        choice = choices.get(key)
        if choice is None:
            # (choose runs the body only where no output overlaps an input: once more is
            # harmless there)
            choice = choices[key] = choose(arrays, outs)
            if not choice:
                scratch.pop(key, None)    # the product's transposed buffer is not needed
        return swapped(arrays, outs) if choice else general(arrays, outs)
    return runner


def _runs_faster(new, old, arrays, outs) -> bool:
    """Whether ``new(arrays, outs)`` ran at least 3% faster than ``old`` (best of five
    each, interleaved); both write the same outputs, which overlap no input."""
    return autotune.runs_faster(lambda: new(arrays, outs), lambda: old(arrays, outs), 5, 0.97)


def _spare_homes(body, homes: Dict[Value, int]) -> Dict[int, int]:
    """prologue step -> the output its result may be computed in when, at run time, that
    output's buffer overlaps no input: an output of the same type, made by an elementwise
    node at or after the step's last read, that is no other value's home. The same rule as
    ``FusedBody.prologue_homes`` without its reservation for in-place writes."""
    g = body.graph
    made, last_read = body._order()
    taken = set(homes.values())
    spares: Dict[int, int] = {}
    prologue = [n for n in g.nodes if not n.op.elementwise and not n.op.constant]
    for s, node in enumerate(prologue):
        p = node.outputs[0]
        if p in homes or any(p is o for o in g.outputs):   # (an output: copied at the end)
            continue
        k = next((k for k, o in enumerate(g.outputs)
                  if k not in taken and o in made and o is not p
                  and g.nodes[made[o]].op.elementwise and o.type == p.type
                  and made[o] >= last_read.get(p, -1)), None)
        if k is not None:
            spares[s] = k
            taken.add(k)
    return spares


_COMPARE = {"gt": "greater", "ge": "greater_equal", "lt": "less", "le": "less_equal",
            "eq": "equal", "ne": "not_equal"}


def _bind_masked(body, lay: Layout, step, p_shape: tuple, k: int,
                 in_shapes: Sequence[tuple], strategy: str):
    """A runner for ``where(cmp(z, c), x @ w, 0)`` (a ReLU's backward ``(g @ W.T) *
    (z > 0)``) whose output may be written over ``z`` in place: the mask is taken first
    into a small bool buffer, then the product goes straight into the output and the mask
    is applied there in one pass (the bits times 0 or 1, ``select.where_bits``): no
    float-sized scratch and no extra pass. The same BLAS call and the same selected bits
    as the general path. None for any other body."""
    from .select import where_bits
    g = body.graph
    if len(lay.region) != 2 or len(lay.outputs) != 1 or len(lay.prologue) != 1:
        return None
    cmp_node, sel = lay.region
    p = lay.prologue[0].outputs[0]
    consts = {c.outputs[0]: c for c in lay.constants}
    index = {v: j for j, v in enumerate(g.inputs)}
    if (cmp_node.op.name not in _COMPARE or sel.op.name != "where"
            or len(cmp_node.inputs) != 2 or cmp_node.inputs[0] not in index
            or cmp_node.inputs[1] not in consts or len(sel.inputs) != 3
            or sel.inputs[0] is not cmp_node.outputs[0] or sel.inputs[1] is not p
            or sel.inputs[2] not in consts or lay.outputs[0] is not sel.outputs[0]):
        return None
    z = cmp_node.inputs[0]
    zero = np.asarray(KERNELS[consts[sel.inputs[2]].op](np, **consts[sel.inputs[2]].attrs))
    cval = np.asarray(KERNELS[consts[cmp_node.inputs[1]].op](
        np, **consts[cmp_node.inputs[1]].attrs))
    dt = np.dtype(p.dtype)
    shape = tuple(in_shapes[index[z]])
    kernel, out_kernel, ins, attrs, _ = step
    if (dt.kind != "f" or zero.shape != () or zero.dtype != dt
            or np.signbit(zero) or zero != 0 or cval.shape != ()
            or np.dtype(z.dtype).kind != "f" or tuple(p_shape) != shape):
        return None
    mask = np.empty(shape, bool)
    name = cmp_node.op.name
    ufunc = getattr(np, _COMPARE[name])
    zj = index[z]
    loops = None
    if strategy == "auto" and numba_available():
        try:
            loops = load_kernel(_MASK_SOURCE.replace("CMP", _COMPARE_SYMBOL[name]))
        except Exception:           # (numba refused it: the numpy passes below serve)
            loops = None
    c = cval[()]

    def runner(arrays, outs) -> bool:
        if config.fused_strategy != strategy:
            return False
        out = outs[k]
        zarr = arrays[zj]
        args = [arrays[j] for j in ins]
        if (out.shape != shape or zarr.shape != shape
                or any(np.may_share_memory(out, a) for a in args)):
            return False
        fast = loops is not None and out.flags.c_contiguous and zarr.flags.c_contiguous
        apart = not np.may_share_memory(out, zarr)
        if not (fast and apart):
            ufunc(zarr, cval, out=mask)         # z first: the output may be z's buffer
        if out_kernel is None or not out_kernel(np, *args, out=out, **attrs):
            np.copyto(out, kernel(np, *args, **attrs), casting="unsafe")
        if fast:
            # one loop zeroing the product where the mask fails (the bits kept elsewhere)
            loops(zarr.reshape(-1) if apart else mask.reshape(-1), out.reshape(-1), c,
                  apart)
        elif not where_bits(np, mask, out, zero, out):
            np.copyto(out, np.where(mask, out, zero))
        return True
    return runner


_COMPARE_SYMBOL = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}
# the masking loop of _bind_masked: out[i] = +0.0 where not (z[i] CMP c) (or where the
# precomputed mask is False); numba compares IEEE as numpy does (NaN fails all but !=)
_MASK_SOURCE = """from numba import njit


@njit(cache=True, nogil=True)
def kernel(src, out, c, compare):
    if compare:
        for i in range(out.size):
            if not (src[i] CMP c):
                out[i] = 0.0
    else:
        for i in range(out.size):
            if not src[i]:
                out[i] = 0.0
"""


def _build(lay: Layout, ins: Sequence[np.ndarray], numba_min: Optional[int] = None,
           transposed: bool = False):
    """The plan for region inputs shaped like ``ins``: a numba or chunked numpy callable, or
    False where neither applies (outputs of different shapes, empty arrays)."""
    found = _region_shapes(lay, [a.shape for a in ins])
    if found is None:
        return False
    shapes, consts, full = found
    strategy = config.fused_strategy
    if strategy in ("auto", "numba"):
        plan = NumbaPlan.build(lay, ins, shapes, consts, full, forced=strategy == "numba",
                               min_elements=numba_min, transposed=transposed)
        if plan is not None:
            return plan
    if _direct(lay, math.prod(full)):
        return DirectPlan(lay, shapes, consts, full)
    return ChunkPlan(lay, ins, shapes, consts, full)


# -- numpy over cache-sized chunks ---------------------------------------------------------
# op -> (numpy ufunc, rule): "same" when every input has the output's dtype (then the ufunc
# is exactly what the op's kernel computes), "raw" when the kernel is the bare ufunc.
_UFUNCS = {
    "add": ("add", "same"), "sub": ("subtract", "same"), "mul": ("multiply", "same"),
    "div": ("true_divide", "same"), "maximum": ("maximum", "same"),
    "minimum": ("minimum", "same"), "pow": ("power", "same"), "neg": ("negative", "same"),
    "abs": ("absolute", "same"), "exp": ("exp", "same"), "log": ("log", "same"),
    "sqrt": ("sqrt", "same"), "reciprocal": ("reciprocal", "same"), "sin": ("sin", "same"),
    "cos": ("cos", "same"), "tanh": ("tanh", "same"),
    "eq": ("equal", "raw"), "ne": ("not_equal", "raw"), "lt": ("less", "raw"),
    "le": ("less_equal", "raw"), "gt": ("greater", "raw"), "ge": ("greater_equal", "raw"),
    "logical_and": ("logical_and", "raw"), "logical_or": ("logical_or", "raw"),
    "logical_not": ("logical_not", "raw"),
}


def _ufunc_lines(node, names: List[str], out: str) -> Optional[List[str]]:
    """numpy calls writing ``node``'s result into ``out`` exactly as its kernel would compute
    it, or None when only the kernel itself is exact (mixed dtypes, composite ops)."""
    name = node.op.name
    dt = node.outputs[0].dtype
    same = all(x.dtype == dt for x in node.inputs)
    is_float = dt.startswith("float")
    entry = _UFUNCS.get(name)
    if entry is not None and (entry[1] == "raw" or same):
        return [f"np.{entry[0]}({', '.join(names)}, out={out})"]
    a = names[0] if names else ""
    if name == "cast":
        return [f"np.copyto({out}, {a}, casting='unsafe')"]
    if not same:
        return None
    if name == "square":
        return [f"np.multiply({a}, {a}, out={out})"]
    if name == "relu":
        return [f"np.maximum({a}, 0, out={out})"]
    if name == "stop_gradient":
        return [f"np.copyto({out}, {a}, casting='unsafe')"]
    if name == "rsqrt" and is_float:
        return [f"np.sqrt({a}, out={out})", f"np.reciprocal({out}, out={out})"]
    return None                 # (sigmoid: its kernel, split at 0 to keep both tails)


class _Scratch:
    """The scratch buffers of generated region code, reused by liveness: a value's buffer
    goes back to the pool at its last read (once, however many operands name it), before
    the reading node takes a buffer for its own result (ufuncs allow exact overlap)."""

    def __init__(self, region):
        self.specs: List[tuple] = []            # (shape, dtype) per buffer
        self._free: Dict[tuple, List[int]] = {}
        self._owner: Dict[Value, int] = {}        # value -> buffer index
        self._last = {x: i for i, node in enumerate(region) for x in node.inputs}

    def release_inputs(self, node, at: int) -> None:
        for key in dict.fromkeys(x for x in node.inputs):
            b = self._owner.get(key)
            if b is not None and self._last.get(key) == at:
                self._free.setdefault(self.specs[b], []).append(b)

    def take(self, value, spec: tuple) -> int:
        pool = self._free.get(spec)
        b = pool.pop() if pool else None
        if b is None:
            b = len(self.specs)
            self.specs.append(spec)
        self._owner[value] = b
        return b


def _call(node, i: int, args: List[str], glob) -> str:
    """The code calling ``node``'s own kernel (``K{i}``, attrs ``A{i}``) on ``args``."""
    glob[f"K{i}"] = KERNELS[node.op]
    glob[f"A{i}"] = dict(node.attrs)
    return f"K{i}(np, {', '.join(args)}, **A{i})" if args else f"K{i}(np, **A{i})"


def _emit(node, i: int, args: List[str], call: str, glob, body: List[str],
          out: Optional[str], scratch) -> str:
    """Append the code computing ``node`` to ``body`` and return the name holding its
    result: ``out`` (a region output), a scratch buffer from ``scratch()`` where a ufunc
    or out= kernel can write one, or a fresh ``t{i}`` from the kernel itself."""
    target = out
    if target is None and (_ufunc_lines(node, args, "T") is not None
                           or OUT_KERNELS.get(node.op) is not None):
        target = scratch()
    lines = _ufunc_lines(node, args, target) if target else None
    if lines is not None:
        body.extend(lines)
    elif target is not None:
        body.extend(_kernel_lines(node, i, args, target, call, glob))
    else:
        target = f"t{i}"
        body.append(f"{target} = {call}")
    return target


def _kernel_lines(node, i: int, args: List[str], target: str, call: str, glob) -> List[str]:
    """Code writing ``node``'s result into ``target`` with the op's out= kernel (which
    tolerates ``target`` sharing bytes with an input, as in-place elementwise kernels
    must), or its kernel and a copy where it has none or declines the operands."""
    copy = f"np.copyto({target}, {call}, casting='unsafe')"
    out_kernel = OUT_KERNELS.get(node.op)
    if out_kernel is None:
        return [copy]
    glob[f"OK{i}"] = out_kernel
    head = ", ".join(["np"] + args)
    return [f"if not OK{i}({head}, out={target}, **A{i}):", "    " + copy]


class DirectPlan:
    """Generated straight-line numpy for a small region: each op one ufunc call (``out=``
    into the output or a scratch buffer reused by liveness), on whole arrays."""

    def __init__(self, lay: Layout, shapes, consts, full: tuple):
        self.full = full
        self.out_dtypes = [np.dtype(v.dtype) for v in lay.region_outputs]
        region_out = {v: k for k, v in enumerate(lay.region_outputs)}
        glob: Dict[str, object] = {"np": np}
        name: Dict[Value, str] = {}
        for j, v in enumerate(lay.region_inputs):
            name[v] = f"i{j}"
        for j, (key, arr) in enumerate(consts.items()):
            glob[f"k{j}"] = arr[()] if arr.ndim == 0 else arr
            name[key] = f"k{j}"
        for dt in {v.dtype for n_ in lay.region for v in n_.outputs}:
            glob[f"HALF_{dt}"] = np.dtype(dt).type(0.5)
        pool = _Scratch(lay.region)
        self.scratch = pool.specs
        body: List[str] = []
        for i, node in enumerate(lay.region):
            v = node.outputs[0]
            args = [name[x] for x in node.inputs]
            call = _call(node, i, args, glob)
            pool.release_inputs(node, i)
            k = region_out.get(v)
            out = f"o{k}" if k is not None else None
            name[v] = _emit(node, i, args, call, glob, body, out, lambda: "s{}".format(
                pool.take(v, (tuple(shapes[v]), np.dtype(v.dtype)))))
        n_in, n_out = len(lay.region_inputs), len(lay.region_outputs)
        head = [f"i{j} = ins[{j}]" for j in range(n_in)]
        head += [f"o{k} = outs[{k}]" for k in range(n_out)]
        head += [f"s{b} = scratch[{b}]" for b in range(len(self.scratch))]
        src = ["def region(ins, outs, scratch):"] + ["    " + t for t in head + body]
        src.append("    pass")
        self.source = "\n".join(src) + "\n"
        exec(compile(self.source, "<fused direct>", "exec"), glob)
        self.fn = glob["region"]
        self._local = threading.local()

    def __call__(self, ins: Sequence[np.ndarray], out=None,
                 remember: bool = False) -> List[np.ndarray]:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = [np.empty(s, d) for s, d in self.scratch]
        if out is None:
            out = [np.empty(self.full, d) for d in self.out_dtypes]
        self.fn(ins, out, scratch)
        return out


class ChunkPlan:
    """Generated numpy code running the region chunk by chunk over its leading axis.

    Values are *sliced* (they span the whole leading axis: a chunk of them is computed per
    step) or *whole* (smaller, broadcast: computed once before the loop). Sliced
    intermediates live in scratch buffers of one chunk, assigned by liveness so a dead
    value's buffer is reused (in place, as ufuncs allow).
    """

    def __init__(self, lay: Layout, ins, shapes, consts, full: tuple):
        self.full = full
        self.out_dtypes = [np.dtype(v.dtype) for v in lay.region_outputs]
        n = self.size = math.prod(full)
        flat = (all((a.shape == full and a.flags.c_contiguous) or a.size == 1 for a in ins)
                and all(a.size == 1 for a in consts.values()))
        self.flat = flat
        if flat:   # every input is the whole iteration space or one element: go 1-D
            self.prep = ["flat" if a.shape == full else "scalar" for a in ins]
            lead, inner, rank = n, 1, 1

            def rank_shape(s):
                return (n,) if s == full else ()
        else:
            self.prep = ["keep"] * len(ins)
            lead, inner, rank = full[0], math.prod(full[1:]), len(full)

            def rank_shape(s):
                return s
        rows = max(1, CHUNK // max(inner, 1))
        if lead <= rows + rows // 2:
            rows = lead
        self.lead, self.rows = lead, rows

        region_out = {v: k for k, v in enumerate(lay.region_outputs)}
        pshape = {k: rank_shape(s) for k, s in shapes.items()}

        def sliced(v) -> bool:
            s = pshape[v]
            return len(s) == rank and rank > 0 and s[0] == lead

        name: Dict[Value, str] = {}
        glob: Dict[str, object] = {"np": np}
        head, pre, loop_views, body = [], [], [], []
        for j, v in enumerate(lay.region_inputs):
            head.append(f"i{j} = ins[{j}]")
            if sliced(v):
                loop_views.append(f"x{j} = i{j}[lo:hi]")
                name[v] = f"x{j}"
            else:
                name[v] = f"i{j}"
        for j, (key, arr) in enumerate(consts.items()):
            glob[f"k{j}"] = arr[()] if arr.ndim == 0 else arr   # a numpy scalar: cheaper
            name[key] = f"k{j}"
        for k in range(len(lay.region_outputs)):
            head.append(f"o{k} = outs[{k}]")
            loop_views.append(f"r{k} = o{k}[lo:hi]")
        for dt in {v.dtype for n_ in lay.region for v in n_.outputs}:
            glob[f"HALF_{dt}"] = np.dtype(dt).type(0.5)

        # liveness of sliced values, for scratch reuse
        pool = _Scratch(lay.region)
        self.scratch = pool.specs       # (chunk shape, dtype) per buffer
        for i, node in enumerate(lay.region):
            v = node.outputs[0]
            args = [name[x] for x in node.inputs]
            call = _call(node, i, args, glob)
            if not sliced(v):
                pre.append(f"w{i} = {call}")
                name[v] = f"w{i}"
                continue
            pool.release_inputs(node, i)
            k = region_out.get(v)
            out = f"r{k}" if k is not None else None
            name[v] = _emit(node, i, args, call, glob, body, out, lambda: "b{}".format(
                pool.take(v, ((rows,) + pshape[v][1:], np.dtype(v.dtype)))))
        views_full = [f"b{b} = s{b}" for b in range(len(self.scratch))]
        views_tail = [f"b{b} = s{b}[:hi - lo]" for b in range(len(self.scratch))]
        head += [f"s{b} = scratch[{b}]" for b in range(len(self.scratch))]
        src = ["def region(ins, outs, scratch, start, stop):"]
        src += ["    " + s for s in head + pre]
        src.append(f"    for lo in range(start, stop, {rows}):")
        src.append(f"        hi = lo + {rows}")
        src.append("        if hi > stop:")
        src.append("            hi = stop")
        src += ["            " + s for s in views_tail]
        if views_full:
            src.append("        else:")
            src += ["            " + s for s in views_full]
        src += ["        " + s for s in loop_views + body]
        self.source = "\n".join(src) + "\n"
        exec(compile(self.source, "<fused chunks>", "exec"), glob)
        self.fn = glob["region"]
        self._local = threading.local()

    def _part(self, ins, views, start: int, stop: int, err=None) -> None:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = [np.empty(s, d) for s, d in self.scratch]
        if err is None:
            self.fn(ins, views, scratch, start, stop)
        else:                 # a pool thread: the caller's floating-point error settings
            with np.errstate(**err):
                self.fn(ins, views, scratch, start, stop)

    def __call__(self, ins: Sequence[np.ndarray], out=None,
                 remember: bool = False) -> List[np.ndarray]:
        outs, work = _outputs(self.full, self.out_dtypes, out, self.flat)
        if self.flat:
            ins = [a.reshape(-1) if p == "flat" else a.reshape(())
                   for a, p in zip(ins, self.prep)]
            views = [o.reshape(-1) for o in work]
        else:
            views = work
        lead, rows = self.lead, self.rows
        threads = min(config.fused_threads, lead // rows)
        if threads < 2 or self.size < THREAD_MIN_ELEMENTS:
            self._part(ins, views, 0, lead)
            _copy_back(outs, work)
            return outs
        per = -(-lead // threads // rows) * rows          # whole chunks per thread
        pool = _pool(threads)
        err = np.geterr()
        futures = [pool.submit(self._part, ins, views, lo, min(lo + per, lead), err)
                   for lo in range(per, lead, per)]
        self._part(ins, views, 0, per)
        for f in futures:
            f.result()
        _copy_back(outs, work)
        return outs


_executor = None
_executor_size = 0


def _pool(threads: int):
    """The thread pool that runs the other parts of a large chunked kernel (at least
    ``threads - 1`` workers; grown when ``config.fused_threads`` grows)."""
    global _executor, _executor_size
    with _kernels_lock:
        if _executor is None or _executor_size < threads - 1:
            from concurrent.futures import ThreadPoolExecutor
            _executor_size = max(threads - 1, 1)
            _executor = ThreadPoolExecutor(_executor_size, thread_name_prefix="dg-fused")
    return _executor


# -- numba, generated from the expr templates ----------------------------------------------
_numba_state: Dict[str, object] = {}


def numba_available() -> bool:
    """Whether numba imports (it is the optional ``fast`` extra) and is not turned off with
    ``config.numba = False`` (every numba kernel then gives way to numpy's: fused regions,
    convolutions, pooling, batch norm)."""
    if not config.numba:
        return False
    if "ok" not in _numba_state:
        try:
            import numba  # noqa: F401
            _numba_state["ok"] = True
        except Exception:  # noqa: BLE001 - any import failure means no numba
            _numba_state["ok"] = False
    return bool(_numba_state["ok"])


def numba_module(name: str):
    """The module ``runtime.cpu.<name>`` of hand-written numba kernels (``conv_numba``,
    ``norm_numba``), imported once; None where numba is not available, or (with a warning)
    where the module fails to import."""
    if not config.numba:
        return None
    key = "module:" + name
    if key not in _numba_state:
        module = None
        if numba_available():
            try:
                module = importlib.import_module(f"{__package__}.{name}")
            except Exception as exc:  # noqa: BLE001 - a broken numba means numpy's kernels
                warnings.warn(f"duograph: numba kernels {name} unavailable ({exc}); using "
                              "numpy", RuntimeWarning, stacklevel=2)
        _numba_state[key] = module
    return _numba_state[key]


# Ops whose numba form measured faster than numpy's chunks (benchmarks/fusion.py); float32
# adds the tanh family, computed by the vectorisable rational approximation below. Keyed by
# the OpDef (a name that is not a registered op fails here, at import, instead of drifting).
NUMBA_FAST = frozenset(get_op(name) for name in (
    "neg", "abs", "square", "reciprocal", "rsqrt", "sqrt", "add", "sub", "mul", "div",
    "maximum", "minimum", "relu", "leaky_relu", "where", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_not", "cast", "stop_gradient", "sign"))
NUMBA_FAST_F32 = frozenset(get_op(name) for name in ("tanh", "sigmoid", "gelu"))
_GELU = get_op("gelu")

_HELPERS = '''
@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _maximum(a, b):
    # numpy's maximum: NaN from either side, b where they are equal (max(-0.0, 0.0) is 0.0)
    return a if (a > b or a != a) else b


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _minimum(a, b):
    return a if (a < b or a != a) else b


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _floor_divide(a, b):
    # Python's and numpy's floor division (0.5 // -inf is -1, -inf // 2 NaN), which numba's
    # np.floor_divide is not for infinities
    return a // b


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _pow(a, b):
    return a ** b


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _tanh_f32(x):
    # Eigen's float tanh: a 13/6 rational approximation on [-7.9, 7.9], a few ulp; it
    # vectorises (libm tanhf does not: no SVML here). NaN passes through; exactly +-1 past 9.
    y = x
    if y > F(7.90531110763549805):
        y = F(7.90531110763549805)
    if y < F(-7.90531110763549805):
        y = F(-7.90531110763549805)
    y2 = y * y
    p = y2 * F(-2.76076847742355e-16) + F(2.00018790482477e-13)
    p = y2 * p + F(-8.60467152213735e-11)
    p = y2 * p + F(5.12229709037114e-08)
    p = y2 * p + F(1.48572235717979e-05)
    p = y2 * p + F(6.37261928875436e-04)
    p = y2 * p + F(4.89352455891786e-03)
    p = y * p
    q = y2 * F(1.19825839466702e-06) + F(1.18534705686654e-04)
    q = y2 * q + F(2.26843463243900e-03)
    q = y2 * q + F(4.89352518554385e-03)
    r = p / q
    # float32 tanh rounds to exactly +-1 from |x| = 9 on: so 1 + tanh(-inf) is 0 and
    # gelu(-inf) NaN, as numpy gives, whatever the multiply-add contraction did to r
    # (and NaN stays NaN: the test is false for it)
    r = (F(1.0) if x > F(0.0) else F(-1.0)) if abs(x) >= F(9.0) else r
    return x if abs(x) < F(0.0004) else r


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _tanh(x):
    return TANH(x)


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _gelu_tanh(x):
    inner = F(0.7978845608028654) * (x + F(0.044715) * x * x * x)
    return F(0.5) * x * (F(1.0) + _tanh(inner))


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _gelu_none(x):
    return F(0.5) * x * (F(1.0) + F(math.erf(x / F(1.4142135623730951))))


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _sigmoid(x):
    return F(1) / (F(1) + np.exp(-x)) if x >= F(0) else np.exp(x) / (F(1) + np.exp(x))
'''

_FUNCS = {"exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "sin": "np.sin",
          "cos": "np.cos", "tanh": "_tanh", "abs": "abs", "max": "_maximum",
          "min": "_minimum", "pow": "_pow", "erf": "math.erf",
          "gelu_tanh": "_gelu_tanh", "gelu_none": "_gelu_none", "tan": "np.tan",
          "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh",
          "cosh": "np.cosh", "asinh": "np.arcsinh", "acosh": "np.arccosh",
          "atanh": "np.arctanh", "log1p": "np.log1p", "expm1": "np.expm1", "log2": "np.log2",
          "log10": "np.log10", "exp2": "np.exp2", "floor": "np.floor", "ceil": "np.ceil",
          "trunc": "np.trunc", "isnan": "np.isnan", "isinf": "np.isinf",
          "isfinite": "np.isfinite", "remainder": "np.remainder", "fmod": "np.fmod",
          "floor_divide": "_floor_divide", "atan2": "np.arctan2", "hypot": "np.hypot",
          "rint": "np.rint"}
_DTYPE_NAMES = {"float16", "float32", "float64", "int32", "int64", "uint8", "bool"}
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|"
                    r"\d+(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|(&&|\|\||==|!=|<=|>=|[-+*/?:!<>(),]))")
_BINARY = {"||": (2, "or"), "&&": (3, "and"), "==": (4, "=="), "!=": (4, "!="),
           "<": (5, "<"), "<=": (5, "<="), ">": (5, ">"), ">=": (5, ">="),
           "+": (6, "+"), "-": (6, "-"), "*": (7, "*"), "/": (7, "/")}


def c_to_python(expr: str, literal: str) -> str:
    """Translate one C-like ``expr`` template (already formatted with operand names) to a
    Python expression for numba; numeric literals become ``literal(x)`` (the compute dtype).

    ``(x0 > 0 ? x0 : x0 * 0.01)`` -> ``(x0 if (x0 > F(0)) else (x0 * F(0.01)))``
    """
    tokens: List[Tuple[str, str]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot translate expr {expr!r} at {expr[pos:]!r}")
        pos = m.end()
        kind = "num" if m.group(1) else "id" if m.group(2) else "op"
        tokens.append((kind, m.group(m.lastindex)))
    tokens.append(("end", ""))
    at = [0]

    def peek(k=0):
        return tokens[at[0] + k]

    def take(want=None):
        tok = tokens[at[0]]
        if want is not None and tok[1] != want:
            raise ValueError(f"cannot translate expr {expr!r}: expected {want!r}")
        at[0] += 1
        return tok

    def primary() -> str:
        kind, text = take()
        if kind == "num":
            return f"{literal}({text})"
        if kind == "id":
            if peek()[1] == "(":
                take("(")
                args = [parse(0)]
                while peek()[1] == ",":
                    take(",")
                    args.append(parse(0))
                take(")")
                if text not in _FUNCS:
                    raise ValueError(f"no numba form for function {text!r}")
                return f"{_FUNCS[text]}({', '.join(args)})"
            return {"inf": f"{literal}(np.inf)", "nan": f"{literal}(np.nan)"}.get(text, text)
        if text == "(":
            if peek()[0] == "id" and peek()[1] in _DTYPE_NAMES and peek(1)[1] == ")":
                dtype = take()[1]
                take(")")
                fn = "np.bool_" if dtype == "bool" else f"np.{dtype}"
                return f"{fn}({unary()})"
            inner = parse(0)
            take(")")
            return f"({inner})"
        raise ValueError(f"cannot translate expr {expr!r}: unexpected {text!r}")

    def unary() -> str:
        text = peek()[1]
        if peek()[0] == "op" and text in ("-", "!"):
            take()
            operand = unary()
            return f"(-{operand})" if text == "-" else f"(not {operand})"
        return primary()

    def parse(min_prec: int) -> str:
        left = unary()
        while True:
            kind, text = peek()
            if kind != "op":
                return left
            if text == "?" and min_prec <= 1:
                take()
                then = parse(0)
                take(":")
                other = parse(1)
                left = f"({then} if {left} else {other})"
                continue
            if text not in _BINARY or _BINARY[text][0] < min_prec:
                return left
            prec, py = _BINARY[text]
            take()
            right = parse(prec + 1)
            left = f"({left} {py} {right})"

    out = parse(0)
    if peek()[0] != "end":
        raise ValueError(f"cannot translate expr {expr!r}: trailing {peek()[1]!r}")
    return out


def _cache_dir() -> str:
    """The private directory for generated kernel sources (and numba's cache beside them):
    created 0700, refused when another user owns it or others can write to it (see
    ``runtime.kernel_cache``)."""
    return cache_dir(config.cache_dir)


_kernels: Dict[str, object] = {}
_kernels_lock = threading.Lock()


def load_kernel(source: str):
    """The ``kernel`` function of generated ``source``, written to a file in the cache
    directory (named by the source's hash) and imported, so numba's ``cache=True`` keeps the
    compiled code across processes."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    with _kernels_lock:
        fn = _kernels.get(digest)
        if fn is not None:
            return fn
        path = write_verified(_cache_dir(), f"fused_{digest}.py", source)
        # Run the source generated here, never the file's bytes (which another process of
        # this user could change after the check); the file only gives numba's cache a home.
        modname = f"_duograph_fused_{digest}"
        mod = types.ModuleType(modname)
        mod.__file__ = path
        sys.modules[modname] = mod
        exec(compile(source, path, "exec"), mod.__dict__)
        fn = _kernels[digest] = mod.kernel
        return fn


class NumbaPlan:
    """One generated ``@njit`` loop over the region (see ``build``)."""

    def __init__(self, source: Callable[[tuple], str], prep: List[str], full: tuple,
                 rows: int, cols: int, out_dtypes, fallback):
        self.make_source = source     # alias pattern -> kernel source (see ``_source``)
        self.prep = prep
        self.full = full
        self.rows, self.cols = rows, cols
        self.out_dtypes = out_dtypes
        self.fallback = fallback      # a ChunkPlan factory, a ChunkPlan once numba failed
        self.failed = False
        self.fns: Dict[tuple, object] = {}
        self.full_inputs = [j for j, p in enumerate(prep) if p == "full"]
        self.scalar_inputs = [j for j, p in enumerate(prep) if p == "scalar"]
        # (inputs, outputs, kernel, its arguments) of the last ``remember`` call (a planned
        # executable's, whose buffers live as long as it does) that wrote straight into the
        # caller's outputs: a call on the same arrays skips the preparation
        self._memo: Optional[tuple] = None

    @classmethod
    def build(cls, lay: Layout, ins, shapes, consts, full: tuple, forced: bool,
              min_elements: Optional[int] = None,
              transposed: bool = False) -> "Optional[NumbaPlan]":
        """A plan when numba is installed, every op translates, the region computes in one
        float dtype (float32/float64, with bools), every input is the whole iteration space,
        a trailing-dims slice of it (a bias) or one element; in ``auto`` mode also only
        when the ops are ones numba runs faster and the arrays are large enough."""
        n = math.prod(full)
        if min_elements is None:
            min_elements = NUMBA_MIN_ELEMENTS
        if (not forced and n < min_elements) or not numba_available():
            return None       # (small arrays never pay numba's import, ~0.4 s)
        values = list(lay.region_inputs) + [c.outputs[0] for c in lay.constants]
        values += [o for node in lay.region for o in node.outputs]
        floats = {v.dtype for v in values if v.dtype != "bool"}
        if len(floats) != 1 or next(iter(floats)) not in ("float32", "float64"):
            return None
        dt = next(iter(floats))
        for node in lay.region:
            if node.op.expr is None:
                return None
            if not forced:
                fast = node.op in NUMBA_FAST or (
                    dt == "float32" and node.op in NUMBA_FAST_F32)
                if not fast or (node.op is _GELU
                                and node.attrs.get("approximate") != "tanh"):
                    return None
        # classify the inputs: full, trailing slice (rows mode), or one element
        prep, suffix = [], set()
        for a in ins:
            s = a.shape
            while s and s[0] == 1:
                s = s[1:]
            if a.size == 1:
                prep.append("scalar")
            elif a.shape == full and a.flags.c_contiguous:
                prep.append("full")
            elif transposed and a.ndim == 2 and a.shape == full and a.T.flags.c_contiguous:
                prep.append("transposed")         # read as a.T[j, r]: rows mode below
            elif a.flags.c_contiguous and 0 < len(s) < len(full) and s == full[-len(s):]:
                prep.append("suffix")
                suffix.add(len(s))
            else:
                return None
        if len(suffix) > 1 or ("transposed" in prep and suffix and suffix != {1}):
            return None
        if "transposed" in prep:          # rows and columns of the 2-D iteration space
            suffix = {1}
        cols = math.prod(full[-suffix.pop():]) if suffix else 1
        rows = n // cols
        plain = cls._source(lay, prep, consts, dt, bool(cols > 1), ())
        if plain is None:
            return None

        def source(alias: tuple) -> str:
            return cls._source(lay, prep, consts, dt, bool(cols > 1), alias) if alias \
                else plain

        def fallback():
            return ChunkPlan(lay, ins, shapes, consts, full)

        out_dtypes = [np.dtype(v.dtype) for v in lay.region_outputs]
        return cls(source, prep, full, rows, cols, out_dtypes, fallback)

    @staticmethod
    def _source(lay: Layout, prep, consts, dt: str, rows_mode: bool,
                alias: tuple) -> Optional[str]:
        """The kernel's source. ``alias`` lists (output, input) pairs where the output is
        that (full) input's own buffer: the kernel then stores into the input instead of
        taking the output as a separate argument. With two arguments over the same memory,
        LLVM's run-time overlap check fails and it runs the scalar loop: an in-place SGD
        update of 200K float32 measured 70 us that way, 20 us with one argument."""
        lit = "F"
        name: Dict[Value, str] = {}
        for j, v in enumerate(lay.region_inputs):
            name[v] = f"x{j}"
        for key, arr in consts.items():
            val = arr.reshape(-1)[0].item() if arr.size == 1 else None
            if val is None:
                return None
            if isinstance(val, bool):
                name[key] = repr(val)
            elif math.isfinite(val):      # a bare literal: the translation types it
                name[key] = f"({float(val)!r})"
            else:
                name[key] = "(nan)" if val != val else "(inf)" if val > 0 else "(-inf)"
        stmts = []
        for i, node in enumerate(lay.region):
            v = node.outputs[0]
            args = [name[x] for x in node.inputs]
            try:
                text = node.op.expr.format(*args, **node.attrs)
                py = c_to_python(text, lit)
            except (ValueError, KeyError, IndexError):
                return None
            if v.dtype == "bool":
                stmts.append(f"v{i} = {py}")
            else:
                stmts.append(f"v{i} = {lit}({py})")
            name[v] = f"v{i}"
        ins = [f"a{j}" for j in range(len(lay.region_inputs))]
        into = dict(alias)
        outs = [f"o{k}" for k in range(len(lay.region_outputs)) if k not in into]
        idx = "r, j" if rows_mode else "i"
        loads = []
        for j, p in enumerate(prep):
            if p == "scalar":
                loads.append(f"x{j} = a{j}")
            elif p == "suffix":
                loads.append(f"x{j} = a{j}[j]")
            elif p == "transposed":
                loads.append(f"x{j} = a{j}[j, r]")
            else:
                loads.append(f"x{j} = a{j}[{idx}]")
        stores = [f"{f'a{into[k]}' if k in into else f'o{k}'}[{idx}] = {name[v]}"
                  for k, v in enumerate(lay.region_outputs)]
        helpers = _HELPERS.replace("TANH", "_tanh_f32" if dt == "float32" else "np.tanh")
        src = ["import math", "", "import numpy as np", "from numba import njit, prange", "",
               f"F = np.{dt}", f"FASTMATH = {NUMBA_FASTMATH!r}", helpers, "",
               f'@njit(parallel={config.numba_parallel}, cache=True, error_model="numpy", '
               f'fastmath=FASTMATH)',
               f"def kernel(rows, cols, {', '.join(ins + outs)}):"]
        if rows_mode:
            src += ["    for r in prange(rows):", "        for j in range(cols):"]
            pad = " " * 12
        else:
            src += ["    for i in prange(rows):"]
            pad = " " * 8
        src += [pad + s for s in loads + stmts + stores]
        return "\n".join(src) + "\n"

    def __call__(self, ins: Sequence[np.ndarray], out=None,
                 remember: bool = False) -> List[np.ndarray]:
        if self.failed:
            return self.fallback(ins, out)
        memo = self._memo
        if memo is not None and out is not None and len(out) == len(memo[1]) \
                and all([a is b for a, b in zip(ins, memo[0])]) \
                and all([o is p for o, p in zip(out, memo[1])]):
            # the same arrays as the last call (a planned executable's buffers, bound
            # state): the same views and alias pattern; one-element inputs are read anew
            fn, args = memo[2], memo[3]
            if self.scalar_inputs:
                args = list(args)
                for j in self.scalar_inputs:
                    args[j] = ins[j].reshape(-1)[0]
            fn(self.rows, self.cols, *args)
            return list(out)
        outs, work = _outputs(self.full, self.out_dtypes, out, True)
        args = []
        for a, p in zip(ins, self.prep):
            if p == "scalar":
                args.append(a.reshape(-1)[0])
            elif p == "suffix":
                args.append(a.reshape(-1))
            elif p == "transposed":
                args.append(a.T)
            elif self.cols > 1:
                args.append(a.reshape(self.rows, self.cols))
            else:
                args.append(a.reshape(-1))
        shape = (self.rows, self.cols) if self.cols > 1 else (-1,)
        views = [o.reshape(shape) for o in work]
        alias = []                # outputs written in place over a full input (see _source)
        for k, v in enumerate(views):
            for j in self.full_inputs:
                a = args[j]
                if work[k] is ins[j] or (np.may_share_memory(a, v) and a.dtype == v.dtype
                                         and a.__array_interface__["data"][0]
                                         == v.__array_interface__["data"][0]):
                    alias.append((k, j))
                    break
        alias = tuple(alias)
        try:
            fn = self.fns.get(alias)
            if fn is None:
                fn = self.fns[alias] = load_kernel(self.make_source(alias))
            if alias:
                into = {k for k, _ in alias}
                views = [v for k, v in enumerate(views) if k not in into]
            fn(self.rows, self.cols, *args, *views)
            if remember and out is not None and all([o is w for o, w in zip(out, work)]):
                self._memo = (tuple(ins), tuple(out), fn, tuple(args) + tuple(views))
        except Exception as e:  # noqa: BLE001 - fall back to numpy, once, with a warning
            warnings.warn(f"duograph: numba could not compile a fused kernel ({e}); using "
                          "numpy chunks instead", RuntimeWarning, stacklevel=2)
            self.failed = True
            self.fallback = self.fallback()
            return self.fallback(ins, out)
        _copy_back(outs, work)
        return outs


class CPUFusedCompiler(FusedCompiler):
    """The CPU backend's compiler for fused bodies: ``run`` and ``bind`` above, or op by op
    with the backend's kernels when ``config.fused_strategy`` is ``"ops"``."""

    def run(self, body, arrays: Sequence, out: Optional[Sequence] = None) -> Tuple:
        if config.fused_strategy == "ops":
            return super().run(body, arrays, out)
        return run(body, arrays, out)

    def bind(self, body, in_shapes: Sequence[tuple]):
        return bind(body, in_shapes)
