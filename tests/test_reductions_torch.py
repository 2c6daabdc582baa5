"""Reductions, scans, sorting, selection, norms and closeness against PyTorch: values, dtypes,
return types and float64 gradients, in eager mode, under ``dg.compile`` and in graph mode
(O0 and O2). Finite-difference gradient checks run through the op table (op_samples)."""
import math

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

NAN = float("nan")
_rng = np.random.default_rng(7)


def _distinct(*shape):
    n = int(np.prod(shape))
    return _rng.permutation(np.arange(n) * 0.37 - n * 0.15).reshape(shape)


A = _distinct(3, 5)                 # no ties: indices are unambiguous
B = _distinct(2, 3, 4)
T = np.array([[1.0, 3.0, 3.0, 2.0, 1.0], [0.5, 0.5, 2.0, 2.0, 0.5]])       # ties
NANS = np.array([[1.0, NAN, 3.0, -1.0, NAN], [2.0, 0.0, 2.0, -4.0, 1.0]])
Z = np.array([[2.0, 0.0, 3.0, 0.0, 1.5], [1.5, -2.0, 0.0, 4.0, 0.5], [1.2, 0.7, -1.1, 2.0, 3.0]])
I32 = np.array([[3, -1, 4, 1], [5, 9, -2, 6]], dtype=np.int32)
BOOL = np.array([[True, False, True], [False, False, True]])
M = _rng.uniform(-1, 1, (2, 3, 4))

def _f32(m, x):
    return x.float() if m is torch else dg.cast(x, "float32")


