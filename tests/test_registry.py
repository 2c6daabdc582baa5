"""Registry consistency: the traits each OpDef declares (graphlib/registry.py) agree with what
its infer, kernel and vjp actually do, checked on every node the op-sample table builds
(forward graphs and their gradient graphs); and no engine folder keeps a set of op names
that stands in for a trait.

- ``view``: the output has input 0's dtype, and the kernel's result shares its memory on a
  sample; ``returns_input``: where the predicate holds, the kernel returns its input's memory;
- ``saves_no_data``: the vjp builds on placeholders, and on eager tensors its cotangents do not
  change when the inputs' and outputs' data do;
- ``vjp_reads_output`` is declared exactly where the cotangents depend on the outputs' data;
- ``epilogue_host``, ``cheap``, ``external``, ``constant``, ``expr``: structural rules.
"""
from __future__ import annotations

import ast
import functools
import os
from collections import defaultdict
from typing import Dict, List, NamedTuple

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops.fused import eval_nodes
from duograph.graphlib.registry import REGISTRY, OpDef
from op_samples import OPS, build, grad_targets, tanh_loss_grads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Elementwise ops whose scalar expression is not written yet (the fused-kernel compilers run
# their reference kernels instead). A new elementwise op without an ``expr`` fails below.
NO_EXPR_YET = {
    "clamp": "min or max may be None; the expression language has no optional operand",
    "softplus": "the expression language has no log1p, which the stable form needs",
    "bitwise_left_shift": "the expression language has no shifts, and PyTorch's rule for "
                          "shifts out of range needs the operand's bit width",
    "bitwise_right_shift": "the expression language has no shifts, and PyTorch's rule for "
                           "shifts out of range needs the operand's bit width",
    **{name: "a scipy.special function (xp.special): the expression language has none"
       for name in ("erfc", "erfinv", "lgamma", "digamma", "polygamma", "i0", "i1")},
    "fmax": "the expression language's max propagates NaN; fmax ignores it",
    "fmin": "the expression language's min propagates NaN; fmin ignores it",
    "gcd": "the expression language has no loops (Euclid's algorithm)",
    "lcm": "the expression language has no loops (Euclid's algorithm)",
    "nextafter": "the expression language has no bit-level float functions",
    "signbit": "the expression language has no bit-level float functions (-0.0, NaN's sign)",
    "heaviside": "its value at 0 is the second operand's, cast to the first's dtype",
}
# Tables of strings that happen to be op names but name something else (allowed): (a file,
# or a folder ending in "/", and the table's name).
NOT_OP_TABLES = {("graphlib/ops/nn.py", "_SCE_REDUCTIONS"),       # values of an attribute
                 ("graphlib/collective_hooks.py", "REDUCE_OPS"),  # a collective's op attr
                 ("runtime/cuda/codegen.py", "_MATH"),           # CUDA's math functions
                 ("runtime/cuda/codegen.py", "_RENAMED"),        # the same, renamed
                 ("runtime/cpu/", "_FUNCS")}    # the expression language's functions in numba


class NodeSample(NamedTuple):
    node: object               # a Node of a sample graph
    arrays: tuple              # its input arrays, as the sample computes them


@functools.lru_cache(maxsize=None)
def node_samples() -> Dict[str, List[NodeSample]]:
    """op name -> every node of that op in the sample graphs (forward and gradient), with
    the arrays its inputs hold when the sample runs."""
    found: Dict[str, List[NodeSample]] = defaultdict(list)
    for info in OPS:
        if info.random:
            continue
        for sample in info.samples:
            built = build(info, sample)
            targets = grad_targets(info, sample)
            if targets:
                tanh_loss_grads(built, targets)
            graph = built.graph
            env = {v: built.feeds[v.name] for v in graph.inputs}
            values = list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]
            with np.errstate(all="ignore"):
                eval_nodes(graph.nodes, env, np, values)
            for node in graph.nodes:
                found[node.op.name].append(
                    NodeSample(node, tuple(env[x] for x in node.inputs)))
    return dict(found)


