"""Peer frameworks (PyTorch, JAX, TensorFlow) in the tests: optional oracles, never required.

The README's test command runs on a machine without any of them, so a test module may reach a
peer only where a missing peer becomes a skip, never a collection error:

- ``torch = pytest.importorskip("torch")`` (at module level: the whole module skips);
- the ``torch`` fixture of ``conftest.py`` (a test that takes it skips);
- an import inside ``try:`` whose ``except`` catches ``ImportError`` (then test ``torch is None``).

``unguarded_imports`` finds every other import of a peer (``tests/test_test_hygiene.py`` fails
on any); ``peers_reached`` tells ``conftest.py`` which modules to mark ``torch``, so CI can run
the oracle tests again once PyTorch is installed (``pytest -m torch``).
"""
from __future__ import annotations

import ast

PEERS = ("torch", "torchvision", "jax", "jaxlib", "flax", "tensorflow", "keras")
# An ``except`` naming one of these turns a missing module into a value the test can check.
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


def _peer(module_name: str | None) -> str | None:
    """The peer a dotted module name belongs to (``torch.nn`` -> ``torch``), else None."""
    root = (module_name or "").split(".")[0]
    return root if root in PEERS else None


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:                       # a bare ``except:``
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for t in types:
            name = t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", None)
            if name in _IMPORT_ERRORS:
                return True
    return False


def _call_target(node: ast.Call) -> str:
    """``pytest.importorskip`` -> "importorskip", ``importlib.import_module`` -> "import_module"."""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _first_string(node: ast.Call) -> str | None:
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def _walk(tree: ast.AST):
    """Every node with whether it sits in the body of a ``try`` that catches ImportError
    (an explicit stack: no recursion)."""
    stack = [(tree, False)]
    while stack:
        node, guarded = stack.pop()
        yield node, guarded
        if isinstance(node, ast.Try) and _catches_import_error(node):
            children = [(child, True) for child in node.body]
            rest = node.handlers + node.orelse + node.finalbody
            children += [(child, guarded) for child in rest]
        else:
            children = [(child, guarded) for child in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))


def unguarded_imports(source: str, filename: str = "<test module>") -> list:
    """``(line, module)`` of every import of a peer that raises ImportError where the peer is
    missing: ``import``/``from`` statements and ``importlib.import_module``/``__import__``
    calls outside a ``try`` that catches ImportError, at module level or inside functions."""
    found = []
    for node, guarded in _walk(ast.parse(source, filename)):
        if guarded:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _peer(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _peer(node.module):
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and _call_target(node) in ("import_module", "__import__")
              and _peer(_first_string(node))):
            found.append((node.lineno, _first_string(node)))
    return sorted(found)


def peers_reached(source: str, filename: str = "<test module>") -> set:
    """The peers a test module reaches in any way: ``pytest.importorskip``, imports (guarded or
    not), or a test or fixture taking a parameter named after the peer (the ``torch`` fixture)."""
    reached = set()
    for node, _ in _walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            reached |= {_peer(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            reached.add(_peer(node.module))
        elif isinstance(node, ast.Call) and _call_target(node) in (
                "importorskip", "import_module", "__import__"):
            reached.add(_peer(_first_string(node)))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            reached |= {_peer(a.arg) for a in node.args.args + node.args.kwonlyargs}
    reached.discard(None)
    return reached
