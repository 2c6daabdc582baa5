"""Peak memory and time of a training step with and without activation checkpointing.

(``benchmarks/checkpoint_memory.py`` measures ``dg.save``/``dg.load``, model checkpoints;
this one measures ``duograph.utils.checkpoint``.) Two models, each stepped as forward and
backward of a sum of squares, eagerly (``backward``), in graph mode (``opt.minimize`` with
SGD, the graph compiled with O2) and under ``dg.compile`` (O2; ``backward`` outside):

- a deep MLP: ``--mlp-layers`` layers of Linear(H, H) + tanh in blocks of ``--per-block``
  layers, batch ``--batch`` (a block of one layer keeps nothing a checkpoint could drop:
  its input and output are what backward reads anyway);
- a stack of ``--blocks`` transformer encoder layers (d_model 256, 4 heads, feed-forward
  1024, dropout 0.1), batch 8, sequence ``--seq``.

"checkpointed" wraps every block (MLP) / layer (transformer) in ``checkpoint(...,
use_reentrant=False)``. Eager peak memory is what numpy allocated at the peak of the step
above what was live before it (``tracemalloc``, which numpy reports its buffers to); time is
the best of ``--rounds`` steps, the modes alternating. Gradients of the two modes are checked
equal (dropout masks included: the RNG state is restored for the recomputation).

Graph mode reports the memory planner's figures for the whole step (``lower_bound_bytes``,
the most bytes live at once, and ``arena_bytes``, the arena the greedy planner lays out)
and ``tracemalloc``'s peak over the first run of a fresh executable (arena included, and
the CPU backend's per-thread scratch for fused kernels' temporaries, released before; its
size is printed) and over a later run (what a step allocates besides its buffers);
``dg.compile`` reports the forward arena, the bytes the forward hands to the backward
(``saved``), the backward arena, and ``tracemalloc``'s peak over a whole step. Graph mode also
runs the unmarked graph through O2 without the ``remat`` pass, to show what O2's policy for
unmarked graphs does (never more memory; step time measured). Gradients (graph mode: the
updated parameters after one step) are compared with the unmarked graph's, within float32
rounding: fusion groups the recomputed ops with backward ones, and a fused kernel rounds as
a fused kernel does.

    python benchmarks/activation_checkpoint.py [--mlp-layers 16] [--hidden 512]
        [--batch 2048] [--blocks 4] [--seq 128] [--rounds 3] [--modes eager,graph,compile]
        [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (puts the repository root on sys.path)
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402
from duograph.passes.manager import PIPELINES, Pipeline  # noqa: E402
from duograph.runtime.cpu import workspace  # noqa: E402
from duograph.utils.checkpoint import checkpoint  # noqa: E402


def _mlp(layers: int, hidden: int, per_block: int):
    dg.manual_seed(0)
    blocks = [nn.Sequential(*[m for _ in range(per_block)
                              for m in (nn.Linear(hidden, hidden), nn.Tanh())])
              for _ in range(layers // per_block)]
    return blocks


def _transformer(blocks: int):
    dg.manual_seed(0)
    return [nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.1, batch_first=True)
            for _ in range(blocks)]


def _step(blocks, x, checkpointed: bool):
    def run():
        dg.manual_seed(1)
        for p in (p for b in blocks for p in b.parameters()):
            p.grad = None
        h = x
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False) if checkpointed else b(h)
        (h * h).sum().backward()
    return run


def _measure(run) -> tuple:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak, seconds


def _compare(name: str, blocks, x, rounds: int) -> dict:
    grads = {}
    out = {}
    for mode in (False, True):
        _step(blocks, x, mode)()
        grads[mode] = [p.grad.numpy().copy() for b in blocks for p in b.parameters()]
    same = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(grads[False],
                                                                          grads[True]))
    samples = {False: [], True: []}
    for _ in range(rounds):
        for mode in (False, True):
            samples[mode].append(_measure(_step(blocks, x, mode)))
    for mode, label in ((False, "plain"), (True, "checkpointed")):
        peak = min(p for p, _ in samples[mode])
        secs = min(s for _, s in samples[mode])
        out[label] = {"peak_mb": peak / 2 ** 20, "best_s": secs}
    out["gradients_equal"] = bool(same)
    out["peak_ratio"] = out["checkpointed"]["peak_mb"] / out["plain"]["peak_mb"]
    out["time_ratio"] = out["checkpointed"]["best_s"] / out["plain"]["best_s"]
    print(f"{name}: peak {out['plain']['peak_mb']:.1f} MB plain, "
          f"{out['checkpointed']['peak_mb']:.1f} MB checkpointed ({out['peak_ratio']:.2f}x); "
          f"step {out['plain']['best_s'] * 1e3:.0f} ms vs "
          f"{out['checkpointed']['best_s'] * 1e3:.0f} ms ({out['time_ratio']:.2f}x); "
          f"gradients equal: {same}")
    return out


def _forward(blocks, h, checkpointed: bool):
    for b in blocks:
        h = checkpoint(b, h, use_reentrant=False) if checkpointed else b(h)
    return h


def _graph_step(make, shape, checkpointed: bool):
    blocks = make()
    params = [p for b in blocks for p in b.parameters()]
    opt = dg.optim.SGD(params, lr=1e-3)
    with dg.Graph("step") as g:
        x = dg.placeholder("x", shape)
        h = _forward(blocks, x, checkpointed)
        loss = dg.sum(h * h)
        opt.minimize(loss)
    g.outputs = [loss]
    return g, params


def _traced(fn) -> tuple:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak, seconds


def _graph_compare(name: str, make, shape, rounds: int) -> dict:
    """Graph mode: planned and traced peaks, step time, updated parameters compared."""
    no_remat = Pipeline([p for p in PIPELINES["O2"] if p != "remat"], plan=True)
    cases = {"plain O2 without remat": (False, no_remat), "plain O2": (False, "O2"),
             "checkpointed O2": (True, "O2")}
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    out, exes, params = {}, {}, {}
    for label, (marked, passes) in cases.items():
        g, ps = _graph_step(make, shape, marked)
        start = time.perf_counter()
        exe = g.compile(passes=passes)
        compile_s = time.perf_counter() - start
        exe.run(feeds)           # kernels compiled (numba) before the traced run
        # a first run of a fresh executable allocates the arena: what tracemalloc sees
        # (the CPU backend's shared scratch for fused kernels' temporaries dropped first,
        # so that the step's own is counted too); then a second run, the steady state
        g3, ps3 = _graph_step(make, shape, marked)
        exe3 = g3.compile(passes=passes)
        workspace.release()
        traced, _ = _traced(lambda: exe3.run(feeds))
        steady, _ = _traced(lambda: exe3.run(feeds))
        plan = exe3.memory_plan
        exes[label], params[label] = exe, ps3
        out[label] = {"planned_peak_mb": plan.lower_bound_bytes / 2 ** 20,
                      "arena_mb": plan.arena_bytes / 2 ** 20,
                      "traced_peak_mb": traced / 2 ** 20,
                      "traced_steady_mb": steady / 2 ** 20,
                      "scratch_mb": workspace.workspace_bytes() / 2 ** 20,
                      "kernels": exe.kernel_count,
                      "compile_s": compile_s}
    ref = [p.detach().numpy().copy() for p in params["plain O2 without remat"]]
    for label in cases:
        got = [p.detach().numpy() for p in params[label]]
        out[label]["params_close"] = bool(all(
            np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(ref, got)))
    times = {label: [] for label in cases}
    for _ in range(rounds):
        for label in cases:
            start = time.perf_counter()
            exes[label].run(feeds)
            times[label].append(time.perf_counter() - start)
    for label in cases:
        out[label]["best_s"] = min(times[label])
    base = out["plain O2"]
    for label in cases:
        o = out[label]
        print(f"{name} [graph, {label}]: planned peak {o['planned_peak_mb']:.1f} MB "
              f"({o['planned_peak_mb'] / base['planned_peak_mb']:.2f}x of plain O2), arena "
              f"{o['arena_mb']:.1f} MB, traced {o['traced_peak_mb']:.1f} MB (first run: "
              f"arena and scratch {o['scratch_mb']:.1f} MB included; "
              f"{o['traced_peak_mb'] / base['traced_peak_mb']:.2f}x), later runs "
              f"{o['traced_steady_mb']:.1f} MB, step "
              f"{o['best_s'] * 1e3:.0f} ms ({o['best_s'] / base['best_s']:.2f}x), "
              f"{o['kernels']} kernels, compile {o['compile_s']:.1f} s, "
              f"parameters as unmarked: {o['params_close']}")
    return out


def _compile_compare(name: str, make, shape, rounds: int) -> dict:
    """``dg.compile``: forward/backward arenas, bytes saved between them, traced step peak."""
    x = dg.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    out, steps, grads = {}, {}, {}
    for marked in (False, True):
        blocks = make()
        params = [p for b in blocks for p in b.parameters()]
        f = dg.compile(lambda t, blocks=blocks, marked=marked:
                       (lambda h: (h * h).sum())(_forward(blocks, t, marked)), passes="O2")

        def step(f=f, params=params):
            for p in params:
                p.grad = None
            dg.manual_seed(1)
            f(x).backward()
        step()
        grads[marked] = [p.grad.numpy().copy() for p in params]
        s = f._last
        first = s.n_out + s.n_dec
        saved = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                    for v in s.forward.outputs[first:first + s.n_saved])
        out["checkpointed" if marked else "plain"] = {
            "forward_arena_mb": f.memory_plan.arena_bytes / 2 ** 20,
            "saved_mb": saved / 2 ** 20,
            "backward_arena_mb": f.backward_memory_plan.arena_bytes / 2 ** 20}
        steps[marked] = step
    samples = {False: [], True: []}
    for _ in range(rounds):
        for marked in (False, True):
            samples[marked].append(_traced(steps[marked]))
    for marked in (False, True):
        o = out["checkpointed" if marked else "plain"]
        o["traced_peak_mb"] = min(p for p, _ in samples[marked]) / 2 ** 20
        o["best_s"] = min(s for _, s in samples[marked])
    same = all(np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(grads[False],
                                                                        grads[True]))
    out["gradients_close"] = bool(same)
    p, c = out["plain"], out["checkpointed"]
    print(f"{name} [dg.compile]: saved {p['saved_mb']:.1f} -> {c['saved_mb']:.1f} MB, forward "
          f"arena {p['forward_arena_mb']:.1f} -> {c['forward_arena_mb']:.1f} MB, backward "
          f"arena {p['backward_arena_mb']:.1f} -> {c['backward_arena_mb']:.1f} MB, traced "
          f"step peak {p['traced_peak_mb']:.1f} -> {c['traced_peak_mb']:.1f} MB "
          f"({c['traced_peak_mb'] / p['traced_peak_mb']:.2f}x), step "
          f"{p['best_s'] * 1e3:.0f} -> {c['best_s'] * 1e3:.0f} ms "
          f"({c['best_s'] / p['best_s']:.2f}x); gradients close: {same}")
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlp-layers", type=int, default=16)
    ap.add_argument("--per-block", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="eager,graph,compile",
                    help="comma-separated: eager, graph (opt.minimize, O2), compile")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    modes = set(args.modes.split(","))
    if modes - {"eager", "graph", "compile"}:
        ap.error(f"--modes: expected eager, graph or compile, found {args.modes!r}")
    rng = np.random.default_rng(0)
    print(f"settings: {vars(args)}, load {_common.load()[0]:.1f}, OPENBLAS_NUM_THREADS="
          f"{_common.blas_threads()}")
    result = {"settings": vars(args), "load": _common.load()}
    models = [("mlp", f"MLP {args.mlp_layers}x{args.hidden} in blocks of {args.per_block}, "
               f"batch {args.batch}",
               lambda: _mlp(args.mlp_layers, args.hidden, args.per_block),
               (args.batch, args.hidden)),
              ("transformer",
               f"transformer {args.blocks} layers, d_model 256, batch 8, seq {args.seq}",
               lambda: _transformer(args.blocks), (8, args.seq, 256))]
    for key, name, make, shape in models:
        if "eager" in modes:
            x = dg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
            result[key] = _compare(name, make(), x, args.rounds)
        if "graph" in modes:
            result[key + "_graph"] = _graph_compare(name, make, shape, args.rounds)
        if "compile" in modes:
            result[key + "_compile"] = _compile_compare(name, make, shape, args.rounds)
    _common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
