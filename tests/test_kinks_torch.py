"""PyTorch's values and gradients where rules are decided, not derived: at kinks (relu and
abs at 0, clamp's bounds, ELU's 0, hardswish's -3 and 3), at ties (maximum, max/min and their
reductions), at 0, +-inf and NaN, and under an infinite cotangent (a 0/1 mask multiplied into
it gives NaN where PyTorch's selection gives 0).

Every differentiable elementwise op, the activations of ``nn.functional`` and the
reductions are probed in float32 and float64, eagerly and in graph mode (O0, O2 with the
numpy fused kernels, and O2 with the numba kernels generated from the ops' ``expr``), against
torch on the CPU. A differential fuzz with integer inputs in {-1, 0, 1} over single ops and
compositions of two must find no disagreement.

Where duograph differs on purpose, ``DELIBERATE`` lists it with the reason.
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
import pytest

import duograph as dg
from duograph.nn import functional as NF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

inf, nan = math.inf, math.nan
DTYPES = ("float32", "float64")
MODES = ("eager", "O0", "O2", "numba")
# the points where rules are decided, and a few ordinary ones around them
POINTS = (-inf, -6.0, -3.0, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 6.0, 20.0,
          inf, nan)
PAIR_POINTS = (-inf, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, inf, nan)


def _pow(e):
    return lambda x: dg.pow(x, e), lambda x: torch.pow(x, e)


UNARY = {
    "neg": (dg.neg, torch.neg), "abs": (dg.abs, torch.abs), "exp": (dg.exp, torch.exp),
    "log": (dg.log, torch.log), "sqrt": (dg.sqrt, torch.sqrt),
    "rsqrt": (dg.rsqrt, torch.rsqrt), "square": (dg.square, torch.square),
    "reciprocal": (dg.reciprocal, torch.reciprocal), "sin": (dg.sin, torch.sin),
    "cos": (dg.cos, torch.cos), "tanh": (dg.tanh, torch.tanh),
    "sigmoid": (dg.sigmoid, torch.sigmoid), "logsigmoid": (NF.logsigmoid, TF.logsigmoid),
    "relu": (dg.relu, torch.relu), "erf": (dg.erf, torch.erf),
    "sign": (dg.sign, torch.sign), "tan": (dg.tan, torch.tan), "asin": (dg.asin, torch.asin),
    "acos": (dg.acos, torch.acos), "atan": (dg.atan, torch.atan),
    "sinh": (dg.sinh, torch.sinh), "cosh": (dg.cosh, torch.cosh),
    "asinh": (dg.asinh, torch.asinh), "acosh": (dg.acosh, torch.acosh),
    "atanh": (dg.atanh, torch.atanh), "log1p": (dg.log1p, torch.log1p),
    "expm1": (dg.expm1, torch.expm1), "log2": (dg.log2, torch.log2),
    "log10": (dg.log10, torch.log10), "exp2": (dg.exp2, torch.exp2),
    "floor": (dg.floor, torch.floor), "ceil": (dg.ceil, torch.ceil),
    "trunc": (dg.trunc, torch.trunc), "frac": (dg.frac, torch.frac),
    "round": (dg.round, torch.round), "nan_to_num": (dg.nan_to_num, torch.nan_to_num),
    "clamp": (lambda x: dg.clamp(x, 0.0, 6.0), lambda x: torch.clamp(x, 0.0, 6.0)),
    "clamp_min": (lambda x: dg.clamp(x, min=-1.0), lambda x: torch.clamp(x, min=-1.0)),
    "clamp_max": (lambda x: dg.clamp(x, max=1.0), lambda x: torch.clamp(x, max=1.0)),
    "leaky_relu": (lambda x: NF.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    "gelu": (dg.gelu, TF.gelu),
    "gelu_tanh": (lambda x: dg.gelu(x, "tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "softplus": (NF.softplus, TF.softplus),
    "softplus_beta": (lambda x: NF.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    "elu": (NF.elu, TF.elu), "elu_alpha": (lambda x: NF.elu(x, 2.0),
                                           lambda x: TF.elu(x, 2.0)),
    "selu": (NF.selu, TF.selu), "celu": (lambda x: NF.celu(x, 2.0),
                                         lambda x: TF.celu(x, 2.0)),
    "hardtanh": (NF.hardtanh, TF.hardtanh), "relu6": (NF.relu6, TF.relu6),
    "hardtanh_wide": (lambda x: NF.hardtanh(x, -2.0, 3.0),
                      lambda x: TF.hardtanh(x, -2.0, 3.0)),
    "hardsigmoid": (NF.hardsigmoid, TF.hardsigmoid),
    "hardswish": (NF.hardswish, TF.hardswish), "silu": (NF.silu, TF.silu),
    "mish": (NF.mish, TF.mish), "softsign": (NF.softsign, TF.softsign),
    "tanhshrink": (NF.tanhshrink, TF.tanhshrink),
    "threshold": (lambda x: NF.threshold(x, 1.0, -2.0), lambda x: TF.threshold(x, 1.0, -2.0)),
    "prelu": (lambda x: NF.prelu(x, dg.tensor(np.asarray([0.25], x.dtype)))
              if isinstance(x, dg.Tensor) else NF.prelu(x, dg.constant(np.asarray([0.25],
                                                                                  x.dtype))),
              lambda x: TF.prelu(x, torch.tensor([0.25], dtype=x.dtype))),
    # the issue's composition: sqrt's infinite gradient at 0 meets maximum's selection
    "sqrt_relu": (lambda x: dg.sqrt(dg.maximum(x, 0.0)),
                  lambda x: torch.sqrt(torch.maximum(x, torch.tensor(0.0, dtype=x.dtype)))),
    "sqrt_clamp": (lambda x: dg.sqrt(dg.clamp(x, min=0.0)),
                   lambda x: torch.sqrt(torch.clamp(x, min=0.0))),
    "l1_loss": (lambda x: NF.l1_loss(x, x * 0.0, reduction="none"),
                lambda x: TF.l1_loss(x, x * 0.0, reduction="none")),
    **{f"pow_{e}": _pow(e) for e in (0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.5)},
}

BINARY = {
    "add": (dg.add, torch.add), "sub": (dg.sub, torch.sub), "mul": (dg.mul, torch.mul),
    "div": (dg.div, torch.div), "pow": (dg.pow, torch.pow),
    "maximum": (dg.maximum, torch.maximum), "minimum": (dg.minimum, torch.minimum),
    "atan2": (dg.atan2, torch.atan2), "hypot": (dg.hypot, torch.hypot),
    "remainder": (dg.remainder, torch.remainder), "fmod": (dg.fmod, torch.fmod),
    "xlogy": (dg.xlogy, torch.xlogy),
    "lerp": (lambda a, b: dg.lerp(a, b, 0.25), lambda a, b: torch.lerp(a, b, 0.25)),
    "where": (lambda a, b: dg.where(a > b, a, b),
              lambda a, b: torch.where(a > b, a, b)),
    "mse": (lambda a, b: NF.mse_loss(a, b, reduction="none"),
            lambda a, b: TF.mse_loss(a, b, reduction="none")),
}

# reductions over the rows of ROWS (dim 1) or over everything
ROWS = ((1.0, 1.0, 0.0), (2.0, 2.0, 2.0), (0.0, 0.0, 0.0), (-1.0, 3.0, 3.0),
        (0.0, -0.0, 0.0), (nan, 1.0, nan), (1.0, nan, 1.0), (inf, 1.0, inf),
        (-inf, -inf, -inf), (inf, -inf, 1.0), (0.5, -2.0, 1.0))


def _vnorm(p):
    return (lambda x: dg.linalg.vector_norm(x, p, 1),
            lambda x: torch.linalg.vector_norm(x, p, 1))


REDUCTIONS = {
    "sum": (lambda x: dg.sum(x, 1), lambda x: torch.sum(x, 1)),
    "mean": (lambda x: dg.mean(x, 1), lambda x: torch.mean(x, 1)),
    "amax": (lambda x: dg.amax(x, 1), lambda x: torch.amax(x, 1)),
    "amin": (lambda x: dg.amin(x, 1), lambda x: torch.amin(x, 1)),
    "amax_all": (dg.amax, torch.amax),
    "max_dim": (lambda x: dg.max(x, 1)[0], lambda x: torch.max(x, 1)[0]),
    "min_dim": (lambda x: dg.min(x, 1)[0], lambda x: torch.min(x, 1)[0]),
    "max_dim_keepdim": (lambda x: dg.max(x, 1, keepdim=True)[0],
                        lambda x: torch.max(x, 1, keepdim=True)[0]),
    "max_method": (lambda x: x.max(dim=1)[0], lambda x: x.max(dim=1)[0]),
    "max_all": (dg.max, torch.max), "min_all": (dg.min, torch.min),
    "var": (lambda x: dg.var(x, 1), lambda x: torch.var(x, 1)),
    "var_biased": (lambda x: dg.var(x, 1, correction=0),
                   lambda x: torch.var(x, 1, correction=0)),
    "std": (lambda x: dg.std(x, 1), lambda x: torch.std(x, 1)),
    "std_biased": (lambda x: dg.std(x, 1, correction=0),
                   lambda x: torch.std(x, 1, correction=0)),
    "std_all": (dg.std, torch.std), "var_all": (dg.var, torch.var),
    "logsumexp": (lambda x: dg.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1)),
    "norm_1": _vnorm(1), "norm_2": _vnorm(2), "norm_3": _vnorm(3), "norm_half": _vnorm(0.5),
    "norm_inf": _vnorm(inf), "norm_-inf": _vnorm(-inf), "norm_0": _vnorm(0),
    "softmax": (lambda x: dg.softmax(x, 1), lambda x: torch.softmax(x, 1)),
    "log_softmax": (lambda x: dg.log_softmax(x, 1), lambda x: torch.log_softmax(x, 1)),
    "cumsum": (lambda x: dg.cumsum(x, 1), lambda x: torch.cumsum(x, 1)),
    "cummax": (lambda x: dg.cummax(x, 1)[0], lambda x: torch.cummax(x, 1)[0]),
    "cummin": (lambda x: dg.cummin(x, 1)[0], lambda x: torch.cummin(x, 1)[0]),
    "logcumsumexp": (lambda x: dg.logcumsumexp(x, 1), lambda x: torch.logcumsumexp(x, 1)),
    "median": (lambda x: dg.median(x, 1)[0], lambda x: torch.median(x, 1)[0]),
    "median_all": (dg.median, torch.median),
    "topk": (lambda x: dg.topk(x, 2, 1)[0], lambda x: torch.topk(x, 2, 1)[0]),
    "sort": (lambda x: dg.sort(x, 1)[0], lambda x: torch.sort(x, 1)[0]),
    "prod": (lambda x: dg.prod(x, 1), lambda x: torch.prod(x, 1)),
    "cumprod": (lambda x: dg.cumprod(x, 1), lambda x: torch.cumprod(x, 1)),
    "kthvalue": (lambda x: dg.kthvalue(x, 2, 1)[0], lambda x: torch.kthvalue(x, 2, 1)[0]),
}

TABLES = {"unary": UNARY, "binary": BINARY, "reduction": REDUCTIONS}
# Where duograph differs from PyTorch on purpose: (op, what) -> reason. ``what`` names the
# points left out of the comparison (the rest is still compared).
DELIBERATE = {
    ("prod", "inf/nan rows"): "PyTorch's prod and cumprod gradients switch formula on "
    "whether the WHOLE tensor holds a zero (result / x if none, products of the others if "
    "any): at inf and NaN entries the answer depends on unrelated rows. duograph's rule "
    "does not look outside the slice; both agree wherever the entries are finite",
    ("cumprod", "inf/nan rows"): "as prod",
    ("cumprod", "inf cotangent"): "as prod: with a zero in the tensor PyTorch's cumprod "
    "gradient takes another formula, whose products an infinite cotangent meets otherwise",
    ("kthvalue", "tie rows"): "among ties PyTorch leaves the index unspecified (its CPU "
    "kernel returns the first, duograph the stable order's); the gradient goes to the "
    "returned index in both",
    ("sqrt_clamp", "-0.0"): "clamp(-0.0, min=0) is +0.0 (numpy's clip), where PyTorch's "
    "clamp keeps -0.0: equal values, which only an op that tells the zeros apart sees "
    "(here sqrt's gradient, +inf against -inf)",
}
# PyTorch's vectorised CPU loop and its scalar loop (short tensors, tails) disagree with each
# other at NaN for these (elu's gradient at NaN is NaN in the first, 1 in the second;
# hardtanh's 0 and 1): duograph follows the scalar loop, which is also the rule of
# torch._decomp's elu_backward, hardtanh_backward and hardswish_backward. NaN entries are
# compared with torch run on one element (``_torch_by_element``).


def _close(got, want, dtype, what, rtol=None):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    if rtol is None:
        rtol = 2e-5 if dtype == "float32" else 1e-10
    atol = 1e-6 if dtype == "float32" else 1e-12
    same = np.isnan(got) == np.isnan(want)
    finite = np.isfinite(want) & np.isfinite(got)
    with np.errstate(invalid="ignore"):
        same &= np.where(finite, np.abs(got - want) <= atol + rtol * np.abs(want),
                         np.isnan(want) | (got == want))
    if not same.all():
        bad = np.argwhere(~same)[:6]
        raise AssertionError(f"{what}: differs from PyTorch at {bad.tolist()}: got "
                             f"{got[tuple(bad.T)].tolist()}, torch {want[tuple(bad.T)].tolist()}")


# -- running: torch, eager, graph (one graph per table, dtype, mode and cotangent) -------------
def _torch(fn, arrays, ct):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    grads = torch.autograd.grad(y, ts, torch.tensor(ct, dtype=y.dtype), allow_unused=True)
    return y.detach().numpy(), [np.zeros_like(a) if g is None else g.numpy()
                                for a, g in zip(arrays, grads)]


def _torch_by_element(fn, x, ct):
    """torch on the whole vector, its NaN entries again one by one (its scalar loop)."""
    y, (g,) = _torch(fn, [x], ct)
    y, g = y.copy(), g.copy()
    for i in np.flatnonzero(np.isnan(x)):
        yi, (gi,) = _torch(fn, [x[i:i + 1]], ct[i:i + 1])
        y[i], g[i] = yi[0], gi[0]
    return y, [g]


def _eager(fn, arrays, ct):
    ts = [dg.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    grads = dg.autograd.grad([y], ts, grad_outputs=[dg.tensor(ct.astype(y.dtype))],
                             allow_unused=True)
    return y.detach().numpy(), [np.zeros_like(a) if g is None else g.numpy()
                                for a, g in zip(arrays, grads)]


def _graph(cases, mode):
    """Every case ``name -> (fn, arrays, ct)`` in one graph, compiled once for ``mode``:
    ``name -> (value, gradients)``."""
    g = dg.Graph("kinks")
    feeds, outs, spans = {}, [], {}
    with g:
        for k, (name, (fn, arrays, ct)) in enumerate(cases.items()):
            xs = []
            for i, a in enumerate(arrays):
                feeds[f"x{k}_{i}"] = a
                xs.append(dg.placeholder(f"x{k}_{i}", a.shape, a.dtype.name))
            feeds[f"ct{k}"] = ct
            y = fn(*xs)
            grads = dg.grad(y, xs, cotangent=dg.placeholder(f"ct{k}", ct.shape, ct.dtype.name))
            spans[name] = (len(outs), len(xs))
            outs += [y] + list(grads)
    if mode == "numba":
        with dg.config.override(fused_strategy="numba"):
            got = g.compile(outputs=outs, passes="O2")(**feeds)
    else:
        got = g.compile(outputs=outs, passes=mode)(**feeds)
    return {name: (got[at], list(got[at + 1:at + 1 + n])) for name, (at, n) in spans.items()}


def _inputs(kind, name, dtype, cotangent):
    """(arrays, cotangent) a table's op is probed on."""
    if kind == "unary":
        x = np.asarray([p for p in POINTS if not ((name, "-0.0") in DELIBERATE and p == 0
                                                  and math.copysign(1, p) < 0)], dtype)
        return [x], np.full_like(x, 1.0 if cotangent == "one" else inf)
    if kind == "binary":
        a, b = (v.ravel() for v in np.meshgrid(np.asarray(PAIR_POINTS, dtype),
                                                np.asarray(PAIR_POINTS, dtype)))
        return [a, b], np.full_like(a, 1.0 if cotangent == "one" else inf)
    x = _rows(name).astype(dtype)
    shape = tuple(TABLES[kind][name][1](torch.tensor(x)).shape)
    if cotangent == "inf":
        return [x], np.full(shape, inf, dtype)
    return [x], np.random.default_rng(0).standard_normal(shape).astype(dtype)


