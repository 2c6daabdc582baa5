"""duograph/onnx is laid out by op family (issue 25): the import handlers and the export
converters of one family side by side (``_<family>_import``, ``_<family>_export``), no import
circle among the package's modules (imports inside functions count), no module over 1,000
lines."""
import ast
import pathlib

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parent.parent / "duograph" / "onnx"
FAMILIES = ("elementwise", "shape", "indexing", "reduce", "nn", "conv", "control")
MAX_LINES = 1000


def _graph():
    modules = {p.stem: p for p in ROOT.glob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue
            targets = [node.module] if node.module else [a.name for a in node.names]
            if not node.module:
                targets = [a.name for a in node.names if a.name in modules] or ["__init__"]
            for t in targets:
                if t in modules and t != name:
                    graph.add_edge(name, t)
    return graph


def test_each_op_family_has_its_import_and_export_side_by_side():
    names = {p.stem for p in ROOT.glob("*.py")}
    for family in FAMILIES:
        assert f"_{family}_import" in names and f"_{family}_export" in names, family
    assert "_recurrent_import" in names


def test_no_import_circle_in_the_onnx_package():
    cycles = sorted(sorted(c) for c in nx.simple_cycles(_graph()))
    assert cycles == [], cycles


def test_the_drawing_sees_the_package_imports():
    g = _graph()
    assert g.has_edge("__init__", "_handlers") and g.has_edge("_handlers", "_nn_import")
    assert g.has_edge("_nn_import", "_import") and g.has_edge("_nn_export", "_export")


def test_no_onnx_module_is_over_1000_lines():
    big = {p.name: n for p in ROOT.glob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}, big
