"""ONNX import keeps symbolic dims through shape arithmetic (issue 25): Shape, Size,
Gather, Slice, Concat, Unsqueeze, Squeeze and integer arithmetic on shapes become sympy dims,
so Reshape (-1 and 0), Flatten, Expand, Range, ConstantOfShape and Slice take them and one
import runs at any size; integer initializers are known at import while float ones stay
state; a size that depends on data is refused naming its real source."""
import numpy as np
import pytest

import duograph as dg
from duograph.onnx import OnnxImportError
from duograph.onnx._import import NeedsStatic

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _out(name, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, None)


def _shape_arithmetic_model():
    """x: [N, T, 4]; every output's size is computed from Shape(x) and Size(x)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 4])
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["n"]),                        # N, a 0-d shape value
        n("Gather", ["s", "one"], ["t"]),                         # T
        n("Unsqueeze", ["n", "axis0"], ["n1"]),
        n("Unsqueeze", ["t", "axis0"], ["t1"]),
        n("Concat", ["n1", "minus_one"], ["nm1"], axis=0),
        n("Reshape", ["x", "nm1"], ["flat"]),                      # [N, 4*T]
        n("Reshape", ["x", "keep0"], ["kept"]),                    # [N, T*2, 2]
        n("Flatten", ["x"], ["rows"], axis=2),                     # [N*T, 4]
        n("Sub", ["t1", "one_1d"], ["tm1"]),
        n("Slice", ["x", "one_1d", "tm1", "axis1_1d"], ["mid"]),   # x[:, 1:T-1]: max(0, T-2)
        n("Range", ["zero", "t", "one"], ["steps"]),               # arange(T)
        n("Cast", ["steps"], ["steps_f"], to=TensorProto.FLOAT),
        n("Concat", ["n1", "t1"], ["nt"], axis=0),
        n("Expand", ["steps_f", "nt"], ["grid"]),                  # [N, T]
        n("Concat", ["n1", "two_1d"], ["n2"], axis=0),
        n("ConstantOfShape", ["n2"], ["filled"],
          value=numpy_helper.from_array(np.asarray([1.5], np.float32))),   # [N, 2]
        n("Size", ["x"], ["size"]),
        n("Cast", ["size"], ["size_f"], to=TensorProto.FLOAT),
        n("Mul", ["filled", "size_f"], ["scaled"]),                # the size as data
        n("Gather", ["x", "minus_one_0d"], ["last"], axis=1),      # x[:, -1]
        n("Shape", ["x"], ["tail"], start=-2),
        n("ReduceProd", ["tail"], ["cells"], keepdims=1),
        n("Concat", ["n1", "cells"], ["ncells"], axis=0),
        n("Reshape", ["x", "ncells"], ["flat2"]),                  # [N, T*4]
    ]
    inits = [_ints("zero", 0), _ints("one", 1), _ints("axis0", [0]), _ints("minus_one", [-1]),
             _ints("keep0", [0, -1, 2]), _ints("one_1d", [1]), _ints("axis1_1d", [1]),
             _ints("two_1d", [2]), _ints("minus_one_0d", -1)]
    outs = ["flat", "kept", "rows", "mid", "grid", "scaled", "last", "flat2"]
    return _model(nodes, [x], [_out(o) for o in outs], inits)


def test_shape_arithmetic_keeps_the_symbolic_dims():
    g = dg.onnx.load(_shape_arithmetic_model())
    shapes = [tuple(str(d) for d in o.type.shape) for o in g.outputs]
    assert shapes == [("N", "4*T"), ("N", "2*T", "2"), ("N*T", "4"), ("N", "Max(0,T-2)", "4"),
                      ("N", "T"), ("N", "2"), ("N", "4"), ("N", "4*T")]
    assert not g.state           # the shapes' integer initializers are known, not state


def test_one_import_runs_at_several_sizes_equal_to_onnxruntime():
    model = _shape_arithmetic_model()
    run = dg.onnx.load(model).compile(passes="O1")
    sess = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for n, t in ((2, 5), (3, 7), (1, 3)):
        x = rng.standard_normal((n, t, 4)).astype(np.float32)
        got = run(x=x)
        want = sess.run(None, {"x": x})
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            assert a.shape == b.shape, (k, n, t)
            np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=str(k))


def test_integer_initializers_are_known_and_float_ones_stay_state():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("ReduceMean", ["xw", "axes"], ["m"], keepdims=1),  # opset 18
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    model = _model(nodes, [x], [_out("y")], [w, _ints("axes", [2]), _ints("shape", [-1, 3])],
                   opset=18)
    g = dg.onnx.load(model)                  # the default: initializers="state"
    assert [v.name for v in g.state] == ["w"]
    assert tuple(str(d) for d in g.outputs[0].type.shape) == ("N", "3")
    run = g.compile()
    sess = ort.InferenceSession(model.SerializeToString())
    for n in (2, 6):
        xs = np.random.default_rng(n).standard_normal((n, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(run(x=xs)[0], sess.run(None, {"x": xs})[0], rtol=1e-6)
    with g:
        (gw,) = dg.grad(dg.sum(g.outputs[0]), [g.state[0]])    # w is trainable
    g.outputs = [gw]
    (got,) = g.compile()(x=np.ones((2, 3, 4), np.float32))
    np.testing.assert_allclose(got, np.full((3, 4), 2 / 4, np.float32))


def _reshape_by(shape_nodes, inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    nodes = list(shape_nodes) + [helper.make_node("Reshape", ["x", "target"], ["y"])]
    return _model(nodes, [x], [_out("y")], inits)


def test_a_shape_read_from_the_data_names_the_input_to_make_static():
    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             helper.make_node("Cast", ["mx"], ["k"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["k", "axis0"], ["k1"]),
             helper.make_node("Concat", ["k1", "minus_one"], ["target"], axis=0)]
    with pytest.raises(NeedsStatic, match=r"values of the graph inputs \['x'\]") as e:
        dg.onnx.load(_reshape_by(nodes, [_ints("axis0", [0]), _ints("minus_one", [-1])]))
    assert e.value.names == ["x"]


def test_a_shape_read_from_a_float_initializer_names_it_not_the_data_input():
    # the batch from Shape(x) (a type, not x's values), the rest from a float initializer:
    # static_inputs={"x": ...} would not help, the initializer is the source
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Cast", ["scale"], ["k"], to=TensorProto.INT64),
             helper.make_node("Concat", ["s", "k"], ["target"], axis=0)]
    scale = numpy_helper.from_array(np.asarray([6.0], np.float32), "scale")
    model = _reshape_by(nodes, [scale])
    with pytest.raises(OnnxImportError, match=r"initializers \['scale'\].*trainable state.*"
                                              r"initializers='constant'") as e:
        dg.onnx.load(model)
    assert not isinstance(e.value, NeedsStatic)
    g = dg.onnx.load(model, initializers="constant")
    assert tuple(str(d) for d in g.outputs[0].type.shape) == ("N", "6")


def test_a_size_that_depends_on_data_names_the_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["s"])]
    model = _model(nodes, [x], [_out("s", TensorProto.INT64)])
    with pytest.raises(OnnxImportError, match="NonZero.*depends on the input values"):
        dg.onnx.load(model)


def test_symbolic_dims_that_cannot_be_numbers_are_refused_clearly():
    # EyeLike needs its size as numbers: the symbolic N is named, and input_shapes offered
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "N"])
    model = _model([helper.make_node("EyeLike", ["x"], ["y"])], [x], [_out("y")])
    with pytest.raises(OnnxImportError, match=r"EyeLike.*symbolic dims \['N', 'N'\].*"
                                              "input_shapes"):
        dg.onnx.load(model)
    (y,) = dg.onnx.load(model, input_shapes={"x": (3, 3)}).compile()(
        x=np.zeros((3, 3), np.float32))
    np.testing.assert_array_equal(y, np.eye(3))


def _own_models():
    from duograph import nn
    return {
        "lstm": (lambda: nn.LSTM(5, 6), (7, "N", 5), lambda n: (7, n, 5)),
        "gru": (lambda: nn.GRU(5, 6), (7, "N", 5), lambda n: (7, n, 5)),
        "encoder": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                       batch_first=True),
                    ("N", "T", 8), lambda n: (n, n + 3, 8)),
    }


@pytest.mark.parametrize("name", ["lstm", "gru", "encoder"])
def test_duographs_own_exports_with_symbolic_dims_import_again(tmp_path, name):
    # their Shape nodes (the LSTM's initial state, the encoder's heads) read symbolic dims
    make, spec, size = _own_models()[name]
    module = make()
    module.eval()
    path = tmp_path / f"{name}.onnx"
    dg.onnx.export(module, path, dg.onnx.Input(spec))
    g = dg.onnx.load(path)
    assert tuple(str(d) for d in g.inputs[0].type.shape) == tuple(str(d) for d in spec)
    run = g.compile(passes="O1")
    sess = ort.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    for n in (2, 3):
        x = rng.standard_normal(size(n)).astype(np.float32)
        got = run(**{g.inputs[0].name: x})
        want = sess.run(None, {sess.get_inputs()[0].name: x})
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resize_over_a_symbolic_batch_with_its_scales_an_initializer():
    # the scales are a float initializer only a Resize reads: a setting, not a weight
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3, 4])
    scales = numpy_helper.from_array(np.asarray([1, 1, 2, 1.5], np.float32), "scales")
    w = numpy_helper.from_array(np.asarray([[[[0.5]], [[2.0]]]], np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("Resize", ["xw", "", "scales"], ["y"], mode="linear")]
    model = _model(nodes, [x], [_out("y")], [scales, w])
    g = dg.onnx.load(model)
    assert [v.name for v in g.state] == ["w"]
    assert tuple(str(d) for d in g.outputs[0].type.shape) == ("N", "2", "6", "6")
    run = g.compile()
    sess = ort.InferenceSession(model.SerializeToString())
    for n in (1, 3):
        xs = np.random.default_rng(n).standard_normal((n, 2, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(run(x=xs)[0], sess.run(None, {"x": xs})[0], rtol=1e-5,
                                   atol=1e-6)


def test_ops_along_symbolic_dims_match_onnxruntime():
    # torch's x.repeat, torch.tril(ones(T, T)), cumsum over T, chunk, flip over T
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 4])
    n = helper.make_node
    nodes = [
        n("Tile", ["x", "reps"], ["tiled"]),                               # [2*N, T, 8]
        n("Transpose", ["x"], ["x_t"], perm=[0, 2, 1]),
        n("MatMul", ["x", "x_t"], ["sq"]),                                 # [N, T, T]
        n("Trilu", ["sq", "k"], ["lower"], upper=0),
        n("CumSum", ["x", "one"], ["csum"]),
        n("CumSum", ["x", "one"], ["csum_er"], exclusive=1, reverse=1),
        n("Split", ["x"], ["a", "b"], axis=2, num_outputs=2),
        n("Slice", ["x", "minus_one", "int_min", "one_1d", "minus_one"], ["flipped"]),
    ]
    inits = [_ints("reps", [2, 1, 2]), _ints("k", 1), _ints("one", 1),
             _ints("minus_one", [-1]), _ints("int_min", [-2**63]), _ints("one_1d", [1])]
    outs = ["tiled", "lower", "csum", "csum_er", "b", "flipped"]
    model = _model(nodes, [x], [_out(o) for o in outs], inits, opset=18)
    g = dg.onnx.load(model)
    assert [tuple(str(d) for d in o.type.shape) for o in g.outputs] == [
        ("2*N", "T", "8"), ("N", "T", "T"), ("N", "T", "4"), ("N", "T", "4"),
        ("N", "T", "2"), ("N", "T", "4")]
    run = g.compile()
    sess = ort.InferenceSession(model.SerializeToString())
    for size in ((2, 5), (3, 2)):
        xs = np.random.default_rng(size[1]).standard_normal(size + (4,)).astype(np.float32)
        for k, (a, b) in enumerate(zip(run(x=xs), sess.run(None, {"x": xs}))):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=outs[k])


def test_shape_values_leave_if_branches_and_the_graph_as_values():
    # an If on data whose branches compute from Shape(x); the model's output is a shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    int_out = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, [2])  # noqa
    then = helper.make_graph([helper.make_node("Shape", ["x"], ["s1"])], "then", [],
                             [int_out("s1")])
    other = helper.make_graph([helper.make_node("Shape", ["x"], ["s2"], end=1),
                               helper.make_node("Concat", ["s2", "s2"], ["s3"], axis=0)],
                              "other", [], [int_out("s3")])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other)]
    model = _model(nodes, [x, c], [int_out("s")])
    run = dg.onnx.load(model).compile()
    for n in (2, 5):
        for flag in (True, False):
            feeds = {"x": np.zeros((n, 4), np.float32), "c": np.asarray(flag)}
            np.testing.assert_array_equal(run(**feeds)[0],
                                          [n, 4] if flag else [n, n])


@pytest.mark.parametrize("coord, nearest", [("half_pixel", "round_prefer_floor"),
                                            ("asymmetric", "floor")])
def test_nearest_resize_and_max_pool_over_symbolic_spatial_dims(coord, nearest):
    # an FPN's interpolate(scale_factor=2) and a stem's max pool, over dynamic H and W
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])
    scales = numpy_helper.from_array(np.asarray([1, 1, 2, 3], np.float32), "scales")
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["p", "", "scales"], ["y"], mode="nearest",
                              coordinate_transformation_mode=coord, nearest_mode=nearest)]
    model = _model(nodes, [x], [_out("y")], [scales])
    g = dg.onnx.load(model)
    assert tuple(str(d) for d in g.outputs[0].type.shape)[:2] == ("N", "2")
    run = g.compile()
    sess = ort.InferenceSession(model.SerializeToString())
    for size in ((1, 2, 8, 6), (2, 2, 7, 9)):
        xs = np.random.default_rng(size[2]).standard_normal(size).astype(np.float32)
        np.testing.assert_array_equal(run(x=xs)[0], sess.run(None, {"x": xs})[0])


def test_a_bilinear_resize_of_a_symbolic_spatial_dim_is_refused_clearly():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", 4])
    scales = numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "scales")
    model = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
                   [x], [_out("y")], [scales])
    with pytest.raises(OnnxImportError, match="resizing the symbolic dim H.*input_shapes"):
        dg.onnx.load(model)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_a_recurrent_layer_over_a_symbolic_length_exports_as_scan_and_reimports(tmp_path,
                                                                                 cls):
    """nn.LSTM/GRU over a ("T", "B", 5) input: the graph-mode scan keeps T symbolic, the
    export is an ONNX Scan over T, and the re-import runs at two lengths and batches equal to
    onnxruntime and to the module run eagerly."""
    dg.manual_seed(0)
    module = getattr(dg.nn, cls)(5, 4, num_layers=2, bidirectional=True).eval()

    def f(x):
        return module(x)[0]
    model = dg.onnx.export(f, tmp_path / "rnn.onnx", dg.onnx.Input(("T", "B", 5)))
    assert "Scan" in {n.op_type for n in model.graph.node}
    g = dg.onnx.load(tmp_path / "rnn.onnx")
    assert [str(d) for d in g.outputs[0].type.shape] == ["T", "B", "8"]
    run = g.compile()
    sess = ort.InferenceSession(str(tmp_path / "rnn.onnx"))
    for steps, batch in ((3, 2), (6, 4)):
        x = np.random.default_rng(steps).standard_normal((steps, batch, 5)).astype(np.float32)
        (got,), (want,) = run(x=x), sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, f(dg.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_a_loop_whose_trip_count_is_a_symbolic_dim_imports_as_a_scan():
    """Loop(M = Shape(x)[0]) with a scan output: the stacked output's length is the symbol
    T, and one import runs at two lengths equal to onnxruntime."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
         helper.make_node("Add", ["xi", "c"], ["y"]),
         helper.make_node("Add", ["c", "one"], ["c2"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("c", f32, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("c2", f32, [3]),
         helper.make_tensor_value_info("y", f32, [3])],
        [helper.make_tensor("one", f32, [], [1.0])])
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["M"], axis=0),
         helper.make_node("Loop", ["M", "", "c0"], ["cf", "ys"], body=body)],
        [helper.make_tensor_value_info("x", f32, ["T", 3]),
         helper.make_tensor_value_info("c0", f32, [3])],
        [_out("cf"), _out("ys")], [_ints("zero", 0)])
    g = dg.onnx.load(model)
    assert str(g.outputs[1].type.shape[0]) == "T"
    run = g.compile()
    sess = ort.InferenceSession(model.SerializeToString())
    for steps in (2, 5):
        feeds = {"x": np.random.default_rng(steps).standard_normal((steps, 3)).astype(
            np.float32), "c0": np.arange(3, dtype=np.float32)}
        for a, b in zip(run(**feeds), sess.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
