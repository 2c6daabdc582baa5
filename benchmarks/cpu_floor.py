"""Issue 24's table in one run: duograph against PyTorch (and JAX where installed) on the CPU,
rounds alternating, with a floor column.

Rows (each against its anchor, ratio = duograph / anchor, best of the rounds):

- ``cnn``: training step, B=64, 1x28x28, conv(16,3)-relu-pool-conv(32,3)-relu-pool-linear,
  SGD: O2 graph and eager against PyTorch eager;
- ``mlp``: training step, MLP 784-256-256-10, B=512, SGD: O2 and eager against PyTorch
  (and JAX jit with donated parameters);
- ``gelu``: the GELU-tanh chain (9 elementwise ops) over 4M float32 at O2 (one fused
  kernel) against JAX jit and PyTorch's ``gelu(approximate="tanh")``;
- ``chain``: a 20-op elementwise chain on 16 floats, one call: O2 executable and
  ``dg.compile(passes="O2")`` against JAX jit (and PyTorch eager), plus ``dg.compile`` with
  its default pipeline (O0: 20 interpreted kernels), each after 1,100 warm-up calls;
- ``imported``: the models of ``imported_models.py`` (ResNet, MobileNetV3-small shapes),
  O0 and O2 against onnxruntime;
- ``transformer``: training step of one TransformerEncoderLayer (d_model 128, 4 heads,
  feed-forward 512, batch 32 x 64 tokens, no dropout), MSE loss, SGD;
- ``lstm``: training step of a one-layer LSTM (64 -> 128, 32 steps, batch 32), MSE loss on
  the outputs, SGD.

The floor column is the step's matmul/convolution FLOPs (counted by PyTorch's
``FlopCounterMode`` on the PyTorch model, forward and backward) at the GEMM rate measured in
this run (numpy float32 512x512x512, best of the rounds): the time a step would take doing
nothing but its products at this BLAS's speed.

Threads: ``--threads N`` (default 1) sets OMP/OPENBLAS/MKL_NUM_THREADS and XLA's flags
before anything is imported, ``torch.set_num_threads(N)`` and onnxruntime's intra-op
threads; ``--pin`` also pins the process to N CPUs (on a shared machine that can cost more
than it saves). The CPU model, the thread settings and the load average are
printed with the table.

``--timer cpu`` times with the process's CPU time instead of the wall clock (on a shared
machine it leaves out the time the cores were given to other processes; meant for
``--threads 1``).

    python benchmarks/cpu_floor.py [--threads 1] [--rounds 7] [--rows cnn mlp ...]
        [--quick] [--timer wall|cpu] [--json out.json] [--jax-site DIR]
"""
from __future__ import annotations

import os
import sys


def _jax_site_from_argv(argv):
    """``--jax-site DIR``: a site-packages directory holding JAX, appended to ``sys.path``
    after duograph is imported. (Putting another virtual environment's site-packages on
    PYTHONPATH instead puts it first: when that environment has its own editable install of
    duograph, its finder module, of the same name, shadows this checkout's, and the run
    measures the other checkout's code. The report prints which duograph ran.)"""
    for i, a in enumerate(argv):
        if a == "--jax-site" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--jax-site="):
            return a.split("=", 1)[1]
    return None


def _threads_from_argv(argv) -> int:
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return 1


# thread settings must be in the environment before numpy, torch or jax load their runtimes
THREADS = _threads_from_argv(sys.argv[1:]) if __name__ == "__main__" else 1
if __name__ == "__main__":
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_name] = str(THREADS)
    if THREADS == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_"
                                   "eigen=false intra_op_parallelism_threads=1").strip()
    if "--pin" in sys.argv[1:] and hasattr(os, "sched_setaffinity"):
        _cpus = sorted(os.sched_getaffinity(0))
        if len(_cpus) > THREADS:
            os.sched_setaffinity(0, _cpus[:THREADS])

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from typing import Callable, Dict, Optional  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import importlib.util  # noqa: E402

import _common  # noqa: E402  (puts the repository root on sys.path)
import duograph as dg  # noqa: E402

JAX_SITE = _jax_site_from_argv(sys.argv[1:]) if __name__ == "__main__" else None
if JAX_SITE:
    sys.path.append(JAX_SITE)


