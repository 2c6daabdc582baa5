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

Imports: numpy, ml_dtypes, safetensors at load time; sympy, scipy, networkx and pydot
lazily where first needed. It imports no other engine folder: eager, passes and runtime build
on it, never the reverse (tests/test_layering.py). Inside, the modules are in one order, each
importing only those below it (tests/test_structure.py: no circles):
``config``, ``source``, ``errors``, ``dtypes``, ``types``, ``registry``, ``methods`` -> ``ir``
-> ``attrs``, ``dispatch``, ``printer``, ``rewrite``, ``builder`` -> ``verify``, ``dot``,
``serialize`` -> ``ops/`` (creation, then elementwise and shape, then reduction...;
``autodiff`` among them, above those three and below nn, norms and control flow) ->
``functional``. A lower module that needs a higher one's service gets it through a
hook the higher module fills when imported: ``registry.set_dispatcher`` (calling an OpDef),
``methods.set_functions``/``set_dispatch`` (the tensor methods), ``ir.install_service``
(``graph.verify()``, ``print(graph)``, ``to_json``...), ``shape.set_advanced_indexing``.
"""
if __name__ == "graphlib":
    # This folder was imported as the top-level ``graphlib``, which the standard library owns
    # (the repository root is on sys.path: ``python -m`` run from it, or PYTHONPATH; cupy's
    # float16 kernels then failed with "module 'graphlib' has no attribute
    # 'TopologicalSorter'"). Load the standard library's module in its place: the import
    # system returns what sys.modules holds once this file has run.
    import importlib.util as _util
    import os as _os
    import sys as _sys
    import sysconfig as _sysconfig
    _spec = _util.spec_from_file_location(
        "graphlib", _os.path.join(_sysconfig.get_paths()["stdlib"], "graphlib.py"))
    _module = _util.module_from_spec(_spec)
    _sys.modules["graphlib"] = _module
    _spec.loader.exec_module(_module)
else:
    from . import dtypes, ops  # noqa: F401  (registers every op)
    from . import functional, methods  # noqa: F401
    # the graph services ir reaches through its hook table (print, verify, pictures, JSON)
    from . import dot, printer, serialize, verify  # noqa: F401
    from .autodiff import backward_pass, grad
    from .builder import assign, placeholder, variable
    from .dispatch import Scalar, apply, register_handler, set_default_handler
    from .errors import (DimError, DTypeError, DuographError, FeedError, GraphError, KernelError,
                         ShapeError)
    from .ir import ConstArray, Graph, Node, Region, Value, current_graph, set_compiler
    from .registry import REGISTRY, OpDef, get_op, register
    from .source import SourceLocation, set_capture_source, user_source
    from .types import TensorType, broadcast_shapes

    __all__ = [
        "Graph", "Node", "Value", "Region", "TensorType", "OpDef", "REGISTRY", "register", "get_op",
        "placeholder", "variable", "assign", "grad", "backward_pass", "apply", "Scalar",
        "register_handler", "set_default_handler", "current_graph", "set_compiler",
        "ConstArray", "broadcast_shapes", "functional", "dtypes", "SourceLocation",
        "set_capture_source", "user_source", "DuographError", "ShapeError", "DTypeError",
        "GraphError", "FeedError", "KernelError", "DimError",
    ]
