"""Cleanup passes: dead-code elimination, common-subexpression elimination, constant
folding and algebraic simplification. Each takes a graph, rewrites it in place through the
IR editing API (``Graph.create_node``/``replace_uses``/``erase``) and returns a
``PassResult``. All four also work inside the regions nodes carry (loop bodies, branches).
"""
from __future__ import annotations

import warnings
from typing import Callable, Dict, List, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.ir import ConstArray, Graph, Node, Region, Value
from ..graphlib.kernels import run_kernel
from ..graphlib.registry import REGISTRY
from ..graphlib.rewrite import clone, live_roots, make_node
from .result import PassResult

# Constant folding materialises at most this many elements per folded value.
FOLD_LIMIT = 1 << 16
# The simplification loop runs to a fixed point; this many rounds without reaching one
# means a pair of rules undo each other: it stops and warns.
SIMPLIFY_MAX_ROUNDS = 64


def _in_regions(graph: Graph, rewrite: Callable[[Graph], bool]) -> int:
    """Run ``rewrite`` (graph -> changed) on a copy of every region of ``graph``'s nodes and
    swap in a new region where it changed something (regions are immutable and shared
    between clones, so they are never edited in place). Returns how many changed."""
    count = 0
    for node in graph.nodes:
        if not node.regions:
            continue
        attrs = dict(node.attrs)
        for key, value in node.attrs.items():
            if not isinstance(value, Region):
                continue
            body, _ = clone(value.graph)
            if rewrite(body):
                attrs[key] = value.with_graph(body)
                count += 1
        if any(attrs[k] is not v for k, v in node.attrs.items()):
            node.attrs = attrs
    return count


def _dce(graph: Graph) -> int:
    needed = set(live_roots(graph))
    dead = 0
    for node in reversed(list(graph.nodes)):
        if node.op.ordered:                 # a collective: every rank must run it
            needed.update(node.outputs)
        if any(o in needed for o in node.outputs):
            needed.update(node.inputs)
        else:
            dead += 1
    if dead:
        graph.nodes = [n for n in graph.nodes if any(o in needed for o in n.outputs)]
    return dead + _in_regions(graph, _dce)


def dead_code_elimination(graph: Graph) -> PassResult:
    """Drop nodes whose outputs nothing needs (outputs, state updates and ordered side
    effects such as collectives are needed), in the graph and in the regions its nodes
    carry.

    Before: ``%1 = exp(%x); %2 = neg(%x); return (%1)``  After: ``%1 = exp(%x); return (%1)``
    """
    dropped = _dce(graph)
    return PassResult(graph, dropped > 0, [f"dropped {dropped} nodes"] if dropped else [])


def _cse(graph: Graph) -> int:
    number: Dict[Value, int] = {v: i for i, v in enumerate(list(graph.inputs) + graph.state)}
    seen: Dict[tuple, Node] = {}
    merged = 0
    for node in list(graph.nodes):
        key = None
        if not node.op.random and not node.op.ordered:
            try:
                key = (node.op, tuple(number[x] for x in node.inputs), node.attr_key())
                hash(key)
            except (TypeError, KeyError):
                key = None
        first = seen.get(key) if key is not None else None
        if first is None:
            if key is not None:
                seen[key] = node
            for o in node.outputs:
                number[o] = len(number)
            continue
        for o, f in zip(node.outputs, first.outputs):
            graph.replace_uses(o, f)
        # the kept node now stands for the merged one too
        first.provenance = tuple(sorted(set(first.provenance) | set(node.provenance)))
        graph.erase(node)
        merged += 1
    return merged + _in_regions(graph, _cse)


def common_subexpression_elimination(graph: Graph) -> PassResult:
    """Merge nodes with the same op, inputs and attributes (random ops and ordered side
    effects such as collectives are never merged),
    in the graph and in its regions.

    Before: ``%1 = exp(%x); %2 = exp(%x); %3 = add(%1, %2)``
    After:  ``%1 = exp(%x); %3 = add(%1, %1)``
    """
    merged = _cse(graph)
    return PassResult(graph, merged > 0, [f"merged {merged} nodes"] if merged else [])


def _const_array(v: Value) -> Optional[np.ndarray]:
    node = v.node
    if node is None or not node.op.constant:
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
    return graph.create_node(REGISTRY["constant"], (), attrs, like=like, before=like)


def _inline(graph: Graph, node: Node, region: Region, inputs) -> None:
    """Replace ``node`` by copies of ``region``'s nodes applied to ``inputs``."""
    env: Dict[Value, Value] = dict(zip(region.graph.inputs, inputs))
    for n in region.graph.nodes:
        new = graph.create_node(n.op, [env[x] for x in n.inputs], dict(n.attrs), like=n,
                                before=node)
        env.update(zip(n.outputs, new.outputs))
    for o, r in zip(node.outputs, region.graph.outputs):
        graph.replace_uses(o, env[r])
    graph.erase(node)


