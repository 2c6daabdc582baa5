"""``cond``: a data-dependent choice between two traced branches, one node holding both as
regions (see ``tracing`` for how the branches are traced and run eagerly).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..autodiff import is_zero_cotangent
from ..batching import batch_region, ensure_batched, region_has_random
from ..dispatch import Scalar
from ..errors import ShapeError, located
from ..ir import Region
from ..registry import OpDef, register
from .call import _reference, give_results
from .creation import zeros_like
from .elementwise import ne, where
from .shape import reshape
from .tracing import (_apply_with, _check_same, _eager_call, _eager_leaves, _internal, _join,
                      _leaf_operand, _region_vjp, _run_user, _take_compute, _trace, _type_of,
                      eager_support, tree_flatten, tree_unflatten)


# -- cond ---------------------------------------------------------------------------------------
def _cond_infer(types, attrs):
    pred = types[0]
    if pred.shape != ():
        raise ShapeError(f"cond: the predicate must be a scalar (shape []), found "
                         f"{list(pred.shape)}")
    t = attrs["true_branch"].infer(types[1:], "cond")
    f = attrs["false_branch"].infer(types[1:], "cond")
    if t != f:
        raise ShapeError(f"cond: the branches give different types: {t} and {f}")
    return t


def _cond_region_kernel(xp, bodies, pred, *arrays, out=None, true_branch: Region,
                        false_branch: Region):
    compute = _take_compute()
    if compute is not None:         # an eager call: the Python function of the branch runs
        return give_results(xp, compute(xp, pred, arrays), arrays, out)
    taken = true_branch if bool(pred) else false_branch
    return bodies(taken, arrays)(list(arrays), out)


def _cond_vjp(cts, ins, outs, attrs, needs):
    pred, ops = ins[0], list(ins[1:])
    n = len(ops)
    want = [i for i in range(n) if needs[i + 1]]
    live = [j for j, (o, c) in enumerate(zip(outs, cts))
            if dtypes.is_float(o.dtype) and not is_zero_cotangent(c)]
    if not want or not live:
        return [None] * len(ins)
    step_needs = [bool(needs[i + 1]) for i in range(n)]

    def branch_vjp(region):
        def vjp_branch(*args):
            xs, gs = args[:n], args[n:]
            full = [None] * len(outs)
            for j, g in zip(live, gs):
                full[j] = g
            got = _region_vjp(region, xs, full, step_needs)
            return tuple(got[i] if got[i] is not None else zeros_like(xs[i]) for i in want)
        return vjp_branch
    with _internal():
        res = cond(pred, branch_vjp(attrs["true_branch"]), branch_vjp(attrs["false_branch"]),
                   *ops, *[cts[j] for j in live])
    out = [None] * len(ins)
    for i, g in zip(want, res):
        out[i + 1] = g
    return out


def _cond_static_region(node, consts):
    """A constant predicate picks the region: constant folding inlines it."""
    pred = consts[0]
    if pred is None:
        return None
    region = node.attrs["true_branch" if bool(np.asarray(pred)) else "false_branch"]
    return region, list(node.inputs[1:])


def _cond_rule(op, args, batched, attrs, size):
    """cond over a batch: with one predicate for the batch, one cond whose branches are
    replayed with their ops' rules; with a predicate per example, both branches run on the
    whole batch and each example's results are selected by its predicate (JAX's rule: both
    branches' work is done, as ``torch.where`` would)."""
    _take_compute()     # the user's eager function of this call reads batched values: the
                        # regions run instead, batched or (fallback) per example
    tb, fb = attrs["true_branch"], attrs["false_branch"]
    if region_has_random(tb) or region_has_random(fb):
        return NotImplemented
    pred, ops, flags = args[0], list(args[1:]), list(batched[1:])

    def branch(region):
        def run(*xs):
            outs, got = batch_region(region, list(xs), flags, size)
            return tuple(ensure_batched(o, b, size) for o, b in zip(outs, got))
        return run
    if not batched[0]:
        return tuple(cond(pred, branch(tb), branch(fb), *ops))
    t, f = branch(tb)(*ops), branch(fb)(*ops)
    if pred.dtype != "bool":
        pred = ne(pred, Scalar(0, pred.dtype))
    out = []
    for a, b in zip(t, f):
        p = reshape(pred, (size,) + (1,) * (len(a.shape) - 1))
        out.append(where(p, a, b))
    return tuple(out)


cond_op = register(OpDef("cond", _cond_infer, _reference(_cond_region_kernel), _cond_vjp,
                         multi_output=True, region_kernel=_cond_region_kernel,
                         nondiff_inputs=(0,), static_region=_cond_static_region,
                         doc="run one of two regions on the operands, chosen by a scalar "
                             "predicate",
                         attrs=Attrs(true_branch=Attr("region"), false_branch=Attr("region")),
                         batch=_cond_rule))


def _is_python_bool(x) -> bool:
    return isinstance(x, (bool, int, np.bool_, np.integer)) and not isinstance(x, np.ndarray)


def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as one op (JAX's
    ``lax.cond``): both functions are traced once, into the node's two regions, and must
    return the same structure (a tensor, or tuples/lists/dicts of them) of the same shapes
    and dtypes. ``pred`` is a scalar tensor (bool or number); a Python bool just calls the
    chosen function. What the functions read from outside is passed to the node as extra
    operands. Works eagerly (the taken function runs on the tensors, with its Python side
    effects; one node on the tape and in dg.record), in graph mode
    and under ``dg.compile`` (recorded once whichever branch is taken); the gradient
    differentiates the taken branch, to any order."""
    for fn, role in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if not callable(fn):
            raise TypeError(located(f"cond: {role} must be callable, found "
                                    f"{type(fn).__name__}"))
    if _is_python_bool(pred):
        return (true_fn if pred else false_fn)(*operands)
    ptype = _type_of(pred, "cond")
    if ptype.shape != ():
        raise ShapeError(located(f"cond: the predicate must be a scalar (shape []), found "
                                 f"shape {list(ptype.shape)}"))
    leaves, in_def = tree_flatten(list(operands))
    leaves = [_leaf_operand(x) for x in leaves]
    types = [_type_of(x, "cond") for x in leaves]

    def args(phs):
        return tree_unflatten(in_def, phs)
    tb = _trace(true_fn, types, args, "cond")
    fb = _trace(false_fn, types, args, "cond")
    _check_same("cond", true_fn, tb.out_def, tb.out_types, false_fn, fb.out_def, fb.out_types,
                "the result")
    outer = _join([tb, fb], len(leaves))
    compute = None
    if _eager_call([pred, *leaves, *outer]):
        eager = eager_support()      # the eager engine's hooks
        def compute(xp, p, arrays):
            fn, body = (true_fn, tb) if bool(p) else (false_fn, fb)
            args = tree_unflatten(in_def, [eager.tensor(a) for a in arrays[:len(leaves)]])
            role = "true_fn" if fn is true_fn else "false_fn"
            with eager.paused():
                res = _eager_leaves("cond", fn, _run_user(fn, args, "cond", role),
                                    body.out_def, body.out_types, "the result")
            return tuple(eager.array(x) for x in res)
    res = _apply_with(cond_op, (pred, *leaves, *outer),
                      {"true_branch": Region(tb.graph), "false_branch": Region(fb.graph)},
                      compute)
    return tree_unflatten(tb.out_def, res)
