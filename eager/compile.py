"""``dg.compile(fn)``: record eager code once, replay it through the graph runtime.

The first call runs ``fn`` eagerly inside ``record()`` (so it returns exactly what eager
returns) and builds a *specialisation*: a forward executable and, when inputs require grad,
a backward executable made by symbolic autodiff of the recorded graph. Later calls reuse it
while its guards hold:

- the input signature: shapes, dtypes, devices, requires_grad of tensor arguments, grad mode
  and the non-tensor arguments, by type and value (``2``, ``2.0`` and ``True`` differ, so do
  ``0.0`` and ``-0.0``) or, for other objects, by identity;
- every Python value ``fn`` can read (see ``guards.GuardBuilder``): the globals, closure
  cells and default arguments of the user functions it reaches, and the attributes of the
  modules and objects it reaches (an ``nn.Module``: all of its attributes, parameters,
  buffers, submodules and hooks), by type and value or by identity and contents. They are
  taken before the recording runs and checked on every call by one generated function;
- every Python decision taken from a tensor's value while recording (``bool(t)``,
  ``t.item()``, ``if t > 0``, ``while t.sum() < 100``, ``t.tolist()``, ``t.numpy()``,
  ``np.asarray(t)``): the forward executable also computes the tensors those decisions read,
  and if any now gives another answer the result is thrown away (state it wrote is restored)
  and ``fn`` is recorded again for the new path;
- the shape, dtype and requires_grad of every tensor ``fn`` reads from outside.

So a compiled function never returns what the recorded path computes when Python would have
taken another path. Tensors that ``fn`` reads from outside (module parameters, closures) are
fed from the live objects on every call, and in-place changes ``fn`` makes to them or to its
arguments are written back. Random ops get fresh seeds from the global generator on every
call (so ``dg.manual_seed`` makes compiled code reproducible too). ``detach()`` and
``no_grad()`` inside ``fn`` cut gradients as they do eagerly; double backward
(``create_graph=True``) through a compiled function is refused with a clear error.
``fast.specializations`` lists what was built and why; at most ``max_specializations`` are
kept (least recently used dropped first). ``fast.recompile_reasons`` says why each was
recorded: every field that differs from the nearest cached specialisation, old -> new, named
by argument, global or attribute with the line that read it (``RecompileReason``, a str with
``changes``); ``dg.config.log_recompiles`` logs them as they happen. After
``dg.config.compile_cache_limit`` recordings (or ``cache_limit``) a call that matches no
specialisation runs ``fn`` eagerly, with one warning: never a stale answer. A function whose
recorded run did what its graph cannot hold (assigned a tensor's ``.grad``: ``backward()``,
``zero_grad()``; wrote tensor data outside recorded ops: an optimizer's ``step()``; drew
random numbers outside duograph's random ops: ``random.random()``, ``np.random.rand()``, a
numpy ``Generator`` it reaches, which a replay would repeat as recorded: ``pyrandom.py``)
runs eagerly from then on, warned once. Calls from several threads are serialised per
compiled function, so a shape is recorded once. Not guarded: arrays over 4096 elements changed in
place (identity only), values only reached by names built at run time (``getattr(o, name)``
with a computed name) outside modules and library objects.
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading
import types
import warnings
from collections import OrderedDict
from typing import Any, List, Optional

import numpy as np

from ..graphlib import dtypes
from ..graphlib.config import config
from ..graphlib.functional import zeros_like
from ..graphlib.autodiff import backward_pass, value_key
from ..graphlib.ops.shape import reshape_op
from ..graphlib.registry import OpDef
from ..graphlib.transform import extract
from . import grad_mode
from .creation import draw_seed
from .guards import (_TENSOR_PROPERTIES, Change, DecisionTracer, Guard, GuardBuilder,
                     RecompileReason, _show, _show_pair, compile_checker, failed_changes,
                     first_failure, same_decision, typed_key)
from .pyrandom import RandomWatch, reachable_objects
from .record import Recorder
from .tape import EagerNode
from .tensors import Tensor, _wrap

_LEAF = object()
_log = logging.getLogger("duograph.compile")


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
    if kind is list:
        return items
    return kind(*items) if hasattr(kind, "_fields") else tuple(items)   # namedtuples kept


class _Tracer(DecisionTracer):
    """Notes each decision in the recorder too, so it is checked on the value the tensor
    had when Python read it."""

    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec

    def note(self, tensor, kind, value, source=None, what=None):
        super().note(tensor, kind, value, source, what)
        self.rec._note_use(tensor)


# number of arguments -> the key form ``_key_spec`` gives that many tensors and no kwargs
_TENSOR_ARGS: dict = {}


def _key_spec(obj, leaves: list, objects: list):
    """The cache-key form of the arguments: tensors appended to ``leaves`` (their signature
    is keyed separately), containers by structure, numbers, strings, bools, None and tuples
    of them by type and value (``typed_key``: ``2``, ``2.0`` and ``True`` differ, so do
    ``0.0`` and ``-0.0``), every other object by identity (appended to ``objects``, whose
    contents become guards)."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return _LEAF
    if isinstance(obj, (tuple, list)):
        return (type(obj), tuple([_key_spec(o, leaves, objects) for o in obj]))
    if isinstance(obj, dict):
        return (type(obj), tuple([(typed_key(k) or k, _key_spec(v, leaves, objects))
                                  for k, v in obj.items()]))
    vk = typed_key(obj)
    if vk is not None:
        return vk
    objects.append(obj)
    return ("id", id(obj))


