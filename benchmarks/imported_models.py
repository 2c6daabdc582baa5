"""Imported ONNX models: duograph O0 and O2 against onnxruntime, one forward, side by side.

torchvision is not a dependency, so the models are written here in torchvision's shapes with
random weights (eval mode, so the exporter folds BatchNorm into the convolutions as it does
for the real ones):

- ``resnet``: a ResNet with basic blocks (7x7 stem, max pool, 3x3 conv-BN-ReLU pairs with
  1x1 strided downsampling shortcuts, global average pool, linear head), widths 64-512;
- ``mobilenet``: a MobileNetV3-small-like net (1x1 expansions, depthwise 3x3/5x5, HardSwish,
  squeeze-excite with HardSigmoid, linear head with HardSwish).

Each is exported with ``torch.onnx.export`` (opset 17), imported with ``duograph.onnx.load``
and run at O0 and O2; onnxruntime runs the same file with one intra-op and one inter-op
thread. Rounds alternate (O0, O2, ort, O0, ...); best of the rounds. The outputs are checked
against onnxruntime's first. ``--timer cpu`` times each call in this process's CPU time
(``time.process_time``) instead of wall time: on a loaded machine, time spent waiting for a
core then does not count (every contender runs on one thread, so the two agree when the
machine is quiet). ``--json`` writes the rows (what ``before_after.py`` reads).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/imported_models.py \\
        [--size 224] [--batch 1 8] [--rounds 3] [--models resnet mobilenet] \\
        [--timer wall|cpu] [--json out.json]

Needs torch (to export), onnx and onnxruntime; prints what it skips when one is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402,F401  (duograph.onnx below)


def torch_models():
    """{name: constructor} of the torch models (imports torch)."""
    import torch
    tnn = torch.nn

    class Basic(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(cout)
            self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                           tnn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(tnn.Module):
        def __init__(self, w=64):
            super().__init__()
            self.stem = tnn.Sequential(tnn.Conv2d(3, w, 7, 2, 3, bias=False), tnn.BatchNorm2d(w),
                                       tnn.ReLU(), tnn.MaxPool2d(3, 2, 1))
            self.layers = tnn.Sequential(
                Basic(w, w, 1), Basic(w, w, 1), Basic(w, 2 * w, 2), Basic(2 * w, 2 * w, 1),
                Basic(2 * w, 4 * w, 2), Basic(4 * w, 4 * w, 1), Basic(4 * w, 8 * w, 2),
                Basic(8 * w, 8 * w, 1))
            self.fc = tnn.Linear(8 * w, 1000)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(tnn.functional.adaptive_avg_pool2d(x, 1), 1))

    class SE(tnn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.f1 = tnn.Conv2d(c, c // r, 1)
            self.f2 = tnn.Conv2d(c // r, c, 1)

        def forward(self, x):
            w = tnn.functional.adaptive_avg_pool2d(x, 1)
            return x * tnn.functional.hardsigmoid(self.f2(torch.relu(self.f1(w))))

    class Inverted(tnn.Module):
        def __init__(self, cin, exp, cout, k, stride, se, act):
            super().__init__()
            act_cls = tnn.Hardswish if act == "hs" else tnn.ReLU
            self.residual = stride == 1 and cin == cout
            layers = []
            if exp != cin:
                layers += [tnn.Conv2d(cin, exp, 1, bias=False), tnn.BatchNorm2d(exp), act_cls()]
            layers += [tnn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False),
                       tnn.BatchNorm2d(exp), act_cls()]
            if se:
                layers.append(SE(exp))
            layers += [tnn.Conv2d(exp, cout, 1, bias=False), tnn.BatchNorm2d(cout)]
            self.block = tnn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    class MobileNet(tnn.Module):
        # (in, expanded, out, kernel, stride, squeeze-excite, activation): MobileNetV3-small
        CONFIG = [(16, 16, 16, 3, 2, True, "re"), (16, 72, 24, 3, 2, False, "re"),
                  (24, 88, 24, 3, 1, False, "re"), (24, 96, 40, 5, 2, True, "hs"),
                  (40, 240, 40, 5, 1, True, "hs"), (40, 240, 40, 5, 1, True, "hs"),
                  (40, 120, 48, 5, 1, True, "hs"), (48, 144, 48, 5, 1, True, "hs"),
                  (48, 288, 96, 5, 2, True, "hs"), (96, 576, 96, 5, 1, True, "hs"),
                  (96, 576, 96, 5, 1, True, "hs")]

        def __init__(self):
            super().__init__()
            self.stem = tnn.Sequential(tnn.Conv2d(3, 16, 3, 2, 1, bias=False),
                                       tnn.BatchNorm2d(16), tnn.Hardswish())
            self.blocks = tnn.Sequential(*[Inverted(*c) for c in self.CONFIG])
            self.head = tnn.Sequential(tnn.Conv2d(96, 576, 1, bias=False),
                                       tnn.BatchNorm2d(576), tnn.Hardswish())
            self.cls = tnn.Sequential(tnn.Linear(576, 1024), tnn.Hardswish(),
                                      tnn.Linear(1024, 1000))

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.cls(torch.flatten(tnn.functional.adaptive_avg_pool2d(x, 1), 1))

    return {"resnet": ResNet, "mobilenet": MobileNet}


def export(name: str, batch: int, size: int, path: str, seed: int = 0):
    """Export model ``name`` (random weights, random BatchNorm statistics, eval mode) for
    (batch, 3, size, size) inputs to ``path``; returns (the torch model, forward FLOPs of
    its convolutions and matmuls, counted by torch's FlopCounterMode)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(seed)
    model = torch_models()[name]()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    model.eval()
    x = torch.randn(batch, 3, size, size)
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x)
    return model, int(counter.get_total_flops())


