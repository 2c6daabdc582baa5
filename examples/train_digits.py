"""Train an MLP or a small CNN on scikit-learn's 8x8 digits in three modes.

    python examples/train_digits.py                  # the MLP in all three modes, compared
    python examples/train_digits.py --model mlp --mode eager
    python examples/train_digits.py --model cnn --mode graph --epochs 30
    python examples/train_digits.py --mode compiled --checkpoint ck.dgt --epochs 10
    python examples/train_digits.py --mode compiled --checkpoint ck.dgt --epochs 20 --resume

Modes (same model code, same numbers for the same seed):
  eager     define by run: loss.backward(); optimizer.step()
  compiled  dg.compile records the loss function once and replays it through the runtime
  graph     one static graph holds forward, backward and the optimizer update
The dataset ships inside scikit-learn (pip install -e ".[examples]").
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import duograph as dg  # noqa: E402
from duograph import nn  # noqa: E402
from duograph.data import DataLoader, TensorDataset  # noqa: E402

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - the examples extra installs it
    tqdm = None


def load_digits_split(seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test) as float32 in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def make_model(kind: str) -> nn.Module:
    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                             nn.Linear(64, 10))
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
    raise ValueError(f"unknown model {kind!r}: expected 'mlp' or 'cnn'")


def shape_input(x: np.ndarray, kind: str) -> np.ndarray:
    return x.reshape(-1, 1, 8, 8) if kind == "cnn" else x


class Trainer:
    """One training step and one evaluation, in the chosen mode."""

    def __init__(self, model: nn.Module, opt, mode: str, kind: str, device: str = "cpu"):
        self.model, self.opt, self.mode, self.kind = model, opt, mode, kind
        self.device = device
        self.loss_fn = nn.CrossEntropyLoss()
        if mode == "compiled":
            self.step_fn = dg.compile(lambda x, y: self.loss_fn(self.model(x), y))
        elif mode == "graph":
            feat = (1, 8, 8) if kind == "cnn" else (64,)
            g = dg.Graph(f"{kind}_train_step")
            with g:
                x = dg.placeholder("x", ("N",) + feat)
                y = dg.placeholder("y", ("N",), "int64")
                loss = self.loss_fn(self.model(x), y)
                opt.minimize(loss)
            self.train_exe = g.compile(outputs=[loss], device=device)
            self.graph = g
        elif mode != "eager":
            raise ValueError(f"unknown mode {mode!r}: expected eager, compiled or graph")

    def step(self, xb: dg.Tensor, yb: dg.Tensor) -> float:
        if self.mode == "graph":      # numpy feeds (copied to the device once, if any)
            (loss,) = self.train_exe(x=xb.numpy(), y=yb.numpy())
            return float(loss)
        xb, yb = xb.to(self.device), yb.to(self.device)
        self.opt.zero_grad()
        loss = self.step_fn(xb, yb) if self.mode == "compiled" else \
            self.loss_fn(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss.item()

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        self.model.eval()
        try:
            with dg.no_grad():
                logits = self.model(dg.tensor(x, device=self.device))
            return float((logits.argmax(dim=1).cpu().numpy() == y).mean())
        finally:
            self.model.train()


def train(kind: str = "mlp", mode: str = "eager", epochs: int = 30, batch_size: int = 32,
          lr: float = 1e-3, seed: int = 0, checkpoint: str = None, resume: bool = False,
          progress: bool = True, log=print, device: str = "cpu") -> dict:
    """Train and return {"losses": per-epoch mean loss, "test_accuracy": ..., ...}.
    ``device="cuda"`` trains on the GPU (needs cupy): the model and batches move there."""
    dg.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_digits_split(seed)
    x_train, x_test = shape_input(x_train, kind), shape_input(x_test, kind)
    model = make_model(kind).to(device)
    opt = dg.optim.Adam(model.parameters(), lr=lr)
    start_epoch, losses = 0, []
    if resume:
        if not checkpoint or not os.path.exists(checkpoint):
            raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint!r}")
        state = dg.load(checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_epoch, losses = int(state["epoch"]), list(state["losses"])
        log(f"resumed from {checkpoint} after epoch {start_epoch}")
    trainer = Trainer(model, opt, mode, kind, device)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True,
                        seed=seed)
    t0 = time.perf_counter()
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)          # the shuffle order depends on (seed, epoch) only
        batches = loader
        if progress and tqdm is not None:
            batches = tqdm(loader, desc=f"{kind} {mode} epoch {epoch + 1}/{epochs}",
                           leave=False)
        total, count = 0.0, 0
        for xb, yb in batches:
            total += trainer.step(xb, yb) * len(yb)
            count += len(yb)
        losses.append(total / count)
        if checkpoint:
            dg.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "epoch": epoch + 1, "losses": losses, "kind": kind}, checkpoint)
    seconds = time.perf_counter() - t0
    acc = trainer.accuracy(x_test, y_test)
    log(f"{kind} {mode}: {epochs} epochs, final loss {losses[-1]:.4f}, test accuracy "
        f"{acc:.4f} ({seconds:.1f} s)")
    return {"losses": losses, "test_accuracy": acc, "seconds": seconds, "model": model}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--mode", choices=("all", "eager", "compiled", "graph"), default="all",
                   help="'all' trains in the three modes and compares them (the default)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--checkpoint", help="save a checkpoint here after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    if a.mode != "all":
        train(a.model, a.mode, a.epochs, a.batch_size, a.lr, a.seed, a.checkpoint, a.resume,
              not a.no_progress, device=a.device)
        return
    if a.checkpoint or a.resume:
        p.error("--checkpoint/--resume need one --mode")
    runs = {m: train(a.model, m, a.epochs, a.batch_size, a.lr, a.seed, progress=False,
                     device=a.device)
            for m in ("eager", "compiled", "graph")}
    ref = np.asarray(runs["eager"]["losses"])
    print(f"\n{'mode':<10}{'final loss':>12}{'test acc':>10}{'seconds':>9}"
          f"{'max |loss - eager|':>20}")
    for m, r in runs.items():
        gap = float(np.max(np.abs(np.asarray(r["losses"]) - ref)))
        print(f"{m:<10}{r['losses'][-1]:>12.5f}{r['test_accuracy']:>10.4f}"
              f"{r['seconds']:>9.2f}{gap:>20.2e}")
    worst = max(float(np.max(np.abs(np.asarray(r["losses"]) - ref))) for r in runs.values())
    if worst > 1e-4:
        raise SystemExit(f"the three modes disagree: loss curves differ by up to {worst:.2e}")
    print("same loss curve in all three modes (same seed, same numbers)")


if __name__ == "__main__":
    main()