def _unreplayable(rec: Recorder, watched: dict, grads: list) -> Optional[str]:
    """What the recorded run did that its graph cannot: assign a tensor's ``.grad`` (it
    called ``backward()`` or ``zero_grad()``), or write a tensor's data other than through
    a recorded op (an optimizer's ``step()`` writes ``.array`` directly). None if nothing."""
    for t, before in grads:
        if t.grad is not before:
            return (f"assigns .grad of a tensor of shape {list(t.shape)} (it calls backward() "
                    "or zero_grad())")
    noted = rec.inplace_writes()
    for key, (t, version) in watched.items():
        if t._version[0] - version > noted.get(key, 0):
            return (f"writes the data of a tensor of shape {list(t.shape)} outside the "
                    "recorded ops (as an optimizer's step() does)")
    return None


def _diff_fields(old: dict, new: dict) -> List[Change]:
    """Changes between two argument field tables (see ``_call_fields``)."""
    changes = []
    for field in list(old) + [f for f in new if f not in old]:
        a, b = old.get(field), new.get(field)
        if a is not None and b is not None and a[1] == b[1]:
            continue
        plain = (field.startswith("argument")          # a non-tensor argument
                 and field.rpartition(": ")[2] not in _TENSOR_PROPERTIES)
        if a is None or b is None:
            shown = [x if x is None else (_show(x[0]) if plain else str(x[0])) for x in (a, b)]
            changes.append(Change(field, *[x or "absent" for x in shown]))
        elif plain:
            changes.append(Change(field, *_show_pair(a[0], b[0])))
        else:
            changes.append(Change(field, str(a[0]), str(b[0])))
    return changes


