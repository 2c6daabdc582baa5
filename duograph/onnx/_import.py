"""ONNX ModelProto -> duograph Graph.

Each ONNX op has a handler (``HANDLERS``, keyed by op type) written with duograph's public op
functions, composing them where duograph has no op of its own, and only where the
composition is exact. A node whose inputs are all known when the graph is built (constants,
initializers imported as constants, ``static_inputs``) is computed at once: the same handler
runs on eager tensors (constant folding with the same semantics), which is how shape
arithmetic (Shape -> Gather -> Concat -> Reshape) becomes the static attributes duograph's
ops take. Over symbolic dims (an input of type ``[N, 3, 224, 224]``), the same arithmetic
gives ``ShapeValue``s, shapes known up to sympy dims (``_shape_values``), which Reshape,
Expand, Range... take as symbolic attributes: one import runs at any batch size. Integer
initializers are known too, even where float ones become state. Everything else becomes
graph nodes. An op, attribute or dtype that cannot be
imported exactly raises ``OnnxImportError`` naming the node; an input that an op needs as a
known value (a Reshape's target fed as a graph input) raises ``NeedsStatic``, which the
backend answers by building again with that input's fed value.

Folding is bounded: what import computes may take at most ``FOLD_LIMIT_BYTES`` (64 MiB) in
all. Before a node is computed, its handler builds it on a scratch graph over placeholders
(types only, no data) to learn its outputs' sizes; a node whose outputs would pass the limit
becomes a graph node instead, computed at run time (a 150-byte model with
``ConstantOfShape([40000, 40000])`` made the importer allocate 6 GB). Handlers that build
arrays of a size read from the model (Range, EyeLike, OneHot...) check it against the same
limit and refuse clearly. Tensors stored in the model (initializers, Constant values) are
checked against their dims before they are read (``tensor_array``).
"""
from __future__ import annotations

import contextlib
import math
import os
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from .. import eager
from ..graphlib import functional as F
from ..graphlib.files import NotRegularFileError, open_regular
from ..graphlib.ir import Graph, Value
from ..graphlib.ir import _stack as _graph_stack
from ..graphlib.types import TensorType
from ._errors import OnnxImportError
from ._shape_values import FOLDS, ShapeValue, as_shape_value, materialize, settle, \
    known_initializers


# What import-time folding may materialise, in all (outputs of computed nodes; the model's
# own tensors, initializers and Constant values, do not count).
FOLD_LIMIT_BYTES = 64 << 20


class NeedsStatic(OnnxImportError):
    """An op needs the value of graph input ``name`` when the graph is built."""

    def __init__(self, message: str, names: list):
        super().__init__(message)
        self.names = list(names)


class _Refuse(Exception):
    pass


def refuse(why: str):
    raise _Refuse(why)


def _onnx():
    import onnx
    return onnx


def np_dtype_of(elem_type: int) -> str:
    """The duograph dtype of an ONNX element type; refused when duograph has none."""
    tp = _onnx().TensorProto
    table = _elem_table()
    if elem_type not in table:
        name = tp.DataType.Name(elem_type) if elem_type in tp.DataType.values() else elem_type
        refuse(f"element type {name} (duograph has {', '.join(sorted(set(table.values())))})")
    return table[elem_type]


def _elem_table() -> dict:
    """ONNX element type -> duograph dtype, for every type duograph has."""
    tp = _onnx().TensorProto
    table = {tp.BOOL: "bool", tp.UINT8: "uint8", tp.INT8: "int8", tp.INT16: "int16",
             tp.INT32: "int32", tp.INT64: "int64", tp.FLOAT16: "float16",
             tp.BFLOAT16: "bfloat16", tp.FLOAT: "float32", tp.DOUBLE: "float64",
             tp.UINT16: "uint16", tp.UINT32: "uint32", tp.UINT64: "uint64",
             tp.FLOAT8E4M3FN: "float8_e4m3fn", tp.FLOAT8E5M2: "float8_e5m2",
             tp.FLOAT8E4M3FNUZ: "float8_e4m3fnuz", tp.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
             tp.INT4: "int4", tp.UINT4: "uint4"}
    for onnx_name, name in (("FLOAT8E8M0", "float8_e8m0fnu"), ("FLOAT4E2M1", "float4_e2m1fn"),
                            ("INT2", "int2"), ("UINT2", "uint2")):
        if hasattr(tp, onnx_name):          # newer onnx releases
            table[getattr(tp, onnx_name)] = name
    return table


