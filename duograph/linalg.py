"""``dg.linalg``: PyTorch's ``torch.linalg`` names that duograph has (norms, singular
values, inverses, solvers, determinants and factorisations); each works eagerly, under
``dg.compile`` and in graph mode, with PyTorch's gradient formulas."""
from .graphlib.aliases import accept_axis
from .graphlib.errors import LinAlgError, composite
from .graphlib.functional import conj as _conj
from .graphlib.functional import cross as _cross
from .graphlib.functional import diagonal as _diagonal
from .graphlib.functional import sum as _sum
from .graphlib.ops.factorize import cholesky, cond, eigh, eigvalsh, matrix_rank, qr
from .graphlib.ops._common import operand
import numpy as np  # noqa: E402
from .graphlib.ops.linalg import matmul
from .graphlib.ops.norms import linalg_norm, matrix_norm, svd, svdvals, vector_norm
from .graphlib.ops.solve import (det, inv, lstsq, matrix_power, multi_dot, pinv, slogdet, solve,
                                 solve_triangular)

vector_norm = accept_axis(vector_norm)
matrix_norm = accept_axis(matrix_norm)
norm = accept_axis(linalg_norm)

__all__ = ["norm", "vector_norm", "matrix_norm", "svdvals", "svd", "inv", "solve", "det",
           "slogdet", "cholesky", "qr", "eigh", "eigvalsh", "lstsq", "pinv", "matmul",
           "LinAlgError", "matrix_power", "multi_dot", "vecdot", "diagonal",
           "solve_triangular", "matrix_rank", "cond", "cross"]


@composite("linalg.vecdot")
def vecdot(x, y, *, dim: int = -1):
    """The dot products of two batches of vectors along ``dim`` (``sum(conj(x) * y)``), as
    ``torch.linalg.vecdot``."""
    x, y = operand(x, "linalg.vecdot", "x"), operand(y, "linalg.vecdot", "y")
    return _sum(_conj(x) * y, dim)


@composite("linalg.diagonal")
def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """``dg.diagonal`` with the last two dims as default, as ``torch.linalg.diagonal``."""
    return _diagonal(A, offset, dim1, dim2)


@composite("linalg.cross")
def cross(input, other, *, dim: int = -1):
    """The cross product of 3-vectors along ``dim`` (-1 by default), as
    ``torch.linalg.cross``."""
    return _cross(input, other, dim)



# -- issue 28: more of torch.linalg, composed of the ops above -------------------------------
from .graphlib.errors import located as _located  # noqa: E402
from .graphlib.functional import eye as _eye  # noqa: E402
from .graphlib.functional import reshape as _reshape  # noqa: E402
from .graphlib.functional import transpose as _transpose  # noqa: E402
from .graphlib.functional import tril as _tril  # noqa: E402
from .graphlib.ops.products import _vander  # noqa: E402


@composite("linalg.householder_product")
def householder_product(A, tau):
    """The first ``n`` columns of the product of the Householder reflectors
    ``H_i = I - tau_i v_i v_i^H`` (``v_i``: column ``i`` of ``A`` below the diagonal, with 1 on
    it), as ``torch.linalg.householder_product`` (``A`` (..., m, n), ``tau`` (..., k),
    ``m >= n >= k``); composed of matrix products, so its gradient is theirs."""
    a = operand(A, "linalg.householder_product", "A")
    t = operand(tau, "linalg.householder_product", "tau")
    if a.ndim < 2 or t.ndim != a.ndim - 1:
        raise RuntimeError(_located(
            f"linalg.householder_product: expected A of at least 2 dims and tau of one dim "
            f"less, found shapes {list(a.shape)} and {list(t.shape)}"))
    m, n, k = a.shape[-2], a.shape[-1], t.shape[-1]
    if not m >= n >= k:
        raise RuntimeError(_located(
            f"linalg.householder_product: expected m >= n >= k, found A {list(a.shape)} and "
            f"tau {list(t.shape)}"))
    below = _tril(a, -1) + _eye(m, n, dtype=a.dtype)     # the v_i, 1 on the diagonal
    q = _eye(m, dtype=a.dtype) + 0 * a[..., :1, :1]      # identity, batched like A
    for i in range(k - 1, -1, -1):                      # Q = H_0 (H_1 (... H_{k-1}))
        v = below[..., :, i:i + 1]
        tau_i = _reshape(t[..., i], *t.shape[:-1], 1, 1)
        q = q - matmul(v * tau_i, matmul(_conj(_transpose(v, -2, -1)), q))
    return q[..., :, :n]