def constant_folding(graph: Graph) -> PassResult:
    """Evaluate nodes whose inputs are all constants (small static results only), in the
    graph and in its regions, and
    inline the region a region op's constant inputs choose (``OpDef.static_region``: a
    ``cond`` with a constant predicate becomes its taken branch).

    Before: ``%0 = constant{2.0}; %1 = constant{3.0}; %2 = mul(%0, %1)``
    After:  ``%2' = constant{6.0}``
    """
    folded = 0
    for node in list(graph.nodes):
        arrays = [_const_array(x) for x in node.inputs]
        if node.op.static_region is not None and any(a is not None for a in arrays):
            chosen = node.op.static_region(node, arrays)
            if chosen is not None:
                _inline(graph, node, *chosen)
                folded += 1
            continue
        foldable = (node.inputs and not node.op.random and not node.op.constant
                    and not node.op.ordered
                    and not node.regions
                    and all(a is not None for a in arrays)
                    and all(o.type.numel() is not None and o.type.numel() <= FOLD_LIMIT
                            for o in node.outputs))
        if not foldable:
            continue
        try:
            with np.errstate(all="ignore"):   # the op's reference kernel, on numpy
                res = run_kernel(node.op.kernel, np, arrays, node.attrs,
                                 node.op.multi_output or len(node.outputs) != 1,
                                 [np.dtype(o.dtype) for o in node.outputs])
        except Exception:  # noqa: BLE001 - leave it to fail (clearly) at run time
            continue
        for o, r in zip(node.outputs, res):
            graph.replace_uses(o, _constant_node(r, node, graph).outputs[0])
        graph.erase(node)
        folded += 1
    folded += _in_regions(graph, lambda body: constant_folding(body).changed)
    return PassResult(graph, folded > 0, [f"folded {folded} nodes"] if folded else [])


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


def tracks(*op_names: str):
    """Declare the ops a rule can rewrite: the simplifier offers it only their nodes
    (tinygrad's PatternMatcher, PyTensor's ``NodeRewriter.tracks``)."""
    def mark(rule: Rule) -> Rule:
        rule.tracks = op_names
        return rule
    return mark


@tracks("mul", "add", "sub", "div")
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


@tracks("pow_scalar")
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


@tracks("cast", "reshape", "expand", "sum_to", "permute", "stop_gradient")
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
        return x    # gradients taken after this pass would be wrong: the graph is marked
    return x if _same(x, node.outputs[0]) else None


@tracks("reshape", "permute", "neg")
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


@tracks("sub")
def _self_subtract(node: Node, graph: Graph):
    """x - x -> 0 for integers (for floats inf - inf is nan, so it is left alone)."""
    if node.op.name != "sub" or node.inputs[0] is not node.inputs[1]:
        return None
    x = node.inputs[0]
    if dtypes.is_float(x.dtype):
        return None
    return [make_node(REGISTRY["full_like"], (x,), {"fill_value": 0, "dtype": x.dtype},
                      node, graph)]


@tracks("permute")
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
    readers = sum(made._uses.values())
    if readers != 1 or any(o is made for o in graph.outputs) or any(
            new is made for _, new in graph.updates.values()):
        return None
    permute = node.op
    bt = make_node(permute, (b,), {"dims": (1, 0)}, node, graph)
    at = make_node(permute, (a,), {"dims": (1, 0)}, node, graph)
    mm = make_node(inner.op, (bt.outputs[0], at.outputs[0]), dict(inner.attrs), node, graph)
    return [bt, at, mm]


@tracks("sum", "mean")
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


_RULE_INDEX: Dict[object, List[Rule]] = {}


def _rules_for(op) -> List[Rule]:
    """The rules of SIMPLIFY_RULES that track ``op`` (in list order), indexed once."""
    if not _RULE_INDEX:
        for rule in SIMPLIFY_RULES:
            for name in getattr(rule, "tracks", ()):
                _RULE_INDEX.setdefault(REGISTRY[name], []).append(rule)
        _RULE_INDEX[None] = []
    return _RULE_INDEX.get(op, ())


def _simplify_round(graph: Graph) -> tuple:
    """One sweep of the rules over the graph: (rewrites made, stop_gradients dropped)."""
    rewrites = dropped_stops = 0
    for node in list(graph.nodes):
        if node.graph is not graph or len(node.outputs) != 1:
            continue
        result = None
        for rule in _rules_for(node.op):
            result = rule(node, graph)
            if result is not None:
                break
        if result is None:
            continue
        if isinstance(result, Value):
            new = result
        else:
            at = graph.index_of(node)
            for k, made in enumerate(result):
                graph.insert(at + k, made)
            new = result[-1].outputs[0]
        graph.replace_uses(node.outputs[0], new)
        graph.erase(node)
        rewrites += 1
        dropped_stops += node.op.name == "stop_gradient"
    return rewrites, dropped_stops


def algebraic_simplification(graph: Graph) -> PassResult:
    """Apply SIMPLIFY_RULES until none applies (each rule returns None, a Value that
    replaces the node's output, or a list of new nodes whose last output does). Rules
    expose new chances (x**2 -> x*x, then x*1 ...), so it sweeps to a fixed point, and warns
    if ``SIMPLIFY_MAX_ROUNDS`` sweeps do not reach one. Regions (loop bodies, branches) are
    simplified too.

    Dropping ``stop_gradient`` changes what gradients mean: when it does, the result says
    so and the graph is marked, so ``dg.grad`` on it raises instead of being wrong.
    """
    total = stops = 0
    for _ in range(SIMPLIFY_MAX_ROUNDS):
        made, dropped = _simplify_round(graph)
        total += made
        stops += dropped
        if not made:
            break
    else:
        warnings.warn(f"algebraic_simplification: no fixed point after {SIMPLIFY_MAX_ROUNDS} "
                      "rounds (two rules may undo each other); stopping", RuntimeWarning,
                      stacklevel=2)
    if total:
        _dce(graph)
    blocked = []

    def in_body(body: Graph) -> bool:
        changed = algebraic_simplification(body).changed
        blocked.extend(body.gradient_blockers)
        return changed
    total += _in_regions(graph, in_body)
    stops += len(blocked)
    notes = [f"{total} rewrites"] if total else []
    if stops:
        notes.append(f"dropped {stops} stop_gradient")
        graph.gradient_blockers.append("algebraic_simplification (dropped stop_gradient)")
    return PassResult(graph, total > 0, notes, preserves_gradients=not stops)
