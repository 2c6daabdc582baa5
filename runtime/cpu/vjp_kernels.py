"""The CPU backend's kernels for the commonest ops' vjp rules, on numpy arrays.

A vjp kernel computes what the op's own vjp rule computes (the rule is the one gradient rule
of the op, written with op functions), straight on the arrays: no eager dispatch, no plan
lookup, no tensor per intermediate. It is registered in the backend's ``VjpKernelTable``
for the rule it implements (``op.vjp`` at registration): where the rule has been replaced
since, the table answers None and the rule itself runs, so a kernel never stands in for a
rule it was not written for.

``kernel(g, ins, outs, attrs, needs)``: ``g`` the output cotangent's array, ``ins`` and
``outs`` the node's input and output arrays, ``needs`` which inputs want a cotangent;
returns one array (or None where not needed) per input, or None where it does not apply
(another array type, mixed dtypes...), and the rule runs instead. Each kernel runs the same
forward kernels the rule's ops would run (this backend's, for operands of one dtype), so the
results are the rule's bit for bit (tests/test_eager_fast_path.py compares them).
"""
from __future__ import annotations

import numpy as np

from ...graphlib.kernels import direct_kernel
from ...graphlib.ops.elementwise import (mul_op, ne_op, neg_op, relu_op, sigmoid_backward_op,
                                         sigmoid_op, sub_op, tanh_backward_op, tanh_op,
                                         where_op)
from ...graphlib.ops.linalg import matmul_op
from ...graphlib.ops.reduction import _reduced_shape, sum_op
from ...graphlib.ops.shape import permute_op
from .select import UINT_OF_SIZE, numba_loops

_ndarray = np.ndarray
_T2 = (1, 0)
_MATMUL_NP = frozenset([np.dtype(np.float32), np.dtype(np.float64)])


def _same_np(g, ins) -> bool:
    """Whether ``g`` and ``ins`` are numpy arrays of one dtype."""
    if type(g) is not _ndarray:
        return False
    dt = g.dtype
    for a in ins:
        if type(a) is not _ndarray or a.dtype is not dt and a.dtype != dt:
            return False
    return True


def _as_array(r):
    return r if type(r) is _ndarray else np.asarray(r)


class _Direct(dict):
    """dtype -> ``direct_kernel(kernel, (dt, dt))``: what a plan calls for two operands of
    dtype ``dt`` (``kernel`` looked up in the backend's table once, when first needed)."""

    def __init__(self, kernels, op):
        super().__init__()
        self.kernels, self.op = kernels, op

    def __missing__(self, dt):
        inner = self[dt] = direct_kernel(self.kernels[self.op], (dt.name, dt.name))
        return inner


