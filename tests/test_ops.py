"""Generic op tests, parametrised over the op-sample table (``op_samples.OPS``).

1. forward in graph mode vs the numpy reference (values, dtype, shape);
2. the inferred TensorType of every Value vs the array the executable and the raw kernel
   return (forward and gradient nodes);
3. graph-mode gradients vs central finite differences in float64;
4. bad inputs raise the expected duograph error at build time, naming the op and this file;
5. symbolic dims: graphs built once with ("N", ...) run with two different N;
6. hypothesis: random broadcastable shape pairs for the binary elementwise ops;
7. seeded random ops: reproducible, independent streams, roughly right moments.
"""
from __future__ import annotations

import os
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import duograph as dg
from duograph.graphlib import functional
from duograph.graphlib.types import has_runtime_dim
from op_samples import (F64, OPS, OpInfo, Sample, assert_matches, build, finite_difference,
                        grad_targets, leaves, map_leaves, reference)

THIS_FILE = os.path.basename(__file__)


# -- helpers ---------------------------------------------------------------------------------
def interpret(graph: dg.Graph, feeds: dict) -> dict:
    """Run every node's raw kernel (no dtype fix-up by a runtime); id(Value) -> array."""
    env = {id(v): feeds[v.name] for v in graph.inputs}
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            res = node.op.kernel(np, *[env[id(x)] for x in node.inputs], **node.attrs)
            res = res if len(node.outputs) > 1 or node.op.multi_output else (res,)
            for v, r in zip(node.outputs, res):
                env[id(v)] = r
    return env


# -- parametrisation ---------------------------------------------------------------------------
def _samples(select=lambda op, s: True):
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if select(op, s)]


FORWARD = _samples(lambda op, s: not op.random)
RANDOM = _samples(lambda op, s: op.random)
GRAD = _samples(lambda op, s: bool(grad_targets(op, s)))
ERRORS = [pytest.param(op, case, id=f"{op.name}-{case.name}") for op in OPS
          for case in op.errors]


def test_table_covers_every_public_op():
    """Every op function ``duograph.graphlib.functional`` exports has a table entry."""
    covered = {id(op.fn) for op in OPS}
    missing = sorted(
        name for name, fn in vars(functional).items()
        if callable(fn) and not name.startswith("_") and not isinstance(fn, type)
        and getattr(fn, "__module__", "").startswith("duograph.graphlib")
        and id(fn) not in covered)
    assert not missing, f"op functions without an OpInfo: {missing}"


# -- 1. forward vs numpy -----------------------------------------------------------------------
@pytest.mark.parametrize("op, sample", FORWARD)
def test_forward_matches_numpy(op: OpInfo, sample: Sample):
    built = build(op, sample)
    got = built.graph.compile(outputs=built.outputs)(**built.feeds)
    want = reference(op, sample)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, op.tol, f"output {k}: ")


@pytest.mark.parametrize("op, sample", RANDOM)
def test_random_forward(op: OpInfo, sample: Sample):
    built = build(op, sample)
    (out,) = built.graph.compile(outputs=built.outputs)(**built.feeds)
    (value,) = built.outputs
    assert out.shape == value.shape and out.dtype.name == value.dtype
    assert np.all(np.isfinite(out))
    if op.check is not None:
        op.check(out, *sample.args, **sample.kwargs)


# -- 2. inferred types vs actual arrays --------------------------------------------------------
@pytest.mark.parametrize("op, sample", FORWARD + RANDOM)
def test_inferred_type_matches_array(op: OpInfo, sample: Sample):
    built = build(op, sample)
    values = list(built.outputs)
    targets = grad_targets(op, sample)
    if targets:   # the gradient nodes must infer right too
        with built.graph:
            loss = dg.sum(values[0] * 1.5) if len(values) == 1 else sum(
                dg.sum(v) for v in values if v.dtype == F64)
            values += dg.grad(loss, [built.inputs[i] for i in targets])
    built.graph.verify()
    arrays = built.graph.compile(outputs=values)(**built.feeds)
    for v, a in zip(values, arrays):
        assert (_shape_seen(v, a), v.dtype) == (a.shape, a.dtype.name), v
    env = interpret(built.graph, built.feeds)
    for node in built.graph.nodes:
        for v in node.outputs:
            a = np.asarray(env[id(v)])
            assert (_shape_seen(v, a), v.dtype) == (a.shape, a.dtype.name), (
                f"kernel of {node.op.name} returned {a.dtype.name}{list(a.shape)}, "
                f"inferred {v.type!r}")


