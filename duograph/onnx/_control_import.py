"""ONNX control flow imported as duograph's control-flow ops: ``If`` -> ``cond``, ``Loop``
-> ``while_loop`` (or ``scan`` when it has scan outputs and a fixed trip count), ``Scan`` ->
``scan`` (opset 8's batched Scan: a scan over the batch of scans over the sequence).

A subgraph is imported by the same importer, inside the Python function that duograph's
``cond``/``scan``/``while_loop`` traces into a region: its nodes read the subgraph's formal
inputs (bound to the region's placeholders) and outer-scope names (the importer's values,
which the tracing captures as explicit operands of the node). Values known when the graph is
built still fold eagerly inside bodies. What duograph cannot express exactly is refused:
branches of different types, carries that change shape between iterations, a ``Loop`` whose
stacked outputs have a data-dependent length, an opset-8 ``Scan`` over ragged sequences
(``sequence_lens`` shorter than the sequence dim).
"""
from __future__ import annotations

import numpy as np

from .. import eager
from ..graphlib import functional as F
from ..graphlib.ir import current_graph
from ..graphlib.ops.control import cond, scan, while_loop
from ._import import Ctx, handler, refuse
from ._shape_values import ShapeValue


def run_subgraph(imp, graph, bindings: dict) -> list:
    """The outputs of ONNX subgraph ``graph`` with its inputs bound as ``bindings`` (name ->
    Value, tensor or array), built in the graph being traced now (or the importer's)."""
    saved_env, saved_graph = imp.env, imp.graph
    imp.env = dict(saved_env)
    cur = current_graph()
    if cur is not None:
        imp.graph = cur
    try:
        for t in graph.initializer:
            imp.env[t.name] = imp._array(t)
        # eagerly (known operands) the control-flow op runs this function on eager
        # tensors: they are known values, folded like the importer's own arrays
        imp.env.update({k: np.asarray(v.numpy()) if isinstance(v, eager.Tensor) else v
                        for k, v in bindings.items()})
        imp.run_nodes(graph.node)
        outs = []
        for o in graph.output:
            if o.name not in imp.env:
                refuse(f"subgraph output {o.name!r} is never computed")
            out = imp.env[o.name]
            # a shape value leaving a traced body is a value of that body (its sizes read
            # at run time); the control-flow op knows nothing of shape values
            outs.append(imp.as_value(out) if cur is not None and
                        isinstance(out, ShapeValue) else out)
    finally:
        imp.env, imp.graph = saved_env, saved_graph
    return outs


def _scalar_bool(x, what: str):
    """A one-element condition as a 0-d bool (ONNX allows shape [] or [1])."""
    if isinstance(x, np.ndarray):
        if x.size != 1:
            refuse(f"{what} must have one element, found shape {list(x.shape)}")
        return np.asarray(bool(x.reshape(())))
    shape = tuple(x.shape)
    if shape != ():
        if any(not isinstance(d, int) for d in shape) or int(np.prod(shape)) != 1:
            refuse(f"{what} must have one element, found shape {list(shape)}")
        x = F.reshape(x, ())
    return x if x.dtype == "bool" else F.cast(x, "bool")


def _names(graph) -> list:
    return [i.name for i in graph.input]


# -- If ------------------------------------------------------------------------------------------
@handler("If")
def _if(ctx: Ctx):
    branches = ctx.attr("then_branch"), ctx.attr("else_branch")
    if ctx.eager:
        # a known condition: the taken branch, inline (constant folding)
        pred = ctx.known(0, "condition")
        taken = branches[0] if bool(np.asarray(_scalar_bool(pred, "If's condition"))) \
            else branches[1]
        return run_subgraph(ctx.imp, taken, {})
    for b in branches:
        if b.input:
            refuse("an If branch with formal inputs (ONNX branches take none)")

    def branch(g):
        def fn():
            return tuple(run_subgraph(ctx.imp, g, {}))
        fn.__name__ = fn.__qualname__ = g.name or "branch"
        return fn
    n = len(branches[0].output)
    if len(branches[1].output) != n:
        refuse("the branches have different numbers of outputs")
    res = cond(_scalar_bool(ctx.x(0), "If's condition"), branch(branches[0]),
               branch(branches[1]))
    return list(res)


