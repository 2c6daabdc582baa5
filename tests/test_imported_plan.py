"""Imported convolution networks at O2 do no more work than at O0, checked on the plan (not
by timing): a small ONNX model built with onnx.helper in the shapes PyTorch exports for
ResNet and MobileNetV3 blocks (Conv with bias, then ReLU, HardSwish, a residual Add + ReLU,
a squeeze-excite HardSigmoid * x, a Gemm head).

O2 used to run every elementwise op after a convolution on its own: the op's numpy kernel
(HardSwish: four temporaries) and then one more copy of the result into its planned buffer,
where O0 only ran the kernel; conv2d is now an epilogue host, so each follows its conv in
one fused kernel over the conv's output. A max pool's padding (a ``pad`` node) is written
into its planned buffer by the pad's ``out=`` form instead of being copied there. The
checks: O2's kernel count is below O0's; every activation and residual add is fused after
its conv; a run copies no kernel result into the arena (each step writes its buffer
itself); O2 gives O0's values.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import duograph as dg  # noqa: E402
from duograph.runtime import planned  # noqa: E402


def _model():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = []

    def weight(name, *shape, scale=0.3):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["x", weight("w0", 8, 3, 3, 3), weight("b0", 8)], ["c0"],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("HardSwish", ["c0"], ["h00"]),
        # a ResNet stem's max pool with pads: imported as a -inf pad and the pool
        helper.make_node("MaxPool", ["h00"], ["h0"], kernel_shape=[3, 3], strides=[1, 1],
                         pads=[1, 1, 1, 1]),
        # a residual basic block: conv-relu-conv, + input, relu
        helper.make_node("Conv", ["h0", weight("w1", 8, 8, 3, 3), weight("b1", 8)], ["c1"],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", weight("w2", 8, 8, 3, 3), weight("b2", 8)], ["c2"],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "h0"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["r2"]),
        # depthwise conv, hardswish, squeeze-excite
        helper.make_node("Conv", ["r2", weight("w3", 8, 1, 3, 3), weight("b3", 8)], ["c3"],
                         pads=[1, 1, 1, 1], group=8),
        helper.make_node("HardSwish", ["c3"], ["h3"]),
        helper.make_node("GlobalAveragePool", ["h3"], ["p3"]),
        helper.make_node("Conv", ["p3", weight("w4", 4, 8, 1, 1), weight("b4", 4)], ["c4"]),
        helper.make_node("Relu", ["c4"], ["r4"]),
        helper.make_node("Conv", ["r4", weight("w5", 8, 4, 1, 1), weight("b5", 8)], ["c5"]),
        helper.make_node("HardSigmoid", ["c5"], ["g5"], alpha=1.0 / 6, beta=0.5),
        helper.make_node("Mul", ["h3", "g5"], ["m5"]),
        helper.make_node("GlobalAveragePool", ["m5"], ["p6"]),
        helper.make_node("Flatten", ["p6"], ["f6"]),
        helper.make_node("Gemm", ["f6", weight("w7", 10, 8), weight("b7", 10)], ["y"],
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fused_ops(exe):
    """The op names inside each fused node of an executable's graph, in order."""
    return [tuple(m.op.name for m in n.attrs["sub"].graph.nodes if not m.op.constant)
            for n in exe.graph.nodes if n.op.name == "fused"]


def test_imported_conv_net_at_o2_fuses_every_activation_after_its_conv(monkeypatch):
    g = dg.onnx.load(_model())
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    o0, o2 = g.compile(passes="O0"), g.compile(passes="O2")
    assert o2.kernel_count < o0.kernel_count
    fused = _fused_ops(o2)
    assert ("conv2d", "hardswish") in fused and ("conv2d", "relu") in fused
    assert ("conv2d", "add", "relu") in fused
    assert "pad" in [n.op.name for n in o2.graph.nodes]
    loose = [n.op.name for n in o2.graph.nodes
             if n.op.elementwise and n.op.name not in ("reshape",)]
    assert loose == [], f"elementwise ops left unfused at O2: {loose}"
    want = o0(x=x)[0]
    np.testing.assert_allclose(o2(x=x)[0], want, rtol=1e-5, atol=1e-6)
    copies = []
    real = planned._copy_results

    def counting(*args):
        copies.append(args[1].op.name)
        return real(*args)
    monkeypatch.setattr(planned, "_copy_results", counting)
    for _ in range(2):
        np.testing.assert_allclose(o2(x=x)[0], want, rtol=1e-5, atol=1e-6)
    assert copies == [], f"O2 steps that ran a kernel and copied its result: {copies}"


def test_conv2d_is_an_epilogue_host():
    assert dg.graphlib.registry.get_op("conv2d").epilogue_host


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pad,value", [((1, 1, 1, 1), -np.inf), ((0, 2), 0.0),
                                       ((2, 0, 0, 1, 1, 0), -0.0), ((1, 1), np.nan)])
def test_pad_out_form_gives_np_pads_bits(dtype, pad, value):
    from duograph.runtime.cpu.out_kernels import table as out_table
    from duograph.graphlib.ops.shape import pad_op
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(dtype)
    want = pad_op.kernel(np, x, pad=pad, value=value)
    out = np.full(want.shape, 7, dtype)
    assert out_table()[pad_op](np, x, out=out, pad=pad, value=value)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    assert not out_table()[pad_op](np, x, out=np.empty(want.shape, np.float16), pad=pad,
                                   value=value)          # another dtype: the kernel's path