@lru_cache(maxsize=None)
def _results(kind, dtype, mode, cotangent):
    """``name -> (value, gradients)`` for every op of a table ("torch" for the oracle)."""
    table = TABLES[kind]
    names = [n for n in sorted(table) if mode != "numba" or n in NUMBA_OPS]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {n: (table[n][0], *_inputs(kind, n, dtype, cotangent)) for n in names}
        if mode == "torch":
            run = _torch_by_element if kind == "unary" else (lambda f, a, c: _torch(f, a, c))
            return {n: (run(table[n][1], a[0], c) if kind == "unary" else
                        _torch(table[n][1], a, c)) for n, (_, a, c) in cases.items()}
        if mode == "eager":
            return {n: _eager(f, a, c) for n, (f, a, c) in cases.items()}
        return _graph(cases, mode)


def _check_result(name, got, want, dtype, mode, rtol=None):
    _close(got[0], want[0], dtype, f"{name} {dtype} {mode}: value", rtol)
    for k, (a, b) in enumerate(zip(got[1], want[1])):
        _close(a, b, dtype, f"{name} {dtype} {mode}: gradient of operand {k}", rtol)


def _check(name, fn, tfn, arrays, ct, mode, dtype, rtol=None):
    """One function, outside the tables (the fuzz)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _torch(tfn, arrays, ct)
        got = _eager(fn, arrays, ct) if mode == "eager" else \
            _graph({name: (fn, arrays, ct)}, mode)[name]
    _check_result(name, got, want, dtype, mode, rtol)


# The generated numba kernels cost ~0.4 s each to compile on a fresh machine: "numba" mode
# runs the ops whose expressions or gradient rules decide a kink, tie or non-finite value.
NUMBA_OPS = {"abs", "sign", "relu", "clamp", "clamp_min", "leaky_relu", "elu", "selu",
             "hardtanh", "relu6", "hardsigmoid", "hardswish", "threshold", "sqrt_relu",
             "pow_0.5", "pow_-0.5", "nan_to_num", "rsqrt", "acosh", "silu",
             "maximum", "minimum", "remainder", "atan2", "where", "pow"}


def _rtol(name, dtype):
    # PyTorch's hardsigmoid multiplies by a float32 1/6 even in float64 (documented in
    # nn.functional.hardsigmoid)
    return 1e-7 if "hardsigmoid" in name and dtype == "float64" else None


def _table_test(kind, name, dtype, modes=MODES, cotangents=("one", "inf")):
    """The op ``name`` of a table in every mode and under each cotangent, all failures
    reported together."""
    failures = []
    for cotangent in cotangents:
        if cotangent == "inf" and (name, "inf cotangent") in DELIBERATE:
            continue
        want = _results(kind, dtype, "torch", cotangent)[name]
        for mode in modes:
            if mode == "numba" and (cotangent == "inf" or name not in NUMBA_OPS):
                continue        # numba mode: the kink ops, with finite cotangents
            got = _results(kind, dtype, mode, cotangent)[name]
            try:
                _check_result(f"{name} (cotangent {cotangent})", got, want, dtype, mode,
                              _rtol(name, dtype))
            except AssertionError as e:
                failures.append(str(e).splitlines()[0])
    assert not failures, "\n".join(failures)


# -- the tables ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_torch_at_their_kinks(name, dtype):
    _table_test("unary", name, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_match_torch_on_every_pair_of_points(name, dtype):
    _table_test("binary", name, dtype)


def _rows(name):
    """The rows a reduction is compared on (DELIBERATE leaves some out)."""
    rows = np.asarray(ROWS)
    keep = np.ones(len(rows), bool)
    if (name, "inf/nan rows") in DELIBERATE:
        keep &= np.isfinite(rows).all(1)
    if (name, "tie rows") in DELIBERATE:
        keep &= np.array([len(set(r)) == len(r) for r in rows.tolist()])
    return rows[keep]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_match_torch_at_ties_zeros_and_non_finite_values(name, dtype):
    _table_test("reduction", name, dtype, MODES[:3])


def test_deliberate_differences_are_still_differences():
    """Each DELIBERATE entry must still differ (otherwise drop it): the rows it leaves out
    give another gradient than PyTorch's."""
    for (name, what), _reason in DELIBERATE.items():
        if what == "-0.0":
            fn, tfn = UNARY[name]
            x = np.asarray([-0.0])
        elif what == "inf cotangent":
            fn, tfn = REDUCTIONS[name]
            x = np.asarray(ROWS[:3], "float64")
            with pytest.raises(AssertionError):
                _check(name, fn, tfn, [x], np.full(tfn(torch.tensor(x)).shape, inf),
                       "eager", "float64")
            continue
        else:
            fn, tfn = REDUCTIONS[name]
            x = np.asarray(ROWS, "float64")
        ct = np.ones(tfn(torch.tensor(x)).shape)
        with pytest.raises(AssertionError):
            _check(name, fn, tfn, [x], ct, "eager", "float64")


