"""numba loops for max pooling and conv2d's patch copies over NCHW images (imported only where
numba is installed): ``im2col`` (the weight gradient's (C*kh*kw, N*H_out*W_out) patches),
``im2col_images`` and its adjoint ``col2im_images`` (per image, for the forward and the input
gradient).

``conv.py`` calls these on numpy arrays when numba imports; its numpy kernels are the
reference and these give the same bits (see ``tests/test_conv.py``). The loops take
C-contiguous arrays flattened to 1-D, with the geometry as arguments, and walk one (H, W)
plane at a time, visiting only the in-bounds taps of each window (padding never wins). The
winner is PyTorch's: the first maximum in row-major order, except that a NaN always takes
over (so the last NaN wins). The comparisons are written as selects, not branches: on
random data a branch per tap mispredicts half the time (measured 4x slower). Compiled on
first use and cached on disk (numba's ``cache=True``) across processes.

Where windows overlap, the backward adds the cotangents tap by tap (every window whose winner
is tap 0 first, then tap 1, ...), the order of the numpy kernel, so that the float sums are
bit-for-bit those of numpy.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def _taps(out, stride, pad, dilation, kernel, size):
    """Per window along one dim: its start (may be negative) and in-bounds taps [lo, hi)."""
    start = np.empty(out, dtype=np.int64)
    lo = np.empty(out, dtype=np.int64)
    hi = np.empty(out, dtype=np.int64)
    for o in range(out):
        s = o * stride - pad
        first = 0
        if s < 0:
            first = (-s + dilation - 1) // dilation
        end = (size - s + dilation - 1) // dilation
        start[o] = s
        lo[o] = first
        hi[o] = min(max(end, 0), kernel)
    return start, lo, hi


@njit(**_JIT)
def _winners(x, base, w, rs, rlo, rhi, cs, clo, chi, dh, dw, kw, pos, tap):
    """Fill pos[o] (flat offset in x, -1 for a window without in-bounds taps) and tap[o]
    (i * kw + j) with the winner of each window of the plane at ``base``."""
    ho, wo = rs.shape[0], cs.shape[0]
    for oh in range(ho):
        for ow in range(wo):
            best = x[base]
            at = -1
            k = -1
            for i in range(rlo[oh], rhi[oh]):
                row = base + (rs[oh] + i * dh) * w + cs[ow]
                for j in range(clo[ow], chi[ow]):
                    v = x[row + j * dw]
                    take = (at < 0) | (v > best) | (v != v)     # selects, no branch
                    best = v if take else best
                    at = row + j * dw if take else at
                    k = i * kw + j if take else k
            pos[oh * wo + ow] = at
            tap[oh * wo + ow] = k


@njit(**_JIT)
def max_pool_forward(x, out, planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, lowest):
    """out[p, oh, ow] = the max of each window of x[p] (``lowest`` for an empty window)."""
    rs, rlo, rhi = _taps(ho, sh, ph, dh, kh, h)
    cs, clo, chi = _taps(wo, sw, pw, dw, kw, w)
    for p in range(planes):
        base = p * h * w
        for oh in range(ho):
            for ow in range(wo):
                best = lowest
                found = False
                for i in range(rlo[oh], rhi[oh]):
                    row = base + (rs[oh] + i * dh) * w + cs[ow]
                    for j in range(clo[ow], chi[ow]):
                        v = x[row + j * dw]
                        take = (not found) | (v > best) | (v != v)
                        best = v if take else best
                        found = True
                out[(p * ho + oh) * wo + ow] = best
    return out


@njit(inline="always", **_JIT)
def _pick4(x, at, w):
    """The 2x2 window of x at ``at`` in row-major order a, b, c, d: (its winner's value,
    whether b, c, d in turn took over from the winner so far)."""
    a, b, c, d = x[at], x[at + 1], x[at + w], x[at + w + 1]
    tb = (b > a) | (b != b)
    m = b if tb else a
    tc = (c > m) | (c != c)
    m = c if tc else m
    td = (d > m) | (d != d)
    return (d if td else m), tb, tc, td


@njit(**_JIT)
def max_pool_forward_2x2(x, out, planes, h, w, ho, wo):
    """``max_pool_forward`` for 2x2 windows at stride 2 that tile x (no padding)."""
    for p in range(planes):
        for oh in range(ho):
            base = (p * h + 2 * oh) * w
            dest = (p * ho + oh) * wo
            for ow in range(wo):
                out[dest + ow] = _pick4(x, base + 2 * ow, w)[0]
    return out


@njit(**_JIT)
def _plane_setup(h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw):
    """The window taps along both dims (``_taps``) and the per-plane winner buffers."""
    rows = _taps(ho, sh, ph, dh, kh, h)
    cols = _taps(wo, sw, pw, dw, kw, w)
    return rows, cols, np.empty(ho * wo, dtype=np.int64), np.empty(ho * wo, dtype=np.int64)


@njit(**_JIT)
def max_pool_backward(g, x, gx, planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw,
                      overlap):
    """gx (zeros on entry) += each window's cotangent g at its winner in x."""
    rows, cols, pos, tap = _plane_setup(h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw)
    for p in range(planes):
        _winners(x, p * h * w, w, *rows, *cols, dh, dw, kw, pos, tap)
        grad = p * ho * wo
        if not overlap:
            for o in range(ho * wo):
                if pos[o] >= 0:
                    gx[pos[o]] += g[grad + o]
        else:
            for k in range(kh * kw):
                for o in range(ho * wo):
                    if tap[o] == k:
                        gx[pos[o]] += g[grad + o]
    return gx


