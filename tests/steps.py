"""A small training-step graph shared by tests (a Linear-ReLU-Linear MLP, SGD momentum)."""
import numpy as np

import duograph as dg
from duograph import nn


def small_mlp_step(batch: int = 5):
    """(graph whose output is the loss and whose updates train the MLP, feeds of ``batch``
    rows)."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", ("N", 6))
        y = dg.placeholder("y", ("N",), "int64")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.minimize(loss)
    g.outputs = [loss]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((batch, 6)).astype(np.float32),
             "y": rng.integers(0, 3, batch).astype(np.int64)}
    return g, feeds
