"""ONNX's recurrent ops imported onto duograph's ``scan``: ``RNN``, ``GRU`` and ``LSTM``
(opset 7 to 22), with onnxruntime's semantics.

One direction is one ``scan`` over time, as ``nn.RNN``/``GRU``/``LSTM`` build it: the input
projection ``X W^T + Wb`` of every step is one matmul before the loop, the body holds the
recurrent part. ``bidirectional`` runs a second, reversed scan with the second set of
weights. Every attribute is read: ``activations`` (with ``activation_alpha``/``_beta``
consumed in order by the functions that take them, onnxruntime's defaults otherwise),
``clip`` (applied to every gate's pre-activation, not to the LSTM cell state
entering ``h``, as onnxruntime), ``layout`` 0 and 1,
``linear_before_reset`` (GRU), ``input_forget`` and the peepholes ``P`` (LSTM).
``sequence_lens`` masks each step's state update with ``t < length`` (the padded steps keep
the state and output zeros; the reverse direction starts at each sequence's own end), as
onnxruntime does. The weights are ordinary operands: imported as state they are trainable,
their gradients flowing through the scan's reverse scan.
"""
from __future__ import annotations

import numpy as np

from ..graphlib import functional as F
from ..graphlib.ops import activations as A
from ..graphlib.ops.control import scan
from ._import import Ctx, handler, refuse

FLOATS = ("float16", "float32", "float64")

# name -> (how many of activation_alpha/beta it takes, their defaults, the function)
_ACTIVATIONS = {
    "relu": ((), lambda x, a, b: F.relu(x)),
    "tanh": ((), lambda x, a, b: F.tanh(x)),
    "sigmoid": ((), lambda x, a, b: F.sigmoid(x)),
    "affine": ((None, None), lambda x, a, b: x * a + b),
    "leakyrelu": ((0.01,), lambda x, a, b: F.leaky_relu(x, a)),
    "thresholdedrelu": ((1.0,), lambda x, a, b: F.where(F.gt(x, a), x, F.zeros_like(x))),
    "scaledtanh": ((None, None), lambda x, a, b: F.tanh(x * b) * a),
    "hardsigmoid": ((0.2, 0.5), lambda x, a, b: F.clamp(x * a + b, 0.0, 1.0)),
    "elu": ((1.0,), lambda x, a, b: A.elu(x, a)),
    "softsign": ((), lambda x, a, b: x / (F.abs(x) + 1.0)),
    "softplus": ((), lambda x, a, b: F.softplus(x)),
}

# the gates of each op, and its default activations (per direction)
_OPS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
        "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


def _activations(ctx: Ctx, dirs: int, per: int) -> list:
    """Per direction, the list of ``per`` activation functions ``x -> y``."""
    names = ctx.attr("activations")
    if names is None:
        names = _OPS[ctx.node.op_type][1] * dirs
    if len(names) != per * dirs:
        refuse(f"expected {per * dirs} activations ({per} per direction, {dirs} "
               f"direction(s)), found {len(names)}: {list(names)}")
    alphas = list(ctx.attr("activation_alpha", []) or [])
    betas = list(ctx.attr("activation_beta", []) or [])
    fns = []
    for name in names:
        spec = _ACTIVATIONS.get(name.lower())
        if spec is None:
            refuse(f"activation {name!r} is not one of {sorted(_ACTIVATIONS)}")
        defaults, fn = spec
        a = b = None
        if len(defaults) >= 1:
            a = alphas.pop(0) if alphas else defaults[0]
        if len(defaults) == 2:
            b = betas.pop(0) if betas else defaults[1]
        if len(defaults) and (a is None or (len(defaults) == 2 and b is None)):
            refuse(f"activation {name!r} needs activation_alpha and activation_beta values")
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [fns[d * per:(d + 1) * per] for d in range(dirs)]


def _clipped(fn, clip):
    if clip is None:
        return fn
    return lambda x: fn(F.clamp(x, -clip, clip))


