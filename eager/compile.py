"""``dg.compile(fn)``: record eager code once, replay it through the graph runtime.

The first call runs ``fn`` eagerly inside ``record()`` (so it returns exactly what eager
returns) and builds a *specialisation*: a forward executable and, when inputs require grad,
a backward executable made by symbolic autodiff of the recorded graph. Later calls reuse it
while its guards hold:

- the input signature: shapes, dtypes, devices, requires_grad of tensor arguments, grad mode
  and the non-tensor arguments (which must be hashable);
- every Python decision taken from a tensor's value while recording (``bool(t)``,
  ``t.item()``, ``if t > 0``, ``while t.sum() < 100``, ``t.tolist()``, ``t.numpy()``,
  ``np.asarray(t)``): the forward executable also computes the tensors those decisions read,
  and if any now gives another answer the result is thrown away (state it wrote is restored)
  and ``fn`` is recorded again for the new path;
- for a module (or a bound method of one): the ``training`` flag of every submodule and the
  identity of its parameters and buffers;
- the shape, dtype and requires_grad of every tensor ``fn`` reads from outside.

So a compiled function never returns what the recorded path computes when Python would have
taken another path. Tensors that ``fn`` reads from outside (module parameters, closures) are
fed from the live objects on every call, and in-place changes ``fn`` makes to them or to its
arguments are written back. Random ops get fresh seeds from the global generator on every
call (so ``dg.manual_seed`` makes compiled code reproducible too). ``detach()`` and
``no_grad()`` inside ``fn`` cut gradients as they do eagerly; double backward
(``create_graph=True``) through a compiled function is refused with a clear error.
``fast.specializations`` lists what was built and why; at most ``max_specializations`` are
kept (least recently used dropped first).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, List, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.autodiff import backward_pass, value_key
from ..graphlib.ops.shape import reshape_op
from ..graphlib.registry import OpDef
from ..graphlib.transform import extract
from . import grad_mode
from .creation import draw_seed
from .guards import DecisionTracer, same_decision
from .record import Recorder
from .tensors import EagerNode, Tensor

_LEAF = object()


def _flatten(obj, leaves: list):
    """Nested tuples/lists/dicts of tensors -> (structure, tensors appended to leaves)."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return _LEAF
    if isinstance(obj, (tuple, list)):
        return (type(obj), tuple(_flatten(o, leaves) for o in obj))
    if isinstance(obj, dict):
        return (dict, tuple((k, _flatten(v, leaves)) for k, v in obj.items()))
    return ("const", obj)


def _unflatten(spec, leaves_iter):
    if spec is _LEAF:
        return next(leaves_iter)
    kind, body = spec
    if kind == "const":
        return body
    if kind is dict:
        return {k: _unflatten(v, leaves_iter) for k, v in body}
    items = [_unflatten(s, leaves_iter) for s in body]
    return kind(items) if kind is list else tuple(items)


class _Tracer(DecisionTracer):
    """Notes each decision in the recorder too, so it is checked on the value the tensor
    had when Python read it."""

    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec

    def note(self, tensor, kind, value, source=None, what=None):
        super().note(tensor, kind, value, source, what)
        self.rec._note_use(tensor)


def _hashable(spec):
    try:
        hash(spec)
    except TypeError as e:
        raise TypeError(f"compile: non-tensor arguments must be hashable to be guarded on "
                        f"({e})") from None
    return spec


class Specialization:
    """One recorded path: executables, guards, and how to rebuild the outputs."""

    def __init__(self, reason: str, key):
        self.reason = reason
        self.key = key
        self.forward = None
        self.backward = None
        self.decisions: List[tuple] = []      # (kind, value, source, what)
        self.attributes: List[tuple] = []     # (object, attribute, value) Python read
        self.externals: List[Tensor] = []
        self.ext_signature: tuple = ()        # (shape, dtype, requires_grad) of externals
        self.seed_names: List[str] = []       # inputs fed a fresh seed on every call
        self.arg_updates: List[int] = []      # arguments fn modified in place (positions)
        self.updated_holders: List[Tensor] = []  # bound tensors the forward writes into
        self.diff_outs: List[int] = []        # outputs that carry a gradient
        self.out_spec = None
        self.n_out = 0
        self.n_dec = 0
        self.saved_sources: List[tuple] = []  # for each backward input: ("fwd", i) / ("ct", i)
        self.grad_inputs: List[int] = []      # positions (in args + externals) with gradients
        self.op: Optional[OpDef] = None
        self.calls = 0

    def describe(self) -> str:
        return f"{self.reason} [{len(self.decisions)} guards, {self.calls} calls]"


