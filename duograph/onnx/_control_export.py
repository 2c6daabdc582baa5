"""ONNX converters of the control-flow ops: ``cond`` -> ``If``, ``scan`` -> ``Scan`` (or
``Loop`` when there is nothing to scan over), ``while_loop`` -> ``Loop``.

A region becomes an ONNX subgraph. The region's inputs that are the node's operands (the
captured outer values included) are not subgraph inputs: the subgraph reads the outer
names directly, as ONNX's scoping allows. Only the per-iteration values (an ``If`` has none,
a ``Scan`` body has its carries and the current slices of xs, a ``Loop`` body the iteration
number, the condition and the carries) are formal inputs of the subgraph. Every subgraph
output goes through an ``Identity``, so an output that is an input or an outer name is
still produced inside the subgraph (as runtimes want).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ._export import INT64_MAX, Exporter, _onnx, _refuse, _value_info, converter


def _subgraph(ex: Exporter, body, bind: Dict, formal: Sequence, name: str,
              condition: Optional[Callable] = None):
    """The ONNX GraphProto of region graph ``body``: ``bind`` maps body inputs to outer
    names, ``formal`` lists ``(body input or None, onnx name, dtype, shape)`` of the
    subgraph's own inputs. ``condition`` (a Loop body's), given the names of the body's
    results, emits the continue-condition and returns its name: the first output."""
    helper = _onnx().helper
    saved = (ex.nodes, dict(ex._const_cache), dict(ex._dim_cache), ex.doc)
    ex.nodes = []
    try:
        for v, n in bind.items():
            ex.names[v] = n
        inputs = []
        for v, n, dt, shape in formal:
            if v is not None:
                ex.names[v] = n
            inputs.append(_value_info(n, dt, shape))
        ex.run_nodes(body, saved[3])
        ex.doc = saved[3]
        results = [ex.name_of(o) for o in body.outputs]
        outputs = []
        if condition is not None:
            c = ex.op("Identity", condition(results), hint="cond_out")
            outputs.append(_value_info(c, "bool", ()))
        for o, r in zip(body.outputs, results):
            n = ex.op("Identity", r, hint="out")
            outputs.append(_value_info(n, o.dtype, o.shape))
        nodes = ex.nodes
    finally:
        ex.nodes, ex._const_cache, ex._dim_cache, ex.doc = saved
    return helper.make_graph(nodes, ex.fresh(name), inputs, outputs)


def _to_bool(ex: Exporter, name: str, dtype: str) -> str:
    """A scalar's truth (nonzero) as an ONNX bool."""
    if dtype == "bool":
        return name
    return ex.op("Cast", name, to=_onnx().TensorProto.BOOL)


def _formal(ex: Exporter, values, hint: str, shapes=None) -> List[tuple]:
    shapes = shapes or [v.shape for v in values]
    return [(v, ex.fresh(hint), v.dtype, s) for v, s in zip(values, shapes)]


@converter("cond")
def _cond(ex, node, ins):
    a = node.attrs
    operands = ins[1:]
    branches = []
    for key in ("true_branch", "false_branch"):
        g = a[key].graph
        branches.append(_subgraph(ex, g, dict(zip(g.inputs, operands)), [],
                                  "then" if key == "true_branch" else "else"))
    pred = _to_bool(ex, ins[0], node.inputs[0].dtype)
    return ex.emit("If", [pred], len(node.outputs), hint="if", then_branch=branches[0],
                   else_branch=branches[1])


def _static(shape) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in shape)


def _unsaved(node, n_plain: int, convert):
    """A loop node that saves its carries for a gradient (``save=True``, e.g. recorded
    eagerly while autograd was on) exports as the plain loop when nothing reads the saved
    outputs (they get no ONNX value)."""
    extra = node.outputs[n_plain:]
    if any(v.uses for v in extra):
        _refuse("a loop whose saved carries feed a gradient (export the model without "
                "its backward pass)")
    return list(convert()) + [""] * len(extra)


@converter("scan")
def _scan(ex, node, ins):
    if node.attrs.get("save"):
        n_plain = len(node.attrs["body"].graph.outputs)
        return _unsaved(node, n_plain, lambda: _scan_plain(ex, node, ins, n_plain))
    return _scan_plain(ex, node, ins, len(node.outputs))


