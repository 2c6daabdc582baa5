"""Array-module helpers for kernels: one kernel body serves numpy and cupy.

Kernels receive ``xp`` (numpy or cupy) and call ``xp.<fn>`` only for what both modules share.
What they do not share (special functions, scatter-add) is bridged here, with cupy imported
lazily so CPU users never need it.
"""
from __future__ import annotations

import numpy as np


def is_numpy(xp) -> bool:
    return xp is np


def erf(xp, x):
    """Elementwise error function (scipy on CPU, cupyx on GPU)."""
    if xp is np:
        from scipy.special import erf as _erf
        return _erf(x)
    from cupyx.scipy.special import erf as _erf   # pragma: no cover - GPU only
    return _erf(x)


def add_at(xp, target, index, values) -> None:
    """Unbuffered ``target[index] += values`` (repeated indices accumulate)."""
    if xp is np:
        np.add.at(target, index, values)
    else:  # pragma: no cover - GPU only
        import cupyx
        cupyx.scatter_add(target, index, values)


def ufunc_at(xp, name: str, target, index, values) -> None:
    """Unbuffered ``target[index] = name(target[index], values)`` for ``name`` in add,
    multiply, maximum, minimum (repeated places combine): numpy's ``ufunc.at``; cupy's
    scatter functions, or the host for multiply (cupy has no scatter product)."""
    if xp is np:
        getattr(np, name).at(target, index, values)
    elif name == "add":  # pragma: no cover - GPU only
        add_at(xp, target, index, values)
    elif name in ("maximum", "minimum"):  # pragma: no cover - GPU only
        import cupyx
        scatter = cupyx.scatter_max if name == "maximum" else cupyx.scatter_min
        scatter(target, index, values)
    else:  # pragma: no cover - GPU only
        host = xp.asnumpy(target)
        np.multiply.at(host, tuple(i if isinstance(i, slice) else xp.asnumpy(i)
                                   for i in index), xp.asnumpy(values))
        target[...] = xp.asarray(host)


def to_device(x, device: str):
    """``x`` as an array of ``device``: numpy for "cpu", cupy (imported here, lazily) for
    "cuda"."""
    if device == "cpu":
        return x.get() if hasattr(x, "get") else x
    import cupy   # pragma: no cover - GPU only
    return cupy.asarray(x)


def rng(xp, seed, stream: int):
    """A generator for (seed, stream): same pair, same numbers; streams are independent."""
    seed_int = int(np.asarray(seed.get() if hasattr(seed, "get") else seed).reshape(()))
    state = np.random.SeedSequence([seed_int & 0xFFFFFFFFFFFFFFFF, stream]).generate_state(2)
    combined = int(state[0]) | (int(state[1]) << 32)
    return xp.random.default_rng(combined)
