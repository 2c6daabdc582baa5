"""The op-sample table (like PyTorch's OpInfo, JAX's ``LAX_GRAD_OPS``).

One ``OpInfo`` per public op function: the function, a few ``Sample``s (numpy arrays for the
tensor operands, Python values for everything else), a numpy reference, tolerances, whether
it is differentiable, and ``ErrorCase``s that must raise a clear duograph error at build time.
Generic tests loop over ``OPS``: ``test_ops.py`` (graph mode vs numpy, inferred types,
gradients, errors), ``test_ops_eager.py`` (eager vs graph mode), ``test_ops_torch.py``.

Conventions:

- Every ``np.ndarray`` among a sample's arguments (top level, inside a list/tuple argument, or
  a keyword value) is a tensor operand: the tests turn it into a placeholder (graph mode).
  Everything else (numbers, dims, shapes, index tuples, dtype names) is passed as is.
- ``ref(*args, **kwargs)`` takes the same arguments with numpy arrays and returns the expected
  array (or a tuple of arrays for multi-output ops). The expected dtype is ``Sample.dtype``
  when given (where duograph's promotion differs from numpy's), else the reference's.
- Gradients are checked in float64 against central finite differences of ``ref`` with respect
  to the float64 operands (``OpInfo.grad_args`` narrows them); samples keep away from kinks
  (relu and abs at 0, clamp bounds, max/min ties) unless ``Sample.fd`` is False (then only
  the PyTorch oracle checks the gradient convention there).
- A new public op function needs an entry: ``test_table_covers_every_public_op`` fails
  until it has one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from scipy import special

import duograph as dg
from duograph.graphlib import functional as F

F64, F32, F16, I64, I32, U8, B8 = ("float64", "float32", "float16", "int64", "int32", "uint8",
                                   "bool")

# rtol, atol per result dtype; integer and bool results must match exactly.
DEFAULT_TOL = {F16: (1e-2, 1e-3), F32: (1e-5, 1e-6), F64: (1e-10, 1e-12)}
LOOSE_TOL = {F16: (2e-2, 2e-3), F32: (1e-4, 1e-5), F64: (1e-9, 1e-11)}


@dataclass
class Sample:
    """One call: ``fn(*args, **kwargs)``; arrays are tensor operands."""
    name: str
    args: tuple
    kwargs: Dict[str, Any] = field(default_factory=dict)
    dtype: Optional[str] = None      # expected result dtype when numpy promotes differently
    fd: bool = True                  # False: no finite-difference check (a kink or a tie)


@dataclass
class ErrorCase:
    """A call that must raise ``exc`` at build time with ``match`` in the message."""
    name: str
    args: tuple
    kwargs: Dict[str, Any]
    exc: type
    match: str


@dataclass
class OpInfo:
    """Everything the generic tests need to know about one op function."""
    name: str
    fn: Callable
    samples: List[Sample]
    ref: Optional[Callable]
    tol: Dict[str, Tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_TOL))
    differentiable: bool = False
    grad_args: Optional[Sequence[int]] = None   # tensor-leaf indices to differentiate
    errors: List[ErrorCase] = field(default_factory=list)
    binary: bool = False             # elementwise binary op (hypothesis broadcasting test)
    make_input: Optional[Callable] = None       # (rng, shape) -> operand, for binary ops
    random: bool = False             # seeded random op: ``check`` replaces the reference
    check: Optional[Callable] = None  # check(out, *args, **kwargs) for random ops
    # False: no second-order finite differences (an op that reads one triangle of a
    # symmetric input has a symmetric gradient, which perturbing single elements of the
    # first-order graph does not see; a symmetrising wrapper's entry checks them instead)
    second_order: bool = True

    @property
    def op_name(self) -> str:
        """The name error messages must carry."""
        return self.fn.__name__


# -- tensor leaves -----------------------------------------------------------------------------
def map_leaves(args: tuple, kwargs: dict, fn: Callable) -> Tuple[tuple, dict]:
    """Replace every array operand (see the module docstring) by ``fn(array)``, in a fixed
    order: positional arguments first (list/tuple arguments item by item), then keywords."""
    def one(a):
        if isinstance(a, np.ndarray):
            return fn(a)
        if isinstance(a, list) or (isinstance(a, tuple) and any(
                isinstance(x, np.ndarray) for x in a)):
            return type(a)(one(x) if isinstance(x, np.ndarray) else x for x in a)
        return a
    new_args = tuple(one(a) for a in args)
    new_kwargs = {k: one(v) for k, v in kwargs.items()}
    return new_args, new_kwargs


def leaves(args: tuple, kwargs: dict) -> List[np.ndarray]:
    """The array operands of a call, in ``map_leaves`` order."""
    found: List[np.ndarray] = []
    map_leaves(args, kwargs, lambda a: found.append(a) or a)
    return found


def replace_leaves(args: tuple, kwargs: dict, new: Sequence) -> Tuple[tuple, dict]:
    """``args``/``kwargs`` with the array operands replaced by ``new`` (same order)."""
    it = iter(new)
    return map_leaves(args, kwargs, lambda a: next(it))


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# -- running samples (shared by the generic tests) ---------------------------------------------
class Built(NamedTuple):
    graph: dg.Graph
    inputs: List[dg.Value]       # one placeholder per array operand, in leaf order
    feeds: dict
    outputs: List[dg.Value]


def build(op: OpInfo, sample: Sample) -> Built:
    """``op.fn(*sample.args, **sample.kwargs)`` in a fresh graph, arrays as placeholders."""
    graph = dg.Graph(f"{op.name}_{sample.name}")
    inputs: List[dg.Value] = []
    feeds = {}

    def placeholder(array):
        name = f"in{len(inputs)}"
        feeds[name] = array
        inputs.append(dg.placeholder(name, array.shape, array.dtype.name))
        return inputs[-1]

    with graph:
        args, kwargs = map_leaves(sample.args, sample.kwargs, placeholder)
        out = op.fn(*args, **kwargs)
    return Built(graph, inputs, feeds, list(as_tuple(out)))


def tanh_loss_grads(built: Built, targets: Sequence[int]) -> list:
    """Adds to ``built.graph`` a scalar loss of its float64 outputs (``sum(tanh(v) * v)``)
    and its gradients with respect to the ``targets`` operands; returns the gradients."""
    with built.graph:
        loss = None
        for v in built.outputs:
            if v.dtype == F64:
                term = dg.sum(dg.tanh(v) * v)
                loss = term if loss is None else loss + term
        return list(dg.grad(loss, [built.inputs[i] for i in targets])) + [loss]


def reference(op: OpInfo, sample: Sample, arrays=None) -> List[np.ndarray]:
    """The reference outputs, cast to the dtype duograph must give."""
    args, kwargs = sample.args, sample.kwargs
    if arrays is not None:
        args, kwargs = replace_leaves(args, kwargs, arrays)
    with np.errstate(all="ignore"):
        outs = [np.asarray(o) for o in as_tuple(op.ref(*args, **kwargs))]
    if sample.dtype is not None:
        outs[0] = outs[0].astype(sample.dtype)
    return outs


def assert_matches(got, want, tol, what=""):
    """Same dtype and shape, values within ``tol[dtype]`` (exact for ints and bools)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        rtol, atol = tol[want.dtype.name]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def finite_difference(f: Callable, arrays: Sequence[np.ndarray], i: int,
                      h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``f(arrays)`` with respect to ``arrays[i]``."""
    base = list(arrays)
    x = np.array(arrays[i], dtype=np.float64)
    grad = np.zeros_like(x)
    for k in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.flat[k] += h
        minus.flat[k] -= h
        base[i] = plus
        f_plus = f(base)
        base[i] = minus
        f_minus = f(base)
        grad.flat[k] = (f_plus - f_minus) / (2 * h)
    return grad


def grad_targets(op: OpInfo, sample: Sample, at_kinks: bool = False) -> List[int]:
    """Indices of the float64 leaves whose gradient is checked (none: no gradient test);
    ``at_kinks`` keeps the samples finite differences cannot check (``Sample.fd``)."""
    if not op.differentiable or not (sample.fd or at_kinks) or op.ref is None:
        return []
    outs = reference(op, sample)
    if any(o.dtype.kind == "f" and o.dtype != np.float64 for o in outs) or not any(
            o.dtype.kind == "f" for o in outs):
        return []
    return [i for i, a in enumerate(leaves(sample.args, sample.kwargs))
            if a.dtype == np.float64 and (op.grad_args is None or i in op.grad_args)]


# -- input makers (one seeded generator: the table is the same on every run) -------------------
_rng = np.random.default_rng(20240601)


def rand(*shape, dtype=F64, low=-1.0, high=1.0, rng=None) -> np.ndarray:
    rng = rng or _rng
    return np.asarray(rng.uniform(low, high, size=shape)).astype(dtype)


def pos(*shape, dtype=F64, low=0.5, high=2.0, rng=None) -> np.ndarray:
    return rand(*shape, dtype=dtype, low=low, high=high, rng=rng)


def away(*shape, dtype=F64, margin=0.2, rng=None) -> np.ndarray:
    """Values in +-[margin, 1]: away from 0 (the kink of abs, relu, sign)."""
    rng = rng or _rng
    mag = rng.uniform(margin, 1.0, size=shape)
    sgn = np.where(rng.uniform(size=shape) < 0.5, -1.0, 1.0)
    return np.asarray(mag * sgn).astype(dtype)


def distinct(*shape, dtype=F64, gap=0.05, rng=None) -> np.ndarray:
    """Values at least ``gap`` apart from each other (no max/min ties), in random order."""
    rng = rng or _rng
    n = int(np.prod(shape, dtype=np.int64))
    vals = (np.arange(n) - n / 2) * gap * 2 + rng.uniform(0, gap / 2, size=n)
    return rng.permutation(vals).reshape(shape).astype(dtype)


def ints(*shape, low=-5, high=6, dtype=I64) -> np.ndarray:
    return np.asarray(_rng.integers(low, high, size=shape)).astype(dtype)


def bools(*shape) -> np.ndarray:
    return np.asarray(_rng.uniform(size=shape) < 0.5)


def idx(values, dtype=I64) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


def seed(value: int = 7) -> np.ndarray:
    return np.asarray(value, dtype=I64)


def zero_d(value, dtype=F64) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


# -- elementwise -------------------------------------------------------------------------------
def _unary_float_samples(make=rand):
    """float64, 0-d, float32, and integers (which give float32)."""
    return [Sample("f64", (make(2, 3),)), Sample("f64_0d", (make(),)),
            Sample("f32", (make(4, dtype=F32),)),
            Sample("i64_to_f32", (ints(2, 2, low=1, high=4),), dtype=F32)]


def _math_samples(lo, hi, ilo, ihi):
    """float64 (and 0-d), float32 in [lo, hi]; integers in [ilo, ihi) give float32."""
    def make(*shape, dtype=F64):
        return rand(*shape, low=lo, high=hi, dtype=dtype)
    return [Sample("f64", (make(2, 3),)), Sample("f64_0d", (make(),)),
            Sample("f32", (make(4, dtype=F32),)),
            Sample("i64_to_f32", (ints(2, 2, low=ilo, high=ihi),), dtype=F32)]


def _wide(*shape, **kw):
    return rand(*shape, low=-3.0, high=3.0, **kw)


def _numeric_unary_samples(make=away):
    """float64, 0-d, float32, int32 and int64 (which keep their dtype)."""
    return [Sample("f64", (make(2, 3),)), Sample("f64_0d", (make(),)),
            Sample("f32", (make(4, dtype=F32),)), Sample("i32", (ints(2, 3, dtype=I32),)),
            Sample("i64", (ints(3,),))]


def _at_zero():
    """A sample on the kink at 0: only the PyTorch oracle checks its gradient convention."""
    return Sample("at_zero", (np.array([-1.0, 0.0, 0.5]),), fd=False)


def _bool_error():
    return [ErrorCase("bool", (bools(2, 2),), {}, dg.DTypeError, "found bool")]


def _gelu_ref(x, approximate="none"):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + special.erf(x / math.sqrt(2.0)))


def _softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.logaddexp(0, x * beta) / beta).astype(x.dtype)


def _clamp_ref(x, min=None, max=None):
    if min is None:
        return np.minimum(x, max)
    if max is None:
        return np.maximum(x, min)
    return np.clip(x, min, max)


def _pow_ref(x, exponent):
    if isinstance(exponent, float) and np.asarray(x).dtype.kind in "iu":
        return np.power(x.astype(F32), exponent)
    return np.power(x, exponent)


def _elementwise_unary() -> List[OpInfo]:
    ops = [
        OpInfo("neg", dg.neg, _numeric_unary_samples(rand), np.negative, differentiable=True,
               errors=_bool_error()),
        OpInfo("abs", dg.abs, _numeric_unary_samples(away) + [_at_zero()], np.abs,
               differentiable=True, errors=_bool_error()),
        OpInfo("exp", dg.exp, _unary_float_samples(), np.exp, differentiable=True),
        OpInfo("log", dg.log, _unary_float_samples(pos), np.log, differentiable=True),
        OpInfo("sqrt", dg.sqrt, _unary_float_samples(pos), np.sqrt, differentiable=True),
        OpInfo("rsqrt", dg.rsqrt, _unary_float_samples(pos), lambda x: 1 / np.sqrt(x),
               differentiable=True),
        OpInfo("square", dg.square, _numeric_unary_samples(rand), np.square,
               differentiable=True, errors=_bool_error()),
        OpInfo("reciprocal", dg.reciprocal, _unary_float_samples(away),
               lambda x: np.reciprocal(x.astype(F32) if x.dtype.kind == "i" else x),
               differentiable=True),
        OpInfo("sin", dg.sin, _unary_float_samples(_wide), np.sin, differentiable=True),
        OpInfo("cos", dg.cos, _unary_float_samples(_wide), np.cos, differentiable=True),
        OpInfo("tanh", dg.tanh, _unary_float_samples(), np.tanh, differentiable=True),
        OpInfo("sigmoid", dg.sigmoid, _unary_float_samples() + [
            Sample("f64_extreme", (np.array([-800.0, -30.0, 30.0, 800.0]),)),
            Sample("f32_tails", (np.array([-88.0, -40.0, -20.0, -15.0, -10.0, 0.0, 10.0, 20.0,
                                           40.0], F32),))],
            special.expit, differentiable=True),
        OpInfo("logsigmoid", dg.logsigmoid, _unary_float_samples(_wide) + [
            Sample("f64_extreme", (np.array([-800.0, -30.0, 0.0, 30.0, 800.0]),)),
            Sample("f32_tails", (np.array([-100.0, -20.0, -1e-3, 0.0, 15.0, 20.0, 90.0],
                                          F32),))],
            lambda x: -np.logaddexp(0, -x), differentiable=True),
        OpInfo("relu", dg.relu, _numeric_unary_samples(away) + [_at_zero()],
               lambda x: np.maximum(x, 0),
               differentiable=True, errors=_bool_error()),
        OpInfo("leaky_relu", dg.leaky_relu, [
            Sample("f64", (away(2, 3),)),
            Sample("f64_slope", (away(3, 2),), {"negative_slope": 0.2}),
            Sample("f32_0d", (away(dtype=F32),), {"negative_slope": 0.1}), _at_zero()],
            lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope),
            differentiable=True),
        OpInfo("gelu", dg.gelu, [
            Sample("f64", (rand(2, 3, low=-3, high=3),)),
            Sample("f64_0d", (zero_d(0.7),)),
            Sample("f32", (rand(5, dtype=F32, low=-3, high=3),))],
            _gelu_ref, differentiable=True, errors=[
                ErrorCase("approximate", (rand(2),), {"approximate": "erf"}, ValueError,
                          "approximate must be")]),
        OpInfo("gelu_tanh", dg.gelu, [
            Sample("f64", (rand(2, 3, low=-3, high=3),), {"approximate": "tanh"}),
            Sample("f32", (rand(5, dtype=F32, low=-3, high=3),), {"approximate": "tanh"})],
            _gelu_ref, differentiable=True),
        OpInfo("softplus", dg.softplus, [
            Sample("f64", (rand(2, 3, low=-3, high=3),)),
            Sample("f64_beta", (rand(3, low=-3, high=3),), {"beta": 2.0}),
            Sample("f64_linear", (np.array([-30.0, 25.0, 30.0]),), {"threshold": 20.0}),
            Sample("f32", (rand(4, dtype=F32, low=-3, high=3),))],
            _softplus_ref, differentiable=True),
        OpInfo("erf", dg.erf, _unary_float_samples(), special.erf, differentiable=True),
    ] + [
        OpInfo(name, getattr(dg, name), _math_samples(lo, hi, ilo, ihi), ref,
               differentiable=True)
        for name, ref, lo, hi, ilo, ihi in (
            ("tan", np.tan, -1.2, 1.2, -1, 2), ("asin", np.arcsin, -0.9, 0.9, 0, 1),
            ("acos", np.arccos, -0.9, 0.9, 0, 1), ("atan", np.arctan, -3.0, 3.0, -3, 4),
            ("sinh", np.sinh, -2.0, 2.0, -2, 3), ("cosh", np.cosh, -2.0, 2.0, -2, 3),
            ("asinh", np.arcsinh, -3.0, 3.0, -3, 4), ("acosh", np.arccosh, 1.2, 3.0, 1, 4),
            ("atanh", np.arctanh, -0.9, 0.9, 0, 1), ("log1p", np.log1p, -0.5, 2.0, 0, 4),
            ("expm1", np.expm1, -2.0, 2.0, -2, 3), ("log2", np.log2, 0.5, 4.0, 1, 9),
            ("log10", np.log10, 0.5, 4.0, 1, 9), ("exp2", np.exp2, -2.0, 2.0, -2, 3))
    ] + [
        OpInfo(name, getattr(dg, name), [
            Sample("f64", (np.array([[-2.7, -0.3, 0.4], [1.6, 2.2, -1.5]]),)),
            Sample("f32", (np.array([-2.5, 0.49, 3.7], np.float32),)),
            Sample("f64_0d", (zero_d(-1.25),)), Sample("i64", (ints(2, 3),)),
            Sample("i32", (ints(3, dtype=I32),))], ref, differentiable=True,
            errors=_bool_error())
        for name, ref in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc))
    ] + [
        OpInfo("frac", dg.frac, [
            Sample("f64", (np.array([[-2.7, -0.3, 0.4], [1.6, 2.2, -1.5]]),)),
            Sample("f32", (np.array([-2.5, 0.49, 3.7], np.float32),))],
            lambda x: x - np.trunc(x), differentiable=True, errors=[
                ErrorCase("int", (ints(2),), {}, dg.DTypeError, "frac: expected a tensor")]),
    ] + [
        OpInfo(name, getattr(dg, name), [
            Sample("f64", (np.array([0.0, np.nan, np.inf, -np.inf, 1.5]),)),
            Sample("f32", (np.array([[np.nan, 2.0], [-np.inf, 0.0]], np.float32),)),
            Sample("i64", (ints(3),))], ref)
        for name, ref in (("isnan", np.isnan), ("isinf", np.isinf),
                          ("isfinite", np.isfinite))
    ] + [
        OpInfo("sign", dg.sign, [
            Sample("f64", (np.array([-1.5, 0.0, 2.0, -0.0]),)),
            Sample("i64", (ints(2, 3),)), Sample("f32_0d", (zero_d(-2.0, F32),))],
            np.sign, errors=_bool_error()),
        OpInfo("clamp", dg.clamp, [
            Sample("f64_both", (np.array([[-2.0, -0.3, 0.1], [0.45, 0.8, 3.0]]),),
                   {"min": -0.5, "max": 0.5}),
            Sample("f64_min", (away(2, 3),), {"min": 0.1}),
            Sample("f64_max", (away(4,),), {"max": -0.1}),
            Sample("i64", (ints(2, 3),), {"min": -2, "max": 3}),
            Sample("i64_float_bounds", (ints(4),), {"min": 0.5, "max": 2.5}, dtype=F32),
            Sample("f32_0d", (zero_d(2.5, F32),), {"min": 0.0, "max": 1.0}),
            Sample("at_bounds", (np.array([-0.5, 0.0, 0.5]),), {"min": -0.5, "max": 0.5},
                   fd=False)],
            _clamp_ref, differentiable=True, errors=[
                ErrorCase("bool", (bools(2),), {"min": 0}, dg.DTypeError, "found bool"),
                ErrorCase("no_bounds", (rand(2),), {}, ValueError, "at least one of"),
                ErrorCase("tensor_bound", (rand(2),), {"min": rand(2)}, TypeError,
                          "must be a Python number")]),
        OpInfo("pow_scalar", dg.pow, [
            Sample("square", (rand(2, 3),), {"exponent": 2}),
            Sample("cube", (rand(3,),), {"exponent": 3}),
            Sample("sqrt", (pos(2, 2),), {"exponent": 0.5}),
            Sample("inverse", (away(3,),), {"exponent": -1}),
            Sample("zero", (rand(3,),), {"exponent": 0}),
            Sample("one", (rand(3,),), {"exponent": 1}),
            Sample("f32", (pos(3, dtype=F32),), {"exponent": 1.5}),
            Sample("i64", (ints(2, 3),), {"exponent": 2}),
            Sample("bool", (bools(2, 2),), {"exponent": 2}, dtype=I64),
            Sample("i64_float", (ints(3, low=1, high=4),), {"exponent": 0.5}, dtype=F32),
            Sample("i64_neg_float", (ints(3, low=1, high=4),), {"exponent": -2.0}, dtype=F32)],
            _pow_ref, differentiable=True, errors=[
                ErrorCase("i64_neg", (ints(3, low=1, high=4),), {"exponent": -2},
                          RuntimeError, "integers to negative integer powers"),
                ErrorCase("bool_neg", (bools(3),), {"exponent": -1}, dg.DTypeError,
                          "negative integer powers")]),
    ]
    return ops


def _binary_samples(make=rand, int_ok=True, scalar=2.5):
    out = [
        Sample("f64", (make(2, 3), make(2, 3))),
        Sample("f64_bcast", (make(2, 1, 3), make(4, 3))),
        Sample("f64_0d", (make(), make(3,))),
        Sample("f64_empty", (make(0, 3), make(3,))),
        Sample("f64_scalar_right", (make(2, 2), scalar)),
        Sample("f64_scalar_left", (scalar, make(3,))),
        Sample("f32", (make(3, dtype=F32), make(3, dtype=F32))),
        Sample("f32_scalar", (make(3, dtype=F32), scalar)),
        Sample("i32_f32", (ints(2, 2, low=1, high=4, dtype=I32), make(2, 2, dtype=F32)),
               dtype=F32),
        Sample("f16_f32", (make(3, dtype=F16), make(3, dtype=F32))),
    ]
    if int_ok:
        out += [Sample("i64", (ints(2, 3, low=1, high=5), ints(3, low=1, high=5))),
                Sample("u8_i32", (ints(3, low=1, high=5, dtype=U8), ints(3, low=1, high=5,
                                                                          dtype=I32))),
                Sample("i32_i64", (ints(3, low=1, high=5, dtype=I32), ints(3, low=1,
                                                                           high=5)))]
    return out


def _bcast_error():
    return [ErrorCase("bcast", (rand(2, 3), rand(4)), {}, dg.ShapeError, "cannot be broadcast")]


def _binary(name, fn, ref, make=rand, differentiable=True, samples=None, errors=(),
            **kw) -> OpInfo:
    return OpInfo(name, fn, samples if samples is not None else _binary_samples(make), ref,
                  differentiable=differentiable, errors=_bcast_error() + [
                      ErrorCase("str_operand", (make(2), "a"), {}, TypeError,
                                "expected a Value, tensor, array or number")] + list(errors),
                  binary=True,
                  make_input=lambda rng, shape: make(*shape, rng=rng), **kw)


def _tie_samples():
    a = distinct(2, 3)
    b = distinct(2, 3)
    b[0, 1] = a[0, 1]
    b[1, 2] = a[1, 2]
    return _binary_samples(distinct) + [Sample("f64_ties", (a, b), fd=False)]


def _div_samples():
    s = _binary_samples(away)
    s.append(Sample("i64_i64", (ints(2, 3), ints(3, low=1, high=4)), dtype=F32))
    return [x for x in s if x.name not in ("i64", "i32_i64", "u8_i32")] + [
        Sample("i64_scalar", (ints(3,), 2), dtype=F32)]


def _mod_samples():
    """Dividends of both signs, divisors away from 0 (and from integer quotients, so finite
    differences of floor/trunc steps stay flat)."""
    return [
        Sample("f64", (np.array([[5.3, -5.3, 2.2], [-7.9, 0.4, -0.4]]),
                       np.array([[2.1, 2.1, -1.3], [-3.0, 0.3, 0.3]]))),
        Sample("f32_bcast", (np.array([[4.7], [-4.7]], np.float32),
                             np.array([1.5, -1.9], np.float32))),
        Sample("i64", (np.array([7, -7, 7, -7, 0], np.int64),
                       np.array([3, 3, -3, -3, 5], np.int64))),
        Sample("i32_scalar", (np.array([9, -9, 4], np.int32), 4)),
    ]


def _pow_samples():
    return [
        Sample("f64", (pos(2, 3), rand(2, 3, low=-2, high=2))),
        Sample("f64_bcast", (pos(2, 1, 3), rand(4, 3))),
        Sample("f64_0d_base", (pos(), rand(3,))),
        Sample("scalar_base", (2.0, rand(2, 2))),
        Sample("f32", (pos(3, dtype=F32), rand(3, dtype=F32))),
        Sample("i64", (ints(2, 3, low=0, high=4), ints(3, low=0, high=3))),
    ]


def _compare_samples():
    a = rand(2, 3)
    b = a.copy()
    b[0, 1] += 0.5
    b[1, 2] -= 0.5
    return [
        Sample("f64_ties", (a, b)),
        Sample("f64_bcast", (rand(2, 1, 3), rand(4, 3))),
        Sample("f64_scalar", (np.array([-1.0, 0.0, 0.5, 1.0]), 0.5)),
        Sample("i64_bcast", (ints(2, 3, low=0, high=3), ints(3, low=0, high=3))),
        Sample("i64_f32", (ints(4, low=0, high=3), np.array([0.0, 1.0, 1.5, 2.0], F32))),
        Sample("bool", (bools(3,), bools(3,))),
    ]


def _logic_samples():
    return [
        Sample("bool", (bools(2, 3), bools(2, 3))),
        Sample("bool_bcast", (bools(2, 1), bools(3,))),
        Sample("f64_truthy", (np.array([0.0, 1.5, 0.0, -2.0]), np.array([0.0, 0.0, 3.0, 1.0]))),
        Sample("scalar", (bools(3,), True)),
    ]


def _where_samples():
    return [
        Sample("f64", (bools(2, 3), rand(2, 3), rand(2, 3))),
        Sample("f64_bcast", (bools(2, 1), rand(3,), rand(2, 3))),
        Sample("scalar_branch", (bools(2, 2), rand(2, 2), 0.0)),
        Sample("f32_f64", (bools(3,), rand(3, dtype=F32), rand(3))),
        Sample("i64", (bools(3,), ints(3,), ints(3,))),
    ]


def _bitwise_samples():
    return [
        Sample("i32_scalar", (ints(2, 3, low=-9000, high=9000, dtype=I32), 0x1337)),
        Sample("i64_bcast", (ints(2, 1, low=-50, high=50), ints(3, low=-50, high=50))),
        Sample("u8_i32", (ints(3, low=0, high=255, dtype=U8), ints(3, low=-99, high=99,
                                                                     dtype=I32))),
        Sample("i32_i64", (ints(3, low=-7, high=7, dtype=I32), ints(3, low=-7, high=7))),
        Sample("bool", (bools(2, 3), bools(2, 3))),
        Sample("bool_int_scalar", (bools(3,), 1), dtype=I64),
        Sample("bool_i32", (bools(3,), ints(3, dtype=I32))),
        Sample("i64_0d", (ints(low=-9, high=9), ints(2, low=-9, high=9))),
    ]


def _bitwise_errors():
    return [
        ErrorCase("bcast", (ints(2, 3), ints(4)), {}, dg.ShapeError, "cannot be broadcast"),
        ErrorCase("float", (rand(2), ints(2)), {}, dg.DTypeError, "unsupported dtype float64"),
        ErrorCase("float_scalar", (ints(2), 1.5), {}, dg.DTypeError,
                  "unsupported dtype float32")]


def _bitwise(name):
    return OpInfo(name, getattr(dg, name), _bitwise_samples(), getattr(np, name),
                  errors=_bitwise_errors(), binary=True,
                  make_input=lambda rng, shape: rng.integers(-99, 99, size=shape))


def _elementwise_binary() -> List[OpInfo]:
    return [
        _binary("add", dg.add, np.add),
        _binary("sub", dg.sub, np.subtract, errors=[   # numpy and torch refuse it too
            ErrorCase("bool_bool", (bools(2), bools(2)), {}, dg.DTypeError,
                      "found bool and bool")]),
        _binary("mul", dg.mul, np.multiply),
        _binary("div", dg.div, lambda a, b: np.true_divide(a, b), make=away,
                samples=_div_samples()),
    ] + [
        OpInfo(name, getattr(dg, name), _mod_samples(), ref, binary=True,
               differentiable=name != "floor_divide",
               make_input=lambda rng, shape: np.asarray(rng.uniform(0.5, 3.0, size=shape)))
        for name, ref in (("remainder", np.remainder), ("fmod", np.fmod),
                          ("floor_divide", np.floor_divide))
    ] + [
        OpInfo("atan2", dg.atan2, [
            Sample("f64", (rand(2, 3), away(2, 3))), Sample("f64_bcast", (rand(2, 1), away(3))),
            Sample("f32", (rand(4, dtype=F32), away(4, dtype=F32)))], np.arctan2,
            differentiable=True, binary=True,
            make_input=lambda rng, shape: np.asarray(rng.uniform(0.5, 2.0, size=shape))),
        OpInfo("hypot", dg.hypot, [
            Sample("f64", (away(2, 3), rand(2, 3))), Sample("f64_bcast", (away(2, 1), rand(3))),
            Sample("f32", (away(4, dtype=F32), rand(4, dtype=F32)))], np.hypot,
            differentiable=True, binary=True,
            make_input=lambda rng, shape: np.asarray(rng.uniform(0.5, 2.0, size=shape))),
    ] + [
        _binary("maximum", dg.maximum, np.maximum, make=distinct, samples=_tie_samples()),
        _binary("minimum", dg.minimum, np.minimum, make=distinct, samples=_tie_samples()),
        OpInfo("pow", dg.pow, _pow_samples(), _pow_ref, differentiable=True,
               errors=_bcast_error(), binary=True,
               make_input=lambda rng, shape: np.asarray(rng.uniform(0.5, 2.0, size=shape))),
    ] + [
        _binary(name, getattr(dg, name), getattr(np, np_name), differentiable=False,
                samples=_compare_samples())
        for name, np_name in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"),
                              ("le", "less_equal"), ("gt", "greater"),
                              ("ge", "greater_equal"))
    ] + [
        OpInfo("logical_and", dg.logical_and, _logic_samples(), np.logical_and,
               errors=_bcast_error(), binary=True,
               make_input=lambda rng, shape: np.asarray(rng.uniform(size=shape) < 0.5)),
        OpInfo("logical_or", dg.logical_or, _logic_samples(), np.logical_or,
               errors=_bcast_error(), binary=True,
               make_input=lambda rng, shape: np.asarray(rng.uniform(size=shape) < 0.5)),
    ] + [
        OpInfo("logical_xor", dg.logical_xor, _logic_samples(), np.logical_xor,
               errors=_bcast_error(), binary=True,
               make_input=lambda rng, shape: np.asarray(rng.uniform(size=shape) < 0.5)),
        OpInfo("logical_not", dg.logical_not, [
            Sample("bool", (bools(2, 3),)),
            Sample("f64", (np.array([0.0, 1.0, -2.0]),)),
            Sample("bool_0d", (np.asarray(True),))], np.logical_not),
        OpInfo("where", dg.where, _where_samples(), np.where, differentiable=True,
               grad_args=(1, 2), errors=[
            ErrorCase("float_cond", (rand(2), rand(2), rand(2)), {}, dg.DTypeError,
                      "bool condition"),
            ErrorCase("bcast", (bools(2, 3), rand(4), rand(2, 3)), {}, dg.ShapeError,
                      "cannot be broadcast")]),
    ] + [_bitwise(name) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")] + [
        OpInfo("bitwise_not", dg.bitwise_not, [
            Sample("i32", (ints(2, 3, low=-9000, high=9000, dtype=I32),)),
            Sample("i64_0d", (ints(low=-9, high=9),)),
            Sample("u8", (ints(4, low=0, high=255, dtype=U8),)),
            Sample("bool", (bools(2, 3),))], np.invert, errors=[
                ErrorCase("float", (rand(2),), {}, dg.DTypeError, "bitwise_not")]),
    ] + ([
        OpInfo("stop_gradient", F.stop_gradient, [   # differentiable, but its gradient is 0
            Sample("f64", (rand(2, 3),)), Sample("i64_0d", (ints(),))], lambda x: x),
    ] if hasattr(F, "stop_gradient") else []) + [
        OpInfo("cast", dg.cast, [
            Sample("f64_to_f32", (rand(2, 3),), {"dtype": F32}),
            Sample("f64_to_f64", (rand(2, 3),), {"dtype": F64}),
            Sample("f64_to_i64", (rand(2, 3, low=-3, high=3),), {"dtype": I64}),
            Sample("f64_to_bool", (np.array([0.0, 0.5, -1.0]),), {"dtype": B8}),
            Sample("i64_to_f64", (ints(4,),), {"dtype": F64}),
            Sample("bool_to_f32", (bools(3,),), {"dtype": "float"}),
            Sample("f32_to_f16_0d", (zero_d(1.25, F32),), {"dtype": F16})],
            lambda x, dtype: x.astype(dg.dtypes.as_dtype(dtype)), differentiable=True,
            errors=[ErrorCase("float128", (rand(2),), {"dtype": "float128"}, TypeError,
                              "unsupported dtype 'float128'")]),
    ]


# -- reductions --------------------------------------------------------------------------------
def _reduce_ref(np_fn, int_to=None):
    """numpy's ``np_fn(x, axis, keepdims)`` with duograph's argument names."""
    def ref(x, dim=None, keepdim=False):
        out = np.asarray(np_fn(x, axis=None if x.ndim == 0 else dim, keepdims=keepdim))
        return out.astype(int_to) if int_to and x.dtype.kind in "biu" else out
    return ref


def _reduce_samples(make=rand, int_sample=True):
    out = [
        Sample("all", (make(2, 3, 4),)),
        Sample("dim1", (make(2, 3, 4),), {"dim": 1}),
        Sample("empty_rows", (make(0, 3),), {"dim": 1}),
        Sample("dims_0_2", (make(2, 3, 4),), {"dim": (0, 2)}),
        Sample("neg_keepdim", (make(3, 4),), {"dim": -1, "keepdim": True}),
        Sample("all_keepdim", (make(2, 3),), {"keepdim": True}),
        Sample("f64_0d", (make(),)),
        Sample("f32", (make(3, 4, dtype=F32),), {"dim": 0}),
        Sample("f16", (make(2, 3, dtype=F16),), {"dim": 1}),
    ]
    if int_sample:
        out.append(Sample("i32", (ints(2, 3, dtype=I32),), {"dim": 1}))
    return out


def _reduce_errors(float_only=False):
    errs = [ErrorCase("dim_range", (rand(2, 3),), {"dim": 2}, dg.ShapeError, "out of range"),
            ErrorCase("dim_twice", (rand(2, 3),), {"dim": (1, -1)}, dg.ShapeError,
                      "more than once"),
            ErrorCase("float_dim", (rand(2, 3),), {"dim": 1.0}, TypeError,
                      "expected an int or a tuple of ints")]
    if float_only:
        errs.append(ErrorCase("int", (ints(2, 3),), {"dim": 0}, dg.DTypeError,
                              "floating-point"))
    return errs


def _arg_errors():
    """argmax/argmin take one int dim (as torch), never a tuple."""
    return [ErrorCase("dim_range", (rand(2, 3),), {"dim": 2}, dg.ShapeError, "out of range"),
            ErrorCase("tuple_dim", (rand(2, 3),), {"dim": (0, 1)}, TypeError,
                      "expected an int dim")]


def _var_ref(np_fn):
    def ref(x, dim=None, correction=1, keepdim=False):
        axis = None if dim is None or x.ndim == 0 else dim
        return np.asarray(np_fn(x, axis=axis, ddof=correction, keepdims=keepdim))
    return ref


def _var_samples():
    return [
        Sample("all", (rand(2, 3),)),
        Sample("dim1", (rand(2, 3, 4),), {"dim": 1}),
        Sample("dims_keepdim", (rand(2, 3, 4),), {"dim": (0, 2), "keepdim": True}),
        Sample("correction0", (rand(3, 4),), {"dim": -1, "correction": 0}),
        Sample("correction2", (rand(5,),), {"correction": 2}),
        Sample("correction_float", (rand(2, 5),), {"dim": 1, "correction": 1.5}),
        Sample("correction_float_all", (rand(3, 3),), {"correction": 0.25}),
        Sample("f32", (rand(3, 4, dtype=F32),), {"dim": 0}),
        Sample("f16", (rand(2, 3, dtype=F16),), {"dim": 1}),
    ]


def _arg_ref(np_fn):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            r = np.asarray(np_fn(x.reshape(-1)))
            return r.reshape((1,) * x.ndim) if keepdim else r
        return np.asarray(np_fn(x, axis=dim, keepdims=keepdim))
    return ref


def _arg_samples():
    return [
        Sample("all", (distinct(2, 3, 4),)),
        Sample("dim1", (distinct(2, 3, 4),), {"dim": 1}),
        Sample("neg_keepdim", (distinct(3, 4),), {"dim": -1, "keepdim": True}),
        Sample("all_keepdim", (distinct(2, 3),), {"keepdim": True}),
        Sample("i64_ties", (np.array([[1, 3, 3], [2, 2, 0]]),), {"dim": 1}),
        Sample("f32_0d", (zero_d(1.0, F32),)),
    ]


def _lse_ref(x, dim, keepdim=False):
    return special.logsumexp(x, axis=dim, keepdims=keepdim)


def _extreme_samples(make=distinct):
    s = _reduce_samples(make)
    ties = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]])
    return s + [Sample("f64_ties", (ties,), {"dim": 1}, fd=False)]


def _prod_samples():
    zero = rand(2, 3)
    zero[0, 1] = 0.0
    zeros = rand(2, 3)
    zeros[1, 0] = zeros[1, 2] = 0.0
    three = rand(2, 4)
    three[0, :3] = 0.0
    return [
        Sample("all", (rand(2, 3),)),
        Sample("dim1", (rand(2, 3, 4),), {"dim": 1}),
        Sample("neg_keepdim", (rand(3, 4),), {"dim": -1, "keepdim": True}),
        Sample("one_zero", (zero,), {"dim": 1}),
        Sample("two_zeros", (zeros,), {"dim": 1}),
        Sample("three_zeros", (three,), {"dim": 1}),
        Sample("zeros_all_dims", (zeros,)),
        Sample("f64_0d", (rand(),)),
        Sample("i64", (ints(2, 3, low=1, high=4),), {"dim": 0}),
    ]


def _reductions() -> List[OpInfo]:
    def sum_ref(x, dim=None, keepdim=False, dtype=None):
        out = np.sum(x, axis=None if x.ndim == 0 else dim, keepdims=keepdim,
                     dtype=dtype or (I64 if x.dtype.kind in "biu" else None))
        return np.asarray(out)

    return [
        OpInfo("sum", dg.sum, _reduce_samples() + [
            Sample("bool", (bools(2, 3),), {"dim": 0}),
            Sample("u8", (ints(2, 3, low=0, high=200, dtype=U8),)),
            Sample("f32_dtype_f64", (rand(3, dtype=F32),), {"dtype": F64})],
            sum_ref, differentiable=True, errors=_reduce_errors()),
        OpInfo("mean", dg.mean, _reduce_samples(int_sample=False),
               _reduce_ref(np.mean), differentiable=True,
               errors=_reduce_errors(float_only=True)),
        OpInfo("amax", dg.amax, _extreme_samples(), _reduce_ref(np.amax), differentiable=True,
               errors=_reduce_errors()),
        OpInfo("amin", dg.amin, _extreme_samples(), _reduce_ref(np.amin), differentiable=True,
               errors=_reduce_errors()),
        OpInfo("prod", dg.prod, _prod_samples(), _reduce_ref(np.prod, int_to=I64),
               differentiable=True, errors=_reduce_errors()),
        OpInfo("var", dg.var, _var_samples(), _var_ref(np.var), differentiable=True,
               tol=dict(LOOSE_TOL), errors=_reduce_errors(float_only=True)),
        OpInfo("std", dg.std, _var_samples(), _var_ref(np.std), differentiable=True,
               tol=dict(LOOSE_TOL), errors=_reduce_errors(float_only=True)),
        OpInfo("argmax", dg.argmax, _arg_samples(), _arg_ref(np.argmax),
               errors=_arg_errors()),
        OpInfo("argmin", dg.argmin, _arg_samples(), _arg_ref(np.argmin),
               errors=_arg_errors()),
        OpInfo("logsumexp", dg.logsumexp, [
            Sample("dim1", (rand(2, 3, 4),), {"dim": 1}),
            Sample("dims", (rand(2, 3, 4),), {"dim": (0, 2)}),
            Sample("keepdim", (rand(3, 4),), {"dim": -1, "keepdim": True}),
            Sample("large", (np.array([[1000.0, 1001.0], [-1000.0, -1002.0]]),), {"dim": 1}),
            Sample("f32", (rand(3, 4, dtype=F32),), {"dim": 0}),
            Sample("i64", (ints(2, 3),), {"dim": 1}, dtype=F32),
            Sample("empty_dim", (rand(0, 2),), {"dim": 0}, fd=False),   # -inf outputs
            Sample("empty_rows", (rand(0, 2),), {"dim": 1})],
            _lse_ref, differentiable=True, errors=_reduce_errors()),
        OpInfo("max", dg.max, [
            Sample("all", (distinct(2, 3),)),
            Sample("dim", (distinct(2, 3),), {"dim": 1}),
            Sample("dim_keepdim", (distinct(3, 2),), {"dim": 0, "keepdim": True})],
            lambda x, dim=None, keepdim=False: np.amax(x) if dim is None else (
                np.amax(x, dim, keepdims=keepdim), np.argmax(x, dim, keepdims=keepdim)),
            differentiable=True),
        OpInfo("min", dg.min, [
            Sample("all", (distinct(2, 3),)),
            Sample("dim", (distinct(2, 3),), {"dim": -1})],
            lambda x, dim=None, keepdim=False: np.amin(x) if dim is None else (
                np.amin(x, dim, keepdims=keepdim), np.argmin(x, dim, keepdims=keepdim)),
            differentiable=True),
        OpInfo("numel", dg.numel, [
            Sample("all", (rand(2, 3),)),
            Sample("dims", (rand(2, 3, 4),), {"dim": (0, 2), "dtype": I64})],
            lambda x, dim=None, dtype=F32: np.asarray(
                np.prod([x.shape[d] for d in (range(x.ndim) if dim is None else dim)]),
                dtype=dtype)),
    ]


# -- linear algebra ----------------------------------------------------------------------------
def _linalg() -> List[OpInfo]:
    return [
        OpInfo("matmul", dg.matmul, [
            Sample("mm", (rand(2, 3), rand(3, 4))),
            Sample("batched", (rand(2, 2, 3), rand(2, 3, 2))),
            Sample("bcast_batch", (rand(2, 1, 2, 3), rand(3, 3, 2))),
            Sample("mat_batch", (rand(2, 3), rand(2, 3, 2))),
            Sample("vec_vec", (rand(3), rand(3))),
            Sample("vec_mat", (rand(3), rand(3, 4))),
            Sample("mat_vec", (rand(2, 3), rand(3))),
            Sample("batch_vec", (rand(2, 2, 3), rand(3))),
            Sample("vec_batch", (rand(3), rand(2, 3, 2))),
            Sample("empty", (rand(0, 3), rand(3, 2))),
            Sample("empty_inner", (rand(2, 0), rand(0, 3))),
            Sample("f32", (rand(2, 3, dtype=F32), rand(3, 2, dtype=F32))),
            Sample("i64", (ints(2, 3), ints(3, 2))),
            Sample("i32_f32", (ints(2, 3, dtype=I32), rand(3, 2, dtype=F32)), dtype=F32)],
            np.matmul, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("inner", (rand(2, 3), rand(4, 2)), {}, dg.ShapeError,
                          "inner dims do not match"),
                ErrorCase("0d", (rand(), rand(3)), {}, dg.ShapeError, "at least 1 dim"),
                ErrorCase("batch", (rand(2, 2, 3), rand(3, 3, 2)), {}, dg.ShapeError,
                          "cannot be broadcast"),
                ErrorCase("bool", (bools(2, 2), bools(2, 2)), {}, dg.DTypeError, "bool")]),
        OpInfo("mm", dg.mm, [Sample("mm", (rand(2, 3), rand(3, 4)))], np.matmul,
               tol=dict(LOOSE_TOL), differentiable=True, errors=[
                   ErrorCase("3d", (rand(2, 2, 3), rand(3, 2)), {}, dg.ShapeError,
                             "expected 2-D operands")]),
    ]


# -- shape ops ---------------------------------------------------------------------------------
def _size(size: tuple) -> tuple:
    """``f(x, 2, 3)`` and ``f(x, (2, 3))`` both mean the sizes (2, 3)."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size


def _linspace_ref(start, end, steps, dtype=None):
    """Integer dtypes truncate toward zero (as PyTorch; numpy's integer linspace floors)."""
    if dtype in (I32, I64):
        return np.trunc(np.linspace(start, end, steps)).astype(dtype)
    return np.linspace(start, end, steps, dtype=dtype or F32)


def _expand_ref(x, *sizes):
    sizes = _size(sizes)
    lead = len(sizes) - x.ndim
    return np.broadcast_to(x, tuple(x.shape[i - lead] if d == -1 else d
                                    for i, d in enumerate(sizes)))


def _sum_to_ref(x, shape):
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    return np.sum(x, axis=axes, keepdims=True).reshape(shape)


def _squeeze_ref(x, dim=None):
    if dim is None:
        return np.squeeze(x)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % x.ndim for d in dims if x.shape[d] == 1)
    return np.squeeze(x, axis=dims) if dims else x


