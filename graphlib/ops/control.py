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

import threading
from typing import Callable, Sequence

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..autodiff import composite_vjp, is_zero_cotangent
from ..dispatch import as_value, operand_dtype
from ..dtypes import default_dtype_for
from ..errors import DuographError, GraphError, ShapeError, located
from ..ir import Graph, Region, Value, current_graph
from ..registry import OpDef, register
from ..types import RUNTIME_DIM, TensorType, eval_dim, solve_dim
from .creation import zeros_like
from .elementwise import cast
from .fused import run_ops
from .shape import cat, index_select, reshape


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


call_op = register(OpDef("call", _infer, _reference(_call_region_kernel), _vjp,
                         multi_output=True, region_kernel=_call_region_kernel,
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


# -- control flow: cond, scan, while_loop, fori_loop --------------------------------------------
#
# Each is an op whose bodies are Regions in its attributes. The public functions trace the
# user's Python functions once, on placeholders of the operands' types, into those regions;
# the values a body reads from outside (a weight, an outer Value, an eager Parameter) are
# captured as extra region inputs and passed to the node as explicit operands, so gradients
# reach them. The op then dispatches like any other: a node in graph mode, a kernel run (and
# one tape node) eagerly, one recorded node under dg.record / dg.compile.

def _fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


# pytrees: tuples, lists, dicts (keys sorted, as JAX) and namedtuples of tensors; None is an
# empty subtree
def tree_flatten(tree) -> tuple:
    """``(leaves, treedef)`` of a nested tuple/list/dict/namedtuple structure."""
    leaves: list = []

    def walk(t):
        if t is None:
            return ("none",)
        if isinstance(t, tuple) and hasattr(t, "_fields"):
            return ("namedtuple", type(t), tuple(walk(c) for c in t))
        if isinstance(t, (tuple, list)):
            return (type(t).__name__, tuple(walk(c) for c in t))
        if isinstance(t, dict):
            keys = sorted(t)
            return ("dict", tuple(keys), tuple(walk(t[k]) for k in keys))
        leaves.append(t)
        return ("leaf",)
    return leaves, walk(tree)


def tree_unflatten(treedef: tuple, leaves: Sequence):
    """The structure ``treedef`` describes, holding ``leaves`` in order."""
    it = iter(leaves)

    def build(d):
        kind = d[0]
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        if kind == "namedtuple":
            return d[1](*[build(c) for c in d[2]])
        if kind == "dict":
            return {k: build(c) for k, c in zip(d[1], d[2])}
        items = [build(c) for c in d[1]]
        return tuple(items) if kind == "tuple" else items
    return build(treedef)


def _count_leaves(treedef: tuple) -> int:
    kind = treedef[0]
    if kind == "leaf":
        return 1
    if kind == "none":
        return 0
    kids = treedef[1] if kind in ("tuple", "list") else treedef[2]
    return sum(_count_leaves(c) for c in kids)


def _describe_tree(treedef: tuple) -> str:
    kind = treedef[0]
    if kind == "leaf":
        return "*"
    if kind == "none":
        return "None"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_describe_tree(c)}"
                               for k, c in zip(treedef[1], treedef[2])) + "}"
    kids = treedef[2] if kind == "namedtuple" else treedef[1]
    inner = ", ".join(_describe_tree(c) for c in kids)
    return f"[{inner}]" if kind == "list" else f"({inner}{',' if len(kids) == 1 else ''})"


def _type_of(x, what: str) -> TensorType:
    """The tensor type of one operand leaf (a Value, a tensor, an array or a number)."""
    if isinstance(x, (bool, int, float)):
        return TensorType((), default_dtype_for(x))
    shape, dtype = getattr(x, "shape", None), operand_dtype(x)
    if shape is None or dtype is None:
        raise TypeError(located(f"{what}: expected tensors (or tuples, lists and dicts of "
                                f"them), found {type(x).__name__}"))
    return TensorType(tuple(shape), dtype)


def _leaf_operand(x):
    """Python numbers among the operands become arrays of their default dtype (a body sees
    a 0-d tensor, as in JAX)."""
    if isinstance(x, (bool, int, float)):
        return np.asarray(x, dtype=default_dtype_for(x))
    return x


class Captures:
    """What a body being traced reads from outside: each outside object (a Value of an
    enclosing graph, an eager tensor) becomes one new region input, once."""

    def __init__(self):
        self.outer: list = []       # the outside objects, in capture order
        self.inner: dict = {}       # outside object (hashed by identity) -> region input

    def capture(self, graph: Graph, x) -> Value:
        v = self.inner.get(x)
        if v is None:
            t = x.type if isinstance(x, Value) else _type_of(x, graph.name)
            v = graph.add_input(f"cap{len(self.outer)}", t)
            self.outer.append(x)
            self.inner[x] = v
        return v


