"""Batching rules: how each op maps a batched dim (the ``batch`` trait of ``OpDef``).

``batch_rule(op)`` gives the rule vmap applies to one op call, ``rule(op, args, batched,
attrs, size)``: the ``args`` marked in ``batched`` carry the batch (``size`` long) as their
dim 0, the others are the same for every example (tensors, Values or weak ``Scalar``s);
the rule returns the op's result for the whole batch, every output with the batch at dim 0.
Rules are written with the op functions, so the same rule runs eagerly (vmap's dispatch
interceptor) and on graph Values (vmap of a graph), as JAX's batching rules serve every
transform.

Rules written here are put on their OpDefs by ``@rule_of(op names)`` beside each rule (as
JAX registers ``primitive_batchers[p]``); an op may instead pass ``batch=`` when it is
registered. An op's own ``batch`` trait comes first; without one a rule is derived from its other
traits: elementwise ops broadcast (ranks aligned behind the batch dim), ops whose ``dim``
attribute names axes of same-rank operands shift it by one. ``loop_rule`` (one call per
example, results stacked) is the fallback for ops that have neither; vmap warns once per op
when it uses it.
"""
from __future__ import annotations

from typing import Callable, Optional

from .dispatch import Scalar
from .registry import OpDef, get_op


def _op(name: str) -> OpDef:
    return get_op(name)


def _shape(x) -> tuple:
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
    s = _shape(x)
    return _op("reshape")(x, shape=(s[0],) + (1,) * n + s[1:])


def ensure_batched(x, batched: bool, size: int):
    """``x`` with the batch at dim 0: an unbatched ``x`` is broadcast to ``size`` examples."""
    if batched:
        return x
    return _op("expand")(x, shape=(size,) + _shape(x))


def _norm(d: int, rank: int) -> int:
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
        return dict(attrs, dim=tuple(_norm(int(i), rank) + 1 for i in d))
    return dict(attrs, dim=_norm(int(d), rank) + 1)


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
    return _op("cat")(*[_op("reshape")(x, shape=(1,) + _shape(x)) for x in xs], dim=0)


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


# -- the ops' own rules (the ``batch`` trait), for ops whose traits imply none -----------------

def rule_of(*op_names: str):
    """Decorator: the function is the ``batch`` trait of the named OpDefs (JAX registers
    ``primitive_batchers[p]`` beside each rule the same way); an op that declares its own
    ``batch`` when it is registered keeps it."""
    def put(rule):
        for name in op_names:
            op = get_op(name)
            if op.batch is None:
                op.batch = rule
        return rule
    return put


@rule_of("matmul")
def _matmul_rule(op, args, batched, attrs, size):
    """numpy's matmul over a batch: a 1-D operand becomes a row or column of a batched matrix
    product, and the lower-rank operand gets size-1 dims behind the batch dim so that batch
    dims line up."""
    (a, b), (ba, bb) = args, batched
    ra, rb = lrank(a, ba), lrank(b, bb)
    reshape = _op("reshape")
    squeeze_last = squeeze_row = False
    if ba and ra == 1:
        if not bb and rb <= 2:
            return op(a, b)                             # [B,k] @ [k] or [k,n]
        a = reshape(a, shape=(size,) + (1,) * max(rb - 2, 0) + (1, _shape(a)[1]))
        ra, squeeze_row = 2 + max(rb - 2, 0), True
    if bb and rb == 1:
        b = reshape(b, shape=(size,) + (1,) * max(ra - 2, 0) + (_shape(b)[1], 1))
        rb, squeeze_last = 2 + max(ra - 2, 0), True
    if ba and bb:
        a, b = pad_after_batch(a, rb - ra), pad_after_batch(b, ra - rb)
    elif ba:
        a = pad_after_batch(a, rb - ra)
    elif bb:
        b = pad_after_batch(b, ra - rb)
    sa, sb = _shape(a), _shape(b)
    if len(sa) >= 2 and len(sb) >= 2 and sa[-1] == 1 and sa[-1] == sb[-2] and (
            a.dtype == b.dtype):
        out = _op("mul")(a, b)      # a contraction over one element: batched outer products
    else:
        out = op(a, b)
    if squeeze_row or squeeze_last:
        s = _shape(out)
        if squeeze_row and squeeze_last:
            s = s[:-2]
        elif squeeze_row:
            s = s[:-2] + s[-1:]
        else:
            s = s[:-1]
        out = reshape(out, shape=s)
    return out