def _flatten_ref(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:])


def _split_ref(x, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, int):
        bounds = list(range(split_size_or_sections, x.shape[dim], split_size_or_sections))
    else:
        bounds = list(np.cumsum(split_size_or_sections)[:-1])
    return tuple(np.split(x, bounds, axis=dim))


def _chunk_ref(x, chunks, dim=0):
    size = -(-x.shape[dim] // chunks)
    return _split_ref(x, size, dim)


def _gather_ref(x, dim, index):
    dim %= x.ndim
    sl = tuple(slice(0, s) if i != dim else slice(None) for i, s in enumerate(index.shape))
    return np.take_along_axis(x[sl], index, axis=dim)


def _scatter_add_ref(x, dim, index, src):
    out = x.astype(np.result_type(x, src), copy=True)
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    np.add.at(out, tuple(grids), src)
    return out


def _index_add_ref(x, dim, index, src):
    out = x.astype(np.result_type(x, src), copy=True)
    np.add.at(out, (slice(None),) * dim + (index,), src)
    return out


def _pad_ref(x, pad, value=0.0, mode="constant"):
    """Crop the negative amounts, then np.pad the rest (PyTorch's order for every mode)."""
    width = [(0, 0)] * x.ndim
    crop = [slice(None)] * x.ndim
    for k in range(len(pad) // 2):
        lo, hi = pad[2 * k], pad[2 * k + 1]
        width[x.ndim - 1 - k] = (max(lo, 0), max(hi, 0))
        crop[x.ndim - 1 - k] = slice(max(-lo, 0), x.shape[x.ndim - 1 - k] + min(hi, 0))
    x = x[tuple(crop)]
    if mode == "constant":
        return np.pad(x, width, constant_values=value)
    return np.pad(x, width, mode={"reflect": "reflect", "replicate": "edge",
                                  "circular": "wrap"}[mode])


def _getitem_ref(x, index):
    if isinstance(index, tuple):    # lists as arrays (numpy reads a list inside a tuple so)
        index = tuple(np.asarray(i) if isinstance(i, list) else i for i in index)
    return x[index]


def _shape_ops() -> List[OpInfo]:
    x234 = rand(2, 3, 4)
    return [
        OpInfo("reshape", dg.reshape, [
            Sample("merge", (rand(2, 3, 4), 6, 4)),
            Sample("flat", (rand(2, 3), -1)),
            Sample("hole", (rand(2, 3, 4), 4, -1, 2)),
            Sample("tuple_arg", (rand(2, 3), (3, 2))),
            Sample("0d_to_1", (rand(), 1)),
            Sample("1_to_0d", (rand(1), ())),
            Sample("i64", (ints(2, 3), 3, 2))],
            lambda x, *shape: x.reshape(_size(shape)), differentiable=True, errors=[
                ErrorCase("count", (rand(2, 3), 4), {}, dg.ShapeError, "element counts"),
                ErrorCase("two_holes", (rand(2, 3), -1, -1), {}, dg.ShapeError,
                          "only one dim may be -1")]),
        OpInfo("permute", dg.permute, [
            Sample("3d", (rand(2, 3, 4), 2, 0, 1)),
            Sample("neg", (rand(2, 3, 4), -1, 0, 1)),
            Sample("tuple_arg", (rand(2, 3), (1, 0))),
            Sample("b8", (bools(2, 3), 1, 0))],
            lambda x, *dims: np.transpose(x, _size(dims)), differentiable=True, errors=[
                ErrorCase("repeat", (rand(2, 3, 4), 0, 0, 1), {}, dg.ShapeError,
                          "not a permutation"),
                ErrorCase("range", (rand(2, 3), 0, 2), {}, dg.ShapeError, "out of range")]),
        OpInfo("transpose", dg.transpose, [
            Sample("02", (rand(2, 3, 4), 0, 2)),
            Sample("neg", (rand(2, 3, 4), -1, -2)),
            Sample("same", (rand(2, 3), 1, 1))],
            lambda x, a, b: np.swapaxes(x, a, b), differentiable=True, errors=[
                ErrorCase("range", (rand(2, 3), 0, 2), {}, dg.ShapeError, "out of range")]),
        OpInfo("expand", dg.expand, [
            Sample("new_dims", (rand(3, 1), 2, 3, 4)),
            Sample("keep", (rand(3, 1), -1, 4)),
            Sample("from_0d", (rand(), 2, 3)),
            Sample("tuple_arg", (rand(1, 3), (2, 3))),
            Sample("same", (rand(2, 3), 2, 3))],
            _expand_ref, differentiable=True, errors=[
                ErrorCase("not_one", (rand(3, 2), 3, 4), {}, dg.ShapeError, "cannot expand"),
                ErrorCase("fewer", (rand(2, 3), 3), {}, dg.ShapeError, "fewer dims")]),
        OpInfo("broadcast_to", dg.broadcast_to, [
            Sample("bcast", (rand(3,), (2, 3)))],
            np.broadcast_to, differentiable=True),
        OpInfo("sum_to", dg.sum_to, [
            Sample("lead", (rand(2, 3, 4), (3, 4))),
            Sample("ones", (rand(2, 3, 4), (3, 1))),
            Sample("keep", (rand(2, 3), (1, 3))),
            Sample("f32_batch", (rand(300, 5, dtype=F32), (5,))),    # ones @ x (BLAS)
            Sample("empty", (rand(0, 3), (3,)))],
            _sum_to_ref, differentiable=True, errors=[
                ErrorCase("bigger", (rand(3,), (2, 3)), {}, dg.ShapeError, "larger")]),
        OpInfo("squeeze", dg.squeeze, [
            Sample("all", (rand(1, 3, 1),)),
            Sample("dim0", (rand(1, 3, 1),), {"dim": 0}),
            Sample("dim_neg", (rand(1, 3, 1),), {"dim": -1}),
            Sample("dims", (rand(1, 3, 1),), {"dim": (0, 2)}),
            Sample("not_one", (rand(2, 3),), {"dim": 1}),
            Sample("to_0d", (rand(1, 1),))],
            _squeeze_ref, differentiable=True, errors=[
                ErrorCase("range", (rand(1, 3),), {"dim": 2}, dg.ShapeError,
                          "out of range"),
                ErrorCase("float_dim", (rand(1, 3),), {"dim": 0.5}, TypeError,
                          "expected an int dim")]),
        OpInfo("unsqueeze", dg.unsqueeze, [
            Sample("front", (rand(2, 3), 0)),
            Sample("mid", (rand(2, 3), 1)),
            Sample("end", (rand(2, 3), -1)),
            Sample("from_0d", (rand(), 0))],
            lambda x, d: np.expand_dims(x, d), differentiable=True, errors=[
                ErrorCase("range", (rand(2, 3), 4), {}, dg.ShapeError, "out of range")]),
        OpInfo("flatten", dg.flatten, [
            Sample("all", (rand(2, 3, 4),)),
            Sample("from1", (rand(2, 3, 4),), {"start_dim": 1}),
            Sample("mid", (rand(2, 3, 4, 1),), {"start_dim": 1, "end_dim": 2}),
            Sample("one_dim", (rand(2, 3),), {"start_dim": 1, "end_dim": 1}),
            Sample("from_0d", (rand(),))],
            _flatten_ref, differentiable=True, errors=[
                ErrorCase("order", (rand(2, 3, 4),), {"start_dim": 2, "end_dim": 1},
                          dg.ShapeError, "comes after")]),
        OpInfo("cat", dg.cat, [
            Sample("dim0", ([rand(2, 3), rand(4, 3)],)),
            Sample("dim1", ([rand(2, 1), rand(2, 3), rand(2, 2)],), {"dim": 1}),
            Sample("neg", ([rand(2, 2), rand(2, 1)],), {"dim": -1}),
            Sample("one", ([rand(2, 3)],)),
            Sample("with_empty", ([rand(0, 3), rand(2, 3)],)),
            Sample("mixed", ([rand(2, dtype=F32), rand(3)],)),
            Sample("i64", ((ints(2,), ints(3,)),))],
            lambda ts, dim=0: np.concatenate(ts, axis=dim), differentiable=True, errors=[
                ErrorCase("ndim", ([rand(2, 3), rand(3)],), {}, dg.ShapeError,
                          "all tensors need 2 dims"),
                ErrorCase("sizes", ([rand(2, 3), rand(2, 4)],), {}, dg.ShapeError,
                          "sizes must match"),
                ErrorCase("dim", ([rand(2, 3), rand(2, 3)],), {"dim": 2}, dg.ShapeError,
                          "out of range"),
                ErrorCase("empty", ([],), {}, ValueError, "non-empty"),
                ErrorCase("one_tensor", (rand(2, 3),), {}, TypeError,   # not split into rows
                          "expected a sequence of tensors, found one tensor")]),
        OpInfo("stack", dg.stack, [
            Sample("dim0", ([rand(2, 3), rand(2, 3)],)),
            Sample("last", ([rand(2, 3), rand(2, 3), rand(2, 3)],), {"dim": -1}),
            Sample("0d", ([rand(), rand()],)),
            Sample("one", ([rand(3)],), {"dim": 1})],
            lambda ts, dim=0: np.stack(ts, axis=dim), differentiable=True, errors=[
                ErrorCase("shapes", ([rand(2, 3), rand(3, 2)],), {}, dg.ShapeError,
                          "same shape"),
                ErrorCase("dim", ([rand(2), rand(2)],), {"dim": 3}, dg.ShapeError,
                          "out of range"),
                ErrorCase("one_tensor", (rand(2, 3),), {}, TypeError,
                          "expected a sequence of tensors, found one tensor")]),
        OpInfo("split", dg.split, [
            Sample("size", (rand(5, 3), 2)),
            Sample("sections", (rand(2, 3), [1, 2]), {"dim": 1}),
            Sample("neg_dim", (rand(2, 4), 2), {"dim": -1}),
            Sample("whole", (rand(3,), 3))],
            _split_ref, differentiable=True, errors=[
                ErrorCase("sum", (rand(4, 3), [1, 2]), {}, dg.ShapeError, "do not add up"),
                ErrorCase("dim", (rand(4, 3), 2), {"dim": 2}, dg.ShapeError,
                          "out of range"),
                ErrorCase("chunk", (rand(4, 3), 0), {}, ValueError, "must be positive")]),
        OpInfo("chunk", dg.chunk, [
            Sample("even", (rand(4, 3), 2)),
            Sample("uneven", (rand(2, 5), 2), {"dim": 1})],
            _chunk_ref, differentiable=True, errors=[
                ErrorCase("zero", (rand(4, 3), 0), {}, ValueError, "positive int")]),
        OpInfo("getitem", dg.getitem, [
            Sample("int", (x234, 1)),
            Sample("neg_int", (x234, -1)),
            Sample("slice", (x234, (slice(None), slice(1, 3)))),
            Sample("step", (x234, (slice(None, None, 2),))),
            Sample("neg_slice", (x234, (Ellipsis, slice(-3, -1)))),
            Sample("ellipsis_none", (x234, (Ellipsis, None, 1))),
            Sample("none_front", (x234, (None, Ellipsis, slice(None, None, 2)))),
            Sample("mixed", (x234, (1, -2, slice(1, 4, 2)))),
            Sample("all_ints", (x234, (0, 1, 2))),
            Sample("empty", (rand(3,), slice(2, 1))),
            Sample("0d_ellipsis", (rand(), Ellipsis)),
            Sample("0d_none", (rand(), None)),
            Sample("1d", (rand(5,), slice(1, None, 3))),
            Sample("int_tensor", (rand(4, 2), idx([3, 0, 3]))),
            Sample("col_tensor", (x234, (slice(None), idx([2, -1, 2])))),
            Sample("two_tensors", (x234, (idx([[1], [0]]), slice(None), idx([0, 3, 2])))),
            Sample("adjacent", (x234, (Ellipsis, idx([2, 0]), idx([1, 1], I32)))),
            Sample("list", (x234, (slice(None), [0, 2, 2]))),
            Sample("2d_first", (rand(4, 2), idx([[3, 0], [1, 1]])))],
            _getitem_ref, differentiable=True, errors=[
                ErrorCase("too_many", (rand(2, 3), (0, 1, 2)), {}, dg.ShapeError,
                          "too many indices"),
                ErrorCase("bounds", (rand(2, 3), (0, 3)), {}, dg.ShapeError,
                          "out of bounds"),
                ErrorCase("neg_bounds", (rand(2, 3), -3), {}, dg.ShapeError,
                          "out of bounds"),
                ErrorCase("step", (rand(4,), slice(None, None, -1)), {}, dg.ShapeError,
                          "step must be positive"),
                ErrorCase("two_ellipses", (rand(2, 3), (Ellipsis, Ellipsis)), {},
                          dg.ShapeError, "one Ellipsis")]),
        OpInfo("gather", dg.gather, [
            Sample("dim1", (rand(3, 4), 1, idx([[0, 3], [1, 1], [2, 0]]))),
            Sample("dim0", (rand(3, 2), 0, idx([[2, 0], [2, 2], [0, 1], [1, 1]]))),
            Sample("smaller", (rand(3, 4), 1, idx([[3, 0], [1, 1]], I32))),
            Sample("neg_dim", (rand(2, 3), -1, idx([[0], [2]])))],
            _gather_ref, differentiable=True, grad_args=(0,), errors=[
                ErrorCase("float_index", (rand(3, 4), 1, rand(3, 2)), {}, dg.DTypeError,
                          "integer index"),
                ErrorCase("ndim", (rand(3, 4), 1, idx([0, 1])), {}, dg.ShapeError,
                          "as many dims")]),
        OpInfo("scatter_add", dg.scatter_add, [
            Sample("dim0", (rand(3, 4), 0, idx([[0, 1, 2, 0], [0, 0, 1, 2]]), rand(2, 4))),
            Sample("dim1", (rand(2, 3), 1, idx([[2, 2], [0, 1]]), rand(2, 2))),
            Sample("i64", (ints(3,), 0, idx([1, 1]), ints(2,)))],
            _scatter_add_ref, differentiable=True, grad_args=(0, 2), errors=[
                ErrorCase("shape", (rand(3, 4), 0, idx([[0, 1], [1, 1]]), rand(1, 2)), {},
                          dg.ShapeError, "no larger than src"),
                ErrorCase("float_index", (rand(3, 4), 0, rand(2, 2), rand(2, 2)), {},
                          dg.DTypeError, "integer index")]),
        OpInfo("index_select", dg.index_select, [
            Sample("dim0", (rand(4, 3), 0, idx([2, 0, 2]))),
            Sample("dim1", (rand(2, 3), 1, idx([1], I32))),
            Sample("neg_dim", (rand(2, 3, 2), -2, idx([0, 2, 1, 0])))],
            lambda x, dim, index: np.take(x, index, axis=dim), differentiable=True,
            grad_args=(0,), errors=[
                ErrorCase("2d_index", (rand(4, 3), 0, idx([[0]])), {}, dg.ShapeError,
                          "1-D index"),
                ErrorCase("float_index", (rand(4, 3), 0, rand(2)), {}, dg.DTypeError,
                          "integer index")]),
        OpInfo("index_add", dg.index_add, [
            Sample("dim0", (rand(4, 3), 0, idx([0, 2, 0]), rand(3, 3))),
            Sample("dim1", (rand(2, 3), 1, idx([2, 2]), rand(2, 2))),
            Sample("f32_f64", (rand(3, dtype=F32), 0, idx([1]), rand(1)))],
            _index_add_ref, differentiable=True, grad_args=(0, 2), errors=[
                ErrorCase("src", (rand(4, 3), 0, idx([0, 1]), rand(3, 3)), {}, dg.ShapeError,
                          "expected src of shape")]),
        OpInfo("pad", dg.pad, [
            Sample("last", (rand(2, 3), (1, 2))),
            Sample("two", (rand(2, 3), (1, 0, 0, 2)), {"value": 1.5}),
            Sample("3d", (rand(2, 2, 2), [0, 1])),
            Sample("i64", (ints(2,), (2, 1)), {"value": 7}),
            Sample("crop", (rand(2, 5), (-1, 2, 1, -1)), {"value": 0.5}),
            Sample("reflect", (rand(2, 3, 4), (2, 3)), {"mode": "reflect"}),
            Sample("reflect_crop", (rand(1, 2, 4, 5), (2, -1, -1, 2)), {"mode": "reflect"}),
            Sample("replicate", (rand(1, 2, 2, 3, 3), (1, 2, 0, 1, 2, 0)),
                   {"mode": "replicate"}),
            Sample("circular", (rand(2, 2, 3, 4), (3, 1, -1, 2)), {"mode": "circular"}),
            Sample("circular_crop", (rand(2, 6), (-2, 3)), {"mode": "circular"})],
            _pad_ref, differentiable=True, errors=[
                ErrorCase("odd", (rand(2, 3), (1, 2, 3)), {}, dg.ShapeError, "pairs"),
                ErrorCase("negative", (rand(2, 3), (-2, -2)), {}, dg.ShapeError,
                          "negative size"),
                ErrorCase("float", (rand(2, 3), (1.0, 1)), {}, TypeError,
                          "expected a sequence of ints"),
                ErrorCase("mode", (rand(2, 3), (1, 1)), {"mode": "wrap"}, ValueError,
                          "expected mode to be one of"),
                ErrorCase("rank", (rand(3), (1, 1)), {"mode": "reflect"},
                          NotImplementedError, "last 1, 2 or 3 dims"),
                ErrorCase("reflect_size", (rand(1, 3), (3, 0)), {"mode": "reflect"},
                          dg.ShapeError, "less than the size")]),
    ]


# -- nn ----------------------------------------------------------------------------------------
def _softmax_ref(x, dim):
    x = x.astype(F32) if x.dtype.kind != "f" else x
    return x.copy() if x.size == 0 else special.softmax(x, axis=dim if x.ndim else None)


def _log_softmax_ref(x, dim):
    x = x.astype(F32) if x.dtype.kind != "f" else x
    return x.copy() if x.size == 0 else special.log_softmax(x, axis=dim if x.ndim else None)


def _softmax_samples():
    return [
        Sample("last", (rand(2, 3),), {"dim": -1}),
        Sample("first", (rand(2, 3),), {"dim": 0}),
        Sample("mid", (rand(2, 3, 2),), {"dim": 1}),
        Sample("large", (np.array([[1000.0, 999.0, -1000.0]]),), {"dim": 1}),
        Sample("f64_0d", (rand(),), {"dim": 0}),
        Sample("f32", (rand(3, 4, dtype=F32),), {"dim": 1}),
        Sample("i64", (ints(2, 3),), {"dim": 1}, dtype=F32),
        Sample("empty", (rand(0, 3),), {"dim": 0}),
    ]


def _sce_ref(x, t, ignore_index=-100, reduction="mean"):
    valid = t != ignore_index
    logp = special.log_softmax(x, axis=1)
    rows = np.arange(len(t))
    loss = np.where(valid, -logp[rows, np.where(valid, t, 0)], 0.0).astype(x.dtype)
    if reduction == "none":
        return loss
    total = loss.sum(dtype=x.dtype)
    return total if reduction == "sum" else (total / valid.sum()).astype(x.dtype)


def _sce_samples():
    return [
        Sample("mean", (rand(4, 3), idx([0, 2, 1, 2]))),
        Sample("sum", (rand(3, 5), idx([4, 0, 0])), {"reduction": "sum"}),
        Sample("none", (rand(3, 4), idx([1, 3, 0])), {"reduction": "none"}),
        Sample("ignored", (rand(4, 3), idx([0, -100, 2, -100]))),
        Sample("ignore_class", (rand(3, 4), idx([1, 2, 2], I32)),
               {"ignore_index": 2, "reduction": "none"}),
        Sample("large", (np.array([[1000.0, 999.0, -1000.0], [0.0, -50.0, 3.0]]),
                         idx([2, 0])), {"reduction": "sum"}),
        Sample("f32", (rand(5, 4, dtype=F32), idx([3, 1, 0, 0, 2]))),
    ]


def _bn_ref(x, w, b, eps=1e-5):
    dims = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=dims), x.var(axis=dims)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * w.reshape(shape) \
        + b.reshape(shape)
    return y.astype(x.dtype), mean.astype(x.dtype), var.astype(x.dtype)


def _nn() -> List[OpInfo]:
    return [
        OpInfo("batch_norm_train", dg.batch_norm_train, [
            Sample("nchw", (rand(4, 3, 2, 5), rand(3, low=0.5, high=1.5), rand(3))),
            Sample("nc", (rand(6, 4), rand(4, low=0.5, high=1.5), rand(4)), {"eps": 1e-3}),
            Sample("ncl", (rand(3, 2, 7), rand(2, low=0.5, high=1.5), rand(2))),
            Sample("f32", (rand(8, 3, 4, 4, dtype=F32), rand(3, dtype=F32),
                           rand(3, dtype=F32)))],
            _bn_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("1d", (rand(4), rand(4), rand(4)), {}, dg.ShapeError,
                          "at least 2 dims"),
                ErrorCase("int", (ints(4, 3), rand(3), rand(3)), {}, dg.DTypeError,
                          "floating-point input"),
                ErrorCase("weight", (rand(4, 3), rand(2), rand(3)), {}, dg.ShapeError,
                          "expected a weight of shape")]),
        OpInfo("softmax_cross_entropy", dg.softmax_cross_entropy, _sce_samples(), _sce_ref,
               differentiable=True, grad_args=(0,), errors=[
                   ErrorCase("1d", (rand(3), idx([0, 1, 2])), {}, dg.ShapeError, "(N, C)"),
                   ErrorCase("float_target", (rand(3, 2), rand(3)), {}, dg.DTypeError,
                             "integer class indices"),
                   ErrorCase("rows", (rand(3, 2), idx([0, 1])), {}, dg.ShapeError,
                             "expected target of shape"),
                   ErrorCase("reduction", (rand(3, 2), idx([0, 1, 1])),
                             {"reduction": "max"}, ValueError, "reduction must be one of"),
                   ErrorCase("int_logits", (ints(3, 2), idx([0, 1, 1])), {}, dg.DTypeError,
                             "floating-point logits")]),
        OpInfo("softmax", dg.softmax, _softmax_samples(), _softmax_ref, differentiable=True,
               errors=[ErrorCase("dim", (rand(2, 3), 2), {}, dg.ShapeError, "out of range")]),
        OpInfo("log_softmax", dg.log_softmax, _softmax_samples(), _log_softmax_ref,
               differentiable=True,
               errors=[ErrorCase("dim", (rand(2, 3), -3), {}, dg.ShapeError, "out of range")]),
        OpInfo("one_hot", dg.one_hot, [
            Sample("i64", (idx([[0, 3, 1], [2, 2, 0]]),), {"num_classes": 4}),
            Sample("i32_0d", (idx(1, I32),), {"num_classes": 3})],
            lambda x, num_classes: (x[..., None] == np.arange(num_classes)).astype(I64),
            errors=[
                ErrorCase("float", (rand(3),), {"num_classes": 3}, dg.DTypeError,
                          "integer class indices"),
                ErrorCase("no_classes", (idx([0, 1]),), {}, dg.ShapeError,
                          "num_classes must be given")]),
    ]


