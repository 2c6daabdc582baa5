"""The cuda backend's generated kernel source, checked on a machine without a GPU.

``runtime/cuda/codegen.py`` turns ops' ``expr`` templates into the C++ of
``cupy.ElementwiseKernel``s. Here every generated expression is compiled with the host C++
compiler (``HOST_SHIM`` stands in for CUDA's math overloads) and *run* on sample values,
and the results are compared with the op's numpy reference kernel: a wrong translation
(a NaN rule, the sign of a remainder, a float literal promoting float32 to double, a bad
rename) fails here before any device sees it. Fused regions taken from real O2 graphs are
checked the same way. The device-side softmax-cross-entropy kernels run on numpy against
the reference too. Nothing here needs cupy.
"""
import math
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops.fused import eval_nodes
from duograph.graphlib.registry import REGISTRY
from duograph.graphlib.types import TensorType
from duograph.runtime.cuda import codegen
from duograph.runtime.cuda import kernels as cuda_kernels
from duograph.runtime.cuda.fused import Layout

CXX = shutil.which("g++") or shutil.which("clang++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

# attributes for the expr ops that take some
ATTRS = {"cast": [{"dtype": "DT"}], "leaky_relu": [{"negative_slope": 0.01}],
         "gelu": [{"approximate": "none"}, {"approximate": "tanh"}],
         "pow_scalar": [{"exponent": 2.5}, {"exponent": -1.0}, {"exponent": 0.5},
                        {"exponent": -0.5}],
         "elu": [{"alpha": 1.0, "scale": 1.0, "input_scale": 1.0},
                 {"alpha": 1.6732632423543772, "scale": 1.0507009873554805,
                  "input_scale": 1.0}, {"alpha": 2.0, "scale": 1.0, "input_scale": 0.5}],
         "hardtanh": [{"min_val": -1.0, "max_val": 1.0}, {"min_val": 0.0, "max_val": 6.0}],
         "round": [{"decimals": 0}, {"decimals": 2}, {"decimals": -1}],
         "nan_to_num": [{"nan": 0.0, "posinf": 100.0, "neginf": -100.0}]}
INTEGER_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
BOOL_INPUTS = {"where": (0,), "logical_not": (0,), "logical_and": (0, 1),
               "logical_or": (0, 1)}
# sample inputs: ordinary values, signs, zero, NaN and infinities, values near the edges of
# the inverse trig domains
VALUES = [-3.7, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 0.99, 1.0, 2.0, 7.5, 20.0, float("nan"),
          float("inf"), float("-inf")]
SECOND = [2.0, -1.5, 0.5, 3.0, -2.0, 0.25, -0.5, 1.0, float("nan"), 4.0, -3.0, 2.5, 1.0,
          float("inf"), 2.0]
THIRD = [0.0, 0.3, 0.7, 1.0, -0.2, 0.5, 0.9, 0.1, 0.2, 0.6, 0.4, 0.8, 0.5, 0.5, 0.5]


def _expr_ops():
    return sorted((name, op) for name, op in REGISTRY.items() if op.expr)


def _arity(op) -> int:
    return 1 + max(int(i) for i in re.findall(r"\{(\d+)\}", op.expr))


def _cases(dt):
    """(id, op, attrs, input dtypes, output dtype) for every expr op and attribute set."""
    out = []
    for name, op in _expr_ops():
        for attrs in ATTRS.get(name, [{}]):
            attrs = {k: (dt if v == "DT" else v) for k, v in attrs.items()}
            n = _arity(op)
            ins = ["bool" if i in BOOL_INPUTS.get(name, ()) else dt for i in range(n)]
            types = [TensorType((len(VALUES),), d) for d in ins]
            try:
                (res,) = op.infer(types, attrs)
            except Exception:  # noqa: BLE001 - an op refusing these dtypes is not generated
                continue
            out.append((f"{name}{attrs or ''}", op, attrs, ins, res.dtype))
    return out


def _sample(i: int, dtype: str):
    col = [VALUES, SECOND, THIRD][i]
    if dtype == "bool":
        return np.array([v == v and v > 0.4 for v in col])
    return np.array(col, dtype=dtype)


def _c_literal(v, ctype: str) -> str:
    if ctype == "bool":
        return "true" if v else "false"
    if math.isnan(v):
        return f"({ctype})NAN"
    if math.isinf(v):
        return f"({ctype})INFINITY" if v > 0 else f"-({ctype})INFINITY"
    return f"({ctype}){float(v)!r}"


def _run_host(sources, inputs):
    """Compile ``sources`` (KernelSource list) into one host program calling each on its
    ``inputs`` (a list per source: arrays of one length) and return the printed outputs."""
    parts = [codegen.HOST_SHIM, codegen.PREAMBLE, "#include <cstdio>"]
    main = ["int main() {"]
    for k, (src, ins) in enumerate(zip(sources, inputs)):
        parts.append(codegen.host_function(src))
        outs = [p.split() for p in src.out_params.split(",")]
        n = len(ins[0])
        for i in range(n):
            args = [_c_literal(a[i].item(), codegen.C_TYPES[a.dtype.name]) for a in ins]
            decl = [f"{codegen.C_TYPES[d]} r{j} = 0;" for j, (d, _) in enumerate(outs)]
            refs = [f"r{j}" for j in range(len(outs))]
            prints = " ".join(f'printf("{k} {i} {j} %.17g\\n", (double)r{j});'
                              for j in range(len(outs)))
            main.append("{ " + " ".join(decl) + f" {src.name}({', '.join(args + refs)}); "
                        + prints + " }")
    main.append("return 0; }")
    code = "\n".join(parts + main) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gen.cpp")
        exe = os.path.join(tmp, "gen")
        with open(path, "w") as f:
            f.write(code)
        res = subprocess.run([CXX, "-std=c++14", "-O0", "-fno-fast-math", "-o", exe, path],
                             capture_output=True, text=True)
        assert res.returncode == 0, f"generated code does not compile:\n{res.stderr[:3000]}"
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.strip().splitlines():
        k, i, j, v = line.split()
        got[(int(k), int(i), int(j))] = float(v)
    return got


def _close(got, want, dtype: str, name: str):
    want = np.asarray(want)
    got = np.asarray(got, dtype=want.dtype if want.dtype != bool else np.float64)
    if want.dtype == bool:
        np.testing.assert_array_equal(got != 0, want, err_msg=name)
        return
    rtol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True,
                               err_msg=f"{name}: generated C differs from the reference")


