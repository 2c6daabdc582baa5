"""Fused elementwise kernels on the CPU: every strategy side by side in one run.

The workload is the GELU-tanh chain written as 9 elementwise ops,
``0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x)))``, on 4M float32 (the issue's
figure). Candidates, timed in interleaved rounds (best and median of the rounds):

  a  numpy op by op (temporaries freed as soon as they die)
  a' duograph O0: the unfused graph through the runtime
  b  numpy with ``out=`` into preallocated full-size scratch buffers
  c  the same in cache-sized chunks, reusing chunk-sized scratch (chunk size swept)
  d  numba: ``@njit(parallel=True)`` as the issue wrote it (libm tanh, Python float
     constants: float64 promotion), libm tanh in float32 (parallel, serial), and the
     rational tanh duograph generates, parallel
  e  duograph with the ``fuse`` pass, per fused-kernel strategy (numpy chunks on 1 and all
     threads, numba on one thread, and the default ``auto``)
  f  numexpr and JAX jit, when installed

Then a size sweep (where numba starts to pay), an exp/log chain (what numba does where the
tanh trick does not apply), and one MLP layer with the chain as a matmul epilogue, where
BLAS threads run around every fused kernel. Ratios are to the unfused run.

    python benchmarks/fusion.py [--size 4194304] [--rounds 15] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph.runtime.cpu import cpu_backend  # noqa: E402
from duograph.runtime.cpu import fused_chunks, fused_numba, numba_support  # noqa: E402

C = math.sqrt(2.0 / math.pi)
F32 = np.float32


def measure(cands: Dict[str, Callable], rounds: int,
            threaded: Dict[str, Callable] = None) -> Dict[str, dict]:
    """Best and median seconds per call, the candidates interleaved round by round.

    ``threaded`` candidates (numba parallel=True: OpenMP threads that keep spinning on both
    cores after each call) are measured after the others, among themselves, so their
    spinning threads do not slow the others down.
    """
    out = _measure(cands, rounds)
    if threaded:
        out.update(_measure(threaded, rounds))
    return out


def _measure(cands: Dict[str, Callable], rounds: int) -> Dict[str, dict]:
    for fn in cands.values():      # warm up: compile, fault pages in, fill caches
        fn()
        fn()
    times: Dict[str, List[float]] = {k: [] for k in cands}
    for _ in range(rounds):
        for name, fn in cands.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: {"best": min(v), "median": float(np.median(v))} for k, v in times.items()}


# -- the chain, hand-written ---------------------------------------------------------------
def gelu_unfused(x):
    y = x * x
    y = y * x
    y = y * F32(0.044715)
    y = x + y
    y = y * F32(C)
    y = np.tanh(y)
    y = y + F32(1.0)
    y = y * x
    return y * F32(0.5)


def _gelu_steps(x, s, o):
    np.multiply(x, x, out=s)
    np.multiply(s, x, out=s)
    np.multiply(s, F32(0.044715), out=s)
    np.add(x, s, out=s)
    np.multiply(s, F32(C), out=s)
    np.tanh(s, out=s)
    np.add(s, F32(1.0), out=s)
    np.multiply(s, x, out=s)
    np.multiply(s, F32(0.5), out=o)


def gelu_out(x, scratch, out):
    _gelu_steps(x, scratch, out)
    return out


def gelu_chunked(x, scratch, out, chunk: int):
    n = x.size
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        _gelu_steps(x[lo:hi], scratch[:hi - lo], out[lo:hi])
    return out


def numba_kernels() -> Dict[str, Callable]:
    """The numba variants (compiled here; the issue's ones first)."""
    from numba import njit, prange

    # as the issue wrote it: Python float constants (float64 promotion), libm tanh
    @njit(parallel=True)
    def issue_style(x, out):
        for i in prange(x.size):
            v = x[i]
            out[i] = 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))

    def f32_body(parallel):
        @njit(parallel=parallel, error_model="numpy")
        def k(x, out):
            for i in prange(x.size):
                v = x[i]
                inner = F32(0.7978845608028654) * (v + F32(0.044715) * v * v * v)
                out[i] = F32(0.5) * v * (F32(1.0) + np.tanh(inner))
        return k

    return {"issue_style": issue_style, "libm_f32_par": f32_body(True),
            "libm_f32_serial": f32_body(False)}


