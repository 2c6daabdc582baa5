"""Special cases of the fused compiler's ``bind``, each a runner for one shape of body that
a generic plan runs slower: an SGD step on a matmul gradient as one gemm
(``_bind_gemm_update``), a Linear epilogue over the transposed product
(``_bind_swapped``), a ReLU backward's mask applied in the product's buffer (``_bind_masked``).
Each returns None for any other body.
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import numpy as np

from ...graphlib.ir import Value
from ...graphlib.ops import elementwise, linalg
from . import autotune, cblas as _cblas
from .fused_layout import PLANS, Layout
from .fused_numba import NUMBA_MIN_PLANNED, load_kernel
from .fused_strategy import _plan
from .numba_support import numba_available
from .options import options
from .select import where_bits
from .tables import KERNELS
from .workspace import Scratch

_WHERE = elementwise.where_op
_MATMUL, _MUL = linalg.matmul_op, elementwise.mul_op
_ADD, _SUB = elementwise.add_op, elementwise.sub_op


def _bind_gemm_update(body, in_shapes: Sequence[tuple], strategy: str):
    """A runner for ``P - s * (A @ B)`` (or ``P + s * (A @ B)``): an SGD step on a weight
    whose gradient is that product, as one gemm with alpha = -s (or s) and beta = 1 into the
    output, over P's own buffer when the plan updates P in place (see ``_cblas``). None for
    any other body, or where numpy's BLAS cannot be called."""
    if not _cblas.available():
        return None
    g = body.graph
    nodes = [n for n in g.nodes if not n.op.constant]
    if len(nodes) != 3 or nodes[0].op is not _MATMUL or nodes[1].op is not _MUL \
            or nodes[2].op not in (_SUB, _ADD) or len(g.outputs) != 1 \
            or g.outputs[0] is not nodes[2].outputs[0]:
        return None
    mm, mul, last = nodes
    index = {v: j for j, v in enumerate(g.inputs)}
    prod, scaled = mm.outputs[0], mul.outputs[0]
    if any(x not in index for x in mm.inputs) or not any(x is prod for x in mul.inputs):
        return None
    scale = mul.inputs[1] if mul.inputs[0] is prod else mul.inputs[0]
    if last.op is _SUB and last.inputs[1] is scaled:
        base, sign = last.inputs[0], -1.0
    elif last.op is _ADD and any(x is scaled for x in last.inputs):
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
        if options.fused_strategy != strategy:
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


def _bind_swapped(body, lay: Layout, step, sources, region_out, strategy: str, general):
    """A runner for ``epilogue(x @ W.T)``, a Linear layer with its bias and activation
    fused, that computes the product as ``W @ x.T`` into a scratch and runs the epilogue's
    numba loop reading that scratch transposed: OpenBLAS multiplies a C-contiguous ``x``
    by a transposed ``W`` slower than the swapped form at small batches (784 -> 256,
    float32, 128 rows: 602 -> 563 us with a bias + ReLU epilogue), and the epilogue pass
    does the transposition for free. Chosen per shape at the first call, and only where
    both products give the same bits (``autotune.swap_is_exact``), the whole body gave the
    same bits both ways on those operands, and the swapped run was faster; otherwise, and
    for operands of other layouts, ``general`` runs. None for other bodies."""
    _, _, ins, attrs, _ = step
    node = lay.prologue[0]
    product = node.outputs[0]
    if node.op is not _MATMUL or attrs or len(ins) != 2 or not numba_available() \
            or any(o is product for o in body.graph.outputs) \
            or sum(1 for kind, _ in sources if kind == 1) != 1:
        return None
    ia, ib = ins
    plans = PLANS(body)
    scratch: Dict[tuple, list] = {}
    choices: Dict[tuple, bool] = {}

    def swapped(arrays, outs) -> bool:
        a, b = arrays[ia], arrays[ib]
        key = (a.shape, b.shape, a.dtype)
        held = scratch.get(key)
        if held is None:        # the product: a temporary in the thread's shared scratch
            held = scratch[key] = [Scratch([((b.shape[1], a.shape[0]), a.dtype)]), None,
                                   None]
        views = held[0].arrays()
        if views[0] is not held[1]:     # one view object per buffer: the plan's memo sees it
            held[1], held[2] = views[0], views[0].T
        zt, product_view = held[1], held[2]
        np.matmul(b.T, a.T, out=zt)
        rins = [arrays[j] if kind == 0 else product_view for kind, j in sources]
        plan = _plan(body, lay, rins, NUMBA_MIN_PLANNED, transposed=True, plans=plans)
        if plan is False:
            return False
        plan(rins, [outs[k] for k in region_out], remember=True)
        return True

    def choose(arrays, outs) -> bool:
        a, b = arrays[ia], arrays[ib]
        if any(np.may_share_memory(o, x) for o in outs for x in arrays) \
                or not autotune.swap_is_exact(a, b):
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
        if options.fused_strategy != strategy:
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


def _bind_masked(body, lay: Layout, step, p_shape: tuple, k: int,
                 in_shapes: Sequence[tuple], strategy: str):
    """A runner for ``where(cmp(z, c), x @ w, 0)`` (a ReLU's backward ``(g @ W.T) *
    (z > 0)``) whose output may be written over ``z`` in place: the mask is taken first
    into a small bool buffer, then the product goes straight into the output and the mask
    is applied there in one pass (the bits times 0 or 1, ``select.where_bits``): no
    float-sized scratch and no extra pass. The same BLAS call and the same selected bits
    as the general path. None for any other body."""
    g = body.graph
    if len(lay.region) != 2 or len(lay.outputs) != 1 or len(lay.prologue) != 1:
        return None
    cmp_node, sel = lay.region
    p = lay.prologue[0].outputs[0]
    consts = {c.outputs[0]: c for c in lay.constants}
    index = {v: j for j, v in enumerate(g.inputs)}
    if (cmp_node.op.compare is None or sel.op is not _WHERE
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
    temps = Scratch([(shape, bool)])      # the mask: a temporary of each call
    ufunc = getattr(np, cmp_node.op.ufunc)
    zj = index[z]
    loops = None
    if strategy == "auto" and numba_available():
        try:
            loops = load_kernel(_MASK_SOURCE.replace("CMP", cmp_node.op.compare))
        except Exception:           # (numba refused it: the numpy passes below serve)
            loops = None
    c = cval[()]

    def runner(arrays, outs) -> bool:
        if options.fused_strategy != strategy:
            return False
        out = outs[k]
        zarr = arrays[zj]
        args = [arrays[j] for j in ins]
        if (out.shape != shape or zarr.shape != shape
                or any(np.may_share_memory(out, a) for a in args)):
            return False
        fast = loops is not None and out.flags.c_contiguous and zarr.flags.c_contiguous
        apart = not np.may_share_memory(out, zarr)
        mask = temps.arrays()[0]
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
