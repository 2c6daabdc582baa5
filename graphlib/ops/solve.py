"""Inverses and solvers (PyTorch's ``torch.linalg.inv``, ``solve``, ``det``, ``slogdet``,
``pinv`` and ``lstsq``) over the last two dims, batched, with PyTorch's gradient formulas
(``FunctionsManual.cpp``): ``inv``: ``-A^-T g A^-T``; ``solve``: ``gB = A^-T g``,
``gA = -gB X^T``; ``det``: ``g det A^-T``; ``slogdet``: ``g A^-T`` (the sign has none);
``pinv``: ``pinv_backward``; ``lstsq``: the solution's gradient is that of ``pinv(A) @ B``.

The kernels are numpy's (``xp.linalg``); a singular matrix where the op cannot go on raises
``LinAlgError`` (a ``RuntimeError``, as ``torch.linalg.LinAlgError``), naming the batch
element. A deliberate difference: ``det``'s gradient at a singular matrix is NaN (PyTorch
computes the adjugate there).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..attrs import Attr, Attrs
from ..autodiff import is_zero_cotangent
from ..batching import ensure_batched, leading_batch_rule, pad_after_batch, shape_of
from ..errors import (DTypeError, LinAlgError, ShapeError, UnsupportedDTypeError, composite,
                      located)
from ..registry import OpDef, get_op, register
from ..types import TensorType, broadcast_shapes
from ._common import operand
from .creation import constant
from .elementwise import where
from .linalg import matmul
from .shape import squeeze, transpose, unsqueeze

slogdet_result = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
lstsq_result = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])

LINALG_DTYPES = ("float32", "float64")
LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def mT(x):
    """The transpose of the last two dims (``x.mT``)."""
    return transpose(x, -2, -1)


def check_matrix(t: TensorType, name: str, square: bool = True) -> None:
    """PyTorch's checks of a linalg operand: at least 2 dims, a float dtype, square."""
    if t.ndim < 2:
        raise ShapeError(f"{name}: The input tensor A must have at least 2 dimensions, "
                         f"found shape {list(t.shape)}")
    if t.dtype not in LINALG_DTYPES:
        raise DTypeError(f"{name}: Expected a floating point tensor (float32 or float64) as "
                         f"input, found {t.dtype}; cast it first (A.double())")
    m, n = t.shape[-2], t.shape[-1]
    if square and m != n:
        raise ShapeError(f"{name}: A must be batches of square matrices, but they are {m} by "
                         f"{n} matrices")


def _square_infer(name: str, outs):
    def infer(types, attrs):
        (t,) = types
        check_matrix(t, name)
        return outs(t, attrs)
    return infer


def raise_first_failure(xp, a, fn, message: str):
    """Raise LinAlgError ``message`` naming the first batch element of ``a`` on which
    ``fn`` (a numpy linalg call) fails; called after a batched call failed."""
    for index in np.ndindex(*a.shape[:-2]):
        try:
            fn(a[index])
        except xp.linalg.LinAlgError:
            where = f"(Batch element {list(index)}): " if a.ndim > 2 else ""
            raise LinAlgError(f"{where}{message}") from None
    raise LinAlgError(message)


# -- inv ----------------------------------------------------------------------------------------
_SINGULAR = "the input matrix is singular (LU found a zero pivot)"


def _inv_kernel(xp, a):
    try:
        return xp.linalg.inv(a)
    except xp.linalg.LinAlgError:
        raise_first_failure(xp, a, xp.linalg.inv,
                            f"linalg.inv: the inversion could not be completed because "
                            f"{_SINGULAR}")


def _inv_vjp(cts, ins, outs, attrs, needs):
    (g,), (y,) = cts, outs
    yt = mT(y)
    return [-matmul(matmul(yt, g), yt)]


inv_op = register(OpDef(
    "linalg_inv", _square_infer("linalg.inv", lambda t, a: [t]), _inv_kernel, _inv_vjp,
    vjp_reads_output=True, doc="the inverse of square matrices", attrs=Attrs(),
    batch=leading_batch_rule))


def inv(A):
    """The inverse of a square matrix (or of each in a batch: the last two dims), as
    ``torch.linalg.inv``; a singular matrix raises ``LinAlgError``. Gradient:
    ``-A^-T g A^-T``."""
    return inv_op(operand(A, "linalg.inv", "A"))


