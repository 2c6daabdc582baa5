"""dg.compare: one model in every mode, from the same weights; numerics matched node by node
through the shared IR; the report's plots; the ``duograph compare`` command."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import duograph as dg
from duograph import models, nn
from duograph.comparison import KNOWN_MODES
from duograph.graphlib.registry import REGISTRY
from duograph.runtime.backend import Backend

FAST = dict(steps=2, repeats=2)


@pytest.mark.parametrize("name", models.NAMES)
def test_every_bundled_model_runs_and_agrees_in_every_mode(name):
    case = models.get(name)
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer, modes=("eager", "compiled", "O0", "O2"), **FAST)
    for r in cmp.modes.values():
        assert r.error is None, (r.mode, r.error)
        assert len(r.losses) == 2 and len(r.times_s) == 2 and r.first_call_s > 0
        assert r.kernels and r.kernels > 0
        assert r.peak_bytes is not None
        # same weights, same data: the same losses, and parameters that stay together
        np.testing.assert_allclose(r.losses, cmp.modes["eager"].losses, rtol=1e-5)
        assert r.param_drift < 1e-4, (r.mode, r.param_drift)
    assert cmp.modes["O2"].kernels < cmp.modes["O0"].kernels        # fusion happened
    assert cmp.modes["O2"].arena_bytes >= cmp.modes["O2"].lower_bound_bytes > 0
    assert len(cmp.modes["O2"].live_bytes) == cmp.modes["O2"].nodes or \
        cmp.modes["O2"].live_bytes
    for level in ("O0", "O2"):
        n = cmp.numerics[level]
        assert n.first is None, n.describe()
        # O0 runs the recorded nodes themselves; O2 materialises only the outputs of its
        # fused regions (and merges repeated nodes), so fewer nodes have a twin there
        assert n.matched > 0.6 * n.total if level == "O0" else n.matched >= 5
    # the model is left with its initial weights
    again = models.get(name)
    for (k, a), (_, b) in zip(case.model.state_dict().items(), again.model.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)


class _PerturbedTanh(Backend):
    """numpy, except that tanh is off by 1e-3: the kind of kernel bug compare must find."""

    def __init__(self):
        super().__init__("perturbed", np)
        tanh = REGISTRY["tanh"]
        self.register_kernel(tanh, lambda xp, x: tanh.kernel(xp, x) + x.dtype.type(1e-3))


class _TanhNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 3)

    def forward(self, x):
        h = self.a(x).relu()
        return self.b(dg.tanh(h))          # the perturbed op: the report must name this line


def test_a_perturbed_kernel_is_found_and_named_with_its_source_line():
    dg.manual_seed(0)
    model = _TanhNet()
    x = dg.randn(5, 4)
    y = dg.tensor([0, 1, 2, 0, 1])
    cmp = dg.compare(model, (x,), targets=(y,), loss=nn.functional.cross_entropy,
                     optimizer=lambda ps: dg.optim.SGD(ps, lr=0.1), modes=("eager", "O0"),
                     backend=_PerturbedTanh(), **FAST)
    first = cmp.numerics["O0"].first
    assert first is not None and first.op == "tanh"
    assert "test_compare.py" in first.source and "_PerturbedTanh" not in first.source
    line = int(first.source.split(":")[1].split()[0])
    with open(__file__) as f:
        assert "self.b(dg.tanh(h))" in f.read().splitlines()[line - 1]
    assert 9e-4 < first.max_abs < 1.1e-3
    assert "first difference beyond tolerance" in cmp.table() and "tanh" in cmp.table()
    # the nodes before it agree exactly
    before = [d for d in cmp.numerics["O0"].nodes if d.index < first.index]
    assert before and all(d.max_abs == 0 for d in before)


def test_a_function_forward_compares_without_loss_or_optimizer():
    def f(a, b):
        return dg.tanh(a @ b) * 2.0 + 1.0
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    cmp = dg.compare(f, (a, b), **FAST)
    assert not cmp.training and cmp.name == "f"
    assert all(r.error is None for r in cmp.modes.values())
    assert all(n.first is None for n in cmp.numerics.values())
    assert cmp.modes["O2"].kernels == 1            # one fused kernel with its matmul
    losses = {m: r.losses for m, r in cmp.modes.items()}
    assert len({tuple(v) for v in losses.values()}) == 1


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_the_torch_mode_runs_the_twin_from_the_same_weights(name):
    pytest.importorskip("torch")
    case = models.get(name)
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer, case=case, modes=("eager", "torch"), **FAST)
    assert cmp.modes["torch"].error is None, cmp.modes["torch"].error
    np.testing.assert_allclose(cmp.modes["torch"].losses, cmp.modes["eager"].losses, rtol=1e-5)
    assert cmp.modes["torch"].param_drift < 1e-5


def test_bad_arguments_are_refused_clearly():
    case = models.get("mlp")
    with pytest.raises(ValueError, match="unknown mode 'O3'"):
        dg.compare(case.model, case.inputs, modes=("O3",))
    with pytest.raises(ValueError, match="the torch modes need a duograph.models case"):
        dg.compare(case.model, case.inputs, modes=("torch",))
    with pytest.raises(ValueError, match="an optimizer needs a loss"):
        dg.compare(case.model, case.inputs, optimizer=case.optimizer)
    with pytest.raises(ValueError, match="at least 1"):
        dg.compare(case.model, case.inputs, steps=0)
    assert set(KNOWN_MODES) >= {"eager", "compiled", "O0", "O1", "O2", "torch",
                                "torch.compile"}


@pytest.fixture(scope="module")
def mlp_comparison():
    case = models.get("mlp")
    return dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                      optimizer=case.optimizer, modes=("eager", "O0", "O2"), steps=3,
                      repeats=3)


def test_json_holds_every_figure(mlp_comparison, tmp_path):
    path = tmp_path / "c.json"
    mlp_comparison.save_json(str(path))
    doc = json.loads(path.read_text())
    assert set(doc["modes"]) == {"eager", "O0", "O2"}
    o2 = doc["modes"]["O2"]
    assert len(o2["times_s"]) == 3 and len(o2["losses"]) == 3 and o2["median_s"] > 0
    assert o2["arena_bytes"] and o2["live_bytes"]
    assert doc["numerics"]["O2"]["matched"] == len(doc["numerics"]["O2"]["nodes"]) > 0


def test_report_draws_each_plot_with_its_data(mlp_comparison, tmp_path):
    pytest.importorskip("matplotlib")
    from duograph import _compare_report as rep
    page = mlp_comparison.report(str(tmp_path / "report"))
    html = open(page).read()
    for name in rep.PLOTS:
        png = tmp_path / "report" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
        assert f'src="{name}"' in html
    assert "comparison.json" in html and "median ms" in html
    # the same plots as SVG hold their series: the modes in the legends, the data points
    for name, draw in rep.PLOTS.items():
        svg = tmp_path / name.replace(".png", ".svg")
        draw(mlp_comparison, str(svg))
        text = svg.read_text()
        assert text.lstrip().startswith(("<?xml", "<svg"))
        want = {"times.png": ["eager", "O0", "O2"], "memory.png": ["O2"],
                "errors.png": ["O0", "O2"], "losses.png": ["eager", "O0", "O2"]}[name]
        for label in want:
            assert f">{label}<" in text, (name, label)


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "duograph", "compare", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_command_compares_a_bundled_model(tmp_path):
    out = _cli("--model", "mlp", "--modes", "eager,O2", "--steps", "2", "--repeats", "2",
               "--json", str(tmp_path / "m.json"))
    assert out.returncode == 0, out.stderr
    assert "mlp: training step" in out.stdout and "O2" in out.stdout
    assert json.loads((tmp_path / "m.json").read_text())["modes"]["O2"]["kernels"] > 0


def test_the_command_compares_a_users_script_and_refuses_mistakes(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(textwrap.dedent("""
        import duograph as dg
        from duograph import nn

        def build():
            dg.manual_seed(0)
            model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
            x = dg.randn(8, 3)
            y = dg.tensor([0, 1] * 4)
            return dict(model=model, inputs=(x,), targets=(y,),
                        loss=nn.functional.cross_entropy,
                        optimizer=lambda ps: dg.optim.SGD(ps, lr=0.1))
    """))
    out = _cli(f"{script}:build", "--modes", "eager,compiled,O1", "--steps", "2",
               "--repeats", "2")
    assert out.returncode == 0, out.stderr
    assert "Sequential: training step" in out.stdout and "compiled" in out.stdout
    bad = _cli(f"{script}:build", "--modes", "eager,O9")
    assert bad.returncode == 2 and "unknown mode(s) ['O9']" in bad.stderr
    missing = _cli(f"{script}:nothing")
    assert missing.returncode == 2 and "defines no 'nothing'" in missing.stderr
    both = _cli()
    assert both.returncode == 2 and "either SCRIPT:BUILD or --model" in both.stderr


@pytest.mark.slow
def test_torch_compile_mode_runs_the_compiled_twin():
    pytest.importorskip("torch")
    case = models.get("mlp")
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer, case=case, modes=("eager", "torch.compile"),
                     **FAST)
    r = cmp.modes["torch.compile"]
    assert r.error is None, r.error
    np.testing.assert_allclose(r.losses, cmp.modes["eager"].losses, rtol=1e-5)


def test_the_outside_kernel_share_is_measured_where_it_can_be(mlp_comparison):
    eager, o0, o2 = (mlp_comparison.modes[m] for m in ("eager", "O0", "O2"))
    assert 0 < eager.kernel_s < eager.median_s * 5 and 0 <= eager.dispatch_share <= 1
    assert o0.kernel_s > 0 and o0.dispatch_share is not None
    assert o2.kernel_s is None and o2.dispatch_share is None     # planned: not timed