class _Body:
    """One traced body: its graph, captures and output structure."""

    def __init__(self, graph, captures, out_leaves, out_def, fn):
        self.graph, self.captures = graph, captures
        self.out_leaves, self.out_def, self.fn = out_leaves, out_def, fn

    @property
    def out_types(self):
        return [v.type for v in self.out_leaves]


def _trace(fn, types: Sequence[TensorType], make_args: Callable, what: str) -> _Body:
    """Trace ``fn(*make_args(placeholders))`` into a graph that captures outside values."""
    g = Graph(f"{what}_{getattr(fn, '__name__', 'fn')}".replace("<", "").replace(">", ""))
    caps = g.captures = Captures()
    try:
        with g:
            phs = [g.add_input(f"i{k}", t) for k, t in enumerate(types)]
            try:
                res = fn(*make_args(phs))
            except (TypeError, ValueError, IndexError, RuntimeError,
                    NotImplementedError) as e:
                raise _in_body(e, what, fn) from e
            leaves, out_def = tree_flatten(res)
            vals = []
            for x in leaves:
                try:
                    vals.append(as_value(x, g))
                except TypeError:
                    raise TypeError(located(
                        f"{what}: {_fn_name(fn)} must return tensors (or tuples, lists and "
                        f"dicts of them), found {type(x).__name__}")) from None
    finally:
        g.captures = None
    g.outputs = vals
    return _Body(g, caps, vals, out_def, fn)


def _in_body(e: Exception, what: str, fn) -> Exception:
    """``e`` (raised by ``fn`` while it was traced) with a message that says so: ``scan: in
    step (traced on placeholders): <the message>``; the same type, or ``e`` itself with a
    note when its type takes more than a message."""
    msg = f"{what}: in {_fn_name(fn)} (traced on placeholders): {e}"
    try:
        new = type(e)(msg)
    except Exception:       # noqa: BLE001 - a constructor that wants other arguments
        e.add_note(msg)
        return e
    return new


def _join(bodies: Sequence[_Body], n_fixed: int) -> list:
    """Give every body the same inputs: its ``n_fixed`` own ones, then every value any of
    them captured (in one order). Returns the captured outside objects."""
    outer, seen = [], set()
    for b in bodies:
        for x in b.captures.outer:
            if x not in seen:
                seen.add(x)
                outer.append(x)
    for b in bodies:
        g = b.graph
        extra = []
        for k, x in enumerate(outer):
            v = b.captures.inner.get(x)
            if v is None:
                t = x.type if isinstance(x, Value) else _type_of(x, g.name)
                v = g.add_input(f"unused{k}", t)
            extra.append(v)
        g.inputs = list(g.inputs[:n_fixed]) + extra
    return outer


def _check_same(what: str, fn_a, def_a, types_a, fn_b, def_b, types_b, role: str) -> None:
    if def_a != def_b:
        raise GraphError(located(
            f"{what}: {role} of {_fn_name(fn_a)} has structure {_describe_tree(def_a)}, but "
            f"{_fn_name(fn_b)} gives {_describe_tree(def_b)}; they must match"))
    for k, (a, b) in enumerate(zip(types_a, types_b)):
        if a != b:
            raise GraphError(located(
                f"{what}: {role} leaf {k} of {_fn_name(fn_a)} is {a!r}, but {_fn_name(fn_b)} "
                f"gives {b!r}; shapes and dtypes must match"))


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


def _region_vjp(region: Region, xs: Sequence, cts: Sequence, needs: Sequence[bool]) -> list:
    """The gradients of the region's inputs (None where not needed) for cotangents ``cts``
    of its outputs (None counts as zero)."""
    return composite_vjp(lambda *a: replay(region, a), list(cts), list(xs), list(needs))


# -- eager calls: the Python functions run ------------------------------------------------------
#
# Eagerly a control-flow call still puts one node on the tape (and into open dg.record
# blocks), holding the traced regions that its gradient and a recording need; but the values
# come from running the user's Python functions on eager tensors (the taken branch, each
# iteration's body), as PyTorch users expect: print() and other Python side effects in a body
# run once per execution (besides once when the body is traced), and a breakpoint in a body
# stops with real tensors. They run with autograd and recording paused (the node stands for
# them), through what the eager engine registers with ``set_eager_support`` (graphlib imports
# no engine folder). The op's kernel receives the call's ``compute`` through a thread-local
# and runs it instead of the regions.