@rule_of("reshape")
def _reshape_rule(op, args, batched, attrs, size):
    return op(args[0], shape=(size,) + tuple(attrs["shape"]))


@rule_of("expand")
def _expand_rule(op, args, batched, attrs, size):
    (x,) = args
    shape = tuple(attrs["shape"])
    x = pad_after_batch(x, len(shape) - lrank(x, True))
    return op(x, shape=(size,) + shape)


@rule_of("permute")
def _permute_rule(op, args, batched, attrs, size):
    return op(args[0], dims=(0,) + tuple(d + 1 for d in attrs["dims"]))


@rule_of("flip")
def _flip_rule(op, args, batched, attrs, size):
    return op(args[0], dims=tuple(d + 1 for d in attrs["dims"]))


@rule_of("sum_to")
def _sum_to_rule(op, args, batched, attrs, size):
    """``sum_to(shape)`` per example: the leading example dims summed away, then the dims
    ``shape`` has as 1 summed with keepdim."""
    (x,) = args
    target = tuple(attrs["shape"])
    logical = _shape(x)[1:]
    lead = len(logical) - len(target)
    if lead > 0:
        x = _op("sum")(x, dim=tuple(range(1, lead + 1)), keepdim=False)
        logical = logical[lead:]
    dims = tuple(i + 1 for i, (have, want) in enumerate(zip(logical, target))
                 if want == 1 and have != 1)
    if dims:
        x = _op("sum")(x, dim=dims, keepdim=True)
    return x


@rule_of("getitem")
def _getitem_rule(op, args, batched, attrs, size):
    """Basic indexing per example: a full slice for the batch dim in front."""
    index = attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    return op(args[0], index=(("s", None, None, None),) + index)


@rule_of("getitem_grad")
def _getitem_grad_rule(op, args, batched, attrs, size):
    """The cotangent of basic indexing per example: ``x`` gives only its shape, so an
    unbatched one is broadcast (a view) and the index gets the batch's full slice."""
    g, x = (ensure_batched(a, b, size) for a, b in zip(args, batched))
    index = attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    return op(g, x, index=(("s", None, None, None),) + index)


@rule_of("full_like")
def _same_shape_rule(op, args, batched, attrs, size):
    """Ops whose single operand's shape is the output's (``full_like``): run on the batch."""
    return op(*args, **attrs)


@rule_of("pad", "one_hot")
def _last_dims_rule(op, args, batched, attrs, size):
    """Ops that act on their operand's last dims only (``pad``, ``one_hot``, ``tril``):
    the batch dim in front is one more leading dim."""
    if len(args) != 1:
        return NotImplemented
    return op(*args, **attrs)


def _flatten_batch(x, lead: int):
    """``x`` (batch at dim 0) with the batch and the next ``lead`` dims merged into one."""
    s = _shape(x)
    return _op("reshape")(x, shape=(-1,) + s[lead + 1:])


@rule_of("max_pool2d", "max_pool2d_indices", "max_pool2d_gather", "max_pool2d_backward",
         "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d",
         "adaptive_avg_pool2d_backward", "adaptive_max_pool2d_indices")
