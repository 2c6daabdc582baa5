"""Norms (PyTorch's ``torch.norm``, ``torch.linalg.vector_norm``, ``matrix_norm``, ``norm``
and ``svdvals``), with PyTorch's gradients: the 2-norm's gradient is 0 where the norm is 0,
the inf-norm's is shared between the largest entries, and the singular values' is
``U diag(g) Vh``, which serves the nuclear and spectral (2) matrix norms.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..autodiff import is_zero_cotangent
from ..batching import leading_batch_rule
from ..errors import DTypeError, ShapeError, composite, located
from ..registry import OpDef, register
from ..types import TensorType, normalize_dim, reduction_dims
from ._common import operand
from .creation import zeros_like
from .elementwise import abs, cast, isnan, logical_or, pow, sign, where
from .linalg import matmul
from .reduction import _reduce_infer, _reduced_shape, amax, amin, expand_back, sum
from .shape import permute, reshape, transpose, unsqueeze

svd_result = namedtuple("linalg_svd", ["U", "S", "Vh"])


# -- vector_norm ---------------------------------------------------------------------------------
def _vector_norm_kernel(xp, x, ord, dim, keepdim):
    axis = tuple(dim) if x.ndim else None
    a = xp.abs(x.astype(np.float32) if x.dtype in dtypes.HALF_NP else x)
    if ord == math.inf:
        out = xp.amax(a, axis=axis, keepdims=keepdim)
    elif ord == -math.inf:
        out = xp.amin(a, axis=axis, keepdims=keepdim)
    elif ord == 0:
        out = xp.sum(a != 0, axis=axis, keepdims=keepdim).astype(a.dtype)
    elif ord == 1:
        out = xp.sum(a, axis=axis, keepdims=keepdim)
    elif ord == 2:
        out = xp.sqrt(xp.sum(a * a, axis=axis, keepdims=keepdim))
    else:
        with np.errstate(divide="ignore"):
            out = xp.sum(a ** ord, axis=axis, keepdims=keepdim) ** (1.0 / ord)
    return xp.asarray(out).astype(x.dtype, copy=False)


def _vector_norm_vjp(cts, ins, outs, a, needs):
    # PyTorch's linalg_vector_norm_backward, case by case
    (g,), (x,), (y,) = cts, ins, outs
    p, dims, keepdim = a["ord"], a["dim"], a["keepdim"]
    g = expand_back(g, x, dims, keepdim)
    norm = expand_back(y, x, dims, keepdim)
    if p == 0:                  # zeros, as PyTorch (not g * 0: NaN under an infinite g)
        return [zeros_like(g)]
    if p == 1:
        return [sign(x) * g]
    if p == 2:
        return [g * where(norm == 0, 0.0, x / norm)]
    if math.isinf(p):
        ax = abs(x)
        mask = cast(logical_or(ax == norm, isnan(ax)), g.dtype)
        return [sign(x) * (g / sum(mask, dims, keepdim=True)) * mask]
    if p < 1:
        scaled = sign(x) * where(x == 0, 0.0, pow(abs(x), p - 1))
        return [scaled * g * pow(norm, 1 - p)]
    scaled = sign(x) * pow(abs(x), p - 1) if p < 2 else x * pow(abs(x), p - 2)
    return [scaled * where(norm == 0, 0.0, g / pow(norm, p - 1))]


vector_norm_op = register(OpDef(
    "vector_norm", _reduce_infer("vector_norm", float_only=True), _vector_norm_kernel,
    _vector_norm_vjp, vjp_reads_output=True,
    attrs=Attrs(ord=Attr(float), dim=Attr("dims"), keepdim=Attr(bool))))


# -- singular value decomposition --------------------------------------------------------------
def _svd_infer(types, attrs):
    (t,) = types
    if t.ndim < 2:
        raise ShapeError(f"svd: expected a matrix or a batch of matrices, found {t!r}")
    if t.dtype not in ("float32", "float64"):
        raise DTypeError(f"svd: expected a float32 or float64 tensor, found {t.dtype}")
    m, n = t.shape[-2], t.shape[-1]
    if isinstance(m, int) and isinstance(n, int):
        k = min(m, n)
    elif m == n:
        k = m
    else:
        raise ShapeError(f"svd: needs static matrix sizes (or equal ones), found {t!r}")
    batch = tuple(t.shape[:-2])
    return [TensorType(batch + (m, k), t.dtype), TensorType(batch + (k,), t.dtype),
            TensorType(batch + (k, n), t.dtype)]


def _svd_kernel(xp, a):
    u, s, vh = xp.linalg.svd(a, full_matrices=False)
    return u.astype(a.dtype, copy=False), s.astype(a.dtype, copy=False), \
        vh.astype(a.dtype, copy=False)


def _safe_div(num, den):
    """num / den, 0 where num is 0 (also where den is 0 there, without a NaN gradient)."""
    zero = num == 0
    return where(zero, 0.0, num / where(zero, 1.0, den))


def _svd_vjp(cts, ins, outs, a, needs):
    # PyTorch's svd_backward (real, reduced), with V = Vh^T and E_jk = S_k^2 - S_j^2:
    # gA = U [(skew(U^T gU) / E) S + S (skew(V^T gV) / E) + diag(gS)] V^T
    #      + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T)
    (gu, gs, gvh), (u, s, vh) = cts, outs
    row, col = unsqueeze(s, -2), unsqueeze(s, -1)
    ga = matmul(u * unsqueeze(gs, -2), vh)
    if is_zero_cotangent(gu) and is_zero_cotangent(gvh):
        return [ga]
    v, gv = transpose(vh, -2, -1), transpose(gvh, -2, -1)
    sq = s * s
    e = unsqueeze(sq, -2) - unsqueeze(sq, -1)
    utgu, vtgv = matmul(transpose(u, -2, -1), gu), matmul(transpose(v, -2, -1), gv)
    j = _safe_div(utgu - transpose(utgu, -2, -1), e)
    k = _safe_div(vtgv - transpose(vtgv, -2, -1), e)
    ga = ga + matmul(matmul(u, j * row + col * k), vh)
    ga = ga + matmul(_safe_div(gu - matmul(u, utgu), row), vh)
    ga = ga + matmul(u, transpose(_safe_div(gv - matmul(v, vtgv), row), -2, -1))
    return [ga]


svd_op = register(OpDef(
    "svd", _svd_infer, _svd_kernel, _svd_vjp, multi_output=True, vjp_reads_output=True,
    doc="the reduced singular value decomposition (U, S, Vh) of the last two dims",
    autocast="fp32",
    attrs=Attrs(), batch=leading_batch_rule))


# -- public functions --------------------------------------------------------------------------
def _ord_number(ord, name):
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise TypeError(located(f"{name}: expected a number as ord, found {ord!r}"))
    return float(ord)


def _float_input(x, name, dtype):
    x = operand(x, name)
    for dt in (x.dtype, dtype):
        if dt is not None and not dtypes.is_float(dtypes.as_dtype(dt)):
            raise DTypeError(located(f"{name}: expected a floating-point tensor and dtype, "
                                     f"found {dtypes.as_dtype(dt)}; cast it first (x.float())"))
    return x if dtype is None else cast(x, dtypes.as_dtype(dtype))


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):
    """The vector ``ord``-norm over ``dim`` (None: every element): ``sum(|x|**ord)**(1/ord)``;
    ``inf``/``-inf`` the largest/smallest ``|x|``, 0 the number of nonzeros. ``dtype=``
    casts the input first. Floating-point tensors only, as in PyTorch."""
    x = _float_input(x, "vector_norm", dtype)
    ord = _ord_number(ord, "vector_norm")
    dims = reduction_dims(dim, x.ndim, "vector_norm")
    if math.isinf(ord) and any(isinstance(x.shape[d], int) and x.shape[d] == 0
                               for d in dims):
        raise ShapeError(located(f"vector_norm: the {ord}-norm of an empty dim is undefined "
                                 f"(shape {list(x.shape)}, dim {dim})"))
    return vector_norm_op(x, ord=ord, dim=dims, keepdim=bool(keepdim))


@composite("svdvals")
def svdvals(x):
    """The singular values of a matrix (or a batch of them, the last two dims), descending.
    Their gradient is ``U diag(g) Vh``, differentiable again through ``svd``."""
    x = operand(x, "svdvals")
    if x.ndim < 2:
        raise ShapeError(located(f"svdvals: expected a matrix or a batch of matrices, found "
                                 f"shape {list(x.shape)}"))
    return svd_op(x)[1]


def svd(x, full_matrices: bool = True):
    """``(U, S, Vh)`` with ``x = U diag(S) Vh`` over the last two dims. Only the reduced form
    exists (``full_matrices=False``; True is the same for square matrices and refused for
    others). Differentiable (PyTorch's formula; unstable for repeated singular values, as
    there)."""
    x = operand(x, "svd")
    if full_matrices and x.ndim >= 2 and x.shape[-1] != x.shape[-2]:
        raise ValueError(located(f"svd: full_matrices=True is not supported for a non-square "
                                 f"matrix (shape {list(x.shape)}); pass full_matrices=False"))
    return svd_result(*svd_op(x))


def _matrix_dims(x, dim, name):
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise TypeError(located(f"{name}: expected dim to be a pair of ints, found {dim!r}"))
    if x.ndim < 2:
        raise ShapeError(located(f"{name}: expected a tensor with at least 2 dims, found "
                                 f"shape {list(x.shape)}"))
    d0, d1 = (normalize_dim(d, x.ndim, name) for d in dim)
    if d0 == d1:
        raise ShapeError(located(f"{name}: dims {tuple(dim)} name the same dim twice"))
    return d0, d1


def _keep(out, x, dims, keepdim):
    """``out`` reduced over ``dims`` of ``x`` (without keepdim), given back its reduced dims
    as 1s when ``keepdim``."""
    return reshape(out, _reduced_shape(x.shape, dims, True)) if keepdim else out


def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):
    """The matrix norm over the two dims ``dim``: ``'fro'`` (Frobenius), ``'nuc'`` (sum of
    the singular values), ``2``/``-2`` (largest/smallest singular value), ``1``/``-1``
    (largest/smallest column sum of ``|x|``), ``inf``/``-inf`` (row sums). ``dtype=`` casts
    the input first."""
    x = _float_input(x, "matrix_norm", dtype)
    d0, d1 = _matrix_dims(x, dim, "matrix_norm")
    dims = tuple(sorted((d0, d1)))
    if isinstance(ord, str):
        if ord == "fro":
            return vector_norm(x, 2, dims, keepdim)
        if ord != "nuc":
            raise ValueError(located(f"matrix_norm: ord must be 'fro', 'nuc', 2, -2, 1, -1, "
                                     f"inf or -inf, found {ord!r}"))
    else:
        ord = _ord_number(ord, "matrix_norm")
    if ord in ("nuc", 2.0, -2.0):
        rest = [i for i in range(x.ndim) if i not in (d0, d1)]
        s = svdvals(permute(x, *rest, d0, d1))
        out = sum(s, -1) if ord == "nuc" else (amax(s, -1) if ord == 2 else amin(s, -1))
        return _keep(out, x, dims, keepdim)
    if ord in (1.0, -1.0, math.inf, -math.inf):
        # 1: the largest column sum (sum over the rows d0), inf: the largest row sum
        inner, outer = (d0, d1) if ord in (1.0, -1.0) else (d1, d0)
        sums = sum(abs(x), inner, keepdim=keepdim)
        outer = outer if keepdim or outer < inner else outer - 1
        return (amax if ord > 0 else amin)(sums, outer, keepdim=keepdim)
    raise ValueError(located(f"matrix_norm: ord must be 'fro', 'nuc', 2, -2, 1, -1, inf or "
                             f"-inf, found {ord!r}"))


def linalg_norm(x, ord=None, dim=None, keepdim: bool = False, *, dtype=None):
    """``torch.linalg.norm``: a vector norm when ``dim`` is an int (or None with ``ord``
    None: every element, 2-norm), a matrix norm when ``dim`` is a pair or ``x`` is 2-D with
    ``ord`` given."""
    x = operand(x, "linalg.norm")
    if dim is not None and not isinstance(dim, (tuple, list)):
        dim = (dim,)
    if dim is not None and len(dim) not in (1, 2):
        raise ShapeError(located(f"linalg.norm: dim must name one or two dims (a vector or a "
                                 f"matrix norm), found {tuple(dim)}; vector_norm reduces "
                                 f"any number"))
    if dim is None and ord is not None:
        if x.ndim not in (1, 2):
            raise ShapeError(located(f"linalg.norm: with ord and no dim the input must be "
                                     f"1-D or 2-D, found shape {list(x.shape)}"))
        dim = tuple(range(x.ndim))
    if dim is not None and len(dim) == 2:
        return matrix_norm(x, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise ValueError(located(f"linalg.norm: ord {ord!r} needs a matrix (two dims)"))
    return vector_norm(x, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def norm(x, p="fro", dim=None, keepdim: bool = False, dtype=None):
    """``torch.norm``: ``p`` a number gives ``vector_norm(x, p, dim)``; ``'fro'`` the
    2-norm over ``dim`` (every element by default); ``'nuc'`` the nuclear norm over the two
    dims ``dim`` (the last two of a matrix by default)."""
    x = operand(x, "norm")
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        dim = (int(dim),)
    if isinstance(p, str):
        if p == "fro" and (dim is None or len(dim) <= 2):
            return vector_norm(x, 2, dim, keepdim, dtype=dtype)
        return matrix_norm(x, p, tuple(range(x.ndim)) if dim is None else dim, keepdim,
                           dtype=dtype)
    return vector_norm(x, 2.0 if p is None else p, dim, keepdim, dtype=dtype)