# -- Loop ----------------------------------------------------------------------------------------
@handler("Loop")
def _loop(ctx: Ctx):
    body = ctx.attr("body")
    vs = list(ctx.ins[2:])
    nv = len(vs)
    b_in = _names(body)
    if len(b_in) != 2 + nv:
        refuse(f"the body takes {len(b_in)} inputs for {nv} loop-carried values (expected "
               f"{2 + nv}: the iteration number, the condition, then the carried values)")
    n_scan = len(body.output) - 1 - nv
    if n_scan < 0:
        refuse("the body has fewer outputs than loop-carried values")
    has_m, has_c = ctx.has(0), ctx.has(1)
    if not has_m and not has_c:
        refuse("a Loop with neither a trip count nor a condition never ends")
    if n_scan:
        return _loop_as_scan(ctx, body, b_in, vs, has_m, has_c)
    c0 = _scalar_bool(ctx.x(1), "Loop's condition") if has_c else np.asarray(True)
    m = None
    if has_m:
        m = ctx.x(0)
        m = m if tuple(m.shape) == () else F.reshape(m, ())
    bound = None         # a known trip count bounds the loop (which makes it differentiable)
    if has_m and ctx._known[0] is not None:
        bound = max(int(np.asarray(ctx._known[0]).reshape(())), 0)
        if bound > np.iinfo(np.int32).max:
            bound = None     # "no bound" as exporters write it; i < M still tests it

    def cond_fn(state):
        i, go = state[0], state[1]
        return go if m is None else F.logical_and(go, F.lt(i, m))

    def body_fn(state):
        i, go, *carry = state
        outs = run_subgraph(ctx.imp, body, dict(zip(b_in, [i, go] + list(carry))))
        return (i + 1, _scalar_bool(outs[0], "the body's condition"), *outs[1:])
    i0 = np.asarray(0, np.int64)
    res = while_loop(cond_fn, body_fn, (i0, c0, *vs), max_iterations=bound)
    return list(res[2:])


def _loop_as_scan(ctx, body, b_in, vs, has_m, has_c):
    """A Loop with scan outputs: exact as a scan when its trip count is known (a number, or
    a symbolic dim of an input) and its condition cannot stop it early (the stacked outputs
    then have that length)."""
    if not has_m:
        refuse("a Loop with scan outputs and no trip count (the stacked outputs would have a "
               "data-dependent length)")
    xs = None
    trips = ctx._known[0]
    if isinstance(trips, ShapeValue) and len(trips.elems) == 1 and \
            not isinstance(trips.elems[0], int):
        # a trip count read from a symbolic dim (Shape(x)[0]): a scan over a (T, 0) tensor,
        # whose length is that dim, read at run time
        m = trips.elems[0]
        xs = F.zeros((m, 0), dtype="bool")
    else:
        m = max(int(np.asarray(ctx.known(0, "trip count")).reshape(())), 0)
    if has_c:
        c0 = ctx.known(1, "initial condition (the stacked outputs' length depends on it)")
        if not bool(np.asarray(_scalar_bool(c0, "Loop's condition"))):
            m, xs = 0, None
    nv = len(vs)

    def step(carry, _):
        i, cs = carry
        outs = run_subgraph(ctx.imp, body, dict(zip(b_in, [i, np.asarray(True)] + list(cs))))
        go = outs[0]
        if not isinstance(go, np.ndarray):
            refuse("a Loop with scan outputs whose condition is computed in the body (the "
                   "stacked outputs would have a data-dependent length)")
        if not bool(np.asarray(go).reshape(-1)[0]) and (xs is not None or m > 1):
            refuse("a Loop with scan outputs whose body stops it after one trip")
        return (i + 1, tuple(outs[1:1 + nv])), tuple(outs[1 + nv:])
    (_, final), ys = scan(step, (np.asarray(0, np.int64), tuple(vs)), xs,
                          length=None if xs is not None else m)
    return list(final) + list(ys)


