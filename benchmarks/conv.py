"""conv2d forward and forward+backward time, duograph vs PyTorch, side by side in one run.

Two digits-sized CNN layers (batch 64, 8x8 images, 3x3 kernels, padding 1, bias, float32):
1->16 channels (the first layer: its input is data and needs no gradient) and 16->32 channels
(an inner layer: the input gradient is computed too). duograph runs eagerly (tape) and as a
compiled graph; each time is the best of ``--repeat`` rounds, in milliseconds per call.

    python benchmarks/conv.py [--repeat 7] [--number 20] [--dtype float32]
"""
from __future__ import annotations

import argparse
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402

LAYERS = [("conv 1->16", 1, 16, False), ("conv 16->32", 16, 32, True)]
BATCH, SIZE, KERNEL = 64, 8, 3


def best_of(fn, repeat: int, number: int) -> float:
    """Best time per call, in milliseconds."""
    fn()
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number * 1e3


def duograph_eager(x, w, b, input_grad: bool):
    xt = dg.tensor(x, requires_grad=input_grad)
    wt, bt = dg.tensor(w, requires_grad=True), dg.tensor(b, requires_grad=True)

    def forward():
        with dg.no_grad():
            dg.conv2d(xt, wt, bt, padding=1)

    def forward_backward():
        dg.conv2d(xt, wt, bt, padding=1).sum().backward()
        wt.grad = bt.grad = xt.grad = None
    return forward, forward_backward


def duograph_graph(x, w, b, input_grad: bool):
    g = dg.Graph("conv_bench")
    with g:
        xv = dg.placeholder("x", x.shape, str(x.dtype))
        wv = dg.placeholder("w", w.shape, str(w.dtype))
        bv = dg.placeholder("b", b.shape, str(b.dtype))
        y = dg.conv2d(xv, wv, bv, padding=1)
        grads = dg.grad(y.sum(), [xv, wv, bv] if input_grad else [wv, bv])
    fwd, both = g.compile(outputs=[y]), g.compile(outputs=[y] + grads)
    return lambda: fwd(x=x, w=w, b=b), lambda: both(x=x, w=w, b=b)


def torch_eager(x, w, b, input_grad: bool):
    import torch
    xt = torch.tensor(x, requires_grad=input_grad)
    wt, bt = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)

    def forward():
        with torch.no_grad():
            torch.nn.functional.conv2d(xt, wt, bt, padding=1)

    def forward_backward():
        torch.nn.functional.conv2d(xt, wt, bt, padding=1).sum().backward()
        wt.grad = bt.grad = xt.grad = None
    return forward, forward_backward


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    try:
        import torch
        torch_threads = torch.get_num_threads()
    except ImportError:
        torch, torch_threads = None, None
    rng = np.random.default_rng(0)
    print(f"batch {BATCH}, {SIZE}x{SIZE} images, {KERNEL}x{KERNEL} kernel, padding 1, "
          f"{args.dtype}; ms per call, best of {args.repeat}x{args.number}"
          + (f"; torch {torch.__version__} with {torch_threads} threads" if torch else
             "; torch not installed"))
    header = (f"{'layer':<13} {'pass':<9} {'dg eager':>9} {'dg graph':>9} {'torch':>8} "
              f"{'eager/torch':>12} {'graph/torch':>12}")
    print(header)
    print("-" * len(header))
    # Each framework is timed in a phase of its own: PyTorch's OpenMP threads keep spinning
    # after a call and would slow the BLAS threads numpy uses if the two were interleaved.
    data = []
    for name, c_in, c_out, input_grad in LAYERS:
        x = rng.standard_normal((BATCH, c_in, SIZE, SIZE)).astype(args.dtype)
        w = (rng.standard_normal((c_out, c_in, KERNEL, KERNEL)) * 0.1).astype(args.dtype)
        b = rng.standard_normal(c_out).astype(args.dtype)
        data.append((name, (x, w, b, input_grad)))
    suites = [duograph_eager, duograph_graph] + ([torch_eager] if torch is not None else [])
    times = {}
    for suite in suites:
        for name, operands in data:
            for label, fn in zip(("fwd", "fwd+bwd"), suite(*operands)):
                times[suite, name, label] = best_of(fn, args.repeat, args.number)
    for name, _ in data:
        for label in ("fwd", "fwd+bwd"):
            t = [times[suite, name, label] for suite in suites]
            line = f"{name:<13} {label:<9} {t[0]:9.3f} {t[1]:9.3f}"
            if torch is not None:
                line += f" {t[2]:8.3f} {t[0] / t[2]:11.2f}x {t[1] / t[2]:11.2f}x"
            print(line)
    print("(fwd+bwd: the 1->16 layer computes weight and bias gradients only; the 16->32 "
          "layer also the input gradient)")


if __name__ == "__main__":
    main()