# name -> (function of (module, *tensors) used with m=torch and m=dg alike, inputs)
CASES = {
    # axis= and keepdims= aliases
    "sum_axis": (lambda m, x: m.sum(x, axis=1, keepdims=True), [B]),
    "mean_axis": (lambda m, x: x.mean(axis=(0, 2)), [B]),
    "amax_axis": (lambda m, x: m.amax(x, axis=-1), [B]),
    "max_axis": (lambda m, x: m.max(x, axis=1), [A]),
    "std_axis": (lambda m, x: x.std(axis=0, keepdim=True), [A]),
    "argmax_axis": (lambda m, x: m.argmax(x, axis=1, keepdims=True), [A]),
    "logsumexp_axis": (lambda m, x: m.logsumexp(x, axis=0), [A]),
    "softmax_axis": (lambda m, x: m.softmax(x, axis=1), [A]),
    # dim=() (or []) reduces every dim, as None does
    "sum_dim_empty": (lambda m, x: m.sum(x, dim=()), [B]),
    "sum_dim_empty_list_keepdim": (lambda m, x: x.sum(dim=[], keepdim=True), [B]),
    "sum_dim_empty_int32": (lambda m, x: m.sum(x, dim=()), [I32]),
    "sum_dim_empty_0d": (lambda m, x: m.sum(x[1, 2], dim=()), [A]),
    "mean_dim_empty": (lambda m, x: x.mean(dim=()), [B]),
    "amax_dim_empty": (lambda m, x: m.amax(x, dim=()), [A]),
    "amin_dim_empty_keepdim": (lambda m, x: x.amin(dim=(), keepdim=True), [B]),
    "var_dim_empty": (lambda m, x: m.var(x, dim=()), [A]),
    "std_dim_empty_keepdim": (lambda m, x: x.std(dim=(), keepdim=True), [B]),
    "logsumexp_dim_empty_keepdim": (lambda m, x: m.logsumexp(x, dim=(), keepdim=True), [A]),
    "norm_dim_empty": (lambda m, x: m.norm(x, dim=()), [B]),
    "norm_p1_dim_empty": (lambda m, x: x.norm(1, dim=[]), [A]),
    "vector_norm_dim_empty": (lambda m, x: m.linalg.vector_norm(x, 3, dim=()), [B]),
    # scans
    "cumsum": (lambda m, x: m.cumsum(x, 1), [B]),
    "cumsum_neg_axis": (lambda m, x: x.cumsum(axis=-1), [B]),
    "cumsum_0d": (lambda m, x: m.cumsum(x[0, 0], 0), [A]),
    "cumsum_int32": (lambda m, x: m.cumsum(x, 1), [I32]),
    "cumsum_bool": (lambda m, x: m.cumsum(x, 0), [BOOL]),
    "cumsum_dtype": (lambda m, x: m.cumsum(x, 1, dtype=m.float64), [I32]),
    "cumsum_dtype_int8_wraps": (lambda m, x: m.cumsum(x * 40, 1, dtype=m.int8), [I32]),
    "cumprod_dtype_int16": (lambda m, x: x.cumprod(0, dtype=m.int16), [I32]),
    "cumsum_f32": (lambda m, x: m.cumsum(_f32(m, x), 0), [A]),
    "cumprod": (lambda m, x: m.cumprod(x, 1), [B]),
    "cumprod_zeros": (lambda m, x: m.cumprod(x, 1), [Z]),
    "cumprod_zeros_dim0": (lambda m, x: x.cumprod(0), [Z]),
    "cumprod_int32": (lambda m, x: m.cumprod(x, 1), [I32]),
    "cummax": (lambda m, x: m.cummax(x, 1), [A]),
    "cummax_ties_nan": (lambda m, x: m.cummax(x, 1), [np.concatenate([T, NANS])]),
    "cummin_ties_nan": (lambda m, x: x.cummin(dim=1), [np.concatenate([T, NANS])]),
    "cummin_int": (lambda m, x: m.cummin(x, 0), [I32]),
    "logcumsumexp": (lambda m, x: m.logcumsumexp(x, 1), [B]),
    "logcumsumexp_large": (lambda m, x: m.logcumsumexp(x * 300, 0), [A]),
    "logcumsumexp_f32": (lambda m, x: _f32(m, x).logcumsumexp(-1), [A]),
    # sorting and selection
    "sort": (lambda m, x: m.sort(x), [B]),
    "sort_desc_dim0": (lambda m, x: m.sort(x, 0, descending=True), [A]),
    "sort_stable_ties": (lambda m, x: m.sort(x, dim=1, stable=True), [T]),
    "sort_stable_desc_ties": (lambda m, x: x.sort(dim=1, descending=True, stable=True), [T]),
    "sort_nan": (lambda m, x: m.sort(x, stable=True), [NANS]),
    "sort_nan_desc": (lambda m, x: m.sort(x, descending=True, stable=True), [NANS]),
    "sort_int32": (lambda m, x: m.sort(x, 1, descending=True), [I32]),
    "sort_0d": (lambda m, x: m.sort(x[1, 1]), [A]),
    "argsort": (lambda m, x: m.argsort(x, dim=0), [B]),
    "argsort_desc_stable": (lambda m, x: x.argsort(dim=1, descending=True, stable=True), [T]),
    "topk": (lambda m, x: m.topk(x, 2), [B]),
    "topk_smallest_dim0": (lambda m, x: x.topk(2, dim=0, largest=False), [A]),
    "topk_nan": (lambda m, x: m.topk(x, 2), [NANS]),
    "topk_all": (lambda m, x: m.topk(x, 5, 1), [A]),
    "kthvalue": (lambda m, x: m.kthvalue(x, 2, 1), [A]),
    "kthvalue_keepdim": (lambda m, x: x.kthvalue(2, dim=0, keepdim=True), [B]),
    "kthvalue_nan": (lambda m, x: m.kthvalue(x, 4, 1), [NANS]),
    "median_all": (lambda m, x: m.median(x), [A]),
    "median_all_ties": (lambda m, x: x.median(), [T]),
    "median_all_nan": (lambda m, x: m.median(x), [NANS]),
    "median_dim": (lambda m, x: m.median(x, 1), [A]),
    "median_dim_even_keepdim": (lambda m, x: x.median(dim=-1, keepdim=True), [B]),
    "median_dim_nan": (lambda m, x: m.median(x, 1), [NANS]),
    "median_int": (lambda m, x: m.median(x, 1), [I32]),
    "mode": (lambda m, x: m.mode(x, 1), [T]),
    "mode_keepdim": (lambda m, x: x.mode(0, keepdim=True), [T]),
    "mode_int": (lambda m, x: m.mode(x), [np.array([[5, 1, 5, 1, 3], [0, 0, 4, 4, 0]])]),
    # norms
    "norm_default": (lambda m, x: m.norm(x), [B]),
    "norm_p1_dim": (lambda m, x: x.norm(1, dim=1), [B]),
    "norm_p3_keepdim": (lambda m, x: m.norm(x, p=3, dim=(0, 2), keepdim=True), [B]),
    "norm_inf": (lambda m, x: m.norm(x, p=float("inf"), dim=1), [T]),
    "norm_nuc": (lambda m, x: m.norm(x, p="nuc"), [A]),
    "norm_fro_dims": (lambda m, x: m.norm(x, "fro", dim=(1, 2)), [B]),
    "norm_zero_row": (lambda m, x: m.norm(x * (x > 0), dim=1), [np.array([[-1.0, -2.0],
                                                                         [3.0, 4.0]])]),
    "vector_norm": (lambda m, x: m.linalg.vector_norm(x), [B]),
    "vector_norm_ord_half": (lambda m, x: m.linalg.vector_norm(x, 0.5, dim=-1), [B]),
    "vector_norm_ord_neg_inf": (lambda m, x: m.linalg.vector_norm(x, -math.inf, 1), [A]),
    "vector_norm_ord0": (lambda m, x: m.linalg.vector_norm(x, 0, 1), [Z]),
    "vector_norm_ord_neg2": (lambda m, x: m.linalg.vector_norm(x, -2, 1), [A]),
    "vector_norm_dtype": (lambda m, x: m.linalg.vector_norm(_f32(m, x), dtype=m.float64), [A]),
    "vector_norm_f32": (lambda m, x: m.linalg.vector_norm(_f32(m, x), 2, (0, 1)), [B]),
    "matrix_norm_fro": (lambda m, x: m.linalg.matrix_norm(x), [M]),
    "matrix_norm_nuc": (lambda m, x: m.linalg.matrix_norm(x, "nuc"), [M]),
    "matrix_norm_2": (lambda m, x: m.linalg.matrix_norm(x, 2), [M]),
    "matrix_norm_neg2_keepdim": (lambda m, x: m.linalg.matrix_norm(x, -2, keepdim=True), [M]),
    "matrix_norm_1": (lambda m, x: m.linalg.matrix_norm(x, 1), [M]),
    "matrix_norm_neg1_dims": (lambda m, x: m.linalg.matrix_norm(x, -1, dim=(2, 0)), [M]),
    "matrix_norm_inf": (lambda m, x: m.linalg.matrix_norm(x, math.inf, keepdim=True), [M]),
    "matrix_norm_nuc_dims": (lambda m, x: m.linalg.matrix_norm(x, "nuc", dim=(0, 2)), [M]),
    "linalg_norm": (lambda m, x: m.linalg.norm(x), [M]),
    "linalg_norm_matrix_ord": (lambda m, x: m.linalg.norm(x, 1), [A]),
    "linalg_norm_vector_dim": (lambda m, x: m.linalg.norm(x, 3, dim=0), [A]),
    "svdvals": (lambda m, x: m.linalg.svdvals(x), [M]),
    # closeness (bool tensors)
    "isclose": (lambda m, x, y: m.isclose(x, y), [A, A + np.array([0, 1e-9, 1e-3, 0, 0])]),
    "isclose_tols_nan": (lambda m, x, y: x.isclose(y, rtol=0.1, atol=0.01, equal_nan=True),
                         [NANS, NANS * 1.05]),
    "isclose_inf": (lambda m, x, y: m.isclose(x, y), [np.array([np.inf, -np.inf, np.inf, 1.0]),
                                                      np.array([np.inf, np.inf, 1e308, 1.0])]),
    "isclose_int": (lambda m, x, y: m.isclose(x, y, atol=1), [I32, I32 + np.int32(1)]),
}