def ops_with(trait: str) -> List[str]:
    return sorted(name for name, op in REGISTRY.items() if getattr(op, trait))


def samples_of(name: str) -> List[NodeSample]:
    samples = node_samples().get(name, [])
    assert samples, f"{name}: no node of this op in the op-sample table's graphs"
    return samples


def raw_kernel(node, arrays):
    with np.errstate(all="ignore"):
        return node.op.kernel(np, *arrays, **node.attrs)


# -- view and returns_input ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ops_with("view"))
def test_view_ops_keep_the_dtype_and_share_memory(name):
    shared = False
    for s in samples_of(name):
        for out in s.node.outputs:
            assert out.dtype == s.node.inputs[0].dtype, (
                f"{name}: a view must have its input's dtype; infer gave {out.dtype} for "
                f"{s.node.inputs[0].dtype}")
        res = raw_kernel(s.node, s.arrays)
        res = res if isinstance(res, tuple) else (res,)
        shared = shared or all(np.shares_memory(r, s.arrays[0]) for r in res)
    assert shared, f"{name} declares view=True, but its kernel never returned a view"


def test_returns_input_ops_return_their_input():
    names = [n for n, op in REGISTRY.items() if op.returns_input is not None]
    assert sorted(names) == ["cast", "stop_gradient"]
    for name in names:
        held = 0
        for s in samples_of(name):
            if s.node.op.returns_input(s.node):
                held += 1
                assert np.shares_memory(raw_kernel(s.node, s.arrays), s.arrays[0]), name
        assert held, f"{name}: no sample where returns_input holds"


def test_view_traits_drive_the_planner_and_eager_versions():
    from duograph.passes.memory import is_view_node
    with dg.Graph("views"):
        x = dg.placeholder("x", (2, 3))
        r = dg.reshape(x, 3, 2)
        same = dg.cast(x, "float32")
        other = dg.cast(x, "float64")
        e = dg.exp(x)
    assert is_view_node(r.node) and is_view_node(same.node)
    assert not is_view_node(other.node) and not is_view_node(e.node)
    t = dg.tensor(np.ones((2, 3), np.float32))
    assert t.reshape(3, 2)._version is t._version
    assert dg.exp(t)._version is not t._version


# -- what the vjp reads ----------------------------------------------------------------------------
def _poison(array: np.ndarray, rng) -> np.ndarray:
    """Other data of the same shape and dtype."""
    if array.dtype.kind in "fc":
        return rng.standard_normal(array.shape).astype(array.dtype) * 3 + 7
    if array.dtype.kind == "b":
        return ~array
    return np.zeros_like(array)


def _eager_vjp(node, ins, outs, cts):
    """The op's vjp on eager tensors, as numpy arrays (None where no cotangent)."""
    tensors = lambda arrays: [dg.tensor(a) for a in arrays]   # noqa: E731
    needs = [a.dtype.kind in "fc" and i not in node.op.nondiff_inputs
             for i, a in enumerate(ins)]
    got = node.op.vjp(tensors(cts), tensors(ins), tensors(outs), dict(node.attrs), needs)
    return [None if g is None else np.asarray(g.numpy()) for g, n in zip(got, needs)]


def _vjp_cases(name):
    """(node, input arrays, output arrays, cotangents) for the samples with a float output."""
    rng = np.random.default_rng(0)
    for s in samples_of(name):
        if not any(dg.dtypes.is_differentiable(o.dtype) for o in s.node.outputs):
            continue
        outs = raw_kernel(s.node, s.arrays)
        outs = [np.asarray(o).astype(v.dtype) for o, v in
                zip(outs if isinstance(outs, tuple) else (outs,), s.node.outputs)]
        cts = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
        yield s.node, list(s.arrays), outs, cts


def _assert_same_cotangents(name, want, got, what):
    for i, (a, b) in enumerate(zip(want, got)):
        assert (a is None) == (b is None), f"{name}: cotangent {i}"
        if a is not None:
            np.testing.assert_array_equal(a, b, err_msg=f"{name}: cotangent {i} {what}")


