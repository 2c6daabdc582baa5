"""duograph Graph -> ONNX ModelProto.

Each registered op has a converter (``CONVERTERS``, keyed by the OpDef) that emits the ONNX
nodes computing exactly what the op's reference kernel computes, dtype promotions included
(duograph casts mixed operands to the promoted dtype; ONNX ops want one dtype, so the casts
become ``Cast`` nodes). Nodes holding regions (``fused``, ``call``) are exported as their
bodies, inlined. An op with no converter, or attributes its converter cannot express, raises
``OnnxExportError`` naming the op and the user's source line; the source line of every node
goes into its ONNX nodes' ``doc_string``. An op that cannot be exported says why in
``REFUSED`` (keyed by the OpDef), and collectives (the ``ordered`` trait) are refused as such:
every registered op is in exactly one of the two tables or ordered (``tests/test_registry.py``).

This module holds the ``Exporter``, the two tables, ``converter``/``refused`` and
``graph_to_model``; the converters sit in one module per op family, as ``graphlib/ops`` is
laid out (``_elementwise_export``, ``_shape_export``, ``_indexing_export``, ``_reduce_export``,
``_nn_export``, ``_conv_export``, ``_control_export``), beside the import handlers of the same
family (``_<family>_import``). They import this module, never the reverse; the package
imports them all.
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..graphlib import dtypes
from ..graphlib.errors import DuographError
from ..graphlib.ir import Graph, Value
from ..graphlib.registry import OpDef, get_op

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = int(np.iinfo(np.int64).min)
_FLOATS = ("float32", "float64")


class OnnxExportError(DuographError):
    """A graph (or one of its ops) cannot be expressed in ONNX."""


def _onnx():
    try:
        import onnx
    except ImportError:           # pragma: no cover - the test extra installs it
        raise ImportError("duograph.onnx needs the onnx package: pip install onnx "
                          "(or pip install duograph[test])") from None
    return onnx


def onnx_dtype(dtype: str) -> int:
    """The ``TensorProto`` element type of a duograph dtype."""
    tp = _onnx().TensorProto
    return {"bool": tp.BOOL, "uint8": tp.UINT8, "int8": tp.INT8, "int16": tp.INT16,
            "int32": tp.INT32, "int64": tp.INT64, "float16": tp.FLOAT16,
            "bfloat16": tp.BFLOAT16, "float32": tp.FLOAT, "float64": tp.DOUBLE,
            "complex64": tp.COMPLEX64, "complex128": tp.COMPLEX128, "uint16": tp.UINT16,
            "uint32": tp.UINT32, "uint64": tp.UINT64, "float8_e4m3fn": tp.FLOAT8E4M3FN,
            "float8_e5m2": tp.FLOAT8E5M2, "float8_e4m3fnuz": tp.FLOAT8E4M3FNUZ,
            "float8_e5m2fnuz": tp.FLOAT8E5M2FNUZ, "int4": tp.INT4, "uint4": tp.UINT4,
            "float8_e8m0fnu": tp.FLOAT8E8M0, "float4_e2m1fn": tp.FLOAT4E2M1, "int2": tp.INT2,
            "uint2": tp.UINT2}[dtype]


class _Unsupported(Exception):
    """Raised by a converter: the op (with these attributes/types) has no exact ONNX form."""


def _refuse(why: str):
    raise _Unsupported(why)


class Exporter:
    """Walks a graph and collects ONNX nodes, initializers and names."""

    def __init__(self, graph: Graph, opset: int):
        self.graph = graph
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self.names: Dict[Value, str] = {}
        self.used: set = set()
        self.doc = ""
        self.op_label = ""
        self._dim_cache: Dict[str, str] = {}
        self._const_cache: Dict[tuple, str] = {}
        self.symbols: Dict[str, tuple] = {}     # symbol -> (onnx input name, axis)

    # -- names -----------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        base = hint or "t"
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def name_of(self, v: Value) -> str:
        try:
            return self.names[v]
        except KeyError:
            raise OnnxExportError(f"onnx export: value {v!r} is read before it is made "
                                  "(is it an input of another graph?)") from None

    # -- emitting --------------------------------------------------------------------------
    def emit(self, op_type: str, inputs: Sequence[str], n_out: int = 1, hint: str = "",
             **attrs) -> List[str]:
        helper = _onnx().helper
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node(op_type, list(inputs), outs, name=self.fresh("n_" + op_type),
                                **attrs)
        if self.doc:
            node.doc_string = self.doc
        self.nodes.append(node)
        return outs

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        """One node with one output; its name."""
        return self.emit(op_type, inputs, 1, **attrs)[0]

    def const(self, value, dtype: Optional[str] = None, hint: str = "const") -> str:
        """A Constant node holding ``value`` (cached by content)."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype.name not in dtypes.DTYPE_NAMES:
            arr = arr.astype(dtypes.infer_data_dtype(arr))
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        name = self._const_cache.get(key)
        if name is None:          # a Constant node: initializers are the model's state
            saved, self.doc = self.doc, ""
            name = self.op("Constant", value=_onnx().numpy_helper.from_array(arr),
                           hint=hint)
            self.doc = saved
            self._const_cache[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint="ints")

    def cast(self, name: str, src: str, dst: str) -> str:
        if src == dst:
            return name
        return self.op("Cast", name, to=onnx_dtype(dst))

    # -- dims ------------------------------------------------------------------------------
    def dim(self, d) -> str:
        """A 1-element int64 tensor holding the size ``d`` (an int or a symbolic dim built
        from the graph inputs' dims)."""
        if isinstance(d, (int, np.integer)):
            return self.ints([int(d)])
        text = str(d)
        if text in self._dim_cache:
            return self._dim_cache[text]
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            _refuse(f"the symbolic dim {text!r} has no ONNX form")
        name = self._dim_expr(tree, text)
        self._dim_cache[text] = name
        return name

    def _dim_expr(self, tree, text: str) -> str:
        if isinstance(tree, ast.Constant) and isinstance(tree.value, int):
            return self.ints([tree.value])
        if isinstance(tree, ast.Name):
            src = self.symbols.get(tree.id)
            if src is None:
                _refuse(f"the symbol {tree.id!r} (in dim {text!r}) is no graph input's dim")
            shape = self.op("Shape", src[0], start=src[1], end=src[1] + 1)
            return shape
        if isinstance(tree, ast.BinOp):
            ops = {ast.Add: "Add", ast.Sub: "Sub", ast.Mult: "Mul", ast.FloorDiv: "Div"}
            kind = ops.get(type(tree.op))
            if kind is not None:
                return self.op(kind, self._dim_expr(tree.left, text),
                               self._dim_expr(tree.right, text))
        if (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name)
                and tree.func.id == "floor" and len(tree.args) == 1
                and isinstance(tree.args[0], ast.BinOp) and isinstance(tree.args[0].op, ast.Div)):
            inner = tree.args[0]
            return self.op("Div", self._dim_expr(inner.left, text),
                           self._dim_expr(inner.right, text))
        _refuse(f"the symbolic dim {text!r} has no ONNX form")

    def shape_tensor(self, shape) -> str:
        """An int64 vector holding ``shape`` (constants where static)."""
        if all(isinstance(d, (int, np.integer)) for d in shape):
            return self.ints(shape)
        return self.op("Concat", *[self.dim(d) for d in shape], axis=0)

    def reshape(self, name: str, shape) -> str:
        """``name`` reshaped to ``shape`` (one non-static dim becomes -1; zero sizes kept)."""
        shape = tuple(shape)
        symbolic = [i for i, d in enumerate(shape) if not isinstance(d, (int, np.integer))]
        allowzero = 1 if any(isinstance(d, (int, np.integer)) and d == 0 for d in shape) \
            else None
        if len(symbolic) == 1 and not allowzero:
            target = self.ints([-1 if i == symbolic[0] else int(d) for i, d in
                                enumerate(shape)])
        else:
            target = self.shape_tensor(shape)
        if allowzero and self.opset < 14:
            _refuse("a reshape to a shape with a zero-size dim needs opset >= 14")
        return self.op("Reshape", name, target, allowzero=allowzero)

    def reduce(self, op_type: str, name: str, axes, keepdims: bool) -> str:
        """``op_type`` (ReduceSum, ReduceMean, ...) over ``axes`` (never empty here)."""
        axes = [int(a) for a in axes]
        takes_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if takes_input:
            return self.op(op_type, name, self.ints(axes), keepdims=int(keepdims))
        return self.op(op_type, name, axes=axes, keepdims=int(keepdims))

    def squeeze(self, name: str, axes) -> str:
        if not axes:
            return name
        return self.op("Squeeze", name, self.ints(axes))

    def unsqueeze(self, name: str, axes) -> str:
        if not axes:
            return name
        return self.op("Unsqueeze", name, self.ints(axes))

    # -- walking ---------------------------------------------------------------------------
    def run_nodes(self, graph: Graph, outer_doc: str = "") -> None:
        for node in graph.nodes:
            source = node.source
            self.doc = str(source) if source is not None else outer_doc
            conv = CONVERTERS.get(node.op)
            where = f"\n  in: {source}" if source is not None else ""
            if node.op in REFUSED:
                raise OnnxExportError(f"onnx export: op {node.op.name!r} cannot be exported: "
                                      f"{REFUSED[node.op]}{where}")
            if any(v.dtype in dtypes.COMPLEX_DTYPES for v in (*node.inputs, *node.outputs)):
                raise OnnxExportError(f"onnx export: op {node.op.name!r} cannot be exported: "
                                      f"it computes complex numbers, which onnxruntime has "
                                      f"no kernels for{where}")
            if conv is None and node.op.ordered:
                raise OnnxExportError(
                    f"onnx export: op {node.op.name!r} is a collective (communication "
                    f"between processes), which ONNX cannot express; export the model "
                    f"without its distributed wrapper{where}")
            if conv is None:
                raise OnnxExportError(
                    f"onnx export: op {node.op.name!r} has no ONNX form{where}")
            ins = [self.name_of(x) for x in node.inputs]
            try:
                outs = conv(self, node, ins)
            except _Unsupported as e:
                raise OnnxExportError(f"onnx export: op {node.op.name!r} cannot be exported: "
                                      f"{e}{where}") from None
            if len(outs) != len(node.outputs):      # pragma: no cover - converter bug
                raise OnnxExportError(f"onnx export: the converter of {node.op.name!r} gave "
                                      f"{len(outs)} outputs for {len(node.outputs)}")
            for v, o in zip(node.outputs, outs):
                self.names[v] = o

    def inline(self, body: Graph, ins: Sequence[str], doc: str) -> List[str]:
        """A region's body exported in place, reading ``ins``; its outputs' names."""
        for v, n in zip(body.inputs, ins):
            self.names[v] = n
        saved = self.doc
        self.run_nodes(body, doc)
        self.doc = saved
        return [self.name_of(o) for o in body.outputs]


