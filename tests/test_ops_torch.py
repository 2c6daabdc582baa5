"""PyTorch as an oracle: for the ops of the table that torch has, values, dtypes and float64
gradients in graph mode must match torch's (which also fixes the gradient conventions at
kinks and ties: relu and abs at 0, clamp at its bounds, maximum and amax ties).

Skipped when torch is not installed. Samples torch rejects, or where duograph deliberately
differs, are listed in ``NOT_IN_TORCH`` with the reason.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import pytest

import duograph as dg
from op_samples import (BY_NAME, F64, OPS, OpInfo, Sample, as_tuple, assert_matches, build,
                        grad_targets, map_leaves)

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TORCH_DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "complex64": torch.complex64, "complex128": torch.complex128,
    "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    "float8_e8m0fnu": torch.float8_e8m0fnu,
}


def _all_dims(x, dim):
    """torch spells 'every dim' as all of them listed."""
    return tuple(range(x.ndim)) if dim is None else dim


def _reduce(fn):
    def run(x, dim=None, keepdim=False, **kw):
        return fn(x, dim=_all_dims(x, dim), keepdim=keepdim, **kw)
    return run


def _prod(x, dim=None, keepdim=False):
    if dim is None:
        out = torch.prod(x)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return torch.prod(x, dim, keepdim=keepdim)


def _var(fn):
    def run(x, dim=None, correction=1, keepdim=False):
        return fn(x, dim=dim, correction=correction, keepdim=keepdim)
    return run


def _sizes(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _sum(x, dim=None, keepdim=False, dtype=None):
    dt = TORCH_DTYPES[dtype] if dtype else None
    return torch.sum(x, dim=_all_dims(x, dim), keepdim=keepdim, dtype=dt)


def _max_min(fn, reduce_all):
    def run(x, dim=None, keepdim=False):
        return reduce_all(x) if dim is None else tuple(fn(x, dim, keepdim=keepdim))
    return run


def _dtype(kw):
    return {"dtype": TORCH_DTYPES[dg.dtypes.as_dtype(kw["dtype"])]} if kw.get("dtype") else {}


TORCH: Dict[str, Callable] = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "square": torch.square,
    "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
    **{name: getattr(torch, name) for name in (
        "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
        "expm1", "log2", "log10", "exp2", "floor", "ceil", "trunc", "frac", "isnan", "isinf",
        "isfinite", "remainder", "fmod", "floor_divide", "atan2", "hypot")},
    "sigmoid": torch.sigmoid, "logsigmoid": TF.logsigmoid, "relu": torch.relu,
    "erf": torch.erf, "sign": torch.sign,
    "leaky_relu": lambda x, negative_slope=0.01: TF.leaky_relu(x, negative_slope),
    "gelu": lambda x, approximate="none": TF.gelu(x, approximate=approximate),
    "gelu_tanh": lambda x, approximate="none": TF.gelu(x, approximate=approximate),
    "softplus": lambda x, beta=1.0, threshold=20.0: TF.softplus(x, beta, threshold),
    "clamp": lambda x, min=None, max=None: torch.clamp(x, min, max),
    "pow_scalar": lambda x, exponent: torch.pow(x, exponent),
    "pow": torch.pow, "add": torch.add, "sub": torch.sub, "mul": torch.mul,
    "div": torch.div, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_not": torch.logical_not, "where": torch.where,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "bitwise_not": torch.bitwise_not,
    "cast": lambda x, dtype: x.to(TORCH_DTYPES[dg.dtypes.as_dtype(dtype)]),
    "sum": _sum, "mean": _reduce(torch.mean), "amax": _reduce(torch.amax),
    "amin": _reduce(torch.amin), "prod": _prod, "var": _var(torch.var), "std": _var(torch.std),
    "argmax": torch.argmax, "argmin": torch.argmin, "logsumexp": torch.logsumexp,
    "max": _max_min(torch.max, torch.amax), "min": _max_min(torch.min, torch.amin),
    "matmul": torch.matmul, "mm": torch.mm,
    "reshape": lambda x, *shape: torch.reshape(x, _sizes(shape)),
    "permute": lambda x, *dims: x.permute(*_sizes(dims)),
    "transpose": torch.transpose,
    "expand": lambda x, *sizes: x.expand(*_sizes(sizes)),
    "broadcast_to": torch.broadcast_to,
    "squeeze": lambda x, dim=None: torch.squeeze(x) if dim is None else torch.squeeze(x, dim),
    "unsqueeze": torch.unsqueeze, "flatten": torch.flatten,
    "cat": lambda ts, dim=0: torch.cat(list(ts), dim),
    "stack": lambda ts, dim=0: torch.stack(list(ts), dim),
    "split": lambda x, s, dim=0: torch.split(x, s, dim), "chunk": torch.chunk,
    "getitem": lambda x, index: x[index],
    "gather": torch.gather, "scatter_add": torch.scatter_add,
    "index_select": torch.index_select, "index_add": torch.index_add,
    "pad": lambda x, pad, value=0.0, mode="constant": TF.pad(
        x, tuple(pad), mode=mode, value=value if mode == "constant" else None),
    "softmax": torch.softmax, "log_softmax": torch.log_softmax,
    "softmax_cross_entropy": lambda x, t, **kw: TF.cross_entropy(x, t.long(), **kw),
    "batch_norm_train": lambda x, w, b, eps=1e-5: (
        TF.batch_norm(x, None, None, w, b, training=True, eps=eps),
        x.mean((0,) + tuple(range(2, x.ndim))),
        x.var((0,) + tuple(range(2, x.ndim)), unbiased=False)),
    "one_hot": lambda x, num_classes: TF.one_hot(x, num_classes),
    "zeros": lambda *size, **kw: torch.zeros(tuple(_sizes(size)), **_dtype(kw)),
    "ones": lambda *size, **kw: torch.ones(tuple(_sizes(size)), **_dtype(kw)),
    "full": lambda size, value, **kw: torch.full(
        (size,) if isinstance(size, int) else size, value, **_dtype(kw)),
    "arange": lambda *args, **kw: torch.arange(*args, **_dtype(kw)),
    "eye": lambda *args, **kw: torch.eye(*args, **_dtype(kw)),
    "linspace": lambda *args, **kw: torch.linspace(*args, **_dtype(kw)),
    "zeros_like": lambda x, **kw: torch.zeros_like(x, **_dtype(kw)),
    "ones_like": lambda x, **kw: torch.ones_like(x, **_dtype(kw)),
    "full_like": lambda x, v, **kw: torch.full_like(x, v, **_dtype(kw)),
}

if "conv2d" in BY_NAME:
    TORCH.update(conv2d=TF.conv2d, max_pool2d=TF.max_pool2d, avg_pool2d=TF.avg_pool2d,
                 adaptive_avg_pool2d=TF.adaptive_avg_pool2d)
if "conv3d" in BY_NAME:
    TORCH.update({name: getattr(TF, name) for name in (
        "conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "pixel_shuffle",
        "pixel_unshuffle", "interpolate", "unfold", "fold", "adaptive_max_pool2d",
        "max_unpool2d", "adaptive_avg_pool1d", "adaptive_max_pool1d")})

# scans, sorting, selection, norms (tests/test_reductions_torch.py has more, in every mode)
TORCH.update(
    cumsum=lambda x, dim, dtype=None: torch.cumsum(x, dim, **_dtype({"dtype": dtype})),
    cumprod=lambda x, dim, dtype=None: torch.cumprod(x, dim, **_dtype({"dtype": dtype})),
    cummax=torch.cummax, cummin=torch.cummin, logcumsumexp=torch.logcumsumexp,
    sort=lambda x, dim=-1, descending=False, stable=False: torch.sort(
        x, dim=dim, descending=descending, stable=stable),
    argsort=lambda x, dim=-1, descending=False, stable=False: torch.argsort(
        x, dim=dim, descending=descending, stable=stable),
    topk=torch.topk, kthvalue=torch.kthvalue, median=torch.median, mode=torch.mode,
    norm=torch.norm, vector_norm=torch.linalg.vector_norm,
    matrix_norm=torch.linalg.matrix_norm, svdvals=torch.linalg.svdvals,
    svd=torch.linalg.svd, isclose=torch.isclose)

TORCH.update(
    scatter=lambda x, dim, index, src, reduce=None: torch.scatter(
        x, dim, index, src, **({"reduce": reduce} if reduce else {})),
    scatter_reduce=torch.scatter_reduce, nonzero_static=torch.nonzero_static,
    masked_fill=torch.masked_fill, masked_scatter=torch.masked_scatter,
    index_put=lambda x, indices, values, accumulate=False: torch.index_put(
        x, tuple(indices), values, accumulate),
    index_copy=torch.index_copy, index_fill=torch.index_fill,
    take_along_dim=torch.take_along_dim, take=torch.take)

# the activations with PyTorch's own gradient rules (hardsigmoid: torch multiplies by a
# float32 1/6 in float64 too, beyond this test's tolerance; tests/test_kinks_torch.py has it)
TORCH.update(
    elu=lambda x, alpha=1.0, scale=1.0, input_scale=1.0: torch.ops.aten.elu(
        x, alpha, scale, input_scale),
    hardtanh=lambda x, min_val=-1.0, max_val=1.0: TF.hardtanh(x, min_val, max_val),
    hardswish=TF.hardswish, silu=TF.silu, mish=TF.mish)

# torch.linalg's inverses, solvers and factorisations (and through a symmetrising wrapper)
def _sym_input(fn):
    return lambda a, *args, **kw: fn((a + a.mT) / 2, *args, **kw)


TORCH.update(
    real=torch.real, imag=torch.imag, conj=lambda x: torch.conj(x).resolve_conj(),
    angle=torch.angle, complex=torch.complex, polar=torch.polar,
    view_as_real=lambda x: torch.view_as_real(x).clone(),
    view_as_complex=lambda x: torch.view_as_complex(x.contiguous()))
TORCH.update({f"fft.{name}": getattr(torch.fft, name) for name in (
    "fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2",
    "rfftn", "irfftn", "fftshift", "ifftshift", "fftfreq", "rfftfreq")})
TORCH.update(
    linalg_inv=torch.linalg.inv, linalg_solve=torch.linalg.solve,
    linalg_det=torch.linalg.det, linalg_slogdet=torch.linalg.slogdet,
    linalg_cholesky=torch.linalg.cholesky, linalg_qr=torch.linalg.qr,
    linalg_qr_r=torch.linalg.qr, linalg_eigh=torch.linalg.eigh,
    linalg_eigvalsh=torch.linalg.eigvalsh, linalg_pinv=torch.linalg.pinv,
    linalg_lstsq=torch.linalg.lstsq, linalg_matrix_power=torch.linalg.matrix_power,
    linalg_multi_dot=torch.linalg.multi_dot, linalg_vecdot=torch.linalg.vecdot,
    linalg_diagonal=torch.linalg.diagonal, linalg_solve_triangular=torch.linalg.solve_triangular,
    linalg_matrix_rank=torch.linalg.matrix_rank, linalg_cond=torch.linalg.cond,
    linalg_cross=torch.linalg.cross,
    linalg_cholesky_sym=_sym_input(torch.linalg.cholesky),
    linalg_eigh_sym=_sym_input(torch.linalg.eigh),
    linalg_eigvalsh_sym=_sym_input(torch.linalg.eigvalsh))

# issue 28's names: torch's function of the same name
TORCH.update({name: getattr(torch, name) for name in (
    "erfc", "erfinv", "lgamma", "digamma", "polygamma", "i0", "sinc", "logit", "deg2rad",
    "rad2deg", "signbit", "isposinf", "isneginf", "heaviside", "fmax", "fmin", "gcd", "lcm",
    "nextafter", "ldexp", "logaddexp2")})

TORCH.update({name: getattr(torch, name) for name in (
    "kron", "inner", "tensordot", "vdot", "addmv", "addr", "addbmm", "baddbmm", "block_diag",
    "cartesian_prod", "diag_embed", "diagflat", "vander", "atleast_1d", "atleast_2d",
    "atleast_3d", "hsplit", "vsplit", "dsplit", "select", "aminmax", "msort", "ravel")})
TORCH.update(tril_indices=lambda r, c, offset=0, dtype="int64": torch.tril_indices(
    r, c, offset, dtype=TORCH_DTYPES[dtype]), triu_indices=lambda r, c, offset=0,
    dtype="int64": torch.triu_indices(r, c, offset, dtype=TORCH_DTYPES[dtype]))
# torch.vander's backward fails in torch 2.13 (an in-place op on a saved view); its values
# equal torch.linalg.vander's, reversed unless increasing, whose backward works
TORCH.update(vander=lambda x, N=None, increasing=False: (
    torch.linalg.vander(x, N=N) if increasing else torch.linalg.vander(x, N=N).flip(-1)))

TORCH.update(
    linalg_householder_product=torch.linalg.householder_product,
    linalg_tensorinv=torch.linalg.tensorinv, linalg_tensorsolve=torch.linalg.tensorsolve,
    linalg_vander=torch.linalg.vander, logdet=torch.logdet,
    cholesky_solve=torch.cholesky_solve, cholesky_inverse=torch.cholesky_inverse,
    pinverse=torch.pinverse, svd_legacy=torch.svd)

# Samples torch rejects (duograph promotes, or accepts more index dtypes) or where duograph
# deliberately differs (documented in the op's docstring).
NOT_IN_TORCH = {
    "ldexp-f64_negative_exponents": "torch's ldexp gradient computes 2 ** other in integers "
                                    "(0 for a negative int exponent); duograph's is 2 ** other",
    "logsigmoid-i64_to_f32": "torch has no integer logsigmoid; duograph gives float32",
    "one_hot-i32_0d": "torch.one_hot needs int64 indices",
    "matmul-i32_f32": "torch.matmul needs operands of one dtype",
    "index_add-f32_f64": "torch.index_add needs src of the input's dtype",
    "softmax-i64": "torch has no integer softmax; duograph gives float32",
    "log_softmax-i64": "torch has no integer log_softmax; duograph gives float32",
    "topk-i64": "ties: torch leaves their indices unspecified; duograph gives stable order",
    "kthvalue-i32": "ties: torch leaves the index unspecified; duograph gives stable order",
    "svd-batch": "singular vectors are defined up to sign; LAPACK calls differ in the batch",
    "unfold-i64": "torch's im2col has no integer kernel; duograph's unfold copies any dtype",
    "scatter-smaller": "torch has no gradient where src is larger than index",
    "scatter-add": "torch has no gradient for scatter(reduce=)",
    "linalg_cond-fro": "torch's cond(p='fro') fails in backward (an in-place op on inv's "
                       "output); finite differences check duograph's",
}


def _to_torch(sample: Sample, requires_grad=()):
    """The sample's arguments with torch tensors for the arrays (in leaf order, returned too);
    float64 leaves listed in ``requires_grad`` track gradients."""
    tensors = []

    def convert(a):
        t = torch.from_numpy(np.array(a))
        if len(tensors) in requires_grad:
            t.requires_grad_(True)
        tensors.append(t)
        return t
    args, kwargs = map_leaves(sample.args, sample.kwargs, convert)
    return args, kwargs, tensors


def _torch_call(op: OpInfo, sample: Sample, requires_grad=()):
    """(torch outputs, leaf tensors)."""
    args, kwargs, tensors = _to_torch(sample, requires_grad)
    if op.binary or op.name == "where":   # a Python number operand: a weak 0-d tensor
        args = tuple(torch.tensor(a) if isinstance(a, (bool, int, float)) else a for a in args)
    return list(as_tuple(TORCH[op.name](*args, **kwargs))), tensors


def _params(select):
    out = []
    for op in OPS:
        for s in op.samples:
            sid = f"{op.name}-{s.name}"
            if op.name in TORCH and not op.random and select(op, s):
                marks = [pytest.mark.skip(reason=NOT_IN_TORCH[sid])] if (
                    sid in NOT_IN_TORCH) else []
                out.append(pytest.param(op, s, id=sid, marks=marks))
    return out


def test_torch_table_names_are_ops():
    assert set(TORCH) <= {op.name for op in OPS}


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("op, sample", _params(lambda op, s: True))
def test_values_match_torch(op: OpInfo, sample: Sample):
    built = build(op, sample)
    got = built.graph.compile(outputs=built.outputs)(**built.feeds)
    want, _ = _torch_call(op, sample)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w.detach().numpy(), op.tol, f"output {k}: ")


@pytest.mark.parametrize("op, sample",
                         _params(lambda op, s: bool(grad_targets(op, s, at_kinks=True))))
def test_grads_match_torch(op: OpInfo, sample: Sample):
    targets = grad_targets(op, sample, at_kinks=True)
    built = build(op, sample)
    rng = np.random.default_rng(2)
    float_outs = [k for k, v in enumerate(built.outputs) if v.dtype == F64]
    cts = {k: rng.normal(size=built.outputs[k].shape) for k in float_outs}
    with built.graph:
        loss = None
        for k in float_outs:
            term = dg.sum(built.outputs[k] * cts[k])
            loss = term if loss is None else loss + term
        grads = dg.grad(loss, [built.inputs[i] for i in targets])
    got = built.graph.compile(outputs=grads)(**built.feeds)

    outs, tensors = _torch_call(op, sample, requires_grad=targets)
    loss_t = sum((outs[k] * torch.from_numpy(cts[k])).sum() for k in float_outs)
    want = torch.autograd.grad(loss_t, [tensors[i] for i in targets], allow_unused=True)
    for i, g, w in zip(targets, got, want):
        w = np.zeros_like(g) if w is None else w.numpy()
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12,
                                   err_msg=f"gradient of operand {i}")


def test_promotion_matches_torch_for_every_dtype_pair():
    names = list(TORCH_DTYPES)          # every dtype but int4/uint4/int2/uint2/float4_e2m1fn
    for a in names:
        for b in names:
            try:
                want = torch.promote_types(TORCH_DTYPES[a], TORCH_DTYPES[b])
            except RuntimeError as e:   # uint16/32/64 with an integer, float8 with anything
                assert "Promotion for" in str(e)
                with pytest.raises(dg.DTypeError, match="Promotion for"):
                    dg.dtypes.result_dtype(a, b)
                continue
            assert TORCH_DTYPES[dg.dtypes.result_dtype(a, b)] == want, (a, b)


@pytest.mark.parametrize("scalar", [True, 3, 2.5], ids=["bool", "int", "float"])
def test_weak_scalars_match_torch(scalar):
    for name in dg.dtypes.COMPUTE_DTYPES:
        want = (torch.ones(2, dtype=TORCH_DTYPES[name]) * scalar).dtype
        assert TORCH_DTYPES[dg.dtypes.weak_result_dtype(name, scalar)] == want, name


# -- 0-d tensors are half weak (torch.result_type's categories) --------------------------------
_SHAPES = {"dim": (2,), "0d": ()}


@pytest.mark.parametrize("shapes", [("dim", "0d"), ("0d", "dim"), ("0d", "0d"), ("dim", "dim")],
                         ids="-".join)
def test_result_type_matches_torch_with_zero_dim_tensors(shapes):
    sa, sb = (_SHAPES[s] for s in shapes)
    for a in TORCH_DTYPES:
        for b in TORCH_DTYPES:
            try:
                want = torch.result_type(torch.zeros(sa, dtype=TORCH_DTYPES[a]),
                                         torch.zeros(sb, dtype=TORCH_DTYPES[b]))
            except RuntimeError as e:   # f8 + c64[]: "Unknown Complex ScalarType"
                assert "Promotion for" in str(e) or "Complex ScalarType" in str(e)
                with pytest.raises(dg.DTypeError, match="Promotion for"):
                    dg.dtypes.result_type(dg.TensorType(sa, a), dg.TensorType(sb, b))
                continue
            got = dg.dtypes.result_type(dg.TensorType(sa, a), dg.TensorType(sb, b))
            if want == torch.complex32:      # duograph has no complex32: complex64 instead
                assert got == "complex64", (a, sa, b, sb)
                continue
            assert TORCH_DTYPES[got] == want, (a, sa, b, sb)


# (dtype, data) pairs whose common dtype PyTorch computes in: the 0-d value changes when cast
_ZERO_DIM_CASES = [
    ("float32", [1.0, -2.5, 3.0e-8], "float64", 0.1),
    ("int32", [1, -2, 7], "int64", 2 ** 31 + 5),          # wraps in int32, as in torch
    ("float16", [1.0, -2.5, 0.125], "float32", 0.1),
    ("int32", [1, -2, 7], "float64", 0.25),               # a higher kind: float64
    ("bool", [True, False, True], "int8", 3),
    ("int8", [44, -2, 7], "uint8", 200),                  # int8: 200 becomes -56
    ("uint8", [4, 0, 7], "bool", True),
    ("bfloat16", [1.0, -2.5, 0.125], "float64", 0.3),
]
_PROMOTING_OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (dg.maximum, torch.maximum),
    "eq": (lambda a, b: a == b, lambda a, b: a == b),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "where": (lambda a, b: dg.where(np.array([True, False, True]), a, b),
              lambda a, b: torch.where(torch.tensor([True, False, True]), a, b)),
    "where_number": (lambda a, b: dg.where(np.array([True, False, True]), b, 2.5),
                     lambda a, b: torch.where(torch.tensor([True, False, True]), b, 2.5)),
}


def _torch_of(data, dtype):
    return torch.tensor(data, dtype=torch.float64).to(TORCH_DTYPES[dtype])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("case", _ZERO_DIM_CASES, ids=lambda c: f"{c[0]}-{c[2]}[]")
@pytest.mark.parametrize("name", sorted(_PROMOTING_OPS))
@pytest.mark.parametrize("swap", [False, True], ids=["dim-first", "0d-first"])
def test_zero_dim_operands_promote_as_torch_eager_and_graph(case, name, swap):
    """``f32 + f64[]`` is float32 and computes in float32 (PyTorch's categories), in eager
    mode and in graphs at every level; so is each other promoting op."""
    da, xa, db, xb = case
    fn, torch_fn = _PROMOTING_OPS[name]
    ta, tb = _torch_of(xa, da), _torch_of(xb, db)
    arrays = [ta.float().numpy().astype(da), np.asarray(tb.double().numpy()).astype(db)]
    if swap:
        ta, tb, arrays = tb, ta, arrays[::-1]
    if name in ("div", "sub") and ta.dtype == tb.dtype == torch.bool:
        pytest.skip("no bool division")
    want = torch_fn(ta, tb)
    results = [("eager", fn(*[dg.tensor(a) for a in arrays]).numpy())]
    for passes in ("O0", "O1", "O2"):
        g = dg.Graph("zero_dim")
        with g:
            xs = [dg.placeholder(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
            y = fn(*xs)
        assert TORCH_DTYPES[y.dtype] == want.dtype, (passes, y.dtype)
        got = g.compile(outputs=[y], passes=passes)(x0=arrays[0], x1=arrays[1])[0]
        results.append((passes, np.asarray(got)))
    expected = want.double().numpy()
    for mode, got in results:
        assert TORCH_DTYPES[got.dtype.name] == want.dtype, (mode, got.dtype, want.dtype)
        np.testing.assert_array_equal(got.astype("float64"), expected, err_msg=mode)


def test_zero_dim_operand_gradients_keep_its_dtype_as_torch():
    x = np.array([1.0, 2.5, -3.0], np.float32)
    s = np.array(0.1)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(s, requires_grad=True)
    (tx * ts + ts).sum().backward()
    dx, ds = dg.tensor(x, requires_grad=True), dg.tensor(s, requires_grad=True)
    y = (dx * ds + ds).sum()
    y.backward()
    assert y.dtype == "float32"
    assert (dx.grad.dtype, ds.grad.dtype, ds.grad.shape) == ("float32", "float64", ())
    np.testing.assert_array_equal(dx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(ds.grad.numpy(), ts.grad.numpy(), rtol=1e-6)
    g = dg.Graph("grads")
    with g:
        p, q = dg.placeholder("p", (3,), "float32"), dg.placeholder("q", (), "float64")
        loss = (p * q + q).sum()
        gp, gq = dg.grad(loss, [p, q])
    assert (loss.dtype, gp.dtype, gq.dtype) == ("float32", "float32", "float64")
    got = g.compile(outputs=[gp, gq])(p=x, q=s)
    np.testing.assert_array_equal(got[0], tx.grad.numpy())
    np.testing.assert_allclose(got[1], ts.grad.numpy(), rtol=1e-6)


def test_inplace_with_a_zero_dim_operand_as_torch():
    t = torch.tensor([1, 2], dtype=torch.int32)
    t.add_(torch.tensor(2 ** 31 + 5))
    d = dg.tensor(np.array([1, 2], np.int32))
    d.add_(dg.tensor(np.array(2 ** 31 + 5)))
    assert d.dtype == "int32"
    np.testing.assert_array_equal(d.numpy(), t.numpy())
    with pytest.raises(RuntimeError, match="can't be cast"):     # int32 + f64[]: float64
        torch.tensor([1], dtype=torch.int32).add_(torch.tensor(0.5, dtype=torch.float64))
    with pytest.raises(TypeError, match="can't be cast"):
        d.add_(dg.tensor(np.array(0.5)))

# PyTorch's compositions (graphlib/ops/composites.py)
TORCH.update(
    bmm=torch.bmm, addmm=torch.addmm, nansum=torch.nansum, copysign=torch.copysign,
    logaddexp=torch.logaddexp, std_mean=torch.std_mean, cdist=torch.cdist,
    cosine_similarity=TF.cosine_similarity, normalize=TF.normalize,
    rms_norm=lambda x, shape, weight=None, eps=None: TF.rms_norm(
        x, (shape,) if isinstance(shape, int) else tuple(shape), weight, eps),
    searchsorted=torch.searchsorted)
TORCH.update(
    any=torch.any, all=torch.all, count_nonzero=torch.count_nonzero, dot=torch.dot,
    mv=torch.mv, var_mean=torch.var_mean, nanmean=torch.nanmean, dist=torch.dist,
    addcmul=torch.addcmul, addcdiv=torch.addcdiv, clamp_min=torch.clamp_min,
    clamp_max=torch.clamp_max, diff=torch.diff, vstack=torch.vstack, hstack=torch.hstack,
    column_stack=torch.column_stack, dstack=torch.dstack, swapaxes=torch.swapaxes,
    unbind=torch.unbind, rot90=torch.rot90, broadcast_tensors=torch.broadcast_tensors)
TORCH.update(grid_sample=TF.grid_sample, affine_grid=TF.affine_grid)