# float outputs whose gradient torch defines and duograph checks
THROUGH_F32 = {"vector_norm_dtype", "vector_norm_f32", "cumsum_f32", "logcumsumexp_f32"}
NO_GRAD = {"isclose", "isclose_tols_nan", "isclose_inf", "isclose_int", "vector_norm_ord0",
           # torch 2.13's var/std backward reads dim=() as "no dim" (infinite gradients)
           # while its forward reduces every dim: test_var_std_over_no_dims_gradient
           "var_dim_empty", "std_dim_empty_keepdim"}


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [o for item in out for o in _flat(item)]
    return [out]


def _torch_dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _run_torch(name):
    fn, arrays = CASES[name]
    xs = [torch.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    out = fn(torch, *xs)
    return xs, out, _flat(out)


def _weights(outs):
    rng = np.random.default_rng(3)
    return [rng.uniform(0.5, 1.5, tuple(o.shape)) for o in outs]


def _loss(outs, ws, mod):
    total = None
    for o, w in zip(outs, ws):
        if str(o.dtype).replace("torch.", "") == "float64":
            t = o
            w_t = torch.tensor(w) if mod is torch else dg.tensor(w)
            term = (mod.where(mod.isnan(t), 0.0, t) * w_t).sum()
            total = term if total is None else total + term
    return total


def _check_values(got, want, name):
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        w = w.detach().numpy()
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        assert g.dtype == w.dtype, f"{name}: dtype {g.dtype}, torch {w.dtype}"
        assert g.shape == w.shape, f"{name}: shape {g.shape}, torch {w.shape}"
        if w.dtype.kind == "f":
            tol = 1e-12 if w.dtype == np.float64 else 2e-6
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_values_types_and_gradients(name):
    fn, arrays = CASES[name]
    txs, tout, twant = _run_torch(name)
    xs = [dg.tensor(a, requires_grad=a.dtype == np.float64) for a in arrays]
    out = fn(dg, *xs)
    got = _flat(out)
    if isinstance(tout, tuple):     # torch.return_types: same field names
        assert type(out).__name__ == type(tout).__name__.split(".")[-1]
        assert out._fields == ("values", "indices")
        assert out.values is out[0] and out.indices is out[1]
    _check_values([g.detach() for g in got], twant, name)
    tl = _loss(twant, _weights(twant), torch)
    if tl is None or name in NO_GRAD or not tl.requires_grad:
        return
    tl.backward()
    _loss(got, _weights(twant), dg).backward()
    for x, tx in zip(xs, txs):
        if tx.grad is not None:
            rtol = 1e-6 if name in THROUGH_F32 else 1e-9   # rounding in the float32 casts
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=1e-12,
                                       err_msg=f"{name}: gradient")


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_values(name):
    fn, arrays = CASES[name]
    _, _, want = _run_torch(name)
    compiled = dg.compile(lambda *xs: fn(dg, *xs))
    for _ in range(2):      # the recording run and a replay
        got = _flat(compiled(*[dg.tensor(a) for a in arrays]))
        _check_values(got, want, name)