# -- converters --------------------------------------------------------------------------------
CONVERTERS: Dict[OpDef, Callable] = {}
# op -> why it has no ONNX form (the export error says it)
REFUSED: Dict[OpDef, str] = {}


def converter(*names: str):
    """Register the decorated function as the converter of the ops named ``names``, keyed
    by their OpDefs (a name that is no registered op fails here, at import)."""
    def register(fn):
        for n in names:
            CONVERTERS[get_op(n)] = fn
        return fn
    return register


def refused(why: str, *names: str) -> None:
    """Declare that the ops named ``names`` have no ONNX form, and why."""
    for n in names:
        REFUSED[get_op(n)] = why


def _in(node, i=0) -> str:
    return node.inputs[i].dtype


def _out(node, i=0) -> str:
    return node.outputs[i].dtype


# ONNX runtimes implement arithmetic for a few element types only: compute in a wider type
# where duograph's dtype has no kernel (exactly: uint8 wraps when cast back, as numpy wraps;
# float16 is computed in float32 and rounded, as numpy's float16 loops do).
_WIDE = {"uint8": "int32", "int8": "int32", "int16": "int32", "bool": "int32",
         "float16": "float32", "bfloat16": "float32"}


def _compute_dtype(dtype: str, allowed=("int32", "int64", "float32", "float64")) -> str:
    if dtype in allowed:
        return dtype
    return _WIDE.get(dtype, dtype)


