"""The CPU backend's conv2d algorithms (``dg.config.conv_algorithm``), each forced in turn,
against the op's numpy reference kernel in float64, with no PyTorch.

Shapes cover every kernel choice: the direct loops (``conv_direct``: depthwise with and
without a channel multiplier, strided, dilated, uneven 'same' padding, one input channel),
im2col + GEMM per image, the 1x1 form without im2col (plain and grouped), grouped, strided
and dilated 3x3, a 7x7 stem. Forward, input gradient and weight gradient, float32 and
float64.

Tolerance: a float32 result sums K = C_in/groups * kh * kw products (and the weight
gradient N * H_out * W_out of them); in any order, the rounding error of such a sum is at
most ~K * eps * sum |terms| (first-order bound). The check is elementwise: |ours - exact| <=
K * eps * (the same convolution of |operands|), with eps of the dtype and the float64
reference as "exact" (its own error is ~1e-16 relative, negligible here).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops import conv
from duograph.runtime.cpu import autotune
from duograph.runtime.cpu import kernels as cpu_kernels
from duograph.runtime.cpu import scratch as cpu_scratch
from duograph.runtime.cpu.numba_support import numba_available, numba_module

pytestmark = pytest.mark.skipif(not numba_available(), reason="the algorithms need numba")


class Geometry(NamedTuple):
    id: str
    x: tuple
    w: tuple
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)       # top, bottom, left, right
    dilation: tuple = (1, 1)
    groups: int = 1

    def attrs(self):
        return dict(stride=self.stride, padding=self.padding, dilation=self.dilation,
                    groups=self.groups)

    def out_shape(self):
        h = (self.x[2] + self.padding[0] + self.padding[1] - self.dilation[0]
             * (self.w[2] - 1) - 1) // self.stride[0] + 1
        w = (self.x[3] + self.padding[2] + self.padding[3] - self.dilation[1]
             * (self.w[3] - 1) - 1) // self.stride[1] + 1
        return (self.x[0], self.w[0], h, w)


GEOMETRIES = [
    Geometry("depthwise", (2, 4, 7, 6), (4, 1, 3, 3), padding=(1, 1, 1, 1), groups=4),
    Geometry("depthwise_multiplier", (2, 3, 6, 7), (6, 1, 3, 2), padding=(2, 2, 1, 1),
             dilation=(2, 1), groups=3),
    Geometry("depthwise_stride2", (2, 4, 9, 8), (4, 1, 3, 3), stride=(2, 2),
             padding=(1, 1, 1, 1), groups=4),
    Geometry("depthwise_stride_rows", (1, 2, 7, 9), (2, 1, 2, 3), stride=(2, 1), groups=2),
    Geometry("depthwise_large_planes", (1, 3, 18, 17), (3, 1, 3, 3), padding=(1, 1, 1, 1),
             groups=3),                            # over 256 output pixels: plane by plane
    Geometry("depthwise_channel_blocks", (1, 70, 5, 4), (140, 1, 3, 3), stride=(2, 1),
             padding=(1, 1, 1, 1), groups=70),     # more than one block of 64 channels
    Geometry("depthwise_same_uneven", (1, 3, 5, 6), (3, 1, 4, 4), padding=(1, 2, 1, 2),
             groups=3),
    Geometry("one_channel", (3, 1, 9, 8), (4, 1, 3, 3)),
    Geometry("one_channel_stride3", (2, 1, 10, 11), (3, 1, 3, 2), stride=(3, 2),
             padding=(0, 0, 1, 1)),
    Geometry("pointwise", (2, 6, 5, 4), (8, 6, 1, 1)),
    Geometry("pointwise_groups", (2, 6, 4, 4), (4, 3, 1, 1), groups=2),
    Geometry("pointwise_stride", (2, 4, 5, 5), (3, 4, 1, 1), stride=(2, 2)),
    Geometry("3x3_groups", (2, 4, 6, 6), (6, 2, 3, 3), padding=(1, 1, 1, 1), groups=2),
    Geometry("3x3_stride_dilation", (2, 3, 9, 8), (5, 3, 3, 3), stride=(2, 1),
             padding=(2, 2, 1, 1), dilation=(2, 2)),
    Geometry("7x7_stride2", (1, 3, 16, 15), (4, 3, 7, 7), stride=(2, 2),
             padding=(3, 3, 3, 3)),
    Geometry("3x3_winograd_rule", (2, 32, 14, 13), (32, 32, 3, 3), padding=(1, 1, 1, 1)),
    Geometry("3x3_uneven_padding", (1, 3, 7, 6), (5, 3, 3, 3), padding=(0, 2, 1, 0)),
    Geometry("3x3_wide_padding", (2, 2, 5, 4), (3, 2, 3, 3), padding=(3, 1, 0, 2)),
]
ALGORITHMS = ["direct", "gemm", "winograd", "benchmark", "auto"]
# Winograd F(4x4, 3x3) adds the transforms' rounding, and it spreads over each 4x4 tile
# (an output whose taps all read padding is no longer exactly 0), so its bound is normwise:
# WINOGRAD_GROWTH times the direct sum's bound at the largest |operands| convolution of the
# result (the transform coefficients reach 8 in A^T, 5 in B^T; the worst error measured
# over these geometries, float32 and float64, is 0.3 of the bound without the growth).
WINOGRAD_GROWTH = 4


def _operands(geo: Geometry, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(geo.x)
    w = rng.standard_normal(geo.w)
    g = rng.standard_normal(geo.out_shape())
    return x.astype(dtype), w.astype(dtype), g.astype(dtype)


def _reference(geo: Geometry, x, w, g):
    """float64 results and bounds: (exact, the same pass on |operands|, terms per sum)."""
    attrs = geo.attrs()
    x, w, g = (a.astype(np.float64) for a in (x, w, g))

    def passes(x, w, g):
        return {"forward": conv._conv2d_kernel(np, x, w, **attrs),
                "input_grad": conv._conv2d_input_grad_kernel(np, g, w, shape=x.shape, **attrs),
                "weight_grad": conv._conv2d_weight_grad_kernel(np, x, g, shape=w.shape,
                                                               **attrs)}
    exact = passes(x, w, g)
    scale = passes(np.abs(x), np.abs(w), np.abs(g))
    per_group = geo.w[1] * geo.w[2] * geo.w[3]
    out = geo.out_shape()
    terms = {"forward": per_group, "input_grad": geo.w[0] // geo.groups * geo.w[2] * geo.w[3],
             "weight_grad": out[0] * out[2] * out[3]}
    return exact, scale, terms


def _ours(geo: Geometry, x, w, g):
    attrs = geo.attrs()
    return {"forward": cpu_kernels.conv2d(np, x, w, **attrs),
            "input_grad": cpu_kernels.conv2d_input_grad(np, g, w, shape=x.shape, **attrs),
            "weight_grad": cpu_kernels.conv2d_weight_grad(np, x, g, shape=w.shape, **attrs)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: g.id)
def test_every_algorithm_matches_the_reference(geo: Geometry, algorithm: str, dtype: str):
    x, w, g = _operands(geo, dtype)
    exact, scale, terms = _reference(geo, x, w, g)
    eps = np.finfo(dtype).eps
    with dg.config.override(conv_algorithm=algorithm):
        ours = _ours(geo, x, w, g)
    for name, value in ours.items():
        assert value.dtype == np.dtype(dtype) and value.shape == exact[name].shape, name
        bound = 2 * terms[name] * eps * scale[name] + np.finfo(dtype).tiny
        if _runs_winograd(geo, name, algorithm):
            bound = WINOGRAD_GROWTH * bound.max()
        err = np.abs(value.astype(np.float64) - exact[name])
        assert np.all(err <= bound), (name, float(err.max()), float(bound.max()))


def _runs_winograd(geo: Geometry, kind: str, algorithm: str) -> bool:
    """Whether pass ``kind`` of ``geo`` may run the Winograd transforms under ``algorithm``."""
    shape = geo.x if kind == "forward" else geo.x
    applies = autotune.winograd_applies(kind, geo.w, geo.groups, geo.stride, geo.padding,
                                        geo.dilation)
    if algorithm in ("winograd", "benchmark"):
        return applies
    return autotune.conv_rule(kind, shape, geo.w, geo.groups, geo.stride, geo.padding,
                              geo.dilation) == "winograd"


def _count_direct_calls(monkeypatch):
    """Wrap the direct loops so a test sees which passes ran them."""
    module = numba_module("conv_direct")
    calls = []
    for name in ("forward", "input_grad", "weight_grad"):
        original = getattr(module, name)

        def wrapped(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)
        monkeypatch.setattr(module, name, wrapped)
    return calls


@pytest.mark.parametrize("algorithm,expected", [
    ("direct", {"depthwise": 3, "one_channel": 3, "3x3_groups": 0}),
    ("gemm", {"depthwise": 0, "one_channel": 0, "3x3_groups": 0}),
    ("auto", {"depthwise": 3, "one_channel": 1, "3x3_groups": 0}),
])
def test_forced_algorithm_runs_where_it_applies_and_the_rule_elsewhere(
        monkeypatch, algorithm, expected):
    """``direct`` runs the direct loops wherever a group has one input channel (all three
    passes) and falls back to the rule (GEMM) elsewhere; ``gemm`` never runs them; the
    default rule runs them for depthwise, and for one input channel the weight gradient."""
    by_id = {geo.id: geo for geo in GEOMETRIES}
    for name, count in expected.items():
        calls = _count_direct_calls(monkeypatch)
        geo = by_id[name]
        with dg.config.override(conv_algorithm=algorithm):
            _ours(geo, *_operands(geo, "float32"))
        assert len(calls) == count, (name, calls)
        monkeypatch.undo()


def test_benchmark_mode_times_once_per_shape_and_keeps_its_choice(monkeypatch):
    timed = []
    real = autotune.runs_faster

    def spy(new, old, rounds, margin):
        timed.append(rounds)
        return real(new, old, rounds, margin)
    monkeypatch.setattr(autotune, "runs_faster", spy)
    monkeypatch.setattr(autotune, "_conv_choice", {})
    geo = GEOMETRIES[0]
    x, w, g = _operands(geo, "float32")
    with dg.config.override(conv_algorithm="benchmark"):
        first = _ours(geo, x, w, g)
        again = _ours(geo, x, w, g)
    assert len(timed) == 3                   # forward, input and weight gradient, once each
    assert set(autotune._conv_choice.values()) <= {"direct", "gemm", "winograd"}
    for name in first:                       # the same choice: the same bits
        assert np.array_equal(first[name], again[name]), name
    # where only GEMM applies nothing is timed
    geo = next(g for g in GEOMETRIES if g.id == "3x3_groups")
    with dg.config.override(conv_algorithm="benchmark"):
        _ours(geo, *_operands(geo, "float32"))
    assert len(timed) == 3


def test_the_rule_runs_winograd_only_within_its_limits(monkeypatch):
    """``auto`` picks Winograd for the forward and input gradient of a 3x3 stride-1 conv with
    enough channels and tiles, never for its weight gradient, thin or grouped convs, or
    weights over the limit."""
    calls = []
    real = cpu_kernels.conv_winograd.forward_into
    monkeypatch.setattr(cpu_kernels.conv_winograd, "forward_into",
                        lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    by_id = {geo.id: geo for geo in GEOMETRIES}
    _ours(by_id["3x3_winograd_rule"], *_operands(by_id["3x3_winograd_rule"], "float32"))
    assert calls == [(32, 32, 3, 3), (32, 32, 3, 3)]         # forward, input gradient
    calls.clear()
    for name in ("3x3_uneven_padding", "3x3_groups", "depthwise"):
        _ours(by_id[name], *_operands(by_id[name], "float32"))
    assert calls == []
    big = (autotune.WINOGRAD_MAX_WEIGHTS // 32 + 1, 32, 3, 3)
    assert autotune.conv_rule("forward", (8, 32, 56, 56), big, 1, (1, 1),
                              (1, 1, 1, 1), (1, 1)) == "gemm"
    assert autotune.conv_rule("forward", (1, 64, 8, 8), (64, 64, 3, 3), 1, (1, 1),
                              (1, 1, 1, 1), (1, 1)) == "gemm"            # 4 tiles
    assert autotune.conv_rule("forward", (1, 64, 56, 56), (64, 64, 3, 3), 1, (1, 1),
                              (1, 1, 1, 1), (1, 1)) == "winograd"


def test_direct_loops_are_deterministic_and_write_every_element():
    """The outputs are fully written (NaN-filled buffers come back finite) and two runs give
    the same bits (the default rule is a function of the shapes alone)."""
    geo = GEOMETRIES[2]
    x, w, g = _operands(geo, "float32")
    with dg.config.override(conv_algorithm="direct"):
        out = np.full(geo.out_shape(), np.nan, np.float32)
        cpu_kernels.conv2d_into(numba_module("conv_numba"), x, w, None, geo.stride,
                                geo.padding, geo.dilation, geo.groups, out)
        gx = np.full(geo.x, np.nan, np.float32)
        cpu_kernels.conv2d_input_grad_into(numba_module("conv_numba"), g, w, geo.stride,
                                           geo.padding, geo.dilation, geo.groups, gx)
        assert np.isfinite(out).all() and np.isfinite(gx).all()
        assert np.array_equal(out, cpu_kernels.conv2d(np, x, w, **geo.attrs()))


@pytest.mark.parametrize("algorithm", ["direct", "gemm"])
def test_depthwise_gradients_match_finite_differences_in_graph_mode(algorithm):
    """A depthwise conv2d in a graph (O2), its gradients for input and weight against
    central differences of the float64 forward."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 5, 4))
    w = rng.standard_normal((4, 1, 3, 2))
    c = rng.standard_normal((1, 4, 3, 4))
    attrs = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    graph = dg.Graph("depthwise_fd")
    with graph:
        xv = dg.placeholder("x", x.shape, "float64")
        wv = dg.placeholder("w", w.shape, "float64")
        loss = (dg.conv2d(xv, wv, None, **attrs) * dg.constant(c)).sum()
        grads = dg.grad(loss, [xv, wv])
    with dg.config.override(conv_algorithm=algorithm):
        exe = graph.compile(outputs=[loss] + grads, passes="O2")
        _, gx, gw = exe(x=x, w=w)

    def f(xa, wa):
        return float(exe(x=xa, w=wa)[0])
    step = 1e-6
    for arr, grad, which in ((x, gx, 0), (w, gw, 1)):
        numeric = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += step
            minus[idx] -= step
            args_p = (plus, w) if which == 0 else (x, plus)
            args_m = (minus, w) if which == 0 else (x, minus)
            with dg.config.override(conv_algorithm=algorithm):
                numeric[idx] = (f(*args_p) - f(*args_m)) / (2 * step)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(2, 3, 6, 8), (2, 3, 7, 8), (2, 3, 6, 9), (1, 2, 7, 9)])