def _shape_seen(v, a) -> tuple:
    """``v``'s inferred shape, where a dim only known at run time (``RUNTIME_DIM``: the
    rows a bounded while_loop saves) takes the size the kernel gave it; every other dim must
    be the one inferred."""
    if len(v.shape) != a.ndim:
        return tuple(v.shape)
    return tuple(n if has_runtime_dim((d,)) else d for d, n in zip(v.shape, a.shape))


# -- 3. gradients vs finite differences --------------------------------------------------------
@pytest.mark.parametrize("op, sample", GRAD)
def test_grad_matches_finite_differences(op: OpInfo, sample: Sample):
    targets = grad_targets(op, sample)
    built = build(op, sample)
    rng = np.random.default_rng(0)
    float_outs = [k for k, v in enumerate(built.outputs) if v.dtype == F64]
    cotangents = {f"ct{k}": rng.normal(size=built.outputs[k].shape) for k in float_outs}
    with built.graph:
        loss = None
        for k in float_outs:
            ct = dg.placeholder(f"ct{k}", built.outputs[k].shape, F64)
            term = dg.sum(built.outputs[k] * ct)
            loss = term if loss is None else loss + term
        grads = dg.grad(loss, [built.inputs[i] for i in targets])
    got = built.graph.compile(outputs=grads)(**built.feeds, **cotangents)

    def f(arrays):
        outs = reference(op, sample, arrays)
        return sum(float(np.sum(outs[k] * cotangents[f"ct{k}"])) for k in float_outs)

    arrays = leaves(sample.args, sample.kwargs)
    for i, g in zip(targets, got):
        want = finite_difference(f, arrays, i)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"gradient of operand {i}")


@pytest.mark.parametrize("op, sample", [p for p in GRAD if p.values[0].second_order])
def test_second_order_grad_matches_finite_differences(op: OpInfo, sample: Sample):
    """Gradient rules are written with op functions, so they have gradients too: the
    gradient of <first-order gradient, v> vs finite differences of the first-order graph."""
    targets = grad_targets(op, sample)
    built = build(op, sample)
    rng = np.random.default_rng(1)
    float_outs = [k for k, v in enumerate(built.outputs) if v.dtype == F64]
    xs = [built.inputs[i] for i in targets]
    feeds = dict(built.feeds)
    with built.graph:
        loss = None
        for k in float_outs:
            ct = dg.placeholder(f"ct{k}", built.outputs[k].shape, F64)
            feeds[f"ct{k}"] = rng.normal(size=built.outputs[k].shape)
            term = dg.sum(built.outputs[k] * ct)
            loss = term if loss is None else loss + term
        grads = dg.grad(loss, xs)
        dot = None
        for j, g in enumerate(grads):
            v = dg.placeholder(f"v{j}", g.shape, F64)
            feeds[f"v{j}"] = rng.normal(size=g.shape)
            term = dg.sum(g * v)
            dot = term if dot is None else dot + term
        second = dg.grad(dot, xs)
    first_exe = built.graph.compile(outputs=[dot])
    got = built.graph.compile(outputs=second)(**feeds)

    def f(arrays):
        return float(first_exe(**dict(feeds, **{x.name: a for x, a in zip(xs, arrays)}))[0])

    arrays = [feeds[x.name] for x in xs]
    for j, g in enumerate(got):
        np.testing.assert_allclose(g, finite_difference(f, arrays, j), rtol=1e-4, atol=1e-5,
                                   err_msg=f"second-order gradient of operand {targets[j]}")


# -- 4. errors at build time -------------------------------------------------------------------
@pytest.mark.parametrize("op, case", ERRORS)
def test_bad_inputs_raise_clear_errors(op: OpInfo, case):
    graph = dg.Graph(f"{op.name}_{case.name}")
    with graph:
        names = iter(range(100))
        args, kwargs = map_leaves(case.args, case.kwargs, lambda a: dg.placeholder(
            f"in{next(names)}", a.shape, a.dtype.name))
        with pytest.raises(case.exc) as info:
            op.fn(*args, **kwargs)
    message = str(info.value)
    assert case.match in message
    assert op.op_name in message, "the message must name the op"
    assert THIS_FILE in message, "the message must point at the user's line"


