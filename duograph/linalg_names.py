"""torch's top-level names for linear algebra (``torch.det``, ``torch.inverse``,
``torch.cholesky_solve``, ``torch.svd``, ``torch.orgqr``...) and their Tensor methods
(``x.det()``...), over ``dg.linalg``: PyTorch's older spellings, argument names and defaults
(``some=``, ``upper=``, ``rcond=``), with ``dg.linalg``'s gradients. The methods are
installed on the shared method surface, so eager tensors and graph Values both have them.
"""
from __future__ import annotations

from collections import namedtuple

from . import linalg as _linalg
from .graphlib.errors import composite, located
from .graphlib.functional import conj as _conj
from .graphlib.functional import eye as _eye
from .graphlib.functional import transpose as _transpose
from .graphlib.functional import where as _where
from .graphlib.functional import zeros as _zeros
from .graphlib.methods import TensorMethods
from .graphlib.ops._common import operand

_svd_result = namedtuple("svd", ["U", "S", "V"])


def _mH(x):  # noqa: N802 - PyTorch's name
    return _conj(_transpose(x, -2, -1))


@composite("det")
def det(input):
    """``det(input) -> Tensor``: ``dg.linalg.det`` (``torch.det``)."""
    return _linalg.det(input)


@composite("slogdet")
def slogdet(input):
    """``slogdet(input) -> (sign, logabsdet)``: ``dg.linalg.slogdet`` (``torch.slogdet``)."""
    return _linalg.slogdet(input)


@composite("logdet")
def logdet(input):
    """``logdet(input) -> Tensor``: ``log(det(input))``: NaN for a negative determinant,
    -inf for a zero one, as ``torch.logdet``; computed by ``slogdet`` (its gradient)."""
    sign, logabs = _linalg.slogdet(input)
    return _where(sign < 0, float("nan"), logabs)


@composite("inverse")
def inverse(input):
    """``inverse(input) -> Tensor``: ``dg.linalg.inv`` (``torch.inverse``)."""
    return _linalg.inv(input)


@composite("pinverse")
def pinverse(input, rcond: float = 1e-15):
    """``pinverse(input, rcond=1e-15) -> Tensor``: ``dg.linalg.pinv(input, rtol=rcond)``, as
    ``torch.pinverse``."""
    return _linalg.pinv(input, rcond=rcond)


@composite("matrix_power")
def matrix_power(input, n: int):
    """``matrix_power(input, n) -> Tensor``: ``dg.linalg.matrix_power`` (``torch``'s)."""
    return _linalg.matrix_power(input, n)


@composite("cholesky")
def cholesky(input, upper: bool = False):
    """``cholesky(input, upper=False) -> Tensor``: ``dg.linalg.cholesky(input, upper=upper)``,
    as the deprecated ``torch.cholesky``."""
    return _linalg.cholesky(input, upper=upper)


def _check_bool(value, op: str, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(located(f"{op}: expected {what} to be a bool, found "
                                f"{type(value).__name__}"))
    return value


@composite("cholesky_solve")
def cholesky_solve(B, L, upper: bool = False):
    """``cholesky_solve(B, L, upper=False) -> Tensor``: ``X`` with ``A X = B`` where
    ``A = L L^H`` (``upper``: ``A = U^H U``) from its Cholesky factor, as
    ``torch.cholesky_solve``: two triangular solves, with their gradients. A difference:
    the gradient for ``L`` is zero outside its triangle (the part that is read), where
    PyTorch's also fills the other triangle; the triangle itself equals PyTorch's."""
    upper = _check_bool(upper, "cholesky_solve", "upper")
    b, f = operand(B, "cholesky_solve", "B"), operand(L, "cholesky_solve", "L")
    if b.ndim < 2 or f.ndim < 2:
        raise RuntimeError(located(f"cholesky_solve: expected B and L of at least 2 dims, "
                                   f"found shapes {list(b.shape)} and {list(f.shape)}"))
    if upper:
        y = _linalg.solve_triangular(_mH(f), b, upper=False)
        return _linalg.solve_triangular(f, y, upper=True)
    y = _linalg.solve_triangular(f, b, upper=False)
    return _linalg.solve_triangular(_mH(f), y, upper=True)


@composite("cholesky_inverse")
def cholesky_inverse(L, upper: bool = False):
    """``cholesky_inverse(L, upper=False) -> Tensor``: the inverse of ``A = L L^H``
    (``upper``: ``U^H U``) from its Cholesky factor, as ``torch.cholesky_inverse``."""
    f = operand(L, "cholesky_inverse", "L")
    if f.ndim < 2 or f.shape[-1] != f.shape[-2]:
        raise RuntimeError(located(f"cholesky_inverse: expected square matrices, found shape "
                                   f"{list(f.shape)}"))
    identity = _eye(f.shape[-1], dtype=f.dtype)
    return cholesky_solve(identity + 0 * f, f, upper)


@composite("qr")
def qr(input, some: bool = True):
    """``qr(input, some=True) -> (Q, R)``: ``dg.linalg.qr`` in mode 'reduced' (``some``) or
    'complete', as the deprecated ``torch.qr``."""
    some = _check_bool(some, "qr", "some")
    return _linalg.qr(input, "reduced" if some else "complete")


@composite("svd")
def svd(input, some: bool = True, compute_uv: bool = True):
    """``svd(input, some=True, compute_uv=True) -> (U, S, V)``: ``input = U diag(S) V^H``,
    as ``torch.svd`` (``V``, not ``V^H``); ``compute_uv=False`` gives zero ``U`` (m, m) and
    ``V`` (n, n). Only the reduced form exists here: ``some=False`` is refused for
    non-square matrices (``dg.linalg.svd``'s limit)."""
    some = _check_bool(some, "svd", "some")
    compute_uv = _check_bool(compute_uv, "svd", "compute_uv")
    x = operand(input, "svd")
    if not compute_uv:
        m, n = x.shape[-2], x.shape[-1]
        batch = tuple(x.shape[:-2])
        return _svd_result(_zeros(*batch, m, m, dtype=x.dtype), _linalg.svdvals(x),
                           _zeros(*batch, n, n, dtype=x.dtype))
    u, s, vh = _linalg.svd(x, full_matrices=not some)
    return _svd_result(u, s, _mH(vh))


@composite("orgqr")
def orgqr(input, tau):
    """``orgqr(input, tau) -> Tensor``: ``dg.linalg.householder_product`` (``torch.orgqr``)."""
    return _linalg.householder_product(input, tau)


FUNCTIONS = {fn.__name__: fn for fn in (
    det, slogdet, logdet, inverse, pinverse, matrix_power, cholesky, cholesky_solve,
    cholesky_inverse, qr, svd, orgqr)}


def _method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = (f"``{fn.__name__}(...)``: ``dg.{fn.__name__}(self, ...)``.\n\n"
                      f"{fn.__doc__}")
    return method


def install(package) -> None:
    """The functions on ``duograph`` and, where the method surface lacks them, as methods."""
    for name, fn in FUNCTIONS.items():
        setattr(package, name, fn)
        if not hasattr(TensorMethods, name):
            setattr(TensorMethods, name, _method(fn))
