"""Op functions dispatch on their operands.

``apply(op, inputs, attrs)`` decides who runs an op:

1. any symbolic ``Value`` among the inputs: a node is added to that Value's graph;
2. otherwise, inside ``with graph:``: a node is added to that graph (other tensors among the
   inputs are captured by the hook registered for their type, e.g. eager Parameters become
   state inputs);
3. otherwise the handler registered for the operands' tensor type runs it (eager mode);
4. otherwise the default handler (eager mode, for ops without tensor operands such as
   ``zeros``), when one is installed.

Python numbers among the inputs are weak scalars (see ``dtypes``): they become ``Scalar``
markers carrying the dtype they must take, which each mode materialises its own way.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from . import autocast, dtypes, methods, registry
from .collective_hooks import next_sequence
from .errors import DTypeError, DuographError, GraphError, ShapeError, UnsupportedDTypeError
from .ir import (ConstArray, Graph, Node, Value, _local, current_graph, install_service,
                 value_key)
from .registry import get_op
from .source import user_source

_handlers: Dict[type, Callable] = {}
_capture: Dict[type, Callable] = {}
_default_handler: Optional[Callable] = None


_NUMBER_TYPES = frozenset({bool, int, float, complex})


class Scalar:
    """A Python number operand, with the dtype weak promotion gave it."""

    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype: str):
        self.value = value
        self.dtype = dtype

    def __repr__(self):
        return f"Scalar({self.value!r}, {self.dtype})"


def register_handler(cls: type, handler: Callable, capture: Optional[Callable] = None):
    """Let ``cls`` operands (e.g. eager tensors) run ops through ``handler(op, inputs, attrs)``;
    ``capture(graph, obj) -> Value`` turns one into a graph input when mixed with Values."""
    _handlers[cls] = handler
    if capture is not None:
        _capture[cls] = capture


def set_default_handler(handler: Optional[Callable]) -> None:
    global _default_handler
    _default_handler = handler


def _is_number(x) -> bool:
    return isinstance(x, (bool, int, float, complex, np.bool_, np.integer, np.floating,
                          np.complexfloating)) and not isinstance(x, np.ndarray)


def operand_dtype(x) -> Optional[str]:
    """dtype of a tensor-like operand; None for Python numbers."""
    if _is_number(x) and not isinstance(x, np.generic):
        return None
    d = getattr(x, "dtype", None)
    if d is not None:
        return d if isinstance(d, str) else dtypes.as_dtype(d)
    if isinstance(x, (list, tuple)):
        return dtypes.infer_data_dtype(x)
    return None


def _is_py_number(x) -> bool:
    return type(x) in _NUMBER_TYPES or (
        isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic))


_weak_dtypes: Dict[tuple, str] = {}


def _weak_dtype(tensor_dtype: str, value) -> str:
    """``dtypes.weak_result_dtype`` for a bool, int or float ``value`` (it depends on the
    value's type only), memoised."""
    key = (tensor_dtype, type(value))
    d = _weak_dtypes.get(key)
    if d is None:
        d = _weak_dtypes[key] = dtypes.weak_result_dtype(tensor_dtype, value)
    return d


def weak_scalar(tensor_dtype: str, value) -> Scalar:
    """The Scalar marker a Python bool, int or float ``value`` becomes next to a tensor of
    ``tensor_dtype`` in a promoting binary op (what ``apply`` makes of ``tensor + 1.0``)."""
    return Scalar(value, _weak_dtype(tensor_dtype, value))


def _coerce_scalars(op, inputs):
    """Replace Python numbers by Scalar markers carrying their (weakly promoted) dtype."""
    promote = op.promote
    if promote is True and len(inputs) == 2:     # the common `tensor <op> number` case
        a, b = inputs
        if type(b) in _NUMBER_TYPES and type(a) not in _NUMBER_TYPES:
            d = getattr(a, "dtype", None)
            if type(d) is not str:
                d = operand_dtype(a)
            if d is not None:
                return a, Scalar(b, _weak_dtype(d, b))
        elif type(a) in _NUMBER_TYPES and type(b) not in _NUMBER_TYPES:
            d = getattr(b, "dtype", None)
            if type(d) is not str:
                d = operand_dtype(b)
            if d is not None:
                return Scalar(a, _weak_dtype(d, a)), b
    if not promote:
        return tuple(Scalar(x, dtypes.default_dtype_for(x)) if _is_py_number(x) else x
                     for x in inputs)
    idx = range(len(inputs)) if promote is True else promote
    typed = _typed_operands(inputs, idx)
    tensor_dt = dtypes.result_type(*[t for _, t in typed]) if typed else None
    if tensor_dt is None:   # only numbers: promote them among themselves, strongly
        for i in idx:
            if not _is_py_number(inputs[i]):   # None, a string...: refused by the handler
                continue
            d = dtypes.default_dtype_for(inputs[i])
            tensor_dt = d if tensor_dt is None else dtypes.result_dtype(tensor_dt, d)
    out = list(inputs)
    for i, x in enumerate(inputs):
        if _is_py_number(x):
            dt = dtypes.weak_result_dtype(tensor_dt, x) if i in idx else \
                dtypes.default_dtype_for(x)
            out[i] = Scalar(x, dt)
    return _cast_zero_dim(op, tuple(out), typed, tensor_dt)


class _Typed:
    """The dtype and shape of an operand that has no ``shape`` of its own (a list)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: str, shape: tuple):
        self.dtype = dtype
        self.shape = shape


def _typed_operands(inputs, idx) -> list:
    """``(index, operand)`` for the tensor-like operands at ``idx`` (not Python numbers, nor
    operands the handler will refuse), each with a ``dtype`` and a ``shape``."""
    typed = []
    for i in idx:
        x = inputs[i]
        if _is_py_number(x) or isinstance(x, Scalar):
            continue
        if isinstance(x, (list, tuple)):
            try:
                d = operand_dtype(x)
            except (TypeError, ValueError):     # not numbers: the op refuses it, by name
                continue
            typed.append((i, _Typed(d, np.shape(x))))
        elif getattr(x, "dtype", None) is not None and getattr(x, "shape", None) is not None:
            typed.append((i, x))
    return typed


def _cast_zero_dim(op, inputs: tuple, typed: list, dt: Optional[str]) -> tuple:
    """``inputs`` with each 0-d tensor operand that plain promotion would let widen ``dt``
    (their ``dtypes.result_type``) cast to the dtype the op computes in, as PyTorch does:
    ``f32 + f64[]`` adds in float32, ``i8 == i64[]`` compares in int8, and ``i8 / i64[]``
    divides in float32 (a ``float_compute`` op), the 0-d operand never passing through
    int8."""
    out = None
    for i, x in typed:
        if len(x.shape) or dtypes.result_dtype(dt, operand_dtype(x)) == dt:
            continue
        if out is None:
            out = list(inputs)
        target = dtypes.DEFAULT_FLOAT if op.float_compute and not dtypes.is_float(dt) else dt
        x = inputs[i]
        if isinstance(x, (np.ndarray, np.generic)):
            out[i] = np.asarray(x).astype(target)
        else:
            out[i] = get_op("cast")(x, dtype=target)
    return inputs if out is None else tuple(out)


def cast_zero_dim_operands(op, inputs: tuple) -> tuple:
    """``inputs`` of the promoting ``op`` with their 0-d tensors cast where PyTorch's
    categories say (``dtypes.result_type``); ``inputs`` itself when nothing changes.
    ``apply`` does this on its general path (with the weak numbers, when there are some); a
    handler reached without it (eager's two-tensor fast path) calls it itself."""
    promote = op.promote
    if not promote or len(inputs) < 2:
        return inputs
    idx = range(len(inputs)) if promote is True else promote
    typed = _typed_operands(inputs, idx)
    if len(typed) < 2 or all(len(x.shape) for _, x in typed):
        return inputs
    return _cast_zero_dim(op, inputs, typed, dtypes.result_type(*[x for _, x in typed]))


def _handler_for(x) -> Optional[Callable]:
    h = _handlers.get(type(x))
    if h is None and _handlers:
        for cls in type(x).__mro__[1:]:
            h = _handlers.get(cls)
            if h is not None:
                break
    return h


def apply(op, inputs, attrs):
    """Run or record ``op`` on ``inputs``; see the module docstring for who does it. The
    attributes are checked against the op's schema first (``attrs.Attrs.validate``)."""
    schema = op.attrs
    if schema is not None and (attrs or schema.required):
        attrs = schema.validate(op.name, attrs)
    if not _local.graphs:       # one or two eager operands of one handler, no graph: case 3
        n = len(inputs)
        if n == 1:
            handler = _handlers.get(type(inputs[0]))
            if handler is not None:
                return handler(op, inputs, attrs)
        elif n == 2:
            handler = _handlers.get(type(inputs[0]))
            if handler is not None and _handlers.get(type(inputs[1])) is handler:
                return handler(op, inputs, attrs)
    graph: Optional[Graph] = None
    handler = None
    numbers = False
    for x in inputs:
        t = type(x)
        if t is Value:
            if graph is None:
                graph = x.graph
            elif x.graph is not graph and not _tracing():
                other = x.graph.name if x.graph is not None else None
                raise GraphError(
                    f"{op.name}: operands belong to different graphs "
                    f"({graph.name!r} and {other!r})\n  in: {user_source()}")
        elif t in _NUMBER_TYPES:
            numbers = True
        elif handler is None:
            handler = _handlers.get(t)
            if handler is None and not isinstance(x, (np.ndarray, np.generic, list, tuple)):
                handler = _handler_for(x)
    if numbers:
        inputs = _coerce_scalars(op, inputs)
    elif op.promote:
        inputs = cast_zero_dim_operands(op, inputs)
    stack = _local.graphs           # current_graph(), inlined
    cur = stack[-1] if stack else None
    if graph is None or (cur is not None and cur.captures is not None):
        graph = cur     # a body being traced reads outside values as captures
    if graph is not None:
        if op.autocast is not None and autocast.active():    # the casts become nodes
            inputs = autocast.cast_operands(op, inputs, attrs)
        return build(graph, op, inputs, attrs)
    if handler is not None:
        return handler(op, inputs, attrs)
    if _default_handler is not None:
        return _default_handler(op, inputs, attrs)
    raise GraphError(f"{op.name}: no graph is being built and eager mode is not available; "
                     f"build ops inside `with dg.Graph(...):`\n  in: {user_source()}")


# -- graph building ----------------------------------------------------------------------------

def constant_value(graph: Graph, value, dtype: Optional[str] = None) -> Value:
    """A constant node holding ``value`` (a number or an array) in ``graph``."""
    constant_op = get_op("constant")    # registered by ops.creation, above this module
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        dt = dtype or dtypes.infer_data_dtype(arr)
        arr = arr.astype(dt, copy=False)
        key = ("array", ConstArray(arr))
        attrs = {"value": key[1], "dtype": dt}
    else:
        dt = dtype or dtypes.default_dtype_for(value)
        py = dtypes.python_scalar(value, dt)
        key = ("scalar", type(py), value_key(py), dt)     # 0.0 and -0.0 apart
        attrs = {"value": py, "dtype": dt}
    cached = graph._const_cache.get(key)
    if cached is not None:
        return cached
    v = build(graph, constant_op, (), attrs)
    graph._const_cache[key] = v
    return v


def _tracing() -> bool:
    """Whether a control-flow body is being traced (it captures outside values)."""
    cur = current_graph()
    return cur is not None and cur.captures is not None


def as_value(x, graph: Graph, dtype: Optional[str] = None) -> Value:
    """Turn one operand into a Value of ``graph``."""
    if graph.captures is not None and not isinstance(x, (Scalar, np.ndarray, np.generic)) \
            and not _is_number(x) and not isinstance(x, (list, tuple)) \
            and getattr(x, "graph", None) is not graph:
        return graph.captures.capture(graph, x)
    if isinstance(x, Value):
        if x.graph is not graph:
            raise GraphError(f"a Value of graph {x.graph.name!r} was used in graph "
                             f"{graph.name!r}")
        return x
    if isinstance(x, Scalar):
        return constant_value(graph, x.value, x.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return constant_value(graph, x, dtype)
    if _is_number(x):
        return constant_value(graph, x, dtype)
    for cls in type(x).__mro__:
        cap = _capture.get(cls)
        if cap is not None:
            return cap(graph, x)
    if isinstance(x, (list, tuple)):
        return constant_value(graph, np.asarray(x), dtype or dtypes.infer_data_dtype(x))
    raise TypeError(f"expected a Value, tensor, array or number as an operand, found "
                    f"{type(x).__name__}")


def build(graph: Graph, op, inputs, attrs) -> Value:
    """Add ``op(*inputs, **attrs)`` to ``graph`` (shape/dtype inference runs here)."""
    source = user_source()
    try:
        vals = tuple(as_value(x, graph) for x in inputs)
    except (GraphError, TypeError) as e:    # a foreign Value, a string, None...
        msg = str(e) if str(e).startswith(op.name) else f"{op.name}: {e}"
        raise type(e)(msg if "\n  in: " in msg else f"{msg}\n  in: {source}") from None
    if op.random and "stream" not in attrs:
        attrs = dict(attrs, stream=graph.next_random_stream())
    if op.ordered and not attrs.get("seq"):
        attrs = dict(attrs, seq=next_sequence())
    out_types = infer_types(op, [v.type for v in vals], attrs, source)
    node = Node(op, vals, attrs, (), source)
    node.outputs = tuple(Value(t, node, i, graph) for i, t in enumerate(out_types))
    graph.append(node)
    if op.multi_output:
        return node.outputs
    return node.outputs[0]


def infer_types(op, types, attrs, source=None):
    """``op.infer(types, attrs)``, its failures raised as duograph's errors (a TypeError as a
    DTypeError, a ValueError as a ShapeError) that start with the op's name and end with the
    user's line (``source``, or the caller's found now): graph building and the eager
    dispatch report a bad operand the same way."""
    try:
        if not op.complex_ok:
            for t in types:
                if t.dtype in dtypes.COMPLEX_DTYPES:
                    raise UnsupportedDTypeError(
                        f"{op.name}: complex tensors are not supported (found {t.dtype}); "
                        f"take .real, .imag or .abs() first")
        if not op.storage_ok:
            for t in types:
                if t.dtype in dtypes.STORAGE_DTYPES:
                    raise UnsupportedDTypeError(
                        f"{op.name}: {t.dtype} tensors hold data only (casts, shape and "
                        f"indexing ops), as in PyTorch; cast to a compute dtype first "
                        f"(.float())")
        return op.infer(types, attrs)
    except (DuographError, TypeError, ValueError) as e:
        cls = type(e) if isinstance(e, DuographError) else (
            DTypeError if isinstance(e, TypeError) else ShapeError)
        msg = str(e)
        if not msg.startswith(op.name):
            msg = f"{op.name}: {msg}"
        if "\n  in: " not in msg:
            msg = f"{msg}\n  in: {source if source is not None else user_source()}"
        raise cls(msg) from None


# The services this module gives the modules below it (issue 26: they never import it).
registry.set_dispatcher(apply)                  # calling an OpDef
methods.set_dispatch(_handlers, _local)         # the tensor methods' eager fast path
install_service("as_value", as_value)           # Graph.update(state, number)
