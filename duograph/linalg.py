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
