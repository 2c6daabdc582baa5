"""conv2d and the 2-D pools: forward and gradients vs PyTorch and vs finite differences, in
graph mode (dg.grad) and eager mode (.backward()); second order; errors; a symbolic batch."""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import pytest

import duograph as dg

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")

F64 = "float64"
THIS_FILE = os.path.basename(__file__)
TOL = dict(rtol=1e-9, atol=1e-11)          # float64 vs PyTorch
FD_TOL = dict(rtol=1e-5, atol=1e-7)        # float64 vs central differences


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", exc_type=ImportError)


class Case(NamedTuple):
    op: str              # the name in dg and in torch.nn.functional
    name: str
    shapes: tuple        # shapes of the tensor operands
    kwargs: dict

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


def conv(name, x, w, bias=True, **kwargs) -> Case:
    return Case("conv2d", name, (x, w, (w[0],)) if bias else (x, w), kwargs)


def pool(op, name, x, **kwargs) -> Case:
    return Case(op, name, (x,), kwargs)


CONV = [
    conv("plain", (2, 3, 6, 6), (4, 3, 3, 3)),
    conv("pad1", (2, 3, 8, 8), (4, 3, 3, 3), padding=1),
    conv("no_bias", (2, 3, 7, 7), (5, 3, 3, 3), bias=False, padding=1),
    conv("stride2_pad1", (2, 3, 9, 9), (5, 3, 3, 3), stride=2, padding=1),
    conv("stride2_even", (1, 2, 8, 8), (3, 2, 3, 3), bias=False, stride=2),
    conv("rect_kernel", (2, 2, 7, 9), (3, 2, 2, 4), stride=(1, 2), padding=(1, 0)),
    conv("dilation2", (1, 2, 9, 9), (3, 2, 3, 3), dilation=2, padding=2),
    conv("all_pairs", (2, 2, 10, 11), (4, 2, 3, 2), bias=False, stride=(2, 3),
         padding=(2, 1), dilation=(2, 1)),
    conv("groups2", (2, 4, 6, 6), (6, 2, 3, 3), groups=2, padding=1),
    conv("groups2_stride", (2, 4, 7, 7), (4, 2, 2, 2), bias=False, groups=2, stride=2),
    conv("depthwise", (2, 4, 7, 7), (4, 1, 3, 3), groups=4, padding=1),
    conv("depthwise_x2", (2, 3, 6, 6), (6, 1, 3, 3), bias=False, groups=3, stride=2),
    conv("same_odd", (2, 2, 6, 6), (3, 2, 3, 3), padding="same"),
    conv("same_even", (2, 2, 7, 6), (3, 2, 4, 2), padding="same"),
    conv("same_dilated", (1, 2, 8, 8), (2, 2, 3, 3), bias=False, padding="same", dilation=2),
    conv("valid", (2, 2, 6, 6), (3, 2, 3, 3), padding="valid"),
    conv("1x1", (2, 4, 5, 5), (3, 4, 1, 1)),
    conv("kernel_is_input", (2, 2, 4, 4), (3, 2, 4, 4)),
    conv("wide_rows", (1, 2, 5, 12), (2, 2, 1, 9)),      # stride 1 without the flat-row path
    conv("unbatched", (3, 8, 8), (4, 3, 3, 3), padding=1),
]
MAX = [
    pool("max_pool2d", "k2", (2, 3, 8, 8), kernel_size=2),
    pool("max_pool2d", "k3s2p1", (2, 2, 7, 7), kernel_size=3, stride=2, padding=1),
    pool("max_pool2d", "k3s2p1_ceil", (2, 2, 8, 8), kernel_size=3, stride=2, padding=1,
         ceil_mode=True),
    pool("max_pool2d", "ceil_drops_last", (1, 2, 5, 5), kernel_size=2, stride=2, padding=1,
         ceil_mode=True),
    pool("max_pool2d", "rect", (2, 2, 7, 9), kernel_size=(2, 3), stride=(1, 2),
         padding=(1, 1)),
    pool("max_pool2d", "dilated", (1, 2, 9, 9), kernel_size=3, stride=1, padding=1,
         dilation=2),
    pool("max_pool2d", "overlap_s1", (2, 2, 5, 5), kernel_size=3, stride=1),
    pool("max_pool2d", "unbatched", (3, 6, 6), kernel_size=2),
]
AVG = [
    pool("avg_pool2d", "k2", (2, 3, 8, 8), kernel_size=2),
    pool("avg_pool2d", "k3s2p1", (2, 2, 7, 7), kernel_size=3, stride=2, padding=1),
    pool("avg_pool2d", "k3s2p1_nopad", (2, 2, 7, 7), kernel_size=3, stride=2, padding=1,
         count_include_pad=False),
    pool("avg_pool2d", "ceil", (2, 2, 8, 8), kernel_size=3, stride=2, padding=1,
         ceil_mode=True),
    pool("avg_pool2d", "ceil_nopad", (2, 2, 8, 8), kernel_size=3, stride=2, padding=1,
         ceil_mode=True, count_include_pad=False),
    pool("avg_pool2d", "ceil_no_padding", (1, 2, 7, 7), kernel_size=2, ceil_mode=True),
    pool("avg_pool2d", "rect", (2, 2, 7, 9), kernel_size=(3, 2), stride=(2, 1),
         padding=(1, 0)),
    pool("avg_pool2d", "unbatched", (3, 6, 6), kernel_size=3, stride=1, padding=1),
]
ADAPTIVE = [
    pool("adaptive_avg_pool2d", "divisible", (2, 3, 8, 8), output_size=(4, 2)),
    pool("adaptive_avg_pool2d", "general", (2, 3, 7, 9), output_size=(3, 4)),
    pool("adaptive_avg_pool2d", "global", (2, 3, 5, 6), output_size=1),
    pool("adaptive_avg_pool2d", "upsample", (1, 2, 3, 4), output_size=(5, 6)),
    pool("adaptive_avg_pool2d", "none_keeps", (2, 2, 5, 7), output_size=(None, 3)),
    pool("adaptive_avg_pool2d", "unbatched", (3, 7, 7), output_size=3),
]
CASES = CONV + MAX + AVG + ADAPTIVE
# small ones, for finite differences
FD_CASES = [c for c in CASES if c.name in {
    "stride2_pad1", "all_pairs", "groups2_stride", "depthwise_x2", "same_even", "wide_rows",
    "k3s2p1_ceil", "dilated", "ceil_nopad", "rect", "general", "upsample"}]


