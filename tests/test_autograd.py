"""Eager autograd: the classic cases, accumulation, modes, hooks, custom functions, errors."""
import numpy as np
import pytest

import duograph as dg


def test_square_sum():
    x = dg.tensor([2.0, 3.0], requires_grad=True)
    (x ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 6.0])


def test_gradients_accumulate_across_backward_calls():
    x = dg.tensor(1.0, requires_grad=True)
    (x * 2).backward()
    (x * 3).backward()
    assert x.grad.item() == 5.0


def test_mean_of_square_of_scaled():
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ((x * 2) ** 2).mean().backward()
    np.testing.assert_allclose(x.grad.numpy(), [8 / 3, 16 / 3, 8], rtol=1e-6)


def test_requires_grad_propagates_and_leaves():
    x = dg.tensor([1.0], requires_grad=True)
    c = dg.tensor([2.0])
    y = x * c
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    assert y.grad_fn.op.name == "mul"
    assert x.is_leaf and x.grad_fn is None
    assert not (c * c).requires_grad


def test_no_grad_and_detach_stop_tracking():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    with dg.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    z = x.detach() * 2
    assert not z.requires_grad
    with dg.no_grad():
        with dg.enable_grad():
            w = x * 2
    assert w.requires_grad
    dg.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        dg.set_grad_enabled(True)
    assert dg.is_grad_enabled()

    @dg.no_grad()
    def f(t):
        return t * 3
    assert not f(x).requires_grad


def test_backward_of_non_scalar_needs_gradient():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with pytest.raises(RuntimeError, match="scalar outputs"):
        y.backward()
    y.backward(dg.tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 30.0])


def test_second_backward_through_freed_graph_errors_unless_retained():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_inplace_modification_of_saved_tensor_raises_at_backward_naming_the_op():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    w = dg.tensor([3.0, 4.0])
    y = (x * w).sum()
    w.mul_(2)
    with pytest.raises(RuntimeError, match=r"gradient of mul .*in-place"):
        y.backward()


def test_inplace_on_output_saved_by_exp_raises():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    y.add_(1)          # exp's gradient reads its output
    with pytest.raises(RuntimeError, match="exp"):
        y.sum().backward()


def test_inplace_on_output_saved_by_relu_raises():
    x = dg.tensor([-1.0, 2.0], requires_grad=True)
    y = dg.relu(x)
    y.add_(1)          # relu's gradient reads its output (as PyTorch's)
    with pytest.raises(RuntimeError, match="relu"):
        y.sum().backward()


@pytest.mark.parametrize("name, grad", [
    ("relu_", lambda h0: 2 * np.maximum(h0, 0) * (h0 > 0) * 2),
    ("exp_", lambda h0: 2 * np.exp(h0) * np.exp(h0) * 2),
    ("sqrt_", lambda h0: 2 * np.sqrt(h0) / (2 * np.sqrt(h0)) * 2)])
def test_inplace_op_whose_gradient_reads_its_output(name, grad):
    """h.relu_(), h.exp_(), h.sqrt_(): the op's output is h itself afterwards, at the version
    the in-place write gave it; backward reads it there instead of refusing."""
    x = dg.tensor([0.5, 2.0, 3.0], requires_grad=True)
    h = x * 2.0 - (0.0 if name == "sqrt_" else 1.5)
    h0 = h.detach().numpy().copy()
    getattr(h, name)()
    (h * h).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), grad(h0), rtol=1e-12)


def test_inplace_on_nonleaf_keeps_history_when_safe():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y.add_(3)          # add's gradient reads no data: fine, and y now includes the add
    y.mul_(2)
    (y.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_higher_order_through_create_graph():
    x = dg.tensor(2.0, requires_grad=True)
    y = x ** 3
    (dy,) = dg.autograd.grad(y, [x], create_graph=True)
    assert dy.item() == pytest.approx(12.0)
    (d2y,) = dg.autograd.grad(dy, [x])
    assert d2y.item() == pytest.approx(12.0)     # 6x at x=2
    x.grad = None
    z = x ** 3
    z.backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.backward()
    assert x.grad.item() == pytest.approx(12.0)


def test_third_order_of_sin():
    x = dg.tensor(0.7, dtype="float64", requires_grad=True)
    g1, = dg.autograd.grad(dg.sin(x), [x], create_graph=True)
    g2, = dg.autograd.grad(g1, [x], create_graph=True)
    g3, = dg.autograd.grad(g2, [x])
    assert g3.item() == pytest.approx(-np.cos(0.7))


def test_autograd_grad_unused_and_intermediate():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    u = dg.tensor([1.0], requires_grad=True)
    h = x * 2
    y = (h * h).sum()
    gh, gx = dg.autograd.grad(y, [h, x], retain_graph=True)
    np.testing.assert_allclose(gh.numpy(), [4.0, 8.0])
    np.testing.assert_allclose(gx.numpy(), [8.0, 16.0])
    assert x.grad is None       # grad() returns, it does not accumulate
    with pytest.raises(RuntimeError, match="allow_unused"):
        dg.autograd.grad(y, [u], retain_graph=True)
    (gu,) = dg.autograd.grad(y, [u], allow_unused=True)
    assert gu is None


def test_hooks_can_replace_gradients():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    y = x * 3
    y.register_hook(lambda g: seen.append(g.numpy().copy()))
    h = x.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(seen[0], [1.0, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 30.0])
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_retain_grad_keeps_nonleaf_grad():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [4.0, 8.0])


