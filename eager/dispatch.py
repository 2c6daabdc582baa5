"""Eager dispatch: every op executed on tensors goes through ``eager_apply``, once.

Dispatch interceptors first (``intercept``: the one place where autocast, vmap's batching
and collectives hook in); then a cache keyed by (OpDef, operand signature) gives the plan
of the call (``_make_plan``): a prepared callable that knows the backend kernel (from
``device``'s provider), the output dtype and what to tape, and runs the kernel, wraps the
result and, when a gradient is wanted or a ``record()`` block is open, puts an ``EagerNode``
on the tape. A signature without a plan takes ``_eager_apply_slow``, which prepares the
operands (numbers, devices), infers the output types with the op's ``infer`` and makes the
plan. The fast operators installed on ``Tensor`` here (``t + u``, ``-t``) are shims over
the same cache, and ``eager_apply`` is graphlib's dispatch handler for tensors.
"""
from __future__ import annotations

import math
import weakref
from threading import get_ident as _get_ident

import numpy as np

from ..graphlib import dtypes
from ..graphlib.config import config as _config
from ..graphlib.dispatch import (Scalar, cast_zero_dim_operands, infer_types, register_handler,
                                 set_default_handler, weak_scalar)
from ..graphlib.errors import DuographError, kernel_error
from ..graphlib.ir import _local as _graph_local
from ..graphlib.kernels import direct_kernel, run_kernel
from ..graphlib.methods import TensorMethods
from ..graphlib.ops.control import set_eager_support
from ..graphlib.registry import REGISTRY
from ..graphlib.source import user_source
from ..graphlib.types import TensorType
from . import grad_mode
from .device import (_default_device, _device_of, _xp_for, backend_for, on_provider_change)
from .tape import EagerNode, _input_links, _weakref
from .tensors import (Parameter, SeedTensor, Tensor, _new, _own_recorders, _recorders, _wrap,
                      dtype_name)

_cpu_kernels = backend_for("cpu").kernels     # the hot path's table (see _new_provider)


def _new_provider(cpu_backend) -> None:
    """A new backend provider: its CPU kernels, and no plan made with the old ones."""
    global _cpu_kernels
    _cpu_kernels = cpu_backend.kernels
    _plans.clear()


on_provider_change(_new_provider)


def clear_caches() -> None:
    """Forget every prepared plan and inferred type (``dg.set_default_dtype`` changes what
    inference gives)."""
    _plans.clear()
    _infer_cache.clear()
    _scalar_cache.clear()

_infer_cache: dict = {}
_INFER_CACHE_LIMIT = 8192


def _infer(op, in_sig, attrs):
    """(output types, their numpy dtypes) for ``op`` on inputs ``in_sig`` ((shape, dtype)
    pairs), cached per signature."""
    key = (op, in_sig, tuple(attrs.items()))
    try:
        hit = _infer_cache.get(key)
    except TypeError:        # an unhashable attribute: infer without caching
        hit, key = None, None
    if hit is not None:
        return hit
    if REGISTRY.get(op.name) is not op:
        key = None           # one-off ops (custom Functions) are never cached
    out = tuple(infer_types(op, [TensorType(s, dtype_name(d)) for s, d in in_sig], attrs))
    hit = (out, tuple(np.dtype(t.dtype) for t in out))
    if key is not None:
        if len(_infer_cache) > _INFER_CACHE_LIMIT:
            _infer_cache.clear()
        _infer_cache[key] = hit
    return hit


_TO_DEVICE = REGISTRY["to_device"]
_CONSTANT = REGISTRY["constant"]
# Constants made on the default CPU device (what composite op functions build their masks and
# index tables with: ``constant(np.tri(...))``) follow the device of the tensors they meet.
# By identity (id -> weak reference): tensors compare elementwise, so no WeakSet.
_floating: dict = {}


