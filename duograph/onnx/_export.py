"""duograph Graph -> ONNX ModelProto.

Each registered op has a converter here (``CONVERTERS``, keyed by the OpDef) that emits the ONNX
nodes computing exactly what the op's reference kernel computes, dtype promotions included
(duograph casts mixed operands to the promoted dtype; ONNX ops want one dtype, so the casts
become ``Cast`` nodes). Nodes holding regions (``fused``, ``call``) are exported as their
bodies, inlined. An op with no converter, or attributes its converter cannot express, raises
``OnnxExportError`` naming the op and the user's source line; the source line of every node
goes into its ONNX nodes' ``doc_string``. An op that cannot be exported says why in
``REFUSED`` (keyed by the OpDef), and collectives (the ``ordered`` trait) are refused as such:
every registered op is in exactly one of the two tables or ordered (``tests/test_registry.py``).
"""
from __future__ import annotations

import ast
import math
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..graphlib import dtypes
from ..graphlib.errors import DuographError
from ..graphlib.ir import ConstArray, Graph, Value
from ..graphlib.registry import OpDef, get_op

INT64_MAX = np.iinfo(np.int64).max


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
            "complex64": tp.COMPLEX64, "complex128": tp.COMPLEX128}[dtype]


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


def _unary_float(op_type: str):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        work = _compute_dtype(out, ("float32", "float64"))
        x = ex.cast(ins[0], _in(node), work)
        return [ex.cast(ex.op(op_type, x), work, out)]
    return conv


