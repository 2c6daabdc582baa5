"""A DDP training-step graph in one process (the parameters registered as DDP-wrapped)."""
import duograph as dg
from duograph import nn


def ddp_graph(bucket_bytes):
    from duograph.distributed import ddp_state
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(),
                          nn.Linear(8, 4)).double()
    ddp_state.register(model.parameters(), ddp_state.DDPInfo(None, bucket_bytes, None))
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", ("N", 6), "float64")
        y = dg.placeholder("y", ("N", 4), "float64")
        loss = ((model(x) - y) ** 2).mean()
        opt.minimize(loss)
    g.outputs = [loss]
    return g, g.compile(passes="O2")
