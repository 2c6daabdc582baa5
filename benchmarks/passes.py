"""Passes and the planned runtime, measured: training steps side by side in one run.

The figures of issues 5 and 11. Workloads: the training step (forward, cross-entropy loss,
backward, SGD update) of an MLP 784-256-256-10 (ReLU) and of the digits CNN of
``examples/train_digits.py`` (input (B, 1, 8, 8)), at each ``--batch`` size. Contenders,
timed in interleaved rounds (best and median of the rounds, per step):

  eager   duograph eager: nn modules, ``loss.backward()``, ``opt.step()``, ``zero_grad()``
  O0      one static training-step graph (``dg.Graph``, ``opt.minimize(loss)``), unoptimised
  O1      the same graph after the cleanup pipeline
  O2      all passes (fusion, memory-aware schedule) over the planned runtime (one arena)
  numpy   hand-written numpy, the same maths, every array preallocated (``out=``); the CNN
          one uses im2col (``sliding_window_view``) in NHWC layout
  jax     ``jax.jit`` of the same step with donated parameters (when ``import jax`` works)
  torch   PyTorch eager: ``torch.nn`` modules, ``loss.backward()``, ``torch.optim.SGD``
          (when ``import torch`` works; ``--torch-threads``, default 1)

Every contender starts from the same initial weights; the losses of the first two steps must
agree (rtol 1e-4) before anything is timed, else the run stops with exit status 1. For the
graph modes it also reports kernels per step (``exe.kernel_count``), pass time (the
``g.compile`` call and the PassManager's per-pass table) and memory (``exe.memory_plan``:
arena vs lower bound vs no-reuse total; for the unplanned O0/O1 executables the plan the
planner would make for them). Then the fused chain of 8 elementwise ops on 4M float32
(O2, one fused kernel, vs numpy op by op), and the issue's targets as PASS/SHORT lines.

BLAS: the header prints ``OPENBLAS_CORETYPE`` and threadpoolctl's reading of the BLAS
library. duograph never changes a BLAS setting; this benchmark can, for the whole process,
so that duograph, numpy and JAX all run under the same setting:

  --blas env      (default) keep the environment as it is
  --blas native   re-execute this process without OPENBLAS_CORETYPE: OpenBLAS picks the
                  kernels for this CPU (AVX-512 where the CPU has it)
  --blas NAME     re-execute with OPENBLAS_CORETYPE=NAME (e.g. Haswell); refused for the
                  AVX-512 kernels on a CPU without AVX-512 (they would die of SIGILL)
  --blas-threads N  limit the BLAS library to N threads for the run (threadpoolctl)

JAX does its matrix products with XLA's own kernels, so the setting changes only the
duograph and numpy figures.

    python benchmarks/passes.py [--batch 32 256 512] [--workload mlp cnn] [--rounds 30]
                                [--blas env|native|NAME] [--blas-threads N] [--quick]
                                [--torch-threads N] [--json out.json] [--profile]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import math
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402
from duograph.passes.memory import plan_memory  # noqa: E402

F32 = np.float32
LR = 0.01
RTOL = 1e-4
CONTENDERS = ("eager", "O0", "O1", "O2", "numpy", "jax", "torch")
GRAPH_MODES = ("O0", "O1", "O2")
REEXEC_MARK = "_DUOGRAPH_BENCH_BLAS"
AVX512_CORETYPES = ("skylakex", "cooperlake", "sapphirerapids")


# -- BLAS setting ------------------------------------------------------------------------------
def blas_reexec(mode: str, argv: List[str]) -> None:
    """Re-execute this script under the BLAS setting ``mode`` (see the module docstring).

    The setting must be in the environment before OpenBLAS loads, hence a new process
    (``os.execve``); a marker in the environment stops a second re-execution.
    """
    if mode == "env" or os.environ.get(REEXEC_MARK) == mode:
        return
    env = dict(os.environ)
    if mode == "native":
        if "OPENBLAS_CORETYPE" not in env:
            return                      # already native: nothing to change
        del env["OPENBLAS_CORETYPE"]
    else:
        if mode.lower() in AVX512_CORETYPES and not _cpu_has_avx512():
            raise SystemExit(f"--blas {mode}: this CPU has no AVX-512, and OpenBLAS's "
                             f"{mode} kernels would stop the process with SIGILL")
        if env.get("OPENBLAS_CORETYPE") == mode:
            return
        env["OPENBLAS_CORETYPE"] = mode
    env[REEXEC_MARK] = mode
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + list(argv), env)


def _cpu_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return True                     # cannot tell: let OpenBLAS decide


def blas_info(mode: str) -> dict:
    """The setting asked for, the environment value and threadpoolctl's reading."""
    info = {"mode": mode, "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "libraries": []}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["note"] = "threadpoolctl not installed: BLAS kernel unknown"
        return info
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            info["libraries"].append({k: lib.get(k) for k in (
                "internal_api", "architecture", "num_threads", "version", "threading_layer",
                "prefix")})
    return info


# -- models ------------------------------------------------------------------------------------
def mlp_model() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def cnn_model() -> nn.Module:
    """``make_model("cnn")`` of examples/train_digits.py (imported from the example)."""
    path = os.path.join(ROOT, "examples", "train_digits.py")
    spec = importlib.util.spec_from_file_location("_train_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_model("cnn")


WORKLOADS = {
    "mlp": {"make": mlp_model, "feature": (784,), "title": "MLP 784-256-256-10 (ReLU)"},
    "cnn": {"make": cnn_model, "feature": (1, 8, 8),
            "title": "digits CNN (conv16-bn-relu-pool, conv32-relu-pool, linear), (B,1,8,8)"},
}


def initial_state(kind: str, seed: int) -> Dict[str, np.ndarray]:
    dg.manual_seed(seed)
    model = WORKLOADS[kind]["make"]()
    return {k: np.array(v.numpy(), copy=True) for k, v in model.state_dict().items()}


def fresh_model(kind: str, state: Dict[str, np.ndarray]):
    model = WORKLOADS[kind]["make"]()
    model.load_state_dict({k: dg.tensor(v.copy()) for k, v in state.items()})
    model.train()
    return model, dg.optim.SGD(model.parameters(), lr=LR)


# -- duograph contenders -----------------------------------------------------------------------
def eager_step(kind: str, state, x: np.ndarray, y: np.ndarray) -> Callable[[], object]:
    model, opt = fresh_model(kind, state)
    xt, yt = dg.tensor(x), dg.tensor(y)

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step


def graph_step(kind: str, state, x: np.ndarray, y: np.ndarray, passes: str):
    """(step, executable, compile seconds) for one static training-step graph."""
    model, opt = fresh_model(kind, state)
    g = dg.Graph(f"{kind}_train_step")
    with g:
        xv = dg.placeholder("x", ("N",) + WORKLOADS[kind]["feature"])
        yv = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(xv), yv)
        opt.minimize(loss)
    t0 = time.perf_counter()
    exe = g.compile(outputs=[loss], passes=passes)
    seconds = time.perf_counter() - t0

    def step():
        return exe(x=x, y=y)[0]
    return step, exe, seconds


def memory_figures(exe, batch: int) -> dict:
    """Arena, lower bound and no-reuse bytes: ``exe.memory_plan`` (the plan its last run
    used) when the executable is planned, else the plan the planner makes for it."""
    plan = getattr(exe, "memory_plan", None)
    source = "exe.memory_plan"
    if plan is None:
        plan = plan_memory(exe.graph, shapes={"N": batch}, nodes=exe.nodes,
                           outputs=exe.outputs)
        source = "plan_memory (not planned at run time)"
    return {"source": source, "arena_bytes": int(plan.arena_bytes),
            "lower_bound_bytes": int(plan.lower_bound_bytes),
            "no_reuse_bytes": int(plan.no_reuse_bytes),
            "arena_vs_lower_bound": plan.arena_bytes / max(plan.lower_bound_bytes, 1),
            "arena_vs_no_reuse": plan.arena_bytes / max(plan.no_reuse_bytes, 1)}


# -- hand-written numpy ------------------------------------------------------------------------
class NumpyLoss:
    """Mean cross-entropy of logits (B, C) and its gradient, into preallocated buffers."""

    def __init__(self, batch: int, classes: int):
        self.probs = np.empty((batch, classes), F32)    # becomes d loss / d logits
        self.flat = self.probs.reshape(-1)
        self.row_max = np.empty((batch, 1), F32)
        self.row_sum = np.empty((batch, 1), F32)
        self.picked = np.empty(batch, F32)
        self.row_base = np.arange(batch, dtype=np.int64) * classes
        self.index = np.empty(batch, np.int64)
        self.inv_batch = F32(1.0 / batch)

    def forward_backward(self, logits: np.ndarray, y: np.ndarray) -> float:
        p = self.probs
        np.max(logits, axis=1, keepdims=True, out=self.row_max)
        np.subtract(logits, self.row_max, out=p)
        np.add(self.row_base, y, out=self.index)
        np.take(self.flat, self.index, out=self.picked)          # shifted logit of the target
        np.exp(p, out=p)
        np.sum(p, axis=1, keepdims=True, out=self.row_sum)
        np.divide(p, self.row_sum, out=p)                          # softmax
        np.log(self.row_sum, out=self.row_sum)
        loss = (float(self.row_sum.sum()) - float(self.picked.sum())) * float(self.inv_batch)
        np.take(self.flat, self.index, out=self.picked)
        np.subtract(self.picked, F32(1.0), out=self.picked)
        np.put(self.flat, self.index, self.picked)                 # softmax - one_hot
        np.multiply(p, self.inv_batch, out=p)
        return loss


def sgd_update(params: List[np.ndarray], grads: List[np.ndarray], lr: F32) -> None:
    for p, g in zip(params, grads):
        np.multiply(g, lr, out=g)
        np.subtract(p, g, out=p)


class NumpyMLP:
    """The MLP step by hand: Linear layers ``x @ W.T + b`` (W as duograph's (out, in)),
    ReLU between them, mean cross-entropy, SGD. No allocation per step but scalars."""

    def __init__(self, state: Dict[str, np.ndarray], batch: int, lr: float = LR):
        names = sorted({k.split(".")[0] for k in state}, key=int)
        self.W = [state[f"{n}.weight"].copy() for n in names]
        self.b = [state[f"{n}.bias"].copy() for n in names]
        widths = [w.shape[0] for w in self.W]
        self.z = [np.empty((batch, n), F32) for n in widths]        # z[-1]: the logits
        self.a = [np.empty((batch, n), F32) for n in widths[:-1]]   # ReLU outputs
        self.mask = [np.empty((batch, n), bool) for n in widths[:-1]]
        self.gW = [np.empty_like(w) for w in self.W]
        self.gb = [np.empty_like(b) for b in self.b]
        self.loss = NumpyLoss(batch, widths[-1])
        self.lr = F32(lr)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        h, last = x, len(self.W) - 1
        for i, (w, b) in enumerate(zip(self.W, self.b)):
            np.matmul(h, w.T, out=self.z[i])
            np.add(self.z[i], b, out=self.z[i])
            if i < last:
                np.greater(self.z[i], 0, out=self.mask[i])
                h = np.maximum(self.z[i], 0, out=self.a[i])
        loss = self.loss.forward_backward(self.z[last], y)
        dz = self.loss.probs
        for i in range(last, -1, -1):
            np.matmul(dz.T, x if i == 0 else self.a[i - 1], out=self.gW[i])
            np.sum(dz, axis=0, out=self.gb[i])
            if i > 0:
                da = self.z[i - 1]               # z[i-1] is dead: reuse it for d a[i-1]
                np.matmul(dz, self.W[i], out=da)
                dz = np.multiply(da, self.mask[i - 1], out=da)
        sgd_update(self.W + self.b, self.gW + self.gb, self.lr)
        return loss


class NumpyCNN:
    """The digits CNN step by hand, NHWC inside, convolutions as im2col + one GEMM.

    conv 3x3 pad 1 (1->16) -> BatchNorm (batch statistics, running statistics updated)
    -> ReLU -> max pool 2 -> conv 3x3 pad 1 (16->32) -> ReLU -> max pool 2 -> flatten ->
    Linear(128, 10). The parameters are kept in GEMM-friendly layouts: conv weights as
    (out, kh*kw*in), the Linear's columns permuted from CHW to HWC order.
    """

    def __init__(self, state: Dict[str, np.ndarray], batch: int, lr: float = LR):
        B = self.batch = batch
        self.w1 = state["0.weight"].transpose(0, 2, 3, 1).reshape(16, 9).copy()
        self.b1 = state["0.bias"].copy()
        self.gamma, self.beta = state["1.weight"].copy(), state["1.bias"].copy()
        self.running_mean = state["1.running_mean"].copy()
        self.running_var = state["1.running_var"].copy()
        self.w2 = state["4.weight"].transpose(0, 2, 3, 1).reshape(32, 144).copy()
        self.b2 = state["4.bias"].copy()
        self.w3 = state["8.weight"].reshape(10, 32, 2, 2).transpose(0, 2, 3, 1).reshape(
            10, 128).copy()
        self.b3 = state["8.bias"].copy()
        self.params = [self.w1, self.b1, self.gamma, self.beta, self.w2, self.b2, self.w3,
                       self.b3]
        self.grads = [np.empty_like(p) for p in self.params]
        self.lr, self.eps, self.momentum = F32(lr), F32(1e-5), F32(0.1)
        e = np.empty
        # conv1 + batch norm + relu + pool, on B*64 rows of 16 channels
        self.pad1 = np.zeros((B, 10, 10, 1), F32)
        self.cols1 = e((B, 8, 8, 3, 3, 1), F32)
        self.z1 = e((B * 64, 16), F32)
        self.mean1, self.var1, self.inv1 = e(16, F32), e(16, F32), e(16, F32)
        self.tmp16, self.tmp16b = e(16, F32), e(16, F32)
        self.xhat1 = e((B * 64, 16), F32)
        self.bn1 = e((B * 64, 16), F32)
        self.relu1 = e((B * 64, 16), bool)
        self.a1 = e((B * 64, 16), F32)
        self.p1 = e((B, 4, 4, 16), F32)
        self.pool1 = e((B, 4, 2, 4, 2, 16), bool)
        # conv2 + relu + pool, on B*16 rows of 32 channels
        self.pad2 = np.zeros((B, 6, 6, 16), F32)
        self.cols2 = e((B, 4, 4, 3, 3, 16), F32)
        self.z2 = e((B * 16, 32), F32)
        self.relu2 = e((B * 16, 32), bool)
        self.a2 = e((B * 16, 32), F32)
        self.p2 = e((B, 2, 2, 32), F32)
        self.pool2 = e((B, 2, 2, 2, 2, 32), bool)
        self.logits = e((B, 10), F32)
        self.loss = NumpyLoss(B, 10)
        # backward
        self.dp2 = e((B, 2, 2, 32), F32)
        self.dz2 = e((B * 16, 32), F32)
        self.dcols2 = e((B, 4, 4, 3, 3, 16), F32)
        self.dpad2 = e((B, 6, 6, 16), F32)
        self.dz1 = e((B * 64, 16), F32)
        self.dtmp = e((B * 64, 16), F32)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        B = self.batch
        # conv1 (one input channel: NCHW (B,1,8,8) is NHWC (B,8,8,1))
        np.copyto(self.pad1[:, 1:9, 1:9, :], x.reshape(B, 8, 8, 1))
        np.copyto(self.cols1, sliding_window_view(self.pad1, (3, 3), axis=(1, 2))
                  .transpose(0, 1, 2, 4, 5, 3))
        cols1 = self.cols1.reshape(B * 64, 9)
        np.matmul(cols1, self.w1.T, out=self.z1)
        np.add(self.z1, self.b1, out=self.z1)
        # batch norm, training mode
        n = B * 64
        np.mean(self.z1, axis=0, out=self.mean1)
        np.subtract(self.z1, self.mean1, out=self.xhat1)                # centred
        np.multiply(self.xhat1, self.xhat1, out=self.bn1)
        np.mean(self.bn1, axis=0, out=self.var1)
        np.add(self.var1, self.eps, out=self.inv1)
        np.sqrt(self.inv1, out=self.inv1)
        np.divide(F32(1.0), self.inv1, out=self.inv1)
        np.multiply(self.xhat1, self.inv1, out=self.xhat1)
        np.multiply(self.xhat1, self.gamma, out=self.bn1)
        np.add(self.bn1, self.beta, out=self.bn1)
        m = self.momentum
        np.multiply(self.running_mean, F32(1.0) - m, out=self.running_mean)
        np.multiply(self.mean1, m, out=self.tmp16)
        np.add(self.running_mean, self.tmp16, out=self.running_mean)
        np.multiply(self.running_var, F32(1.0) - m, out=self.running_var)
        np.multiply(self.var1, F32(m * n / (n - 1)), out=self.tmp16)
        np.add(self.running_var, self.tmp16, out=self.running_var)
        # relu, max pool 2x2
        np.greater(self.bn1, 0, out=self.relu1)
        np.maximum(self.bn1, 0, out=self.a1)
        a1 = self.a1.reshape(B, 4, 2, 4, 2, 16)
        np.max(a1, axis=(2, 4), out=self.p1)
        np.equal(a1, self.p1[:, :, None, :, None, :], out=self.pool1)
        # conv2, relu, max pool 2x2
        np.copyto(self.pad2[:, 1:5, 1:5, :], self.p1)
        np.copyto(self.cols2, sliding_window_view(self.pad2, (3, 3), axis=(1, 2))
                  .transpose(0, 1, 2, 4, 5, 3))
        cols2 = self.cols2.reshape(B * 16, 144)
        np.matmul(cols2, self.w2.T, out=self.z2)
        np.add(self.z2, self.b2, out=self.z2)
        np.greater(self.z2, 0, out=self.relu2)
        np.maximum(self.z2, 0, out=self.a2)
        a2 = self.a2.reshape(B, 2, 2, 2, 2, 32)
        np.max(a2, axis=(2, 4), out=self.p2)
        np.equal(a2, self.p2[:, :, None, :, None, :], out=self.pool2)
        flat = self.p2.reshape(B, 128)
        np.matmul(flat, self.w3.T, out=self.logits)
        np.add(self.logits, self.b3, out=self.logits)
        loss = self.loss.forward_backward(self.logits, y)
        # backward: linear
        gw1, gb1, ggamma, gbeta, gw2, gb2, gw3, gb3 = self.grads
        dlogits = self.loss.probs
        np.matmul(dlogits.T, flat, out=gw3)
        np.sum(dlogits, axis=0, out=gb3)
        np.matmul(dlogits, self.w3, out=self.dp2.reshape(B, 128))
        # pool2, relu2
        dz2 = self.dz2.reshape(B, 2, 2, 2, 2, 32)
        np.multiply(self.pool2, self.dp2[:, :, None, :, None, :], out=dz2)
        np.multiply(self.dz2, self.relu2, out=self.dz2)
        # conv2: weight, bias, then the input gradient by col2im
        np.matmul(self.dz2.T, cols2, out=gw2)
        np.sum(self.dz2, axis=0, out=gb2)
        np.matmul(self.dz2, self.w2, out=self.dcols2.reshape(B * 16, 144))
        self.dpad2.fill(0.0)
        for i in range(3):
            for j in range(3):
                window = self.dpad2[:, i:i + 4, j:j + 4, :]
                np.add(window, self.dcols2[:, :, :, i, j, :], out=window)
        # pool1 (dp1 is the inside of dpad2), relu1
        dbn = self.dz1.reshape(B, 4, 2, 4, 2, 16)
        np.multiply(self.pool1, self.dpad2[:, 1:5, None, 1:5, None, :], out=dbn)
        np.multiply(self.dz1, self.relu1, out=self.dz1)
        # batch norm: dx = inv/n * (n*dxhat - sum(dxhat) - xhat*sum(dxhat*xhat))
        np.sum(self.dz1, axis=0, out=gbeta)
        np.multiply(self.dz1, self.xhat1, out=self.dtmp)
        np.sum(self.dtmp, axis=0, out=ggamma)
        np.multiply(self.dz1, self.gamma, out=self.dz1)                 # dxhat
        np.multiply(gbeta, self.gamma, out=self.tmp16)                  # sum(dxhat) / 1
        np.multiply(ggamma, self.gamma, out=self.tmp16b)                # sum(dxhat*xhat)
        np.multiply(self.xhat1, self.tmp16b, out=self.dtmp)
        np.add(self.dtmp, self.tmp16, out=self.dtmp)
        np.multiply(self.dtmp, F32(1.0 / n), out=self.dtmp)
        np.subtract(self.dz1, self.dtmp, out=self.dz1)
        np.multiply(self.dz1, self.inv1, out=self.dz1)
        # conv1: weight and bias only (the input needs no gradient)
        np.matmul(self.dz1.T, cols1, out=gw1)
        np.sum(self.dz1, axis=0, out=gb1)
        sgd_update(self.params, self.grads, self.lr)
        return loss


# -- JAX ---------------------------------------------------------------------------------------
def jax_step(kind: str, state: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """A jitted training step with donated parameters; None when jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except ImportError:
        return None

    def cross_entropy(logits, labels):
        logp = jax.nn.log_softmax(logits, axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def linear(h, w, b):
        return h @ w.T + b

    if kind == "mlp":
        names = sorted({k.split(".")[0] for k in state}, key=int)
        params = {k: jnp.asarray(state[k]) for n in names for k in (f"{n}.weight",
                                                                      f"{n}.bias")}

        def loss_fn(p, xb, yb):
            h = xb
            for i, n in enumerate(names):
                h = linear(h, p[f"{n}.weight"], p[f"{n}.bias"])
                if i < len(names) - 1:
                    h = jax.nn.relu(h)
            return cross_entropy(h, yb), {}
        stats = {}
    else:
        trainable = ("0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias",
                     "8.weight", "8.bias")
        params = {k: jnp.asarray(state[k]) for k in trainable}
        stats = {k: jnp.asarray(state[k]) for k in ("1.running_mean", "1.running_var")}

        def conv(h, w, b):
            out = lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)),
                                           dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return out + b[None, :, None, None]

        def pool(h):
            return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

        def loss_fn(p, xb, yb):
            h = conv(xb, p["0.weight"], p["0.bias"])
            mean = h.mean(axis=(0, 2, 3))
            centred = h - mean[None, :, None, None]
            var = (centred * centred).mean(axis=(0, 2, 3))
            h = centred * lax.rsqrt(var + 1e-5)[None, :, None, None]
            h = h * p["1.weight"][None, :, None, None] + p["1.bias"][None, :, None, None]
            h = pool(jax.nn.relu(h))
            h = pool(jax.nn.relu(conv(h, p["4.weight"], p["4.bias"])))
            h = linear(h.reshape(h.shape[0], -1), p["8.weight"], p["8.bias"])
            return cross_entropy(h, yb), {"mean": mean, "var": var}

    count = x.shape[0] * (64 if kind == "cnn" else 1)

    def step(p, s, xb, yb):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, xb, yb)
        new_p = {k: p[k] - LR * grads[k] for k in p}
        new_s = dict(s)
        if aux:
            new_s["1.running_mean"] = s["1.running_mean"] * 0.9 + aux["mean"] * 0.1
            new_s["1.running_var"] = (s["1.running_var"] * 0.9
                                      + aux["var"] * (count / (count - 1)) * 0.1)
        return loss, new_p, new_s

    jitted = jax.jit(step, donate_argnums=(0, 1))
    xj, yj = jax.device_put(jnp.asarray(x)), jax.device_put(jnp.asarray(y))
    holder = {"p": params, "s": stats}

    def run():
        loss, holder["p"], holder["s"] = jitted(holder["p"], holder["s"], xj, yj)
        return loss.block_until_ready()
    return run


# -- PyTorch eager ------------------------------------------------------------------------------
def torch_step(kind: str, state: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """PyTorch's eager training step on the same model and weights (``torch.nn`` modules,
    ``loss.backward()``, ``torch.optim.SGD``); None when torch is not installed. Its
    intra-op threads are whatever ``--torch-threads`` set (default 1, as BLAS here)."""
    try:
        import torch
    except ImportError:
        return None
    tnn = torch.nn
    if kind == "mlp":
        model = tnn.Sequential(tnn.Linear(784, 256), tnn.ReLU(), tnn.Linear(256, 256),
                               tnn.ReLU(), tnn.Linear(256, 10))
    else:
        model = tnn.Sequential(
            tnn.Conv2d(1, 16, 3, padding=1), tnn.BatchNorm2d(16), tnn.ReLU(),
            tnn.MaxPool2d(2), tnn.Conv2d(16, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
            tnn.Flatten(), tnn.Linear(32 * 2 * 2, 10))
    own = model.state_dict()
    model.load_state_dict({k: torch.tensor(np.array(state[k])).to(own[k].dtype)
                           if k in state else own[k] for k in own})
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    cross_entropy = torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad()
        loss = cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


# -- timing ------------------------------------------------------------------------------------
def measure(cands: Dict[str, Callable], rounds: int, min_round_s: float) -> Dict[str, dict]:
    """Best and median seconds per call, the candidates interleaved round by round.

    Each candidate is called ``number`` times per round, enough for ``min_round_s`` of work
    (from a warm-up timing), so fast steps are not lost in timer noise.
    """
    number = {}
    for name, fn in cands.items():
        fn()
        t0 = time.perf_counter()
        fn()
        once = time.perf_counter() - t0
        number[name] = max(1, min(1000, math.ceil(min_round_s / max(once, 1e-7))))
    times: Dict[str, List[float]] = {k: [] for k in cands}
    gc.collect()
    for _ in range(rounds):
        for name, fn in cands.items():
            k = number[name]
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            times[name].append((time.perf_counter() - t0) / k)
    return {k: {"best": min(v), "median": float(np.median(v)), "calls_per_round": number[k]}
            for k, v in times.items()}


def _scalar(value) -> float:
    if hasattr(value, "item"):
        return float(value.item())
    return float(np.asarray(value))


# -- one workload at one batch size ------------------------------------------------------------
def run_workload(kind: str, batch: int, rounds: int, min_round_s: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch,) + WORKLOADS[kind]["feature"]).astype(F32)
    if kind == "cnn":
        x = np.abs(x) * F32(0.5)             # digits pixels are non-negative
    y = rng.integers(0, 10, batch).astype(np.int64)
    state = initial_state(kind, seed)
    steps: Dict[str, Callable] = {"eager": eager_step(kind, state, x, y)}
    graph: Dict[str, dict] = {}
    for mode in GRAPH_MODES:
        step, exe, seconds = graph_step(kind, state, x, y, mode)
        steps[mode] = step
        graph[mode] = {"exe": exe, "compile_s": seconds}
    hand = (NumpyMLP if kind == "mlp" else NumpyCNN)(state, batch)
    steps["numpy"] = lambda: hand.step(x, y)
    jstep = jax_step(kind, state, x, y)
    if jstep is not None:
        steps["jax"] = jstep
    tstep = torch_step(kind, state, x, y)
    if tstep is not None:
        steps["torch"] = tstep
    res: dict = {"batch": batch, "losses": {}, "contenders": {}}
    # correctness first: the losses of two steps from the same weights (the second one
    # checks the gradients and the update of the first)
    for name, fn in steps.items():
        t0 = time.perf_counter()
        res["losses"][name] = [_scalar(fn())]
        if name in graph:
            graph[name]["first_run_s"] = time.perf_counter() - t0
        res["losses"][name].append(_scalar(fn()))
    ref = res["losses"]["numpy"]
    bad = {k: v for k, v in res["losses"].items()
           if not np.allclose(v, ref, rtol=RTOL, atol=1e-6)}
    res["correct"] = not bad
    res["mismatch"] = bad
    if bad:
        return res
    timing = measure(steps, rounds, min_round_s)
    for name, t in timing.items():
        t["vs_numpy"] = t["best"] / timing["numpy"]["best"]
        t["vs_numpy_median"] = t["median"] / timing["numpy"]["median"]
        t["vs_O0"] = t["best"] / timing["O0"]["best"]
        t["vs_eager"] = t["best"] / timing["eager"]["best"]
        res["contenders"][name] = t
    for mode, info in graph.items():
        exe = info["exe"]
        stats = getattr(exe, "pass_stats", []) or []
        res["contenders"][mode].update({
            "kernels": exe.kernel_count,
            "nodes": len(exe.nodes),
            "compile_s": info["compile_s"],
            "first_run_s": info["first_run_s"],
            "planned": bool(getattr(exe, "planned", False)),
            "passes_s": sum(s.seconds for s in stats),
            "passes": [{"name": s.name, "nodes_before": s.nodes_before,
                        "nodes_after": s.nodes_after, "kernels_before": s.kernels_before,
                        "kernels_after": s.kernels_after, "seconds": s.seconds,
                        "changed": s.changed} for s in stats],
            "pass_report": getattr(exe, "pass_report", ""),
            "memory": memory_figures(exe, batch),
        })
    return res


# -- the fused elementwise chain ---------------------------------------------------------------
C_GELU = math.sqrt(2.0 / math.pi)


def chain_numpy(x: np.ndarray) -> np.ndarray:
    """8 elementwise ops, numpy op by op: x * (1 + tanh(c * (x + 0.044715 * x^3)))."""
    y = x * x
    y = y * x
    y = y * F32(0.044715)
    y = x + y
    y = y * F32(C_GELU)
    y = np.tanh(y)
    y = y + F32(1.0)
    return y * x


def chain_graph():
    g = dg.Graph("chain8")
    with g:
        x = dg.placeholder("x", ("N",))
        y = x * x
        y = y * x
        y = y * 0.044715
        y = x + y
        y = y * C_GELU
        y = dg.tanh(y)
        y = y + 1.0
        y = y * x
    return g, y


def run_chain(size: int, rounds: int, seed: int) -> dict:
    x = np.random.default_rng(seed).standard_normal(size).astype(F32)
    g, y = chain_graph()
    o0 = g.compile(outputs=[y], passes="O0")
    o2 = g.compile(outputs=[y], passes="O2")
    ref = chain_numpy(x)
    err = float(np.max(np.abs(o2(x=x)[0] - ref)))
    cands = {"numpy op by op": lambda: chain_numpy(x), "O0": lambda: o0(x=x),
             "O2 fused": lambda: o2(x=x)}
    t = measure(cands, rounds, 0.0)
    base = t["numpy op by op"]["best"]
    for r in t.values():
        r["speedup_vs_numpy"] = base / r["best"]
    return {"size": size, "ops": 8, "kernels_O0": o0.kernel_count,
            "kernels_O2": o2.kernel_count, "max_abs_err": err, "timing": t}


# -- report ------------------------------------------------------------------------------------
def targets(r: dict) -> List[dict]:
    """The issue's targets, each as {name, ok, detail}."""
    out = []

    def add(name, ok, detail):
        out.append({"name": name, "ok": bool(ok), "detail": detail})

    for kind, per_batch in r["workloads"].items():
        for batch, w in per_batch.items():
            c = w.get("contenders")
            if not c:
                continue
            mem = c["O2"]["memory"]
            tag = f"{kind} B={batch}"
            add(f"{tag}: O2 arena <= 1.05 x lower bound",
                mem["arena_vs_lower_bound"] <= 1.05,
                f"{mem['arena_bytes']:,} B / {mem['lower_bound_bytes']:,} B = "
                f"{mem['arena_vs_lower_bound']:.3f}")
            add(f"{tag}: O2 arena <= 0.5 x no-reuse", mem["arena_vs_no_reuse"] <= 0.5,
                f"{mem['arena_bytes']:,} B / {mem['no_reuse_bytes']:,} B = "
                f"{mem['arena_vs_no_reuse']:.3f}")
            o2 = c["O2"]
            add(f"{tag}: O2 step <= 1.0 x numpy", o2["vs_numpy"] <= 1.0,
                f"{o2['best'] * 1e3:.3f} ms vs {c['numpy']['best'] * 1e3:.3f} ms = "
                f"{o2['vs_numpy']:.2f} (median {o2['vs_numpy_median']:.2f})")
            add(f"{tag}: O2 step faster than eager", o2["vs_eager"] < 1.0,
                f"{o2['best'] * 1e3:.3f} ms vs {c['eager']['best'] * 1e3:.3f} ms = "
                f"{o2['vs_eager']:.2f}")
            if "torch" in c:
                ratio = o2["best"] / c["torch"]["best"]
                add(f"{tag}: O2 step <= 1.0 x PyTorch eager", ratio <= 1.0,
                    f"{o2['best'] * 1e3:.3f} ms vs {c['torch']['best'] * 1e3:.3f} ms = "
                    f"{ratio:.2f}")
            if kind == "mlp" and int(batch) == 512 and "jax" in c:
                ratio = o2["best"] / c["jax"]["best"]
                native = r["blas"]["openblas_coretype"] is None
                add(f"{tag}: O2 step <= 1.1 x JAX jit"
                    + ("" if native else " (target is for --blas native)"), ratio <= 1.1,
                    f"{o2['best'] * 1e3:.3f} ms vs {c['jax']['best'] * 1e3:.3f} ms = "
                    f"{ratio:.2f}; BLAS {_blas_short(r['blas'])}")
    ch = r.get("chain")
    if ch:
        s = ch["timing"]["O2 fused"]["speedup_vs_numpy"]
        add(f"chain of 8 elementwise ops on {ch['size']:,} float32: O2 >= 3x unfused numpy",
            s >= 3.0, f"{ch['timing']['O2 fused']['best'] * 1e3:.2f} ms vs "
            f"{ch['timing']['numpy op by op']['best'] * 1e3:.2f} ms = {s:.2f}x")
    return out


def _blas_short(b: dict) -> str:
    libs = ", ".join(f"{lib['internal_api']} {lib['version']} {lib['architecture']} "
                     f"x{lib['num_threads']}" for lib in b["libraries"]) or "unknown"
    return f"{libs}, OPENBLAS_CORETYPE={b['openblas_coretype'] or '(unset)'}"


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.3f}"


