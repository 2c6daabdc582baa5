"""ONNX QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, Compress and ReverseSequence
import, against onnxruntime: per tensor, per axis and blocked scales, ties rounded to even,
saturation; conditions and lengths known when the graph is built."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

import duograph as dg  # noqa: E402


def _run_both(node, inputs, inits=(), opset=21, runtime=True):
    """(duograph's outputs, onnxruntime's) of a one-node model."""
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in node.output],
        [numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    got = dg.onnx.load(model, initializers="constant").compile()(**inputs)
    want = ort.InferenceSession(model.SerializeToString()).run(None, inputs) if runtime \
        else None
    return got, want


def _same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


# ties (x / scale = k + 0.5) round to even; values past the range saturate
X = np.array([[-300.0, -1.5, -0.5, 0.0], [0.5, 1.5, 2.5, 400.0], [3.3, -7.7, 126.5, -128.5]],
             np.float32)


@pytest.mark.parametrize("zero_point", [np.uint8(128), np.int8(-3), np.int16(1000)])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(zero_point):
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    got, want = _run_both(node, {"x": X}, [("s", np.float32(0.5)),
                                           ("z", np.asarray(zero_point))])
    _same(got, want)


def test_quantize_and_dequantize_per_axis_and_blocked():
    scale = np.array([0.5, 2.0, 0.25, 1.0], np.float32)
    zp = np.array([0, 10, -5, 3], np.int8)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    _same(*_run_both(node, {"x": X}, [("s", scale), ("z", zp)]))
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=-1)
    _same(*_run_both(node, {"q": q}, [("s", scale), ("z", zp)]))
    blocks = np.array([[0.5, 2.0], [1.0, 0.25], [4.0, 0.5]], np.float32)     # 2 per row
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    _same(*_run_both(node, {"x": X}, [("s", blocks)]))


def test_dynamic_quantize_linear():
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    for x in (X, np.abs(X), -np.abs(X), np.zeros((2, 3), np.float32)):
        _same(*_run_both(node, {"x": np.ascontiguousarray(x)}, opset=11))


def test_compress_and_reverse_sequence():
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    cond = np.array([True, False, True, True])
    for axis in (0, -3, None):
        kw = {} if axis is None else {"axis": axis}
        node = helper.make_node("Compress", ["x", "c"], ["y"], **kw)
        _same(*_run_both(node, {"x": x}, [("c", cond)]))
    lens = np.array([4, 1, 3], np.int64)
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1)
    _same(*_run_both(node, {"x": x}, [("l", lens)]))
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0)
    _same(*_run_both(node, {"x": x}, [("l", np.array([2, 3, 0, 1], np.int64))]))
    with pytest.raises(dg.onnx.OnnxImportError, match=r"sequence_lens \[9, 1, 3\]"):
        _run_both(node, {"x": x}, [("l", np.array([9, 1, 3], np.int64))], runtime=False)


def test_max_unpool_inverts_max_pool_like_onnxruntime():
    """MaxPool's values and Indices fed to MaxUnpool (2-D, stride 2, with pads), against
    onnxruntime."""
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2])
    graph = helper.make_graph([pool], "p", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_empty_tensor_value_info("v"),
                               helper.make_empty_tensor_value_info("i")])
    v, i = ort.InferenceSession(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 11)]).SerializeToString()).run(None, {"x": x})
    node = helper.make_node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[2, 2],
                            strides=[2, 2])
    got, want = _run_both(node, {"v": v, "i": i}, opset=11)
    _same(got, want)
    assert got[0].shape == x.shape and np.count_nonzero(got[0]) == v.size
