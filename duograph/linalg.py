"""``dg.linalg``: PyTorch's ``torch.linalg`` names that duograph has (norms, singular
values, inverses, solvers, determinants and factorisations); each works eagerly, under
``dg.compile`` and in graph mode, with PyTorch's gradient formulas."""
from .graphlib.aliases import accept_axis
from .graphlib.errors import LinAlgError
from .graphlib.ops.factorize import cholesky, eigh, eigvalsh, qr
from .graphlib.ops.linalg import matmul
from .graphlib.ops.norms import linalg_norm, matrix_norm, svd, svdvals, vector_norm
from .graphlib.ops.solve import det, inv, lstsq, pinv, slogdet, solve

vector_norm = accept_axis(vector_norm)
matrix_norm = accept_axis(matrix_norm)
norm = accept_axis(linalg_norm)

__all__ = ["norm", "vector_norm", "matrix_norm", "svdvals", "svd", "inv", "solve", "det",
           "slogdet", "cholesky", "qr", "eigh", "eigvalsh", "lstsq", "pinv", "matmul",
           "LinAlgError"]