@njit(**_JIT)
def max_pool_backward_2x2(g_bits, x, gx_bits, planes, h, w, ho, wo, sign):
    """``max_pool_backward`` for 2x2 windows at stride 2 that tile x but for an odd last
    row or column (floor mode: in no window, so 0), over the bits of g and gx (unsigned
    integer views; ``sign`` is the sign bit): every element is written, 0 + the cotangent at
    the winner (the cotangent's bits, but -0 becomes +0) and +0 elsewhere, so gx needs no
    zeros. Per pair of rows, a first loop finds each window's winner (0-3, first maximum,
    a NaN takes over) and a second writes the four elements through bit masks: no branch
    and no float select, which the compiler turns into branches that mispredict on random
    data (one loop with float selects measured 2.4x slower, the same bits)."""
    ones = ~(g_bits[0] & 0)
    winner = np.empty(wo, dtype=np.int64)
    for p in range(planes):
        for oh in range(ho):
            base = (p * h + 2 * oh) * w
            src = (p * ho + oh) * wo
            x0 = x[base:base + w]
            x1 = x[base + w:base + 2 * w]
            o0 = gx_bits[base:base + w]
            o1 = gx_bits[base + w:base + 2 * w]
            gr = g_bits[src:src + wo]
            for ow in range(wo):
                a, b, c, d = x0[2 * ow], x0[2 * ow + 1], x1[2 * ow], x1[2 * ow + 1]
                tb = (b > a) | (b != b)
                m = b if tb else a
                tc = (c > m) | (c != c)
                m = c if tc else m
                td = (d > m) | (d != d)
                k = np.int64(tb)
                k = k + (2 - k) * np.int64(tc)
                winner[ow] = k + (3 - k) * np.int64(td)
            for ow in range(wo):
                v = gr[ow]
                v = v & ~(sign * (v == sign))        # -0 + 0 is +0
                k = winner[ow]
                o0[2 * ow] = v & (ones * (k == 0))
                o0[2 * ow + 1] = v & (ones * (k == 1))
                o1[2 * ow] = v & (ones * (k == 2))
                o1[2 * ow + 1] = v & (ones * (k == 3))
            for q in range(2 * wo, w):          # an odd last column: in no window
                o0[q] = 0
                o1[q] = 0
        for r in range(2 * ho, h):              # an odd last row: in no window
            row = (p * h + r) * w
            gx_bits[row:row + w] = 0
    return gx_bits


@njit(**_JIT)
def max_pool_gather(c, x, out, planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw):
    """out[p, oh, ow] = c at the winner in x of each window (0 for an empty one)."""
    rows, cols, pos, tap = _plane_setup(h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw)
    for p in range(planes):
        _winners(x, p * h * w, w, *rows, *cols, dh, dw, kw, pos, tap)
        dest = p * ho * wo
        for o in range(ho * wo):
            out[dest + o] = c[pos[o]] if pos[o] >= 0 else 0
    return out


# -- convolution: im2col and its adjoint -------------------------------------------------------


