"""Every timing decision of the CPU backend, in one place.

The CPU backend picks between two forms of a computation that give the same bits (or, by
explicit opt-in, forms that may differ in the last bits) by measuring them once, at the first
call of a shape, and remembering the choice. Everything that measures lives here, so a reader
finds every decision that depends on the clock in one file, and every caller measures the
same way:

- ``runs_faster(new, old, rounds, margin)``: best of ``rounds`` calls each, interleaved;
  True when ``new`` beat ``margin`` times ``old``. The fused compiler's swapped Linear
  epilogue (``fused_special.py``) and the small-batch matmul form below use it.
- the small-batch ``x @ W.T`` form (``config.matmul_swap``): ``use_swap(a, b)`` says whether
  to run it as ``(W @ x.T).T``; ``same_bits(a, b)`` whether both forms give the same bits
  (a probe, not a timing; ``swap_is_exact`` caches it per shape and layout for callers that
  decide per call, as the eager tape's matmul rule does: it reaches it through the backend,
  ``cpu_backend.autotune``).

Choices are process-local and never change a result unless ``matmul_swap="auto"`` asks.
"""
from __future__ import annotations

import time
from typing import Callable, Dict

import numpy as np

from .options import options


def runs_faster(new: Callable[[], object], old: Callable[[], object], rounds: int,
                margin: float) -> bool:
    """Whether ``new()`` ran faster than ``margin`` times ``old()``, best of ``rounds`` calls
    each, interleaved (how the runtime picks between two forms that give the same bits)."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, run in enumerate((old, new)):
            t = time.perf_counter()
            run()
            best[k] = min(best[k], time.perf_counter() - t)
    return best[1] < margin * best[0]


# -- matmul: the 2-D product of a few rows by a transposed weight ------------------------------
# x @ W.T with x (M, K) C-contiguous and W.T a transposed view (K, N), M small, is a Linear
# layer at a small batch. OpenBLAS here runs it markedly faster as (W @ x.T).T, then one copy
# of the small (N, M) result (M = 32, 784 -> 256, float32: 223 -> 152 us; M = 256: 1.2x
# slower). ``config.matmul_swap``:
# - "exact" (the default): swap where it measured faster (once per (M, K, N, dtype), at the
#   first such product) *and* both forms gave the same bits on a random probe of that shape
#   and on the first operands: the two BLAS calls then sum every element in one order, so
#   the result is bit for bit ``x @ W.T``'s whichever form the timing picked (it is here,
#   for OpenBLAS's SkylakeX kernels and the shapes of the benchmarks); where they differ,
#   the product runs as written;
# - "off": always x @ W.T;
# - "on": always swap these products;
# - "auto": the faster form, as cuDNN's benchmark mode picks convolution algorithms, even
#   where the forms differ in the last bits (so two processes may differ): an opt-in.
SWAP_MAX_ROWS = 64
_swap_choice: Dict[tuple, bool] = {}
_swap_exact: Dict[tuple, bool] = {}


def swappable(a, b) -> bool:
    """Whether ``a @ b`` is a few C-ordered rows times a transposed weight."""
    return (a.ndim == 2 and b.ndim == 2 and 2 <= a.shape[0] <= SWAP_MAX_ROWS
            and a.dtype == b.dtype and a.dtype.kind == "f" and a.flags.c_contiguous
            and b.flags.f_contiguous and not b.flags.c_contiguous
            and b.shape[1] > a.shape[0])


def swapped(a, b):
    """``a @ b`` computed as ``(b.T @ a.T).T``: (N, M) C-contiguous, viewed (M, N)."""
    return np.matmul(b.T, a.T).T


def _measure_swap(a, b) -> bool:
    """Whether the swapped form (with the copy of its result) ran faster (best of 3 each,
    interleaved) by 10%."""
    return runs_faster(lambda: np.ascontiguousarray(swapped(a, b)),
                       lambda: np.matmul(a, b), 3, 0.9)


def _probe_like(rng, x):
    """Random numbers of ``x``'s shape, dtype and layout (C-ordered or transposed)."""
    # (float32 drawn as float32: no float64 array of the operand's size on the way)
    dt = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
    if x.ndim == 2 and not x.flags.c_contiguous and x.flags.f_contiguous:
        return rng.standard_normal(x.shape[::-1], dtype=dt).astype(x.dtype, copy=False).T
    return rng.standard_normal(x.shape, dtype=dt).astype(x.dtype, copy=False)


