"""The ``call`` op, which applies a sub-graph to its operands, and the region bodies every
region op's kernel runs (``OpByOpBody``, ``give_results``).

``call`` is the simplest region op and the pattern control flow follows: its body is a
closed ``Region`` (a Graph whose inputs are the node's operands) kept in the ``body``
attribute, so every generic tool reaches it through ``Node.regions``: print, verify,
clone, DCE and CSE inside it, the JSON serialiser, and autodiff (the body is replayed on
the operands and differentiated, in graph mode and eagerly, to any order).

    %2 = call(%x, %w)
      region(%i0: f32[4,3], %i1: f32[3,2]) {
        %0: f32[4,2] = matmul(%i0, %i1)
        %1: f32[4,2] = tanh(%0)
        return (%1)
      }
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..autodiff import composite_vjp
from ..batching import batch_region, ensure_batched, region_has_random
from ..errors import GraphError, ShapeError
from ..ir import Graph, Region
from ..registry import OpDef, register
from ..types import TensorType, eval_dim, solve_dim
from .fused import run_ops


def replay(region: Region, operands: Sequence) -> list:
    """Apply the body's ops to ``operands`` through the op functions (Values build nodes,
    eager tensors run): the body inlined where it is called."""
    env = dict(zip(region.graph.inputs, operands))
    for node in region.graph.nodes:
        res = node.op(*[env[x] for x in node.inputs], **node.attrs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(node.outputs, res):
            env[o] = r
    return [env[o] for o in region.graph.outputs]


def _infer(types, attrs):
    return attrs["body"].infer(types, "call")


# -- bodies for the region kernels (the OpDef ``region_kernel`` trait) ----------------------------
#
# A region op's kernel is written against ``bodies(region, arrays) -> body``: ``body.types``
# are its results' (shape, dtype), ``body(arrays, out=None)`` runs it once, writing into
# ``out`` (which shares no memory with ``arrays``) or into fresh arrays. The op's reference
# kernel passes the bodies below (op by op, every call); a runtime passes bodies it compiled
# once (kernels resolved, intermediates planned), so a loop pays no preparation per step and
# writes each step's results straight into the buffers it double-buffers.

def body_result_types(region: Region, arrays: Sequence) -> list:
    """``(shape, numpy dtype)`` of each result of ``region`` applied to ``arrays``: the body
    inferred on their concrete types, symbols left by attributes (a reshape to ``("N", 4)``)
    bound through the region inputs' declared dims."""
    g = region.graph
    types = [TensorType(tuple(a.shape), dtypes.as_dtype(a.dtype)) for a in arrays]
    out, bindings = [], None
    for t in region.infer(types, g.name):
        shape = tuple(t.shape)
        if any(not isinstance(d, int) for d in shape):
            if bindings is None:
                bindings = {}
                for v, a in zip(g.inputs, arrays):
                    for d, n in zip(v.shape, a.shape):
                        found = solve_dim(d, int(n), bindings) if isinstance(d, str) else None
                        bindings.update(found or {})
            shape = tuple(eval_dim(d, bindings) for d in shape)
            if any(d is None for d in shape):
                raise ShapeError(f"{g.name}: cannot tell the shape {list(t.shape)} of a "
                                 "result from the region's inputs")
        out.append((shape, np.dtype(t.dtype)))
    return out


def give_results(xp, results: Sequence, arrays: Sequence, out=None) -> tuple:
    """A body's ``results`` as the region kernels expect them: copied into ``out`` when it
    is given, else each an array of its own (a result that is, or views, one of ``arrays``,
    or repeats an earlier result, is copied)."""
    if out is not None:
        for r, o in zip(results, out):
            xp.copyto(o, r)
        return tuple(out)
    got = []
    for r in results:
        if any(r is g for g in got):
            r = r.copy()
        got.append(r)
    return _detach_outputs(xp, got, arrays)


class OpByOpBody:
    """A region run op by op on every call, with ``kernels`` (OpDef -> kernel; by default
    each op's reference kernel): the reference body of the region kernels."""

    __slots__ = ("graph", "xp", "kernels", "types")

    def __init__(self, region: Region, xp, arrays: Sequence, kernels=None):
        self.graph, self.xp, self.kernels = region.graph, xp, kernels
        self.types = body_result_types(region, arrays)

    def __call__(self, arrays: Sequence, out=None) -> tuple:
        res = run_ops(self.graph, self.xp, arrays, self.kernels)
        return give_results(self.xp, res, arrays, out)


def op_by_op_bodies(xp, kernels=None) -> Callable:
    """``bodies(region, arrays)`` that run each region op by op (see ``OpByOpBody``)."""
    return lambda region, arrays: OpByOpBody(region, xp, arrays, kernels)


def _reference(region_kernel: Callable) -> Callable:
    """The plain kernel of a region op: its region kernel over op-by-op bodies."""
    def kernel(xp, *arrays, **attrs):
        return region_kernel(xp, op_by_op_bodies(xp), *arrays, **attrs)
    kernel.__name__ = region_kernel.__name__.replace("_region_kernel", "_kernel")
    return kernel


def _call_region_kernel(xp, bodies, *arrays, out=None, body: Region):
    return bodies(body, arrays)(list(arrays), out)


def _vjp(cts, ins, outs, attrs, needs):
    return composite_vjp(lambda *xs: replay(attrs["body"], xs), cts, ins, needs)


def _call_rule(op, args, batched, attrs, size):
    """call over a batch: its body replayed with its ops' rules."""
    body = attrs["body"]
    if region_has_random(body):
        return NotImplemented
    outs, got = batch_region(body, list(args), list(batched), size)
    return tuple(ensure_batched(o, b, size) for o, b in zip(outs, got))


call_op = register(OpDef("call", _infer, _reference(_call_region_kernel), _vjp,
                         multi_output=True, region_kernel=_call_region_kernel,
                         doc="apply a sub-graph (a region) to the operands",
                         attrs=Attrs(body=Attr("region")), batch=_call_rule))


def trace_region(fn: Callable, types: Sequence[TensorType], name: str = "region") -> Region:
    """Trace ``fn`` on placeholders of ``types`` into a closed Region (what ``fn`` reads
    from outside must be passed in: a foreign Value is refused with a clear error)."""
    g = Graph(name)
    with g:
        args = [g.add_input(f"i{k}", t) for k, t in enumerate(types)]
        res = fn(*args)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    for r in res:
        if getattr(r, "graph", None) is not g:
            raise GraphError(f"{name}: the traced function must return values computed from "
                             f"its arguments, found {r!r}")
    g.outputs = res
    return Region(g)


def call(body, *operands):
    """Apply ``body`` (a Region, or a function traced on the operands' types) to
    ``operands``; returns a tuple of the body's results."""
    if not isinstance(body, Region):
        body = trace_region(body, [TensorType(tuple(x.shape), x.dtype) for x in operands],
                            getattr(body, "__name__", "region"))
    return call_op(*operands, body=body)


def _detach_outputs(xp, results, arrays):
    """Copy a result that shares memory with an operand (a body returning its input, or a
    view of it): the runtime treats every kernel result as a buffer of its own."""
    out = []
    for r in results:
        if any(r is a or (getattr(r, "size", 0) and getattr(a, "size", 0)
                          and xp.may_share_memory(r, a)) for a in arrays):
            r = r.copy()
        out.append(r)
    return tuple(out)
