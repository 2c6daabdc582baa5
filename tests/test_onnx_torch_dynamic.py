"""Models exported by PyTorch with a dynamic batch (and sequence) import as they are: their
symbolic dims stay symbolic, one import runs at two batch sizes equal to onnxruntime, and a
training step's gradients equal PyTorch's (issue 25).

Both exporters: the legacy TorchScript one (``dynamo=False``, ``dynamic_axes``) and the
dynamo one (``dynamic_shapes``; it needs onnxscript), whose shapes, axes and indices are
int64 initializers.
"""
import numpy as np
import pytest

import duograph as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

EXPORTERS = ["legacy", "dynamo"]


def _export(torch, module, example, path, exporter, dims):
    """Export ``module`` on ``example`` (one input named after ``dims``' key) with the dims
    ``dims`` (axis -> name) dynamic."""
    (name, axes), = dims.items()
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
        shapes = ({a: torch.export.Dim(n, max=64) for a, n in axes.items()},)
        torch.onnx.export(module, (example,), str(path), dynamo=True, input_names=[name],
                          dynamic_shapes=shapes, verbose=False)
    else:
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=17,
                          input_names=[name], dynamic_axes={name: axes})
    return path


def _cnn(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()


def _view_net(torch):
    class ViewNet(torch.nn.Module):
        """x.size(0) arithmetic: a view to (batch, -1), and the batch size as a number."""

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3)
            self.fc = torch.nn.Linear(4 * 6 * 6, 5)

        def forward(self, x):
            h = torch.relu(self.conv(x)).view(x.size(0), -1)
            return self.fc(h) / x.shape[0]

    torch.manual_seed(0)
    return ViewNet().eval()


def _attention(torch):
    class Attention(torch.nn.Module):
        """Token ids of a dynamic batch and length: arange(T) positions, views over (b, T),
        the last token (a negative index into a symbolic dim), a mask from the data."""

        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 16)
            self.pos = torch.nn.Embedding(32, 16)
            self.qkv = torch.nn.Linear(16, 48)
            self.norm = torch.nn.LayerNorm(16)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, ids):
            b, t = ids.shape
            h = self.emb(ids) + self.pos(torch.arange(t))
            q, k, v = self.qkv(h).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
            a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
            h = self.norm(h + a.transpose(1, 2).reshape(b, t, -1))
            keep = (ids != 0).unsqueeze(-1).to(h.dtype)
            return self.head(h[:, -1]) + (h * keep).flatten(1).sum(-1, keepdim=True)

    torch.manual_seed(0)
    return Attention().eval()


def _upsample(torch):
    class Upsample(torch.nn.Module):
        """Resize by a scale (an initializer for the dynamo exporter) and to a size read
        from the input's shape (its batch symbolic)."""

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            h = self.conv(x)
            up = torch.nn.functional.interpolate(h, scale_factor=2, mode="nearest")
            return up + torch.nn.functional.interpolate(h, size=x.shape[-2:], mode="bilinear")

    torch.manual_seed(0)
    return Upsample().eval()


MODELS = {
    "cnn": (_cnn, lambda torch, n: torch.randn(n, 1, 8, 8), {"x": {0: "N"}}),
    "view": (_view_net, lambda torch, n: torch.randn(n, 1, 8, 8), {"x": {0: "N"}}),
    "upsample": (_upsample, lambda torch, n: torch.randn(n, 3, 8, 8), {"x": {0: "N"}}),
    "attention": (_attention, lambda torch, n: torch.randint(0, 20, (n, 5 + n)),
                  {"ids": {0: "N", 1: "T"}}),
}


def _load(torch, tmp_path, model_name, exporter):
    make, example, dims = MODELS[model_name]
    module = make(torch)
    path = _export(torch, module, example(torch, 2), tmp_path / f"{model_name}.onnx",
                   exporter, dims)
    return module, example, dims, path, dg.onnx.load(path)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_one_import_runs_at_two_batch_sizes_equal_to_onnxruntime(torch, tmp_path, model_name,
                                                                 exporter):
    module, example, dims, path, g = _load(torch, tmp_path, model_name, exporter)
    (name, axes), = dims.items()
    (x,) = g.inputs
    for axis, sym in axes.items():
        assert str(x.type.shape[axis]) == sym, x.type        # kept symbolic
    assert all(isinstance(d, int) for v in g.state for d in v.type.shape)
    run = g.compile(passes="O1")
    sess = ort.InferenceSession(str(path))
    for n in (2, 5):
        feed = example(torch, n)
        (got,) = run(**{x.name: feed.numpy()})
        (want,) = sess.run(None, {name: feed.numpy()})
        assert got.shape == want.shape and got.shape[0] == n
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            np.testing.assert_allclose(got, module(feed).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_a_training_step_on_the_import_has_pytorchs_gradients(torch, tmp_path, model_name,
                                                              exporter):
    module, example, dims, path, g = _load(torch, tmp_path, model_name, exporter)
    (x,) = g.inputs
    (y,) = g.outputs
    assert g.state, "the float initializers are trainable state"
    assert all(v.dtype.startswith("float") for v in g.state)
    params = dict(module.named_parameters())
    # the exporters fold BatchNorm into the convolution before it: compare the state that
    # holds a parameter of the module unchanged (the others are products of several)
    same = [v for v in g.state if v.name in params and np.array_equal(
        g.state_init[v], params[v.name].detach().numpy())]
    assert len(same) >= min(4, len(params)), [v.name for v in g.state]
    with g:
        target = dg.placeholder("target", y.type.shape, y.dtype)
        loss = dg.mean((y - target) * (y - target))
        grads = dg.grad(loss, same)
    g.outputs = [loss] + list(grads)
    run = g.compile(passes="O1")
    for n in (3, 4):            # one import, two batch sizes
        feed = example(torch, n)
        rng = np.random.default_rng(n)
        tgt = rng.standard_normal((n,) + tuple(y.type.shape[1:])).astype(np.float32)
        got_loss, *got = run(**{x.name: feed.numpy(), "target": tgt})
        module.zero_grad()
        out = module(feed)
        want_loss = ((out - torch.from_numpy(tgt)) ** 2).mean()
        want_loss.backward()
        np.testing.assert_allclose(got_loss, want_loss.item(), rtol=1e-5, atol=1e-6)
        for v, grad in zip(same, got):
            np.testing.assert_allclose(grad, params[v.name].grad.numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=v.name)