# -- creation ----------------------------------------------------------------------------------
def _arange_ref(start, end=None, step=1, dtype=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = F32 if any(isinstance(v, float) for v in (start, end, step)) else I64
    return np.arange(start, end, step, dtype=dtype)


def _random_checks(low, high, integer=False):
    def check(out, *args, **kwargs):
        lo = kwargs.get("low", low)
        hi = kwargs.get("high", high)
        assert out.min() >= lo and out.max() < hi, (out.min(), out.max())
        if integer:
            assert np.all(out == np.round(out))
    return check


def _creation() -> List[OpInfo]:
    bad_size = ErrorCase("negative", (2, -1), {}, dg.ShapeError, "negative dimension")
    return [
        OpInfo("constant", dg.constant, [
            Sample("list", ([[1.0, 2.0], [3.0, 4.0]],)),
            Sample("int", (3,)),
            Sample("float_f64", (2.5,), {"dtype": F64}),
            Sample("bool", (True,)),
            Sample("int_list_f16", ([1, 2],), {"dtype": F16})],
            lambda value, dtype=None: np.asarray(value, dtype=dtype or (
                dg.dtypes.infer_data_dtype(value) if not isinstance(value, (bool, int, float))
                else dg.dtypes.default_dtype_for(value))), errors=[
                ErrorCase("str", ("abc",), {}, TypeError, "cannot make a tensor from str"),
                ErrorCase("ragged", ([[1.0], [2.0, 3.0]],), {}, TypeError, "constant")]),
        OpInfo("zeros", F.zeros, [
            Sample("2d", (2, 3)), Sample("tuple", ((3,),), {"dtype": I64}),
            Sample("0d", ())],
            lambda *size, dtype=None: np.zeros(_size(size), dtype or F32),
            errors=[bad_size]),
        OpInfo("ones", F.ones, [
            Sample("2d", (2, 3)), Sample("f64", (4,), {"dtype": F64})],
            lambda *size, dtype=None: np.ones(_size(size), dtype or F32),
            errors=[bad_size]),
        OpInfo("full", F.full, [
            Sample("float", ((2, 2), 1.5)), Sample("int", (3, 7)),
            Sample("bool", ((2,), True)), Sample("dtype", ((2, 1), 2), {"dtype": F64})],
            lambda size, value, dtype=None: np.full(
                size, value, dtype or dg.dtypes.default_dtype_for(value)),
            errors=[ErrorCase("negative", ((2, -1), 1.0), {}, dg.ShapeError,
                              "negative dimension"),
                    ErrorCase("str_value", ((2,), "a"), {}, TypeError,
                              "expected a Python number as fill_value")]),
        OpInfo("arange", F.arange, [
            Sample("end", (5,)), Sample("start_end_step", (1, 7, 2)),
            Sample("float", (0.0, 1.0, 0.25)), Sample("neg_step", (5, 0, -1)),
            Sample("dtype", (3,), {"dtype": F64}), Sample("empty", (2, 2))],
            _arange_ref),
        OpInfo("eye", F.eye, [
            Sample("square", (3,)), Sample("rect", (2, 4)),
            Sample("i64", (2,), {"dtype": I64})],
            lambda n, m=None, dtype=None: np.eye(n, m, dtype=dtype or F32)),
        OpInfo("linspace", F.linspace, [
            Sample("unit", (0, 1, 5)), Sample("one", (-1, 1, 1)),
            Sample("f64", (-2.0, 3.0, 4), {"dtype": F64}),
            Sample("i32_descending", (5, -5, 20), {"dtype": I32}),
            Sample("i64_fractional", (-3.7, 2.2, 6), {"dtype": I64})],
            _linspace_ref, errors=[
                ErrorCase("bool", (0, 1, 5), {"dtype": B8}, dg.DTypeError, "dtype bool")]),
        OpInfo("zeros_like", F.zeros_like, [
            Sample("f64", (rand(2, 3),)), Sample("i64_to_f32", (ints(3,),), {"dtype": F32})],
            lambda x, dtype=None: np.zeros_like(x, dtype=dtype)),
        OpInfo("ones_like", F.ones_like, [
            Sample("f32", (rand(2, dtype=F32),)), Sample("0d_i64", (rand(),), {"dtype": I64})],
            lambda x, dtype=None: np.ones_like(x, dtype=dtype)),
        OpInfo("full_like", F.full_like, [
            Sample("f64", (rand(2, 3), 2.5)), Sample("bool", (rand(2,), 1), {"dtype": B8})],
            lambda x, v, dtype=None: np.full_like(x, v, dtype=dtype)),
        OpInfo("uniform", dg.uniform, [
            Sample("default", (3, 4), {"seed": seed()}),
            Sample("range_f64", ((5,),), {"seed": seed(3), "low": -2.0, "high": -1.0,
                                          "dtype": F64}),
            Sample("f16", (2,), {"seed": seed(), "dtype": F16})],
            None, random=True, check=_random_checks(0.0, 1.0), errors=[
                ErrorCase("float_seed", (2,), {"seed": rand()}, dg.DTypeError, "integer"),
                ErrorCase("no_seed", (2,), {}, dg.GraphError, "explicit seed"),
                ErrorCase("low_above_high", (2,), {"seed": seed(), "low": 2.0, "high": 1.0},
                          ValueError, "expected low <= high")]),
        OpInfo("rand", F.rand, [Sample("default", (2, 3), {"seed": seed()})],
               None, random=True, check=_random_checks(0.0, 1.0)),
        OpInfo("normal", dg.normal, [
            Sample("default", (3, 4), {"seed": seed()}),
            Sample("f64", ((5,),), {"seed": seed(1), "mean": 2.0, "std": 0.5, "dtype": F64})],
            None, random=True, errors=[
                ErrorCase("vector_seed", (2,), {"seed": ints(2)}, dg.DTypeError,
                          "scalar seed"),
                ErrorCase("negative_std", (2,), {"seed": seed(), "std": -1.0}, ValueError,
                          "std must be >= 0")]),
        OpInfo("randn", F.randn, [Sample("default", (2, 3), {"seed": seed()})],
               None, random=True),
        OpInfo("bernoulli", dg.bernoulli, [
            Sample("f32", (rand(3, 4, dtype=F32, low=0, high=1),), {"seed": seed()}),
            Sample("f64_0d", (zero_d(0.5),), {"seed": seed(2)})],
            None, random=True, check=_random_checks(0.0, 1.5, integer=True), errors=[
                ErrorCase("int_p", (ints(3),), {"seed": seed()}, dg.DTypeError,
                          "floating-point probabilities")]),
        OpInfo("randint", F.randint, [
            Sample("high", (5,), {"size": (3, 4), "seed": seed()}),
            Sample("low_high", (-3, 3), {"size": 6, "seed": seed(), "dtype": I32})],
            None, random=True, check=lambda out, low, high=None, **kw: _random_checks(
                0 if high is None else low, low if high is None else high, True)(out),
            errors=[ErrorCase("empty_range", (3, 3), {"size": 2, "seed": seed()},
                              dg.ShapeError, "must exceed")]),
    ]


# -- convolution and pooling -------------------------------------------------------------------
def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _windows(x, kernel, stride, dilation, out_hw):
    """For each kernel offset (i, j): the (N, C, H_out, W_out) slice of ``x`` it sees."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                          j * dw:j * dw + sw * (ow - 1) + 1:sw]


def _batched_ref(fn):
    """A reference for NCHW input that also takes CHW."""
    def ref(x, *args, **kwargs):
        out = fn(x if x.ndim == 4 else x[None], *args, **kwargs)
        return out if x.ndim == 4 else out[0]
    return ref


@_batched_ref
def _conv2d_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    (kh, kw), dil = w.shape[2:], _pair(dilation)
    if padding == "valid":
        padding = 0
    if padding == "same":
        pads = [((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2)
                for k, d in zip((kh, kw), dil)]
    else:
        pads = [(p, p) for p in _pair(padding)]
    x = np.pad(x, [(0, 0), (0, 0)] + pads)
    stride = _pair(stride)
    out_hw = [(size - d * (k - 1) - 1) // s + 1
              for size, k, s, d in zip(x.shape[2:], (kh, kw), stride, dil)]
    out = np.zeros((x.shape[0], w.shape[0], *out_hw), dtype=np.result_type(x, w))
    cin, cout = x.shape[1] // groups, w.shape[0] // groups
    for g in range(groups):
        xs, ws = x[:, g * cin:(g + 1) * cin], w[g * cout:(g + 1) * cout]
        for i, j, patch in _windows(xs, (kh, kw), stride, dil, out_hw):
            out[:, g * cout:(g + 1) * cout] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out if b is None else out + b[None, :, None, None]


def _pool_out(size, k, s, p, d, ceil_mode):
    span = size + 2 * p - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + p:   # the last window must start inside
        n -= 1
    return n


@_batched_ref
def _max_pool2d_ref(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    kernel, pad, dil = _pair(kernel_size), _pair(padding), _pair(dilation)
    stride = kernel if stride is None else _pair(stride)
    out_hw = [_pool_out(x.shape[2 + a], kernel[a], stride[a], pad[a], dil[a], ceil_mode)
              for a in range(2)]
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - size - p)
             for o, s, d, k, size, p in zip(out_hw, stride, dil, kernel, x.shape[2:], pad)]
    x = np.pad(x, [(0, 0), (0, 0), (pad[0], extra[0]), (pad[1], extra[1])],
               constant_values=-np.inf)
    return np.max([w for _, _, w in _windows(x, kernel, stride, dil, out_hw)], axis=0)


@_batched_ref
def _avg_pool2d_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                    count_include_pad=True):
    kernel, pad = _pair(kernel_size), _pair(padding)
    stride = kernel if stride is None else _pair(stride)
    out_hw = [_pool_out(x.shape[2 + a], kernel[a], stride[a], pad[a], 1, False)
              for a in range(2)]
    width = [(0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])]
    total = sum(w for _, _, w in _windows(np.pad(x, width), kernel, stride, (1, 1), out_hw))
    if count_include_pad:
        return total / (kernel[0] * kernel[1])
    ones = np.pad(np.ones((1, 1) + x.shape[2:], x.dtype), width)
    count = sum(w for _, _, w in _windows(ones, kernel, stride, (1, 1), out_hw))
    return total / count


@_batched_ref
def _adaptive_avg_pool2d_ref(x, output_size):
    oh, ow = _pair(output_size)
    oh, ow = oh or x.shape[2], ow or x.shape[3]
    out = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * x.shape[2] // oh, -(-(i + 1) * x.shape[2] // oh))
            cols = slice(j * x.shape[3] // ow, -(-(j + 1) * x.shape[3] // ow))
            out[:, :, i, j] = x[:, :, rows, cols].mean(axis=(2, 3))
    return out


def _conv() -> List[OpInfo]:
    if not hasattr(F, "conv2d"):
        return []
    return [
        OpInfo("conv2d", F.conv2d, [
            Sample("plain", (rand(2, 2, 4, 5), rand(3, 2, 2, 3))),
            Sample("bias_pad", (rand(1, 2, 4, 4), rand(2, 2, 3, 3), rand(2)), {"padding": 1}),
            Sample("stride_dilation", (rand(1, 1, 6, 7), rand(2, 1, 2, 2)),
                   {"stride": (2, 1), "dilation": 2}),
            Sample("groups", (rand(1, 4, 3, 3), rand(4, 2, 2, 2)), {"groups": 2}),
            Sample("same", (rand(1, 1, 4, 4), rand(1, 1, 2, 3)), {"padding": "same"}),
            Sample("chw", (rand(2, 3, 3), rand(1, 2, 2, 2)), {"padding": "valid"}),
            Sample("f32", (rand(1, 2, 4, 4, dtype=F32), rand(2, 2, 3, 3, dtype=F32))),
            # one input channel per group: the CPU backend's direct loops (conv_direct)
            Sample("depthwise", (rand(1, 3, 5, 5), rand(6, 1, 3, 3), rand(6)),
                   {"padding": 1, "groups": 3}),
            Sample("depthwise_stride_dilation", (rand(2, 2, 7, 6), rand(2, 1, 2, 3)),
                   {"stride": 2, "padding": (1, 2), "dilation": (2, 1), "groups": 2})],
            _conv2d_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("channels", (rand(1, 3, 4, 4), rand(2, 2, 3, 3)), {}, dg.ShapeError,
                          "channels"),
                ErrorCase("weight_3d", (rand(1, 2, 4, 4), rand(2, 3, 3)), {}, dg.ShapeError,
                          "4-D weight"),
                ErrorCase("int", (ints(1, 1, 3, 3), ints(1, 1, 2, 2)), {}, dg.DTypeError,
                          "floating-point")]),
        OpInfo("max_pool2d", F.max_pool2d, [
            Sample("k2", (distinct(2, 2, 4, 4), 2)),
            Sample("stride_pad", (distinct(1, 2, 5, 5), 3), {"stride": 2, "padding": 1}),
            Sample("ceil", (distinct(1, 1, 5, 5), 2), {"ceil_mode": True}),
            Sample("dilation", (distinct(1, 1, 5, 5), 2), {"stride": 1, "dilation": 2}),
            Sample("chw_f32", (distinct(2, 4, 4, dtype=F32), (2, 1)))],
            _max_pool2d_ref, differentiable=True, errors=[
                ErrorCase("3d_bad", (rand(4, 4), 2), {}, dg.ShapeError, "4-D")]),
        OpInfo("avg_pool2d", F.avg_pool2d, [
            Sample("k2", (rand(2, 2, 4, 4), 2)),
            Sample("stride_pad", (rand(1, 2, 5, 5), 3), {"stride": 2, "padding": 1}),
            Sample("no_pad_count", (rand(1, 1, 5, 5), 3),
                   {"stride": 2, "padding": 1, "count_include_pad": False}),
            Sample("f32", (rand(1, 1, 4, 6, dtype=F32), (2, 3)))],
            _avg_pool2d_ref, differentiable=True),
        OpInfo("adaptive_avg_pool2d", F.adaptive_avg_pool2d, [
            Sample("even", (rand(2, 2, 4, 4), 2)),
            Sample("uneven", (rand(1, 2, 5, 7), (3, 2))),
            Sample("keep_w", (rand(1, 1, 4, 3), (2, None))),
            Sample("global", (rand(1, 3, 3, 3), 1))],
            _adaptive_avg_pool2d_ref, differentiable=True),
    ]


# -- N-d convolution, pooling and resampling (numpy references written out directly) ----------
def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _unbatched_ref(fn, spatial):
    """A reference for (N, C, *spatial) input that also takes an unbatched (C, *spatial)."""
    def ref(x, *args, **kwargs):
        if x.ndim == spatial + 1:
            out = fn(x[None], *args, **kwargs)
            return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
        return fn(x, *args, **kwargs)
    return ref


def _offsets_nd(kernel):
    return np.ndindex(*kernel)


def _taps_nd(x, offset, stride, dilation, out):
    """The (N, C, *out) slice of ``x`` that kernel ``offset`` sees."""
    index = [slice(None), slice(None)]
    for k, s, d, o in zip(offset, stride, dilation, out):
        index.append(slice(k * d, k * d + s * (o - 1) + 1, s))
    return x[tuple(index)]


def _conv_nd_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    n = w.ndim - 2
    kernel, stride, dilation = w.shape[2:], _tuple(stride, n), _tuple(dilation, n)
    if padding == "same":
        pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                for k, d in zip(kernel, dilation)]
    else:
        pads = [(p, p) for p in _tuple(0 if padding == "valid" else padding, n)]
    x = np.pad(x, [(0, 0), (0, 0)] + pads)
    out = [(size - d * (k - 1) - 1) // s + 1
           for size, k, s, d in zip(x.shape[2:], kernel, stride, dilation)]
    res = np.zeros((x.shape[0], w.shape[0], *out), dtype=np.result_type(x, w))
    cin, cout = x.shape[1] // groups, w.shape[0] // groups
    for g in range(groups):
        xs, ws = x[:, g * cin:(g + 1) * cin], w[g * cout:(g + 1) * cout]
        for off in _offsets_nd(kernel):
            patch = _taps_nd(xs, off, stride, dilation, out)
            res[:, g * cout:(g + 1) * cout] += np.einsum(
                "nc...,oc->no...", patch, ws[(slice(None), slice(None)) + off])
    if b is not None:
        res = res + b.reshape((1, -1) + (1,) * n)
    return res


def _conv_transpose_nd_ref(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                           dilation=1):
    """Each input element scatters weight * value to i*stride + k*dilation - padding."""
    n = w.ndim - 2
    stride, padding = _tuple(stride, n), _tuple(padding, n)
    output_padding, dilation = _tuple(output_padding, n), _tuple(dilation, n)
    kernel, size = w.shape[2:], x.shape[2:]
    full = [(i - 1) * s + d * (k - 1) + 1 + op
            for i, s, d, k, op in zip(size, stride, dilation, kernel, output_padding)]
    cin, cout = x.shape[1] // groups, w.shape[1]
    res = np.zeros((x.shape[0], cout * groups, *full), dtype=np.result_type(x, w))
    for g in range(groups):
        xs, ws = x[:, g * cin:(g + 1) * cin], w[g * cin:(g + 1) * cin]
        for off in _offsets_nd(kernel):
            contrib = np.einsum("nc...,co->no...", xs, ws[(slice(None), slice(None)) + off])
            index = [slice(None), slice(g * cout, (g + 1) * cout)]
            for k, s, d, i in zip(off, stride, dilation, size):
                index.append(slice(k * d, k * d + s * (i - 1) + 1, s))
            res[tuple(index)] += contrib
    out_sizes = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in
                 zip(size, stride, padding, dilation, kernel, output_padding)]
    crop = [slice(None), slice(None)] + [slice(p, p + o) for p, o in zip(padding, out_sizes)]
    res = res[tuple(crop)]
    if b is not None:
        res = res + b.reshape((1, -1) + (1,) * n)
    return res


def _pool_nd_ref(kind, n):
    def ref(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
            count_include_pad=True, return_indices=False):
        kernel = _tuple(kernel_size, n)
        stride = kernel if stride is None else _tuple(stride, n)
        pad, dil = _tuple(padding, n), _tuple(dilation, n)
        out = [_pool_out(x.shape[2 + a], kernel[a], stride[a], pad[a], dil[a], ceil_mode)
               for a in range(n)]
        extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - size - p) for o, s, d, k, size, p in
                 zip(out, stride, dil, kernel, x.shape[2:], pad)]
        width = [(0, 0), (0, 0)] + [(p, e) for p, e in zip(pad, extra)]
        if kind == "max":
            xp = np.pad(x, width, constant_values=-np.inf)
            return np.max([_taps_nd(xp, off, stride, dil, out)
                           for off in _offsets_nd(kernel)], axis=0)
        total = sum(_taps_nd(np.pad(x, width), off, stride, dil, out)
                    for off in _offsets_nd(kernel))
        # PyTorch's divisor: the window clipped to the padded input (or to the input)
        count = np.ones(out)
        for a in range(n):
            start = np.arange(out[a]) * stride[a] - pad[a]
            end = np.minimum(start + kernel[a], x.shape[2 + a] + pad[a])
            if not count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, x.shape[2 + a])
            shape = [1] * n
            shape[a] = -1
            count = count * (end - start).reshape(shape)
        return total / count
    return ref


def _max_pool1d_ref(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                    return_indices=False):
    out = _unbatched_ref(_pool_nd_ref("max", 1), 1)(x, kernel_size, stride, padding, dilation,
                                                     ceil_mode)
    if not return_indices:
        return out
    # the index of each window's maximum (distinct samples: no ties)
    flat = x.reshape(-1, x.shape[-1])
    pos = np.array([[int(np.flatnonzero(row == v)[0]) for v in outs]
                    for row, outs in zip(flat, out.reshape(-1, out.shape[-1]))])
    return out, pos.reshape(out.shape)


def _pixel_shuffle_ref(x, upscale_factor):
    r = upscale_factor
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    y = np.moveaxis(y, (-4, -3), (-3, -1))            # (..., C, H, r, W, r)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def _pixel_unshuffle_ref(x, downscale_factor):
    r = downscale_factor
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    y = np.moveaxis(y, (-3, -1), (-4, -3))            # (..., C, r, r, H/r, W/r)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def _conv_nd() -> List[OpInfo]:
    if not hasattr(F, "conv3d"):
        return []
    conv1 = _unbatched_ref(_conv_nd_ref, 1)
    conv3 = _unbatched_ref(_conv_nd_ref, 3)
    tconv1 = _unbatched_ref(_conv_transpose_nd_ref, 1)
    tconv2 = _unbatched_ref(_conv_transpose_nd_ref, 2)
    tconv3 = _unbatched_ref(_conv_transpose_nd_ref, 3)
    return [
        OpInfo("conv1d", F.conv1d, [
            Sample("plain", (rand(2, 2, 6), rand(3, 2, 3), rand(3))),
            Sample("all", (rand(1, 4, 9), rand(4, 2, 2)),
                   {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
            Sample("same_unbatched", (rand(2, 5), rand(2, 2, 4)), {"padding": "same"})],
            conv1, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("weight", (rand(1, 2, 5), rand(2, 2, 3, 3)), {}, dg.ShapeError,
                          "3-D weight")]),
        OpInfo("conv3d", F.conv3d, [
            Sample("plain", (rand(1, 2, 3, 4, 3), rand(2, 2, 2, 2, 2), rand(2))),
            Sample("all", (rand(1, 4, 4, 3, 4), rand(2, 2, 2, 1, 2)),
                   {"stride": (2, 1, 1), "padding": (1, 0, 1), "dilation": (1, 1, 2),
                    "groups": 2}),
            Sample("same_unbatched", (rand(1, 3, 3, 3), rand(1, 1, 2, 3, 2)),
                   {"padding": "same"})],
            conv3, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("channels", (rand(1, 3, 2, 2, 2), rand(1, 2, 1, 1, 1)), {},
                          dg.ShapeError, "channels")]),
        OpInfo("conv_transpose1d", F.conv_transpose1d, [
            Sample("plain", (rand(2, 2, 4), rand(2, 3, 3), rand(3))),
            Sample("all", (rand(1, 4, 3), rand(4, 1, 2)),
                   {"stride": 3, "padding": 1, "output_padding": 2, "groups": 2,
                    "dilation": 2}),
            Sample("unbatched", (rand(2, 3), rand(2, 1, 2)), {"stride": 2})],
            tconv1, tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("conv_transpose2d", F.conv_transpose2d, [
            Sample("plain", (rand(2, 2, 3, 3), rand(2, 3, 2, 2), rand(3))),
            Sample("all", (rand(1, 4, 3, 2), rand(4, 1, 3, 2)),
                   {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2),
                    "groups": 2, "dilation": (1, 2)}),
            Sample("outpad_over_pad", (rand(1, 1, 2, 2), rand(1, 2, 3, 3)),
                   {"stride": 3, "padding": 1, "output_padding": 2})],
            tconv2, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("output_padding", (rand(1, 1, 2, 2), rand(1, 1, 2, 2)),
                          {"stride": 2, "output_padding": 2}, dg.ShapeError,
                          "output_padding")]),
        OpInfo("conv_transpose3d", F.conv_transpose3d, [
            Sample("plain", (rand(1, 2, 2, 2, 2), rand(2, 1, 2, 2, 2), rand(1))),
            Sample("all", (rand(1, 2, 2, 3, 2), rand(2, 1, 3, 2, 2)),
                   {"stride": (2, 1, 2), "padding": (1, 0, 1), "output_padding": (1, 0, 1),
                    "groups": 2, "dilation": (2, 1, 1)})],
            tconv3, tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("max_pool1d", F.max_pool1d, [
            Sample("k2", (distinct(2, 2, 6), 2)),
            Sample("all", (distinct(1, 2, 9), 3),
                   {"stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True}),
            Sample("indices", (distinct(2, 7), 3), {"stride": 2, "return_indices": True})],
            _max_pool1d_ref, differentiable=True),
        OpInfo("max_pool3d", F.max_pool3d, [
            Sample("k2", (distinct(1, 2, 4, 4, 4), 2)),
            Sample("all", (distinct(1, 1, 5, 4, 5), (3, 2, 2)),
                   {"stride": (2, 1, 2), "padding": (1, 0, 1), "dilation": (1, 2, 1),
                    "ceil_mode": True}),
            Sample("unbatched", (distinct(2, 3, 3, 3), 2), {"stride": 1})],
            _unbatched_ref(_pool_nd_ref("max", 3), 3), differentiable=True, errors=[
                ErrorCase("padding", (rand(1, 1, 4, 4, 4), 2), {"padding": 2},
                          dg.ShapeError, "at most half")]),
        OpInfo("avg_pool1d", F.avg_pool1d, [
            Sample("k2", (rand(2, 2, 6), 2)),
            Sample("all", (rand(1, 2, 10), 4),
                   {"stride": 3, "padding": 2, "ceil_mode": True}),
            Sample("no_pad_count", (rand(2, 9), 3),
                   {"stride": 2, "padding": 1, "ceil_mode": True,
                    "count_include_pad": False})],
            _unbatched_ref(lambda x, k, stride=None, padding=0, ceil_mode=False,
                           count_include_pad=True: _pool_nd_ref("avg", 1)(
                               x, k, stride, padding, 1, ceil_mode, count_include_pad), 1),
            differentiable=True),
        OpInfo("avg_pool3d", F.avg_pool3d, [
            Sample("k2", (rand(1, 2, 4, 4, 4), 2)),
            Sample("all", (rand(1, 1, 5, 4, 5), (3, 2, 3)),
                   {"stride": 2, "padding": 1, "ceil_mode": True}),
            Sample("no_pad_count", (rand(1, 3, 4, 5), 3),
                   {"stride": 2, "padding": 1, "count_include_pad": False})],
            _unbatched_ref(lambda x, k, stride=None, padding=0, ceil_mode=False,
                           count_include_pad=True: _pool_nd_ref("avg", 3)(
                               x, k, stride, padding, 1, ceil_mode, count_include_pad), 3),
            differentiable=True),
        OpInfo("pixel_shuffle", F.pixel_shuffle, [
            Sample("r2", (rand(2, 8, 2, 3), 2)),
            Sample("unbatched_r3", (rand(9, 1, 2), 3)),
            Sample("lead_dims", (rand(2, 1, 4, 1, 2), 2))],
            _pixel_shuffle_ref, differentiable=True, errors=[
                ErrorCase("channels", (rand(1, 3, 2, 2), 2), {}, dg.ShapeError,
                          "divisible")]),
        OpInfo("pixel_unshuffle", F.pixel_unshuffle, [
            Sample("r2", (rand(2, 2, 4, 6), 2)),
            Sample("unbatched_r3", (rand(1, 3, 6), 3))],
            _pixel_unshuffle_ref, differentiable=True, errors=[
                ErrorCase("size", (rand(1, 1, 3, 4), 2), {}, dg.ShapeError, "divisible")]),
    ]


def _interp_matrix(size, out, mode, align_corners, scale):
    """(out, size) matrix of one dim's interpolation weights, straight from the formulas."""
    m = np.zeros((out, size))
    ratio = (1.0 / scale) if scale else size / out
    for i in range(out):
        if mode in ("nearest", "nearest-exact"):
            shift = 0.5 if mode == "nearest-exact" else 0.0
            m[i, min(int(math.floor((i + shift) * ratio)), size - 1)] = 1.0
            continue
        if align_corners:
            src = i * (size - 1) / (out - 1) if out > 1 else 0.0
        else:
            src = ratio * (i + 0.5) - 0.5
            if mode != "bicubic":
                src = max(src, 0.0)
        f = math.floor(src)
        t = src - f
        if mode == "bicubic":
            a = -0.75
            ws = [((a * x - 5 * a) * x + 8 * a) * x - 4 * a if x > 1 else
                  ((a + 2) * x - (a + 3)) * x * x + 1 for x in (t + 1, t, 1 - t, 2 - t)]
            for k, w in enumerate(ws):
                m[i, min(max(f - 1 + k, 0), size - 1)] += w
        else:
            f = min(f, size - 1)
            m[i, f] += 1 - t
            m[i, min(f + 1, size - 1)] += t
    return m


def _interpolate_ref(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                     recompute_scale_factor=None):
    n = x.ndim - 2
    if size is not None:
        sizes, scales = _tuple(size, n), [None] * n
    else:
        scales = list(_tuple(scale_factor, n))
        sizes = [int(math.floor(s * f)) for s, f in zip(x.shape[2:], scales)]
        if recompute_scale_factor:
            scales = [None] * n
    for a in range(n):
        m = _interp_matrix(x.shape[2 + a], sizes[a], mode, align_corners, scales[a])
        x = np.moveaxis(np.tensordot(x, m, axes=([2 + a], [1])), -1, 2 + a)
    return x


def _unfold_ref(x, kernel_size, dilation=1, padding=0, stride=1):
    kernel, dil, pad, st = (_pair(kernel_size), _pair(dilation), _pair(padding),
                            _pair(stride))
    xp = np.pad(x, [(0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])])
    out = [(xp.shape[2 + a] - dil[a] * (kernel[a] - 1) - 1) // st[a] + 1 for a in range(2)]
    cols = np.stack([w for _, _, w in _windows(xp, kernel, st, dil, out)], axis=2)
    return cols.reshape(x.shape[0], -1, out[0] * out[1])


def _fold_ref(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The transpose of unfold: each column entry added where unfold read it."""
    kernel, dil, pad, st = (_pair(kernel_size), _pair(dilation), _pair(padding),
                            _pair(stride))
    h, w = _pair(output_size)
    c = x.shape[1] // (kernel[0] * kernel[1])
    out = [(s + 2 * p - d * (k - 1) - 1) // t + 1
           for s, p, d, k, t in zip((h, w), pad, dil, kernel, st)]
    res = np.zeros((x.shape[0], c, h + 2 * pad[0], w + 2 * pad[1]), dtype=x.dtype)
    cols = x.reshape(x.shape[0], c, kernel[0], kernel[1], out[0], out[1])
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            res[:, :, i * dil[0]:i * dil[0] + st[0] * (out[0] - 1) + 1:st[0],
                j * dil[1]:j * dil[1] + st[1] * (out[1] - 1) + 1:st[1]] += cols[:, :, i, j]
    return res[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w]


def _adaptive_max_pool2d_ref(x, output_size, return_indices=False):
    oh, ow = _pair(output_size)
    h, w = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    index = np.zeros(out.shape, np.int64)
    for i in range(oh):
        for j in range(ow):
            r0, r1 = i * h // oh, -(-(i + 1) * h // oh)
            c0, c1 = j * w // ow, -(-(j + 1) * w // ow)
            win = x[:, :, r0:r1, c0:c1].reshape(x.shape[:2] + (-1,))
            at = win.argmax(axis=2)
            out[:, :, i, j] = win.max(axis=2)
            index[:, :, i, j] = (r0 + at // (c1 - c0)) * w + c0 + at % (c1 - c0)
    return (out, index) if return_indices else out


def _max_unpool2d_ref(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    kernel, pad = _pair(kernel_size), _pair(padding)
    stride = kernel if stride is None else _pair(stride)
    size = tuple(output_size)[-2:] if output_size is not None else tuple(
        (s - 1) * st - 2 * p + k for s, st, p, k in zip(x.shape[2:], stride, pad, kernel))
    out = np.zeros(x.shape[:2] + (size[0] * size[1],), x.dtype)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[n, c, indices[n, c].reshape(-1)] = x[n, c].reshape(-1)
    return out.reshape(x.shape[:2] + size)


def as_tuple_map(out, f):
    """``f`` applied to ``out`` or to each of its items (a tuple)."""
    return tuple(f(o) for o in out) if isinstance(out, tuple) else f(out)


def _resampling() -> List[OpInfo]:
    from duograph.nn import functional as NF
    if not hasattr(NF, "interpolate"):
        return []
    return [
        OpInfo("interpolate", NF.interpolate, [
            Sample("nearest", (rand(1, 2, 5, 4),), {"size": (7, 3)}),
            Sample("nearest_exact_1d", (rand(2, 2, 5),),
                   {"scale_factor": 1.5, "mode": "nearest-exact"}),
            Sample("linear", (rand(2, 2, 5),), {"size": 8, "mode": "linear"}),
            Sample("bilinear_align", (rand(1, 2, 3, 4),),
                   {"size": (5, 7), "mode": "bilinear", "align_corners": True}),
            Sample("bilinear_scale", (rand(1, 1, 4, 5),),
                   {"scale_factor": (1.5, 0.7), "mode": "bilinear"}),
            Sample("bicubic", (rand(1, 2, 4, 5),), {"size": (6, 3), "mode": "bicubic"}),
            Sample("bicubic_recompute", (rand(1, 1, 4, 4),),
                   {"scale_factor": 1.7, "mode": "bicubic", "recompute_scale_factor": True}),
            Sample("trilinear", (rand(1, 1, 2, 3, 4),),
                   {"size": (3, 5, 2), "mode": "trilinear"}),
            Sample("f32", (rand(1, 2, 3, 3, dtype=F32),), {"size": 5, "mode": "bilinear"},
                   dtype=F32)],
            _interpolate_ref, differentiable=True, errors=[
                ErrorCase("rank", (rand(1, 2, 3),), {"size": 4, "mode": "bicubic"},
                          NotImplementedError, "needs a 4-D input"),
                ErrorCase("both", (rand(1, 2, 3),), {"size": 4, "scale_factor": 2.0},
                          ValueError, "only one of size or scale_factor")]),
        OpInfo("unfold", NF.unfold, [
            Sample("k2", (rand(2, 2, 3, 4), 2)),
            Sample("all", (rand(1, 2, 5, 6), (2, 3)),
                   {"dilation": (1, 2), "padding": 1, "stride": (2, 1)}),
            Sample("i64", (ints(1, 1, 3, 3), 2), {"stride": 1})],
            _unfold_ref, differentiable=True),
        OpInfo("fold", NF.fold, [
            Sample("k2", (rand(2, 8, 6), (3, 4), 2)),
            Sample("all", (rand(1, 12, 12), (5, 6), (2, 3)),
                   {"dilation": (1, 2), "padding": 1, "stride": (2, 1)})],
            _fold_ref, differentiable=True, errors=[
                ErrorCase("blocks", (rand(1, 8, 5), (3, 3), 2), {}, dg.ShapeError,
                          "sliding blocks")]),
        OpInfo("adaptive_max_pool2d", NF.adaptive_max_pool2d, [
            Sample("uneven", (distinct(2, 2, 5, 7), (3, 2))),
            Sample("indices", (distinct(1, 2, 4, 4), 3), {"return_indices": True})],
            _adaptive_max_pool2d_ref, differentiable=True),
        OpInfo("adaptive_avg_pool1d", NF.adaptive_avg_pool1d, [
            Sample("uneven", (rand(2, 2, 7), 3)),
            Sample("grow", (rand(1, 2, 3), 5))],
            lambda x, size: _adaptive_avg_pool2d_ref(x[:, :, None], (1, size))[:, :, 0],
            differentiable=True),
        OpInfo("adaptive_max_pool1d", NF.adaptive_max_pool1d, [
            Sample("uneven", (distinct(2, 2, 7), 3)),
            Sample("indices", (distinct(1, 2, 5), 2), {"return_indices": True})],
            lambda x, size, return_indices=False: as_tuple_map(
                _adaptive_max_pool2d_ref(x[:, :, None], (1, size), return_indices),
                lambda o: o[:, :, 0]),
            differentiable=True),
        OpInfo("max_unpool2d", NF.max_unpool2d, [
            Sample("k2", (rand(2, 2, 2, 2), idx([[[[0, 3], [8, 15]], [[1, 2], [9, 10]]],
                                                [[[4, 7], [12, 13]], [[5, 6], [14, 11]]]]),
                          2)),
            Sample("size", (rand(1, 1, 2, 2), idx([[[[0, 4], [10, 14]]]]), 2),
                   {"output_size": (5, 5)})],
            _max_unpool2d_ref, differentiable=True, grad_args=(0,)),
    ]


def _scatter_ref(x, dim, index, src=None, value=None, reduce=None):
    out = x.copy()
    src = np.broadcast_to(np.asarray(value if src is None else src, x.dtype), index.shape) \
        if src is None or np.ndim(src) == 0 else src[tuple(slice(0, n) for n in index.shape)]
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    key = tuple(grids)
    if reduce is None:
        for pos in np.ndindex(index.shape):     # in order: the last write wins
            place = tuple(index[pos] if d == dim else p for d, p in enumerate(pos))
            out[place] = src[pos]
    elif reduce == "add":
        np.add.at(out, key, src)
    else:
        np.multiply.at(out, key, src)
    return out


def _scatter_reduce_ref(x, dim, index, src, reduce, include_self=True):
    groups = {}
    for pos in np.ndindex(index.shape):
        place = tuple(index[pos] if d == dim else p for d, p in enumerate(pos))
        groups.setdefault(place, []).append(src[pos])
    out = x.copy()
    fn = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
    for place, vals in groups.items():
        vals = ([x[place]] if include_self else []) + vals
        r = fn[reduce](np.asarray(vals))
        if reduce == "mean" and x.dtype.kind != "f":
            r = np.sum(vals) // len(vals)
        out[place] = r
    return out


def _nonzero_ref(x, as_tuple=False, size=None, fill_value=-1):
    found = np.argwhere(x)
    if size is not None:
        out = np.full((size, max(x.ndim, 1) if x.ndim else 0), fill_value, np.int64)
        n = min(size, len(found))
        out[:n] = found[:n]
        found = out
    found = found.astype(np.int64)
    return tuple(found[:, k] for k in range(x.ndim)) if as_tuple else found


def _masked_select_ref(x, mask, size=None):
    x, mask = np.broadcast_arrays(x, mask)
    picked = x[mask]
    if size is None:
        return picked
    out = np.zeros(size, x.dtype)
    out[:min(size, picked.size)] = picked[:size]
    return out


def _masked_scatter_ref(x, mask, source):
    out = x.copy()
    mask = np.broadcast_to(mask, x.shape)
    out[mask] = source.reshape(-1)[:int(mask.sum())]
    return out


def _index_put_ref(x, indices, values, accumulate=False):
    out = x.copy()
    if accumulate:
        np.add.at(out, tuple(indices), values)
    else:
        out[tuple(indices)] = values
    return out


def _index_copy_ref(x, dim, index, source):
    out = x.copy()
    out[(slice(None),) * dim + (index,)] = source
    return out


def _index_fill_ref(x, dim, index, value):
    out = x.copy()
    out[(slice(None),) * dim + (index,)] = value
    return out


def _take_along_dim_ref(x, indices, dim=None):
    if dim is None:
        return np.take_along_axis(x.reshape(-1), indices.reshape(-1), 0)
    shape = list(np.broadcast_shapes(x.shape, indices.shape))
    xs, ish = list(shape), list(shape)
    xs[dim], ish[dim] = x.shape[dim], indices.shape[dim]
    return np.take_along_axis(np.broadcast_to(x, xs), np.broadcast_to(indices, ish), dim)


def _indexing_ops() -> List[OpInfo]:
    """graphlib/ops/indexing.py: the scatter family, masks and nonzero."""
    mask34 = bools(3, 4)
    return [
        OpInfo("scatter", dg.scatter, [
            Sample("src", (rand(3, 4), 0, idx([[0, 1, 2, 0], [2, 0, 1, 1]]), rand(2, 4))),
            Sample("value", (rand(3, 4), 1, idx([[3], [0], [1]]), 2.5)),
            Sample("smaller", (rand(3, 4), 1, idx([[3, 1], [0, 2]]), rand(3, 3))),
            Sample("add", (rand(3, 4), 0, idx([[0, 0, 2, 0]]), rand(1, 4)), {"reduce": "add"}),
            Sample("i64", (ints(3, 4), 1, idx([[1], [0], [0]]), ints(3, 1)))],
            _scatter_ref, differentiable=True, grad_args=(0, 2), errors=[
                ErrorCase("int32_index", (rand(3, 4), 0, idx([[0]], I32), 1.0), {},
                          dg.DTypeError, "int64 index"),
                ErrorCase("dtype", (rand(3, 4), 0, idx([[0]]), rand(1, 1, dtype=F32)), {},
                          dg.DTypeError, "one dtype"),
                ErrorCase("larger", (rand(3, 4), 0, idx([[0, 1]]), rand(1, 1)), {},
                          dg.ShapeError, "larger than src")]),
        OpInfo("scatter_reduce", dg.scatter_reduce, [
            Sample(f"{r}_{incl}", (pos(3, 4), 1, idx([[0, 0, 3], [1, 1, 1], [2, 0, 2]]),
                                   pos(3, 3), r), {"include_self": incl})
            for r in ("sum", "prod", "mean", "amax", "amin") for incl in (True, False)] + [
            Sample("i64_mean", (ints(3, 4), 1, idx([[0, 0], [1, 1], [3, 3]]), ints(3, 2),
                                "mean"))],
            _scatter_reduce_ref, differentiable=True, grad_args=(0, 3), errors=[
                ErrorCase("reduce", (rand(3, 4), 0, idx([[0]]), rand(1, 1), "max"), {},
                          ValueError, "reduce")]),
        OpInfo("nonzero", dg.nonzero, [
            Sample("2d", (mask34,), {"size": 4}),
            Sample("pad", (ints(2, 3, low=0, high=2),), {"size": 7}),
            Sample("tuple", (rand(5),), {"size": 5, "as_tuple": True}),
            Sample("fill", (bools(4),), {"size": 6, "fill_value": 0})],
            _nonzero_ref),
        OpInfo("nonzero_static", dg.nonzero_static, [
            Sample("cut", (ints(3, 4, low=0, high=2),), {"size": 2}),
            Sample("pad", (bools(2, 2),), {"size": 6, "fill_value": 9})],
            lambda x, size, fill_value=-1: _nonzero_ref(x, size=size, fill_value=fill_value)),
        OpInfo("argwhere", dg.argwhere, [
            Sample("sized", (bools(3, 2),), {"size": 6})],
            lambda x, size=None, fill_value=-1: _nonzero_ref(x, size=size,
                                                             fill_value=fill_value)),
        OpInfo("masked_select", dg.masked_select, [
            Sample("same", (rand(3, 4), mask34), {"size": int(mask34.sum())}),
            Sample("padded", (rand(3, 4), mask34), {"size": 12}),
            Sample("bcast", (rand(3, 1), bools(2, 3, 4)), {"size": 5})],
            _masked_select_ref, differentiable=True, grad_args=(0,), errors=[
                ErrorCase("int_mask", (rand(3, 4), ints(3, 4)), {"size": 2}, dg.DTypeError,
                          "bool mask")]),
        OpInfo("masked_fill", dg.masked_fill, [
            Sample("number", (rand(3, 4), mask34, 0.5)),
            Sample("tensor", (rand(3, 4), bools(4), zero_d(-2.0))),
            Sample("int", (ints(3, 4), mask34, 2.7), dtype=I64)],
            lambda x, m, v: np.where(m, np.asarray(v).astype(x.dtype), x),
            differentiable=True, errors=[
                ErrorCase("int_mask", (rand(3, 4), ints(3, 4), 1.0), {}, dg.DTypeError,
                          "bool mask"),
                ErrorCase("1d_value", (rand(3, 4), mask34, rand(4)), {}, dg.ShapeError,
                          "0-dimensional")]),
        OpInfo("masked_scatter", dg.masked_scatter, [
            Sample("same", (rand(3, 4), mask34, rand(12))),
            Sample("bcast", (rand(3, 4), bools(3, 1), rand(4, 4)))],
            _masked_scatter_ref, differentiable=True, grad_args=(0, 2), errors=[
                ErrorCase("dtype", (rand(3, 4), mask34, rand(12, dtype=F32)), {},
                          dg.DTypeError, "source of dtype")]),
        OpInfo("index_put", dg.index_put, [
            Sample("one", (rand(4, 3), (idx([2, 0]),), rand(2, 3))),
            Sample("two", (rand(4, 3), (idx([2, 0, 3]), idx([1, 1, 0])), rand(3))),
            Sample("acc", (rand(4, 3), (idx([2, 2, 0]),), rand(3, 3)), {"accumulate": True})],
            _index_put_ref, differentiable=True, errors=[
                ErrorCase("dtype", (rand(4, 3), (idx([0]),), rand(3, dtype=F32)), {},
                          dg.DTypeError, "dtypes match")]),
        OpInfo("index_copy", dg.index_copy, [
            Sample("dim0", (rand(4, 3), 0, idx([3, 0]), rand(2, 3))),
            Sample("dim1", (rand(2, 3, 2), 1, idx([2]), rand(2, 1, 2)))],
            _index_copy_ref, differentiable=True, grad_args=(0, 2), errors=[
                ErrorCase("shape", (rand(4, 3), 0, idx([3, 0]), rand(3, 3)), {},
                          dg.ShapeError, "expected source of shape")]),
        OpInfo("index_fill", dg.index_fill, [
            Sample("dim1", (rand(3, 4), 1, idx([0, -1]), -2.0)),
            Sample("tensor", (rand(3, 4), 0, idx([1]), zero_d(0.25))),
            Sample("i64", (ints(3, 4), 0, idx([2]), 7))],
            _index_fill_ref, differentiable=True, errors=[
                ErrorCase("2d_index", (rand(3, 4), 0, idx([[0]]), 1.0), {}, IndexError,
                          "at most one dimension")]),
        OpInfo("take_along_dim", dg.take_along_dim, [
            Sample("dim1", (rand(3, 4), idx([[3], [0], [1]]), 1)),
            Sample("bcast", (rand(3, 4), idx([[2, 0, 1, 0]]), 0)),
            Sample("flat", (rand(3, 4), idx([[5, 0], [11, 2]])))],
            _take_along_dim_ref, differentiable=True, grad_args=(0,), errors=[
                ErrorCase("ndim", (rand(3, 4), idx([1]), 1), {}, dg.ShapeError,
                          "same number of dimensions")]),
        OpInfo("take", dg.take, [
            Sample("2d", (rand(3, 4), idx([[0, -1], [7, 7]])))],
            lambda x, i: np.take(x.reshape(-1), i), differentiable=True, grad_args=(0,)),
    ]


OPS: List[OpInfo] = (_elementwise_unary() + _elementwise_binary() + _reductions() + _linalg()
                     + _shape_ops() + _nn() + _conv() + _creation() + _conv_nd()
                     + _resampling() + _indexing_ops())

# -- round, nan_to_num, lerp, xlogy, shifts; flips, rolls, diagonals, einsum... ---------------
def _xlogy_ref(x, y):
    x, y = np.asarray(x), np.asarray(y)
    dt = np.result_type(x, y)
    if dt.kind != "f":
        dt = np.dtype(F32)
    x, y = x.astype(dt), y.astype(dt)
    with np.errstate(all="ignore"):
        return np.where(np.isnan(y), y, np.where(x == 0, dt.type(0), x * np.log(y)))


def _shift_ref(left: bool):
    """Element by element with Python ints: PyTorch's rules for shifts out of range."""
    def ref(a, b):
        if isinstance(b, int):        # a Python number: PyTorch's weak promotion
            dt = np.dtype(dg.dtypes.weak_result_dtype(np.asarray(a).dtype.name, b))
        else:
            dt = np.dtype(dg.dtypes.result_dtype(np.asarray(a).dtype.name,
                                                 np.asarray(b).dtype.name))
        a, b = np.asarray(a), np.asarray(b)
        bits = dt.itemsize * 8
        a, b = np.broadcast_arrays(a.astype(dt), b.astype(dt))
        out = np.empty(a.shape, dt)
        for k in np.ndindex(a.shape):
            x, s = int(a[k]), int(b[k])
            if left:
                v = (x << s) & ((1 << bits) - 1) if 0 <= s < bits else 0
                if dt.kind == "i" and v >= 1 << (bits - 1):
                    v -= 1 << bits
            else:
                v = x >> s if 0 <= s < bits else (-1 if x < 0 else 0)
            out[k] = v
        return out
    return ref


def _shift_samples():
    return [
        Sample("i64", (idx([[1, -1, 5, -128], [7, -7, 3, 2]]), idx([[1, 63, 64, -1],
                                                                    [70, 2, 0, 61]]))),
        Sample("i32_bcast", (ints(2, 3, low=-90, high=90, dtype=I32),
                             idx([0, 5, 31], dtype=I32))),
        Sample("i8", (idx([1, -1, 5, -128], dtype="int8"), idx([1, 7, 8, -1], dtype="int8"))),
        Sample("u8", (idx([200, 1, 3, 255], dtype=U8), idx([9, 7, 1, 0], dtype=U8))),
        Sample("i16_scalar", (idx([3, -3, 1000], dtype="int16"), 2)),
        Sample("i32_i64", (idx([3, -3, 9], dtype=I32), idx([1, 2, 40]))),
        Sample("bool_scalar", (np.array([True, False]), 1), dtype=I64)]


def _shift_errors(name):
    return [ErrorCase("float", (rand(2), ints(2)), {}, dg.DTypeError, "integer operands"),
            ErrorCase("bool_bool", (bools(2), bools(2)), {}, dg.DTypeError,
                      "found bool and bool")]


_HALVES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1.2345, 2.675, -3.49])


