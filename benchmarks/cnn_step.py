"""Convolutions and the CNN training step, duograph against PyTorch, side by side in one run.

Issue 24's CNN row: the training step (forward, cross-entropy, backward, SGD) of
conv(1->16, 3x3) - relu - maxpool 2 - conv(16->32, 3x3) - relu - maxpool 2 - linear(800->10)
on a batch of 64 1x28x28 images (no padding), as duograph O2 (one planned graph), duograph
eager (tape) and PyTorch eager. Then, per convolution shape (the CNN's two layers and the
families of imported convnets: 1x1, 3x3, 7x7 stride 2, strided, grouped, depthwise, dilated),
the forward, the input gradient and the weight gradient, each as duograph's CPU kernel against
PyTorch's (``F.conv2d``; ``aten.convolution_backward`` with one gradient asked for), and the
CNN's max pools forward and backward. Contenders alternate round by round; each figure is the
best of the rounds, in milliseconds.

``floor`` is the convolution's FLOPs (2 * N * C_out * H_out * W_out * C_in/groups * kh * kw; for
the step, all convolutions and the linear layer, forward and backward, the first layer without
its input gradient) at the GEMM rate measured at the start (a 512x512x512 float32 matmul,
numpy's BLAS). The header prints the CPU model, the thread settings and the load average.

Run it on one thread, as the issue's figures are:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        python benchmarks/cnn_step.py [--rounds 25] [--quick] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (puts the repository root on sys.path)
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402
from duograph.graphlib.ops import conv as conv_ops  # noqa: E402

BATCH, LR = 64, 0.01


class Shape(NamedTuple):
    name: str
    n: int
    c: int
    hw: int
    o: int
    k: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    groups: int = 1
    input_grad: bool = True

    def out_hw(self) -> int:
        return (self.hw + 2 * self.pad - self.dilation * (self.k - 1) - 1) // self.stride + 1

    def flops(self) -> float:
        return 2.0 * self.n * self.o * self.out_hw() ** 2 * self.c // self.groups * self.k ** 2


SHAPES = [
    Shape("cnn conv1 1->16", 64, 1, 28, 16, 3, input_grad=False),
    Shape("cnn conv2 16->32", 64, 16, 13, 32, 3),
    Shape("1x1 64->128", 16, 64, 28, 128, 1),
    Shape("3x3 64->64 p1", 8, 64, 28, 64, 3, pad=1),
    Shape("7x7 s2 3->64", 4, 3, 112, 64, 7, stride=2, pad=3),
    Shape("3x3 s2 64->128", 8, 64, 28, 128, 3, stride=2, pad=1),
    Shape("3x3 g4 64->64", 8, 64, 28, 64, 3, pad=1, groups=4),
    Shape("dw 3x3 96", 8, 96, 56, 96, 3, pad=1, groups=96),
    Shape("dw 3x3 s2 144", 8, 144, 56, 144, 3, stride=2, pad=1, groups=144),
    Shape("3x3 d2 32->32", 8, 32, 28, 32, 3, pad=2, dilation=2),
]
QUICK_SHAPES = [SHAPES[0], SHAPES[1], SHAPES[7]]


# -- timing ------------------------------------------------------------------------------------
def alternate(cands: Dict[str, Callable], rounds: int) -> Dict[str, float]:
    """Best seconds per call of each candidate, the candidates interleaved round by round;
    each round calls a candidate enough times for ~1 ms of work (short rounds: on a loaded
    machine the best of many short rounds is the figure least disturbed by other work)."""
    return _common.best(_common.alternate(cands, rounds, min_round_s=1e-3, max_number=200))


def gemm_rate(rounds: int) -> float:
    """FLOP/s of a 512x512x512 float32 matmul through numpy's BLAS (best of rounds)."""
    return _common.gemm_rate(rounds, min_round_s=1e-3)


