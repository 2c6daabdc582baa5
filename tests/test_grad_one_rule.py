"""One gradient rule per op: the OpDef's vjp is what eager backward, graph-mode ``dg.grad``
and the backend's vjp kernels all stand on.

Each test swaps one op's rule in one place (the OpDef's ``vjp``) and checks that both modes
change with it. The CPU backend keeps kernels for the commonest rules (``mul``, ``matmul``,
...); a kernel is tied to the rule it was written for, so with a swapped rule the swapped rule
runs, and with the original rule back the kernel runs again.
"""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg
from duograph.eager import device as eager_device
from duograph.graphlib.ops.elementwise import mul_op
from duograph.graphlib.ops.linalg import matmul_op


def _scaled(rule, factor):
    """``rule`` with every input cotangent times ``factor`` (written with op functions, as a
    rule is: it serves graph and eager mode alike)."""
    def vjp(cts, ins, outs, attrs, needs):
        return [None if c is None else c * factor
                for c in rule(cts, ins, outs, attrs, needs)]
    return vjp


def _eager_grads(fn, arrays):
    leaves = [dg.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    return [t.grad.numpy() for t in leaves]


def _graph_grads(fn, arrays):
    graph = dg.Graph("one_rule")
    with graph:
        phs = [dg.placeholder(f"x{i}", a.shape, str(a.dtype)) for i, a in enumerate(arrays)]
        grads = dg.grad(dg.sum(fn(*phs)), phs)
    run = graph.compile(outputs=grads, passes="O0")
    return [np.asarray(r) for r in run(**{f"x{i}": a for i, a in enumerate(arrays)})]


_CASES = [
    ("mul", mul_op, lambda a, b: a * b, [(3, 4), (3, 4)]),
    ("matmul", matmul_op, lambda a, b: a @ b, [(3, 4), (4, 5)]),
    ("linear", matmul_op, lambda x, w: x @ w.T, [(5, 7), (3, 7)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, op, fn, shapes", _CASES, ids=[c[0] for c in _CASES])
def test_a_swapped_vjp_changes_eager_and_graph_gradients(monkeypatch, name, op, fn, shapes,
                                                         dtype):
    """Swapping ``op.vjp`` alone changes eager ``backward()`` and graph ``dg.grad`` alike,
    although the CPU backend holds a vjp kernel for the original rule."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    backend = eager_device.backend_for("cpu")
    assert backend.vjp_kernels.kernel(op) is not None     # a kernel for the rule as it is
    eager_before = _eager_grads(fn, arrays)
    graph_before = _graph_grads(fn, arrays)
    for e, g in zip(eager_before, graph_before):
        np.testing.assert_allclose(e, g, rtol=1e-5)
    monkeypatch.setattr(op, "vjp", _scaled(op.vjp, 3.0))
    assert backend.vjp_kernels.kernel(op) is None         # not for the swapped rule
    assert op in backend.vjp_kernels                      # (still registered, for the old)
    eager_after = _eager_grads(fn, arrays)
    graph_after = _graph_grads(fn, arrays)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for before, e, g in zip(eager_before, eager_after, graph_after):
        np.testing.assert_allclose(e, 3.0 * before, rtol=tol, atol=tol)
        np.testing.assert_allclose(g, 3.0 * before, rtol=tol, atol=tol)
    monkeypatch.undo()
    assert backend.vjp_kernels.kernel(op) is not None     # the rule back: its kernel too
    for before, e in zip(eager_before, _eager_grads(fn, arrays)):
        np.testing.assert_array_equal(e, before)


def test_the_backend_kernel_runs_for_the_rule_it_was_written_for(monkeypatch):
    """With the rule unchanged the backend's kernel is what the walk runs (counted here);
    with the rule swapped it is not called at all."""
    table = eager_device.backend_for("cpu").vjp_kernels
    rule, kernel = table[mul_op]
    calls = []

    def counting(*args):
        calls.append(1)
        return kernel(*args)
    monkeypatch.setitem(table, mul_op, (rule, counting))
    arrays = [np.arange(1.0, 5.0), np.arange(2.0, 6.0)]
    grads = _eager_grads(lambda a, b: a * b, arrays)
    assert calls == [1]
    np.testing.assert_array_equal(grads[0], arrays[1])
    monkeypatch.setattr(mul_op, "vjp", _scaled(mul_op.vjp, -1.0))
    grads = _eager_grads(lambda a, b: a * b, arrays)
    assert calls == [1]                   # the swapped rule ran, the kernel did not
    np.testing.assert_array_equal(grads[0], -arrays[1])


def test_higher_order_and_recorded_backward_use_the_rule(monkeypatch):
    """``create_graph=True`` runs the rule itself (its ops are recorded): a swapped rule shows
    in the first and the second derivative."""
    monkeypatch.setattr(mul_op, "vjp", _scaled(mul_op.vjp, 2.0))
    x = dg.tensor([1.5, -2.0], dtype="float64", requires_grad=True)
    g1, = dg.autograd.grad((x * x).sum(), x, create_graph=True)
    # x * x: each operand's cotangent is 2 * x under the swapped rule, so 4x in all
    np.testing.assert_allclose(g1.detach().numpy(), 4.0 * x.detach().numpy())
    g2, = dg.autograd.grad(g1.sum(), x)
    # g1 = (1 * x) * 2.0 + (1 * x) * 2.0, recorded with muls whose swapped rule doubles
    # again going back: 2 terms * (2.0 * 2) * 2 = 16 (the original rule gives 2)
    np.testing.assert_allclose(g2.numpy(), [16.0, 16.0])


def test_a_vjp_kernel_for_an_op_without_a_rule_is_refused():
    from duograph.runtime.backend import VjpKernelTable
    from duograph.graphlib.registry import REGISTRY
    no_rule = next(op for op in REGISTRY.values() if op.vjp is None)
    with pytest.raises(ValueError, match="without a vjp rule"):
        VjpKernelTable().register(no_rule, lambda *a: None)