def _arrays(case: Case, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in case.shapes]


def _call(case: Case, operands):
    return getattr(dg, case.op)(*operands, **case.kwargs)


def _torch_run(torch, case: Case, arrays, ct=None):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = getattr(torch.nn.functional, case.op)(*ts, **case.kwargs)
    if ct is None:
        return y.detach().numpy(), None
    (y * torch.tensor(ct)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _out_shape(case: Case, arrays):
    with dg.no_grad():
        return tuple(_call(case, [dg.tensor(a) for a in arrays]).shape)


def _graph_run(case: Case, arrays, ct=None):
    """(inferred output type, [output, grads...]) from a compiled graph."""
    graph = dg.Graph(case.name)
    with graph:
        xs = [dg.placeholder(f"x{i}", a.shape, F64) for i, a in enumerate(arrays)]
        y = _call(case, xs)
        outs = [y]
        if ct is not None:
            c = dg.placeholder("ct", y.shape, F64)
            outs += dg.grad(dg.sum(y * c), xs)
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    if ct is not None:
        feeds["ct"] = ct
    return y.type, graph.compile(outputs=outs)(**feeds)


def _eager_run(case: Case, arrays, ct):
    ts = [dg.tensor(a, requires_grad=True) for a in arrays]
    y = _call(case, ts)
    (y * dg.tensor(ct)).sum().backward()
    return np.asarray(y.detach()), [np.asarray(t.grad) for t in ts]


def _ct(case: Case, arrays, seed: int = 1):
    return np.random.default_rng(seed).standard_normal(_out_shape(case, arrays))


# -- forward -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_torch_in_both_modes(torch, case: Case):
    arrays = _arrays(case)
    want, _ = _torch_run(torch, case, arrays)
    with dg.no_grad():
        eager = _call(case, [dg.tensor(a) for a in arrays])
    assert eager.dtype == F64
    np.testing.assert_allclose(np.asarray(eager), want, **TOL)
    out_type, (got,) = _graph_run(case, arrays)
    assert tuple(out_type.shape) == want.shape, "inferred shape must match PyTorch's"
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("op", ["conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
def test_float32_stays_float32(torch, op):
    case = next(c for c in CASES if c.op == op)
    arrays = [a.astype("float32") for a in _arrays(case)]
    want, _ = _torch_run(torch, case, arrays)
    got = _call(case, [dg.tensor(a) for a in arrays])
    assert got.dtype == "float32"
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# -- gradients ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["graph", "eager"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_grad_matches_torch(torch, case: Case, mode: str):
    arrays = _arrays(case)
    ct = _ct(case, arrays)
    want_y, want_grads = _torch_run(torch, case, arrays, ct)
    if mode == "graph":
        _, (y, *grads) = _graph_run(case, arrays, ct)
    else:
        y, grads = _eager_run(case, arrays, ct)
    np.testing.assert_allclose(y, want_y, **TOL)
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        np.testing.assert_allclose(g, w, **TOL, err_msg=f"gradient of operand {i}")


def _finite_differences(case: Case, arrays, ct, eps: float = 1e-6):
    """Central differences of sum(f(arrays) * ct), computed with the eager forward."""
    def f(values):
        with dg.no_grad():
            y = _call(case, [dg.tensor(v) for v in values])
        return float(np.sum(np.asarray(y) * ct))
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for k in range(a.size):
            plus = [v.copy() for v in arrays]
            minus = [v.copy() for v in arrays]
            plus[i].reshape(-1)[k] += eps
            minus[i].reshape(-1)[k] -= eps
            g.reshape(-1)[k] = (f(plus) - f(minus)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("case", FD_CASES, ids=[c.id for c in FD_CASES])
def test_grad_matches_finite_differences_in_both_modes(case: Case):
    arrays = _arrays(case, seed=2)
    ct = _ct(case, arrays, seed=3)
    want = _finite_differences(case, arrays, ct)
    _, (_, *graph_grads) = _graph_run(case, arrays, ct)
    _, eager_grads = _eager_run(case, arrays, ct)
    for i, w in enumerate(want):
        np.testing.assert_allclose(graph_grads[i], w, **FD_TOL, err_msg=f"graph, operand {i}")
        np.testing.assert_allclose(eager_grads[i], w, **FD_TOL, err_msg=f"eager, operand {i}")


def test_max_pool_ties_route_to_one_winner_like_torch(torch):
    """Equal values: each window's whole gradient goes to its first maximum."""
    x = np.array([[[[1.0, 1.0, 0.0, 2.0],
                    [1.0, 1.0, 2.0, 2.0],
                    [3.0, 0.0, 5.0, 5.0],
                    [3.0, 3.0, 5.0, 5.0]]]])
    kwargs = dict(kernel_size=2, stride=1, padding=1)
    case = Case("max_pool2d", "ties", (x.shape,), kwargs)
    ct = np.arange(1.0, 26.0).reshape(1, 1, 5, 5)
    _, (want,) = _torch_run(torch, case, [x], ct)
    _, (got,) = _eager_run(case, [x], ct)
    np.testing.assert_array_equal(got, want)
    _, (_, graph_got) = _graph_run(case, [x], ct)
    np.testing.assert_array_equal(graph_got, want)


# -- second order ------------------------------------------------------------------------------

SECOND_ORDER = [c for c in CASES if c.name in {
    "pad1", "all_pairs", "groups2_stride", "depthwise_x2", "same_even", "wide_rows"}] + [
    c for c in MAX + AVG + ADAPTIVE if c.name in {"k3s2p1_ceil", "ceil_nopad", "general"}]


def _second_order(lib, case, tensors, grad_fn):
    """z = sum(g_i^2 * r_i) over the first-order gradients g_i of sum(tanh(f(x)) * ct)."""
    functional = lib if lib is dg else lib.nn.functional
    y = getattr(functional, case.op)(*tensors, **case.kwargs)
    grads = grad_fn(lib.tanh(y).sum(), tensors)
    return sum(((g * g) * (k + 1.0)).sum() for k, g in enumerate(grads))


@pytest.mark.parametrize("case", SECOND_ORDER, ids=[c.id for c in SECOND_ORDER])
def test_second_order_matches_torch(torch, case: Case):
    arrays = _arrays(case, seed=4)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    z = _second_order(torch, case, ts, lambda out, ins: torch.autograd.grad(
        out, ins, create_graph=True))
    z.backward()
    ds = [dg.tensor(a, requires_grad=True) for a in arrays]
    zd = _second_order(dg, case, ds, lambda out, ins: dg.autograd.grad(
        out, ins, create_graph=True))
    zd.backward()
    np.testing.assert_allclose(zd.item(), z.item(), **TOL)
    for i, (d, t) in enumerate(zip(ds, ts)):
        np.testing.assert_allclose(np.asarray(d.grad), t.grad.numpy(), **TOL,
                                   err_msg=f"second-order gradient of operand {i}")


def test_conv2d_second_order_in_graph_mode(torch):
    case = next(c for c in CONV if c.name == "all_pairs")
    arrays = _arrays(case, seed=5)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    _second_order(torch, case, ts, lambda out, ins: torch.autograd.grad(
        out, ins, create_graph=True)).backward()
    graph = dg.Graph("second_order")
    with graph:
        xs = [dg.placeholder(f"x{i}", a.shape, F64) for i, a in enumerate(arrays)]
        z = _second_order(dg, case, xs, lambda out, ins: dg.grad(out, ins))
        grads = dg.grad(z, xs)
    got = graph.compile(outputs=grads)(**{f"x{i}": a for i, a in enumerate(arrays)})
    for g, t in zip(got, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), **TOL)


# -- errors ------------------------------------------------------------------------------------

class ErrorCase(NamedTuple):
    name: str
    fn: object
    operands: tuple      # (shape, dtype) per tensor operand
    exc: type
    match: str


F32 = "float32"
ERRORS = [
    ErrorCase("channels", lambda x, w: dg.conv2d(x, w), (((2, 3, 8, 8), F64), ((4, 4, 3, 3), F64)),
              dg.ShapeError, "expected weight with 3 input channels per group, found 4"),
    ErrorCase("groups_in", lambda x, w: dg.conv2d(x, w, groups=2),
              (((2, 3, 8, 8), F64), ((4, 1, 3, 3), F64)), dg.ShapeError,
              "has 3 channels, which groups=2 does not divide"),
    ErrorCase("groups_out", lambda x, w: dg.conv2d(x, w, groups=2),
              (((2, 4, 8, 8), F64), ((3, 2, 3, 3), F64)), dg.ShapeError,
              "has 3 output channels, which groups=2 does not divide"),
    ErrorCase("kernel_too_big", lambda x, w: dg.conv2d(x, w),
              (((1, 1, 2, 2), F64), ((1, 1, 3, 3), F64)), dg.ShapeError,
              "the output would be empty"),
    ErrorCase("bias_shape", lambda x, w, b: dg.conv2d(x, w, b),
              (((1, 2, 5, 5), F64), ((3, 2, 3, 3), F64), ((2,), F64)), dg.ShapeError,
              "expected a bias of shape [3]"),
    ErrorCase("input_5d", lambda x, w: dg.conv2d(x, w),
              (((1, 1, 2, 5, 5), F64), ((1, 1, 3, 3), F64)), dg.ShapeError,
              "expected a 4-D input [N,C,H,W]"),
    ErrorCase("weight_3d", lambda x, w: dg.conv2d(x, w),
              (((1, 3, 5, 5), F64), ((4, 3, 3), F64)), dg.ShapeError, "expected a 4-D weight"),
    ErrorCase("same_strided", lambda x, w: dg.conv2d(x, w, padding="same", stride=2),
              (((1, 1, 5, 5), F64), ((1, 1, 3, 3), F64)), dg.ShapeError,
              "padding='same' is not supported for strided convolutions"),
    ErrorCase("bad_padding", lambda x, w: dg.conv2d(x, w, padding="full"),
              (((1, 1, 5, 5), F64), ((1, 1, 3, 3), F64)), dg.ShapeError,
              "expected padding 'valid', 'same', an int or a pair, found 'full'"),
    ErrorCase("stride0", lambda x, w: dg.conv2d(x, w, stride=0),
              (((1, 1, 5, 5), F64), ((1, 1, 3, 3), F64)), dg.ShapeError,
              "expected stride >= 1, found 0"),
    ErrorCase("dtype_mix", lambda x, w: dg.conv2d(x, w),
              (((1, 1, 5, 5), F32), ((1, 1, 3, 3), F64)), dg.DTypeError,
              "expected operands of one dtype, found float32, float64"),
    ErrorCase("int_input", lambda x, w: dg.conv2d(x, w),
              (((1, 1, 5, 5), "int64"), ((1, 1, 3, 3), "int64")), dg.DTypeError,
              "expected floating-point tensors, found int64"),
    ErrorCase("max_pad", lambda x: dg.max_pool2d(x, 2, padding=2), (((1, 1, 6, 6), F64),),
              dg.ShapeError, "padding (2, 2) must be at most half the kernel size (2, 2)"),
    ErrorCase("max_empty", lambda x: dg.max_pool2d(x, 3), (((1, 1, 2, 2), F64),),
              dg.ShapeError, "the output would be empty"),
    ErrorCase("max_4d", lambda x: dg.max_pool2d(x, 2), (((6, 6), F64),), dg.ShapeError,
              "expected a 4-D input"),
    ErrorCase("avg_int", lambda x: dg.avg_pool2d(x, 2), (((1, 1, 4, 4), "int64"),),
              dg.DTypeError, "expected floating-point tensors, found int64"),
    ErrorCase("avg_pad", lambda x: dg.avg_pool2d(x, 3, padding=2), (((1, 1, 6, 6), F64),),
              dg.ShapeError, "must be at most half the kernel size (3, 3)"),
    ErrorCase("adaptive_2d", lambda x: dg.adaptive_avg_pool2d(x, 2), (((4, 4), F64),),
              dg.ShapeError, "expected a 4-D input"),
    ErrorCase("adaptive_zero", lambda x: dg.adaptive_avg_pool2d(x, 0),
              (((1, 1, 4, 4), F64),), dg.ShapeError, "expected output_size >= 1, found 0"),
]


@pytest.mark.parametrize("mode", ["graph", "eager"])
@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_bad_inputs_raise_clear_errors(case: ErrorCase, mode: str):
    if mode == "graph":
        graph = dg.Graph(case.name)
        with graph:
            operands = [dg.placeholder(f"x{i}", s, dt) for i, (s, dt) in
                        enumerate(case.operands)]
            with pytest.raises(case.exc) as info:
                case.fn(*operands)
    else:
        operands = [dg.tensor(np.zeros(s, dtype=dt)) for s, dt in case.operands]
        with pytest.raises(case.exc) as info:
            case.fn(*operands)
    message = str(info.value)
    op_name = case.fn.__code__.co_names[-1]          # the dg function the lambda calls
    assert case.match in message
    assert message.startswith(f"{op_name}: "), "the message must name the op first"
    assert THIS_FILE in message, "the message must point at the user's line"


def test_error_messages_name_the_shapes():
    with pytest.raises(dg.ShapeError) as info:
        dg.conv2d(dg.tensor(np.zeros((2, 3, 8, 8))), dg.tensor(np.zeros((4, 4, 3, 3))))
    message = str(info.value)
    assert message.startswith("conv2d:")
    assert "[2,3,8,8]" in message and "[4,4,3,3]" in message


# -- symbolic dims -----------------------------------------------------------------------------

def _small_cnn(lib, x, w1, b1, w2):
    functional = lib if lib is dg else lib.nn.functional
    h = functional.conv2d(x, w1, b1, padding=1).relu()
    h = functional.max_pool2d(h, 2)
    h = functional.conv2d(h, w2, stride=1, padding=1, groups=2)
    h = functional.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False)
    return functional.adaptive_avg_pool2d(h, (3, 1))


def test_symbolic_batch_dim_runs_at_two_batch_sizes(torch):
    rng = np.random.default_rng(6)
    params = [rng.standard_normal(s) for s in ((4, 3, 3, 3), (4,), (6, 2, 3, 3))]
    graph = dg.Graph("cnn")
    with graph:
        x = dg.placeholder("x", ("N", 3, 8, 8), F64)
        ws = [dg.placeholder(f"w{i}", p.shape, F64) for i, p in enumerate(params)]
        y = _small_cnn(dg, x, *ws)
        ct = dg.placeholder("ct", y.shape, F64)
        grads = dg.grad(dg.sum(y * ct), [x] + ws)
    assert tuple(y.shape) == ("N", 6, 3, 1)
    assert all(tuple(g.shape) == tuple(v.shape) for g, v in zip(grads, [x] + ws))
    exe = graph.compile(outputs=[y] + grads)
    for n in (2, 5):
        xa = rng.standard_normal((n, 3, 8, 8))
        cta = rng.standard_normal((n, 6, 3, 1))
        feeds = {"x": xa, "ct": cta, **{f"w{i}": p for i, p in enumerate(params)}}
        got = exe(**feeds)
        ts = [torch.tensor(a, requires_grad=True) for a in [xa] + params]
        ty = _small_cnn(torch, *ts)
        (ty * torch.tensor(cta)).sum().backward()
        np.testing.assert_allclose(got[0], ty.detach().numpy(), **TOL)
        for g, t in zip(got[1:], ts):
            np.testing.assert_allclose(g, t.grad.numpy(), **TOL)


def test_symbolic_spatial_dims_give_derived_dims_the_runtime_evaluates(torch):
    rng = np.random.default_rng(7)
    wa, w2a = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal((2, 4, 3, 3))
    graph = dg.Graph("spatial")
    with graph:
        x = dg.placeholder("x", ("N", 3, "H", "W"), F64)
        w = dg.placeholder("w", wa.shape, F64)
        w2 = dg.placeholder("w2", w2a.shape, F64)
        same = dg.conv2d(x, w, padding=1)
        strided = dg.conv2d(same, w2, stride=2)
        pooled = dg.max_pool2d(strided, 2, ceil_mode=True)
        grads = dg.grad(dg.sum(pooled * pooled), [x, w, w2])
    assert tuple(same.shape) == ("N", 4, "H", "W")
    # sympy-simplified: (H + 2 - 3) // 2 + 1 and its ceil-mode pooling; any spelling of the
    # same expression is the same dim
    assert tuple(strided.shape) == ("N", 2, "floor(H/2-3/2)+1", "floor(W/2-3/2)+1")
    assert strided.shape[2] == dg.graphlib.types.as_dim("(H-3)//2+1")
    assert tuple(pooled.shape) == ("N", 2, "ceiling(floor(H/2-3/2)/2+1/2)",
                                   "ceiling(floor(W/2-3/2)/2+1/2)")
    exe = graph.compile(outputs=[pooled] + grads)
    for shape in ((2, 3, 7, 9), (1, 3, 8, 6)):
        xa = rng.standard_normal(shape)
        got = exe(x=xa, w=wa, w2=w2a)
        ts = [torch.tensor(a, requires_grad=True) for a in (xa, wa, w2a)]
        functional = torch.nn.functional
        ty = functional.max_pool2d(functional.conv2d(functional.conv2d(
            ts[0], ts[1], padding=1), ts[2], stride=2), 2, ceil_mode=True)
        (ty * ty).sum().backward()
        np.testing.assert_allclose(got[0], ty.detach().numpy(), **TOL)
        for g, t in zip(got[1:], ts):
            np.testing.assert_allclose(g, t.grad.numpy(), **TOL)


# -- kernel paths: the numba loops and the numpy kernels ---------------------------------------

from duograph.graphlib.ops import conv as conv_ops  # noqa: E402
from duograph.runtime.cpu import kernels as cpu_kernels  # noqa: E402
from duograph.runtime.cpu.numba_support import numba_available  # noqa: E402

HAVE_NUMBA = numba_available()
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")


@pytest.fixture(autouse=True)
def _restore_config():
    """Tests below switch dg.config.numba; it goes back after each."""
    with dg.config.override(numba=dg.config.numba):
        yield


# The CPU backend's kernels (numba loops where config.numba allows, else the reference).
_max_pool2d = cpu_kernels.max_pool2d
_max_pool2d_backward = cpu_kernels.max_pool2d_backward
_max_pool2d_gather = cpu_kernels.max_pool2d_gather

# (kernel_size, stride, padding, dilation, ceil_mode), normalised as the op's attrs
POOL_GEOMETRIES = [
    ((2, 2), (2, 2), (0, 0), (1, 1), False),      # the 2x2 fast loops
    ((2, 2), (2, 2), (0, 0), (1, 1), True),       # odd input: ceil mode's partial windows
    ((3, 3), (1, 1), (1, 1), (1, 1), False),      # overlapping, padded
    ((3, 3), (2, 2), (1, 1), (1, 1), True),
    ((2, 3), (1, 2), (1, 1), (2, 1), False),      # dilated, rectangular
    ((3, 2), (2, 1), (1, 0), (1, 2), True),
]


def _pool_attrs(geometry) -> dict:
    kernel, stride, padding, dilation, ceil_mode = geometry
    return dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode)


def _tied_input(shape, dtype, seed: int = 0, nans: bool = False):
    """Few distinct values (many ties), -inf next to the padding, and NaNs if asked."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=shape).astype(dtype)
    if dtype.startswith("float"):
        x[..., 0, :] = -np.inf
        if nans:
            x.reshape(-1)[rng.choice(x.size, size=x.size // 8, replace=False)] = np.nan
    return x


def _both_paths(monkeypatch, fn):
    """fn() with the numba loops, then with the numpy kernels."""
    with dg.config.override(numba=True):
        with_numba = fn()
    with dg.config.override(numba=False):
        with_numpy = fn()
    return with_numba, with_numpy


def _pool_kernels(x, g, c, attrs):
    return (_max_pool2d(np, x, **attrs),
            _max_pool2d_backward(np, g, x, **attrs),
            _max_pool2d_gather(np, c, x, **attrs))


def _pool_operands(geometry, dtype, nans, shape=(2, 3, 7, 8)):
    x = _tied_input(shape, dtype, nans=nans)
    pooled = _max_pool2d(np, x, **_pool_attrs(geometry))
    rng = np.random.default_rng(1)
    g = rng.standard_normal(pooled.shape).astype("float64" if dtype == "int32" else dtype)
    c = rng.standard_normal(shape).astype(g.dtype)
    return x, g, c


@needs_numba
@pytest.mark.parametrize("nans", [False, True], ids=["ties", "nans"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES, ids=str)
def test_max_pool_numba_and_numpy_agree_bit_for_bit(monkeypatch, geometry, dtype, nans):
    x, g, c = _pool_operands(geometry, dtype, nans)
    attrs = _pool_attrs(geometry)
    fast, ref = _both_paths(monkeypatch, lambda: _pool_kernels(x, g, c, attrs))
    for name, a, b in zip(("forward", "backward", "gather"), fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), f"{name} differs between numba and numpy"


@needs_numba
@pytest.mark.parametrize("dtype", ["int8", "int32", "uint16", "int64"])
def test_max_pool_numba_integer_forward(monkeypatch, dtype):
    for geometry in POOL_GEOMETRIES:
        x = _tied_input((2, 2, 6, 7), dtype)
        attrs = _pool_attrs(geometry)
        fast, ref = _both_paths(monkeypatch, lambda: _max_pool2d(np, x, **attrs))
        assert fast.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("use_numba", [pytest.param(True, marks=needs_numba), False],
                         ids=["numba", "numpy"])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES, ids=str)
def test_max_pool_kernels_match_torch_with_ties_and_nans(torch, monkeypatch, geometry,
                                                         use_numba):
    """Forward values and the gradient's routing (first maximum; a NaN takes over, so the
    last NaN wins; -inf inputs next to the padding still beat it) as PyTorch's CPU kernel."""
    dg.config.numba = use_numba
    attrs = _pool_attrs(geometry)
    for nans in (False, True):
        x, g, _ = _pool_operands(geometry, "float64", nans)
        tx = torch.tensor(x, requires_grad=True)
        ty = torch.nn.functional.max_pool2d(tx, **attrs)
        ty.backward(torch.tensor(g))
        got = _max_pool2d(np, x, **attrs)
        np.testing.assert_array_equal(got, ty.detach().numpy())
        got_grad = _max_pool2d_backward(np, g, x, **attrs)
        np.testing.assert_allclose(got_grad, tx.grad.numpy(), rtol=1e-12, atol=0)