def _step_fn(op: str, acts: list, r, rb, p, hs: int, clip, linear_before_reset: int,
             input_forget: int, masked: bool):
    """The scan body ``(state, xs) -> (state, h_t)`` of one direction; ``xs`` is the input
    projection of step t (with Wb), and the step's validity (``(N, 1)`` bool) when
    ``masked``."""
    # the gates' pre-activations are clipped; LSTM's cell state going into h is not (as
    # onnxruntime)
    acts = [_clipped(f, clip) for f in acts[:2]] + acts[2:]
    rt = F.transpose(r, 0, 1)                               # (H, G*H)

    def hh(h):
        out = F.matmul(h, rt)
        return out if rb is None else out + rb

    if op == "RNN":
        (f,) = acts

        def step(h, xw):
            h = f(xw + hh(h))
            return h, h
    elif op == "GRU":
        f, g = acts
        rh_t = F.transpose(r[2 * hs:], 0, 1)                # (H, H)

        def step(h, xw):
            if linear_before_reset:
                gh = hh(h)
                z = f(xw[..., 0:hs] + gh[..., 0:hs])
                rr = f(xw[..., hs:2 * hs] + gh[..., hs:2 * hs])
                n = g(xw[..., 2 * hs:] + rr * gh[..., 2 * hs:])
            else:
                gh = F.matmul(h, rt[:, 0:2 * hs])
                if rb is not None:
                    gh = gh + rb[0:2 * hs]
                z = f(xw[..., 0:hs] + gh[..., 0:hs])
                rr = f(xw[..., hs:2 * hs] + gh[..., hs:2 * hs])
                hn = F.matmul(rr * h, rh_t)
                if rb is not None:
                    hn = hn + rb[2 * hs:]
                n = g(xw[..., 2 * hs:] + hn)
            h = (1.0 - z) * n + z * h
            return h, h
    else:
        f, g, act_h = acts

        def step(state, xw):
            h, c = state
            gates = xw + hh(h)                              # i, o, f, c (ONNX's order)
            gi, go = gates[..., 0:hs], gates[..., hs:2 * hs]
            gf, gc = gates[..., 2 * hs:3 * hs], gates[..., 3 * hs:]
            if p is not None:
                gi = gi + p[0:hs] * c
                gf = gf + p[2 * hs:] * c
            i = f(gi)
            ft = (1.0 - i) if input_forget else f(gf)
            c = ft * c + i * g(gc)
            if p is not None:
                go = go + p[hs:2 * hs] * c
            h = f(go) * act_h(c)
            return (h, c), h

    if not masked:
        return step

    def masked_step(state, xs):
        xw, valid = xs
        new, y = step(state, xw)
        if isinstance(new, tuple):
            new = tuple(F.where(valid, a, b) for a, b in zip(new, state))
        else:
            new = F.where(valid, new, state)
        return new, F.where(valid, y, F.zeros_like(y))
    return masked_step


def _valid_mask(ctx: Ctx, steps, batch):
    """``(T, N, 1)`` bool, ``t < sequence_lens[n]``, or None where every sequence is whole
    (known lengths all equal to T)."""
    if not ctx.has(4):
        return None
    lens = ctx._known[4]
    if isinstance(lens, np.ndarray):
        lens = np.asarray(lens).reshape(-1).astype(np.int64)
        if isinstance(steps, int):
            if lens.shape[0] != batch and isinstance(batch, int):
                refuse(f"sequence_lens has {lens.shape[0]} entries for a batch of {batch}")
            if np.any(lens < 0) or np.any(lens > steps):
                refuse(f"sequence_lens must be in 0..{steps} (the sequence length), found "
                       f"{lens.tolist()}")
            if np.all(lens == steps):
                return None
            return ctx.const((np.arange(steps)[:, None] < lens[None, :])[..., None], "bool")
    lens = F.cast(ctx.x(4), "int64")
    if isinstance(steps, int):
        t = ctx.const(np.arange(steps, dtype=np.int64), "int64")
    else:   # a symbolic T: the step index counted along X's own time axis (0, 1, ... T-1)
        ones = F.cast(F.ones_like(ctx.x(0)[:, 0, 0] if not ctx.attr("layout", 0)
                                  else ctx.x(0)[0, :, 0]), "int64")
        t = F.cumsum(ones, 0) - 1
    return F.unsqueeze(F.lt(F.unsqueeze(t, 1), F.unsqueeze(lens, 0)), 2)