def _round_ref(x, decimals=0):
    return np.round(x, decimals) if x.dtype.kind == "f" else x.copy()


def _diag_embed_ref(x, diagonal=0):
    return np.diag(x, diagonal)


def _narrow_ref(x, dim, start, length):
    d = dim % x.ndim
    start = start + x.shape[d] if start < 0 else start
    return x[(slice(None),) * d + (slice(start, start + length),)]


def _unflatten_ref(x, dim, sizes):
    d = dim % x.ndim
    return x.reshape(x.shape[:d] + tuple(sizes) + x.shape[d + 1:])


def _tensor_split_ref(x, indices_or_sections, dim=0):
    return tuple(np.array_split(x, indices_or_sections, axis=dim))


def _elemshape_ops() -> List[OpInfo]:
    sq = rand(3, 3)
    x34 = rand(3, 4)
    return [
        OpInfo("round", dg.round, [
            Sample("f64", (rand(2, 3, low=-3, high=3),)),
            Sample("f64_halves", (_HALVES,), fd=False),
            Sample("f64_decimals", (_HALVES,), {"decimals": 2}, fd=False),
            Sample("f64_neg_decimals", (np.array([125.0, 135.0, 1234.5, -15.0, 14.9]),),
                   {"decimals": -1}, fd=False),
            Sample("f32", (np.array([0.5, 1.5, -2.5, 3.7, 1.2345], F32),), {"decimals": 1}),
            Sample("f64_0d", (zero_d(2.5),), fd=False),
            Sample("i64", (ints(2, 3),))], _round_ref, differentiable=True, errors=[
                ErrorCase("int_decimals", (ints(3),), {"decimals": 1}, dg.DTypeError,
                          "needs a floating-point"),
                ErrorCase("bool", (bools(2),), {}, dg.DTypeError, "found bool"),
                ErrorCase("float_decimals", (rand(2),), {"decimals": 1.5}, TypeError,
                          "decimals must be an int")]),
        OpInfo("nan_to_num", dg.nan_to_num, [
            Sample("f64", (np.array([np.nan, np.inf, -np.inf, 1.5, -2.0]),), fd=False),
            Sample("f64_values", (np.array([[np.nan, np.inf], [-np.inf, 0.25]]),),
                   {"nan": 1.0, "posinf": 9.0, "neginf": -9.0}, fd=False),
            Sample("f64_finite", (rand(2, 3),), {"nan": 2.0}),
            Sample("f32", (np.array([np.nan, np.inf, -np.inf, 3.0], F32),)),
            Sample("f16", (np.array([np.nan, np.inf, -np.inf, 3.0], F16),), {"neginf": -1.0}),
            Sample("i64", (ints(3),), {"nan": 1.5}), Sample("bool", (bools(3),))],
            lambda x, nan=0.0, posinf=None, neginf=None: np.nan_to_num(
                x, nan=nan, posinf=posinf, neginf=neginf),
            differentiable=True, errors=[
                ErrorCase("tensor_nan", (rand(2),), {"nan": rand(2)}, TypeError,
                          "nan must be a Python number")]),
        OpInfo("lerp", dg.lerp, [
            Sample("f64_scalar", (rand(2, 3), rand(2, 3), 0.3)),
            Sample("f64_tensor", (rand(2, 3), rand(2, 3), rand(2, 3, low=-0.5, high=1.5))),
            Sample("f64_bcast", (rand(2, 1), rand(3), rand(2, 3))),
            Sample("f64_int_weight", (rand(3), rand(3), 2)),
            Sample("f32", (rand(4, dtype=F32), rand(4, dtype=F32), 0.75))],
            lambda a, b, w: a + w * (b - a), differentiable=True, errors=[
                ErrorCase("dtypes", (rand(2, dtype=F32), rand(2), 0.5), {}, dg.DTypeError,
                          "expected dtype float32 for end"),
                ErrorCase("weight_dtype", (rand(2), rand(2), rand(2, dtype=F32)), {},
                          dg.DTypeError, "for weight"),
                ErrorCase("int", (ints(2), ints(2), 0.5), {}, dg.DTypeError,
                          "floating-point input"),
                ErrorCase("bcast", (rand(2), rand(3), 0.5), {}, dg.ShapeError,
                          "cannot be broadcast")]),
        OpInfo("xlogy", dg.xlogy, [
            Sample("f64", (rand(2, 3), pos(2, 3))),
            Sample("f64_special", (np.array([0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0]),
                                   np.array([0.0, np.nan, -1.0, 0.0, 3.0, np.inf, 2.0])),
                   fd=False),
            Sample("f64_bcast", (rand(2, 1), pos(3))),
            Sample("f64_scalar_left", (2.0, pos(3))),
            Sample("f32", (rand(3, dtype=F32), pos(3, dtype=F32))),
            Sample("i64", (ints(3, low=0, high=3), ints(3, low=1, high=4)), dtype=F32)],
            _xlogy_ref, differentiable=True, binary=True,
            make_input=lambda rng, shape: np.asarray(rng.uniform(0.5, 2.0, size=shape))),
    ] + [
        OpInfo(name, getattr(dg, name), _shift_samples(), _shift_ref(name.endswith("left_shift")),
               errors=_shift_errors(name), binary=True,
               make_input=lambda rng, shape: rng.integers(-40, 40, size=shape))
        for name in ("bitwise_left_shift", "bitwise_right_shift")
    ] + [
        OpInfo("flip", dg.flip, [
            Sample("two", (rand(2, 3, 4), (0, 2))), Sample("int", (rand(2, 3), -1)),
            Sample("none", (rand(3), ())), Sample("i64", (ints(2, 3), [1]))],
            lambda x, dims: np.flip(x, axis=dims) if dims != () else x,
            differentiable=True, errors=[
                ErrorCase("twice", (rand(2, 3), (0, -2)), {}, dg.ShapeError,
                          "more than once"),
                ErrorCase("range", (rand(2, 3), 2), {}, dg.ShapeError, "out of range")]),
        OpInfo("fliplr", dg.fliplr, [Sample("f64", (rand(2, 3, 2),))], np.fliplr,
               differentiable=True, errors=[
                   ErrorCase("1d", (rand(3),), {}, dg.ShapeError, "at least 2 dims")]),
        OpInfo("flipud", dg.flipud, [Sample("f64", (rand(3, 2),))], np.flipud,
               differentiable=True, errors=[
                   ErrorCase("0d", (rand(),), {}, dg.ShapeError, "at least 1 dim")]),
        OpInfo("roll", dg.roll, [
            Sample("flat", (rand(3, 4), 5)),
            Sample("dims", (rand(3, 4), (1, -2), (0, 1))),
            Sample("wrap", (rand(3, 4), 7, 1)), Sample("neg", (rand(5,), -2, 0)),
            Sample("i64", (ints(2, 3), 1, -1))],
            lambda x, shifts, dims=None: np.roll(x, shifts, axis=dims), differentiable=True,
            errors=[ErrorCase("lengths", (rand(2, 3), (1, 2), (0,)), {}, dg.ShapeError,
                              "same length")]),
        OpInfo("repeat_interleave", dg.repeat_interleave, [
            Sample("flat", (rand(2, 3), 2)),
            Sample("dim", (rand(2, 3), 3), {"dim": 1}),
            Sample("counts", (rand(2, 3), [1, 0, 2]), {"dim": 1}),
            Sample("counts_dim0", (ints(3, 2), [2, 1, 1]), {"dim": 0}),
            Sample("0d", (rand(), 3))],
            lambda x, repeats, dim=None: np.repeat(x, repeats, axis=dim),
            differentiable=True, errors=[
                ErrorCase("length", (rand(2, 3), [1, 2]), {"dim": 1}, dg.ShapeError,
                          "same size as input"),
                ErrorCase("negative", (rand(2), -1), {}, ValueError, "non-negative")]),
        OpInfo("tile", dg.tile, [
            Sample("short", (rand(2, 3), (2,))), Sample("long", (rand(2, 3), (2, 1, 3))),
            Sample("i64", (ints(3), (2, 2)))],
            np.tile, differentiable=True, errors=[
                ErrorCase("negative", (rand(2), (-1,)), {}, ValueError, "non-negative")]),
    ] + [
        OpInfo(name, getattr(dg, name), [
            Sample("f64", (x34,)), Sample("above", (x34, 1)), Sample("below", (x34, -1)),
            Sample("batched", (rand(2, 3, 3),)), Sample("i64", (ints(3, 3),)),
            Sample("bool", (bools(2, 3), 1))],
            getattr(np, name), differentiable=True, errors=[
                ErrorCase("1d", (rand(3),), {}, dg.ShapeError, "at least 2 dims")])
        for name in ("tril", "triu")
    ] + [
        OpInfo("diagonal", dg.diagonal, [
            Sample("f64", (x34,)), Sample("offset", (x34, 1)), Sample("neg", (x34, -2)),
            Sample("empty", (x34, 5)), Sample("dims", (rand(2, 3, 4), 0, 1, 2)),
            Sample("dims_neg", (rand(2, 3, 4), 1, -1, 0)), Sample("i64", (ints(3, 3),))],
            lambda x, offset=0, dim1=0, dim2=1: np.diagonal(x, offset, dim1, dim2),
            differentiable=True, errors=[
                ErrorCase("same", (x34, 0, 1, 1), {}, dg.ShapeError, "cannot be the same")]),
        OpInfo("diag", dg.diag, [
            Sample("vec", (rand(3),)), Sample("vec_up", (rand(3), 1)),
            Sample("vec_down", (rand(3), -2)), Sample("mat", (x34,)),
            Sample("mat_up", (x34, 1)), Sample("i64_vec", (ints(2),)),
            Sample("bool_vec", (bools(3), 1))],
            _diag_embed_ref, differentiable=True, errors=[
                ErrorCase("3d", (rand(2, 2, 2),), {}, dg.ShapeError, "1-D or 2-D")]),
        OpInfo("trace", dg.trace, [
            Sample("f64", (x34,)), Sample("square", (sq,)),
            Sample("i32", (ints(3, 3, dtype=I32),), dtype=I64)],
            np.trace, differentiable=True, errors=[
                ErrorCase("3d", (rand(2, 2, 2),), {}, dg.ShapeError, "2-D")]),
        OpInfo("outer", dg.outer, [
            Sample("f64", (rand(3), rand(4))),
            Sample("i64_f32", (ints(2), rand(3, dtype=F32)), dtype=F32)],
            np.outer, differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 2), rand(2)), {}, dg.ShapeError, "1-D")]),
        OpInfo("cross", dg.cross, [
            Sample("last", (rand(2, 3), rand(2, 3)), {"dim": 1}),
            Sample("first", (rand(3, 2), rand(3, 2)), {"dim": 0}),
            Sample("bcast", (rand(1, 3), rand(4, 3)), {"dim": -1}),
            Sample("i64", (ints(2, 3), ints(2, 3)), {"dim": -1})],
            lambda a, b, dim: np.cross(a, b, axis=dim), differentiable=True, errors=[
                ErrorCase("size", (rand(2, 4), rand(2, 4)), {"dim": 1}, dg.ShapeError,
                          "size 3"),
                ErrorCase("dtype", (rand(3), rand(3, dtype=F32)), {"dim": 0}, dg.DTypeError,
                          "one dtype")]),
        OpInfo("meshgrid", dg.meshgrid, [
            Sample("ij", (rand(2), rand(3)), {"indexing": "ij"}),
            Sample("xy", (rand(2), rand(3)), {"indexing": "xy"}),
            Sample("three_xy", (rand(2), rand(3), rand(4)), {"indexing": "xy"}),
            Sample("0d", (rand(), rand(2)), {"indexing": "ij"})],
            lambda *ts, indexing: tuple(np.meshgrid(*ts, indexing=indexing)),
            differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 2), rand(2)), {"indexing": "ij"}, dg.ShapeError,
                          "0-D or 1-D"),
                ErrorCase("indexing", (rand(2),), {"indexing": "yx"}, ValueError,
                          "'ij' or 'xy'")]),
        OpInfo("narrow", dg.narrow, [
            Sample("f64", (rand(4, 3), 0, 1, 2)), Sample("neg", (rand(4, 3), -1, -2, 2)),
            Sample("empty", (rand(4, 3), 0, 4, 0))],
            _narrow_ref, differentiable=True, errors=[
                ErrorCase("exceeds", (rand(4), 0, 3, 2), {}, dg.ShapeError, "exceeds"),
                ErrorCase("start", (rand(4), 0, 6, 0), {}, dg.ShapeError, "out of range")]),
        OpInfo("unflatten", dg.unflatten, [
            Sample("f64", (rand(2, 6), 1, (2, 3))), Sample("hole", (rand(6, 2), 0, (-1, 2))),
            Sample("neg_dim", (rand(2, 6), -1, [3, 1, 2]))],
            _unflatten_ref, differentiable=True, errors=[
                ErrorCase("product", (rand(2, 6), 1, (4, 2)), {}, dg.ShapeError,
                          "do not multiply")]),
        OpInfo("movedim", dg.movedim, [
            Sample("one", (rand(2, 3, 4), 0, -1)),
            Sample("two", (rand(2, 3, 4), (0, 1), (2, 0)))],
            np.moveaxis, differentiable=True, errors=[
                ErrorCase("repeat", (rand(2, 3), (0, 1), (0, 0)), {}, dg.ShapeError,
                          "must not repeat")]),
        OpInfo("tensor_split", dg.tensor_split, [
            Sample("sections", (rand(7, 2), 3)),
            Sample("indices", (rand(7, 2), [1, 5, 3, 9])),
            Sample("dim", (rand(2, 5), 2), {"dim": 1})],
            _tensor_split_ref, differentiable=True, errors=[
                ErrorCase("zero", (rand(4), 0), {}, ValueError, "positive")]),
        OpInfo("einsum", dg.einsum, [
            Sample("matmul", ("ij,jk->ik", rand(2, 3), rand(3, 4))),
            Sample("diag", ("ii->i", sq)), Sample("trace", ("ii", rand(3, 3))),
            Sample("outer", ("i,j->ij", rand(2), rand(3))),
            Sample("implicit", ("ba", rand(2, 3))),
            Sample("ellipsis", ("...ij,...jk", rand(2, 2, 3), rand(3, 4))),
            Sample("sum_all", ("bij->", rand(2, 2, 3))),
            Sample("three", ("ij,jk,k->i", rand(2, 3), rand(3, 2), rand(2))),
            Sample("repeated_in_two", ("iij,j->i", rand(2, 2, 3), rand(3))),
            Sample("f32", ("bi,bi->b", rand(2, 3, dtype=F32), rand(2, 3, dtype=F32)))],
            lambda eq, *ops: np.einsum(eq, *ops), tol=dict(LOOSE_TOL), differentiable=True,
            errors=[
                ErrorCase("count", ("ij,jk->ik", rand(2, 3)), {}, ValueError,
                          "names 2 operands"),
                ErrorCase("dtype", ("i,i", rand(2), rand(2, dtype=F32)), {}, dg.DTypeError,
                          "one dtype"),
                ErrorCase("dims", ("ij", rand(2)), {}, dg.ShapeError, "has 1 dims"),
                ErrorCase("sizes", ("ij,jk", rand(2, 3), rand(2, 4)), {}, dg.ShapeError,
                          "does not broadcast")]),
    ]


