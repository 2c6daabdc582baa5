"""duograph.graphlib: the IR and everything true of an op on every backend.

- ``ir``: ``Graph`` (nodes in topological order, inputs, state, outputs, updates), ``Node``
  (op, inputs, attributes, outputs, source line, provenance), ``Value`` (a typed SSA value
  that keeps its use list), ``Region`` (a closed sub-graph a node carries: fused bodies,
  ``call``); the editing API (``create_node``, ``replace_uses``, ``erase``...).
- ``types``/``dtypes``: shapes with symbolic dims, the ten dtypes and promotion.
- ``registry`` and ``ops/``: one ``OpDef`` per op (inference, the reference ``xp`` kernel,
  the vjp rule, the elementwise expression); ``dispatch`` decides whether an op call builds
  a node or runs eagerly; ``functional`` is every op function (``dg.*``).
- ``autodiff``: the one reverse-mode engine (graph mode, the eager tape, higher orders).
- ``printer``, ``verify``, ``dot``, ``serialize``: text form, invariants, pictures, JSON.
- ``rewrite``/``transform``: cloning and copying parts of graphs for passes and compile.

It imports no other engine folder: eager, passes and runtime build on it, never the reverse
(tests/test_layering.py checks every import).
"""
from . import dtypes, ops  # noqa: F401  (registers every op)
from . import functional, methods
from .autodiff import backward_pass, grad
from .builder import assign, placeholder, variable
from .dispatch import Scalar, apply, register_handler, set_default_handler
from .errors import (DimError, DTypeError, DuographError, FeedError, GraphError, KernelError,
                     ShapeError)
from .ir import ConstArray, Graph, Node, Region, Value, current_graph, set_compiler
from .registry import REGISTRY, OpDef, get_op, register
from .source import SourceLocation, set_capture_source, user_source
from .types import TensorType, broadcast_shapes

methods.F = functional
methods._bind()

__all__ = [
    "Graph", "Node", "Value", "Region", "TensorType", "OpDef", "REGISTRY", "register", "get_op",
    "placeholder", "variable", "assign", "grad", "backward_pass", "apply", "Scalar",
    "register_handler", "set_default_handler", "current_graph", "set_compiler",
    "ConstArray", "broadcast_shapes", "functional", "dtypes", "SourceLocation",
    "set_capture_source", "user_source", "DuographError", "ShapeError", "DTypeError",
    "GraphError", "FeedError", "KernelError", "DimError",
]
