"""IR invariants: the text form, the verifier, source locations and build-time errors.

These tests need no device and run nothing: they only build graphs.
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ir import Node
from duograph.graphlib.source import package_dirs
from duograph.graphlib.types import TensorType

THIS_FILE = os.path.basename(__file__)


def here() -> int:
    """The line number of the caller."""
    return inspect.currentframe().f_back.f_lineno


def build_affine() -> dg.Graph:
    g = dg.Graph("affine")
    with g:
        x = dg.placeholder("x", shape=("N", 3))
        w = dg.variable("w", np.zeros((3, 2), np.float32))
        b = dg.placeholder("b", shape=(2,))
        y = dg.relu(x @ w + b)
        g.update(w, w * 0.5)
    g.outputs = [y]
    return g


def build_chain():
    """x -> exp -> sin -> * 2 -> sum: five nodes, easy to break by hand."""
    g = dg.Graph("chain")
    with g:
        x = dg.placeholder("x", shape=(2, 3))
        a = dg.exp(x)
        b = dg.sin(a)
        c = b * 2.0
        d = dg.sum(c)
    g.outputs = [d]
    return g


def build_readme():
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", shape=("N", 4), dtype="float32")
        w = dg.placeholder("w", shape=(4, 3))
        loss = dg.mean(dg.relu(x @ w) ** 2)
        gw, = dg.grad(loss, [w])
    return g, loss, gw


# -- the text form -------------------------------------------------------------------------------

GOLDEN_AFFINE = """\
graph affine(%x: f32[N,3], %b: f32[2]) state(%w: f32[3,2]) {
  %0: f32[N,2] = matmul(%x, %w)
  %1: f32[N,2] = add(%0, %b)
  %2: f32[N,2] = relu(%1)
  %3: f32[] = constant(){value=0.5, dtype='float32'}
  %4: f32[3,2] = mul(%w, %3)
  %w <- %4
  return (%2)
}"""


def test_print_golden():
    g = build_affine()
    assert str(g) == GOLDEN_AFFINE
    assert g.to_text() == GOLDEN_AFFINE


def test_print_is_stable_across_builds():
    assert str(build_affine()) == str(build_affine())
    assert str(build_readme()[0]) == str(build_readme()[0])


def test_to_text_explicit_outputs():
    g = build_affine()
    text = g.to_text(outputs=[g.outputs[0], g.nodes[0].outputs[0]])
    assert text.splitlines()[-2] == "  return (%2, %0)"


def test_repr_summarises():
    assert repr(build_affine()) == "<Graph 'affine': 2 inputs, 1 state, 5 nodes>"


def test_to_text_with_source_shows_this_file_and_line():
    g = dg.Graph("src")
    with g:
        x = dg.placeholder("x", shape=(3,))
        line = here(); y = dg.exp(x)  # noqa: E702 - same line on purpose
    g.outputs = [y]
    text = g.to_text(source=True)
    node_line = text.splitlines()[1]
    assert node_line.startswith("  %0: f32[3] = exp(%x)")
    assert node_line.endswith(f"# {THIS_FILE}:{line}")
    assert THIS_FILE not in str(g)   # plain printing has no locations


# -- the verifier --------------------------------------------------------------------------------

def test_verify_passes_on_built_graphs():
    build_affine().verify()
    build_chain().verify()
    build_readme()[0].verify()


def test_verify_passes_on_a_training_step_graph():
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", shape=("N", 2))
        w = dg.variable("w", np.ones((2, 1), np.float32))
        loss = dg.mean((x @ w) ** 2)
        gw, = dg.grad(loss, [w])
        g.update(w, w - 0.1 * gw)
    g.verify()


def test_verify_use_before_def_shows_context():
    g = build_chain()
    g.nodes[0], g.nodes[1] = g.nodes[1], g.nodes[0]      # sin now comes before exp
    with pytest.raises(dg.GraphError) as info:
        g.verify()
    msg = str(info.value)
    assert "graph 'chain', node 0 (sin)" in msg
    assert "used before it is defined" in msg
    lines = msg.splitlines()
    marked = [ln for ln in lines if ln.startswith("-> ")]
    assert len(marked) == 1 and "sin(" in marked[0]
    assert any("exp(%x)" in ln for ln in lines)           # the neighbours are shown
    assert THIS_FILE in marked[0]                          # with their source lines


def _context_lines(message: str) -> list:
    """The node lines a verifier error shows, without the marker and the source comment."""
    return [ln[3:].split("#")[0].rstrip() for ln in message.splitlines()
            if ln.startswith(("-> ", "   "))]


def test_verify_ssa_violation():
    g = build_chain()
    sin = g.nodes[1]
    g.nodes.append(Node(sin.op, sin.inputs, sin.attrs, sin.outputs, sin.source))
    with pytest.raises(dg.GraphError, match=r"node 5 \(sin\).*defined twice \(SSA broken\)"):
        g.verify()


def test_verify_context_uses_the_names_of_print():
    # The nodes around a failure carry the same %names as the full printout.
    g = build_chain()
    sin = g.nodes[1]
    g.nodes.append(Node(sin.op, sin.inputs, sin.attrs, sin.outputs, sin.source))
    with pytest.raises(dg.GraphError) as info:
        g.verify()
    shown = _context_lines(str(info.value))
    assert len(shown) == 3 and shown[-1] == "%1: f32[2,3] = sin(%0)"
    printed = [ln.strip() for ln in str(g).splitlines()]
    assert all(line in printed for line in shown), (shown, printed)


def test_verify_wrong_stored_shape():
    g = build_chain()
    g.nodes[1].outputs[0].type = TensorType((2, 4), "float32")
    with pytest.raises(dg.GraphError) as info:
        g.verify()
    msg = str(info.value)
    assert "node 1 (sin)" in msg
    assert "stored output types [f32[2,4]] differ from the inferred [f32[2,3]]" in msg
    assert "-> %1: f32[2,4] = sin(%0)" in msg


def test_verify_wrong_stored_dtype():
    g = build_chain()
    g.nodes[0].outputs[0].type = TensorType((2, 3), "float64")
    with pytest.raises(dg.GraphError, match=r"node 0 \(exp\).*\[f64\[2,3\]\].*\[f32\[2,3\]\]"):
        g.verify()


def test_verify_output_not_pointing_back():
    g = build_chain()
    g.nodes[2].outputs[0].index = 1
    with pytest.raises(dg.GraphError, match="does not point back to its producer"):
        g.verify()


def test_verify_foreign_output():
    g, other = build_chain(), build_chain()
    g.outputs.append(other.outputs[0])
    with pytest.raises(dg.GraphError, match=r"output 1 .* is not defined in the graph"):
        g.verify()


def test_verify_foreign_input():
    g, other = build_chain(), build_chain()
    g.nodes[0].inputs = (other.inputs[0],)
    with pytest.raises(dg.GraphError, match="node 0 \\(exp\\): input 0 .* not in the graph"):
        g.verify()


def test_verify_bad_update_type():
    g = build_affine()
    (state, _new), = g.updates.values()
    g.updates[state] = (state, g.outputs[0])
    with pytest.raises(dg.GraphError, match=r"update of 'w' has type f32\[N,2\], expected "
                                            r"f32\[3,2\]"):
        g.verify()


# -- source locations ----------------------------------------------------------------------------

def test_every_node_points_at_the_users_line():
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", shape=("N", 4))
        w = dg.placeholder("w", shape=(4, 3))
        forward_line = here(); loss = dg.mean(dg.relu(x @ w) ** 2)  # noqa: E702
        grad_line = here(); gw, = dg.grad(loss, [w])  # noqa: E702
    lines = {n.source.lineno for n in g.nodes}
    assert lines == {forward_line, grad_line}
    assert {n.source.filename for n in g.nodes} == {__file__}
    assert {n.source.function for n in g.nodes} == {"test_every_node_points_at_the_users_line"}
    forward = [n for n in g.nodes if n.source.lineno == forward_line]
    assert [n.op.name for n in forward][:2] == ["matmul", "relu"]   # `x @ w` goes via methods


def _helper(v):
    return dg.tanh(v) + 1.0          # the node is made here: this is the innermost user frame


def test_source_is_the_innermost_user_frame():
    helper_line = inspect.getsourcelines(_helper)[1] + 1
    with dg.Graph("h") as g:
        _helper(dg.placeholder("x", shape=(2,)))
    assert {n.source.lineno for n in g.nodes} == {helper_line}
    assert g.nodes[0].source.function == "_helper"
    assert str(g.nodes[0].source) == f"{__file__}:{helper_line} (_helper)"


def test_package_dirs_in_a_clone_named_duograph(tmp_path):
    # A source checkout cloned as .../duograph/ (with duograph/, graphlib/, tests/ inside):
    # only the package folders are internal, so tests and examples there keep their lines.
    root = tmp_path / "duograph"
    for name in ("duograph", "graphlib", "eager", "passes", "runtime", "tests"):
        (root / name).mkdir(parents=True)
    dirs = package_dirs(str(root))
    assert str(root / "graphlib") + os.sep in dirs
    assert not any(str(root / "tests").startswith(d) for d in dirs)
    # Installed from a wheel: the folder above graphlib/ is the duograph package itself.
    (root / "__init__.py").write_text("")
    assert package_dirs(str(root)) == (str(root) + os.sep,)


# -- build-time errors ---------------------------------------------------------------------------

def test_matmul_shape_error_names_op_shapes_and_this_file():
    with dg.Graph("bad"):
        a = dg.placeholder("a", shape=(2, 3))
        b = dg.placeholder("b", shape=(4, 5))
        with pytest.raises(dg.ShapeError) as info:
            line = here(); a @ b  # noqa: E702
    msg = str(info.value)
    assert msg.startswith("matmul")
    assert "[2,3]" in msg and "[4,5]" in msg
    assert f"{__file__}:{line}" in msg


def test_broadcast_error_is_a_shape_error_at_the_users_line():
    with dg.Graph("bad"):
        a = dg.placeholder("a", shape=(2, 3))
        c = dg.placeholder("c", shape=(7,))
        with pytest.raises(dg.ShapeError) as info:
            line = here(); a + c  # noqa: E702
    assert "add" in str(info.value) and f"{THIS_FILE}:{line}" in str(info.value)


def test_shape_error_is_also_a_value_error():
    # Callers used to numpy can catch ValueError.
    assert issubclass(dg.ShapeError, ValueError) and issubclass(dg.ShapeError, dg.DuographError)
    assert issubclass(dg.FeedError, ValueError) and issubclass(dg.KernelError, RuntimeError)


def test_bool_of_a_value_raises_a_clear_error():
    with dg.Graph("b"):
        x = dg.placeholder("x", shape=(3,))
        with pytest.raises(dg.GraphError, match="no truth value.*dg.where"):
            bool(x)
        with pytest.raises(dg.GraphError, match="no truth value"):
            if dg.sum(x) > 0:
                pass
        with pytest.raises(dg.GraphError, match="no data yet"):
            np.asarray(x)


def test_membership_test_on_values_raises_before_adding_a_node():
    """``y in [x]`` asks ``y == x`` for a truth value: like a JAX tracer or a torch.fx Proxy it
    raises (the comparison is elementwise), and the graph keeps no ``eq`` node from it."""
    g = dg.Graph("member")
    with g:
        x = dg.placeholder("x", shape=(3,))
        y = dg.placeholder("y", shape=(3,))
        before = list(g.nodes)
        for test in (lambda: y in [x], lambda: y not in (x,), lambda: 2.0 in [x],
                     lambda: y in [x, y]):
            with pytest.raises(dg.GraphError, match="no truth value.*v is x"):
                test()
            assert g.nodes == before
        assert x in [x] and y in [y, x]       # Python's `in` tries identity first
        assert [v for v in (x, y) if v is y] == [y]
        eq = y == x                           # `==` itself still builds the eq node
        assert eq.node.op.name == "eq" and g.nodes == before + [eq.node]
    g.verify()


def test_placeholder_outside_a_graph():
    with pytest.raises(dg.GraphError, match="no graph is being built"):
        dg.placeholder("x", shape=(3,))


def test_duplicate_input_name():
    with dg.Graph("d"):
        dg.placeholder("x", shape=(3,))
        with pytest.raises(dg.GraphError, match="already exists"):
            dg.variable("x", np.zeros(3, np.float32))


def test_values_of_two_graphs_do_not_mix():
    with dg.Graph("one"):
        x = dg.placeholder("x", shape=(3,))
    with dg.Graph("two"):
        y = dg.placeholder("y", shape=(3,))
        with pytest.raises(dg.GraphError, match="different graphs"):
            x + y


def test_ops_on_a_value_after_the_with_block_extend_its_graph():
    with dg.Graph("later") as g:
        x = dg.placeholder("x", shape=(3,))
    y = dg.exp(x)
    assert y.graph is g and g.nodes[-1].op.name == "exp"
    g.verify()


def test_update_type_must_match_the_state():
    with dg.Graph("u") as g:
        w = dg.variable("w", np.zeros(3, np.float32))
        with pytest.raises(dg.GraphError, match=r"expects f32\[3\], found f64\[3\]"):
            g.update(w, dg.cast(w, "float64"))
        x = dg.placeholder("x", shape=(3,))
        with pytest.raises(dg.GraphError, match="expects a state Value"):
            g.update(x, x)


def test_types_are_immutable_and_hashable():
    t = TensorType(("N", 4), "float32")
    assert t == TensorType(("N", 4), "f32") and hash(t) == hash(TensorType(("N", 4)))
    assert repr(t) == "f32[N,4]"
    with pytest.raises(AttributeError):
        t.shape = (1,)


def test_every_value_has_exactly_one_producer():
    g, _, _ = build_readme()
    producers = {}
    for node in g.nodes:
        for i, out in enumerate(node.outputs):
            assert id(out) not in producers
            assert out.node is node and out.index == i and out.graph is g
            producers[id(out)] = node
    for v in g.inputs + g.state:
        assert v.node is None and id(v) not in producers


ENTRY_POINT_ERRORS = [   # errors raised outside an op's inference must point here too
    ("placeholder_shape", lambda g, x: dg.placeholder("p", shape=(2, -1)), ValueError,
     "placeholder 'p': negative dimension"),
    ("placeholder_dtype", lambda g, x: dg.placeholder("p", shape=(2,), dtype="float128"),
     TypeError, "placeholder 'p': unsupported dtype 'float128'"),
    ("variable_data", lambda g, x: dg.variable("v", "text"), TypeError, "variable 'v'"),
    ("duplicate_name", lambda g, x: dg.placeholder("x", shape=(3,)), dg.GraphError,
     "already exists"),
    ("update_not_state", lambda g, x: g.update(x, x), dg.GraphError, "expects a state Value"),
    ("operand_str", lambda g, x: x + "1", TypeError, "add: expected a Value, tensor"),
    ("operand_none", lambda g, x: dg.mul(None, x), TypeError, "mul: expected a Value"),
    ("grad_non_scalar", lambda g, x: dg.grad(x * 2.0, [x]), dg.GraphError,
     "pass a cotangent"),
    ("grad_of_int", lambda g, x: dg.grad(dg.sum(x), [dg.cast(x, "int64")]), dg.GraphError,
     "only floating-point values have gradients"),
    ("grad_wrt_array", lambda g, x: dg.grad(dg.sum(x), [np.ones(3)]), TypeError,
     "wrt must hold symbolic Values, found ndarray"),
    ("cotangent_shape", lambda g, x: dg.grad(x, [x], cotangent=np.ones(2, np.float32)),
     dg.GraphError, "cotangent shape [2] does not match the output shape [3]"),
    ("cotangent_dtype", lambda g, x: dg.grad(x, [x], cotangent=dg.cast(x, "float64")),
     dg.GraphError, "expected a cotangent of the output's dtype float32, found float64"),
    ("cast_dtype", lambda g, x: dg.cast(x, "float128"), TypeError,
     "cast: unsupported dtype"),
]


@pytest.mark.parametrize("fn, exc, match", [pytest.param(*case[1:], id=case[0])
                                            for case in ENTRY_POINT_ERRORS])
def test_entry_point_errors_name_the_problem_and_this_line(fn, exc, match):
    with dg.Graph("errors") as g:
        x = dg.placeholder("x", shape=(3,))
        with pytest.raises(exc) as info:
            fn(g, x)
    line = fn.__code__.co_firstlineno     # the user's frame is the call in the table
    msg = str(info.value)
    assert match in msg
    assert f"{__file__}:{line}" in msg, msg
    assert msg.count("\n  in: ") == 1, "the user's line is given once"


def test_cotangent_of_another_graph_is_refused():
    with dg.Graph("other"):
        foreign = dg.placeholder("ct", shape=(3,))
    with dg.Graph("main"):
        x = dg.placeholder("x", shape=(3,))
        with pytest.raises(dg.GraphError, match="belongs to another graph"):
            dg.grad(x * 2.0, [x], cotangent=foreign)
