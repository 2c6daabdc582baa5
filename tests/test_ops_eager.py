"""The op-sample table in eager mode: every op gives the same results and gradients eagerly
as in graph mode (and its eager gradients agree with finite differences)."""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg
from op_samples import (F64, OPS, OpInfo, Sample, as_tuple, assert_matches, build,
                        finite_difference, grad_targets, leaves, map_leaves, reference)


def _eager_call(op: OpInfo, sample: Sample, grad_leaves=()):
    """Run the sample on eager tensors; returns (outputs, leaf tensors)."""
    made = []

    def to_tensor(a):
        t = dg.tensor(a, dtype=a.dtype.name)
        if len(made) in grad_leaves:
            t.requires_grad_(True)
        made.append(t)
        return t

    args, kwargs = map_leaves(sample.args, sample.kwargs, to_tensor)
    return list(as_tuple(op.fn(*args, **kwargs))), made


def _samples(select):
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if select(op, s)]


ALL = _samples(lambda op, s: True)
GRAD = _samples(lambda op, s: bool(grad_targets(op, s)))


@pytest.mark.parametrize("op, sample", ALL)
def test_eager_forward_equals_graph_mode(op: OpInfo, sample: Sample):
    built = build(op, sample)
    graph_out = built.graph.compile(outputs=built.outputs)(**built.feeds)
    eager_out, _ = _eager_call(op, sample)
    assert len(eager_out) == len(graph_out)
    for k, (e, g) in enumerate(zip(eager_out, graph_out)):
        assert isinstance(e, dg.Tensor), f"output {k} is {type(e).__name__}, not a Tensor"
        assert_matches(e.numpy(), g, op.tol, f"output {k}: ")
    if not op.random:
        for k, (e, w) in enumerate(zip(eager_out, reference(op, sample))):
            assert_matches(e.numpy(), w, op.tol, f"output {k} vs numpy: ")


@pytest.mark.parametrize("op, sample", GRAD)
def test_eager_grad_equals_graph_grad_and_finite_differences(op: OpInfo, sample: Sample):
    targets = grad_targets(op, sample)
    rng = np.random.default_rng(0)
    built = build(op, sample)
    float_outs = [k for k, v in enumerate(built.outputs) if v.dtype == F64]
    cts = {k: rng.normal(size=built.outputs[k].shape) for k in float_outs}
    # graph mode (symbolic)
    with built.graph:
        loss = None
        for k in float_outs:
            term = dg.sum(built.outputs[k] * dg.constant(cts[k]))
            loss = term if loss is None else loss + term
        grads = dg.grad(loss, [built.inputs[i] for i in targets])
    graph_grads = built.graph.compile(outputs=grads)(**built.feeds)
    # eager (tape)
    outs, made = _eager_call(op, sample, grad_leaves=targets)
    eloss = None
    for k in float_outs:
        term = (outs[k] * dg.tensor(cts[k])).sum()
        eloss = term if eloss is None else eloss + term
    eloss.backward()

    def f(arrays):
        ref = reference(op, sample, arrays)
        return sum(float(np.sum(ref[k] * cts[k])) for k in float_outs)

    arrays = leaves(sample.args, sample.kwargs)
    for i, g in zip(targets, graph_grads):
        eg = made[i].grad
        assert eg is not None, f"no eager gradient for operand {i}"
        np.testing.assert_allclose(eg.numpy(), g, rtol=1e-10, atol=1e-12,
                                   err_msg=f"eager vs graph gradient of operand {i}")
        np.testing.assert_allclose(eg.numpy(), finite_difference(f, arrays, i), rtol=1e-5,
                                   atol=1e-6, err_msg=f"eager vs finite differences, {i}")