def _float_constant(t) -> None:
    key = id(t)
    _floating[key] = weakref.ref(t, lambda _, key=key: _floating.pop(key, None))


def _is_floating(t) -> bool:
    ref = _floating.get(id(t))
    return ref is not None and ref() is t


_scalar_cache: dict = {}
_FLOAT_NP = dtypes.GRAD_NP   # floats and complex


def _scalar_key(value, dtype: str, device: str) -> tuple:
    """The scalar cache's key: by value, except that a float zero also keys its sign (0.0 ==
    -0.0, but ``t / -0.0`` is not ``t / 0.0``). NaNs need nothing: a NaN key only finds
    the same float object, so the same payload."""
    if value or not isinstance(value, float):
        return (type(value), value, dtype, device)
    return (type(value), value, dtype, device, math.copysign(1.0, value))


def _as_tensor(x, device: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, Scalar):
        key = _scalar_key(x.value, x.dtype, device)
        t = _scalar_cache.get(key)
        if t is None:
            arr = _xp_for(device).asarray(x.value, dtype=x.dtype)
            if device == "cpu":
                arr.flags.writeable = False
            t = _wrap(arr)
            if len(_scalar_cache) > 4096:
                _scalar_cache.clear()
            _scalar_cache[key] = t
        return t
    if isinstance(x, (np.ndarray, np.generic)):
        arr = np.asarray(x)
        if arr.dtype.name not in dtypes.DTYPE_NAMES:
            arr = arr.astype(dtypes.infer_data_dtype(arr))
        return _wrap(_xp_for(device).asarray(arr))
    if isinstance(x, (list, tuple)):
        return _wrap(_xp_for(device).asarray(np.asarray(x, dtype=dtypes.infer_data_dtype(x))))
    raise TypeError(f"expected each operand to be a tensor, array, number or list of numbers, "
                    f"found {type(x).__name__}")


def _prepare(op, inputs):
    """Slow path of eager_apply: convert numbers/arrays, check devices."""
    device = None
    mixed = False
    for x in inputs:
        if type(x) is Tensor or isinstance(x, Tensor):
            if type(x) is SeedTensor:
                continue        # a host seed: the other inputs (or the default) decide
            d = _device_of(x.array)
            if device is None:
                device = d
            elif d != device:
                mixed = True
    if mixed:
        inputs, device = _join_devices(op, inputs)
    device = device or _default_device[-1]
    try:
        return tuple(_as_tensor(x, device) for x in inputs), device
    except TypeError as e:
        raise TypeError(f"{op.name}: {e}\n  in: {user_source()}") from None


# -- dispatch interceptors: the one hook point -----------------------------------------------
# Everything that changes how an eager op runs (autocast, vmap's batching, collectives, a
# tracing or logging mode) hooks in here, once, like PyTorch's dispatch modes: an interceptor
# is ``fn(op, inputs, attrs, proceed) -> result``, consulted by ``eager_apply`` before the plan
# cache for every op of its thread (the fast operators, ``t + u``, included: while any
# interceptor is installed they take ``eager_apply`` too). ``proceed(op, inputs, attrs)`` runs
# an op beneath it; ops an interceptor issues itself (through ``proceed`` or the op functions)
# go to the interceptors below it, so it never sees its own ops. Innermost (last installed)
# first. With none installed, the fast path runs and the only cost is one empty-list test.
_interceptors: list = []        # [_Interceptor], every thread's, innermost last


class _Interceptor:
    __slots__ = ("fn", "thread", "busy")

    def __init__(self, fn, thread):
        self.fn, self.thread, self.busy = fn, thread, False