def test_grad_arrays_are_not_shared_between_leaves():
    a = dg.tensor([1.0], requires_grad=True)
    b = dg.tensor([1.0], requires_grad=True)
    (a + b).sum().backward()
    a.grad.zero_()
    assert b.grad.item() == 1.0


def test_custom_function():
    class Cube(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x

    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x)
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    assert dg.autograd.gradcheck(Cube.apply, [dg.tensor([0.3, -1.2], dtype="float64",
                                                        requires_grad=True)])


def test_gradcheck_detects_a_wrong_rule():
    class Wrong(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    x = dg.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    with pytest.raises(dg.autograd.GradcheckError):
        dg.autograd.gradcheck(Wrong.apply, [x])
    assert not dg.autograd.gradcheck(Wrong.apply, [x], raise_exception=False)


def test_gradcheck_on_composite():
    x = dg.tensor(np.random.default_rng(0).standard_normal((3, 4)), dtype="float64",
                  requires_grad=True)
    w = dg.tensor(np.random.default_rng(1).standard_normal((4, 2)), dtype="float64",
                  requires_grad=True)
    assert dg.autograd.gradcheck(lambda a, b: dg.log_softmax(dg.tanh(a @ b), 1), [x, w])


def test_eager_and_graph_mode_gradients_agree_on_mlp():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((6, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 5)).astype(np.float32)
    w2 = rng.standard_normal((5, 1)).astype(np.float32)
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", xs.shape)
        a = dg.placeholder("a", w1.shape)
        b = dg.placeholder("b", w2.shape)
        loss = dg.mean(dg.gelu(x @ a) @ b)
        ga, gb = dg.grad(loss, [a, b])
    lv, gav, gbv = g.compile(outputs=[loss, ga, gb])(x=xs, a=w1, b=w2)
    ta = dg.tensor(w1, requires_grad=True)
    tb = dg.tensor(w2, requires_grad=True)
    el = dg.mean(dg.gelu(dg.tensor(xs) @ ta) @ tb)
    el.backward()
    np.testing.assert_allclose(el.item(), lv, rtol=1e-6)
    np.testing.assert_allclose(ta.grad.numpy(), gav, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tb.grad.numpy(), gbv, rtol=1e-5, atol=1e-6)


def test_backward_options_gradient_inputs_and_create_graph():
    a = dg.tensor([1.0, 2.0], requires_grad=True)
    b = dg.tensor([3.0, 4.0], requires_grad=True)
    y = a * b
    y.backward(gradient=[1.0, 10.0], inputs=[a])
    assert a.grad.tolist() == [3.0, 40.0] and b.grad is None
    with pytest.raises(RuntimeError, match=r"gradient has shape \[3\]"):
        (a * 2).backward(dg.ones(3))
    (a * a).sum().backward(create_graph=True)
    assert a.grad.requires_grad and a.grad.grad_fn is not None


def test_autograd_grad_with_grad_outputs_and_create_graph():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    (g,) = dg.autograd.grad(y, x, grad_outputs=dg.tensor([1.0, 10.0]), retain_graph=True)
    assert g.tolist() == [2.0, 40.0] and not g.requires_grad
    (g,) = dg.autograd.grad([y.sum(), (x * 3).sum()], [x], create_graph=True)
    assert g.tolist() == [5.0, 7.0] and g.requires_grad
    with pytest.raises(RuntimeError, match="input 0 is a tensor that does not require grad"):
        dg.autograd.grad((x * 2).sum(), [dg.ones(2)])


def test_freed_graph_error_says_how_to_find_the_op():
    x = dg.tensor([1.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="DUOGRAPH_SOURCE=1"):
        y.backward()


def test_in_place_through_a_view_with_autograd_is_refused():
    a = dg.tensor([1.0, 2.0], requires_grad=True)
    y = a * 1
    with pytest.raises(RuntimeError, match=r"view \(getitem\)"):
        y[0:1].mul_(2)         # PyTorch rebases y's history; duograph refuses clearly
    z = a * 1
    v = z.reshape(2, 1)
    z.mul_(2)                  # v's data changed behind its gradient path
    with pytest.raises(RuntimeError, match="gradient of reshape"):
        (v * 1).sum().backward()


def test_setitem_records_for_autograd():
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = dg.tensor(5.0, requires_grad=True)
    y = x * 2
    y[1] = v * 3
    y[y > 5] = 0.0
    assert y.tolist() == [2.0, 0.0, 0.0]
    (y * dg.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [2.0, 0.0, 0.0]
    assert v.grad.item() == 0.0
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    z = w * 1
    z[0] = w[1] * w[1]
    z.sum().backward()
    assert w.grad.tolist() == [0.0, 5.0]


def test_gradcheck_perturbs_non_contiguous_inputs():
    arr = np.arange(6.0).reshape(2, 3).T        # a transposed (non-contiguous) view
    x = dg.from_numpy(arr).requires_grad_()
    assert dg.autograd.gradcheck(lambda t: (t * t).sum(1), [x])
    np.testing.assert_array_equal(arr, np.arange(6.0).reshape(2, 3).T)   # restored


def test_grad_mode_contexts_as_bare_decorators():
    x = dg.tensor([1.0], requires_grad=True)

    @dg.no_grad
    def f(t):
        return t * 2

    @dg.enable_grad
    def g(t):
        return t * 2

    assert not f(x).requires_grad and f.__name__ == "f"
    with dg.no_grad():
        assert g(x).requires_grad
    with dg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert dg.is_grad_enabled()
