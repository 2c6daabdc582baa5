"""Autocast without PyTorch: the casts it makes eagerly, as graph nodes, under dg.compile,
the redundant-cast pass, the cast cache, the half-precision product kernels, and the
GradScaler's arithmetic on its own (``test_amp_torch.py`` compares with PyTorch)."""
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import duograph as dg
import duograph.nn.functional as F
from duograph.graphlib.registry import REGISTRY
from duograph.passes.manager import PIPELINES
from duograph.passes.casts import holds_every_value, remove_redundant_casts

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 8)).astype(np.float32)
W = rng.standard_normal((8, 8)).astype(np.float32)


def _ops(graph):
    return [n.op.name for n in graph.nodes]


def test_policies_are_traits_of_the_opdefs():
    assert REGISTRY["matmul"].autocast == "lower"
    assert REGISTRY["conv2d"].autocast == "lower"
    assert REGISTRY["prod"].autocast == "fp32"
    assert REGISTRY["cat"].autocast == "promote"
    assert REGISTRY["softmax"].autocast is None     # CPU autocast keeps it in its input dtype
    assert F.linear.autocast_policy == "lower" and F.mse_loss.autocast_policy == "fp32"


def test_eager_autocast_casts_and_restores():
    x, w = dg.tensor(X), dg.tensor(W)
    with dg.autocast("cpu"):
        y = x @ w
        assert y.dtype == "bfloat16"
        assert dg.softmax(y, -1).dtype == "bfloat16"
        assert (y + x).dtype == "float32"            # not listed: ordinary promotion
        assert (x.double() @ w.double()).dtype == "float64"    # float64 is never lowered
        with dg.autocast("cpu", enabled=False):
            assert (x @ w).dtype == "float32"
        assert dg.is_autocast_enabled("cpu")
    assert not dg.is_autocast_enabled("cpu")
    assert (x @ w).dtype == "float32"
    np.testing.assert_allclose(y.float().numpy(), X @ W, rtol=2e-2, atol=6e-2)


def test_autocast_as_decorator_and_amp_alias():
    assert dg.amp.autocast is dg.autocast

    @dg.autocast("cpu", dtype=dg.float16)
    def f(a, b):
        return a @ b
    assert f(dg.tensor(X), dg.tensor(W)).dtype == "float16"
    assert not dg.is_autocast_enabled("cpu")


def test_autocast_is_per_thread():
    seen = {}

    def other():
        seen["dtype"] = (dg.tensor(X) @ dg.tensor(W)).dtype
        seen["enabled"] = dg.is_autocast_enabled("cpu")
    with dg.autocast("cpu"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == {"dtype": "float32", "enabled": False}


def test_gradients_flow_back_in_the_parameters_dtype():
    w = dg.tensor(W, requires_grad=True)
    with dg.autocast("cpu"):
        loss = F.mse_loss(dg.tensor(X) @ w, dg.tensor(X))
    assert loss.dtype == "float32"
    loss.backward()
    assert w.grad.dtype == "float32"
    expected = 2 * X.T @ (X @ W - X) / X.size
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=5e-2, atol=5e-2)


def test_weights_are_cast_once_per_block():
    lin = dg.nn.Linear(8, 8)
    cast = REGISTRY["cast"]
    with dg.record() as rec:
        with dg.autocast("cpu"):
            lin(dg.tensor(X))
            lin(dg.tensor(X))
    casts = [n for n in rec.graph.nodes if n.op is cast]
    # the input twice, the weight and the bias once each (the cache)
    assert len(casts) == 4, rec.graph
    with dg.record() as rec:
        with dg.autocast("cpu", cache_enabled=False):
            lin(dg.tensor(X))
            lin(dg.tensor(X))
    assert sum(n.op is cast for n in rec.graph.nodes) == 6


def test_graph_mode_casts_are_nodes_and_the_pass_prunes_them():
    with dg.Graph("g") as g:
        x = dg.placeholder("x", (4, 8))
        w = dg.placeholder("w", (8, 8))
        with dg.autocast("cpu"):
            h = dg.matmul(x, w)
            out = F.mse_loss(dg.matmul(h, w), x)     # h is bf16 already: no cast for it
    g.outputs = [out]
    names = _ops(g)
    assert out.dtype == "float32" and h.dtype == "bfloat16"
    assert names.count("cast") >= 4
    exe = g.compile(outputs=[out], passes="O2")
    ref = ((((X.astype("bfloat16").astype(np.float32) @ W.astype("bfloat16").astype(np.float32))
             .astype("bfloat16").astype(np.float32) @ W.astype("bfloat16").astype(np.float32))
            .astype("bfloat16").astype(np.float32) - X) ** 2).mean()
    got = exe.run({"x": X, "w": W})
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got, np.float32), ref, rtol=1e-2)


