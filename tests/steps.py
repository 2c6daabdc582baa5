"""Training-step graphs shared by tests (cross-entropy, SGD with momentum)."""
import numpy as np

import duograph as dg
from duograph import nn


def training_step(model, features: int, lr: float = 0.1):
    """(graph of one SGD-momentum step of ``model`` on cross-entropy: output the loss,
    updates train the model; the loss Value)."""
    opt = dg.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", ("N", features))
        y = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.minimize(loss)
    g.outputs = [loss]
    return g, loss


def small_mlp_step(batch: int = 5):
    """(graph whose output is the loss and whose updates train the MLP, feeds of ``batch``
    rows)."""
    dg.manual_seed(0)
    g, _ = training_step(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), 6)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((batch, 6)).astype(np.float32),
             "y": rng.integers(0, 3, batch).astype(np.int64)}
    return g, feeds