# -- 5. symbolic dims --------------------------------------------------------------------------
class SymCase(NamedTuple):
    name: str
    shapes: tuple               # one symbolic shape per float64 input
    fn: Callable
    ref: Callable
    out_shape: tuple            # the inferred (symbolic) output shape


SYMBOLIC = [
    SymCase("add_bcast", (("N", 3), (3,)), lambda x, y: x + y, np.add, ("N", 3)),
    SymCase("mul_col", (("N", 1), (1, "M")), lambda x, y: x * y, np.multiply, ("N", "M")),
    SymCase("sum_dim0", (("N", 3),), lambda x: dg.sum(x, 0), lambda x: x.sum(0), (3,)),
    SymCase("mean_all", (("N", 3),), dg.mean, np.mean, ()),
    SymCase("var_dim0", (("N", 2),), lambda x: dg.var(x, 0), lambda x: x.var(0, ddof=1),
            (2,)),
    SymCase("matmul", (("N", 3), (3, 2)), dg.matmul, np.matmul, ("N", 2)),
    SymCase("softmax", (("N", 3),), lambda x: dg.softmax(x, -1),
            lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True), ("N", 3)),
    SymCase("logsumexp_N", (("N", 3),), lambda x: dg.logsumexp(x, 0),
            lambda x: np.log(np.exp(x).sum(0)), (3,)),
    SymCase("reshape_hole", (("N", 2, 3),), lambda x: dg.reshape(x, -1, 3),
            lambda x: x.reshape(-1, 3), ("2*N", 3)),
    SymCase("flatten_all", (("N", 2),), dg.flatten, lambda x: x.reshape(-1), ("2*N",)),
    SymCase("flatten_back", (("N", 2, 3),), lambda x: dg.reshape(dg.flatten(x), "N", 6),
            lambda x: x.reshape(-1, 6), ("N", 6)),
    SymCase("flatten", (("N", 2, 3),), lambda x: dg.flatten(x, 1),
            lambda x: x.reshape(x.shape[0], -1), ("N", 6)),
    SymCase("transpose", (("N", 3),), lambda x: x.T, lambda x: x.T, (3, "N")),
    SymCase("getitem", (("N", 3),), lambda x: x[1:, ::2], lambda x: x[1:, ::2],
            ("N-1", 2)),
    SymCase("getitem_step", (("N", 3),), lambda x: x[::2], lambda x: x[::2], ("ceiling(N/2)", 3)),
    SymCase("mean_slice", (("N", 3),), lambda x: dg.mean(x[1:]), lambda x: x[1:].mean(), ()),
    SymCase("cat_N", (("N", 3), (2, 3)), lambda x, y: dg.cat([x, y]),
            lambda x, y: np.concatenate([x, y]), ("N+2", 3)),
    SymCase("cat_sum", (("N", 3),), lambda x: dg.sum(dg.cat([x, x * 2.0]), 0),
            lambda x: np.concatenate([x, x * 2.0]).sum(0), (3,)),
    SymCase("pad_N", (("N", 2),), lambda x: dg.pad(x, (0, 0, 1, 2)),
            lambda x: np.pad(x, [(1, 2), (0, 0)]), ("N+3", 2)),
    SymCase("expand_N", ((1, 3), ("N", 3)), lambda x, y: dg.expand(x, *y.shape) * y,
            lambda x, y: np.broadcast_to(x, y.shape) * y, ("N", 3)),
    SymCase("unsqueeze_sum", (("N",),), lambda x: dg.sum(dg.unsqueeze(x, 1) * 2.0, 0),
            lambda x: (x[:, None] * 2.0).sum(0), (1,)),
    SymCase("zeros_like_add", (("N", 2),), lambda x: dg.zeros_like(x) + x,
            lambda x: x, ("N", 2)),
    SymCase("exp_pad", (("N", 2),), lambda x: dg.pad(dg.exp(x), (1, 1)),
            lambda x: np.pad(np.exp(x), [(0, 0), (1, 1)]), ("N", 4)),
]


