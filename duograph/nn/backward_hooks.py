"""Module backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``)
as PyTorch implements them: the module's tensor inputs and outputs pass through identity
``autograd.Function``s whose backward sees the gradients going by.

- ``pre_hook(module, grad_output)`` runs when the gradients of the module's outputs are
  known; it may return a replacement ``grad_output``.
- ``hook(module, grad_input, grad_output)`` runs when the gradients of its tensor positional
  inputs are known (``grad_input`` has one entry per tensor positional argument, None for
  those that do not require grad; all None when none does, then it runs with the
  ``grad_output``); it may return a replacement ``grad_input``.

Eager tensors only: in graph mode a module's call adds nodes and no hook runs.
"""
from __future__ import annotations

import warnings
from typing import Callable, List

from ..eager import grad_mode
from ..eager.autograd import Function
from ..eager.tensors import Tensor


class _BackwardHookIdentity(Function):
    """Identity on its tensor arguments; backward hands their gradients to ``callback`` and
    passes on what it returns."""

    @staticmethod
    def forward(ctx, callback, *tensors):
        ctx.callback = callback
        return tuple(t.detach() for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.callback(list(grads)))


def _flatten_outputs(out) -> List[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [o for o in out if isinstance(o, Tensor)]
    return []


def _replace_outputs(out, old: List[Tensor], new) -> object:
    swap = {id(a): b for a, b in zip(old, new)}
    if isinstance(out, Tensor):
        return swap.get(id(out), out)
    items = [swap.get(id(o), o) if isinstance(o, Tensor) else o for o in out]
    return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)


def _check_count(module, what: str, got, expected: int):
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    if len(got) != expected:
        raise RuntimeError(f"backward hook of {type(module).__name__} returned {len(got)} "
                           f"{what} gradient(s), expected {expected}")
    return got


def call_with_backward_hooks(module, args: tuple, run: Callable[[tuple], object]):
    """``run(args)`` (the module's forward and forward hooks) with the module's backward hooks
    attached to the gradients of its tensor inputs and outputs."""
    full_hooks = list(module._backward_hooks.values())
    pre_hooks = list(module._backward_pre_hooks.values())
    if not grad_mode.is_grad_enabled():
        return run(args)
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    diff_pos = [i for i in tensor_pos if args[i].requires_grad]
    state = {"grad_output": None}

    def run_full_hooks(grad_input: tuple) -> tuple:
        for hook in full_hooks:
            new = hook(module, grad_input, state["grad_output"])
            if new is not None:
                grad_input = _check_count(module, "input", new, len(tensor_pos))
        return grad_input

    if diff_pos and full_hooks:
        def on_inputs(grads):
            by_pos = dict(zip(diff_pos, grads))
            grad_input = tuple(by_pos.get(i) for i in tensor_pos)
            grad_input = run_full_hooks(grad_input)
            return [grad_input[tensor_pos.index(i)] for i in diff_pos]
        wrapped = _BackwardHookIdentity.apply(on_inputs, *[args[i] for i in diff_pos])
        args = list(args)
        for i, t in zip(diff_pos, wrapped):
            args[i] = t
        args = tuple(args)
    out = run(args)
    outs = _flatten_outputs(out)
    out_diff = [o for o in outs if o.requires_grad]
    if not out_diff:
        return out

    def on_outputs(grads):
        grad_output = tuple(grads)
        for hook in pre_hooks:
            new = hook(module, grad_output)
            if new is not None:
                grad_output = _check_count(module, "output", new, len(out_diff))
        state["grad_output"] = grad_output
        if full_hooks and not diff_pos:
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients",
                          stacklevel=2)
            grad_input = tuple(None for _ in tensor_pos)
            for hook in full_hooks:
                new = hook(module, grad_input, grad_output)
                if new is not None and not (isinstance(new, tuple)
                                            and all(g is None for g in new)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
        return list(grad_output)
    wrapped = _BackwardHookIdentity.apply(on_outputs, *out_diff)
    return _replace_outputs(out, out_diff, wrapped)