@pytest.mark.parametrize("name", ops_with("saves_no_data"))
def test_saves_no_data_vjps_read_no_data(name):
    op = REGISTRY[name]
    assert op.vjp is not None, f"{name} declares saves_no_data but has no vjp"
    rng = np.random.default_rng(1)
    checked = 0
    for node, ins, outs, cts in _vjp_cases(name):
        # placeholders: the rule builds on types alone
        with dg.Graph(f"{name}_vjp"):
            ph = lambda arrays, p: [dg.placeholder(f"{p}{i}", a.shape, a.dtype.name)  # noqa
                                    for i, a in enumerate(arrays)]
            needs = [a.dtype.kind in "fc" for a in ins]
            op.vjp(ph(cts, "ct"), ph(ins, "in"), ph(outs, "out"), dict(node.attrs), needs)
        want = _eager_vjp(node, ins, outs, cts)
        got = _eager_vjp(node, [_poison(a, rng) for a in ins], [_poison(o, rng) for o in outs],
                         cts)
        _assert_same_cotangents(name, want, got, "changed with the operands' data")
        checked += 1
    assert checked, f"{name}: no sample with a float output"


DIFFERENTIABLE = sorted(name for name, op in REGISTRY.items()
                        if op.vjp is not None and name != "call")


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_vjp_reads_output_is_declared_exactly_where_it_holds(name):
    """Cotangents change with the outputs' data if and only if ``vjp_reads_output``."""
    if name not in node_samples():
        pytest.skip(f"{name}: no node of this op in the sample graphs")
    rng = np.random.default_rng(2)
    changed = False
    for node, ins, outs, cts in _vjp_cases(name):
        want = _eager_vjp(node, ins, outs, cts)
        got = _eager_vjp(node, ins, [_poison(o, rng) for o in outs], cts)
        if REGISTRY[name].vjp_reads_output:
            changed = changed or any(
                a is not None and not np.array_equal(a, b, equal_nan=True)
                for a, b in zip(want, got))
        else:
            _assert_same_cotangents(name, want, got, "read the outputs' data, but the op "
                                    "does not declare vjp_reads_output")
    if REGISTRY[name].vjp_reads_output:
        assert changed, f"{name} declares vjp_reads_output, but no sample's vjp read it"


# -- ufunc and compare ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ops_with("ufunc"))
def test_ufunc_trait_is_the_kernel(name):
    """The bare ufunc gives the kernel's bits where the trait says it may stand in for it:
    every operand of the output's dtype, or any operands with ``ufunc_mixed``."""
    op = REGISTRY[name]
    assert op.elementwise and isinstance(getattr(np, op.ufunc, None), np.ufunc), name
    checked = 0
    for s in samples_of(name):
        out_dtype = np.dtype(s.node.outputs[0].dtype)
        if not op.ufunc_mixed and any(a.dtype != out_dtype for a in s.arrays):
            continue
        want = raw_kernel(s.node, s.arrays)
        got = np.empty(np.broadcast_shapes(*(a.shape for a in s.arrays)), out_dtype)
        with np.errstate(all="ignore"):
            getattr(np, op.ufunc)(*s.arrays, out=got)
        assert want.dtype == got.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: np.{op.ufunc}")
        checked += 1
    assert checked, f"{name}: no sample where the ufunc trait applies"


def test_ufunc_mixed_means_a_kernel_that_promotes_nothing():
    """With ``ufunc_mixed`` the ufunc stands in on operands of different dtypes too."""
    mixed = ops_with("ufunc_mixed")
    assert set(ops_with("compare")) <= set(mixed)
    for name in mixed:
        assert REGISTRY[name].ufunc is not None, name
    a = np.array([1.5, -2.0, 3.0], np.float32)
    b = np.array([1, -2, 4], np.int64)
    for name in mixed:
        op = REGISTRY[name]
        args = (a, b)[:len(samples_of(name)[0].arrays)]
        out = np.empty(3, bool)
        getattr(np, op.ufunc)(*args, out=out)
        np.testing.assert_array_equal(out, op.kernel(np, *args), err_msg=name)