def _concrete(shape, n):
    return tuple(n if d == "N" else (n + 1 if d == "M" else d) for d in shape)


@pytest.mark.parametrize("case", SYMBOLIC, ids=[c.name for c in SYMBOLIC])
def test_symbolic_dims(case: SymCase):
    """Built once with symbolic dims, run with two sizes: values and gradients."""
    graph = dg.Graph(case.name)
    with graph:
        xs = [dg.placeholder(f"x{i}", s, F64) for i, s in enumerate(case.shapes)]
        out = case.fn(*xs)
        ct = dg.placeholder("ct", out.shape, F64)
        grads = dg.grad(dg.sum(out * ct), xs)
    assert tuple(out.shape) == case.out_shape
    exe = graph.compile(outputs=[out] + grads)
    rng = np.random.default_rng(1)
    for n in (2, 5):
        arrays = [rng.normal(size=_concrete(s, n)) for s in case.shapes]
        feeds = {f"x{i}": a for i, a in enumerate(arrays)}
        want = np.asarray(case.ref(*arrays))
        feeds["ct"] = rng.normal(size=want.shape)
        got = exe(**feeds)
        assert_matches(got[0], want, {F64: (1e-10, 1e-12)}, f"N={n}: ")

        def f(arrs):
            return float(np.sum(case.ref(*arrs) * feeds["ct"]))
        for i, g in enumerate(got[1:]):
            np.testing.assert_allclose(g, finite_difference(f, arrays, i), rtol=1e-5,
                                       atol=1e-6, err_msg=f"N={n}: gradient {i}")


# -- 6. broadcasting (hypothesis) --------------------------------------------------------------
BINARY = [pytest.param(op, id=op.name) for op in OPS if op.binary]


@pytest.mark.parametrize("op", BINARY)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                            max_side=3),
       data_seed=st.integers(0, 2**16))
def test_binary_broadcasting(op: OpInfo, shapes, data_seed):
    rng = np.random.default_rng(data_seed)
    a, b = (op.make_input(rng, s) for s in shapes.input_shapes)
    graph = dg.Graph(op.name)
    with graph:
        out = op.fn(dg.placeholder("a", a.shape, a.dtype.name),
                    dg.placeholder("b", b.shape, b.dtype.name))
    assert tuple(out.shape) == shapes.result_shape
    (got,) = graph.compile(outputs=[out])(a=a, b=b)
    assert_matches(got, np.asarray(op.ref(a, b)), op.tol)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
def test_where_broadcasting(shapes):
    rng = np.random.default_rng(0)
    c, a, b = shapes.input_shapes
    arrays = {"c": rng.uniform(size=c) < 0.5, "a": rng.normal(size=a), "b": rng.normal(size=b)}
    graph = dg.Graph("where")
    with graph:
        out = dg.where(*(dg.placeholder(k, np.shape(v), np.asarray(v).dtype.name)
                         for k, v in arrays.items()))
    assert tuple(out.shape) == shapes.result_shape
    (got,) = graph.compile(outputs=[out])(**arrays)
    assert_matches(got, np.where(arrays["c"], arrays["a"], arrays["b"]), {F64: (0, 0)})


# -- 7. seeded random ops ----------------------------------------------------------------------
RANDOM_FNS = {
    "uniform": lambda seed, n: dg.uniform(n, seed=seed, low=2.0, high=5.0, dtype=F64),
    "normal": lambda seed, n: dg.normal(n, seed=seed, mean=1.0, std=2.0, dtype=F64),
    "bernoulli": lambda seed, n: dg.bernoulli(dg.full((n,), 0.3, dtype=F64), seed=seed),
    "randint": lambda seed, n: dg.randint(0, 10, size=(n,), seed=seed),
}
MOMENTS = {   # mean, standard deviation of one draw
    "uniform": (3.5, 3.0 / np.sqrt(12.0)),
    "normal": (1.0, 2.0),
    "bernoulli": (0.3, np.sqrt(0.3 * 0.7)),
    "randint": (4.5, np.sqrt((10 ** 2 - 1) / 12.0)),
}


