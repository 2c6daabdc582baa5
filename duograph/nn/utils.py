"""``nn.utils``: gradient clipping."""
from __future__ import annotations

from typing import Iterable, Union

import numpy as np

from ..eager.tensors import Tensor


def clip_grad_norm_(parameters: Union[Tensor, Iterable[Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients in place so their joint norm is at most ``max_norm``.

    Returns the total norm before clipping (a 0-d tensor), as PyTorch does.
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return Tensor._wrap(np.zeros((), np.float32))
    if grads[0].device == "cpu":
        xp = np
    else:  # pragma: no cover - GPU only
        import cupy as xp
    norm_type = float(norm_type)
    if norm_type == float("inf"):
        total = max(float(xp.abs(g.array).max()) for g in grads)
    else:
        total = float(sum(float((xp.abs(g.array.astype(xp.float64)) ** norm_type).sum())
                          for g in grads) ** (1.0 / norm_type))
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {total}")
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.array *= g.array.dtype.type(coef)
            g._version[0] += 1
    return Tensor._wrap(np.asarray(total, dtype=grads[0].array.dtype))