def table(kernels, autotune) -> dict:
    """{OpDef: vjp kernel} for a backend whose forward kernels are ``kernels`` (the table
    the backend has filled when it builds this one) and whose timing decisions are the module
    ``autotune`` (the backend's ``autotune``: one place for them, ``runtime/cpu/autotune.py``)."""
    mul_direct = _Direct(kernels, mul_op)

    def mul_vjp(g, ins, outs, attrs, needs):
        a, b = ins
        dt = g.dtype
        if type(g) is not _ndarray or type(a) is not _ndarray or type(b) is not _ndarray or (
                a.dtype is not dt and a.dtype != dt) or (b.dtype is not dt and b.dtype != dt):
            return None
        if dt.kind == "c":      # complex: the rule's g * conj(b)
            return None
        k = mul_direct[dt]
        ra = rb = None
        if needs[0]:
            ra = k(np, g, b)
            if type(ra) is not _ndarray:
                ra = np.asarray(ra)
        if needs[1]:
            rb = k(np, g, a)
            if type(rb) is not _ndarray:
                rb = np.asarray(rb)
        return (ra, rb)

    def sub_vjp(g, ins, outs, attrs, needs):
        if not _same_np(g, ins):
            return None
        return (g if needs[0] else None,
                _as_array(kernels[neg_op](np, g)) if needs[1] else None)

    def neg_vjp(g, ins, outs, attrs, needs):
        if not _same_np(g, ins):
            return None
        return (_as_array(kernels[neg_op](np, g)),)

    def backward_op_vjp(backward_op):
        """tanh's and sigmoid's rule: ``backward_op(g, y)`` on the output ``y``."""
        direct = _Direct(kernels, backward_op)

        def vjp(g, ins, outs, attrs, needs):
            y, x = outs[0], ins[0]
            if type(g) is not _ndarray or type(y) is not _ndarray or type(x) is not _ndarray:
                return None
            dt = g.dtype
            if (y.dtype is not dt and y.dtype != dt) or (x.dtype is not dt and x.dtype != dt):
                return None
            r = direct[dt](np, g, y)
            return (r if type(r) is _ndarray else np.asarray(r),)
        return vjp

    zeros: dict = {}        # dtype -> its 0-d zero (the rule's ``0`` and ``0.0``)

    def relu_vjp(g, ins, outs, attrs, needs):
        """relu's rule ``where(y != 0, g, 0.0)`` on the arrays: one numba pass over large
        float32 and float64 arrays (``select_numba``: the same bits, the comparison and the
        selection fused), else the rule's two kernels (the comparison, then the backend's bit-mask
        ``where``) with no tensor and no plan between them."""
        y = outs[0]
        if type(g) is not _ndarray or type(y) is not _ndarray or g.dtype.kind != "f" \
                or (y.dtype is not g.dtype and y.dtype != g.dtype):
            return None
        nb = numba_loops(g, y)
        if nb is not None:
            out = np.empty(g.shape, g.dtype)
            bits = UINT_OF_SIZE[g.dtype.itemsize]
            nb.nonzero_select(g.reshape(-1).view(bits), y.reshape(-1),
                              out.reshape(-1).view(bits))
            return (out,)
        zero = zeros.get(g.dtype)
        if zero is None:
            zero = zeros[g.dtype] = np.zeros((), g.dtype)
        mask = _as_array(kernels[ne_op](np, y, zero))
        return (_as_array(kernels[where_op](np, mask, g, zero)),)

    def permute_vjp(g, ins, outs, attrs, needs):
        """The cotangent permuted back: a view, as the rule's ``permute``."""
        if type(g) is not _ndarray or type(ins[0]) is not _ndarray:
            return None
        dims = attrs["dims"]
        inverse = [0] * len(dims)
        for i, d in enumerate(dims):
            inverse[d] = i
        return (kernels[permute_op](np, g, dims=tuple(inverse)),)

    def matmul_vjp(g, ins, outs, attrs, needs):
        """2-D ``matmul``'s rule: ``g @ b.T`` and ``a.T @ g``. Where ``b`` is a transposed
        view (a Linear's ``weight.T``), the second is computed as ``(g.T @ a).T`` when that
        gives the same bits (``autotune.swap_is_exact``): the cotangent then has ``b``'s layout, and
        the permute's vjp hands the weight a C-ordered one, whose copy into ``.grad`` is a
        plain memcpy instead of a transposing one (784 -> 256 float32: 177 -> 20 us)."""
        a, b = ins
        dt = g.dtype
        if type(g) is not _ndarray or type(a) is not _ndarray or type(b) is not _ndarray \
                or g.ndim != 2 or a.ndim != 2 or b.ndim != 2 or dt not in _MATMUL_NP \
                or a.dtype != dt or b.dtype != dt:
            return None
        mm = kernels[matmul_op]
        tp = kernels[permute_op]
        ra = rb = None
        if needs[0]:
            ra = np.asarray(mm(np, g, tp(np, b, dims=_T2)))
        if needs[1]:
            at = tp(np, a, dims=_T2)
            if _transposed(b) and autotune.swap_is_exact(at, g):
                rb = tp(np, np.asarray(mm(np, tp(np, g, dims=_T2), a)), dims=_T2)
            else:
                rb = np.asarray(mm(np, at, g))
        return (ra, rb)

    return {mul_op: mul_vjp, sub_op: sub_vjp, neg_op: neg_vjp, sum_op: sum_vjp,
            tanh_op: backward_op_vjp(tanh_backward_op),
            sigmoid_op: backward_op_vjp(sigmoid_backward_op),
            matmul_op: matmul_vjp, permute_op: permute_vjp, relu_op: relu_vjp}


def sum_vjp(g, ins, outs, attrs, needs):
    """``sum``'s rule (``expand_back``): the cotangent reshaped to the kept dims and
    broadcast (a view, as the expand kernel's)."""
    x = ins[0]
    if type(g) is not _ndarray or type(x) is not _ndarray or attrs.get("dtype") is not None \
            or g.dtype != x.dtype:
        return None
    shape = x.shape
    if not attrs["keepdim"]:
        g = g.reshape(_reduced_shape(shape, attrs["dim"], True))
    return (g if g.shape == shape else np.broadcast_to(g, shape),)


def _transposed(b) -> bool:
    """Whether the 2-D array ``b`` is the transposed view of a C-ordered one."""
    return b.flags.f_contiguous and not b.flags.c_contiguous
