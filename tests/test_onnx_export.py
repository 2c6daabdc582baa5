"""ONNX export, checked with the real tools: onnx.checker (full check) and onnxruntime.

Every op-sample graph either exports and runs in onnxruntime to duograph's numbers, or is
refused with an OnnxExportError naming the op and the user's line. Where onnxruntime has no
kernel for a valid model (float64 Conv, Erf...), onnx's reference evaluator runs it instead.
Models (MLP, the digits CNN with BatchNorm in eval mode, LayerNorm + MultiheadAttention, a
TransformerBlock) are exported once with a symbolic batch dim and run at two batch sizes.
"""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402
from duograph.graphlib.ops.control import call  # noqa: E402
from op_samples import OPS, as_tuple, assert_matches, build  # noqa: E402

# ops duograph refuses to export, and why (checked: they raise, naming the op)
REFUSED = {"uniform", "rand", "normal", "randn", "bernoulli", "randint", "randperm",
           "multinomial", "log1p", "expm1",
           "floor_divide", "atan2", "hypot", "bitwise_left_shift",
           "bitwise_right_shift",
           "cummax", "cummin", "logcumsumexp", "mode", "svd", "svdvals",
           "linalg_inv", "linalg_solve", "linalg_slogdet", "linalg_cholesky", "linalg_qr",
           "linalg_qr_r", "linalg_eigh", "linalg_eigvalsh", "linalg_pinv", "linalg_lstsq",
           "linalg_cholesky_sym", "linalg_eigh_sym", "linalg_eigvalsh_sym",
           "linalg_solve_triangular", "linalg_matrix_rank", "linalg_cond",
           # ONNX has no complex tensors
           "imag", "complex", "polar", "view_as_real", "view_as_complex",
           *(f"fft.{n}" for n in ("fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "fftn",
                                  "ifftn", "rfft2", "irfft2", "rfftn", "irfftn")),
           "fold", "adaptive_max_pool2d", "max_unpool2d", "adaptive_max_pool1d",
           # data-dependent sizes and reductions ScatterElements lacks (mean, include_self)
           "scatter_reduce", "nonzero", "nonzero_static", "argwhere", "masked_select",
           "masked_scatter",
           # collectives: communication between processes has no ONNX form
           "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
           "all_reduce_start",
           # issue 28's special functions ONNX lacks, and composites of refused ops (linalg
           # solve/inv/slogdet/pinv/svd, cumprod before opset 26)
           "erfc", "erfinv", "lgamma", "digamma", "polygamma", "i0", "signbit", "nextafter",
           "fmax", "fmin", "gcd", "lcm", "heaviside", "cholesky_solve", "cholesky_inverse",
           "linalg_tensorinv", "linalg_tensorsolve", "logdet", "pinverse", "svd_legacy",
           "vander", "linalg_vander"}
# samples refused where the op's other samples export: the SVD-based matrix norms, and
# avg_pool with ceil_mode=True
REFUSED_SAMPLES = {"matrix_norm-nuc", "matrix_norm-two", "norm-nuc",
                   "avg_pool1d-all", "avg_pool1d-no_pad_count", "avg_pool3d-all",
                   "real-c128", "real-c64", "conj-c128", "angle-c128", "fft.fftshift-c128",
                   "linalg_matrix_power-inverse_square", "vdot-c128"}


def run_onnx(model, feeds, which=None):
    """Outputs of ``model`` in onnxruntime; onnx's reference evaluator where onnxruntime has
    no kernel for an op and dtype (the model is still valid ONNX). ``which`` (a list) gets
    the name of the runner used."""
    data = model.SerializeToString()
    try:
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as e:
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        from onnx.reference import ReferenceEvaluator
        if which is not None:
            which.append("reference")
        return ReferenceEvaluator(model).run(None, feeds)
    if which is not None:
        which.append("onnxruntime")
    return sess.run(None, feeds)


def _samples():
    return [pytest.param(op, s, id=f"{op.name}-{s.name}") for op in OPS for s in op.samples]


