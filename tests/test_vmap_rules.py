"""The batching rules of the control-flow ops (scan, cond, while_loop) and of the mask ops,
without PyTorch: vmap equals running each example, eagerly, on graph Values and under
dg.compile, with gradients per example (vmap(grad)) and of the whole batch (grad(vmap)), and
vmap runs the rule, not the per-example loop."""
import warnings

import numpy as np
import pytest

import duograph as dg
from duograph import func
from duograph.func import batched as batched_mod

_rng = np.random.default_rng(271)


class _Batched:
    """``with _Batched():`` fails if vmap falls back to the per-example loop inside."""

    def __enter__(self):
        batched_mod.FALLBACK_OPS.clear()
        self.catch = warnings.catch_warnings()
        self.catch.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        self.catch.__exit__(*exc)
        if exc[0] is None:
            assert not batched_mod.FALLBACK_OPS, sorted(batched_mod.FALLBACK_OPS)


def _each(fn, *args, in_dims=None, n):
    """``fn`` on each example ``i`` of the batched ``args`` (in_dims None: shared)."""
    dims = in_dims or (0,) * len(args)
    outs = [fn(*[a if d is None else a[i] for a, d in zip(args, dims)]) for i in range(n)]
    if isinstance(outs[0], (tuple, list)):
        return [np.stack([o[k].numpy() for o in outs]) for k in range(len(outs[0]))]
    return np.stack([o.numpy() for o in outs])


def _check(got, want, tol=1e-12):
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _check(g, w, tol)
        return
    got = got.detach().numpy() if hasattr(got, "detach") else np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


W = dg.tensor(_rng.standard_normal((3, 3)) * 0.7)


def _rnn(h0, xs, w, reverse=False, checkpoint=False):
    def step(h, x):
        h = (h @ w + x).tanh()
        return h, (h * 2.0, h.sum())
    return dg.scan(step, h0, xs, reverse=reverse, checkpoint=checkpoint)


@pytest.mark.parametrize("reverse, checkpoint", [(False, False), (True, False), (False, True)])
def test_scan_under_vmap_equals_each_example_with_its_gradients(reverse, checkpoint):
    h0, xs = dg.tensor(_rng.standard_normal((4, 3))), dg.tensor(_rng.standard_normal((4, 9, 3)))

    def f(h, x, w):
        c, (ys, sums) = _rnn(h, x, w, reverse, checkpoint)
        return c, ys, sums
    with _Batched():
        got = func.vmap(f, in_dims=(0, 0, None))(h0, xs, W)
    _check(got, _each(f, h0, xs, W, in_dims=(0, 0, None), n=4))

    def loss(h, x, w):
        c, ys, sums = f(h, x, w)
        return (c * c).sum() + ys.sin().sum() + sums.sum()
    grad = func.grad(loss, argnums=(0, 1, 2))
    with _Batched():
        got = func.vmap(grad, in_dims=(0, 0, None))(h0, xs, W)
    _check(got, _each(grad, h0, xs, W, in_dims=(0, 0, None), n=4), 1e-10)
    # the gradient of the whole batch through the batched scan (grad of vmap) sums them
    with _Batched():
        total = func.grad(lambda w: func.vmap(loss, in_dims=(0, 0, None))(h0, xs, w).sum())(W)
    _check(total, np.sum(got[2].numpy(), 0), 1e-10)


def test_scan_with_only_the_carry_or_only_the_xs_batched():
    h0, xs = dg.tensor(_rng.standard_normal((4, 3))), dg.tensor(_rng.standard_normal((9, 3)))
    f = lambda h, x: _rnn(h, x, W)[0]        # noqa: E731
    with _Batched():
        got = func.vmap(f, in_dims=(0, None))(h0, xs)
    _check(got, _each(f, h0, xs, in_dims=(0, None), n=4))
    xb = dg.tensor(_rng.standard_normal((4, 9, 3)))
    with _Batched():
        got = func.vmap(f, in_dims=(None, 0))(h0[0], xb)
    _check(got, _each(f, h0[0], xb, in_dims=(None, 0), n=4))
    # fori_loop with Python bounds is a scan over the index
    g = lambda x: dg.fori_loop(0, 5, lambda i, c: (c @ W).sin() + i, x)   # noqa: E731
    with _Batched():
        got = func.vmap(g)(h0)
    _check(got, _each(g, h0, n=4))


def test_scan_under_vmap_on_graph_values_and_under_compile():
    h0, xs = dg.tensor(_rng.standard_normal((4, 3))), dg.tensor(_rng.standard_normal((4, 6, 3)))
    want = _each(lambda h, x: _rnn(h, x, W)[0], h0, xs, n=4)
    g = dg.Graph("scan_vmap")
    with g:
        hv = g.add_input("h", dg.TensorType((4, 3), "float64"))
        xv = g.add_input("x", dg.TensorType((4, 6, 3), "float64"))
        with _Batched():
            out = func.vmap(lambda h, x: _rnn(h, x, W)[0])(hv, xv)
    assert [n.op.name for n in g.nodes].count("scan") == 1      # one batched scan node
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[out], passes=passes)(h=h0.numpy(), x=xs.numpy())
        _check(got[0] if isinstance(got, (tuple, list)) else got, want)
    compiled = dg.compile(lambda h, x: func.vmap(lambda a, b: _rnn(a, b, W)[0])(h, x))
    with _Batched():
        _check(compiled(h0, xs), want)
        _check(compiled(h0, xs), want)