def gelu_graph():
    g = dg.Graph("gelu")
    with g:
        x = dg.placeholder("x", ("N",))
        y = x * x
        y = y * x
        y = y * 0.044715
        y = x + y
        y = y * C
        y = dg.tanh(y)
        y = y + 1.0
        y = y * x
        y = y * 0.5
    return g, y


def exp_graph():
    """softplus-like chain with exp and log: 6 ops, no tanh."""
    g = dg.Graph("explog")
    with g:
        x = dg.placeholder("x", ("N",))
        y = dg.log(dg.exp(x * 0.5) + 1.0) * 2.0 - x * 0.25
    return g, y


def fused_exe(g, y, strategy: str):
    exe = g.compile(outputs=[y], passes=["fuse"])
    body = [n for n in exe.graph.nodes if n.op.name == "fused"][0].attrs["sub"]

    def run(**feeds):
        with dg.config.override(fused_strategy=strategy):
            return exe(**feeds)
    return run, exe, body


def parallel_numba(make, **feeds):
    """An executable whose numba kernels were generated with parallel=True."""
    fn = make()

    def run(**kw):
        with dg.config.override(numba_parallel=True):
            return fn(**kw)
    run(**feeds)                    # plans (and their kernels) are built on the first run
    return run


def layer_graph(width: int):
    """One MLP layer: the GELU-tanh chain as the epilogue of ``x @ w + b``."""
    g = dg.Graph("layer")
    with g:
        x = dg.placeholder("x", ("N", width))
        w = dg.placeholder("w", (width, width))
        b = dg.placeholder("b", (width,))
        h = x @ w + b
        y = h * h
        y = y * h
        y = y * 0.044715
        y = h + y
        y = y * C
        y = dg.tanh(y)
        y = y + 1.0
        y = y * h
        y = y * 0.5
    return g, y


def run_layers(rounds: int) -> dict:
    """Fused epilogues between matmuls, where BLAS threads are busy around each kernel."""
    rng = np.random.default_rng(1)
    out = {}
    g, y = layer_graph(256)
    w = (rng.standard_normal((256, 256)) * 0.06).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    for batch in (256, 4096):
        feeds = {"x": rng.standard_normal((batch, 256)).astype(np.float32), "w": w, "b": b}
        cands = {"O0 (unfused)": g.compile(outputs=[y])}
        cands["fused: numpy chunks"] = fused_exe(g, y, "numpy")[0]
        threaded = {}
        if numba_support.numba_available():
            cands["fused: numba, 1 thread"] = fused_exe(g, y, "numba")[0]
            threaded["fused: numba, parallel"] = parallel_numba(
                lambda: fused_exe(g, y, "numba")[0], **feeds)
        cands["fused: auto (default)"] = fused_exe(g, y, "auto")[0]

        def calls(d):
            return {k: (lambda f=f: f(**feeds)) for k, f in d.items()}
        out[batch] = measure(calls(cands), max(rounds, 30), calls(threaded))
    return out


