"""Parameter initialisation, as ``torch.nn.init`` documents it (in place, no gradient).

Random draws come from eager mode's global generator, so ``dg.manual_seed`` makes model
initialisation reproducible.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

from ..eager.creation import _generator
from ..eager.tensors import Tensor


def _fill(t: Tensor, values: np.ndarray) -> Tensor:
    arr = values.astype(t.array.dtype, copy=False)
    if t.device == "cpu":
        t.array[...] = arr
    else:  # pragma: no cover - GPU only
        import cupy
        t.array[...] = cupy.asarray(arr)
    t._version[0] += 1
    return t


def _fans(t: Tensor):
    if t.ndim < 2:
        raise ValueError(f"fan in/out need at least 2 dims, found shape {list(t.shape)}")
    receptive = int(np.prod(t.shape[2:])) if t.ndim > 2 else 1
    return t.shape[1] * receptive, t.shape[0] * receptive


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for ``nonlinearity``, as ``torch.nn.init.calculate_gain``: 1 for
    'linear', 'sigmoid', 'conv1d' and 'conv2d', 5/3 for 'tanh', sqrt(2) for 'relu', sqrt(2 /
    (1 + slope**2)) for 'leaky_relu' (``param`` is the negative slope, default 0.01) and 3/4
    for 'selu'; other names raise ValueError."""
    if nonlinearity in ("linear", "sigmoid", "conv2d", "conv1d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill ``t`` with samples from the uniform distribution on [a, b). Writes ``t``'s data in
    place without recording a gradient and returns ``t``; random draws use the global
    generator (``dg.manual_seed``)."""
    return _fill(t, _generator().uniform(a, b, size=t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill ``t`` with samples from N(mean, std**2). Writes ``t``'s data in place without
    recording a gradient and returns ``t``; random draws use the global generator
    (``dg.manual_seed``)."""
    return _fill(t, _generator().normal(mean, std, size=t.shape))


def constant_(t: Tensor, value: float) -> Tensor:
    """Fill ``t`` with ``value``. Writes ``t``'s data in place without recording a gradient and
    returns ``t``."""
    return _fill(t, np.full(t.shape, value))


def zeros_(t: Tensor) -> Tensor:
    """Fill ``t`` with zeros. Writes ``t``'s data in place without recording a gradient and
    returns ``t``."""
    return constant_(t, 0.0)


def ones_(t: Tensor) -> Tensor:
    """Fill ``t`` with ones. Writes ``t``'s data in place without recording a gradient and
    returns ``t``."""
    return constant_(t, 1.0)


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot initialisation: samples from U(-bound, bound) with ``bound = gain * sqrt(6 /
    (fan_in + fan_out))``.

    fan_in is ``t.shape[1]`` times the product of ``t.shape[2:]``, fan_out ``t.shape[0]``
    times it; ``t`` needs at least 2 dims (ValueError). Writes ``t``'s data in place without
    recording a gradient and returns ``t``; random draws use the global generator
    (``dg.manual_seed``).
    """
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot initialisation: samples from N(0, std**2) with ``std = gain * sqrt(2 / (fan_in +
    fan_out))``.

    fan_in is ``t.shape[1]`` times the product of ``t.shape[2:]``, fan_out ``t.shape[0]``
    times it; ``t`` needs at least 2 dims (ValueError). Writes ``t``'s data in place without
    recording a gradient and returns ``t``; random draws use the global generator
    (``dg.manual_seed``).
    """
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_fan(t: Tensor, mode: str) -> int:
    """fan_in or fan_out of ``t`` for ``mode``; any other mode is a ValueError, as PyTorch."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _fans(t)
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> Tensor:
    """He initialisation: samples from U(-bound, bound) with ``bound =
    calculate_gain(nonlinearity, a) * sqrt(3 / fan)``.

    ``fan`` is fan_in for ``mode='fan_in'`` (the default), fan_out for 'fan_out'; ``a`` is the
    negative slope of a 'leaky_relu'. fan_in is ``t.shape[1]`` times the product of
    ``t.shape[2:]``, fan_out ``t.shape[0]`` times it; ``t`` needs at least 2 dims (ValueError).
    Writes ``t``'s data in place without recording a gradient and returns ``t``; random draws
    use the global generator (``dg.manual_seed``).
    """
    fan = _kaiming_fan(t, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> Tensor:
    """He initialisation: samples from N(0, std**2) with ``std = calculate_gain(nonlinearity, a)
    / sqrt(fan)``.

    ``fan`` is fan_in for ``mode='fan_in'`` (the default), fan_out for 'fan_out'; ``a`` is the
    negative slope of a 'leaky_relu'. fan_in is ``t.shape[1]`` times the product of
    ``t.shape[2:]``, fan_out ``t.shape[0]`` times it; ``t`` needs at least 2 dims (ValueError).
    Writes ``t``'s data in place without recording a gradient and returns ``t``; random draws
    use the global generator (``dg.manual_seed``).
    """
    fan = _kaiming_fan(t, mode)
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def orthogonal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fill ``t`` (at least 2 dims; the trailing ones are flattened) with a (semi-)orthogonal
    matrix times ``gain``, as ``torch.nn.init.orthogonal_``: the Q of the QR decomposition of
    a standard normal matrix, its columns' signs made those of R's diagonal (so Q is
    uniformly distributed). Writes ``t``'s data in place without recording a gradient and
    returns ``t``; the draw uses the global generator (``dg.manual_seed``)."""
    if t.ndim < 2:
        raise ValueError("orthogonal_: only tensors with 2 or more dimensions are supported, "
                         f"found shape {list(t.shape)}")
    if t.numel() == 0:
        return t
    rows = t.shape[0]
    cols = t.numel() // rows
    flat = _generator().normal(0.0, 1.0, size=(rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, (gain * q).reshape(t.shape))


def trunc_normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """Fill ``t`` with samples of N(mean, std**2) truncated to [a, b] (absolute bounds, as
    ``torch.nn.init.trunc_normal_``), drawn by inverting the normal CDF. Writes ``t``'s data in
    place without recording a gradient and returns ``t``."""
    lo = special.ndtr((a - mean) / std)
    hi = special.ndtr((b - mean) / std)
    u = _generator().uniform(lo, hi, size=t.shape)
    return _fill(t, np.clip(mean + std * special.ndtri(u), a, b))


def eye_(t: Tensor) -> Tensor:
    """Fill the 2-D ``t`` with the identity matrix (ones on the diagonal), as
    ``torch.nn.init.eye_``. Writes ``t``'s data in place without recording a gradient and
    returns ``t``."""
    if t.ndim != 2:
        raise ValueError(f"eye_: only 2-dimensional tensors are supported, found shape "
                         f"{list(t.shape)}")
    return _fill(t, np.eye(*t.shape))


def dirac_(t: Tensor, groups: int = 1) -> Tensor:
    """Fill the 3-, 4- or 5-D ``t`` with the Dirac delta (a convolution that keeps as many
    input channels as it can, per group), as ``torch.nn.init.dirac_``. Writes ``t``'s data in
    place without recording a gradient and returns ``t``."""
    if t.ndim not in (3, 4, 5):
        raise ValueError(f"dirac_: only tensors with 3, 4, or 5 dimensions are supported, "
                         f"found shape {list(t.shape)}")
    if t.shape[0] % groups != 0:
        raise ValueError(f"dirac_: dim 0 ({t.shape[0]}) must be divisible by groups "
                         f"({groups})")
    out_per = t.shape[0] // groups
    values = np.zeros(t.shape)
    centre = tuple(s // 2 for s in t.shape[2:])
    for g in range(groups):
        for d in range(min(out_per, t.shape[1])):
            values[(g * out_per + d, d) + centre] = 1.0
    return _fill(t, values)