def same_bits(a, b) -> bool:
    """Whether both forms give the same bits for ``a @ b`` and for a random probe of the
    same shapes and layouts (a BLAS that sums in different orders for the two calls
    differs somewhere on random data)."""
    rng = np.random.default_rng(0)
    pa = _probe_like(rng, a)
    pb = _probe_like(rng, b)
    return all(np.array_equal(np.matmul(x, y), swapped(x, y))
               for x, y in ((pa, pb), (a, b)))


def swap_is_exact(a, b) -> bool:
    """``same_bits(a, b)``, decided once per shapes, dtype and layouts (at most 1024 kept)."""
    key = (a.shape, b.shape, a.dtype, a.flags.c_contiguous, b.flags.c_contiguous)
    found = _swap_exact.get(key)
    if found is None:
        found = same_bits(a, b)
        if len(_swap_exact) > 1024:
            _swap_exact.clear()
        _swap_exact[key] = found
    return found


def use_swap(a, b) -> bool:
    """Whether ``a @ b`` runs as ``swapped(a, b)``, as ``config.matmul_swap`` asks (timed
    once per shape and mode; see above)."""
    mode = options.matmul_swap
    if mode == "off" or not swappable(a, b):
        return False
    if mode == "on":
        return True
    key = (mode, a.shape[0], a.shape[1], b.shape[1], a.dtype)
    choice = _swap_choice.get(key)
    if choice is None:
        choice = _measure_swap(a, b)
        if choice and mode == "exact":
            choice = same_bits(a, b)
        _swap_choice[key] = choice
    return choice


# -- conv2d: the algorithm per shape -----------------------------------------------------------
# conv2d, its input gradient and its weight gradient each run one of (``conv_algorithms``):
# - "gemm": im2col patches (numba copies) and BLAS products (kernels.py), any shape;
# - "direct": numba loops over zero-bordered planes (conv_direct.py), where each group has
#   one input channel (the first layer of a 1-channel image model, depthwise convolutions);
# - "winograd": Winograd F(4x4, 3x3) transforms and 36 BLAS products (conv_winograd.py), for
#   the forward and the input gradient of a 3x3, stride-1, undilated, ungrouped conv (the
#   input gradient is then the forward of the flipped kernel over the cotangent, padded by
#   2 - padding, so where every padding is at most 2).
# They differ in the last bits (sums in other orders; Winograd's transforms in a few more:
# tests/test_conv_algos.py bounds each). ``config.conv_algorithm``:
# - "auto" (the default): the fixed rule ``conv_rule`` below, from the shapes alone, so a
#   result never depends on the clock (two processes give the same bits);
# - "benchmark": each applicable algorithm timed once per (pass, shapes, geometry, dtype) on
#   the first operands (best of 3, interleaved), the fastest kept, as cuDNN's benchmark mode
#   does: an opt-in, since two processes may then differ in the last bits;
# - "direct" / "gemm" / "winograd": that algorithm wherever it applies (tests force each in
#   turn), the rule elsewhere.
_conv_choice: Dict[tuple, str] = {}

# Winograd's rule: both channel counts at least WINOGRAD_MIN_CHANNELS (thin products run far
# below BLAS speed, and the issue-24 CNN's 16-channel layers stay on GEMM), their product at
# most WINOGRAD_MAX_WEIGHTS (the weight is transformed at every call, 4x its size: (1, 512,
# 7, 7) by 512 measured 10 ms against GEMM's 6), and at least WINOGRAD_MIN_TILES 4x4 output
# tiles over the batch. Measured on one thread, loaded 2-core AMD EPYC, CPU time, best of 3,
# Winograd against GEMM: (1, 64, 56, 56) by 64: 3.9-4.4 ms against 5.5-7.3; (1, 128, 28, 28)
# by 128: 2.7-4.2 against 4.8-5.3; (8, 256, 14, 14) by 256: 26-31 against 36-37; (1, 256,
# 14, 14) by 256 (16 tiles): 8.7 against 4.9, (8, 512, 7, 7) by 512: 54 against 45 (left to
# GEMM by the rule).
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MAX_WEIGHTS = 256 * 256
WINOGRAD_MIN_TILES = 32