@pytest.mark.parametrize("op, sample", _samples())
def test_every_op_sample_exports_and_runs_equal_in_onnxruntime(op, sample):
    built = build(op, sample)
    built.graph.outputs = built.outputs
    if op.name in REFUSED or f"{op.name}-{sample.name}" in REFUSED_SAMPLES:
        with pytest.raises(dg.onnx.OnnxExportError, match=r"op '\w+'.*\n  in: .*op_samples"):
            dg.onnx.to_model(built.graph)
        return
    # integer bitwise ops exist from opset 18 (BitwiseAnd...); bools are And/Or/Xor/Not
    # cumprod is CumProd, from opset 26
    opset = {"opset": 18} if op.name.startswith("bitwise") else \
        {"opset": 26} if op.name == "cumprod" else {}
    if opset and sample.name != "bool":
        with pytest.raises(dg.onnx.OnnxExportError, match=r"needs opset >= (18|26)"):
            dg.onnx.to_model(built.graph)
    model = dg.onnx.to_model(built.graph, **opset)
    onnx.checker.check_model(model, full_check=True)
    want = as_tuple(built.graph.compile()(**built.feeds))
    which = []
    got = run_onnx(model, built.feeds, which)
    tol = dict(op.tol)
    if which == ["reference"]:       # its float64 Erf is computed to about 1e-7
        tol["float64"] = (1e-6, 1e-9)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g, np.asarray(w), tol, f"{op.name}-{sample.name}: ")


def test_source_lines_go_into_doc_strings_and_names_follow_the_user():
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", ("N", 3))
        w = dg.variable("weight", np.ones((3, 2), np.float32))
        y = dg.tanh(x @ w)   # the line
    g.outputs = [y]
    model = dg.onnx.to_model(g)
    assert [i.name for i in model.graph.input] == ["x"]
    assert [i.name for i in model.graph.initializer][:1] == ["weight"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N" and dims[1].dim_value == 3
    docs = [n.doc_string for n in model.graph.node if n.op_type == "Tanh"]
    assert docs and "test_onnx_export.py" in docs[0]


def test_an_op_without_an_onnx_form_is_refused_with_its_line():
    g = dg.Graph("t")
    with g:
        seed = dg.placeholder("seed", (), "int64")
        x = dg.placeholder("x", (3,))
        y = x + dg.rand(3, seed=seed)
    g.outputs = [y]
    with pytest.raises(dg.onnx.OnnxExportError) as info:
        dg.onnx.to_model(g)
    assert "'uniform'" in str(info.value) and "test_onnx_export.py" in str(info.value)


def test_state_updates_are_refused():
    model = nn.BatchNorm1d(3)           # training mode: running statistics are updated
    with pytest.raises(dg.onnx.OnnxExportError, match="eval mode"):
        dg.onnx.to_model(model, dg.onnx.Input(("N", 3)))


def test_regions_are_inlined(tmp_path):
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", ("N", 3), "float64")
        y, = call(lambda a: dg.exp(a) * 2.0 + 1.0, x)
    g.outputs = [y]
    opt = dg.passes.optimize(g, "O2")
    assert any(n.regions for n in opt.nodes) or any(n.regions for n in g.nodes)
    feeds = {"x": np.linspace(-1, 1, 6).reshape(2, 3)}
    for graph in (g, opt):
        path = tmp_path / "r.onnx"
        model = dg.onnx.export(graph, path)
        assert not any(n.op_type in ("fused", "call") for n in model.graph.node)
        got, = run_onnx(onnx.load(path), feeds)
        np.testing.assert_allclose(got, np.exp(feeds["x"]) * 2 + 1, rtol=1e-12)


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_export_replaces_a_planted_symlink_never_writes_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    path = tmp_path / "m.onnx"
    path.symlink_to(victim)
    g = dg.Graph("t")
    with g:
        x = dg.placeholder("x", (2,))
        g.outputs = [dg.exp(x)]
    dg.onnx.export(g, path)
    assert victim.read_bytes() == b"precious" and not path.is_symlink()
    assert onnx.load(path).graph.node[0].op_type == "Exp"


# -- models ------------------------------------------------------------------------------------
def _check_model(module, spec_shapes, feeds_list, tmp_path, rtol=1e-5, atol=1e-6):
    """Export once with symbolic dims, then check every batch of feeds against eager."""
    path = tmp_path / "model.onnx"
    specs = [dg.onnx.Input(s) for s in spec_shapes]
    dg.onnx.export(module, path, *specs)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for feeds in feeds_list:
        with dg.no_grad():
            want = module(*[dg.tensor(f) for f in feeds])
        want = want[0] if isinstance(want, tuple) else want
        got, = sess.run(None, dict(zip(names, feeds)))
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.numpy(), rtol=rtol, atol=atol)
    return model