def _named_leaves(obj, path: str, out: list) -> None:
    """(path, value) of every leaf of the arguments, for explanations."""
    if isinstance(obj, Tensor):
        out.append((path, obj))
    elif isinstance(obj, (tuple, list)) and (type(obj) is not tuple or typed_key(obj) is None):
        for i, o in enumerate(obj):
            _named_leaves(o, f"{path}[{i}]", out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _named_leaves(v, f"{path}[{k!r}]", out)
    else:
        out.append((path, obj))


class Specialization:
    """One recorded path: executables, guards, and how to rebuild the outputs."""

    def __init__(self, reason: str, key):
        self.reason = reason
        self.key = key
        self.forward = None
        self.backward = None
        self.decisions: List[tuple] = []      # (kind, value, source, what)
        self.guards: List[Guard] = []         # Python values read (globals, attributes...)
        self.check = None                     # the guards' generated checker (None: none)
        self.fields: dict = {}                # argument/grad-mode fields, for explanations
        self.objects: list = []               # non-tensor arguments keyed by identity
        self.externals: List[Tensor] = []
        self.ext_signature: tuple = ()        # (shape, dtype, requires_grad) of externals
        self.ext_arrays: tuple = ()           # the same with numpy dtypes: checked per call
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
        self.plain = None                     # the outputs-only replay (``_plain_call``)
        self.hot = None                       # its tensor signature, for the quick call
        self.calls = 0

    def describe(self) -> str:
        return f"{self.reason} [{len(self.decisions)} guards, {self.calls} calls]"


class CompiledFunction:
    """The callable ``dg.compile`` returns."""

    def __init__(self, fn, max_specializations: int = 16, passes=None,
                 cache_limit: Optional[int] = None):
        self.passes = passes
        self.fn = fn
        self.max_specializations = int(max_specializations)
        self.cache_limit = None if cache_limit is None else int(cache_limit)
        self._lock = threading.RLock()      # one recording or replay at a time
        self._warned = False                # the cache-limit warning was given
        self._sig = None
        self._eager_only: Optional[str] = None   # why fn cannot be replayed, once found
        self._cache: "OrderedDict[Any, List[Specialization]]" = OrderedDict()
        self._history: List[str] = []
        self._last: Optional[Specialization] = None     # the specialisation run last
        functools.update_wrapper(self, fn, updated=())
        if not hasattr(self, "__name__"):
            self.__name__ = type(fn).__name__

    # -- introspection -------------------------------------------------------------------------
    @property
    def specializations(self) -> List[str]:
        """Descriptions of the specialisations currently cached, oldest first."""
        return [s.describe() for specs in self._cache.values() for s in specs]

    @property
    def recompile_reasons(self) -> List[str]:
        """Why each specialisation (including evicted ones) was recorded, in order: each a
        ``RecompileReason`` (a str; ``.changes`` holds its ``Change``s, old -> new)."""
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
    def __call__(self, *args, **kwargs):
        last = self._last
        if last is not None and last.hot is not None and not kwargs:
            # the call before ran ``last``, whose replay only makes outputs: the same
            # tensor signature (as the cache key reads it), then its guards, then its replay
            hot = last.hot
            if len(args) == len(hot) and grad_mode.is_grad_enabled() is last.key[0]:
                for t, (shape, dt, kind, grad) in zip(args, hot):
                    if not isinstance(t, Tensor):
                        break
                    a = t.array
                    if type(a) is not kind or a.shape != shape or a.dtype != dt \
                            or t.requires_grad is not grad:
                        break
                else:
                    with self._lock:
                        if self._last is last and self._eager_only is None and (
                                last.check is None or last.check() == -1):
                            result, failed = (self._replay(last, args) if last.externals
                                              else self._replay_checked(last, args))
                            if failed is None:
                                return result
        objects: list = []
        spec = None
        if not kwargs:            # the common call, tensors only: its key form, cached
            for a in args:
                if not isinstance(a, Tensor):
                    break
            else:
                leaves = list(args)
                spec = _TENSOR_ARGS.get(len(args))
                if spec is None:
                    spec = _TENSOR_ARGS[len(args)] = _key_spec((args, {}), [], [])
        if spec is None:
            leaves = []
            spec = _key_spec((args, kwargs), leaves, objects)
        # each tensor by its array's shape, numpy dtype and type (numpy's or a device's),
        # read straight from the array (the properties' names cost more than the checks)
        key = (grad_mode.is_grad_enabled(), spec,
               tuple([(a.shape, a.dtype, type(a), t.requires_grad)
                      for t in leaves for a in (t.array,)]))
        if self._eager_only is not None:
            return self.fn(*args, **kwargs)
        with self._lock:
            reason = None
            specs = self._cache.get(key)
            if specs:
                self._cache.move_to_end(key)
                for s in specs:
                    check = s.check
                    if check is not None:
                        failed = check()
                        # -2: fetching raised (an emptied cell...): check one by one
                        if failed != -1 and (failed != -2 or first_failure(s.guards)):
                            continue
                    result, failed = self._replay(s, leaves)
                    if failed is None:
                        self._last = s
                        return result
                    reason = RecompileReason(failed)
            limit = self.cache_limit if self.cache_limit is not None else \
                config.compile_cache_limit
            full = len(self._history) >= limit
            if not (full and self._warned):       # explained only when someone reads it
                if reason is None:
                    reason = self._explain(key, args, kwargs)
                if full:
                    self._fall_back(limit, reason)
                else:
                    if self._history and config.log_recompiles:
                        _log.warning("dg.compile: recording %s again: %s", self.__name__,
                                     reason)
                    return self._record(key, spec, leaves, objects, args, kwargs, reason)
        return self.fn(*args, **kwargs)

    def _fall_back(self, limit: int, reason: str) -> None:
        """The cache limit is reached: this call runs eagerly (warned about once)."""
        self._warned = True
        warnings.warn(
            f"dg.compile: {self.__name__!r} was recorded {len(self._history)} times, the cache "
            f"limit (dg.config.compile_cache_limit = {limit}); calls that match none of its "
            f"specialisations now run eagerly (correct, but not compiled). This call's "
            f"reason: {reason}", RuntimeWarning, stacklevel=3)

    # -- explanations --------------------------------------------------------------------------
    def _call_fields(self, args, kwargs) -> dict:
        """field -> (shown value, comparison key) for grad mode and every argument leaf."""
        leaves: list = []
        for name, value in self._call_leaves(args, kwargs):
            _named_leaves(value, name, leaves)
        grad = grad_mode.is_grad_enabled()
        fields = {"grad mode": (f"{'enabled' if grad else 'disabled'}", grad)}
        for path, v in leaves:
            if isinstance(v, Tensor):
                for what, x in zip(("shape", "dtype", "device", "requires_grad"),
                                   (v.shape, v.dtype, v.device, v.requires_grad)):
                    fields[f"argument {path}: {what}"] = (str(x), x)
            else:
                vk = typed_key(v)
                fields[f"argument {path}"] = (v, vk if vk is not None else ("id", id(v)))
        return fields

    def _signature(self):
        if self._sig is None:
            forward = getattr(self.fn, "forward", None)     # a module: name forward's args
            self._sig = inspect.signature(forward if callable(forward) else self.fn)
        return self._sig

    def _explain(self, key, args, kwargs) -> RecompileReason:
        """Every field that differs from the nearest cached specialisation, old -> new."""
        if not self._history:
            return RecompileReason("first call")
        now = self._call_fields(args, kwargs)
        best = None
        for specs in self._cache.values():
            for s in reversed(specs):
                changes = _diff_fields(s.fields, now)
                if s.key[1] != key[1] and not any(c.field.startswith("argument")
                                                  for c in changes):
                    changes.append(Change("argument structure", "as recorded", "another"))
                changes += failed_changes(s.guards)
                if best is None or len(changes) <= len(best):
                    best = changes
        if best is None:          # everything evicted
            return RecompileReason("not in the cache (evicted)")
        if not best:
            return RecompileReason("no cached specialisation matches")
        return RecompileReason("; ".join(str(c) for c in best), best)

    def _record(self, key, spec, leaves, objects, args, kwargs, reason):
        s = Specialization(reason, key)
        s.fields = self._call_fields(args, kwargs)
        builder = GuardBuilder()      # what fn can read, as it is before the call
        if isinstance(self.fn, types.MethodType):
            builder.add_root(self.fn.__func__, self.__name__)
            builder.add_root(self.fn.__self__, "self")
        else:
            builder.add_root(self.fn, self.__name__ if isinstance(
                self.fn, types.FunctionType) else "self")
        named: list = []
        for name, value in self._call_leaves(args, kwargs):
            _named_leaves(value, name, named)
        arg_paths = {id(v): p for p, v in named}    # any objects: by identity
        for obj in objects:
            builder.add_root(obj, f"argument {arg_paths.get(id(obj), '?')}")
        builder.finish()
        names = {}
        for i, t in enumerate(leaves):
            names.setdefault(t, f"arg{i}")
        rec = Recorder(getattr(self.fn, "__name__", "compiled"),
                       {n: t for t, n in ((t, names[t]) for t in leaves)}, bind=True)
        watched = {id(t._version): (t, t._version[0]) for t in builder.tensors + leaves}
        grads = [(t, t.grad) for t in builder.tensors + leaves]
        with rec, _Tracer(rec) as tracer, RandomWatch(reachable_objects(builder)) as draws:
            result = self.fn(*args, **kwargs)
        problem = _unreplayable(rec, watched, grads)
        if problem is None and draws.found is not None:
            problem = (f"draws random numbers outside duograph's random ops ({draws.found}; "
                       "dg.rand, dg.randn and dropout draw fresh numbers on every replay)")
        if problem is not None:
            self._eager_only = problem
            warnings.warn(f"dg.compile: {self.__name__!r} {problem}; a replay could not repeat "
                          "that, so it runs eagerly from now on (compile the part without it)",
                          RuntimeWarning, stacklevel=3)
            return result
        for obj, name, value in tracer.attributes.values():
            d = getattr(obj, "__dict__", None)
            if type(d) is dict:
                builder.add(d, "get", name, value, f"attribute {type(obj).__name__}.{name}",
                            name, None)
        s.guards = builder.finish()
        s.objects = objects       # alive, so no other object takes an id the key holds
        s.check = compile_checker(s.guards)
        out_leaves: list = []
        s.out_spec = _flatten(result, out_leaves)
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
        if s.plain is not None and spec is _TENSOR_ARGS.get(len(leaves)) and \
                len(leaves) == len(args) and not kwargs:
            s.hot = key[2]          # the tensor signature ``__call__``'s first path checks
        s.calls = 1
        self._last = s
        return result

    def _call_leaves(self, args, kwargs) -> list:
        try:
            return list(self._signature().bind(*args, **kwargs).arguments.items())
        except (TypeError, ValueError):
            return [(str(i), a) for i, a in enumerate(args)] + list(kwargs.items())

    def _build(self, s: Specialization, rec: Recorder, leaves, out_leaves, decisions):
        device = _device_of_leaves(list(leaves) + list(rec_external_tensors(rec)))
        g = rec.graph
        placeholders = {t: v for v, t in rec.external}
        # an argument's placeholder (its value may since have been replaced in place)
        arg_values = [placeholders[t] if t in placeholders else rec.value_or_input(t)
                      for t in leaves]
        outs = [rec.value_or_input(t) for t in out_leaves]
        dec_values = list(rec.decision_values)
        for t, kind, value, source, what in decisions:
            s.decisions.append((kind, value, source, what))
        ext = [(v, t) for v, t in rec.external if not any(v is a for a in arg_values)]
        s.externals = [t for _, t in ext]        # bound state: read live by the executable
        s.ext_signature = tuple((t.shape, t.dtype, t.requires_grad) for t in s.externals)
        s.ext_arrays = tuple((t.array.shape, t.array.dtype, t.requires_grad)
                             for t in s.externals)
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
                     if dtypes.is_differentiable(o.dtype) and t.requires_grad]
        s.diff_outs = diff_outs
        saved: List = []
        if wants_grad and diff_outs:
            s.grad_inputs = [i for i, t in enumerate(input_tensors)
                             if t.requires_grad and dtypes.is_differentiable(t.dtype)]
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
                grads = [got.get(value_key(w)) for w in wrt]
                grads = [gv if gv is not None else zeros_like(w) for gv, w in zip(grads, wrt)]
                made = {o for n in g.nodes[n_forward:] for o in n.outputs}
                # a gradient that is an input as it is (y = x: dx = ct) gets a node of its own
                grads = [gv if gv in made else reshape_op(gv, shape=tuple(gv.shape))
                         for gv in grads]
            for hook in rec.on_backward:     # e.g. checkpointed regions made again
                hook(g)
            bwd_nodes = g.nodes[n_forward:]
            bg, boundary, mapping = extract(bwd_nodes, f"{g.name}_backward")
            bg.outputs = [mapping[gv] for gv in grads]
            ct_ids = {c: diff_outs[j] for j, c in enumerate(ct_vals)}
            for b in boundary:
                if b in ct_ids:
                    s.saved_sources.append(("ct", ct_ids[b]))
                else:
                    s.saved_sources.append(("fwd", len(saved)))
                    saved.append(b)
            s.backward = _on_device(bg.compile(outputs=bg.outputs, passes=self.passes,
                                               device=device), device)
            s.op = self._make_op(s)
        s.forward = _on_device(g.compile(outputs=outs + dec_values + saved + updates,
                                         passes=self.passes, device=device), device)
        s.n_saved = len(saved)
        s.plain = _plain_call(s)

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
                arr = cts[j].array if kind == "ct" else saved[j]
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
        for t, (shape, dt, grad) in zip(s.externals, s.ext_arrays):
            a = t.array           # the cheap check: the array's own shape and numpy dtype
            if a.shape != shape or a.dtype != dt or t.requires_grad != grad:
                break
        else:
            return self._replay_checked(s, leaves)
        for i, (t, sig) in enumerate(zip(s.externals, s.ext_signature)):
            now = (t.shape, t.dtype, t.requires_grad)
            if now != sig:
                what = ("shape", "dtype", "requires_grad")
                diff = next(f"{w} {a} -> {b}" for w, a, b in zip(what, sig, now) if a != b)
                return None, f"a tensor read from outside the function changed: {diff}"
        return self._replay_checked(s, leaves)

    def _replay_checked(self, s: Specialization, leaves):
        """Replay ``s`` once its external tensors are known to match their signature."""
        plain = s.plain
        if plain is not None:
            # nothing but outputs to make (no decision, seed, write-back or gradient): the
            # executable's prepared call on the arrays, its results wrapped
            res = plain([t.array for t in leaves])
            if res is not None:
                s.calls += 1
                if s.out_spec is _LEAF:
                    return _wrap(res[0]), None
                return _unflatten(s.out_spec, iter([_wrap(a) for a in res])), None
        feeds = {name: t.array for name, t in zip(s.input_names, leaves)}
        for name in s.seed_names:
            feeds[name] = np.asarray(draw_seed(), dtype=np.int64)
        inputs = list(leaves) + s.externals
        backup = None
        if s.decisions and s.updated_holders:
            # the executable writes state as it runs: undo that if a guard fails
            backup = [h.array.copy() for h in s.updated_holders]
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
                        h.array[...] = old
                where = f" at {source}" if source else ""
                if kind == "data":
                    return None, f"guard failed: {what} of a tensor{where} read other data"
                return None, (f"guard failed: {what} of a tensor{where} was {value!r}, "
                              f"now {now!r}")
        first = s.n_out + s.n_dec
        saved = res[first:first + s.n_saved]
        for pos, arr in zip(s.arg_updates, res[first + s.n_saved:]):
            t = leaves[pos]
            t.array[...] = arr
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


