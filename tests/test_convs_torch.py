"""Convolution and resampling against PyTorch: conv1d/3d, conv_transpose1d/2d/3d, the 1-D and
3-D pools, max_pool2d(return_indices=) with max_unpool2d, adaptive_max_pool2d, pad's modes
and negative pads, interpolate, unfold/fold and pixel_shuffle/unshuffle.

Values and gradients (input, weight, bias) in eager mode, graph mode (O0 and O2, with a
symbolic batch dim run at two batch sizes) and through ``dg.compile``; the modules with
PyTorch's parameter names, shapes and state_dicts; errors. (Finite differences: the op-table
entries in ``op_samples.py`` run through test_ops.py.)"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.nn import functional as NF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

TOL64 = dict(rtol=1e-9, atol=1e-11)
TOL32 = dict(rtol=1e-5, atol=2e-6)


class Case(NamedTuple):
    id: str
    ours: Callable
    theirs: Callable
    shapes: tuple          # float operands (the first is the batched input)
    kwargs: dict
    batched: bool = True   # the first operand's dim 0 is a batch dim (symbolic in graph mode)


def _c(id, ours, theirs, shapes, batched=True, **kwargs):
    return Case(id, ours, theirs, shapes, kwargs, batched)


CASES = [
    _c("conv1d", NF.conv1d, TF.conv1d, ((2, 4, 9), (6, 2, 3), (6,)),
       stride=2, padding=1, dilation=2, groups=2),
    _c("conv1d_same", NF.conv1d, TF.conv1d, ((2, 3, 7), (4, 3, 4)), padding="same"),
    _c("conv1d_unbatched", NF.conv1d, TF.conv1d, ((3, 7), (4, 3, 2), (4,)), False),
    _c("conv3d", NF.conv3d, TF.conv3d, ((2, 4, 5, 6, 5), (6, 2, 2, 3, 2), (6,)),
       stride=(2, 1, 2), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2),
    _c("conv3d_same", NF.conv3d, TF.conv3d, ((1, 2, 4, 4, 3), (3, 2, 3, 2, 3)),
       padding="same"),
    _c("conv_transpose1d", NF.conv_transpose1d, TF.conv_transpose1d,
       ((2, 4, 5), (4, 3, 3), (3,)), stride=2, padding=1, output_padding=1),
    _c("conv_transpose1d_groups", NF.conv_transpose1d, TF.conv_transpose1d,
       ((2, 4, 5), (4, 1, 2)), stride=3, groups=2, dilation=2, output_padding=2),
    _c("conv_transpose2d", NF.conv_transpose2d, TF.conv_transpose2d,
       ((2, 4, 3, 4), (4, 3, 3, 2), (6,)), stride=(2, 3), padding=(1, 0),
       output_padding=(1, 2), groups=2, dilation=(1, 2)),
    _c("conv_transpose2d_pad_lt_outpad", NF.conv_transpose2d, TF.conv_transpose2d,
       ((2, 3, 3, 3), (3, 2, 3, 3), (2,)), stride=3, padding=1, output_padding=2),
    _c("conv_transpose2d_dilation_outpad", NF.conv_transpose2d, TF.conv_transpose2d,
       ((1, 2, 3, 4), (2, 3, 3, 3)), output_padding=1, dilation=2),
    _c("conv_transpose2d_unbatched", NF.conv_transpose2d, TF.conv_transpose2d,
       ((2, 3, 3), (2, 2, 2, 2)), False, stride=2),
    _c("conv_transpose3d", NF.conv_transpose3d, TF.conv_transpose3d,
       ((2, 4, 3, 3, 2), (4, 1, 3, 2, 2), (2,)), stride=(2, 1, 2), padding=(1, 0, 1),
       output_padding=(1, 0, 1), groups=2, dilation=(2, 1, 1)),
    _c("conv_transpose3d_outpad", NF.conv_transpose3d, TF.conv_transpose3d,
       ((1, 2, 2, 3, 3), (2, 3, 2, 2, 2)), stride=3, output_padding=2),
    _c("max_pool1d", NF.max_pool1d, TF.max_pool1d, ((2, 3, 9),),
       kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True),
    _c("max_pool1d_indices", NF.max_pool1d, TF.max_pool1d, ((2, 3, 9),),
       kernel_size=3, stride=2, return_indices=True),
    _c("avg_pool1d", NF.avg_pool1d, TF.avg_pool1d, ((2, 3, 10),),
       kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False),
    _c("max_pool3d", NF.max_pool3d, TF.max_pool3d, ((2, 2, 5, 6, 7),),
       kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1),
       ceil_mode=True),
    _c("max_pool3d_unbatched", NF.max_pool3d, TF.max_pool3d, ((2, 4, 4, 5),), False,
       kernel_size=2),
    _c("avg_pool3d", NF.avg_pool3d, TF.avg_pool3d, ((2, 2, 5, 6, 7),),
       kernel_size=3, stride=2, padding=1, ceil_mode=True),
    _c("avg_pool3d_no_pad_count", NF.avg_pool3d, TF.avg_pool3d, ((2, 2, 5, 6, 7),),
       kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
       count_include_pad=False),
    _c("max_pool2d_indices", NF.max_pool2d, TF.max_pool2d, ((2, 2, 7, 6),),
       kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True),
    _c("adaptive_max_pool2d", NF.adaptive_max_pool2d, TF.adaptive_max_pool2d,
       ((2, 2, 7, 6),), output_size=(3, 4), return_indices=True),
    _c("adaptive_max_pool2d_grow", NF.adaptive_max_pool2d, TF.adaptive_max_pool2d,
       ((2, 2, 3, 3),), output_size=(5, None)),
    _c("adaptive_avg_pool1d", NF.adaptive_avg_pool1d, TF.adaptive_avg_pool1d, ((2, 3, 7),),
       output_size=3),
    _c("adaptive_max_pool1d", NF.adaptive_max_pool1d, TF.adaptive_max_pool1d, ((2, 3, 7),),
       output_size=4, return_indices=True),
    _c("adaptive_max_pool1d_unbatched", NF.adaptive_max_pool1d, TF.adaptive_max_pool1d,
       ((3, 7),), False, output_size=2),
    _c("unfold", NF.unfold, TF.unfold, ((2, 3, 5, 6),),
       kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    _c("fold", NF.fold, TF.fold, ((2, 18, 12),),
       output_size=(5, 6), kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    _c("pixel_shuffle", NF.pixel_shuffle, TF.pixel_shuffle, ((2, 8, 2, 3),),
       upscale_factor=2),
    _c("pixel_unshuffle", NF.pixel_unshuffle, TF.pixel_unshuffle, ((2, 3, 4, 6),),
       downscale_factor=2),
]

for _mode in ("constant", "reflect", "replicate", "circular"):
    CASES += [
        _c(f"pad_{_mode}_1d", NF.pad, TF.pad, ((2, 3, 5),), pad=(2, 3), mode=_mode),
        _c(f"pad_{_mode}_2d_neg", NF.pad, TF.pad, ((2, 3, 4, 5),), pad=(2, -1, -1, 3),
           mode=_mode),
        _c(f"pad_{_mode}_3d", NF.pad, TF.pad, ((1, 2, 3, 4, 5),), pad=(1, 2, 2, 1, 0, 2),
           mode=_mode),
        _c(f"pad_{_mode}_crop_then_pad", NF.pad, TF.pad, ((2, 3, 6),), pad=(-2, 3),
           mode=_mode),
    ]
CASES.append(_c("pad_constant_value", NF.pad, TF.pad, ((2, 3),), pad=(1, -1, 2, 0),
                value=2.5))

_INTERP = [
    ("nearest_down", (2, 2, 7, 9), dict(size=(3, 4))),
    ("nearest_scale", (2, 2, 5, 6), dict(scale_factor=1.7)),
    ("nearest_1d", (2, 2, 9), dict(scale_factor=0.4)),
    ("nearest_3d", (1, 2, 3, 4, 5), dict(size=(5, 3, 7))),
    ("nearest_exact", (2, 2, 5, 7), dict(size=(7, 4), mode="nearest-exact")),
    ("linear", (2, 3, 6), dict(size=10, mode="linear")),
    ("linear_align", (2, 3, 6), dict(scale_factor=2.5, mode="linear", align_corners=True)),
    ("bilinear_scale", (2, 2, 5, 4), dict(scale_factor=(1.5, 0.7), mode="bilinear")),
    ("bilinear_recompute", (2, 2, 5, 4), dict(scale_factor=1.7, mode="bilinear",
                                              recompute_scale_factor=True)),
    ("bilinear_align", (2, 2, 5, 4), dict(size=(8, 3), mode="bilinear", align_corners=True)),
    ("bicubic", (2, 2, 5, 6), dict(size=(9, 4), mode="bicubic")),
    ("bicubic_align", (2, 2, 5, 6), dict(scale_factor=2, mode="bicubic",
                                         align_corners=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 3, 7), mode="trilinear")),
    ("area", (2, 2, 7, 9), dict(size=(3, 4), mode="area")),
    ("area_1d", (2, 2, 9), dict(scale_factor=0.5, mode="area")),
]
CASES += [_c(f"interpolate_{name}", NF.interpolate, TF.interpolate, (shape,), **kw)
          for name, shape, kw in _INTERP]


def _arrays(case: Case, rng, batch=None):
    shapes = list(case.shapes)
    if batch is not None:
        shapes[0] = (batch,) + tuple(shapes[0][1:])
    return [rng.standard_normal(s) for s in shapes]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _torch(case: Case, arrays, cotangent=None):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = case.theirs(*ts, **case.kwargs)
    values = [o.detach().numpy() for o in (out if isinstance(out, tuple) else (out,))]
    grads = None
    if cotangent is not None:
        (_first(out) * torch.tensor(cotangent)).sum().backward()
        grads = [t.grad.numpy() for t in ts]
    return values, grads


def _ours(fn, case, *operands):
    return fn(*operands, **case.kwargs)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_eager_values_and_gradients_match_torch(case: Case):
    rng = np.random.default_rng(0)
    arrays = _arrays(case, rng)
    want, _ = _torch(case, arrays)
    ct = rng.standard_normal(want[0].shape)
    want, want_grads = _torch(case, arrays, ct)
    xs = [dg.tensor(a, requires_grad=True) for a in arrays]
    out = _ours(case.ours, case, *xs)
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(want)
    for got, w in zip(outs, want):
        assert tuple(got.shape) == w.shape and got.dtype == str(w.dtype)
        np.testing.assert_allclose(got.detach().numpy(), w, **TOL64)
    (_first(out) * dg.tensor(ct)).sum().backward()
    for x, g in zip(xs, want_grads):
        np.testing.assert_allclose(x.grad.numpy(), g, **TOL64)


@pytest.mark.parametrize("passes", ["O0", "O2"])
@pytest.mark.parametrize("case", [c for c in CASES if c.batched], ids=lambda c: c.id)
def test_graph_mode_with_a_symbolic_batch(case: Case, passes):
    rng = np.random.default_rng(1)
    arrays = _arrays(case, rng)
    graph = dg.Graph(case.id)
    with graph:
        xs = [dg.placeholder("x0", ("N",) + tuple(arrays[0].shape[1:]), "float64")]
        xs += [dg.placeholder(f"x{i}", a.shape, "float64") for i, a in enumerate(arrays)
               if i]
        out = _ours(case.ours, case, *xs)
        outs = list(out) if isinstance(out, tuple) else [out]
        assert "N" in str(outs[0].shape[0])      # N, or N+2 where pad pads dim 0
        ct = dg.placeholder("ct", outs[0].shape, "float64")
        grads = list(dg.grad(dg.sum(outs[0] * ct), xs))
    exe = graph.compile(outputs=outs + grads, passes=passes)
    for n in (1, 3):
        arrays = _arrays(case, rng, batch=n)
        want, _ = _torch(case, arrays)
        cta = rng.standard_normal(want[0].shape)
        want, want_grads = _torch(case, arrays, cta)
        got = exe(ct=cta, **{f"x{i}": a for i, a in enumerate(arrays)})
        for g, w in zip(got, want + want_grads):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, **TOL64)


@pytest.mark.parametrize("case", CASES[::3], ids=lambda c: c.id)
def test_dg_compile_matches_torch(case: Case):
    rng = np.random.default_rng(2)
    arrays = _arrays(case, rng)
    want, _ = _torch(case, arrays)
    fast = dg.compile(lambda *xs: _first(_ours(case.ours, case, *xs)), passes="O2")
    for _ in range(2):                      # the recording call and a replay
        got = fast(*[dg.tensor(a) for a in arrays])
    np.testing.assert_allclose(got.numpy(), want[0], **TOL64)


@pytest.mark.parametrize("name, shape, kw", _INTERP, ids=[n for n, _, _ in _INTERP])
def test_interpolate_float32_matches_torch(name, shape, kw):
    """float32 positions and weights are computed as PyTorch's kernels compute them."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    want = TF.interpolate(torch.from_numpy(x), **kw).numpy()
    got = NF.interpolate(dg.tensor(x), **kw)
    assert got.dtype == "float32"
    np.testing.assert_allclose(got.numpy(), want, **TOL32)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_indices_are_torchs_for_many_sizes(mode):
    for n in range(1, 12):
        x = np.arange(n, dtype=np.float32).reshape(1, 1, n)
        for out in range(1, 25):
            want = TF.interpolate(torch.from_numpy(x), size=out, mode=mode).numpy()
            got = NF.interpolate(dg.tensor(x), size=out, mode=mode).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{n} -> {out}")
        for scale in (0.3, 0.5, 1.3, 1.5, 2.0, 2.7, 3.0):
            if int(n * scale) < 1:
                continue
            want = TF.interpolate(torch.from_numpy(x), scale_factor=scale, mode=mode).numpy()
            got = NF.interpolate(dg.tensor(x), scale_factor=scale, mode=mode).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{n} x {scale}")