class intercept:
    """``with intercept(fn):`` installs the dispatch interceptor ``fn(op, inputs, attrs,
    proceed)`` for this thread (see above); ``fn`` returns the op's result (a tensor, or a
    tuple for a multi-output op), usually ``proceed(op, inputs, attrs)`` with its inputs or
    attributes changed, or its result changed afterwards."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"intercept: expected a callable fn(op, inputs, attrs, proceed), "
                            f"found {type(fn).__name__}")
        self.fn = fn
        self._entry = None

    def __enter__(self):
        if self._entry is not None:
            raise RuntimeError("intercept: this block is already open")
        self._entry = _Interceptor(self.fn, _get_ident())
        _interceptors.append(self._entry)
        return self.fn

    def __exit__(self, *exc):
        _interceptors.remove(self._entry)
        self._entry = None


_NOT_INTERCEPTED = object()


def _intercepted(op, inputs, attrs):
    """The result of this thread's innermost idle interceptor, or ``_NOT_INTERCEPTED``."""
    me = _get_ident()
    for entry in reversed(_interceptors):
        if entry.thread == me and not entry.busy:
            break
    else:
        return _NOT_INTERCEPTED
    entry.busy = True        # its own ops go to the interceptors below it
    try:
        return entry.fn(op, inputs, attrs, eager_apply)
    finally:
        entry.busy = False


# -- the plan cache ----------------------------------------------------------------------------
# signature -> plan: ``(op, shape0, dtype0, shape1, dtype1, ...)`` of CPU (numpy) arrays, with
# ``tuple(attrs.items())`` appended when the call has attributes (the fast operators look up
# the same key for their one or two tensors); ``(device, op, ...)`` for another device's plans
_plans: dict = {}
_PLAN_LIMIT = 8192


