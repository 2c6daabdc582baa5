"""``dg.linalg``: PyTorch's ``torch.linalg`` names that duograph has (norms and singular
values); each works eagerly, under ``dg.compile`` and in graph mode, with gradients."""
from .graphlib.aliases import accept_axis
from .graphlib.ops.norms import linalg_norm, matrix_norm, svd, svdvals, vector_norm

vector_norm = accept_axis(vector_norm)
matrix_norm = accept_axis(matrix_norm)
norm = accept_axis(linalg_norm)

__all__ = ["norm", "vector_norm", "matrix_norm", "svdvals", "svd"]
