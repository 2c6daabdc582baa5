"""The CPU backend's ``out=`` forms of the hot ops, for the planned runtime (kernels write
into the arena).

Each entry writes ``op(*arrays)`` into a preallocated ``out`` of the op's output dtype and
shape and returns True, or returns False when it cannot do so exactly for these operands (a
dtype the ufunc would compute differently, say); the runtime then falls back to the
backend's plain kernel. Only operands whose dtypes already equal the output's take the ufunc
path, so the result is bit-for-bit what the plain kernel computes.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from ...graphlib.ops import activations, conv, creation, elementwise, linalg, nn, pointwise
from ...graphlib.ops import reduction, shape, special
from ...graphlib import xp as _xp
from ...graphlib.registry import REGISTRY, OpDef
from . import blas_reduce as _blas_reduce
from .kernels import _conv_numba, _pool_numba, bn_backward, bn_forward, sce_backward_into
from .kernels import conv2d_input_grad_into as _conv2d_input_grad_into
from .kernels import conv2d_into as _conv2d_into
from .kernels import max_pool2d_backward_into as _max_pool2d_backward_into
from .kernels import max_pool2d_into as _max_pool2d_into
from .half import HALF_NP
from .kernels import matmul_into as _matmul_into
from .select import where_bits as _where_bits
from .tables import KERNELS as _KERNELS

def _same_dtype(arrays, dtype) -> bool:
    for a in arrays:
        if a.dtype != dtype:
            return False
    return True


def _ufunc_out(ufunc_name: str, mixed: bool = False):
    """The out= form of an op whose kernel is the ufunc ``ufunc_name`` (its ``ufunc`` trait):
    exact where every operand has the output's dtype, or on any operands when ``mixed``
    (the ``ufunc_mixed`` trait: the kernel promotes nothing first)."""
    ufunc = getattr(np, ufunc_name)

    def out_kernel(xp, *arrays, out, **attrs):
        if not mixed:
            dtype = out.dtype
            for a in arrays:
                if a.dtype != dtype:
                    return False
        # the CPU backend's arrays are numpy's: the ufunc itself, looked up once
        (ufunc if xp is np else getattr(xp, ufunc_name))(*arrays, out=out)
        return True

    def direct(in_dtypes, out_dtype):
        """The bare ufunc, to call as ``ufunc(*arrays, out=out)``, where these dtypes (fixed
        when a program is prepared) make the checks above pass; else None."""
        ok = mixed or all(d == out_dtype for d in in_dtypes)
        return ufunc if ok else None
    out_kernel.__name__ = f"{ufunc_name}_out"
    out_kernel.direct = direct
    return out_kernel


def _square_out(xp, x, out):
    if x.dtype != out.dtype:
        return False
    xp.multiply(x, x, out=out)
    return True


def _relu_out(xp, x, out):
    if x.dtype != out.dtype:
        return False
    xp.maximum(x, 0, out=out)
    return True


def _sigmoid_out(xp, x, out):
    # same formula as the kernel: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below
    if x.dtype != out.dtype or x.dtype.kind != "f":
        return False
    positive = xp.greater_equal(x, 0)      # before ``out`` (which may be ``x``) is written
    # -|x| in one pass: copysign(x, -1) sets the sign bit, as abs then negative do (NaNs too)
    xp.copysign(x, out.dtype.type(-1), out=out)
    xp.exp(out, out=out)
    numerator = xp.where(positive, out.dtype.type(1), out)
    xp.add(out, 1, out=out)
    xp.divide(numerator, out, out=out)
    return True


def _tanh_backward_out(xp, g, y, out):
    # the kernel's ``g * (1 - y * y)``, each step a ufunc into ``out`` (the same roundings in
    # the same order) instead of two full-size temporaries; ``g`` is read last, so where
    # ``out`` shares its bytes (the planner wrote the gradient over the cotangent), in
    # chunks through a small temporary
    if not (g.dtype == y.dtype == out.dtype) or out.dtype not in _F32_64:
        return False
    if not xp.may_share_memory(out, g):
        xp.multiply(y, y, out=out)
        xp.subtract(1, out, out=out)
        xp.multiply(g, out, out=out)
        return True
    if not _same_flat(xp, out, g, y):
        return False
    o, gf, yf = out.reshape(-1), g.reshape(-1), y.reshape(-1)
    tmp = xp.empty(min(o.size, _CHUNK), o.dtype)
    for i in range(0, o.size, _CHUNK):
        j = min(i + _CHUNK, o.size)
        t = tmp[:j - i]
        xp.multiply(yf[i:j], yf[i:j], out=t)
        xp.subtract(1, t, out=t)
        xp.multiply(gf[i:j], t, out=o[i:j])
    return True


def _same_flat(xp, out, *arrays) -> bool:
    """Whether ``out`` and ``arrays`` are C-contiguous arrays of one shape, each either
    ``out``'s own bytes or apart from them (so a chunk of each lines up with ``out``'s)."""
    if not out.flags.c_contiguous:
        return False
    start = out.__array_interface__["data"][0]
    for a in arrays:
        if a.shape != out.shape or not a.flags.c_contiguous:
            return False
        if a.__array_interface__["data"][0] != start and xp.may_share_memory(a, out):
            return False
    return True


_CHUNK = 16384


def _cat_out(xp, *xs, out, dim):
    # the kernel's concatenate, written into ``out`` (no operand of another dtype, none
    # sharing ``out``'s bytes)
    if any(x.dtype != out.dtype or xp.may_share_memory(x, out) for x in xs):
        return False
    xp.concatenate(xs, axis=dim, out=out)
    return True


def _bernoulli_out(xp, p, seed, *, out, stream):
    # the kernel's ``(rng.random(p.shape) < p).astype(p.dtype)`` in chunks: the generator
    # gives its doubles in order whatever the sizes asked, so the same draws meet the same
    # probabilities, without the float64 and bool arrays of the whole shape
    if xp is not np or p.dtype != out.dtype or out.dtype not in _F32_64 \
            or not _same_flat(xp, out, p):
        return False
    gen = _xp.rng(xp, seed, stream)
    o, pf = out.reshape(-1), p.reshape(-1)
    n = min(o.size, _CHUNK)
    draws, mask = np.empty(n), np.empty(n, bool)
    for i in range(0, o.size, _CHUNK):
        j = min(i + _CHUNK, o.size)
        u, m = draws[:j - i], mask[:j - i]
        gen.random(out=u)
        np.less(u, pf[i:j], out=m)
        np.copyto(o[i:j], m, casting="unsafe")
    return True


def _sigmoid_backward_out(xp, g, y, out):
    # the kernel's ``g * y * (1 - y)``: ``1 - y`` into ``out``, then ``(g * y) * out`` (one
    # temporary instead of three); ``g`` and ``y`` are read after ``out`` is written
    if not (g.dtype == y.dtype == out.dtype) or out.dtype not in _F32_64 \
            or xp.may_share_memory(out, g) or xp.may_share_memory(out, y):
        return False
    xp.subtract(1, y, out=out)
    xp.multiply(xp.multiply(g, y), out, out=out)
    return True


_F32_64 = (np.dtype(np.float32), np.dtype(np.float64))


def _matmul_out(xp, a, b, out):
    if a.dtype != out.dtype or b.dtype != out.dtype or a.ndim < 2 or b.ndim < 2 or \
            a.dtype in HALF_NP:     # (half dtypes: the plain kernel computes in float32)
        return False
    _matmul_into(xp, a, b, out)
    return True


def _reduce_out(fn_name: str):
    def out_kernel(xp, x, out, dim, keepdim, **attrs):
        if x.dtype != out.dtype or x.dtype.kind != "f" or x.dtype == xp.float16 or \
                attrs.get("dtype") or not x.ndim:
            return False
        parts = _blas_reduce.split(x, dim) if fn_name in ("sum", "mean") else None
        if parts is not None and out.flags.c_contiguous:     # as the kernel computes it
            _blas_reduce.blas_sum(x, parts, out=out)
            if fn_name == "mean":
                out /= x.dtype.type(x.size // max(out.size, 1))
            return True
        getattr(xp, fn_name)(x, axis=tuple(dim), keepdims=keepdim, out=out)
        return True
    return out_kernel


def _pow_scalar_out(xp, x, out, exponent):
    if x.dtype != out.dtype or x.dtype.kind != "f":
        return False
    if exponent == 0.5 or exponent == -0.5:     # sqrt and rsqrt, as the op's kernel
        xp.sqrt(x, out=out)
        if exponent < 0:
            xp.reciprocal(out, out=out)
        return True
    xp.power(x, exponent, out=out)
    return True


def _where_out(xp, c, a, b, out):
    if a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if c.dtype == bool and _where_bits(xp, c, a, b, out):
        return True
    if xp.may_share_memory(out, c):    # a bool where written over its condition (planned
        xp.copyto(out, xp.where(c, a, b))      # in place): the copies below would clobber c
        return True
    if xp.may_share_memory(out, a):    # in place over a: keep a, fill in b where c is False
        if xp.may_share_memory(out, b) or xp.may_share_memory(out, c):
            return False
        xp.copyto(out, xp.broadcast_to(a, out.shape))
        xp.copyto(out, xp.broadcast_to(b, out.shape),
                  where=xp.logical_not(xp.broadcast_to(c, out.shape)))
        return True
    xp.copyto(out, xp.broadcast_to(b, out.shape))
    xp.copyto(out, xp.broadcast_to(a, out.shape), where=xp.broadcast_to(c, out.shape))
    return True


def _cast_out(xp, x, out, dtype):
    xp.copyto(out, x, casting="unsafe")
    return True


def _full_like_out(xp, x, out, fill_value, dtype):
    out.fill(fill_value)
    return True


def _pad_out(xp, x, *, out, pad, value):
    """A constant pad written into ``out``: each padded slab filled with ``value``, then
    ``x`` copied into the interior, so a planned pad is one pass over its output (the
    reference's ``np.pad`` makes a fresh array that the planned runtime then copied into
    the arena). The bits of ``np.pad`` (the same values placed); float dtypes only."""
    if out.dtype != x.dtype or out.dtype.kind not in "fc" or xp.may_share_memory(out, x):
        return False
    inner = []
    for axis, ((lo, hi), n) in enumerate(zip(shape._pad_width(x.ndim, pad), x.shape)):
        lead = (slice(None),) * axis
        if lo:
            out[lead + (slice(0, lo),)] = value
        if hi:
            out[lead + (slice(lo + n, None),)] = value
        inner.append(slice(lo, lo + n))
    out[tuple(inner)] = x
    return True


def _sum_to_out(xp, x, *, out, shape):
    axes, _ = _sum_to_axes(x.shape, shape)
    parts = _blas_reduce.split(x, axes) if axes else None
    if parts is None or out.dtype != x.dtype or not out.flags.c_contiguous:
        return False
    _blas_reduce.blas_sum(x, parts, out=out)
    return True


def _sum_to_prepare(xp, attrs: dict, in_shapes) -> Optional[Callable]:
    """A runner for ``sum_to`` on an input of one shape (what the planned runtime knows):
    the axes and the BLAS split are found once, then each call is ``_sum_to_out``'s own
    ``blas_sum`` call (the same bits). None where that form does not apply; arrays it was
    not made for go through ``_sum_to_out`` or the kernel as an unprepared step would (the
    runner always writes: the runtime's fallback for a False is the multi-output one)."""
    if xp is not np or len(in_shapes) != 1:
        return None
    xs = tuple(in_shapes[0])
    axes, _ = _sum_to_axes(xs, attrs["shape"])
    parts = _blas_reduce.split_shape(xs, axes) if axes else None
    if parts is None:
        return None
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    blas_sum = _blas_reduce.blas_sum
    to = attrs["shape"]
    kernel = _KERNELS[shape.sum_to_op]

    def runner(args, outs) -> bool:
        x, out = args[0], outs[0]
        if (type(x) is not np.ndarray or x.shape != xs or x.dtype not in floats
                or out.dtype != x.dtype or not x.flags.c_contiguous
                or not out.flags.c_contiguous):
            if not _sum_to_out(xp, x, out=out, shape=to):
                res = kernel(xp, x, shape=to)
                if tuple(getattr(res, "shape", ())) != out.shape:
                    raise ValueError(f"kernel returned shape {list(res.shape)}, planned "
                                     f"{list(out.shape)}")
                xp.copyto(out, res, casting="unsafe")
            return True
        blas_sum(x, parts, out=out)
        return True
    return runner


_sum_to_axes = shape._sum_to_axes


def _sce_backward_out(xp, g, x, t, *, out, ignore_index, reduction):
    if out.dtype != x.dtype or xp.may_share_memory(out, x):
        return False
    if not sce_backward_into(g, x, t, ignore_index, reduction, out):
        nn._sce_grad(xp, g, x, t, ignore_index, reduction, out)
    return True


def _bn_out(xp, x, w, b, *, out, eps):
    if x.dtype == xp.float16 or any(o.dtype != x.dtype for o in out) \
            or not out[0].flags.c_contiguous \
            or xp.may_share_memory(out[0], x):
        return False
    bn_forward(xp, x, w, b, eps, out)
    return True


def _bn_backward_out(xp, dy, x, w, mean, var, *, out, eps):
    if x.dtype == xp.float16 or any(o.dtype != x.dtype for o in out) \
            or not out[0].flags.c_contiguous \
            or xp.may_share_memory(out[0], x) or xp.may_share_memory(out[0], dy):
        return False
    bn_backward(xp, dy, x, w, mean, var, eps, out)
    return True


def _fresh_out(xp, out, arrays) -> bool:
    """Whether a numba conv/pool loop may write into ``out``: numpy arrays of out's dtype,
    out C-contiguous and overlapping none of them (the kernels read their operands while
    they write)."""
    if xp is not np or not out.flags.c_contiguous:
        return False
    for a in arrays:
        if a.dtype != out.dtype or np.may_share_memory(out, a):
            return False
    return True


def _conv2d_out(xp, x, w, b=None, *, out, stride, padding, dilation, groups):
    nb = _conv_numba(x, w)
    if nb is None or not _fresh_out(xp, out, (x, w) if b is None else (x, w, b)):
        return False
    _conv2d_into(nb, x, w, b, stride, padding, dilation, groups, out)
    return True


def _conv2d_input_grad_out(xp, g, w, *, out, shape, stride, padding, dilation, groups):
    nb = _conv_numba(g, w)
    if nb is None or not _fresh_out(xp, out, (g, w)):
        return False
    _conv2d_input_grad_into(nb, g, w, stride, padding, dilation, groups, out)
    return True


def _max_pool2d_out(xp, x, *, out, kernel_size, stride, padding, dilation, ceil_mode):
    nb = _pool_numba(x)
    if nb is None or not _fresh_out(xp, out, (x,)):
        return False
    _max_pool2d_into(nb, x, kernel_size, stride, padding, dilation, out)
    return True


def _max_pool2d_backward_out(xp, g, x, *, out, kernel_size, stride, padding, dilation,
                             ceil_mode):
    nb = _pool_numba(g, x)
    if nb is None or not _fresh_out(xp, out, (g,)) or np.may_share_memory(out, x):
        return False
    _max_pool2d_backward_into(nb, g, x, kernel_size, stride, padding, dilation, out)
    return True


# Elementwise ops without an out= form here, and why: the planned runtime runs their plain
# kernel and copies its result into the arena. Every elementwise op has an out= form (its
# ufunc trait, or one below) or an entry here (tests/test_registry.py): an op added without
# deciding fails there.
NO_OUT_FORM: Dict[OpDef, str] = {}
for _op in (elementwise.rsqrt_op, elementwise.leaky_relu_op, elementwise.gelu_op,
            elementwise.softplus_op, elementwise.sign_op, elementwise.frac_op,
            elementwise.clamp_op, elementwise.logsigmoid_op, pointwise.round_op,
            pointwise.nan_to_num_op,
            pointwise.lerp_op, pointwise.xlogy_op, activations.elu_op, activations.hardtanh_op,
            activations.hardsigmoid_op, activations.hardswish_op, activations.silu_op,
            activations.mish_op):
    NO_OUT_FORM[_op] = "several array operations: its kernel, then one copy"
for _op in (pointwise.bitwise_left_shift_op, pointwise.bitwise_right_shift_op):
    NO_OUT_FORM[_op] = "PyTorch's rule for shifts out of range is no single ufunc"
for _op in (elementwise.floor_op, elementwise.ceil_op, elementwise.trunc_op):
    NO_OUT_FORM[_op] = "integers pass through as a copy (the ufunc would give floats)"
NO_OUT_FORM[elementwise.erf_op] = "erf is no numpy ufunc (graphlib's xp.erf)"
NO_OUT_FORM[nn.stop_gradient_op] = "its kernel returns its input: nothing to compute"
for _op in (special.erfc_op, special.erfinv_op, special.lgamma_op, special.digamma_op,
            special.polygamma_op, special.i0_op, special.i1_op):
    NO_OUT_FORM[_op] = "a scipy.special function (xp.special), cast to the input's dtype"
NO_OUT_FORM[special.heaviside_op] = "several array operations: a where, then a cast"


def table() -> dict:
    """op -> out= form, for the backend to register."""
    forms = {}
    for op in REGISTRY.values():        # built from the ops' ufunc traits
        if op.ufunc is not None:
            forms[op] = _ufunc_out(op.ufunc, mixed=op.ufunc_mixed)
    forms[elementwise.square_op] = _square_out
    forms[elementwise.relu_op] = _relu_out
    forms[elementwise.sigmoid_op] = _sigmoid_out
    forms[elementwise.tanh_backward_op] = _tanh_backward_out
    forms[shape.cat_op] = _cat_out
    forms[creation.bernoulli_op] = _bernoulli_out
    forms[elementwise.sigmoid_backward_op] = _sigmoid_backward_out
    forms[elementwise.pow_scalar_op] = _pow_scalar_out
    forms[elementwise.where_op] = _where_out
    forms[elementwise.cast_op] = _cast_out
    forms[creation.full_like_op] = _full_like_out
    forms[linalg.matmul_op] = _matmul_out
    forms[reduction.sum_op] = _reduce_out("sum")
    forms[reduction.mean_op] = _reduce_out("mean")
    forms[reduction.amax_op] = forms[reduction.max_op] = _reduce_out("amax")
    forms[reduction.amin_op] = forms[reduction.min_op] = _reduce_out("amin")
    forms[shape.sum_to_op] = _sum_to_out
    forms[shape.pad_op] = _pad_out
    forms[nn.softmax_cross_entropy_backward_op] = _sce_backward_out
    forms[nn.batch_norm_train_op] = _bn_out
    forms[nn.batch_norm_train_backward_op] = _bn_backward_out
    forms[conv.conv2d_op] = _conv2d_out
    forms[conv.conv2d_input_grad_op] = _conv2d_input_grad_out
    forms[conv.max_pool2d_op] = _max_pool2d_out
    forms[conv.max_pool2d_backward_op] = _max_pool2d_backward_out
    return forms


def prepare_table() -> dict:
    """op -> per-program ``prepare(xp, attrs, in_shapes)`` shortcuts of the out= forms."""
    return {shape.sum_to_op: _sum_to_prepare}