for _name, _op_type in (("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("sin", "Sin"),
                        ("cos", "Cos"), ("tanh", "Tanh"), ("sigmoid", "Sigmoid"),
                        ("erf", "Erf"), ("reciprocal", "Reciprocal")):
    CONVERTERS[get_op(_name)] = _unary_float(_op_type)


def _unary_numeric(build: Callable, allowed=("int32", "int64", "float32", "float64")):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        work = _compute_dtype(out, allowed)
        x = ex.cast(ins[0], _in(node), work)
        return [ex.cast(build(ex, x, work), work, out)]
    return conv


for _name, _op_type in (("tan", "Tan"), ("asin", "Asin"), ("acos", "Acos"), ("atan", "Atan"),
                        ("sinh", "Sinh"), ("cosh", "Cosh"), ("asinh", "Asinh"),
                        ("acosh", "Acosh"), ("atanh", "Atanh")):
    CONVERTERS[get_op(_name)] = _unary_float(_op_type)
# log2, log10, exp2 through natural log / exp (within an ulp)
refused("ONNX has no form of it that keeps its accuracy near 0", "log1p", "expm1")
CONVERTERS[get_op("log2")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Div", ex.op("Log", x), ex.const(math.log(2.0), dt)),
    ("float32", "float64"))
CONVERTERS[get_op("log10")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Div", ex.op("Log", x), ex.const(math.log(10.0), dt)),
    ("float32", "float64"))
CONVERTERS[get_op("exp2")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Pow", ex.const(2.0, dt), x), ("float32", "float64"))


def _rounding(op_type: str):
    """Floor/Ceil on floats; integers pass through; trunc as sign(x) * floor(|x|)."""
    def conv(ex, node, ins):
        out = _out(node)
        if not out.startswith("float"):
            return [ex.op("Identity", ins[0])]
        work = _compute_dtype(out, ("float32", "float64"))
        x = ex.cast(ins[0], _in(node), work)
        if op_type == "Trunc":
            y = ex.op("Mul", ex.op("Sign", x), ex.op("Floor", ex.op("Abs", x)))
        elif op_type == "Frac":
            y = ex.op("Sub", x, ex.op("Mul", ex.op("Sign", x), ex.op("Floor", ex.op("Abs", x))))
        else:
            y = ex.op(op_type, x)
        return [ex.cast(y, work, out)]
    return conv


for _name, _op_type in (("floor", "Floor"), ("ceil", "Ceil"), ("trunc", "Trunc"),
                        ("frac", "Frac")):
    CONVERTERS[get_op(_name)] = _rounding(_op_type)


def _float_test(build: Callable, integers: bool):
    """IsNaN/IsInf on floats; integers are never NaN or infinite (the answer ``integers``)."""
    def conv(ex, node, ins):
        dt = _in(node)
        if not dt.startswith("float"):
            same = ex.op("Equal", ins[0], ins[0])       # all True, in the input's shape
            return [same if integers else ex.op("Not", same)]
        x = ex.cast(ins[0], dt, _compute_dtype(dt, ("float32", "float64")))
        return [build(ex, x)]
    return conv


CONVERTERS[get_op("isnan")] = _float_test(lambda ex, x: ex.op("IsNaN", x), False)
CONVERTERS[get_op("isinf")] = _float_test(lambda ex, x: ex.op("IsInf", x), False)
CONVERTERS[get_op("isfinite")] = _float_test(
    lambda ex, x: ex.op("Not", ex.op("Or", ex.op("IsNaN", x), ex.op("IsInf", x))), True)
# logsigmoid(x) = min(x, 0) - softplus(-|x|) (ONNX has no LogSigmoid)
CONVERTERS[get_op("logsigmoid")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Sub", ex.op("Min", x, ex.const(0, dt)),
                            ex.op("Softplus", ex.op("Neg", ex.op("Abs", x)))),
    ("float32", "float64"))
CONVERTERS[get_op("neg")] = _unary_numeric(lambda ex, x, dt: ex.op("Neg", x))
CONVERTERS[get_op("abs")] = _unary_numeric(lambda ex, x, dt: ex.op("Abs", x))
CONVERTERS[get_op("square")] = _unary_numeric(lambda ex, x, dt: ex.op("Mul", x, x))
# sign(NaN) is 0, as PyTorch's (ONNX's Sign keeps NaN)
CONVERTERS[get_op("sign")] = _unary_numeric(
    lambda ex, x, dt: ex.op("Where", ex.op("IsNaN", x), ex.const(0, dt), ex.op("Sign", x))
    if dt.startswith("float") else ex.op("Sign", x))
CONVERTERS[get_op("relu")] = _unary_numeric(lambda ex, x, dt: ex.op("Max", x, ex.const(0, dt)))


@converter("rsqrt")
def _rsqrt(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    return [ex.cast(ex.op("Reciprocal", ex.op("Sqrt", x)), work, out)]


@converter("leaky_relu")
def _leaky_relu(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    slope = node.attrs["negative_slope"]
    # x where x > 0, else x * slope (LeakyRelu computes the same, written out for any slope)
    y = ex.op("Where", ex.op("Greater", x, ex.const(0, work)), x,
              ex.op("Mul", x, ex.const(slope, work)))
    return [ex.cast(y, work, out)]


@converter("gelu")
def _gelu(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)

    def c(v):
        return ex.const(v, work)
    if node.attrs["approximate"] == "tanh":
        x3 = ex.op("Mul", ex.op("Mul", x, x), x)
        inner = ex.op("Mul", c(math.sqrt(2.0 / math.pi)),
                      ex.op("Add", x, ex.op("Mul", c(0.044715), x3)))
        t = ex.op("Tanh", inner)
    else:
        t = ex.op("Erf", ex.op("Div", x, c(math.sqrt(2.0))))
    y = ex.op("Mul", ex.op("Mul", c(0.5), x), ex.op("Add", c(1.0), t))
    return [ex.cast(y, work, out)]


@converter("softplus")
def _softplus(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    x = ex.cast(ins[0], _in(node), work)
    beta, threshold = node.attrs["beta"], node.attrs["threshold"]
    bx = ex.op("Mul", x, ex.const(beta, work))
    # max(bx, 0) + log(1 + exp(-|bx|)), divided by beta; x itself past the threshold
    soft = ex.op("Add", ex.op("Max", bx, ex.const(0, work)),
                 ex.op("Log", ex.op("Add", ex.const(1, work),
                                    ex.op("Exp", ex.op("Neg", ex.op("Abs", bx))))))
    soft = ex.op("Div", soft, ex.const(beta, work))
    y = ex.op("Where", ex.op("Greater", bx, ex.const(threshold, work)), x, soft)
    return [ex.cast(y, work, out)]


def _float_in(ex, node, ins):
    """(input cast to its float compute dtype, that dtype, the output dtype)."""
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    return ex.cast(ins[0], _in(node), work), work, out


@converter("elu")
def _elu(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    a = node.attrs
    # scale * x for x > 0, else scale * alpha * (exp(min(x, 0) * input_scale) - 1)
    neg = ex.op("Mul", ex.op("Min", x, ex.const(0, work)), ex.const(a["input_scale"], work))
    neg = ex.op("Mul", ex.op("Sub", ex.op("Exp", neg), ex.const(1, work)),
                ex.const(a["alpha"] * a["scale"], work))
    y = ex.op("Where", ex.op("LessOrEqual", x, ex.const(0, work)), neg,
              ex.op("Mul", x, ex.const(a["scale"], work)))
    return [ex.cast(y, work, out)]


@converter("hardtanh")
def _hardtanh(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    x = ex.op("Max", x, ex.const(node.attrs["min_val"], work))
    return [ex.cast(ex.op("Min", x, ex.const(node.attrs["max_val"], work)), work, out)]


def _relu6_of_x_plus_3(ex, x, work):
    shifted = ex.op("Add", x, ex.const(3, work))
    return ex.op("Min", ex.op("Max", shifted, ex.const(0, work)), ex.const(6, work))


@converter("hardsigmoid")
def _hardsigmoid(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    y = ex.op("Div", _relu6_of_x_plus_3(ex, x, work), ex.const(6, work))
    return [ex.cast(y, work, out)]


@converter("hardswish")
def _hardswish(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    y = ex.op("Div", ex.op("Mul", x, _relu6_of_x_plus_3(ex, x, work)), ex.const(6, work))
    return [ex.cast(y, work, out)]


@converter("silu")
def _silu(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    return [ex.cast(ex.op("Mul", x, ex.op("Sigmoid", x)), work, out)]


@converter("mish")
def _mish(ex, node, ins):
    x, work, out = _float_in(ex, node, ins)
    soft = ex.op("Add", ex.op("Max", x, ex.const(0, work)),
                 ex.op("Log", ex.op("Add", ex.const(1, work),
                                    ex.op("Exp", ex.op("Neg", ex.op("Abs", x))))))
    return [ex.cast(ex.op("Mul", x, ex.op("Tanh", soft)), work, out)]


@converter("logical_not")
def _logical_not(ex, node, ins):
    return [ex.op("Not", ex.cast(ins[0], _in(node), "bool"))]


@converter("clamp")
def _clamp(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    lo, hi = node.attrs["min"], node.attrs["max"]
    if lo is not None:
        x = ex.op("Max", x, ex.const(lo, work))
    if hi is not None:
        x = ex.op("Min", x, ex.const(hi, work))
    return [ex.cast(x, work, out)]


@converter("pow_scalar")
def _pow_scalar(ex, node, ins):
    out = _out(node)
    e = node.attrs["exponent"]
    work = _compute_dtype(out)
    x = ex.cast(ins[0], _in(node), work)
    if e == 2:
        y = ex.op("Mul", x, x)
    elif e == 1:
        y = ex.op("Identity", x)
    elif dtypes.is_float(out):
        y = ex.op("Pow", x, ex.const(e, work))
    elif isinstance(e, int) and e >= 0:
        y = ex.op("Pow", x, ex.const(e, work))
    else:
        _refuse(f"integer power with exponent {e!r}")
    return [ex.cast(y, work, out)]


@converter("cast")
def _cast(ex, node, ins):
    src, dst = _in(node), _out(node)
    if src == dst:
        return [ex.op("Identity", ins[0])]
    return [ex.op("Cast", ins[0], to=onnx_dtype(dst))]


@converter("stop_gradient", "to_device")
def _identity(ex, node, ins):
    return [ex.op("Identity", ins[0])]


def _binary_arith(op_type: str, bool_op: Optional[str] = None, float_only: bool = False):
    def conv(ex: Exporter, node, ins):
        out = _out(node)
        if out == "bool":
            if bool_op is None:
                _refuse(f"{node.op.name} of bool operands")
            a, b = (ex.cast(n, t.dtype, "bool") for n, t in zip(ins, node.inputs))
            return [ex.op(bool_op, a, b)]
        work = _compute_dtype(out, ("float32", "float64") if float_only else
                              ("int32", "int64", "float32", "float64"))
        a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
        return [ex.cast(ex.op(op_type, a, b), work, out)]
    return conv


CONVERTERS[get_op("add")] = _binary_arith("Add", "Or")
CONVERTERS[get_op("sub")] = _binary_arith("Sub")
CONVERTERS[get_op("mul")] = _binary_arith("Mul", "And")
CONVERTERS[get_op("div")] = _binary_arith("Div", float_only=True)
CONVERTERS[get_op("maximum")] = _binary_arith("Max", "Or")
CONVERTERS[get_op("minimum")] = _binary_arith("Min", "And")


@converter("tanh_backward", "sigmoid_backward")
def _activation_backward(ex, node, ins):
    """``grad * (1 - y * y)`` and ``grad * y * (1 - y)``, in the kernels' order."""
    out = _out(node)
    work = _compute_dtype(out, ("float32", "float64"))
    g, y = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    one = ex.const(1, work)
    if node.op.name == "tanh_backward":
        res = ex.op("Mul", g, ex.op("Sub", one, ex.op("Mul", y, y)))
    else:
        res = ex.op("Mul", ex.op("Mul", g, y), ex.op("Sub", one, y))
    return [ex.cast(res, work, out)]


@converter("fmod")
def _fmod(ex, node, ins):
    """C's fmod (the dividend's sign): ONNX Mod with fmod=1, exact for ints and floats."""
    out = _out(node)
    if out == "bool":
        _refuse("fmod of bool operands")
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("Mod", a, b, fmod=1), work, out)]


@converter("remainder")
def _remainder(ex, node, ins):
    """Python's % (the divisor's sign): integers are ONNX Mod with fmod=0; floats are numpy's
    algorithm on fmod: r = fmod(a, b), plus b where r is nonzero and its sign differs from
    b's, and a zero takes b's sign (onnx's reference evaluator keeps that -0.0; onnxruntime
    1.32 returns +0.0 there)."""
    out = _out(node)
    if out == "bool":
        _refuse("remainder of bool operands")
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    if not work.startswith("float"):
        return [ex.cast(ex.op("Mod", a, b, fmod=0), work, out)]
    r = ex.op("Mod", a, b, fmod=1)
    zero = ex.const(0.0, work)
    b_neg = ex.op("Less", b, zero)
    flip = ex.op("And", ex.op("Not", ex.op("Equal", r, zero)),
                 ex.op("Xor", ex.op("Less", r, zero), b_neg))
    r = ex.op("Where", flip, ex.op("Add", r, b), r)
    signed_zero = ex.op("Mul", ex.op("Abs", r), ex.op("Sign", b))    # +-0 where r is 0
    r = ex.op("Where", ex.op("Equal", r, zero), signed_zero, r)
    return [ex.cast(r, work, out)]


@converter("pow")
def _pow(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("Pow", a, b), work, out)]


def _common_dtype(a: str, b: str) -> str:
    """The dtype numpy compares ``a`` and ``b`` in (duograph compares mixed operands exactly
    as they are, which numpy does in their common type)."""
    return np.result_type(np.dtype(a), np.dtype(b)).name


def _compare(op_type: str, negate: bool = False):
    def conv(ex: Exporter, node, ins):
        dt = _common_dtype(_in(node, 0), _in(node, 1))
        if op_type != "Equal" or dt not in ("bool",):
            dt = _compute_dtype(dt)
        a, b = (ex.cast(n, t.dtype, dt) for n, t in zip(ins, node.inputs))
        y = ex.op(op_type, a, b)
        return [ex.op("Not", y) if negate else y]
    return conv


CONVERTERS[get_op("eq")] = _compare("Equal")
CONVERTERS[get_op("ne")] = _compare("Equal", negate=True)
CONVERTERS[get_op("lt")] = _compare("Less")
CONVERTERS[get_op("le")] = _compare("LessOrEqual")
CONVERTERS[get_op("gt")] = _compare("Greater")
CONVERTERS[get_op("ge")] = _compare("GreaterOrEqual")


def _logic(op_type: str):
    def conv(ex, node, ins):
        a, b = (ex.cast(n, t.dtype, "bool") for n, t in zip(ins, node.inputs))
        return [ex.op(op_type, a, b)]
    return conv


CONVERTERS[get_op("logical_and")] = _logic("And")
CONVERTERS[get_op("logical_or")] = _logic("Or")
CONVERTERS[get_op("logical_xor")] = _logic("Xor")


def _bitwise(op_type: str, logical: str):
    """Bools: ONNX's logical op; integers (in the result dtype): Bitwise* (opset 18)."""
    def conv(ex, node, ins):
        out = _out(node)
        if out == "bool":
            return [ex.op(logical, *ins)]
        if ex.opset < 18:
            _refuse(f"{node.op.name} on integers needs opset >= 18 ({op_type})")
        args = [ex.cast(n, t.dtype, out) for n, t in zip(ins, node.inputs)]
        return [ex.op(op_type, *args)]
    return conv


CONVERTERS[get_op("bitwise_and")] = _bitwise("BitwiseAnd", "And")
CONVERTERS[get_op("bitwise_or")] = _bitwise("BitwiseOr", "Or")
CONVERTERS[get_op("bitwise_xor")] = _bitwise("BitwiseXor", "Xor")
CONVERTERS[get_op("bitwise_not")] = _bitwise("BitwiseNot", "Not")


@converter("where")
def _where(ex, node, ins):
    out = _out(node)
    a = ex.cast(ins[1], _in(node, 1), out)
    b = ex.cast(ins[2], _in(node, 2), out)
    return [ex.op("Where", ins[0], a, b)]


@converter("matmul")
def _matmul(ex, node, ins):
    out = _out(node)
    work = _compute_dtype(out)
    a, b = (ex.cast(n, t.dtype, work) for n, t in zip(ins, node.inputs))
    return [ex.cast(ex.op("MatMul", a, b), work, out)]


# -- shapes ------------------------------------------------------------------------------------
@converter("reshape")
def _reshape(ex, node, ins):
    return [ex.reshape(ins[0], node.outputs[0].shape)]


@converter("permute")
def _permute(ex, node, ins):
    return [ex.op("Transpose", ins[0], perm=list(node.attrs["dims"]))]


@converter("expand")
def _expand(ex, node, ins):
    src, dst = node.inputs[0].shape, node.outputs[0].shape
    lead = len(dst) - len(src)
    target = [1 if i >= lead and src[i - lead] == d else d for i, d in enumerate(dst)]
    return [ex.op("Expand", ins[0], ex.shape_tensor(target))]


@converter("sum_to")
def _sum_to(ex, node, ins):
    src, dst = node.inputs[0].shape, node.outputs[0].shape
    lead = len(src) - len(dst)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(dst)
                                if d == 1 and src[lead + i] != 1]
    if not axes:
        return [ex.op("Identity", ins[0])]
    dt = _in(node)
    work = _compute_dtype(dt)
    y = ex.reduce("ReduceSum", ex.cast(ins[0], dt, work), axes, True)
    if lead:
        y = ex.squeeze(y, list(range(lead)))
    return [ex.cast(y, work, dt)]


@converter("cat")
def _cat(ex, node, ins):
    out = _out(node)
    parts = [ex.cast(n, t.dtype, out) for n, t in zip(ins, node.inputs)]
    return [ex.op("Concat", *parts, axis=node.attrs["dim"])]


@converter("split")
def _split(ex, node, ins):
    sizes = node.attrs["sizes"]
    if ex.opset < 13:
        _refuse("split needs opset >= 13")
    split = ex.shape_tensor(sizes)
    return ex.emit("Split", [ins[0], split], len(sizes), axis=node.attrs["dim"])


@converter("getitem")
def _getitem(ex, node, ins):
    items = node.attrs["index"]
    starts, ends, axes, steps, drop, new = [], [], [], [], [], []
    axis = 0
    out_axis = 0
    for it in items:
        if it[0] == "n":
            new.append(out_axis)
            out_axis += 1
            continue
        if it[0] == "i":
            k = it[1]
            starts.append(k)
            ends.append(k + 1 if k != -1 else INT64_MAX)
            axes.append(axis)
            steps.append(1)
            drop.append(axis)
        else:
            _, start, stop, step = it
            if not (start in (None, 0) and stop is None and step in (None, 1)):
                step = 1 if step is None else step
                starts.append(0 if start is None else start)
                ends.append(INT64_MAX if stop is None else stop)
                axes.append(axis)
                steps.append(step)
            out_axis += 1
        axis += 1
    x = ins[0]
    if axes:
        x = ex.op("Slice", x, ex.ints(starts), ex.ints(ends), ex.ints(axes), ex.ints(steps))
    x = ex.squeeze(x, drop)
    if new:
        x = ex.unsqueeze(x, new)
    if x == ins[0]:
        x = ex.op("Identity", x)
    return [x]


@converter("getitem_grad")
def _getitem_grad(ex, node, ins):
    from ..graphlib.ops.shape import _python_index
    g, x = node.inputs
    if not all(isinstance(d, int) for d in x.shape):
        _refuse("the scatter of a slice's gradient needs a static shape")
    size = int(np.prod(x.shape, dtype=np.int64))
    where = np.arange(size, dtype=np.int64).reshape(x.shape)[_python_index(node.attrs["index"])]
    zeros = ex.const(np.zeros(size, dtype=g.dtype))
    flat = ex.reshape(ins[0], (int(np.size(where)),))
    y = ex.op("ScatterElements", zeros, ex.const(np.ravel(where)), flat, axis=0)
    return [ex.reshape(y, x.shape)]


@converter("gather")
def _gather(ex, node, ins):
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("GatherElements", ins[0], idx, axis=node.attrs["dim"])]


@converter("index_select")
def _index_select(ex, node, ins):
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("Gather", ins[0], idx, axis=node.attrs["dim"])]


def _scatter_add(ex, node, x, idx, src):
    if ex.opset < 16:
        _refuse("scatter with reduction='add' needs opset >= 16")
    out = _out(node)
    work = _compute_dtype(out)
    x = ex.cast(x, _in(node, 0), work)
    src = ex.cast(src, _in(node, 2), work)
    y = ex.op("ScatterElements", x, idx, src, axis=node.attrs["dim"], reduction="add")
    return [ex.cast(y, work, out)]


@converter("scatter_add")
def _scatter_add_conv(ex, node, ins):
    return _scatter_add(ex, node, ins[0], ex.cast(ins[1], _in(node, 1), "int64"), ins[2])


@converter("index_add")
def _index_add(ex, node, ins):
    dim = node.attrs["dim"]
    src = node.inputs[2]
    idx = ex.cast(ins[1], _in(node, 1), "int64")
    col = ex.unsqueeze(idx, [a for a in range(src.ndim) if a != dim])
    full = ex.op("Expand", col, ex.op("Shape", ins[2]))
    return _scatter_add(ex, node, ins[0], full, ins[2])


@converter("pad")
def _pad(ex, node, ins):
    x = node.inputs[0]
    pad = node.attrs["pad"]
    begin, end = [0] * x.ndim, [0] * x.ndim
    for k in range(len(pad) // 2):
        begin[x.ndim - 1 - k] = pad[2 * k]
        end[x.ndim - 1 - k] = pad[2 * k + 1]
    value = ex.const(np.asarray(node.attrs["value"]).astype(x.dtype))
    dt = x.dtype
    work = _compute_dtype(dt, ("int32", "int64", "float32", "float64", "bool", "uint8"))
    y = ex.op("Pad", ex.cast(ins[0], dt, work), ex.ints(begin + end),
              ex.cast(value, dt, work), mode="constant")
    return [ex.cast(y, work, dt)]


# -- reductions --------------------------------------------------------------------------------
def _reduction(op_type: str, accumulate: bool):
    def conv(ex, node, ins):
        x = node.inputs[0]
        out = _out(node)
        dims, keep = node.attrs["dim"], node.attrs["keepdim"]
        work = _compute_dtype(out)
        name = ex.cast(ins[0], x.dtype, work if accumulate else _compute_dtype(x.dtype))
        if x.ndim == 0 or not dims:
            return [ex.cast(ex.op("Identity", name), work, out)]
        y = ex.reduce(op_type, name, dims, keep)
        return [ex.cast(y, work if accumulate else _compute_dtype(x.dtype), out)]
    return conv


CONVERTERS[get_op("sum")] = _reduction("ReduceSum", True)
CONVERTERS[get_op("prod")] = _reduction("ReduceProd", True)
CONVERTERS[get_op("mean")] = _reduction("ReduceMean", True)
CONVERTERS[get_op("amax")] = _reduction("ReduceMax", False)
CONVERTERS[get_op("amin")] = _reduction("ReduceMin", False)
# max and min: amax and amin with another gradient rule
CONVERTERS[get_op("max")] = _reduction("ReduceMax", False)
CONVERTERS[get_op("min")] = _reduction("ReduceMin", False)


def _count(ex, v: Value, dims, dtype: str) -> str:
    """The number of elements of ``v`` over ``dims`` as a 0-d ``dtype`` tensor."""
    sizes = [v.shape[d] for d in dims]
    if all(isinstance(s, int) for s in sizes):
        return ex.const(np.asarray(int(np.prod(sizes, dtype=np.int64)), dtype=dtype))
    shape = ex.op("Shape", ex.name_of(v)) if v in ex.names else None
    parts = [ex.op("Gather", shape, ex.ints([d]), axis=0) for d in dims]
    prod = parts[0] if len(parts) == 1 else ex.reduce("ReduceProd", ex.op(
        "Concat", *parts, axis=0), [0], False)
    if len(parts) == 1:
        prod = ex.squeeze(prod, [0])
    return ex.op("Cast", prod, to=onnx_dtype(dtype))


@converter("var", "std")
def _var(ex, node, ins):
    x = node.inputs[0]
    out = _out(node)
    dims, keep, corr = node.attrs["dim"], node.attrs["keepdim"], node.attrs["correction"]
    work = _compute_dtype(out, ("float32", "float64"))
    name = ex.cast(ins[0], x.dtype, work)
    if x.ndim == 0 or not dims:
        dims = ()
        centered = ex.op("Sub", name, name)
        sq = ex.op("Mul", centered, centered)
        total = sq
    else:
        mean = ex.reduce("ReduceMean", name, dims, True)
        centered = ex.op("Sub", name, mean)
        total = ex.reduce("ReduceSum", ex.op("Mul", centered, centered), dims, keep)
    n = _count(ex, x, dims, work)
    y = ex.op("Div", total, ex.op("Sub", n, ex.const(corr, work)))
    if node.op.name == "std":
        y = ex.op("Sqrt", y)
    return [ex.cast(y, work, out)]


@converter("argmax", "argmin")
def _arg(ex, node, ins):
    x = node.inputs[0]
    dim, keep = node.attrs["dim"], node.attrs["keepdim"]
    op_type = "ArgMax" if node.op.name == "argmax" else "ArgMin"
    name = ex.cast(ins[0], x.dtype, _compute_dtype(x.dtype))
    if x.ndim == 0:
        return [ex.const(np.zeros((), np.int64))]
    if dim is None:
        flat = ex.reshape(name, (-1,)) if x.ndim != 1 else name
        y = ex.op(op_type, flat, axis=0, keepdims=0)
        if keep:
            y = ex.reshape(y, (1,) * x.ndim)
        return [y]
    return [ex.op(op_type, name, axis=dim, keepdims=int(keep))]


# -- scans, sorting and norms (cumprod needs opset 26's CumProd)
refused("ONNX has no exact form of it", "cummax", "cummin", "logcumsumexp", "mode", "svd")
@converter("cumsum")
def _cumsum(ex, node, ins):
    x, out = node.inputs[0], _out(node)
    work = _compute_dtype(out)          # integers sum in int64, float16 in float32
    y = ex.op("CumSum", ex.cast(ins[0], x.dtype, work),
              ex.const(np.asarray(node.attrs["dim"], np.int64)),
              reverse=int(node.attrs.get("reverse", False)))
    return [ex.cast(y, work, out)]


@converter("cumprod")
def _cumprod(ex, node, ins):
    if ex.opset < 26:
        _refuse("cumprod needs opset >= 26 (CumProd)")
    x, out = node.inputs[0], _out(node)
    work = _compute_dtype(out)          # integers multiply in int64, float16 in float32
    y = ex.op("CumProd", ex.cast(ins[0], x.dtype, work),
              ex.const(np.asarray(node.attrs["dim"], np.int64)))
    return [ex.cast(y, work, out)]


def _topk_all(ex, name, n, axis: int, largest: bool):
    """(values, indices) of a full sort along ``axis`` by TopK (equal elements keep their
    order, ascending and descending, as duograph's stable sort)."""
    return ex.emit("TopK", (name, ex.dim(n)), 2, axis=axis, largest=int(largest), sorted=1)


@converter("sort")
def _sort(ex, node, ins):
    x = node.inputs[0]
    work = _compute_dtype(x.dtype)
    if work not in ("int32", "int64", "float32", "float64"):
        _refuse(f"sort of {x.dtype} has no exact ONNX form")
    dim = node.attrs["dim"]
    values, indices = _topk_all(ex, ex.cast(ins[0], x.dtype, work), x.shape[dim], dim,
                                node.attrs.get("descending", False))
    return [ex.cast(values, work, x.dtype), indices]


@converter("median_all")
def _median_all(ex, node, ins):
    x = node.inputs[0]
    n = 1
    for d in x.shape:
        if not isinstance(d, int):
            _refuse("median of a tensor with symbolic dims")
        n *= d
    work = _compute_dtype(x.dtype)
    if work not in ("int32", "int64", "float32", "float64"):
        _refuse(f"median of {x.dtype} has no exact ONNX form")
    flat = ex.reshape(ex.cast(ins[0], x.dtype, work), (n,))
    values, _ = _topk_all(ex, flat, n, 0, False)
    y = ex.op("Gather", values, ex.const(np.asarray((n - 1) // 2, np.int64)), axis=0)
    if dtypes.is_float(work):           # NaN anywhere: the median is NaN
        nan = ex.reduce("ReduceMax", ex.op("Cast", ex.op("IsNaN", flat),
                                           to=onnx_dtype("int32")), [0], False)
        y = ex.op("Where", ex.op("Cast", nan, to=onnx_dtype("bool")),
                  ex.const(np.asarray(np.nan, work)), y)
    return [ex.cast(y, work, x.dtype)]


@converter("vector_norm")
def _vector_norm(ex, node, ins):
    x, out = node.inputs[0], _out(node)
    p, dims, keep = node.attrs["ord"], node.attrs["dim"], node.attrs["keepdim"]
    work = _compute_dtype(out, ("float32", "float64"))
    a = ex.op("Abs", ex.cast(ins[0], x.dtype, work))

    def red(op_type, name):
        return ex.reduce(op_type, name, dims, keep) if dims and x.ndim else name
    if math.isinf(p):
        y = red("ReduceMax" if p > 0 else "ReduceMin", a)
    elif p == 0:
        nz = ex.op("Not", ex.op("Equal", a, ex.const(np.asarray(0, work))))
        y = red("ReduceSum", ex.op("Cast", nz, to=onnx_dtype(work)))
    elif p == 1:
        y = red("ReduceSum", a)
    elif p == 2:
        y = ex.op("Sqrt", red("ReduceSum", ex.op("Mul", a, a)))
    else:
        y = ex.op("Pow", red("ReduceSum", ex.op("Pow", a, ex.const(np.asarray(p, work)))),
                  ex.const(np.asarray(1.0 / p, work)))
    return [ex.cast(y, work, out)]


def _finite_shift(ex, m: str, dtype: str) -> str:
    """``m`` with 0 where it is not finite (inf or NaN)."""
    bad = ex.op("Or", ex.op("IsInf", m), ex.op("IsNaN", m))
    return ex.op("Where", bad, ex.const(0, dtype), m)


@converter("logsumexp")
def _logsumexp(ex, node, ins):
    x = node.inputs[0]
    out = _out(node)
    dims, keep = node.attrs["dim"], node.attrs["keepdim"]
    work = _compute_dtype(out, ("float32", "float64"))
    name = ex.cast(ins[0], x.dtype, work)
    if x.ndim == 0 or not dims:
        return [ex.cast(ex.op("Identity", name), work, out)]
    m = _finite_shift(ex, ex.reduce("ReduceMax", name, dims, True), work)
    s = ex.reduce("ReduceSum", ex.op("Exp", ex.op("Sub", name, m)), dims, True)
    y = ex.op("Add", ex.op("Log", s), m)
    if not keep:
        y = ex.squeeze(y, list(dims))
    return [ex.cast(y, work, out)]


@converter("numel")
def _numel(ex, node, ins):
    return [_count(ex, node.inputs[0], node.attrs["dim"], _out(node))]


# -- nn ----------------------------------------------------------------------------------------
def _softmax(op_type: str):
    def conv(ex, node, ins):
        x = node.inputs[0]
        out = _out(node)
        work = _compute_dtype(out, ("float32", "float64"))
        name = ex.cast(ins[0], x.dtype, work)
        if x.ndim == 0:
            value = 1 if op_type == "Softmax" else 0
            return [ex.cast(ex.op("Add", ex.op("Mul", name, ex.const(0, work)),
                                  ex.const(value, work)), work, out)]
        y = ex.op(op_type, name, axis=node.attrs["dim"])
        return [ex.cast(y, work, out)]
    return conv


CONVERTERS[get_op("softmax")] = _softmax("Softmax")
CONVERTERS[get_op("log_softmax")] = _softmax("LogSoftmax")


@converter("one_hot")
def _one_hot(ex, node, ins):
    x = ex.cast(ins[0], _in(node), "int64")
    classes = ex.const(np.arange(node.attrs["num_classes"], dtype=np.int64))
    hit = ex.op("Equal", ex.unsqueeze(x, [node.inputs[0].ndim]), classes)
    return [ex.op("Cast", hit, to=onnx_dtype("int64"))]


def _channel_shape(x: Value) -> list:
    return [1, -1] + [1] * (x.ndim - 2)


@converter("batch_norm_train")
def _batch_norm_train(ex, node, ins):
    x = node.inputs[0]
    dt = x.dtype
    work = _compute_dtype(dt, ("float32", "float64"))
    xs, w, b = (ex.cast(n, dt, work) for n in ins)
    axes = [0] + list(range(2, x.ndim))
    mean = ex.reduce("ReduceMean", xs, axes, True)
    centered = ex.op("Sub", xs, mean)
    var = ex.reduce("ReduceMean", ex.op("Mul", centered, centered), axes, True)
    scale = ex.op("Div", ex.reshape(w, _channel_shape(x)),
                  ex.op("Sqrt", ex.op("Add", var, ex.const(node.attrs["eps"], work))))
    y = ex.op("Add", ex.op("Mul", centered, scale), ex.reshape(b, _channel_shape(x)))
    return [ex.cast(y, work, dt), ex.cast(ex.reshape(mean, (x.shape[1],)), work, dt),
            ex.cast(ex.reshape(var, (x.shape[1],)), work, dt)]


@converter("batch_norm_train_backward")
def _batch_norm_train_backward(ex, node, ins):
    dy_v, x, w_v, mean_v, var_v = node.inputs
    dt = x.dtype
    work = _compute_dtype(dt, ("float32", "float64"))
    dy, xs, w, mean, var = (ex.cast(n, dt, work) for n in ins)
    axes = [0] + list(range(2, x.ndim))
    cs = _channel_shape(x)
    invstd = ex.op("Reciprocal", ex.op("Sqrt", ex.op("Add", var, ex.const(
        node.attrs["eps"], work))))
    centered = ex.op("Sub", xs, ex.reshape(mean, cs))
    m_dy = ex.reduce("ReduceMean", dy, axes, False)
    m_dyxc = ex.reduce("ReduceMean", ex.op("Mul", dy, centered), axes, False)
    k1 = ex.reshape(ex.op("Mul", w, invstd), cs)
    inner = ex.op("Sub", ex.op("Sub", dy, ex.reshape(m_dy, cs)),
                  ex.op("Mul", centered, ex.reshape(ex.op("Mul", ex.op(
                      "Mul", invstd, invstd), m_dyxc), cs)))
    dx = ex.op("Mul", k1, inner)
    db = ex.reduce("ReduceSum", dy, axes, False)
    dw = ex.op("Mul", ex.reduce("ReduceSum", ex.op("Mul", dy, centered), axes, False), invstd)
    return [ex.cast(dx, work, dt), ex.cast(dw, work, dt), ex.cast(db, work, dt)]


@converter("softmax_cross_entropy")
def _sce(ex, node, ins):
    if ex.opset < 13:
        _refuse("SoftmaxCrossEntropyLoss with ignore_index needs opset >= 13")
    target = ex.cast(ins[1], _in(node, 1), "int64")
    return [ex.op("SoftmaxCrossEntropyLoss", ins[0], target,
                  ignore_index=node.attrs["ignore_index"], reduction=node.attrs["reduction"])]


@converter("softmax_cross_entropy_backward")
def _sce_backward(ex, node, ins):
    g_v, x, t_v = node.inputs
    dt = x.dtype
    ignore, reduction = node.attrs["ignore_index"], node.attrs["reduction"]
    g = ins[0]
    t = ex.cast(ins[2], t_v.dtype, "int64")
    valid = ex.op("Not", ex.op("Equal", t, ex.const(np.asarray(ignore, np.int64))))
    safe = ex.op("Where", valid, t, ex.const(np.asarray(0, np.int64)))
    classes = x.shape[1]
    if not isinstance(classes, int):
        _refuse("the number of classes must be static")
    onehot = ex.op("Cast", ex.op("Equal", ex.unsqueeze(safe, [1]),
                                 ex.const(np.arange(classes, dtype=np.int64))),
                   to=onnx_dtype(dt))
    p = ex.op("Softmax", ins[1], axis=1)
    validf = ex.op("Cast", valid, to=onnx_dtype(dt))
    if reduction == "none":
        w = ex.op("Mul", g, validf)
    else:
        if reduction == "mean":
            count = ex.op("Max", ex.reduce("ReduceSum", validf, [0], False),
                          ex.const(np.asarray(1, dt)))
            gw = ex.op("Div", g, count)
        else:
            gw = g
        w = ex.op("Mul", validf, gw)
    d = ex.op("Mul", ex.op("Sub", p, onehot), ex.unsqueeze(w, [1]))
    return [d]


# -- convolution and pooling -------------------------------------------------------------------
@converter("conv2d")
def _conv2d(ex, node, ins):
    a = node.attrs
    pt, pb, pl, pr = a["padding"]
    return [ex.op("Conv", *ins, strides=list(a["stride"]), pads=[pt, pl, pb, pr],
                  dilations=list(a["dilation"]), group=a["groups"])]


@converter("conv2d_input_grad")
def _conv2d_input_grad(ex, node, ins):
    a = node.attrs
    g, w = node.inputs
    pt, pb, pl, pr = a["padding"]
    shape = a["shape"]
    extra = []
    for axis in range(2):
        size, out = shape[2 + axis], g.shape[2 + axis]
        stride, dil = a["stride"][axis], a["dilation"][axis]
        span = dil * (w.shape[2 + axis] - 1) + 1
        lo, hi = (pt, pb) if axis == 0 else (pl, pr)
        if not isinstance(size, int) or not isinstance(out, int):
            if stride != 1:
                _refuse("a strided transposed convolution needs static spatial sizes")
            extra.append(0)
            continue
        extra.append(size - (stride * (out - 1) + span - lo - hi))
    if any(e < 0 or e >= max(a["stride"][i], a["dilation"][i]) for i, e in enumerate(extra)):
        _refuse(f"output padding {extra} out of ONNX's range")
    attrs = dict(strides=list(a["stride"]), pads=[pt, pl, pb, pr],
                 dilations=list(a["dilation"]), output_padding=extra if any(extra) else None)
    groups = a["groups"]
    if groups == 1:
        return [ex.op("ConvTranspose", *ins, **attrs)]
    # one ConvTranspose per group, concatenated: the same sums, and every runtime (onnx's
    # reference evaluator has no grouped ConvTranspose) runs it
    per = w.shape[0] // groups
    parts = []
    for i in range(groups):
        lo, hi = ex.ints([i * per]), ex.ints([(i + 1) * per])
        gi = ex.op("Slice", ins[0], lo, hi, ex.ints([1]))
        wi = ex.op("Slice", ins[1], lo, hi, ex.ints([0]))
        parts.append(ex.op("ConvTranspose", gi, wi, **attrs))
    return [ex.op("Concat", *parts, axis=1)]


@converter("conv2d_weight_grad")
def _conv2d_weight_grad(ex, node, ins):
    a = node.attrs
    if a["groups"] != 1:
        _refuse("the weight gradient of a grouped convolution")
    pt, pb, pl, pr = a["padding"]
    kh, kw = a["shape"][2:]
    # dw[o, c] = sum over n of x[n, c] (*) g[n, o]: a convolution of x (C, N, H, W) with g
    # (O, N, Ho, Wo) as the kernel, strides and dilations swapped
    xt = ex.op("Transpose", ins[0], perm=[1, 0, 2, 3])
    gt = ex.op("Transpose", ins[1], perm=[1, 0, 2, 3])
    y = ex.op("Conv", xt, gt, strides=list(a["dilation"]), dilations=list(a["stride"]),
              pads=[pt, pl, pb, pr])
    y = ex.op("Slice", y, ex.ints([0, 0]), ex.ints([kh, kw]), ex.ints([2, 3]))
    return [ex.op("Transpose", y, perm=[1, 0, 2, 3])]


@converter("max_pool2d")
def _max_pool2d(ex, node, ins):
    a = node.attrs
    ph, pw = a["padding"]
    dt = _in(node)
    work = dt if dt in ("float32", "float64", "uint8") else "float64"
    if dt == "int64":
        _refuse("max pooling of int64 (no exact ONNX kernel)")
    y = ex.op("MaxPool", ex.cast(ins[0], dt, work), kernel_shape=list(a["kernel_size"]),
              strides=list(a["stride"]), pads=[ph, pw, ph, pw],
              dilations=list(a["dilation"]), ceil_mode=int(a["ceil_mode"]))
    return [ex.cast(y, work, dt)]


@converter("max_pool2d_indices")
def _max_pool2d_indices(ex, node, ins):
    """MaxPool's second output (indices into the flattened N*C*H*W input, padding not
    counted) modulo H*W: PyTorch's per-plane H*W index."""
    a = node.attrs
    x = node.inputs[0]
    ph, pw = a["padding"]
    h, w = x.shape[2:]
    if not isinstance(h, int) or not isinstance(w, int):
        _refuse("pooling indices over symbolic spatial sizes")
    if x.dtype not in ("float32", "float64"):
        _refuse(f"MaxPool indices of {x.dtype}")
    _, idx = ex.emit("MaxPool", [ins[0]], 2, kernel_shape=list(a["kernel_size"]),
                     strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                     dilations=list(a["dilation"]), ceil_mode=int(a["ceil_mode"]))
    return [ex.op("Mod", idx, ex.const(np.asarray(h * w, dtype=np.int64)))]


@converter("unfold")
def _unfold(ex, node, ins):
    """A Gather of constant positions from the zero-padded, flattened planes."""
    from ..graphlib.ops.resample import _fold_geometry
    a = node.attrs
    x = node.inputs[0]
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = (a["kernel_size"], a["padding"], a["stride"],
                                              a["dilation"])
    ho, wo = _fold_geometry("unfold", (h, w), a["kernel_size"], a["dilation"], a["padding"],
                            a["stride"])
    hp, wp = h + 2 * ph, w + 2 * pw
    rows = (np.arange(kh)[:, None, None, None] * dh + np.arange(ho)[None, None, :, None] * sh)
    cols = (np.arange(kw)[None, :, None, None] * dw + np.arange(wo)[None, None, None, :] * sw)
    index = (rows * wp + cols).reshape(kh * kw, ho * wo).astype(np.int64)
    dt = x.dtype
    work = _compute_dtype(dt, ("int32", "int64", "float32", "float64", "bool", "uint8"))
    xw = ex.cast(ins[0], dt, work)
    if ph or pw:
        zero = ex.cast(ex.const(np.zeros((), dtype=dt)), dt, work)
        xw = ex.op("Pad", xw, ex.ints([0, 0, ph, pw, 0, 0, ph, pw]), zero, mode="constant")
    flat = ex.reshape(xw, (n, c, hp * wp))
    picked = ex.op("Gather", flat, ex.const(index), axis=2)
    return [ex.cast(ex.reshape(picked, (n, c * kh * kw, ho * wo)), work, dt)]


@converter("avg_pool2d")
def _avg_pool2d(ex, node, ins):
    a = node.attrs
    ph, pw = a["padding"]
    if a["ceil_mode"]:
        _refuse("avg_pool2d with ceil_mode=True (ONNX counts the windows' overhang "
                "differently)")
    if tuple(a.get("dilation", (1, 1))) != (1, 1):
        _refuse("avg_pool2d with dilation")
    return [ex.op("AveragePool", ins[0], kernel_shape=list(a["kernel_size"]),
                  strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                  count_include_pad=int(a["count_include_pad"]))]


def _adaptive_sizes(node, shape):
    h, w = shape[2:]
    if not isinstance(h, int) or not isinstance(w, int):
        _refuse("adaptive pooling over symbolic spatial sizes")
    return (h, w), tuple(node.attrs["output_size"])


@converter("adaptive_avg_pool2d")
def _adaptive(ex, node, ins):
    """Window by window, as the kernel: an AveragePool along a dim whose windows are even, else
    a ReduceMean per window (rows, then columns). Never a product with an averaging matrix,
    whose zeros would spread one NaN/inf to every output (0 * NaN)."""
    from ..graphlib.ops.conv import _adaptive_windows
    sizes, outs = _adaptive_sizes(node, node.inputs[0].shape)
    if all(s % o == 0 for s, o in zip(sizes, outs)):
        k = [s // o for s, o in zip(sizes, outs)]
        return [ex.op("AveragePool", ins[0], kernel_shape=k, strides=k)]
    y = ins[0]
    for axis, size, out in ((2, sizes[0], outs[0]), (3, sizes[1], outs[1])):
        if size % out == 0:
            k = [size // out if d == axis else 1 for d in (2, 3)]
            y = ex.op("AveragePool", y, kernel_shape=k, strides=k)
            continue
        parts = [ex.reduce("ReduceMean", ex.op("Slice", y, ex.ints([lo]), ex.ints([hi]),
                                               ex.ints([axis])), [axis], True)
                 for lo, hi in _adaptive_windows(size, out)]
        y = ex.op("Concat", *parts, axis=axis)
    return [y]


@converter("adaptive_avg_pool2d_backward")
def _adaptive_backward(ex, node, ins):
    """Each window's cotangent spread evenly over it (columns, then rows), as the kernel: every
    window's share is padded with zeros to the full size and the shares are summed, so a NaN/inf
    cotangent stays in its own window."""
    from ..graphlib.ops.conv import _adaptive_windows
    g = node.inputs[0]
    sizes, outs = _adaptive_sizes(node, node.attrs["shape"])
    y = ins[0]
    for axis, size, out in ((3, sizes[1], outs[1]), (2, sizes[0], outs[0])):
        shares = []
        for j, (lo, hi) in enumerate(_adaptive_windows(size, out)):
            part = ex.op("Slice", y, ex.ints([j]), ex.ints([j + 1]), ex.ints([axis]))
            part = ex.op("Div", part, ex.const(np.asarray(hi - lo, dtype=g.dtype)))
            reps = [hi - lo if d == axis else 1 for d in range(4)]
            part = ex.op("Tile", part, ex.ints(reps))
            pads = [0] * 8
            pads[axis], pads[4 + axis] = lo, size - hi
            if lo or size - hi:
                part = ex.op("Pad", part, ex.ints(pads), mode="constant")
            shares.append(part)
        y = ex.op("Sum", *shares) if len(shares) > 1 else shares[0]
    return [y]


# -- creation ----------------------------------------------------------------------------------
def _reference(node) -> np.ndarray:
    """The node's value, computed by its own reference kernel (no inputs, static shape)."""
    if any(not isinstance(d, int) for d in node.outputs[0].shape):
        _refuse("a created tensor of symbolic shape")
    return np.asarray(node.op.kernel(np, **node.attrs))


@converter("constant", "arange", "eye", "linspace")
def _created(ex, node, ins):
    value = node.attrs.get("value")
    if isinstance(value, ConstArray):
        arr = value.array.astype(node.attrs["dtype"])
    else:
        arr = _reference(node).astype(_out(node))
    return [ex.const(arr, hint="const")]


@converter("full")
def _full(ex, node, ins):
    shape, dt = node.outputs[0].shape, _out(node)
    if all(isinstance(d, int) for d in shape):
        return [ex.const(np.full(shape, node.attrs["fill_value"], dtype=dt))]
    value = _onnx().numpy_helper.from_array(np.asarray([node.attrs["fill_value"]], dtype=dt))
    return [ex.op("ConstantOfShape", ex.shape_tensor(shape), value=value)]


@converter("full_like")
def _full_like(ex, node, ins):
    dt = _out(node)
    value = _onnx().numpy_helper.from_array(np.asarray([node.attrs["fill_value"]], dtype=dt))
    return [ex.op("ConstantOfShape", ex.op("Shape", ins[0]), value=value)]


@converter("uniform", "normal", "bernoulli", "randint")
def _random(ex, node, ins):
    _refuse("random ops have no exact ONNX form (ONNX's random ops do not reproduce "
            "duograph's seeded streams); export the model in eval mode or without them")


# -- regions -----------------------------------------------------------------------------------
@converter("fused", "call")
def _region(ex, node, ins):
    (region,) = node.regions
    return ex.inline(region.graph, ins, ex.doc)


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