# bits per element of the packed element types (their raw data holds 2 or 4 per byte)
_PACKED_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def tensor_array(tensor, what: str) -> np.ndarray:
    """The array of the ONNX ``TensorProto`` ``tensor`` in its duograph dtype; ``what`` names
    it in errors ("initializer 'w'"). Its dims and data are checked before anything is
    allocated: a negative dim, or data that does not hold exactly the elements the dims
    give, is an ``OnnxImportError`` (numpy_helper would give (0, 3) for dims [-5, 3], and a
    raw ValueError for dims of 1e18 over 16 bytes)."""
    onnx = _onnx()
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"onnx import: {what} has dims {dims}: a dim cannot be negative")
    try:
        dt = np_dtype_of(tensor.data_type)
    except _Refuse as e:
        raise OnnxImportError(f"onnx import: {what}: {e}") from None
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise OnnxImportError(f"onnx import: {what} is stored in an external file; load the "
                              "model with onnx.load(path) first")
    count = math.prod(dims)
    if tensor.HasField("raw_data"):
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        need = count * itemsize
        if dt in _PACKED_BITS:
            need = -(-count * _PACKED_BITS[dt] // 8)
        found, unit = len(tensor.raw_data), "bytes"
    else:
        field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        need = -(-count * _PACKED_BITS[dt] // 8) if dt in _PACKED_BITS else count
        found, unit = len(getattr(tensor, field)), f"values in {field}"
    if found != need:
        raise OnnxImportError(f"onnx import: {what} of dims {dims} and type "
                              f"{onnx.TensorProto.DataType.Name(tensor.data_type)} needs "
                              f"{need} {unit}, the model holds {found}")
    try:
        return np.asarray(onnx.numpy_helper.to_array(tensor)).astype(dt)
    except Exception as e:                    # noqa: BLE001 - anything else onnx refuses
        raise OnnxImportError(f"onnx import: {what} cannot be read: {type(e).__name__}: "
                              f"{e}") from None


# -- the context a handler sees ------------------------------------------------------------------
class Ctx:
    """One node being imported: its operands (Values, eager tensors, ``ShapeValue``s known
    up to symbolic dims, or None for a missing optional input) and attributes. A ShapeValue
    operand becomes a graph value only when the handler takes it as a tensor (``x``)."""

    def __init__(self, imp: "Importer", node, operands: list, known: list, eager_mode: bool):
        self.imp = imp
        self.node = node
        self._ins = list(operands)
        self._known = known
        self.eager = eager_mode
        self.attrs = {a.name: a for a in node.attribute}
        self.opset = imp.opset

    @property
    def ins(self) -> list:
        return [self.x(i) if self.has(i) else None for i in range(len(self._ins))]

    @ins.setter
    def ins(self, operands) -> None:
        self._ins = list(operands)

    def __len__(self):
        return len(self._ins)

    def has(self, i: int) -> bool:
        return i < len(self._ins) and self._ins[i] is not None

    def x(self, i: int = 0):
        if not self.has(i):
            refuse(f"input {i} is missing")
        v = self._ins[i]
        if isinstance(v, ShapeValue):
            v = self._ins[i] = self.imp.materialize(v)
        return v

    def known(self, i: int, what: str = "") -> np.ndarray:
        """Input ``i``'s value, needed when the graph is built."""
        if not self.has(i):
            refuse(f"input {i} is missing")
        v = self._known[i]
        if isinstance(v, ShapeValue):
            refuse(f"input {i} ({what or self.node.input[i]}) holds the symbolic dims "
                   f"{[str(e) for e in v.elems]}, and this op needs numbers when the graph "
                   "is built (give the inputs' sizes in input_shapes)")
        if v is None:
            self.imp.needs_known(self.node, i, what)
        return v

    def dims(self, i: int, what: str = "") -> list:
        """Input ``i``'s entries as dims (ints or symbolic dims), needed when the graph is
        built: a shape computed from the symbolic sizes of the inputs is fine."""
        if self.has(i) and isinstance(self._known[i], ShapeValue):
            return list(self._known[i].elems)
        return [int(d) for d in np.ravel(self.known(i, what))]

    def attr(self, name: str, default=None):
        a = self.attrs.get(name)
        if a is None:
            return default
        v = _onnx().helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        return v

    def const(self, value, dtype: str):
        """A constant operand of ``dtype`` (eager or in the graph, as the node runs)."""
        arr = np.asarray(value, dtype=dtype)
        if self.eager:
            return eager.tensor(arr)
        return F.constant(arr, dtype)

    def dtype(self, i: int = 0) -> str:
        if self.has(i) and isinstance(self._ins[i], ShapeValue):
            return self._ins[i].dtype
        return self.x(i).dtype

    def shape(self, i: int = 0) -> tuple:
        if self.has(i) and isinstance(self._ins[i], ShapeValue):
            return self._ins[i].shape
        return tuple(self.x(i).shape)


def check_size(shape, dtype, what: str) -> None:
    """Refuse an array of ``shape`` and ``dtype`` that a handler would build at import when
    it would take more than ``FOLD_LIMIT_BYTES``: its size comes from the model, and a few
    bytes of model must not make the importer allocate gigabytes."""
    dims = [int(d) for d in shape]
    nbytes = math.prod(dims) * np.dtype(dtype).itemsize
    if nbytes > FOLD_LIMIT_BYTES:
        refuse(f"{what} of shape {dims} ({nbytes} bytes) is more than the "
               f"{FOLD_LIMIT_BYTES} bytes import may compute (FOLD_LIMIT_BYTES)")


def static_shape(ctx: Ctx, i: int = 0, axes=None) -> tuple:
    """Input ``i``'s shape, refused where a dim the op needs as a number (those of ``axes``,
    or all) is symbolic."""
    shape = ctx.shape(i)
    need = range(len(shape)) if axes is None else axes
    if not all(isinstance(shape[a], int) for a in need):
        what = "dims" if axes is None else f"dims (the op needs axes {list(axes)} known)"
        refuse(f"input {i} has symbolic {what} {[str(d) for d in shape]}; this op needs "
               "them known (load with input_shapes=...)")
    return shape


HANDLERS: Dict[str, callable] = {}


def handler(*names: str):
    def register(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


# -- the importer --------------------------------------------------------------------------------
class Importer:
    def __init__(self, model, initializers: str = "state",
                 static_inputs: Optional[Mapping[str, np.ndarray]] = None,
                 input_shapes: Optional[Mapping[str, Sequence]] = None,
                 input_types: Optional[Mapping[str, TensorType]] = None):
        _onnx()                 # a clear ImportError when the onnx package is missing
        self.model = model
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
            elif model.graph.node and any(n.domain == imp.domain for n in model.graph.node):
                raise OnnxImportError(f"onnx import: operator domain {imp.domain!r} is not "
                                      "supported (only the default ONNX domain)")
        if initializers not in ("state", "constant"):
            raise ValueError(f"onnx import: initializers must be 'state' or 'constant', "
                             f"found {initializers!r}")
        self.initializers = initializers
        self.static = {k: np.asarray(v) for k, v in (static_inputs or {}).items()}
        self.input_shapes = dict(input_shapes or {})
        self.input_types = dict(input_types or {})
        self.graph = Graph(_identifier(model.graph.name or "onnx_model"))
        self.env: Dict[str, object] = {}       # name -> Value or np.ndarray (known)
        self.folded_bytes = 0                  # what computing known nodes materialised
        init_names = {t.name for t in model.graph.initializer}
        self.graph_input_names = [i.name for i in model.graph.input if i.name not in init_names]
        self._symbols: Dict[str, str] = {}
        # symbol -> (graph input, axis) whose size it is: how a symbolic dim is computed at
        # run time when a shape value is used as data (x * x.shape[0])
        self.sym_sources: Dict[str, tuple] = {}

    def _producers(self) -> dict:
        producers = {}
        for node in self.model.graph.node:
            for o in node.output:
                producers[o] = node
        return producers

    def input_sources(self, name: str) -> list:
        """The graph inputs (not yet static) whose *values* the value ``name`` is computed
        from (a Shape or Size of an input reads its type, not its value)."""
        producers = self._producers()
        inputs = set(self.graph_input_names) - set(self.static)
        found, stack, seen = [], [name], set()
        while stack:
            n = stack.pop()
            if n in seen or not n:
                continue
            seen.add(n)
            if n in inputs:
                found.append(n)
            elif n in producers and producers[n].op_type not in ("Shape", "Size"):
                stack.extend(_reads(producers[n]))
        return sorted(found)

    def needs_known(self, node, i: int, what: str):
        """Refuse ``node``, whose input ``i`` must be known when the graph is built and is
        not, naming where it comes from: graph inputs (``NeedsStatic``, which names them for
        static_inputs), initializers kept as trainable state, or a node computing it from
        run-time data."""
        name = node.input[i]
        label = f"{node.op_type}: {what or 'operand'} {i} ({name!r})"
        sources = self.input_sources(name)
        if sources:
            raise NeedsStatic(f"{label} is computed from the values of the graph inputs "
                              f"{sources}, and duograph needs it when the graph is built; "
                              "pass their values in static_inputs", sources)
        producers = self._producers()
        states, stack, seen, makers = [], [name], set(), []
        inits = {t.name for t in self.model.graph.initializer}
        while stack:
            n = stack.pop()
            if n in seen or not n:
                continue
            seen.add(n)
            if n in inits and not isinstance(self.env.get(n), np.ndarray):
                states.append(n)
            elif n in producers:
                p = producers[n]
                if not all(isinstance(self.env.get(x), (np.ndarray, ShapeValue))
                           for x in p.input if x):
                    makers.append(p)
                stack.extend(_reads(p))
        if states:
            refuse(f"{what or name} is computed from the initializers {sorted(states)}, "
                   "imported as trainable state, and duograph needs it when the graph is "
                   "built; load with initializers='constant' (which freezes them)")
        if makers:
            m = makers[-1]
            refuse(f"{what or name} depends on run-time data through node "
                   f"{m.name or m.output[0]!r} ({m.op_type}), and duograph needs it when "
                   "the graph is built (its size would depend on the data)")
        refuse(f"input {i} ({what or name}) is computed at run time, but duograph needs it "
               "when the graph is built")

    def materialize(self, sv: ShapeValue) -> Value:
        """A shape value as a graph value, computed at run time from the inputs' sizes."""
        return materialize(sv, self.sym_sources, refuse)

    def run(self) -> Graph:
        g = self.graph
        m = self.model.graph
        known = known_initializers(m)    # integers and settings: known even as state
        for t in m.initializer:
            arr = self._array(t)
            if self.initializers == "constant" or t.name in self.static or t.name in known:
                self.env[t.name] = arr
            else:
                self.env[t.name] = g.add_state(_state_name(t.name, g), arr)
        for vi in m.input:
            if vi.name in self.env and vi.name not in self.static:
                continue            # an initializer listed among the inputs (old exporters)
            if vi.name in self.static:
                self.env[vi.name] = self.static[vi.name]
                continue
            t = self.input_types.get(vi.name) or self._input_type(vi)
            name = vi.name if vi.name.isidentifier() else _identifier(vi.name)
            self.env[vi.name] = v = g.add_input(name, t)
            for axis, d in enumerate(t.shape):
                if isinstance(d, str) and getattr(d, "is_symbol", False):
                    self.sym_sources.setdefault(str(d), (v, axis))
        self.run_nodes(m.node)
        outs = []
        for vo in m.output:
            v = self.env.get(vo.name)
            if v is None:
                raise OnnxImportError(f"onnx import: output {vo.name!r} is never computed")
            outs.append(self.as_value(v))
        g.outputs = outs
        return g

    def run_nodes(self, nodes) -> None:
        for node in nodes:
            self.run_node(node)

    def _array(self, tensor) -> np.ndarray:
        return tensor_array(tensor, f"initializer {tensor.name!r}")

    def _input_type(self, vi) -> TensorType:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"onnx import: input {vi.name!r} is not a tensor (sequences, "
                                  "maps and optionals are not supported)")
        try:
            dt = np_dtype_of(tt.elem_type)
        except _Refuse as e:
            raise OnnxImportError(f"onnx import: input {vi.name!r}: {e}") from None
        if vi.name in self.input_shapes:
            return TensorType(tuple(self.input_shapes[vi.name]), dt)
        if not tt.HasField("shape"):
            raise OnnxImportError(f"onnx import: input {vi.name!r} has no shape; give it in "
                                  "input_shapes")
        dims = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            else:
                sym = d.dim_param or f"{_identifier(vi.name)}_{k}"
                dims.append(self._symbols.setdefault(sym, _identifier(sym)))
        return TensorType(tuple(dims), dt)

    def as_value(self, v):
        """``v`` as a Value of the graph (a known array becomes a constant, a shape value
        the computation of its symbolic dims)."""
        if isinstance(v, Value):
            return v
        if isinstance(v, ShapeValue):           # sizes of the inputs, read at run time
            with self.graph:
                return self.materialize(v)
        arr = np.asarray(v)
        with self.graph:
            return F.constant(arr, arr.dtype.name)

    def run_node(self, node) -> None:
        where = f"node {node.name!r} ({node.op_type})" if node.name else f"{node.op_type} node"
        if node.domain not in ("", "ai.onnx"):
            raise OnnxImportError(f"onnx import: {where}: domain {node.domain!r} is not "
                                  "supported")
        fn = HANDLERS.get(node.op_type)
        if fn is None:
            raise OnnxImportError(f"onnx import: {where}: op {node.op_type} is not supported")
        raw = [self.env[n] if n else None for n in node.input]
        for n, r in zip(node.input, raw):
            if n and n not in self.env:
                raise OnnxImportError(f"onnx import: {where}: input {n!r} is not defined")
        known = [r if isinstance(r, (np.ndarray, ShapeValue)) else None for r in raw]
        if any(isinstance(r, ShapeValue) for r in raw) and \
                self._fold_shape(node, where, raw, known):
            return
        eager_mode = all(r is None or isinstance(r, np.ndarray) for r in raw) and \
            node.op_type not in _NEVER_FOLD
        counted = eager_mode and node.op_type not in _NOT_COUNTED
        if counted and node.op_type not in _NO_DRY_RUN:
            size = self._fold_size(fn, node, raw, known)
            if size is not None and self.folded_bytes + size > FOLD_LIMIT_BYTES:
                eager_mode = counted = False     # too big to compute now: run time does it
        try:
            if eager_mode:
                with eager.no_grad(), _no_graph():
                    ops = [None if r is None else eager.tensor(r) for r in raw]
                    ctx = Ctx(self, node, ops, known, True)
                    outs = fn(ctx)
            else:
                with self.graph:
                    ops = [r if r is None or isinstance(r, ShapeValue) else self.as_value(r)
                           for r in raw]
                    ctx = Ctx(self, node, ops, known, False)
                    outs = fn(ctx)
        except NeedsStatic:
            raise
        except _Refuse as e:
            raise OnnxImportError(f"onnx import: {where}: {e}") from None
        except OnnxImportError:
            raise
        except Exception as e:
            raise OnnxImportError(f"onnx import: {where}: {type(e).__name__}: {e}") from e
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for name, o in zip(node.output, outs):
            if not name:
                continue
            if o is None:
                raise OnnxImportError(f"onnx import: {where}: output {name!r} is not "
                                      "supported")
            if isinstance(o, eager.Tensor):
                o = o.numpy().copy()
                if counted:
                    self.folded_bytes += o.nbytes
            elif isinstance(o, Value) and o.node is not None and o.node.op.constant:
                value = o.node.attrs["value"]          # known after all (Shape of a Value)
                o = np.asarray(getattr(value, "array", value), dtype=o.dtype)
            self.env[name] = settle(o)
        if len(outs) < len([n for n in node.output if n]):
            missing = [n for n in node.output[len(outs):] if n]
            if missing:
                raise OnnxImportError(f"onnx import: {where}: outputs {missing} are not "
                                      "supported")

    def _fold_shape(self, node, where: str, raw: list, known: list) -> bool:
        """Compute ``node`` at import on shape values (``FOLDS``) when its inputs are all
        known, some up to symbolic dims; False when it does not apply (the node is then
        built in the graph, its shape values taken as graph values)."""
        fn = FOLDS.get(node.op_type)
        if fn is None or not all(r is None or k is not None for r, k in zip(raw, known)):
            return False
        vals = [None if r is None else as_shape_value(r) for r in raw]
        if any(v is None for v, r in zip(vals, raw) if r is not None):
            return False
        try:
            out = fn(Ctx(self, node, vals, known, False), vals)
        except _Refuse as e:
            raise OnnxImportError(f"onnx import: {where}: {e}") from None
        if out is None:
            return False
        self.env[node.output[0]] = settle(out)
        return True

    def _fold_size(self, fn, node, raw: list, known: list) -> Optional[int]:
        """The bytes ``node``'s outputs would take if it were computed now: its handler
        builds it on a scratch graph over placeholders of the known inputs' types (no data
        is computed). None where that does not work: ops whose output shapes depend on
        values (NonZero, Unique) are only computed eagerly, and their results are no
        larger than their inputs."""
        scratch = Graph("fold_check")
        try:
            with _no_graph(), scratch:
                ops = [None if r is None else
                       scratch.add_input(f"in{k}", TensorType(r.shape, r.dtype.name))
                       for k, r in enumerate(raw)]
                outs = fn(Ctx(self, node, ops, known, False))
        except Exception:   # noqa: BLE001 - the eager run reports what is wrong
            return None
        total = 0
        for o in outs if isinstance(outs, (list, tuple)) else [outs]:
            if isinstance(o, Value):
                n = o.type.nbytes()
                if n is None:
                    return None
                total += n
        return total


@contextlib.contextmanager
def _no_graph():
    """Known values fold eagerly even while a control-flow body is being traced (an op on
    eager tensors would otherwise build a node of the traced body)."""
    stack = _graph_stack()
    saved = stack[:]
    del stack[:]
    try:
        yield
    finally:
        stack[:] = saved


_NEVER_FOLD = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike",
               "Bernoulli", "Multinomial"}
# Ops whose known result is the model's own data (not counted against FOLD_LIMIT_BYTES), and
# ops not built on a scratch graph first (their bodies import through run_node themselves,
# node by node, each checked; a scratch build would write the importer's environment).
_NOT_COUNTED = {"Constant", "Identity"}
_NO_DRY_RUN = {"If", "Loop", "Scan"}


def _reads(node) -> list:
    """The names ``node`` reads: its inputs, and the outer values its subgraphs (If
    branches, Loop and Scan bodies, nested ones too) read."""
    names = list(node.input)
    stack = [a for a in node.attribute]
    while stack:
        a = stack.pop()
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                names.extend(n.input)
                stack.extend(n.attribute)
    return names


def _identifier(name: str) -> str:
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not s or not (s[0].isalpha() or s[0] == "_"):
        s = "v_" + s
    return s


def _state_name(name: str, g: Graph) -> str:
    ok = all(p.isidentifier() or p.isdigit() for p in name.split("."))
    base = name if ok and name else _identifier(name)
    out, k = base, 1
    while out in g._names:
        out, k = f"{base}_{k}", k + 1
    return out


def import_model(path_or_model, initializers: str = "state", static_inputs=None,
                 input_shapes=None, input_types=None) -> Graph:
    onnx = _onnx()
    model = path_or_model
    try:
        if isinstance(model, (bytes, bytearray)):
            model = onnx.load_model_from_string(bytes(model))
        elif not isinstance(model, onnx.ModelProto):
            model = _read_model(onnx, path_or_model)
    except NotRegularFileError as e:
        raise OnnxImportError(f"onnx import: {str(path_or_model)!r} is {e.kind}, not a "
                              "regular file (refused without reading it)") from None
    except OSError:
        raise
    except Exception as e:                  # protobuf's DecodeError and its relatives
        what = "these bytes are" if isinstance(model, (bytes, bytearray)) else \
            f"{str(path_or_model)!r} is"
        raise OnnxImportError(f"onnx import: {what} not an ONNX model "
                              f"({type(e).__name__}: {e})") from None
    if not model.HasField("graph"):          # an empty file parses as an empty ModelProto
        if isinstance(path_or_model, onnx.ModelProto):
            what = "the ModelProto"
        elif isinstance(path_or_model, (bytes, bytearray)):
            what = f"these {len(path_or_model)} bytes"
        else:
            what = repr(str(path_or_model))
        raise OnnxImportError(f"onnx import: {what}: no graph in it (empty or truncated?): "
                              "not an ONNX model")
    g = Importer(model, initializers, static_inputs, input_shapes, input_types).run()
    return g


def _read_model(onnx, path):
    """``onnx.load(path)``, but opening only a regular file (a FIFO or a device would hang
    or never end); tensors kept in external files are read from beside it, as onnx does."""
    name = os.fspath(path)
    with open_regular(name) as f:
        data = f.read()
    model = onnx.load_model_from_string(data)
    from onnx.external_data_helper import load_external_data_for_model
    load_external_data_for_model(model, os.path.dirname(os.path.abspath(name)))
    return model
