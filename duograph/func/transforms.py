"""torch.func's autodiff transforms: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian.

Each run of a transformed function is a grad level (``batched.push("grad")``): its inputs
get aliases that the tape tracks from this level on, the function runs, and the backward
pass is ``graphlib.autodiff.backward_pass`` over the tape nodes the outputs depend on (the
OpDefs' vjp rules: one rule for every mode). The backward runs with gradients recorded when
an outer level (or eager autograd) may differentiate the result, so ``grad(grad(f))`` and
``jacfwd(jacrev(f))`` compose. Forward mode is derived from the vjp rules by transposition
(the double-vjp trick): the vjp ``u -> J^T u`` is linear in ``u``, so its own vjp at the
tangent ``t`` is ``J t``, with no jvp rule per op.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence, Tuple, Union

from ..eager import grad_mode
from ..eager.tensors import Tensor
from ..graphlib.autodiff import backward_pass, value_key
from ..graphlib.dtypes import is_float
from ..graphlib.ops.creation import ones_like, zeros_like
from ..graphlib.registry import get_op
from ._tree import tree_flatten, tree_unflatten
from .batched import BatchedTensor, collect, grad_level_active, pop, push
from .vmap import vmap

ArgNums = Union[int, Tuple[int, ...]]


def _zeros_like(x):
    return zeros_like(x)


def _alias(x, where: str):
    """A value equal to ``x`` that this grad level differentiates with respect to: a new
    leaf, or (when ``x`` already carries an outer level's gradient) a tape node over it."""
    if not isinstance(x, (Tensor, BatchedTensor)):
        raise TypeError(f"{where}: expected tensors as the inputs to differentiate, found "
                        f"{type(x).__name__}")
    if not is_float(x.dtype):
        raise RuntimeError(f"{where}: only floating-point tensors can be differentiated, "
                           f"found a {x.dtype} input")
    if x.requires_grad:
        return get_op("reshape")(x, shape=tuple(x.shape))
    if isinstance(x, BatchedTensor):
        leaf = BatchedTensor(x.value, x.level)
        leaf.requires_grad = True
        return leaf
    return x.detach().requires_grad_()


def _strip(x, keep: bool):
    """``x`` as returned to the caller: without this level's tape unless an outer level or
    eager autograd may still differentiate it."""
    if keep or not isinstance(x, (Tensor, BatchedTensor)):
        return x
    return x.detach()


def _strip_tree(tree, keep: bool):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([_strip(x, keep) for x in leaves], spec)


def _argnums(argnums: ArgNums, n: int, where: str) -> Tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not isinstance(nums, tuple) or not nums or not all(
            isinstance(a, int) and not isinstance(a, bool) for a in nums):
        raise RuntimeError(f"{where}: argnums must be int or Tuple[int, ...], got: "
                           f"{type(argnums)}")
    out = []
    for a in nums:
        if not -n <= a < n:
            raise RuntimeError(f"{where}: Got argnums={a}, but only {n} positional inputs")
        out.append(a % n)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{where}: argnums must be unique, got {argnums}")
    return tuple(out)


class _VjpRun:
    """One run of ``func`` at a new grad level: the aliased inputs, the outputs, and the
    vector-Jacobian product of the outputs with respect to the aliases."""

    def __init__(self, func, args, nums, where: str, has_aux: bool, kwargs=None):
        self.keep = grad_mode.is_grad_enabled() and (grad_level_active() or any(
            getattr(x, "requires_grad", False)
            for x in tree_flatten([args[i] for i in nums])[0]))
        entry = push("grad")
        try:
            with grad_mode.enable_grad():
                args = list(args)
                self.specs = []
                self.aliases = []
                for i in nums:
                    leaves, spec = tree_flatten(args[i])
                    al = [_alias(x, where) for x in leaves]
                    self.specs.append(spec)
                    self.aliases.append(al)
                    args[i] = tree_unflatten(al, spec)
                out = func(*args, **(kwargs or {}))
        finally:
            pop(entry)
        self.aux = None
        if has_aux:
            if not isinstance(out, tuple) or len(out) != 2:
                raise RuntimeError(f"{where}: output of function f should be a tuple: "
                                   "(output, aux) if has_aux is True")
            out, self.aux = out
            self.aux = _strip_tree(self.aux, self.keep)
        self.out = out

    def vjp(self, out_leaves: Sequence, cts: Sequence, fill: bool = True) -> list:
        """Per differentiated argument, the list of cotangents of its leaves (zeros where
        the outputs do not depend on a leaf; None there when ``fill`` is false)."""
        create = grad_mode.is_grad_enabled() and (self.keep or grad_level_active() or any(
            getattr(c, "requires_grad", False) for c in cts))
        seeds: dict = {}
        for o, c in zip(out_leaves, cts):
            if c is None or not isinstance(o, (Tensor, BatchedTensor)):
                continue
            k = value_key(o)
            seeds[k] = c if k not in seeds else seeds[k] + c
        flat_aliases = [a for al in self.aliases for a in al]
        with grad_mode.set_grad_enabled(create):
            got = backward_pass(collect(out_leaves), seeds, wrt=flat_aliases)
            result = []
            for al in self.aliases:
                grads = []
                for a in al:
                    g = got.get(value_key(a))
                    grads.append(_zeros_like(a) if g is None and fill else g)
                result.append(grads)
        return result


def _check_output(x, where: str):
    if not isinstance(x, (Tensor, BatchedTensor)):
        raise RuntimeError(f"{where}: Expected f(*args) to return a Tensor, got "
                           f"{type(x).__name__}")


def grad_and_value(func: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad_and_value``: returns ``(gradient, value)`` (``(gradient, (value,
    aux))`` with ``has_aux``), the gradient of ``func``'s scalar output with respect to the
    positional arguments ``argnums`` (pytrees of tensors: the gradient has their structure)."""
    where = "grad_and_value(f)(*args)"

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args), where)
        run = _VjpRun(func, args, nums, where, has_aux, kwargs)
        out = run.out
        _check_output(out, where)
        if len(out.shape) != 0:
            raise RuntimeError(f"{where}: Expected f(*args) to return a scalar Tensor, got "
                               f"tensor with {len(out.shape)} dims. Maybe you wanted to use "
                               "the vjp or jacrev APIs instead?")
        if not is_float(out.dtype):
            raise RuntimeError(f"{where}: Expected f(*args) to return a floating-point "
                               f"Tensor, got {out.dtype}")
        with grad_mode.no_grad():
            seed = ones_like(out)
        grads = run.vjp([out], [seed])
        grads = [tree_unflatten([_strip(g, run.keep) for g in gs], spec)
                 for gs, spec in zip(grads, run.specs)]
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        value = _strip(out, run.keep)
        if has_aux:
            return g, (value, run.aux)
        return g, value
    return wrapper


def grad(func: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad``: the gradient of ``func``'s scalar output with respect to its
    positional arguments ``argnums``; with ``has_aux`` ``func`` returns ``(output, aux)``
    and the transformed function returns ``(gradient, aux)``."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``torch.func.vjp``: ``(output, vjp_fn)`` (``(output, vjp_fn, aux)`` with
    ``has_aux``); ``vjp_fn(cotangents)`` (one per output leaf, in the output's structure)
    returns one cotangent per primal, as a tuple. ``vjp_fn`` may be called many times and
    under vmap (batched cotangents give batched results)."""
    where = "vjp(f, *primals)"
    run = _VjpRun(func, primals, tuple(range(len(primals))), where, has_aux)
    out_leaves, out_spec = tree_flatten(run.out)
    for o in out_leaves:
        _check_output(o, where)

    def vjp_fn(*cotangents):
        cts = cotangents[0] if len(cotangents) == 1 else cotangents
        ct_leaves, ct_spec = tree_flatten(cts)
        if ct_spec != out_spec and not (len(out_leaves) == 1 and len(ct_leaves) == 1):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function. cotangents: "
                               f"{ct_spec}, primal output: {out_spec}")
        for o, c in zip(out_leaves, ct_leaves):
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(f"vjp_fn: expected a cotangent of shape {list(o.shape)} "
                                   f"for an output of that shape, found {list(c.shape)}")
        grads = run.vjp(out_leaves, ct_leaves)
        return tuple(tree_unflatten(gs, spec) for gs, spec in zip(grads, run.specs))

    out = tree_unflatten([_strip(o, run.keep) for o in out_leaves], out_spec)
    if has_aux:
        return out, vjp_fn, run.aux
    return out, vjp_fn


def jvp(func: Callable, primals: Any, tangents: Any, *, strict: bool = False,
        has_aux: bool = False):
    """``torch.func.jvp``: ``(output, jvp_out)`` (and ``aux`` with ``has_aux``), the
    Jacobian of ``func`` at ``primals`` applied to ``tangents`` (tuples of the same
    structure and shapes), derived from the vjp rules by transposition."""
    where = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        raise RuntimeError(f"{where}: Expected primals to be a tuple. E.g. it should be "
                           "valid to call f(*primals).")
    if not isinstance(tangents, tuple):
        raise RuntimeError(f"{where}: Expected tangents to be a tuple.")
    p_leaves, p_spec = tree_flatten(primals)
    t_leaves, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(f"{where}: Expected primals and tangents to have the same python "
                           f"structure. For example, if primals is a tuple of 3 tensors, "
                           f"tangents also must be. Got primals with structure {p_spec} and "
                           f"tangents with structure {t_spec}")
    for p, t in zip(p_leaves, t_leaves):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"{where}: Expected primals and tangents to have the same "
                               f"shape, found {list(p.shape)} and {list(t.shape)}")
    keep = grad_mode.is_grad_enabled() and (grad_level_active() or any(
        getattr(x, "requires_grad", False) for x in p_leaves + t_leaves))
    outer = push("grad")      # the level of the dummy cotangents u
    try:
        with grad_mode.enable_grad():
            run = _VjpRun(func, primals, tuple(range(len(primals))), where, has_aux)
            out_leaves, out_spec = tree_flatten(run.out)
            for o in out_leaves:
                _check_output(o, where)
            us = [_alias(_zeros_like(o).detach(), where) for o in out_leaves]
            gs = [g for per_arg in run.vjp(out_leaves, us) for g in per_arg]
    finally:
        pop(outer)
    # the vjp's own vjp, at the tangents: J t
    seeds: dict = {}
    for g, t in zip(gs, t_leaves):
        k = value_key(g)
        seeds[k] = t if k not in seeds else seeds[k] + t
    with grad_mode.set_grad_enabled(grad_mode.is_grad_enabled() and (keep or any(
            getattr(t, "requires_grad", False) for t in t_leaves))):
        got = backward_pass(collect(gs), seeds, wrt=us)
        tangents_out = [got.get(value_key(u)) for u in us]
        tangents_out = [_zeros_like(u) if t is None else t for u, t in zip(us, tangents_out)]
    out = tree_unflatten([_strip(o, keep) for o in out_leaves], out_spec)
    tout = tree_unflatten([_strip(t, keep) for t in tangents_out], out_spec)
    if has_aux:
        return out, tout, _strip_tree(run.aux, keep)
    return out, tout


