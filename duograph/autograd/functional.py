"""``duograph.autograd.functional``: torch.autograd.functional's ``vjp``, ``jvp``,
``jacobian``, ``hessian``, ``vhp`` and ``hvp``, on duograph.func's transforms.

Inputs are a tensor or a tuple of tensors; results follow the inputs' (and outputs') tuple
structure as PyTorch's do. ``create_graph=True`` keeps the results differentiable with
respect to inputs that require grad; ``strict=True`` raises where the outputs do not
depend on an input (PyTorch also refuses, under strict, a Jacobian that is independent of an
input though the output depends on it; duograph checks the output's dependence only).
Jacobians are always computed vectorized (vmap over the unit vectors), so ``vectorize``
changes nothing but is accepted; ``strategy="forward-mode"`` uses ``jacfwd`` and, as in
PyTorch, requires ``vectorize=True``.
"""
from __future__ import annotations

from ..eager import grad_mode
from ..eager.tensors import Tensor
from ..graphlib.ops.creation import ones_like, zeros_like
from ..func.transforms import _VjpRun, jacfwd, jacrev, jvp as _func_jvp


def _as_tuple(x, arg_name: str, fn_name: str):
    is_tuple = isinstance(x, tuple)
    items = x if is_tuple else (x,)
    for i, el in enumerate(items):
        if not isinstance(el, Tensor):
            where = (f"the value at index {i} has type {type(el)}" if is_tuple
                     else f"the given {arg_name} has type {type(el)}")
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors but {where}.")
    return is_tuple, items


def _validate_v(v, other, is_other_tuple: bool) -> None:
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but "
                               f"got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for idx, (a, b) in enumerate(zip(v, other)):
        if tuple(a.shape) != tuple(b.shape):
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise RuntimeError(f"{prepend}v has invalid size: should be {tuple(b.shape)} but "
                               f"got {tuple(a.shape)}.")


def _post(res, is_tuple):
    return tuple(res) if is_tuple else res[0]


def _finish(x, create_graph: bool):
    return x if create_graph else x.detach()


def _inputs(inputs, create_graph: bool):
    """The inputs as the transforms see them: detached unless ``create_graph`` must keep
    the results connected to them."""
    return tuple(x if create_graph else x.detach() for x in inputs)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T J)``: the vector-Jacobian product of ``func`` at ``inputs``
    (``v`` may be omitted when the output has one element)."""
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        run = _VjpRun(func, _inputs(inputs, create_graph), tuple(range(len(inputs))), "vjp",
                      False)
    is_out_tuple, outs = _as_tuple(run.out, "outputs of the user-provided function", "vjp")
    if v is None:
        if len(outs) != 1 or outs[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function "
                               "returns a single Tensor with a single element.")
        vs = (ones_like(outs[0]),)
    else:
        _, vs = _as_tuple(v, "v", "vjp")
        _validate_v(vs, outs, is_out_tuple)
    with grad_mode.set_grad_enabled(create_graph):
        grads = [g[0] for g in run.vjp(list(outs), list(vs), fill=False)]
    res = []
    for i, (g, x) in enumerate(zip(grads, inputs)):
        if g is None:
            if strict:
                raise RuntimeError("The output of the user-provided function is independent "
                                   f"of input {i}. This is not allowed in strict mode.")
            g = zeros_like(x)
        res.append(_finish(g, create_graph))
    out = tuple(_finish(o, create_graph) for o in outs)
    return _post(out, is_out_tuple), _post(res, is_in_tuple)


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), J v)``: the Jacobian-vector product of ``func`` at ``inputs``
    (``v`` may be omitted when there is one input of one element)."""
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the input to the "
                               "user-provided function is a single Tensor with a single "
                               "element.")
        vs = (ones_like(inputs[0]),)
    else:
        _, vs = _as_tuple(v, "v", "jvp")
        _validate_v(vs, inputs, is_in_tuple)
    if strict:
        _vjp_strict_check(func, inputs, range(len(inputs)), "jvp")
    holder = {}

    def call(*xs):
        out = func(*xs)
        holder["tuple"] = isinstance(out, tuple)
        return out
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        out, tout = _func_jvp(call, _inputs(inputs, create_graph), tuple(vs))
    is_out_tuple = holder["tuple"]
    outs = out if is_out_tuple else (out,)
    touts = tout if is_out_tuple else (tout,)
    _as_tuple(outs, "outputs of the user-provided function", "jvp")
    return (_post([_finish(o, create_graph) for o in outs], is_out_tuple),
            _post([_finish(t, create_graph) for t in touts], is_out_tuple))