# -- Scan ----------------------------------------------------------------------------------------
@handler("Scan")
def _scan(ctx: Ctx):
    if ctx.opset < 9:
        return _scan8(ctx)
    body = ctx.attr("body")
    nx = ctx.attr("num_scan_inputs")
    n_state = len(ctx.ins) - nx
    if n_state < 0:
        refuse(f"num_scan_inputs={nx} but the node has {len(ctx.ins)} inputs")
    states, xs = list(ctx.ins[:n_state]), list(ctx.ins[n_state:])
    n_y = len(body.output) - n_state
    in_axes = ctx.attr("scan_input_axes") or [0] * nx
    in_dirs = ctx.attr("scan_input_directions") or [0] * nx
    out_axes = ctx.attr("scan_output_axes") or [0] * n_y
    out_dirs = ctx.attr("scan_output_directions") or [0] * n_y
    seqs = []
    for x, axis, d in zip(xs, in_axes, in_dirs):
        axis = axis % len(x.shape) if x.shape else refuse("a 0-d scan input")
        if axis:
            x = F.movedim(x, axis, 0)
        seqs.append(F.flip(x, [0]) if d else x)
    b_in = _names(body)
    if len(b_in) != n_state + nx:
        refuse(f"the body takes {len(b_in)} inputs for {n_state} states and {nx} scan inputs")

    def step(carry, x):
        outs = run_subgraph(ctx.imp, body, dict(zip(b_in, list(carry) + list(x))))
        return tuple(outs[:n_state]), tuple(outs[n_state:])
    final, ys = scan(step, tuple(states), tuple(seqs))
    outs = list(final)
    for y, axis, d in zip(ys, out_axes, out_dirs):
        if d:
            y = F.flip(y, [0])
        axis = axis % len(y.shape)
        if axis:
            y = F.movedim(y, 0, axis)
        outs.append(y)
    return outs


def _scan8(ctx: Ctx):
    """Scan of opset 8: a batch dim before the sequence dim, the body per batch element.
    A scan over the batch of scans over the sequence; ``sequence_lens`` (when given) must
    be the full length for every element (shorter sequences are refused)."""
    body = ctx.attr("body")
    nx = ctx.attr("num_scan_inputs")
    ins = list(ctx.ins[1:])
    n_state = len(ins) - nx
    if n_state < 0:
        refuse(f"num_scan_inputs={nx} but the node has {len(ctx.ins)} inputs")
    states, xs = ins[:n_state], ins[n_state:]
    dirs = ctx.attr("directions") or [0] * nx
    for x in xs:
        if len(x.shape) < 2:
            refuse("an opset-8 scan input needs a batch and a sequence dim")
    if ctx.has(0):
        lens = np.asarray(ctx.known(0, "sequence_lens")).reshape(-1)
        full = xs[0].shape[1] if xs else None
        if not isinstance(full, int) or np.any(lens != full):
            refuse(f"sequence_lens {lens.tolist()} shorter than the sequence dim {full} "
                   "(ragged batches)")
    b_in = _names(body)
    if len(b_in) != n_state + nx:
        refuse(f"the body takes {len(b_in)} inputs for {n_state} states and {nx} scan inputs")

    def per_element(_, item):
        st, seqs = item
        seqs = [F.flip(x, [0]) if d else x for x, d in zip(seqs, dirs)]

        def step(carry, x):
            outs = run_subgraph(ctx.imp, body, dict(zip(b_in, list(carry) + list(x))))
            return tuple(outs[:n_state]), tuple(outs[n_state:])
        final, ys = scan(step, tuple(st), tuple(seqs))
        return (), (tuple(final), tuple(ys))
    _, (finals, ys) = scan(per_element, (), (tuple(states), tuple(xs)))
    return list(finals) + list(ys)
