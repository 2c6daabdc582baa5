"""Plain kernels of the cuda backend, where the ops' reference kernels do not suit a GPU.

The reference kernels already run on cupy (matmul is cuBLAS, reductions are cupy's, conv
and pooling are im2col views plus cuBLAS, batch norm and random ops are cupy calls), so the
table here is short:

- elementwise ops whose reference is a chain of cupy calls (GELU, sigmoid, log-sigmoid,
  leaky ReLU, lerp, xlogy) run one ``ElementwiseKernel`` generated from their ``expr``
  (``codegen.op_source``) when their inputs share one float dtype; the reference otherwise;
- softmax-cross-entropy and its backward without a host round trip: the CPU reference reads
  back ``valid.all()``, the largest class index and ``isfinite(max)`` (three device syncs
  per call, and a sync cannot be captured in a CUDA graph). Here everything stays on the
  device; a class index out of range gives a NaN loss (PyTorch's CUDA kernel asserts on the
  device instead) rather than the CPU's ValueError.
"""
from __future__ import annotations

from typing import Callable, Dict

from ...graphlib.registry import OpDef, get_op
from . import codegen
from .fused import elementwise_kernel

# keyed by the OpDef: a name that is not a registered op fails here, at import
GENERATED = tuple(get_op(name) for name in (
    "gelu", "sigmoid", "logsigmoid", "leaky_relu", "lerp", "xlogy"))


def generated_kernel(op: OpDef) -> Callable:
    """A kernel for elementwise ``op`` running its generated ElementwiseKernel when every
    input has one float dtype (float32/float64), its reference kernel otherwise."""
    reference = op.kernel
    sources: Dict[tuple, object] = {}

    def kernel(xp, *arrays, **attrs):
        dts = tuple(a.dtype.name for a in arrays)
        if dts[0] not in codegen.COMPUTE_DTYPES or any(d != dts[0] for d in dts):
            return reference(xp, *arrays, **attrs)
        key = (dts, tuple(sorted(attrs.items())))
        src = sources.get(key)
        if src is None:
            src = sources[key] = codegen.op_source(op, dts, dts[0], attrs) or False
        if src is False:
            return reference(xp, *arrays, **attrs)
        return elementwise_kernel(src)(*arrays)
    kernel.__name__ = f"cuda_{op.name}"
    kernel.reference = reference
    return kernel


def _sce_parts(xp, x, t, ignore_index):
    """(valid rows as x's dtype, safe class indices, shifted logits z, bad rows): no sync."""
    n, c = x.shape
    valid = t != ignore_index
    safe = xp.where(valid, t, 0)
    bad = valid & ((safe < 0) | (safe >= c))
    safe = xp.clip(safe, 0, c - 1)
    m = x.max(axis=1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, x.dtype.type(0))
    z = x - m
    return valid, safe, z, bad


def sce_kernel(xp, x, t, *, ignore_index, reduction):
    """softmax_cross_entropy on the device (see the module docstring)."""
    if x.size == 0:
        return get_op("softmax_cross_entropy").kernel(
            xp, x, t, ignore_index=ignore_index, reduction=reduction)
    valid, safe, z, bad = _sce_parts(xp, x, t, ignore_index)
    lse = xp.log(xp.exp(z).sum(axis=1))
    picked = xp.take_along_axis(z, safe[:, None], 1)[:, 0]
    loss = lse - picked
    loss = xp.where(bad, x.dtype.type(float("nan")), loss)
    loss = xp.where(valid, loss, x.dtype.type(0)).astype(x.dtype, copy=False)
    if reduction == "none":
        return loss
    total = loss.sum(dtype=x.dtype)
    if reduction == "sum":
        return total
    return (total / valid.sum().astype(x.dtype)).astype(x.dtype)


def sce_backward_kernel(xp, g, x, t, *, ignore_index, reduction):
    """softmax_cross_entropy_backward on the device: (softmax(x) - one_hot(t)) * weight."""
    if x.size == 0:
        return xp.empty(x.shape, x.dtype)
    c = x.shape[1]
    valid, safe, z, bad = _sce_parts(xp, x, t, ignore_index)
    p = xp.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p -= (xp.arange(c)[None, :] == safe[:, None]).astype(x.dtype)
    g = g.astype(x.dtype, copy=False)
    vf = valid.astype(x.dtype)
    if reduction == "none":
        w = g * vf
    else:
        w = g / xp.maximum(vf.sum(), x.dtype.type(1)) if reduction == "mean" else g
        w = w * vf
    return (p * w[:, None]).astype(x.dtype, copy=False)


def table() -> Dict[OpDef, Callable]:
    """op -> cuda kernel, for the backend to register."""
    found = {op: generated_kernel(op) for op in GENERATED}
    found[get_op("softmax_cross_entropy")] = sce_kernel
    found[get_op("softmax_cross_entropy_backward")] = sce_backward_kernel
    return found
