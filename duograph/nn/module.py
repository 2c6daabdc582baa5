"""``Module``: the container of parameters, buffers and sub-modules, as in PyTorch.

Forward code is written once with duograph's op functions. Called on eager tensors it runs
eagerly; called on symbolic Values it builds the graph of the Value's graph, and every
parameter and buffer it touches becomes a state input bound to the live tensor (named after
its place in the module tree), so running the compiled graph updates the module in place.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..eager.guards import note_attribute, tracing
from ..eager.tensors import Parameter, Tensor
from ..graphlib import dtypes
from ..graphlib.errors import DTypeError, DuographError, ShapeError
from ..graphlib.ir import Value, current_graph
from .backward_hooks import call_with_backward_hooks


class StateDictError(DuographError, KeyError):
    """load_state_dict found missing or unexpected keys, or a shape mismatch."""

    def __str__(self):
        return self.args[0] if self.args else ""


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class _Handle:
    def __init__(self, store: dict, key: int):
        self._store, self._key = store, key

    def remove(self) -> None:
        self._store.pop(self._key, None)


class Module:
    """Base class of every layer and model."""

    _hook_ids = 0

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # -- registration through attribute assignment ------------------------------------------
    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 f"assigning attributes (while setting {name!r})")
        params, buffers, modules = self._parameters, self._buffers, self._modules
        if isinstance(value, Parameter):
            self._forget(name)
            params[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign "
                                f"{type(value).__name__} as parameter {name!r} (a Parameter "
                                "or None expected; wrap a tensor in nn.Parameter)")
            params[name] = None
        elif isinstance(value, Module):
            self._forget(name)
            modules[name] = value
        elif name in modules:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign "
                                f"{type(value).__name__} as child module {name!r} (a Module "
                                "or None expected; del the attribute first)")
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: cannot assign "
                                f"{type(value).__name__} to buffer {name!r} (a tensor or "
                                "None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        """Drop ``name`` from every store (before it is registered again elsewhere)."""
        self.__dict__.pop(name, None)
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        self._non_persistent.discard(name)

    def _check_new_name(self, name: str, store: dict, what: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"{type(self).__name__}: invalid {what} name {name!r} (a non-empty "
                           "string without '.' expected)")
        if name not in store and (name in self.__dict__ or hasattr(type(self), name)
                                  or any(name in s for s in (self._parameters, self._buffers,
                                                             self._modules))):
            raise KeyError(f"{type(self).__name__}: cannot register {what} {name!r}: an "
                           "attribute of that name already exists")

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            s = d.get(store)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        """Add a parameter (or a None placeholder, e.g. a missing bias) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, "
                            f"found {type(param).__name__}")
        self._check_new_name(name, self._parameters, "parameter")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor],
                        persistent: bool = True) -> None:
        """A tensor that belongs to the module's state but is not trained (e.g. running
        statistics); saved in ``state_dict`` unless ``persistent=False``."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a tensor or None, found "
                            f"{type(tensor).__name__}")
        self._check_new_name(name, self._buffers, "buffer")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        """Add a child module under ``name`` (what attribute assignment does)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module, found "
                            f"{type(module).__name__}")
        self._check_new_name(name, self._modules, "module")
        self._modules[name] = module

    register_module = add_module

    # -- traversal ----------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[Tuple[str, "Module"]]:
        """(dotted name, module) for this module and every descendant, depth first; a module
        reachable by several paths comes once unless ``remove_duplicate=False``."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if remove_duplicate:
                if mod in memo:
                    continue
                memo.add(mod)
            yield name, mod
            children = [(f"{name}.{k}" if name else k, m) for k, m in mod._modules.items()
                        if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        """An iterator over this module and every descendant module, depth first, each once. See
        ``named_modules``."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        """An iterator of ``(name, module)`` for the direct submodules, in the order they were
        assigned."""
        for k, m in self._modules.items():
            if m is not None:
                yield k, m

    def children(self) -> Iterator["Module"]:
        """An iterator over the direct submodules, in the order they were assigned."""
        for _, m in self.named_children():
            yield m

    def _named(self, store: str, prefix: str, recurse: bool):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mname, mod in mods:
            for k, t in getattr(mod, store).items():
                if t is None or t in seen:
                    continue
                seen.add(t)
                yield (f"{mname}.{k}" if mname else k), t

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """An iterator of ``(dotted name, Parameter)`` for this module's parameters, and with
        ``recurse=True`` (the default) those of every descendant; a parameter shared by
        several modules comes once. ``prefix`` is put before every name."""
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """An iterator over this module's parameters, and with ``recurse=True`` (the default)
        those of every descendant, each once; what an optimizer is given."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        """An iterator of ``(dotted name, tensor)`` for this module's buffers (running statistics
        and other non-learnable state), and with ``recurse=True`` those of every descendant,
        each once. ``prefix`` is put before every name."""
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """An iterator over this module's buffers, and with ``recurse=True`` (the default) those
        of every descendant, each once."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes and housekeeping ---------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set ``training`` to ``mode`` on this module and every descendant (dropout and batch
        norm behave differently in training) and return this module."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        """``train(False)``: put this module and every descendant in evaluation mode and return
        this module."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter (recursively) and return this module;
        ``requires_grad_(False)`` freezes it."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradient of every parameter: to None with ``set_to_none=True`` (the default,
        as in PyTorch 2), else to zeros. Parameters without a gradient are left alone."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = _zeros_like_grad(p.grad)

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn(module)`` on every descendant and on this module, each descendant before its
        parent (as PyTorch), e.g. to initialise weights; returns this module."""
        for m in list(self.modules())[::-1]:
            fn(m)
        return self

    def to(self, *args, dtype=None, device=None) -> "Module":
        """Move/convert parameters and buffers in place (floating-point ones for dtype)."""
        for a in args:
            if isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda"):
                device = a
            else:
                dtype = a
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for k, t in store.items():
                    if t is None:
                        continue
                    new = t
                    if dtype is not None and dtypes.is_float_array(t.array):
                        new = new.detach().to(dtype)
                    if device is not None:
                        new = new.detach().to(device=device)
                    if new is not t:
                        t.array = new.array
                        t._version[0] += 1
                        if t.grad is not None:
                            t.grad = None
        return self

    def cpu(self) -> "Module":
        """``to('cpu')``: move every parameter and buffer to the CPU. Converts this module's
        parameters and buffers in place (their tensor objects stay the same, so an optimizer
        keeps tracking them; a converted parameter's ``.grad`` is cleared) and returns the
        module."""
        return self.to(device="cpu")

    def cuda(self) -> "Module":
        """``to('cuda')``: move every parameter and buffer to the GPU (needs cupy). Converts this
        module's parameters and buffers in place (their tensor objects stay the same, so an
        optimizer keeps tracking them; a converted parameter's ``.grad`` is cleared) and
        returns the module."""
        return self.to(device="cuda")

    def float(self) -> "Module":
        """``to(dg.float32)``: cast the floating-point parameters and buffers to float32 (integer
        buffers are kept). Converts this module's parameters and buffers in place (their
        tensor objects stay the same, so an optimizer keeps tracking them; a converted
        parameter's ``.grad`` is cleared) and returns the module."""
        return self.to("float32")

    def double(self) -> "Module":
        """``to(dg.float64)``: cast the floating-point parameters and buffers to float64 (integer
        buffers are kept). Converts this module's parameters and buffers in place (their
        tensor objects stay the same, so an optimizer keeps tracking them; a converted
        parameter's ``.grad`` is cleared) and returns the module."""
        return self.to("float64")

    def half(self) -> "Module":
        """``to(dg.float16)``: cast the floating-point parameters and buffers to float16 (integer
        buffers are kept). Converts this module's parameters and buffers in place (their
        tensor objects stay the same, so an optimizer keeps tracking them; a converted
        parameter's ``.grad`` is cleared) and returns the module."""
        return self.to("float16")

    # -- state dicts --------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name (detached tensors sharing data).

        As PyTorch, a module shared by several paths is saved under each of its names."""
        out: "OrderedDict[str, Tensor]" = OrderedDict()
        for mname, mod in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            for k, p in mod._parameters.items():
                if p is not None:
                    out[f"{mname}.{k}" if mname else k] = p if keep_vars else p.detach()
            for k, b in mod._buffers.items():
                if b is not None and k not in mod._non_persistent:
                    out[f"{mname}.{k}" if mname else k] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict: Dict, strict: bool = True):
        """Copy values into the parameters and buffers (shapes must match).

        Returns ``IncompatibleKeys(missing_keys, unexpected_keys)``; with ``strict`` either
        raises StateDictError. A shape mismatch always raises, and nothing is loaded then.
        """
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, t in own.items():
            if k not in state_dict:
                continue
            src = state_dict[k]
            arr = src.__array__() if isinstance(src, Tensor) else np.asarray(src)
            if tuple(arr.shape) != tuple(t.shape):
                errors.append(f"size mismatch for {k}: the checkpoint has shape "
                              f"{list(arr.shape)}, the model has {list(t.shape)}")
        if strict and (missing or unexpected):
            if missing:
                errors.append("missing keys: " + ", ".join(missing))
            if unexpected:
                errors.append("unexpected keys: " + ", ".join(unexpected))
        if errors:
            raise StateDictError(f"load_state_dict for {type(self).__name__}:\n  "
                                 + "\n  ".join(errors))
        from ..eager import grad_mode
        with grad_mode.no_grad():
            for k, t in own.items():
                if k in state_dict:
                    src = state_dict[k]
                    arr = src.__array__() if isinstance(src, Tensor) else np.asarray(src)
                    t.copy_(Tensor._wrap(np.asarray(arr)) if t.device == "cpu" else
                            Tensor._wrap(np.asarray(arr)).to(device=t.device))
        return IncompatibleKeys(missing, unexpected)

    # -- hooks and calling --------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable) -> _Handle:
        """``hook(module, args)`` runs before forward; it may return replacement args."""
        Module._hook_ids += 1
        self._forward_pre_hooks[Module._hook_ids] = hook
        return _Handle(self._forward_pre_hooks, Module._hook_ids)

    def register_forward_hook(self, hook: Callable) -> _Handle:
        """``hook(module, args, output)`` runs after forward; it may return a new output."""
        Module._hook_ids += 1
        self._forward_hooks[Module._hook_ids] = hook
        return _Handle(self._forward_hooks, Module._hook_ids)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> _Handle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients of this module's
        tensor positional inputs are computed (eager mode); it may return a replacement
        ``grad_input``. As PyTorch's (see ``nn.backward_hooks``)."""
        return self._add_hook(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> _Handle:
        """``hook(module, grad_output)`` runs when the gradients of this module's outputs are
        computed (eager mode), before those of its inputs; it may return a replacement
        ``grad_output``. As PyTorch's."""
        return self._add_hook(self._backward_pre_hooks, hook, prepend)

    @staticmethod
    def _add_hook(store: dict, hook: Callable, prepend: bool) -> _Handle:
        Module._hook_ids += 1
        store[Module._hook_ids] = hook
        if prepend:
            store.move_to_end(Module._hook_ids, last=False)
        return _Handle(store, Module._hook_ids)

    def forward(self, *args, **kwargs):
        """The computation of this module, which every subclass defines. Call the module
        (``module(x)``), not ``forward``, so that hooks run and graph mode records the layer
        names. The base class raises NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        if tracing():          # dg.compile is recording: replays check the training flag
            note_attribute(self, "training")
        for hook in list(self._forward_pre_hooks.values()):
            new = hook(self, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
        graph = _graph_of(args, kwargs)
        try:
            if graph is not None and current_graph() is not graph:
                with graph:
                    _bind_names(self, graph)
                    out = self.forward(*args, **kwargs)
            elif graph is None and (self._backward_hooks or self._backward_pre_hooks):
                return call_with_backward_hooks(
                    self, args, lambda a: self._run_forward_hooks(
                        a, self.forward(*a, **kwargs)))
            else:
                if graph is not None:
                    _bind_names(self, graph)
                out = self.forward(*args, **kwargs)
        except (ShapeError, DTypeError, IndexError) as e:
            _name_layer(e, self)
            raise
        return self._run_forward_hooks(args, out)

    def _run_forward_hooks(self, args, out):
        for hook in list(self._forward_hooks.values()):
            new = hook(self, args, out)
            if new is not None:
                out = new
        return out

    # -- printing -----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The extra text shown between the parentheses of this module's ``repr`` (e.g.
        ``in_features=3, out_features=4``); subclasses override it. The base class gives ''."""
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            text = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {text}")
        main = type(self).__name__ + "("
        if not lines:
            return main + ")"
        if len(lines) == 1 and not self._modules:
            return main + lines[0] + ")"
        return main + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


def _zeros_like_grad(grad: Tensor) -> Tensor:
    """Fresh zeros shaped like ``grad`` on its device (``grad * 0`` would keep NaN and inf)."""
    zeros = grad.array.copy()
    zeros.fill(0)
    return Tensor._wrap(zeros)


def _name_layer(error: Exception, module: Module) -> None:
    """Add the innermost layer that was running to a shape, dtype or index error's message
    (once), so an error deep inside a model says which layer it came from."""
    message = error.args[0] if error.args and isinstance(error.args[0], str) else None
    if message is None or getattr(error, "_layer_named", False):
        return
    error._layer_named = True
    if "\n  layer: " in message:
        return
    extra = module.extra_repr()
    line = f"{type(module).__name__}({extra})" if "\n" not in extra else type(module).__name__
    error.args = (f"{message}\n  layer: {line}",) + tuple(error.args[1:])


def _graph_of(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, Value):
            return a.graph
    return current_graph()


def _bind_names(module: Module, graph) -> None:
    """Give the module's parameters and buffers their dotted names in the graph (first
    binding wins, so a shared parameter keeps one state input)."""
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if graph.bound_value(t) is None:
            graph.bind_state(t, name)