def report(r: dict) -> str:
    b = r["blas"]
    lines = [f"passes benchmark: training steps side by side ({r['cpus']} cpus, "
             f"{r['rounds']} rounds, python {r['python']}, numpy {r['numpy']}"
             + (f", jax {r['jax']}" if r.get("jax") else ", jax not installed") + ")",
             f"BLAS setting: --blas {b['mode']}; OPENBLAS_CORETYPE="
             f"{b['openblas_coretype'] or '(unset)'}",
             "BLAS in use (threadpoolctl): " + (", ".join(
                 f"{lib['internal_api']} {lib['version']}, architecture {lib['architecture']}"
                 f", {lib['num_threads']} threads ({lib['threading_layer']})"
                 for lib in b["libraries"]) or b.get("note", "none found")),
             "(JAX multiplies matrices with XLA's own kernels: the BLAS setting does not "
             "touch it)",
             f"load average (1 min) at start {r['loadavg_start']}, at end {r['loadavg_end']}"
             " (other work on the machine makes the figures noisy)"]
    for kind, per_batch in r["workloads"].items():
        for batch, w in per_batch.items():
            lines += ["", f"{WORKLOADS[kind]['title']}, batch {batch}: time per training "
                      "step (forward, backward, SGD)"]
            if not w["correct"]:
                lines.append("  LOSSES DISAGREE: " + ", ".join(
                    f"{k} {v}" for k, v in w["losses"].items()))
                continue
            lines.append("  losses of steps 1 and 2 agree (rtol 1e-4): " + ", ".join(
                f"{k} {v[1]:.6f}" for k, v in w["losses"].items()))
            lines.append(f"  {'contender':<10}{'best ms':>10}{'median ms':>11}"
                         f"{'/numpy':>8}{'(med)':>7}{'/O0':>7}{'/eager':>8}{'kernels':>9}"
                         f"{'compile ms':>12}{'passes ms':>11}")
            for name, c in w["contenders"].items():
                extra = ""
                if "kernels" in c:
                    extra = (f"{c['kernels']:>9}{c['compile_s'] * 1e3:12.2f}"
                             f"{c['passes_s'] * 1e3:11.2f}")
                lines.append(f"  {name:<10}{c['best'] * 1e3:10.3f}{c['median'] * 1e3:11.3f}"
                             f"{c['vs_numpy']:8.2f}{c['vs_numpy_median']:7.2f}"
                             f"{c['vs_O0']:7.2f}{c['vs_eager']:8.2f}{extra}")
            lines.append(f"  memory (MiB)  {'arena':>9}{'lower bd':>10}{'no reuse':>10}"
                         f"{'arena/lb':>10}{'arena/no-reuse':>16}  source")
            for mode in GRAPH_MODES:
                m = w["contenders"][mode]["memory"]
                lines.append(f"  {mode:<13}{_mib(m['arena_bytes']):>10}"
                             f"{_mib(m['lower_bound_bytes']):>10}"
                             f"{_mib(m['no_reuse_bytes']):>10}"
                             f"{m['arena_vs_lower_bound']:10.3f}"
                             f"{m['arena_vs_no_reuse']:16.3f}  {m['source']}")
    if r.get("pass_report"):
        kind, batch, text = r["pass_report"]
        lines += ["", f"O2 pass report ({kind}, PassManager.report()):"]
        lines += ["  " + t for t in text.splitlines()]
    ch = r.get("chain")
    if ch:
        lines += ["", f"fused chain of {ch['ops']} elementwise ops on float32[{ch['size']:,}]"
                  f" (x * (1 + tanh(c * (x + 0.044715 x^3)))): kernels O0 {ch['kernels_O0']}"
                  f", O2 {ch['kernels_O2']}; max |O2 - numpy| {ch['max_abs_err']:.1e}"]
        for name, t in ch["timing"].items():
            lines.append(f"  {name:<16}{t['best'] * 1e3:10.3f} ms{t['median'] * 1e3:10.3f} ms"
                         f" (median){t['speedup_vs_numpy']:8.2f}x vs numpy op by op")
    lines += ["", "targets (issues 5 and 11):"]
    if not r["correct"]:
        lines.append("  (not measured where the losses disagree: see above)")
    for t in r["targets"]:
        lines.append(f"  {'PASS ' if t['ok'] else 'SHORT'} {t['name']}: {t['detail']}")
    return "\n".join(lines)


