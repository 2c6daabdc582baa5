"""Recurrent layers on ``dg.scan``: ``RNN``, ``LSTM``, ``GRU`` with PyTorch's arguments,
weight names, shapes, gate orders and initialisation, so a PyTorch state dict loads as is.

Each layer and direction is one ``scan`` over time (one node, in every mode): the input
projection ``x @ W_ih.T + b_ih`` of all the steps is one matmul before the loop, and the
loop body holds only the recurrent part. Gradients are the scan's reverse scan.
Packed sequences (``nn.utils.rnn.pack_padded_sequence``) and LSTM ``proj_size`` are not
supported.
"""
from __future__ import annotations

import math

import numpy as np

from ..eager.tensors import Parameter
from ..graphlib import functional as F
from ..graphlib.ops.control import scan
from . import functional as NF
from . import init
from .layers import _shape_error
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters, input checks and the layer loop."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0):
        super().__init__()
        name = type(self).__name__
        for arg, v in (("input_size", input_size), ("hidden_size", hidden_size),
                       ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: {arg} must be a positive int, found {v!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or \
                not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] "
                             f"representing the probability of an element being zeroed, "
                             f"found {dropout!r}")
        if proj_size:
            raise NotImplementedError(f"{name}: proj_size is not supported")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.proj_size = 0
        gate = _GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                in_size = input_size if layer == 0 else hidden_size * dirs
                shapes = [(f"weight_ih{sfx}", (gate, in_size)),
                          (f"weight_hh{sfx}", (gate, hidden_size))]
                if bias:
                    shapes += [(f"bias_ih{sfx}", (gate,)), (f"bias_hh{sfx}", (gate,))]
                for pname, shape in shapes:
                    setattr(self, pname, Parameter(np.zeros(shape, dtype=np.float32)))
                    self._flat_weights_names.append(pname)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for pname in self._flat_weights_names:
            init.uniform_(getattr(self, pname), -bound, bound)

    @property
    def all_weights(self) -> list:
        """The parameters per layer and direction: [[w_ih, w_hh, b_ih, b_hh], ...]."""
        per = 4 if self.bias else 2
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i:i + per] for i in range(0, len(ws), per)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

    # -- the forward pass ----------------------------------------------------------------------
    def _cell(self, layer: int, d: int):
        """The recurrent step ``(state, xw_t) -> (state, h_t)`` of one layer and direction,
        where ``xw_t`` is the input projection of step t (with b_ih)."""
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        w_hh = getattr(self, f"weight_hh{sfx}")
        b_hh = getattr(self, f"bias_hh{sfx}") if self.bias else None
        mode, hs = self.mode, self.hidden_size

        def hh(h):
            return NF.linear(h, w_hh, b_hh)
        if mode in ("RNN_TANH", "RNN_RELU"):
            act = F.tanh if mode == "RNN_TANH" else F.relu

            def step(h, xw):
                h = act(xw + hh(h))
                return h, h
        elif mode == "LSTM":
            def step(state, xw):
                h, c = state
                gates = xw + hh(h)
                i = F.sigmoid(gates[..., 0:hs])
                f = F.sigmoid(gates[..., hs:2 * hs])
                g = F.tanh(gates[..., 2 * hs:3 * hs])
                o = F.sigmoid(gates[..., 3 * hs:4 * hs])
                c = f * c + i * g
                h = o * F.tanh(c)
                return (h, c), h
        else:
            def step(h, xw):
                gh = hh(h)
                r = F.sigmoid(xw[..., 0:hs] + gh[..., 0:hs])
                z = F.sigmoid(xw[..., hs:2 * hs] + gh[..., hs:2 * hs])
                n = F.tanh(xw[..., 2 * hs:] + r * gh[..., 2 * hs:])
                h = (1.0 - z) * n + z * h
                return h, h
        step.__qualname__ = f"{type(self).__name__}.layer{layer}{'_reverse' if d else ''}"
        return step

    def _check(self, x, hx):
        name = type(self).__name__
        if x.ndim not in (2, 3):
            raise _shape_error(self, f"expected a 2-D (unbatched) or 3-D (batched) input, "
                               f"found shape {list(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise _shape_error(self, f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")
        batched = x.ndim == 3
        dirs = 2 if self.bidirectional else 1
        if hx is None:
            return batched
        states = hx if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0), found {type(hx).__name__}")
        n = (x.shape[0] if self.batch_first else x.shape[1]) if batched else None
        want = (self.num_layers * dirs,) + ((n,) if batched else ()) + (self.hidden_size,)
        for s in states:
            if tuple(s.shape) != want:
                raise _shape_error(self, f"expected hidden size {list(want)}, got "
                                   f"{list(s.shape)}")
        return batched

    def forward(self, input, hx=None):
        batched = self._check(input, hx)
        x = input
        if not batched:
            x = F.unsqueeze(x, 1)
            if hx is not None:
                hx = tuple(F.unsqueeze(s, 1) for s in hx) if self.mode == "LSTM" else \
                    F.unsqueeze(hx, 1)
        elif self.batch_first:
            x = F.transpose(x, 0, 1)                 # (L, N, H_in)
        n = x.shape[1]
        dirs = 2 if self.bidirectional else 1
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = F.zeros((self.num_layers * dirs, n, self.hidden_size), dtype=x.dtype)
            h0, c0 = zeros, (zeros if lstm else None)
        else:
            h0, c0 = hx if lstm else (hx, None)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                w_ih = getattr(self, f"weight_ih{sfx}")
                b_ih = getattr(self, f"bias_ih{sfx}") if self.bias else None
                xw = NF.linear(x, w_ih, b_ih)       # every step's input projection at once
                init_state = (h0[k], c0[k]) if lstm else h0[k]
                last, ys = scan(self._cell(layer, d), init_state, xw, reverse=bool(d))
                if lstm:
                    h_n.append(last[0])
                    c_n.append(last[1])
                else:
                    h_n.append(last)
                outs.append(ys)
            x = outs[0] if dirs == 1 else F.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = NF.dropout(x, self.dropout, True)
        out = x
        h_n = F.stack(h_n)
        c_n = F.stack(c_n) if lstm else None
        if not batched:
            out = F.squeeze(out, 1)
            h_n = F.squeeze(h_n, 1)
            c_n = F.squeeze(c_n, 1) if lstm else None
        elif self.batch_first:
            out = F.transpose(out, 0, 1)
        return (out, (h_n, c_n)) if lstm else (out, h_n)


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or relu), as
    ``torch.nn.RNN``; returns ``(output, h_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}: expected 'tanh' or "
                             "'relu'")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory, as ``torch.nn.LSTM`` (gates i, f, g, o); ``forward(input,
    (h_0, c_0))`` returns ``(output, (h_n, c_n))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size)


class GRU(RNNBase):
    """Gated recurrent unit, as ``torch.nn.GRU`` (gates r, z, n); returns
    ``(output, h_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional)