def _images_rule(op, args, batched, attrs, size):
    """NCHW image ops (pooling and its gradients): each example's N images join the batch's
    into one N of ``size * N`` images (an unbatched operand is broadcast first); a ``shape``
    attribute (the input's, for gradients) grows the same way."""
    if any(lrank(x, b) != 4 for x, b in zip(args, batched)):
        return NotImplemented
    n = _shape(args[0])[1] if batched[0] else _shape(args[0])[0]
    flat = [_flatten_batch(ensure_batched(x, b, size), 1) for x, b in zip(args, batched)]
    if "shape" in attrs:
        shape = tuple(attrs["shape"])
        attrs = dict(attrs, shape=(size * shape[0],) + shape[1:])
    out = op(*flat, **attrs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    outs = tuple(_op("reshape")(o, shape=(size, n) + _shape(o)[1:]) for o in outs)
    return outs if isinstance(out, (tuple, list)) else outs[0]


def _channels_into_groups(x, size: int):
    """(B, N, C, H, W) -> (N, B*C, H, W): the batch's channels side by side, so that a
    convolution with ``B`` times the groups keeps each example's channels apart."""
    b, n, c, h, w = _shape(x)
    x = _op("permute")(x, dims=(1, 0, 2, 3, 4))
    return _op("reshape")(x, shape=(n, b * c, h, w))


def _groups_into_batch(y, size: int):
    """(N, B*C, H, W) -> (B, N, C, H, W), the inverse of ``_channels_into_groups``."""
    n, bc, h, w = _shape(y)
    y = _op("reshape")(y, shape=(n, size, bc // size, h, w))
    return _op("permute")(y, dims=(1, 0, 2, 3, 4))


@rule_of("conv2d")
def _conv_rule(op, args, batched, attrs, size):
    """conv2d: with only the images batched, the batch joins N; with batched weights each
    example's channels become groups of one convolution (``groups * B``)."""
    x, w = args[0], args[1]
    bx, bw = batched[0], batched[1]
    bias = args[2:]
    if lrank(x, bx) != 4 or lrank(w, bw) != 4:
        return NotImplemented
    if not bw and not any(batched[2:]):
        n = _shape(x)[1]
        out = op(_flatten_batch(x, 1), w, *bias, **attrs)
        return _op("reshape")(out, shape=(size, n) + _shape(out)[1:])
    xs = _channels_into_groups(ensure_batched(x, bx, size), size)
    w = ensure_batched(w, bw, size)
    ws = _op("reshape")(w, shape=(size * _shape(w)[1],) + _shape(w)[2:])
    if bias:
        b = ensure_batched(bias[0], batched[2], size)
        bias = (_op("reshape")(b, shape=(-1,)),)
    out = op(xs, ws, *bias, **dict(attrs, groups=attrs["groups"] * size))
    return _groups_into_batch(out, size)


@rule_of("conv2d_input_grad")
def _conv_input_grad_rule(op, args, batched, attrs, size):
    """The input gradient of conv2d per example (``shape`` is one example's input shape)."""
    g, w = args
    bg, bw = batched
    if lrank(g, bg) != 4 or lrank(w, bw) != 4:
        return NotImplemented
    n, c, h, wd = attrs["shape"]
    if not bw:
        out = op(_flatten_batch(g, 1), w, **dict(attrs, shape=(size * n, c, h, wd)))
        return _op("reshape")(out, shape=(size, n, c, h, wd))
    gs = _channels_into_groups(ensure_batched(g, bg, size), size)
    ws = _op("reshape")(w, shape=(size * _shape(w)[1],) + _shape(w)[2:])
    out = op(gs, ws, **dict(attrs, shape=(n, size * c, h, wd), groups=attrs["groups"] * size))
    return _groups_into_batch(out, size)


@rule_of("conv2d_weight_grad")
def _conv_weight_grad_rule(op, args, batched, attrs, size):
    """Per-example weight gradients of conv2d: each example's channels are groups of one
    weight-gradient convolution."""
    x, g = args
    if lrank(x, batched[0]) != 4 or lrank(g, batched[1]) != 4:
        return NotImplemented
    xs = _channels_into_groups(ensure_batched(x, batched[0], size), size)
    gs = _channels_into_groups(ensure_batched(g, batched[1], size), size)
    co, ci, kh, kw = attrs["shape"]
    out = op(xs, gs, **dict(attrs, shape=(size * co, ci, kh, kw),
                            groups=attrs["groups"] * size))
    return _op("reshape")(out, shape=(size, co, ci, kh, kw))


@rule_of("softmax_cross_entropy")
def _sce_rule(op, args, batched, attrs, size):
    """Cross-entropy of (N, C) logits per example: the examples' rows become one (B*N, C)
    problem with reduction none, then each example's rows are reduced as PyTorch does (a
    mean over the rows whose target is not ``ignore_index``)."""
    x, t = args
    bx, bt = batched
    n = _shape(x)[1] if bx else _shape(x)[0]
    x = _flatten_batch(ensure_batched(x, bx, size), 1)
    t = _flatten_batch(ensure_batched(t, bt, size), 1)
    reduction = attrs["reduction"]
    loss = op(x, t, ignore_index=attrs["ignore_index"], reduction="none")
    loss = _op("reshape")(loss, shape=(size, n))
    if reduction == "none":
        return loss
    total = _op("sum")(loss, dim=(1,), keepdim=False)
    if reduction == "sum":
        return total
    valid = _op("ne")(_op("reshape")(t, shape=(size, n)), Scalar(attrs["ignore_index"], t.dtype))
    count = _op("sum")(_op("cast")(valid, dtype=x.dtype), dim=(1,), keepdim=False)
    count = _op("maximum")(count, Scalar(1.0, x.dtype))
    return _op("div")(total, count)


@rule_of("softmax_cross_entropy_backward")
def _sce_backward_rule(op, args, batched, attrs, size):
    """The cross-entropy gradient per example: the cotangent of each example's reduced loss
    is spread over its rows (divided by its own count of valid rows for a mean)."""
    g, x, t = args
    bg, bx, bt = batched
    n = _shape(x)[1] if bx else _shape(x)[0]
    xs = _flatten_batch(ensure_batched(x, bx, size), 1)
    ts = _flatten_batch(ensure_batched(t, bt, size), 1)
    reduction = attrs["reduction"]
    g = ensure_batched(g, bg, size)
    if reduction != "none":
        g = _op("reshape")(g, shape=(size, 1))
        if reduction == "mean":
            valid = _op("ne")(_op("reshape")(ts, shape=(size, n)),
                              Scalar(attrs["ignore_index"], ts.dtype))
            count = _op("sum")(_op("cast")(valid, dtype=x.dtype), dim=(1,), keepdim=True)
            g = _op("div")(g, _op("maximum")(count, Scalar(1.0, x.dtype)))
        g = _op("expand")(g, shape=(size, n))
    g = _op("reshape")(g, shape=(-1,))
    out = op(g, xs, ts, ignore_index=attrs["ignore_index"], reduction="none")
    return _op("reshape")(out, shape=(size, n) + _shape(out)[1:])


@rule_of("index_select")
def _index_select_rule(op, args, batched, attrs, size):
    x, idx = args
    if batched[1]:      # x[..., idx, ...] with an index per example: advanced indexing
        rank = lrank(x, batched[0])
        return _index_rule(_op("index"), (x, idx), batched, {"dims": (_norm(
            attrs["dim"], rank),)}, size)
    return op(x, idx, dim=_norm(attrs["dim"], lrank(x, True)) + 1)


def _advanced_plan(x, idx_args, idx_batched, dims, size):
    """What ``x[..., i0, ..., i1, ...]`` per example needs as one advanced index over the
    batch: the index tensors (a batch ``arange`` in front, each index with a batch dim),
    their dims, and the permutation that puts the result in (batch, logical result) order."""
    ranks = [lrank(t, b) for t, b in zip(idx_args, idx_batched)]
    r = max(ranks)
    idx = [_op("reshape")(t, shape=(size,) + (1,) * (r - k) + _shape(t)[1:]) if b else
           _op("reshape")(t, shape=(1,) * (1 + r - k) + _shape(t))
           for t, b, k in zip(idx_args, idx_batched, ranks)]
    batch = _op("arange")(start=0, end=size, step=1, dtype="int64")
    batch = _op("reshape")(batch, shape=(size,) + (1,) * r)
    new_dims = (0,) + tuple(d + 1 for d in dims)
    contiguous = all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1))
    pre = dims[0] if contiguous else 0
    # the kernel gives (B, *b, *x's dims before dims[0], *after): the dims before move
    # behind b when the example's own result keeps them in front
    b_rank = 1 + len(_broadcast(*[_shape(t)[1:] if bb else _shape(t) for t, bb in
                                  zip(idx_args, idx_batched)]))
    perm = None
    if pre:
        perm = (0,) + tuple(range(b_rank, b_rank + pre)) + tuple(range(1, b_rank))
    return [batch] + idx, new_dims, perm, b_rank, pre


def _broadcast(*shapes):
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = [s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0]
        big = [d for d in dims if d != 1]
        out.append(big[0] if big else 1)
    return tuple(out)


@rule_of("index")
def _index_rule(op, args, batched, attrs, size):
    """Advanced indexing per example: the batch becomes one more indexed dim (an arange)."""
    x, idx_args = args[0], args[1:]
    if any(t.dtype == "bool" for t in idx_args):
        return NotImplemented
    x = ensure_batched(x, batched[0], size)
    idx, dims, perm, _, _ = _advanced_plan(x, idx_args, batched[1:], attrs["dims"], size)
    out = op(x, *idx, dims=dims)
    if perm is not None:
        rest = tuple(range(len(perm), len(_shape(out))))
        out = _op("permute")(out, dims=perm + rest)
    return out


@rule_of("index_put")
def _index_put_rule(op, args, batched, attrs, size):
    """``index_put`` per example: the values are laid out as ``_index_rule``'s kernel
    result (batch, index dims, the dims before them, the rest) and put with a batch arange."""
    x, v, idx_args = args[0], args[1], args[2:]
    if any(t.dtype == "bool" for t in idx_args):
        return NotImplemented
    x = ensure_batched(x, batched[0], size)
    dims = attrs["dims"]
    idx, new_dims, perm, b_rank, pre = _advanced_plan(x, idx_args, batched[2:], dims, size)
    logical = _shape(x)[1:]
    b = _broadcast(*[_shape(t)[1:] if bb else _shape(t) for t, bb in
                     zip(idx_args, batched[2:])])
    contiguous = pre > 0 or all(dims[i] + 1 == dims[i + 1] for i in range(len(dims) - 1))
    if contiguous:
        result = logical[:dims[0]] + b + logical[dims[-1] + 1:]
    else:
        result = b + tuple(s for i, s in enumerate(logical) if i not in dims)
    v = ensure_batched(v, batched[1], size)
    v = pad_after_batch(v, len(result) - lrank(v, True))
    v = _op("expand")(v, shape=(size,) + result)
    if perm is not None:       # the inverse of _index_rule's permutation
        n = len(_shape(v))
        inverse = [0] * n
        full = perm + tuple(range(len(perm), n))
        for i, p in enumerate(full):
            inverse[p] = i
        v = _op("permute")(v, dims=tuple(inverse))
    return op(x, v, *idx, dims=new_dims, accumulate=attrs.get("accumulate", False))


@rule_of("index_add")
def _index_add_rule(op, args, batched, attrs, size):
    x, idx, src = args
    if batched[1]:
        return NotImplemented
    rank = lrank(x, batched[0])
    return op(ensure_batched(x, batched[0], size), idx, ensure_batched(src, batched[2], size),
              dim=_norm(attrs["dim"], rank) + 1)


@rule_of("numel")
def _numel_rule(op, args, batched, attrs, size):
    """The count is the same for every example: counted on one, broadcast to the batch."""
    (x,) = args
    out = op(index_example(x, 0), **attrs)
    return _op("expand")(out, shape=(size,))


@rule_of("einsum")
def _einsum_rule(op, args, batched, attrs, size):
    """A new subscript letter for the batch, in front of each batched operand and the
    output."""
    eq = attrs["equation"].replace(" ", "")
    if "..." in eq or "->" not in eq:
        return NotImplemented
    lhs, out = eq.split("->")
    used = set(eq)
    letter = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA"
                  if c not in used)
    terms = [letter + term if b else term for term, b in zip(lhs.split(","), batched)]
    return op(*args, equation=",".join(terms) + "->" + letter + out)


