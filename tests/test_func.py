"""duograph.func without PyTorch: vmap against running each example on the whole op table,
the ops still without a batching rule (ceilings), gradients against finite differences,
vmap in graph mode and under dg.compile against eager, randomness modes, composition with
grad, functional_call, and the errors for misuse."""
import warnings

import numpy as np
import pytest

import duograph as dg
from duograph import func
from duograph.func import batched as batched_mod
from duograph.graphlib.batching import batch_rule
from duograph.graphlib.registry import REGISTRY
from op_samples import OPS, as_tuple, leaves, replace_leaves

_rng = np.random.default_rng(5)

# Ceilings: lower them when an op gains a rule, never raise them.
OPS_WITHOUT_RULE_CEILING = 10          # registered, non-random ops with no batching rule
OP_TABLE_FALLBACK_CEILING = 5          # ops of the op table whose vmap runs per example


def test_registered_ops_without_a_batching_rule_stay_under_the_ceiling():
    missing = sorted(n for n, op in REGISTRY.items()
                     if batch_rule(op) is None and not op.random)
    assert len(missing) <= OPS_WITHOUT_RULE_CEILING, missing


def _examples(arrays, k):
    """Example ``k`` of a batch of two: the sample's float operands scaled, others kept."""
    return [a * (1.0 if k == 0 else 0.9) if a.dtype.kind == "f" else a for a in arrays]


def test_vmap_matches_each_example_on_the_op_table():
    """Every sample of every non-random op: vmap over a batch of two examples equals the op
    run on each example; the ops that fell back to the loop stay under the ceiling."""
    batched_mod.FALLBACK_OPS.clear()
    failures, checked = [], 0
    for info in OPS:
        if info.random:
            continue
        for s in info.samples:
            arrays = leaves(s.args, s.kwargs)
            if not arrays:
                continue
            per = []
            for k in range(2):
                args, kwargs = replace_leaves(s.args, s.kwargs,
                                              [dg.tensor(a) for a in _examples(arrays, k)])
                per.append([o.numpy() for o in as_tuple(info.fn(*args, **kwargs))])
            stacked = [dg.tensor(np.stack([_examples(arrays, k)[i] for k in range(2)]))
                       for i in range(len(arrays))]

            def f(*ts, info=info, s=s):
                args, kwargs = replace_leaves(s.args, s.kwargs, list(ts))
                return as_tuple(info.fn(*args, **kwargs))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    out = func.vmap(f)(*stacked)
                except Exception as e:     # noqa: BLE001 (reported below, with the op)
                    failures.append(f"{info.name}/{s.name}: {type(e).__name__}: {e}")
                    continue
            for j, o in enumerate(out):
                for k in range(2):
                    got, want = o.numpy()[k], per[k][j]
                    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4,
                                                                  atol=1e-5, equal_nan=True):
                        failures.append(f"{info.name}/{s.name}: output {j} of example {k}")
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked > 900
    fell_back = sorted(batched_mod.FALLBACK_OPS)
    assert len(fell_back) <= OP_TABLE_FALLBACK_CEILING, fell_back