def _make_plan(op, xp, table, in_dtypes, out_dtypes, arity: int):
    """The prepared callable ``plan(tensors, arrays, inputs=None, attrs=None) -> result``
    that runs ``op`` on arrays of one signature with the backend kernel ``table[op]`` (its
    ``xp``): ``tensors`` are the operands as tensors (a number as its cached 0-d tensor),
    ``arrays`` their arrays, ``inputs`` the operands as given (numbers as ``Scalar``s, what
    ``record()`` keeps; default ``tensors``) and ``attrs`` the attributes (default none).
    It knows the output dtype, which inputs can carry a gradient and what a tape node saves,
    so a call runs the kernel, wraps the result and tapes or records it when asked.
    ``arity`` is 1 or 2 for calls without attributes of that many inputs (the kernel is
    called without unpacking; a bare ufunc where the op's ``ufunc`` trait allows), else -1.
    A kernel registered into ``table`` after the plan was made makes the plan stale: the
    call goes back to ``_eager_apply_slow``, which makes a new one (a table that answers a
    new kernel on every lookup gets a plan that does not check, and is not cached: a plan
    per call, not an endless loop)."""
    raw = table[op]
    stable = table[op] is raw
    kernel = direct_kernel(raw, [dtype_name(d) for d in in_dtypes])
    nondiff = op.nondiff_inputs
    diff = None if op.vjp is None else tuple(
        i for i in range(len(in_dtypes)) if i not in nondiff)
    # which inputs' requires_grad the call reads: 0 none, 1 the first, 2 the first two,
    # 3 those in ``diff`` (the first two forms unrolled for the hot path)
    reads = 0 if not diff else 1 if diff == (0,) else 2 if diff == (0, 1) else 3
    view = bool(op.view)
    ndarray, asarray = xp.ndarray, xp.asarray
    # the op's ``ufunc`` trait: where the table holds the op's own kernel and every operand
    # has the output's dtype, the bare numpy ufunc computes exactly what that kernel does;
    # called as it is, one Python call less per op (arity 11 and 12: one and two operands)
    if arity in (1, 2) and op.ufunc and xp is np and raw is op.kernel \
            and len(out_dtypes) == 1 and all(d == out_dtypes[0] for d in in_dtypes):
        kernel = getattr(np, op.ufunc)
        arity += 10
    if op.multi_output:
        def run_multi(tensors, arrays, inputs=None, attrs=None):
            inputs = tensors if inputs is None else inputs
            attrs = {} if attrs is None else attrs
            if stable and raw is not table[op]:
                return _eager_apply_slow(op, inputs, attrs)
            try:
                res = run_kernel(kernel, xp, arrays, attrs, True, out_dtypes)
            except DuographError:
                raise
            except Exception as e:
                raise _kernel_failure(op, arrays, e) from e
            outs = [_wrap(r) for r in res]
            if view:
                for o in outs:
                    o._version = tensors[0]._version
            grad = reads and any(tensors[i].requires_grad for i in diff) and _state.enabled
            if grad or _recorders:
                _record(op, inputs, tuple(tensors), attrs, outs, grad)
            return tuple(outs)
        return run_multi

    dtype0 = out_dtypes[0]
    float_out = dtype0 in _FLOAT_NP
    # what a tape node of this call saves (EagerNode.__init__'s rule): 0 nothing, 1 the
    # inputs' versions, 2 the outputs' too
    saves = 0 if op.saves_no_data and not view else (2 if op.vjp_reads_output else 1)

    def plan(tensors, arrays, inputs=None, attrs=None):
        if stable and raw is not table[op]:
            return _eager_apply_slow(op, tensors if inputs is None else inputs,
                                     {} if attrs is None else attrs)
        try:
            if arity == 12:
                res = kernel(arrays[0], arrays[1])
            elif arity == 11:
                res = kernel(arrays[0])
            elif arity == 2:
                res = kernel(xp, arrays[0], arrays[1])
            elif arity == 1:
                res = kernel(xp, arrays[0])
            else:
                res = kernel(xp, *arrays, **attrs)
            if type(res) is not ndarray:
                res = asarray(res)
            rd = res.dtype
            if rd is not dtype0 and rd != dtype0:
                res = res.astype(dtype0)
        except DuographError:
            raise
        except Exception as e:
            raise _kernel_failure(op, arrays, e) from e
        out = _new(Tensor)      # _wrap(res), inlined
        out.array = res
        out.requires_grad = False
        out.grad = None
        out.grad_fn = None
        out._index = 0
        out._version = tensors[0]._version if view else [0]
        out._hooks = None
        out._retains_grad = False
        if reads and (tensors[0].requires_grad if reads == 1 else
                      (tensors[0].requires_grad or tensors[1].requires_grad) if reads == 2
                      else any(tensors[i].requires_grad for i in diff)) and _state.enabled:
            # (grad mode last: a thread-local read costs more than the tensors' flags)
            if type(tensors) is not tuple:
                tensors = tuple(tensors)
            if attrs is None:
                attrs = {}
            if _recorders:
                _record(op, tensors if inputs is None else inputs, tensors, attrs, (out,),
                        True)
            else:
                _tape(op, tensors, attrs, out, res, float_out, saves)
        elif _recorders:
            _record(op, tensors if inputs is None else inputs, tuple(tensors),
                    {} if attrs is None else attrs, (out,), False)
        return out
    return plan


