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
    with pytest.raises(ValueError, match="the torch and jax modes need a duograph.models"):
        dg.compare(case.model, case.inputs, modes=("torch",))
    with pytest.raises(ValueError, match="an optimizer needs a loss"):
        dg.compare(case.model, case.inputs, optimizer=case.optimizer)
    with pytest.raises(ValueError, match="at least 1"):
        dg.compare(case.model, case.inputs, steps=0)
    assert set(KNOWN_MODES) >= {"eager", "compiled", "O0", "O1", "O2", "torch",
                                "torch.compile", "jax"}


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


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_report_and_json_replace_planted_symlinks_never_write_through(mlp_comparison,
                                                                       tmp_path):
    """A link planted in the report folder under a name the report writes (plots, JSON,
    page) is replaced by the new file; the file outside the folder it pointed at is kept."""
    pytest.importorskip("matplotlib")
    from duograph import _compare_report as rep
    folder = tmp_path / "report"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    names = list(rep.PLOTS) + ["comparison.json", "index.html", "c.json"]
    for name in names:
        (outside / name).write_bytes(b"precious")
        (folder / name).symlink_to(outside / name)
    mlp_comparison.report(str(folder))
    mlp_comparison.save_json(str(folder / "c.json"))
    for name in names:
        assert (outside / name).read_bytes() == b"precious", name
        assert not (folder / name).is_symlink() and (folder / name).stat().st_size > 100, name
    assert json.loads((folder / "c.json").read_text())["name"] == mlp_comparison.name
    assert (folder / "times.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)   # no temporaries left


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


def test_the_outside_kernel_share_is_measured_in_every_mode(mlp_comparison):
    for r in mlp_comparison.modes.values():
        assert 0 < r.kernel_s < r.timed_step_s and 0 <= r.dispatch_share <= 1, r.mode
    # eager pays Python per op; the planned O2 step hardly does
    assert mlp_comparison.modes["eager"].dispatch_share > mlp_comparison.modes["O2"].dispatch_share


def test_every_mode_has_a_live_bytes_timeline(mlp_comparison):
    for r in mlp_comparison.modes.values():
        assert r.live_bytes and max(r.live_bytes) > 0, r.mode
    eager = mlp_comparison.modes["eager"]
    assert len(eager.live_bytes) > eager.kernels // 2     # a sample per kernel call
    # the plan's timeline is exact: its peak is the lower bound
    o2 = mlp_comparison.modes["O2"]
    assert max(o2.live_bytes) == o2.lower_bound_bytes


def test_kernel_timing_leaves_the_backend_as_it_was():
    from duograph.comparison import _KernelClock, _kernels_timed
    from duograph.eager import device as eager_device
    from duograph.runtime.backends import get_backend
    be = get_backend("numpy")
    kernels, provider = be.kernels, eager_device.get_backend_provider()
    clock = _KernelClock()
    with _kernels_timed("numpy", clock):
        assert be.kernels is not kernels
        dg.tanh(dg.ones(3)) + 1.0
        assert clock.spent > 0
    assert be.kernels is kernels and eager_device.get_backend_provider() is provider
    assert "out_kernel" not in vars(be) and "prepare_out" not in vars(be)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_the_jax_mode_jits_the_twin_from_the_same_weights(name):
    pytest.importorskip("jax")
    case = models.get(name)
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer, case=case, modes=("eager", "jax"), steps=3,
                     repeats=2)
    r = cmp.modes["jax"]
    assert r.error is None, r.error
    np.testing.assert_allclose(r.losses, cmp.modes["eager"].losses, rtol=1e-5)
    assert r.param_drift < 1e-5          # weights, momentum and running statistics agree


def test_the_jax_mode_says_which_models_have_a_twin():
    pytest.importorskip("jax")
    case = models.get("rnn")
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer, case=case, modes=("jax",), **FAST)
    assert "no JAX twin" in cmp.modes["jax"].error
    assert "jax failed: NotImplementedError: rnn: no JAX twin" in cmp.table()


def test_the_readme_comparison_block_runs_and_prints_the_table():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Comparing the two paradigms", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "cnn: training step, 10 repeats, 3 steps"
    for mode in ("eager", "compiled", "O0", "O1", "O2", "torch", "jax"):
        assert any(ln.split()[:1] == [mode] for ln in lines[2:]), mode
    assert "numerics against eager, node by node:" in lines