def test_fallback_warns_once_naming_the_op():
    batched_mod._warned.discard("median_all")
    x = dg.tensor(_rng.standard_normal((3, 5)))
    with pytest.warns(RuntimeWarning, match="median_all has no batching rule"):
        out = func.vmap(lambda r: dg.median(r))(x)
    np.testing.assert_allclose(out.numpy(), np.median(x.numpy(), axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        func.vmap(lambda r: dg.median(r))(x)       # once per op: no second warning


def _fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


W = _rng.standard_normal((4, 3))


def _np_loss(x):
    return float((np.exp(np.tanh(x @ W))).sum() * np.sin(x).sum())


def test_grad_jvp_hessian_match_finite_differences():
    x = _rng.standard_normal(4)
    Wt = dg.tensor(W)

    def f(a):
        return (a @ Wt).tanh().exp().sum() * a.sin().sum()
    g = func.grad(f)(dg.tensor(x)).numpy()
    np.testing.assert_allclose(g, _fd_grad(_np_loss, x), rtol=1e-6, atol=1e-7)
    t = _rng.standard_normal(4)
    _, jt = func.jvp(f, (dg.tensor(x),), (dg.tensor(t),))
    np.testing.assert_allclose(jt.numpy(), g @ t, rtol=1e-10)
    h = func.hessian(f)(dg.tensor(x)).numpy()
    fd_h = np.stack([_fd_grad(lambda v: func.grad(f)(dg.tensor(v)).numpy()[i], x)
                     for i in range(4)])
    np.testing.assert_allclose(h, fd_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-12)
    gg = func.grad(lambda a: func.grad(f)(a).sum())(dg.tensor(x)).numpy()
    np.testing.assert_allclose(gg, h.sum(0), rtol=1e-10)


def test_per_sample_grads_equal_a_loop_and_grad_of_vmap_sums_them():
    w = dg.tensor(_rng.standard_normal((5, 3)))
    x = dg.tensor(_rng.standard_normal((6, 5)))

    def loss(w_, xi):
        return ((xi @ w_).tanh() ** 2).mean()
    per = func.vmap(func.grad(loss), in_dims=(None, 0))(w, x)
    for i in range(6):
        np.testing.assert_allclose(per.numpy()[i], func.grad(loss)(w, x[i]).numpy(),
                                   rtol=1e-12)
    total = func.grad(lambda w_: func.vmap(loss, in_dims=(None, 0))(w_, x).sum())(w)
    np.testing.assert_allclose(total.numpy(), per.numpy().sum(0), rtol=1e-10)
    # eager autograd through vmap agrees
    w2 = w.detach().requires_grad_()
    func.vmap(loss, in_dims=(None, 0))(w2, x).sum().backward()
    np.testing.assert_allclose(w2.grad.numpy(), total.numpy(), rtol=1e-12)


def _batched_fn(x, w):
    return ((x @ w).tanh().softmax(-1) * x.sum()).exp() + x.mean(0, keepdim=True)[:, :3]


def test_vmap_in_graph_mode_equals_eager_and_runs_through_o2():
    x, w = _rng.standard_normal((6, 5, 4)), _rng.standard_normal((4, 3))
    eager = func.vmap(_batched_fn, in_dims=(0, None))(dg.tensor(x), dg.tensor(w)).numpy()
    g = dg.Graph("vmapped")
    with g:
        xv = g.add_input("x", dg.TensorType((6, 5, 4), "float64"))
        wv = g.add_input("w", dg.TensorType((4, 3), "float64"))
        out = func.vmap(_batched_fn, in_dims=(0, None))(xv, wv)
    assert tuple(out.shape) == (6, 5, 3)
    text = str(g)
    assert "matmul(%x, %w)" in text and "f64[6,5,3]" in text
    for passes in ("O0", "O2"):
        got = g.compile(outputs=[out], passes=passes)(x=x, w=w)
        got = got[0] if isinstance(got, (tuple, list)) else got
        np.testing.assert_allclose(np.asarray(got), eager, rtol=1e-12)


def test_vmap_under_compile_equals_eager():
    x, w = _rng.standard_normal((6, 5, 4)), _rng.standard_normal((4, 3))
    eager = func.vmap(_batched_fn, in_dims=(0, None))(dg.tensor(x), dg.tensor(w)).numpy()
    compiled = dg.compile(lambda a, b: func.vmap(_batched_fn, in_dims=(0, None))(a, b))
    for _ in range(2):
        np.testing.assert_allclose(compiled(dg.tensor(x), dg.tensor(w)).numpy(), eager,
                                   rtol=1e-12)


def test_randomness_modes():
    x = dg.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        func.vmap(lambda r: r + dg.rand(3))(x)
    diff = func.vmap(lambda r: r + dg.rand(3), randomness="different")(x).numpy()
    same = func.vmap(lambda r: r + dg.rand(3), randomness="same")(x).numpy()
    assert not np.allclose(diff[0], diff[1])
    assert np.allclose(same, same[0])
    p = dg.full((4, 50), 0.5)
    drawn = func.vmap(lambda q: dg.bernoulli(q), randomness="different")(p).numpy()
    assert set(np.unique(drawn)) <= {0.0, 1.0} and not np.allclose(drawn[0], drawn[1])
    with pytest.raises(RuntimeError, match="randomness"):
        func.vmap(lambda r: r, randomness="sometimes")(x)
    drop = dg.nn.Dropout(0.5)
    ones = dg.ones(4, 400)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        func.vmap(drop)(ones)
    diff = func.vmap(drop, randomness="different")(ones).numpy()
    same = func.vmap(drop, randomness="same")(ones).numpy()
    assert not np.array_equal(diff[0], diff[1]) and np.array_equal(same[0], same[3])
    assert set(np.unique(same)) == {0.0, 2.0}


def test_chunk_size_and_out_dims():
    x = dg.tensor(_rng.standard_normal((7, 3)))
    want = func.vmap(lambda r: (r.exp(), r.sum()), out_dims=(1, 0))(x)
    got = func.vmap(lambda r: (r.exp(), r.sum()), out_dims=(1, 0), chunk_size=3)(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy())
    assert want[0].shape == (3, 7) and want[1].shape == (7,)


def test_misuse_raises_clear_errors():
    x = dg.tensor(_rng.standard_normal((3, 2)))
    with pytest.raises(RuntimeError, match=r"\.item\(\)"):
        func.vmap(lambda r: r.sum().item())(x)
    with pytest.raises(RuntimeError, match="data-dependent control flow"):
        func.vmap(lambda r: r if r.sum() > 0 else -r)(x)
    leaked = []
    func.vmap(lambda r: leaked.append(r) or r)(x)
    with pytest.raises(RuntimeError, match="escaped"):
        leaked[0] + 1

    def assign(r):
        r[0] = 1.0
        return r
    with pytest.raises(RuntimeError, match="assigning into a batched tensor"):
        func.vmap(assign)(x)
    with pytest.raises(RuntimeError, match="scalar Tensor"):
        func.grad(lambda r: r * 2)(x)
    with pytest.raises(RuntimeError, match="only floating-point"):
        func.grad(lambda r: r.sum())(dg.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="should be a tuple"):
        func.grad(lambda r: r.sum(), has_aux=True)(x)


def test_functional_call_ties_and_strictness():
    lin = dg.nn.Linear(3, 3)
    model = dg.nn.Sequential(lin, dg.nn.Tanh(), lin)     # the same layer twice: tied
    x = dg.tensor(_rng.standard_normal((2, 3)).astype("float32"))
    w = dg.zeros(3, 3)
    out = func.functional_call(model, {"0.weight": w}, (x,))
    b = lin.bias.detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), np.broadcast_to(b, (2, 3)), rtol=1e-6)
    assert lin.weight.shape == (3, 3) and float(abs(lin.weight).sum().item()) > 0   # restored
    with pytest.raises(ValueError, match="which are tied"):
        func.functional_call(model, {"0.weight": w, "2.weight": dg.ones(3, 3)}, (x,))
    with pytest.raises(RuntimeError, match="Missing key"):
        func.functional_call(model, {"0.weight": w}, (x,), strict=True)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        func.functional_call(model, {"nope": w, "0.weight": w, "0.bias": lin.bias}, (x,),
                             strict=True)