def _random_graph(kind: str, n: int, draws: int = 1):
    graph = dg.Graph(kind)
    with graph:
        seed = dg.placeholder("seed", (), "int64")
        outs = [RANDOM_FNS[kind](seed, n) for _ in range(draws)]
    return graph.compile(outputs=outs)


@pytest.mark.parametrize("kind", sorted(RANDOM_FNS))
def test_random_reproducible(kind):
    exe = _random_graph(kind, 64)
    (a,), (b,) = exe(seed=3), exe(seed=3)
    np.testing.assert_array_equal(a, b)
    (c,) = _random_graph(kind, 64)(seed=3)          # the same graph built again
    np.testing.assert_array_equal(a, c)
    (d,) = exe(seed=4)
    assert not np.array_equal(a, d), "a different seed must give different numbers"


@pytest.mark.parametrize("kind", sorted(RANDOM_FNS))
def test_random_nodes_draw_independently(kind):
    a, b = _random_graph(kind, 64, draws=2)(seed=3)
    assert not np.array_equal(a, b), "two random nodes with one seed drew the same numbers"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_uniform_stays_below_high(dtype):
    graph = dg.Graph("uniform")
    with graph:
        seed = dg.placeholder("seed", (), "int64")
        unit = dg.uniform(50_000, seed=seed, dtype=dtype)
        shifted = dg.uniform(50_000, seed=seed, low=2.0, high=5.0, dtype=dtype)
    unit_v, shifted_v = graph.compile(outputs=[unit, shifted])(seed=5)
    assert 0.0 <= unit_v.min() and unit_v.max() < 1.0
    assert 2.0 <= shifted_v.min() and shifted_v.max() < 5.0


@pytest.mark.parametrize("kind", sorted(RANDOM_FNS))
def test_random_moments(kind):
    n = 20000
    (x,) = _random_graph(kind, n)(seed=11)
    mean, std = MOMENTS[kind]
    assert abs(x.mean() - mean) < 5 * std / np.sqrt(n)
    assert abs(x.std() - std) < 0.03 * std
    if kind == "randint":
        assert set(np.unique(x)) == set(range(10))
    if kind == "bernoulli":
        assert set(np.unique(x)) == {0.0, 1.0}


@pytest.mark.parametrize("op, sample", [
    p for p in FORWARD + RANDOM if getattr(dg, p.values[0].name, None) not in (
        None, p.values[0].fn)
    and p.values[0].fn is getattr(functional, p.values[0].name, None)])
def test_face_functions_build_the_same_node(op: OpInfo, sample: Sample):
    """``dg.zeros`` & co. (which also create eager tensors) build what the op functions do."""
    face = OpInfo(op.name, getattr(dg, op.name), op.samples, op.ref)
    a, b = build(op, sample), build(face, sample)
    (na,), (nb,) = a.graph.nodes[-1:], b.graph.nodes[-1:]
    assert (na.op, na.attrs, a.outputs[0].type) == (nb.op, nb.attrs, b.outputs[0].type)


# -- 8. operators and methods on Values ---------------------------------------------------------
VALUE_OPERATORS = {   # name: fn, the same on Values and numpy arrays, or (fn, numpy_fn)
    "add": lambda x, y: x + y, "radd": lambda x, y: 1.5 + x, "sub": lambda x, y: x - y,
    "rsub": lambda x, y: 2.0 - x, "mul": lambda x, y: x * y, "rmul": lambda x, y: 3 * x,
    "div": lambda x, y: x / y, "rdiv": lambda x, y: 2.0 / y, "pow": lambda x, y: x ** 2,
    "pow_tensor": lambda x, y: y ** x, "rpow": lambda x, y: 2.0 ** x,
    "matmul": lambda x, y: x @ y.T, "neg": lambda x, y: -x, "abs": lambda x, y: abs(x),
    "lt": lambda x, y: x < y, "le": lambda x, y: x <= 0.25, "gt": lambda x, y: x > y,
    "ge": lambda x, y: 0.25 >= x, "eq": lambda x, y: x == x[0], "ne": lambda x, y: x != y,
    "and": lambda x, y: (x > 0) & (y > 1), "or": lambda x, y: (x > 0) | (y > 1),
    "invert": lambda x, y: ~(x > 0), "numpy_left": lambda x, y: np.full(4, 2.0) * x,
    "sum_dim_keepdim": (lambda x, y: x.sum(dim=1, keepdim=True),
                        lambda x, y: x.sum(axis=1, keepdims=True)),
    "sum_dims": (lambda x, y: x.sum(dim=(0, 1)), lambda x, y: x.sum()),
    "mean": lambda x, y: x.mean(-1), "reshape": lambda x, y: x.reshape(4, 3),
    "reshape_tuple": lambda x, y: x.reshape((2, -1)), "T": lambda x, y: x.T,
    "index": lambda x, y: x[0, 1:3], "index_neg": lambda x, y: x[-1],
    "index_none": lambda x, y: x[:, None, ::2], "max_all": lambda x, y: x.max(),
    "argmax": lambda x, y: x.argmax(1), "exp": (lambda x, y: x.exp(), lambda x, y: np.exp(x)),
    "var": (lambda x, y: x.var(0), lambda x, y: x.var(0, ddof=1)),
    "clamp": (lambda x, y: x.clamp(min=0.0), lambda x, y: np.maximum(x, 0.0)),
}