def _basis(x, n: int):
    """The ``n`` unit vectors of ``x``'s elements, shaped ``(n, *x.shape)``."""
    eye = get_op("eye")(n=n, m=n, dtype=x.dtype)
    return get_op("reshape")(eye, shape=(n,) + tuple(x.shape))


def _numel(x) -> int:
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def jacrev(func: Callable, argnums: ArgNums = 0, *, has_aux: bool = False,
           chunk_size=None) -> Callable:
    """``torch.func.jacrev``: the Jacobian of ``func`` with respect to the positional
    arguments ``argnums``, by reverse mode: the vjp mapped (vmap) over the unit vectors of
    the output. For an output of shape ``O`` and an input of shape ``I`` it has shape
    ``O + I``; pytrees of outputs and of inputs nest (outputs outside)."""
    where = "jacrev(f, argnums)(*args)"

    @functools.wraps(func)
    def wrapper(*args):
        nums = _argnums(argnums, len(args), where)
        run = _VjpRun(func, args, nums, where, has_aux)
        out_leaves, out_spec = tree_flatten(run.out)
        for o in out_leaves:
            _check_output(o, where)
        sizes = [_numel(o) for o in out_leaves]
        total = sum(sizes)
        flat_aliases = [(k, a) for k, al in enumerate(run.aliases) for a in al]

        def one_row(*cts):
            return tuple(g for per_arg in run.vjp(out_leaves, list(cts)) for g in per_arg)

        bases = []
        offset = 0
        for o, n in zip(out_leaves, sizes):
            # rows offset..offset+n of the (total, total) identity: output o's unit vectors
            eye = get_op("eye")(n=total, m=total, dtype=o.dtype)
            rows = get_op("getitem")(eye, index=(("s", None, None, None),
                                                 ("s", offset, offset + n, None)))
            bases.append(get_op("reshape")(rows, shape=(total,) + tuple(o.shape)))
            offset += n
        rows = vmap(one_row, chunk_size=chunk_size)(*bases)    # per input leaf: (total, *I)
        per_out = []
        offset = 0
        for o, n in zip(out_leaves, sizes):
            parts = []
            for (k, a), r in zip(flat_aliases, rows):
                block = get_op("getitem")(r, index=(("s", offset, offset + n, None),))
                block = get_op("reshape")(block, shape=tuple(o.shape) + tuple(a.shape))
                parts.append(_strip(block, run.keep))
            offset += n
            grouped = []
            i = 0
            for spec in run.specs:
                m = spec.num_leaves
                grouped.append(tree_unflatten(parts[i:i + m], spec))
                i += m
            per_out.append(grouped[0] if isinstance(argnums, int) else tuple(grouped))
        jac = tree_unflatten(per_out, out_spec)
        return (jac, run.aux) if has_aux else jac
    return wrapper


