"""Eager mode's one dispatch (issue 26): the plan cache every eager op goes through, the fast
operators as shims over it, and the dispatch interceptors (the hook point for autocast, vmap
and collectives)."""
import threading

import numpy as np
import pytest

import duograph as dg
from duograph.eager import device as eager_device
from duograph.eager import dispatch
from duograph.eager.dispatch import intercept
from duograph.graphlib.registry import REGISTRY


def _spy(seen):
    def fn(op, inputs, attrs, proceed):
        seen.append(op.name)
        return proceed(op, inputs, attrs)
    return fn


def test_an_interceptor_sees_every_op_dunders_included():
    x = dg.tensor([1.0, 2.0, 3.0])
    y = dg.tensor([4.0, 5.0, 6.0])
    for _ in range(2):          # the second round runs with plans made
        x * y + 1.0, 2.0 - x, -x, x / y
    seen = []
    with intercept(_spy(seen)):
        x * y
        x + 1.0
        2.0 - x
        -x
        x / y
        x.tanh()
        dg.exp(x)
        dg.split(x, 1)          # a multi-output op
    assert seen == ["mul", "add", "sub", "neg", "div", "tanh", "exp", "split"]


def test_an_interceptor_sees_in_place_ops_and_backward():
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    with intercept(_spy(seen)):
        loss = (w * w).sum()
        loss.backward()
        with dg.no_grad():
            w.mul_(0.5)
    assert seen[:2] == ["mul", "sum"]
    assert "mul" in seen[2:]            # the vjp rules ran through dispatch too
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(w.detach().numpy(), [0.5, 1.0])


def test_without_interceptors_the_operators_take_the_plan_and_not_eager_apply(monkeypatch):
    x = dg.tensor([1.0, 2.0])
    y = dg.tensor([3.0, 4.0])
    x * y, x * 2.0, -x          # make the plans
    calls = []
    real = dispatch.eager_apply

    def counting(op, inputs, attrs):
        calls.append(op.name)
        return real(op, inputs, attrs)
    monkeypatch.setattr(dispatch, "eager_apply", counting)
    monkeypatch.setattr(dispatch, "_intercepted", lambda *a: pytest.fail("consulted"))
    out = x * y
    out2 = x * 2.0
    out3 = -x
    assert calls == []
    np.testing.assert_allclose(out.numpy(), [3.0, 8.0])
    np.testing.assert_allclose(out2.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(out3.numpy(), [-1.0, -2.0])


def test_with_an_interceptor_the_operators_leave_the_fast_path(monkeypatch):
    x = dg.tensor([1.0, 2.0])
    x * x
    plan = dispatch._plans[(REGISTRY["mul"], (2,), np.dtype("float32"), (2,),
                            np.dtype("float32"))]
    used = []
    monkeypatch.setitem(dispatch._plans, (REGISTRY["mul"], (2,), np.dtype("float32"), (2,),
                                          np.dtype("float32")),
                        lambda *a: used.append(1) or plan(*a))
    with intercept(lambda op, inputs, attrs, proceed: proceed(op, inputs, attrs)):
        x * x
    assert used == [1]          # proceed reached the plan, through eager_apply
    used.clear()
    x * x
    assert used == [1]          # and without the interceptor, the operator reached it


def test_an_interceptor_changes_an_op_and_never_sees_its_own_ops():
    """An autocast-like interceptor: float64 operands of mul are cast to float32 first (the
    casts it issues are ops too, which it must not see again)."""
    seen = []

    def to_float32(op, inputs, attrs, proceed):
        seen.append(op.name)
        if op is REGISTRY["mul"]:
            inputs = tuple(dg.graphlib.functional.cast(t, "float32")
                           if isinstance(t, dg.Tensor) and t.dtype == "float64" else t
                           for t in inputs)
        return proceed(op, inputs, attrs)
    a = dg.tensor([1.5, 2.5], dtype="float64")
    with intercept(to_float32):
        out = a * a
    assert out.dtype == "float32"
    assert seen == ["mul"]
    np.testing.assert_allclose(out.numpy(), [2.25, 6.25])


def test_interceptors_nest_innermost_first():
    order = []

    def named(name):
        def fn(op, inputs, attrs, proceed):
            order.append(name)
            return proceed(op, inputs, attrs)
        return fn
    x = dg.tensor([1.0])
    with intercept(named("outer")), intercept(named("inner")):
        x + x
    assert order == ["inner", "outer"]


def test_an_interceptor_sees_only_its_own_threads_ops():
    seen = []
    x = dg.tensor([1.0, 2.0])
    done = threading.Event()
    other = []

    def work():
        other.append((x * x).numpy())
        done.set()
    with intercept(_spy(seen)):
        t = threading.Thread(target=work)
        t.start()
        t.join()
        x + x
    assert done.is_set() and seen == ["add"]
    np.testing.assert_allclose(other[0], [1.0, 4.0])


def test_intercept_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match="intercept: expected a callable"):
        intercept(3)