def profile_o2(kind: str, batch: int, seed: int, steps: int = 200) -> str:
    """cProfile of the O2 step: where the time goes (top functions by own time)."""
    import cProfile
    import io
    import pstats
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch,) + WORKLOADS[kind]["feature"]).astype(F32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    step, _, _ = graph_step(kind, initial_state(kind, seed), x, y, "O2")
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
    return f"cProfile of {steps} O2 steps, {kind} batch {batch}:\n" + out.getvalue()


def run(batches: List[int], kinds: List[str], rounds: int, chain_size: int, seed: int,
        blas_mode: str, min_round_s: float) -> dict:
    r: dict = {"rounds": rounds, "cpus": os.cpu_count(), "python": platform.python_version(),
               "loadavg_start": _loadavg(),
               "numpy": np.__version__, "batches": batches, "seed": seed, "lr": LR,
               "blas": blas_info(blas_mode), "workloads": {}}
    try:
        import jax
        r["jax"] = jax.__version__
    except ImportError:
        r["jax"] = None
    for kind in kinds:
        r["workloads"][kind] = {}
        for batch in batches:
            r["workloads"][kind][str(batch)] = run_workload(kind, batch, rounds, min_round_s,
                                                            seed)
    r["correct"] = all(w["correct"] for per in r["workloads"].values() for w in per.values())
    for kind, per in r["workloads"].items():
        for batch, w in per.items():
            if w.get("contenders"):
                r["pass_report"] = (kind, batch, w["contenders"]["O2"]["pass_report"])
                break
        if r.get("pass_report"):
            break
    if chain_size:
        r["chain"] = run_chain(chain_size, rounds, seed)
    r["targets"] = targets(r)
    r["loadavg_end"] = _loadavg()
    return r


def _loadavg() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="batch sizes (default 32 256 512; --quick: 32)")
    p.add_argument("--workload", nargs="+", choices=sorted(WORKLOADS), default=["mlp", "cnn"])
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 30)")
    p.add_argument("--chain-size", type=int, default=None,
                   help="elements of the fused-chain figure (default 4M; 0 skips it)")
    p.add_argument("--blas", default="env", metavar="env|native|NAME",
                   help="env: keep the environment; native: re-run without "
                        "OPENBLAS_CORETYPE; NAME: re-run with OPENBLAS_CORETYPE=NAME")
    p.add_argument("--blas-threads", type=int, default=None, metavar="N",
                   help="limit BLAS to N threads for the whole run (threadpoolctl); "
                        "default: as the environment gives")
    p.add_argument("--quick", action="store_true", help="a smoke test: batch 32, 3 rounds, "
                   "a small chain")
    p.add_argument("--torch-threads", type=int, default=1, metavar="N",
                   help="torch.set_num_threads for the PyTorch eager contender (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true",
                   help="also print a cProfile of the O2 step at the largest batch")
    p.add_argument("--json", help="also write the raw figures (seconds, bytes) to this file")
    a = p.parse_args(argv)
    blas_reexec(a.blas, argv)
    try:
        import torch
        torch.set_num_threads(a.torch_threads)
    except ImportError:
        pass
    batches = a.batch or ([32] if a.quick else [32, 256, 512])
    rounds = a.rounds or (3 if a.quick else 30)
    chain = a.chain_size if a.chain_size is not None else (1 << 18 if a.quick else 1 << 22)
    limit = contextlib.nullcontext()
    if a.blas_threads:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(limits=a.blas_threads, user_api="blas")
    with limit:
        r = run(batches, a.workload, rounds, chain, a.seed, a.blas,
                min_round_s=0.002 if a.quick else 0.02)
        r["blas_threads_limit"] = a.blas_threads
        print(report(r))
        if a.profile and r["correct"]:
            print()
            print(profile_o2(a.workload[0], max(batches), a.seed))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2, default=str)
    if not r["correct"]:
        for kind, per in r["workloads"].items():
            for batch, w in per.items():
                if not w["correct"]:
                    print(f"FAIL {kind} batch {batch}: losses disagree with hand-written numpy "
                          f"(rtol {RTOL}): {w['mismatch']} vs numpy {w['losses']['numpy']}")
        sys.exit(1)


if __name__ == "__main__":
    main()