def eager_apply(op, inputs, attrs):
    """Run ``op`` at once on tensors: the one eager dispatch.

    This thread's interceptors first (see ``intercept``); then the operands' signature
    (shapes and dtypes of CPU arrays; a Python number as the cached 0-d tensor its weak
    ``Scalar`` became) finds the plan made for it (``_make_plan``), which runs the kernel
    and tapes the call. Anything without a plan (first call of a signature, other devices,
    random ops, unhashable attributes, new scalars) takes ``_eager_apply_slow``, which
    prepares the operands and makes the plan."""
    if _interceptors:
        out = _intercepted(op, inputs, attrs)
        if out is not _NOT_INTERCEPTED:
            return out
    tensors = inputs
    arrays = None
    n = len(inputs)
    if n == 2:          # the common cases first, without the general loop's lists
        x, y = inputs
        tx, ty = type(x), type(y)
        if (tx is Tensor or tx is Parameter) and (ty is Tensor or ty is Parameter):
            a, b = x.array, y.array
            if type(a) is _ndarray and type(b) is _ndarray:
                arrays = (a, b)
                key = (op, a.shape, a.dtype, b.shape, b.dtype)
        elif ty is Scalar and (tx is Tensor or tx is Parameter):      # tensor <op> number
            v = y.value
            if v or not isinstance(v, float):
                t = _scalar_cache.get((type(v), v, y.dtype, "cpu"))
                a = x.array
                if t is not None and type(a) is _ndarray:
                    b = t.array
                    tensors = (x, t)
                    arrays = (a, b)
                    key = (op, a.shape, a.dtype, b.shape, b.dtype)
        elif tx is Scalar and (ty is Tensor or ty is Parameter):      # number <op> tensor
            v = x.value
            if v or not isinstance(v, float):
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu"))
                b = y.array
                if t is not None and type(b) is _ndarray:
                    a = t.array
                    tensors = (t, y)
                    arrays = (a, b)
                    key = (op, a.shape, a.dtype, b.shape, b.dtype)
    elif n == 1:
        x = inputs[0]
        tx = type(x)
        if tx is Tensor or tx is Parameter:
            a = x.array
            if type(a) is _ndarray:
                arrays = (a,)
                key = (op, a.shape, a.dtype)
    if arrays is None:
        arrays = []
        sig = [op]
        for x in inputs:
            tx = type(x)
            if tx is Tensor or tx is Parameter:
                a = x.array
            elif tx is Scalar:
                v = x.value     # (_scalar_key inlined for the common nonzero case)
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu") if v or not isinstance(
                    v, float) else _scalar_key(v, x.dtype, "cpu"))
                if t is None:
                    return _eager_apply_slow(op, inputs, attrs)
                if tensors is inputs:
                    tensors = list(inputs)
                tensors[len(arrays)] = t
                a = t.array
            else:
                return _eager_apply_slow(op, inputs, attrs)
            if type(a) is not _ndarray:
                return _eager_apply_slow(op, inputs, attrs)
            arrays.append(a)
            sig.append(a.shape)
            sig.append(a.dtype)
        key = tuple(sig)
    if attrs:
        try:
            plan = _plans.get((*key, tuple(attrs.items())))
        except TypeError:
            plan = None
    else:
        plan = _plans.get(key)
    if plan is None:
        return _eager_apply_slow(op, inputs, attrs)
    return plan(tensors, arrays, inputs, attrs)


def _tape(op, tensors, attrs, out, res, float_out, saves):
    """``_record`` of one single-output call for autograd outside ``record()`` blocks, with
    ``EagerNode.__init__`` inlined (the same fields, the same values)."""
    node = _new(EagerNode)
    node.op = op
    node.inputs = tensors
    node.attrs = attrs
    node.source = user_source() if _config.capture_source else None
    node.for_grad = True
    node.freed = False
    node._out_refs = (_weakref(out),)
    node._out_data = (res,)
    node.n_outputs = 1
    if len(tensors) == 2:
        x, y = tensors
        fx, fy = x.grad_fn, y.grad_fn
        node.input_keys = (x if fx is None else (fx, x._index),
                           y if fy is None else (fy, y._index))
        node.next_nodes = (fx, fy)
        if saves:
            node.saved_versions = ((x._version[0], y._version[0]) if saves == 1 else
                                   (x._version[0], y._version[0], out._version[0]))
        else:
            node.saved_versions = None
    elif len(tensors) == 1:
        x = tensors[0]
        fx = x.grad_fn
        node.input_keys = (x if fx is None else (fx, x._index),)
        node.next_nodes = (fx,)
        if saves:
            node.saved_versions = ((x._version[0],) if saves == 1 else
                                   (x._version[0], out._version[0]))
        else:
            node.saved_versions = None
    else:
        node.input_keys, node.next_nodes = _input_links(tensors)
        if saves:
            saved = [x._version[0] for x in tensors]
            if saves == 2:
                saved.append(out._version[0])
            node.saved_versions = tuple(saved)
        else:
            node.saved_versions = None
    if float_out:
        out.requires_grad = True
        out.grad_fn = node


