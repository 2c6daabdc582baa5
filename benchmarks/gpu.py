"""duograph on the GPU against PyTorch CUDA (and JAX), side by side in one run.

Workloads (float32, all data already on the device; one "step" is what a training loop runs
per batch):

  mlp   training step of 784-512-512-10 (ReLU), cross-entropy, SGD with momentum,
        at B = 32, 128, 512
  cnn   training step of conv(1->16)-relu-pool-conv(16->32)-relu-pool-linear(1568->10)
        on 1x28x28 images, cross-entropy, SGD with momentum, at B = 32, 128
  gelu  the GELU-tanh chain written as 9 elementwise ops, forward, at 64K, 1M and 16M
        elements

Contenders (each timed in interleaved rounds; best of the rounds, per step):

  dg eager         duograph eager tensors on cuda (op by op, the tape, the optimizer)
  dg O2            the step as one graph, compiled at O2 for cuda (fused regions run as
                   generated ElementwiseKernels, one device arena), outputs left on the device
  dg O2+graph      the same executable captured as one CUDA graph, replayed with one launch
  torch eager      PyTorch CUDA eager
  torch.compile    the loss function compiled (default mode) and, as torch's own CUDA-graph
                   replay, mode="reduce-overhead"
  jax jit          the whole step jitted (when JAX sees a GPU)

The duograph models start from the same weights as the torch ones (copied), and the first
losses are compared ("correct"). Ratios are to torch eager; the issue's goals are printed:
O2+graph at most 0.5x torch eager for the MLP at B=32..512 and at most 1.0x for the CNN.

    python benchmarks/gpu.py [--quick] [--rounds 7] [--json out.json]

Needs cupy and a CUDA device (exits with status 2 otherwise).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
import duograph.nn as nn  # noqa: E402

GELU_C = 0.7978845608028654


def _need_cuda():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception as e:  # noqa: BLE001
        print(f"benchmarks/gpu.py needs cupy and a CUDA device: {type(e).__name__}: {e}")
        sys.exit(2)
    print("benchmarks/gpu.py needs a CUDA device: cupy found none")
    sys.exit(2)


# -- timing ---------------------------------------------------------------------------------
def _time(fn: Callable, sync: Callable, iters: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def _calibrate(fn: Callable, sync: Callable, budget: float) -> int:
    t = _time(fn, sync, 3)
    return int(min(2000, max(5, budget / max(t, 1e-7))))


def race(contenders: Dict[str, Callable], syncs: Dict[str, Callable], rounds: int,
         budget: float) -> Dict[str, dict]:
    """Best and median seconds per call of each contender, in interleaved rounds; a
    contender that raises is reported with its error and left out of later rounds."""
    out: Dict[str, dict] = {}
    iters: Dict[str, int] = {}
    live = {}
    for name, fn in contenders.items():
        try:
            for _ in range(3):             # warm-up: compiles, captures, allocations
                fn()
            iters[name] = _calibrate(fn, syncs[name], budget)
            live[name] = fn
        except Exception as e:  # noqa: BLE001 - report and go on: one device run
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
    times: Dict[str, List[float]] = {n: [] for n in live}
    for _ in range(rounds):
        for name, fn in list(live.items()):
            try:
                times[name].append(_time(fn, syncs[name], iters[name]))
            except Exception as e:  # noqa: BLE001
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                live.pop(name)
                traceback.print_exc()
    for name, ts in times.items():
        if name in live and ts:
            out[name] = {"best": min(ts), "median": float(np.median(ts)), "iters": iters[name]}
    return out


# -- models ---------------------------------------------------------------------------------
def dg_model(kind: str):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def torch_model(kind: str, torch, init: dict):
    tnn = torch.nn
    if kind == "mlp":
        m = tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(),
                           tnn.Linear(512, 10))
    else:
        m = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                           tnn.Conv2d(16, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                           tnn.Flatten(), tnn.Linear(32 * 7 * 7, 10))
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in init.items()})
    return m.cuda()


def _init(kind: str) -> dict:
    dg.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in dg_model(kind).state_dict().items()}


def _fresh_dg(kind: str, init: dict):
    m = dg_model(kind)
    m.load_state_dict({k: dg.tensor(v) for k, v in init.items()})
    return m.to("cuda")


def _data(kind: str, batch: int):
    rng = np.random.default_rng(0)
    shape = (batch, 784) if kind == "mlp" else (batch, 1, 28, 28)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def training_contenders(kind: str, batch: int, cupy, lr=0.01, momentum=0.9):
    """name -> step function, name -> sync, and the first loss of each (correctness)."""
    x_np, y_np = _data(kind, batch)
    init = _init(kind)
    fns, syncs, first = {}, {}, {}
    cuda_sync = cupy.cuda.Device().synchronize

    # duograph eager
    m_e = _fresh_dg(kind, init)
    opt_e = dg.optim.SGD(m_e.parameters(), lr=lr, momentum=momentum)
    xe, ye = dg.tensor(x_np, device="cuda"), dg.tensor(y_np, device="cuda")

    def dg_eager():
        opt_e.zero_grad()
        loss = nn.functional.cross_entropy(m_e(xe), ye)
        loss.backward()
        opt_e.step()
        return loss
    first["dg eager"] = lambda: float(dg_eager().item())
    fns["dg eager"], syncs["dg eager"] = dg_eager, cuda_sync

    # duograph graph mode, O2, and O2 captured as a CUDA graph
    def graph_exe():
        m = _fresh_dg(kind, init)
        opt = dg.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
        g = dg.Graph(f"{kind}_step")
        with g:
            x = dg.placeholder("x", x_np.shape)
            y = dg.placeholder("y", y_np.shape, "int64")
            loss = nn.functional.cross_entropy(m(x), y)
            opt.minimize(loss)
        exe = g.compile(outputs=[loss], passes="O2", device="cuda")
        exe.keep_on_device = True            # no device->host copy of the loss per step
        return exe
    feeds = {"x": cupy.asarray(x_np), "y": cupy.asarray(y_np)}
    exe = graph_exe()
    first["dg O2"] = lambda: float(exe(**feeds)[0])
    fns["dg O2"], syncs["dg O2"] = (lambda: exe(**feeds)), cuda_sync
    try:
        from duograph.runtime.cuda import capture
        exe_g = graph_exe()
        step = capture(exe_g, feeds, warmup=1)
        if not step.captured:
            print(f"  {kind} B={batch}: capture fell back: {step.reason}")
        fns["dg O2+graph"] = step.replay
        syncs["dg O2+graph"] = step.synchronize
        first["dg O2+graph"] = None          # (its first step ran inside the warm-up)
    except Exception:  # noqa: BLE001
        traceback.print_exc()

    # PyTorch
    try:
        import torch
        import torch.nn.functional as tF
        if torch.cuda.is_available():
            xt, yt = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()

            def torch_step(model, opt, loss_fn):
                def step():
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(xt, yt)
                    loss.backward()
                    opt.step()
                    return loss
                return step
            for name, mode in (("torch eager", None), ("torch.compile", "default"),
                               ("torch.compile ro", "reduce-overhead")):
                tm = torch_model(kind, torch, init)
                topt = torch.optim.SGD(tm.parameters(), lr=lr, momentum=momentum)
                fn = (lambda x, y, tm=tm: tF.cross_entropy(tm(x), y))
                if mode is not None:
                    fn = torch.compile(fn, mode=mode)
                st = torch_step(tm, topt, fn)
                fns[name], syncs[name] = st, torch.cuda.synchronize
                first[name] = (lambda st=st: float(st().item())) if mode is None else None
    except ImportError:
        pass

    # JAX
    try:
        import jax
        if any(d.platform == "gpu" for d in jax.devices()):
            step, state = jax_step(kind, init, x_np, y_np, lr, momentum)
            holder = {"s": state}

            def jstep():
                holder["s"], loss = step(holder["s"])
                return loss
            fns["jax jit"] = jstep
            syncs["jax jit"] = lambda: jax.block_until_ready(holder["s"])
            first["jax jit"] = lambda: float(jstep())
    except ImportError:
        pass
    return fns, syncs, first


def jax_step(kind, init, x_np, y_np, lr, momentum):
    """A jitted SGD-momentum step of the same model in JAX: (step(state) -> (state, loss),
    initial state)."""
    import jax
    import jax.numpy as jnp
    params = {k: jnp.asarray(v) for k, v in init.items()}
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)

    def dense(p, i, h):
        return h @ p[f"{i}.weight"].T + p[f"{i}.bias"]

    def conv(p, i, h):
        out = jax.lax.conv_general_dilated(h, p[f"{i}.weight"], (1, 1), ((1, 1), (1, 1)),
                                           dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return out + p[f"{i}.bias"][None, :, None, None]

    def pool(h):
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def forward(p, h):
        if kind == "mlp":
            h = jax.nn.relu(dense(p, 0, h))
            h = jax.nn.relu(dense(p, 2, h))
            return dense(p, 4, h)
        h = pool(jax.nn.relu(conv(p, 0, h)))
        h = pool(jax.nn.relu(conv(p, 3, h)))
        return dense(p, 7, h.reshape(h.shape[0], -1))

    def loss_fn(p):
        logits = forward(p, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

    @jax.jit
    def step(state):
        p, v = state
        loss, g = jax.value_and_grad(loss_fn)(p)
        v = jax.tree_util.tree_map(lambda vv, gg: momentum * vv + gg, v, g)
        p = jax.tree_util.tree_map(lambda pp, vv: pp - lr * vv, p, v)
        return (p, v), loss
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return step, (params, zeros)


def gelu_contenders(n: int, cupy):
    x_np = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    fns, syncs = {}, {}
    cuda_sync = cupy.cuda.Device().synchronize
    xe = dg.tensor(x_np, device="cuda")

    def chain(x, tanh):
        return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x)))
    fns["dg eager"] = lambda: chain(xe, dg.tanh)
    g = dg.Graph("gelu")
    with g:
        xp = dg.placeholder("x", (n,))
        yv = chain(xp, dg.tanh)
    exe = g.compile(outputs=[yv], passes="O2", device="cuda")
    exe.keep_on_device = True
    feeds = {"x": cupy.asarray(x_np)}
    fns["dg O2"] = lambda: exe(**feeds)
    try:
        from duograph.runtime.cuda import capture
        step = capture(exe, feeds, warmup=1)
        fns["dg O2+graph"] = step.replay
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    for k in fns:
        syncs[k] = cuda_sync
    want = chain(x_np.astype(np.float64), np.tanh)
    got = np.asarray(cupy.asnumpy(exe(**feeds)[0]), np.float64)
    correct = bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))
    try:
        import torch
        if torch.cuda.is_available():
            xt = torch.from_numpy(x_np).cuda()
            fns["torch eager"] = lambda: chain(xt, torch.tanh)
            cfn = torch.compile(lambda x: chain(x, torch.tanh))
            fns["torch.compile"] = lambda: cfn(xt)
            syncs["torch eager"] = syncs["torch.compile"] = torch.cuda.synchronize
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        if any(d.platform == "gpu" for d in jax.devices()):
            xj = jnp.asarray(x_np)
            jf = jax.jit(lambda x: chain(x, jnp.tanh))
            box = {}

            def jrun():
                box["y"] = jf(xj)
            fns["jax jit"] = jrun
            syncs["jax jit"] = lambda: jax.block_until_ready(box.get("y"))
    except ImportError:
        pass
    return fns, syncs, correct


# -- report ---------------------------------------------------------------------------------
def _table(title: str, res: Dict[str, dict]) -> None:
    base = res.get("torch eager", {}).get("best")
    print(f"\n{title}")
    print(f"  {'contender':<18}{'best us':>12}{'median us':>12}{'vs torch eager':>16}")
    for name, r in res.items():
        if "error" in r:
            print(f"  {name:<18}  error: {r['error'][:70]}")
            continue
        ratio = f"{r['best'] / base:.2f}x" if base else "-"
        r["vs_torch_eager"] = r["best"] / base if base else None
        print(f"  {name:<18}{r['best'] * 1e6:>12.1f}{r['median'] * 1e6:>12.1f}{ratio:>16}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one batch size each, 2 rounds")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.05, help="seconds per timed round")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    cupy = _need_cuda()
    rounds = 2 if a.quick else a.rounds
    dev = cupy.cuda.runtime.getDeviceProperties(0)
    name = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
    print(f"device: {name}; cupy {cupy.__version__}; rounds {rounds}")
    report = {"device": name, "cupy": cupy.__version__, "rounds": rounds, "workloads": {},
              "goals": []}
    batches = {"mlp": [32] if a.quick else [32, 128, 512],
               "cnn": [32] if a.quick else [32, 128]}

    def save():
        if a.json:                    # after each workload: a run cut short keeps the rest
            with open(a.json, "w") as f:
                json.dump(report, f, indent=1, default=str)
    for kind, sizes in batches.items():
        report["workloads"][kind] = {}
        for b in sizes:
            try:
                fns, syncs, first = training_contenders(kind, b, cupy)
            except Exception as e:  # noqa: BLE001 - one device run: report and go on
                traceback.print_exc()
                report["workloads"][kind][str(b)] = {"error": f"{type(e).__name__}: {e}"}
                continue
            losses = {}
            for k, f in first.items():
                if f is not None:
                    try:
                        losses[k] = f()
                    except Exception as e:  # noqa: BLE001
                        losses[k] = f"{type(e).__name__}: {e}"
            ref = losses.get("torch eager")
            correct = {k: (abs(v - ref) <= 1e-3 * max(1.0, abs(ref)))
                       for k, v in losses.items() if isinstance(v, float)
                       and isinstance(ref, float)}
            res = race(fns, syncs, rounds, a.budget)
            _table(f"{kind} training step, B={b} (first losses {losses})", res)
            report["workloads"][kind][str(b)] = {"contenders": res, "first_losses": losses,
                                                 "correct": correct}
            goal = 0.5 if kind == "mlp" else 1.0
            g = res.get("dg O2+graph", {}).get("vs_torch_eager")
            report["goals"].append({"name": f"{kind} B={b}: dg O2+graph <= {goal}x torch "
                                            "eager", "ratio": g,
                                    "ok": (g is not None and g <= goal)})
            save()
    report["workloads"]["gelu"] = {}
    for n in ([1 << 20] if a.quick else [1 << 16, 1 << 20, 1 << 24]):
        try:
            fns, syncs, correct = gelu_contenders(n, cupy)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report["workloads"]["gelu"][str(n)] = {"error": f"{type(e).__name__}: {e}"}
            continue
        res = race(fns, syncs, rounds, a.budget)
        _table(f"fused GELU chain, {n} float32 (dg O2 correct: {correct})", res)
        report["workloads"]["gelu"][str(n)] = {"contenders": res, "correct": correct}
        save()
    print("\ngoals (issue 29):")
    for goal in report["goals"]:
        ratio = "-" if goal["ratio"] is None else f"{goal['ratio']:.2f}x"
        print(f"  [{'ok' if goal['ok'] else 'NO'}] {goal['name']}: {ratio}")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