@njit(**_JIT)
def _offsets(h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """offsets[i*kw + j, oh*wo + ow]: where tap (i, j) of output pixel (oh, ow) reads in an
    (h, w) plane, -1 in the padding. A table turns the copies into one loop of H_out*W_out
    per row (loops over rows of W_out measured 2.5x slower for the small images here)."""
    offsets = np.empty((kh * kw, ho * wo), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            for oh in range(ho):
                r = oh * sh - pt + i * dh
                for ow in range(wo):
                    q = ow * sw - pl + j * dw
                    inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
                    offsets[i * kw + j, oh * wo + ow] = r * w + q if inside else -1
    return offsets


@njit(**_JIT)
def im2col(x, cols, n, c, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """cols[(ch, i, j), (b, oh, ow)] = x[b, ch, oh*sh - pt + i*dh, ow*sw - pl + j*dw], 0 in the
    padding: the (C*kh*kw, N*H_out*W_out) patch matrix, written in one sequential pass."""
    length = ho * wo
    offsets = _offsets(h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw)
    for ch in range(c):
        for k in range(kh * kw):
            dest = (ch * kh * kw + k) * n * length
            off = offsets[k]
            for b in range(n):
                src = (b * c + ch) * h * w
                _gather_row(x[src:src + h * w], off, cols[dest + b * length:][:length])
    return cols


@njit(inline="always", **_JIT)
def _gather_row(plane, off, dst):
    """dst[t] = plane[off[t]] (0 where off[t] < 0): through views indexed by the loop
    counter and a clamped offset, so numba adds no negative-index checks (~25% faster)."""
    for t in range(dst.shape[0]):
        o = off[t]
        v = plane[max(o, 0)]
        dst[t] = v if o >= 0 else 0


# -- convolution, per image: patches (N, C*kh*kw, H_out*W_out) ---------------------------------
# The layout of a batched matmul ``W @ patches[b]`` whose result is the NCHW output itself (and
# of ``W.T @ g[b]``, the patch cotangents straight from an NCHW ``g``): no transposing copy of
# the output or of ``g``, and each image's patches are written while its planes sit in cache.


# Where the offset table would be large (over ROWS_MIN_TABLE entries) the patches are copied
# row by row instead: the table is (kh*kw, H_out*W_out) int64, rebuilt at each call and read
# alongside every copied element; for a 7x7 stem at 224x224 it is 4.9 MB. Measured (one
# thread, CPU time, loaded 2-core AMD EPYC), table against rows: the (1, 3, 224, 224) 7x7
# stride-2 patches 3.5 against 2.1 ms; but 3x3 patches of (1, 64, 56, 56) 2.1-2.2 against
# 2.6, of (1, 3, 224, 224) at stride 2 0.48-0.52 against 0.50 (tables of 28k and 113k).
ROWS_MIN_TABLE = 1 << 18


@njit(**_JIT)
def _im2col_rows(x, cols, n, c, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """``im2col_images`` one output row at a time: the in-bounds columns of each tap's row
    as one strided copy, zeros around it."""
    length = ho * wo
    taps = kh * kw
    for b in range(n):
        for ch in range(c):
            src = (b * c + ch) * h * w
            at = (b * c + ch) * taps * length
            for i in range(kh):
                for j in range(kw):
                    base = at + (i * kw + j) * length
                    off = j * dw - pl                   # input column of output column 0
                    lo = 0 if off >= 0 else min((-off + sw - 1) // sw, wo)
                    hi = max(min((w - 1 - off) // sw + 1, wo), lo) if w - 1 - off >= 0 else lo
                    for oh in range(ho):
                        r = oh * sh - pt + i * dh
                        dst = base + oh * wo
                        if r < 0 or r >= h:
                            cols[dst:dst + wo] = 0
                            continue
                        cols[dst:dst + lo] = 0
                        row = src + r * w + off
                        for q in range(lo, hi):
                            cols[dst + q] = x[row + q * sw]
                        cols[dst + hi:dst + wo] = 0
    return cols


@njit(**_JIT)
def im2col_images(x, cols, n, c, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """cols[b, (ch, i, j), (oh, ow)] = x[b, ch, oh*sh - pt + i*dh, ow*sw - pl + j*dw], 0 in
    the padding."""
    if kh * kw * ho * wo > ROWS_MIN_TABLE:
        return _im2col_rows(x, cols, n, c, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw)
    length = ho * wo
    taps = kh * kw
    offsets = _offsets(h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw)
    for b in range(n):
        for ch in range(c):
            src = (b * c + ch) * h * w
            at = (b * c + ch) * taps * length
            for k in range(taps):
                _gather_row(x[src:src + h * w], offsets[k],
                            cols[at + k * length:at + (k + 1) * length])
    return cols


@njit(**_JIT)
def col2im_images(dcols, gx, n, c, h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """gx (zeros on entry) += the per-image patch cotangents dcols[b, (ch, i, j), (oh, ow)]
    at the input elements they were read from (the adjoint of ``im2col_images``), tap by tap
    in (i, j) order, the order of the numpy kernel's col2im."""
    length = ho * wo
    taps = kh * kw
    offsets = _offsets(h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw)
    for b in range(n):
        for ch in range(c):
            dest = (b * c + ch) * h * w
            at = (b * c + ch) * taps * length
            for k in range(taps):
                row = at + k * length
                for t in range(length):
                    o = offsets[k, t]
                    if o >= 0:
                        gx[dest + o] += dcols[row + t]
    return gx
