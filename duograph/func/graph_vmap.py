"""vmap on graph Values: the function is traced once on per-example placeholders into a
scratch graph, and its nodes are replayed on the batched Values with the ops' batching rules
(``graphlib.batching``), so the batched graph is an ordinary graph (printed, optimised, run)
built by the same rules as eager vmap."""
from __future__ import annotations

from ..graphlib.batching import apply_rule, ensure_batched
from ..graphlib.errors import GraphError
from ..graphlib.ir import Graph, Value
from ..graphlib.registry import get_op
from ..graphlib.types import TensorType
from ._tree import tree_flatten, tree_unflatten
from .batched import _warn_fallback
from .batch_io import Batched, _move, _name, _unwrap


def _random(node, vals, batched, size, randomness):
    op, attrs = node.op, dict(node.attrs)
    attrs.pop("stream", None)
    if randomness == "error":
        raise RuntimeError(
            f"vmap: called random operation {op.name} while in randomness error mode. Please "
            "either use the 'same' or 'different' randomness flags on vmap or perform the "
            "randomness operation out of vmap")
    if "shape" in attrs:
        if randomness == "same":
            return op(*vals, **attrs), False
        return op(*vals, **dict(attrs, shape=(size,) + tuple(attrs["shape"]))), True
    if randomness == "different":
        vals = list(vals)
        vals[0] = ensure_batched(vals[0], batched[0], size)
        return op(*vals, **attrs), True
    if any(batched[1:]):
        raise RuntimeError(f"vmap: {op.name} with randomness='same' and a batched seed is "
                           "not supported: pass the seed with in_dims=None")
    if batched[0]:      # one draw shared by the batch (see batched._random)
        p = vals[0]
        u = get_op("uniform")(*vals[1:], shape=tuple(p.shape[1:]), low=0.0, high=1.0,
                              dtype=p.dtype)
        return get_op("cast")(get_op("lt")(u, p), dtype=p.dtype), True
    return op(*vals, **attrs), False


def replay(nodes, env: dict, size: int, randomness: str = "error") -> None:
    """Emit ``nodes`` (a scratch graph's, in order) on the current operands: ``env`` maps
    each scratch Value to ``(value, batched)`` and receives the nodes' outputs."""
    for node in nodes:
        ins = [env[x] for x in node.inputs]
        vals = [v for v, _ in ins]
        batched = tuple(b for _, b in ins)
        if node.op.random:
            out, b = _random(node, vals, batched, size, randomness)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            env.update((o, (r, b)) for o, r in zip(node.outputs, outs))
            continue
        if True not in batched:
            out = node.op(*vals, **node.attrs)
            flag = False
        else:
            out, fell_back = apply_rule(node.op, vals, batched, dict(node.attrs), size)
            if fell_back:
                _warn_fallback(node.op)
            flag = True
        outs = out if isinstance(out, (tuple, list)) else (out,)
        env.update((o, (r, flag)) for o, r in zip(node.outputs, outs))


def vmap_values(func, leaves, spec, dims, size, out_dims, randomness, kwargs):
    """vmap's graph path (see the module docstring)."""
    scratch = Graph(f"vmap_{_name(func)}")
    env = {}
    with scratch:
        phs = []
        for k, (x, d) in enumerate(zip(leaves, dims)):
            if type(x) is not Value:
                phs.append(x)
                continue
            shape = tuple(x.shape)
            if d is not None:
                d = d % len(shape)
                shape = shape[:d] + shape[d + 1:]
            ph = scratch.add_input(f"x{k}", TensorType(shape, x.dtype))
            env[ph] = (_move(x, d, 0), True) if d is not None else (x, False)
            phs.append(ph)
        try:
            out = func(*tree_unflatten(phs, spec), **kwargs)
        except GraphError as e:
            if "different graphs" in str(e):
                raise GraphError(f"vmap({_name(func)}) on graph Values: the function reads a "
                                 f"Value of another graph (a closure); pass it as an argument "
                                 f"with in_dims=None\n{e}") from None
            raise
    outer = next(x.graph for x in leaves if type(x) is Value)
    for v in scratch.state:     # state the function read: the outer graph's, shared
        if v in scratch.bindings:
            env[v] = (outer.bind_state(scratch.bindings[v]), False)
        elif v.name == "rng_seed":
            env[v] = (outer.seed_state(), False)
        else:
            env[v] = (outer.add_state(f"{v.name}_vmap{outer.id}", scratch.state_init[v]),
                      False)
    replay(list(scratch.nodes), env, size, randomness)
    flat, out_spec = tree_flatten(out)
    mapped = []
    for o in flat:
        if type(o) is Value and o in env:
            v, b = env[o]
            mapped.append(Batched(v) if b else v)
        else:
            mapped.append(o)
    return _unwrap(func, tree_unflatten(mapped, out_spec), out_dims, -1, size)



def vmap_graph(graph: Graph, batch_size: int, in_dims=0, out_dims=0,
               randomness: str = "error") -> Graph:
    """A new graph mapping ``graph`` over ``batch_size`` examples, as a graph-to-graph
    transform: input ``i`` gains the batch dim at ``in_dims`` (an int for every input, or
    one entry per input; None: shared by every example) and each output carries it at
    ``out_dims`` (likewise). The nodes are replayed with the ops' batching rules, so the
    result is an ordinary graph to print, optimise (O2) and run. Graphs with state inputs
    are refused: vmap the function that builds them instead."""
    if graph.state:
        raise GraphError(f"vmap_graph: graph {graph.name!r} has state inputs; vmap the "
                         "function that builds it instead (state is shared by the examples)")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"vmap_graph: expected a positive int batch_size, found "
                         f"{batch_size!r}")
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    ins = list(in_dims) if isinstance(in_dims, (tuple, list)) else [in_dims] * n_in
    outs = list(out_dims) if isinstance(out_dims, (tuple, list)) else [out_dims] * n_out
    if len(ins) != n_in or len(outs) != n_out:
        raise ValueError(f"vmap_graph: graph {graph.name!r} has {n_in} inputs and {n_out} "
                         f"outputs; found {len(ins)} in_dims and {len(outs)} out_dims")
    new = Graph(f"{graph.name}_vmapped")
    env = {}
    with new:
        for v, d in zip(graph.inputs, ins):
            shape = tuple(v.shape)
            if d is None:
                env[v] = (new.add_input(v.name, v.type), False)
                continue
            if not isinstance(d, int) or not -len(shape) - 1 <= d <= len(shape):
                raise ValueError(f"vmap_graph: in_dim {d!r} for input {v.name!r} of rank "
                                 f"{len(shape)}: expected an int in [{-len(shape) - 1}, "
                                 f"{len(shape)}] or None")
            d = d % (len(shape) + 1)
            batched_shape = shape[:d] + (batch_size,) + shape[d:]
            ph = new.add_input(v.name, TensorType(batched_shape, v.dtype))
            env[v] = (_move(ph, d, 0), True)
        replay(list(graph.nodes), env, batch_size, randomness)
        results = []
        for o, d in zip(graph.outputs, outs):
            value, batched = env[o]
            if d is None:
                if batched:
                    raise ValueError(f"vmap_graph: output {o!r} depends on the batch, so its "
                                     "out_dim cannot be None")
                results.append(value)
                continue
            if not batched:     # the same for every example: broadcast
                value = get_op("expand")(value, shape=(batch_size,) + tuple(value.shape))
            results.append(_move(value, 0, d))
    new.outputs = results
    return new