def _kernel_failure(op, arrays, e):
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
    return kernel_error(f"{op.name} failed: {type(e).__name__}: {e}\n  inputs: ({shapes})"
                        f"\n  in: {user_source()}", e)


def _record(op, inputs, tensors, attrs, outs, grad):
    """Put a node for this call on the tape (autograd) and into open record() blocks."""
    source = user_source() if (_recorders or _config.capture_source) else None
    node = EagerNode(op, tensors, attrs, outs, source, grad)
    if grad:
        i = 0
        for o in outs:
            if o.array.dtype in _FLOAT_NP:
                o.requires_grad = True
                o.grad_fn = node
                o._index = i
            i += 1
    if _recorders:
        for rec in _own_recorders():
            rec._add(node, outs, inputs)


def _eager_apply_slow(op, inputs, attrs):
    """eager_apply for every call its plan lookup does not serve: converts the operands
    (numbers, arrays, lists; tensors of mixed devices), infers the output types, makes the
    plan of the signature (``_make_plan``; cached unless the op is random, a constant or a
    one-off, or an attribute is unhashable) and runs it."""
    if op.promote and len(inputs) > 1:
        # a 0-d operand PyTorch's categories demote (``f32 + f64[]``) is cast first, and the
        # signature gets no plan, so its calls keep coming here
        cast = cast_zero_dim_operands(op, inputs)
        if cast is not inputs:
            return eager_apply(op, cast, attrs)
    tensors = inputs
    arrays = []
    cpu = _default_device[-1] == "cpu"     # (ops without tensor inputs run there)
    device = None
    for x in inputs:
        if type(x) is not Tensor and type(x) is not Parameter:
            if type(x) is Scalar and tensors is inputs:
                v = x.value     # (_scalar_key inlined for the common nonzero case)
                t = _scalar_cache.get((type(v), v, x.dtype, "cpu") if v or not isinstance(
                    v, float) else _scalar_key(v, x.dtype, "cpu"))
                if t is not None:        # a cached CPU scalar: stay on the fast path
                    arrays.append(t.array)
                    continue
            tensors = None
            break
        a = x.array
        if type(a) is not _ndarray:
            cpu = False
        arrays.append(a)
    if tensors is not None and len(arrays) == len(inputs) and any(
            type(x) is Scalar for x in inputs):
        tensors = tuple(x if isinstance(x, Tensor) else _as_tensor(x, "cpu") for x in inputs)
    if tensors is None or not cpu:
        tensors, device = _prepare(op, inputs)
        arrays = [x.array for x in tensors]
        cpu = device == "cpu"
    tensors = tuple(tensors)
    if op.random and "stream" not in attrs:
        attrs = dict(attrs, stream=0)    # eager seeds are fresh per call
    in_sig = tuple([(a.shape, a.dtype) for a in arrays])
    try:
        hit = _infer_cache.get((op, in_sig, tuple(attrs.items())))
    except TypeError:
        hit = None
    if hit is None:
        hit = _infer(op, in_sig, attrs)
    out_dtypes = hit[1]
    if cpu and op is not _TO_DEVICE:
        where, xp, table = None, np, _cpu_kernels
    else:
        if op is _TO_DEVICE:      # its results belong to the target device
            where = attrs["device"]
        else:
            where = device or (_device_of(arrays[0]) if arrays else _default_device[-1])
        backend = backend_for(where)
        xp, table = backend.xp, backend.kernels
    arity = len(arrays) if len(arrays) in (1, 2) and not attrs else -1
    plan = _make_plan(op, xp, table, [a.dtype for a in arrays], out_dtypes, arity)
    if not op.random and REGISTRY.get(op.name) is op and op is not _CONSTANT and (
            op.multi_output or len(out_dtypes) == 1) and table[op] is table[op]:
        key = (op, *[v for a in arrays for v in (a.shape, a.dtype)])
        if attrs:
            key = (*key, tuple(attrs.items()))
        if where is not None:
            key = (where, *key)
        try:
            if len(_plans) > _PLAN_LIMIT:
                _plans.clear()
            _plans[key] = plan
        except TypeError:     # an unhashable attribute: no plan
            pass
    # No np.errstate around kernels: it costs ~1 us per op. Like numpy, a division by zero
    # gives inf with a RuntimeWarning (PyTorch gives the same inf silently).
    out = plan(tensors, arrays, inputs, attrs)
    if op is _CONSTANT and device is None:
        _float_constant(out)
    return out


