"""Reverse-mode autodiff over IR nodes, using each op's vjp rule.

``backward_pass`` is the one engine: it walks nodes in reverse topological order and applies
the registry's rules, which are written with the public op functions. On symbolic Values the
rules add gradient nodes to the graph (``grad``); on eager tensors they execute. Undoing
broadcasting (``sum_to``) and dtype changes happens here, once, not in every rule.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from . import dtypes
from .dispatch import as_value
from .errors import GraphError, located
from .ir import Graph, Value
from .ops.creation import ones_like, zeros_like
from .ops.elementwise import cast
from .ops.shape import sum_to
from .types import TensorType


def fit_to(ct, x):
    """Sum a cotangent down to the shape of ``x`` and cast it to ``x``'s dtype."""
    cs, xs = ct.shape, x.shape
    if cs != xs and tuple(cs) != tuple(xs):
        ct = sum_to(ct, tuple(xs))
    if ct.dtype != x.dtype:
        ct = cast(ct, x.dtype)
    return ct


def value_key(v):
    """The key a value's cotangent is stored under: (producer, output index), or the value
    itself for one no node produced (an input, a leaf tensor). Nodes, Values and tensors
    hash by identity."""
    node = v.node
    return (node, v.index) if node is not None else v


def input_keys(node) -> Sequence:
    """Keys of a node's inputs. Eager nodes capture them when recorded (``node.input_keys``),
    so a tensor later modified in place still routes gradients to its old producer."""
    keys = getattr(node, "input_keys", None)
    return keys if keys is not None else [value_key(x) for x in node.inputs]


def relevant_values(nodes: Sequence, wrt: Sequence) -> set:
    """Keys of the values that depend on any of ``wrt`` (forward sweep over ``nodes``)."""
    relevant = {value_key(w) for w in wrt}
    for n in nodes:
        if any(k in relevant for k in input_keys(n)):
            relevant.update((n, i) for i in range(len(n.outputs)))
    return relevant


def backward_pass(nodes: Sequence, seeds: Dict[object, object], wrt: Sequence = (),
                  relevant: Optional[set] = None,
                  on_grad: Optional[Callable] = None,
                  fit: Callable = None) -> Dict[object, object]:
    """Propagate cotangents from ``seeds`` (value key -> cotangent) back through ``nodes``.

    ``nodes`` must be in topological order; ``relevant`` holds the keys of values that want a
    gradient (default: those depending on ``wrt``). ``on_grad(node, index, ct)`` may replace
    an output's cotangent once it is complete (tensor hooks). Returns key -> accumulated
    cotangent for every value reached. ``fit(ct, x)`` (default ``fit_to``) fits an input's
    cotangent to it; a caller may pass a faster one for its own tensor type.
    """
    if fit is None:
        fit = fit_to
    if relevant is None:
        relevant = relevant_values(nodes, wrt)
    cts: Dict[object, object] = dict(seeds)
    float_dtypes = dtypes.GRAD_DTYPES
    for node in reversed(nodes):
        n_out = node.n_outputs
        if n_out is None:
            n_out = len(node.outputs)
        if n_out == 1:
            c = cts.get((node, 0))
            if c is None:
                continue
            out_cts = [c]
        else:
            out_cts = [cts.get((node, i)) for i in range(n_out)]
            if all(c is None for c in out_cts):
                continue
        keys = input_keys(node)
        nondiff = node.op.nondiff_inputs
        targets = [i for i, x in enumerate(node.inputs)
                   if keys[i] in relevant and i not in nondiff and x.dtype in float_dtypes]
        if not targets:
            continue
        if node.op.vjp is None:
            where = f"\n  in: {node.source}" if node.source else ""
            raise GraphError(f"{node.op.name}: this op has no gradient rule, but a gradient "
                             f"must flow through it{where}")
        outputs = node.outputs
        if on_grad is not None:
            if n_out == 1:
                out_cts = [on_grad(node, 0, out_cts[0])]
            else:
                out_cts = [on_grad(node, i, c) if c is not None else None
                           for i, c in enumerate(out_cts)]
        if n_out != 1 or out_cts[0] is None:
            out_cts = [c if c is not None else zeros_like(o) for c, o in zip(out_cts, outputs)]
        needs = tuple([i in targets for i in range(len(node.inputs))])
        in_cts = node.op.vjp(out_cts, node.inputs, outputs, node.attrs, needs)
        for i in targets:
            ct = in_cts[i]
            if ct is None:
                continue
            ct = fit(ct, node.inputs[i])
            prev = cts.get(keys[i])
            cts[keys[i]] = ct if prev is None else prev + ct
    return cts


def _nodes_of(values: Sequence[Value]) -> List:
    graph = values[0].graph
    for v in values:
        if v.graph is not graph:
            raise GraphError(located(
                f"grad: all values must belong to one graph, found {v!r} of graph "
                f"{getattr(v.graph, 'name', None)!r} and graph {graph.name!r}"))
    if graph.gradient_blockers:
        raise GraphError(located(
            f"grad: graph {graph.name!r} went through passes that do not preserve gradients "
            f"({', '.join(graph.gradient_blockers)}); take gradients before optimising it "
            "(dg.grad, then optimize/compile)"))
    return list(graph.nodes)


