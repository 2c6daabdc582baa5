"""``RNNCell``, ``LSTMCell``, ``GRUCell``: one step of the recurrent layers, as PyTorch's
(parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` with PyTorch's shapes, gate
order and initialisation U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))). Inputs are (N, H_in)
or unbatched (H_in); a missing hidden state is zeros."""
from __future__ import annotations

import math

from ..eager.tensors import Parameter
from ..graphlib import functional as F
from ..graphlib.errors import ShapeError
from . import functional as NF
from . import init
from .module import Module


class RNNCellBase(Module):
    """The parameters and checks the three cells share."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, gates: int,
                 dtype=None):
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{type(self).__name__}: {name} must be a positive int, "
                                 f"found {value!r}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        dt = dtype or "float32"
        self.weight_ih = Parameter(F.zeros(gates * hidden_size, input_size, dtype=dt))
        self.weight_hh = Parameter(F.zeros(gates * hidden_size, hidden_size, dtype=dt))
        if bias:
            self.bias_ih = Parameter(F.zeros(gates * hidden_size, dtype=dt))
            self.bias_hh = Parameter(F.zeros(gates * hidden_size, dtype=dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        nonlinearity = getattr(self, "nonlinearity", "tanh")
        if nonlinearity != "tanh":
            s += f", nonlinearity={nonlinearity!r}"
        return s

    def _prepare(self, input, hx, n_states: int):
        """(batched input, hidden states or zeros, whether the input was unbatched)."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D "
                             f"instead")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has inconsistent input_size: got "
                             f"{input.shape[-1]} expected {self.input_size}")
        unbatched = input.ndim == 1
        x = F.unsqueeze(input, 0) if unbatched else input
        if hx is None:
            zeros = F.zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
            states = tuple(zeros for _ in range(n_states))
        else:
            states = hx if isinstance(hx, tuple) else (hx,)
            if len(states) != n_states:
                raise ValueError(f"{name}: expected {n_states} hidden state tensor(s), found "
                                 f"{len(states)}")
            fixed = []
            for h in states:
                if h.ndim != input.ndim:
                    raise ValueError(f"{name}: Expected hidden to be {input.ndim}D when input "
                                     f"is {input.ndim}D, got {h.ndim}D")
                h = F.unsqueeze(h, 0) if unbatched else h
                if tuple(h.shape) != (x.shape[0], self.hidden_size):
                    raise ShapeError(f"{name}: hidden state has shape {list(h.shape)}, "
                                     f"expected {[x.shape[0], self.hidden_size]}")
                fixed.append(h)
            states = tuple(fixed)
        return x, states, unbatched

    def _gates(self, x, h):
        return (NF.linear(x, self.weight_ih, self.bias_ih),
                NF.linear(h, self.weight_hh, self.bias_hh))


class RNNCell(RNNCellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu), as ``torch.nn.RNNCell``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: Unknown nonlinearity: {nonlinearity}")
        self_nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, dtype)
        self.nonlinearity = self_nonlinearity

    def forward(self, input, hx=None):
        x, (h,), unbatched = self._prepare(input, hx, 1)
        gi, gh = self._gates(x, h)
        out = (F.tanh if self.nonlinearity == "tanh" else F.relu)(gi + gh)
        return F.squeeze(out, 0) if unbatched else out


class LSTMCell(RNNCellBase):
    """One LSTM step, gates (input, forget, cell, output) as ``torch.nn.LSTMCell``; returns
    ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, dtype)

    def forward(self, input, hx=None):
        x, (h, c), unbatched = self._prepare(input, hx, 2)
        gi, gh = self._gates(x, h)
        gates = gi + gh
        hs = self.hidden_size
        i = F.sigmoid(gates[..., 0:hs])
        f = F.sigmoid(gates[..., hs:2 * hs])
        g = F.tanh(gates[..., 2 * hs:3 * hs])
        o = F.sigmoid(gates[..., 3 * hs:4 * hs])
        c = f * c + i * g
        h = o * F.tanh(c)
        if unbatched:
            return F.squeeze(h, 0), F.squeeze(c, 0)
        return h, c


class GRUCell(RNNCellBase):
    """One GRU step, gates (reset, update, new) as ``torch.nn.GRUCell``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, dtype)

    def forward(self, input, hx=None):
        x, (h,), unbatched = self._prepare(input, hx, 1)
        gi, gh = self._gates(x, h)
        hs = self.hidden_size
        r = F.sigmoid(gi[..., 0:hs] + gh[..., 0:hs])
        z = F.sigmoid(gi[..., hs:2 * hs] + gh[..., hs:2 * hs])
        n = F.tanh(gi[..., 2 * hs:] + r * gh[..., 2 * hs:])
        out = (1.0 - z) * n + z * h
        return F.squeeze(out, 0) if unbatched else out