@needs_cxx
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_every_expr_op_generates_code_that_computes_the_reference(dt):
    """All expr ops, float32 and float64: the generated C, compiled and run on the host,
    equals the numpy reference kernel on ordinary and special values (NaN, +-inf, -0)."""
    cases = _cases(dt)
    assert len(cases) > 50
    sources, inputs, wanted, names = [], [], [], []
    skipped = []
    for name, op, attrs, ins, out in cases:
        src = codegen.op_source(op, ins, out, attrs)
        if src is None:
            skipped.append(op.name)
            continue
        arrays = [_sample(i, d) for i, d in enumerate(ins)]
        with np.errstate(all="ignore"):
            want = op.kernel(np, *arrays, **attrs)
        sources.append(src)
        inputs.append(arrays)
        wanted.append(np.asarray(want).astype(out))
        names.append(name)
    # only the integer-only ops have no float form
    assert set(skipped) <= INTEGER_ONLY, skipped
    got = _run_host(sources, inputs)
    for k, (want, name) in enumerate(zip(wanted, names)):
        vals = [got[(k, i, 0)] for i in range(len(want))]
        _close(vals, want, dt, name)


def test_dtypes_map_to_c_types_and_unsupported_regions_are_refused():
    """Parameters keep their dtype names (cupy maps them); locals use the C type of the
    compute dtype; literals are cast to it (float32 code never promotes to double); a
    float32 operand of a float64 node is cast up; integer and float16 regions get no
    kernel."""
    add = REGISTRY["add"]
    src = codegen.op_source(add, ["float32", "float32"], "float32")
    assert src.in_params == "float32 x0, float32 x1" and src.out_params == "float32 o0"
    assert "const float v0" in src.operation
    relu = codegen.op_source(REGISTRY["relu"], ["float64"], "float64")
    assert "((double)0)" in relu.operation and "const double v0" in relu.operation
    lt = codegen.op_source(REGISTRY["lt"], ["float32", "float32"], "bool")
    assert "const bool v0" in lt.operation and lt.out_params == "bool o0"
    assert codegen.op_source(add, ["int32", "int32"], "int32") is None
    assert codegen.op_source(add, ["float16", "float16"], "float16") is None
    mixed = codegen.op_source(add, ["float32", "float64"], "float64")
    assert "( ( double ) x0 ) + x1" in mixed.operation
    assert codegen.C_TYPES["float32"] == "float" and codegen.C_TYPES["int64"] == "long long"
    # the same source is the same (cached) kernel, a different dtype a different name
    again = codegen.op_source(add, ["float32", "float32"], "float32")
    assert again == src and hash(again) == hash(src)
    other = codegen.op_source(add, ["float64", "float64"], "float64")
    assert other.name != src.name


def test_translate_refuses_what_has_no_cuda_form():
    with pytest.raises(ValueError, match="no CUDA form"):
        codegen.translate("frobnicate(x0)", "float")
    with pytest.raises(ValueError, match="integer-only"):
        codegen.translate("(x0 & x1)", "float")
    with pytest.raises(ValueError, match="unknown name"):
        codegen.translate("(x0 + y)", "float")
    assert codegen.translate("max(x0, 0)", "float") == "dg_max ( x0 , ((float)0) )"
    assert "DG_INF" in codegen.translate("(x0 == inf)", "double")