def _plain_call(s: Specialization):
    """``call(arrays) -> outputs or None`` for a specialisation whose replay only makes its
    outputs: no decision to check, no seed to draw, nothing written back (arguments or
    bound state), no backward, every output a tensor of the result, and a planned forward
    of static shapes on numpy (its ``PreparedCall``: None where the arrays are not of the
    placeholders' exact types; the caller then takes the general replay). None otherwise."""
    exe = s.forward
    if (s.decisions or s.seed_names or s.arg_updates or s.updated_holders or s.op is not None
            or s.n_saved or exe is None or not exe.planned or exe.symbols or exe.xp is not np
            or exe.keep_on_device or sorted(s.input_names) != sorted(exe.feed_names)
            or len(exe.outputs) != s.n_out):
        return None
    return exe.prepare(s.input_names).call


def _device_of_leaves(tensors) -> str:
    """The device a recording runs on: its tensors' (one; mixing devices raises in the
    recorded ops already), "cpu" when it reads none."""
    for t in tensors:
        if t.device != "cpu":
            return t.device
    return "cpu"


def rec_external_tensors(rec) -> list:
    """The tensors a recording read from outside its arguments (parameters, buffers)."""
    return [t for _, t in rec.external]


def _on_device(exe, device: str):
    """``exe``, returning device arrays as they are when it runs on a device (eager wraps
    them as tensors of that device) rather than copying them to numpy."""
    if device != "cpu":
        exe.keep_on_device = True
    return exe


def compile(fn=None, *, max_specializations: int = 16, passes=None,
            cache_limit: Optional[int] = None):
    """Compile ``fn`` (or a module: its ``__call__``) to replay through the graph runtime.

    Usable as ``fast = dg.compile(fn)`` or as a decorator ``@dg.compile``. After
    ``cache_limit`` recordings (default ``dg.config.compile_cache_limit``, read when reached)
    a call that matches no cached specialisation runs ``fn`` eagerly, with one warning.
    """
    if fn is None:
        return lambda f: compile(f, max_specializations=max_specializations, passes=passes,
                                 cache_limit=cache_limit)
    if not callable(fn):
        raise TypeError(f"compile: expected a function or module, found {type(fn).__name__}")
    return CompiledFunction(fn, max_specializations, passes, cache_limit)
