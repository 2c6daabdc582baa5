"""Half-precision elementwise ops and reductions on the CPU compute in float32 and round
once (``runtime/cpu/half.py``): results equal the float32 computation rounded to
the half dtype, bit for bit, in cache-sized chunks (bfloat16), whole arrays (float16) and on
broadcast or strided operands alike; reductions accumulate in float32."""
import ml_dtypes
import numpy as np
import pytest

import duograph as dg
from duograph.runtime.cpu import half
from duograph.runtime.cpu.backend import cpu_backend, half_elementwise_ops

HALVES = [ml_dtypes.bfloat16, np.float16]
N = 3 * half.CHUNK + 5          # chunked, with a short last chunk


def _data(dtype, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 2).astype(np.float32).astype(dtype)


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a


UNARY = ["tanh", "exp", "sigmoid", "neg", "abs", "sqrt", "log", "sin"]
BINARY = ["add", "sub", "mul", "div", "maximum", "pow"]


@pytest.mark.parametrize("dtype", HALVES, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_equal_float32_rounded_once(dtype, name):
    x = _data(dtype)
    if name in ("sqrt", "log"):
        x = np.abs(x)
    got = getattr(dg, name)(dg.tensor(x)).numpy()
    want = getattr(dg, name)(dg.tensor(x.astype(np.float32))).numpy().astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", HALVES, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shape_b", [(N,), (1,), ()], ids=["same", "broadcast", "scalar"])
def test_binary_ops_equal_float32_rounded_once(dtype, name, shape_b):
    a = _data(dtype)
    b = _data(dtype, int(np.prod(shape_b)), seed=1).reshape(shape_b)
    if name == "pow":
        a = np.abs(a)
    got = getattr(dg, name)(dg.tensor(a), dg.tensor(b)).numpy()
    want = getattr(dg, name)(dg.tensor(a.astype(np.float32)),
                             dg.tensor(b.astype(np.float32))).numpy().astype(dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    if name in ("add", "sub", "mul", "div"):        # as numpy's / ml_dtypes' own loops
        ref = getattr(np, {"sub": "subtract", "div": "divide", "mul": "multiply"}.get(
            name, name))(a, b)
        np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("dtype", HALVES, ids=["bfloat16", "float16"])
def test_comparisons_and_strided_operands(dtype):
    a = _data(dtype)[::2]                    # not contiguous: the whole-array path
    b = _data(dtype, seed=2)[::2]
    got = (dg.tensor(a) > dg.tensor(b)).numpy()
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, a.astype(np.float32) > b.astype(np.float32))
    got = dg.tanh(dg.tensor(a)).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(np.tanh(a.astype(np.float32)).astype(dtype)))


@pytest.mark.parametrize("dtype", HALVES, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["prod", "var", "std", "logsumexp", "amax", "amin"])
def test_reductions_accumulate_in_float32(dtype, name):
    x = (_data(dtype, 64 * 33) * 0.1 + 1).astype(dtype).reshape(64, 33)
    t = dg.tensor(x)
    got = getattr(t, name)(1).numpy() if name != "logsumexp" else dg.logsumexp(t, 1).numpy()
    t32 = dg.tensor(x.astype(np.float32))
    want = (getattr(t32, name)(1) if name != "logsumexp" else dg.logsumexp(t32, 1)).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want.astype(dtype)))


def test_every_elementwise_op_but_cast_has_the_half_kernel_and_float32_keeps_its_own():
    ops = half_elementwise_ops()
    assert ops and all(op.name != "cast" for op in ops)
    for op in ops:
        kernel = cpu_backend.kernels[op]
        assert kernel.__name__.endswith("_in_float32"), op.name
        # float32 operands get the plain kernel: nothing added per call
        assert kernel.direct(("float32", "float32")) is not kernel, op.name
        assert kernel.direct(("bfloat16", "bfloat16")) is None, op.name


def test_graph_mode_half_step_runs_the_chunked_kernels():
    x = _data(ml_dtypes.bfloat16)
    with dg.Graph("g") as g:
        v = dg.placeholder("x", x.shape, "bfloat16")
        y = dg.tanh(v) * 2.0 + v
    got = g.compile(outputs=[y], passes="O0").run({"x": x})[0]
    want = ((np.tanh(x.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32) * 2)
            .astype(ml_dtypes.bfloat16).astype(np.float32) + x.astype(np.float32)
            ).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(_bits(got), _bits(want))