_ndarray = np.ndarray
_grad_enabled = grad_mode.is_grad_enabled
_state = grad_mode._state      # its ``enabled``, read without a call on the hot path


def _capture_into_graph(graph, t: Tensor):
    """A tensor met while building a graph becomes a state input bound to it: each run reads
    its current data, and ``graph.update`` writes new values back into it (parameters,
    buffers, optimizer slots)."""
    return graph.bind_state(t)        # (on its device: compile for that device)


# -- the fast operators: shims over eager_apply's plan cache -----------------------------------
# ``a * b`` on two eager tensors (or a tensor and a Python number), outside any ``with graph:``
# block and with no dispatch interceptor installed, is exactly ``eager_apply(mul, ...)``:
# what ``dispatch.apply`` would decide (no Values, no graph, the Tensor handler, the weak
# scalar its coercion makes) after three more calls. So the operator looks up the plan of its
# operands' signature (the key ``eager_apply`` makes) and calls it, or calls ``eager_apply``;
# in a graph, or under an interceptor, it takes the shared ``TensorMethods`` operator.
# (Python type, value, the tensor's numpy dtype) -> the cached CPU scalar tensor that
# ``tensor <op> value`` reads (the one ``_as_tensor`` made for its weak Scalar), so the
# operator runs as a tensor-tensor op at once; filled on first use, never for a float zero
# (its sign is not part of the key) and used only outside record() blocks (which want the
# Scalar operand itself, to make a constant of it)
_op_scalars: dict = {}


def _fast_binary(op, name: str, reflected: bool):
    general = getattr(TensorMethods, name)

    def operator(self, other):
        if _graph_local.graphs or _interceptors:
            return general(self, other)
        to = type(other)
        if to is Tensor or to is Parameter:
            if reflected:
                x, y = other, self
            else:
                x, y = self, other
        elif to is float or to is int or to is bool:
            a = self.array
            t = None
            if not _recorders and (other or to is not float):
                t = _op_scalars.get((to, other, a.dtype))
            if t is None or type(a) is not _ndarray:
                s = weak_scalar(dtype_name(a.dtype), other)
                out = eager_apply(op, (s, self) if reflected else (self, s), {})
                if type(a) is _ndarray and (other or to is not float):
                    t = _scalar_cache.get((to, other, s.dtype, "cpu"))
                    if t is not None:
                        if len(_op_scalars) > 4096:
                            _op_scalars.clear()
                        _op_scalars[(to, other, a.dtype)] = t
                return out
            if reflected:
                x, y = t, self
            else:
                x, y = self, t
        else:
            return general(self, other)
        a, b = x.array, y.array
        if type(a) is _ndarray and type(b) is _ndarray:
            plan = _plans.get((op, a.shape, a.dtype, b.shape, b.dtype))
            if plan is not None:
                return plan((x, y), (a, b))
        return eager_apply(op, (x, y), {})
    operator.__name__ = operator.__qualname__ = name
    operator.__doc__ = general.__doc__
    return operator


