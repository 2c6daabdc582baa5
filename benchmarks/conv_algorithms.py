"""conv2d forward per CPU algorithm (``dg.config.conv_algorithm`` forced) against PyTorch, on
the convolution shapes of the imported ResNet-like and MobileNet-like models
(``imported_models.py``), side by side in one run: what ``autotune.conv_rule`` is tuned on.

For each shape, every algorithm that applies (``autotune.conv_algorithms``: gemm, direct,
winograd) runs the CPU backend's conv2d kernel, and ``torch.nn.functional.conv2d`` runs the
same operands; rounds alternate (each algorithm, then torch, then again), best of
``--rounds``, one thread each. The ``rule`` column is the algorithm ``auto`` picks. Times in
milliseconds of wall or CPU time (``--timer cpu``: this process's CPU time, for a loaded
machine).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/conv_algorithms.py \\
        [--batch 1 8] [--rounds 5] [--timer wall|cpu] [--shapes resnet mobilenet]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph.runtime.cpu import autotune  # noqa: E402
from duograph.runtime.cpu import kernels as cpu_kernels  # noqa: E402

# (channels in, size, channels out, kernel, stride, groups) at padding kernel // 2
SHAPES = {
    "resnet": [(3, 224, 64, 7, 2, 1), (64, 56, 64, 3, 1, 1), (64, 56, 128, 3, 2, 1),
               (128, 28, 128, 3, 1, 1), (128, 28, 256, 3, 2, 1), (256, 14, 256, 3, 1, 1),
               (256, 14, 512, 3, 2, 1), (512, 7, 512, 3, 1, 1)],
    "mobilenet": [(3, 224, 16, 3, 2, 1), (16, 112, 16, 3, 2, 16), (72, 56, 72, 3, 2, 72),
                  (88, 28, 88, 3, 1, 88), (96, 28, 96, 5, 2, 96), (240, 14, 240, 5, 1, 240),
                  (576, 7, 576, 5, 1, 576), (96, 7, 576, 1, 1, 1)],
}
TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


def contenders(batch, c_in, size, c_out, k, stride, groups):
    """{name: zero-argument call}: each applicable algorithm, then torch (if installed)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c_in, size, size)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in // groups, k, k)) * 0.1).astype(np.float32)
    attrs = dict(stride=(stride, stride), padding=(k // 2,) * 4, dilation=(1, 1),
                 groups=groups)
    out = {}
    for algo in autotune.conv_algorithms("forward", w.shape, groups, attrs["stride"],
                                         attrs["padding"], attrs["dilation"]):
        def call(algo=algo):
            with dg.config.override(conv_algorithm=algo):
                cpu_kernels.conv2d(np, x, w, **attrs)
        out[algo] = call
    rule = autotune.conv_rule("forward", x.shape, w.shape, groups, attrs["stride"],
                              attrs["padding"], attrs["dilation"])
    try:
        import torch
    except ImportError:
        return out, rule
    torch.set_num_threads(1)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    out["torch"] = lambda: torch.nn.functional.conv2d(tx, tw, None, stride, k // 2, 1, groups)
    return out, rule


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timer", choices=sorted(TIMERS), default="wall")
    p.add_argument("--shapes", nargs="+", default=sorted(SHAPES))
    a = p.parse_args(argv)
    clock = TIMERS[a.timer]
    print(f"conv2d forward, float32, one thread, best of {a.rounds} alternating rounds, "
          f"{a.timer} time, ms; load average {os.getloadavg()[0]:.2f}")
    print(f"{'shape (N, C, H, K, k, s, g)':34s}{'rule':>9s}{'gemm':>9s}{'direct':>9s}"
          f"{'winograd':>9s}{'torch':>9s}{'rule/torch':>11s}")
    for family in a.shapes:
        for batch in a.batch:
            for shape in SHAPES[family]:
                cands, rule = contenders(batch, *shape)
                best = {name: float("inf") for name in cands}
                for fn in cands.values():
                    fn()
                for _ in range(a.rounds):
                    for name, fn in cands.items():
                        t = clock()
                        fn()
                        best[name] = min(best[name], clock() - t)
                cells = "".join(f"{best[n] * 1e3:9.2f}" if n in best else f"{'-':>9s}"
                                for n in ("gemm", "direct", "winograd", "torch"))
                ratio = (f"{best[rule] / best['torch']:11.2f}" if "torch" in best
                         else f"{'-':>11s}")
                print(f"{str((batch,) + shape):34s}{rule:>9s}{cells}{ratio}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
