"""Batching rules: how each op maps a batched dim (the ``batch`` trait of ``OpDef``).

``batch_rule(op)`` gives the rule vmap applies to one op call, ``rule(op, args, batched,
attrs, size)``: the ``args`` marked in ``batched`` carry the batch (``size`` long) as their
dim 0, the others are the same for every example (tensors, Values or weak ``Scalar``s);
the rule returns the op's result for the whole batch, every output with the batch at dim 0.
Rules are written with the op functions, so the same rule runs eagerly (vmap's dispatch
interceptor) and on graph Values (vmap of a graph), as JAX's batching rules serve every
transform.

Each op gives its own rule as ``batch=`` where it is registered (``graphlib/ops/...``, as JAX
keeps ``primitive_batchers[p]`` beside each primitive); this module holds only what rules
share. An op's own ``batch`` trait comes first; without one a rule is derived from its other
traits: elementwise ops broadcast (ranks aligned behind the batch dim), ops whose ``dim``
attribute names axes of same-rank operands shift it by one. ``loop_rule`` (one call per
example, results stacked) is the fallback for ops that have neither; vmap warns once per op
when it uses it. The helpers (``lrank``, ``pad_after_batch``, ``ensure_batched``,
``flatten_batch``, ``move_batch``...) are what the ops' rules are written with.
"""
from __future__ import annotations

from typing import Callable, Optional

from .dispatch import Scalar
from .registry import OpDef, get_op


def _op(name: str) -> OpDef:
    return get_op(name)


def shape_of(x) -> tuple:
    """``x``'s shape as a tuple."""
    return tuple(x.shape)


def lrank(x, batched: bool) -> int:
    """The rank of one example of ``x``."""
    if isinstance(x, Scalar) or not hasattr(x, "shape"):
        return 0
    return len(x.shape) - (1 if batched else 0)


def pad_after_batch(x, n: int):
    """``x`` (batch at dim 0) with ``n`` size-1 dims inserted after the batch dim."""
    if n <= 0:
        return x
    s = shape_of(x)
    return _op("reshape")(x, shape=(s[0],) + (1,) * n + s[1:])


def ensure_batched(x, batched: bool, size: int):
    """``x`` with the batch at dim 0: an unbatched ``x`` is broadcast to ``size`` examples."""
    if batched:
        return x
    return _op("expand")(x, shape=(size,) + shape_of(x))


def norm_dim(d: int, rank: int) -> int:
    """``d`` (possibly negative) as an axis of a rank-``rank`` example."""
    return d + rank if d < 0 else d


def elementwise_rule(op, args, batched, attrs, size):
    """Elementwise ops broadcast: batched operands get size-1 dims after the batch dim up to
    the highest example rank, so unbatched operands broadcast against every example."""
    rank = max(lrank(x, b) for x, b in zip(args, batched))
    args = [pad_after_batch(x, rank - lrank(x, b)) if b else x for x, b in zip(args, batched)]
    return op(*args, **attrs)


def _shift_dim_attr(attrs, rank: int):
    """``attrs`` with its ``dim`` attribute (an int or a tuple of ints) naming the same axes
    behind a batch dim."""
    d = attrs["dim"]
    if isinstance(d, (tuple, list)):
        return dict(attrs, dim=tuple(norm_dim(int(i), rank) + 1 for i in d))
    return dict(attrs, dim=norm_dim(int(d), rank) + 1)


def dim_rule(op, args, batched, attrs, size):
    """Ops with a ``dim`` attribute over operands of one rank (reductions, softmax, cumsum,
    cat, gather, scatter...): every operand gets the batch dim and ``dim`` shifts by one.
    ``dim=None`` (argmax over all elements) flattens each example first."""
    def shared_scalar(x, b):    # a number, or a 0-d tensor every example shares (a value)
        return isinstance(x, Scalar) or (not b and lrank(x, b) == 0 and len(args) > 1)
    tensors = [(x, b) for x, b in zip(args, batched) if not shared_scalar(x, b)]
    ranks = {lrank(x, b) for x, b in tensors}
    if len(ranks) != 1:
        return NotImplemented
    (rank,) = ranks
    if attrs.get("dim", 0) is None:
        flat = [_op("reshape")(ensure_batched(x, b, size), shape=(size, -1))
                if not isinstance(x, Scalar) else x for x, b in zip(args, batched)]
        out = op(*flat, **dict(attrs, dim=1))
        if attrs.get("keepdim"):
            out = _op("reshape")(out, shape=(size,) + (1,) * rank)
        return out
    args = [x if shared_scalar(x, b) else ensure_batched(x, b, size)
            for x, b in zip(args, batched)]
    if rank == 0:       # dim 0 (or -1) of a 0-d example: a size-1 dim behind the batch
        args = [x if shared_scalar(x, False) and not b else
                _op("reshape")(x, shape=(size, 1)) for x, b in zip(args, batched)]
        out = op(*args, **_shift_dim_attr(attrs, 1))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        outs = tuple(_op("reshape")(o, shape=(size,)) for o in outs)
        return outs if isinstance(out, (tuple, list)) else outs[0]
    return op(*args, **_shift_dim_attr(attrs, rank))


