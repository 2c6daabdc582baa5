"""The cuda backend's compiler for fused bodies: one generated kernel per region.

A body splits into its prologue (a matmul or reduction whose epilogue was fused: run whole
with the backend's kernel, so through cuBLAS or cupy's reductions), its folded scalar
constants and its elementwise region. The region becomes one ElementwiseKernel generated
from the ops' ``expr`` templates (``codegen.region_source``); kernels are cached by their
source (so equal bodies, and one body at every shape, share one compiled kernel), plans by
body and input dtypes. cupy broadcasts the inputs (a bias row, a scalar) itself. Where every
input and output is C-contiguous of one shape (scalars aside), the same source runs as a
grid-stride ``RawKernel`` instead (``run_contiguous``), at about twice the ElementwiseKernel's
speed on large arrays.

A region that cannot be generated (an op without ``expr``, integer or float16 values,
outputs of different shapes) runs op by op with the backend's kernels on cupy, as the base
``FusedCompiler`` does.
"""
from __future__ import annotations

import threading
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ...graphlib.ir import Value
from ...graphlib.ops.fused import eval_nodes
from ..backend import FusedCompiler, PlanCache, split_body
from . import codegen

_kernels: Dict[codegen.KernelSource, object] = {}      # source -> cupy.ElementwiseKernel
_lock = threading.Lock()


def elementwise_kernel(src: codegen.KernelSource):
    """The (cached) ``cupy.ElementwiseKernel`` for ``src``; compiled on its first call."""
    kernel = _kernels.get(src)
    if kernel is None:
        import cupy         # (optional: the gpu extra, imported when a kernel is made)
        with _lock:
            kernel = _kernels.get(src)
            if kernel is None:
                kernel = _kernels[src] = cupy.ElementwiseKernel(
                    src.in_params, src.out_params, src.operation, src.name,
                    preamble=src.preamble)
    return kernel


_raw: Dict[tuple, object] = {}        # (source, scalar flags) -> cupy.RawKernel
BLOCK = 256
WAVES = 16          # blocks per multiprocessor launched at most (the grid-stride loop does
                    # the rest): on an H200, 16M floats ran 40 us at 16 waves, 77 us at one
                    # thread per element
_sm_count: Dict[int, int] = {}