# -- solve --------------------------------------------------------------------------------------
def _solve_infer(types, attrs):
    a, b = types
    check_matrix(a, "linalg.solve")
    if b.ndim < 2:
        raise ShapeError(f"linalg.solve: expected B to have at least 2 dims, found shape "
                         f"{list(b.shape)}")
    if b.dtype != a.dtype:
        raise DTypeError(f"linalg.solve: Expected A and B to have the same dtype, but found "
                         f"A of type {a.dtype} and B of type {b.dtype} instead")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                         f"AX = B ({a.shape[-2]}x{a.shape[-1]} and {b.shape[-2]}x"
                         f"{b.shape[-1]})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="linalg.solve")
    return [TensorType(batch + tuple(b.shape[-2:]), a.dtype)]


def _solve_kernel(xp, a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = xp.broadcast_to(a, batch + a.shape[-2:])
    b = xp.broadcast_to(b, batch + b.shape[-2:])
    try:
        return xp.linalg.solve(a, b)
    except xp.linalg.LinAlgError:
        raise_first_failure(xp, a, xp.linalg.inv,
                            f"linalg.solve: The solver failed because {_SINGULAR}")


def _solve_vjp(cts, ins, outs, attrs, needs):
    (g,), (a, _), (x,) = cts, ins, outs
    gb = solve_op(mT(a), g)
    ga = -matmul(gb, mT(x)) if needs[0] else None
    return [ga, gb if needs[1] else None]


def _solve_rule(op, args, batched, attrs, size):
    """``solve(A, B)`` reads B as a vector or a matrix by its shape against A's (torch's
    rule), and broadcasts their batch dims: a vector becomes a one-column matrix, the
    operand with fewer batch dims gets size-1 dims behind the batch dim, and both carry the
    batch. (``lstsq`` has no rule: the outputs a driver leaves empty are empty whatever the
    batch, as in PyTorch, so it runs per example.)"""
    (a, b), (ba, bb) = args, batched
    sa = shape_of(a)[1:] if ba else shape_of(a)
    sb = shape_of(b)[1:] if bb else shape_of(b)
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    a, b = ensure_batched(a, ba, size), ensure_batched(b, bb, size)
    if vector:
        b = get_op("reshape")(b, shape=shape_of(b) + (1,))
        sb = sb + (1,)
    gap = (len(sa) - 2) - (len(sb) - 2)
    if gap > 0:
        b = pad_after_batch(b, gap)
    elif gap < 0:
        a = pad_after_batch(a, -gap)
    out = op(a, b, **attrs)
    return get_op("reshape")(out, shape=shape_of(out)[:-1]) if vector else out


solve_op = register(OpDef(
    "linalg_solve", _solve_infer, _solve_kernel, _solve_vjp, vjp_reads_output=True,
    doc="X with A X = B for square A (batched, broadcasting)", attrs=Attrs(), batch=_solve_rule))


def solve(A, B, *, left: bool = True):
    """``X`` with ``A X = B`` (``left=False``: ``X A = B``), as ``torch.linalg.solve``:
    batch dims broadcast; ``B`` is a batch of vectors when it is 1-D or has the shape
    ``A.shape[:-1]``. A singular ``A`` raises ``LinAlgError``. Gradients: ``gB = A^-T g``,
    ``gA = -gB X^T``."""
    A = operand(A, "linalg.solve", "A")
    B = operand(B, "linalg.solve", "B")
    if A.ndim < 2:
        raise ShapeError(located(f"linalg.solve: The input tensor A must have at least 2 "
                                 f"dimensions, found shape {list(A.shape)}"))
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if not left:
        if vector:
            raise ShapeError(located("linalg.solve: left=False needs B to be a matrix (or a "
                                     f"batch of them), found shape {list(B.shape)}"))
        return mT(solve_op(mT(A), mT(B)))
    if vector:
        return squeeze(solve_op(A, unsqueeze(B, -1)), -1)
    return solve_op(A, B)


# -- det and slogdet ----------------------------------------------------------------------------
def _batch_type(t, attrs):
    return [TensorType(tuple(t.shape[:-2]), t.dtype)]


def _det_kernel(xp, a):
    return xp.asarray(xp.linalg.det(a)).astype(a.dtype, copy=False)


def _det_vjp(cts, ins, outs, attrs, needs):
    (g,), (a,), (d,) = cts, ins, outs
    return [unsqueeze(unsqueeze(g * d, -1), -1) * mT(inv_op(a))]


det_op = register(OpDef(
    "linalg_det", _square_infer("linalg.det", _batch_type), _det_kernel, _det_vjp,
    vjp_reads_output=True, doc="the determinant of square matrices", attrs=Attrs(),
    batch=leading_batch_rule))


def det(A):
    """The determinant of a square matrix (or of each in a batch), as ``torch.linalg.det``.
    Gradient: ``g det(A) A^-T`` (NaN at a singular matrix, where PyTorch gives the
    adjugate)."""
    return det_op(operand(A, "linalg.det", "A"))


def _slogdet_kernel(xp, a):
    sign, logabs = xp.linalg.slogdet(a)
    return (xp.asarray(sign).astype(a.dtype, copy=False),
            xp.asarray(logabs).astype(a.dtype, copy=False))


def _slogdet_vjp(cts, ins, outs, attrs, needs):
    (_, g), (a,) = cts, ins
    return [unsqueeze(unsqueeze(g, -1), -1) * mT(inv_op(a))]


slogdet_op = register(OpDef(
    "linalg_slogdet", _square_infer("linalg.slogdet", lambda t, a: _batch_type(t, a) * 2),
    _slogdet_kernel, _slogdet_vjp, multi_output=True,
    doc="the sign and log of the absolute value of the determinant", attrs=Attrs(),
    batch=leading_batch_rule))


def slogdet(A):
    """``(sign, logabsdet)`` of the determinant of a square matrix (or of each in a batch),
    as ``torch.linalg.slogdet`` (a named tuple). A singular matrix gives ``(0, -inf)``.
    Gradient of ``logabsdet``: ``g A^-T``; the sign has none."""
    return slogdet_result(*slogdet_op(operand(A, "linalg.slogdet", "A")))


# -- pinv -----------------------------------------------------------------------------------------
def _pinv_infer(types, attrs):
    (t,) = types
    check_matrix(t, "linalg.pinv", square=attrs.get("hermitian", False))
    return [TensorType(tuple(t.shape[:-2]) + (t.shape[-1], t.shape[-2]), t.dtype)]


def _cutoff(xp, s, atol, rtol, m, n, dtype):
    """PyTorch's rule: singular values at most ``max(atol, rtol * s_max)`` count as zero;
    rtol defaults to ``eps * max(m, n)`` when atol is None or 0 (else to 0)."""
    if rtol is None:
        rtol = np.finfo(dtype).eps * max(m, n) if not atol else 0.0
    smax = s.max(axis=-1, keepdims=True) if s.shape[-1] else xp.zeros(s.shape[:-1] + (1,),
                                                                         s.dtype)
    return xp.maximum(atol or 0.0, rtol * smax)


def _pinv_kernel(xp, a, atol=None, rtol=None, hermitian=False):
    m, n = a.shape[-2:]
    if hermitian:
        w, v = xp.linalg.eigh(a)
        keep = xp.abs(w) > _cutoff(xp, xp.abs(w), atol, rtol, m, n, a.dtype)
        winv = xp.where(keep, 1 / xp.where(keep, w, 1), 0)
        out = xp.matmul(v * winv[..., None, :], xp.swapaxes(v, -1, -2))
    else:
        u, s, vh = xp.linalg.svd(a, full_matrices=False)
        keep = s > _cutoff(xp, s, atol, rtol, m, n, a.dtype)
        sinv = xp.where(keep, 1 / xp.where(keep, s, 1), 0)
        out = xp.matmul(xp.swapaxes(vh, -1, -2) * sinv[..., None, :], xp.swapaxes(u, -1, -2))
    return out.astype(a.dtype, copy=False)


def pinv_backward(g, p, a):
    """PyTorch's ``pinv_backward``: the cotangent of ``A`` for ``g`` of ``P = pinv(A)``,
    arranged for the smaller of the matrix sizes."""
    m, n = a.shape[-2], a.shape[-1]
    pt, gt = mT(p), mT(g)
    if m <= n:
        k = matmul(gt, p)
        kpt = matmul(k, pt)
        return (-mT(matmul(p, k)) + kpt - matmul(matmul(a, p), kpt)
                + matmul(matmul(pt, p), gt - matmul(k, a)))
    k = matmul(p, gt)
    ptk = matmul(pt, k)
    return (-mT(matmul(k, p)) + matmul(matmul(gt - matmul(a, k), p), pt) + ptk
            - matmul(matmul(ptk, p), a))


def _pinv_vjp(cts, ins, outs, attrs, needs):
    return [pinv_backward(cts[0], outs[0], ins[0])]


pinv_op = register(OpDef(
    "linalg_pinv", _pinv_infer, _pinv_kernel, _pinv_vjp, vjp_reads_output=True,
    doc="the Moore-Penrose pseudo-inverse (through the SVD, or eigh when hermitian)",
    attrs=Attrs(atol=Attr(float, default=None), rtol=Attr(float, default=None),
                hermitian=Attr(bool, default=False)), batch=leading_batch_rule))


def _tolerance(value, name, what):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(located(f"{name}: expected {what} to be a float or None, found "
                                f"{type(value).__name__} (tensor tolerances are not "
                                f"supported)"))
    return float(value)


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False, rcond=None):
    """The Moore-Penrose pseudo-inverse, as ``torch.linalg.pinv``: singular values at most
    ``max(atol, rtol * s_max)`` count as zero (rtol defaults to ``eps * max(m, n)`` when
    atol is None or 0); ``hermitian=True`` uses ``eigh`` (reading the lower triangle).
    ``rcond`` is the older name of ``rtol``. Tolerances are floats (not tensors).
    Gradient: PyTorch's ``pinv_backward``."""
    A = operand(A, "linalg.pinv", "A")
    if rcond is not None:
        if rtol is not None:
            raise TypeError(located("linalg.pinv: give rtol or its older name rcond, not both"))
        rtol = rcond
    attrs = {"hermitian": bool(hermitian)}
    for key, value in (("atol", atol), ("rtol", rtol)):
        value = _tolerance(value, "linalg.pinv", key)
        if value is not None:
            attrs[key] = value
    return pinv_op(A, **attrs)