def test_autograd_functional_is_importable_and_matches_func():
    import duograph.autograd.functional as AF
    assert dg.autograd.functional is AF
    x = dg.tensor(_rng.standard_normal(3))
    J = AF.jacobian(lambda a: a.exp() * a.sum(), x)
    np.testing.assert_allclose(J.numpy(), func.jacrev(lambda a: a.exp() * a.sum())(x).numpy())
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.vjp(lambda a, b: a.exp().sum(), (x, x), strict=True)
    for fn, args in ((AF.jvp, (lambda a, b: a.exp(), (x, x), (x, x))),
                     (AF.jacobian, (lambda a, b: a.exp(), (x, x))),
                     (AF.hessian, (lambda a, b: a.exp().sum(), (x, x))),
                     (AF.hvp, (lambda a, b: a.exp().sum(), (x, x), (x, x))),
                     (AF.vhp, (lambda a, b: a.exp().sum(), (x, x), (x, x)))):
        with pytest.raises(RuntimeError, match="independent of input 1"):
            fn(*args, strict=True)
        fn(*args)                               # not strict: zeros for input 1


def test_vmap_of_grad_under_compile_and_nested_vmap_in_graph_mode():
    w = dg.tensor(_rng.standard_normal((5, 3)))
    x = dg.tensor(_rng.standard_normal((6, 5)))

    def loss(w_, xi):
        return ((xi @ w_).tanh() ** 2).mean()
    eager = func.vmap(func.grad(loss), in_dims=(None, 0))(w, x).numpy()
    compiled = dg.compile(lambda a, b: func.vmap(func.grad(loss), in_dims=(None, 0))(a, b))
    for _ in range(2):
        np.testing.assert_allclose(compiled(w, x).numpy(), eager, rtol=1e-12)
    xn = _rng.standard_normal((2, 3, 4))
    g = dg.Graph("nested")
    with g:
        xv = g.add_input("x", dg.TensorType((2, 3, 4), "float64"))
        out = func.vmap(func.vmap(lambda r: r.softmax(-1) * r.sum()))(xv)
    assert "softmax(%x){dim=2}" in str(g)
    got = g.compile(outputs=[out], passes="O2")(x=xn)
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = func.vmap(func.vmap(lambda r: r.softmax(-1) * r.sum()))(dg.tensor(xn)).numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_readme_example_runs(tmp_path):
    import pathlib
    import re
    import subprocess
    import sys
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Function transforms: duograph.func", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / "example.py").write_text(code)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(32, 16, 8)"


