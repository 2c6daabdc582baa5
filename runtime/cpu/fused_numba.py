"""Generated numba for a fused region: one ``@njit`` loop from the ops' ``expr`` templates
(``NumbaPlan``), its sources cached on disk so numba's own cache keeps the compiled code
across processes (``load_kernel``).
"""
from __future__ import annotations

import hashlib
import math
import sys
import threading
import types
import warnings
import weakref
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ...graphlib.ir import Value
from ...graphlib.registry import get_op
from ..kernel_cache import cache_dir, write_verified
from .fused_chunks import ChunkPlan
from .fused_expr import c_to_python
from .fused_layout import Layout, _copy_back, _outputs
from .numba_support import numba_available
from .options import options

# Below this many elements a numba kernel saves under ~50 us a call, which rarely repays
# its first compilation (~1 s; later processes load it from the disk cache in ~0.1 s).
NUMBA_MIN_ELEMENTS = 1 << 16
# A planned executable (O2) runs the same kernels step after step, so there the bar is lower:
# from 8K elements a numba region saves several microseconds a call (a float32 bias + ReLU
# over 128 x 256: 3.4 us as one loop, 23-26 us as numpy's add and maximum, whose NaN-aware
# loop is the slow one), which repays a compilation within a training run.
NUMBA_MIN_PLANNED = 1 << 13
# A small region (below NUMBA_MIN_PLANNED) of a planned program tiers up to one compiled
# call (``small_kernel``) only from this many ops: each ufunc call it replaces costs ~0.4 us
# on 16 floats, so fewer ops save too little to repay a compilation (0.5-1 s; ~0.1 s from
# the disk cache) on a plausible number of calls.
NUMBA_SMALL_MIN_OPS = 4
# numba kernels run on one thread by default: with parallel=True, numba's OpenMP threads
# and OpenBLAS's threads spin-wait on each other's cores after every call, which measured
# a 12x slower MLP training step on 2 cores. ``config.numba_parallel = True`` turns it on.
# LLVM may contract a * b + c into one fused multiply-add (one rounding instead of two, as
# float reassociation allows): the float32 GELU-tanh chain measured 3.4 -> 2.2 ms on 4M
# elements. No other fast-math flag: NaN and infinity semantics stay IEEE's, and the others
# (arcp, reassoc, nsz, afn) measured no faster here.
NUMBA_FASTMATH = frozenset({"contract"})


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
    # Eigen's float tanh: a 13/6 rational approximation on [-7.9, 7.9], at most 6 ulp
    # (tests/test_fusion.py); it vectorises (libm tanhf does not: no SVML here). NaN passes
    # through; exactly +-1 past 9. In the float32 GELU-tanh chain it adds at most ~4e-7 of
    # absolute error to exact float32 ops (whole chain against float64: 8.4e-7, exact
    # float32 ops 4.7e-7; tested below 1e-6); XLA's tanh is a rational approximation too
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


def _cache_dir() -> str:
    """The private directory for generated kernel sources (and numba's cache beside them):
    created 0700, refused when another user owns it or others can write to it (see
    ``runtime.kernel_cache``)."""
    return cache_dir(options.cache_dir)


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
        # caller's outputs: a call on the same arrays skips the preparation. The outputs
        # are held weakly and their views remade per call, so the memo never keeps a
        # returned array alive (the planned runtime reuses one nobody else holds)
        self._memo: Optional[tuple] = None

    @classmethod
    def build(cls, lay: Layout, ins, shapes, consts, full: tuple, forced: bool,
              min_elements: Optional[int] = None, transposed: bool = False,
              fastmath: frozenset = NUMBA_FASTMATH) -> "Optional[NumbaPlan]":
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
        plain = cls._source(lay, prep, consts, dt, bool(cols > 1), (), fastmath)
        if plain is None:
            return None

        def source(alias: tuple) -> str:
            return cls._source(lay, prep, consts, dt, bool(cols > 1), alias, fastmath) \
                if alias else plain

        def fallback():
            return ChunkPlan(lay, ins, shapes, consts, full)

        out_dtypes = [np.dtype(v.dtype) for v in lay.region_outputs]
        return cls(source, prep, full, rows, cols, out_dtypes, fallback)

    @staticmethod
    def _source(lay: Layout, prep, consts, dt: str, rows_mode: bool,
                alias: tuple, fastmath: frozenset = NUMBA_FASTMATH) -> Optional[str]:
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
               f"F = np.{dt}", f"FASTMATH = {set(fastmath) or False!r}", helpers, "",
               f'@njit(parallel={options.numba_parallel}, cache=True, error_model="numpy", '
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
                and all([o is p() for o, p in zip(out, memo[1])]):
            # the same arrays as the last call (a planned executable's buffers, bound
            # state): the same views and alias pattern; one-element inputs are read anew
            fn, args, shape, written = memo[2], memo[3], memo[4], memo[5]
            if self.scalar_inputs:
                args = list(args)
                for j in self.scalar_inputs:
                    args[j] = ins[j].reshape(-1)[0]
            fn(self.rows, self.cols, *args, *[out[k].reshape(shape) for k in written])
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
            into = {k for k, _ in alias}
            written = tuple(k for k in range(len(views)) if k not in into)
            views = [views[k] for k in written]
            fn(self.rows, self.cols, *args, *views)
            if remember and out is not None and all([o is w for o, w in zip(out, work)]):
                self._memo = (tuple(ins), tuple(weakref.ref(o) for o in out), fn,
                              tuple(args), shape, written)
        except Exception as e:  # noqa: BLE001 - fall back to numpy, once, with a warning
            warnings.warn(f"duograph: numba could not compile a fused kernel ({e}); using "
                          "numpy chunks instead", RuntimeWarning, stacklevel=2)
            self.failed = True
            self.fallback = self.fallback()
            return self.fallback(ins, out)
        _copy_back(outs, work)
        return outs