@pytest.mark.parametrize("name", ops_with("compare"))
def test_compare_trait_is_the_operator(name):
    op = REGISTRY[name]
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, 50).astype(np.float64)
    b = rng.integers(-2, 3, 50).astype(np.float64)
    a[:3] = np.nan
    want = eval(f"a {op.compare} b", {"a": a, "b": b})       # the operator, as numba reads it
    np.testing.assert_array_equal(op.kernel(np, a, b), want, err_msg=name)
    assert op.compare in ("<", "<=", ">", ">=", "==", "!="), name


def test_fills_ops_fill_their_output_with_fill_value():
    assert ops_with("fills") == ["full", "full_like"]
    for name in ops_with("fills"):
        checked = 0
        for s in samples_of(name):
            want = s.node.attrs["fill_value"]
            got = raw_kernel(s.node, s.arrays)
            assert np.all((got == want) | (np.isnan(got) & (want != want))), name
            checked += 1
        assert checked, name


def test_a_zero_cotangent_is_known_by_the_fills_trait():
    from duograph.graphlib.autodiff import is_zero_cotangent
    with dg.Graph("zeros"):
        x = dg.placeholder("x", (2, 3))
        assert is_zero_cotangent(dg.zeros_like(x)) and is_zero_cotangent(dg.zeros((2, 3)))
        assert not is_zero_cotangent(dg.ones_like(x)) and not is_zero_cotangent(x * 0)