def _rng_batches(shape, sizes=(3, 7), seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((n,) + shape).astype(np.float32)] for n in sizes]


def test_mlp_exports_with_a_symbolic_batch(tmp_path):
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    onnx_model = _check_model(model, [("N", 64)], _rng_batches((64,)), tmp_path)
    assert {i.name for i in onnx_model.graph.initializer} >= {"0.weight", "0.bias",
                                                              "4.weight"}
    assert onnx_model.graph.input[0].name == "x"       # Sequential.forward(x)


def test_digits_cnn_with_batch_norm_in_eval_mode(tmp_path):
    dg.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
    rng = np.random.default_rng(1)
    model.train()
    for _ in range(3):                  # move the running statistics off their defaults
        model(dg.tensor(rng.standard_normal((8, 1, 8, 8)).astype(np.float32)))
    model.eval()
    onnx_model = _check_model(model, [("N", 1, 8, 8)], _rng_batches((1, 8, 8)), tmp_path)
    names = {i.name for i in onnx_model.graph.initializer}
    assert {"1.running_mean", "1.running_var", "0.weight"} <= names


def test_layernorm_and_multihead_attention(tmp_path):
    dg.manual_seed(0)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(16)
            self.attn = nn.MultiheadAttention(16, 4)

        def forward(self, x):
            h = self.ln(x)
            return self.attn(h, h, h, need_weights=False)[0]

    _check_model(Attn().eval(), [("N", "S", 16)],
                 [[np.random.default_rng(s).standard_normal((n, L, 16)).astype(np.float32)]
                  for s, (n, L) in enumerate([(2, 5), (3, 5)])], tmp_path)


def test_transformer_block(tmp_path):
    dg.manual_seed(0)
    block = nn.TransformerBlock(16, 2).eval()
    _check_model(block, [("N", 6, 16)], _rng_batches((6, 16), (1, 4)), tmp_path,
                 rtol=1e-4, atol=1e-5)


def test_a_function_with_a_python_branch_on_values_is_recorded(tmp_path):
    w = dg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))

    def f(x):
        if float(x.sum()) > 0:           # a decision on a value: graph mode cannot build it
            return dg.relu(x @ w)
        return x @ w
    x = np.ones((2, 3), np.float32)
    model = dg.onnx.export(f, tmp_path / "f.onnx", x)
    got, = run_onnx(model, {"x": x})
    np.testing.assert_allclose(got, np.maximum(x @ w.numpy(), 0))


def test_the_digits_example_exports_agrees_with_onnxruntime_and_draws(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    import importlib.util
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.syspath_prepend(os.path.join(root, "examples"))
    spec = importlib.util.spec_from_file_location(
        "export_digits_onnx", os.path.join(root, "examples", "export_digits_onnx.py"))
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "export_digits_onnx", example)
    spec.loader.exec_module(example)
    printed = []
    numbers = example.run(epochs=1, out=str(tmp_path), log=printed.append)
    assert numbers["agreement_359"] == 1.0 and numbers["agreement_7"] == 1.0
    assert numbers["max_abs_diff_359"] < 1e-4 and numbers["max_abs_diff_7"] < 1e-4
    assert abs(numbers["onnxruntime_accuracy"] - numbers["test_accuracy"]) < 1e-9
    onnx.checker.check_model(onnx.load(numbers["path"]), full_check=True)
    assert any("predicted classes agree on 100.0%" in line for line in printed)
    assert os.path.exists(numbers["picture"])
    # without Graphviz: drawn with networkx and matplotlib where they are installed, else
    # the .dot source and the message saying how to install Graphviz
    monkeypatch.setattr("shutil.which", lambda name: None)
    printed.clear()
    picture = example.draw(dg.onnx.load(numbers["path"]), str(tmp_path / "g"), printed.append)
    if importlib.util.find_spec("matplotlib") and importlib.util.find_spec("networkx"):
        assert picture.endswith("g.svg") and "<svg" in open(picture).read()
    else:
        assert picture.endswith("g.dot") and open(picture).read().startswith("strict digraph")
        assert any("apt install graphviz" in line for line in printed)


