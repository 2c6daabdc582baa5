"""How the control-flow ops (``cond``, ``scan``, ``while_loop``) turn Python functions into
regions and run them eagerly: operand trees (``tree_flatten``), tracing a function on
placeholders with its captured outside values (``Captures``), joining branch signatures, and
the eager engine's hook (``set_eager_support``). It registers no op.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

import numpy as np

from .. import dtypes
from ..autodiff import composite_vjp
from ..dispatch import as_value, operand_dtype
from ..dtypes import default_dtype_for
from ..errors import DuographError, GraphError, located
from ..ir import Graph, Region, Value, current_graph
from ..types import TensorType
from .call import replay


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


def eager_support():
    """What the eager engine registered with ``set_eager_support`` (None before it does): the
    ops read it when ``_eager_call`` has said a call runs eagerly."""
    return _eager


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