# -- every op decided in every table -------------------------------------------------------------
# expressions the backends' fused-kernel translators refuse (they compute in float types)
EXPR_NOT_TRANSLATED = {
    name: "&, |, ^ and ~ are integer-only: the reference kernel runs"
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")}


def test_every_elementwise_op_has_an_out_form_or_says_why_not():
    """The CPU backend's out= table (built from the ufunc traits and its own forms) holds
    every elementwise op, or ``out_kernels.NO_OUT_FORM`` says why not; never both."""
    from duograph.runtime.backends import get_backend
    from duograph.runtime.cpu.out_kernels import NO_OUT_FORM
    backend = get_backend("numpy")
    for op in REGISTRY.values():
        has = backend.out_kernel(op) is not None
        if op.ufunc is not None:
            assert has, f"{op.name}: a ufunc trait, but no out= form"
        if op.elementwise:
            assert has != (op in NO_OUT_FORM), (
                f"{op.name}: an elementwise op needs an out= form in runtime/cpu/out_kernels.py "
                f"or an entry in its NO_OUT_FORM saying why not (found in both or neither)")
    for op, why in NO_OUT_FORM.items():
        assert op.elementwise and isinstance(why, str) and why, op.name


def test_every_expression_translates_on_each_backend_or_says_why_not():
    """Each op's ``expr``, formatted as a sample node's attributes give it, is read by the CPU
    numba translator and the CUDA code generator, unless EXPR_NOT_TRANSLATED says why not."""
    from duograph.runtime.cpu.fused import c_to_python
    from duograph.runtime.cuda import codegen
    for name, op in REGISTRY.items():
        if op.expr is None:
            continue
        node = samples_of(name)[0].node
        text = op.expr.format(*[f"x{i}" for i in range(len(node.inputs))], **node.attrs)
        for backend, translate in (("cpu", lambda t: c_to_python(t, "F")),
                                   ("cuda", lambda t: codegen.translate(t, "float"))):
            if name in EXPR_NOT_TRANSLATED:
                with pytest.raises(ValueError):
                    translate(text)
            else:
                translate(text)         # a ValueError names what it could not read


def test_every_op_has_an_onnx_converter_or_says_why_not():
    """The ONNX exporter's tables are keyed by the OpDef: a converter, or a refusal with its
    reason (collectives, the ``ordered`` trait, are refused as such)."""
    from duograph.onnx._export import CONVERTERS, REFUSED
    for name, op in REGISTRY.items():
        decided = (op in CONVERTERS) + (op in REFUSED) + bool(op.ordered)
        assert decided == 1, (f"{name}: needs exactly one of an ONNX converter, an entry in "
                              f"REFUSED (duograph/onnx/_export.py) or the ordered trait")
    for op, why in REFUSED.items():
        assert REGISTRY.get(op.name) is op and isinstance(why, str) and why, op.name


def test_an_onnx_refusal_gives_its_reason():
    from duograph.onnx._export import REFUSED
    with dg.Graph("refused") as g:
        x = dg.placeholder("x", (3,))
        g.outputs = [dg.log1p(x)]
    with pytest.raises(dg.onnx.OnnxExportError, match="op 'log1p' cannot be exported: "
                       + REFUSED[REGISTRY["log1p"]]):
        dg.onnx.to_model(g)


# -- structural rules ------------------------------------------------------------------------------
def test_structural_traits():
    for name, op in REGISTRY.items():
        assert isinstance(op, OpDef)
        if op.epilogue_host:
            assert not op.elementwise and not op.multi_output, name
        if op.cheap:
            assert not op.random, name
        if op.constant:
            assert op.external and op.vjp is None, name
        if op.view:
            assert op.returns_input is None, f"{name}: view already covers returns_input"
    assert ops_with("constant") == ["constant"]
    assert ops_with("epilogue_host") == ["conv2d", "matmul", "mean", "sum"]
    assert set(ops_with("random")) == {"bernoulli", "normal", "randint", "uniform"}


def test_elementwise_ops_have_an_expression():
    for name, op in REGISTRY.items():
        if op.expr is not None:
            assert op.elementwise, f"{name} has an expr but is not elementwise"
        elif op.elementwise:
            assert name in NO_EXPR_YET, f"{name} is elementwise but declares no expr"
    for name in NO_EXPR_YET:
        assert REGISTRY[name].expr is None, f"{name} has an expr now: drop it from NO_EXPR_YET"


@pytest.mark.parametrize("name", sorted(n for n, op in REGISTRY.items()
                                        if op.elementwise and op.inplace_pairs is None))
def test_default_inplace_pairs_of_elementwise_ops(name):
    from duograph.passes.memory import inplace_pairs
    for s in node_samples().get(name, [])[:2]:
        assert inplace_pairs(s.node) == [(0, j) for j in range(len(s.node.inputs))]


# -- no name-keyed op sets outside the registry ----------------------------------------------------
def _engine_files():
    for folder in ("graphlib", "eager", "passes", "runtime"):
        for root, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def _string_items(node):
    """The strings of a set/frozenset/tuple/list literal (or ``frozenset({...})``), or the
    keys of a dict literal."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set") \
            and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Dict) and node.keys and all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return [k.value for k in node.keys]
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)) and node.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def test_no_op_name_sets_in_the_engine_folders():
    """A module-level table of op names (``VIEW_OPS = frozenset({"reshape", ...})``, a dict
    keyed by them) or a check ``op.name == "constant"`` stands in for a trait; declare the
    trait on the OpDef, or key a backend's table by the OpDef object."""
    names = set(REGISTRY)
    found = []
    for rel, path in _engine_files():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                items = _string_items(stmt.value)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                target = getattr(targets[0], "id", "?")
                allowed = any(rel.startswith(where) and target == table
                              for where, table in NOT_OP_TABLES)
                if items and sum(s in names for s in items) >= 2 and target != "__all__" \
                        and not allowed:
                    found.append(f"{rel}:{stmt.lineno} {target} = {items[:4]}...")
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "constant"
                    for c in [node.left] + node.comparators):
                text = ast.unparse(node)
                if ".op.name" in text:
                    found.append(f"{rel}:{node.lineno} {text}")
    assert not found, "op-name tables outside the registry:\n" + "\n".join(found)


def test_the_guard_sees_a_name_table(tmp_path):
    source = ('VIEW_OPS = frozenset({"reshape", "permute"})\nok = ("a", "b")\n'
              '_UFUNCS = {"add": "add", "sub": "subtract"}\n')
    tree = ast.parse(source)
    items = [_string_items(s.value) for s in tree.body]
    assert items == [["reshape", "permute"], ["a", "b"], ["add", "sub"]]