# -- lstsq ----------------------------------------------------------------------------------------
def _lstsq_infer(types, attrs):
    a, b = types
    check_matrix(a, "linalg.lstsq", square=False)
    if b.ndim < 2:
        raise ShapeError(f"linalg.lstsq: expected B to have at least 2 dims, found shape "
                         f"{list(b.shape)}")
    if b.dtype != a.dtype:
        raise DTypeError(f"linalg.lstsq: Expected A and B to have the same dtype, but found "
                         f"A of type {a.dtype} and B of type {b.dtype} instead")
    m, n, k = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.shape[-2] != m:
        raise ShapeError(f"linalg.lstsq: input.size(-2) should match other.size(-2), found "
                         f"A of shape {list(a.shape)} and B of shape {list(b.shape)}")
    if not all(isinstance(d, int) for d in (m, n)):
        raise ShapeError(f"linalg.lstsq: needs static matrix sizes, found {list(a.shape)}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="linalg.lstsq")
    driver = attrs.get("driver", "gelsy")
    residuals = batch + (k,) if m > n and driver != "gelsy" else (0,)
    rank = batch if driver != "gels" else (0,)
    singular = batch + (min(m, n),) if driver in ("gelsd", "gelss") else (0,)
    return [TensorType(batch + (n, k), a.dtype), TensorType(residuals, a.dtype),
            TensorType(rank, "int64"), TensorType(singular, a.dtype)]


def _lstsq_kernel(xp, a, b, rcond=None, driver="gelsy"):
    m, n, k = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = xp.broadcast_to(a, batch + (m, n)), xp.broadcast_to(b, batch + (m, k))
    if rcond is None:
        rcond = float(np.finfo(a.dtype).eps * max(m, n))
    x = xp.empty(batch + (n, k), a.dtype)
    res = xp.empty(batch + (k,), a.dtype)
    rank = xp.empty(batch, np.int64)
    sv = xp.empty(batch + (min(m, n),), a.dtype)
    for index in np.ndindex(*batch):
        x[index], r, rank[index], sv[index] = xp.linalg.lstsq(a[index], b[index], rcond=rcond)
        res[index] = r if r.size else xp.sum((a[index] @ x[index] - b[index]) ** 2, axis=0)
    return (x, res if m > n and driver != "gelsy" else xp.empty((0,), a.dtype),
            rank if driver != "gels" else xp.empty((0,), np.int64),
            sv if driver in ("gelsd", "gelss") else xp.empty((0,), a.dtype))


def _lstsq_vjp(cts, ins, outs, attrs, needs):
    # PyTorch's linalg_lstsq_backward: the solution's gradient is that of pinv(A) @ B; the
    # residuals' r_j = |A x_j - b_j|^2 at the optimum x (where dr/dx = 0): 2 (AX - B) g X^T
    # for A and -2 (AX - B) g for B; rank and singular values have none
    (gx, gres), (a, b), x = cts[:2], ins, outs[0]
    ga = gb = None
    if not is_zero_cotangent(gx):
        p = pinv_op(a)
        ga = pinv_backward(matmul(gx, mT(b)), p, a) if needs[0] else None
        gb = matmul(mT(p), gx) if needs[1] else None
    if not is_zero_cotangent(gres) and outs[1].shape[-1:] == x.shape[-1:] and (
            a.shape[-2] > a.shape[-1]):
        r = (matmul(a, x) - b) * (2.0 * unsqueeze(gres, -2))
        if needs[0]:
            ga = matmul(r, mT(x)) if ga is None else ga + matmul(r, mT(x))
        if needs[1]:
            gb = -r if gb is None else gb - r
    return [ga, gb]


lstsq_op = register(OpDef(
    "linalg_lstsq", _lstsq_infer, _lstsq_kernel, _lstsq_vjp, multi_output=True,
    vjp_reads_output=True,
    doc="least-squares solutions of A X = B (batched)",
    attrs=Attrs(rcond=Attr(float, default=None),
                driver=Attr(str, default="gelsy", choices=LSTSQ_DRIVERS))))


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of ``A X = B``, as ``torch.linalg.lstsq``: the named
    tuple ``(solution, residuals, rank, singular_values)``. ``driver`` (``'gelsy'`` by
    default, ``'gels'``, ``'gelsd'``, ``'gelss'``) decides which of the others are filled,
    as on PyTorch's CPU: residuals (squared, per column) when ``m > n`` and the driver is
    not gelsy, rank unless gels, singular values for gelsd and gelss; the others are
    empty. All drivers compute with LAPACK's gelsd (numpy), so rank-deficient inputs get
    the minimum-norm solution with every driver, and residuals even where PyTorch leaves
    them empty. ``B`` 1-D is one right-hand side. Gradient (of the solution): that of
    ``pinv(A) @ B``."""
    A = operand(A, "linalg.lstsq", "A")
    B = operand(B, "linalg.lstsq", "B")
    if driver is not None and driver not in LSTSQ_DRIVERS:
        raise ValueError(located(f"linalg.lstsq: parameter `driver` should be one of "
                                 f"({', '.join(LSTSQ_DRIVERS)}), found {driver!r}"))
    attrs = {"driver": driver or "gelsy"}
    rcond = _tolerance(rcond, "linalg.lstsq", "rcond")
    if rcond is not None:
        attrs["rcond"] = rcond
    vector = B.ndim == 1
    out = lstsq_op(A, unsqueeze(B, -1) if vector else B, **attrs)
    if vector:
        out = (squeeze(out[0], -1),) + tuple(out[1:])
    return lstsq_result(*out)


# -- composites ---------------------------------------------------------------------------------
@composite("linalg.matrix_power")
def matrix_power(A, n: int):
    """``A`` to the integer power ``n`` (batched square matrices), as
    ``torch.linalg.matrix_power``: by repeated squaring; ``n = 0`` gives the identity and a
    negative ``n`` the power of ``inv(A)``."""
    A = operand(A, "linalg.matrix_power", "A")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(located(f"linalg.matrix_power: expected an int n, found "
                                f"{type(n).__name__}"))
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(located(f"linalg.matrix_power: A must be batches of square matrices, "
                                 f"found shape {list(A.shape)}"))
    if A.dtype == "bool":
        raise UnsupportedDTypeError(located("linalg.matrix_power: bool matrices are not "
                                            "supported (matmul has no bool kernel); cast first"))
    n = int(n)
    if n == 0:
        # the identity in A's shape, still depending on A (with a zero gradient, as PyTorch)
        k = A.shape[-1]
        return where(constant(np.ones((k, k), bool)), constant(np.eye(k), A.dtype), A)
    base = inv(A) if n < 0 else A
    n, result = abs(n), None
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


@composite("linalg.multi_dot")
def multi_dot(tensors):
    """The product of a list of matrices (the first may be a vector, and the last), as
    ``torch.linalg.multi_dot``, multiplied in the order that costs the fewest
    multiply-adds (the matrix-chain order, from the static shapes)."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(located(f"linalg.multi_dot: expected a list or tuple of tensors, "
                                f"found {type(tensors).__name__}"))
    ts = [operand(t, "linalg.multi_dot", "tensors") for t in tensors]
    if len(ts) < 2:
        raise ValueError(located(f"linalg.multi_dot: expected at least 2 tensors but got "
                                 f"{len(ts)}"))
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = unsqueeze(ts[0], 0)
    if last_vec:
        ts[-1] = unsqueeze(ts[-1], -1)
    for i, t in enumerate(ts):
        if t.ndim != 2:
            raise ShapeError(located(f"linalg.multi_dot: tensor {i} must be 2-D (the first and "
                                     f"last may be 1-D), found shape {list(t.shape)}"))
    dims = [ts[0].shape[0]] + [t.shape[1] for t in ts]
    count = len(ts)
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    # the chain multiplied by the splits, with an explicit stack (no recursion)
    results, stack = {}, [(0, count - 1, False)]
    while stack:
        i, j, ready = stack.pop()
        if i == j:
            results[(i, j)] = ts[i]
        elif ready:
            k = split[i][j]
            results[(i, j)] = matmul(results.pop((i, k)), results.pop((k + 1, j)))
        else:
            k = split[i][j]
            stack += [(i, j, True), (i, k, False), (k + 1, j, False)]
    out = results[(0, count - 1)]
    if first_vec:
        out = squeeze(out, 0)
    if last_vec:
        out = squeeze(out, -1)
    return out