def test_value_operators_and_methods_match_numpy():
    rng = np.random.default_rng(3)
    arrays = {"x": rng.normal(size=(3, 4)), "y": rng.uniform(0.5, 2.0, size=(3, 4))}
    cases = {k: fn if isinstance(fn, tuple) else (fn, fn) for k, fn in VALUE_OPERATORS.items()}
    graph = dg.Graph("operators")
    with graph:
        x, y = (dg.placeholder(k, a.shape, F64) for k, a in arrays.items())
        values = {name: fn(x, y) for name, (fn, _) in cases.items()}
    assert all(isinstance(v, dg.Value) for v in values.values())
    got = graph.compile(outputs=list(values.values()))(**arrays)
    for (name, (_, np_fn)), g in zip(cases.items(), got):
        want = np.asarray(np_fn(arrays["x"], arrays["y"]))
        assert_matches(g, want, {F64: (1e-12, 1e-12)}, f"{name}: ")


def test_value_max_with_dim_gives_values_and_indices_as_pytorch():
    graph = dg.Graph("max")
    with graph:
        x = dg.placeholder("x", (2, 3), F64)
        values, indices = x.max(dim=1)
        low, where_low = x.min(1, keepdim=True)
    assert (values.shape, indices.shape, indices.dtype) == ((2,), (2,), "int64")
    x_np = np.array([[1.0, 5.0, 2.0], [7.0, 0.5, 3.0]])
    got = graph.compile(outputs=[values, indices, low, where_low])(x=x_np)
    np.testing.assert_array_equal(got[0], [5.0, 7.0])
    np.testing.assert_array_equal(got[1], [1, 0])
    np.testing.assert_array_equal(got[2], [[1.0], [0.5]])
    np.testing.assert_array_equal(got[3], [[0], [1]])


# -- 9. dtype promotion (the rules of duograph.graphlib.dtypes) ---------------------------------
# the real dtypes (complex ones run fewer ops: tests/test_complex_torch.py)
# (the storage dtypes, float8 and int4..., run no arithmetic: tests/test_dtypes_storage.py)
DTYPES = tuple(d for d in dg.dtypes.COMPUTE_DTYPES if d not in dg.dtypes.COMPLEX_DTYPES)
PROMOTED = {   # the documented rules, written out: wider of a kind; bool yields; float wins
    ("uint8", "int32"): "int32", ("int32", "int64"): "int64", ("uint8", "int64"): "int64",
    ("float16", "float32"): "float32", ("float32", "float64"): "float64",
    ("bool", "uint8"): "uint8", ("bool", "float16"): "float16",
    ("int64", "float16"): "float16", ("int64", "float32"): "float32",
    ("uint8", "float64"): "float64", ("int32", "float32"): "float32",
    ("uint8", "int8"): "int16", ("int8", "int16"): "int16", ("uint8", "int16"): "int16",
    ("float16", "bfloat16"): "float32", ("bfloat16", "float32"): "float32",
    ("int64", "bfloat16"): "bfloat16", ("bool", "int8"): "int8",
}