def test_max_pool_padding_never_wins_over_minus_infinity(torch, monkeypatch):
    x = np.array([[[[-np.inf, -np.inf, 2.0, 2.0]]]])
    g = np.array([[[[1.0, 10.0, 100.0, 1000.0]]]])
    attrs = _pool_attrs(((1, 3), (1, 1), (0, 1), (1, 1), False))
    for use_numba in ([True, False] if HAVE_NUMBA else [False]):
        dg.config.numba = use_numba
        got = _max_pool2d_backward(np, g, x, **attrs)
        np.testing.assert_array_equal(got, [[[[1.0, 0.0, 1110.0, 0.0]]]])
        gathered = _max_pool2d_gather(np, np.arange(4.0).reshape(x.shape), x,
                                                      **attrs)
        np.testing.assert_array_equal(gathered, [[[[0.0, 2.0, 2.0, 2.0]]]])


CONV_GEOMETRIES = [c for c in CONV if c.name in {
    "pad1", "stride2_pad1", "rect_kernel", "all_pairs", "groups2", "depthwise_x2",
    "same_even"}]


@needs_numba
@pytest.mark.parametrize("case", CONV_GEOMETRIES, ids=[c.id for c in CONV_GEOMETRIES])
def test_conv_numba_patch_copies_match_numpy(monkeypatch, case: Case):
    """The numba im2col/col2im against the numpy kernels, in the graph's normalised attrs;
    the matmuls see other layouts, so equal to rounding, not to the bit."""
    arrays = [a.astype("float32") for a in _arrays(case)]
    x, w = arrays[0], arrays[1]
    b = arrays[2] if len(arrays) > 2 else None
    node_attrs = _conv_node_attrs(case, arrays)
    g = np.random.default_rng(5).standard_normal(_out_shape(case, arrays)).astype("float32")

    def run():
        return (cpu_kernels.conv2d(np, x, w, b, **node_attrs),
                cpu_kernels.conv2d_input_grad(np, g, w, shape=x.shape, **node_attrs),
                cpu_kernels.conv2d_weight_grad(np, x, g, shape=w.shape, **node_attrs))

    fast, ref = _both_paths(monkeypatch, run)
    for name, a, r in zip(("forward", "input grad", "weight grad"), fast, ref):
        assert a.shape == r.shape and a.dtype == r.dtype and a.flags.c_contiguous, name
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5, err_msg=name)


