"""Indexing and the scatter family against PyTorch: values and gradients in eager mode,
dg.compile and graph mode (O0 and O2), finite differences, and PyTorch's errors."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 5, 6))
X2 = RNG.standard_normal((3, 4))


class Lib:
    """What a case needs from a library: ``t(array)`` makes an index or data tensor, ``F`` is
    the function namespace (torch or dg)."""

    def __init__(self, kind):
        self.kind = kind
        self.F = torch if kind == "torch" else dg

    def t(self, values, dtype=None):
        arr = np.asarray(values, dtype=dtype)
        if self.kind == "torch":
            return torch.tensor(arr)
        if self.kind == "graph":
            return arr            # a constant of the graph being built
        return dg.tensor(arr)


def _i(values):
    return np.asarray(values, dtype=np.int64)


# x -> x[index], with the index built by the library
GETITEM = {
    "idx": lambda L, x: x[L.t(_i([1, 3, 1]))],
    "idx_2d": lambda L, x: x[L.t(_i([[1, 3], [0, 1]]))],
    "col_idx": lambda L, x: x[:, L.t(_i([4, 0, 4, -1]))],
    "a_b": lambda L, x: x[L.t(_i([1, 3])), L.t(_i([0, 4]))],
    "a_b_broadcast": lambda L, x: x[L.t(_i([[1], [3]])), L.t(_i([0, 4, 2]))],
    "a_slice_b": lambda L, x: x[L.t(_i([1, 3])), :, L.t(_i([0, 5]))],
    "ellipsis_idx": lambda L, x: x[..., L.t(_i([1, 3]))],
    "list": lambda L, x: x[[1, 2, 2]],
    "col_list_neg": lambda L, x: x[:, [1, -2]],
    "int_and_idx": lambda L, x: x[0, :, L.t(_i([1, 2]))],
    "none_idx_int": lambda L, x: x[None, L.t(_i([1, 2])), None, 1],
    "slice_then_idx": lambda L, x: x[1:3, L.t(_i([[0, 4]])), ::2],
    "int32": lambda L, x: x[:, L.t(np.array([2, 0], dtype=np.int32))],
    "three": lambda L, x: x[L.t(_i([0, 3])), L.t(_i([1, 1])), L.t(_i([5, 0]))],
    "tuple_lists": lambda L, x: x[[0, 1], [2, 3]],
}
MASKED = {   # data-dependent shapes: eager and compile only
    "mask_full": lambda L, x: x[x > 0.3],
    "mask_leading": lambda L, x: x[x[:, :, 0] > 0],
    "mask_first_dim": lambda L, x: x[L.t(np.array([True, False, True, True]))],
    "mask_middle": lambda L, x: x[:, L.t(np.array([True, False, True, False, True]))],
    "mask_and_idx": lambda L, x: x[L.t(np.array([False, True, True, False])), :,
                                   L.t(_i([1, 5]))],
    "bool_list": lambda L, x: x[[True, False, True, True]],
    "where_one_arg": lambda L, x: x[L.F.where(x[:, 0, 0] > 0)],
    "nonzero": lambda L, x: L.F.nonzero(x > 0.5).double() if L.kind == "torch" else
    dg.cast(dg.nonzero(x > 0.5), "float64"),
}


def _torch_run(fn, arr, grad=True):
    tx = torch.tensor(arr, requires_grad=grad)
    y = fn(Lib("torch"), tx)
    if grad and y.dtype == torch.float64 and y.requires_grad:
        (y * y.detach().cos()).sum().backward()
    return y.detach().numpy(), (tx.grad.numpy() if tx.grad is not None else None)


def _dg_run(fn, arr):
    x = dg.tensor(arr, requires_grad=True)
    y = fn(Lib("eager"), x)
    if y.dtype == "float64" and y.requires_grad:
        (y * dg.cos(y.detach())).sum().backward()
    return y.detach().numpy(), (x.grad.numpy() if x.grad is not None else None)


def _check(got, want):
    (gy, gg), (wy, wg) = got, want
    assert gy.shape == wy.shape
    np.testing.assert_allclose(gy, wy, rtol=1e-12, atol=0)
    if wg is not None:
        assert gg is not None
        np.testing.assert_allclose(gg, wg, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(GETITEM) + sorted(MASKED))
def test_getitem_matches_torch_eager(name):
    fn = {**GETITEM, **MASKED}[name]
    _check(_dg_run(fn, X), _torch_run(fn, X))


@pytest.mark.parametrize("passes", ["O0", "O2"])
@pytest.mark.parametrize("name", sorted(GETITEM))
def test_getitem_matches_torch_in_graph_mode(name, passes):
    fn = GETITEM[name]
    want, want_grad = _torch_run(fn, X)
    g = dg.Graph("idx")
    with g:
        v = dg.placeholder("x", X.shape, "float64")
        y = fn(Lib("graph"), v)
        loss = dg.sum(y * dg.cos(dg.stop_gradient(y)))
        (gx,) = dg.grad(loss, [v])
    got, got_grad = g.compile(outputs=[y, gx], passes=passes)(x=X)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["idx", "a_slice_b", "mask_full", "mask_leading", "nonzero",
                                  "where_one_arg"])
def test_getitem_under_compile_follows_the_data(name):
    fn = {**GETITEM, **MASKED}[name]
    compiled = dg.compile(lambda x: fn(Lib("eager"), x))
    for arr in (X, -X, X * 0.5 + 0.2):
        want, _ = _torch_run(fn, arr, grad=False)
        got = compiled(dg.tensor(arr)).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_getitem_finite_differences():
    def f(arr):
        x = dg.tensor(arr)
        return float(dg.sum(dg.sin(x[dg.tensor(_i([0, 2, 0])), :, [1, 1, 3]])))
    x = dg.tensor(X, requires_grad=True)
    dg.sum(dg.sin(x[dg.tensor(_i([0, 2, 0])), :, [1, 1, 3]])).backward()
    fd = np.zeros_like(X)
    for k in [(0, 1, 1), (0, 2, 3), (2, 4, 1), (1, 1, 1), (0, 0, 0)]:
        e = np.zeros_like(X)
        e[k] = 1e-6
        fd[k] = (f(X + e) - f(X - e)) / 2e-6
        np.testing.assert_allclose(x.grad.numpy()[k], fd[k], rtol=1e-6, atol=1e-8)


# -- __setitem__ --------------------------------------------------------------------------------
SETITEM = {
    "idx_scalar": lambda L, x, v: x.__setitem__(L.t(_i([1, 3, 1])), 2.5),
    "idx_dup_values": lambda L, x, v: x.__setitem__(L.t(_i([1, 1])), v[:2, None, None]),
    "col_idx_tensor": lambda L, x, v: x.__setitem__((slice(None), L.t(_i([4, 0]))),
                                                    v[:8].reshape(4, 2, 1)),
    "a_b": lambda L, x, v: x.__setitem__((L.t(_i([1, 3])), L.t(_i([0, 4]))), v[:6]),
    "a_slice_b": lambda L, x, v: x.__setitem__((L.t(_i([1, 3])), slice(None),
                                                L.t(_i([0, 5]))), v[:2, None]),
    "int_slice_list": lambda L, x, v: x.__setitem__((2, slice(1, 4), [0, 3]), v[:2]),
    "mask_scalar": lambda L, x, v: x.__setitem__(x > 0.5, -1.0),
    "mask_scalar_tensor": lambda L, x, v: x.__setitem__(x > 0.5, v[0]),
    "mask_rows": lambda L, x, v: x.__setitem__(x[:, 0, 0] > 0, v[:6]),
    "mask_values": lambda L, x, v: x.__setitem__(x > 0, v[:int((X > 0).sum())]),
    "mask_rows_values": lambda L, x, v: x.__setitem__(
        L.t(np.array([True, False, True, False])), v[:60].reshape(2, 5, 6)),
    "basic": lambda L, x, v: x.__setitem__((slice(None), 1), v[:6]),
    "ellipsis": lambda L, x, v: x.__setitem__(Ellipsis, v[:6]),
}
V = RNG.standard_normal(200)


def _set_torch(fn):
    tx = torch.tensor(X, requires_grad=True)
    tv = torch.tensor(V, requires_grad=True)
    y = tx * 1.0
    fn(Lib("torch"), y, tv)
    (y * y.detach().cos()).sum().backward()
    return (y.detach().numpy(), tx.grad.numpy(),
            tv.grad.numpy() if tv.grad is not None else np.zeros_like(V))


@pytest.mark.parametrize("name", sorted(SETITEM))
def test_setitem_matches_torch_with_gradients(name):
    fn = SETITEM[name]
    want = _set_torch(fn)
    x = dg.tensor(X, requires_grad=True)
    v = dg.tensor(V, requires_grad=True)
    y = x * 1.0
    fn(Lib("eager"), y, v)
    (y * dg.cos(y.detach())).sum().backward()
    got = (y.detach().numpy(), x.grad.numpy() if x.grad is not None else np.zeros_like(X),
           v.grad.numpy() if v.grad is not None else np.zeros_like(V))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # without autograd: the same values
    z = dg.tensor(X)
    fn(Lib("eager"), z, dg.tensor(V))
    np.testing.assert_allclose(z.numpy(), want[0], rtol=1e-12)


def test_setitem_augmented_with_duplicates_is_last_write():
    t, d = torch.zeros(5), dg.zeros(5)
    t[torch.tensor([1, 1, 3])] += 1.0
    d[dg.tensor(_i([1, 1, 3]))] += 1.0
    np.testing.assert_array_equal(d.numpy(), t.numpy())


def test_setitem_under_compile():
    def fn(x):
        y = x * 2.0
        y[y > 1.0] = 0.0
        y[:, dg.tensor(_i([0, 2]))] = 5.0
        return y

    def tfn(x):
        y = x * 2.0
        y[y > 1.0] = 0.0
        y[:, torch.tensor([0, 2])] = 5.0
        return y
    compiled = dg.compile(fn)
    for arr in (X, -X):
        np.testing.assert_allclose(compiled(dg.tensor(arr)).numpy(),
                                   tfn(torch.tensor(arr)).numpy())


# -- the function family -------------------------------------------------------------------------
IDX = _i([[0, 1, 2, 0], [2, 0, 0, 1]])
FUNCS = {
    "scatter": lambda L, x, s: L.F.scatter(x, 0, L.t(_i([[0, 1, 2, 0]])), s[:1]),
    "scatter_value": lambda L, x, s: x.scatter(1, L.t(_i([[3], [0], [1]])), 2.5),
    "scatter_smaller_index": lambda L, x, s: x.scatter(1, L.t(_i([[3, 1], [0, 2]])), s),
    "scatter_reduce_add": lambda L, x, s: x.scatter(0, L.t(IDX), s[:2], reduce="add"),
    "scatter_add": lambda L, x, s: L.F.scatter_add(x, 0, L.t(IDX), s[:2]),
    "scatter_add_smaller": lambda L, x, s: x.scatter_add(1, L.t(_i([[3], [3]])), s),
    "index_add": lambda L, x, s: x.index_add(0, L.t(_i([2, 0, 2])), s),
    "index_add_fn_alpha": lambda L, x, s: L.F.index_add(x, 0, L.t(_i([1, 1, 2])), s,
                                                        alpha=-0.5),
    "index_add_alpha": lambda L, x, s: x.index_add(1, L.t(_i([3, 3, 0])), s[:, :3],
                                                   alpha=2.0),
    "index_copy": lambda L, x, s: x.index_copy(0, L.t(_i([2, 0, 1])), s),
    "index_copy_dim1": lambda L, x, s: L.F.index_copy(x, 1, L.t(_i([3, 1])), s[:, :2]),
    "index_fill": lambda L, x, s: x.index_fill(1, L.t(_i([0, -1])), -2.0),
    "index_fill_tensor": lambda L, x, s: x.index_fill(0, L.t(_i([1])), s[0, 0]),
    "take_along_dim": lambda L, x, s: L.F.take_along_dim(x, L.t(_i([[3], [0], [1]])), 1),
    "take_along_dim_bcast": lambda L, x, s: L.F.take_along_dim(x, L.t(_i([[2, 0, 1, 0]])),
                                                               0),
    "take_along_dim_none": lambda L, x, s: L.F.take_along_dim(x, L.t(_i([[5, 0], [11, 2]]))),
    "take": lambda L, x, s: L.F.take(x, L.t(_i([[0, -1], [7, 7]]))),
    "masked_fill": lambda L, x, s: L.F.masked_fill(x, x > 0, 0.5),
    "masked_fill_tensor": lambda L, x, s: x.masked_fill(L.t(np.array([True, False, True,
                                                                      False])), s[0, 1]),
    "masked_scatter": lambda L, x, s: x.masked_scatter(x > 0, s),
    "masked_scatter_bcast": lambda L, x, s: x.masked_scatter(
        L.t(np.array([[True], [False], [True]])), s),
    "masked_select": lambda L, x, s: L.F.masked_select(x, x > 0),
    "masked_select_bcast": lambda L, x, s: x.masked_select(L.t(np.array([True, False, True,
                                                                         True]))),
    "index_put": lambda L, x, s: x.index_put((L.t(_i([0, 2, 0])), L.t(_i([1, 1, 1]))), s[0, :3]),
    "index_put_acc": lambda L, x, s: L.F.index_put(x, (L.t(_i([0, 2, 0])), L.t(_i([1, 1, 1]))),
                                                   s[0, :3], accumulate=True),
}
for _r in ("sum", "prod", "mean", "amax", "amin"):
    for _incl in (True, False):
        FUNCS[f"scatter_reduce_{_r}_{_incl}"] = (
            lambda L, x, s, r=_r, incl=_incl: L.F.scatter_reduce(
                x, 1, L.t(_i([[0, 0, 3], [1, 1, 1], [2, 0, 2]])), s[:, :3], r,
                include_self=incl))
S = RNG.standard_normal((3, 4))
S_TIES = np.round(RNG.standard_normal((3, 4)) * 2) / 2     # ties for amax/amin, zeros for prod


def _fn_torch(fn, x, s):
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(s, requires_grad=True)
    y = fn(Lib("torch"), tx, ts)
    try:
        (y * y.detach().cos()).sum().backward()
    except RuntimeError:    # PyTorch has no gradient here (src larger than index, reduce=)
        return [y.detach().numpy(), None, None]
    grads = [t.grad.numpy() if t.grad is not None else np.zeros_like(a)
             for t, a in ((tx, x), (ts, s))]
    return [y.detach().numpy()] + grads


def _fn_dg(fn, x, s):
    dx, ds = dg.tensor(x, requires_grad=True), dg.tensor(s, requires_grad=True)
    y = fn(Lib("eager"), dx, ds)
    (y * dg.cos(y.detach())).sum().backward()
    grads = [t.grad.numpy() if t.grad is not None else np.zeros_like(a)
             for t, a in ((dx, x), (ds, s))]
    return [y.detach().numpy()] + grads


@pytest.mark.parametrize("data", ["plain", "ties"])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_functions_match_torch_with_gradients(name, data):
    fn = FUNCS[name]
    x = X2 if data == "plain" else np.round(X2 * 2) / 2
    s = S if data == "plain" else S_TIES
    want = _fn_torch(fn, x, s)
    got = _fn_dg(fn, x, s)
    for what, a, b in zip(("value", "grad input", "grad src"), got, want):
        if b is None:
            continue
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=what)


GRAPH_FUNCS = sorted(k for k in FUNCS if "masked_select" not in k)


@pytest.mark.parametrize("name", GRAPH_FUNCS)
def test_functions_in_graph_mode(name):
    fn = FUNCS[name]
    want = _fn_torch(fn, X2, S)
    g = dg.Graph("f")
    with g:
        vx = dg.placeholder("x", X2.shape, "float64")
        vs = dg.placeholder("s", S.shape, "float64")
        y = fn(Lib("graph"), vx, vs)
        loss = dg.sum(y * dg.cos(dg.stop_gradient(y)))
        gx, gs = dg.grad(loss, [vx, vs])
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[y, gx, gs], passes=passes)(x=X2, s=S)
        for a, b in zip(got, want):
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# index_put with a repeated place: the last write wins, but PyTorch (and so duograph) gives
# every written value the gradient of its place, which finite differences do not see
@pytest.mark.parametrize("name", sorted(set(FUNCS) - {"index_put"}))
def test_function_gradients_match_finite_differences(name):
    fn = FUNCS[name]

    def loss(x, s):
        y = fn(Lib("eager"), dg.tensor(x), dg.tensor(s))
        return float(dg.sum(dg.sin(y))) if y.dtype == "float64" else 0.0
    dx, ds = dg.tensor(X2, requires_grad=True), dg.tensor(S, requires_grad=True)
    dg.sum(dg.sin(fn(Lib("eager"), dx, ds))).backward()
    for leaf, arr, other, first in ((dx, X2, S, True), (ds, S, X2, False)):
        got = leaf.grad.numpy() if leaf.grad is not None else np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            e = np.zeros_like(arr)
            e[k] = 1e-6
            args_p = (arr + e, other) if first else (other, arr + e)
            args_m = (arr - e, other) if first else (other, arr - e)
            fd = (loss(*args_p) - loss(*args_m)) / 2e-6
            np.testing.assert_allclose(got[k], fd, rtol=1e-5, atol=1e-7,
                                       err_msg=f"{'input' if first else 'src'} {k}")


@pytest.mark.parametrize("name", ["scatter", "index_fill", "masked_scatter", "masked_select",
                                  "scatter_reduce_amax_False", "take_along_dim"])
def test_functions_under_compile(name):
    fn = FUNCS[name]
    compiled = dg.compile(lambda x, s: fn(Lib("eager"), x, s))
    for x in (X2, -X2):
        want = _fn_torch(fn, x, S)[0]
        np.testing.assert_allclose(compiled(dg.tensor(x), dg.tensor(S)).numpy(), want)


INPLACE = {
    "scatter_": lambda L, x, s: x.scatter_(1, L.t(_i([[3], [0], [1]])), s),
    "scatter_value_": lambda L, x, s: x.scatter_(1, L.t(_i([[3], [0], [1]])), 7.0),
    "scatter_add_": lambda L, x, s: x.scatter_add_(0, L.t(IDX), s[:2]),
    "scatter_reduce_": lambda L, x, s: x.scatter_reduce_(0, L.t(IDX), s[:2], "amax"),
    "index_add_": lambda L, x, s: x.index_add_(0, L.t(_i([2, 2])), s[:2], alpha=-1.0),
    "index_copy_": lambda L, x, s: x.index_copy_(0, L.t(_i([2, 0])), s[:2]),
    "index_fill_": lambda L, x, s: x.index_fill_(1, L.t(_i([1, 2])), 3.0),
    "index_put_": lambda L, x, s: x.index_put_((L.t(_i([0, 0])),), s[:2], accumulate=True),
    "masked_fill_": lambda L, x, s: x.masked_fill_(x > 0, 1.5),
    "masked_scatter_": lambda L, x, s: x.masked_scatter_(x < 0, s),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_forms_match_torch(name):
    fn = INPLACE[name]
    want = _fn_torch(lambda L, x, s: _inplace_on_copy(fn, L, x, s), X2, S)
    got = _fn_dg(lambda L, x, s: _inplace_on_copy(fn, L, x, s), X2, S)
    for a, b in zip(got, want):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    plain = dg.tensor(X2)           # no autograd: the tensor itself changes
    out = fn(Lib("eager"), plain, dg.tensor(S))
    assert out is plain
    np.testing.assert_allclose(plain.numpy(), want[0], rtol=1e-12)


def _inplace_on_copy(fn, L, x, s):
    y = x * 1.0
    out = fn(L, y, s)
    assert out is y
    return y


def test_integer_results_and_dtypes():
    t = torch.arange(12).reshape(3, 4)
    d = dg.arange(12).reshape(3, 4)
    for f in (lambda L, x: x[L.t(_i([2, 0])), 1:],
              lambda L, x: x.scatter_reduce(1, L.t(_i([[0, 0], [1, 1], [3, 3]])),
                                            x[:, :2] * 3, "mean"),
              lambda L, x: x.scatter_reduce(1, L.t(_i([[0, 0], [1, 1], [3, 3]])),
                                            x[:, :2] * 3, "mean", include_self=False),
              lambda L, x: x.masked_fill(x > 5, 2.7),
              lambda L, x: x.index_fill(0, L.t(_i([1])), -1),
              lambda L, x: x.scatter(1, L.t(_i([[1]])), 9)):
        a, b = f(Lib("eager"), d), f(Lib("torch"), t)
        assert a.dtype == str(b.dtype).replace("torch.", "")
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_nonzero_forms():
    arr = np.array([[0, 1, 0], [2, 0, 3]])
    for a, b in [(dg.nonzero(dg.tensor(arr), as_tuple=True),
                  torch.nonzero(torch.tensor(arr), as_tuple=True)),
                 (dg.where(dg.tensor(arr)), torch.where(torch.tensor(arr))),
                 ((dg.argwhere(dg.tensor(arr)),), (torch.argwhere(torch.tensor(arr)),)),
                 ((dg.nonzero(dg.tensor(5)),), (torch.nonzero(torch.tensor(5)),)),
                 ((dg.tensor(arr).nonzero(),), (torch.tensor(arr).nonzero(),)),
                 ((dg.nonzero_static(dg.tensor(arr), size=5),),
                  (torch.nonzero_static(torch.tensor(arr), size=5),)),
                 ((dg.nonzero_static(dg.tensor(arr), size=2, fill_value=9),),
                  (torch.nonzero_static(torch.tensor(arr), size=2, fill_value=9),))]:
        assert len(a) == len(b)
        for p, q in zip(a, b):
            assert p.dtype == "int64"
            np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_graph_mode_asks_for_a_size_bound():
    g = dg.Graph("m")
    with g:
        v = dg.placeholder("x", (3, 4), "float64")
        for fn in (lambda: v[v > 0], lambda: dg.masked_select(v, v > 0),
                   lambda: dg.nonzero(v), lambda: dg.where(v > 0)):
            with pytest.raises(dg.ShapeError, match="depends on the data.*size=N"):
                fn()
        sel = dg.masked_select(v, v > 0, size=5)
        nz = dg.nonzero(v > 0, size=3, fill_value=0)
        kept = dg.where(v > 0, v, 0.0)     # the static alternative
    arr = np.array([[1.0, -1, 2, 0], [0, 3, 0, 0], [-2, 0, 0, 4]])
    a, b, c = g.compile(outputs=[sel, nz, kept])(x=arr)
    np.testing.assert_array_equal(a, [1.0, 2, 3, 4, 0])
    np.testing.assert_array_equal(b, [[0, 0], [0, 2], [1, 1]])
    np.testing.assert_array_equal(c, np.where(arr > 0, arr, 0))


@pytest.mark.parametrize("call, torch_call, exc", [
    (lambda d: d[dg.tensor(_i([5]))], lambda t: t[torch.tensor([5])], IndexError),
    (lambda d: d[:, [-5]], lambda t: t[:, [-5]], IndexError),
    (lambda d: d[dg.tensor(np.array([True, False]))], lambda t: t[torch.tensor([True, False])],
     IndexError),
    (lambda d: d[dg.tensor(np.array([1.0]))], lambda t: t[torch.tensor([1.0])], IndexError),
    (lambda d: d.scatter(1, dg.tensor(_i([[4]])), 1.0),
     lambda t: t.scatter(1, torch.tensor([[4]]), 1.0), (IndexError, RuntimeError)),
    (lambda d: d.gather(1, dg.tensor(_i([[-1]]))), lambda t: t.gather(1, torch.tensor([[-1]])),
     (IndexError, RuntimeError)),
    (lambda d: d.index_fill(1, dg.tensor(_i([4])), 0.0),
     lambda t: t.index_fill(1, torch.tensor([4]), 0.0), IndexError),
    (lambda d: d.masked_scatter(d > -10, dg.zeros(2, dtype="float64")),
     lambda t: t.masked_scatter(t > -10, torch.zeros(2, dtype=torch.float64)),
     (IndexError, RuntimeError)),
])
def test_bad_indices_raise_what_torch_raises(call, torch_call, exc):
    with pytest.raises(exc):
        torch_call(torch.tensor(X2))
    with pytest.raises(exc):
        call(dg.tensor(X2))


def test_dtype_mismatches_are_refused():
    d = dg.tensor(X2)
    with pytest.raises(dg.DTypeError, match="index_put.*dtypes match"):
        d.index_put((dg.tensor(_i([0])),), dg.tensor(_i(1)))
    with pytest.raises(dg.DTypeError, match="scatter.*one dtype"):
        d.scatter(0, dg.tensor(_i([[0]])), dg.tensor(np.ones((1, 1), np.float32)))
    with pytest.raises(dg.DTypeError, match="masked_fill: expected a bool mask"):
        d.masked_fill(dg.tensor(np.ones((3, 4), np.int64)), 1.0)
    with pytest.raises(dg.DTypeError, match="scatter: expected an int64 index"):
        d.scatter(0, dg.tensor(np.zeros((1, 1), np.int32)), 1.0)


def test_graph_values_cannot_be_assigned_to():
    g = dg.Graph("m")
    with g:
        v = dg.placeholder("x", (3,), "float32")
        with pytest.raises(TypeError, match="index_put.*masked_fill.*where"):
            v[0] = 1.0


@pytest.mark.parametrize("index", [
    lambda: 7, lambda: (0, 0, 0, 0), lambda: dg.tensor(np.array([1], np.int8)),
    lambda: dg.tensor(np.array([[True, False]]))])
def test_index_errors_are_index_errors_and_shape_errors(index):
    x = dg.tensor(X)
    with pytest.raises(IndexError):
        x[index()]
    with pytest.raises(dg.ShapeError):
        x[index()]
    with pytest.raises(IndexError):
        torch.tensor(X)[index() if not isinstance(index(), dg.Tensor)
                        else torch.tensor(index().numpy())]