@pytest.mark.parametrize("size, out", [((5, 7), (3, 2)), ((4, 7), (2, 3)), ((5, 6), (3, 2))],
                         ids=["uneven", "even_rows", "even_cols"])
def test_adaptive_avg_pool2d_keeps_a_nan_in_its_windows(size, out):
    torch = pytest.importorskip("torch")
    # the exported model averages window by window, as the kernel (issue 10): a NaN or inf in
    # the input reaches only the windows that contain it, and so for the backward's cotangent
    h, w = size
    x = np.random.default_rng(0).standard_normal((2, 3, h, w)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[1, 2, h - 1, 0] = np.inf
    g = dg.Graph("t")
    with g:
        xv = dg.placeholder("x", (2, 3, h, w))
        cv = dg.placeholder("c", (2, 3) + out)
        y = dg.nn.functional.adaptive_avg_pool2d(xv, out)
        (dx,) = dg.grad(y, [xv], cotangent=cv)
    g.outputs = [y, dx]
    assert {n.op.name for n in g.nodes} >= {"adaptive_avg_pool2d",
                                            "adaptive_avg_pool2d_backward"}
    model = dg.onnx.to_model(g)
    onnx.checker.check_model(model, full_check=True)
    assert not {n.op_type for n in model.graph.node} & {"MatMul", "Gemm"}
    c = np.random.default_rng(1).standard_normal((2, 3) + out).astype(np.float32)
    c[0, 1, 1, 0] = np.nan
    feeds = {"x": x, "c": c}
    want = [np.asarray(v) for v in g.compile()(**feeds)]
    got = run_onnx(model, feeds)
    ref = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), out).numpy()
    np.testing.assert_allclose(want[0], ref, rtol=1e-6, atol=1e-6)   # NaN/inf where torch's
    tx = torch.from_numpy(x).requires_grad_()
    torch.nn.functional.adaptive_avg_pool2d(tx, out).backward(torch.from_numpy(c))
    np.testing.assert_allclose(want[1], tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)    # same NaN/inf positions
    assert 0 < np.isnan(want[0]).sum() < want[0].size / 4
    assert 0 < np.isnan(want[1]).sum() < want[1].size / 4


def test_export_accepts_pytorchs_argument_order(tmp_path):
    """``export(model, args, f)`` (PyTorch's order) writes the same model as duograph's
    ``export(model, f, *inputs)``; ``args`` is one input or a tuple; ``f`` may be a file
    object; anything else is refused naming both orders."""
    import io
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU()).eval()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    ours = dg.onnx.export(model, tmp_path / "a.onnx", x)
    theirs = dg.onnx.export(model, dg.tensor(x), str(tmp_path / "b.onnx"))
    as_tuple_ = dg.onnx.export(model, (x,), tmp_path / "c.onnx", opset_version=18)
    buffer = io.BytesIO()
    dg.onnx.export(model, (x,), buffer)
    from_buffer = onnx.load_from_string(buffer.getvalue())
    for m in (theirs, as_tuple_, from_buffer):
        assert [n.op_type for n in m.graph.node] == [n.op_type for n in ours.graph.node]
        assert [i.name for i in m.graph.input] == ["x"]
    assert as_tuple_.opset_import[0].version == 18
    for m in [onnx.load(tmp_path / f"{name}.onnx") for name in "abc"] + [from_buffer]:
        got, = run_onnx(m, {"x": x})
        np.testing.assert_allclose(got, np.maximum(x @ model[0].weight.detach().numpy().T
                                                   + model[0].bias.detach().numpy(), 0), rtol=1e-5)

    def add(a, b):
        return a + b
    two = dg.onnx.export(add, (x, x), tmp_path / "d.onnx")
    assert [i.name for i in two.graph.input] == ["a", "b"]
    with pytest.raises(TypeError, match=r"export\(model, args, f\).*found export\(target, "
                                        r"ndarray, ndarray\)"):
        dg.onnx.export(add, x, x)
    with pytest.raises(dg.onnx.OnnxExportError, match="keyword arguments"):
        dg.onnx.export(add, (x, {"b": x}), tmp_path / "e.onnx")
