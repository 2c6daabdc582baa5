"""Train the digits CNN, export it to ONNX, run it in onnxruntime, and draw its graph.

    python examples/export_digits_onnx.py                   # 3 epochs, files in a temp dir
    python examples/export_digits_onnx.py --epochs 20 --out build/

The CNN of train_digits.py (Conv, BatchNorm, ReLU, MaxPool, Linear) is trained in eager mode,
put in eval mode and exported once with a symbolic batch dim ("N"); onnxruntime then runs
that one file at two batch sizes (the whole test set and a batch of 7), and the script prints
how far its outputs are from duograph's and whether the predicted classes agree. The graph
the export was made from is drawn with Graphviz (``graph.render``); without Graphviz's
``dot`` program the .dot source is written instead, with the install hint.
Needs the examples extra (scikit-learn) and onnx + onnxruntime (the test extra).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import duograph as dg  # noqa: E402
import train_digits  # noqa: E402


def run(epochs: int = 3, out: str = None, log=print) -> dict:
    """Train, export, compare with onnxruntime and draw; returns the measured numbers."""
    import onnxruntime as ort
    out = out or tempfile.mkdtemp(prefix="duograph_digits_")
    os.makedirs(out, exist_ok=True)
    result = train_digits.train(kind="cnn", mode="eager", epochs=epochs, progress=False,
                                log=lambda *a: None)
    model = result["model"].eval()
    log(f"trained the CNN for {epochs} epochs: test accuracy {result['test_accuracy']:.3f}")

    graph = dg.Graph("digits_cnn")                      # the IR that gets exported
    with graph:
        x = dg.placeholder("images", ("N", 1, 8, 8))
        graph.outputs = [model(x)]
    path = os.path.join(out, "digits_cnn.onnx")
    dg.onnx.export(graph, path)
    log(f"wrote {path}")

    _, _, x_test, y_test = train_digits.load_digits_split()
    x_test = train_digits.shape_input(x_test, "cnn")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    exe = graph.compile()
    numbers = {"path": path, "test_accuracy": result["test_accuracy"]}
    for batch in (x_test, x_test[:7]):
        ours = np.asarray(exe(images=batch)[0])
        theirs = session.run(None, {"images": batch})[0]
        diff = float(np.max(np.abs(ours - theirs)))
        agree = float(np.mean(ours.argmax(1) == theirs.argmax(1)))
        log(f"batch of {len(batch):3d}: max |duograph - onnxruntime| = {diff:.2e}, "
            f"predicted classes agree on {agree:.1%}")
        numbers[f"max_abs_diff_{len(batch)}"] = diff
        numbers[f"agreement_{len(batch)}"] = agree
    acc = float(np.mean(session.run(None, {"images": x_test})[0].argmax(1) == y_test))
    log(f"onnxruntime's test accuracy: {acc:.3f}")
    numbers["onnxruntime_accuracy"] = acc

    numbers["picture"] = draw(graph, os.path.join(out, "digits_cnn"), log)
    return numbers


def draw(graph, stem: str, log=print) -> str:
    """``stem``.svg (through Graphviz, or networkx and matplotlib without it), or ``stem``.dot
    (and why) when neither can draw."""
    try:
        picture = graph.render(stem + ".svg")
    except dg.DuographError as e:                       # no Graphviz: the .dot source
        log(str(e))
        picture = graph.render(stem + ".dot")
    log(f"drew the graph: {picture}")
    return picture


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out", help="folder for the .onnx and the picture (default: a temp dir)")
    args = p.parse_args(argv)
    run(args.epochs, args.out)


if __name__ == "__main__":
    main()
