"""numba direct convolutions for one input channel per group (imported only where numba is
installed): the first layer of an image model (C_in = 1) and depthwise convolutions
(groups = C_in), forward, input gradient and weight gradient, over NCHW float arrays.

There im2col copies kh*kw patches of each pixel to multiply them by a matrix of 1 row per
output channel: most of the time goes to the copy. These loops read each input plane once
into a small zero-bordered buffer (the padding, so no tap is ever out of bounds) and then,
per output channel and tap, run one long vector loop over the plane. The forward of small
planes runs channels last instead (``CHANNELS_LAST_MAX_PIXELS``): one vector loop per tap
and output pixel over a block of channels. Plane by plane:

- stride 1: the "flat rows" form. The padded plane has rows of WP = W_out + (kw-1)*dw;
  output pixel (r, q) sits at r*WP + q of an accumulator of H_out*WP, and tap (i, j) adds
  ``w[i, j] * padded[t + i*dh*WP + j*dw]`` for every t at once: the columns q >= W_out are
  scratch, dropped when the accumulator is copied out (one spare row keeps the last reads in
  the buffer);
- otherwise: one vector loop per output row and tap, over the row's pixels.

Sums run over the taps in (i, j) order, per output element (forward, input gradient); the
weight gradient sums each tap's products over a plane with reassociation allowed (vector
partial sums), then over the images in order. Results equal the GEMM kernels' up to float
rounding (tests/test_conv_algos.py bounds the difference), not bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, error_model="numpy")
_REDUCE = dict(_JIT, fastmath={"reassoc", "contract"})
# The forward runs channels last (``_forward_channels_last``) where an output plane has at
# most CHANNELS_LAST_MAX_PIXELS pixels, plane by plane (``_forward_planes``) above: measured
# (one thread, CPU time, loaded 2-core AMD EPYC), channels last against planes, ms: (1, 576,
# 7, 7) 5x5 0.33 against 0.74; (1, 240, 14, 14) 5x5 0.41 / 0.70; (1, 288, 14, 14) 5x5 stride
# 2 0.23 / 0.46; (1, 96, 28, 28) 5x5 stride 2 0.32 / 0.42; but (1, 88, 28, 28) 3x3 0.52 /
# 0.34 and (8, 96, 56, 56) 3x3 17.2 / 7.5 (the bordered block outgrows the L2 cache).
CHANNELS_LAST_MAX_PIXELS = 256
BLOCK = 64          # output channels per block of the channels-last forward


@njit(**_JIT)
def _fill_padded(x, src, h, w, pad, hp, wp, pt, pl):
    """pad[(r, q)] = x[src + (r-pt)*w + (q-pl)] inside the image, 0 elsewhere ((hp+1) rows
    of wp: the last row is the spare one)."""
    for r in range(hp + 1):
        ir = r - pt
        row = r * wp
        if ir < 0 or ir >= h:
            pad[row:row + wp] = 0
            continue
        lo = min(pl, wp)
        hi = min(pl + w, wp)
        pad[row:row + lo] = 0
        at = src + ir * w - pl
        pad[row + lo:row + hi] = x[at + lo:at + hi]
        pad[row + hi:row + wp] = 0


@njit(inline="always", **_JIT)
def _taps3(w, at, kw, j):
    """The weights of taps j, j+1, j+2 of one kernel row (0 past the row's end) and how
    many of them are real."""
    n = min(3, kw - j)
    w1 = w[at + j + 1] if n > 1 else w[at + j] * 0
    w2 = w[at + j + 2] if n > 2 else w[at + j] * 0
    return w[at + j], w1, w2, n


@njit(**_JIT)
def _add3(a, p0, p1, p2, w0, w1, w2, n):
    """a += w0*p0 (+ w1*p1 (+ w2*p2)): up to three taps of a kernel row in one pass over the
    accumulator (a read and a write per element instead of one per tap)."""
    if n == 3:
        for t in range(a.shape[0]):
            a[t] += w0 * p0[t] + w1 * p1[t] + w2 * p2[t]
    elif n == 2:
        for t in range(a.shape[0]):
            a[t] += w0 * p0[t] + w1 * p1[t]
    else:
        for t in range(a.shape[0]):
            a[t] += w0 * p0[t]


@njit(**_REDUCE)
def _dot3(r, p0, p1, p2):
    """(sum r*p0, sum r*p1, sum r*p2) in one pass (vector partial sums)."""
    s0 = r[0] * 0
    s1 = s0
    s2 = s0
    for t in range(r.shape[0]):
        v = r[t]
        s0 += v * p0[t]
        s1 += v * p1[t]
        s2 += v * p2[t]
    return s0, s1, s2


@njit(**_JIT)
def _forward_planes(x, w, out, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """``forward`` plane by plane (the flat-rows form of the module docstring)."""
    m = o // c
    hp = (ho - 1) * sh + (kh - 1) * dh + 1
    wp = (wo - 1) * sw + (kw - 1) * dw + 1
    pad = np.empty((hp + 1) * wp, dtype=x.dtype)
    acc = np.empty(ho * wp, dtype=out.dtype)
    taps = kh * kw
    for b in range(n):
        for ch in range(c):
            _fill_padded(x, (b * c + ch) * h * wd, h, wd, pad, hp, wp, pt, pl)
            for mo in range(m):
                oc = ch * m + mo
                dest = (b * o + oc) * ho * wo
                if sh == 1 and sw == 1:
                    length = ho * wp
                    a = acc[:length]
                    a[:] = 0
                    for i in range(kh):
                        for j in range(0, kw, 3):
                            w0, w1, w2, k = _taps3(w, oc * taps + i * kw, kw, j)
                            off = i * dh * wp + j * dw
                            last = off + (k - 1) * dw
                            _add3(a, pad[off:off + length], pad[off + dw * (k > 1):][:length],
                                  pad[last:last + length], w0, w1, w2, k)
                    for r in range(ho):
                        out[dest + r * wo:dest + r * wo + wo] = acc[r * wp:r * wp + wo]
                else:
                    a = acc[:wo]
                    for r in range(ho):
                        a[:] = 0
                        for i in range(kh):
                            for j in range(kw):
                                wv = w[oc * taps + i * kw + j]
                                base = (r * sh + i * dh) * wp + j * dw
                                p = pad[base:base + (wo - 1) * sw + 1:sw]
                                for q in range(wo):
                                    a[q] += wv * p[q]
                        out[dest + r * wo:dest + r * wo + wo] = a
    return out


@njit(**_JIT)
def forward(x, w, out, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """out[b, oc] = sum over taps of w[oc, 0, i, j] * x[b, oc // m, ...] (m = o // c
    output channels per input channel), out C-contiguous (N, O, H_out, W_out).

    Channels last inside, by blocks of BLOCK output channels: each block's input planes
    (plane oc // m for output channel oc) are copied once, transposed, into a zero-bordered
    (rows, columns, channels) buffer and the weights into (taps, channels), so the innermost
    loop runs over the block's channels, contiguous in both, for any stride, dilation or
    plane size (XNNPACK's and oneDNN's depthwise layout); each output row is summed in a
    (W_out, channels) accumulator and written back transposed. Sums run over the taps in
    (i, j) order per output element."""
    if ho * wo > CHANNELS_LAST_MAX_PIXELS:
        return _forward_planes(x, w, out, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh,
                               dw)
    return _forward_channels_last(x, w, out, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl,
                                  dh, dw)


@njit(**_JIT)
def _forward_channels_last(x, w, out, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """``forward`` channels last (see there)."""
    m = o // c
    hp = (ho - 1) * sh + (kh - 1) * dh + 1
    wp = (wo - 1) * sw + (kw - 1) * dw + 1
    taps = kh * kw
    cb = min(BLOCK, o)
    pad = np.empty((hp, wp, cb), dtype=out.dtype)
    wt = np.empty((taps, cb), dtype=out.dtype)
    acc = np.empty((wo, cb), dtype=out.dtype)
    for b in range(n):
        for o0 in range(0, o, cb):
            nc = min(cb, o - o0)
            for t in range(taps):
                for k in range(nc):
                    wt[t, k] = w[(o0 + k) * taps + t]
            pad[:] = 0
            for k in range(nc):
                src = (b * c + (o0 + k) // m) * h * wd
                for r in range(min(h, hp - pt)):
                    at = src + r * wd
                    for q in range(min(wd, wp - pl)):
                        pad[r + pt, q + pl, k] = x[at + q]
            for r in range(ho):
                acc[:, :nc] = 0
                for i in range(kh):
                    row = r * sh + i * dh
                    for j in range(kw):
                        t = i * kw + j
                        for q in range(wo):
                            col = q * sw + j * dw
                            for k in range(nc):
                                acc[q, k] += wt[t, k] * pad[row, col, k]
                for k in range(nc):
                    dest = ((b * o + o0 + k) * ho + r) * wo
                    for q in range(wo):
                        out[dest + q] = acc[q, k]
    return out


@njit(**_JIT)
def _fill_rows(g, src, ho, wo, buf, wp):
    """buf[r*wp + q] = g[src + r*wo + q] for q < wo, 0 in the scratch columns."""
    for r in range(ho):
        buf[r * wp:r * wp + wo] = g[src + r * wo:src + r * wo + wo]
        buf[r * wp + wo:r * wp + wp] = 0


@njit(**_REDUCE)
def _dot(a, b):
    """sum(a * b) over two views of one length (vector partial sums)."""
    s = a[0] * 0
    for t in range(a.shape[0]):
        s += a[t] * b[t]
    return s


@njit(**_JIT)
def weight_grad(x, g, gw, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """gw[oc, 0, i, j] = sum over images and output pixels of g[b, oc] * the input pixel
    tap (i, j) of each output pixel reads (gw: (O, 1, kh, kw), C-contiguous)."""
    m = o // c
    hp = (ho - 1) * sh + (kh - 1) * dh + 1
    wp = (wo - 1) * sw + (kw - 1) * dw + 1
    pad = np.empty((hp + 1) * wp, dtype=x.dtype)
    rows = np.empty(ho * wp, dtype=g.dtype)
    taps = kh * kw
    for k in range(o * taps):
        gw[k] = 0
    for b in range(n):
        for ch in range(c):
            _fill_padded(x, (b * c + ch) * h * wd, h, wd, pad, hp, wp, pt, pl)
            for mo in range(m):
                oc = ch * m + mo
                src = (b * o + oc) * ho * wo
                if sh == 1 and sw == 1:
                    _fill_rows(g, src, ho, wo, rows, wp)
                    length = ho * wp
                    for i in range(kh):
                        for j in range(0, kw, 3):
                            k = min(3, kw - j)
                            off = i * dh * wp + j * dw
                            s0, s1, s2 = _dot3(rows[:length], pad[off:off + length],
                                               pad[off + dw * (k > 1):][:length],
                                               pad[off + (k - 1) * dw:][:length])
                            at = oc * taps + i * kw + j
                            gw[at] += s0
                            if k > 1:
                                gw[at + 1] += s1
                            if k > 2:
                                gw[at + 2] += s2
                else:
                    for i in range(kh):
                        for j in range(kw):
                            s = gw[oc * taps] * 0
                            for r in range(ho):
                                base = (r * sh + i * dh) * wp + j * dw
                                s += _dot(g[src + r * wo:src + r * wo + wo],
                                          pad[base:base + (wo - 1) * sw + 1:sw])
                            gw[oc * taps + i * kw + j] += s
    return gw


@njit(**_JIT)
def input_grad(g, w, gx, n, c, h, wd, o, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw):
    """gx[b, ch] = the sum, over the output channels of ch's group and the taps, of
    w[oc, 0, i, j] * g[b, oc] placed at the input pixels the taps read (the adjoint of
    ``forward``; gx C-contiguous (N, C, H, W), fully written)."""
    m = o // c
    hp = (ho - 1) * sh + (kh - 1) * dh + 1
    wp = (wo - 1) * sw + (kw - 1) * dw + 1
    acc = np.empty((hp + 1) * wp, dtype=gx.dtype)
    rows = np.empty(ho * wp, dtype=g.dtype)
    taps = kh * kw
    for b in range(n):
        for ch in range(c):
            acc[:] = 0
            for mo in range(m):
                oc = ch * m + mo
                src = (b * o + oc) * ho * wo
                if sh == 1 and sw == 1:
                    _fill_rows(g, src, ho, wo, rows, wp)
                    length = ho * wp
                    for i in range(kh):
                        for j in range(kw):
                            wv = w[oc * taps + i * kw + j]
                            off = i * dh * wp + j * dw
                            a = acc[off:off + length]
                            for t in range(length):
                                a[t] += wv * rows[t]
                else:
                    for r in range(ho):
                        for i in range(kh):
                            for j in range(kw):
                                wv = w[oc * taps + i * kw + j]
                                base = (r * sh + i * dh) * wp + j * dw
                                a = acc[base:base + (wo - 1) * sw + 1:sw]
                                gr = g[src + r * wo:src + r * wo + wo]
                                for q in range(wo):
                                    a[q] += wv * gr[q]
            dest = (b * c + ch) * h * wd
            for ir in range(h):
                r = ir + pt
                for iq in range(wd):
                    q = iq + pl
                    inside = (r < hp) & (q < wp)
                    value = acc[r * wp + q if inside else 0]
                    gx[dest + ir * wd + iq] = value if inside else 0
    return gx