def small_kernel(lay: Layout, ins: Sequence[np.ndarray], shapes, consts,
                 full: tuple) -> Optional[Callable]:
    """One compiled call for a small region (the planned runtime's hot straight-line
    regions, see ``fused.bind``): ``call(arrays, outs) -> bool`` runs the whole region as
    one ``@njit`` loop over the flat arrays (every input the whole iteration space or one
    element, every output the whole space), returning False, having written nothing, for
    arrays of another layout than the compiled one (a strided feed: the caller then runs
    numpy's plan). None where the region has no such form (an op without ``expr``, mixed
    float dtypes, a broadcast input) or numba is missing or fails (warned once).

    Compiled without fast-math flags: the ops numpy computes exactly (``+ - * /``, min, max,
    comparisons, casts) give numpy's bits; transcendental ops (float32 tanh, sigmoid and
    tanh-GELU by the rational approximation above, at most 6 ulp; the others by libm) may
    differ from numpy's SIMD loops in the last bits. Its source is cached on disk like every
    generated kernel, so later processes load it instead of compiling (``load_kernel``).
    """
    if not numba_available():
        return None
    plan = NumbaPlan.build(lay, ins, shapes, consts, full, forced=True,
                           fastmath=frozenset())
    if plan is None or plan.cols != 1 or any(p not in ("full", "scalar") for p in plan.prep):
        return None
    try:
        # the argument types in the source too: the dispatcher (shared by equal sources) is
        # closed to other types below
        types_ = ", ".join(f"{a.dtype}{'' if p == 'scalar' else '[:]'}"
                           for a, p in zip(ins, plan.prep))
        fn = load_kernel(plan.make_source(()) + f"# small kernel over ({types_})\n")
        rows = plan.rows
        flat = [None if p == "scalar" else (tuple(a.shape) != (rows,))
                for a, p in zip(ins, plan.prep)]
        out_flat = len(full) != 1
        args = [a.reshape(-1)[0] if f is None else a.reshape(-1) if f else a
                for a, f in zip(ins, flat)]
        outs = [np.empty(rows, d) for d in plan.out_dtypes]
        fn(rows, 1, *args, *outs)          # compiles (or loads from the disk cache) now
        fn.disable_compile()     # one layout: C-contiguous 1-D arrays (else TypeError)
    except Exception as e:  # noqa: BLE001 - numpy's plan stays, with a warning
        warnings.warn(f"duograph: numba could not compile a small fused kernel ({e}); its "
                      "region stays on numpy", RuntimeWarning, stacklevel=2)
        return None
    if all(f is False for f in flat) and not out_flat:
        def call(arrays, outs) -> bool:      # 1-D arrays as they are: no views made
            try:
                fn(rows, 1, *arrays, *outs)
            except TypeError:                # a layout numba was not compiled for
                return False
            return True
        return call

    def call_flat(arrays, outs) -> bool:
        args = [a.reshape(-1)[0] if f is None else a.reshape(-1) if f else a
                for a, f in zip(arrays, flat)]
        try:
            fn(rows, 1, *args, *([o.reshape(-1) for o in outs] if out_flat else outs))
        except TypeError:
            return False
        return True
    return call_flat