def test_max_unpool2d_inverts_max_pool2d_as_torch():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 7, 7))
    for kw in (dict(kernel_size=(2, 3), stride=2), dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=3, stride=1)):
        tv, ti = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
        v, i = NF.max_pool2d(dg.tensor(x), return_indices=True, **kw)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        assert i.dtype == "int64"
        tvr = tv.detach().clone().requires_grad_(True)
        tu = TF.max_unpool2d(tvr, ti, **kw)
        ct = rng.standard_normal(tu.shape)
        (tu * torch.tensor(ct)).sum().backward()
        vr = dg.tensor(v.numpy(), requires_grad=True)
        u = NF.max_unpool2d(vr, i, **kw)
        np.testing.assert_array_equal(u.detach().numpy(), tu.detach().numpy())
        (u * dg.tensor(ct)).sum().backward()
        np.testing.assert_allclose(vr.grad.numpy(), tvr.grad.numpy(), **TOL64)
    tv, ti = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    want = TF.max_unpool2d(tv, ti, 2, output_size=(7, 7))
    got = NF.max_unpool2d(dg.tensor(tv.numpy()), dg.tensor(ti.numpy()), 2,
                          output_size=(2, 2, 7, 7))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(dg.ShapeError, match="output_size"):
        NF.max_unpool2d(dg.tensor(tv.numpy()), dg.tensor(ti.numpy()), 2, output_size=(9, 9))