def _bench(name: str):
    """A sibling benchmark module by its path (``passes`` is also an engine folder's name)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", os.path.join(HERE,
                                                                                 name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fusion_bench = _bench("fusion")
imported_models = _bench("imported_models")
passes_bench = _bench("passes")

LR = 0.01
F32 = np.float32
ROWS = ("cnn", "mlp", "gelu", "chain", "imported", "transformer", "lstm")


def _optional(name: str):
    try:
        return __import__(name)
    except ImportError:
        return None


torch = _optional("torch")
jax = _optional("jax")


# -- timing ---------------------------------------------------------------------------------
TIMER = {"clock": time.perf_counter}      # --timer (``_common.TIMERS``)


def measure(cands: Dict[str, Callable], rounds: int, min_round_s: float = 0.05) -> dict:
    """Best seconds per call of each contender, rounds alternating; each round calls a
    contender enough times for ``min_round_s`` of work."""
    return _common.best(_common.alternate(cands, rounds, min_round_s=min_round_s,
                                          timer=TIMER["clock"]))


def gemm_rate(rounds: int) -> float:
    """numpy's float32 GEMM rate (FLOP/s), 512x512x512, best of the rounds."""
    return _common.gemm_rate(rounds, timer=TIMER["clock"])


def torch_flops(fn: Callable) -> Optional[int]:
    """Matmul/convolution FLOPs of one call of ``fn`` (PyTorch ops inside), or None."""
    if torch is None:
        return None
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


# -- training steps ---------------------------------------------------------------------------
def graph_step(model, opt, loss_fn, feeds: Dict[str, np.ndarray], dtypes: Dict[str, str]):
    """An O2 executable of one training step (loss, gradients, update) and its call."""
    g = dg.Graph("step")
    with g:
        vs = {k: dg.placeholder(k, v.shape, dtypes.get(k, "float32")) for k, v in feeds.items()}
        loss = loss_fn(model, vs)
        opt.minimize(loss)
    exe = g.compile(outputs=[loss], passes="O2")
    return lambda: exe(**feeds)[0]


def eager_step(model, opt, loss_fn, feeds: Dict[str, np.ndarray]):
    ts = {k: dg.tensor(v) for k, v in feeds.items()}

    def step():
        opt.zero_grad()
        loss = loss_fn(model, ts)
        loss.backward()
        opt.step()
        return loss
    return step


def torch_step(model, loss_fn, feeds: Dict[str, np.ndarray]):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ts = {k: torch.from_numpy(v.copy()) for k, v in feeds.items()}

    def step():
        opt.zero_grad()
        loss = loss_fn(model, ts)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, (lambda: loss_fn(model, ts).backward())


def _cnn(lib):
    n = lib.nn
    return n.Sequential(n.Conv2d(1, 16, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(16, 32, 3, padding=1), n.ReLU(), n.MaxPool2d(2), n.Flatten(),
                        n.Linear(32 * 7 * 7, 10))


def _mlp(lib):
    n = lib.nn
    return n.Sequential(n.Linear(784, 256), n.ReLU(), n.Linear(256, 256), n.ReLU(),
                        n.Linear(256, 10))


def _encoder(lib):
    return lib.nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0,
                                          batch_first=True)


def _lstm(lib):
    return lib.nn.LSTM(64, 128)


def _xent(lib):
    return lambda m, f: lib.nn.functional.cross_entropy(m(f["x"]), f["y"])


def _mse(lib):
    return lambda m, f: lib.nn.functional.mse_loss(m(f["x"]), f["t"])


def _mse_lstm(lib):
    return lambda m, f: lib.nn.functional.mse_loss(m(f["x"])[0], f["t"])


STEPS = {   # row -> (model maker, loss maker, feeds maker)
    "cnn": (_cnn, _xent, lambda r: {"x": r.standard_normal((64, 1, 28, 28)).astype(F32),
                                    "y": r.integers(0, 10, 64).astype(np.int64)}),
    "mlp": (_mlp, _xent, lambda r: {"x": r.standard_normal((512, 784)).astype(F32),
                                    "y": r.integers(0, 10, 512).astype(np.int64)}),
    "transformer": (_encoder, _mse,
                    lambda r: {"x": r.standard_normal((32, 64, 128)).astype(F32),
                               "t": r.standard_normal((32, 64, 128)).astype(F32)}),
    "lstm": (_lstm, _mse_lstm, lambda r: {"x": r.standard_normal((32, 32, 64)).astype(F32),
                                          "t": r.standard_normal((32, 32, 128)).astype(F32)}),
}