def test_max_pool_2x2_backward_with_odd_edges_is_the_reference_bit_for_bit(shape):
    """The 2x2 backward loop also serves inputs one row or column longer than the windows
    (floor mode): the uncovered edge gets 0, every winner 0 + its cotangent, ties to the
    first maximum, a NaN takes over, as the numpy reference kernel."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, shape).astype(np.float32)     # many ties
    x[0, 0, 1, 1] = np.nan
    g = rng.standard_normal(shape[:2] + (shape[2] // 2, shape[3] // 2)).astype(np.float32)
    attrs = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
                 ceil_mode=False)
    ours = cpu_kernels.max_pool2d_backward(np, g, x, **attrs)
    reference = conv._max_pool2d_backward_kernel(np, g, x, **attrs)
    assert ours.tobytes() == reference.tobytes()


def test_patch_scratch_is_reused_and_never_leaks_into_results():
    """The GEMM kernels' patch matrices live in a per-thread scratch buffer: a second call
    (other operands, same shapes) reuses it and leaves the first call's results intact."""
    geo = next(g for g in GEOMETRIES if g.id == "3x3_stride_dilation")
    first_ops = _operands(geo, "float32", seed=1)
    with dg.config.override(conv_algorithm="gemm"):
        first = _ours(geo, *first_ops)
        kept = {name: value.copy() for name, value in first.items()}
        key = ("patches", np.dtype("float32"))
        scratch = cpu_scratch._scratch.buffers[key]
        second = _ours(geo, *_operands(geo, "float32", seed=2))
        assert cpu_scratch._scratch.buffers[key] is scratch
    for name in first:
        assert np.array_equal(first[name], kept[name]), name
        assert not np.array_equal(first[name], second[name]), name
        assert not np.may_share_memory(first[name], scratch), name