def jacfwd(func: Callable, argnums: ArgNums = 0, has_aux: bool = False, *,
           randomness: str = "error") -> Callable:
    """``torch.func.jacfwd``: the Jacobian of ``func`` with respect to the positional
    arguments ``argnums``, by forward mode: ``jvp`` mapped (vmap) over the unit vectors of
    the inputs. Same layout as ``jacrev``."""
    where = "jacfwd(f, argnums)(*args)"

    @functools.wraps(func)
    def wrapper(*args):
        nums = _argnums(argnums, len(args), where)
        groups = [tree_flatten(args[i]) for i in nums]
        leaves = [x for g, _ in groups for x in g]
        for x in leaves:
            if not isinstance(x, (Tensor, BatchedTensor)):
                raise TypeError(f"{where}: expected tensors as the inputs to differentiate, "
                                f"found {type(x).__name__}")
        sizes = [_numel(x) for x in leaves]
        total = sum(sizes)

        def pushed(*flat_tangents):
            args2 = list(args)
            tangents = []
            i = 0
            for (g, spec) in groups:
                tangents.append(tree_unflatten(list(flat_tangents[i:i + len(g)]), spec))
                i += len(g)

            def f_of(*diff):
                full = list(args)
                for k, v in zip(nums, diff):
                    full[k] = v
                return func(*full)
            res = jvp(f_of, tuple(args2[k] for k in nums), tuple(tangents), has_aux=has_aux)
            return res[1:] if has_aux else (res[1],)

        bases, offset = [], 0
        for x, n in zip(leaves, sizes):
            eye = get_op("eye")(n=total, m=total, dtype=x.dtype)
            rows = get_op("getitem")(eye, index=(("s", None, None, None),
                                                 ("s", offset, offset + n, None)))
            bases.append(get_op("reshape")(rows, shape=(total,) + tuple(x.shape)))
            offset += n
        res = vmap(pushed, randomness=randomness, out_dims=-1 if not has_aux else (-1, None))(
            *bases)
        tout = res[0]
        t_leaves, t_spec = tree_flatten(tout)
        per_out = []
        for t in t_leaves:
            o_shape = tuple(t.shape[:-1])
            parts, offset = [], 0
            for x, n in zip(leaves, sizes):
                block = get_op("getitem")(t, index=tuple(("s", None, None, None)
                                                         for _ in o_shape) + (
                    ("s", offset, offset + n, None),))
                parts.append(get_op("reshape")(block, shape=o_shape + tuple(x.shape)))
                offset += n
            grouped, i = [], 0
            for g, spec in groups:
                grouped.append(tree_unflatten(parts[i:i + len(g)], spec))
                i += len(g)
            per_out.append(grouped[0] if isinstance(argnums, int) else tuple(grouped))
        jac = tree_unflatten(per_out, t_spec)
        if has_aux:
            return jac, res[1]      # (computed from the primals: the same for every row)
        return jac
    return wrapper


def hessian(func: Callable, argnums: ArgNums = 0) -> Callable:
    """``torch.func.hessian``: ``jacfwd(jacrev(func, argnums), argnums)``."""
    return jacfwd(jacrev(func, argnums), argnums)