class CompiledFunction:
    """The callable ``dg.compile`` returns."""

    def __init__(self, fn, max_specializations: int = 16, passes=None):
        self.passes = passes
        self.fn = fn
        self.max_specializations = int(max_specializations)
        self._cache: "OrderedDict[Any, List[Specialization]]" = OrderedDict()
        self._history: List[str] = []
        self._last: Optional[Specialization] = None     # the specialisation run last
        functools.update_wrapper(self, fn, updated=())

    # -- introspection -------------------------------------------------------------------------
    @property
    def specializations(self) -> List[str]:
        """Descriptions of the specialisations currently cached, oldest first."""
        return [s.describe() for specs in self._cache.values() for s in specs]

    @property
    def recompile_reasons(self) -> List[str]:
        """Why each specialisation (including evicted ones) was recorded, in order."""
        return list(self._history)

    def __len__(self) -> int:
        return sum(len(s) for s in self._cache.values())

    @property
    def memory_plan(self):
        """The memory plan of the forward executable of the last call's specialisation (None
        before the first call, or when its pipeline is not planned: see ``passes``)."""
        last = self._last
        return None if last is None or last.forward is None else last.forward.memory_plan

    @property
    def backward_memory_plan(self):
        """The memory plan of the last call's backward executable, if it has one."""
        last = self._last
        return None if last is None or last.backward is None else last.backward.memory_plan

    @property
    def kernel_count(self) -> int:
        """Kernels a call of the last specialisation launches: forward, plus backward when
        it has one (0 before the first call)."""
        last = self._last
        if last is None or last.forward is None:
            return 0
        n = last.forward.kernel_count
        return n + (last.backward.kernel_count if last.backward is not None else 0)

    # -- calling -------------------------------------------------------------------------------
    def _module_state(self):
        """For a module (or its bound method): training flags and the identity of its
        parameters and buffers (replacing one must not leave a stale graph bound)."""
        module = self.fn if hasattr(self.fn, "training") else getattr(
            self.fn, "__self__", None)
        if module is None or not hasattr(module, "modules") or not hasattr(
                module, "training"):
            return None
        subs = list(module.modules())
        tensors = list(module.parameters()) + list(module.buffers())
        return (tuple(bool(m.training) for m in subs), tuple(id(t) for t in tensors))

    def __call__(self, *args, **kwargs):
        leaves: list = []
        spec = _flatten((args, kwargs), leaves)
        key = (grad_mode.is_grad_enabled(), _hashable(spec),
               tuple((t.shape, t.dtype, t.device, t.requires_grad) for t in leaves),
               self._module_state())
        reason = None
        specs = self._cache.get(key)
        if specs:
            self._cache.move_to_end(key)
            for s in specs:
                result, failed = self._replay(s, leaves)
                if failed is None:
                    self._last = s
                    return result
                reason = failed
        if reason is None:
            reason = self._signature_reason(key)
        return self._record(key, spec, leaves, args, kwargs, reason)

    def _signature_reason(self, key) -> str:
        if not self._cache:
            return "first call"
        old = next(reversed(self._cache))
        if old[0] != key[0]:
            return f"grad mode changed to {key[0]}"
        if len(old[2]) != len(key[2]):
            return f"number of tensor arguments changed ({len(old[2])} -> {len(key[2])})"
        for i, (a, b) in enumerate(zip(old[2], key[2])):
            for what, x, y in zip(("shape", "dtype", "device", "requires_grad"), a, b):
                if x != y:
                    return f"tensor argument {i}: {what} {x} -> {y}"
        if old[3] != key[3]:
            if old[3] is not None and key[3] is not None and old[3][0] != key[3][0]:
                return "module training mode changed (train()/eval())"
            return "module parameters or buffers were replaced"
        return "non-tensor arguments changed"

    def _record(self, key, spec, leaves, args, kwargs, reason):
        s = Specialization(reason, key)
        names = {}
        for i, t in enumerate(leaves):
            names.setdefault(id(t), f"arg{i}")
        rec = Recorder(getattr(self.fn, "__name__", "compiled"),
                       {n: t for t, n in ((t, names[id(t)]) for t in leaves)}, bind=True)
        with rec, _Tracer(rec) as tracer:
            result = self.fn(*args, **kwargs)
        out_leaves: list = []
        s.out_spec = _flatten(result, out_leaves)
        s.attributes = list(tracer.attributes.values())
        self._build(s, rec, leaves, out_leaves, tracer.decisions)
        specs = self._cache.setdefault(key, [])
        specs.insert(0, s)
        self._cache.move_to_end(key)
        self._history.append(reason)
        while len(self) > self.max_specializations:
            oldest = next(iter(self._cache))
            self._cache[oldest].pop()
            if not self._cache[oldest]:
                del self._cache[oldest]
        s.calls = 1
        self._last = s
        return result

    def _build(self, s: Specialization, rec: Recorder, leaves, out_leaves, decisions):
        g = rec.graph
        placeholders = {id(t): v for v, t in rec.external}
        # an argument's placeholder (its value may since have been replaced in place)
        arg_values = [placeholders[id(t)] if id(t) in placeholders else rec.value_or_input(t)
                      for t in leaves]
        outs = [rec.value_or_input(t) for t in out_leaves]
        dec_values = list(rec.decision_values)
        for t, kind, value, source, what in decisions:
            s.decisions.append((kind, value, source, what))
        ext = [(v, t) for v, t in rec.external if not any(v is a for a in arg_values)]
        s.externals = [t for _, t in ext]        # bound state: read live by the executable
        s.ext_signature = tuple((t.shape, t.dtype, t.requires_grad) for t in s.externals)
        s.seed_names = [v.name for v, _ in rec.seeds]
        inputs = arg_values + [v for v, _ in ext]
        input_tensors = list(leaves) + s.externals
        s.input_names = [v.name for v in arg_values]
        s.n_out, s.n_dec = len(outs), len(dec_values)
        updates = []
        for old, final, t in rec.input_updates:
            pos = next(i for i, a in enumerate(arg_values) if a is old)
            if t.requires_grad or final.node is not None and rec.carries_gradient(final):
                raise RuntimeError(
                    f"compile: argument {pos} (shape {list(t.shape)}) is modified in place "
                    "inside the compiled function and takes part in autograd; compiled "
                    "functions only write back arguments that need no gradient")
            s.arg_updates.append(pos)
            updates.append(final)
        s.updated_holders = [g.bindings[st] for st, _ in g.updates.values()
                             if st in g.bindings]
        wants_grad = grad_mode.is_grad_enabled() and any(
            t.requires_grad for t in input_tensors)
        diff_outs = [i for i, (o, t) in enumerate(zip(outs, out_leaves))
                     if dtypes.is_float(o.dtype) and t.requires_grad]
        s.diff_outs = diff_outs
        saved: List = []
        if wants_grad and diff_outs:
            s.grad_inputs = [i for i, t in enumerate(input_tensors)
                             if t.requires_grad and dtypes.is_float(t.dtype)]
            n_forward = len(g.nodes)
            with g:
                cts = {}
                ct_vals = []
                for i in diff_outs:
                    ct = g.add_input(f"ct{i}", outs[i].type)
                    ct_vals.append(ct)
                    k = value_key(outs[i])
                    cts[k] = ct if k not in cts else cts[k] + ct
                wrt = [inputs[i] for i in s.grad_inputs]
                got = backward_pass(g.nodes[:n_forward], cts, wrt)
                from ..graphlib.functional import zeros_like
                grads = [got.get(value_key(w)) for w in wrt]
                grads = [gv if gv is not None else zeros_like(w) for gv, w in zip(grads, wrt)]
                made = {id(o) for n in g.nodes[n_forward:] for o in n.outputs}
                # a gradient that is an input as it is (y = x: dx = ct) gets a node of its own
                grads = [gv if id(gv) in made else reshape_op(gv, shape=tuple(gv.shape))
                         for gv in grads]
            bwd_nodes = g.nodes[n_forward:]
            bg, boundary, mapping = extract(bwd_nodes, f"{g.name}_backward")
            bg.outputs = [mapping[gv] for gv in grads]
            ct_ids = {id(c): diff_outs[j] for j, c in enumerate(ct_vals)}
            for b in boundary:
                if id(b) in ct_ids:
                    s.saved_sources.append(("ct", ct_ids[id(b)]))
                else:
                    s.saved_sources.append(("fwd", len(saved)))
                    saved.append(b)
            s.backward = bg.compile(outputs=bg.outputs, passes=self.passes)
            s.op = self._make_op(s)
        s.forward = g.compile(outputs=outs + dec_values + saved + updates,
                              passes=self.passes)
        s.n_saved = len(saved)

    def _make_op(self, s: Specialization) -> OpDef:
        def vjp(cts, ins, outs, attrs, needs):
            if grad_mode.is_grad_enabled():
                raise RuntimeError(
                    f"double backward (create_graph=True) through the compiled function "
                    f"{getattr(self.fn, '__name__', 'fn')!r} is not supported: its backward "
                    "runs as a compiled graph that autograd cannot differentiate again; call "
                    "the function uncompiled for higher-order gradients")
            saved = attrs["saved"]
            feeds = {}
            for (kind, j), name in zip(s.saved_sources, s.backward.graph.inputs):
                arr = cts[j].data if kind == "ct" else saved[j]
                feeds[name.name] = arr
            results = s.backward.run(feeds)
            grads = [None] * len(ins)
            for slot, arr in enumerate(results):
                grads[s.grad_inputs[slot]] = Tensor._wrap(arr)
            return grads

        def no_kernel(*a, **k):
            raise RuntimeError("a compiled function node runs through its executables")

        def no_infer(types, attrs):
            raise RuntimeError("a compiled function node has no IR form")

        name = f"compiled:{getattr(self.fn, '__name__', 'fn')}"
        return OpDef(name, no_infer, no_kernel, vjp, nondiff_inputs=())

    def _replay(self, s: Specialization, leaves):
        for obj, name, value in s.attributes:
            now = getattr(obj, name, None)
            if now != value:
                return None, (f"guard failed: {type(obj).__name__}.{name} was {value!r} "
                              f"when recorded, now {now!r}")
        for i, (t, sig) in enumerate(zip(s.externals, s.ext_signature)):
            now = (t.shape, t.dtype, t.requires_grad)
            if now != sig:
                what = ("shape", "dtype", "requires_grad")
                diff = next(f"{w} {a} -> {b}" for w, a, b in zip(what, sig, now) if a != b)
                return None, f"a tensor read from outside the function changed: {diff}"
        feeds = {name: t.data for name, t in zip(s.input_names, leaves)}
        for name in s.seed_names:
            feeds[name] = np.asarray(draw_seed(), dtype=np.int64)
        inputs = list(leaves) + s.externals
        backup = None
        if s.decisions and s.updated_holders:
            # the executable writes state as it runs: undo that if a guard fails
            backup = [h.data.copy() for h in s.updated_holders]
        res = s.forward.run(feeds)
        outs = res[:s.n_out]
        for (kind, value, source, what), arr in zip(
                s.decisions, res[s.n_out:s.n_out + s.n_dec]):
            if kind == "data":
                now = arr
            else:
                now = bool(arr) if kind == "bool" else np.asarray(arr).reshape(()).item()
            if not same_decision(kind, value, now):
                if backup is not None:
                    for h, old in zip(s.updated_holders, backup):
                        h.data[...] = old
                where = f" at {source}" if source else ""
                if kind == "data":
                    return None, f"guard failed: {what} of a tensor{where} read other data"
                return None, (f"guard failed: {what} of a tensor{where} was {value!r}, "
                              f"now {now!r}")
        first = s.n_out + s.n_dec
        saved = res[first:first + s.n_saved]
        for pos, arr in zip(s.arg_updates, res[first + s.n_saved:]):
            t = leaves[pos]
            t.data[...] = arr
            t._version[0] += 1
        for h in s.updated_holders:
            h._version[0] += 1
        tensors = [Tensor._wrap(a) for a in outs]
        if s.op is not None:
            for i in s.diff_outs:
                tensors[i].requires_grad = True
            node = EagerNode(s.op, tuple(inputs), {"saved": saved}, tensors, None, True)
            for i, t in enumerate(tensors):
                if t.requires_grad:
                    t.grad_fn, t._index = node, i
        s.calls += 1
        result = _unflatten(s.out_spec, iter(tensors))
        return result, None


def compile(fn=None, *, max_specializations: int = 16, passes=None):
    """Compile ``fn`` (or a module: its ``__call__``) to replay through the graph runtime.

    Usable as ``fast = dg.compile(fn)`` or as a decorator ``@dg.compile``.
    """
    if fn is None:
        return lambda f: compile(f, max_specializations=max_specializations, passes=passes)
    if not callable(fn):
        raise TypeError(f"compile: expected a function or module, found {type(fn).__name__}")
    return CompiledFunction(fn, max_specializations, passes)
