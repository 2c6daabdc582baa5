"""Ops that hold regions: ``call`` applies a sub-graph to its operands.

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

from ..attrs import Attr, Attrs
from ..autodiff import composite_vjp
from ..errors import GraphError
from ..ir import Graph, Region
from ..registry import OpDef, register
from ..types import TensorType


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


def _kernel(xp, *arrays, body: Region):
    from .fused import run_ops
    return run_ops(body.graph, xp, arrays)


def _vjp(cts, ins, outs, attrs, needs):
    return composite_vjp(lambda *xs: replay(attrs["body"], xs), cts, ins, needs)


call_op = register(OpDef("call", _infer, _kernel, _vjp, multi_output=True,
                         doc="apply a sub-graph (a region) to the operands",
                         attrs=Attrs(body=Attr("region"))))


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