def contenders(path: str, x: np.ndarray, threads: int = 1) -> Dict[str, Callable]:
    """{"O0", "O2", "onnxruntime"}: one forward each on ``x`` (the model at ``path``)."""
    import onnxruntime as ort
    g = dg.onnx.load(path)
    cands = {lv: _runner(g.compile(passes=lv), x) for lv in ("O0", "O2")}
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    cands["onnxruntime"] = lambda: sess.run(None, {"x": x})[0]
    return cands


def _runner(exe, x):
    return lambda: exe(x=x)[0]


TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


def best_times(cands: Dict[str, Callable], rounds: int,
               clock: Callable[[], float] = time.perf_counter) -> Dict[str, float]:
    """Best seconds per call of each contender on ``clock``, rounds alternating (after one
    warm call each)."""
    for fn in cands.values():
        fn()
    best = {k: float("inf") for k in cands}
    for _ in range(rounds):
        for name, fn in cands.items():
            t0 = clock()
            fn()
            best[name] = min(best[name], clock() - t0)
    return best


def run(models: List[str], batches: List[int], size: int, rounds: int,
        threads: int = 1, timer: str = "wall") -> List[dict]:
    """One row per (model, batch): best seconds of O0, O2 and onnxruntime, the largest
    difference from onnxruntime's output, and the forward FLOPs."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            for batch in batches:
                path = os.path.join(tmp, f"{name}_b{batch}.onnx")
                _, flops = export(name, batch, size, path)
                x = np.random.default_rng(1).standard_normal(
                    (batch, 3, size, size)).astype(np.float32)
                cands = contenders(path, x, threads)
                want = cands["onnxruntime"]()
                err = max(float(np.max(np.abs(cands[lv]() - want))) for lv in ("O0", "O2"))
                t = best_times(cands, rounds, TIMERS[timer])
                rows.append({"model": name, "batch": batch, "size": size, "flops": flops,
                             "max_abs_diff": err, "seconds": t})
    return rows


def missing() -> List[str]:
    out = []
    for mod in ("torch", "onnx", "onnxruntime"):
        try:
            __import__(mod)
        except ImportError:
            out.append(mod)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["resnet", "mobilenet"])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall")
    p.add_argument("--json", default=None, help="write the rows to this file")
    a = p.parse_args(argv)
    gone = missing()
    if gone:
        print(f"skipped: {', '.join(gone)} not installed")
        return
    import torch
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    print(f"imported models, {a.size}x{a.size}, best of {a.rounds} alternating rounds, "
          f"one thread each (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}), "
          f"{a.timer} time; load average {load:.2f}")
    print(f"{'model':10s}{'batch':>6s}{'O0 ms':>10s}{'O2 ms':>10s}{'ort ms':>10s}"
          f"{'O2/O0':>8s}{'O2/ort':>8s}{'maxdiff':>10s}")
    rows = run(a.models, a.batch, a.size, a.rounds, timer=a.timer)
    for r in rows:
        t = r["seconds"]
        print(f"{r['model']:10s}{r['batch']:6d}{t['O0'] * 1e3:10.1f}{t['O2'] * 1e3:10.1f}"
              f"{t['onnxruntime'] * 1e3:10.1f}{t['O2'] / t['O0']:8.2f}"
              f"{t['O2'] / t['onnxruntime']:8.2f}{r['max_abs_diff']:10.1e}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{r['model']}_b{r['batch']}": {"best": r["seconds"]} for r in rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