@pytest.mark.parametrize("pair", sorted(PROMOTED), ids="-".join)
def test_promotion_rules_as_documented(pair):
    a, b = pair
    assert dg.dtypes.result_dtype(a, b) == dg.dtypes.result_dtype(b, a) == PROMOTED[pair]


@pytest.mark.parametrize("scalar, results", [
    (True, dict.fromkeys(DTYPES)),                                        # keeps every dtype
    (2, dict(dict.fromkeys(DTYPES), bool="int64")),
    (2.5, dict(dict.fromkeys(DTYPES), bool="float32", uint8="float32", int8="float32",
               int16="float32", int32="float32", int64="float32", uint16="float32",
               uint32="float32", uint64="float32")),
], ids=["bool", "int", "float"])
def test_python_scalars_are_weak(scalar, results):
    graph = dg.Graph("weak")
    with graph:
        outs = [dg.placeholder(f"x_{d}", (2,), d) * scalar for d in DTYPES]
    for d, out in zip(DTYPES, outs):
        assert out.dtype == (results[d] or d), (d, scalar)


def test_every_dtype_pair_infers_and_runs_in_the_promoted_dtype():
    graph = dg.Graph("pairs")
    feeds, checks = {}, []
    with graph:
        for a in DTYPES:
            for b in DTYPES:
                x = dg.placeholder(f"a_{a}_{b}", (2,), a)
                y = dg.placeholder(f"b_{a}_{b}", (2,), b)
                feeds[x.name], feeds[y.name] = np.ones(2, a), np.ones(2, b)
                if a != b and "f" not in dg.dtypes.kind(a) + dg.dtypes.kind(b) and (
                        {a, b} & set(dg.dtypes.WIDE_UNSIGNED)):   # refused, as PyTorch
                    with pytest.raises(dg.DTypeError, match="Promotion for uint16"):
                        x * y
                    continue
                want = dg.dtypes.result_dtype(a, b)
                outs = [x * y, dg.maximum(x, y), dg.where(x == y, x, y)]
                if want != "bool":
                    outs.append(x - y)
                checks += [(a, b, want, v) for v in outs]
    got = graph.compile(outputs=[v for *_, v in checks])(**feeds)
    for (a, b, want, v), arr in zip(checks, got):
        assert v.dtype == want and arr.dtype.name == want, (a, b, v, arr.dtype)


# -- matmul of a few rows by a transposed weight ------------------------------------------------
@pytest.mark.parametrize("mode", ["off", "on", "auto", "exact"])
def test_small_batch_matmul_forms_agree_planned_and_interpreted(monkeypatch, mode):
    """x @ W.T at a small batch runs as (W @ x.T).T when dg.config.matmul_swap asks (the
    CPU backend's matmul_into through autotune.use_swap; "auto": where that measured
    faster); either form gives numpy's product to rounding, and the planned runtime (out=
    kernel) and the interpreter give the same bits, inside a fused epilogue too."""
    from duograph.runtime.cpu import autotune, kernels as cpu_kernels
    monkeypatch.setattr(autotune, "_swap_choice", {})
    with dg.config.override(matmul_swap=mode):
        _check_small_batch_matmul(autotune, cpu_kernels, mode)


def test_matmul_form_is_bit_exact_by_default(monkeypatch):
    """By default ("exact") the swapped form is kept only where it gives x @ W.T's own bits:
    with a BLAS whose two forms differ in the last bits (simulated here), the product runs
    as written even where the swapped form measured faster; "auto" would take it."""
    from duograph.runtime.cpu import autotune, kernels as cpu_kernels
    assert dg.config.matmul_swap == "exact"
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((16, 300)).astype(np.float32)
    ws = rng.standard_normal((200, 300)).astype(np.float32)
    monkeypatch.setattr(autotune, "_swap_choice", {})
    np.testing.assert_array_equal(cpu_kernels.matmul_into(np, xs, ws.T), np.matmul(xs, ws.T))
    real = autotune.swapped
    monkeypatch.setattr(autotune, "_swap_choice", {})
    monkeypatch.setattr(autotune, "_measure_swap", lambda a, b: True)
    monkeypatch.setattr(autotune, "swapped", lambda a, b: np.nextafter(real(a, b), np.inf))
    assert not autotune.use_swap(xs, ws.T)
    np.testing.assert_array_equal(cpu_kernels.matmul_into(np, xs, ws.T), np.matmul(xs, ws.T))
    with dg.config.override(matmul_swap="auto"):
        assert autotune.use_swap(xs, ws.T)
    with dg.config.override(matmul_swap="off"):
        assert not autotune.use_swap(xs, ws.T)


