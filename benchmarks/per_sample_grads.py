"""Per-sample gradients of an MLP or an LSTM: duograph.func.vmap(grad(loss)) against a Python
loop of duograph.func.grad and against torch.func.vmap(grad(loss)), timed side by side.

The MLP is Linear(IN, H) - Tanh - Linear(H, C) with cross-entropy on one example at a time
(``functional_call`` with the parameters as a dict), float32. ``--model lstm`` is
LSTM(IN, H, batch_first) over ``--seq`` steps, then Linear(H, C) on the last step (vmap runs
the LSTM's scan batched); torch.func.vmap refuses nn.LSTM (its fused kernel writes into an
unbatched buffer), so that model has no PyTorch contender. Each round times the three
contenders once each, in turn (the order rotates between rounds), so a load change on the
machine reaches all of them alike; the figures are the best and the median over the rounds
and the ratios of the medians. The gradients of the three agree (checked before timing).

    python benchmarks/per_sample_grads.py [--batch 64] [--rounds 7] [--threads 1] [--quick]
    python benchmarks/per_sample_grads.py --model lstm [--batch 32] [--seq 16]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _LastStep(nn, args):
    """LSTM(IN, H, batch_first) then Linear(H, C) on the last step (duograph's or torch's
    ``nn``)."""
    class LastStep(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(args.inputs, args.hidden, batch_first=True)
            self.head = nn.Linear(args.hidden, args.classes)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])
    return LastStep()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "lstm"), default="mlp")
    parser.add_argument("--seq", type=int, default=16, help="time steps (--model lstm)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.inputs, args.hidden, args.rounds, args.seq = 8, 16, 32, 2, 4
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))

    import numpy as np

    import duograph as dg
    import duograph.nn.functional as DF
    from duograph import func

    rng = np.random.default_rng(0)
    lstm = args.model == "lstm"
    shape = (args.batch, args.seq, args.inputs) if lstm else (args.batch, args.inputs)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, args.classes, args.batch)
    if lstm:
        model = _LastStep(dg.nn, args)
    else:
        model = dg.nn.Sequential(dg.nn.Linear(args.inputs, args.hidden), dg.nn.Tanh(),
                                 dg.nn.Linear(args.hidden, args.classes))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        out = func.functional_call(model, p, (xi.unsqueeze(0),))
        return DF.cross_entropy(out, yi.unsqueeze(0))

    per_sample = func.vmap(func.grad(loss), in_dims=(None, 0, 0))
    one = func.grad(loss)
    xd, yd = dg.tensor(x), dg.tensor(y)

    def dg_vmap():
        return per_sample(params, xd, yd)

    def dg_loop():
        grads = [one(params, xd[i], yd[i]) for i in range(args.batch)]
        return {k: np.stack([g[k].numpy() for g in grads]) for k in params}

    contenders = {"duograph vmap": dg_vmap, "duograph loop": dg_loop}
    reference = {k: v.numpy() for k, v in dg_vmap().items()}
    looped = dg_loop()
    correct = all(np.allclose(reference[k], looped[k], rtol=1e-4, atol=1e-6) for k in params)
    try:
        import torch
    except ModuleNotFoundError:
        torch = None
    if torch is not None and not lstm:
        torch.set_num_threads(args.threads)
        tmodel = torch.nn.Sequential(torch.nn.Linear(args.inputs, args.hidden),
                                     torch.nn.Tanh(),
                                     torch.nn.Linear(args.hidden, args.classes))
        with torch.no_grad():
            for (_, p), (_, q) in zip(model.named_parameters(), tmodel.named_parameters()):
                q.copy_(torch.tensor(p.detach().numpy()))
        tparams = {k: v.detach() for k, v in tmodel.named_parameters()}

        def tloss(p, xi, yi):
            out = torch.func.functional_call(tmodel, p, (xi.unsqueeze(0),))
            return torch.nn.functional.cross_entropy(out, yi.unsqueeze(0))
        tper = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))
        xt, yt = torch.tensor(x), torch.tensor(y)

        def torch_vmap():
            return tper(tparams, xt, yt)
        contenders["torch.func vmap"] = torch_vmap
        got = torch_vmap()
        correct = correct and all(np.allclose(reference[k], got[k].numpy(), rtol=1e-4,
                                              atol=1e-6) for k in params)
    times = {name: [] for name in contenders}
    names = list(contenders)
    for fn in contenders.values():     # warm-up (plans, caches)
        fn()
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    summary = {}
    base = float(np.median(times["duograph vmap"]))
    for name in names:
        med = float(np.median(times[name]))
        summary[name] = {"best_ms": 1e3 * min(times[name]), "median_ms": 1e3 * med,
                         "vs_duograph_vmap": med / base}
    what = (f"LSTM {args.inputs}-{args.hidden} x {args.seq} steps + Linear {args.classes}"
            if lstm else f"MLP {args.inputs}-{args.hidden}-{args.classes}")
    print(f"per-sample gradients: batch {args.batch}, {what} "
          f"float32, {args.rounds} rounds, {args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.2f}; gradients agree: {correct}")
    print(f"{'contender':<18}{'best ms':>10}{'median ms':>11}{'median / vmap':>15}")
    for name, s in summary.items():
        print(f"{name:<18}{s['best_ms']:>10.2f}{s['median_ms']:>11.2f}"
              f"{s['vs_duograph_vmap']:>15.2f}")
    result = {"settings": vars(args), "correct": bool(correct), "contenders": summary}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
