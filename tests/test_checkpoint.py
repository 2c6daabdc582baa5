"""Activation checkpointing without PyTorch: the forward keeps no intermediates on the tape,
backward recomputes once per checkpoint with the random state restored (dropout draws the
same masks), gradients equal the plain ones, and graph mode marks the region for the remat
pass (``test_checkpoint_torch.py`` compares with ``torch.utils.checkpoint``)."""
import warnings

import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.passes import remat
from duograph.utils.checkpoint import checkpoint, checkpoint_sequential


def _grads(module, x):
    out = {n: p.grad.numpy().copy() for n, p in module.named_parameters()}
    out["input"] = x.grad.numpy().copy()
    for p in module.parameters():
        p.grad = None
    x.grad = None
    return out


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_transformer_block_same_gradients_with_dropout_and_one_recompute(use_reentrant):
    dg.manual_seed(0)
    block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.2, batch_first=True)
    x = dg.randn(2, 5, 16, requires_grad=True)
    calls = []

    def f(t):
        calls.append(1)
        return block(t)
    dg.manual_seed(1)
    plain = f(x)
    plain.sum().backward()
    ref = _grads(block, x)
    dg.manual_seed(1)
    out = checkpoint(f, x, use_reentrant=use_reentrant)
    assert len(calls) == 2
    assert out.grad_fn is not None and out.grad_fn.op.name == "checkpoint"
    np.testing.assert_array_equal(out.detach().numpy(), plain.detach().numpy())
    out.sum().backward()
    assert len(calls) == 3                      # one recomputation
    got = _grads(block, x)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_the_forward_keeps_no_intermediates():
    layers = [nn.Linear(8, 8) for _ in range(4)]

    def f(t):
        for lin in layers:
            t = lin(t).tanh()
        return t
    x = dg.randn(3, 8, requires_grad=True)
    out = checkpoint(f, x, use_reentrant=False)
    # one tape node stands for the whole function; it holds the input and the weights, no
    # intermediate (nothing inside was taped)
    node = out.grad_fn
    assert node.op.name == "checkpoint"
    params = [p for lin in layers for p in lin.parameters()]
    assert len(node.inputs) == 1 + len(params)
    assert {id(t) for t in node.inputs} == {id(t) for t in [x] + params}
    assert all(n is None for n in node.next_nodes)      # leaves only: no taped producer


def test_autograd_grad_and_kwargs_without_reentrant():
    w = dg.randn(4, 4, requires_grad=True)
    x = dg.randn(2, 4, requires_grad=True)

    def f(t, scale=1.0):
        return (t @ w).sin() * scale
    out = checkpoint(f, x, use_reentrant=False, scale=2.0)
    gx, gw = dg.autograd.grad(out.sum(), [x, w])
    rx, rw = dg.autograd.grad(f(x, scale=2.0).sum(), [x, w])
    np.testing.assert_allclose(gx.numpy(), rx.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), rw.numpy(), rtol=1e-6)


def test_weights_get_gradients_when_the_input_needs_none():
    lin = nn.Linear(4, 3)
    x = dg.randn(2, 4)
    out = checkpoint(lin, x, use_reentrant=False)
    assert out.requires_grad
    out.sum().backward()
    np.testing.assert_allclose(lin.bias.grad.numpy(), [2.0, 2.0, 2.0])
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = checkpoint(lin, x, use_reentrant=True)
    assert not out.requires_grad


def test_use_reentrant_warning_and_errors():
    x = dg.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        checkpoint(dg.sin, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
        checkpoint(dg.sin, x, use_reentrant=True, foo=1)
    with pytest.raises(TypeError, match="return a tensor or a tuple of tensors"):
        checkpoint(lambda t: "text", x, use_reentrant=False)
    with pytest.warns(UserWarning, match="checkpoint_sequential: the use_reentrant"):
        checkpoint_sequential([nn.ReLU()], 1, x)


def test_checkpoint_sequential_same_gradients_and_recomputes_each_segment():
    dg.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(6, 6), nn.Tanh())])
    x = dg.randn(4, 6, requires_grad=True)
    model(x).pow(2).sum().backward()
    ref = _grads(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = checkpoint_sequential(model, 3, x, use_reentrant=False)
    out.pow(2).sum().backward()
    got = _grads(model, x)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_autocast_state_is_restored_in_the_recomputation():
    lin = nn.Linear(8, 8)
    x = dg.randn(2, 8, requires_grad=True)
    with dg.autocast("cpu"):
        out = checkpoint(lin, x, use_reentrant=False)
        assert out.dtype == "bfloat16"
    out.float().sum().backward()             # outside the block: recomputed in bf16 again
    assert x.grad.dtype == "float32"
    g = x.grad.numpy().copy()
    x.grad = None
    with dg.autocast("cpu"):
        plain = lin(x)
    plain.float().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_graph_mode_marks_the_region_for_remat():
    with dg.Graph("g") as g:
        x = dg.placeholder("x", (4, 8))
        w = dg.placeholder("w", (8, 8))
        h = checkpoint(lambda t: dg.matmul(t, w).tanh(), x, use_reentrant=False)
        out = dg.matmul(h, w).sum()
    marked = [n for n in g.nodes if remat._checkpointed(n)]
    assert [n.op.name for n in marked] == ["matmul", "tanh"]
    assert remat._cheap(marked[0])                 # a matmul, recomputable because marked
    assert not remat._cheap(out.node.inputs[0].node)


def _stack(checkpointed: bool):
    with dg.Graph("g") as g:
        x = dg.placeholder("x", (64, 64))
        ws = [dg.placeholder(f"w{i}", (64, 64)) for i in range(4)]
        h = x
        for w in ws:
            def layer(t, w=w):
                return dg.tanh(dg.matmul(t, w))
            h = checkpoint(layer, h, use_reentrant=False) if checkpointed else layer(h)
        grads = dg.grad(dg.sum(h * h), ws)
    g.outputs = list(grads)
    return g


def test_remat_recomputes_a_checkpointed_chain_with_the_same_results():
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((64, 64)).astype(np.float32)}
    feeds.update({f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) / 8
                  for i in range(4)})
    made = {}
    for marked in (False, True):
        g = _stack(marked)
        ref = g.compile(outputs=g.outputs, passes="O0").run(feeds)
        matmuls = sum(n.op.name == "matmul" for n in g.nodes)
        result = remat.rematerialize(g, 0)
        g.verify()
        made[marked] = sum(n.op.name == "matmul" for n in g.nodes) - matmuls, result.changed
        got = g.compile(outputs=g.outputs, passes="O0").run(feeds)
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert made[False] == (0, False)          # a matmul is not cheap: never recomputed
    assert made[True][1] and made[True][0] >= 1, made    # marked: the chain is made again


def test_checkpoint_under_compile_runs_the_function_as_recorded():
    lin = nn.Linear(4, 4)
    x = dg.randn(3, 4)

    @dg.compile
    def f(t):
        return checkpoint(lambda u: lin(u).tanh(), t, use_reentrant=False).sum()
    expected = lin(x).tanh().sum()
    got = f(x)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