def run(size: int, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(size).astype(np.float32)
    ref = gelu_unfused(x)
    res: dict = {"size": size, "rounds": rounds, "cpus": os.cpu_count(),
                 "numba": numba_support.numba_available()}
    scratch = np.empty_like(x)
    out = np.empty_like(x)
    g, y = gelu_graph()
    o0 = g.compile(outputs=[y])
    cands: Dict[str, Callable] = {
        "a numpy op by op": lambda: gelu_unfused(x),
        "a' duograph O0 (unfused)": lambda: o0(x=x),
        "b numpy out= scratch": lambda: gelu_out(x, scratch, out),
    }
    for chunk in (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17):
        cands[f"c numpy chunks {chunk // 1024}K"] = (
            lambda c=chunk: gelu_chunked(x, scratch, out, c))
    fused_np, exe, body = fused_exe(g, y, "numpy")

    def threads(fn, n: int):
        def run_n(**feeds):
            with dg.config.override(fused_threads=n):
                return fn(**feeds)
        return run_n
    fused_np2 = threads(fused_np, 2)
    cands["e duograph fused: numpy chunks"] = lambda: fused_np(x=x)
    cands["e duograph fused: numpy chunks, 2 threads"] = lambda: fused_np2(x=x)
    node = [n for n in exe.graph.nodes if n.op.name == "fused"][0]

    def into_out():      # the planned runtime's call: results into a preallocated buffer
        with dg.config.override(fused_strategy="numpy"):
            cpu_backend.out_kernel(node.op)(np, x, out=out, **node.attrs)
        return out
    if cpu_backend.out_kernel(node.op) is not None:
        cands["e duograph fused: numpy chunks, out= given"] = into_out
    res["threads"] = dg.config.fused_threads
    res["chunk"] = fused_chunks.CHUNK
    res["kernels_unfused"] = o0.kernel_count
    res["kernels_fused"] = exe.kernel_count
    threaded: Dict[str, Callable] = {}
    if res["numba"]:
        import numba
        from numba.misc.numba_sysinfo import get_sysinfo
        info = get_sysinfo()
        res["numba_version"] = numba.__version__
        res["numba_threads"] = numba.get_num_threads()
        res["numba_threading_layer"] = numba.config.THREADING_LAYER
        res["svml"] = bool(info.get("SVML Operational"))
        for name, k in numba_kernels().items():
            (cands if "serial" in name else threaded)[f"d numba {name}"] = (
                lambda k=k: k(x, out))
        fused_par = parallel_numba(lambda: fused_exe(g, y, "numba")[0], x=x)
        threaded["d numba rational tanh, parallel"] = lambda: fused_par(x=x)
        fused_nb, _, _ = fused_exe(g, y, "numba")
        cands["e duograph fused: numba (1 thread)"] = lambda: fused_nb(x=x)
        fused_auto, _, _ = fused_exe(g, y, "auto")
        cands["e duograph fused: auto (default)"] = lambda: fused_auto(x=x)
    try:
        import numexpr as ne
        cands["f numexpr"] = lambda: ne.evaluate(
            "0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x)))",
            local_dict={"x": x, "c": F32(C)}, out=out)
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        jx = jnp.asarray(x)
        jf = jax.jit(lambda v: 0.5 * v * (1 + jnp.tanh(C * (v + 0.044715 * v * v * v))))
        cands["f jax jit"] = lambda: jf(jx).block_until_ready()
    except ImportError:
        pass
    # every candidate computes the same numbers (within a few ulp)
    errors = {}
    for name, fn in {**cands, **threaded}.items():
        r = fn()
        r = out if r is None else r[0] if isinstance(r, list) else r
        errors[name] = float(np.max(np.abs(np.asarray(r) - ref)))
    res["gelu"] = measure(cands, rounds, threaded)
    for name, e in errors.items():
        res["gelu"][name]["max_abs_err"] = e

    # where numba starts to pay: fused numpy chunks vs fused numba by size
    sweep = {}
    for n in (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20):
        xs = x[:n].copy()
        cands = {"numpy op by op": lambda xs=xs: gelu_unfused(xs),
                 "duograph O0": lambda xs=xs: o0(x=xs),
                 "fused numpy": lambda xs=xs: fused_np(x=xs)}
        if res["numba"]:
            cands["fused numba"] = lambda xs=xs: fused_nb(x=xs)
        sweep[n] = measure(cands, max(rounds, 30))
    res["size_sweep"] = sweep

    # a chain numba cannot vectorise here (exp, log: scalar libm calls without SVML)
    ge, ye = exp_graph()
    cands = {"a numpy op by op (O0)": ge.compile(outputs=[ye])}
    cands["fused numpy"] = fused_exe(ge, ye, "numpy")[0]
    if res["numba"]:
        cands["fused numba"] = fused_exe(ge, ye, "numba")[0]
        cands["fused auto"] = fused_exe(ge, ye, "auto")[0]
    res["explog"] = measure({k: (lambda f=f: f(x=x)) for k, f in cands.items()}, rounds)
    res["layers"] = run_layers(rounds)
    try:
        from threadpoolctl import threadpool_info
        res["blas"] = [{k: i.get(k) for k in ("internal_api", "architecture", "num_threads")}
                       for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        res["blas"] = []
    res["openblas_coretype"] = os.environ.get("OPENBLAS_CORETYPE")
    return res


def _table(title: str, rows: Dict[str, dict], base: str) -> List[str]:
    b = rows[base]["best"]
    lines = [title, f"  {'candidate':<40}{'best ms':>10}{'median ms':>11}{'vs ' + base[:10]:>16}"
             f"{'speed-up':>10}"]
    for name, r in rows.items():
        err = f"   err {r['max_abs_err']:.1e}" if "max_abs_err" in r else ""
        lines.append(f"  {name:<40}{r['best'] * 1e3:10.3f}{r['median'] * 1e3:11.3f}"
                     f"{r['best'] / b:16.2f}{b / r['best']:10.2f}x{err}")
    return lines


def report(r: dict) -> str:
    lines = [f"fused elementwise kernels on the CPU ({r['cpus']} cpus); numba: "
             + (f"{r['numba_version']}, {r['numba_threads']} threads "
                f"({r['numba_threading_layer']} layer), SVML "
                f"{'on' if r['svml'] else 'off'}" if r["numba"] else "not installed"),
             f"duograph defaults: chunks of {r['chunk']} elements on {r['threads']} "
             f"thread(s) (DUOGRAPH_FUSED_THREADS), numba kernels (one thread) from "
             f"{fused_numba.NUMBA_MIN_ELEMENTS} elements",
             f"kernels per run: unfused {r['kernels_unfused']}, fused {r['kernels_fused']}",
             ""]
    lines += _table(f"GELU-tanh chain (9 ops) on float32[{r['size']}]", r["gelu"],
                    "a numpy op by op")
    lines.append("")
    lines.append("size sweep (best ms; speed-up = duograph O0 / the best fused strategy):")
    names = list(next(iter(r["size_sweep"].values())))
    lines.append(f"  {'elements':>10}" + "".join(f"{n:>16}" for n in names)
                 + f"{'speed-up':>10}")
    for n, rows in r["size_sweep"].items():
        base = rows["duograph O0"]["best"]
        best_fused = min(v["best"] for k, v in rows.items() if k.startswith("fused"))
        lines.append(f"  {n:>10}" + "".join(f"{rows[k]['best'] * 1e3:16.4f}" for k in names)
                     + f"{base / best_fused:9.2f}x")
    lines.append("")
    lines += _table(f"exp/log chain (6 ops) on float32[{r['size']}]", r["explog"],
                    "a numpy op by op (O0)")
    blas = ", ".join(sorted({f"{b['internal_api']} {b['architecture']} x{b['num_threads']}"
                             for b in r["blas"]})) or "unknown"
    for batch, rows in r["layers"].items():
        lines.append("")
        lines += _table(f"layer gelu_tanh(x @ w + b), x: float32[{batch},256] (BLAS: {blas}, "
                        f"OPENBLAS_CORETYPE={r['openblas_coretype']})", rows, "O0 (unfused)")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1 << 22)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", help="also write the raw figures to this file")
    a = p.parse_args(argv)
    r = run(a.size, a.rounds)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2, default=str)


if __name__ == "__main__":
    main()
