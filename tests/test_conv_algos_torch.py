"""conv2d through each CPU algorithm (``dg.config.conv_algorithm`` forced), values and
gradients against PyTorch in float32, eagerly and in an O2 graph: the CNN step's two layers
(at a small batch), depthwise (plain, multiplier, strided), 1x1, grouped, dilated.

Tolerance: both sides round float32 sums of K products in their own orders, so each may be
off the exact value by ~K * eps * sum |terms|; the check is elementwise against
2 * K * eps * (the same convolution of |operands|, in float64), K per pass as in
tests/test_conv_algos.py. Where Winograd may run (forced or by the rule) the value and
input gradient get its normwise bound: 4 times the largest element of that bound
(``WINOGRAD_GROWTH`` in tests/test_conv_algos.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops import conv
from duograph.runtime.cpu import autotune
from duograph.runtime.cpu.numba_support import numba_available

torch = pytest.importorskip("torch")

CASES = [  # id, x shape, w shape, stride, padding, dilation, groups
    ("cnn_conv1", (4, 1, 28, 28), (16, 1, 3, 3), 1, 0, 1, 1),
    ("cnn_conv2", (4, 16, 13, 13), (32, 16, 3, 3), 1, 0, 1, 1),
    ("depthwise", (2, 8, 12, 12), (8, 1, 3, 3), 1, 1, 1, 8),
    ("depthwise_multiplier_s2", (2, 4, 11, 10), (8, 1, 5, 5), 2, 2, 1, 4),
    ("pointwise", (2, 16, 7, 7), (24, 16, 1, 1), 1, 0, 1, 1),
    ("grouped_dilated", (2, 8, 10, 10), (8, 2, 3, 3), 1, 2, 2, 4),
    ("resnet_3x3", (2, 32, 16, 15), (40, 32, 3, 3), 1, 1, 1, 1),
]


def _bound(x, w, g, attrs):
    """2 * K * eps * |x| conv |w| (and the same for both gradients), float64."""
    x, w, g = (np.abs(a).astype(np.float64) for a in (x, w, g))
    eps = np.finfo(np.float32).eps
    k = w.shape[1] * w.shape[2] * w.shape[3]
    return (2 * k * eps * conv._conv2d_kernel(np, x, w, **attrs),
            2 * (w.shape[0] // attrs["groups"]) * w.shape[2] * w.shape[3] * eps
            * conv._conv2d_input_grad_kernel(np, g, w, shape=x.shape, **attrs),
            2 * g.shape[0] * g.shape[2] * g.shape[3] * eps
            * conv._conv2d_weight_grad_kernel(np, x, g, shape=w.shape, **attrs))


@pytest.mark.skipif(not numba_available(), reason="the algorithms need numba")
@pytest.mark.parametrize("mode", ["eager", "O2"])
@pytest.mark.parametrize("algorithm", ["direct", "gemm", "winograd", "auto"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_each_algorithm_matches_torch(case, algorithm, mode):
    _, xs, ws, stride, pad, dil, groups = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.3).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, None, stride, pad, dil, groups)
    c = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(c))
    with dg.config.override(conv_algorithm=algorithm):
        if mode == "eager":
            dx, dw = dg.tensor(x, requires_grad=True), dg.tensor(w, requires_grad=True)
            y = dg.conv2d(dx, dw, None, stride, pad, dil, groups)
            y.backward(dg.tensor(c))
            got = (y.detach().numpy(), dx.grad.numpy(), dw.grad.numpy())
        else:
            graph = dg.Graph("conv_algo")
            with graph:
                xv = dg.placeholder("x", xs)
                wv = dg.placeholder("w", ws)
                cv = dg.placeholder("c", c.shape)
                y = dg.conv2d(xv, wv, None, stride, pad, dil, groups)
                grads = dg.grad((y * cv).sum(), [xv, wv])
            got = graph.compile(outputs=[y] + grads, passes="O2")(x=x, w=w, c=c)
    attrs = dict(stride=(stride,) * 2, padding=(pad,) * 4, dilation=(dil,) * 2,
                 groups=groups)
    bounds = list(_bound(x, w, c, attrs))
    for k, kind in enumerate(("forward", "input_grad")):
        if algorithm in ("winograd", "auto") and autotune.winograd_applies(
                kind, ws, groups, attrs["stride"], attrs["padding"], attrs["dilation"]):
            bounds[k] = np.full_like(bounds[k], 4 * bounds[k].max())
    for name, ours, theirs, bound in zip(("value", "input grad", "weight grad"), got,
                                         (ty.detach(), tx.grad, tw.grad), bounds):
        err = np.abs(np.asarray(ours, np.float64) - theirs.numpy().astype(np.float64))
        assert np.all(err <= bound + 1e-30), (name, float(err.max()), float(bound.max()))
