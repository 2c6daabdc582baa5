"""The loop ops: ``scan`` (differentiated by a reverse scan, optionally checkpointed),
``while_loop`` (reverse-differentiable when bounded by ``max_iterations``) and ``fori_loop``
over them. Bodies are traced into regions as ``tracing`` describes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..autodiff import is_zero_cotangent
from ..batching import (batch_region, ensure_batched, move_batch, region_batched,
                        region_has_random)
from ..errors import GraphError, ShapeError, located
from ..ir import Region, Value
from ..dispatch import Scalar
from ..registry import OpDef, get_op, register
from ..types import RUNTIME_DIM, TensorType
from .call import _reference, give_results, replay
from .creation import zeros_like
from .elementwise import cast, maximum, where
from .reduction import sum as reduce_sum
from .shape import cat, getitem, index_select, reshape
from .tracing import (_apply_with, _count_leaves, _describe_tree, _eager_call, _eager_leaves,
                      _fn_name, _internal, _join, _leaf_operand, _region_vjp, _run_user,
                      _take_compute, _trace, _type_of, eager_support, tree_flatten, tree_unflatten)


# -- scan ---------------------------------------------------------------------------------------
def _scan_split(seq, attrs):
    nc, nx = attrs["n_carry"], attrs["n_xs"]
    return list(seq[:nc]), list(seq[nc:nc + nx]), list(seq[nc + nx:])


def _scan_infer(types, attrs):
    carry, xs, caps = _scan_split(types, attrs)
    length = attrs["length"]
    if length == DYNAMIC_LENGTH:
        if not xs or not xs[0].shape:
            raise ShapeError("scan: length -1 (the xs' leading dim) needs xs")
        length = xs[0].shape[0]
    for k, t in enumerate(xs):
        if not t.shape or t.shape[0] != length:
            raise ShapeError(f"scan: xs leaf {k} must have leading dim {length} (the length), "
                             f"found shape {list(t.shape)}")
    out = attrs["body"].infer(carry + [TensorType(tuple(t.shape[1:]), t.dtype) for t in xs]
                              + caps, "scan")
    nc = len(carry)
    if out[:nc] != carry:
        raise ShapeError(f"scan: the body returns carry types {out[:nc]}, expected {carry}")
    res = carry + [TensorType((length,) + tuple(t.shape), t.dtype) for t in out[nc:]]
    if attrs.get("save"):
        rows = _saved_rows(length, attrs["reverse"], attrs.get("checkpoint", False))[0]
        res += [TensorType((rows,) + tuple(t.shape), t.dtype) for t in carry]
    return res


# The ``length`` attribute of a scan over a symbolic leading dim (``T``): the length is the
# xs' leading dim, read from the arrays at run time, and the ys' leading dim is that symbol.
DYNAMIC_LENGTH = -1


def _checkpointed(length, reverse: bool, checkpoint: bool) -> bool:
    return bool(checkpoint) and not reverse and isinstance(length, int) and length >= 4


def _saved_rows(length, reverse: bool, checkpoint: bool) -> tuple:
    """``(rows, stride)`` of the carries a saving scan (``save=True``) returns after its ys:
    the carry entering every step (``length`` rows, in xs order), or with ``checkpoint`` the
    carries entering steps 0, k, 2k, ..., m*k (``m + 1`` rows, k ~ sqrt(length), m =
    length // k; the last row is the final carry when k divides the length)."""
    if not _checkpointed(length, reverse, checkpoint):
        return length, 1
    k = max(1, int(round(length ** 0.5)))
    return length // k + 1, k


def _scan_loop(xp, step, as_array, carry, length, reverse, save_stride, y_types):
    """The loop of one scan: ``step(carry, t) -> (carry, ys arrays)`` for t in xs order
    (reversed when ``reverse``), ``carry`` a list of handles (arrays, or eager tensors that
    ``as_array`` unwraps). Returns the final carry's arrays, the stacked ys and, with
    ``save_stride`` (1, or the checkpoint stride), the stacked saved carries."""
    ys = [None] * length
    saved: dict = {}
    order = range(length - 1, -1, -1) if reverse else range(length)
    for j, t in enumerate(order):
        if save_stride and j % save_stride == 0:
            saved[t if save_stride == 1 else j // save_stride] = [as_array(c) for c in carry]
        carry, ys[t] = step(carry, t)
    final = [as_array(c) for c in carry]
    stacked = [xp.stack([y[j] for y in ys]) if length else
               xp.zeros((0,) + tuple(t.shape), dtype=t.dtype) for j, t in enumerate(y_types)]
    if not save_stride:
        return final, stacked, []
    if save_stride > 1 and length // save_stride not in saved:
        saved[length // save_stride] = final      # k divides the length: the last row
    rows = [saved[r] for r in range(len(saved))]
    kept = [xp.stack([r[i] for r in rows]) if rows else
            xp.zeros((0,) + tuple(f.shape), dtype=f.dtype) for i, f in enumerate(final)]
    return final, stacked, kept


def _scan_region_kernel(xp, bodies, *arrays, out=None, body: Region, length: int,
                        n_carry: int, n_xs: int, reverse: bool = False,
                        checkpoint: bool = False, save: bool = False):
    # the body is prepared once; each step reads the carry one buffer holds and writes the
    # next into the other (double buffering: a result never overwrites an input the same
    # step still reads), and its ys straight into their rows of the stacked outputs. The
    # buffers alternate so that the last step writes the final carry into ``out``. A saving
    # scan copies the carry entering each saved step into its row of the saved outputs.
    carry, xs, caps = _scan_split(arrays, {"n_carry": n_carry, "n_xs": n_xs})
    if length == DYNAMIC_LENGTH:
        length = int(xs[0].shape[0])
    rows, stride = _saved_rows(length, reverse, checkpoint) if save else (0, 0)
    compute = _take_compute()
    if compute is not None:         # an eager call: the Python function runs each step
        y_types = [o.type for o in body.graph.outputs[n_carry:]]
        final, ys, kept = compute(xp, carry, xs, stride, y_types)
        return give_results(xp, list(final) + list(ys) + list(kept), arrays, out)
    first = length - 1 if reverse else 0
    sample = carry + [x[first, ...] if length else xp.empty(tuple(x.shape[1:]), x.dtype)
                      for x in xs] + caps
    step = bodies(body, sample)
    if out is None:
        out = [xp.empty(tuple(c.shape), c.dtype) for c in carry] + [
            xp.empty((length,) + tuple(shape), dt) for shape, dt in step.types[n_carry:]]
        if save:
            out += [xp.empty((rows,) + tuple(c.shape), c.dtype) for c in carry]
    nk = n_carry if save else 0
    final, ys = list(out[:n_carry]), list(out[n_carry:len(out) - nk])
    kept = list(out[len(out) - nk:])
    if not length:
        for o, c in zip(final, carry):
            xp.copyto(o, c)
        return tuple(out)
    spare = [xp.empty_like(o) for o in final] if length > 1 else final
    cur = carry
    for k in range(length):
        t = length - 1 - k if reverse else k
        if stride and k % stride == 0:
            row = t if stride == 1 else k // stride
            for s, c in zip(kept, cur):
                xp.copyto(s[row, ...], c)
        dst = final if (length - 1 - k) % 2 == 0 else spare
        step(cur + [x[t, ...] for x in xs] + caps, dst + [y[t, ...] for y in ys])
        cur = dst
    if stride > 1 and length % stride == 0:       # the last row: the final carry
        for s, c in zip(kept, final):
            xp.copyto(s[length // stride, ...], c)
    return tuple(out)


def _scan_grads(region, nc, nx, length, rev, carry0, xs, caps, gc_fin, gys, idx,
                saved=None, gsaved=None):
    """The reverse scan of one scan: ``gc_fin`` are the cotangents of the final float
    carries (``idx.fc``), ``gys`` the stacked ones of the live ys (``idx.live_y``). Returns
    the cotangents of the initial float carries, of the wanted xs (stacked) and of the
    wanted captured values (summed). ``saved``: the carries entering each step (xs order),
    as the forward saved them; None recomputes them with a forward scan. ``gsaved``: the
    cotangents of those saved carries (float ones; a second-order gradient has them), or
    None."""
    fc, live_y, want_x, want_c = idx

    # 1. the carries entering each step: saved[t] (x order)
    if saved is None:
        def save_step(c, x):
            out = replay(region, list(c) + list(x) + caps)
            return list(out[:nc]), list(c)
        with _internal():
            _, saved = scan(save_step, list(carry0), list(xs), length=length, reverse=rev)

    # 2. the reverse scan: cotangents of the carry flow back, those of the captured values
    # are summed in the carry, those of xs are stacked
    n_out = len(region.graph.outputs)
    step_needs = ([i in fc for i in range(nc)] + [k in want_x for k in range(nx)]
                  + [k in want_c for k in range(len(caps))])

    def back_step(carry, x):
        gc, acc = carry
        c_t, x_t, gy_t, gs_t = x
        full = [None] * n_out
        for i, g in zip(fc, gc):
            full[i] = g
        for j, g in zip(live_y, gy_t):
            full[nc + j] = g
        got = _region_vjp(region, list(c_t) + list(x_t) + caps, full, step_needs)
        new_gc = [got[i] if got[i] is not None else zeros_like(c_t[i]) for i in fc]
        if gs_t:
            new_gc = [g + s for g, s in zip(new_gc, gs_t)]
        new_acc = [a if got[nc + nx + k] is None else a + got[nc + nx + k]
                   for a, k in zip(acc, want_c)]
        gx = [got[nc + k] if got[nc + k] is not None else zeros_like(x_t[k]) for k in want_x]
        return (new_gc, new_acc), gx
    acc0 = [zeros_like(caps[k]) for k in want_c]
    with _internal():
        (gc0, acc), gxs = scan(back_step, (list(gc_fin), acc0),
                               (list(saved), list(xs), list(gys), list(gsaved or [])),
                               length=length, reverse=not rev)
    return list(gc0), list(gxs), list(acc)


def _scan_grads_checkpointed(region, nc, nx, length, carry0, xs, caps, gc_fin, gys, idx,
                             saved=None, gsaved=None):
    """``_scan_grads`` keeping only about sqrt(length) carries: the forward saves the carry
    at the start of each segment of k ~ sqrt(length) steps, and the backward recomputes one
    segment's carries at a time (a nested scan) before running its reverse scan. ``saved``:
    those carries (``_saved_rows``' m + 1 rows) as the forward saved them, or None to
    compute them here; ``gsaved``: their cotangents (float carries), or None."""
    fc, live_y, want_x, want_c = idx
    k = max(1, int(round(length ** 0.5)))
    m, r = length // k, length % k
    mk = m * k

    def segments(a):
        return reshape(a[:mk], (m, k) + tuple(a.shape[1:]))
    main_xs = [segments(x) for x in xs]

    if saved is None:
        def seg_forward(c, xseg):
            def one(cc, xx):
                return list(replay(region, list(cc) + list(xx) + caps)[:nc]), None
            fin, _ = scan(one, list(c), list(xseg), length=k)
            return list(fin), list(c)
        with _internal():
            c_mid, starts = scan(seg_forward, list(carry0), main_xs, length=m)
    else:
        starts, c_mid = [s[:m] for s in saved], [s[m] for s in saved]
    gc, gx_rem, acc = list(gc_fin), None, None
    if r:
        gc, gx_rem, acc = _scan_grads(region, nc, nx, r, False, list(c_mid),
                                      [x[mk:] for x in xs], caps, gc,
                                      [g[mk:] for g in gys], idx)
    if gsaved:
        gc = [g + s[m] for g, s in zip(gc, gsaved)]
    if acc is None:
        acc = [zeros_like(caps[j]) for j in want_c]

    def seg_back(carry, x):
        g, a = carry
        c_s, xseg, gyseg, gs_s = x
        g0, gx, da = _scan_grads(region, nc, nx, k, False, list(c_s), list(xseg), caps, g,
                                 list(gyseg), idx)
        if gs_s:
            g0 = [p + q for p, q in zip(g0, gs_s)]
        return (g0, [p + q for p, q in zip(a, da)]), gx
    with _internal():
        (gc0, acc), gx_main = scan(seg_back, (gc, acc),
                                   (starts, main_xs, [segments(g) for g in gys],
                                    [s[:m] for s in (gsaved or [])]),
                                   length=m, reverse=True)
    gxs = []
    for j, g in enumerate(gx_main):
        g = reshape(g, (mk,) + tuple(g.shape[2:]))
        gxs.append(cat([g, gx_rem[j]]) if r else g)
    return list(gc0), gxs, list(acc)


def _saving_outputs(outs, attrs, n_plain: int):
    """All outputs of a loop node, the saved ones included: ``outs`` when it saves; else,
    for a node of a graph being differentiated, the node is made to save now (its ``save``
    attribute set, the saved outputs appended after its others, which keep their places);
    None where that cannot be (an eager tape node that did not save)."""
    if attrs.get("save"):
        return list(outs)
    node = getattr(outs[0], "node", None) if outs else None
    if not isinstance(outs[0], Value) or node is None or node.graph is None \
            or len(node.outputs) != n_plain:
        return None
    new_attrs = dict(node.attrs, save=True)
    types = node.op.infer([v.type for v in node.inputs], new_attrs)
    node.attrs = new_attrs
    node.outputs = tuple(node.outputs) + tuple(
        Value(t, node, i, node.graph) for i, t in enumerate(types) if i >= n_plain)
    return list(node.outputs)


def _live_cts(cts, picks):
    """The cotangents ``cts[i]`` for ``i`` in ``picks``, or None when there are none or all
    are the zeros backward_pass fills in."""
    got = [cts[i] if i < len(cts) else None for i in picks]
    if not got or all(g is None or is_zero_cotangent(g) for g in got):
        return None
    return got


def _scan_vjp(cts, ins, outs, attrs, needs):
    nc, nx, length, rev = attrs["n_carry"], attrs["n_xs"], attrs["length"], attrs["reverse"]
    region = attrs["body"]
    ny = len(region.graph.outputs) - nc
    carry0, xs, caps = _scan_split(ins, attrs)
    if length == DYNAMIC_LENGTH:
        length = None               # the reverse scans read it from their xs as well
    want_x = [k for k in range(nx) if needs[nc + k]]
    want_c = [k for k in range(len(caps)) if needs[nc + nx + k]]
    fc = [i for i in range(nc) if dtypes.is_float(carry0[i].dtype)]
    live_y = [j for j in range(ny)
              if dtypes.is_float(outs[nc + j].dtype) and not is_zero_cotangent(cts[nc + j])]
    if not (want_x or want_c or any(needs[i] for i in fc)):
        return [None] * len(ins)
    idx = (fc, live_y, want_x, want_c)
    gc_fin = [cts[i] for i in fc]
    gys = [cts[nc + j] for j in live_y]
    every = _saving_outputs(outs, attrs, nc + ny)
    saved = every[nc + ny:] if every is not None else None
    gsaved = _live_cts(cts, [nc + ny + i for i in fc]) if attrs.get("save") else None
    if gsaved is not None:
        gsaved = [g if g is not None else zeros_like(saved[i]) for g, i in zip(gsaved, fc)]
    if _checkpointed(length, rev, attrs.get("checkpoint", False)):
        gc0, gxs, acc = _scan_grads_checkpointed(region, nc, nx, length, carry0, xs, caps,
                                                 gc_fin, gys, idx, saved, gsaved)
    else:
        gc0, gxs, acc = _scan_grads(region, nc, nx, length, rev, carry0, xs, caps, gc_fin,
                                    gys, idx, saved, gsaved)
    res = [None] * len(ins)
    for i, g in zip(fc, gc0):
        if needs[i]:
            res[i] = g
    for k, g in zip(want_x, gxs):
        res[nc + k] = g
    for k, g in zip(want_c, acc):
        res[nc + nx + k] = g
    return res


def _scan_rule(op, args, batched, attrs, size):
    """scan over a batch: one scan whose carries all carry the batch (at dim 0) and whose
    batched xs are read time-major (the batch at dim 1 of the stacked xs, so each step
    slices a batched x); the body is replayed with its ops' rules (``batch_region``). The
    ys come back batch-major; a saving scan returns its saved carries as extra ys (every
    step's, then the checkpoint rows when it checkpoints)."""
    _take_compute()     # the user's eager function of this call reads batched values: the
                        # regions run instead, batched or (fallback) per example
    nc, ny_body = attrs["n_carry"], len(attrs["body"].graph.outputs) - attrs["n_carry"]
    region = attrs["body"]
    if region_has_random(region):
        return NotImplemented
    carry0, xs, caps = _scan_split(args, attrs)
    _, xb, capb = _scan_split(batched, attrs)
    carry0 = [ensure_batched(c, b, size) for c, b in zip(carry0, batched[:nc])]
    xs = [move_batch(x, 1) if b else x for x, b in zip(xs, xb)]
    flags = [True] * nc + list(xb) + list(capb)
    save = bool(attrs.get("save"))

    def batched_step(c, x):
        outs, got = batch_region(region, list(c) + list(x) + caps, flags, size)
        outs = [ensure_batched(o, b, size) for o, b in zip(outs, got)]
        return outs[:nc], outs[nc:] + (list(c) if save else [])
    length = attrs["length"]
    with _internal():       # eagerly: the traced batched body runs, not batched_step
        final, ys = scan(batched_step, carry0, xs,
                         length=None if length == DYNAMIC_LENGTH else length,
                         reverse=attrs["reverse"], checkpoint=attrs.get("checkpoint", False))
    ys = [move_batch(y, 1) for y in ys]
    saved = ys[ny_body:]
    ys = ys[:ny_body]
    if save and _checkpointed(length, attrs["reverse"], attrs.get("checkpoint", False)):
        rows, stride = _saved_rows(length, False, True)
        saved = [getitem(cat([s, reshape(f, (size, 1) + tuple(f.shape[1:]))], 1),
                         (slice(None), slice(0, (rows - 1) * stride + 1, stride)))
                 for s, f in zip(saved, final)]
    return tuple(list(final) + list(ys) + list(saved))


scan_op = register(OpDef("scan", _scan_infer, _reference(_scan_region_kernel), _scan_vjp,
                         multi_output=True, region_kernel=_scan_region_kernel,
                         vjp_reads_output=True,      # the saved carries
                         loop_invariant_from=lambda node: (node.attrs["n_carry"]
                                                           + node.attrs["n_xs"]),
                         doc="loop a region over the leading dim of xs, threading a carry",
                         attrs=Attrs(body=Attr("region"),
                                     length=Attr(int, min=DYNAMIC_LENGTH),
                                     n_carry=Attr(int, min=0), n_xs=Attr(int, min=0),
                                     reverse=Attr(bool, default=False),
                                     checkpoint=Attr(bool, default=False),
                                     save=Attr(bool, default=False)),
                         batch=_scan_rule))


def scan(fn: Callable, init, xs=None, length=None, reverse: bool = False,
         checkpoint: bool = False):
    """JAX's ``lax.scan``: ``fn(carry, x) -> (carry, y)`` applied along the leading dim of
    ``xs``; returns ``(final carry, stacked ys)``. ``init``, ``xs`` and the ys may be
    tensors or tuples/lists/dicts of them; ``xs=None`` needs ``length``. ``reverse=True``
    runs from the end (ys stay in xs order). ``fn`` is traced once into the node's body;
    the carry it returns must have the structure, shapes and dtypes of ``init``. Eagerly
    ``fn`` itself runs at each step on eager tensors (so ``print`` in it prints every step)
    and the call is one node on the tape and in ``dg.record``. The gradient is a reverse
    scan over the carries the forward saved (the node's ``save`` attribute: eagerly when
    autograd records the call, in a graph when a gradient is taken through it; each step's
    internals are recomputed from its carry, the forward loop does not run again);
    ``checkpoint=True`` saves only the carries at the starts of about sqrt(length) segments
    and recomputes each segment's carries during the backward pass (memory O(sqrt(length))
    carries instead of O(length), one more forward; forward scans of static length >= 4
    only, the others save every carry). In graph mode the xs' leading dim may be symbolic
    (a placeholder of shape ``("T", ...)``): the node's ``length`` is then -1
    (``DYNAMIC_LENGTH``), the ys' leading dim is that symbol, and the length is read from
    the xs when the graph runs, so one graph runs at any length."""
    if not callable(fn):
        raise TypeError(located(f"scan: fn must be callable, found {type(fn).__name__}"))
    c_leaves, c_def = tree_flatten(init)
    c_leaves = [_leaf_operand(x) for x in c_leaves]
    x_leaves, x_def = tree_flatten(xs)
    x_leaves = [_leaf_operand(x) for x in x_leaves]
    c_types = [_type_of(x, "scan") for x in c_leaves]
    x_full = [_type_of(x, "scan") for x in x_leaves]
    lengths = {t.shape[0] for t in x_full if t.shape}
    if any(not t.shape for t in x_full):
        raise ShapeError(located("scan: every xs leaf needs a leading dim to scan over, found a "
                                 "0-d tensor"))
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise TypeError(located(f"scan: length must be a non-negative int, found "
                                    f"{length!r}"))
        length = int(length)
        if lengths - {length}:
            raise ShapeError(located(f"scan: length={length} but xs have leading dims "
                                     f"{sorted(map(str, lengths))}"))
    elif len(lengths) == 1:
        length = next(iter(lengths))
    elif not lengths:
        raise ValueError(located("scan: give length= when xs is None (or has no leaves)"))
    else:
        raise ShapeError(located(f"scan: xs leaves have different leading dims "
                                 f"{sorted(map(str, lengths))}"))
    symbolic = not isinstance(length, int)
    x_types = [TensorType(tuple(t.shape[1:]), t.dtype) for t in x_full]
    nc = len(c_leaves)

    def args(phs):
        return tree_unflatten(c_def, phs[:nc]), tree_unflatten(x_def, phs[nc:])
    body = _trace(fn, c_types + x_types, args, "scan")
    kind = body.out_def
    if kind[0] not in ("tuple", "list") or len(kind[1]) != 2:
        raise GraphError(located(f"scan: {_fn_name(fn)} must return a pair (carry, y), found "
                                 f"the structure {_describe_tree(kind)}"))
    out_c_def, y_def = kind[1]
    out_c_types = body.out_types[:_count_leaves(out_c_def)]
    if out_c_def != c_def:
        raise GraphError(located(
            f"scan: the carry {_fn_name(fn)} returns has structure "
            f"{_describe_tree(out_c_def)}, but init has {_describe_tree(c_def)}; they must "
            "match"))
    for k, (a, b) in enumerate(zip(out_c_types, c_types)):
        if a != b:
            raise GraphError(located(
                f"scan: carry leaf {k} returned by {_fn_name(fn)} is {a!r}, but init's is "
                f"{b!r}; a carry keeps its shape and dtype"))
    outer = _join([body], nc + len(x_leaves))
    y_types = body.out_types[nc:]
    attrs = {"body": Region(body.graph), "length": DYNAMIC_LENGTH if symbolic else length,
             "n_carry": nc,
             "n_xs": len(x_leaves), "reverse": bool(reverse)}
    if checkpoint:
        attrs["checkpoint"] = True
    compute = None
    if _eager_call([*c_leaves, *x_leaves, *outer]):
        eager = eager_support()      # the eager engine's hooks
        # eagerly: fn runs each step on eager tensors; the carries the gradient needs are
        # saved when autograd will record the node
        if eager.grad_needed([*c_leaves, *x_leaves, *outer]):
            attrs["save"] = True

        def compute(xp, carry, xs, stride, _y_types):
            def step(c, t):
                out = _run_user(fn, (tree_unflatten(c_def, c), tree_unflatten(
                    x_def, [eager.tensor(x[t, ...]) for x in xs])), "scan", "f", f" at step {t}")
                leaves, got = tree_flatten(out)
                if got[0] not in ("tuple", "list") or len(got[1]) != 2:
                    raise GraphError(located(
                        f"scan: {_fn_name(fn)} must return a pair (carry, y), found the "
                        f"structure {_describe_tree(got)} when run eagerly"))
                new_c = _eager_leaves("scan", fn, out[0], c_def, c_types, "the carry")
                ys = _eager_leaves("scan", fn, out[1], y_def, y_types, "the y")
                return new_c, [eager.array(y) for y in ys]
            with eager.paused():
                return _scan_loop(xp, step, eager.array, [eager.tensor(a) for a in carry],
                                  length, bool(reverse), stride, y_types)
    res = _apply_with(scan_op, (*c_leaves, *x_leaves, *outer), attrs, compute)
    ny = len(res) - nc - (nc if attrs.get("save") else 0)
    return tree_unflatten(c_def, res[:nc]), tree_unflatten(y_def, res[nc:nc + ny])


# -- while_loop, fori_loop ----------------------------------------------------------------------
def _while_infer(types, attrs):
    n = attrs["n_carry"]
    carry, caps = list(types[:n]), list(types[n:])
    p = attrs["cond"].infer(carry + caps, "while_loop")
    if len(p) != 1 or p[0].shape != ():
        raise ShapeError(f"while_loop: cond_fn must return one scalar, found {p}")
    out = attrs["body"].infer(carry + caps, "while_loop")
    if out != carry:
        raise ShapeError(f"while_loop: the body returns {out}, expected the carry types "
                         f"{carry}")
    if attrs.get("save"):
        if attrs.get("max_iterations") is None:
            raise ShapeError("while_loop: save=True needs max_iterations (the gradient of an "
                             "unbounded loop is refused)")
        # one row per trip the loop makes: a size only known at run time, never the bound
        return carry + [TensorType((), "int64")] + [
            TensorType((RUNTIME_DIM,) + tuple(t.shape), t.dtype) for t in carry]
    return carry


def _while_run(xp, test, step, as_array, carry, bound, save):
    """The loop of one while_loop: ``test(carry) -> array``, ``step(carry) -> carry`` on
    handles (arrays, or eager tensors ``as_array`` unwraps). Returns the final carry's
    arrays and, with ``save``, the trip count T and the carries entering each trip (T rows:
    memory grows with the trips made, not with ``bound``)."""
    trips, rows = 0, []
    while bound is None or trips < bound:
        if not bool(as_array(test(carry))):
            break
        if save:
            rows.append([as_array(c) for c in carry])
        carry = step(carry)
        trips += 1
    final = [as_array(c) for c in carry]
    if not save:
        return final, []
    kept = []
    for i, f in enumerate(final):
        buf = xp.empty((trips,) + tuple(f.shape), dtype=f.dtype)
        for t, r in enumerate(rows):
            buf[t] = r[i]
        kept.append(buf)
    return final, [xp.asarray(trips, dtype=np.int64)] + kept


def _grown(xp, rows, trips: int):
    """``rows`` (saved carries, one row per trip so far) with room for row ``trips``: the
    capacity doubles when it is full, so saving T trips costs O(T) copies and at most 2T
    rows, whatever the loop's bound."""
    if trips < rows.shape[0]:
        return rows
    bigger = xp.empty((max(1, 2 * rows.shape[0]),) + tuple(rows.shape[1:]), rows.dtype)
    bigger[:trips] = rows[:trips]
    return bigger


def _while_region_kernel(xp, bodies, *arrays, out=None, cond: Region, body: Region,
                         n_carry: int, max_iterations=None, save: bool = False):
    # both regions prepared once; the carry alternates between ``out`` and a spare set of
    # buffers (a step never writes a buffer it reads), copied into ``out`` at the end when
    # the last trip wrote the spare one (or there was none). A saving loop copies the carry
    # entering each trip into its row of the saved outputs (rows after the last trip: 0).
    carry, caps = list(arrays[:n_carry]), list(arrays[n_carry:])
    compute = _take_compute()
    if compute is not None:         # an eager call: the Python functions run each trip
        final, kept = compute(xp, carry, max_iterations, save)
        return give_results(xp, list(final) + list(kept), arrays, out)
    test = bodies(cond, arrays)
    step = bodies(body, arrays)
    if out is None:
        out = [xp.empty(tuple(c.shape), c.dtype) for c in carry]
        if save:
            out.append(xp.empty((), np.int64))
    # a saving loop's rows: the carry entering each trip, grown as the trips come (the
    # planner never gives them a buffer: their size is only known at run time)
    kept = [xp.empty((0,) + tuple(c.shape), c.dtype) for c in carry] if save else []
    final = list(out[:n_carry])
    bufs = [final, None]
    pred = [xp.empty(*test.types[0])]
    cur, trips = carry, 0
    while max_iterations is None or trips < max_iterations:
        test(cur + caps, pred)
        if not bool(pred[0]):
            break
        for i, c in enumerate(cur[:len(kept)]):
            kept[i] = _grown(xp, kept[i], trips)
            xp.copyto(kept[i][trips, ...], c)
        k = trips % 2
        if bufs[k] is None:
            bufs[k] = [xp.empty_like(o) for o in final]
        step(cur + caps, bufs[k])
        cur, trips = bufs[k], trips + 1
    if cur is not bufs[0]:
        for o, c in zip(final, cur):
            xp.copyto(o, c)
    if not save:
        return tuple(out)
    out[n_carry][...] = trips
    return tuple(out[:n_carry + 1]) + tuple(s[:trips] for s in kept)


_UNBOUNDED = ("while_loop: reverse-mode differentiation needs a bound on the trip count: pass "
              "max_iterations=N to dg.while_loop (the loop then stops after at most N steps; "
              "the forward saves its trip count and carries and the gradient runs that many "
              "reverse steps), or write the loop with dg.scan or dg.fori_loop with Python-int "
              "bounds")


def _while_vjp(cts, ins, outs, attrs, needs):
    bound = attrs.get("max_iterations")
    if bound is None:
        raise GraphError(located(_UNBOUNDED))
    n = attrs["n_carry"]
    body_r = attrs["body"]
    every = _saving_outputs(outs, attrs, n)
    if every is None:
        return _while_vjp_replayed(cts, ins, attrs, needs)
    carry, caps = list(ins[:n]), list(ins[n:])
    trips, saved = every[n], every[n + 1:]
    fc = [i for i in range(n) if dtypes.is_float(carry[i].dtype)]
    want_c = [k for k in range(len(caps)) if needs[n + k]]
    if not (want_c or any(needs[i] for i in fc)):
        return [None] * len(ins)
    gsaved = _live_cts(cts, [n + 1 + i for i in fc]) if attrs.get("save") else None
    if gsaved is not None:
        gsaved = [g if g is not None else zeros_like(saved[i]) for g, i in zip(gsaved, fc)]
    step_needs = [i in fc for i in range(n)] + [k in want_c for k in range(len(caps))]
    nf, nw = len(fc), len(want_c)

    def row(a, j):
        # (j >= 0 inside the loop; under vmap a finished example's j is -1 while others
        # run, and its row is read and then dropped)
        j = maximum(j, Scalar(0, "int64"))
        return reshape(index_select(a, 0, reshape(j, (1,))), tuple(a.shape[1:]))

    # the reverse loop: trip j = trips-1 ... 0 reads the carry that entered it (saved[j]),
    # turns the cotangent of its result into that of its input and sums the captured
    # values' cotangents; a while_loop bounded like the forward, so it is differentiable
    def back_cond(state):
        return state[0] >= 0

    def back_body(state):
        j, gc, acc = state[0], list(state[1:1 + nf]), list(state[1 + nf:])
        c_t = [row(s, j) for s in saved]
        full = [None] * n
        for i, g in zip(fc, gc):
            full[i] = g
        got = _region_vjp(body_r, c_t + caps, full, step_needs)
        new_gc = [got[i] if got[i] is not None else zeros_like(c_t[i]) for i in fc]
        if gsaved is not None:
            new_gc = [g + row(s, j) for g, s in zip(new_gc, gsaved)]
        new_acc = [a if got[n + k] is None else a + got[n + k] for a, k in zip(acc, want_c)]
        return (j - 1, *new_gc, *new_acc)
    init = (trips - 1, *[cts[i] for i in fc], *[zeros_like(caps[k]) for k in want_c])
    with _internal():
        res = while_loop(back_cond, back_body, init, max_iterations=bound)
    gc0, acc = res[1:1 + nf], res[1 + nf:1 + nf + nw]
    out = [None] * len(ins)
    for i, g in zip(fc, gc0):
        if needs[i]:
            out[i] = g
    for k, g in zip(want_c, acc):
        out[n + k] = g
    return out


def _while_vjp_replayed(cts, ins, attrs, needs):
    """The gradient of a bounded while_loop whose forward saved nothing (an eager node
    recorded without autograd): the loop runs again, saving its trips (T rows, never the
    bound), and the saving node's rule runs on what it saved."""
    saving = dict(attrs, save=True)
    with _internal():
        outs = while_op(*ins, **saving)
    return _while_vjp(list(cts[:attrs["n_carry"]]), ins, list(outs), saving, needs)


def _while_rule(op, args, batched, attrs, size):
    """while_loop over a batch. The carries that become batched (a fixed point over the
    body) carry the batch. A predicate the same for every example keeps one loop; a
    predicate per example runs while any example's holds, each trip keeping the carries of
    the examples whose predicate is false (JAX's rule). A saving loop (bounded, for its
    gradient) with a predicate per example also counts each example's trips: its saved rows
    are the batched loop's (an example's first T rows are the carries entering its T trips,
    the rows after them are never read)."""
    _take_compute()     # the user's eager function of this call reads batched values: the
                        # regions run instead, batched or (fallback) per example
    n, cond_r, body_r = attrs["n_carry"], attrs["cond"], attrs["body"]
    if region_has_random(cond_r) or region_has_random(body_r):
        return NotImplemented
    flags, capf = list(batched[:n]), list(batched[n:])
    while True:
        grown = [a or b for a, b in zip(flags, region_batched(body_r, flags + capf))]
        if grown == flags:
            break
        flags = grown
    per_example = region_batched(cond_r, flags + capf)[0]
    save = bool(attrs.get("save"))
    if per_example:
        flags = [True] * n
    carry = [ensure_batched(c, b, size) if f else c
             for c, b, f in zip(args[:n], batched[:n], flags)]
    caps = list(args[n:])
    counting = per_example and save
    if counting:                # each example's trip count, as one more carry
        carry.append(get_op("full")(shape=(size,), fill_value=0, dtype="int64"))

    def predicate(c):
        p = batch_region(cond_r, list(c[:n]) + caps, flags + capf, size)[0][0]
        return p if not per_example or p.dtype == "bool" else p != 0

    def step(c):
        outs, got = batch_region(body_r, list(c[:n]) + caps, flags + capf, size)
        outs = [ensure_batched(o, b, size) if f else o for o, b, f in zip(outs, got, flags)]
        if not per_example:
            return outs
        p = predicate(c)
        outs = [where(reshape(p, (size,) + (1,) * (len(o.shape) - 1)), o, old)
                for o, old in zip(outs, c[:n])]
        return outs + ([c[n] + cast(p, "int64")] if counting else [])

    def test(c):
        p = predicate(c)
        return p if not per_example else reduce_sum(cast(p, "int64"), 0) > 0
    types = [_type_of(x, "while_loop") for x in carry]
    cb = _trace(test, types, lambda phs: (list(phs),), "while_loop")
    bb = _trace(step, types, lambda phs: (list(phs),), "while_loop")
    outer = _join([cb, bb], len(carry))
    new_attrs = {"cond": Region(cb.graph), "body": Region(bb.graph), "n_carry": len(carry)}
    for key in ("max_iterations", "save"):
        if attrs.get(key) is not None:
            new_attrs[key] = attrs[key]
    res = list(op(*carry, *outer, **new_attrs))
    out = [ensure_batched(c, f, size) for c, f in zip(res[:n], flags)]
    if save:
        k = len(carry)
        out.append(res[n] if counting else ensure_batched(res[k], False, size))
        out += [move_batch(r, 1) if f else ensure_batched(r, False, size)
                for r, f in zip(res[k + 1:k + 1 + n], flags)]
    return tuple(out)


while_op = register(OpDef("while_loop", _while_infer, _reference(_while_region_kernel),
                          _while_vjp, multi_output=True, region_kernel=_while_region_kernel,
                          vjp_reads_output=True,     # saved trips, carries
                          loop_invariant_from=lambda node: node.attrs["n_carry"],
                          doc="apply the body region while the cond region is true",
                          attrs=Attrs(cond=Attr("region"), body=Attr("region"),
                                      n_carry=Attr(int, min=0),
                                      max_iterations=Attr(int, default=None, min=0),
                                      save=Attr(bool, default=False)),
                          batch=_while_rule))


def while_loop(cond_fn: Callable, body_fn: Callable, init, max_iterations=None):
    """JAX's ``lax.while_loop``: ``while cond_fn(val): val = body_fn(val)``, as one op.
    ``init`` is a tensor or a tuple/list/dict of them; ``body_fn`` returns the same
    structure, shapes and dtypes; ``cond_fn`` returns a scalar. With ``max_iterations=N``
    the loop stops after at most N trips (as TensorFlow's ``maximum_iterations``) and is
    reverse-differentiable: the forward saves its trip count T and the carry entering each
    trip (T rows, grown by doubling as the trips come: memory grows with T, not N, so a
    generous N costs nothing), and the gradient is a reverse loop of T
    steps (itself a bounded while_loop, so differentiable again); without it a gradient
    raises a clear error (as JAX). Eagerly ``cond_fn`` and ``body_fn`` themselves run on
    eager tensors each trip (Python side effects happen per trip), and the call is one node
    on the tape and in ``dg.record``."""
    for fn, role in ((cond_fn, "cond_fn"), (body_fn, "body_fn")):
        if not callable(fn):
            raise TypeError(located(f"while_loop: {role} must be callable, found "
                                    f"{type(fn).__name__}"))
    if max_iterations is not None and (isinstance(max_iterations, bool) or not isinstance(
            max_iterations, (int, np.integer)) or max_iterations < 0):
        raise TypeError(located(f"while_loop: max_iterations must be a non-negative int or "
                                f"None, found {max_iterations!r}"))
    leaves, c_def = tree_flatten(init)
    leaves = [_leaf_operand(x) for x in leaves]
    types = [_type_of(x, "while_loop") for x in leaves]

    def args(phs):
        return (tree_unflatten(c_def, phs),)
    cb = _trace(cond_fn, types, args, "while_loop")
    if cb.out_def != ("leaf",) or cb.out_types[0].shape != ():
        raise GraphError(located(f"while_loop: {_fn_name(cond_fn)} must return one scalar "
                                 f"tensor, found {_describe_tree(cb.out_def)} of types "
                                 f"{cb.out_types}"))
    bb = _trace(body_fn, types, args, "while_loop")
    if bb.out_def != c_def:
        raise GraphError(located(
            f"while_loop: {_fn_name(body_fn)} returns the structure "
            f"{_describe_tree(bb.out_def)}, but init has {_describe_tree(c_def)}; they must "
            "match"))
    for k, (a, b) in enumerate(zip(bb.out_types, types)):
        if a != b:
            raise GraphError(located(
                f"while_loop: carry leaf {k} returned by {_fn_name(body_fn)} is {a!r}, but "
                f"init's is {b!r}; a carry keeps its shape and dtype"))
    outer = _join([cb, bb], len(leaves))
    attrs = {"cond": Region(cb.graph), "body": Region(bb.graph), "n_carry": len(leaves)}
    if max_iterations is not None:
        attrs["max_iterations"] = int(max_iterations)
    compute = None
    if _eager_call([*leaves, *outer]):
        eager = eager_support()      # the eager engine's hooks
        # eagerly: cond_fn and body_fn run each trip on eager tensors; a bounded loop that
        # autograd will record saves its trip count and carries for the gradient
        if max_iterations is not None and eager.grad_needed([*leaves, *outer]):
            attrs["save"] = True

        def compute(xp, carry, bound, save):
            trip = [0]                      # the trip running (0: the first test)

            def test(c):
                got = _run_user(cond_fn, (tree_unflatten(c_def, c),), "while_loop",
                                "cond_fn", f" before trip {trip[0] + 1}")
                return _eager_leaves("while_loop", cond_fn, got, cb.out_def, cb.out_types,
                                     "the predicate")[0]

            def step(c):
                trip[0] += 1
                got = _run_user(body_fn, (tree_unflatten(c_def, c),), "while_loop",
                                "body_fn", f" on trip {trip[0]}")
                return _eager_leaves("while_loop", body_fn, got, c_def, types, "the carry")
            with eager.paused():
                return _while_run(xp, test, step, eager.array,
                                  [eager.tensor(a) for a in carry], bound, save)
    res = _apply_with(while_op, (*leaves, *outer), attrs, compute)
    return tree_unflatten(c_def, res[:len(leaves)])


def fori_loop(lower, upper, body_fun: Callable, init_val):
    """JAX's ``lax.fori_loop``: ``for i in range(lower, upper): val = body_fun(i, val)``.
    With Python-int bounds it is a ``scan`` over ``i`` (an int64 scalar tensor), so it is
    reverse-differentiable; with tensor bounds it is a ``while_loop`` (not
    differentiable in reverse mode)."""
    if not callable(body_fun):
        raise TypeError(located(f"fori_loop: body_fun must be callable, found "
                                f"{type(body_fun).__name__}"))
    static = all(isinstance(b, (int, np.integer)) and not isinstance(b, bool)
                 for b in (lower, upper))
    try:
        return _fori_loop(lower, upper, body_fun, init_val, static)
    except (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError) as e:
        msg = str(e)
        for inner in ("scan: ", "while_loop: "):    # what fori_loop is written with
            if msg.startswith(inner):
                try:
                    new = type(e)("fori_loop: " + msg[len(inner):])
                except Exception:       # noqa: BLE001 - a constructor wanting more
                    raise e from None
                raise new from e
        raise


def _fori_loop(lower, upper, body_fun, init_val, static):
    if static:
        lower, upper = int(lower), int(upper)
        idx = np.arange(lower, max(lower, upper), dtype=np.int64)

        def step(c, i):
            return body_fun(i, c), None
        step.__qualname__ = _fn_name(body_fun)
        final, _ = scan(step, init_val, idx, length=len(idx))
        return final
    for b, role in ((lower, "lower"), (upper, "upper")):
        if isinstance(b, (int, np.integer)) and not isinstance(b, bool):
            continue
        t = _type_of(b, "fori_loop") if hasattr(b, "shape") and hasattr(b, "dtype") else None
        if t is None or t.shape != () or t.dtype not in dtypes.INT_DTYPES:
            raise TypeError(located(
                f"fori_loop: {role} must be an int or a scalar integer tensor, found "
                f"{type(b).__name__ if t is None else repr(t)}"))
    lo, hi = (cast(b, "int64") if not isinstance(b, (int, np.integer)) else
              np.asarray(b, dtype=np.int64) for b in (lower, upper))

    def wcond(state):
        return state[0] < state[1]

    def wbody(state):
        i, h, c = state
        return (i + 1, h, body_fun(i, c))
    wbody.__qualname__ = _fn_name(body_fun)
    return while_loop(wcond, wbody, (lo, hi, init_val))[2]