@pytest.mark.parametrize("passes", ["O0", "O2"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_values_and_gradients(name, passes):
    fn, arrays = CASES[name]
    txs, _, want = _run_torch(name)
    g = dg.Graph(name)
    with g:
        vs = [dg.placeholder(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
        outs = _flat(fn(dg, *vs))
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    _check_values(g.compile(outputs=outs, passes=passes)(**feeds), want, name)
    tl = _loss(want, _weights(want), torch)
    if tl is None or name in NO_GRAD or passes == "O2" or not tl.requires_grad:
        return
    tl.backward()
    targets = [(v, tx) for v, tx in zip(vs, txs) if tx.grad is not None]
    with g:
        ws = _weights(want)
        loss = None
        for o, w in zip(outs, ws):
            if o.dtype == "float64":
                term = dg.sum(dg.where(dg.isnan(o), 0.0, o) * w)
                loss = term if loss is None else loss + term
        grads = dg.grad(loss, [v for v, _ in targets])
    got = g.compile(outputs=list(grads))(**feeds)
    for gv, (_, tx) in zip(got, targets):
        np.testing.assert_allclose(gv, tx.grad.numpy(), rtol=1e-6 if name in THROUGH_F32
                                   else 1e-9, atol=1e-12,
                                   err_msg=f"{name}: graph gradient")


# -- unique: eager only ------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True},
                                {"sorted": False, "return_inverse": True}])
@pytest.mark.parametrize("data", [np.array([3, 1, 2, 1, 3, 3]), np.array([3.0, NAN, 1.0, NAN]),
                                  np.array([[1, 2], [3, 4], [1, 2]], dtype=np.int32),
                                  np.array(5.0)])
def test_unique_matches_torch(data, kw):
    want = _flat(torch.unique(torch.tensor(data), **kw))
    _check_values(_flat(dg.unique(dg.tensor(data), **kw)), want, "unique")
    _check_values(_flat(dg.tensor(data).unique(**kw)), want, "Tensor.unique")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim_matches_torch(dim):
    data = np.array([[1, 2, 1], [3, 4, 3], [1, 2, 1]])
    kw = {"return_inverse": True, "return_counts": True, "dim": dim}
    want = _flat(torch.unique(torch.tensor(data), **kw))
    _check_values(_flat(dg.unique(dg.tensor(data), **kw)), want, "unique dim")


def test_unique_in_graph_mode_is_a_clear_error():
    g = dg.Graph("u")
    with g:
        x = dg.placeholder("x", (4,), "float32")
        with pytest.raises(dg.GraphError, match="unique: the result's shape depends on"):
            dg.unique(x)


def test_unique_under_compile_guards_on_the_data():
    f = dg.compile(lambda x: dg.unique(x) * 2)
    np.testing.assert_array_equal(f(dg.tensor([3, 1, 3])).numpy(), [2, 6])
    np.testing.assert_array_equal(f(dg.tensor([5, 5, 4])).numpy(), [8, 10])


# -- closeness as Python bools -----------------------------------------------------------------
@pytest.mark.parametrize("a, b, kw", [
    (A, A + 1e-9, {}), (A, A + 1e-3, {}), (A, A + 1e-3, {"atol": 1e-2}),
    (NANS, NANS, {}), (NANS, NANS, {"equal_nan": True}),
    (np.array([np.inf]), np.array([np.inf]), {}), (np.array([1.0, 2.0]), np.array([1.0, 2.1]),
                                                    {"rtol": 0.1})])
def test_allclose_matches_torch(a, b, kw):
    want = torch.allclose(torch.tensor(a), torch.tensor(b), **kw)
    got = dg.allclose(dg.tensor(a), dg.tensor(b), **kw)
    assert got is want
    assert dg.tensor(a).allclose(dg.tensor(b), **kw) is want


@pytest.mark.parametrize("a, b", [
    (A, A.copy()), (A, A + 1e-12), (A, A[:2]), (NANS, NANS), (I32, I32.astype(np.float32)),
    (np.zeros((2, 0)), np.zeros((2, 0))), (BOOL, BOOL)])
def test_equal_matches_torch(a, b):
    want = torch.equal(torch.tensor(a), torch.tensor(b))
    assert dg.equal(dg.tensor(a), dg.tensor(b)) is want
    assert dg.tensor(a).equal(dg.tensor(b)) is want


def test_allclose_under_compile_is_a_guarded_decision():
    f = dg.compile(lambda x, y: x * 2 if dg.allclose(x, y) else x * 3)
    one = dg.tensor([1.0, 2.0])
    assert f(one, dg.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]
    assert f(one, dg.tensor([1.0, 2.5])).tolist() == [3.0, 6.0]


# -- clear errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("call, exc, match", [
    (lambda: dg.topk(dg.tensor(A), 6), dg.ShapeError, "topk: k \\(6\\) out of range"),
    (lambda: dg.kthvalue(dg.tensor(A), 0, 1), dg.ShapeError, "kthvalue: k \\(0\\) out of range"),
    (lambda: dg.sort(dg.tensor(A), 2), dg.ShapeError, "sort: dim 2 out of range"),
    (lambda: dg.cumsum(dg.tensor(A), 2), dg.ShapeError, "cumsum: dim 2 out of range"),
    (lambda: dg.cumsum(dg.tensor(A), (0, 1)), TypeError, "cumsum"),
    (lambda: dg.logcumsumexp(dg.tensor(I32), 0), dg.DTypeError, "logcumsumexp: expected a "
                                                                 "floating-point"),
    (lambda: dg.linalg.vector_norm(dg.tensor(I32)), dg.DTypeError, "vector_norm: expected a "
                                                                   "floating-point"),
    (lambda: dg.linalg.matrix_norm(dg.tensor(A), 3), ValueError, "matrix_norm: ord must be"),
    (lambda: dg.linalg.matrix_norm(dg.tensor(A[0])), dg.ShapeError, "at least 2 dims"),
    (lambda: dg.isclose(dg.tensor(I32), dg.tensor(I32.astype(np.float32))), dg.DTypeError,
     "isclose: expected both inputs to have the same dtype"),
    (lambda: dg.sum(dg.tensor(A), 0, dim=1) if False else dg.sum(dg.tensor(A), dim=0, axis=1),
     TypeError, "sum: got both dim= and its alias axis="),
    (lambda: dg.median(dg.tensor(np.zeros((2, 0))), 1), dg.ShapeError, "median: cannot"),
    # torch.prod takes one int dim; dim=() is no way to say "every dim" there
    (lambda: dg.prod(dg.tensor(A), dim=()), TypeError, "prod: .* found an empty tuple"),
    (lambda: dg.tensor(A).prod(dim=[]), TypeError, "prod: .* found an empty tuple"),
    (lambda: dg.linalg.norm(dg.tensor(A), dim=()), dg.ShapeError, "one or two dims"),
    (lambda: dg.linalg.norm(dg.tensor(B), dim=(0, 1, 2)), dg.ShapeError, "one or two dims"),
    (lambda: dg.amax(dg.tensor(np.zeros((0, 3))), dim=()), Exception, "zero-size"),
])
def test_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_allclose_in_graph_mode_is_a_clear_error():
    g = dg.Graph("c")
    with g:
        x = dg.placeholder("x", (2,), "float32")
        with pytest.raises(dg.GraphError, match="allclose: returns a Python bool"):
            dg.allclose(x, x)


