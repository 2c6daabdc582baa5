"""NumPy-style keyword aliases PyTorch accepts everywhere: ``axis`` for ``dim`` and
``keepdims`` for ``keepdim`` (``torch.sum(x, axis=0, keepdims=True)``).

``accept_axis(fn)`` wraps a function that takes ``dim`` (and maybe ``keepdim``) so that the
aliases work; ``add_axis_aliases(namespace)`` does it for every such function of a module
namespace or class dict. A function that names ``axis`` itself is left as it is.
"""
from __future__ import annotations

import functools
import inspect

from .errors import located


def _params(fn):
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def accept_axis(fn):
    """``fn`` accepting ``axis=`` for ``dim=`` and ``keepdims=`` for ``keepdim=``."""
    params = _params(fn)
    aliases = {}
    if "dim" in params and "axis" not in params:
        aliases["axis"] = "dim"
    if "keepdim" in params and "keepdims" not in params:
        aliases["keepdims"] = "keepdim"
    if not aliases or getattr(fn, "_axis_aliases", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs:
            for alias, name in aliases.items():
                if alias in kwargs:
                    if name in kwargs:
                        raise TypeError(located(
                            f"{fn.__name__}: got both {name}= and its alias {alias}="))
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    wrapper._axis_aliases = True
    return wrapper


def add_axis_aliases(namespace: dict, names=None) -> dict:
    """Wrap (in place) the functions of ``namespace`` (or just ``names``) that take
    ``dim``; returns the wrapped ones by name."""
    done, wrapped = {}, {}
    for name in list(names if names is not None else namespace):
        fn = namespace.get(name)
        if inspect.isfunction(fn) and not name.startswith("_"):
            new = wrapped.get(fn) or accept_axis(fn)   # aliases (concat = cat) stay one
            wrapped[fn] = new
            if new is not fn:
                done[name] = new
    namespace.update(done)
    return done