# -- per-shape convolution kernels -------------------------------------------------------------
def conv_candidates(s: Shape, rng, torch) -> Dict[str, Dict[str, Callable]]:
    """{pass: {"dg": fn, "torch": fn}} for the forward, input and weight gradients."""
    x = rng.standard_normal((s.n, s.c, s.hw, s.hw)).astype(np.float32)
    w = (rng.standard_normal((s.o, s.c // s.groups, s.k, s.k)) * 0.1).astype(np.float32)
    g = rng.standard_normal((s.n, s.o, s.out_hw(), s.out_hw())).astype(np.float32)
    attrs = dict(stride=(s.stride,) * 2, padding=(s.pad,) * 4, dilation=(s.dilation,) * 2,
                 groups=s.groups)
    xt, wt, gt = dg.tensor(x), dg.tensor(w), dg.tensor(g)

    def dg_fwd():
        with dg.no_grad():
            return dg.conv2d(xt, wt, None, s.stride, s.pad, s.dilation, s.groups)
    out = {"fwd": {"dg": dg_fwd},
           "igrad": {"dg": lambda: conv_ops.conv2d_input_grad_op(gt, wt, shape=x.shape,
                                                                 **attrs)},
           "wgrad": {"dg": lambda: conv_ops.conv2d_weight_grad_op(xt, gt, shape=w.shape,
                                                                  **attrs)}}
    if not s.input_grad:
        del out["igrad"]
    if torch is not None:
        tx, tw, tg = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(g)
        args = ([s.stride] * 2, [s.pad] * 2, [s.dilation] * 2, False, [0, 0], s.groups)
        backward = torch.ops.aten.convolution_backward

        def t_fwd():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, None, s.stride, s.pad, s.dilation,
                                                  s.groups)
        out["fwd"]["torch"] = t_fwd
        if "igrad" in out:
            out["igrad"]["torch"] = lambda: backward(tg, tx, tw, None, *args,
                                                     [True, False, False])
        out["wgrad"]["torch"] = lambda: backward(tg, tx, tw, None, *args, [False, True, False])
    return out


def pool_candidates(rng, torch) -> Dict[str, Dict[str, Callable]]:
    """The CNN's two max pools (2x2), forward and backward."""
    cands = {}
    for name, shape in (("pool1", (BATCH, 16, 26, 26)), ("pool2", (BATCH, 32, 11, 11))):
        x = rng.standard_normal(shape).astype(np.float32)
        ho = shape[2] // 2
        g = rng.standard_normal(shape[:2] + (ho, ho)).astype(np.float32)
        xt, gt = dg.tensor(x), dg.tensor(g)
        attrs = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
                     ceil_mode=False)

        def dg_fwd(xt=xt):
            with dg.no_grad():
                return dg.nn.functional.max_pool2d(xt, 2)
        cands[f"{name} fwd"] = {"dg": dg_fwd}
        cands[f"{name} bwd"] = {
            "dg": lambda gt=gt, xt=xt: conv_ops.max_pool2d_backward_op(gt, xt, **attrs)}
        if torch is not None:
            tx = torch.from_numpy(x)
            tg = torch.from_numpy(g)
            _, idx = torch.nn.functional.max_pool2d(tx, 2, return_indices=True)

            def t_fwd(tx=tx):
                with torch.no_grad():
                    return torch.nn.functional.max_pool2d(tx, 2)
            cands[f"{name} fwd"]["torch"] = t_fwd
            cands[f"{name} bwd"]["torch"] = (
                lambda tg=tg, tx=tx, idx=idx: torch.ops.aten.max_pool2d_with_indices_backward(
                    tg, tx, [2, 2], [2, 2], [0, 0], [1, 1], False, idx))
    return cands


# -- the CNN step ------------------------------------------------------------------------------
def cnn_model():
    return nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 10))


def cnn_flops(batch: int) -> float:
    conv1, conv2 = SHAPES[0]._replace(n=batch), SHAPES[1]._replace(n=batch)
    return 2 * conv1.flops() + 3 * conv2.flops() + 3 * 2.0 * batch * 800 * 10