@pytest.mark.parametrize("shape", [(3, 3), (3, 5), (2, 5, 3)])
def test_svd_gradient_matches_torch(shape):
    """A loss of U, S and Vh that does not depend on the singular vectors' signs."""
    a = np.random.default_rng(5).uniform(-1, 1, shape)
    k = min(shape[-2:])
    w = [np.random.default_rng(i).uniform(0.5, 1.5, s) for i, s in
         enumerate([shape[:-1] + (k,), shape[:-2] + (k,), shape[:-2] + (k, shape[-1])])]

    def loss(m, x, wrap):
        u, s_, vh = m.linalg.svd(x, full_matrices=False)
        return (u * u * wrap(w[0])).sum() + (s_ * s_ * wrap(w[1])).sum() + (
            vh * vh * wrap(w[2])).sum()

    tx = torch.tensor(a, requires_grad=True)
    loss(torch, tx, torch.tensor).backward()
    x = dg.tensor(a, requires_grad=True)
    got = dg.linalg.svd(x, full_matrices=False)
    assert got._fields == ("U", "S", "Vh")
    loss(dg, x, dg.tensor).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_svd_full_matrices_of_a_non_square_matrix_is_refused():
    with pytest.raises(ValueError, match="svd: full_matrices=True is not supported"):
        dg.linalg.svd(dg.tensor(A))
    np.testing.assert_allclose(dg.linalg.svd(dg.tensor(A[:3, :3])).S.numpy(),
                               torch.linalg.svd(torch.tensor(A[:3, :3])).S.numpy(), rtol=1e-12)


