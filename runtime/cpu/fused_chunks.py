"""Generated numpy for a fused region: straight-line over whole arrays (``DirectPlan``) or in
cache-sized chunks (``ChunkPlan``), each op one ufunc call with ``out=`` into the output or a
scratch buffer reused by liveness (or the op's own kernel where no ufunc is exact).
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Sequence

import numpy as np

from ...graphlib.ir import Value
from ...graphlib.ops import elementwise, nn
from .fused_layout import Layout, _copy_back, _outputs
from .options import options
from .tables import KERNELS, OUT_KERNELS
from .workspace import INNER, Scratch

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


def _direct(lay: Layout, n: int) -> bool:
    """Whether a region of ``n`` elements runs straight-line (DirectPlan) or in chunks."""
    return n <= CHUNK or (len(lay.region) <= DIRECT_SHORT_OPS and n <= DIRECT_SHORT_MAX)


# -- numpy over cache-sized chunks ---------------------------------------------------------
# ops computed by numpy calls other than their ``ufunc`` trait (see ``_ufunc_lines``):
# op -> (lines, whether they are exact for floats only); {0} is the operand, {out} the result.
# (sigmoid has none: its kernel runs, split at 0 to keep both tails)
_LINES = {
    elementwise.square_op: (["np.multiply({0}, {0}, out={out})"], False),
    elementwise.relu_op: (["np.maximum({0}, 0, out={out})"], False),
    nn.stop_gradient_op: (["np.copyto({out}, {0}, casting='unsafe')"], False),
    elementwise.rsqrt_op: (["np.sqrt({0}, out={out})", "np.reciprocal({out}, out={out})"],
                           True),
}
_CAST = elementwise.cast_op


def _ufunc_lines(node, names: List[str], out: str, glob=None) -> Optional[List[str]]:
    """numpy calls writing ``node``'s result into ``out`` exactly as its kernel would compute
    it, or None when only the kernel itself is exact (mixed dtypes, composite ops). With
    ``glob`` (the generated code's globals), a ufunc is called through a global of its own
    (``U_multiply``: no attribute lookup on ``np`` per call)."""
    op = node.op
    dt = node.outputs[0].dtype
    same = all(x.dtype == dt for x in node.inputs)
    if op.ufunc is not None and (op.ufunc_mixed or same):
        if glob is None:
            return [f"np.{op.ufunc}({', '.join(names)}, out={out})"]
        glob[f"U_{op.ufunc}"] = getattr(np, op.ufunc)
        return [f"U_{op.ufunc}({', '.join(names)}, out={out})"]
    a = names[0] if names else ""
    if op is _CAST:
        return [f"np.copyto({out}, {a}, casting='unsafe')"]
    entry = _LINES.get(op)
    if entry is None or not same or (entry[1] and not dt.startswith("float")):
        return None
    return [line.format(a, out=out) for line in entry[0]]


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
    lines = _ufunc_lines(node, args, target, glob) if target else None
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
            # a 0-d constant stays a 0-d array: a ufunc call on small arrays takes one
            # faster than a numpy scalar (16 float32, numpy 2.4: a 20-op chain 13 -> 10 us)
            glob[f"k{j}"] = arr
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
        self._temps = Scratch(self.scratch, INNER)   # the thread's shared scratch

    def __call__(self, ins: Sequence[np.ndarray], out=None,
                 remember: bool = False) -> List[np.ndarray]:
        scratch = self._temps.arrays()
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
        self._temps = Scratch(self.scratch, INNER)   # the thread's shared scratch

    def _part(self, ins, views, start: int, stop: int, err=None) -> None:
        scratch = self._temps.arrays()
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
        threads = min(options.fused_threads, lead // rows)
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
_executor_lock = threading.Lock()


def _pool(threads: int):
    """The thread pool that runs the other parts of a large chunked kernel (at least
    ``threads - 1`` workers; grown when ``config.fused_threads`` grows)."""
    global _executor, _executor_size
    with _executor_lock:
        if _executor is None or _executor_size < threads - 1:
            _executor_size = max(threads - 1, 1)
            _executor = ThreadPoolExecutor(_executor_size, thread_name_prefix="dg-fused")
    return _executor