OPS += _elemshape_ops()

# -- scans, sorting, selection, norms, closeness -----------------------------------------------
def _as_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


def _scan_ref(np_fn):
    def ref(x, dim, dtype=None):
        y = _as_1d(x if dtype is None else x.astype(dtype))
        out_dt = y.dtype if y.dtype.kind == "f" else np.dtype(I64)
        return np_fn(y, axis=dim, dtype=out_dt).reshape(x.shape)
    return ref


def _cumext_ref(largest):
    def ref(x, dim):
        xm = np.moveaxis(_as_1d(x), dim, -1)
        vals, idx = np.empty_like(xm), np.zeros(xm.shape, I64)
        for row in np.ndindex(xm.shape[:-1]):
            best, at = None, 0
            for k, v in enumerate(xm[row]):
                if best is None or np.isnan(v) or (v >= best if largest else v <= best):
                    if not (best is not None and np.isnan(best) and not np.isnan(v)):
                        best, at = v, k
                vals[row + (k,)], idx[row + (k,)] = best, at
        back = [np.moveaxis(a, -1, dim).reshape(x.shape) for a in (vals, idx)]
        return tuple(back)
    return ref


def _sort_ref(x, dim=-1, descending=False, stable=False):
    y = _as_1d(x)
    idx = np.argsort(-y if descending else y, axis=dim, kind="stable")
    return (np.take_along_axis(y, idx, axis=dim).reshape(x.shape), idx.reshape(x.shape))


def _topk_ref(x, k, dim=-1, largest=True, sorted=True):
    v, i = _sort_ref(x, dim, descending=largest)
    if x.ndim == 0:
        return v, i
    take = np.arange(k)
    return np.take(v, take, axis=dim), np.take(i, take, axis=dim)


def _kth_ref(x, k, dim=-1, keepdim=False):
    v, i = _sort_ref(x, dim)
    if x.ndim == 0:
        return v, i
    v, i = np.take(v, [k - 1], axis=dim), np.take(i, [k - 1], axis=dim)
    return (v, i) if keepdim else (np.squeeze(v, dim), np.squeeze(i, dim))


