"""Linear algebra: matmul with numpy semantics (1-D operands, batching, broadcasting)."""
from __future__ import annotations

from .. import dtypes
from ..attrs import Attrs
from ..batching import lrank, pad_after_batch, shape_of
from ..errors import ShapeError, UnsupportedDTypeError, located
from ..registry import OpDef, get_op, register
from ..types import TensorType, broadcast_shapes, format_shape
from ._common import operand, promoting_kernel
from .elementwise import conj
from .shape import reshape, sum_to, transpose, unsqueeze


def _matmul_infer(types, attrs):
    a, b = types
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dim, found "
                         f"{format_shape(a.shape)} and {format_shape(b.shape)}; use mul")
    if a.dtype == "bool" or b.dtype == "bool":
        raise UnsupportedDTypeError("matmul: bool operands are not supported; cast them first")
    ash = a.shape if a.ndim > 1 else (1,) + a.shape
    bsh = b.shape if b.ndim > 1 else b.shape + (1,)
    k1, k2 = ash[-1], bsh[-2]
    if k1 != k2 and isinstance(k1, int) and isinstance(k2, int):
        raise ShapeError(f"matmul: inner dims do not match: {format_shape(a.shape)} @ "
                         f"{format_shape(b.shape)} ({k1} != {k2})")
    if k1 != k2 and isinstance(k1, str) and isinstance(k2, str):
        raise ShapeError(f"matmul: inner dims {k1!r} and {k2!r} are different symbols in "
                         f"{format_shape(a.shape)} @ {format_shape(b.shape)}")
    batch = broadcast_shapes(ash[:-2], bsh[:-2], op="matmul")
    shape = batch + (ash[-2], bsh[-1])
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return [TensorType(shape, dtypes.result_dtype(a.dtype, b.dtype))]


def _matmul_vjp(cts, ins, outs, attrs, needs):
    # complex operands: PyTorch's convention, gA = g B^H, gB = A^H g
    (g,), (a, b) = cts, ins
    a, b = conj(a), conj(b)
    if a.ndim == 1 and b.ndim == 1:   # a dot product: g is 0-d
        return [g * b if needs[0] else None, g * a if needs[1] else None]
    a2 = unsqueeze(a, 0) if a.ndim == 1 else a
    b2 = unsqueeze(b, -1) if b.ndim == 1 else b
    if a.ndim == 1:
        g = unsqueeze(g, -2)
    if b.ndim == 1:
        g = unsqueeze(g, -1)
    ga = matmul(g, transpose(b2, -1, -2)) if needs[0] else None
    gb = matmul(transpose(a2, -1, -2), g) if needs[1] else None
    if ga is not None and a.ndim == 1:
        ga = sum_to(ga, (1,) + tuple(a.shape)) if ga.ndim > 2 else ga
        ga = reshape(ga, *a.shape)
    if gb is not None and b.ndim == 1:
        gb = sum_to(gb, tuple(b.shape) + (1,)) if gb.ndim > 2 else gb
        gb = reshape(gb, *b.shape)
    return [ga, gb]


def matmul_into(xp, a, b, out=None):
    """``xp.matmul(a, b)`` (into ``out`` when given): the reference kernel."""
    return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)


def _matmul_rule(op, args, batched, attrs, size):
    """numpy's matmul over a batch: a 1-D operand becomes a row or column of a batched matrix
    product, and the lower-rank operand gets size-1 dims behind the batch dim so that batch
    dims line up."""
    (a, b), (ba, bb) = args, batched
    ra, rb = lrank(a, ba), lrank(b, bb)
    reshape = get_op("reshape")
    squeeze_last = squeeze_row = False
    if ba and ra == 1:
        if not bb and rb <= 2:
            return op(a, b)                             # [B,k] @ [k] or [k,n]
        a = reshape(a, shape=(size,) + (1,) * max(rb - 2, 0) + (1, shape_of(a)[1]))
        ra, squeeze_row = 2 + max(rb - 2, 0), True
    if bb and rb == 1:
        b = reshape(b, shape=(size,) + (1,) * max(ra - 2, 0) + (shape_of(b)[1], 1))
        rb, squeeze_last = 2 + max(ra - 2, 0), True
    if ba and bb:
        a, b = pad_after_batch(a, rb - ra), pad_after_batch(b, ra - rb)
    elif ba:
        a = pad_after_batch(a, rb - ra)
    elif bb:
        b = pad_after_batch(b, ra - rb)
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) >= 2 and len(sb) >= 2 and sa[-1] == 1 and sa[-1] == sb[-2] and (
            a.dtype == b.dtype):
        out = get_op("mul")(a, b)      # a contraction over one element: batched outer products
    else:
        out = op(a, b)
    if squeeze_row or squeeze_last:
        s = shape_of(out)
        if squeeze_row and squeeze_last:
            s = s[:-2]
        elif squeeze_row:
            s = s[:-2] + s[-1:]
        else:
            s = s[:-1]
        out = reshape(out, shape=s)
    return out


matmul_op = register(OpDef("matmul", _matmul_infer, promoting_kernel(matmul_into),
                           _matmul_vjp, promote=True, epilogue_host=True, complex_ok=True,
                           autocast="lower", attrs=Attrs(), batch=_matmul_rule))


def matmul(a, b):
    """Matrix product with numpy's rules: 1-D operands are vectors, leading dims broadcast."""
    return matmul_op(a, b)


def mm(a, b):
    """The matrix product of two 2-D tensors, ``(n, m) @ (m, p) -> (n, p)``."""
    b = operand(b, "mm")
    a = operand(a, "mm")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(located(f"mm: expected 2-D operands, found {format_shape(a.shape)} "
                                 f"and {format_shape(b.shape)}"))
    return matmul_op(a, b)