def test_adaptive_max_pool2d_nan_wins_as_torch():
    x = np.random.default_rng(5).standard_normal((1, 1, 5, 5))
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = np.nan
    tv, ti = TF.adaptive_max_pool2d(torch.tensor(x), 2, return_indices=True)
    v, i = NF.adaptive_max_pool2d(dg.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())


# -- modules -----------------------------------------------------------------------------------
MODULES = {
    "Conv1d": (lambda m: m.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9)),
    "Conv1d_reflect": (lambda m: m.Conv1d(3, 2, 3, padding=2, padding_mode="reflect"),
                       (2, 3, 7)),
    "Conv2d_circular": (lambda m: m.Conv2d(3, 2, 3, padding=1, padding_mode="circular"),
                        (2, 3, 5, 6)),
    "Conv2d_replicate_same": (lambda m: m.Conv2d(3, 2, (2, 3), padding="same",
                                                 padding_mode="replicate"), (2, 3, 5, 6)),
    "Conv3d": (lambda m: m.Conv3d(2, 4, (2, 3, 2), padding=(1, 0, 1), bias=False),
               (2, 2, 4, 5, 4)),
    "ConvTranspose1d": (lambda m: m.ConvTranspose1d(4, 6, 3, stride=2, groups=2), (2, 4, 5)),
    "ConvTranspose2d": (lambda m: m.ConvTranspose2d(3, 4, (3, 2), stride=2, padding=1,
                                                    output_padding=1), (2, 3, 3, 4)),
    "ConvTranspose3d": (lambda m: m.ConvTranspose3d(2, 3, 2, stride=2, dilation=1),
                        (1, 2, 2, 3, 2)),
    "MaxPool1d": (lambda m: m.MaxPool1d(3, 2, 1), (2, 3, 8)),
    "MaxPool3d": (lambda m: m.MaxPool3d(2, ceil_mode=True), (2, 2, 5, 5, 3)),
    "AvgPool1d": (lambda m: m.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 3, 8)),
    "AvgPool3d": (lambda m: m.AvgPool3d((2, 3, 2), 2, 1), (2, 2, 5, 6, 4)),
    "AdaptiveMaxPool2d": (lambda m: m.AdaptiveMaxPool2d((3, 2)), (2, 2, 7, 5)),
    "AdaptiveAvgPool1d": (lambda m: m.AdaptiveAvgPool1d(3), (2, 2, 7)),
    "AdaptiveMaxPool1d": (lambda m: m.AdaptiveMaxPool1d(5), (2, 2, 7)),
    "Unfold": (lambda m: m.Unfold(2, padding=1), (2, 3, 4, 5)),
    "Fold": (lambda m: m.Fold((4, 5), 2), (2, 12, 12)),
    "PixelShuffle": (lambda m: m.PixelShuffle(2), (2, 8, 3, 2)),
    "PixelUnshuffle": (lambda m: m.PixelUnshuffle(3), (2, 1, 6, 3)),
    "Upsample": (lambda m: m.Upsample(scale_factor=2, mode="bilinear"), (2, 2, 3, 4)),
    "Upsample_nearest": (lambda m: m.Upsample(size=(5, 7)), (2, 2, 3, 4)),
    "UpsamplingBilinear2d": (lambda m: m.UpsamplingBilinear2d(scale_factor=2), (2, 2, 3, 4)),
    "UpsamplingNearest2d": (lambda m: m.UpsamplingNearest2d(size=5), (2, 2, 3, 4)),
    "ReflectionPad2d": (lambda m: m.ReflectionPad2d((1, 2, 0, 2)), (2, 2, 3, 4)),
    "ReplicationPad1d": (lambda m: m.ReplicationPad1d(3), (2, 2, 3)),
    "ReplicationPad3d": (lambda m: m.ReplicationPad3d(1), (1, 2, 2, 3, 2)),
    "CircularPad2d": (lambda m: m.CircularPad2d(1), (2, 2, 3, 4)),
    "ConstantPad3d": (lambda m: m.ConstantPad3d((1, 0, 2, 1, 0, 1), 3.5), (1, 2, 2, 3, 2)),
    "ZeroPad2d": (lambda m: m.ZeroPad2d((1, 2, 3, 0)), (2, 2, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_load_torch_state_dicts_and_match(name):
    make, shape = MODULES[name]
    torch.manual_seed(0)
    theirs = make(torch.nn).double()
    ours = make(nn).double()
    sd = theirs.state_dict()
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in sd.items()}
    ours.load_state_dict({k: v.numpy() for k, v in sd.items()})
    x = np.random.default_rng(6).standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    ct = np.random.default_rng(7).standard_normal(ty.shape)
    (ty * torch.tensor(ct)).sum().backward()
    dx = dg.tensor(x, requires_grad=True)
    y = ours(dx)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), **TOL64)
    (y * dg.tensor(ct)).sum().backward()
    np.testing.assert_allclose(dx.grad.numpy(), tx.grad.numpy(), **TOL64)
    for (k, p), (k2, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert k == k2
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), **TOL64)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("cls, args", [
    ("Conv1d", (4, 6, 3)), ("Conv3d", (2, 4, (2, 3, 2))), ("ConvTranspose1d", (4, 6, 3)),
    ("ConvTranspose2d", (6, 4, (3, 2), 1, 0, 0, 2)), ("ConvTranspose3d", (2, 3, 2))])