@composite("linalg.tensorinv")
def tensorinv(A, ind: int = 2):
    """The inverse of ``A`` as a tensor: ``tensordot(tensorinv(A), A, ind)`` is the identity;
    the product of the first ``ind`` dims must equal that of the rest; the result has shape
    ``A.shape[ind:] + A.shape[:ind]``, as ``torch.linalg.tensorinv``."""
    a = operand(A, "linalg.tensorinv", "A")
    if isinstance(ind, bool) or not isinstance(ind, int) or ind <= 0:
        raise RuntimeError(_located(f"linalg.tensorinv: Expected a strictly positive integer "
                                    f"for 'ind', but got {ind!r}"))
    rows = int(np.prod(a.shape[:ind], dtype=np.int64))
    cols = int(np.prod(a.shape[ind:], dtype=np.int64))
    if rows != cols:
        raise RuntimeError(_located(
            f"linalg.tensorinv: Expected self to satisfy the requirement "
            f"prod(self.shape[ind:]) == prod(self.shape[:ind]), but got {cols} != {rows}"))
    return _reshape(inv(_reshape(a, rows, cols)), *(tuple(a.shape[ind:]) + tuple(
        a.shape[:ind])))


@composite("linalg.tensorsolve")
def tensorsolve(A, B, dims=None):
    """``X`` with ``tensordot(A, X, X.ndim) == B``; ``dims`` lists dims of ``A`` moved to the
    end first, as ``torch.linalg.tensorsolve``; ``X`` has shape ``A.shape[B.ndim:]``."""
    a, b = operand(A, "linalg.tensorsolve", "A"), operand(B, "linalg.tensorsolve", "B")
    if dims is not None:
        dims = [d % a.ndim for d in dims]
        keep = [d for d in range(a.ndim) if d not in dims]
        a = a.permute(*(keep + dims)) if hasattr(a, "permute") else a
    if tuple(a.shape[:b.ndim]) != tuple(b.shape):
        raise RuntimeError(_located(
            f"linalg.tensorsolve: Expected self to satisfy the requirement "
            f"A.shape[:B.ndim] == B.shape, found A {list(a.shape)} and B {list(b.shape)}"))
    rows = int(np.prod(b.shape, dtype=np.int64))
    rest = tuple(a.shape[b.ndim:])
    cols = int(np.prod(rest, dtype=np.int64))
    if rows != cols:
        raise RuntimeError(_located(
            f"linalg.tensorsolve: Expected prod(A.shape[B.ndim:]) == prod(B.shape), but got "
            f"{cols} != {rows}"))
    x = solve(_reshape(a, rows, cols), _reshape(b, rows))
    return _reshape(x, *rest)


@composite("linalg.vander")
def vander(x, *, N=None):
    """The Vandermonde matrices of the last dim of ``x``: columns ``x ** 0 ... x ** (N-1)``
    (``N`` = that dim's size by default), shape ``(..., n, N)``, as ``torch.linalg.vander``
    (cumulative products, so the gradient is defined at 0)."""
    v = operand(x, "linalg.vander", "x")
    if v.ndim == 0:
        raise RuntimeError(_located("linalg.vander: x must have at least one dimension"))
    n = v.shape[-1] if N is None else N
    if isinstance(n, bool) or not isinstance(n, int) or n <= 1:
        raise RuntimeError(_located(f"linalg.vander: N must be greater than 1, found {n!r}"))
    return _vander(v, n, True, "linalg.vander")


__all__ += ["householder_product", "tensorinv", "tensorsolve", "vander"]
