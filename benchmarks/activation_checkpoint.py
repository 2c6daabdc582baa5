"""Peak memory and time of a training step with and without activation checkpointing.

(``benchmarks/checkpoint_memory.py`` measures ``dg.save``/``dg.load``, model checkpoints;
this one measures ``duograph.utils.checkpoint``.) Two models, each run eagerly as forward,
``backward`` on a sum of squares, and nothing else:

- a deep MLP: ``--mlp-layers`` blocks of Linear(H, H) + tanh, batch ``--batch``;
- a stack of ``--blocks`` transformer encoder layers (d_model 256, 4 heads, feed-forward
  1024, dropout 0.1), batch 8, sequence ``--seq``.

"checkpointed" wraps every block (MLP) / layer (transformer) in ``checkpoint(...,
use_reentrant=False)``. Peak memory is what numpy allocated at the peak of the step above
what was live before it (``tracemalloc``, which numpy reports its buffers to); time is the
best of ``--rounds`` steps, the modes alternating. Gradients of the two modes are checked
equal (dropout masks included: the RNG state is restored for the recomputation).

    python benchmarks/activation_checkpoint.py [--mlp-layers 16] [--hidden 512]
        [--batch 2048] [--blocks 4] [--seq 128] [--rounds 3] [--json out.json]
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
from duograph.utils.checkpoint import checkpoint  # noqa: E402


def _mlp(layers: int, hidden: int):
    dg.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) for _ in range(layers)]
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlp-layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"settings: {vars(args)}, load {_common.load()[0]:.1f}, OPENBLAS_NUM_THREADS="
          f"{_common.blas_threads()}")
    result = {"settings": vars(args), "load": _common.load()}
    x = dg.tensor(rng.standard_normal((args.batch, args.hidden)).astype(np.float32),
                  requires_grad=True)
    result["mlp"] = _compare(f"MLP {args.mlp_layers}x{args.hidden}, batch {args.batch}",
                             _mlp(args.mlp_layers, args.hidden), x, args.rounds)
    x = dg.tensor(rng.standard_normal((8, args.seq, 256)).astype(np.float32),
                  requires_grad=True)
    result["transformer"] = _compare(
        f"transformer {args.blocks} layers, d_model 256, batch 8, seq {args.seq}",
        _transformer(args.blocks), x, args.rounds)
    _common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