# -- ops without an ONNX form ------------------------------------------------------------------
refused("ONNX has no such op, and no exact composite is written yet", "floor_divide", "atan2",
        "hypot")
refused("its output's size depends on the data", "nonzero")
refused("ONNX has no exact form of it (ScatterElements lacks mean and include_self)",
        "scatter_reduce")
refused("no converter is written yet (Col2Im needs opset 18 and static sizes)", "fold")
refused("no converter is written yet", "max_unpool2d", "adaptive_max_pool2d_indices",
        "linear_recurrence", "masked_scatter", "masked_take")
refused("a gradient op: no converter is written yet (export the forward graph)",
        "max_pool2d_backward", "max_pool2d_gather", "avg_pool2d_backward")
refused("ONNX has no complex tensors", "real", "imag", "conj", "angle", "complex")
refused("no converter is written yet (ONNX's DFT keeps complex numbers as pairs of reals)",
        "fft_c2c", "fft_r2c", "fft_c2r")
refused("ONNX has no such op (nor LAPACK-exact composite of it)", "linalg_inv", "linalg_solve",
        "linalg_slogdet", "linalg_cholesky", "linalg_qr", "linalg_qr_r", "linalg_eigh",
        "linalg_pinv", "linalg_lstsq")


@converter("linalg_det")
def _linalg_det(ex, node, ins):
    return [ex.op("Det", ins[0])]


