"""The `duograph` command: inspect saved graphs, export from a user's script, clear errors."""
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import duograph as dg
from duograph.cli import main
from steps import small_mlp_step


def _step_file(path):
    g, _ = small_mlp_step()
    dg.save_graph(g, path)
    return g


def test_inspect_prints_ir_histogram_params_kernels_and_plan(tmp_path, capsys):
    g = _step_file(tmp_path / "step.dg")
    assert main(["inspect", str(tmp_path / "step.dg"), "--dim", "N=32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(str(g).splitlines()[0])
    assert "input  x: f32[N,6]" in out and "input  y: i64[N]" in out
    assert "matmul" in out.split("ops:")[1].splitlines()[0]
    total = sum(int(np.prod(v.shape)) for v in g.state)      # weights, slots, lr, steps
    nbytes = sum(v.type.nbytes() for v in g.state)
    assert f"state  {len(g.state)} tensors, {total:,} values, {nbytes:,} bytes" in out
    assert "kernels: O0" in out and "O2" in out
    assert "arena/lower bound 1.000" in out


def test_inspect_json_and_missing_dims(tmp_path, capsys):
    g = _step_file(tmp_path / "step.dg")
    (tmp_path / "g.json").write_text(g.to_json())
    assert main(["inspect", str(tmp_path / "g.json"), "--no-ir"]) == 0
    out = capsys.readouterr().out
    assert "give the symbolic dims (N) with --dim" in out
    assert "graph step(" not in out


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="FIFOs")
@pytest.mark.parametrize("name", ["g.json", "g.dg", "g.onnx"])
def test_inspect_refuses_a_fifo_at_once(tmp_path, name):
    """Run as a command with a timeout: before, reading the FIFO waited for a writer."""
    import os
    if name.endswith(".onnx"):
        pytest.importorskip("onnx")
    fifo = tmp_path / name
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "duograph", "inspect", str(fifo)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "FIFO" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args, message", [
    (["inspect", "missing.dg"], "no such file"),
    (["inspect", "{bad}", "--dim", "N=x"], "--dim expects NAME=SIZE"),
    (["inspect", "{junk}"], "not a graph file"),
    (["export", "nofile.py:build", "--to", "json"], "no such script"),
    (["export", "{script}:missing", "--to", "json"], "defines no 'missing'"),
    (["export", "{script}", "--to", "json"], "expected SCRIPT:OBJECT"),
    (["export", "{script}:Net", "--to", "json"], "needs --input"),
])
def test_clear_errors(tmp_path, capsys, args, message):
    _step_file(tmp_path / "bad.dg")
    (tmp_path / "junk.dg").write_bytes(b"\x00" * 40)
    script = tmp_path / "model.py"
    script.write_text("import duograph as dg\nfrom duograph import nn\nNet = nn.Linear(3, 2)\n")
    subs = {"{bad}": str(tmp_path / "bad.dg"), "{junk}": str(tmp_path / "junk.dg"),
            "{script}": str(script)}
    args = [subs.get(a, a).replace("{script}", str(script)) for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_export_module_and_graph_builder_from_a_script(tmp_path, capsys):
    script = tmp_path / "model.py"
    script.write_text(
        "import numpy as np\nimport duograph as dg\nfrom duograph import nn\n"
        "dg.manual_seed(0)\nnet = nn.Sequential(nn.Linear(4, 5), nn.Tanh())\n"
        "def build():\n    g = dg.Graph('built')\n    with g:\n"
        "        x = dg.placeholder('x', ('N', 4))\n        g.outputs = [dg.exp(x)]\n"
        "    return g\n")
    out = tmp_path / "net.dg"
    assert main(["export", f"{script}:net", "--to", "json", "-o", str(out),
                 "--input", "x=N,4:float32"]) == 0
    g = dg.load_graph(out)
    assert [v.name for v in g.inputs] == ["x"] and len(g.state) == 2
    xv = np.ones((3, 4), np.float32)
    assert g.compile()(x=xv)[0].shape == (3, 5)
    assert main(["export", f"{script}:build", "--to", "json", "-o",
                 str(tmp_path / "b.json")]) == 0
    assert dg.Graph.from_json((tmp_path / "b.json").read_text()).name == "built"


def test_python_dash_m_and_help():
    proc = subprocess.run([sys.executable, "-m", "duograph", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "inspect" in proc.stdout and "export" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "duograph", "inspect", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--dim" in proc.stdout


def test_inspect_an_onnx_model_with_kernel_counts_plan_and_picture(tmp_path, capsys,
                                                                    monkeypatch):
    pytest.importorskip("onnx")
    dg.manual_seed(0)
    net = dg.nn.Sequential(dg.nn.Linear(4, 3), dg.nn.ReLU())
    path = str(tmp_path / "m.onnx")
    dg.onnx.export(net, path, dg.onnx.Input(("N", 4)))
    assert main(["inspect", path, "--dim", "N=32", "--svg", str(tmp_path / "m.dot")]) == 0
    out = capsys.readouterr().out
    assert "input  x: f32[N,4]" in out and "output 0: f32[N,3]" in out
    assert "state  2 tensors, 15 values, 60 bytes" in out
    line = [ln for ln in out.splitlines() if ln.startswith("kernels: ")][0]
    counts = dict(item.split() for item in line[len("kernels: "):].split(", "))
    assert list(counts) == ["O0", "O1", "O2"]
    assert int(counts["O2"]) < int(counts["O0"])          # O2 fuses bias and relu
    assert "memory plan (O2):" in out and "arena" in out
    assert open(tmp_path / "m.dot").read().startswith("strict digraph")
    # without Graphviz: an svg is drawn with matplotlib (duograph.pictures); a format only
    # Graphviz draws gives the report, then a plain message on how to install it
    monkeypatch.setattr("shutil.which", lambda name: None)
    if importlib.util.find_spec("matplotlib") is not None:
        assert main(["inspect", path, "--no-ir", "--svg", str(tmp_path / "m.svg")]) == 0
        assert f"picture: {tmp_path / 'm.svg'}" in capsys.readouterr().out
    assert main(["inspect", path, "--no-ir", "--svg", str(tmp_path / "m.gif")]) == 2
    captured = capsys.readouterr()
    assert "kernels: O0" in captured.out
    assert "Graphviz's `dot` program is not installed" in captured.err
    assert "apt install graphviz" in captured.err


@pytest.mark.parametrize("args, message", [
    (["inspect", "{onnx}", "--dim", "M=3"], "no symbolic dim 'M' (they have: N)"),
    (["inspect", "{badonnx}"], "is not an ONNX model"),
    (["inspect", "{onnx}", "--dim", "N"], "--dim expects NAME=SIZE"),
])
def test_clear_errors_for_onnx_files_and_dims(tmp_path, capsys, args, message):
    pytest.importorskip("onnx")
    good = str(tmp_path / "m.onnx")
    dg.onnx.export(dg.nn.Linear(4, 3), good, dg.onnx.Input(("N", 4)))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model" * 4)
    args = [{"{onnx}": good, "{badonnx}": str(bad)}.get(a, a) for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_export_to_onnx_runs_in_onnxruntime(tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    script = tmp_path / "model.py"
    script.write_text("import duograph as dg\nfrom duograph import nn\ndg.manual_seed(0)\n"
                      "net = nn.Sequential(nn.Linear(4, 5), nn.Tanh())\n")
    out = str(tmp_path / "net.onnx")
    assert main(["export", f"{script}:net", "--to", "onnx", "-o", out,
                 "--input", "x=N,4:float32"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    import runpy
    net = runpy.run_path(str(script))["net"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got, = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, net(dg.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sub", [[], ["inspect"], ["export"]])
def test_help_everywhere(sub, capsys):
    with pytest.raises(SystemExit) as e:
        main(sub + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: duograph")
    assert {"": "inspect", "inspect": "--dim", "export": "--to"}[" ".join(sub)] in out


# -- issue 23: targets given as a tensor; output paths that cannot be written ---------------------
_BUILD = """
import duograph as dg
from duograph import nn

def _parts():
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    return model, dg.randn(8, 3), dg.tensor([0, 1] * 4)

def as_tuple():
    model, x, y = _parts()
    return model, x, y, nn.functional.cross_entropy, lambda ps: dg.optim.SGD(ps, lr=0.1)

def as_dict():
    model, x, y = _parts()
    return dict(model=model, inputs=x, targets=y, loss=nn.functional.cross_entropy,
                optimizer=lambda ps: dg.optim.SGD(ps, lr=0.1))
"""


@pytest.mark.parametrize("build", ["as_tuple", "as_dict"])
def test_compare_takes_targets_returned_as_a_tensor(tmp_path, capsys, build):
    """``build()`` returning its targets as one tensor crashed (``targets or ()`` asked the
    tensor for its truth value); it is compared as the one target it is."""
    script = tmp_path / "mine.py"
    script.write_text(_BUILD)
    assert main(["compare", f"{script}:{build}", "--modes", "eager,O1", "--steps", "2",
                 "--repeats", "1", "--json", str(tmp_path / "c.json")]) == 0, \
        capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Sequential: training step" in out and "O1" in out
    import json
    report = json.loads((tmp_path / "c.json").read_text())
    losses = [report["modes"][m]["losses"] for m in ("eager", "O1")]
    assert len(losses[0]) == 2 and np.allclose(losses[0], losses[1])
    assert np.isfinite(losses[0]).all()


@pytest.mark.parametrize("args, message", [
    (["export", "{script}:net", "--to", "onnx", "-o", "{missing}/x.onnx"],
     "-o {missing}/x.onnx: the directory {missing} does not exist; create it first"),
    (["export", "{script}:net", "--to", "json", "-o", "{missing}/x.dg"],
     "the directory {missing} does not exist"),
    (["export", "{script}:net", "--to", "json", "-o", "{missing}/x.json"],
     "the directory {missing} does not exist"),
    (["export", "{script}:net", "--to", "json", "-o", "{tmp}"], "is a directory"),
    (["export", "{script}:net", "--to", "json", "-o", "{script}/x.dg"],
     "{script} is a file, not a directory"),
    (["inspect", "{graph}", "--svg", "{missing}/g.svg"], "the directory {missing} does not"),
    (["compare", "--model", "mlp", "--json", "{missing}/m.json"],
     "--json {missing}/m.json: the directory {missing} does not exist"),
    (["compare", "--model", "mlp", "--report", "{script}"], "is a file, not a directory"),
])
def test_output_paths_that_cannot_be_written_are_one_line_errors(tmp_path, capsys, args,
                                                                  message):
    """``export -o missing_dir/x.onnx`` printed a raw FileNotFoundError traceback: every
    output path is checked before any work, with one line naming the directory, exit 2."""
    script = tmp_path / "model.py"
    script.write_text("import duograph as dg\nfrom duograph import nn\nnet = nn.Linear(4, 5)\n")
    _step_file(tmp_path / "g.dg")
    subs = {"{script}": str(script), "{missing}": str(tmp_path / "missing_dir"),
            "{tmp}": str(tmp_path), "{graph}": str(tmp_path / "g.dg")}

    def fill(text):
        for k, v in subs.items():
            text = text.replace(k, v)
        return text
    args = [fill(a) for a in args] + (["--input", "x=N,4"] if args[0] == "export" else [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                 # nothing ran (compare prints a table)
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"duograph {args[0]}: ") and fill(message) in err, err
    assert not (tmp_path / "missing_dir").exists()


def test_an_os_error_while_writing_is_one_line(tmp_path, capsys, monkeypatch):
    script = tmp_path / "model.py"
    script.write_text("import duograph as dg\nfrom duograph import nn\nnet = nn.Linear(4, 5)\n")
    target = str(tmp_path / "x.dg")

    def refuse(graph, path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(dg, "save_graph", refuse)
    assert main(["export", f"{script}:net", "--to", "json", "-o", target,
                 "--input", "x=N,4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"duograph export: Permission denied: {target}"