@handler("RNN", "GRU", "LSTM")
def _recurrent(ctx: Ctx):
    op = ctx.node.op_type
    gates, defaults = _OPS[op]
    per = len(defaults)
    x, w, r = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype not in FLOATS:
        refuse(f"X has dtype {x.dtype}; expected one of {list(FLOATS)}")
    for i, v in ((1, w), (2, r)):
        if v.dtype != x.dtype:
            refuse(f"input {i} has dtype {v.dtype}, X has {x.dtype}")
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        refuse(f"direction {direction!r}: expected forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    layout = ctx.attr("layout", 0)
    if layout not in (0, 1):
        refuse(f"layout {layout}: expected 0 or 1")
    if len(x.shape) != 3 or len(w.shape) != 3 or len(r.shape) != 3:
        refuse(f"X, W and R must be 3-D, found {list(x.shape)}, {list(w.shape)}, "
               f"{list(r.shape)}")
    hs = r.shape[-1]
    if not isinstance(hs, int):
        refuse(f"R's last dim (the hidden size) is symbolic: {hs}")
    if ctx.attr("hidden_size") is not None and ctx.attr("hidden_size") != hs:
        refuse(f"hidden_size {ctx.attr('hidden_size')} but R has shape {list(r.shape)}")
    want_w = (dirs, gates * hs, x.shape[-1])
    if tuple(w.shape) != want_w or tuple(r.shape) != (dirs, gates * hs, hs):
        refuse(f"W {list(w.shape)} and R {list(r.shape)}: expected {list(want_w)} and "
               f"{[dirs, gates * hs, hs]} ({direction}, hidden size {hs})")
    clip = ctx.attr("clip")
    acts = _activations(ctx, dirs, per)
    lbr = ctx.attr("linear_before_reset", 0) if op == "GRU" else 0
    input_forget = ctx.attr("input_forget", 0) if op == "LSTM" else 0
    if layout:
        x = F.transpose(x, 0, 1)                            # (T, N, I)
    steps, batch = x.shape[0], x.shape[1]
    b = ctx.x(3) if ctx.has(3) else None
    if b is not None and tuple(b.shape) != (dirs, 2 * gates * hs):
        refuse(f"B has shape {list(b.shape)}, expected {[dirs, 2 * gates * hs]}")

    def state(i, what):
        if not ctx.has(i):
            return None
        s = ctx.x(i)
        if layout:
            s = F.transpose(s, 0, 1)                        # (D, N, H)
        if tuple(s.shape) != (dirs, batch, hs) and all(
                isinstance(d, int) for d in s.shape):
            refuse(f"{what} has shape {list(ctx.shape(i))}, expected "
                   f"{[batch, dirs, hs] if layout else [dirs, batch, hs]}")
        return s
    h0, c0 = state(5, "initial_h"), state(6, "initial_c") if op == "LSTM" else None
    p = ctx.x(7) if op == "LSTM" and ctx.has(7) else None
    if p is not None and tuple(p.shape) != (dirs, 3 * hs):
        refuse(f"P has shape {list(p.shape)}, expected {[dirs, 3 * hs]}")
    mask = _valid_mask(ctx, steps, batch)
    ys, hn, cn = [], [], []
    for d in range(dirs):
        xw = F.matmul(x, F.transpose(w[d], 0, 1))           # (T, N, G*H)
        zero = F.zeros_like(xw[0][..., 0:hs])               # (N, H)
        rb = None
        if b is not None:
            xw = xw + b[d][0:gates * hs]
            rb = b[d][gates * hs:]
        init_h = zero if h0 is None else h0[d]
        init = (init_h, zero if c0 is None else c0[d]) if op == "LSTM" else init_h
        fn = _step_fn(op, acts[d], r[d], rb, None if p is None else p[d], hs, clip, lbr,
                      input_forget, mask is not None)
        reverse = direction == "reverse" or d == 1
        last, y = scan(fn, init, xw if mask is None else (xw, mask), reverse=reverse)
        ys.append(y)
        if op == "LSTM":
            hn.append(last[0])
            cn.append(last[1])
        else:
            hn.append(last)
    y = F.stack(ys, 1)                                      # (T, D, N, H)
    y_h = F.stack(hn, 0)                                    # (D, N, H)
    y_c = F.stack(cn, 0) if op == "LSTM" else None
    if layout:
        y = F.permute(y, (2, 0, 1, 3))                      # (N, T, D, H)
        y_h = F.transpose(y_h, 0, 1)                        # (N, D, H)
        y_c = F.transpose(y_c, 0, 1) if y_c is not None else None
    return [y, y_h, y_c] if op == "LSTM" else [y, y_h]