@rule_of("real", "imag", "conj", "angle", "linalg_inv", "linalg_det", "linalg_slogdet",
         "linalg_cholesky", "linalg_eigh", "linalg_qr", "linalg_qr_r", "linalg_pinv", "svd")
def _leading_batch_rule(op, args, batched, attrs, size):
    """Ops of one operand that act per element or on its last two dims (the linalg
    factorizations, which take any leading batch dims): the batch dim is one more."""
    if len(args) != 1:
        return NotImplemented
    return op(*args, **attrs)


@rule_of("complex")
def _complex_rule(op, args, batched, attrs, size):
    """``complex(real, imag)`` broadcasts its operands like an elementwise op."""
    return elementwise_rule(op, args, batched, attrs, size)


@rule_of("linalg_solve")
def _solve_rule(op, args, batched, attrs, size):
    """``solve(A, B)`` reads B as a vector or a matrix by its shape against A's (torch's
    rule), and broadcasts their batch dims: a vector becomes a one-column matrix, the
    operand with fewer batch dims gets size-1 dims behind the batch dim, and both carry the
    batch. (``lstsq`` has no rule: the outputs a driver leaves empty are empty whatever the
    batch, as in PyTorch, so it runs per example.)"""
    (a, b), (ba, bb) = args, batched
    sa = _shape(a)[1:] if ba else _shape(a)
    sb = _shape(b)[1:] if bb else _shape(b)
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    a, b = ensure_batched(a, ba, size), ensure_batched(b, bb, size)
    if vector:
        b = _op("reshape")(b, shape=_shape(b) + (1,))
        sb = sb + (1,)
    gap = (len(sa) - 2) - (len(sb) - 2)
    if gap > 0:
        b = pad_after_batch(b, gap)
    elif gap < 0:
        a = pad_after_batch(a, -gap)
    out = op(a, b, **attrs)
    return _op("reshape")(out, shape=_shape(out)[:-1]) if vector else out


@rule_of("fft_c2c", "fft_r2c", "fft_c2r")
def _fft_rule(op, args, batched, attrs, size):
    """The DFTs over ``dims``: the same dims behind the batch dim."""
    (x,) = args
    rank = lrank(x, True)
    return op(x, **dict(attrs, dims=tuple(_norm(int(d), rank) + 1 for d in attrs["dims"])))