def _fused_bodies(fn, feeds):
    """The fused bodies of ``fn``'s graph compiled at O2, and the CPU results of each body
    (input arrays and outputs), captured by running the executable's trace."""
    g = dg.Graph("codegen")
    with g:
        phs = {k: dg.placeholder(k, v.shape, str(v.dtype)) for k, v in feeds.items()}
        out = fn(**phs)
    exe = g.compile(outputs=[out], passes="O2")
    env = exe.trace(feeds)
    found = []
    for node in exe.nodes:
        if node.op.name == "fused":
            found.append((node.attrs["sub"], [env[x] for x in node.inputs],
                          [env[o] for o in node.outputs]))
    return found


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + dg.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@needs_cxx
@pytest.mark.parametrize("name, fn, shapes", [
    ("gelu_chain", lambda x: _gelu_tanh(x), {"x": (3, 5)}),
    ("bias_relu_epilogue", lambda x, w, b: dg.relu(x @ w + b), {"x": (4, 3), "w": (3, 5),
                                                                  "b": (5,)}),
    ("sigmoid_mix", lambda x, y: dg.sigmoid(x) * y - dg.maximum(x, y) / 2.0,
     {"x": (2, 6), "y": (2, 6)}),
])
def test_fused_regions_generate_one_kernel_that_matches_the_cpu(name, fn, shapes):
    """Fused bodies from real O2 graphs: the region (after any matmul prologue) becomes one
    generated kernel whose host build reproduces the CPU backend's outputs element by
    element, broadcast operands (a bias) included."""
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    bodies = _fused_bodies(fn, feeds)
    assert bodies, f"{name}: O2 fused nothing"
    for body, ins, outs in bodies:
        lay = Layout(body.graph)
        assert lay.source is not None, f"{name}: no kernel for {body.body_text()}"
        env = {v: a for v, a in zip(body.graph.inputs, ins)}
        if lay.prologue:
            eval_nodes(lay.prologue, env, np, lay.outputs + lay.region_inputs)
        region_in = [np.asarray(env[v]) for v in lay.region_inputs]
        full = np.broadcast_shapes(*[a.shape for a in region_in])
        flat = [np.broadcast_to(a, full).reshape(-1) for a in region_in]
        got = _run_host([lay.source], [flat])
        where = {o: k for k, o in enumerate(lay.outputs)}
        for j, v in enumerate(lay.region_outputs):
            want = np.asarray(outs[where[v]]).reshape(-1)
            vals = [got[(0, i, j)] for i in range(want.size)]
            _close(vals, want, "float32", name)


def test_regions_without_a_float_form_get_no_source():
    """Integer regions run op by op (the fused compiler's fallback): no source."""
    feeds = {"x": np.arange(6, dtype=np.int32).reshape(2, 3)}
    bodies = _fused_bodies(lambda x: (x + 1) * 3 - x, feeds)
    for body, _, _ in bodies:
        assert Layout(body.graph).source is None


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [-100, 2])
def test_device_softmax_cross_entropy_matches_the_reference(reduction, ignore):
    """The sync-free softmax-cross-entropy kernels (run here on numpy) equal the reference
    kernels: loss and gradient, with ignored rows and an infinite logit row."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    x[3, 1] = -np.inf
    t = rng.integers(0, 5, 7).astype(np.int64)
    t[2] = 2
    op = REGISTRY["softmax_cross_entropy"]
    bop = REGISTRY["softmax_cross_entropy_backward"]
    attrs = dict(ignore_index=ignore, reduction=reduction)
    want = op.kernel(np, x, t, **attrs)
    got = cuda_kernels.sce_kernel(np, x, t, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.asarray(got).dtype == np.float32
    g = np.ones_like(want) * np.float32(0.7)
    np.testing.assert_allclose(cuda_kernels.sce_backward_kernel(np, g, x, t, **attrs),
                               bop.kernel(np, g, x, t, **attrs), rtol=1e-5, atol=1e-6)


def test_device_softmax_cross_entropy_all_ignored_and_out_of_range():
    x = np.zeros((3, 4), np.float32)
    t = np.full(3, -100, np.int64)
    op = REGISTRY["softmax_cross_entropy"]
    with np.errstate(all="ignore"):
        want = op.kernel(np, x, t, ignore_index=-100, reduction="mean")
        got = cuda_kernels.sce_kernel(np, x, t, ignore_index=-100, reduction="mean")
    assert np.isnan(want) and np.isnan(got)
    bad = np.array([0, 9, 1], np.int64)      # the device marks the row NaN, no host check
    loss = cuda_kernels.sce_kernel(np, x, bad, ignore_index=-100, reduction="none")
    assert np.isnan(loss[1]) and np.isfinite(loss[[0, 2]]).all()


def test_generated_op_kernels_fall_back_off_the_float_path():
    """A generated elementwise kernel hands integer or mixed dtypes to the reference."""
    table = cuda_kernels.table()
    gelu = table[REGISTRY["gelu"]]
    assert gelu.reference is REGISTRY["gelu"].kernel
    x16 = np.linspace(-2, 2, 5).astype(np.float16)
    np.testing.assert_array_equal(gelu(np, x16, approximate="none"),
                                  REGISTRY["gelu"].kernel(np, x16, approximate="none"))