@pytest.mark.parametrize("case", ["x[i]", "x[:, i]", "x[i, j]", "x[:, i, j]", "x[i, :, j]",
                                  "shared index", "shared x", "index_select",
                                  "grad x[i]", "grad x[:, i]", "grad x[i, :, j]"])
def test_advanced_indexing_and_its_gradient_per_example(case):
    X = _rng.standard_normal((3, 5, 6, 4))
    i5, j6, j4 = (_rng.integers(0, n, (3, 2)) for n in (5, 6, 4))
    fn, args, in_dims = {
        "x[i]": (lambda x, i: x[i], (X, i5), 0),
        "x[:, i]": (lambda x, i: x[:, i], (X, j6), 0),
        "x[i, j]": (lambda x, i, j: x[i, j], (X, i5, j6), 0),
        "x[:, i, j]": (lambda x, i, j: x[:, i, j], (X, j6, j4), 0),
        "x[i, :, j]": (lambda x, i, j: x[i, :, j], (X, i5, j4), 0),
        "shared index": (lambda x, i: x[i], (X, i5[0]), (0, None)),
        "shared x": (lambda x, i: x[:, i], (X[0], j6), (None, 0)),
        "index_select": (lambda x, i: dg.index_select(x, 1, i), (X, j6), 0),
        "grad x[i]": (lambda x, i: func.grad(lambda z: (z[i] ** 2).sum())(x), (X, i5), 0),
        "grad x[:, i]": (lambda x, i: func.grad(lambda z: z[:, i].exp().sum())(x),
                         (X, j6), 0),
        "grad x[i, :, j]": (lambda x, i, j: func.grad(lambda z: z[i, :, j].sin().sum())(x),
                            (X, i5, j4), 0),
    }[case]
    batched_mod.FALLBACK_OPS.clear()
    out = func.vmap(fn, in_dims=in_dims)(*[dg.tensor(a) for a in args]).numpy()
    dims = in_dims if isinstance(in_dims, tuple) else (0,) * len(args)
    for k in range(3):
        example = [dg.tensor(a[k] if d == 0 else a) for a, d in zip(args, dims)]
        np.testing.assert_allclose(out[k], fn(*example).numpy(), rtol=1e-12)
    assert not batched_mod.FALLBACK_OPS