def winograd_applies(kind: str, w_shape, groups: int, stride, padding, dilation) -> bool:
    """Whether the Winograd transforms compute this conv2d pass (see above)."""
    if kind == "weight_grad" or groups != 1 or tuple(w_shape[2:]) != (3, 3):
        return False
    if tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
        return False
    return kind == "forward" or max(padding) <= 2


def conv_algorithms(kind: str, w_shape, groups: int, stride=(1, 1), padding=(0, 0, 0, 0),
                    dilation=(1, 1)) -> tuple:
    """The algorithms that compute conv2d pass ``kind`` with weight ``w_shape``."""
    found = ("direct", "gemm") if w_shape[1] == 1 else ("gemm",)
    if winograd_applies(kind, w_shape, groups, stride, padding, dilation):
        found += ("winograd",)
    return found


def conv_rule(kind: str, x_shape, w_shape, groups: int, stride=(1, 1), padding=(0, 0, 0, 0),
              dilation=(1, 1)) -> str:
    """The default choice. Direct loops for depthwise and other one-channel groups (im2col
    copies kh*kw patches there to multiply each by a one-row matrix: GEMM measured 8-16x
    slower than these loops on (8, 96, 56, 56) depthwise 3x3, the loops within 0.95-1.25x
    of PyTorch); for a single input channel (groups = 1, the first layer of the issue-24
    CNN, (64, 1, 28, 28) -> 16) the direct weight gradient (1.5 ms against GEMM's 2.0)
    but GEMM's forward and input gradient (1.3 and 1.5 ms against 1.9 and 1.8). Measured
    on one thread, alternating rounds, on a loaded 2-core AMD EPYC (AVX2). Winograd where
    it applies within the limits above (``x_shape``: the pass's input, or for the input
    gradient the input it computes the gradient of)."""
    if w_shape[1] != 1:
        if (winograd_applies(kind, w_shape, groups, stride, padding, dilation)
                and min(w_shape[0], w_shape[1]) >= WINOGRAD_MIN_CHANNELS
                and w_shape[0] * w_shape[1] <= WINOGRAD_MAX_WEIGHTS):
            h = x_shape[2] + padding[0] + padding[1] - 2
            w = x_shape[3] + padding[2] + padding[3] - 2
            if x_shape[0] * -(-h // 4) * -(-w // 4) >= WINOGRAD_MIN_TILES:
                return "winograd"
        return "gemm"
    return "direct" if groups > 1 or kind == "weight_grad" else "gemm"


def conv_algorithm(kind: str, key: tuple, x_shape, w_shape, groups: int,
                   runners: Callable[[], Dict[str, Callable[[], object]]]) -> str:
    """The algorithm for conv2d pass ``kind`` ("forward", "input_grad", "weight_grad") of
    these shapes, as ``config.conv_algorithm`` asks; ``key`` holds the rest of the geometry
    (stride, padding, dilation) and the dtype; ``runners()`` gives a zero-argument callable
    per applicable algorithm (called only to time them)."""
    mode = options.conv_algorithm
    geometry = key[:3]
    applicable = conv_algorithms(kind, w_shape, groups, *geometry)
    if mode in applicable:
        return mode
    if mode != "benchmark" or len(applicable) == 1:
        return conv_rule(kind, x_shape, w_shape, groups, *geometry)
    full = (kind, tuple(x_shape), tuple(w_shape), groups) + key
    choice = _conv_choice.get(full)
    if choice is None:
        run = runners()
        choice = "gemm"                 # each other algorithm against the fastest so far
        for other in applicable:
            if other != "gemm" and runs_faster(run[other], run[choice], 3, 1.0):
                choice = other
        if len(_conv_choice) > 1024:
            _conv_choice.clear()
        _conv_choice[full] = choice
    return choice
