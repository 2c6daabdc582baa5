"""duograph.autograd: PyTorch's ``torch.autograd`` names over the eager tape.

``from duograph.autograd import Variable, Function, grad, backward, gradcheck,
gradgradcheck`` works as ``from torch.autograd import ...`` does. The tape itself lives in
``duograph.eager.autograd``; this package is its public face (a ``functional`` submodule with
``jacobian``, ``hessian``... sits beside it).
"""
from __future__ import annotations

from typing import Optional

from ..eager import grad_mode
from ..eager.autograd import (Function, FunctionCtx, GradcheckError, backward, grad,
                               queue_callback)
from ..eager.autograd import gradcheck as _gradcheck
from ..eager.creation import randn
from ..eager.grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled
from ..eager.tensors import Tensor
from ..compat import Variable

__all__ = ["Variable", "Function", "FunctionCtx", "GradcheckError", "backward", "grad",
           "gradcheck", "gradgradcheck", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "queue_callback"]

# PyTorch's checks duograph has no machinery for: asking for one is refused, not ignored
_UNSUPPORTED = ("check_batched_grad", "check_batched_forward_grad", "check_forward_ad",
                "check_fwd_over_rev", "gen_non_contig_grad_outputs", "masked")


def _refuse_unsupported(where: str, flags: dict) -> None:
    for name in _UNSUPPORTED:
        if flags.get(name):
            raise NotImplementedError(f"{where}: {name}=True is not supported by duograph "
                                      "(it has no batched or forward-mode gradient check)")


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True,
              fast_mode: bool = False, masked: Optional[bool] = None) -> bool:
    """Compare the reverse-mode Jacobian of ``func`` at ``inputs`` (float64 tensors that
    require grad) with central finite differences, as ``torch.autograd.gradcheck``.

    Returns True, or raises ``GradcheckError`` (a RuntimeError, as PyTorch's) when they
    differ by more than ``atol + rtol * |numerical|`` (False with
    ``raise_exception=False``). ``fast_mode`` gives the full check; the batched and
    forward-mode checks are refused (NotImplementedError).
    """
    _refuse_unsupported("gradcheck", dict(
        check_batched_grad=check_batched_grad, check_forward_ad=check_forward_ad,
        check_batched_forward_grad=check_batched_forward_grad, masked=masked))
    if not check_backward_ad:
        return True
    return _gradcheck(func, _as_tuple(inputs), eps=eps, atol=atol, rtol=rtol,
                      raise_exception=raise_exception)


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, gen_non_contig_grad_outputs: bool = False,
                  raise_exception: bool = True, nondet_tol: float = 0.0,
                  check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
                  check_batched_grad: bool = False, check_fwd_over_rev: bool = False,
                  check_rev_over_rev: bool = True, fast_mode: bool = False,
                  masked: bool = False) -> bool:
    """Check second derivatives, as ``torch.autograd.gradgradcheck``: ``gradcheck`` of the
    function ``(inputs, grad_outputs) -> grad(func(inputs), inputs, grad_outputs,
    create_graph=True)``.

    ``grad_outputs`` (one per output of ``func``) default to random normal tensors of the
    outputs' shapes and dtypes that require grad (drawn from duograph's global generator,
    so ``dg.manual_seed`` makes them reproducible), as PyTorch draws them.
    """
    _refuse_unsupported("gradgradcheck", dict(
        check_batched_grad=check_batched_grad, check_fwd_over_rev=check_fwd_over_rev,
        gen_non_contig_grad_outputs=gen_non_contig_grad_outputs, masked=masked))
    if not check_rev_over_rev:
        return True
    inputs = _as_tuple(inputs)
    diff_pos = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff_pos:
        raise ValueError("gradgradcheck: expected at least one input tensor that requires "
                         "grad, found none")
    if grad_outputs is None:
        with grad_mode.no_grad():
            outs = [o for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor)]
        grad_outputs = tuple(randn(*o.shape, dtype=o.dtype, requires_grad=True)
                             for o in outs)
    grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)

    def first_derivatives(*args):
        ins, gos = args[:n_in], args[n_in:]
        with grad_mode.enable_grad():     # finite differences evaluate this under no_grad
            outs = [o for o in _as_tuple(func(*ins)) if isinstance(o, Tensor)]
        if len(outs) != len(gos):
            raise ValueError(f"gradgradcheck: func returned {len(outs)} tensor(s), but "
                             f"{len(gos)} grad_outputs were given")
        pairs = [(o, g) for o, g in zip(outs, gos) if o.requires_grad]
        with grad_mode.enable_grad():
            grads = grad([o for o, _ in pairs], [ins[i] for i in diff_pos],
                         [g for _, g in pairs], create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return _gradcheck(first_derivatives, inputs + grad_outputs, eps=eps, atol=atol,
                      rtol=rtol, raise_exception=raise_exception)