def test_one_plan_per_op_and_signature():
    x = dg.tensor([1.0, 2.0, 3.0])
    x + x
    key = (REGISTRY["add"], (3,), np.dtype("float32"), (3,), np.dtype("float32"))
    plan = dispatch._plans[key]
    dg.add(x, x), x + x, x.add(x)     # the op function, the operator and the method
    assert dispatch._plans[key] is plan
    d = x.double()
    d + d
    assert (REGISTRY["add"], (3,), np.dtype("float64"), (3,), np.dtype("float64")) \
        in dispatch._plans


def test_a_kernel_registered_after_the_plan_replaces_it():
    class Kernels(dict):
        def __missing__(self, op):
            return op.kernel

    class Backend:
        name = "toy"
        xp = np
        kernels = Kernels()

    toy = Backend()
    saved = eager_device.get_backend_provider()
    eager_device.set_backend_provider(lambda device: toy)
    try:
        x = dg.tensor([1.0, 2.0])
        np.testing.assert_allclose((x * x).numpy(), [1.0, 4.0])
        toy.kernels[REGISTRY["mul"]] = lambda xp, a, b: xp.add(a, b)
        np.testing.assert_allclose((x * x).numpy(), [2.0, 4.0])
    finally:
        eager_device.set_backend_provider(saved)
    np.testing.assert_allclose((x * x).numpy(), [1.0, 4.0])


def test_a_table_that_answers_a_new_kernel_on_every_lookup_still_runs():
    class Wrapping:
        def __getitem__(self, op):
            return lambda xp, *arrays, **attrs: op.kernel(xp, *arrays, **attrs)

    class Backend:
        name = "wrapping"
        xp = np
        kernels = Wrapping()

    saved = eager_device.get_backend_provider()
    eager_device.set_backend_provider(lambda device: Backend())
    try:
        x = dg.tensor([1.0, 2.0])
        for _ in range(3):
            np.testing.assert_allclose((x * x + 1.0).numpy(), [2.0, 5.0])
    finally:
        eager_device.set_backend_provider(saved)


def test_the_plan_tapes_and_records_as_the_slow_path():
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        y = (w * 3.0 - w).tanh()
    assert y.grad_fn is not None and y.grad_fn.op is REGISTRY["tanh"]
    y.sum().backward()
    t = np.tanh(2 * np.array([1.0, 2.0]))
    np.testing.assert_allclose(w.grad.numpy(), 2 * (1 - t * t), rtol=1e-3)
    with dg.record() as rec:
        z = w * 3.0             # a planned signature, recorded with its number operand
    assert z.grad_fn is not None
    assert [n.op.name for n in rec.graph.nodes] == ["constant", "mul"]


def test_eager_modules_follow_the_documented_order():
    """eager/__init__.py lists eager's modules bottom to top; each imports only modules listed
    before it (imports inside functions count)."""
    from test_structure import draw
    order = ["grad_mode", "decisions", "device", "pyrandom", "dlpack", "tensors", "tape",
             "dispatch",
             "inplace", "autograd", "creation", "legacy", "guards", "record", "compile"]
    graph = draw()[0]
    eager = sorted(m.split(".")[2] for m in graph if m.startswith("duograph.eager."))
    assert sorted(order) == eager, "a new eager module: place it in this order and the docs"
    for i, name in enumerate(order):
        targets = {t.split(".")[2] for t in graph.successors(f"duograph.eager.{name}")
                   if t.startswith("duograph.eager.")}
        assert targets <= set(order[:i]), f"eager.{name} imports {sorted(targets)}"