def step_row(row: str, rounds: int) -> dict:
    make, loss, feeds_of = STEPS[row]
    feeds = feeds_of(np.random.default_rng(0))
    dtypes = {k: str(v.dtype) for k, v in feeds.items()}
    dg.manual_seed(0)
    cands = {}
    model = make(dg)
    cands["O2"] = graph_step(model, dg.optim.SGD(model.parameters(), lr=LR), loss(dg), feeds,
                             dtypes)
    model = make(dg)
    cands["eager"] = eager_step(model, dg.optim.SGD(model.parameters(), lr=LR), loss(dg),
                                feeds)
    flops = None
    if torch is not None:
        torch.manual_seed(0)
        cands["torch"], fwd_bwd = torch_step(make(torch), loss(torch), feeds)
        flops = torch_flops(fwd_bwd) or None
    if row == "lstm":
        # (torch's fused LSTM kernel escapes FlopCounterMode) the gate products, forward
        # 2*T*B*(I+H)*4H, and twice that backward (input and weight gradients)
        (steps, batch, inputs), hidden = feeds["x"].shape, feeds["t"].shape[-1]
        flops = 3 * 2 * steps * batch * (inputs + hidden) * 4 * hidden
    if row == "mlp" and jax is not None:
        state = passes_bench.initial_state("mlp", 0)
        cands["jax"] = passes_bench.jax_step("mlp", state, feeds["x"], feeds["y"])
    return {"seconds": measure(cands, rounds), "flops": flops, "anchor": "torch"}


# -- elementwise -----------------------------------------------------------------------------
def gelu_row(rounds: int, size: int = 1 << 22) -> dict:
    x = np.random.default_rng(0).standard_normal(size).astype(F32)
    g, y = fusion_bench.gelu_graph()
    exe = g.compile(outputs=[y], passes="O2")
    cands = {"O2": lambda: exe(x=x)[0]}
    want = None
    if jax is not None:
        import jax.numpy as jnp
        c = math.sqrt(2.0 / math.pi)
        jitted = jax.jit(lambda v: 0.5 * v * (1.0 + jnp.tanh(c * (v + 0.044715 * v * v * v))))
        xj = jax.device_put(jnp.asarray(x))
        cands["jax"] = lambda: jitted(xj).block_until_ready()
        want = np.asarray(jitted(xj))
    if torch is not None:
        xt = torch.from_numpy(x)
        gelu = torch.nn.functional.gelu
        cands["torch"] = lambda: gelu(xt, approximate="tanh")
        if want is None:
            want = gelu(xt, approximate="tanh").numpy()
    err = None if want is None else float(np.max(np.abs(exe(x=x)[0] - want)))
    return {"seconds": measure(cands, rounds), "flops": None,
            "anchor": "jax" if jax is not None else "torch", "max_abs_diff": err,
            "size": size}


SCALE, SHIFT = 0.5, 1.0
WARM_CALLS = 1100    # past dg.config.cpu.numba_small_after (16)


def _chain20(x, tanh):
    y = x
    for _ in range(5):
        y = tanh(y * SCALE + SHIFT) * x
    return y


def chain_row(rounds: int) -> dict:
    x = np.random.default_rng(0).standard_normal(16).astype(F32)
    g = dg.Graph("chain20")
    with g:
        xv = dg.placeholder("x", (16,))
        out = _chain20(xv, dg.tanh)
    exe = g.compile(outputs=[out], passes="O2")
    # dg.compile with the O2 pipeline (the row; what executable_overhead.py times)
    # and with its default pipeline, O0: 20 interpreted kernels instead of one fused one
    compiled = dg.compile(lambda t: _chain20(t, lambda v: v.tanh()), passes="O2")
    compiled_o0 = dg.compile(lambda t: _chain20(t, lambda v: v.tanh()))
    xt = dg.tensor(x)
    cands = {"O2": lambda: exe(x=x), "dg.compile O2": lambda: compiled(xt),
             "dg.compile O0 (default)": lambda: compiled_o0(xt)}
    if jax is not None:
        import jax.numpy as jnp
        jitted = jax.jit(lambda v: _chain20(v, jnp.tanh))
        xj = jax.device_put(jnp.asarray(x))
        cands["jax"] = lambda: jitted(xj).block_until_ready()
    if torch is not None:
        xtt = torch.from_numpy(x)
        cands["torch"] = lambda: _chain20(xtt, torch.tanh)
    for fn in cands.values():     # steady state: past the small-kernel tier-up
        for _ in range(WARM_CALLS):  # (``dg.config.cpu.numba_small_after`` calls) and JAX's jit
            fn()
    try:                          # the small kernel, compiled in the background, in place
        from duograph.runtime.cpu import tier_up
        tier_up.drain(600)
    except ImportError:
        pass
    for fn in cands.values():
        fn()
    return {"seconds": measure(cands, rounds, 0.02), "flops": None,
            "anchor": "jax" if jax is not None else "torch"}