def test_conv_init_follows_torch(cls, args):
    """kaiming_uniform_(a=sqrt(5)) on the weight (bound 1/sqrt(fan_in), fan_in from the
    weight's dim 1), U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias."""
    dg.manual_seed(0)
    m = getattr(nn, cls)(*args)
    t = getattr(torch.nn, cls)(*args)
    assert tuple(m.weight.shape) == tuple(t.weight.shape)
    fan_in = int(np.prod(t.weight.shape[1:]))
    bound = 1.0 / np.sqrt(fan_in)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.5 * bound
    assert np.abs(b).max() <= bound
    assert w.dtype == np.float32


def test_conv_transpose_output_size_as_torch():
    torch.manual_seed(0)
    t = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    m = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    x = np.random.default_rng(8).standard_normal((1, 2, 4, 4))
    want = t(torch.tensor(x), output_size=(8, 8)).detach().numpy()
    got = m(dg.tensor(x), output_size=(1, 3, 8, 8))
    np.testing.assert_allclose(got.detach().numpy(), want, **TOL64)
    with pytest.raises(dg.ShapeError, match="valid sizes range from 7 to 8"):
        m(dg.tensor(x), output_size=(9, 9))


def test_max_pool2d_module_return_indices_and_unpool():
    x = np.random.default_rng(9).standard_normal((2, 2, 6, 6))
    pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)
    tpool, tunpool = torch.nn.MaxPool2d(2, return_indices=True), torch.nn.MaxUnpool2d(2)
    v, i = pool(dg.tensor(x))
    tv, ti = tpool(torch.tensor(x))
    np.testing.assert_array_equal(unpool(v, i).numpy(), tunpool(tv, ti).numpy())
    tv, ti = torch.nn.AdaptiveMaxPool2d(3, return_indices=True)(torch.tensor(x))
    v, i = nn.AdaptiveMaxPool2d(3, return_indices=True)(dg.tensor(x))
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


