"""ONNX import handlers: nn ops (MatMul, Gemm, Einsum, the normalizations, Softmax/Hardmax, the
losses, Dropout,
Attention, RotaryEmbedding, SwiGLU, LRN, GridSample, AffineGrid).

Written with duograph's op functions; compositions only where they are exact, everything
else refused with the reason (see ``_import``)."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..graphlib import functional as F
from ..graphlib.ops.solve import det
from ._import import check_size, handler, np_dtype_of, refuse, static_shape
from ._import_helpers import (FLOATS, _axis, _check_same, _float_only, _floor, _take, cast,
                              static_shape_of)


@handler("Dropout")
def _dropout(ctx):
    x = ctx.x(0)
    training = bool(ctx.known(2, "training_mode").item()) if ctx.has(2) else False
    if training or (ctx.opset < 7 and not ctx.attr("is_test", 0)):
        ratio = float(ctx.known(1).item()) if ctx.has(1) else ctx.attr("ratio", 0.5)
        if ratio != 0:
            refuse("training-mode dropout (random)")
    outs = [F.stop_gradient(x) if not ctx.eager else x]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        outs.append(F.full_like(x, True, dtype="bool"))
    return outs


# -- linear algebra and nn ---------------------------------------------------------------------
@handler("MatMul")
def _matmul(ctx):
    _check_same(ctx)
    if ctx.dtype(0) not in ("int32", "int64", "float16", "bfloat16", "float32", "float64"):
        refuse(f"MatMul of {ctx.dtype(0)}")
    return F.matmul(ctx.x(0), ctx.x(1))


@handler("Det")
def _det(ctx):
    _float_only(ctx)
    return det(ctx.x(0))


@handler("Gemm")
def _gemm(ctx):
    a, b = ctx.x(0), ctx.x(1)
    if ctx.attr("transA", 0):
        a = F.transpose(a, 0, 1)
    if ctx.attr("transB", 0):
        b = F.transpose(b, 0, 1)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    y = F.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if ctx.has(2):
        c = ctx.x(2)
        y = y + (c * beta if beta != 1.0 else c)
    return cast(y, a.dtype)


def _channel(v, ndim):
    return F.reshape(v, *([1, -1] + [1] * (ndim - 2)))


@handler("BatchNormalization")
def _batch_norm(ctx):
    x, s, b, mean, var = (ctx.x(i) for i in range(5))
    _float_only(ctx)
    if ctx.attr("training_mode", 0) or len([o for o in ctx.node.output if o]) > 1:
        refuse("training mode")
    eps = ctx.attr("epsilon", 1e-5)
    dt = x.dtype
    scale = cast(s, dt) * F.rsqrt(cast(var, dt) + eps)
    y = (x - _channel(cast(mean, dt), x.ndim)) * _channel(scale, x.ndim) + \
        _channel(cast(b, dt), x.ndim)
    return cast(y, dt)


@handler("InstanceNormalization")
def _instance_norm(ctx):
    x, s, b = ctx.x(0), ctx.x(1), ctx.x(2)
    _float_only(ctx)
    axes = tuple(range(2, x.ndim))
    if axes:
        m = F.mean(x, axes, keepdim=True)
        v = F.var(x, axes, correction=0, keepdim=True)
    else:       # no spatial dims: each element is its own instance (ONNX's reference)
        m, v = x, F.zeros_like(x)
    y = (x - m) * F.rsqrt(v + ctx.attr("epsilon", 1e-5))
    return cast(y * _channel(s, x.ndim) + _channel(b, x.ndim), x.dtype)


def _norm_input(ctx):
    """(x in its working dtype, the normalised axes, epsilon, x's dtype) for the
    normalisations with ``axis``, ``epsilon`` and ``stash_type`` (float32 statistics for
    float16 inputs)."""
    x = ctx.x(0)
    _float_only(ctx)
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    stash = ctx.attr("stash_type", 1)
    dt = x.dtype
    if stash != 1 and dt != "float64":
        refuse(f"stash_type {stash}")
    work = "float32" if stash == 1 and dt == "float16" else dt
    return cast(x, work), tuple(range(axis, x.ndim)), ctx.attr("epsilon", 1e-5), dt


@handler("LayerNormalization")
def _layer_norm(ctx):
    xw, axes, eps, dt = _norm_input(ctx)
    m = F.mean(xw, axes, keepdim=True)
    d = xw - m
    v = F.mean(d * d, axes, keepdim=True)
    inv = F.rsqrt(v + eps)
    y = cast(d * inv, dt) * ctx.x(1)
    if ctx.has(2):
        y = y + ctx.x(2)
    outs = [cast(y, dt)]
    names = [o for o in ctx.node.output]
    if len(names) > 1:
        outs.append(m)
    if len(names) > 2:
        outs.append(inv)
    return outs


@handler("MeanVarianceNormalization")
def _mvn(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    axes = tuple(_axis(a, x.ndim) for a in ctx.attr("axes", [0, 2, 3]))
    m = F.mean(x, axes, keepdim=True)
    d = x - m
    v = F.mean(d * d, axes, keepdim=True)
    return cast(d / (F.sqrt(v) + 1e-9), x.dtype)


@handler("LpNormalization")
def _lp_norm(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    if p == 1:
        n = F.sum(F.abs(x), axis, keepdim=True)
    elif p == 2:
        n = F.sqrt(F.sum(x * x, axis, keepdim=True))
    else:
        refuse(f"p={p}")
    zero = ctx.const(0, x.dtype)
    return cast(F.where(F.eq(n, zero), zero, x / F.where(F.eq(n, zero), 1.0, n)), x.dtype)


def _softmax(fn):
    def run(ctx):
        x = ctx.x(0)
        _float_only(ctx)
        if ctx.opset < 13:
            axis = _axis(ctx.attr("axis", 1), x.ndim)
            shape = static_shape(ctx)
            a = int(np.prod(shape[:axis], dtype=np.int64))
            y = fn(F.reshape(x, a, -1), 1)
            return F.reshape(y, *shape)
        return fn(x, _axis(ctx.attr("axis", -1), x.ndim))
    return run


handler("Softmax")(_softmax(F.softmax))
handler("LogSoftmax")(_softmax(F.log_softmax))


@handler("Hardmax")
def _hardmax(ctx):
    x = ctx.x(0)
    _float_only(ctx)
    if ctx.opset < 13:
        refuse("Hardmax before opset 13")
    axis = _axis(ctx.attr("axis", -1), x.ndim)
    n = static_shape(ctx, 0, [axis])[axis]
    idx = F.argmax(x, axis, keepdim=True)
    shape = [1] * x.ndim
    shape[axis] = n
    rng = ctx.const(np.arange(n).reshape(shape), "int64")
    return F.cast(F.eq(idx, rng), x.dtype)




@handler("Swish")
def _swish(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    return cast(x * F.sigmoid(x * ctx.attr("alpha", 1.0)), x.dtype)


@handler("RMSNormalization")
def _rms_norm(ctx):
    xw, axes, eps, dt = _norm_input(ctx)
    inv = F.rsqrt(F.mean(xw * xw, axes, keepdim=True) + eps)
    return cast(cast(xw * inv, dt) * ctx.x(1), dt)


def _nll(ctx, logp, target, weight, reduction, ignore_index):
    """Negative log-likelihood of log-probabilities (N, C, d1...) at class indices (N, d1...)
    with optional class weights: ONNX's NegativeLogLikelihoodLoss."""
    target = cast(target, "int64")
    dt = logp.dtype
    if ignore_index is not None:
        valid = F.ne(target, ctx.const(ignore_index, "int64"))
        safe = F.where(valid, target, ctx.const(0, "int64"))
    else:
        valid, safe = None, target
    picked = F.squeeze(F.gather(logp, 1, F.unsqueeze(safe, 1)), 1)
    w = F.index_select(weight, 0, F.reshape(safe, -1)) if weight is not None else None
    if w is not None:
        w = F.reshape(w, *safe.shape) if safe.ndim != 1 else w
    if valid is not None:
        vw = F.cast(valid, dt)
        w = vw if w is None else w * vw
    loss = F.neg(picked) if w is None else F.neg(picked) * w
    if reduction == "none":
        return cast(loss, dt)
    total = F.sum(loss)
    if reduction == "sum":
        return cast(total, dt)
    if reduction != "mean":
        refuse(f"reduction {reduction!r}")
    count = F.sum(w) if w is not None else float(np.prod(static_shape_of(safe)))
    return cast(total / count, dt)


@handler("NegativeLogLikelihoodLoss")
def _nll_h(ctx):
    _float_only(ctx)
    return _nll(ctx, ctx.x(0), ctx.x(1), ctx.x(2) if ctx.has(2) else None,
                ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))


