"""uint16/32/64 and the storage dtypes (float8, float4, int4, int2): what duograph computes on
them, what it refuses, and how they travel (checkpoints, ONNX). PyTorch's behaviour for the
same things is checked in test_dtypes_torch.py."""
import ml_dtypes
import numpy as np
import pytest

import duograph as dg

WIDE = ["uint16", "uint32", "uint64"]
FLOAT8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


# -- uint16/32/64: numpy's unsigned arithmetic, eagerly and in a graph ---------------------------
def _unsigned_ops(a, b):
    return [a + b, a - b, a * b, a // b, a % b, a << 1, a >> 1, a & b, a | b, a ^ b,
            dg.maximum(a, b), dg.minimum(a, b)]


@pytest.mark.parametrize("name", WIDE)
def test_wide_unsigned_arithmetic_wraps_as_numpy(name):
    top = np.iinfo(name).max
    x = np.array([0, 1, 7, top], name)
    y = np.array([3, 2, 7, 2], name)
    want = [x + y, x - y, x * y, x // y, x % y, x << 1, x >> 1, x & y, x | y, x ^ y,
            np.maximum(x, y), np.minimum(x, y)]
    got = _unsigned_ops(dg.tensor(x), dg.tensor(y))
    g = dg.Graph("u")
    with g:
        a = dg.placeholder("a", shape=(4,), dtype=name)
        b = dg.placeholder("b", shape=(4,), dtype=name)
        outs = _unsigned_ops(a, b)
    graph_got = g.compile(outputs=outs)(a=x, b=y)
    for i, (w, e, gr) in enumerate(zip(want, got, graph_got)):
        assert e.dtype == name and str(np.asarray(gr).dtype) == name, i
        np.testing.assert_array_equal(e.numpy(), w, err_msg=f"eager op {i}")
        np.testing.assert_array_equal(np.asarray(gr), w, err_msg=f"graph op {i}")
    t = dg.tensor(x)
    assert (t < dg.tensor(y)).numpy().tolist() == (x < y).tolist()
    assert t.sum().dtype == "int64"                     # as PyTorch's integer sums
    assert (t / dg.tensor(y)).dtype == "float32"        # true division: the default float
    assert (t * 2).dtype == name and (t * 2.5).dtype == "float32"   # weak scalars


@pytest.mark.parametrize("name", WIDE)
def test_wide_unsigned_promote_with_no_other_integer(name):
    u = dg.tensor(np.array([1, 2], name))
    for other in ["bool", "uint8", "int8", "int32", "int64"] + [w for w in WIDE if w != name]:
        with pytest.raises(dg.DTypeError, match=f"Promotion for uint16, uint32, uint64 types "
                                                 f"is not supported.*{name}"):
            u + dg.tensor(np.array([1, 0], other))
    assert (u * dg.tensor([1.0, 2.0])).dtype == "float32"    # a float wins, as PyTorch
    assert (u + dg.tensor(np.array([1.0, 2.0]))).dtype == "float64"


# -- storage dtypes: data only ---------------------------------------------------------------
@pytest.mark.parametrize("name", FLOAT8 + ["float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4",
                                           "int2", "uint2"])
def test_storage_dtypes_move_data_and_refuse_arithmetic(name):
    x = dg.tensor([[1.0, 0.5], [-1.0, 0.25]]).cast(name)
    assert x.dtype == name and str(x.numpy().dtype) == name
    assert x.reshape(4).dtype == name and x.t().dtype == name
    assert dg.cat([x, x]).shape == (4, 2) and x[1].dtype == name
    back = x.cast("float32").numpy()
    np.testing.assert_array_equal(back, x.numpy().astype(np.float32))
    for fn, op in [(lambda: x + x, "add"), (lambda: x * 2, "mul"), (lambda: x.sum(), "sum"),
                   (lambda: dg.relu(x), "relu"), (lambda: x @ x, "matmul")]:
        with pytest.raises(dg.UnsupportedDTypeError,
                           match=f"{op}: {name} tensors hold data only"):
            fn()
    with pytest.raises(dg.DTypeError, match="Promotion for .* not supported"):
        dg.dtypes.result_dtype(name, "float32")


def test_float8_casts_saturate_only_for_e4m3fn_as_pytorch():
    x = np.array([1.0, 500.0, -1e6, np.inf, -np.inf, np.nan, 3.3, -0.0], np.float32)
    e4 = dg.tensor(x).cast("float8_e4m3fn").cast("float32").numpy()
    np.testing.assert_array_equal(e4, [1, 448, -448, 448, -448, np.nan, 3.25, -0.0])
    # the others overflow as ml_dtypes converts: inf for e5m2, NaN for the fnuz types
    for name in FLOAT8[1:]:
        got = dg.tensor(x).cast(name).numpy()
        np.testing.assert_array_equal(got.view(np.uint8),
                                      x.astype(getattr(ml_dtypes, name)).view(np.uint8))
    e5 = dg.tensor(x).cast("float8_e5m2").cast("float32").numpy()
    assert e5[1] == 512 and e5[2] == -np.inf and e5[3] == np.inf


