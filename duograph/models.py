"""A small model zoo for comparisons, tests and benchmarks: each model with example inputs,
targets, its loss and optimizer, and a PyTorch twin built from the same weights.

    from duograph import models
    case = models.get("cnn")              # a Case: model, inputs, targets, loss, optimizer
    cmp = dg.compare(case.model, case.inputs, targets=case.targets, loss=case.loss,
                     optimizer=case.optimizer)
    twin = case.torch_twin()              # torch.nn.Module with the same weights (if torch)

``models.NAMES`` lists them: ``mlp``, ``cnn`` (the digits CNN), ``transformer`` (a pre-norm
encoder block), ``resnet`` (a residual block with batch norm), ``rnn`` (an Elman RNN written
as a Python loop over time steps). Data are seeded random arrays of the right shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np

from . import nn
from .eager import Tensor, manual_seed, tensor
from .nn import functional as F

NAMES = ("mlp", "cnn", "transformer", "resnet", "rnn")


@dataclass
class Case:
    """One zoo model with everything ``dg.compare`` needs."""
    name: str
    model: nn.Module
    inputs: Tuple[Tensor, ...]
    targets: Tuple[Tensor, ...]
    loss: Callable
    optimizer: Callable                  # params -> a duograph optimizer
    twin: Optional[Callable] = None      # (torch module) -> torch.nn.Module, same weights

    def torch_twin(self):
        """A PyTorch module computing the same function from the same (current) weights."""
        import torch
        if self.twin is None:
            raise NotImplementedError(f"{self.name}: no PyTorch twin")
        twin = self.twin(torch)
        state = {k: torch.from_numpy(np.array(v.detach().numpy()))
                 for k, v in self.model.state_dict().items()}
        twin.load_state_dict(state)
        return twin.train(self.model.training)

    def torch_step(self, twin, torch_optimizer: Callable):
        """A function running one PyTorch training step of ``twin`` on this case's data."""
        import torch
        xs = [torch.from_numpy(np.array(t.numpy())) for t in self.inputs]
        ys = [torch.from_numpy(np.array(t.numpy())) for t in self.targets]
        opt = torch_optimizer(twin.parameters())
        loss_fn = torch.nn.functional.cross_entropy

        def step():
            opt.zero_grad()
            out = twin(*xs)
            loss = loss_fn(out, *ys)
            loss.backward()
            opt.step()
            return loss
        return step


def _data(rng, *shape):
    return tensor(rng.standard_normal(shape).astype(np.float32))


def _labels(rng, n, classes):
    return tensor(rng.integers(0, classes, n).astype(np.int64))


def _sgd(params):
    from .optim import SGD
    return SGD(params, lr=0.05, momentum=0.9)


def mlp(batch: int = 32, seed: int = 0) -> Case:
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def twin(torch):
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                   torch.nn.Linear(128, 10))
    return Case("mlp", model, (_data(rng, batch, 64),), (_labels(rng, batch, 10),),
                F.cross_entropy, _sgd, twin)


def cnn(batch: int = 32, seed: int = 0) -> Case:
    """The digits CNN of examples/train_digits.py, on 8x8 single-channel images."""
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))

    def twin(torch):
        t = torch.nn
        return t.Sequential(t.Conv2d(1, 16, 3, padding=1), t.BatchNorm2d(16), t.ReLU(),
                            t.MaxPool2d(2), t.Conv2d(16, 32, 3, padding=1), t.ReLU(),
                            t.MaxPool2d(2), t.Flatten(), t.Linear(32 * 2 * 2, 10))
    return Case("cnn", model, (_data(rng, batch, 1, 8, 8),), (_labels(rng, batch, 10),),
                F.cross_entropy, _sgd, twin)


class _TransformerClassifier(nn.Module):
    """A pre-norm encoder block, then mean over the sequence and a linear head."""

    def __init__(self, embed: int = 32, heads: int = 4, classes: int = 10):
        super().__init__()
        self.block = nn.TransformerBlock(embed, heads, mlp_ratio=2.0)
        self.head = nn.Linear(embed, classes)

    def forward(self, x):
        return self.head(self.block(x).mean(dim=1))


