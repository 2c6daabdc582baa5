"""duograph.graphlib: the IR, types, op registry, graph builder, symbolic autodiff, printers.

It imports no other engine folder: eager, passes and runtime build on it, never the reverse.
"""
from . import dtypes, ops  # noqa: F401  (registers every op)
from . import functional, methods
from .autodiff import backward_pass, grad
from .builder import assign, placeholder, variable
from .dispatch import Scalar, apply, register_handler, set_default_handler
from .errors import (DTypeError, DuographError, FeedError, GraphError, KernelError,
                     ShapeError)
from .ir import ConstArray, Graph, Node, Value, current_graph, set_compiler
from .registry import REGISTRY, OpDef, get_op, register
from .source import SourceLocation, set_capture_source, user_source
from .types import TensorType, broadcast_shapes

methods.F = functional

__all__ = [
    "Graph", "Node", "Value", "TensorType", "OpDef", "REGISTRY", "register", "get_op",
    "placeholder", "variable", "assign", "grad", "backward_pass", "apply", "Scalar",
    "register_handler", "set_default_handler", "current_graph", "set_compiler",
    "ConstArray", "broadcast_shapes", "functional", "dtypes", "SourceLocation",
    "set_capture_source", "user_source", "DuographError", "ShapeError", "DTypeError",
    "GraphError", "FeedError", "KernelError",
]