def step_candidates(batch: int, rng, torch) -> Dict[str, Callable]:
    x = np.abs(rng.standard_normal((batch, 1, 28, 28))).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    dg.manual_seed(0)
    state = {k: np.array(v.numpy(), copy=True) for k, v in cnn_model().state_dict().items()}

    def fresh():
        model = cnn_model()
        model.load_state_dict({k: dg.tensor(v.copy()) for k, v in state.items()})
        return model, dg.optim.SGD(model.parameters(), lr=LR)
    model, opt = fresh()
    g = dg.Graph("cnn_step")
    with g:
        xv = dg.placeholder("x", ("N", 1, 28, 28))
        yv = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(xv), yv)
        opt.minimize(loss)
    exe = g.compile(outputs=[loss], passes="O2")
    emodel, eopt = fresh()
    xt, yt = dg.tensor(x), dg.tensor(y)

    def eager():
        eopt.zero_grad()
        loss = nn.functional.cross_entropy(emodel(xt), yt)
        loss.backward()
        eopt.step()
        return loss
    cands = {"O2": lambda: exe(x=x, y=y), "eager": eager}
    if torch is not None:
        tnn = torch.nn
        tmodel = tnn.Sequential(tnn.Conv2d(1, 16, 3), tnn.ReLU(), tnn.MaxPool2d(2),
                                tnn.Conv2d(16, 32, 3), tnn.ReLU(), tnn.MaxPool2d(2),
                                tnn.Flatten(), tnn.Linear(800, 10))
        tmodel.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
        topt = torch.optim.SGD(tmodel.parameters(), lr=LR)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def torch_step():
            topt.zero_grad()
            loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
            loss.backward()
            topt.step()
            return loss
        cands["torch"] = torch_step
    return cands


# -- report ------------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU model, its widest vector extension and the CPU count."""
    return f"{_common.cpu_model()} ({_common.cpu_isa()}, {os.cpu_count()} cpus)"


def main(argv: List[str] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--quick", action="store_true", help="three shapes, 3 rounds")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    threads = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS")}
    rate = gemm_rate(rounds)
    load = os.getloadavg()
    peer = f"{torch.__version__} threads {torch.get_num_threads()}" if torch else "absent"
    print(f"CPU: {cpu_model()}; threads: {threads}; torch {peer}")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; GEMM rate "
          f"{rate / 1e9:.1f} GFLOP/s (512^3 float32); best of {rounds} alternating rounds, ms")
    result = {"cpu": cpu_model(), "threads": threads, "load": load, "gemm_gflops": rate / 1e9,
              "rounds": rounds, "convs": [], "pools": [], "step": {}}

    step = alternate(step_candidates(BATCH, rng, torch), rounds)
    floor = cnn_flops(BATCH) / rate
    head = f"{'CNN step B=64':<22}{'O2':>8}{'eager':>8}{'torch':>8}{'O2/t':>7}{'eag/t':>7}" \
           f"{'floor':>8}"
    print(head + "\n" + "-" * len(head))
    t = step.get("torch")
    print(f"{'':<22}{step['O2'] * 1e3:8.2f}{step['eager'] * 1e3:8.2f}"
          + (f"{t * 1e3:8.2f}{step['O2'] / t:7.2f}{step['eager'] / t:7.2f}" if t else " " * 22)
          + f"{floor * 1e3:8.2f}")
    result["step"] = {k: v * 1e3 for k, v in step.items()}
    result["step"]["floor"] = floor * 1e3

    head = f"{'conv shape':<20}{'pass':<7}{'dg':>8}{'torch':>8}{'dg/t':>7}{'floor':>8}" \
           f"{'dg/floor':>9}"
    print("\n" + head + "\n" + "-" * len(head))
    for s in (QUICK_SHAPES if args.quick else SHAPES):
        floor = s.flops() / rate
        for kind, cands in conv_candidates(s, rng, torch).items():
            best = alternate(cands, rounds)
            d, t = best["dg"], best.get("torch")
            print(f"{s.name:<20}{kind:<7}{d * 1e3:8.3f}"
                  + (f"{t * 1e3:8.3f}{d / t:7.2f}" if t else " " * 15)
                  + f"{floor * 1e3:8.3f}{d / floor:9.1f}")
            result["convs"].append({"shape": s.name, "pass": kind, "dg": d * 1e3,
                                    "torch": t * 1e3 if t else None, "floor": floor * 1e3})
    for kind, cands in pool_candidates(rng, torch).items():
        best = alternate(cands, rounds)
        d, t = best["dg"], best.get("torch")
        print(f"{'cnn max pool 2x2':<20}{kind:<11}{d * 1e3:8.3f}"
              + (f"{t * 1e3:8.3f}{d / t:7.2f}" if t else ""))
        result["pools"].append({"pass": kind, "dg": d * 1e3, "torch": t * 1e3 if t else None})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
