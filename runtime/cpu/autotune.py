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
    if x.ndim == 2 and not x.flags.c_contiguous and x.flags.f_contiguous:
        return rng.standard_normal(x.shape[::-1]).astype(x.dtype).T
    return rng.standard_normal(x.shape).astype(x.dtype)


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
#   one input channel (the first layer of a 1-channel image model, depthwise convolutions).
# The two differ in the last bits (sums in other orders). ``config.conv_algorithm``:
# - "auto" (the default): the fixed rule ``conv_rule`` below, from the shapes alone, so a
#   result never depends on the clock (two processes give the same bits);
# - "benchmark": each applicable algorithm timed once per (pass, shapes, geometry, dtype) on
#   the first operands (best of 3, interleaved), the fastest kept, as cuDNN's benchmark mode
#   does: an opt-in, since two processes may then differ in the last bits;
# - "direct" / "gemm": that algorithm wherever it applies (tests force each in turn), the
#   rule elsewhere.
_conv_choice: Dict[tuple, str] = {}


def conv_algorithms(w_shape, groups: int) -> tuple:
    """The algorithms that compute a conv2d (or a gradient) with weight ``w_shape``."""
    return ("direct", "gemm") if w_shape[1] == 1 else ("gemm",)


def conv_rule(kind: str, x_shape, w_shape, groups: int) -> str:
    """The default choice. Direct loops for depthwise and other one-channel groups (im2col
    copies kh*kw patches there to multiply each by a one-row matrix: GEMM measured 8-16x
    slower than these loops on (8, 96, 56, 56) depthwise 3x3, the loops within 0.95-1.25x
    of PyTorch); for a single input channel (groups = 1, the first layer of the issue-24
    CNN, (64, 1, 28, 28) -> 16) the direct weight gradient (1.5 ms against GEMM's 2.0)
    but GEMM's forward and input gradient (1.3 and 1.5 ms against 1.9 and 1.8). Measured
    on one thread, alternating rounds, on a loaded 2-core AMD EPYC (AVX2)."""
    if w_shape[1] != 1:
        return "gemm"
    return "direct" if groups > 1 or kind == "weight_grad" else "gemm"


def conv_algorithm(kind: str, key: tuple, x_shape, w_shape, groups: int,
                   runners: Callable[[], Dict[str, Callable[[], object]]]) -> str:
    """The algorithm for conv2d pass ``kind`` ("forward", "input_grad", "weight_grad") of
    these shapes, as ``config.conv_algorithm`` asks; ``key`` holds the rest of the geometry
    and the dtype; ``runners()`` gives a zero-argument callable per applicable algorithm
    (called only to time them)."""
    mode = options.conv_algorithm
    applicable = conv_algorithms(w_shape, groups)
    if mode in applicable:
        return mode
    if mode != "benchmark" or len(applicable) == 1:
        return conv_rule(kind, x_shape, w_shape, groups)
    full = (kind, tuple(x_shape), tuple(w_shape), groups) + key
    choice = _conv_choice.get(full)
    if choice is None:
        run = runners()
        choice = "direct" if runs_faster(run["direct"], run["gemm"], 3, 1.0) else "gemm"
        if len(_conv_choice) > 1024:
            _conv_choice.clear()
        _conv_choice[full] = choice
    return choice