# -- the issue's examples, named ---------------------------------------------------------------
def _grad(fn, x):
    t = dg.tensor(np.asarray(x, "float32"), requires_grad=True)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")        # numpy's, for sqrt'(0) and var of one value
        fn(t).sum().backward()
    return t.grad.numpy().tolist()


def test_the_examples_of_the_issue():
    assert _grad(NF.elu, [0.0]) == [1.0]
    assert _grad(NF.selu, [0.0]) == pytest.approx([1.7580993])
    assert _grad(NF.celu, [0.0]) == [1.0]
    assert _grad(NF.hardswish, [-3.0, 3.0]) == [0.0, 1.0]
    assert _grad(NF.relu6, [0.0, 6.0]) == [0.0, 0.0]
    assert _grad(NF.hardtanh, [-1.0, 1.0]) == [0.0, 0.0]
    assert _grad(NF.hardsigmoid, [-3.0, 3.0]) == [0.0, 0.0]
    assert _grad(lambda x: dg.max(x, 0)[0], [1.0, 1.0, 0.0]) == [1.0, 0.0, 0.0]
    assert _grad(lambda x: dg.min(x, 0)[0], [0.0, 0.0, 1.0]) == [1.0, 0.0, 0.0]
    assert _grad(dg.max, [1.0, 1.0, 0.0]) == [0.5, 0.5, 0.0]      # torch's max(): shared
    assert _grad(lambda x: dg.sqrt(dg.maximum(x, 0.0)), [-1.0]) == [0.0]
    assert _grad(dg.relu, [nan]) == [1.0]
    assert _grad(lambda x: dg.maximum(x, 0.0), [nan]) == [1.0]
    assert _grad(dg.abs, [nan]) == [0.0]
    assert _grad(lambda x: dg.std(x), [2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert all(math.isnan(v) for v in _grad(lambda x: dg.var(x, 0), [2.0]))


def test_imported_clip_has_clamps_gradient_at_its_bounds(tmp_path):
    """ONNX Clip(0, 6) (what PyTorch exports ReLU6 as) is PyTorch's clamp: gradient 1 at its
    bounds, whether the bounds are folded constants or state read at run time."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = np.asarray([-1.0, 0.0, 3.0, 6.0, 7.0, nan], "float32")
    lo, hi = (helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in
              (("lo", 0.0), ("hi", 6.0)))
    graph = helper.make_graph(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])], initializer=[lo, hi])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    tx = torch.tensor(x, requires_grad=True)
    torch.clamp(tx, 0.0, 6.0).sum().backward()
    for initializers in ("constant", "state"):
        g = dg.onnx.load(model, initializers=initializers)
        with g:
            (gx,) = dg.grad(dg.sum(g.outputs[0]), [g.inputs[0]])
        assert len(g.state) == (2 if initializers == "state" else 0)
        y, grad = g.compile(outputs=[g.outputs[0], gx])(x=x)
        np.testing.assert_array_equal(y, torch.clamp(torch.tensor(x), 0.0, 6.0).numpy())
        np.testing.assert_array_equal(grad, tx.grad.numpy(), err_msg=initializers)


# -- differential fuzz: integer inputs in {-1, 0, 1} ---------------------------------------------
FUZZ_UNARY = sorted(set(UNARY) - {"prelu", "l1_loss"})
FUZZ_BINARY = sorted(BINARY)
FUZZ_REDUCTIONS = sorted(n for n in REDUCTIONS if (n, "tie rows") not in DELIBERATE)


@lru_cache(maxsize=None)
def _fuzz_cases(seed: int = 23, n: int = 120):
    """(description, duograph fn, torch fn, arity) for single ops and pairs."""
    rng = np.random.default_rng(seed)
    cases = []
    for name in FUZZ_UNARY:
        cases.append((name, *UNARY[name], 1))
    for name in FUZZ_BINARY:
        cases.append((name, *BINARY[name], 2))
    for name in FUZZ_REDUCTIONS:
        cases.append((name, *REDUCTIONS[name], 1))
    for _ in range(n):           # compositions: an op applied to another's result
        outer = str(rng.choice(FUZZ_UNARY))
        inner = str(rng.choice(FUZZ_UNARY + FUZZ_BINARY))
        (f, tf), (g, tg) = UNARY[outer], (UNARY.get(inner) or BINARY[inner])
        arity = 2 if inner in BINARY else 1
        cases.append((f"{outer}({inner})",
                      (lambda f, g: lambda *a: f(g(*a)))(f, g),
                      (lambda f, g: lambda *a: f(g(*a)))(tf, tg), arity))
    return cases


@pytest.mark.parametrize("dtype", DTYPES)
def test_fuzz_integer_inputs_agree_with_torch(dtype):
    rng = np.random.default_rng(1)
    failures = []
    for name, fn, tfn, arity in _fuzz_cases():
        arrays = [rng.integers(-1, 2, size=(4, 3)).astype(dtype) for _ in range(arity)]
        with np.errstate(all="ignore"):
            shape = tuple(np.shape(tfn(*[torch.tensor(a) for a in arrays]).detach()))
        ct = rng.integers(-1, 2, size=shape).astype(dtype)
        for mode in ("eager", "O0"):
            try:
                _check(name, fn, tfn, arrays, ct, mode, dtype, rtol=_rtol(name, dtype))
            except AssertionError as e:
                failures.append(str(e).splitlines()[0])
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures)


@pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.*")
def test_an_imported_relu6_network_is_torchs_with_clamp(tmp_path):
    """Why an imported mobilenet_v2's input gradient differed from PyTorch's (issue 23): its
    ReLU6 exports as Clip(0, 6), and where a ReLU6 input is exactly 0 (a window of zeros:
    a zero-padded or black image region, BatchNorm folded into a bias-free conv) the
    gradient is decided by the edge rule. PyTorch's ReLU6 (hardtanh) gives 0 there, its
    clamp 1, and the Clip had split it (0.5). An ONNX Clip cannot say which it came from:
    it imports as clamp (torch.clip), so the imported network's gradient is exactly that of
    the torch network with its ReLU6s replaced by clamp(0, 6), ties included, and equals
    the ReLU6 network's wherever no input sits on a bound."""
    pytest.importorskip("onnx")

    class Clamp6(torch.nn.Module):
        def forward(self, x):
            return torch.clamp(x, 0.0, 6.0)

    torch.manual_seed(0)
    relu6 = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU6(), torch.nn.Conv2d(8, 4, 3, padding=1, groups=4, bias=False),
        torch.nn.BatchNorm2d(4), torch.nn.ReLU6(), torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 5)).eval()
    clamp6 = torch.nn.Sequential(*[Clamp6() if isinstance(m, torch.nn.ReLU6) else m
                                   for m in relu6]).eval()
    x = torch.randn(2, 3, 8, 8)
    x[..., :4] = 0.0                        # a zero region: ReLU6 inputs exactly 0
    path = tmp_path / "relu6.onnx"
    try:
        torch.onnx.export(relu6, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    except Exception as e:          # pragma: no cover - exporter not available
        pytest.skip(f"torch.onnx.export unavailable here: {type(e).__name__}: {e}")
    g = dg.onnx.load(str(path))
    ct = np.random.default_rng(0).standard_normal((2, 5)).astype("float32")
    with g:
        (gx,) = dg.grad(g.outputs[0], [g.inputs[0]], cotangent=dg.constant(ct))
    got = g.compile(outputs=[gx])(x=x.numpy())[0]

    def torch_grad(model, inputs):
        t = inputs.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(t), t, torch.from_numpy(ct))
        return grad.numpy()
    want = torch_grad(clamp6, x)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale)
    assert np.abs(torch_grad(relu6, x) - want).max() > 1e-3 * scale   # the ties matter here
    away = torch.randn(2, 3, 8, 8)          # no zero window: ReLU6 and clamp agree
    got = g.compile(outputs=[gx])(x=away.numpy())[0]
    want = torch_grad(relu6, away)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