def _median_ref(x, dim=None, keepdim=False):
    if dim is None:
        flat = np.sort(x.reshape(-1))
        return np.asarray(flat[(flat.size - 1) // 2])
    n = _as_1d(x).shape[dim]
    return _kth_ref(x, (n - 1) // 2 + 1, dim, keepdim)


def _mode_ref(x, dim=-1, keepdim=False):
    xm = np.moveaxis(_as_1d(x), dim, -1)
    vals, idx = np.empty(xm.shape[:-1], x.dtype), np.zeros(xm.shape[:-1], I64)
    for row in np.ndindex(xm.shape[:-1]):
        u, counts = np.unique(xm[row], return_counts=True)
        v = u[np.argmax(counts)]           # the smallest of the most frequent
        vals[row], idx[row] = v, np.flatnonzero(xm[row] == v)[-1]
    if x.ndim == 0:
        return vals.reshape(()), idx.reshape(())
    if keepdim:
        vals, idx = np.expand_dims(vals, dim), np.expand_dims(idx, dim)
    return vals, idx


def _vector_norm_ref(x, ord=2, dim=None, keepdim=False, dtype=None):
    x = x if dtype is None else x.astype(dtype)
    axis = None if dim is None else dim
    a = np.abs(x)
    if ord == math.inf:
        out = np.amax(a, axis=axis, keepdims=keepdim)
    elif ord == -math.inf:
        out = np.amin(a, axis=axis, keepdims=keepdim)
    elif ord == 0:
        out = np.sum(a != 0, axis=axis, keepdims=keepdim).astype(x.dtype)
    else:
        out = np.sum(a ** ord, axis=axis, keepdims=keepdim) ** (1.0 / ord)
    return np.asarray(out, dtype=x.dtype)


def _norm_ref(x, p="fro", dim=None, keepdim=False, dtype=None):
    if p == "nuc":
        dims = (0, 1) if dim is None else dim
        out = np.linalg.norm(x, "nuc", axis=dims, keepdims=keepdim)
        return np.asarray(out)
    return _vector_norm_ref(x, 2 if p == "fro" else p, dim, keepdim, dtype)


def _matrix_norm_ref(x, ord="fro", dim=(-2, -1), keepdim=False, dtype=None):
    return np.asarray(np.linalg.norm(x, ord, axis=dim, keepdims=keepdim))


def _no_samples_graph_error(name, args):
    return [ErrorCase("graph_mode", args, {}, dg.GraphError, name)]


def _reduce_scan_sort() -> List[OpInfo]:
    from duograph import linalg as L
    with_zeros = rand(3, 4)
    with_zeros[0, 1] = with_zeros[2, 0] = with_zeros[2, 3] = 0.0
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 1.0], [0.5, 0.5, 2.0, 2.0, 0.5]])
    nans = np.array([[1.0, np.nan, 3.0, -1.0], [2.0, 0.0, np.nan, np.nan]])
    scan_errors = [ErrorCase("dim_range", (rand(2, 3), 2), {}, dg.ShapeError, "out of range")]
    mat = rand(2, 3, 4)
    return [
        OpInfo("cumsum", dg.cumsum, [
            Sample("dim1", (rand(2, 3, 4), 1)), Sample("neg", (rand(3, 4), -1)),
            Sample("f64_0d", (rand(), 0)), Sample("f32", (rand(5, dtype=F32), 0)),
            Sample("i32_to_i64", (ints(2, 3, dtype=I32), 1)), Sample("bool", (bools(4, 2), 0)),
            Sample("dtype", (ints(2, 3, dtype=I32), 0), {"dtype": F64})],
            _scan_ref(np.cumsum), differentiable=True, errors=scan_errors),
        OpInfo("cumprod", dg.cumprod, [
            Sample("dim1", (rand(2, 3, 4), 1)), Sample("zeros", (with_zeros, 1)),
            Sample("zeros_dim0", (with_zeros, 0)), Sample("f64_0d", (rand(), -1)),
            Sample("i32_to_i64", (ints(2, 3, dtype=I32, low=-3, high=4), 1))],
            _scan_ref(np.cumprod), differentiable=True, errors=scan_errors),
        OpInfo("cummax", dg.cummax, [
            Sample("dim1", (distinct(3, 5), 1)), Sample("dim0", (distinct(4, 2, 3), 0)),
            Sample("ties", (ties, 1), fd=False), Sample("nan", (nans, 1), fd=False),
            Sample("i64", (ints(3, 4), 1)), Sample("f64_0d", (rand(), 0))],
            _cumext_ref(True), differentiable=True, errors=scan_errors),
        OpInfo("cummin", dg.cummin, [
            Sample("dim1", (distinct(3, 5), 1)), Sample("ties", (ties, 1), fd=False),
            Sample("nan", (nans, 1), fd=False), Sample("i32", (ints(3, 4, dtype=I32), 0))],
            _cumext_ref(False), differentiable=True, errors=scan_errors),
        OpInfo("logcumsumexp", dg.logcumsumexp, [
            Sample("dim1", (rand(2, 3, 4), 1)), Sample("neg", (rand(3, 4, low=-3, high=3), -1)),
            Sample("f32", (rand(5, dtype=F32), 0)), Sample("f64_0d", (rand(), 0))],
            lambda x, dim: np.log(np.cumsum(np.exp(_as_1d(x)), axis=dim)).reshape(x.shape),
            differentiable=True, tol=dict(LOOSE_TOL), errors=scan_errors + [
                ErrorCase("int", (ints(3), 0), {}, dg.DTypeError, "floating-point")]),
        OpInfo("sort", dg.sort, [
            Sample("last", (distinct(3, 4),)), Sample("dim0_desc", (distinct(3, 4), 0, True)),
            Sample("ties_stable", (ties,), {"stable": True}, fd=False),
            Sample("i32", (ints(2, 5, dtype=I32),), {"dim": 1, "stable": True}),
            Sample("f32_0d", (zero_d(1.5, F32),))],
            _sort_ref, differentiable=True, errors=scan_errors),
        OpInfo("argsort", dg.argsort, [
            Sample("last", (distinct(3, 4),)), Sample("desc", (distinct(2, 5), 1, True)),
            Sample("ties", (ties, 1), {"stable": True})],
            lambda *a, **k: _sort_ref(*a, **k)[1]),
        OpInfo("topk", dg.topk, [
            Sample("k2", (distinct(3, 5), 2)), Sample("smallest", (distinct(4, 3), 2, 0, False)),
            Sample("all", (distinct(2, 4), 4)), Sample("k0", (distinct(2, 4), 0)),
            Sample("i64", (ints(2, 6), 3), {"dim": -1})],
            _topk_ref, differentiable=True, errors=[
                ErrorCase("k_range", (rand(2, 3), 4), {}, dg.ShapeError, "out of range")]),
        OpInfo("kthvalue", dg.kthvalue, [
            Sample("k2", (distinct(3, 5), 2)), Sample("dim0_keepdim", (distinct(4, 3), 4, 0, True)),
            Sample("i32", (ints(2, 5, dtype=I32), 3))],
            _kth_ref, differentiable=True, errors=[
                ErrorCase("k_range", (rand(2, 3), 0), {}, dg.ShapeError, "out of range")]),
        OpInfo("median", dg.median, [
            Sample("all", (distinct(3, 5),)), Sample("all_even", (distinct(2, 3),)),
            Sample("dim", (distinct(3, 5), 1)),
            Sample("dim_even_keepdim", (distinct(4, 3), 0, True)),
            Sample("i64_dim", (ints(3, 4), 1)), Sample("f32_all", (distinct(5, dtype=F32),))],
            _median_ref, differentiable=True, errors=[
                ErrorCase("empty_dim", (rand(2, 0), 1), {}, dg.ShapeError, "empty")]),
        OpInfo("mode", dg.mode, [
            Sample("ties", (ties,), fd=False), Sample("ties_keepdim", (ties, 0, True), fd=False),
            Sample("i64", (ints(3, 7, low=0, high=3),))],
            _mode_ref, differentiable=True),
        OpInfo("norm", dg.norm, [
            Sample("fro", (rand(2, 3, 4),)), Sample("p1_dim", (away(3, 4), 1, 1)),
            Sample("p3", (rand(3, 4), 3, (0, 1), True)), Sample("nuc", (rand(3, 4), "nuc")),
            Sample("f32", (rand(6, dtype=F32),))],
            _norm_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("int", (ints(3),), {}, dg.DTypeError, "floating-point")]),
        OpInfo("vector_norm", L.vector_norm, [
            Sample("all", (rand(2, 3),)), Sample("inf_dim", (distinct(3, 4), math.inf, 1)),
            Sample("ninf", (distinct(3, 4), -math.inf, -1, True)),
            Sample("half", (away(3, 4), 0.5, 0)), Sample("p3", (rand(4, 3), 3, (0, 1))),
            Sample("ord0", (rand(3, 4), 0, 1))],
            _vector_norm_ref, differentiable=True, tol=dict(LOOSE_TOL)),
        OpInfo("matrix_norm", L.matrix_norm, [
            Sample("fro", (mat,)), Sample("nuc", (mat, "nuc")), Sample("two", (mat, 2)),
            Sample("ninf_keepdim", (mat, -math.inf, (0, 2), True)), Sample("one", (mat, 1))],
            _matrix_norm_ref, differentiable=True, tol=dict(LOOSE_TOL)),
        OpInfo("svdvals", L.svdvals, [
            Sample("mat", (rand(3, 4),)), Sample("batch", (rand(2, 4, 3),))],
            lambda x: np.linalg.svd(x, compute_uv=False), differentiable=True,
            tol=dict(LOOSE_TOL), errors=[
                ErrorCase("vector", (rand(3),), {}, dg.ShapeError, "svdvals: expected a matrix")]),
        OpInfo("svd", L.svd, [
            Sample("mat", (rand(3, 4), False)), Sample("square", (rand(3, 3),)),
            Sample("batch", (rand(2, 4, 3),), {"full_matrices": False})],
            lambda x, full_matrices=True: tuple(np.linalg.svd(x, full_matrices=False)),
            differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("vector", (rand(3),), {}, dg.ShapeError, "matrix"),
                ErrorCase("int", (ints(3, 3),), {}, dg.DTypeError, "float32 or float64")]),
        OpInfo("isclose", dg.isclose, [
            Sample("f64", (rand(3, 4), rand(3, 4))),
            Sample("near", (np.array([1.0, 2.0, np.inf, np.nan]),
                            np.array([1.0 + 1e-9, 2.1, np.inf, np.nan])), {"equal_nan": True}),
            Sample("i64", (ints(3, 4), ints(3, 4)), {"atol": 1.0})],
            lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: np.isclose(
                a, b, rtol, atol, equal_nan), errors=[
                ErrorCase("dtypes", (ints(3), rand(3)), {}, dg.DTypeError, "same dtype")]),
        # Python bools and data-dependent shapes: eager only (test_reductions_torch.py); in
        # graph mode they are clear errors
        OpInfo("unique", dg.unique, [], None,
               errors=_no_samples_graph_error("unique", (rand(4),))),
        OpInfo("allclose", dg.allclose, [], None,
               errors=_no_samples_graph_error("allclose", (rand(4), rand(4)))),
        OpInfo("equal", dg.equal, [], None,
               errors=_no_samples_graph_error("equal", (rand(4), rand(4)))),
    ]


OPS += _reduce_scan_sort()


# -- control flow: ops that take functions ------------------------------------------------------
# The bodies are module-level functions (passed as is, like any non-array argument); the arrays
# are the operands, so each op runs through the generic checks (graph mode vs numpy, eager vs
# graph, dg.compile, gradients against finite differences, serialisation, export).
def _cf_true(a, b):
    return dg.sin(a) * b


def _cf_false(a, b):
    return a * a - b


def _cf_cond_ref(pred, true_fn, false_fn, a, b):
    return np.sin(a) * b if bool(pred) else a * a - b


def _cf_pair_true(a, b):
    return a + b, dg.exp(a * 0.5), b * 2.0


def _cf_pair_false(a, b):
    return a - b, dg.cos(b), a * b


def _cf_pair_ref(pred, true_fn, false_fn, a, b):
    if bool(pred):
        return a + b, np.exp(a * 0.5), b * 2.0
    return a - b, np.cos(b), a * b


def _cf_rnn_step(h, x):
    h = dg.tanh(h * 0.5 + x)
    return h, h * 2.0


def _cf_scan_ref(fn, init, xs, length=None, reverse=False, checkpoint=False):
    h, ys = init, [None] * len(xs)
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = np.tanh(h * 0.5 + xs[t])
        ys[t] = h * 2.0
    return h, np.stack(ys).astype(init.dtype)


def _cf_count_cond(state):
    return state[0] < 3


def _cf_count_body(state):
    i, v = state
    return i + 1, v * dg.cos(v) + 0.25


def _cf_count_ref(cond_fn, body_fn, init, max_iterations=None):
    i, v = init
    trips = 0
    while i < 3 and (max_iterations is None or trips < max_iterations):
        i, v, trips = i + 1, v * np.cos(v) + 0.25, trips + 1
    return np.asarray(i), v


def _cf_norm_cond(v):
    return dg.sum(v * v) < 6.0


def _cf_norm_body(v):
    return v * 1.5 + 0.1


def _cf_norm_ref(cond_fn, body_fn, init, max_iterations=None):
    v, trips = init, 0
    while np.sum(v * v) < 6.0 and (max_iterations is None or trips < max_iterations):
        v, trips = v * 1.5 + 0.1, trips + 1
    return v


def _cf_fori_body(i, v):
    return v * dg.cos(v) + i


def _cf_fori_ref(lower, upper, body_fun, init_val):
    v = init_val
    for i in range(lower, upper):
        v = v * np.cos(v) + i
    return v.astype(init_val.dtype)


def _control_flow() -> List[OpInfo]:
    a, b = rand(3), rand(3)
    # a data-dependent trip count kept away from its switching points: |v|^2 after each
    # trip is far from the bound 6 (checked by the finite differences themselves)
    norm0 = np.array([0.3, -0.4, 0.2])
    return [
        OpInfo("cond", dg.cond, [
            Sample("true", (np.array(True), _cf_true, _cf_false, a, b)),
            Sample("false", (np.array(False), _cf_true, _cf_false, a, b)),
            Sample("tuple", (np.array(True), _cf_pair_true, _cf_pair_false, a, b)),
            Sample("tuple_false", (np.array(False), _cf_pair_true, _cf_pair_false, a, b)),
            Sample("f32", (np.array(True), _cf_true, _cf_false, rand(2, 3, dtype=F32),
                           rand(2, 3, dtype=F32)))],
            lambda pred, t, f, a, b: (_cf_pair_ref if t is _cf_pair_true else _cf_cond_ref)(
                pred, t, f, a, b), differentiable=True, grad_args=(1, 2), errors=[
                ErrorCase("vector_pred", (np.array([True, False]), _cf_true, _cf_false, a, b),
                          {}, dg.ShapeError, "predicate must be a scalar")]),
        OpInfo("scan", dg.scan, [
            Sample("forward", (_cf_rnn_step, rand(3), rand(5, 3))),
            Sample("reverse", (_cf_rnn_step, rand(3), rand(4, 3)), {"reverse": True}),
            Sample("checkpoint", (_cf_rnn_step, rand(3), rand(9, 3)), {"checkpoint": True}),
            Sample("f32", (_cf_rnn_step, rand(2, dtype=F32), rand(4, 2, dtype=F32)))],
            _cf_scan_ref, differentiable=True, errors=[
                ErrorCase("length", (_cf_rnn_step, rand(3), rand(5, 3)), {"length": 4},
                          dg.ShapeError, "length=4")]),
        OpInfo("while_loop", dg.while_loop, [
            Sample("counter", (_cf_count_cond, _cf_count_body, (np.array(0), rand(3))),
                   {"max_iterations": 5}),
            Sample("hits_bound", (_cf_count_cond, _cf_count_body, (np.array(0), rand(3))),
                   {"max_iterations": 2}),
            Sample("data_dependent", (_cf_norm_cond, _cf_norm_body, norm0),
                   {"max_iterations": 10})],
            lambda c, b, init, max_iterations=None: (
                _cf_count_ref if c is _cf_count_cond else _cf_norm_ref)(
                c, b, init, max_iterations), differentiable=True, errors=[
                ErrorCase("not_scalar", (lambda v: v > 0, _cf_norm_body, rand(3)), {},
                          dg.GraphError, "must return one scalar")]),
        OpInfo("fori_loop", dg.fori_loop, [
            Sample("static", (0, 3, _cf_fori_body, rand(3))),
            Sample("empty", (2, 2, _cf_fori_body, rand(2, 2))),
            Sample("f32", (1, 4, _cf_fori_body, rand(3, dtype=F32)))],
            _cf_fori_ref, differentiable=True),
    ]


OPS += _control_flow()


def _activation_backward() -> List[OpInfo]:
    """tanh's and sigmoid's gradients as ops (not exported: their rules call them); their
    own vjps give the higher orders."""
    from duograph.graphlib.ops import elementwise as E

    def samples():
        return [Sample("f64", (rand(2, 3), rand(2, 3, low=-0.9, high=0.9))),
                Sample("f64_bcast", (rand(2, 1, 3), rand(4, 3, low=-0.9, high=0.9))),
                Sample("f64_scalar", (rand(2, 2), 0.5)),
                Sample("f32", (rand(3, dtype=F32), rand(3, dtype=F32, low=0.1, high=0.9)))]
    return [
        OpInfo("tanh_backward", E.tanh_backward, samples(), lambda g, y: g * (1 - y * y),
               differentiable=True),
        OpInfo("sigmoid_backward", E.sigmoid_backward, samples(),
               lambda g, y: g * y * (1 - y), differentiable=True),
    ]


OPS += _activation_backward()


def _activations() -> List[OpInfo]:
    """The activations with PyTorch's own gradient rules (graphlib/ops/activations.py; the
    nn.functional forms call them): samples away from the kinks for finite differences,
    and on them (fd=False) for the PyTorch oracle."""
    from duograph.graphlib.ops import activations as A

    def elu_ref(x, alpha=1.0, scale=1.0, input_scale=1.0):
        return np.where(x <= 0, np.expm1(np.minimum(x, 0) * input_scale) * alpha * scale,
                        x * scale)

    def kinks(*points):
        return Sample("at_kinks", (np.array(points),), fd=False)
    return [
        OpInfo("elu", A.elu, [
            Sample("f64", (away(2, 3),)),
            Sample("f64_selu", (away(3, 2),), {"alpha": A.SELU_ALPHA, "scale": A.SELU_SCALE}),
            Sample("f64_celu", (away(4),), {"alpha": 2.0, "input_scale": 0.5}),
            Sample("f32", (away(5, dtype=F32),), {"alpha": 0.5}), kinks(-1.0, 0.0, 0.5)],
            elu_ref, differentiable=True),
        OpInfo("hardtanh", A.hardtanh, [
            Sample("f64", (rand(2, 3, low=-0.9, high=0.9),)),
            Sample("f64_relu6", (np.array([-2.0, 0.5, 3.0, 5.5, 8.0]),),
                   {"min_val": 0.0, "max_val": 6.0}),
            Sample("f32", (rand(4, dtype=F32, low=-0.9, high=0.9),)),
            kinks(-2.0, -1.0, 0.0, 1.0, 2.0)],
            lambda x, min_val=-1.0, max_val=1.0: np.clip(x, min_val, max_val),
            differentiable=True),
        OpInfo("hardsigmoid", A.hardsigmoid, [
            Sample("f64", (rand(2, 3, low=-4, high=4) + 0.01,)),
            Sample("f32", (rand(4, dtype=F32, low=-2.5, high=2.5),)),
            kinks(-4.0, -3.0, 0.0, 3.0, 4.0)],
            lambda x: np.clip(x + 3, 0, 6) / 6, differentiable=True),
        OpInfo("hardswish", A.hardswish, [
            Sample("f64", (np.array([-5.0, -2.5, -0.5, 0.7, 2.9, 4.0]),)),
            Sample("f32", (rand(4, dtype=F32, low=-2.5, high=2.5),)),
            kinks(-4.0, -3.0, 0.0, 3.0, 4.0)],
            lambda x: x * np.clip(x + 3, 0, 6) / 6, differentiable=True),
        OpInfo("silu", A.silu, [
            Sample("f64", (rand(2, 3, low=-4, high=4),)),
            Sample("f64_extreme", (np.array([-800.0, -30.0, 0.0, 30.0, 800.0]),)),
            Sample("f32", (rand(4, dtype=F32, low=-4, high=4),))],
            lambda x: x * special.expit(x), differentiable=True),
        OpInfo("mish", A.mish, [
            Sample("f64", (rand(2, 3, low=-4, high=4),)),
            Sample("f64_extreme", (np.array([-800.0, -30.0, 0.0, 30.0, 800.0]),)),
            Sample("f32", (rand(4, dtype=F32, low=-4, high=4),))],
            lambda x: x * np.tanh(np.logaddexp(0, x)), differentiable=True),
    ]


OPS += _activations()

BY_NAME: Dict[str, OpInfo] = {op.name: op for op in OPS}
assert len(BY_NAME) == len(OPS), "duplicate OpInfo names"


def all_reduce_start_wait(x, op="sum"):
    """``all_reduce_wait(all_reduce_start([x]))``: the non-blocking all-reduce of ``x``."""
    from duograph.graphlib.ops import collectives as C
    return C.all_reduce_wait(C.all_reduce_start([x], op))


def _collectives() -> List[OpInfo]:
    """The collectives in a world of one rank (no process group): identities, so every
    generic test (eager vs graph, gradients, JSON, ONNX refusal) covers their plumbing; the
    multi-rank numbers are checked under mpiexec in test_distributed_graph.py."""
    from duograph.graphlib.ops import collectives as C

    def same(x, *args, **kwargs):
        return x
    return [
        OpInfo("all_reduce", C.all_reduce, [
            Sample("f64", (rand(2, 3),)), Sample("f64_avg", (rand(3),), {"op": "avg"}),
            Sample("f32", (rand(2, 2, dtype=F32),)),
            Sample("i64", (ints(4),))], same, differentiable=True, errors=[
            ErrorCase("avg_int", (ints(3),), {"op": "avg"}, dg.DTypeError, "float"),
            ErrorCase("bad_op", (rand(3),), {"op": "mean"}, ValueError, "op")]),
        OpInfo("all_gather", C.all_gather, [
            Sample("f64", (rand(2, 3),)), Sample("f32", (rand(4, dtype=F32),))], same,
            differentiable=True, errors=[
            ErrorCase("0d", (rand(),), {}, dg.ShapeError, "at least 1 dim")]),
        OpInfo("reduce_scatter", C.reduce_scatter, [
            Sample("f64", (rand(2, 3),)), Sample("f64_avg", (rand(4),), {"op": "avg"})], same,
            differentiable=True),
        OpInfo("broadcast", C.broadcast, [
            Sample("f64", (rand(2, 3),)), Sample("i32", (ints(3, dtype=I32),))], same,
            differentiable=True),
        OpInfo("reduce", C.reduce, [Sample("f64", (rand(2, 3),))], same, differentiable=True),
        # the non-blocking pair (start, then its wait): the flattened input
        OpInfo("all_reduce_start", all_reduce_start_wait, [
            Sample("f64", (rand(2, 3),)), Sample("f32_avg", (rand(4, dtype=F32),),
                                                 {"op": "avg"})],
            lambda x, op="sum": x.reshape(-1)),
    ]


OPS += _collectives()
BY_NAME = {op.name: op for op in OPS}


# -- torch.linalg: inverses, solvers, determinants and factorisations ---------------------------
def _well_conditioned(*shape, rng=None) -> np.ndarray:
    """Square matrices ``I * n + noise``: far from singular (finite differences stay
    accurate)."""
    n = shape[-1]
    return rand(*shape, rng=rng) + n * np.eye(n)


def _spd(*shape) -> np.ndarray:
    """Symmetric positive-definite matrices with well-separated eigenvalues."""
    a = rand(*shape)
    n = shape[-1]
    return a @ np.swapaxes(a, -1, -2) + np.diag(np.arange(1.0, n + 1.0) * 1.5)


def _sym(a):
    """The symmetric matrix LAPACK reads from ``a``'s lower triangle, written so that finite
    differences on a symmetric sample give the symmetric gradient PyTorch gives."""
    return (a + np.swapaxes(a, -1, -2)) / 2


def _solve_ref(a, b, left=True):
    if not left:
        return np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)),
                           -1, -2)
    if b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]):
        return np.linalg.solve(a, b[..., None])[..., 0]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.linalg.solve(np.broadcast_to(a, batch + a.shape[-2:]),
                           np.broadcast_to(b, batch + b.shape[-2:]))


def _cholesky_ref(a, upper=False):
    low = np.linalg.cholesky(_sym(a))
    return np.swapaxes(low, -1, -2) if upper else low


def _qr_ref(a, mode="reduced"):
    if mode == "r":
        return np.empty((0,), a.dtype), np.linalg.qr(a, mode="r")
    return tuple(np.linalg.qr(a, mode=mode))


def _pinv_ref(a, atol=None, rtol=None, hermitian=False, rcond=None):
    rtol = rcond if rtol is None else rtol
    if rtol is None:
        rtol = np.finfo(a.dtype).eps * max(a.shape[-2:]) if not atol else 0.0
    u, s, vh = np.linalg.svd(_sym(a) if hermitian else a, full_matrices=False)
    cut = np.maximum(atol or 0.0, rtol * s.max(-1, keepdims=True))
    sinv = np.where(s > cut, 1 / s, 0)
    return np.swapaxes(vh, -1, -2) * sinv[..., None, :] @ np.swapaxes(u, -1, -2)


def _lstsq_ref(a, b, rcond=None, driver=None):
    driver = driver or "gelsy"
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    x, res, rank, sv = np.linalg.lstsq(a, b2, rcond)
    m, n = a.shape
    res = res if m > n and driver != "gelsy" else np.empty((0,), a.dtype)
    return (x[:, 0] if vector else x, res,
            np.asarray(rank, np.int64) if driver != "gels" else np.empty((0,), np.int64),
            sv if driver in ("gelsd", "gelss") else np.empty((0,), a.dtype))


def _linalg_solvers() -> List[OpInfo]:
    from duograph import linalg as L
    sq, bad = _well_conditioned(2, 3, 3), [
        ErrorCase("not_square", (rand(2, 3),), {}, dg.ShapeError, "square matrices"),
        ErrorCase("int", (ints(3, 3),), {}, dg.DTypeError, "floating point"),
        ErrorCase("vector", (rand(3),), {}, dg.ShapeError, "at least 2 dimensions")]
    spd = _spd(3, 3)
    return [
        OpInfo("linalg_inv", L.inv, [
            Sample("mat", (_well_conditioned(3, 3),)), Sample("batch", (sq,)),
            Sample("f32", (_well_conditioned(4, 4).astype(F32),))],
            np.linalg.inv, differentiable=True, tol=dict(LOOSE_TOL), errors=bad),
        OpInfo("linalg_solve", L.solve, [
            Sample("mat", (_well_conditioned(3, 3), rand(3, 2))),
            Sample("vector", (_well_conditioned(3, 3), rand(3))),
            Sample("batch_vector", (sq, rand(2, 3))),
            Sample("broadcast", (_well_conditioned(3, 3), rand(2, 3, 2))),
            Sample("right", (sq, rand(2, 4, 3)), {"left": False})],
            _solve_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("sizes", (_well_conditioned(3, 3), rand(4, 2)), {}, dg.ShapeError,
                          "Incompatible shapes"),
                ErrorCase("not_square", (rand(2, 3), rand(2, 2)), {}, dg.ShapeError,
                          "square matrices")]),
        OpInfo("linalg_det", L.det, [
            Sample("mat", (_well_conditioned(3, 3),)), Sample("batch", (rand(2, 4, 4),)),
            Sample("f32", (rand(3, 3, dtype=F32),))],
            lambda a: np.asarray(np.linalg.det(a)), differentiable=True,
            tol=dict(LOOSE_TOL), errors=bad),
        OpInfo("linalg_slogdet", L.slogdet, [
            Sample("mat", (rand(3, 3),)), Sample("batch", (rand(2, 4, 4),))],
            lambda a: tuple(np.asarray(v) for v in np.linalg.slogdet(a)), differentiable=True,
            tol=dict(LOOSE_TOL), errors=bad),
        OpInfo("linalg_cholesky", L.cholesky, [
            Sample("mat", (spd,)), Sample("batch", (_spd(2, 4, 4),)),
            Sample("upper", (spd,), {"upper": True}),
            Sample("f32", (spd.astype(F32),))],
            _cholesky_ref, differentiable=True, tol=dict(LOOSE_TOL), second_order=False,
            errors=bad),
        OpInfo("linalg_qr", L.qr, [
            Sample("tall", (rand(5, 3),)), Sample("square", (_well_conditioned(2, 3, 3),)),
            Sample("wide", (rand(3, 5),)),
            Sample("complete_wide", (rand(3, 4),), {"mode": "complete"})],
            _qr_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("vector", (rand(3),), {}, dg.ShapeError, "at least 2 dimensions"),
                ErrorCase("mode", (rand(3, 3),), {"mode": "full"}, ValueError,
                          "unrecognized mode")]),
        # mode='r' has no gradient (PyTorch refuses it too: tests/test_linalg_torch.py)
        OpInfo("linalg_qr_r", L.qr, [Sample("r", (rand(4, 3),), {"mode": "r"})], _qr_ref),
        OpInfo("linalg_eigh", L.eigh, [
            Sample("mat", (spd,)), Sample("upper", (spd,), {"UPLO": "U"}),
            Sample("batch", (_spd(2, 3, 3),))],
            lambda a, UPLO="L": tuple(np.linalg.eigh(_sym(a), UPLO)), differentiable=True,
            tol=dict(LOOSE_TOL), second_order=False, errors=bad + [
                ErrorCase("uplo", (spd,), {"UPLO": "X"}, ValueError, "UPLO")]),
        OpInfo("linalg_eigvalsh", L.eigvalsh, [
            Sample("mat", (spd,)), Sample("batch", (_spd(2, 4, 4),))],
            lambda a, UPLO="L": np.linalg.eigvalsh(_sym(a)), differentiable=True,
            tol=dict(LOOSE_TOL), second_order=False, errors=bad),
        OpInfo("linalg_pinv", L.pinv, [
            Sample("tall", (rand(5, 3),)), Sample("wide", (rand(2, 3, 4),)),
            Sample("hermitian", (spd,), {"hermitian": True}, fd=False),
            Sample("rtol", (rand(4, 3),), {"rtol": 1e-3})],
            _pinv_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("int", (ints(3, 3),), {}, dg.DTypeError, "floating point")]),
        OpInfo("linalg_lstsq", L.lstsq, [
            Sample("tall", (rand(5, 3), rand(5, 2))),
            Sample("vector", (rand(5, 3), rand(5))),
            # singular values have no gradient (as in PyTorch): fd would see one
            Sample("gelsd", (rand(6, 3), rand(6, 2)), {"driver": "gelsd"}, fd=False),
            Sample("wide_gels", (rand(3, 5), rand(3, 2)), {"driver": "gels"})],
            _lstsq_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("rows", (rand(5, 3), rand(4, 2)), {}, dg.ShapeError, "should match"),
                ErrorCase("driver", (rand(5, 3), rand(5, 2)), {"driver": "x"}, ValueError,
                          "driver")]),
    ]