def test_cast_pass_removes_what_changes_nothing():
    with dg.Graph("g") as g:
        x = dg.placeholder("x", (4,), "bfloat16")
        y = dg.placeholder("y", (4,))
        back = dg.cast(dg.cast(x, "float32"), "bfloat16")       # out and back: x
        same = dg.cast(y, "float32")                              # y
        lossy = dg.cast(dg.cast(y, "bfloat16"), "float32")        # rounds: kept
        wider = dg.cast(dg.cast(x, "float32"), "float64")         # one cast: x -> f64
    g.outputs = [back, same, lossy, wider]
    result = remove_redundant_casts(g)
    assert result.changed
    g.verify()
    assert g.outputs[0] is x and g.outputs[1] is y
    assert _ops(g) == ["cast", "cast", "cast"]
    assert g.outputs[3].node.inputs[0] is x
    assert not remove_redundant_casts(g).changed


def test_cast_pass_runs_in_the_pipelines():
    assert "casts" in PIPELINES["O1"] and "casts" in PIPELINES["O2"]


@pytest.mark.parametrize("src, dst, exact", [
    ("bfloat16", "float32", True), ("float32", "bfloat16", False),
    ("float16", "bfloat16", False), ("bfloat16", "float16", False),
    ("float16", "float64", True), ("int32", "float64", True), ("int32", "float32", False),
    ("uint8", "bfloat16", True), ("int8", "int64", True), ("int64", "int32", False),
    ("bool", "bfloat16", True), ("float32", "int64", False)])
def test_holds_every_value(src, dst, exact):
    assert holds_every_value(src, dst) is exact


def test_compile_records_autocast_casts():
    lin = dg.nn.Linear(8, 4)

    @dg.compile
    def f(x):
        with dg.autocast("cpu"):
            return lin(x).relu()
    x = dg.tensor(X)
    y = f(x)
    with dg.no_grad(), dg.autocast("cpu"):
        ref = lin(x).relu()
    assert y.dtype == ref.dtype == "bfloat16"
    np.testing.assert_array_equal(y.detach().float().numpy(), ref.float().numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_products_compute_in_float32_and_round_once(dtype):
    a = X.astype(dtype)
    b = W.astype(dtype)
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(dg.matmul(dg.tensor(a), dg.tensor(b)).numpy(), ref)
    got = dg.einsum("ij,jk->ik", dg.tensor(a), dg.tensor(b))
    np.testing.assert_array_equal(got.numpy(), ref)
    img = rng.standard_normal((2, 3, 6, 6)).astype(dtype)
    k = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    got = F.conv2d(dg.tensor(img), dg.tensor(k))
    ref = F.conv2d(dg.tensor(img.astype(np.float32)), dg.tensor(k.astype(np.float32)))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), ref.numpy().astype(dtype))


def test_grad_scaler_skips_a_step_with_an_inf_gradient():
    lin = dg.nn.Linear(2, 1)
    opt = dg.optim.SGD(lin.parameters(), lr=0.1)
    scaler = dg.amp.GradScaler(init_scale=4.0, growth_interval=1)
    before = lin.weight.detach().numpy().copy()
    with np.errstate(all="ignore"):
        scaler.scale(lin(dg.tensor([[np.inf, 1.0]])).sum()).backward()
    assert scaler.step(opt) is None
    scaler.update()
    np.testing.assert_array_equal(lin.weight.detach().numpy(), before)
    assert scaler.get_scale() == 2.0
    opt.zero_grad()
    scaler.scale(lin(dg.tensor([[1.0, 2.0]])).sum()).backward()
    scaler.unscale_(opt)
    np.testing.assert_allclose(lin.weight.grad.numpy(), [[1.0, 2.0]])
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 4.0          # growth_interval=1: grows after the good step
    np.testing.assert_allclose(lin.weight.detach().numpy(), before - 0.1 * np.array([[1, 2]]),
                               rtol=1e-6)


def test_bf16_autocast_mlp_trains_to_float32_accuracy():
    """4 classes on noisy concentric rings in 2-D (256 points), 100 full-batch Adam steps.
    Margin: the bfloat16-autocast accuracy within 3 points of float32's (above 90%)."""
    rng = np.random.default_rng(0)
    n = 256
    y = rng.integers(0, 4, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    radius = 1.0 + y + rng.normal(0, 0.15, n)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1).astype(np.float32)
    accs = {}
    for mode in ("float32", "bfloat16"):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(2, 64), dg.nn.ReLU(), dg.nn.Linear(64, 64),
                                 dg.nn.ReLU(), dg.nn.Linear(64, 4))
        opt = dg.optim.Adam(model.parameters(), lr=1e-2)
        xt, yt = dg.tensor(x), dg.tensor(y)
        for _ in range(100):
            opt.zero_grad()
            with dg.autocast("cpu", enabled=mode == "bfloat16"):
                logits = model(xt)
                loss = dg.nn.functional.cross_entropy(logits, yt)
            assert logits.dtype == mode and loss.dtype == "float32"
            loss.backward()
            opt.step()
        with dg.no_grad():
            pred = model(xt).numpy().argmax(1)
        accs[mode] = float((pred == y).mean())
    assert accs["float32"] > 0.9, accs
    assert accs["bfloat16"] >= accs["float32"] - 0.03, accs


@pytest.mark.parametrize("heading", ["## Mixed precision: autocast and GradScaler",
                                     "## Activation checkpointing"])
def test_readme_examples_run_and_print_what_they_show(heading, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        section = f.read().split(heading, 1)[1].split("\n## ", 1)[0]
    code, = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    shown, = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    (tmp_path / "example.py").write_text(code)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