_eager = None
_pending = threading.local()


def set_eager_support(support) -> None:
    """Registered by the eager engine: ``support`` has ``grad_needed(objs) -> bool`` (autograd
    would record a node reading these operands), ``paused()`` (a context in which eager ops
    neither go on the tape nor into record() blocks), ``tensor(array)`` (an eager tensor over
    an array) and ``array(x)`` (the array of an eager tensor, array or number)."""
    global _eager
    _eager = support


def _eager_call(objs) -> bool:
    """Whether this call runs eagerly: no graph is being built or traced, no Value among the
    operands and at least one eager tensor (operands that are all numpy arrays, as an
    importer folding constants passes, run the regions)."""
    if _eager is None or current_graph() is not None:
        return False
    return not any(isinstance(x, Value) for x in objs) and any(
        hasattr(x, "requires_grad") for x in objs)


class _internal:
    """The loops a gradient rule builds (a reverse scan, a reverse while loop) run their
    traced regions eagerly too: their functions are ours, with no side effects to show, and
    a region runs without re-tracing the composite vjps inside it at every step."""

    def __enter__(self):
        _pending.internal = getattr(_pending, "internal", 0) + 1

    def __exit__(self, *exc):
        _pending.internal -= 1


class _UserError(DuographError):
    """What a user's function raised while an eager loop or branch ran it, carried through
    the kernel call (which reports any other exception as a KernelError) to ``_apply_with``,
    which raises it again as it was: a ValueError from a body is a ValueError on every trip,
    as when PyTorch runs the same Python."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def _run_user(fn, args, what: str, role: str, when: str = ""):
    """``fn(*args)``, a user's function run eagerly by ``what`` (while_loop, scan, cond);
    an exception it raises leaves the kernel untouched (see ``_UserError``), with a note
    naming the function and ``when`` (the trip)."""
    try:
        return fn(*args)
    except _UserError:
        raise
    except Exception as e:
        if hasattr(e, "add_note"):          # Python 3.11+
            e.add_note(f"(raised by {what}'s {role} {_fn_name(fn)}{when}, run eagerly)")
        raise _UserError(e) from None


def _apply_with(op, operands, attrs, compute):
    """``op(*operands, **attrs)``; with ``compute`` (an eager call) the kernel returns
    ``compute(xp, arrays)`` instead of running the regions (not for the loops a gradient
    rule builds: ``_internal``). An exception from the user's functions is raised as it
    was (``_UserError``)."""
    if compute is None or getattr(_pending, "internal", 0):
        return op(*operands, **attrs)
    _pending.compute = compute
    try:
        return op(*operands, **attrs)
    except _UserError as wrapped:
        error = getattr(wrapped, "error", None)
        if not isinstance(error, BaseException):   # rebuilt from its message on the way
            raise
    finally:
        _pending.compute = None
    raise error            # (outside the handler: not chained to the carrier)


def _take_compute():
    fn = getattr(_pending, "compute", None)
    if fn is not None:
        _pending.compute = None
    return fn


def _eager_leaves(what, fn, res, want_def, want_types, role):
    """The leaves of ``res`` (what ``fn`` returned when run eagerly) as eager tensors, checked
    against the structure and types the traced function gave."""
    leaves, got_def = tree_flatten(res)
    if got_def != want_def:
        raise GraphError(located(
            f"{what}: {role} of {_fn_name(fn)} has structure {_describe_tree(got_def)} when run "
            f"eagerly, but {_describe_tree(want_def)} when traced; it must not change"))
    out = []
    for k, (x, t) in enumerate(zip(leaves, want_types)):
        a = _eager.array(x)
        if not hasattr(a, "shape"):
            a = np.asarray(a)
        if isinstance(x, (bool, int, float)) or (isinstance(a, np.ndarray) and not hasattr(
                x, "requires_grad")):
            a = a.astype(t.dtype, copy=False)
        if tuple(a.shape) != tuple(t.shape) or dtypes.as_dtype(str(a.dtype)) != t.dtype:
            raise GraphError(located(
                f"{what}: {role} leaf {k} of {_fn_name(fn)} is {dtypes.as_dtype(str(a.dtype))}"
                f"{list(a.shape)} when run eagerly, but {t!r} when traced"))
        out.append(x if hasattr(x, "requires_grad") else _eager.tensor(a))
    return out


# -- cond ---------------------------------------------------------------------------------------
def _cond_infer(types, attrs):
    pred = types[0]
    if pred.shape != ():
        raise ShapeError(f"cond: the predicate must be a scalar (shape []), found "
                         f"{list(pred.shape)}")
    t = attrs["true_branch"].infer(types[1:], "cond")
    f = attrs["false_branch"].infer(types[1:], "cond")
    if t != f:
        raise ShapeError(f"cond: the branches give different types: {t} and {f}")
    return t


def _cond_region_kernel(xp, bodies, pred, *arrays, out=None, true_branch: Region,
                        false_branch: Region):
    compute = _take_compute()
    if compute is not None:         # an eager call: the Python function of the branch runs
        return give_results(xp, compute(xp, pred, arrays), arrays, out)
    taken = true_branch if bool(pred) else false_branch
    return bodies(taken, arrays)(list(arrays), out)


def _cond_vjp(cts, ins, outs, attrs, needs):
    pred, ops = ins[0], list(ins[1:])
    n = len(ops)
    want = [i for i in range(n) if needs[i + 1]]
    live = [j for j, (o, c) in enumerate(zip(outs, cts))
            if dtypes.is_float(o.dtype) and not is_zero_cotangent(c)]
    if not want or not live:
        return [None] * len(ins)
    step_needs = [bool(needs[i + 1]) for i in range(n)]

    def branch_vjp(region):
        def vjp_branch(*args):
            xs, gs = args[:n], args[n:]
            full = [None] * len(outs)
            for j, g in zip(live, gs):
                full[j] = g
            got = _region_vjp(region, xs, full, step_needs)
            return tuple(got[i] if got[i] is not None else zeros_like(xs[i]) for i in want)
        return vjp_branch
    with _internal():
        res = cond(pred, branch_vjp(attrs["true_branch"]), branch_vjp(attrs["false_branch"]),
                   *ops, *[cts[j] for j in live])
    out = [None] * len(ins)
    for i, g in zip(want, res):
        out[i + 1] = g
    return out


def _cond_static_region(node, consts):
    """A constant predicate picks the region: constant folding inlines it."""
    pred = consts[0]
    if pred is None:
        return None
    region = node.attrs["true_branch" if bool(np.asarray(pred)) else "false_branch"]
    return region, list(node.inputs[1:])


cond_op = register(OpDef("cond", _cond_infer, _reference(_cond_region_kernel), _cond_vjp,
                         multi_output=True, region_kernel=_cond_region_kernel,
                         nondiff_inputs=(0,), static_region=_cond_static_region,
                         doc="run one of two regions on the operands, chosen by a scalar "
                             "predicate",
                         attrs=Attrs(true_branch=Attr("region"), false_branch=Attr("region"))))


def _is_python_bool(x) -> bool:
    return isinstance(x, (bool, int, np.bool_, np.integer)) and not isinstance(x, np.ndarray)


def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as one op (JAX's
    ``lax.cond``): both functions are traced once, into the node's two regions, and must
    return the same structure (a tensor, or tuples/lists/dicts of them) of the same shapes
    and dtypes. ``pred`` is a scalar tensor (bool or number); a Python bool just calls the
    chosen function. What the functions read from outside is passed to the node as extra
    operands. Works eagerly (the taken function runs on the tensors, with its Python side
    effects; one node on the tape and in dg.record), in graph mode
    and under ``dg.compile`` (recorded once whichever branch is taken); the gradient
    differentiates the taken branch, to any order."""
    for fn, role in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if not callable(fn):
            raise TypeError(located(f"cond: {role} must be callable, found "
                                    f"{type(fn).__name__}"))
    if _is_python_bool(pred):
        return (true_fn if pred else false_fn)(*operands)
    ptype = _type_of(pred, "cond")
    if ptype.shape != ():
        raise ShapeError(located(f"cond: the predicate must be a scalar (shape []), found "
                                 f"shape {list(ptype.shape)}"))
    leaves, in_def = tree_flatten(list(operands))
    leaves = [_leaf_operand(x) for x in leaves]
    types = [_type_of(x, "cond") for x in leaves]

    def args(phs):
        return tree_unflatten(in_def, phs)
    tb = _trace(true_fn, types, args, "cond")
    fb = _trace(false_fn, types, args, "cond")
    _check_same("cond", true_fn, tb.out_def, tb.out_types, false_fn, fb.out_def, fb.out_types,
                "the result")
    outer = _join([tb, fb], len(leaves))
    compute = None
    if _eager_call([pred, *leaves, *outer]):
        def compute(xp, p, arrays):
            fn, body = (true_fn, tb) if bool(p) else (false_fn, fb)
            args = tree_unflatten(in_def, [_eager.tensor(a) for a in arrays[:len(leaves)]])
            role = "true_fn" if fn is true_fn else "false_fn"
            with _eager.paused():
                res = _eager_leaves("cond", fn, _run_user(fn, args, "cond", role),
                                    body.out_def, body.out_types, "the result")
            return tuple(_eager.array(x) for x in res)
    res = _apply_with(cond_op, (pred, *leaves, *outer),
                      {"true_branch": Region(tb.graph), "false_branch": Region(fb.graph)},
                      compute)
    return tree_unflatten(tb.out_def, res)


