"""Training end to end on scikit-learn's digits: three modes, accuracy, checkpoint resume."""
import importlib.util
import os
import sys

import numpy as np
import pytest

import duograph as dg

pytest.importorskip("sklearn")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "train_digits", os.path.join(ROOT, "examples", "train_digits.py"))
train_digits = importlib.util.module_from_spec(_spec)
sys.modules["train_digits"] = train_digits
_spec.loader.exec_module(train_digits)


def _train(**kw):
    kw.setdefault("progress", False)
    kw.setdefault("log", lambda *a: None)
    return train_digits.train(**kw)


def test_three_modes_give_the_same_mlp_loss_curve():
    curves = {m: _train(kind="mlp", mode=m, epochs=3)["losses"]
              for m in ("eager", "compiled", "graph")}
    for m in ("compiled", "graph"):
        np.testing.assert_allclose(curves[m], curves["eager"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{m} vs eager")
    assert curves["eager"][2] < curves["eager"][0]


def test_mlp_reaches_96_percent():
    result = _train(kind="mlp", mode="graph", epochs=30)
    assert result["test_accuracy"] >= 0.96, result["test_accuracy"]


def test_cnn_reaches_97_percent():
    result = _train(kind="cnn", mode="compiled", epochs=10)
    assert result["test_accuracy"] >= 0.97, result["test_accuracy"]


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_resume_from_checkpoint_continues_the_same_curve(tmp_path, mode):
    full = _train(kind="mlp", mode=mode, epochs=4)["losses"]
    ck = str(tmp_path / "ck.dgt")
    first = _train(kind="mlp", mode=mode, epochs=2, checkpoint=ck)["losses"]
    resumed = _train(kind="mlp", mode=mode, epochs=4, checkpoint=ck, resume=True)["losses"]
    np.testing.assert_allclose(first, full[:2], rtol=1e-6)
    np.testing.assert_allclose(resumed, full, rtol=1e-5, atol=1e-7)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _train(kind="mlp", mode="eager", epochs=1, checkpoint=str(tmp_path / "nope.dgt"),
               resume=True)


def test_command_line_modes_progress_bar_and_cnn_resume(tmp_path, capsys):
    """The flags pick the model and mode; tqdm draws a bar per epoch; a CNN (BatchNorm
    buffers included) resumed from its checkpoint, in another mode, continues the curve."""
    pytest.importorskip("tqdm")
    ck = str(tmp_path / "cnn.dgt")
    train_digits.main(["--model", "cnn", "--mode", "compiled", "--epochs", "1",
                       "--checkpoint", ck])
    err = capsys.readouterr().err
    assert "cnn compiled epoch 1/1" in err and "/45 [" in err       # the progress bar
    train_digits.main(["--model", "cnn", "--mode", "graph", "--epochs", "2",
                       "--checkpoint", ck, "--resume", "--no-progress"])
    out = capsys.readouterr().out
    assert "resumed from" in out and "test accuracy" in out
    state = dg.load(ck)
    assert state["epoch"] == 2 and state["kind"] == "cnn"
    full = _train(kind="cnn", mode="eager", epochs=2)["losses"]
    np.testing.assert_allclose(state["losses"], full, rtol=1e-5, atol=1e-7)
    with pytest.raises(SystemExit):
        train_digits.main(["--mode", "all", "--checkpoint", ck])   # needs one --mode