@handler("SoftmaxCrossEntropyLoss")
def _sce(ctx):
    _float_only(ctx)
    x = ctx.x(0)
    logp = F.log_softmax(x, 1)
    loss = _nll(ctx, logp, ctx.x(1), ctx.x(2) if ctx.has(2) else None,
                ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))
    if len([o for o in ctx.node.output if o]) > 1:
        return [loss, logp]
    return loss


# -- Attention (opset 23/24): scaled dot-product attention as matmul, softmax, matmul ------------
def _heads(ctx, x, n):
    """(B, S, n*D) -> (B, n, S, D)."""
    b, s, hidden = static_shape_of(x)
    if not n or hidden % n:
        refuse(f"hidden size {hidden} is not a multiple of the {n} heads")
    return F.permute(F.reshape(x, b, s, n, hidden // n), 0, 2, 1, 3)


def _neg_inf_where(ctx, allowed, dt):
    """0 where ``allowed``, -inf elsewhere (a select, never 0 * inf)."""
    return F.where(allowed, ctx.const(0, dt), ctx.const(-np.inf, dt))


@handler("Attention")
def _attention(ctx):
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    dt = q.dtype
    if dt not in FLOATS:
        refuse(f"dtype {dt} (Attention here takes float16, bfloat16, float32, float64)")
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left < -1 or right < -1:
        refuse(f"window sizes {left}, {right} (each -1 or at least 0)")
    mask = ctx.x(3) if ctx.has(3) else None
    past_k = ctx.x(4) if ctx.has(4) else None
    past_v = ctx.x(5) if ctx.has(5) else None
    nonpad = ctx.x(6) if ctx.has(6) else None
    if (past_k is None) != (past_v is None):
        refuse("past_key without past_value (or the reverse)")
    if nonpad is not None and past_k is not None:
        refuse("nonpad_kv_seqlen with past_key/past_value")
    three_d = q.ndim == 3
    if three_d:
        q = _heads(ctx, q, ctx.attr("q_num_heads"))
        k = _heads(ctx, k, ctx.attr("kv_num_heads"))
        v = _heads(ctx, v, ctx.attr("kv_num_heads"))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        refuse("Q, K, V must all be 3-D or all 4-D")
    batch, hq, lq, dq = static_shape_of(q)
    scale = ctx.attr("scale")
    scale = 1.0 / math.sqrt(dq) if scale is None else scale
    root = np.asarray(math.sqrt(scale), dtype=dt)        # the spec scales Q and K by sqrt
    if past_k is not None:
        k = F.cat([past_k, k], 2)
        v = F.cat([past_v, v], 2)
    present_k, present_v = k, v
    lkv = static_shape_of(k)[2]
    bias = None
    if mask is not None:
        width = static_shape_of(mask)[-1]
        if width < lkv:
            pad = [0, lkv - width] + [0, 0] * (mask.ndim - 1)
            mask = F.pad(mask, pad, value=False if mask.dtype == "bool" else -math.inf)
        bias = _neg_inf_where(ctx, mask, dt) if mask.dtype == "bool" else cast(mask, dt)
    i = np.arange(lq).reshape(lq, 1)
    j = np.arange(lkv).reshape(1, lkv)
    if nonpad is not None:
        lens = F.reshape(cast(nonpad, "int64"), -1, 1, 1, 1)
    if ctx.attr("is_causal", 0):
        if nonpad is not None:          # per batch: key j <= i + (nonpad[b] - lq)
            allowed = F.le(ctx.const(j - i + lq, "int64"), lens)
        else:
            offset = static_shape_of(past_k)[2] if past_k is not None else 0
            allowed = ctx.const(j <= i + offset, "bool")
        causal = _neg_inf_where(ctx, allowed, dt)
        bias = causal if bias is None else bias + causal
    if left >= 0 or right >= 0:         # a sliding window around query i's position
        if nonpad is not None:          # diff = (i + nonpad[b] - lq) - j
            diff = lens + ctx.const(i - j - lq, "int64")
        else:
            offset = static_shape_of(past_k)[2] if past_k is not None else 0
            diff = ctx.const(i + offset - j, "int64")
        allowed = F.eq(diff, diff)                       # all True, diff's shape
        if left >= 0:
            allowed = F.logical_and(allowed, F.le(diff, ctx.const(left, "int64")))
        if right >= 0:
            allowed = F.logical_and(allowed, F.le(F.neg(diff), ctx.const(right, "int64")))
        window = _neg_inf_where(ctx, allowed, dt)
        bias = window if bias is None else bias + window
    if nonpad is not None:
        padding = _neg_inf_where(ctx, F.lt(ctx.const(j, "int64"), lens), dt)
        bias = padding if bias is None else bias + padding
    hk = static_shape_of(k)[1]
    if hq != hk:
        if hq % hk:
            refuse(f"{hq} query heads over {hk} key/value heads")
        r = hq // hk

        def repeat(t):
            b, h, n, d = static_shape_of(t)
            t = F.expand(F.reshape(t, b, h, 1, n, d), b, h, r, n, d)
            return F.reshape(t, b, h * r, n, d)
        k, v = repeat(k), repeat(v)
    qk = F.matmul(q * ctx.const(root, dt), F.transpose(k * ctx.const(root, dt), -1, -2))
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        qk = F.tanh(qk / ctx.const(softcap, dt)) * ctx.const(softcap, dt)
    logits = qk if bias is None else qk + bias
    mode = ctx.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        refuse(f"qk_matmul_output_mode {mode}")
    qk_out = logits if mode == 2 else qk
    precision = ctx.attr("softmax_precision")
    sdt = np_dtype_of(precision) if precision else dt
    if sdt not in FLOATS:
        refuse(f"softmax_precision {sdt}")
    probs = F.softmax(cast(logits, sdt), -1)
    if bias is not None:                 # a row with no key allowed: zeros, never NaN
        dead = F.eq(F.amax(bias, -1, keepdim=True), ctx.const(-np.inf, dt))
        probs = F.where(dead, ctx.const(0, sdt), probs)
    if mode == 3:
        qk_out = probs
    y = F.matmul(cast(probs, dt), v)
    if three_d:
        b, h, n, d = static_shape_of(y)
        y = F.reshape(F.permute(y, 0, 2, 1, 3), b, n, h * d)
    return y, present_k, present_v, cast(qk_out, dt)


@handler("RotaryEmbedding")
def _rotary(ctx):
    """Rotary position embedding (opset 23): rotate pairs of features by the cached angles."""
    x, cos, sin = ctx.x(0), ctx.x(1), ctx.x(2)
    _float_only(ctx)
    shape = static_shape(ctx)
    if x.ndim == 4:
        x = F.permute(x, 0, 2, 1, 3)
    elif x.ndim == 3:
        heads = ctx.attr("num_heads", 0)
        if not heads or shape[2] % heads:
            refuse(f"num_heads {heads} for a hidden size of {shape[2]}")
        x = F.reshape(x, shape[0], shape[1], heads, shape[2] // heads)
    else:
        refuse(f"a {x.ndim}-D input (3-D or 4-D)")
    b, s, h, d = static_shape_of(x)
    rd = ctx.attr("rotary_embedding_dim", 0) or d
    if rd % 2 or rd > d:
        refuse(f"rotary_embedding_dim {rd} for heads of {d}")
    if ctx.has(3):
        pos = ctx.x(3)
        pshape = static_shape_of(pos)
        cos = F.reshape(F.index_select(cos, 0, F.reshape(cast(pos, "int64"), -1)),
                        *pshape, rd // 2)
        sin = F.reshape(F.index_select(sin, 0, F.reshape(cast(pos, "int64"), -1)),
                        *pshape, rd // 2)
    if static_shape_of(cos)[-1] != rd // 2 or static_shape_of(sin)[-1] != rd // 2:
        refuse(f"cos/sin caches of width {static_shape_of(cos)[-1]} for a rotary dim of {rd}")
    cos, sin = F.unsqueeze(cos, 2), F.unsqueeze(sin, 2)
    rot = _take(ctx, x, 3, np.arange(rd)) if rd < d else x
    interleaved = bool(ctx.attr("interleaved", 0))
    if interleaved:
        x1, x2 = _take(ctx, rot, 3, np.arange(0, rd, 2)), _take(ctx, rot, 3, np.arange(1, rd, 2))
    else:
        x1, x2 = _take(ctx, rot, 3, np.arange(rd // 2)), _take(ctx, rot, 3, np.arange(rd // 2, rd))
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rot = F.reshape(F.stack([real, imag], -1), b, s, h, rd)
    else:
        rot = F.cat([real, imag], -1)
    if rd < d:
        rot = F.cat([rot, _take(ctx, x, 3, np.arange(rd, d))], -1)
    rot = cast(rot, ctx.dtype(0))
    if len(shape) == 3:
        return F.reshape(rot, *shape)
    return F.permute(rot, 0, 2, 1, 3)


@handler("SwiGLU")
def _swiglu(ctx):
    """a * sigmoid(alpha * a) * b."""
    _float_only(ctx)
    _check_same(ctx)
    a, b = ctx.x(0), ctx.x(1)
    if tuple(a.shape) != tuple(b.shape):
        refuse(f"operands of shapes {list(a.shape)} and {list(b.shape)} (no broadcasting)")
    return cast(a * F.sigmoid(a * ctx.attr("alpha", 1.0)) * b, a.dtype)


@handler("LRN")
def _lrn(ctx):
    """x / (bias + alpha/size * (sum of squares over the neighbouring channels)) ** beta; the
    channel sums as a matmul by a 0/1 band matrix."""
    _float_only(ctx)
    x = ctx.x(0)
    if x.ndim != 4:
        refuse(f"a {x.ndim}-D input (LRN takes 4-D)")
    c = static_shape(ctx)[1]
    size = ctx.attr("size")
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2) + 1
    check_size((c, c), np.float64, "the channel band")
    k = np.arange(c)
    band = ((k[None, :] >= k[:, None] - lo) & (k[None, :] < k[:, None] + hi)).astype(x.dtype)
    sq = F.permute(F.matmul(F.permute(x * x, 0, 2, 3, 1), ctx.const(band.T.copy(), x.dtype)),
                   0, 3, 1, 2)
    scale = sq * (ctx.attr("alpha", 1e-4) / size) + ctx.attr("bias", 1.0)
    return cast(x / F.pow(scale, ctx.const(ctx.attr("beta", 0.75), x.dtype)), x.dtype)


@handler("GroupNormalization")
def _group_norm(ctx):
    """Mean and variance over each group of channels (and the spatial dims), then the
    per-channel (opset 21; per-group before) scale and bias."""
    _float_only(ctx)
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    shape = static_shape(ctx)
    n, c = shape[:2]
    g = ctx.attr("num_groups")
    if not g or c % g:
        refuse(f"{c} channels in {g} groups")
    stash = ctx.attr("stash_type", 1)
    work = "float32" if stash == 1 and x.dtype == "float16" else x.dtype
    if stash not in (1,):
        refuse(f"stash_type {stash}")
    xg = F.reshape(cast(x, work), n, g, -1)
    mean = F.mean(xg, -1, keepdim=True)
    centred = xg - mean
    var = F.mean(centred * centred, -1, keepdim=True)
    y = F.reshape(centred * F.rsqrt(var + ctx.attr("epsilon", 1e-5)), *shape)
    if static_shape_of(scale)[0] == g and g != c:           # opset 18: one per group
        scale = F.reshape(F.expand(F.reshape(scale, g, 1), g, c // g), c)
        bias = F.reshape(F.expand(F.reshape(bias, g, 1), g, c // g), c)
    per = (1, c) + (1,) * (len(shape) - 2)
    y = y * F.reshape(cast(scale, work), *per) + F.reshape(cast(bias, work), *per)
    return cast(y, x.dtype)


@handler("Einsum")
def _einsum(ctx):
    eq = ctx.attr("equation").replace(" ", "")
    ops = [ctx.x(i) for i in range(len(ctx.ins))]
    dt = ops[0].dtype
    if any(o.dtype != dt for o in ops):
        refuse(f"operands of different dtypes {[o.dtype for o in ops]}")
    if dt not in FLOATS and dt not in ("int32", "int64"):
        refuse(f"Einsum of {dt}")
    if dt == "bfloat16":          # accumulated in float32 and rounded once, as PyTorch
        ops = [F.cast(o, "float32") for o in ops]
    try:
        y = F.einsum(eq, *ops)
    except Exception as e:        # duograph's own error names what it cannot do
        refuse(f"equation {eq!r}: {str(e).splitlines()[0]}")
    return cast(y, dt)


# -- GridSample: the ONNX reference's rules, composed from gathers ------------------------------
def _gs_reflect(ctx, x, lo: float, hi: float):
    """x reflected by the near border until inside [lo, hi] (the reference's _gs_reflect)."""
    dt = x.dtype
    c = lambda v: ctx.const(v, dt)          # noqa: E731
    rng = hi - lo
    if rng <= 0:
        return F.where(F.lt(x, c(lo)), c(lo), F.where(F.gt(x, c(hi)), c(hi), x))

    def fold(dx):                           # dx >= 0: (r, whether the fold count is even)
        n = _floor(ctx, dx / rng)
        even = F.eq(n - _floor(ctx, n * 0.5) * 2.0, c(0))
        return dx - n * rng, even
    r_lo, even_lo = fold(F.maximum(c(lo) - x, c(0)))
    r_hi, even_hi = fold(F.maximum(x - c(hi), c(0)))
    below = F.where(even_lo, c(lo) + r_lo, c(hi) - r_lo)
    above = F.where(even_hi, c(hi) - r_hi, c(lo) + r_hi)
    return F.where(F.lt(x, c(lo)), below, F.where(F.gt(x, c(hi)), above, x))


def _gs_tap(ctx, i, size: int, lo: float, hi: float, padding: str):
    """(a valid int64 index, the mask of taps that read data) for integer-valued float taps
    ``i`` along a dim of ``size`` (the reference's _pixel_at_array)."""
    dt = i.dtype
    if padding == "zeros":
        ok = F.logical_and(F.ge(i, ctx.const(0, dt)), F.lt(i, ctx.const(size, dt)))
        idx = F.clamp(i, 0.0, float(size - 1))
        return cast(idx, "int64"), ok
    if padding == "border":
        return cast(F.clamp(i, 0.0, float(size - 1)), "int64"), None
    f = _gs_reflect(ctx, i, lo, hi)           # int(): toward zero; f >= lo >= -0.5
    return cast(F.clamp(_floor(ctx, F.maximum(f, ctx.const(0, dt))), 0.0,
                        float(size - 1)), "int64"), None


def _gs_cubic(ctx, t):
    a = -0.75
    one = ctx.const(1, t.dtype)
    two = ctx.const(2, t.dtype)
    t1, t2, t3 = t + 1.0, one - t, two - t
    return [((t1 * a - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((t * (a + 2)) - (a + 3)) * t * t + 1.0,
            ((t2 * (a + 2)) - (a + 3)) * t2 * t2 + 1.0,
            ((t3 * a - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


@handler("GridSample")
def _grid_sample(ctx):
    """GridSample (2-D and 3-D; nearest, linear, cubic; zeros, border, reflection padding)
    as the ONNX reference computes it: each output point is a weighted sum of gathered input
    points, the taps padded one by one."""
    x, grid = ctx.x(0), ctx.x(1)
    _float_only(ctx)
    if grid.dtype != x.dtype:
        refuse(f"grid of dtype {grid.dtype} with data of dtype {x.dtype}")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "linear"),
                                                          ctx.attr("mode", "linear"))
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border",
                                                                      "reflection"):
        refuse(f"mode {mode!r} with padding_mode {padding!r}")
    shape = static_shape(ctx)
    gshape = static_shape(ctx, 1)
    nd = len(shape) - 2
    if nd not in (2, 3) or len(gshape) != nd + 2 or gshape[-1] != nd or gshape[0] != shape[0]:
        refuse(f"data {list(shape)} with grid {list(gshape)}")
    n, c, dims = shape[0], shape[1], shape[2:]
    out_sp = gshape[1:-1]
    p = int(np.prod(out_sp, dtype=np.int64))
    flat_g = F.reshape(grid, n, p, nd)
    dt = x.dtype
    per_dim = []                                 # per data dim: [(index, weight, mask)]
    for k, size in enumerate(dims):
        g = F.reshape(F.narrow(flat_g, 2, nd - 1 - k, 1), n, p)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        v = (g + 1.0) / 2.0 * float(size - 1) if align else ((g + 1.0) * float(size) - 1.0) / 2.0
        if mode == "nearest":
            v = F.round(v)
        outside = F.logical_or(F.lt(v, ctx.const(lo, dt)), F.gt(v, ctx.const(hi, dt)))
        if padding == "border":
            v = F.where(outside, F.clamp(v, 0.0, float(size - 1)), v)
        elif padding == "reflection":
            v = F.where(outside, _gs_reflect(ctx, v, lo, hi), v)
        if mode == "nearest":                   # astype(int32): toward zero
            t = F.where(F.lt(v, ctx.const(0, dt)), F.neg(_floor(ctx, F.neg(v))),
                        _floor(ctx, v))
            idx, ok = _gs_tap(ctx, t, size, lo, hi, padding)
            per_dim.append([(idx, None, ok)])
            continue
        base = _floor(ctx, v)
        frac = v - base
        if mode == "linear":
            offsets, weights = (0, 1), [ctx.const(1, dt) - frac, frac]
        else:
            offsets, weights = (-1, 0, 1, 2), _gs_cubic(ctx, frac)
        taps = []
        for off, w in zip(offsets, weights):
            idx, ok = _gs_tap(ctx, base + float(off), size, lo, hi, padding)
            taps.append((idx, w, ok))
        per_dim.append(taps)
    data = F.reshape(x, n, c, int(np.prod(dims, dtype=np.int64)))
    strides = [int(np.prod(dims[k + 1:], dtype=np.int64)) for k in range(nd)]
    total = None
    for combo in itertools.product(*per_dim):
        flat, weight, mask = None, None, None
        for (idx, w, ok), s in zip(combo, strides):
            term = idx * ctx.const(s, "int64") if s != 1 else idx
            flat = term if flat is None else flat + term
            if w is not None:
                weight = w if weight is None else weight * w
            if ok is not None:
                mask = ok if mask is None else F.logical_and(mask, ok)
        picked = F.gather(data, 2, F.expand(F.reshape(flat, n, 1, p), n, c, p))
        if mask is not None:
            picked = F.where(F.reshape(mask, n, 1, p), picked, ctx.const(0, dt))
        if weight is not None:
            picked = picked * F.reshape(weight, n, 1, p)
        total = picked if total is None else total + picked
    return cast(F.reshape(total, n, c, *out_sp), dt)


@handler("AffineGrid")
def _affine_grid(ctx):
    """AffineGrid: theta (N, 2, 3) or (N, 3, 4) times the homogeneous base grid (x first)."""
    _float_only(ctx)
    theta = ctx.x(0)
    size = [int(s) for s in np.asarray(ctx.known(1, "size")).reshape(-1)]
    nd = len(size) - 2
    if nd not in (2, 3) or static_shape(ctx) != (size[0], nd, nd + 1):
        refuse(f"theta {list(ctx.shape(0))} with size {size}")
    spatial = size[2:]
    axes = []
    for s in spatial:
        if ctx.attr("align_corners", 0):
            a = np.arange(s, dtype=np.float64) * (2.0 / (s - 1)) - 1 if s > 1 else \
                np.array([-1.0])
        else:
            a = (np.arange(s, dtype=np.float64) * 2 + 1) / s - 1
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")          # (D,) H, W
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] +
                    [np.ones(mesh[0].size)], 1)      # (P, nd + 1): x, y(, z), 1
    b = ctx.const(base.T.copy(), theta.dtype)
    y = F.matmul(theta, b)                           # (N, nd, P)
    return F.reshape(F.transpose(y, 1, 2), size[0], *spatial, nd)