@composite("linalg.solve_triangular")
def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False):
    """``X`` with ``A X = B`` (``left=False``: ``X A = B``) for triangular ``A``, as
    ``torch.linalg.solve_triangular``: only the ``upper`` (or lower) triangle of ``A`` is
    read, its diagonal taken as ones when ``unitriangular``. Computed by ``solve`` on that
    triangle (LU rather than a triangular substitution: the same solution, and its
    gradient, which is zero outside the triangle, as PyTorch's)."""
    A = operand(A, "linalg.solve_triangular", "A")
    B = operand(B, "linalg.solve_triangular", "B")
    for name, t in (("A", A), ("B", B)):
        if t.dtype not in ("float32", "float64"):
            raise DTypeError(located(f"linalg.solve_triangular: expected {name} to be a float32 "
                                     f"or float64 tensor, found {t.dtype}"))
    if A.dtype != B.dtype:
        raise DTypeError(located(f"linalg.solve_triangular: expected A and B to have the same "
                                 f"dtype, found {A.dtype} and {B.dtype}"))
    if A.ndim < 2 or B.ndim < 2:
        raise ShapeError(located(f"linalg.solve_triangular: expected A and B to have at least "
                                 f"2 dims, found shapes {list(A.shape)} and {list(B.shape)}"))
    if A.shape[-1] != A.shape[-2] or not isinstance(A.shape[-1], int):
        raise ShapeError(located(f"linalg.solve_triangular: A must be batches of square "
                                 f"matrices with static sizes, found shape {list(A.shape)}"))
    n = A.shape[-1]
    keep = np.triu(np.ones((n, n), bool), 1 if unitriangular else 0) if upper else np.tril(
        np.ones((n, n), bool), -1 if unitriangular else 0)
    tri = where(constant(keep), A, constant(np.eye(n) if unitriangular else np.zeros((n, n)),
                                            A.dtype))
    return solve(tri, B, left=left)