@pytest.mark.parametrize("name", ["LayerNorm", "Embedding", "MultiheadAttention",
                                  "TransformerEncoderLayer", "GRU", "Conv1d"])
def test_nn_layers_under_vmap_equal_each_example(name):
    layer, x = {
        "LayerNorm": (dg.nn.LayerNorm(6), _rng.standard_normal((3, 4, 6))),
        "Embedding": (dg.nn.Embedding(10, 4), _rng.integers(0, 10, (3, 5))),
        "MultiheadAttention": (dg.nn.MultiheadAttention(8, 2, batch_first=True),
                               _rng.standard_normal((3, 1, 5, 8))),
        "TransformerEncoderLayer": (dg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                  batch_first=True),
                                    _rng.standard_normal((3, 1, 5, 8))),
        "GRU": (dg.nn.GRU(4, 5, batch_first=True), _rng.standard_normal((3, 1, 6, 4))),
        "Conv1d": (dg.nn.Conv1d(2, 3, 3), _rng.standard_normal((3, 1, 2, 7))),
    }[name]
    if name == "MultiheadAttention":
        def f(t):
            return layer(t, t, t)[0]
    elif name == "GRU":
        def f(t):
            return layer(t)[0]
    else:
        f = layer
    X = dg.tensor(x.astype("float32") if x.dtype.kind == "f" else x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # GRU's scan runs per example
        out = func.vmap(f)(X).detach().numpy()
    for k in range(3):
        np.testing.assert_allclose(out[k], f(X[k]).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_vmap_graph_transforms_a_whole_graph():
    g = dg.Graph("example")
    with g:
        x = g.add_input("x", dg.TensorType((5, 4), "float64"))
        w = g.add_input("w", dg.TensorType((4, 3), "float64"))
        g.outputs = [_batched_fn(x, w), dg.sum(w)]
    batched = func.vmap_graph(g, 6, in_dims=(1, None), out_dims=(0, None))
    text = str(batched)
    assert "%x: f64[5,6,4]" in text and "%w: f64[4,3]" in text
    x_np, w_np = _rng.standard_normal((5, 6, 4)), _rng.standard_normal((4, 3))
    want = func.vmap(_batched_fn, in_dims=(1, None))(dg.tensor(x_np), dg.tensor(w_np)).numpy()
    for passes in ("O0", "O2"):
        got = batched.compile(outputs=batched.outputs, passes=passes)(x=x_np, w=w_np)
        np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got[1]), w_np.sum(), rtol=1e-12)
    with pytest.raises(ValueError, match="out_dim cannot be None"):
        func.vmap_graph(g, 6, in_dims=(1, None), out_dims=None)


def test_in_place_methods_on_batched_tensors_and_their_gradients():
    x = dg.tensor(_rng.standard_normal((3, 2)))

    def f(r):
        y = r.exp()
        y.mul_(2).add_(r).sub_(1)       # the exp's vjp must read exp(r), not the result
        return y

    def g(r):
        return 2 * r.exp() + r - 1
    np.testing.assert_allclose(func.vmap(f)(x).numpy(), g(x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(func.vmap(func.grad(lambda r: f(r).sum()))(x).numpy(),
                               (2 * x.exp() + 1).numpy(), rtol=1e-12)


def test_graph_vmap_shares_state_and_seeds_with_the_outer_graph():
    g = dg.Graph("stateful")
    drop, lin = dg.nn.Dropout(0.5), dg.nn.Linear(300, 2)
    with g:
        x = g.add_input("x", dg.TensorType((4, 300), "float32"))
        g.outputs = [func.vmap(drop, randomness="same")(x),
                     func.vmap(drop, randomness="different")(x), func.vmap(lin)(x)]
        with pytest.raises(RuntimeError, match="randomness error mode"):
            func.vmap(drop)(x)
    same, diff, out = (np.asarray(r) for r in g.compile(outputs=g.outputs)(
        x=np.ones((4, 300), "float32")))
    assert np.array_equal(same[0], same[3]) and not np.array_equal(diff[0], diff[1])
    np.testing.assert_allclose(out, lin(dg.ones(4, 300)).detach().numpy(), rtol=1e-6)
