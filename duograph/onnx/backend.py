"""An ``onnx.backend.base.Backend`` that runs ONNX models through duograph.

    import duograph.onnx.backend as backend
    rep = backend.prepare(model, "CPU")
    outputs = rep.run([x])

``prepare`` checks that the model imports; ``run`` builds the duograph graph for the fed
inputs' shapes and dtypes (and the values of inputs an op needs when the graph is built,
such as a Reshape's target shape), compiles it (``passes`` level, default "O1") for the CPU
runtime, caches it by that signature, and runs it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
from onnx import ModelProto, NodeProto, helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ..graphlib import dtypes
from ..graphlib.types import TensorType
from . import _handlers  # noqa: F401  (fills the handler table)
from ._errors import OnnxImportError
from ._import import Importer, NeedsStatic, np_dtype_of, _Refuse

__all__ = ["DuographBackend", "DuographRep", "prepare", "run_model", "run_node",
           "supports_device", "is_compatible"]


class DuographRep(BackendRep):
    """A prepared model: one compiled duograph executable per input signature."""

    def __init__(self, model: ModelProto, passes: str = "O1"):
        self.model = model
        self.passes = passes
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.static_names: set = set()
        self._cache: Dict[tuple, Any] = {}

    def _build(self, feeds: Dict[str, np.ndarray]):
        for _ in range(len(self.input_names) + 1):
            static = {n: feeds[n] for n in self.static_names}
            key = tuple((n, a.shape, a.dtype.str) for n, a in feeds.items()) + tuple(
                (n, a.tobytes()) for n, a in sorted(static.items()))
            hit = self._cache.get(key)
            if hit is not None:
                return hit
            types = {n: TensorType(a.shape, a.dtype.name) for n, a in feeds.items()
                     if n not in static}
            try:
                graph = Importer(self.model, "constant", static, None, types).run()
            except NeedsStatic as e:
                if set(e.names) <= self.static_names:
                    raise
                self.static_names.update(e.names)
                continue
            names = [n for n in self.input_names if n not in static]
            exe = graph.compile(passes=self.passes)
            self._cache[key] = (exe, names, graph)
            return self._cache[key]
        raise OnnxImportError("onnx backend: could not settle the static inputs")

    def run(self, inputs: Any, **kwargs: Any) -> Tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = {n: np.asarray(v) for n, v in zip(self.input_names, inputs)}
        for n, a in feeds.items():
            if a.dtype.name not in dtypes.DTYPE_NAMES:
                raise OnnxImportError(f"onnx backend: input {n!r} has dtype {a.dtype}, which "
                                      "duograph does not support")
        exe, names, graph = self._build(feeds)
        out = exe(**{g.name: feeds[n] for g, n in zip(graph.inputs, names)})
        out = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(np.asarray(o) for o in out)


class DuographBackend(Backend):
    """The duograph backend (CPU)."""

    @classmethod
    def is_compatible(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> DuographRep:
        if not cls.supports_device(device):
            raise OnnxImportError(f"onnx backend: device {device!r} is not supported (CPU)")
        super().prepare(model, device, **kwargs)
        _check_types(model)
        return DuographRep(model, kwargs.get("passes", "O1"))

    @classmethod
    def run_model(cls, model: ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> Tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence[Tuple[Any, Any]]] = None,
                 **kwargs: Any) -> Tuple[Any, ...]:
        """Run one node on ``inputs`` (a list of arrays, in the node's input order)."""
        arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        ins = [helper.make_tensor_value_info(n, _elem(a.dtype), a.shape)
               for n, a in zip(names, arrays)]
        outs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], "run_node", ins, outs)
        opset = kwargs.get("opset_version")
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(
            "", opset or 17)])
        if not cls.supports_device(device):
            raise OnnxImportError(f"onnx backend: device {device!r} is not supported (CPU)")
        return DuographRep(model, kwargs.get("passes", "O1")).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


def _elem(dtype) -> int:
    from onnx import helper as h
    return h.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _check_types(model: ModelProto) -> None:
    """Refuse inputs and outputs of element types duograph does not have, before running."""
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.HasField("tensor_type"):
            try:
                np_dtype_of(vi.type.tensor_type.elem_type)
            except _Refuse as e:
                raise OnnxImportError(f"onnx backend: {vi.name!r}: {e}") from None
        elif vi.type.WhichOneof("value") is not None:
            raise OnnxImportError(f"onnx backend: {vi.name!r} is not a tensor (sequences, "
                                  "maps and optionals are not supported)")


prepare = DuographBackend.prepare
run_model = DuographBackend.run_model
run_node = DuographBackend.run_node
supports_device = DuographBackend.supports_device
is_compatible = DuographBackend.is_compatible