def grad(output, wrt, cotangent=None) -> List[Value]:
    """Symbolic gradients of ``output`` with respect to each Value in ``wrt``.

    Gradient nodes are appended to the graph being built. ``output`` must be a scalar unless
    ``cotangent`` (same shape and dtype as ``output``; a Value, an array or a number) is
    given. ``wrt`` may mix placeholders, state and intermediate Values; a Value ``output``
    does not depend on gets zeros.
    """
    single = isinstance(wrt, Value)
    wrt = [wrt] if single else list(wrt)
    if not isinstance(output, Value):
        raise TypeError(located(f"grad: expected a symbolic Value as output, found "
                                f"{type(output).__name__} (eager tensors use .backward())"))
    if not wrt:
        raise ValueError(located("grad: expected at least one Value in wrt, found none"))
    for w in wrt:
        if not isinstance(w, Value):
            raise TypeError(located(f"grad: wrt must hold symbolic Values, found "
                                    f"{type(w).__name__}"))
        if not dtypes.is_differentiable(w.dtype):
            raise GraphError(located(f"grad: cannot differentiate with respect to a {w.dtype} "
                                     f"value {w!r}; only floating-point values have "
                                     "gradients"))
    if not dtypes.is_float(output.dtype):
        raise GraphError(located(f"grad: output must be floating point, found {output!r}"))
    nodes = _nodes_of([output] + wrt)
    if cotangent is None:
        if output.shape != ():
            raise GraphError(located(
                f"grad: output has shape {list(output.shape)}; pass a cotangent of that shape "
                "for a non-scalar output (or reduce it first)"))
        cotangent = ones_like(output)
    elif not isinstance(cotangent, Value):
        try:
            cotangent = as_value(cotangent, output.graph, output.dtype)
        except TypeError as e:
            raise TypeError(located(f"grad: cotangent: {e}")) from None
    elif cotangent.graph is not output.graph:
        raise GraphError(located(f"grad: the cotangent {cotangent!r} belongs to another graph "
                                 f"than the output (graph {output.graph.name!r})"))
    if tuple(cotangent.shape) != tuple(output.shape):
        raise GraphError(located(
            f"grad: cotangent shape {list(cotangent.shape)} does not match the output shape "
            f"{list(output.shape)}"))
    if cotangent.dtype != output.dtype:
        raise GraphError(located(
            f"grad: expected a cotangent of the output's dtype {output.dtype}, found "
            f"{cotangent.dtype}; cast it first"))
    cts = backward_pass(nodes, {value_key(output): cotangent}, wrt)
    result = []
    for w in wrt:
        g = cts.get(value_key(w))
        result.append(g if g is not None else zeros_like(w))
    return result


def is_zero_cotangent(ct) -> bool:
    """Whether ``ct`` is zeros built by an op with the ``fills`` trait (the ``full_like`` of 0
    that ``backward_pass`` fills in for an output nobody reads): a vjp may skip the terms it
    would feed."""
    node = getattr(ct, "node", None)
    return node is not None and node.op.fills and node.attrs.get("fill_value") == 0


def composite_vjp(formula: Callable, cts: Sequence, ins: Sequence,
                  needs: Sequence[bool]) -> list:
    """The vector-Jacobian product of ``formula(*ins)`` (written in differentiable ops) for
    the cotangents ``cts`` of its outputs, in whatever mode ``ins`` live in: the formula and
    its gradient are traced once on placeholders of the operands' types (as JAX traces a
    jaxpr), and the nodes the gradient needs are replayed on the operands themselves,
    building graph nodes for Values and running eagerly (recording a tape when gradients
    are on) for tensors. For fused ops whose gradient of the gradient is rarely needed.
    A cotangent given as None counts as zero (no seed)."""
    scratch = Graph("composite_vjp")
    with scratch:
        phs = [scratch.add_input(f"i{k}", TensorType(tuple(x.shape), x.dtype))
               for k, x in enumerate(ins)]
        outs = formula(*phs)
        ct_phs = [scratch.add_input(f"c{k}", TensorType(tuple(o.shape), o.dtype))
                  for k, o in enumerate(outs)]
        seeds: Dict[object, object] = {}
        for o, c, ct in zip(outs, ct_phs, cts):
            if ct is not None and not is_zero_cotangent(ct):
                k = value_key(o)      # an output returned twice gets both cotangents
                seeds[k] = c if k not in seeds else seeds[k] + c
        wrt = [p for p, need in zip(phs, needs) if need]
        got = backward_pass(list(scratch.nodes), seeds, wrt=wrt)
    wanted = [got.get(value_key(p)) if need else None for p, need in zip(phs, needs)]
    # the nodes the wanted gradients depend on, in order (not the formula's own outputs)
    needed, stack = set(), [w.node for w in wanted if w is not None and w.node is not None]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(x.node for x in node.inputs if x.node is not None)
    env = dict(zip(phs, ins))
    env.update((p, c) for p, c in zip(ct_phs, cts) if c is not None)
    for node in scratch.nodes:
        if node not in needed:
            continue
        if node.op.constant:
            value = node.attrs["value"]
            env[node.outputs[0]] = getattr(value, "array", value)
            continue
        res = node.op(*[env[x] for x in node.inputs], **node.attrs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(node.outputs, res):
            env[o] = r
    return [None if w is None else env[w] for w in wanted]