# -- scan ---------------------------------------------------------------------------------------
def _scan_split(seq, attrs):
    nc, nx = attrs["n_carry"], attrs["n_xs"]
    return list(seq[:nc]), list(seq[nc:nc + nx]), list(seq[nc + nx:])


def _scan_infer(types, attrs):
    carry, xs, caps = _scan_split(types, attrs)
    length = attrs["length"]
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


def _checkpointed(length: int, reverse: bool, checkpoint: bool) -> bool:
    return bool(checkpoint) and not reverse and length >= 4


def _saved_rows(length: int, reverse: bool, checkpoint: bool) -> tuple:
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


scan_op = register(OpDef("scan", _scan_infer, _reference(_scan_region_kernel), _scan_vjp,
                         multi_output=True, region_kernel=_scan_region_kernel,
                         vjp_reads_output=True,      # the saved carries
                         loop_invariant_from=lambda node: (node.attrs["n_carry"]
                                                           + node.attrs["n_xs"]),
                         doc="loop a region over the leading dim of xs, threading a carry",
                         attrs=Attrs(body=Attr("region"), length=Attr(int, min=0),
                                     n_carry=Attr(int, min=0), n_xs=Attr(int, min=0),
                                     reverse=Attr(bool, default=False),
                                     checkpoint=Attr(bool, default=False),
                                     save=Attr(bool, default=False))))


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
    carries instead of O(length), one more forward; forward scans of length >= 4 only, the
    others save every carry)."""
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
    if not isinstance(length, int):
        raise ShapeError(located(f"scan: the length must be static, found the symbolic dim "
                                 f"{length!r}"))
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
    attrs = {"body": Region(body.graph), "length": length, "n_carry": nc,
             "n_xs": len(x_leaves), "reverse": bool(reverse)}
    if checkpoint:
        attrs["checkpoint"] = True
    compute = None
    if _eager_call([*c_leaves, *x_leaves, *outer]):
        # eagerly: fn runs each step on eager tensors; the carries the gradient needs are
        # saved when autograd will record the node
        if _eager.grad_needed([*c_leaves, *x_leaves, *outer]):
            attrs["save"] = True

        def compute(xp, carry, xs, stride, _y_types):
            def step(c, t):
                out = _run_user(fn, (tree_unflatten(c_def, c), tree_unflatten(
                    x_def, [_eager.tensor(x[t, ...]) for x in xs])), "scan", "f", f" at step {t}")
                leaves, got = tree_flatten(out)
                if got[0] not in ("tuple", "list") or len(got[1]) != 2:
                    raise GraphError(located(
                        f"scan: {_fn_name(fn)} must return a pair (carry, y), found the "
                        f"structure {_describe_tree(got)} when run eagerly"))
                new_c = _eager_leaves("scan", fn, out[0], c_def, c_types, "the carry")
                ys = _eager_leaves("scan", fn, out[1], y_def, y_types, "the y")
                return new_c, [_eager.array(y) for y in ys]
            with _eager.paused():
                return _scan_loop(xp, step, _eager.array, [_eager.tensor(a) for a in carry],
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


while_op = register(OpDef("while_loop", _while_infer, _reference(_while_region_kernel),
                          _while_vjp, multi_output=True, region_kernel=_while_region_kernel,
                          vjp_reads_output=True,     # saved trips, carries
                          loop_invariant_from=lambda node: node.attrs["n_carry"],
                          doc="apply the body region while the cond region is true",
                          attrs=Attrs(cond=Attr("region"), body=Attr("region"),
                                      n_carry=Attr(int, min=0),
                                      max_iterations=Attr(int, default=None, min=0),
                                      save=Attr(bool, default=False))))


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
        # eagerly: cond_fn and body_fn run each trip on eager tensors; a bounded loop that
        # autograd will record saves its trip count and carries for the gradient
        if max_iterations is not None and _eager.grad_needed([*leaves, *outer]):
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
            with _eager.paused():
                return _while_run(xp, test, step, _eager.array,
                                  [_eager.tensor(a) for a in carry], bound, save)
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
