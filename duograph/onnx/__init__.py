"""ONNX export and import.

    import duograph as dg
    dg.onnx.export(model, "model.onnx", dg.onnx.Input(("N", 784)))   # N: a dim_param
    g = dg.onnx.load("model.onnx")                                    # a duograph Graph
    out, = g.compile()(x=...)

``export`` takes a ``Graph``, an ``nn.Module`` or a function, and its arguments in
duograph's order ``(target, f, *inputs)`` or PyTorch's ``(model, args, f)``. Modules and
functions are called on placeholders (graph mode: a module's parameters and buffers become
state named by their paths, and so ONNX initializers of those names); code that cannot be
built in graph mode (Python decisions on tensor values) is recorded eagerly with
``dg.record`` from example inputs instead. Symbolic dims become ``dim_param``s. ``load``
builds a Graph from an ONNX model (initializers as state, or as constants with
``initializers="constant"``). ``duograph.onnx.backend`` is an ``onnx.backend.base.Backend``
over ``load``.

The ``onnx`` package is imported when these functions are called, not by ``import duograph``.
"""
from __future__ import annotations

import inspect
import os
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from ..graphlib.errors import GraphError
from ..graphlib.files import atomic_write
from ..graphlib.ir import Graph, Value
from ..graphlib.types import TensorType
from . import _handlers  # noqa: F401  (fills the import handler table)
from ._errors import OnnxImportError
from ._export import OnnxExportError, graph_to_model
# the converters, one module per op family (importing them fills _export.CONVERTERS)
from . import _elementwise_export  # noqa: F401
from . import _shape_export  # noqa: F401
from . import _indexing_export  # noqa: F401
from . import _reduce_export  # noqa: F401
from . import _nn_export  # noqa: F401
from . import _conv_export  # noqa: F401
from . import _control_export  # noqa: F401

