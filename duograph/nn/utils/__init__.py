"""``nn.utils``: gradient clipping and flattening parameters into one vector."""
from __future__ import annotations

from typing import Iterable, Union

import numpy as np

from ...eager.tensors import Tensor


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


def _as_list(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def clip_grad_value_(parameters: Union[Tensor, Iterable[Tensor]], clip_value: float,
                     foreach=None) -> None:
    """Clamp every gradient in place to [-clip_value, clip_value] (``torch.nn.utils``)."""
    from ...eager import grad_mode
    clip_value = float(clip_value)
    with grad_mode.no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated into one 1-D tensor (differentiable, as
    ``torch.nn.utils.parameters_to_vector``)."""
    from ...graphlib import functional as F
    params = _as_list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: expected at least one parameter")
    _same_device(params, "parameters_to_vector")
    return F.cat([F.reshape(p, -1) for p in params], 0)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into the parameters (in place, outside
    autograd, as ``torch.nn.utils.vector_to_parameters``)."""
    from ...eager import grad_mode
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = _as_list(parameters)
    _same_device(params, "vector_to_parameters")
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(f"vector_to_parameters: expected a 1-D vector of {total} elements "
                         f"(the parameters' total), found shape {list(vec.shape)}")
    start = 0
    with grad_mode.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec.detach()[start:start + n].reshape(*p.shape))
            start += n


def _same_device(params, who: str) -> None:
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise TypeError(f"{who}: found two parameters on different devices "
                        f"({', '.join(sorted(devices))})")
from . import rnn  # noqa: E402,F401  (nn.utils.rnn: packed sequences)