def _conv_node_attrs(case: Case, arrays) -> dict:
    """The normalised attrs that the conv2d node of ``case`` carries."""
    graph = dg.Graph(case.name)
    with graph:
        _call(case, [dg.placeholder(f"x{i}", a.shape, F64) for i, a in enumerate(arrays)])
    node = next(n for n in graph.nodes if n.op.name == "conv2d")
    return dict(node.attrs)


@pytest.mark.parametrize("case", [c for c in CASES if c.op in ("conv2d", "max_pool2d")],
                         ids=[c.id for c in CASES if c.op in ("conv2d", "max_pool2d")])
def test_grad_matches_torch_without_numba(torch, monkeypatch, case: Case):
    """The numpy kernels alone (as on a machine without numba), eager mode."""
    dg.config.numba = False
    arrays = _arrays(case)
    ct = _ct(case, arrays)
    want_y, want_grads = _torch_run(torch, case, arrays, ct)
    y, grads = _eager_run(case, arrays, ct)
    np.testing.assert_allclose(y, want_y, **TOL)
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        np.testing.assert_allclose(g, w, **TOL, err_msg=f"gradient of operand {i}")


@pytest.mark.parametrize("shape, kernel", [((3, 2, 8, 8), (2, 2)), ((2, 3, 7, 9), (2, 3)),
                                           ((2, 2, 6, 6), (3, 3))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_numpy_tiled_max_pool_backward_is_the_general_kernel_bit_for_bit(
        monkeypatch, shape, kernel, dtype):
    """Windows that tile the input take the numpy mask path; it routes each cotangent to
    the same (first) maximum as the general numpy kernel, ties, -inf and signed zeros
    included, and leaves the rows and columns no window covers at 0."""
    dg.config.numba = False
    rng = np.random.default_rng(11)
    x = np.maximum(rng.standard_normal(shape), 0).astype(dtype)     # many tied zeros
    x[0, 0, :2, :2] = -np.inf
    x[-1, -1, :2, :3] = -0.0
    attrs = dict(kernel_size=kernel, stride=kernel, padding=(0, 0), dilation=(1, 1),
                 ceil_mode=False)
    out = _max_pool2d(np, x, **attrs)
    g = rng.standard_normal(out.shape).astype(dtype)
    g[0, 0, 0, 0] = -0.0
    assert cpu_kernels._tiles(x.shape, out.shape[2:], kernel, kernel, (0, 0), (1, 1))
    tiled = _max_pool2d_backward(np, g, x, **attrs)
    general = conv_ops._max_pool2d_backward_kernel(np, g, x, **attrs)   # the reference
    assert tiled.dtype == general.dtype and tiled.shape == general.shape
    np.testing.assert_array_equal(tiled.view(f"u{tiled.itemsize}"),
                                  general.view(f"u{general.itemsize}"))


# -- the CPU backend's out= forms (the planned runtime writes conv and pooling into its arena) --

from duograph.runtime.cpu import out_kernels as cpu_out_kernels  # noqa: E402

OUT_FORMS = cpu_out_kernels.table()
CONV_BATCHED = [c for c in CONV if len(c.shapes[0]) == 4]     # the kernels see NCHW images


def _conv_operands(case: Case, dtype: str):
    arrays = [a.astype(dtype) for a in _arrays(case)]
    b = arrays[2] if len(arrays) > 2 else None
    g = np.random.default_rng(5).standard_normal(_out_shape(case, arrays)).astype(dtype)
    return arrays[0], arrays[1], b, g, _conv_node_attrs(case, arrays)


def _garbage(shape, dtype):
    """An out= buffer full of NaNs: every element the kernel leaves alone shows."""
    return np.full(shape, np.nan, dtype=dtype)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CONV_BATCHED, ids=[c.id for c in CONV_BATCHED])
def test_conv_numba_kernels_and_out_forms(monkeypatch, case: Case, dtype: str):
    """Every conv geometry (odd sizes, strides, padding, dilation, groups): the numba paths
    (per-image patches, batched matmuls) match the numpy reference to rounding, and the
    out= forms write exactly the plain kernels' bits into a buffer of NaNs."""
    x, w, b, g, attrs = _conv_operands(case, dtype)

    def run():
        return (cpu_kernels.conv2d(np, x, w, b, **attrs),
                cpu_kernels.conv2d_input_grad(np, g, w, shape=x.shape, **attrs))

    fast, ref = _both_paths(monkeypatch, run)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for name, a, r in zip(("forward", "input grad"), fast, ref):
        assert a.shape == r.shape and a.dtype == r.dtype, name
        np.testing.assert_allclose(a, r, **tol, err_msg=name)
    out = _garbage(fast[0].shape, dtype)
    args = (x, w) if b is None else (x, w, b)
    assert OUT_FORMS[conv_ops.conv2d_op](np, *args, out=out, **attrs)
    assert out.tobytes() == fast[0].tobytes()
    gx = _garbage(x.shape, dtype)
    assert OUT_FORMS[conv_ops.conv2d_input_grad_op](np, g, w, out=gx, shape=x.shape, **attrs)
    assert gx.tobytes() == fast[1].tobytes()


@needs_numba
def test_conv_out_forms_refuse_what_they_cannot_write(monkeypatch):
    """A dtype other than the operands', a strided buffer or one overlapping an operand:
    False (the runtime then calls the plain kernel), the buffer untouched."""
    case = next(c for c in CONV if c.name == "pad1")
    x, w, b, g, attrs = _conv_operands(case, "float32")
    shape = cpu_kernels.conv2d(np, x, w, b, **attrs).shape
    form = OUT_FORMS[conv_ops.conv2d_op]
    wrong = _garbage(shape, "float64")
    assert not form(np, x, w, b, out=wrong, **attrs) and np.isnan(wrong).all()
    strided = _garbage(shape[:3] + (2 * shape[3],), "float32")[..., ::2]
    assert not form(np, x, w, b, out=strided, **attrs)
    over_g = g.reshape(-1)[:x.size].reshape(x.shape)               # a view of g
    kept = g.copy()
    assert not OUT_FORMS[conv_ops.conv2d_input_grad_op](np, g, w, out=over_g, shape=x.shape,
                                                         **attrs)
    np.testing.assert_array_equal(g, kept)
    with dg.config.override(numba=False):
        assert not form(np, x, w, b, out=_garbage(shape, "float32"), **attrs)


@needs_numba
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES, ids=str)
def test_max_pool_out_forms_write_the_plain_kernels_bits(geometry):
    """max_pool2d and its backward (2x2 fast loops, overlapping, padded, dilated, ceil
    mode, NaNs) into a buffer of NaNs: the plain kernels' bits; an aliased buffer refused."""
    attrs = _pool_attrs(geometry)
    x, g, _ = _pool_operands(geometry, "float32", nans=True)
    want = _max_pool2d(np, x, **attrs)
    out = _garbage(want.shape, "float32")
    assert OUT_FORMS[conv_ops.max_pool2d_op](np, x, out=out, **attrs)
    assert out.tobytes() == want.tobytes()
    want = _max_pool2d_backward(np, g, x, **attrs)
    gx = _garbage(x.shape, "float32")
    assert OUT_FORMS[conv_ops.max_pool2d_backward_op](np, g, x, out=gx, **attrs)
    assert gx.tobytes() == want.tobytes()
    alias = x.copy()
    assert not OUT_FORMS[conv_ops.max_pool2d_backward_op](np, g, alias, out=alias, **attrs)
