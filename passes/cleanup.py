"""Cleanup passes: dead-code elimination, common-subexpression elimination, constant
folding and algebraic simplification. Each takes a graph, rewrites it in place, and returns
``(graph, changed)``.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..graphlib import dtypes
from ..graphlib.ir import ConstArray, Graph, Node, Value
from ..graphlib.kernels import run_kernel
from ..graphlib.registry import REGISTRY
from ..graphlib.rewrite import live_roots, make_node, replace_all

# Constant folding materialises at most this many elements per folded value.
FOLD_LIMIT = 1 << 16


def dead_code_elimination(graph: Graph) -> Tuple[Graph, bool]:
    """Drop nodes whose outputs nothing needs (outputs and state updates are needed).

    Before: ``%1 = exp(%x); %2 = neg(%x); return (%1)``  After: ``%1 = exp(%x); return (%1)``
    """
    needed = {id(v) for v in live_roots(graph)}
    keep: List[Node] = []
    for node in reversed(graph.nodes):
        if any(id(o) in needed for o in node.outputs):
            keep.append(node)
            needed.update(id(x) for x in node.inputs)
    keep.reverse()
    changed = len(keep) != len(graph.nodes)
    graph.nodes = keep
    return graph, changed


def common_subexpression_elimination(graph: Graph) -> Tuple[Graph, bool]:
    """Merge nodes with the same op, inputs and attributes (random ops are never merged).

    Before: ``%1 = exp(%x); %2 = exp(%x); %3 = add(%1, %2)``
    After:  ``%1 = exp(%x); %3 = add(%1, %1)``
    """
    seen: Dict[tuple, Node] = {}
    mapping: Dict[int, Value] = {}
    keep: List[Node] = []
    for node in graph.nodes:
        ins = tuple(mapping.get(id(x), x) for x in node.inputs)
        if any(a is not b for a, b in zip(ins, node.inputs)):   # never `!=` on Values
            node.inputs = ins
        if node.op.random:
            keep.append(node)
            continue
        try:
            key = (node.op.name, tuple(id(x) for x in ins), node.attr_key())
            hash(key)
        except TypeError:
            keep.append(node)
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            keep.append(node)
        else:
            for o, f in zip(node.outputs, first.outputs):
                mapping[id(o)] = f
    changed = bool(mapping)
    graph.nodes = keep
    replace_all(graph, mapping)
    return graph, changed


def _const_array(v: Value) -> Optional[np.ndarray]:
    node = v.node
    if node is None or node.op.name != "constant":
        return None
    val = node.attrs["value"]
    arr = val.array if isinstance(val, ConstArray) else np.asarray(val, dtype=node.attrs["dtype"])
    return arr


def _constant_node(arr: np.ndarray, like: Node, graph: Graph) -> Node:
    arr = np.asarray(arr)
    dt = dtypes.as_dtype(arr.dtype)
    if arr.ndim == 0:
        py = arr.item()
        attrs = {"value": bool(py) if dt == "bool" else py, "dtype": dt}
    else:
        attrs = {"value": ConstArray(arr), "dtype": dt}
    return make_node(REGISTRY["constant"], (), attrs, like, graph)


def constant_folding(graph: Graph) -> Tuple[Graph, bool]:
    """Evaluate nodes whose inputs are all constants (small static results only).

    Before: ``%0 = constant{2.0}; %1 = constant{3.0}; %2 = mul(%0, %1)``
    After:  ``%2' = constant{6.0}``
    """
    mapping: Dict[int, Value] = {}
    out: List[Node] = []
    for node in graph.nodes:
        if node.inputs and mapping:
            node.inputs = tuple(mapping.get(id(x), x) for x in node.inputs)
        arrays = [_const_array(x) for x in node.inputs]
        foldable = (node.inputs and not node.op.random and node.op.name != "constant"
                    and all(a is not None for a in arrays)
                    and all(o.type.numel() is not None and o.type.numel() <= FOLD_LIMIT
                            for o in node.outputs))
        if not foldable:
            out.append(node)
            continue
        try:
            with np.errstate(all="ignore"):   # the op's reference kernel, on numpy
                res = run_kernel(node.op.kernel, np, arrays, node.attrs,
                                 node.op.multi_output or len(node.outputs) != 1,
                                 [np.dtype(o.dtype) for o in node.outputs])
        except Exception:  # noqa: BLE001 - leave it to fail (clearly) at run time
            out.append(node)
            continue
        for o, r in zip(node.outputs, res):
            c = _constant_node(r, node, graph)
            out.append(c)
            mapping[id(o)] = c.outputs[0]
    graph.nodes = out
    replace_all(graph, mapping)
    return graph, bool(mapping)


# -- algebraic simplification: small pattern -> replacement rules ---------------------------
def _scalar_const(v: Value):
    arr = _const_array(v)
    if arr is None:
        return None
    if arr.size == 1 or (arr.size and np.all(arr == arr.reshape(-1)[0])):
        return arr.reshape(-1)[0].item()
    return None


def _same(v: Value, like: Value) -> bool:
    return v.type == like.type


Rule = Callable[[Node, Graph], Optional[object]]


def _identity_elementwise(node: Node, graph: Graph):
    """x*1, 1*x, x+0, 0+x, x-0, x/1 -> x (when x already has the result's type)."""
    name = node.op.name
    if name not in ("mul", "add", "sub", "div"):
        return None
    a, b = node.inputs
    out = node.outputs[0]
    unit = 1 if name in ("mul", "div") else 0
    if _scalar_const(b) == unit and _same(a, out):
        return a
    if name in ("mul", "add") and _scalar_const(a) == unit and _same(b, out):
        return b
    return None


def _small_powers(node: Node, graph: Graph):
    """x**1 -> x, x**2 -> x*x, x**3 -> x*x*x, x**0.5 -> sqrt(x), x**-1 -> 1/x
    (numpy's power is ~20x slower than multiplies on large arrays)."""
    if node.op.name != "pow_scalar":
        return None
    (x,), e = node.inputs, node.attrs["exponent"]
    out = node.outputs[0]
    if x.dtype != out.dtype:
        return None
    if e == 1:
        return x
    mul = REGISTRY["mul"]
    if e == 2:
        return [make_node(mul, (x, x), {}, node, graph)]
    if e == 3:
        sq = make_node(mul, (x, x), {}, node, graph)
        return [sq, make_node(mul, (sq.outputs[0], x), {}, node, graph)]
    if e == 0.5 and dtypes.is_float(x.dtype):
        return [make_node(REGISTRY["sqrt"], (x,), {}, node, graph)]
    if e == -1 and dtypes.is_float(x.dtype):
        return [make_node(REGISTRY["reciprocal"], (x,), {}, node, graph)]
    return None


def _noop_shape(node: Node, graph: Graph):
    """cast to the same dtype, reshape/expand/sum_to to the same shape, permute by the
    identity -> x."""
    name = node.op.name
    if name not in ("cast", "reshape", "expand", "sum_to", "permute", "stop_gradient"):
        return None
    x = node.inputs[0]
    if name == "permute" and tuple(node.attrs["dims"]) != tuple(range(x.ndim)):
        return None
    if name == "stop_gradient":
        return x            # gradients are already built when passes run
    return x if _same(x, node.outputs[0]) else None


def _collapse_chains(node: Node, graph: Graph):
    """reshape(reshape(x)) -> reshape(x); permute(permute(x)) -> one permute;
    neg(neg(x)) -> x."""
    name = node.op.name
    x = node.inputs[0] if node.inputs else None
    inner = x.node if x is not None else None
    if inner is None or inner.op.name != name:
        return None
    if name == "reshape":
        return [make_node(node.op, (inner.inputs[0],), dict(node.attrs), node, graph)]
    if name == "permute":
        outer, first = node.attrs["dims"], inner.attrs["dims"]
        dims = tuple(first[d] for d in outer)
        if dims == tuple(range(len(dims))):
            return inner.inputs[0]
        return [make_node(node.op, (inner.inputs[0],), {"dims": dims}, node, graph)]
    if name == "neg":
        return inner.inputs[0]
    return None


def _self_subtract(node: Node, graph: Graph):
    """x - x -> 0 for integers (for floats inf - inf is nan, so it is left alone)."""
    if node.op.name != "sub" or node.inputs[0] is not node.inputs[1]:
        return None
    x = node.inputs[0]
    if dtypes.is_float(x.dtype):
        return None
    return [make_node(REGISTRY["full_like"], (x,), {"fill_value": 0, "dtype": x.dtype},
                      node, graph)]


def _transpose_of_matmul(node: Node, graph: Graph):
    """permute(a @ b, (1, 0)) -> b.T @ a.T for 2-D operands, when nothing else reads a @ b.
    The transposes are views (BLAS reads them as they are) and fold into the permutes the
    operands already are: a Linear layer's weight gradient ``(x.T @ dy).T`` becomes
    ``dy.T @ x``, made directly in the weight's layout, so the update reads it contiguously.
    """
    if node.op.name != "permute" or tuple(node.attrs["dims"]) != (1, 0):
        return None
    inner = node.inputs[0].node
    if inner is None or inner.op.name != "matmul":
        return None
    a, b = inner.inputs
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype:
        return None
    made = inner.outputs[0]
    readers = sum(1 for n in graph.nodes for x in n.inputs if x is made)
    if readers != 1 or any(o is made for o in graph.outputs) or any(
            new is made for _, new in graph.updates.values()):
        return None
    permute = node.op
    bt = make_node(permute, (b,), {"dims": (1, 0)}, node, graph)
    at = make_node(permute, (a,), {"dims": (1, 0)}, node, graph)
    mm = make_node(inner.op, (bt.outputs[0], at.outputs[0]), dict(inner.attrs), node, graph)
    return [bt, at, mm]


def _reduce_of_broadcast(node: Node, graph: Graph):
    """sum(expand(x)) over only the expanded dims -> x * count; mean(...) -> x (reshaped
    to the result): no n-fold array is read. Floats only, and only where the reduced dims
    are exactly ones x was broadcast along (the result differs from the sum by rounding)."""
    name = node.op.name
    if name not in ("sum", "mean") or node.attrs.get("dtype") is not None:
        return None
    e = node.inputs[0]
    inner = e.node
    out = node.outputs[0]
    if inner is None or inner.op.name != "expand" or not dtypes.is_float(out.dtype):
        return None
    x = inner.inputs[0]
    if x.dtype != out.dtype:
        return None
    lead = e.ndim - x.ndim
    xs = (1,) * lead + tuple(x.shape)
    dims = {d % e.ndim for d in node.attrs["dim"]}
    for d in range(e.ndim):
        broadcast = xs[d] == 1 and e.shape[d] != 1
        if (d in dims) != broadcast and not (d in dims and e.shape[d] == 1):
            return None
    new = [make_node(REGISTRY["reshape"], (x,), {"shape": tuple(out.shape)}, node, graph)]
    if name == "sum":
        count = make_node(REGISTRY["numel"], (e,), {"dim": tuple(sorted(dims)),
                                                   "dtype": out.dtype}, node, graph)
        new += [count, make_node(REGISTRY["mul"], (new[0].outputs[0], count.outputs[0]), {},
                                 node, graph)]
    return new


SIMPLIFY_RULES: List[Rule] = [_identity_elementwise, _small_powers, _noop_shape,
                              _collapse_chains, _self_subtract, _transpose_of_matmul,
                              _reduce_of_broadcast]


def algebraic_simplification(graph: Graph) -> Tuple[Graph, bool]:
    """Apply SIMPLIFY_RULES to every node until none applies (each rule returns None, a
    Value that replaces the node's output, or a list of new nodes whose last output does)."""
    changed = False
    for _ in range(4):   # rules expose new chances (x**2 -> x*x, then x*1 ...): a few sweeps
        mapping: Dict[int, Value] = {}
        out: List[Node] = []
        for node in graph.nodes:
            if mapping:
                node.inputs = tuple(mapping.get(id(x), x) for x in node.inputs)
            result = None
            if len(node.outputs) == 1:
                for rule in SIMPLIFY_RULES:
                    result = rule(node, graph)
                    if result is not None:
                        break
            if result is None:
                out.append(node)
            elif isinstance(result, Value):
                mapping[id(node.outputs[0])] = result
            else:
                out.extend(result)
                mapping[id(node.outputs[0])] = result[-1].outputs[0]
        graph.nodes = out
        replace_all(graph, mapping)
        if not mapping:
            break
        changed = True
    if changed:
        dead_code_elimination(graph)
    return graph, changed