def _fast_unary(op, name: str):
    general = getattr(TensorMethods, name)

    def operator(self):
        if _graph_local.graphs or _interceptors:
            return general(self)
        a = self.array
        if type(a) is _ndarray:
            plan = _plans.get((op, a.shape, a.dtype))
            if plan is not None:
                return plan((self,), (a,))
        return eager_apply(op, (self,), {})
    operator.__name__ = operator.__qualname__ = name
    operator.__doc__ = general.__doc__
    return operator


for _name, _op, _reflected in (("__add__", "add", False), ("__radd__", "add", True),
                               ("__sub__", "sub", False), ("__rsub__", "sub", True),
                               ("__mul__", "mul", False), ("__rmul__", "mul", True),
                               ("__truediv__", "div", False), ("__rtruediv__", "div", True)):
    setattr(Tensor, _name, _fast_binary(REGISTRY[_op], _name, _reflected))
Tensor.__neg__ = _fast_unary(REGISTRY["neg"], "__neg__")
del _name, _op, _reflected

register_handler(Tensor, eager_apply, _capture_into_graph)
register_handler(Parameter, eager_apply, _capture_into_graph)
set_default_handler(eager_apply)


class _ControlFlowSupport:
    """What graphlib's control-flow ops need to run a body's Python function eagerly
    (``graphlib.ops.control.set_eager_support``)."""

    @staticmethod
    def grad_needed(objs) -> bool:
        return _grad_enabled() and any(getattr(x, "requires_grad", False) for x in objs)

    class paused:
        """No tape and no record() blocks: the control-flow node stands for these ops."""

        def __enter__(self):
            self._grad = grad_mode.is_grad_enabled()
            # this thread's blocks only: another thread's recording goes on
            self._recs = _own_recorders()
            grad_mode._set(False)
            for rec in self._recs:
                _recorders.remove(rec)

        def __exit__(self, *exc):
            _recorders.extend(self._recs)
            grad_mode._set(self._grad)

    tensor = staticmethod(_wrap)

    @staticmethod
    def array(x):
        return x.array if isinstance(x, Tensor) else x


def _register_control_flow():
    set_eager_support(_ControlFlowSupport)


_register_control_flow()

def _join_devices(op, inputs):
    """Inputs on more than one device: as PyTorch, a 0-d CPU tensor joins the others'
    device (a Python scalar would), and so does a constant made on the default CPU device (a
    composite op's mask or index table); anything else raises, naming both devices."""
    found = [(_device_of(x.array), x) for x in inputs
             if isinstance(x, Tensor) and type(x) is not SeedTensor]
    devices = []
    for d, x in found:
        if d not in devices and not (d == "cpu" and (x.array.ndim == 0 or _is_floating(x))):
            devices.append(d)
    if len(devices) != 1:
        first = [d for d, _ in found]
        a = first[0]
        b = next(d for d in first if d != a)
        raise RuntimeError(f"{op.name}: expected all tensors on one device, found {a} and "
                           f"{b}; move them with .to({b!r}) or .to({a!r})"
                           f"\n  in: {user_source()}")
    device = devices[0]
    joined = [x.to(device) if isinstance(x, Tensor) and type(x) is not SeedTensor
              and _device_of(x.array) != device else x for x in inputs]
    return type(inputs)(joined) if isinstance(inputs, tuple) else joined, device


def push_default_device(device: str):
    """Make ``device`` the default of ops without tensor inputs (creation under
    ``device=``) until ``pop_default_device(token)``. Off the CPU the fast path's plans are
    set aside meanwhile: they are keyed by signature alone, and a zero-input op's plan
    (``ones``, ``arange``) would run its CPU kernel whatever the default device."""
    global _plans
    saved = _plans
    if device != "cpu":
        _plans = {}
    _default_device.append(device)
    return saved


def pop_default_device(token) -> None:
    """Undo ``push_default_device`` (``token`` is what it returned)."""
    global _plans
    _default_device.pop()
    _plans = token