def imported_rows(rounds: int, size: int, batches) -> Dict[str, dict]:
    out = {}
    for r in imported_models.run(["resnet", "mobilenet"], batches, size, rounds, THREADS):
        out[f"imported {r['model']} b{r['batch']}"] = {
            "seconds": r["seconds"], "flops": r["flops"], "anchor": "onnxruntime",
            "max_abs_diff": r["max_abs_diff"]}
    return out


# -- report ----------------------------------------------------------------------------------
cpu_model = _common.cpu_model


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def report(rows: Dict[str, dict], rate: float, info: dict) -> str:
    pinned = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    lines = [f"CPU: {info['cpu']} ({info['cpus']} CPUs, process may run on {pinned}); "
             f"threads: {info['threads']} (OMP/OPENBLAS/MKL_NUM_THREADS, torch.set_num_threads, "
             f"onnxruntime intra-op{', XLA single-thread flags' if info['threads'] == 1 else ''})",
             f"duograph from {os.path.dirname(os.path.abspath(dg.__file__))}",
             f"numpy {np.__version__}, torch {info['torch']}, jax {info['jax']}; GEMM rate "
             f"{rate / 1e9:.1f} GFLOP/s (float32 512^3); best of {info['rounds']} alternating "
             f"rounds{' (process CPU time)' if info.get('timer') == 'cpu' else ''}; "
             f"load average {info['load_start']:.2f} at start, "
             f"{info['load_end']:.2f} at end", "",
             "| work | duograph | anchor | ratio | floor |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        s = r["seconds"]
        anchor = r["anchor"]
        ours = [k for k in s if k not in ("torch", "jax", "onnxruntime")]
        ref = s.get(anchor)
        mine = ", ".join(f"{k} {_fmt(s[k])}" for k in ours)
        anchors = ", ".join(f"{k} {_fmt(s[k])}" for k in ("torch", "jax", "onnxruntime")
                            if k in s)
        ratio = ", ".join(f"{k} {s[k] / ref:.2f}x" for k in ours) if ref else "-"
        if ref and anchor != "torch" and "torch" in s:
            ratio += " (vs torch: " + ", ".join(f"{k} {s[k] / s['torch']:.2f}x"
                                                 for k in ours) + ")"
        floor = "-" if not r.get("flops") else _fmt(r["flops"] / rate)
        lines.append(f"| {name} | {mine} | {anchors or '-'} | {ratio} | {floor} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pin", action="store_true", help="pin the process to --threads CPUs")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--image-size", type=int, default=224, help="imported models' input size")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds, imported models at 112x112 and batch 1 only")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--jax-site", help="site-packages directory holding JAX, appended to "
                   "sys.path after duograph is imported (not PYTHONPATH: see the docstring)")
    p.add_argument("--timer", choices=sorted(_common.TIMERS), default="wall",
                   help="wall clock, or this process's CPU time (leaves out time the cores "
                        "gave to other processes; for --threads 1)")
    a = p.parse_args(argv)
    TIMER["clock"] = _common.TIMERS[a.timer]
    if a.quick:
        a.rounds, a.image_size = min(a.rounds, 3), 112
    if torch is not None:
        torch.set_num_threads(a.threads)
    info = {"cpu": cpu_model(), "cpus": os.cpu_count(), "threads": a.threads,
            "rounds": a.rounds, "timer": a.timer, "load_start": os.getloadavg()[0],
            "torch": getattr(torch, "__version__", "not installed"),
            "jax": getattr(jax, "__version__", "not installed (JAX columns skipped)")}
    rate = gemm_rate(a.rounds)
    rows: Dict[str, dict] = {}
    for row in a.rows:
        if row in STEPS:
            rows[row] = step_row(row, a.rounds)
        elif row == "gelu":
            rows["gelu 4M"] = gelu_row(a.rounds)
        elif row == "chain":
            rows["chain 20 ops x 16"] = chain_row(a.rounds)
        elif row == "imported":
            gone = imported_models.missing()
            if gone:
                print(f"imported models skipped: {', '.join(gone)} not installed")
                continue
            rows.update(imported_rows(min(a.rounds, 3), a.image_size,
                                      [1] if a.quick else [1, 8]))
    info["load_end"] = os.getloadavg()[0]
    print(report(rows, rate, info))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "gemm_flops_per_s": rate, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
