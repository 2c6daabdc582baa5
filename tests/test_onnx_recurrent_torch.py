"""torch nn.LSTM and nn.GRU (two layers, bidirectional, batch_first) exported with a dynamic
batch by both of PyTorch's exporters import as they are (ONNX LSTM/GRU nodes onto scan), match
onnxruntime at two batch sizes, and a training step's gradients of the ONNX weights W, R, B
equal PyTorch's parameter gradients, gate blocks reordered (issue 25)."""
import numpy as np
import pytest

import duograph as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

# ONNX's gate blocks, as blocks of PyTorch's: LSTM i,o,f,c of i,f,g,o; GRU z,r,h of r,z,n
ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2]}
EXPORTERS = ["legacy", pytest.param("dynamo", marks=pytest.mark.slow)]


def _module(torch, kind):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(4, 6, num_layers=2, bidirectional=True,
                                               batch_first=True)
            self.fc = torch.nn.Linear(12, 3)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y)
    torch.manual_seed(0)
    return Net().eval()


def _export(torch, module, path, exporter):
    x = torch.randn(2, 5, 4)
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
        torch.onnx.export(module, (x,), str(path), dynamo=True, input_names=["x"],
                          dynamic_shapes=({0: torch.export.Dim("N", max=64)},),
                          verbose=False)
    else:
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "N"}})
    return path


def _blocks(a, order, gates):
    return np.concatenate([np.split(a, gates, axis=0)[k] for k in order], axis=0)


def _onnx_weights(module, kind, grads=False):
    """PyTorch's parameters (or their gradients) as the ONNX W, R, B of each layer."""
    rnn, order = module.rnn, ORDER[kind]
    gates = len(order)
    out = []
    for layer in range(2):
        per_dir = []
        for sfx in ("", "_reverse"):
            get = {}
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                p = getattr(rnn, f"{name}_l{layer}{sfx}")
                t = p.grad if grads else p
                get[name] = _blocks(t.detach().numpy(), order, gates)
            per_dir.append(get)
        out.append((np.stack([d["weight_ih"] for d in per_dir]),
                    np.stack([d["weight_hh"] for d in per_dir]),
                    np.stack([np.concatenate([d["bias_ih"], d["bias_hh"]])
                              for d in per_dir])))
    return out


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_rnn_exports_import_and_train_like_pytorch(torch, tmp_path, kind, exporter):
    module = _module(torch, kind)
    path = _export(torch, module, tmp_path / f"{kind}.onnx", exporter)
    assert kind in {n.op_type for n in onnx.load(str(path)).graph.node}
    g = dg.onnx.load(path)
    (x,) = g.inputs
    assert str(x.type.shape[0]) == "N"
    sess = ort.InferenceSession(str(path))
    run = g.compile(passes="O1")
    for n in (2, 5):
        feed = np.random.default_rng(n).standard_normal((n, 5, 4)).astype(np.float32)
        (got,) = run(x=feed)
        (want,) = sess.run(None, {"x": feed})
        assert got.shape == want.shape == (n, 5, 3)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    # the state holding each layer's W, R, B, found by value, and its gradient
    weights = _onnx_weights(module, kind)
    found = []
    for layer, arrays in enumerate(weights):
        for arr in arrays:
            match = [v for v in g.state if g.state_init[v].shape == arr.shape
                     and np.allclose(g.state_init[v], arr)]
            assert len(match) == 1, (layer, arr.shape)
            found.append(match[0])
    (y,) = g.outputs
    with g:
        target = dg.placeholder("target", y.type.shape, y.dtype)
        loss = dg.mean((y - target) * (y - target))
        grads = dg.grad(loss, found)
    g.outputs = [loss] + list(grads)
    step = g.compile(passes="O1")
    for n in (3, 4):
        rng = np.random.default_rng(10 + n)
        feed = rng.standard_normal((n, 5, 4)).astype(np.float32)
        tgt = rng.standard_normal((n, 5, 3)).astype(np.float32)
        got_loss, *got = step(x=feed, target=tgt)
        module.zero_grad()
        want_loss = ((module(torch.from_numpy(feed)) - torch.from_numpy(tgt)) ** 2).mean()
        want_loss.backward()
        np.testing.assert_allclose(got_loss, want_loss.item(), rtol=1e-5)
        want = [a for arrays in _onnx_weights(module, kind, grads=True) for a in arrays]
        for v, a, b in zip(found, got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=v.name)
