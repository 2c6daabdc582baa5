"""Factorisations (PyTorch's ``torch.linalg.cholesky``, ``qr``, ``eigh`` and ``eigvalsh``)
over the last two dims, batched, with PyTorch's gradient formulas (``FunctionsManual.cpp``:
``cholesky_backward``, ``linalg_qr_backward``, ``linalg_eig_backward`` for Hermitian
input). ``cholesky`` and ``eigh`` read one triangle of their input, as LAPACK does; their
gradients are symmetric, as PyTorch's are.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..attrs import Attr, Attrs
from ..autodiff import is_zero_cotangent
from ..batching import leading_batch_rule
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, register
from ..types import TensorType
from ._common import operand
from .creation import constant, zeros
from .elementwise import abs as abs_
from .elementwise import cast, maximum
from .layout import tril, triu
from .linalg import matmul
from .shape import cat, getitem, unsqueeze
from .norms import matrix_norm, svdvals
from .reduction import amax, amin
from .reduction import sum as sum_
from .solve import check_matrix, inv, mT, raise_first_failure, solve_op
from .solve import _tolerance as tolerance

qr_result = namedtuple("linalg_qr", ["Q", "R"])
eigh_result = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])

QR_MODES = ("reduced", "complete", "r")


def _static_square(t, name):
    n = t.shape[-1]
    if not isinstance(n, int):
        raise ShapeError(f"{name}: needs static matrix sizes, found {list(t.shape)}")
    return n


def _right_solve(y, a):
    """``y a^-1`` (``X a = y``)."""
    return mT(solve_op(mT(a), mT(y)))


# -- cholesky -------------------------------------------------------------------------------------
def _cholesky_infer(types, attrs):
    (t,) = types
    check_matrix(t, "linalg.cholesky")
    _static_square(t, "linalg.cholesky")
    return [t]


def _cholesky_kernel(xp, a, upper=False):
    try:
        low = xp.linalg.cholesky(a)
    except xp.linalg.LinAlgError:
        raise_first_failure(xp, a, xp.linalg.cholesky,
                            "linalg.cholesky: The factorization could not be completed "
                            "because the input is not positive-definite")
    return xp.swapaxes(low, -1, -2).copy() if upper else low


def _cholesky_vjp(cts, ins, outs, attrs, needs):
    # PyTorch's cholesky_backward: gA = L^-H Phi(L^H gL) L^-1, Phi the lower triangle with
    # its strict part mirrored and everything halved
    (g,), (out,) = cts, outs
    low, gl = (mT(out), mT(g)) if attrs.get("upper", False) else (out, g)
    p = tril(matmul(mT(low), gl))
    p = 0.5 * (p + mT(tril(p, -1)))
    return [_right_solve(solve_op(mT(low), p), low)]


cholesky_op = register(OpDef(
    "linalg_cholesky", _cholesky_infer, _cholesky_kernel, _cholesky_vjp,
    vjp_reads_output=True, doc="the Cholesky factor of symmetric positive-definite matrices",
    attrs=Attrs(upper=Attr(bool, default=False)), batch=leading_batch_rule))


def cholesky(A, *, upper: bool = False):
    """The Cholesky factor ``L`` (lower triangular, ``A = L L^T``; ``upper=True``: ``U =
    L^T``, ``A = U^T U``) of a symmetric positive-definite matrix or batch, as
    ``torch.linalg.cholesky``: only the lower triangle of ``A`` is read; a matrix that is
    not positive-definite raises ``LinAlgError``. Gradient: PyTorch's (symmetric)."""
    return cholesky_op(operand(A, "linalg.cholesky", "A"), upper=bool(upper))


# -- qr -------------------------------------------------------------------------------------------
def _qr_infer(types, attrs):
    (t,) = types
    check_matrix(t, "linalg.qr", square=False)
    m, n = t.shape[-2], t.shape[-1]
    if not (isinstance(m, int) and isinstance(n, int)):
        raise ShapeError(f"linalg.qr: needs static matrix sizes, found {list(t.shape)}")
    batch, k = tuple(t.shape[:-2]), min(m, n)
    if attrs.get("mode", "reduced") == "complete":
        return [TensorType(batch + (m, m), t.dtype), TensorType(batch + (m, n), t.dtype)]
    return [TensorType(batch + (m, k), t.dtype), TensorType(batch + (k, n), t.dtype)]


def _qr_kernel(xp, a, mode="reduced"):
    q, r = xp.linalg.qr(a, mode=mode)
    return q, r