__all__ = ["Input", "export", "to_model", "load", "from_model", "OnnxExportError",
           "OnnxImportError", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17


class Input:
    """An input spec for ``export``: a shape (ints and symbol names such as ``"N"``), a
    dtype and optionally a name (default: the function's parameter name)."""

    def __init__(self, shape, dtype: str = "float32", name: Optional[str] = None):
        self.type = TensorType(shape, dtype)
        self.name = name

    def __repr__(self) -> str:
        return f"Input({self.type!r}, name={self.name!r})"


def _param_names(target, n: int) -> list:
    fn = target.forward if hasattr(target, "forward") and hasattr(target, "parameters") \
        else target
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    names += [f"input{i}" for i in range(len(names), n)]
    return names


def _as_array(x):
    if hasattr(x, "numpy") and hasattr(x, "requires_grad"):      # an eager (or torch) tensor
        return np.asarray(x.detach().numpy())
    return np.asarray(x)


def _spec(x, name: str, dynamic: Mapping[int, str]) -> TensorType:
    if isinstance(x, Input):
        t = x.type
    elif isinstance(x, TensorType):
        t = x
    else:
        arr = _as_array(x)
        t = TensorType(arr.shape, arr.dtype.name)
    if dynamic:
        shape = list(t.shape)
        for axis, sym in dynamic.items():
            shape[axis] = sym
        t = TensorType(tuple(shape), t.dtype)
    return t


def _flatten_outputs(out) -> list:
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        flat = []
        for o in out:
            flat.extend(_flatten_outputs(o))
        return flat
    return [out]


def _trace_graph(target, args, names, dynamic_axes) -> Graph:
    """Call ``target`` on placeholders (graph mode)."""
    name = getattr(target, "__name__", type(target).__name__)
    g = Graph(name if name.isidentifier() else "model")
    with g:
        values = []
        for x, n in zip(args, names):
            t = _spec(x, n, dynamic_axes.get(n, {}))
            values.append(g.add_input(n, t))
        out = target(*values)
    outs = _flatten_outputs(out)
    for o in outs:
        if not isinstance(o, Value) or o.graph is not g:
            raise OnnxExportError(f"onnx export: {name} returned {type(o).__name__}, "
                                  "expected tensors computed from its inputs")
    g.outputs = outs
    return g


def _record_graph(target, args, names) -> Graph:
    """Run ``target`` eagerly on the example inputs inside ``dg.record``."""
    from .. import eager
    tensors = [eager.tensor(_as_array(x)) for x in args]
    named = dict(zip(names, tensors))
    params = {}
    if hasattr(target, "named_parameters"):
        params = dict(list(target.named_parameters()) + list(target.named_buffers()))
    with eager.record(getattr(target, "__name__", "model"),
                      names={**named, **params}) as rec:
        out = target(*tensors)
    g = rec.graph
    g.outputs = [rec.value(o) for o in _flatten_outputs(out)]
    # tensors from outside that are not the inputs (buffers, closures) become initializers
    keep = set(names)
    placeholders = []
    for v in list(g.inputs):
        if v.name in keep:
            placeholders.append(v)
            continue
        data = next(np.asarray(t.numpy()) for val, t in rec.external if val is v)
        g.state.append(v)
        g.state_init[v] = data
    g.inputs = placeholders
    return g


def _build(target, args, input_names, dynamic_axes, trace: str) -> Graph:
    names = list(input_names) if input_names is not None else _param_names(target, len(args))
    for x, n in zip(args, names):
        if isinstance(x, Input) and x.name:
            names[names.index(n)] = x.name
    dynamic_axes = dict(dynamic_axes or {})
    concrete = all(not isinstance(x, (Input, TensorType)) for x in args)
    if trace not in ("auto", "graph", "record"):
        raise ValueError(f"onnx export: trace must be 'auto', 'graph' or 'record', found "
                         f"{trace!r}")
    if trace == "record":
        if not concrete or dynamic_axes:
            raise OnnxExportError("onnx export: trace='record' needs example arrays (not "
                                  "specs) and no dynamic_axes: a recording has static shapes")
        return _record_graph(target, args, names)
    try:
        return _trace_graph(target, args, names, dynamic_axes)
    except (GraphError, TypeError) as e:
        # a Python decision on a tensor's value (bool(), float(), .item()): record it
        if trace == "graph" or not concrete or dynamic_axes:
            raise
        try:
            return _record_graph(target, args, names)
        except Exception:
            raise e from None


def to_model(target, *inputs, opset: int = DEFAULT_OPSET,
             input_names: Optional[Sequence[str]] = None,
             output_names: Optional[Sequence[str]] = None,
             dynamic_axes: Optional[Dict[str, Dict[int, str]]] = None, trace: str = "auto"):
    """The ``onnx.ModelProto`` that ``export`` writes (see there)."""
    if isinstance(target, Graph):
        if inputs:
            raise OnnxExportError("onnx export: a Graph already has its inputs; pass no "
                                  "example inputs with it")
        graph = target
    elif callable(target):
        graph = _build(target, inputs, input_names, dynamic_axes, trace)
    else:
        raise TypeError(f"onnx export: expected a Graph, an nn.Module or a function, found "
                        f"{type(target).__name__}")
    model = graph_to_model(graph, opset, output_names)
    return model


def _is_destination(x) -> bool:
    """A file name (str, bytes, ``os.PathLike``) or a binary file object."""
    return isinstance(x, (str, bytes, os.PathLike)) or (
        hasattr(x, "write") and not hasattr(x, "shape"))


def _export_arguments(second, rest: tuple):
    """(destination, example inputs) from either argument order of ``export``."""
    if _is_destination(second):
        return second, rest                                   # (target, f, *inputs)
    if len(rest) == 1 and _is_destination(rest[0]):           # PyTorch's (model, args, f)
        args = second
        if isinstance(args, list):
            args = tuple(args)
        if not isinstance(args, tuple):
            args = (args,)
        if args and isinstance(args[-1], dict):
            raise OnnxExportError("onnx export: keyword arguments in args (a trailing dict, "
                                  "as torch.onnx.export reads them) are not supported; pass "
                                  "every input positionally")
        return rest[0], args
    found = ", ".join(type(a).__name__ for a in (second,) + tuple(rest))
    raise TypeError("onnx export: expected export(target, f, *inputs) or PyTorch's "
                    "export(model, args, f) with f a path or a binary file object, found "
                    f"export(target, {found})")


def export(target, f, *inputs, opset: int = DEFAULT_OPSET,
           input_names: Optional[Sequence[str]] = None,
           output_names: Optional[Sequence[str]] = None,
           dynamic_axes: Optional[Dict[str, Dict[int, str]]] = None, trace: str = "auto",
           check: bool = True, opset_version: Optional[int] = None):
    """Write ``target`` (a Graph, an ``nn.Module`` or a function) to ``f`` as ONNX.

    Two argument orders are accepted: duograph's ``export(target, f, *inputs)`` and
    PyTorch's ``export(model, args, f)``, where ``args`` is one input or a tuple of inputs.
    They are told apart by ``f``: a path (str, bytes, ``os.PathLike``) or a binary file
    object (anything with ``write`` that is not an array); inputs are arrays, tensors or
    specs, never paths, so no call reads both ways. ``opset_version`` (PyTorch's name) is
    an alias of ``opset``.

    ``inputs`` are example arrays/tensors or specs (``dg.onnx.Input(shape, dtype)`` or a
    ``TensorType``), one per positional argument; symbolic dims (``"N"``) become ONNX
    ``dim_param``s, and ``dynamic_axes={"x": {0: "N"}}`` makes dims of example inputs
    symbolic. Inputs are named after the function's parameters (or ``input_names``);
    parameters and buffers become initializers named by their module paths; outputs are
    ``output`` or ``output0``, ``output1``... (or ``output_names``). ``trace``: "graph"
    (call on placeholders), "record" (run eagerly on the examples inside ``dg.record``) or
    "auto" (graph mode, recording when Python branches on a tensor's value).

    An op with no exact ONNX form raises ``OnnxExportError`` naming the op and the user's
    line; nothing is written then. With ``check`` the model is verified by
    ``onnx.checker.check_model(full_check=True)``. A path is written atomically (a symlink
    at ``path`` is replaced, never written through); a file object gets the bytes written
    to it. Returns the ModelProto.
    """
    import onnx
    f, inputs = _export_arguments(f, inputs)
    if opset_version is not None:
        opset = opset_version
    model = to_model(target, *inputs, opset=opset, input_names=input_names,
                     output_names=output_names, dynamic_axes=dynamic_axes, trace=trace)
    if check:
        onnx.checker.check_model(model, full_check=True)
    if hasattr(f, "write"):
        f.write(model.SerializeToString())
    else:
        path = os.fsdecode(f) if isinstance(f, bytes) else f
        atomic_write(path, lambda out: out.write(model.SerializeToString()))
    return model


def load(path_or_model, *, initializers: str = "state",
         static_inputs: Optional[Mapping[str, np.ndarray]] = None,
         input_shapes: Optional[Mapping[str, Sequence]] = None) -> Graph:
    """A duograph ``Graph`` computing the ONNX model at ``path_or_model`` (a path, bytes or
    a ModelProto).

    Initializers become state inputs named as in the model (``initializers="state"``) or
    constants (``"constant"``); integer ones (shapes, axes, indices) and those only read as
    settings (a Resize's scales) are known constants either way. Graph inputs keep their
    names; their dims come from the model (``dim_param``s become symbols, and shape
    arithmetic on them stays symbolic, so one graph runs at any size) unless
    ``input_shapes`` gives them. Inputs whose values an op needs when the graph is built (a
    Reshape's target shape fed as an input) must be given in ``static_inputs``. Ops or
    attributes duograph cannot compute exactly raise ``OnnxImportError``, naming the node.
    """
    from ._import import import_model
    return import_model(path_or_model, initializers=initializers, static_inputs=static_inputs,
                        input_shapes=input_shapes)


def from_model(model, **kwargs) -> Graph:
    """``load`` for a ModelProto (an alias kept for symmetry with ``to_model``)."""
    return load(model, **kwargs)