def derived_rule(op) -> Optional[Callable]:
    """The rule the op's traits imply, or None."""
    if op.elementwise:
        return elementwise_rule
    if op.attrs is not None and "dim" in op.attrs and not op.random and not op.ordered:
        return dim_rule
    return None


def batch_rule(op) -> Optional[Callable]:
    """The op's ``batch`` trait, else the rule derived from its other traits, else None."""
    return op.batch if op.batch is not None else derived_rule(op)


def index_example(x, i: int):
    """Example ``i`` of ``x`` (batch at dim 0)."""
    return _op("getitem")(x, index=(("i", i),))


def stack(xs):
    """The values ``xs`` stacked along a new dim 0."""
    return _op("cat")(*[_op("reshape")(x, shape=(1,) + shape_of(x)) for x in xs], dim=0)


def loop_rule(op, args, batched, attrs, size):
    """The fallback: the op once per example, the results stacked."""
    results = []
    for i in range(size):
        results.append(op(*[index_example(x, i) if b else x
                            for x, b in zip(args, batched)], **attrs))
    if isinstance(results[0], (tuple, list)):
        return tuple(stack([r[k] for r in results]) for k in range(len(results[0])))
    return stack(results)


def apply_rule(op, args, batched, attrs, size):
    """``op`` on a batch: its rule, or ``(loop_rule's result, True)`` when it has none (the
    flag tells vmap to warn). Returns ``(result, fell_back)``."""
    rule = batch_rule(op)
    if rule is not None:
        out = rule(op, args, batched, attrs, size)
        if out is not NotImplemented:
            return out, False
    return loop_rule(op, args, batched, attrs, size), True


# -- rules that ops of several families share (given as ``batch=`` where each registers) -----

def flatten_batch(x, lead: int):
    """``x`` (batch at dim 0) with the batch and the next ``lead`` dims merged into one."""
    s = shape_of(x)
    return _op("reshape")(x, shape=(-1,) + s[lead + 1:])


def leading_batch_rule(op, args, batched, attrs, size):
    """Ops of one operand that act per element, on its last dims only, or on its last two
    dims with any leading batch dims (``pad``, ``one_hot``, ``full_like``, the linalg
    factorizations): the batch dim is one more leading dim."""
    if len(args) != 1:
        return NotImplemented
    return op(*args, **attrs)


def move_batch(x, to: int):
    """``x`` (batch at dim 0) with the batch moved to dim ``to`` (and back: ``to`` 0 of an
    ``x`` whose batch is at dim 1 is ``move_batch(x, 1)`` again, a swap of the two dims)."""
    rank = len(shape_of(x))
    if to == 0 or rank < 2:
        return x
    dims = list(range(1, to + 1)) + [0] + list(range(to + 1, rank))
    return _op("permute")(x, dims=tuple(dims))


# -- regions: the bodies of control-flow ops (scan, cond, while_loop) --------------------------

_fallback_hook: Optional[Callable] = None


def set_fallback_hook(hook: Optional[Callable]) -> None:
    """Installed by vmap (``duograph.func``): ``hook(op)`` is told of each op that a batched
    region ran per example, as vmap's own dispatch is (its one-time warning and count)."""
    global _fallback_hook
    _fallback_hook = hook


def region_has_random(region) -> bool:
    """Whether ``region`` (or a region nested in it) holds a random op: their batching
    needs vmap's randomness mode, which a region rule does not know."""
    todo = [region]
    while todo:
        for node in todo.pop().graph.nodes:
            if node.op.random:
                return True
            todo.extend(node.regions)
    return False


def batch_region(region, args, batched, size) -> tuple:
    """``region`` (a per-example body) applied to ``args`` whose ``batched`` ones carry the
    batch at dim 0: its nodes replayed with their ops' rules (JAX's ``batch_jaxpr``).
    Returns ``(results, results_batched)``; a result that does not depend on a batched
    input stays unbatched."""
    env = {v: (a, b) for v, a, b in zip(region.graph.inputs, args, batched)}
    for node in region.graph.nodes:
        ins = [env[x] for x in node.inputs]
        vals = [v for v, _ in ins]
        flags = tuple(b for _, b in ins)
        if True not in flags:
            out, flag = node.op(*vals, **node.attrs), False
        else:
            out, fell_back = apply_rule(node.op, vals, flags, dict(node.attrs), size)
            if fell_back and _fallback_hook is not None:
                _fallback_hook(node.op)
            flag = True
        outs = out if isinstance(out, (tuple, list)) else (out,)
        env.update((o, (r, flag)) for o, r in zip(node.outputs, outs))
    got = [env[o] for o in region.graph.outputs]
    return [v for v, _ in got], [b for _, b in got]


def region_batched(region, batched) -> list:
    """Which results of ``region`` depend on its ``batched`` inputs (what ``batch_region``
    would return as ``results_batched``), found without running it."""
    flags = dict(zip(region.graph.inputs, batched))
    for node in region.graph.nodes:
        b = any(flags.get(x, False) for x in node.inputs)
        flags.update((o, b) for o in node.outputs)
    return [flags.get(o, False) for o in region.graph.outputs]