def test_float8_cast_in_a_compiled_graph_matches_eager():
    x = np.array([1.0, 460.0, 470.0, -3e5, 0.1], np.float32)
    g = dg.Graph("c")
    with g:
        p = dg.placeholder("x", shape=(5,))
        outs = [dg.cast(dg.cast(p, n), "float32") for n in FLOAT8]
    for got, name in zip(g.compile(outputs=outs)(x=x), FLOAT8):
        np.testing.assert_array_equal(np.asarray(got),
                                      dg.tensor(x).cast(name).cast("float32").numpy())


def test_storage_and_wide_unsigned_checkpoints_round_trip(tmp_path):
    state = {"u16": dg.tensor(np.array([1, 65535], np.uint16)),
             "u64": dg.tensor(np.array([2 ** 64 - 1, 3], np.uint64)),
             "e4": dg.tensor([1.0, -448.0, 0.015625]).cast("float8_e4m3fn"),
             "e5": dg.tensor([1.0, -57344.0, np.inf]).cast("float8_e5m2")}
    dg.save(state, tmp_path / "c.safetensors")
    back = dg.load(tmp_path / "c.safetensors")
    for k, t in state.items():
        assert back[k].dtype == t.dtype
        np.testing.assert_array_equal(back[k].numpy().view(np.uint8), t.numpy().view(np.uint8))
    with pytest.raises(dg.io.CheckpointError, match="float8_e4m3fnuz"):   # no safetensors code
        dg.save({"a": dg.tensor([1.0]).cast("float8_e4m3fnuz")}, tmp_path / "d.safetensors")


# -- ONNX: Cast's saturate, QuantizeLinear to float8 and int4, uint64 arithmetic --------------
def _run_onnx(node, inputs, out_type):
    pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    from duograph.onnx import backend
    ins = [helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(a.dtype),
                                         a.shape) for k, a in enumerate(inputs)]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(
        "y", out_type, list(inputs[0].shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    feeds = {f"i{k}": a for k, a in enumerate(inputs)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = backend.prepare(model).run(inputs)[0]
    return got, want


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("name", ["FLOAT8E4M3FN", "FLOAT8E5M2", "FLOAT8E4M3FNUZ",
                                  "FLOAT8E5M2FNUZ"])
def test_onnx_cast_to_float8_matches_the_reference(name, saturate):
    onnx = pytest.importorskip("onnx")
    to = getattr(onnx.TensorProto, name)
    x = np.array([0.3, -1.7, 100.0, 460.0, 470.0, 1e5, -1e6, np.inf, -np.inf, np.nan, 0.0],
                 np.float32)
    node = onnx.helper.make_node("Cast", ["i0"], ["y"], to=to, saturate=saturate)
    got, want = _run_onnx(node, [x], to)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("out", ["INT4", "UINT4", "FLOAT8E4M3FN", "UINT16"])
def test_onnx_quantize_and_dequantize_linear_match_the_reference(out):
    onnx = pytest.importorskip("onnx")
    to = getattr(onnx.TensorProto, out)
    x = np.array([[-30.0, -2.5, 0.0, 1.5, 7.25, 1e4]], np.float32)
    scale = np.array(0.5, np.float32)
    node = onnx.helper.make_node("QuantizeLinear", ["i0", "i1"], ["y"], output_dtype=to)
    q, want = _run_onnx(node, [x, scale], to)
    assert q.dtype == want.dtype
    np.testing.assert_array_equal(q.astype(np.float32), want.astype(np.float32))
    node = onnx.helper.make_node("DequantizeLinear", ["i0", "i1"], ["y"])
    got, want = _run_onnx(node, [q, scale], onnx.TensorProto.FLOAT)
    np.testing.assert_array_equal(got, want)


def test_onnx_uint64_arithmetic_and_shifts_match_the_reference():
    onnx = pytest.importorskip("onnx")
    a = np.array([2 ** 64 - 1, 5, 1 << 40], np.uint64)
    b = np.array([3, 7, 2], np.uint64)
    for op, attrs in [("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}), ("Mod", {}),
                      ("BitShift", {"direction": "LEFT"}), ("BitShift", {"direction": "RIGHT"})]:
        node = onnx.helper.make_node(op, ["i0", "i1"], ["y"], **attrs)
        got, want = _run_onnx(node, [a, b], onnx.TensorProto.UINT64)
        assert got.dtype == np.uint64, op
        np.testing.assert_array_equal(got, want, err_msg=op)