def transformer(batch: int = 8, seq: int = 16, seed: int = 0) -> Case:
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = _TransformerClassifier()

    def twin(torch):
        t = torch.nn

        class Block(t.Module):
            def __init__(self):
                super().__init__()
                self.ln1 = t.LayerNorm(32)
                self.attn = t.MultiheadAttention(32, 4, batch_first=True)
                self.ln2 = t.LayerNorm(32)
                self.mlp = t.Sequential(t.Linear(32, 64), t.GELU(), t.Linear(64, 32),
                                        t.Dropout(0.0))

            def forward(self, x):
                h = self.ln1(x)
                x = x + self.attn(h, h, h, need_weights=False)[0]
                return x + self.mlp(self.ln2(x))

        class Classifier(t.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
                self.head = t.Linear(32, 10)

            def forward(self, x):
                return self.head(self.block(x).mean(dim=1))
        return Classifier()
    return Case("transformer", model, (_data(rng, batch, seq, 32),),
                (_labels(rng, batch, 10),), F.cross_entropy, _sgd, twin)


class _ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn plus the input, relu; then global average pool and a head."""

    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        y = F.relu(x + h)
        return self.head(y.mean(dim=(2, 3)))


def resnet(batch: int = 16, seed: int = 0) -> Case:
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = _ResidualBlock()

    def twin(torch):
        t = torch.nn
        f = torch.nn.functional

        class Block(t.Module):
            def __init__(self):
                super().__init__()
                self.stem = t.Conv2d(3, 8, 3, padding=1)
                self.conv1 = t.Conv2d(8, 8, 3, padding=1, bias=False)
                self.bn1 = t.BatchNorm2d(8)
                self.conv2 = t.Conv2d(8, 8, 3, padding=1, bias=False)
                self.bn2 = t.BatchNorm2d(8)
                self.head = t.Linear(8, 10)

            def forward(self, x):
                x = f.relu(self.stem(x))
                h = f.relu(self.bn1(self.conv1(x)))
                h = self.bn2(self.conv2(h))
                return self.head(f.relu(x + h).mean(dim=(2, 3)))
        return Block()
    return Case("resnet", model, (_data(rng, batch, 3, 8, 8),), (_labels(rng, batch, 10),),
                F.cross_entropy, _sgd, twin)


class _LoopRNN(nn.Module):
    """An Elman RNN cell applied by a Python loop over time, then a linear head."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 10):
        super().__init__()
        self.hidden = hidden
        self.inp = nn.Linear(features, hidden)
        self.rec = nn.Linear(hidden, hidden, bias=False)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):                 # x: (batch, time, features)
        steps = x.shape[1]
        h = F.tanh(self.inp(x[:, 0]))
        for t in range(1, steps):
            h = F.tanh(self.inp(x[:, t]) + self.rec(h))
        return self.head(h)


def rnn(batch: int = 16, steps: int = 6, seed: int = 0) -> Case:
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = _LoopRNN()

    def twin(torch):
        t = torch.nn

        class Loop(t.Module):
            def __init__(self):
                super().__init__()
                self.inp = t.Linear(8, 16)
                self.rec = t.Linear(16, 16, bias=False)
                self.head = t.Linear(16, 10)

            def forward(self, x):
                h = torch.tanh(self.inp(x[:, 0]))
                for i in range(1, x.shape[1]):
                    h = torch.tanh(self.inp(x[:, i]) + self.rec(h))
                return self.head(h)
        return Loop()
    return Case("rnn", model, (_data(rng, batch, steps, 8),), (_labels(rng, batch, 10),),
                F.cross_entropy, _sgd, twin)


_BUILDERS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "resnet": resnet,
             "rnn": rnn}


def get(name: str, **kwargs) -> Case:
    """The zoo case called ``name`` (one of ``NAMES``)."""
    if name not in _BUILDERS:
        raise KeyError(f"models.get: unknown model {name!r}: expected one of {NAMES}")
    return _BUILDERS[name](**kwargs)
