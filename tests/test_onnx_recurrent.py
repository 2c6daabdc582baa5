"""ONNX RNN, GRU and LSTM import (issue 25): every direction, layout, activation, clip,
sequence_lens, initial states, peepholes, input_forget and GRU's linear_before_reset against
onnxruntime; the weights imported as state get gradients (checked by finite differences in
float64). onnxruntime refuses layout 1, so a layout-1 model is checked against its layout-0
twin with the inputs and outputs transposed (the definition of layout 1)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import duograph as dg  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
HS, IN, T, N = 3, 4, 5, 2


def _model(op, dirs, attrs, layout=0, bias=True, seq=False, h0=True, c0=True, peep=False,
           dtype=np.float32, direction=None):
    g = GATES[op]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(0)

    def init(name, shape, scale=0.5):
        return helper.make_tensor(name, elem, shape,
                                  (rng.standard_normal(shape) * scale).astype(dtype).ravel())
    inits = [init("W", (dirs, g * HS, IN)), init("R", (dirs, g * HS, HS))]
    ins = ["X", "W", "R", "B" if bias else ""]
    if bias:
        inits.append(init("B", (dirs, 2 * g * HS)))
    xshape = (N, T, IN) if layout else (T, N, IN)
    sshape = (N, dirs, HS) if layout else (dirs, N, HS)
    graph_in = [helper.make_tensor_value_info("X", elem, xshape)]
    if seq:
        graph_in.append(helper.make_tensor_value_info("L", TensorProto.INT32, (N,)))
    ins.append("L" if seq else "")
    if h0:
        graph_in.append(helper.make_tensor_value_info("H0", elem, sshape))
    ins.append("H0" if h0 else "")
    if op == "LSTM":
        if c0:
            graph_in.append(helper.make_tensor_value_info("C0", elem, sshape))
        ins.append("C0" if c0 else "")
        if peep:
            inits.append(init("P", (dirs, 3 * HS), 1.0))
            ins.append("P")
    while ins[-1] == "":
        ins.pop()
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    direction = direction or ("bidirectional" if dirs == 2 else "forward")
    node = helper.make_node(op, ins, outs, hidden_size=HS, direction=direction, layout=layout,
                            **attrs)
    graph = helper.make_graph([node], "g", graph_in,
                              [helper.make_tensor_value_info(o, elem, None) for o in outs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(op, dirs, layout, seq, h0=True, c0=True, dtype=np.float32):
    rng = np.random.default_rng(1)
    feeds = {"X": rng.standard_normal((N, T, IN) if layout else (T, N, IN)).astype(dtype)}
    sshape = (N, dirs, HS) if layout else (dirs, N, HS)
    if h0:
        feeds["H0"] = rng.standard_normal(sshape).astype(dtype)
    if op == "LSTM" and c0:
        feeds["C0"] = rng.standard_normal(sshape).astype(dtype)
    if seq:
        feeds["L"] = np.array(seq, np.int32)
    return feeds


def _check(op, dirs=1, attrs=None, layout=0, seq=None, **kw):
    attrs = dict(attrs or {})
    model = _model(op, dirs, attrs, layout, seq=seq is not None, **kw)
    feeds = _feeds(op, dirs, layout, seq, kw.get("h0", True), kw.get("c0", True))
    if layout:
        twin = _model(op, dirs, attrs, 0, seq=seq is not None, **kw)
        want = ort.InferenceSession(twin.SerializeToString()).run(
            None, {k: v if k == "L" else np.swapaxes(v, 0, 1) for k, v in feeds.items()})
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1)
                                                        for w in want[1:]]
    else:
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = dg.onnx.load(model).compile()(**feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("dirs", [1, 2])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("seq", [None, [5, 3]])
def test_directions_layouts_and_sequence_lens_match_onnxruntime(op, dirs, layout, seq):
    _check(op, dirs, layout=layout, seq=seq)


@pytest.mark.parametrize("op", sorted(GATES))
def test_reverse_clip_and_missing_optional_inputs_match_onnxruntime(op):
    _check(op, 1, direction="reverse", seq=[2, 5])
    _check(op, 2, {"clip": 0.4}, seq=[3, 5], peep=op == "LSTM")
    _check(op, 1, h0=False, bias=False, c0=False)


@pytest.mark.parametrize("op, attrs", [
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["LeakyRelu", "HardSigmoid"], "activation_alpha": [0.2, 0.3],
             "activation_beta": [0.4]}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"]}),
    ("GRU", {"activations": ["Affine", "ScaledTanh"], "activation_alpha": [0.5, 0.7],
             "activation_beta": [0.1, 1.2]}),
    ("GRU", {"linear_before_reset": 1}),
    ("LSTM", {"activations": ["Sigmoid", "Elu", "Softplus"]}),
    ("LSTM", {"activations": ["ThresholdedRelu", "Tanh", "Tanh"], "activation_alpha": [0.1]}),
    ("LSTM", {"input_forget": 1}),
])
def test_activations_and_options_match_onnxruntime(op, attrs):
    per = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    _check(op, max(1, len(attrs.get("activations", [])) // per), attrs, peep=op == "LSTM")
    if op == "GRU" and attrs.get("linear_before_reset"):
        _check(op, 2, attrs, seq=[4, 2])


@pytest.mark.parametrize("op", sorted(GATES))
def test_the_weights_imported_as_state_get_their_gradients(op):
    """d sum(Y * u) / d(W, R, B, P) against central differences, in float64."""
    dirs = 2
    model = _model(op, dirs, {}, seq=True, peep=op == "LSTM", dtype=np.float64)
    feeds = _feeds(op, dirs, 0, [5, 3], dtype=np.float64)
    g = dg.onnx.load(model)
    names = [v.name for v in g.state]
    assert set(names) == ({"W", "R", "B", "P"} if op == "LSTM" else {"W", "R", "B"})
    y = g.outputs[0]
    u = np.random.default_rng(2).standard_normal(tuple(y.type.shape))
    with g:
        loss = dg.sum(y * dg.constant(u))
        grads = dg.grad(loss, list(g.state))
    g.outputs = [loss] + list(grads)
    run = g.compile(passes="O0")
    loss0, *got = run(**feeds)
    base = {v.name: g.state_init[v] for v in g.state}
    rng = np.random.default_rng(3)
    for v, grad in zip(g.state, got):
        assert grad.shape == base[v.name].shape
        for flat in rng.choice(grad.size, 4, replace=False):
            eps = 1e-6
            shifted = []
            for sign in (1, -1):
                arr = base[v.name].copy()
                arr.flat[flat] += sign * eps
                shifted.append(_forward_with(model, v.name, arr, feeds, u))
            num = (shifted[0] - shifted[1]) / (2 * eps)
            np.testing.assert_allclose(grad.flat[flat], num, rtol=1e-5, atol=1e-7,
                                       err_msg=f"{op} {v.name}[{flat}]")


def _forward_with(model, name, value, feeds, u):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name == name:
            t.CopyFrom(onnx.numpy_helper.from_array(value, name))
    y = dg.onnx.load(m, initializers="constant").compile(passes="O0")(**feeds)[0]
    return float(np.sum(y * u))


@pytest.mark.parametrize("attrs, match", [
    ({"activations": ["Tanh"]}, r"expected 2 activations \(1 per direction, 2 direction"),
    ({"activations": ["Tanh", "Swish"]}, "activation 'Swish' is not one of"),
    ({"direction": "sideways"}, "direction 'sideways'"),
    ({"layout": 2}, "layout 2: expected 0 or 1"),
])
def test_bad_attributes_are_refused_naming_the_node(attrs, match):
    attrs = dict(attrs)
    direction = attrs.pop("direction", None)
    layout = attrs.pop("layout", 0)
    model = _model("RNN", 2 if direction is None else 1, attrs, direction=direction,
                   layout=layout)
    with pytest.raises(dg.onnx.OnnxImportError, match=match):
        dg.onnx.load(model)


def test_sequence_lens_out_of_range_is_refused():
    model = _model("GRU", 1, {}, seq=True)
    lens = helper.make_tensor("L", TensorProto.INT32, (N,), [5, 7])
    model.graph.initializer.append(lens)
    del model.graph.input[1]
    with pytest.raises(dg.onnx.OnnxImportError, match=r"sequence_lens must be in 0..5"):
        dg.onnx.load(model)


def _symbolic_t(model, layout):
    """``model`` with X's time dim (and the outputs') made the symbolic dim ``T``."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[1 if layout else 0].ClearField("dim_value")
    dims[1 if layout else 0].dim_param = "T"
    return model


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("dirs, layout", [(1, 0), (2, 0), (2, 1)])
def test_sequence_lens_over_a_symbolic_sequence_length(op, dirs, layout):
    """sequence_lens fed at run time over a symbolic T: one import serves every length."""
    got_model = dg.onnx.load(_symbolic_t(_model(op, dirs, {}, layout, seq=True), layout))
    run = got_model.compile()
    twin = _symbolic_t(_model(op, dirs, {}, 0, seq=True), 0)
    sess = ort.InferenceSession(twin.SerializeToString())
    rng = np.random.default_rng(3)
    for steps, lens in ((5, [5, 3]), (8, [2, 8]), (3, [1, 3])):
        x = rng.standard_normal((steps, N, IN)).astype(np.float32)
        h0 = rng.standard_normal((dirs, N, HS)).astype(np.float32)
        feeds = {"X": x, "L": np.array(lens, np.int32), "H0": h0}
        if op == "LSTM":
            feeds["C0"] = rng.standard_normal((dirs, N, HS)).astype(np.float32)
        want = sess.run(None, feeds)
        if layout:
            feeds = {k: v if k == "L" else np.swapaxes(v, 0, 1) for k, v in feeds.items()}
            want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1)
                                                            for w in want[1:]]
        got = run(**feeds)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