def sym_input(fn):
    """``fn`` applied to the symmetric part of its first operand: its gradients (and
    second-order ones) are those of a function of any matrix, which finite differences
    check element by element."""
    def run(a, *args, **kwargs):
        if getattr(a, "ndim", 0) < 2:     # not a matrix: the op itself says what is wrong
            return fn(a, *args, **kwargs)
        return fn((a + dg.transpose(a, -1, -2)) * 0.5, *args, **kwargs)
    run.__name__ = fn.__name__
    return run


def _linalg_symmetric() -> List[OpInfo]:
    from duograph import linalg as L
    return [
        OpInfo("linalg_cholesky_sym", sym_input(L.cholesky), [
            Sample("mat", (_spd(3, 3),)), Sample("upper", (_spd(2, 3, 3),), {"upper": True})],
            _cholesky_ref, differentiable=True, tol=dict(LOOSE_TOL)),
        OpInfo("linalg_eigh_sym", sym_input(L.eigh), [
            Sample("mat", (_spd(3, 3),)), Sample("batch", (_spd(2, 3, 3),), {"UPLO": "U"})],
            lambda a, UPLO="L": tuple(np.linalg.eigh(_sym(a), UPLO)), differentiable=True,
            tol=dict(LOOSE_TOL)),
        OpInfo("linalg_eigvalsh_sym", sym_input(L.eigvalsh), [Sample("mat", (_spd(4, 4),))],
               lambda a: np.linalg.eigvalsh(_sym(a)), differentiable=True,
               tol=dict(LOOSE_TOL)),
    ]


def _solve_triangular_ref(a, b, upper, left=True, unitriangular=False):
    n = a.shape[-1]
    tri = np.triu(a, 1 if unitriangular else 0) if upper else np.tril(
        a, -1 if unitriangular else 0)
    tri = tri + np.eye(n) if unitriangular else tri
    return _solve_ref(tri, b, left)


def _linalg_composites() -> List[OpInfo]:
    from duograph import linalg as L

    def multi_dot_ref(ts):
        return np.linalg.multi_dot(ts)
    return [
        OpInfo("linalg_matrix_power", L.matrix_power, [
            Sample("cube", (rand(2, 3, 3), 3)), Sample("zero", (rand(3, 3), 0)),
            Sample("inverse_square", (_well_conditioned(3, 3), -2))],
            lambda a, n: np.linalg.matrix_power(a, n), differentiable=True,
            tol=dict(LOOSE_TOL)),
        OpInfo("linalg_multi_dot", L.multi_dot, [
            Sample("chain", ([rand(4, 6), rand(6, 2), rand(2, 5)],)),
            Sample("vectors", ([rand(4), rand(4, 3), rand(3)],))],
            multi_dot_ref, differentiable=True, tol=dict(LOOSE_TOL), errors=[
                ErrorCase("one", ([rand(2, 2)],), {}, ValueError, "at least 2")]),
        OpInfo("linalg_vecdot", L.vecdot, [
            Sample("last", (rand(3, 4), rand(3, 4))), Sample("dim0", (rand(3, 4), rand(3, 1)),
                                                          {"dim": 0})],
            lambda x, y, dim=-1: np.sum(np.conj(x) * y, axis=dim), differentiable=True),
        OpInfo("linalg_diagonal", L.diagonal, [
            Sample("last", (rand(2, 3, 4),)), Sample("offset", (rand(2, 3, 4),), {"offset": 1})],
            lambda a, offset=0, dim1=-2, dim2=-1: np.diagonal(a, offset, dim1, dim2),
            differentiable=True),
        OpInfo("linalg_solve_triangular", L.solve_triangular, [
            Sample("upper", (_well_conditioned(2, 3, 3), rand(2, 3, 2)), {"upper": True}),
            Sample("lower_right_unit", (_well_conditioned(3, 3), rand(2, 3)),
                   {"upper": False, "left": False, "unitriangular": True})],
            _solve_triangular_ref, differentiable=True, tol=dict(LOOSE_TOL)),
        OpInfo("linalg_matrix_rank", L.matrix_rank, [
            Sample("low_rank", (rand(4, 2) @ rand(2, 5),)), Sample("full", (rand(2, 3, 4),)),
            Sample("hermitian", (_spd(3, 3),), {"hermitian": True})],
            lambda a, hermitian=False: np.asarray(np.linalg.matrix_rank(a, hermitian=hermitian),
                                                  np.int64)),
        OpInfo("linalg_cond", L.cond, [
            Sample("two", (_well_conditioned(2, 3, 3),)), Sample("fro", (_well_conditioned(3, 3),
                                                                          "fro"))],
            lambda a, p=None: np.asarray(np.linalg.cond(a, p)), differentiable=True,
            tol=dict(LOOSE_TOL)),
        OpInfo("linalg_cross", L.cross, [Sample("last", (rand(2, 3), rand(2, 3)))],
               lambda a, b, dim=-1: np.cross(a, b, axis=dim), differentiable=True),
    ]


OPS += _linalg_solvers() + _linalg_symmetric() + _linalg_composites()
BY_NAME = {op.name: op for op in OPS}


# -- complex numbers (their gradients: tests/test_complex_torch.py) --------------------------
def crand(*shape, dtype="complex128") -> np.ndarray:
    return (rand(*shape) + 1j * rand(*shape)).astype(dtype)


COMPLEX_TOL = dict(DEFAULT_TOL, complex64=(1e-5, 1e-6), complex128=(1e-10, 1e-12))


def _complex_ops() -> List[OpInfo]:
    def polar_ref(a, t):
        return a * np.cos(t) + 1j * (a * np.sin(t))
    return [
        OpInfo("real", dg.real, [Sample("c128", (crand(2, 3),)),
                                 Sample("c64", (crand(4, dtype="complex64"),)),
                                 Sample("f64", (rand(3),))], np.real, tol=COMPLEX_TOL),
        OpInfo("imag", dg.imag, [Sample("c128", (crand(2, 3),)),
                                 Sample("c64", (crand(4, dtype="complex64"),))], np.imag,
               tol=COMPLEX_TOL, errors=[
                   ErrorCase("real", (rand(3),), {}, dg.DTypeError, "non-complex")]),
        OpInfo("conj", dg.conj, [Sample("c128", (crand(2, 3),)), Sample("f64", (rand(3),))],
               np.conj, tol=COMPLEX_TOL, differentiable=True),
        OpInfo("angle", dg.angle, [Sample("c128", (crand(2, 3),)),
                                   Sample("f64", (away(5),), fd=False)],
               lambda x: np.angle(x) if x.dtype.kind == "c" else np.where(
                   x < 0, np.pi, 0.0), tol=COMPLEX_TOL, differentiable=True),
        OpInfo("complex", dg.complex, [Sample("f64", (rand(2, 3), rand(2, 3))),
                                       Sample("f32_bcast", (rand(3, dtype=F32),
                                                            rand(2, 1, dtype=F32)))],
               lambda a, b: a + 1j * b, tol=COMPLEX_TOL, errors=[
                   ErrorCase("int", (ints(2), ints(2)), {}, dg.DTypeError, "float32 or")]),
        OpInfo("polar", dg.polar, [Sample("f64", (pos(3), rand(3)))], polar_ref,
               tol=COMPLEX_TOL),
        OpInfo("view_as_real", dg.view_as_real, [Sample("c128", (crand(2, 3),))],
               lambda x: np.stack([x.real, x.imag], -1), tol=COMPLEX_TOL),
        OpInfo("view_as_complex", dg.view_as_complex, [Sample("f64", (rand(3, 2),))],
               lambda x: x[..., 0] + 1j * x[..., 1], tol=COMPLEX_TOL, differentiable=True,
               errors=[ErrorCase("last", (rand(3, 3),), {}, dg.ShapeError, "size 2")]),
    ]


OPS += _complex_ops()
BY_NAME = {op.name: op for op in OPS}


def _fft_ops() -> List[OpInfo]:
    """torch.fft through the table (values, dtypes, eager vs graph); their gradients against
    PyTorch's: tests/test_fft_torch.py."""
    from duograph import fft as FFT
    xr, xc = rand(3, 6), crand(3, 6)

    def np_fn(fn):
        def ref(x, *args, **kwargs):
            if "dim" in kwargs:
                kwargs["axes"] = kwargs.pop("dim")
            return fn(x, *args, **kwargs).astype(
                np.result_type(x.dtype, np.complex64) if fn not in (np.fft.irfft, np.fft.irfft2,
                                                                   np.fft.irfftn)
                else (np.float32 if x.dtype == np.complex64 else np.float64))
        return ref

    def one_d(name, fn, samples):
        return OpInfo(f"fft.{name}", getattr(FFT, name), samples, np_fn(fn), tol=COMPLEX_TOL)
    return [
        one_d("fft", np.fft.fft, [Sample("c128", (xc,)), Sample("f64", (xr,)),
                                  Sample("n_dim_ortho", (xc, 8, 0, "ortho")),
                                  Sample("c64", (crand(5, dtype="complex64"),))]),
        one_d("ifft", np.fft.ifft, [Sample("c128", (xc,)), Sample("trim", (xc, 4, -1, "forward"))]),
        one_d("rfft", np.fft.rfft, [Sample("f64", (xr,)), Sample("n", (xr, 9, 0, "ortho")),
                                    Sample("f32", (rand(7, dtype=F32),))]),
        one_d("irfft", np.fft.irfft, [Sample("c128", (xc,)), Sample("n", (xc, 7, -1, "ortho"))]),
        one_d("fft2", np.fft.fft2, [Sample("c128", (xc,)), Sample("s", (xr, (4, 5)))]),
        one_d("ifft2", np.fft.ifft2, [Sample("c128", (xc,))]),
        one_d("fftn", np.fft.fftn, [Sample("c128", (crand(2, 3, 4),)),
                                    Sample("dim", (xc,), {"dim": (1,), "norm": "forward"})]),
        one_d("ifftn", np.fft.ifftn, [Sample("c128", (crand(2, 3, 4),))]),
        one_d("rfft2", np.fft.rfft2, [Sample("f64", (xr,))]),
        one_d("irfft2", np.fft.irfft2, [Sample("c128", (xc,))]),
        one_d("rfftn", np.fft.rfftn, [Sample("f64", (rand(2, 3, 4),))]),
        one_d("irfftn", np.fft.irfftn, [Sample("c128", (crand(2, 3, 4),))]),
        OpInfo("fft.fftshift", FFT.fftshift, [Sample("c128", (xc,)), Sample("dim", (xr, 1))],
               lambda x, dim=None: np.fft.fftshift(x, dim), tol=COMPLEX_TOL),
        OpInfo("fft.ifftshift", FFT.ifftshift, [Sample("f64", (rand(5, 4),))],
               lambda x, dim=None: np.fft.ifftshift(x, dim), tol=COMPLEX_TOL),
        OpInfo("fft.fftfreq", FFT.fftfreq, [Sample("odd", (5,)), Sample("even_d", (6, 0.5))],
               lambda n, d=1.0: np.fft.fftfreq(n, d).astype(F32)),
        OpInfo("fft.rfftfreq", FFT.rfftfreq, [Sample("odd", (5,)), Sample("even_d", (6, 0.5))],
               lambda n, d=1.0: np.fft.rfftfreq(n, d).astype(F32)),
    ]


OPS += _fft_ops()


# -- PyTorch's compositions of existing ops (graphlib/ops/composites.py) ---------------------
def _cdist_ref(a, b, p=2.0, compute_mode=None):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(a.dtype)
    if p == np.inf:
        return d.max(-1)
    return (d ** p).sum(-1) ** (1.0 / p)


def _copysign_ref(a, b):
    dt = np.result_type(a, b)
    dt = dt if dt.kind == "f" else np.float32
    return np.copysign(np.abs(a), b).astype(dt)


def _logaddexp_ref(a, b):
    return np.logaddexp(a, b)


def _norm_ref(x, p=2.0, dim=1, eps=1e-12):
    n = np.sum(np.abs(x) ** p, axis=dim, keepdims=True) ** (1.0 / p)
    return x / np.maximum(n, eps)


def _cos_ref(a, b, dim=1, eps=1e-8):
    na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return ((a / na) * (b / nb)).sum(dim)


def _rms_ref(x, shape, weight=None, eps=None):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    eps = np.finfo(x.dtype).eps if eps is None else eps
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    out = x / np.sqrt(np.mean(x * x, axis=dims, keepdims=True) + eps)
    return out if weight is None else out * weight


def _searchsorted_ref(seq, vals, out_int32=False, right=False, side=None, sorter=None):
    side = side or ("right" if right else "left")
    if seq.ndim == 1:
        out = np.searchsorted(seq, vals, side=side)
    else:
        out = np.stack([np.searchsorted(s, v, side=side) for s, v in
                        zip(seq.reshape(-1, seq.shape[-1]), vals.reshape(-1, vals.shape[-1]))]
                       ).reshape(vals.shape)
    return out.astype(I32 if out_int32 else I64)


def _addmm_ref(x, m1, m2, beta=1, alpha=1):
    prod = alpha * (m1 @ m2)
    return prod + (0 * np.where(np.isfinite(x), x, 0) if beta == 0 else beta * x)


def _check_randperm(out, n, **kwargs):
    assert sorted(out.tolist()) == list(range(n)), out


def _check_multinomial(out, w, k, replacement=False, **kwargs):
    rows = w.reshape(-1, w.shape[-1])
    got = out.reshape(rows.shape[0], k)
    assert out.dtype == np.int64
    for r, row in zip(rows, got):
        assert np.all(r[row] > 0), (r, row)          # never a zero-weight category
        if not replacement:
            assert len(set(row.tolist())) == k


def _composites() -> List[OpInfo]:
    nan_x = rand(2, 3)
    nan_x[0, 1] = np.nan
    inf_x = rand(2, 3)
    inf_x[1, 0] = np.inf
    seq = np.sort(rand(7))
    return [
        OpInfo("bmm", dg.bmm, [
            Sample("f64", (rand(2, 3, 4), rand(2, 4, 2))),
            Sample("f32", (rand(3, 2, 2, dtype=F32), rand(3, 2, 3, dtype=F32)))],
            np.matmul, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 3), rand(3, 2)), {}, dg.ShapeError, "3-D"),
                ErrorCase("batch", (rand(2, 3, 4), rand(3, 4, 2)), {}, dg.ShapeError,
                          "(b, n, m)"),
                ErrorCase("dtypes", (rand(2, 3, 4), rand(2, 4, 2, dtype=F32)), {},
                          dg.DTypeError, "one dtype")]),
        OpInfo("addmm", dg.addmm, [
            Sample("f64", (rand(2, 4), rand(2, 3), rand(3, 4))),
            Sample("bcast_scaled", (rand(4), rand(2, 3), rand(3, 4)),
                   {"beta": 0.5, "alpha": -2.0}),
            Sample("beta0_inf", (inf_x, rand(2, 4), rand(4, 3)), {"beta": 0}, fd=False)],
            _addmm_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("3d", (rand(2, 2), rand(1, 2, 3), rand(3, 2)), {}, dg.ShapeError,
                          "2-D"),
                ErrorCase("inner", (rand(2, 2), rand(2, 3), rand(2, 2)), {}, dg.ShapeError,
                          "cannot be multiplied")]),
        OpInfo("nansum", dg.nansum, [
            Sample("all", (rand(2, 3),)), Sample("dim_nan", (nan_x,), {"dim": 1}, fd=False),
            Sample("keepdim", (rand(2, 3),), {"dim": 0, "keepdim": True}),
            Sample("i64", (ints(4),))],
            lambda x, dim=None, keepdim=False, dtype=None: np.asarray(np.nansum(
                x, axis=dim, keepdims=keepdim)), differentiable=True),
        OpInfo("copysign", dg.copysign, [
            Sample("f64", (away(2, 3), rand(2, 3))),
            Sample("neg_zero", (away(3), np.array([-0.0, 0.0, -1.0]))),
            Sample("bcast", (away(2, 3), away(3))),
            Sample("i64", (ints(3), ints(3)))],
            _copysign_ref, differentiable=True, grad_args=(0,)),
        OpInfo("logaddexp", dg.logaddexp, [
            Sample("f64", (rand(2, 3, low=-3, high=3), rand(2, 3, low=-3, high=3))),
            Sample("extreme", (np.array([-np.inf, 800.0, -800.0]),
                               np.array([-np.inf, 799.0, 1.0])), fd=False),
            Sample("bcast_f32", (rand(2, 3, dtype=F32), rand(3, dtype=F32)))],
            _logaddexp_ref, differentiable=True),
        OpInfo("std_mean", dg.std_mean, [
            Sample("all", (rand(3, 4),)), Sample("dim", (rand(3, 4),), {"dim": 1}),
            Sample("corr0_keep", (rand(2, 3),), {"dim": 0, "correction": 0,
                                                "keepdim": True})],
            lambda x, dim=None, correction=1, keepdim=False: (
                np.asarray(np.std(x, axis=dim, ddof=correction, keepdims=keepdim)),
                np.asarray(np.mean(x, axis=dim, keepdims=keepdim))),
            tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("cdist", dg.cdist, [
            Sample("p2", (rand(3, 2), rand(4, 2))),
            Sample("p1_batched", (rand(2, 3, 2), rand(2, 2, 2)), {"p": 1.0}),
            Sample("p3", (rand(3, 2), rand(2, 2)), {"p": 3.0}),
            Sample("pinf", (distinct(3, 2), distinct(2, 2)), {"p": float("inf")}),
            Sample("p0", (rand(3, 2), rand(2, 2)), {"p": 0.0})],
            _cdist_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("cols", (rand(3, 2), rand(2, 3)), {}, dg.ShapeError,
                          "same number of columns"),
                ErrorCase("int", (ints(3, 2), ints(2, 2)), {}, dg.DTypeError,
                          "floating-point")]),
        OpInfo("cosine_similarity", dg.cosine_similarity, [
            Sample("f64", (rand(3, 4), rand(3, 4))),
            Sample("dim_last_bcast", (rand(2, 3), rand(3)), {"dim": -1}),
            Sample("f32", (rand(2, 3, dtype=F32), rand(2, 3, dtype=F32)))],
            _cos_ref, tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("normalize", F.normalize, [
            Sample("f64", (rand(3, 4),)),
            Sample("p1_dim0", (rand(3, 4),), {"p": 1.0, "dim": 0}, fd=False),
            Sample("f32", (rand(2, 3, dtype=F32),))],
            _norm_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("int", (ints(3, 2),), {}, dg.DTypeError, "floating-point")]),
        OpInfo("rms_norm", dg.rms_norm, [
            Sample("f64", (rand(3, 4), (4,))),
            Sample("weight_eps", (rand(2, 3, 4), [3, 4], rand(3, 4)), {"eps": 1e-3}),
            Sample("f32", (rand(2, 5, dtype=F32), 5))],
            _rms_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("shape", (rand(3, 4), (3,)), {}, dg.ShapeError, "expected input")]),
        OpInfo("searchsorted", dg.searchsorted, [
            Sample("left", (seq, rand(2, 3))),
            Sample("right_ties", (np.array([1.0, 2.0, 2.0, 3.0]), np.array([2.0, 0.0, 5.0])),
                   {"right": True}),
            Sample("side_int32", (np.array([1, 3, 5]), ints(4)), {"side": "right",
                                                                 "out_int32": True}),
            Sample("batched", (np.sort(rand(2, 5), -1), rand(2, 3)))],
            _searchsorted_ref, errors=[
                ErrorCase("shape", (np.sort(rand(2, 5), -1), rand(3, 3)), {}, dg.ShapeError,
                          "boundaries tensor"),
                ErrorCase("side", (seq, rand(2)), {"side": "middle"}, ValueError, "side")]),
        OpInfo("randperm", dg.randperm, [
            Sample("n10", (10,), {"seed": seed()}), Sample("n1_i32", (1,),
                                                          {"seed": seed(), "dtype": I32})],
            None, random=True, check=_check_randperm, errors=[
                ErrorCase("negative", (-1,), {"seed": seed()}, ValueError, "non-negative")]),
        OpInfo("multinomial", dg.multinomial, [
            Sample("no_repl", (np.array([0.0, 1.0, 3.0, 0.5]), 3), {"seed": seed()}),
            Sample("repl_2d", (np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 1.0]]), 5),
                   {"replacement": True, "seed": seed()})],
            None, random=True, check=_check_multinomial, errors=[
                ErrorCase("too_many", (np.array([1.0, 2.0]), 3), {"seed": seed()}, ValueError,
                          "without replacement"),
                ErrorCase("3d", (rand(2, 2, 2), 1), {"seed": seed()}, dg.ShapeError,
                          "1 or 2 dim")]),
    ]


OPS += _composites()
BY_NAME = {op.name: op for op in OPS}


def _more_composites() -> List[OpInfo]:
    nan_x = rand(2, 3)
    nan_x[1, 1] = np.nan

    def diff_ref(x, n=1, dim=-1, prepend=None, append=None):
        return np.diff(x, n, axis=dim, prepend=prepend if prepend is not None else np._NoValue,
                       append=append if append is not None else np._NoValue)

    return [
        OpInfo("any", dg.any, [
            Sample("all", (ints(2, 3, low=0, high=2),)),
            Sample("dim_keep", (bools(2, 3),), {"dim": 1, "keepdim": True}),
            Sample("f64", (np.array([0.0, -0.0, 2.0]),), {"dim": 0})],
            lambda x, dim=None, keepdim=False: np.asarray(np.any(x, axis=dim,
                                                                 keepdims=keepdim))),
        OpInfo("all", dg.all, [
            Sample("all", (ints(2, 3, low=0, high=2),)),
            Sample("dim", (rand(2, 3),), {"dim": 0})],
            lambda x, dim=None, keepdim=False: np.asarray(np.all(x, axis=dim,
                                                                 keepdims=keepdim))),
        OpInfo("count_nonzero", dg.count_nonzero, [
            Sample("all", (ints(3, 4, low=0, high=2),)), Sample("dim", (rand(2, 3),),
                                                               {"dim": 1})],
            lambda x, dim=None: np.asarray(np.count_nonzero(x, axis=dim)).astype(I64)),
        OpInfo("dot", dg.dot, [Sample("f64", (rand(4), rand(4))),
                               Sample("i64", (ints(3), ints(3)))],
               np.dot, differentiable=True, errors=[
                   ErrorCase("2d", (rand(2, 2), rand(2)), {}, dg.ShapeError, "1D tensors"),
                   ErrorCase("dtype", (rand(2), rand(2, dtype=F32)), {}, dg.DTypeError,
                             "same dtype")]),
        OpInfo("mv", dg.mv, [Sample("f64", (rand(3, 4), rand(4)))], np.dot,
               differentiable=True, errors=[
                   ErrorCase("size", (rand(3, 4), rand(3)), {}, dg.ShapeError, "mismatch")]),
        OpInfo("var_mean", dg.var_mean, [
            Sample("all", (rand(3, 4),)), Sample("dim_corr0", (rand(3, 4),),
                                                 {"dim": 0, "correction": 0})],
            lambda x, dim=None, correction=1, keepdim=False: (
                np.asarray(np.var(x, axis=dim, ddof=correction, keepdims=keepdim)),
                np.asarray(np.mean(x, axis=dim, keepdims=keepdim))),
            tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("nanmean", dg.nanmean, [
            Sample("all", (rand(2, 3),)), Sample("nan_dim", (nan_x,), {"dim": 1}, fd=False)],
            lambda x, dim=None, keepdim=False, dtype=None: np.asarray(np.nanmean(
                x, axis=dim, keepdims=keepdim)), differentiable=True, errors=[
                ErrorCase("int", (ints(3),), {}, dg.DTypeError, "floating-point")]),
        OpInfo("dist", dg.dist, [
            Sample("p2", (rand(2, 3), rand(3))), Sample("p1", (rand(3), away(3)),
                                                       {"p": 1.0}, fd=False)],
            lambda a, b, p=2.0: np.asarray(np.sum(np.abs(a - b) ** p) ** (1 / p)),
            tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("addcmul", dg.addcmul, [
            Sample("f64", (rand(2, 3), rand(2, 3), rand(3)), {"value": 0.5})],
            lambda x, a, b, value=1: x + value * a * b, differentiable=True),
        OpInfo("addcdiv", dg.addcdiv, [
            Sample("f64", (rand(2, 3), rand(2, 3), pos(3)), {"value": -2.0})],
            lambda x, a, b, value=1: x + value * a / b, differentiable=True, errors=[
                ErrorCase("ints", (rand(2), ints(2), ints(2)), {}, dg.DTypeError,
                          "integer division")]),
        OpInfo("clamp_min", dg.clamp_min, [Sample("f64", (away(2, 3), 0.1))],
               lambda x, m: np.maximum(x, m), differentiable=True),
        OpInfo("clamp_max", dg.clamp_max, [Sample("f64", (away(2, 3), 0.1))],
               lambda x, m: np.minimum(x, m), differentiable=True),
        OpInfo("diff", dg.diff, [
            Sample("last", (rand(3, 4),)), Sample("n2_dim0", (rand(4, 3),), {"n": 2, "dim": 0}),
            Sample("prepend", (rand(3),), {"prepend": rand(2)}),
            Sample("bool", (bools(5),))],
            diff_ref, differentiable=True, errors=[
                ErrorCase("0d", (rand(),), {}, dg.ShapeError, "one-dimensional")]),
        OpInfo("vstack", dg.vstack, [Sample("mixed", ([rand(3), rand(2, 3)],))],
               lambda ts: np.vstack(ts), differentiable=True),
        OpInfo("hstack", dg.hstack, [Sample("1d", ([rand(3), rand(2)],)),
                                     Sample("2d", ([rand(2, 3), rand(2, 1)],))],
               lambda ts: np.hstack(ts), differentiable=True),
        OpInfo("column_stack", dg.column_stack, [Sample("mixed", ([rand(3), rand(3, 2)],))],
               lambda ts: np.column_stack(ts), differentiable=True),
        OpInfo("dstack", dg.dstack, [Sample("mixed", ([rand(3), rand(1, 3)],)),
                                     Sample("2d", ([rand(2, 3), rand(2, 3, 2)],))],
               lambda ts: np.dstack(ts), differentiable=True),
        OpInfo("swapaxes", dg.swapaxes, [Sample("f64", (rand(2, 3, 4), 0, 2))],
               np.swapaxes, differentiable=True),
        OpInfo("unbind", dg.unbind, [Sample("dim0", (rand(3, 2),)),
                                     Sample("dim1", (rand(2, 3),), {"dim": 1})],
               lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)), differentiable=True),
        OpInfo("rot90", dg.rot90, [
            Sample("k1", (rand(2, 3),)), Sample("k3_dims", (rand(2, 3, 4),), {"k": 3,
                                                                           "dims": (2, 0)}),
            Sample("k2", (rand(3, 2),), {"k": -2})],
            lambda x, k=1, dims=(0, 1): np.rot90(x, k, dims), differentiable=True, errors=[
                ErrorCase("same_dims", (rand(2, 2),), {"dims": (0, 0)}, ValueError,
                          "different")]),
        OpInfo("logspace", dg.logspace, [Sample("base10", (0, 2, 5)),
                                         Sample("base2_f64", (-1.0, 3.0, 4), {"base": 2.0,
                                                                              "dtype": F64})],
               lambda a, b, n, base=10.0, dtype=None: np.logspace(
                   a, b, n, base=base).astype(dtype or F32)),
        OpInfo("broadcast_tensors", dg.broadcast_tensors, [
            Sample("two", (rand(3, 1), rand(4))), Sample("three", (rand(2, 1, 1), rand(3, 1),
                                                                   rand(1)))],
            lambda *ts: tuple(np.broadcast_arrays(*ts)), differentiable=True),
    ]