def _qr_r_infer(types, attrs):
    return _qr_infer(types, attrs)[1:]


# mode='r': R alone, and no gradient rule (PyTorch refuses to differentiate it: the
# derivative needs Q)
qr_r_op = register(OpDef(
    "linalg_qr_r", _qr_r_infer, lambda xp, a: xp.linalg.qr(a, mode="r"),
    doc="the R factor of the QR decomposition (no gradient)", attrs=Attrs(),
    batch=leading_batch_rule))


def _qr_tall_backward(gq, gr, q, r):
    """PyTorch's linalg_qr_backward for m >= n: ``gA = (gQ + Q syminvadj(triu(M))) R^-H``
    with ``M = gR R^H - Q^H gQ``."""
    terms = []
    if gr is not None:
        terms.append(matmul(gr, mT(r)))
    if gq is not None:
        terms.append(-matmul(mT(q), gq))
    m = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    m = triu(m)
    ga = matmul(q, m + mT(triu(m, 1)))
    if gq is not None:
        ga = ga + gq
    return _right_solve(ga, mT(r))


def _qr_vjp(cts, ins, outs, attrs, needs):
    (gq, gr), (a,), (q, r) = cts, ins, outs
    mode = attrs.get("mode", "reduced")
    m, n = a.shape[-2], a.shape[-1]
    if mode == "complete" and m > n:
        raise ValueError(located("linalg.qr: The QR decomposition is not differentiable when "
                                 "mode='complete' and nrows > ncols"))
    gq = None if is_zero_cotangent(gq) else gq
    gr = None if is_zero_cotangent(gr) else gr
    if gq is None and gr is None:
        return [None]
    if m >= n:
        return [_qr_tall_backward(gq, gr, q, r)]
    # wide: A = [U | V] = Q [X | Y] with X square; Y = Q^T V gives V's gradient Q gY and
    # adds V gY^T to Q's, then U's is the square case's
    x = getitem(r, (Ellipsis, slice(None), slice(0, m)))
    v = getitem(a, (Ellipsis, slice(None), slice(m, n)))
    gx = getitem(gr, (Ellipsis, slice(None), slice(0, m))) if gr is not None else None
    gy = getitem(gr, (Ellipsis, slice(None), slice(m, n))) if gr is not None else None
    if gy is None:
        return [cat([_qr_tall_backward(gq, gx, q, x), 0.0 * v], -1)]
    gq_all = matmul(v, mT(gy)) if gq is None else gq + matmul(v, mT(gy))
    return [cat([_qr_tall_backward(gq_all, gx, q, x), matmul(q, gy)], -1)]


qr_op = register(OpDef(
    "linalg_qr", _qr_infer, _qr_kernel, _qr_vjp, multi_output=True, vjp_reads_output=True,
    doc="the QR decomposition of matrices (reduced, complete or R only)",
    attrs=Attrs(mode=Attr(str, default="reduced", choices=("reduced", "complete"))),
    batch=leading_batch_rule))


def qr(A, mode: str = "reduced"):
    """``(Q, R)`` with ``A = Q R``, ``Q`` orthonormal columns and ``R`` upper triangular, as
    ``torch.linalg.qr`` (a named tuple): ``mode='reduced'`` (``k = min(m, n)`` columns),
    ``'complete'`` (``Q`` square) or ``'r'`` (``Q`` empty). Gradient: PyTorch's (none for
    ``'r'``, nor for ``'complete'`` with more rows than columns, as there)."""
    A = operand(A, "linalg.qr", "A")
    if mode not in QR_MODES:
        raise ValueError(located(f"linalg.qr: received unrecognized mode {mode!r} but "
                                 f"expected one of 'reduced' (default), 'r', or 'complete'"))
    if mode == "r":
        r = qr_r_op(A)
        return qr_result(zeros((0,), dtype=r.dtype), r)
    return qr_result(*qr_op(A, mode=mode))


# -- eigh -----------------------------------------------------------------------------------------
def _eigh_infer(types, attrs):
    (t,) = types
    check_matrix(t, "linalg.eigh")
    _static_square(t, "linalg.eigh")
    return [TensorType(tuple(t.shape[:-1]), t.dtype), t]


def _eigh_kernel(xp, a, UPLO="L"):
    w, v = xp.linalg.eigh(a, UPLO=UPLO)
    return w.astype(a.dtype, copy=False), v.astype(a.dtype, copy=False)