# -- the model ---------------------------------------------------------------------------------
def _value_info(name: str, v_dtype: str, shape):
    helper = _onnx().helper
    dims = [int(d) if isinstance(d, (int, np.integer)) else str(d) for d in shape]
    return helper.make_tensor_value_info(name, onnx_dtype(v_dtype), dims)


def _state_array(graph: Graph, v: Value) -> np.ndarray:
    holder = graph.bindings.get(v)
    if holder is not None:
        arr = holder.array
        arr = arr.get() if hasattr(arr, "get") else arr
        return np.asarray(arr)
    return np.asarray(graph.state_init[v])


def graph_to_model(graph: Graph, opset: int = 17, output_names: Optional[Sequence[str]] = None,
                   doc: str = ""):
    """The ONNX ``ModelProto`` of ``graph``: placeholders become inputs (symbolic dims as
    ``dim_param``), state that the outputs read becomes initializers named as the state,
    ``graph.outputs`` the outputs."""
    onnx = _onnx()
    helper = onnx.helper
    if not graph.outputs:
        raise OnnxExportError(f"onnx export: graph {graph.name!r} has no outputs; set "
                              "graph.outputs = [...] first")
    if graph.updates:
        names = ", ".join(sorted(s.name for s, _ in graph.updates.values()))
        raise OnnxExportError(
            f"onnx export: graph {graph.name!r} updates state ({names}): an ONNX model is a "
            "pure function of its inputs. Export a model in eval mode (module.eval()), or "
            "a graph without state updates")
    ex = Exporter(graph, opset)
    inputs, inits = [], []
    for v in graph.inputs:
        ex.used.add(v.name)
        ex.names[v] = v.name
        inputs.append(_value_info(v.name, v.dtype, v.shape))
        for axis, d in enumerate(v.shape):
            if not isinstance(d, (int, np.integer)) and str(d).isidentifier():
                ex.symbols.setdefault(str(d), (v.name, axis))
    for v in graph.state:
        ex.used.add(v.name)
        ex.names[v] = v.name
        arr = np.asarray(_state_array(graph, v)).astype(v.dtype, copy=False)
        inits.append(onnx.numpy_helper.from_array(arr, v.name))
    if output_names is not None and len(output_names) != len(graph.outputs):
        raise OnnxExportError(f"onnx export: {len(output_names)} output names for "
                              f"{len(graph.outputs)} outputs")
    if output_names is None:
        output_names = (["output"] if len(graph.outputs) == 1 else
                        [f"output{i}" for i in range(len(graph.outputs))])
    for n in output_names:
        if n in ex.used:
            raise OnnxExportError(f"onnx export: output name {n!r} is already an input or "
                                  "parameter name")
        ex.used.add(n)
    ex.run_nodes(graph)
    outputs = []
    for v, n in zip(graph.outputs, output_names):
        ex.doc = str(v.node.source) if v.node is not None and v.node.source else ""
        ex.nodes.append(helper.make_node("Identity", [ex.name_of(v)], [n],
                                         name=ex.fresh("n_output")))
        outputs.append(_value_info(n, v.dtype, v.shape))
    # state that no node reads (an eval-mode BatchNorm's num_batches_tracked) is left out
    read = _names_read(ex.nodes)
    inits = [t for t in inits if t.name in read]
    g = helper.make_graph(ex.nodes, graph.name, inputs, outputs, inits + ex.initializers)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="duograph")
    if doc:
        model.doc_string = doc
    model.ir_version = min(model.ir_version, _max_ir_version(opset))
    return model


def _names_read(nodes) -> set:
    """The names ``nodes`` read, inside their subgraphs (If/Loop/Scan bodies) too."""
    read = set()
    for node in nodes:
        read.update(node.input)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= _names_read(sub.node)
    return read


def _max_ir_version(opset: int) -> int:
    """The IR version that goes with ``opset`` (onnxruntime refuses newer ones)."""
    table = _onnx().helper.VERSION_TABLE
    best = None
    for row in table:
        if row[2] == opset:
            best = row[1] if best is None else min(best, row[1])
    return best if best is not None else 8