OPS += _more_composites()
BY_NAME = {op.name: op for op in OPS}


# -- grid_sample, affine_grid (graphlib/ops/sampling.py): numpy references ------------------
def _grid_sample_ref(x, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    n, c, h, w = x.shape
    align = bool(align_corners)

    def source(coord, size):
        coord = (coord + 1) * (size - 1) / 2 if align else ((coord + 1) * size - 1) / 2
        if padding_mode == "border":
            coord = np.clip(coord, 0, size - 1)
        elif padding_mode == "reflection":
            lo, hi = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)
            low, span = lo / 2, (hi - lo) / 2
            d = np.abs(coord - low)
            extra, flips = np.fmod(d, span), np.floor(d / span)
            coord = np.where(flips % 2 == 0, extra + low, span - extra + low)
            coord = np.clip(coord, 0, size - 1)
        return coord

    fx, fy = source(grid[..., 0], w), source(grid[..., 1], h)

    def pick(ix, iy):
        inside = (ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)
        ixc = np.clip(ix, 0, w - 1).astype(int)
        iyc = np.clip(iy, 0, h - 1).astype(int)
        out = np.stack([x[b][:, iyc[b], ixc[b]] for b in range(n)])
        return np.where(inside[:, None], out, 0.0)
    if mode == "nearest":
        return pick(np.round(fx), np.round(fy))
    x0, y0 = np.floor(fx), np.floor(fy)
    wx, wy = fx - x0, fy - y0
    return (pick(x0, y0) * ((1 - wx) * (1 - wy))[:, None] + pick(x0 + 1, y0)
            * (wx * (1 - wy))[:, None] + pick(x0, y0 + 1) * ((1 - wx) * wy)[:, None]
            + pick(x0 + 1, y0 + 1) * (wx * wy)[:, None])


def _affine_grid_ref(theta, size, align_corners=None):
    n, _, h, w = size

    def axis(steps):
        ramp = np.linspace(-1, 1, steps)
        return ramp if align_corners else ramp * (steps - 1) / steps
    xs, ys = np.meshgrid(axis(w), axis(h))
    base = np.stack([xs, ys, np.ones_like(xs)], -1)
    return np.einsum("hwk,njk->nhwj", base, theta)


def _sampling() -> List[OpInfo]:
    from duograph.graphlib.ops.sampling import affine_grid, grid_sample
    image, grid = rand(2, 2, 4, 5), rand(2, 3, 4, 2, low=-1.2, high=1.2)
    return [
        OpInfo("grid_sample", grid_sample, [
            Sample("bilinear", (image, grid)),
            Sample("border_aligned", (image, grid), {"padding_mode": "border",
                                                     "align_corners": True}),
            Sample("reflection", (image, grid), {"padding_mode": "reflection"}),
            Sample("nearest", (image, grid), {"mode": "nearest"}, fd=False),
            Sample("f32", (rand(1, 1, 3, 3, dtype=F32), rand(1, 2, 2, 2, dtype=F32)))],
            _grid_sample_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("mode", (image, grid), {"mode": "bicubic"}, NotImplementedError,
                          "bicubic"),
                ErrorCase("padding", (image, grid), {"padding_mode": "edge"}, ValueError,
                          "padding_mode"),
                ErrorCase("batch", (image, grid[:1]), {}, dg.ShapeError, "batch size")]),
        OpInfo("affine_grid", affine_grid, [
            Sample("default", (rand(2, 2, 3), (2, 3, 4, 5))),
            Sample("aligned", (rand(1, 2, 3), (1, 1, 3, 2)), {"align_corners": True})],
            _affine_grid_ref, differentiable=True, errors=[
                ErrorCase("theta", (rand(2, 3, 3), (2, 3, 4, 5)), {}, dg.ShapeError, "Nx2x3")]),
    ]


OPS += _sampling()
BY_NAME = {op.name: op for op in OPS}


# -- special and number-theoretic functions (graphlib/ops/special.py) -------------------------
def _f32_if_int(fn):
    """``fn`` computed in float64, given in the input's float dtype or float32 for integers
    (PyTorch's promotion)."""
    def ref(x, *args, **kwargs):
        dt = x.dtype if x.dtype.kind == "f" else np.dtype(F32)
        return np.asarray(fn(x.astype(F64), *args, **kwargs)).astype(dt)
    return ref


def _logit_ref(x, eps=None):
    if eps is not None:
        x = np.clip(x, eps, 1 - eps)
    return np.log(x / (1 - x))


def _special() -> List[OpInfo]:
    def unary_op(name, fn, ref, make, errors=(), **kw):
        return OpInfo(name, fn, [
            Sample("f64", (make(2, 3),)), Sample("f64_0d", (make(),)),
            Sample("f32", (make(4, dtype=F32),)),
            Sample("i64_to_f32", (ints(2, 2, low=1, high=4),), dtype=F32)],
            _f32_if_int(ref), tol=dict(LOOSE_TOL), errors=list(errors), **kw)
    special_nan = np.array([0.0, -1.0, 0.5, np.nan, np.inf])
    return [
        unary_op("erfc", dg.erfc, special.erfc, _wide, differentiable=True),
        OpInfo("erfinv", dg.erfinv, [
            Sample("f64", (rand(2, 3, low=-0.9, high=0.9),)),
            Sample("edges", (np.array([-1.0, 1.0, 0.0, 2.0]),), fd=False),
            Sample("f32", (rand(4, dtype=F32, low=-0.9, high=0.9),))],
            _f32_if_int(special.erfinv), tol=dict(LOOSE_TOL), differentiable=True),
        unary_op("lgamma", dg.lgamma, special.gammaln, pos, differentiable=True),
        unary_op("digamma", dg.digamma, special.psi, pos, differentiable=True),
        OpInfo("polygamma", dg.polygamma, [
            Sample("n1", (1, pos(2, 3))), Sample("n0", (0, pos(3))),
            Sample("n3_f32", (3, pos(4, dtype=F32))),
            Sample("int", (2, ints(2, low=1, high=4)), dtype=F32)],
            lambda n, x: _f32_if_int(lambda v: special.polygamma(n, v))(x),
            tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("negative", (-1, pos(3)), {}, RuntimeError, "n >= 0"),
                ErrorCase("float_n", (1.5, pos(3)), {}, TypeError, "int")]),
        unary_op("i0", dg.i0, special.i0, _wide, differentiable=True),
        OpInfo("sinc", dg.sinc, [
            Sample("f64", (_wide(2, 3),)),
            Sample("at_zero", (np.array([0.0, 0.5, -1.5]),), fd=False),
            Sample("f32", (_wide(4, dtype=F32),)),
            Sample("int", (ints(3),), dtype=F32)],
            _f32_if_int(np.sinc), tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("logit", dg.logit, [
            Sample("f64", (rand(2, 3, low=0.05, high=0.95),)),
            Sample("eps", (rand(6, low=0.0, high=1.0),), {"eps": 0.25}, fd=False),
            Sample("f32", (rand(4, low=0.1, high=0.9, dtype=F32),))],
            _f32_if_int(_logit_ref), tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("eps", (rand(3),), {"eps": "x"}, TypeError, "eps")]),
        unary_op("deg2rad", dg.deg2rad, np.deg2rad, _wide, differentiable=True),
        unary_op("rad2deg", dg.rad2deg, np.rad2deg, _wide, differentiable=True),
        OpInfo("signbit", dg.signbit, [
            Sample("f64", (np.array([-0.0, 0.0, -1.5, 2.0, -np.inf]),)),
            Sample("i64", (ints(2, 3),))], np.signbit),
        OpInfo("isposinf", dg.isposinf, [Sample("f64", (special_nan,)),
                                         Sample("i64", (ints(3),))], np.isposinf),
        OpInfo("isneginf", dg.isneginf, [Sample("f64", (-special_nan,)),
                                         Sample("i64", (ints(3),))], np.isneginf),
        OpInfo("heaviside", dg.heaviside, [
            Sample("f64", (np.array([-1.0, 0.0, 2.0, 0.0]), np.array([0.5, 0.25, 0.5, 3.0]))),
            Sample("bcast_i64", (ints(2, 3), np.array([7])))],
            lambda a, b: np.where(a == 0, b, a > 0).astype(a.dtype), errors=[
                ErrorCase("dtypes", (rand(3), ints(3)), {}, dg.DTypeError, "one dtype")]),
        OpInfo("fmax", dg.fmax, [
            Sample("f64", (distinct(2, 3), distinct(2, 3))),
            Sample("nan", (np.array([np.nan, 1.0, np.nan]), np.array([2.0, np.nan, np.nan])),
                   fd=False),
            Sample("tie", (np.array([1.0, 2.0]), np.array([1.0, 3.0])), fd=False),
            Sample("i64", (ints(3), ints(3)))], np.fmax, differentiable=True),
        OpInfo("fmin", dg.fmin, [
            Sample("f64", (distinct(2, 3), distinct(2, 3))),
            Sample("nan", (np.array([np.nan, 1.0, np.nan]), np.array([2.0, np.nan, np.nan])),
                   fd=False),
            Sample("tie", (np.array([1.0, 2.0]), np.array([1.0, 0.0])), fd=False),
            Sample("i64", (ints(3), ints(3)))], np.fmin, differentiable=True),
        OpInfo("gcd", dg.gcd, [Sample("i64", (ints(2, 3, low=-12, high=13), ints(3))),
                               Sample("i32", (ints(4, dtype=I32), ints(4, dtype=I32)))],
               np.gcd, errors=[ErrorCase("float", (rand(3), rand(3)), {},
                                         dg.UnsupportedDTypeError, "float64")]),
        OpInfo("lcm", dg.lcm, [Sample("i64", (ints(2, 3, low=-12, high=13), ints(3)))],
               np.lcm, errors=[ErrorCase("float", (rand(3), rand(3)), {},
                                         dg.UnsupportedDTypeError, "float64")]),
        OpInfo("nextafter", dg.nextafter, [
            Sample("f64", (rand(2, 3), rand(3))),
            Sample("f32", (rand(4, dtype=F32), np.array([np.inf], dtype=F32)))],
            np.nextafter, errors=[
                ErrorCase("dtypes", (rand(3), rand(3, dtype=F32)), {}, dg.DTypeError,
                          "one dtype")]),
        OpInfo("ldexp", dg.ldexp, [
            Sample("f64", (rand(2, 3), ints(3, low=0, high=4))),
            Sample("f64_negative_exponents", (rand(2, 3), ints(3, low=-3, high=0))),
            Sample("ints", (ints(3), ints(3, low=0, high=4)), dtype=F32),
            Sample("f32", (rand(3, dtype=F32), ints(3, low=-2, high=3)))],
            lambda a, b: a * np.exp2(b.astype(F32)), differentiable=True, grad_args=(0,)),
        OpInfo("logaddexp2", dg.logaddexp2, [
            Sample("f64", (_wide(2, 3), _wide(2, 3))),
            Sample("extreme", (np.array([-np.inf, 800.0, -800.0]),
                               np.array([-np.inf, 799.0, 1.0])), fd=False),
            Sample("bcast_f32", (rand(2, 3, dtype=F32), rand(3, dtype=F32)))],
            np.logaddexp2, differentiable=True, errors=[
                ErrorCase("int", (ints(3), ints(3)), {}, dg.DTypeError, "floating-point")]),
    ]


OPS += _special()
BY_NAME = {op.name: op for op in OPS}


# -- products and array functions (graphlib/ops/products.py) ----------------------------------
def _tensordot_ref(a, b, dims=2):
    return np.tensordot(a, b, dims if isinstance(dims, int) else tuple(map(list, dims)))


def _diag_embed_ref(x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1] + abs(offset)
    out = np.zeros(x.shape[:-1] + (n, n), dtype=x.dtype)
    i = np.arange(x.shape[-1])
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    out[..., rows, cols] = x
    return np.moveaxis(out, (-2, -1), (dim1, dim2))


def _block_diag_ref(*ts):
    ts = [np.atleast_2d(t) for t in ts]
    dt = np.result_type(*ts)
    out = np.zeros((sum(t.shape[0] for t in ts), sum(t.shape[1] for t in ts)), dtype=dt)
    r = c = 0
    for t in ts:
        out[r:r + t.shape[0], c:c + t.shape[1]] = t
        r, c = r + t.shape[0], c + t.shape[1]
    return out


def _atleast_3d_ref(*ts):
    out = []
    for t in ts:
        if t.ndim == 0:
            t = t.reshape(1, 1, 1)
        elif t.ndim == 1:
            t = t.reshape(1, -1, 1)
        elif t.ndim == 2:
            t = t[..., None]
        out.append(t)
    return tuple(out) if len(out) != 1 else out[0]


def _products() -> List[OpInfo]:
    return [
        OpInfo("kron", dg.kron, [Sample("2d", (rand(2, 3), rand(2, 2))),
                                 Sample("ranks", (rand(3), rand(2, 2))),
                                 Sample("i64", (ints(2, 2), ints(2)))],
               np.kron, differentiable=True),
        OpInfo("inner", dg.inner, [Sample("2d", (rand(2, 3), rand(4, 3))),
                                   Sample("1d", (rand(3), rand(3))),
                                   Sample("scalar", (rand(2, 2), rand()))],
               np.inner, differentiable=True, errors=[
                   ErrorCase("last", (rand(2, 3), rand(3, 2)), {}, dg.ShapeError, "last dims")]),
        OpInfo("tensordot", dg.tensordot, [
            Sample("int", (rand(2, 3, 4), rand(3, 4, 2))),
            Sample("lists", (rand(2, 3, 4), rand(4, 2, 3)), {"dims": ([1, 2], [2, 0])}),
            Sample("zero", (rand(2), rand(3)), {"dims": 0})],
            _tensordot_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("size", (rand(2, 3), rand(2, 3)), {"dims": 1}, dg.ShapeError,
                          "contracted")]),
        OpInfo("vdot", dg.vdot, [Sample("f64", (rand(4), rand(4))),
                                 Sample("c128", (crand(3), crand(3)))],
               np.vdot, tol=dict(COMPLEX_TOL), differentiable=True, errors=[
                   ErrorCase("2d", (rand(2, 2), rand(2)), {}, dg.ShapeError, "1D"),
                   ErrorCase("dtype", (rand(2), rand(2, dtype=F32)), {}, dg.DTypeError,
                             "same dtype")]),
        OpInfo("addmv", dg.addmv, [
            Sample("f64", (rand(3), rand(3, 4), rand(4))),
            Sample("scaled", (rand(1), rand(2, 3), rand(3)), {"beta": 0.5, "alpha": 2.0})],
            lambda x, m, v, beta=1, alpha=1: beta * x + alpha * (m @ v), differentiable=True,
            errors=[ErrorCase("size", (rand(3), rand(3, 4), rand(3)), {}, dg.ShapeError,
                              "size mismatch")]),
        OpInfo("addr", dg.addr, [
            Sample("f64", (rand(3, 2), rand(3), rand(2))),
            Sample("scaled", (rand(2), rand(3), rand(2)), {"beta": -1.0, "alpha": 0.5})],
            lambda x, a, b, beta=1, alpha=1: beta * x + alpha * np.outer(a, b),
            differentiable=True, errors=[
                ErrorCase("2d", (rand(3, 2), rand(3, 1), rand(2)), {}, dg.ShapeError, "1-D")]),
        OpInfo("addbmm", dg.addbmm, [
            Sample("f64", (rand(2, 3), rand(4, 2, 5), rand(4, 5, 3))),
            Sample("scaled", (rand(3), rand(2, 2, 2), rand(2, 2, 3)), {"beta": 2.0,
                                                                       "alpha": -1.0})],
            lambda x, a, b, beta=1, alpha=1: beta * x + alpha * (a @ b).sum(0),
            tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 3), rand(2, 5), rand(5, 3)), {}, dg.ShapeError,
                          "3-D")]),
        OpInfo("baddbmm", dg.baddbmm, [
            Sample("f64", (rand(4, 2, 3), rand(4, 2, 5), rand(4, 5, 3))),
            Sample("beta0", (rand(2, 3), rand(4, 2, 5), rand(4, 5, 3)), {"beta": 0})],
            lambda x, a, b, beta=1, alpha=1: (beta * x if beta else 0) + alpha * (a @ b),
            tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("batch", (rand(2, 3), rand(4, 2, 5), rand(3, 5, 3)), {},
                          dg.ShapeError, "(b, n, m)")]),
        OpInfo("block_diag", dg.block_diag, [
            Sample("mixed", (rand(2, 3), rand(), rand(2))),
            Sample("i64", (ints(2, 2), ints(1, 3)))],
            _block_diag_ref, differentiable=True, errors=[
                ErrorCase("3d", (rand(2, 2, 2),), {}, dg.ShapeError, "2 or fewer")]),
        OpInfo("cartesian_prod", dg.cartesian_prod, [
            Sample("two", (rand(2), rand(3))), Sample("three_i64", (ints(2), ints(2), ints(3)))],
            lambda *ts: np.stack([g.reshape(-1) for g in np.meshgrid(*ts, indexing="ij")], 1),
            differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 2), rand(2)), {}, dg.ShapeError, "1D")]),
        OpInfo("diag_embed", dg.diag_embed, [
            Sample("default", (rand(2, 3),)),
            Sample("offset_dims", (rand(2, 3),), {"offset": -1, "dim1": 0, "dim2": 2}),
            Sample("offset_pos_i64", (ints(3),), {"offset": 2})],
            _diag_embed_ref, differentiable=True, errors=[
                ErrorCase("same", (rand(2, 3),), {"dim1": 1, "dim2": 1}, RuntimeError,
                          "identical")]),
        OpInfo("diagflat", dg.diagflat, [Sample("2d", (rand(2, 2),)),
                                         Sample("offset", (rand(3),), {"offset": -1})],
               lambda x, offset=0: np.diagflat(x, offset), differentiable=True),
        OpInfo("tril_indices", dg.tril_indices, [
            Sample("square", (3, 3)), Sample("offset", (3, 4, 1), {"dtype": I32}),
            Sample("neg", (4, 3, -1))],
            lambda r, c, offset=0, dtype=I64: np.stack(np.tril_indices(r, offset, c)).astype(
                dtype).reshape(2, -1), errors=[
                ErrorCase("neg", (-1, 3), {}, RuntimeError, "non-negative")]),
        OpInfo("triu_indices", dg.triu_indices, [
            Sample("square", (3, 3)), Sample("offset", (3, 4, 1))],
            lambda r, c, offset=0, dtype=I64: np.stack(np.triu_indices(r, offset, c)).astype(
                dtype).reshape(2, -1), errors=[
                ErrorCase("dtype", (3, 3), {"dtype": F32}, dg.DTypeError, "int32 or int64")]),
        OpInfo("vander", dg.vander, [
            Sample("default", (rand(3),)), Sample("n_incr", (rand(3),), {"N": 4,
                                                                      "increasing": True}),
            Sample("i64", (ints(3),), {"N": 2})],
            lambda x, N=None, increasing=False: np.vander(x, N, increasing),
            differentiable=True, errors=[
                ErrorCase("2d", (rand(2, 2),), {}, dg.ShapeError, "one-dimensional")]),
        OpInfo("atleast_1d", dg.atleast_1d, [Sample("0d", (rand(),)), Sample("2d", (rand(2, 2),)),
                                             Sample("many", (rand(), rand(3)))],
               lambda *ts: np.atleast_1d(*ts) if len(ts) == 1 else tuple(np.atleast_1d(*ts)),
               differentiable=True),
        OpInfo("atleast_2d", dg.atleast_2d, [Sample("1d", (rand(3),)),
                                             Sample("many", (rand(), rand(2, 2)))],
               lambda *ts: np.atleast_2d(*ts) if len(ts) == 1 else tuple(np.atleast_2d(*ts)),
               differentiable=True),
        OpInfo("atleast_3d", dg.atleast_3d, [Sample("1d", (rand(3),)),
                                             Sample("many", (rand(), rand(2, 2)))],
               _atleast_3d_ref, differentiable=True),
        OpInfo("hsplit", dg.hsplit, [Sample("int", (rand(3, 4), 2)),
                                     Sample("list_1d", (rand(5), [1, 3]))],
               lambda x, s: tuple(np.hsplit(x, s)), differentiable=True, errors=[
                   ErrorCase("uneven", (rand(3, 4), 3), {}, RuntimeError, "divisible")]),
        OpInfo("vsplit", dg.vsplit, [Sample("int", (rand(4, 3), 2))],
               lambda x, s: tuple(np.vsplit(x, s)), differentiable=True, errors=[
                   ErrorCase("1d", (rand(4), 2), {}, RuntimeError, "at least 2")]),
        OpInfo("dsplit", dg.dsplit, [Sample("list", (rand(2, 2, 4), [1]))],
               lambda x, s: tuple(np.dsplit(x, s)), differentiable=True),
        OpInfo("select", dg.select, [Sample("dim1", (rand(2, 3), 1, -1)),
                                     Sample("dim0", (rand(3, 2, 2), 0, 1))],
               lambda x, d, i: np.take(x, i, axis=d), differentiable=True, errors=[
                   ErrorCase("range", (rand(2, 3), 1, 3), {}, IndexError, "out of range")]),
        OpInfo("aminmax", dg.aminmax, [Sample("all", (distinct(2, 3),)),
                                       Sample("dim", (distinct(2, 3),), {"dim": 1,
                                                                         "keepdim": True})],
               lambda x, dim=None, keepdim=False: (np.asarray(np.amin(x, dim, keepdims=keepdim)),
                                                   np.asarray(np.amax(x, dim, keepdims=keepdim))),
               differentiable=True),
        OpInfo("msort", dg.msort, [Sample("f64", (distinct(3, 2),)), Sample("i64", (ints(4),))],
               lambda x: np.sort(x, 0), differentiable=True),
        OpInfo("ravel", dg.ravel, [Sample("f64", (rand(2, 3),))], np.ravel,
               differentiable=True),
    ]


OPS += _products()
BY_NAME = {op.name: op for op in OPS}


# -- more of torch.linalg and torch's top-level linear-algebra names --------------------------
def _householder_ref(a, tau):
    m, n = a.shape
    q = np.eye(m)
    for i in range(tau.shape[0]):
        v = np.zeros(m)
        v[i] = 1.0
        v[i + 1:] = a[i + 1:, i]
        q = q @ (np.eye(m) - tau[i] * np.outer(v, v))
    return q[:, :n]


def _chol_factor(upper=False):
    s = _spd(3, 3)
    low = np.linalg.cholesky(s)
    return low.T.copy() if upper else low


def _cholesky_solve_ref(b, f, upper=False):
    a = f.T @ f if upper else f @ f.T
    return np.linalg.solve(a, b)


def _linalg_more() -> List[OpInfo]:
    return [
        OpInfo("linalg_householder_product", dg.linalg.householder_product, [
            Sample("tall", (rand(4, 3), rand(2))), Sample("square", (rand(3, 3), rand(3)))],
            _householder_ref, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("k", (rand(3, 2), rand(3)), {}, RuntimeError, "m >= n >= k")]),
        OpInfo("linalg_tensorinv", dg.linalg.tensorinv, [
            Sample("ind2", (_well_conditioned(6, 6).reshape(2, 3, 6),)),
            Sample("ind1", (_well_conditioned(4, 4).reshape(4, 2, 2),), {"ind": 1})],
            lambda a, ind=2: np.linalg.tensorinv(a, ind), tol=dict(LOOSE_TOL),
            differentiable=True, errors=[
                ErrorCase("shape", (rand(2, 3, 4),), {}, RuntimeError, "prod")]),
        OpInfo("linalg_tensorsolve", dg.linalg.tensorsolve, [
            Sample("3d", (_well_conditioned(6, 6).reshape(2, 3, 6), rand(2, 3)))],
            np.linalg.tensorsolve, tol=dict(LOOSE_TOL), differentiable=True, errors=[
                ErrorCase("shape", (rand(2, 3, 6), rand(3, 2)), {}, RuntimeError,
                          "A.shape[:B.ndim]")]),
        OpInfo("linalg_vander", dg.linalg.vander, [
            Sample("batched", (rand(2, 3),)), Sample("n4", (rand(3),), {"N": 4})],
            lambda x, N=None: np.stack([np.vander(r, N, True) for r in x.reshape(
                -1, x.shape[-1])]).reshape(x.shape + (N or x.shape[-1],)),
            differentiable=True, errors=[
                ErrorCase("n1", (rand(3),), {"N": 1}, RuntimeError, "greater than 1")]),
        OpInfo("logdet", dg.logdet, [Sample("spd", (_spd(3, 3),)),
                                     Sample("batch", (_spd(2, 3, 3),))],
               lambda a: np.linalg.slogdet(a)[1], tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("cholesky_solve", dg.cholesky_solve, [
            Sample("lower", (rand(3, 2), _chol_factor())),
            Sample("upper", (rand(3, 2), _chol_factor(True), True))],
            _cholesky_solve_ref, tol=dict(LOOSE_TOL), differentiable=True, grad_args=(0,),
            errors=[ErrorCase("1d", (rand(3), _chol_factor()), {}, RuntimeError, "2 dims")]),
        OpInfo("cholesky_inverse", dg.cholesky_inverse, [
            Sample("lower", (_chol_factor(),)), Sample("upper", (_chol_factor(True), True))],
            lambda f, upper=False: np.linalg.inv(f.T @ f if upper else f @ f.T),
            tol=dict(LOOSE_TOL), errors=[
                ErrorCase("square", (rand(3, 2),), {}, RuntimeError, "square")]),
        OpInfo("pinverse", dg.pinverse, [Sample("wide", (_well_conditioned(3, 3)[:2],))],
               np.linalg.pinv, tol=dict(LOOSE_TOL), differentiable=True),
        OpInfo("svd_legacy", dg.svd, [
            Sample("no_uv", (rand(4, 3),), {"compute_uv": False})],
            lambda a, some=True, compute_uv=True: (
                np.zeros((4, 4)), np.linalg.svd(a, compute_uv=False), np.zeros((3, 3))),
            tol=dict(LOOSE_TOL), errors=[
                ErrorCase("some", (rand(3, 3),), {"some": "x"}, TypeError, "bool")]),
    ]


OPS += _linalg_more()
BY_NAME = {op.name: op for op in OPS}