def _eigh_vjp(cts, ins, outs, attrs, needs):
    # PyTorch's linalg_eig_backward (Hermitian): gA = V (diag(gL) + skew(V^H gV) / E) V^H,
    # E_ij = L_j - L_i off the diagonal
    (gw, gv), (w, v) = cts, outs
    if is_zero_cotangent(gv):
        return [matmul(v * unsqueeze(gw, -2), mT(v))]
    n = v.shape[-1]
    vtgv = matmul(mT(v), gv)
    skew = 0.5 * (vtgv - mT(vtgv))
    eye = constant(np.eye(n), v.dtype)
    e = unsqueeze(w, -2) - unsqueeze(w, -1) + eye
    inner = skew / e
    if not is_zero_cotangent(gw):
        inner = inner + unsqueeze(gw, -1) * eye
    return [matmul(matmul(v, inner), mT(v))]


eigh_op = register(OpDef(
    "linalg_eigh", _eigh_infer, _eigh_kernel, _eigh_vjp, multi_output=True,
    vjp_reads_output=True, doc="eigenvalues (ascending) and eigenvectors of symmetric matrices",
    attrs=Attrs(UPLO=Attr(str, default="L", choices=("L", "U"))), batch=leading_batch_rule))


def _uplo(UPLO, name):
    if UPLO not in ("L", "U"):
        raise ValueError(located(f"{name}: Expected UPLO argument to be 'L' or 'U', but got "
                                 f"{UPLO!r}"))
    return UPLO


def eigh(A, UPLO: str = "L"):
    """``(eigenvalues, eigenvectors)`` of a symmetric matrix or batch, as
    ``torch.linalg.eigh`` (a named tuple): eigenvalues ascending, eigenvectors the columns;
    only the ``UPLO`` ('L' or 'U') triangle of ``A`` is read. Gradient: PyTorch's
    (unstable for repeated eigenvalues, as there)."""
    A = operand(A, "linalg.eigh", "A")
    return eigh_result(*eigh_op(A, UPLO=_uplo(UPLO, "linalg.eigh")))


@composite("linalg.eigvalsh")
def eigvalsh(A, UPLO: str = "L"):
    """The eigenvalues (ascending) of a symmetric matrix or batch, as
    ``torch.linalg.eigvalsh``; gradient ``V diag(g) V^T``, differentiable again."""
    A = operand(A, "linalg.eigvalsh", "A")
    if A.ndim >= 2 and A.dtype not in ("float32", "float64"):
        raise DTypeError(located(f"linalg.eigvalsh: Expected a floating point tensor "
                                 f"(float32 or float64) as input, found {A.dtype}"))
    return eigh_op(A, UPLO=_uplo(UPLO, "linalg.eigvalsh"))[0]


@composite("linalg.matrix_rank")
def matrix_rank(A, *, atol=None, rtol=None, hermitian: bool = False, tol=None):
    """The numerical rank (int64): the number of singular values (absolute eigenvalues when
    ``hermitian``) above ``max(atol, rtol * s_max)``, as ``torch.linalg.matrix_rank``
    (rtol's default as ``pinv``'s; ``tol`` is the older name of ``atol``)."""
    A = operand(A, "linalg.matrix_rank", "A")
    if tol is not None:
        atol = tol if atol is None else atol
    m, n = A.shape[-2], A.shape[-1]
    s = abs_(eigvalsh(A)) if hermitian else svdvals(A)
    atol = tolerance(atol, "linalg.matrix_rank", "atol")
    rtol = tolerance(rtol, "linalg.matrix_rank", "rtol")
    if rtol is None:
        rtol = float(np.finfo(np.dtype(A.dtype)).eps * max(m, n)) if not atol else 0.0
    smax = amax(s, -1, keepdim=True)
    cut = maximum(smax * rtol, atol or 0.0)
    return sum_(cast(s > cut, "int64"), -1)


@composite("linalg.cond")
def cond(A, p=None):
    """The condition number of ``A`` in the matrix norm ``p``, as ``torch.linalg.cond``:
    ``p`` None or 2 the ratio of the largest to the smallest singular value (-2 its
    inverse); other norms (``'fro'``, ``'nuc'``, ``inf``, ``-inf``, 1, -1)
    ``norm(A, p) * norm(inv(A), p)`` of square ``A``."""
    A = operand(A, "linalg.cond", "A")
    if p is None or p in (2, -2):
        s = svdvals(A)
        big, small = amax(s, -1), amin(s, -1)
        return small / big if p == -2 else big / small
    return matrix_norm(A, p) * matrix_norm(inv(A), p)
