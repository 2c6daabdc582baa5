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


# graphlib inside, bottom to top (issue 26): a module imports nothing of a higher tier, also
# inside functions. What a lower module needs from a higher one it gets through a hook the
# higher module fills on import (registry.set_dispatcher, methods.set_functions/set_dispatch,
# ir.install_service, shape.set_advanced_indexing).
GRAPHLIB_TIERS = (
    # foundations: dims and dtypes, errors, the OpDef registry, the tensor methods' surface
    {"config", "files", "xp", "source", "errors", "dtypes", "types", "aliases",
     "collective_hooks", "kernels", "registry", "methods", "methods_compat",
     "methods_names"},
    {"ir"},
    # free functions and builders over the IR
    {"attrs", "dispatch", "printer", "verify", "dot", "serialize", "rewrite", "transform",
     "builder", "autocast"},
    {"ops", "autodiff", "batching"},  # the op families (ops.*), the reverse-mode engine, vmap rules
    {"functional", ""},           # every op function; the package itself
)


def _graphlib_tier(module: str):
    """The tier of a graphlib module (``duograph.graphlib.ops.conv`` -> the ``ops`` tier)."""
    parts = module.split(".")
    if parts[:2] != ["duograph", "graphlib"]:
        return None
    rest = ".".join(parts[2:])
    for k, tier in enumerate(GRAPHLIB_TIERS):
        if rest in tier or rest.split(".")[0] in tier:
            return k
    return None


def _graphlib_upward_imports():
    found = []
    for path in sorted((ROOT / "graphlib").rglob("*.py")):
        me = ".".join(_module_name(path))
        mine = _graphlib_tier(me)
        assert mine is not None, f"{me}: put it in a tier of GRAPHLIB_TIERS"
        for line, module in _imports(path):
            theirs = _graphlib_tier(module)
            if module != "duograph.graphlib" and theirs is not None and theirs > mine:
                found.append(f"{path.relative_to(ROOT)}:{line}: {me} (tier {mine}) imports "
                             f"{module} (tier {theirs})")
    return found


def test_graphlib_modules_import_only_their_tier_and_below():
    bad = _graphlib_upward_imports()
    assert not bad, "graphlib imports against its order:\n" + "\n".join(bad)


def test_the_tier_check_sees_an_upward_import():
    probe = ROOT / "graphlib" / "_tier_probe_ir_like.py"
    assert not probe.exists()
    assert _graphlib_tier("duograph.graphlib.ops.conv") == 3
    assert _graphlib_tier("duograph.graphlib.printer") == 2
    original = GRAPHLIB_TIERS[1].copy()
    try:
        GRAPHLIB_TIERS[1].add("_tier_probe_ir_like")
        probe.write_text("def f():\n    from .printer import graph_to_text\n")
        assert any("_tier_probe_ir_like.py:2" in v for v in _graphlib_upward_imports())
    finally:
        probe.unlink()
        GRAPHLIB_TIERS[1].clear()
        GRAPHLIB_TIERS[1].update(original)


def test_the_hooks_of_graphlib_are_filled_by_the_modules_above():
    """Each upward service a lower graphlib module uses is installed by its provider on
    import (no lower module imports it), and a missing one fails with a clear error."""
    from duograph.graphlib import (dispatch, dot, functional, ir, methods, printer, registry,
                                   serialize, verify)
    from duograph.graphlib.ops import creation, indexing, shape

    assert registry._apply is dispatch.apply
    assert methods.F is functional and methods._handlers is dispatch._handlers
    assert shape._advanced_getitem is indexing.advanced_getitem
    assert ir._services == {
        "to_text": printer.graph_to_text, "verify": verify.verify, "to_dot": dot.to_dot,
        "render": dot.render, "to_json": serialize.to_json, "from_json": serialize.from_json,
        "as_value": dispatch.as_value, "default_seed": creation._graph_seed_start}
    with pytest.raises(dg.GraphError, match="service 'no_such' is not installed"):
        ir._service("no_such")
