"""Winograd F(4x4, 3x3) convolution: a stride-1, undilated, ungrouped 3x3 conv2d forward
with 4x fewer multiplications in its products than im2col + GEMM (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015; the transforms NNPACK and cuDNN use).

Each 4x4 block of output pixels of each (image, output channel) comes from the 6x6 input tile
under it: ``Y = A^T [ sum_c (G g_kc G^T) * (B^T d_c B) ] A``. Here every stage is a BLAS
product over all tiles at once (no per-tile loops in Python or numba):

1. the input, zero-bordered to whole tiles, gathered as ``d[i, j, c, tile]`` (6x6 taps per
   tile; a strided view copied once: 2.25x the input, against im2col's 9x);
2. ``V = B^T d B`` as two products with the 6x6 ``B^T`` (over i, then over j);
3. ``U = G g G^T`` for the weights (two products with the 6x3 ``G``): ``(36, K, C)``;
4. 36 products ``M[t] = U[t] @ V[t]`` of (K, C) by (C, tiles): the conv's multiply-adds;
5. ``Y = A^T M A`` (two products with the 4x6 ``A^T``), scattered into the NCHW output
   (cropped where the output size is not a multiple of 4).

The transforms run in float64 for float64 inputs and in float32 otherwise. The result differs
from the direct sum by rounding, and the error spreads over each 4x4 tile (an output whose
taps all read padding comes out near, not exactly, 0): ``tests/test_conv_algos.py`` checks a
normwise bound, 4x (2 * terms * eps * the largest |x| conv |w| output); the worst measured over
its geometries, float32 and float64, is 0.3x that bound before the factor of 4. On (1, 64, 56,
56) by 64 in float32 the largest error is about 1e-5 of the largest output (im2col + GEMM:
5e-7).
"""
from __future__ import annotations


import numpy as np
from numpy.lib.stride_tricks import as_strided

from .scratch import workspace

_BT = np.array([[4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1]], dtype=np.float64)
_G = np.array([[1 / 4, 0, 0],
               [-1 / 6, -1 / 6, -1 / 6],
               [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6],
               [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, 0],
                [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], dtype=np.float64)
_MATRICES = {np.dtype(t): tuple(m.astype(t) for m in (_BT, _G, _AT))
             for t in ("float32", "float64")}


# Every intermediate (the bordered input, the tiles, V, M, Y and the products between) lives
# in per-thread grow-only scratch buffers, one per stage: fresh multi-megabyte arrays per call
# are fresh pages from the OS each time, which measured slower than the whole conv's products
# ((1, 64, 56, 56) by 64: the input transform 3.0 ms with fresh arrays, 0.7 with reused ones).
_SCRATCH_LIMIT = 256 << 20


def _buffer(stage: str, shape, dtype) -> np.ndarray:
    """This thread's scratch array for ``stage`` (``scratch.workspace``)."""
    return workspace(shape, dtype, "winograd-" + stage, _SCRATCH_LIMIT)


def applies(w_shape, stride, dilation, groups) -> bool:
    """Whether a conv2d of weight ``w_shape`` has the geometry these transforms compute: a
    3x3 kernel, stride 1, no dilation, one group."""
    return (tuple(w_shape[2:]) == (3, 3) and tuple(stride) == (1, 1)
            and tuple(dilation) == (1, 1) and groups == 1)


def transform_weight(w: np.ndarray) -> np.ndarray:
    """``U = G w G^T`` per (output, input) channel pair: (36, K, C), of w's dtype."""
    k, c = w.shape[:2]
    g = _MATRICES[w.dtype][1]
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1)).reshape(3, 3 * k * c)
    rows = (g @ taps).reshape(6, 3, k * c)                   # [a, j, kc]
    return np.matmul(g, rows).reshape(36, k, c)              # [a, b, kc]


def forward_into(x: np.ndarray, w: np.ndarray, padding, out: np.ndarray,
                 u: np.ndarray = None) -> None:
    """conv2d of ``x`` (N, C, H, W) by the 3x3 ``w`` (K, C, 3, 3) at stride 1, ``padding``
    (top, bottom, left, right), written into ``out`` (N, K, H_out, W_out); ``u``: the
    weight already transformed (``transform_weight``), when the caller has it."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    dt = out.dtype
    ho, wo = out.shape[2:]
    th, tw = -(-ho // 4), -(-wo // 4)
    count = n * th * tw
    bt, _, at = _MATRICES[dt]
    pt, pl = padding[0], padding[2]
    padded = _buffer("padded", (n, c, 4 * th + 2, 4 * tw + 2), dt)
    padded.fill(0)
    rows, cols = min(h, 4 * th + 2 - pt), min(wd, 4 * tw + 2 - pl)
    padded[:, :, pt:pt + rows, pl:pl + cols] = x[:, :, :rows, :cols]
    s = padded.strides
    tiles = as_strided(padded, (n, c, th, tw, 6, 6), (s[0], s[1], 4 * s[2], 4 * s[3], s[2], s[3]))
    d = _buffer("tiles", (6, 6, c, n, th, tw), dt)
    np.copyto(d, tiles.transpose(4, 5, 1, 0, 2, 3))
    half = _buffer("half", (6, 6 * c * count), dt)
    np.matmul(bt, d.reshape(6, -1), out=half)
    v = _buffer("v", (6, 6, c * count), dt)
    np.matmul(bt, half.reshape(6, 6, -1), out=v)
    if u is None:
        u = transform_weight(w.astype(dt, copy=False))
    m = _buffer("m", (36, k, count), dt)
    np.matmul(u, v.reshape(36, c, count), out=m)            # the multiply-adds
    half = _buffer("half", (4, 6 * k * count), dt)
    np.matmul(at, m.reshape(6, -1), out=half)
    y = _buffer("y", (4, 4, k * count), dt)
    np.matmul(at, half.reshape(4, 6, -1), out=y)             # [p, q, k, tiles]
    blocks = y.reshape(4, 4, k, n, th, tw).transpose(3, 2, 4, 0, 5, 1)
    if ho == 4 * th and wo == 4 * tw:
        np.copyto(out.reshape(n, k, th, 4, tw, 4), blocks)
    else:
        full = _buffer("full", (n, k, th, 4, tw, 4), dt)
        np.copyto(full, blocks)
        np.copyto(out, full.reshape(n, k, 4 * th, 4 * tw)[:, :, :ho, :wo])