def run_contiguous(xp, src: codegen.KernelSource, ins: Sequence, outs: Optional[Sequence],
                   out_dtypes: Sequence[str], shape: tuple):
    """``src`` over C-contiguous device arrays of ``shape`` (inputs may hold one element) as
    one grid-stride ``RawKernel`` (``codegen.contiguous_source``); the outputs (``outs``, or
    new arrays), or None where this does not apply (cupy is not the module, an input is
    broadcast or strided, a dtype differs from the source's): the ElementwiseKernel then runs
    it."""
    if getattr(xp, "__name__", "") != "cupy":
        return None
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return None
    declared = [p.split()[0] for p in src.in_params.split(",") if p.strip()]
    scalars = []
    for a, dt in zip(ins, declared):
        if not isinstance(a, xp.ndarray) or a.dtype.name != dt or not a.flags.c_contiguous:
            return None
        if a.shape != shape and a.size != 1:
            return None
        scalars.append(a.shape != shape)
    if outs is None:
        outs = [xp.empty(shape, dt) for dt in out_dtypes]
    elif not all(o.shape == shape and o.flags.c_contiguous and o.dtype.name == dt
                 for o, dt in zip(outs, out_dtypes)):
        return None
    key = (src, tuple(scalars))
    kernel = _raw.get(key)
    if kernel is None:
        with _lock:
            kernel = _raw.get(key)
            if kernel is None:
                import cupy     # (optional: the gpu extra)
                name, code = codegen.contiguous_source(src, scalars)
                kernel = _raw[key] = cupy.RawKernel(code, name)
    device = xp.cuda.runtime.getDevice()
    sms = _sm_count.get(device)
    if sms is None:
        sms = _sm_count[device] = xp.cuda.runtime.getDeviceProperties(device)[
            "multiProcessorCount"]
    grid = min((n + BLOCK - 1) // BLOCK, sms * WAVES)
    kernel((grid,), (BLOCK,), (*ins, *outs, np.int64(n)))
    return tuple(outs)


class Layout:
    """A body split once into prologue nodes, constants and the elementwise region, with the
    region's generated source (None where it has none)."""

    __slots__ = ("graph", "prologue", "constants", "region", "region_inputs",
                 "region_outputs", "outputs", "consts", "source", "fits", "device_consts")

    def __init__(self, graph):
        self.graph = graph
        (self.prologue, self.constants, self.region, self.region_inputs,
         self.region_outputs) = split_body(graph)
        self.outputs = list(graph.outputs)
        self.consts = self._fold_constants()
        self.source = None
        self.fits: Dict[tuple, bool] = {}
        # the constants on a device, made once (read-only inputs of the op-by-op region):
        # made per run they were a host -> device copy each, which CUDA-graph capture refuses
        self.device_consts: Dict[object, Dict[Value, object]] = {}
        if self.region and self.consts is not None:
            used = {x for n in self.region for x in n.inputs}
            consts = {v: c for v, c in self.consts.items() if v in used}
            self.source = codegen.region_source(self.region, self.region_inputs,
                                                self.region_outputs, consts)

    def _fold_constants(self) -> Optional[Dict[Value, object]]:
        """Each constant as a Python scalar (host), or None when one is not a scalar."""
        out = {}
        for c in self.constants:
            arr = np.asarray(c.op.kernel(np, **c.attrs))
            if arr.size != 1:
                return None
            out[c.outputs[0]] = arr.reshape(-1)[0].item()
        return out


# body -> {"layout": its Layout}, held weakly by the body (the IR keeps no backend state)
LAYOUTS = PlanCache()


def layout(body) -> Layout:
    """The body's cached ``Layout``."""
    plans = LAYOUTS(body)
    lay = plans.get("layout")
    if lay is None:
        with plans.lock:
            lay = plans.get("layout")
            if lay is None:
                lay = plans["layout"] = Layout(body.graph)
    return lay


def _region_fits(lay: Layout, env: dict) -> bool:
    """Whether every region output has the region's whole broadcast shape (one kernel
    writes them all over one iteration space), cached per tuple of input shapes."""
    key = tuple(env[v].shape for v in lay.region_inputs)
    fits = lay.fits.get(key)
    if fits is None:
        shapes: Dict[Value, tuple] = dict(zip(lay.region_inputs, key))
        try:
            for n in lay.region:
                s = np.broadcast_shapes(*[shapes.get(x, ()) for x in n.inputs])
                for o in n.outputs:
                    shapes[o] = s
            full = np.broadcast_shapes(*key) if key else ()
            fits = all(shapes[v] == full for v in lay.region_outputs)
        except ValueError:
            fits = False
        lay.fits[key] = fits
    return fits


class CUDAFusedCompiler(FusedCompiler):
    """Fused bodies on cupy: the prologue with the backend's kernels, the region as one
    generated ElementwiseKernel (op by op where it has none)."""

    def run(self, body, arrays: Sequence, out: Optional[Sequence] = None) -> Tuple:
        lay = layout(body)
        xp = self.backend.xp
        kernels = self.backend.kernels
        env: Dict[Value, object] = {v: a for v, a in zip(body.graph.inputs, arrays)}
        if lay.prologue:
            eval_nodes(lay.prologue, env, xp, lay.outputs + lay.region_inputs, kernels)
        if lay.region:
            if lay.source is not None and _region_fits(lay, env):
                where = {o: k for k, o in enumerate(lay.outputs)}
                ins = [env[v] for v in lay.region_inputs]
                outs = None
                if out is not None:
                    outs = [out[where[v]] for v in lay.region_outputs]
                    if not all(_writable_into(o, v) for o, v in zip(outs, lay.region_outputs)):
                        outs = None
                full = _full_shape(ins)
                res = run_contiguous(xp, lay.source, ins, outs,
                                     [v.dtype for v in lay.region_outputs], full)
                if res is None:
                    kernel = elementwise_kernel(lay.source)
                    res = kernel(*ins, *outs) if outs is not None else kernel(*ins)
                if not isinstance(res, (tuple, list)):
                    res = (res,)
                for v, r in zip(lay.region_outputs, res):
                    env[v] = r
            else:
                made = lay.device_consts.get(xp)
                if made is None:
                    made = {c.outputs[0]: kernels[c.op](xp, **c.attrs) for c in lay.constants}
                    lay.device_consts[xp] = made
                env.update(made)
                eval_nodes(lay.region, env, xp, lay.outputs, kernels)
        results = [env[o] for o in lay.outputs]
        if out is None:
            return tuple(results)
        for r, o in zip(results, out):
            if r is not o:
                xp.copyto(o, r, casting="unsafe")
        return tuple(out)


def _full_shape(arrays: Sequence) -> tuple:
    shapes = [a.shape for a in arrays]
    return tuple(np.broadcast_shapes(*shapes)) if shapes else ()


def _writable_into(arr, v: Value) -> bool:
    return arr.dtype == np.dtype(v.dtype)