def _check_small_batch_matmul(autotune, cpu_kernels, mode):
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((16, 300)).astype(np.float32)
    ws = rng.standard_normal((200, 300)).astype(np.float32)
    g = dg.Graph("linear")
    with g:
        x = dg.placeholder("x", ("N", 300))
        w = dg.placeholder("w", (200, 300))
        y = x @ dg.transpose(w, 0, 1)
        z = dg.relu(y + 1.0)
    plain = g.compile(outputs=[y, z], passes="O0", plan=False)(x=xs, w=ws)
    planned = g.compile(outputs=[y, z], passes="O2")(x=xs, w=ws)
    np.testing.assert_allclose(plain[0], xs @ ws.T, rtol=1e-5, atol=1e-4)
    for a, b in zip(plain, planned):
        np.testing.assert_array_equal(a, b)
    key = (mode, 16, 300, 200, np.dtype("float32"))
    assert autotune._swap_choice.get(key, None) in (
        (None,) if mode in ("off", "on") else (True, False))
    if mode == "exact" and autotune.use_swap(xs, ws.T):  # kept only where the bits agree
        np.testing.assert_array_equal(cpu_kernels.matmul_into(np, xs, ws.T), np.matmul(xs, ws.T))
    if mode == "on":                                # the swapped form, checked on its own
        assert autotune.use_swap(xs, ws.T)
    if mode == "off":
        assert not autotune.use_swap(xs, ws.T)
    assert not autotune.use_swap(xs.T.copy().T, ws.T)        # x not C-contiguous: numpy's


# -- sums through BLAS -----------------------------------------------------------------------
@pytest.mark.parametrize("shape, dims", [
    ((64, 16, 8, 8), (0, 2, 3)),        # batch norm: leading and trailing dims
    ((256, 100), (0,)),                 # a bias gradient: leading only
    ((3, 5, 7), (2,)),                  # trailing only
    ((4, 3, 2, 5), (0, 1, 3)),          # kept dim in the middle
    ((4, 3, 2, 5), (1, 3)),             # a reduced dim between kept ones: numpy's path
    ((2, 3), (0, 1)),                   # everything: numpy's pairwise sum
    ((2, 5000), (1,)),                  # a long row: numpy's pairwise sum
    ((0, 4, 3), (0, 2)),                # empty
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.filterwarnings("ignore:Mean of empty slice")     # the empty sample: NaN, as numpy
def test_sum_and_mean_over_leading_and_trailing_dims(shape, dims, dtype, keepdim):
    """sum/mean/sum_to over leading and trailing dims run as matrix-vector products
    (runtime/cpu/blas_reduce.py); the planned (out=) and interpreted kernels agree
    bitwise, and both agree with numpy (float64 sums) to rounding."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    g = dg.Graph("sums")
    with g:
        xv = dg.placeholder("x", shape, dtype)
        outs = [dg.sum(xv, dims, keepdim=keepdim) * 1.0, dg.mean(xv, dims, keepdim=keepdim)]
        kept = tuple(1 if i in dims else d for i, d in enumerate(shape))
        outs.append(dg.sum_to(xv, kept))
    plain = g.compile(outputs=outs, passes="O0", plan=False)(x=x)
    planned = g.compile(outputs=outs, passes="O2")(x=x)
    want = x.astype(np.float64).sum(axis=dims, keepdims=keepdim)
    count = max(x.size // max(want.size, 1), 1)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(plain[0], want, **tol)
    if x.size:                                      # (the mean of nothing is NaN)
        np.testing.assert_allclose(plain[1], want / count, **tol)
    np.testing.assert_allclose(plain[2], x.astype(np.float64).sum(axis=dims, keepdims=True),
                               **tol)
    for a, b in zip(plain, planned):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == dtype