def test_second_order_of_scans_matches_torch():
    for name in ("cumprod", "cumprod_zeros", "logcumsumexp", "norm_p3_keepdim",
                 "vector_norm_ord_half", "matrix_norm_fro", "matrix_norm_nuc", "matrix_norm_2"):
        fn, (arr,) = CASES[name]
        tx = torch.tensor(arr, requires_grad=True)
        (tg,) = torch.autograd.grad(_loss(_flat(fn(torch, tx)), _weights(_flat(fn(torch, tx))),
                                          torch), [tx], create_graph=True)
        (tg * tg).sum().backward()
        x = dg.tensor(arr, requires_grad=True)
        ws = _weights(_flat(fn(torch, tx)))
        (g,) = dg.autograd.grad(_loss(_flat(fn(dg, x)), ws, dg), [x], create_graph=True)
        (g * g).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


def test_accumulate_falls_back_to_a_loop_without_ufunc_accumulate():
    """cupy's ufuncs lack ``accumulate`` for most functions: the scan kernels loop instead."""
    from duograph.graphlib.ops.scan import accumulate

    class NoAccumulate:
        def __getattr__(self, name):
            fn = getattr(np, name)
            return (lambda a, b: fn(a, b)) if name in ("maximum", "logaddexp") else fn

    x = _rng.uniform(-1, 1, (3, 4, 2))
    for name in ("maximum", "logaddexp"):
        for axis in range(3):
            np.testing.assert_array_equal(accumulate(NoAccumulate(), name, x, axis),
                                          getattr(np, name).accumulate(x, axis=axis))