def _branchy(x, y):
    return dg.cond(x.sum() > 0, lambda a, b: ((a * b).sin(), a + 1),
                   lambda a, b: (a - b, b * 3), x, y)


def test_cond_with_a_predicate_per_example_selects_each_examples_branch():
    x = dg.tensor(_rng.standard_normal((8, 3)))
    y = dg.tensor(_rng.standard_normal((8, 3)))
    assert 0 < int((x.numpy().sum(1) > 0).sum()) < 8           # both branches are taken
    with _Batched():
        got = func.vmap(_branchy)(x, y)
    _check(got, _each(_branchy, x, y, n=8))
    loss = lambda a, b: sum(o.exp().sum() for o in _branchy(a, b))   # noqa: E731
    grad = func.grad(loss, argnums=(0, 1))
    with _Batched():
        got = func.vmap(grad)(x, y)
    _check(got, _each(grad, x, y, n=8))


def test_cond_with_a_shared_predicate_stays_one_cond():
    x, y = dg.tensor(_rng.standard_normal(3)), dg.tensor(_rng.standard_normal((5, 3)))
    with _Batched():
        got = func.vmap(_branchy, in_dims=(None, 0))(x, y)
    _check(got, _each(_branchy, x, y, in_dims=(None, 0), n=5))
    g = dg.Graph("cond_vmap")
    with g:
        yv = g.add_input("y", dg.TensorType((5, 3), "float64"))
        xv = g.add_input("x", dg.TensorType((3,), "float64"))
        with _Batched():
            g.outputs = list(func.vmap(_branchy, in_dims=(None, 0))(xv, yv))
    assert [n.op.name for n in g.nodes].count("cond") == 1


def _halve(x):
    return dg.while_loop(lambda c: (c[0] * c[0]).sum() > 1.0,
                         lambda c: (c[0] * 0.5, c[1] + 1), (x, dg.tensor(0)))


def test_while_loop_with_a_trip_count_per_example():
    x = dg.tensor(_rng.standard_normal((5, 3)) * np.array([[1.0], [10], [0.1], [100], [3]]))
    with _Batched():
        got = func.vmap(_halve)(x)
    want = _each(_halve, x, n=5)
    _check(got, want)
    assert len(set(want[1].tolist())) > 2        # the examples made different trip counts


def test_bounded_while_loop_with_a_shared_trip_count_differentiates_per_example():
    x = dg.tensor(_rng.standard_normal((5, 3)))
    n = dg.tensor(4)

    def f(a, k):
        return dg.while_loop(lambda c: c[1] < k, lambda c: (c[0].sin() * 1.5, c[1] + 1),
                             (a, dg.tensor(0)), max_iterations=10)[0].sum()
    grad = func.grad(f)
    with _Batched():
        got = func.vmap(grad, in_dims=(0, None))(x, n)
    _check(got, _each(grad, x, n, in_dims=(0, None), n=5))
    # trip counts per example (bounded, so it saves its trips for the gradient)
    ks = dg.tensor([1, 2, 3, 4, 5])
    with _Batched():
        got = func.vmap(grad)(x, ks)
    _check(got, _each(grad, x, ks, n=5))


def test_masked_select_with_a_size_and_its_gradient_per_example():
    x = dg.tensor(_rng.standard_normal((4, 3, 5)))
    m = dg.tensor(_rng.standard_normal((4, 3, 5)) > 0.3)
    f = lambda a, b: dg.masked_select(a, b, size=6)      # noqa: E731 (cut or zero-padded)
    with _Batched():
        got = func.vmap(f)(x, m)
    _check(got, _each(f, x, m, n=4))
    grad = func.grad(lambda a, b: (f(a, b) ** 3).sum())
    with _Batched():
        got = func.vmap(grad)(x, m)
    _check(got, _each(grad, x, m, n=4))


def test_nested_vmap_of_a_scan():
    h = dg.tensor(_rng.standard_normal((2, 4, 3)))
    xs = dg.tensor(_rng.standard_normal((2, 4, 5, 3)))
    f = lambda a, b: _rnn(a, b, W)[0]       # noqa: E731
    with _Batched():
        got = func.vmap(func.vmap(f))(h, xs)
    want = np.stack([_each(f, h[i], xs[i], n=4) for i in range(2)])
    _check(got, want)
    with _Batched():
        got = func.vmap(func.vmap(f), in_dims=(0, None))(h, xs[0])
    _check(got, np.stack([_each(f, h[i], xs[0], n=4) for i in range(2)]))