def _scan_plain(ex, node, ins, n_plain):
    a = node.attrs
    nc, nx, length, rev = a["n_carry"], a["n_xs"], a["length"], a["reverse"]
    g = a["body"].graph
    carry, xs, caps = ins[:nc], ins[nc:nc + nx], ins[nc + nx:]
    n_y = n_plain - nc
    if length == 0:
        # no step runs: the carries pass through and the ys are empty
        outs = [ex.op("Identity", c) for c in carry]
        for o in node.outputs[nc:n_plain]:
            if not _static(o.shape):
                _refuse("a scan of length 0 whose ys have symbolic shapes")
            outs.append(ex.const(np.zeros(tuple(o.shape), dtype=o.dtype)))
        return outs
    bind = dict(zip(g.inputs[nc + nx:], caps))
    if nx:
        # ONNX Scan: state variables are the carries, scan inputs the xs; reverse=True reads
        # the xs from the end and prepends each y, so ys stay in xs order as in duograph
        formal = (_formal(ex, g.inputs[:nc], "carry")
                  + _formal(ex, g.inputs[nc:nc + nx], "x"))
        body = _subgraph(ex, g, bind, formal, "scan_body")
        d = [int(rev)]
        return ex.emit("Scan", list(carry) + list(xs), nc + n_y, hint="scan", body=body,
                       num_scan_inputs=nx, scan_input_directions=d * nx,
                       scan_output_directions=d * n_y if n_y else None)
    # nothing to scan over: a Loop of ``length`` trips (its scan outputs are stacked in trip
    # order; a reverse scan's are flipped after)
    it, cin = ex.fresh("iter"), ex.fresh("cond_in")
    formal = ([(None, it, "int64", ()), (None, cin, "bool", ())]
              + _formal(ex, g.inputs[:nc], "carry"))
    body = _subgraph(ex, g, bind, formal, "loop_body", condition=lambda res: cin)
    outs = ex.emit("Loop", [ex.const(np.asarray(length, np.int64)),
                            ex.const(np.asarray(True))] + list(carry), nc + n_y,
                   hint="loop", body=body)
    if rev:
        flipped = []
        for y in outs[nc:]:
            flipped.append(ex.op("Slice", y, ex.ints([-1]), ex.ints([-INT64_MAX]),
                                 ex.ints([0]), ex.ints([-1])))
        outs = outs[:nc] + flipped
    return outs


@converter("while_loop")
def _while(ex, node, ins):
    if node.attrs.get("save"):
        n = node.attrs["n_carry"]
        return _unsaved(node, n, lambda: _while_plain(ex, node, ins))
    return _while_plain(ex, node, ins)


def _while_plain(ex, node, ins):
    a = node.attrs
    n = a["n_carry"]
    cond_g, body_g = a["cond"].graph, a["body"].graph
    carry, caps = ins[:n], ins[n:]
    pred_v = cond_g.outputs[0]
    # the first test runs before the loop; the body then computes the next carry and the
    # test on it (a Loop stops when the test is false or the trip count is reached)
    first = ex.inline(cond_g, list(carry) + list(caps), ex.doc)[0]
    first = _to_bool(ex, first, pred_v.dtype)
    it, cin = ex.fresh("iter"), ex.fresh("cond_in")
    formal = ([(None, it, "int64", ()), (None, cin, "bool", ())]
              + _formal(ex, body_g.inputs[:n], "carry"))
    caps_bind = dict(zip(body_g.inputs[n:], caps))

    def test(results):
        p = ex.inline(cond_g, list(results) + list(caps), ex.doc)[0]
        return _to_bool(ex, p, pred_v.dtype)
    body = _subgraph(ex, body_g, caps_bind, formal, "while_body", condition=test)
    bound = a.get("max_iterations")
    trips = "" if bound is None else ex.const(np.asarray(bound, np.int64))
    return ex.emit("Loop", [trips, first] + list(carry), n, hint="while", body=body)


# -- regions -----------------------------------------------------------------------------------
@converter("fused", "call")
def _region(ex, node, ins):
    (region,) = node.regions
    return ex.inline(region.graph, ins, ex.doc)