def _check_strategy(strategy: str, vectorize: bool, name: str) -> None:
    if strategy not in ("forward-mode", "reverse-mode"):
        raise RuntimeError(f'Expected strategy to be either "forward-mode" or "reverse-mode". '
                           f"Hint: If your function has more outputs than inputs, "
                           f'"forward-mode" tends to be more performant. Otherwise, prefer '
                           f'to use "reverse-mode". Got {strategy!r}')
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError(f"{name}: `strategy=\"forward-mode\"` is only implemented "
                                  "for `vectorize=True`.")


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for one input and one output a tensor of shape
    ``out.shape + in.shape``; tuples of inputs and/or outputs give (nested) tuples, outputs
    outside."""
    _check_strategy(strategy, vectorize, "torch.autograd.functional.jacobian")
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    argnums = tuple(range(len(inputs)))
    transform = jacfwd if strategy == "forward-mode" else jacrev
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        jac = transform(func, argnums)(*_inputs(inputs, create_graph))
    is_out_tuple = isinstance(jac, tuple) and len(jac) > 0 and isinstance(jac[0], tuple)
    rows = jac if is_out_tuple else (jac,)
    if strict:
        _, outs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jacobian")
        _vjp_strict_check(func, inputs, [i for i in range(len(inputs)) if all(
            float(abs(row[i]).sum().item()) == 0.0 for row in rows)], "jacobian")
    rows = tuple(tuple(_finish(j, create_graph) for j in row) for row in rows)
    rows = tuple(row if is_in_tuple else row[0] for row in rows)
    return rows if is_out_tuple else rows[0]


def _vjp_strict_check(func, inputs, which, name: str) -> None:
    """Raise PyTorch's strict-mode error when the outputs do not depend on an input among
    ``which`` (the gradient of every output there is no value at all, not zeros)."""
    which = list(which)
    if not which:
        return
    run = _VjpRun(func, tuple(x.detach() for x in inputs), tuple(range(len(inputs))), name,
                  False)
    outs = run.out if isinstance(run.out, tuple) else (run.out,)
    grads = run.vjp(list(outs), [ones_like(o) for o in outs], fill=False)
    for i in which:
        if grads[i][0] is None:
            raise RuntimeError("The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of the scalar function ``func`` at ``inputs``: for one input a tensor of
    shape ``in.shape + in.shape``; for a tuple of inputs a tuple of tuples."""
    _check_strategy(outer_jacobian_strategy, vectorize, "torch.autograd.functional.hessian")
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")

    def scalar(*xs):
        out = func(*xs)
        if isinstance(out, tuple) or not isinstance(out, Tensor) and not hasattr(out, "shape"):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        n = 1
        for d in out.shape:
            n *= int(d)
        if n != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should "
                               "contain a single element")
        return out.reshape(())
    argnums = tuple(range(len(inputs)))
    if strict:
        _vjp_strict_check(scalar, inputs, argnums, "hessian")
    outer = jacfwd if outer_jacobian_strategy == "forward-mode" else jacrev
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        hess = outer(jacrev(scalar, argnums), argnums)(*_inputs(inputs, create_graph))
    hess = tuple(tuple(_finish(h, create_graph) for h in row) for row in hess)
    return hess if is_in_tuple else hess[0][0]


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T H)`` for a scalar ``func``."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), H v)`` for a scalar ``func`` (H is symmetric, so this is the vhp
    computed as the jvp of the gradient: forward over reverse)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func, inputs, v, create_graph: bool, strict: bool, name: str):
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", name)
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the input to the "
                               "user-provided function is a single Tensor with a single "
                               "element.")
        vs = (ones_like(inputs[0]),)
    else:
        _, vs = _as_tuple(v, "v", name)
        _validate_v(vs, inputs, is_in_tuple)
    argnums = tuple(range(len(inputs)))
    if strict:
        _vjp_strict_check(func, inputs, argnums, name)
    holder = {}

    def gradient(*xs):
        run = _VjpRun(func, xs, argnums, name, False)
        out = run.out
        if isinstance(out, tuple) or not hasattr(out, "shape"):
            raise RuntimeError(f"The function given to {name} should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {name} should "
                               "contain a single element")
        holder["out"] = out
        return tuple(g[0] for g in run.vjp([out], [ones_like(out)]))
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        _, prod = _func_jvp(gradient, _inputs(inputs, create_graph), tuple(vs))
    out = _finish(holder["out"].reshape(()), create_graph)
    res = [_finish(p, create_graph) for p in prod]
    return out, _post(res, is_in_tuple)
