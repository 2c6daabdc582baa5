"""The dependency arrows of DESIGN.md, checked on every import (inside functions too):

    duograph (face) -> eager, passes, runtime -> graphlib

graphlib imports no other engine folder; runtime nothing of eager or passes; passes nothing
of eager or runtime; eager nothing of passes. No engine folder imports the face.
"""
import ast
import pathlib

import pytest

import duograph as dg

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENGINE = ("graphlib", "eager", "passes", "runtime")
FORBIDDEN = {
    "graphlib": {"eager", "passes", "runtime", "face"},
    "runtime": {"eager", "passes", "face"},
    "passes": {"eager", "runtime", "face"},
    "eager": {"passes", "face"},
}


def _module_name(path: pathlib.Path) -> list:
    """duograph.<folder>.<sub>... for a file of an engine folder."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = ["duograph"] + list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return parts


def _imports(path: pathlib.Path):
    """(line, absolute module name) of every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield node.lineno, mod
            for alias in node.names:          # `from .. import runtime`
                yield node.lineno, f"{mod}.{alias.name}"


def _layer(module: str):
    parts = module.split(".")
    if parts[0] != "duograph":
        return None
    if len(parts) == 1:
        return "face"
    return parts[1] if parts[1] in ENGINE else "face"


def _violations():
    found = []
    for folder in ENGINE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, module in _imports(path):
                layer = _layer(module)
                if layer in FORBIDDEN[folder]:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {folder} imports {module}")
    return found


def test_no_import_points_the_wrong_way():
    bad = _violations()
    assert not bad, "imports against the layering of DESIGN.md:\n" + "\n".join(bad)


def test_the_scanner_sees_imports_inside_functions(tmp_path, monkeypatch):
    fake = ROOT / "graphlib" / "_layering_probe.py"
    assert not fake.exists()
    try:
        fake.write_text("def f():\n    from ..runtime import backends\n    return backends\n")
        assert any("_layering_probe.py:2" in v for v in _violations())
    finally:
        fake.unlink()


def test_no_top_level_graphlib_import():
    for path in ROOT.rglob("*.py"):
        if any(p in (".venv", "build", ".git") for p in path.parts):
            continue
        for _, module in _imports(path) if _module_name_ok(path) else ():
            assert module.split(".")[0] != "graphlib", f"{path}: `import graphlib` (stdlib name)"


def _module_name_ok(path):
    try:
        _module_name(path)
        return True
    except ValueError:
        return False


def test_public_names_are_explicit():
    assert isinstance(dg.__all__, (list, tuple)) and len(set(dg.__all__)) == len(dg.__all__)
    for name in dg.__all__:
        assert hasattr(dg, name), name
    for leaked in ("annotations", "namedtuple", "np", "Optional", "functional_names"):
        assert leaked not in dg.__all__
    ns = {}
    exec("from duograph import *", ns)
    assert "annotations" not in ns and "namedtuple" not in ns
    for name in ("tensor", "Graph", "compile", "nn", "optim", "grad", "relu", "matmul",
                 "save", "load", "no_grad", "placeholder", "Tensor", "float32"):
        assert name in ns, name


@pytest.mark.parametrize("name", ["annotations", "namedtuple"])
def test_helper_names_do_not_leak_into_dg(name):
    assert not hasattr(dg, name)


# Files allowed to call id(), and why: numpy arrays are not hashable, so the executables tell
# the arrays they hand out apart by identity. IR objects (Values, Nodes, Graphs) and tensors
# are identity-hashed and are dict keys themselves.
ID_ALLOWED = {"runtime/executable.py": "arrays returned or held as state",
              # fused bodies (Regions) hash by structure, and a plan holds one body's own
              # Values: the backend's PlanCache finds a body's plans by identity, held weakly
              # (a WeakKeyDictionary lookup measured ~4x slower on the fused hot path)
              "runtime/backend.py": "PlanCache: plans per body by identity, held weakly"}


def test_engine_code_keys_ir_objects_by_themselves_not_by_id():
    found = []
    for folder in ("graphlib", "passes", "runtime"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ID_ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "id"):
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"id() in engine code (key by the object itself): {found}"