# -- errors ------------------------------------------------------------------------------------
ERRORS = [
    (lambda: NF.conv_transpose2d(dg.zeros(1, 2, 3, 3), dg.zeros(2, 1, 3, 3), stride=2,
                                 output_padding=2), dg.ShapeError,
     "output_padding .* must be smaller than either stride"),
    (lambda: NF.conv_transpose2d(dg.zeros(1, 3, 3, 3), dg.zeros(2, 1, 3, 3)), dg.ShapeError,
     "has 3 channels, expected 2"),
    (lambda: NF.conv3d(dg.zeros(1, 3, 3, 3, 3), dg.zeros(2, 2, 1, 1, 1)), dg.ShapeError,
     "3 channels"),
    (lambda: NF.conv3d(dg.zeros(2, 3, 3), dg.zeros(2, 2, 1, 1, 1)), dg.ShapeError,
     r"5-D input \[N,C,D,H,W\]"),
    (lambda: NF.conv1d(dg.zeros(1, 2, 5), dg.zeros(2, 2, 3, 3)), dg.ShapeError, "3-D weight"),
    (lambda: NF.pad(dg.zeros(2, 3), (1, 1), mode="reflect") * 0 + NF.pad(
        dg.zeros(3,), (1, 1), mode="reflect"), NotImplementedError, "last 1, 2 or 3 dims"),
    (lambda: NF.pad(dg.zeros(1, 2, 3), (3, 0), mode="reflect"), dg.ShapeError,
     "must be less than the size 3"),
    (lambda: NF.pad(dg.zeros(1, 2, 3), (4, 0), mode="circular"), dg.ShapeError,
     "wrap around more than once"),
    (lambda: NF.pad(dg.zeros(1, 2, 3), (1, 0), mode="reflect", value=1.0), ValueError,
     "takes no value"),
    (lambda: NF.pad(dg.zeros(1, 2, 3), (-2, -2)), dg.ShapeError, "negative size"),
    (lambda: NF.pad(dg.zeros(1, 2, 3), (1, 0), mode="wrap"), ValueError, "one of constant"),
    (lambda: NF.interpolate(dg.zeros(1, 2, 3), size=4, mode="bilinear"), NotImplementedError,
     "needs a 4-D input"),
    (lambda: NF.interpolate(dg.zeros(1, 2, 3), size=4, mode="nearest", align_corners=True),
     ValueError, "align_corners can only be set"),
    (lambda: NF.interpolate(dg.zeros(1, 2, 3), size=4, scale_factor=2), ValueError,
     "only one of size or scale_factor"),
    (lambda: NF.interpolate(dg.zeros(1, 2, 3, 3), size=(4, 4, 4)), ValueError,
     "same number of spatial dims"),
    (lambda: NF.pixel_shuffle(dg.zeros(1, 3, 2, 2), 2), dg.ShapeError, "divisible by"),
    (lambda: NF.fold(dg.zeros(1, 8, 5), (3, 3), 2), dg.ShapeError, "sliding blocks"),
    (lambda: NF.max_pool3d(dg.zeros(1, 1, 4, 4, 4), 2, return_indices=True), ValueError,
     "return_indices"),
    (lambda: NF.conv_transpose3d(dg.zeros(1, 2, 2, 2, 2), dg.zeros(2, 3, 1, 1, 1),
                                 dg.zeros(2)), dg.ShapeError, r"bias of shape \[3\]"),
    (lambda: NF.conv_transpose1d(dg.zeros(1, 2, 5), dg.zeros(2, 3)), dg.ShapeError,
     r"3-D weight \[C_in,C_out/groups,kW\]"),
    (lambda: NF.max_unpool2d(dg.zeros(1, 1, 2, 2), dg.tensor(np.full((1, 1, 2, 2), 16)), 2),
     IndexError, "invalid max index 16"),
    # conv_transpose3d checks every dim itself (not through its inner conv_transpose2d)
    (lambda: NF.conv_transpose3d(dg.zeros(1, 4, 3, 3, 3), dg.zeros(4, 2, 2, 2, 2),
                                 output_padding=(0, 2, 0)), dg.ShapeError,
     r"^conv_transpose3d: output_padding \(0, 2, 0\) must be smaller than either stride "
     r"\(1, 1, 1\)"),
    (lambda: NF.conv_transpose3d(dg.zeros(1, 4, 3, 3, 3), dg.zeros(4, 2, 2, 2, 2), groups=3),
     dg.ShapeError, r"^conv_transpose3d: weight \[4,2,2,2,2\] has 4 input channels, which "
     r"groups=3"),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_bad_input_raises_clear_errors(k):
    fn, exc, match = ERRORS[k]
    with pytest.raises(exc, match=match):
        fn()
