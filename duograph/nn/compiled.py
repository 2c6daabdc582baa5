"""``OptimizedModule``: what ``dg.compile(module)`` returns, as ``torch.compile`` does.

The compiled object is still the module for every purpose a user reaches for: it is an
``nn.Module`` whose only child is the original (``_orig_mod``), and it forwards every
attribute it does not hold itself to that module (``model.fc1.weight.grad``), sets and
deletes attributes there, and mirrors its ``training`` flag. Calling it runs the module's
``__call__`` (its hooks included) through ``dg.compile``'s recorder and runtime, which feeds
the live parameters on every call, so optimizer steps are seen by the next compiled call.

As in PyTorch, ``parameters()`` yields the original module's parameters (the same tensor
objects, so ``dg.optim.Adam(model.parameters())`` trains the original), while the dotted names
of ``named_parameters()`` and ``state_dict()`` carry the ``_orig_mod.`` prefix, and
``load_state_dict`` expects it (load an unprefixed checkpoint through ``model._orig_mod``).
The compiled function's introspection (``specializations``, ``recompile_reasons``,
``kernel_count``, ``memory_plan``) is reached through the module as well.
"""
from __future__ import annotations

from typing import Any

from ..eager.compile import CompiledFunction
from ..eager.compile import compile as _compile_function
from .module import Module

# attributes the wrapper keeps for itself (everything else lives on the original module)
_OWN = frozenset({"_orig_mod", "_compiled", "forward", "__dict__",
                  "_super_module_initialized"})


class OptimizedModule(Module):
    """A compiled module: ``_orig_mod`` is the module, ``forward`` its compiled call."""

    def __init__(self, mod: Module, compiled: CompiledFunction):
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_super_module_initialized", False)
        super().__init__()
        object.__setattr__(self, "_super_module_initialized", True)
        self.__dict__.pop("_orig_mod")
        self._modules["_orig_mod"] = mod
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "forward", compiled)

    # the training flag is the original module's (train()/eval() on either set both)
    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        if self.__dict__.get("_super_module_initialized"):
            object.__setattr__(self._orig_mod, "training", bool(value))

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if name == "_orig_mod":
            if "_modules" in d and "_orig_mod" in d["_modules"]:
                return d["_modules"]["_orig_mod"]
            if "_orig_mod" in d:
                return d["_orig_mod"]
            raise AttributeError(name)
        try:
            return getattr(self._orig_mod, name)
        except AttributeError:
            compiled = d.get("_compiled")
            if compiled is not None and not name.startswith("__"):
                try:
                    return getattr(compiled, name)
                except AttributeError:
                    pass
            raise

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name) or name in _OWN:
            if name == "training":
                object.__setattr__(self, name, value)
            else:
                super().__setattr__(name, value)
            return
        setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in _OWN:
            super().__delattr__(name)
            return
        delattr(self._orig_mod, name)

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):
            return self._compiled(*args, **kwargs)      # the common call: no wrapper hooks
        return super().__call__(*args, **kwargs)

    def __len__(self) -> int:
        if hasattr(type(self._orig_mod), "__len__"):
            return len(self._orig_mod)
        raise TypeError(f"{type(self._orig_mod).__name__} does not support len()")

    def __dir__(self):
        own = self._orig_mod.__dir__()
        return own + [a for a in super().__dir__() if a not in own]


def compile(model=None, *, max_specializations: int = 16, passes=None, cache_limit=None,
            **torch_options):
    """Compile a function or module to replay through the graph runtime (``dg.compile``).

    A function gives a ``CompiledFunction``; a module gives an ``OptimizedModule`` that is
    still the module (attributes, submodules, ``parameters()``, ``state_dict()``,
    ``train()``/``eval()``, hooks, ``to()``) and whose call is compiled, as
    ``torch.compile(module)``. Usable as a decorator (``@dg.compile``). PyTorch's options
    ``fullgraph``, ``dynamic``, ``backend``, ``mode``, ``options`` and ``disable`` are
    accepted: duograph always records the whole call (a Python decision on a tensor value
    becomes a guard, not a graph break) and specialises per shape; ``disable=True`` returns
    ``model`` itself, as PyTorch does. Other keywords raise TypeError.
    """
    unknown = set(torch_options) - {"fullgraph", "dynamic", "backend", "mode", "options",
                                    "disable"}
    if unknown:
        raise TypeError(f"compile() got unexpected keyword argument(s) {sorted(unknown)} "
                        "(expected max_specializations, passes, cache_limit or PyTorch's "
                        "fullgraph, dynamic, backend, mode, options, disable)")
    if model is None:
        return lambda m: compile(m, max_specializations=max_specializations, passes=passes,
                                 cache_limit=cache_limit, **torch_options)
    if torch_options.get("disable"):
        return model
    fast = _compile_function(model, max_specializations=max_specializations, passes=passes,
                             cache_limit=cache_limit)
    if isinstance(model, Module):
        return OptimizedModule(model, fast)
    return fast