@pytest.mark.parametrize("seed", range(4))
def test_im2col_row_copies_equal_the_offset_table_bit_for_bit(seed):
    """``im2col_images`` copies row by row where its offset table would be large
    (``ROWS_MIN_TABLE``); both forms give the same patches for any geometry (padding on
    every side, stride, dilation, windows past the input)."""
    nb = numba_module("conv_numba")
    rng = np.random.default_rng(seed)
    for _ in range(15):
        kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, size=4))
        pt, pb, pl, pr = (int(v) for v in rng.integers(0, 4, size=4))
        h, w = int(rng.integers(1, 20)), int(rng.integers(1, 40))
        ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        wo = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
        if ho < 1 or wo < 1:
            continue
        x = rng.standard_normal(2 * 3 * h * w).astype(np.float32)
        table = np.full(2 * 3 * kh * kw * ho * wo, np.nan, np.float32)
        rows = table.copy()
        geometry = (2, 3, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw)
        nb.im2col_images(x, table, *geometry)         # small: the table form
        nb._im2col_rows(x, rows, *geometry)
        assert np.array_equal(table, rows), geometry


def test_large_patch_matrices_take_the_row_copies_and_match_the_reference():
    """A 7x7 stem over a 150x150 image has a table over ``ROWS_MIN_TABLE``: conv2d then
    copies rows, and still matches the numpy reference kernel."""
    nb = numba_module("conv_numba")
    geo = Geometry("stem", (1, 2, 150, 150), (4, 2, 7, 7), stride=(2, 2), padding=(3, 3, 3, 3))
    assert 49 * 75 * 75 > nb.ROWS_MIN_TABLE
    x, w, _ = _operands(geo, "float64")
    with dg.config.override(conv_algorithm="gemm"):
        got = cpu_kernels.conv2d(np, x, w, **geo.attrs())
    np.testing.assert_allclose(got, conv._conv2d_kernel(np, x, w, **geo.attrs()), rtol=1e-12,
                               atol=1e-12)