@pytest.mark.parametrize("n", [3, 6])
def test_symbolic_dims_in_graph_mode(n):
    """One graph with a symbolic dim N, scanned, sorted and reduced along it and across it,
    with gradients, run at two sizes against torch."""
    g = dg.Graph("sym")
    with g:
        x = dg.placeholder("x", ("N", 5), "float64")
        outs = [dg.cumsum(x, 1), dg.cumprod(x, 0), dg.sort(x, 0).values, dg.topk(x, 2, 0).values,
                dg.median(x, 1).values, dg.median(x, 0).values, dg.logcumsumexp(x, 0),
                dg.kthvalue(x, 2, 1).values, dg.cummax(x, 0).values, dg.norm(x, dim=0)]
        loss = None
        for o in outs:
            loss = dg.sum(o) if loss is None else loss + dg.sum(o)
        (gx,) = dg.grad(loss, [x])
    exe = g.compile(outputs=outs + [gx], passes="O2")
    a = _distinct(n, 5)
    tx = torch.tensor(a, requires_grad=True)
    want = [torch.cumsum(tx, 1), torch.cumprod(tx, 0), torch.sort(tx, 0).values,
            torch.topk(tx, 2, 0).values, torch.median(tx, 1).values, torch.median(tx, 0).values,
            torch.logcumsumexp(tx, 0), torch.kthvalue(tx, 2, 1).values,
            torch.cummax(tx, 0).values, torch.norm(tx, dim=0)]
    sum(w.sum() for w in want).backward()
    got = exe(x=a)
    for k, (gv, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(gv, w.detach().numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=f"output {k}")
    np.testing.assert_allclose(got[-1], tx.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all_over_no_dims_are_elementwise_as_torch(name, keepdim):
    """torch's any/all with dim=() reduce nothing (unlike sum): a bool of each element."""
    x = np.array([[0.0, 2.0, -1.0], [0.0, 0.0, 3.0]])
    want = getattr(torch.tensor(x), name)(dim=(), keepdim=keepdim)
    got = getattr(dg.tensor(x), name)(dim=(), keepdim=keepdim)
    assert got.dtype == "bool" and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_over_no_dims_gradient_is_that_of_every_dim(name):
    """dim=() is every dim, forward and backward (torch's backward alone disagrees)."""
    t = torch.tensor(A, requires_grad=True)
    getattr(t, name)().backward()
    x = dg.tensor(A, requires_grad=True)
    getattr(x, name)(dim=()).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9)
