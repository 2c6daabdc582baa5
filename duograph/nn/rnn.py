"""Recurrent layers on ``dg.scan``: ``RNN``, ``LSTM``, ``GRU`` with PyTorch's arguments,
weight names, shapes, gate orders and initialisation, so a PyTorch state dict loads as is.

Each layer and direction is one ``scan`` over time (one node, in every mode): the input
projection ``x @ W_ih.T + b_ih`` of all the steps is one matmul before the loop, and the
loop body holds only the recurrent part. Gradients are the scan's reverse scan.

Variable-length batches: a ``PackedSequence`` input (``nn.utils.rnn``) gives a
``PackedSequence`` output and, for each sequence, the final state at its own last step, as
PyTorch. Inside, the batch is padded, and each step's carry update is masked with
``t < length`` (``where``), so the padded steps leave the state alone; the reverse direction
is the same reversed scan, whose state stays at ``h_0`` until each sequence's own end. The
same mask is built from a lengths tensor given as ``lengths=`` with a padded batch (a
duograph extension), which works with symbolic lengths in graph mode and under
``dg.compile`` without recording again for other lengths. LSTM ``proj_size`` projects
``h`` with ``weight_hr_l{k}``, as PyTorch.
"""
from __future__ import annotations

import math

import numpy as np

from ..eager.tensors import Parameter, Tensor
from ..graphlib import functional as F
from ..graphlib.errors import located
from ..graphlib.ir import Value
from ..graphlib.ops.control import scan
from . import functional as NF
from . import init
from .layers import _shape_error
from .module import Module
from .utils.rnn import PackedSequence, _int_array, _pack_index, _padded_index

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters, input checks and the layer loop.

    ``forward(input, hx=None, *, lengths=None)``: ``input`` is a padded batch (``(L, N,
    H_in)``, ``(N, L, H_in)`` with ``batch_first``, or unbatched ``(L, H_in)``) or a
    ``PackedSequence``; a packed input gives a packed output. ``lengths`` (a duograph
    extension; a list, array or int tensor of N lengths, symbolic in graph mode) treats a
    padded batch as sequences of those lengths: the output is zero past each length and the
    final states are taken at each sequence's last step, as
    ``pad_packed_sequence(rnn(pack_padded_sequence(input, lengths)))`` but with static
    shapes. A length of 0 keeps ``h_0`` (PyTorch refuses empty sequences)."""

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
        if isinstance(proj_size, bool) or not isinstance(proj_size, int):
            raise TypeError(f"{name}: proj_size must be an int, found {proj_size!r}")
        if proj_size < 0:
            raise ValueError(f"{name}: proj_size should be a positive integer or zero to "
                             f"disable projections, found {proj_size}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN "
                             "or GRU")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size has to be smaller than hidden_size, found "
                             f"proj_size={proj_size} and hidden_size={hidden_size}")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.proj_size = proj_size
        gate = _GATES[mode] * hidden_size
        real = proj_size or hidden_size          # the size of h (and of each output)
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                in_size = input_size if layer == 0 else real * dirs
                shapes = [(f"weight_ih{sfx}", (gate, in_size)),
                          (f"weight_hh{sfx}", (gate, real))]
                if bias:
                    shapes += [(f"bias_ih{sfx}", (gate,)), (f"bias_hh{sfx}", (gate,))]
                if proj_size:
                    shapes.append((f"weight_hr{sfx}", (proj_size, hidden_size)))
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
        """The parameters per layer and direction: [[w_ih, w_hh, b_ih, b_hh(, w_hr)], ...]."""
        per = (4 if self.bias else 2) + (1 if self.proj_size else 0)
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i:i + per] for i in range(0, len(ws), per)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
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
    def _cell(self, layer: int, d: int, masked: bool = False):
        """The recurrent step ``(state, xw_t) -> (state, h_t)`` of one layer and direction,
        where ``xw_t`` is the input projection of step t (with b_ih). ``masked``: the step
        takes ``(xw_t, valid_t)`` and keeps the old state (and outputs zeros) where
        ``valid_t`` (``(N, 1)`` bool) is false."""
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        w_hh = getattr(self, f"weight_hh{sfx}")
        b_hh = getattr(self, f"bias_hh{sfx}") if self.bias else None
        w_hr = getattr(self, f"weight_hr{sfx}") if self.proj_size else None
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
                if w_hr is not None:
                    h = NF.linear(h, w_hr)
                return (h, c), h
        else:
            def step(h, xw):
                gh = hh(h)
                r = F.sigmoid(xw[..., 0:hs] + gh[..., 0:hs])
                z = F.sigmoid(xw[..., hs:2 * hs] + gh[..., hs:2 * hs])
                n = F.tanh(xw[..., 2 * hs:] + r * gh[..., 2 * hs:])
                h = (1.0 - z) * n + z * h
                return h, h
        fn = step
        if masked:
            def fn(state, xs):
                xw, valid = xs
                new, y = step(state, xw)
                if isinstance(new, tuple):
                    new = tuple(F.where(valid, a, b) for a, b in zip(new, state))
                else:
                    new = F.where(valid, new, state)
                return new, F.where(valid, y, 0.0)
        fn.__qualname__ = f"{type(self).__name__}.layer{layer}{'_reverse' if d else ''}"
        return fn

    def _check(self, x, hx, n=None, packed=False):
        """Check the input and the initial state; ``n``: the batch size of a packed input.
        Returns whether the input is batched."""
        name = type(self).__name__
        if packed:
            if x.ndim != 2:
                raise _shape_error(self, f"a PackedSequence's data must have 2 dimensions "
                                   f"(steps, input_size), got {x.ndim}")
        elif x.ndim not in (2, 3):
            raise _shape_error(self, f"expected a 2-D (unbatched) or 3-D (batched) input, "
                               f"found shape {list(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise _shape_error(self, f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")
        batched = packed or x.ndim == 3
        dirs = 2 if self.bidirectional else 1
        if hx is None:
            return batched
        lstm = self.mode == "LSTM"
        if lstm and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0), found {type(hx).__name__}")
        if n is None and batched:
            n = x.shape[0] if self.batch_first else x.shape[1]
        lead = (self.num_layers * dirs,) + ((n,) if batched else ())
        wants = [lead + (self.proj_size or self.hidden_size,)]
        if lstm:
            wants.append(lead + (self.hidden_size,))
        for k, (s, want) in enumerate(zip(hx if lstm else (hx,), wants)):
            if tuple(s.shape) != want:
                what = "hidden size" if not (lstm and self.proj_size) else \
                    ("hidden[0] size", "hidden[1] size")[k]
                if lstm and not self.proj_size and k == 1:
                    what = "cell size"
                raise _shape_error(self, f"expected {what} {list(want)}, got "
                                   f"{list(s.shape)}")
        return batched

    def _valid_mask(self, lengths, steps: int, n):
        """The ``(steps, N, 1)`` bool mask ``t < lengths[b]`` from ``lengths=``."""
        name = type(self).__name__
        if isinstance(lengths, (Tensor, Value)):
            if tuple(lengths.shape) != (n,):
                raise _shape_error(self, f"lengths must have shape [{n}] (one per sequence), "
                                   f"found {list(lengths.shape)}")
            if not str(lengths.dtype).startswith(("int", "uint")):
                raise TypeError(located(f"{name}: lengths must be an integer tensor, found "
                                        f"dtype {lengths.dtype}"))
            t = F.unsqueeze(F.arange(steps, dtype=lengths.dtype), 1)
            return F.unsqueeze(F.lt(t, F.unsqueeze(lengths, 0)), 2)
        lens = _int_array(lengths, "lengths", name)
        if lens.shape != (n,):
            raise _shape_error(self, f"lengths must have shape [{n}] (one per sequence), "
                               f"found {list(lens.shape)}")
        if np.any(lens < 0) or np.any(lens > steps):
            raise _shape_error(self, f"lengths must be in 0..{steps} (the time dimension), "
                               f"found {lens.tolist()}")
        return (np.arange(steps)[:, None] < lens[None, :])[..., None]

    def forward(self, input, hx=None, *, lengths=None):
        lstm = self.mode == "LSTM"
        if isinstance(input, PackedSequence):
            if lengths is not None:
                raise TypeError(located(f"{type(self).__name__}: lengths= is for a padded "
                                        "batch; a PackedSequence carries its own lengths"))
            return self._forward_packed(input, hx)
        batched = self._check(input, hx)
        x = input
        if not batched:
            if lengths is not None:
                raise _shape_error(self, "lengths= needs a batched (3-D) input, found shape "
                                   f"{list(input.shape)}")
            x = F.unsqueeze(x, 1)
            if hx is not None:
                hx = tuple(F.unsqueeze(s, 1) for s in hx) if lstm else F.unsqueeze(hx, 1)
        elif self.batch_first:
            x = F.transpose(x, 0, 1)                 # (L, N, H_in)
        mask = None if lengths is None else self._valid_mask(lengths, x.shape[0], x.shape[1])
        out, h_n, c_n = self._layers(x, hx, mask)
        if not batched:
            out = F.squeeze(out, 1)
            h_n = F.squeeze(h_n, 1)
            c_n = F.squeeze(c_n, 1) if lstm else None
        elif self.batch_first:
            out = F.transpose(out, 0, 1)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def _forward_packed(self, packed: PackedSequence, hx):
        lstm = self.mode == "LSTM"
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        bs = _int_array(batch_sizes, "batch_sizes", type(self).__name__)
        steps, n = int(bs.size), int(bs[0])
        self._check(data, hx, n, packed=True)
        rows = int(bs.sum())
        if data.shape[0] != rows:
            raise _shape_error(self, f"the packed data has {data.shape[0]} rows, but "
                               f"batch_sizes add up to {rows}")
        if hx is not None and sorted_indices is not None:     # into the packed batch order
            order = _int_array(sorted_indices, "sorted_indices", type(self).__name__)
            hx = tuple(F.index_select(s, 1, order) for s in hx) if lstm else \
                F.index_select(hx, 1, order)
        zero = F.zeros_like(data[0:1])                # padding rows, on data's device
        idx = _padded_index(bs, steps, rows).reshape(-1)
        x = F.reshape(F.index_select(F.cat([data, zero], 0), 0, idx), (steps, n, -1))
        lens = (bs[None, :] > np.arange(n)[:, None]).sum(1)
        mask = (np.arange(steps)[:, None] < lens[None, :])[..., None]
        out, h_n, c_n = self._layers(x, hx, mask)
        out = F.index_select(F.reshape(out, (steps * n, -1)), 0, _pack_index(bs, n))
        if unsorted_indices is not None:                      # back to the caller's order
            order = _int_array(unsorted_indices, "unsorted_indices", type(self).__name__)
            h_n = F.index_select(h_n, 1, order)
            c_n = F.index_select(c_n, 1, order) if lstm else None
        out = PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def _layers(self, x, hx, mask):
        """The layer loop over a time-major ``x`` (``(L, N, H_in)``); ``mask``: ``(L, N, 1)``
        bool (valid steps) or None. Returns ``(output, h_n, c_n)`` (``c_n`` None but for
        LSTM)."""
        n = x.shape[1]
        dirs = 2 if self.bidirectional else 1
        lstm = self.mode == "LSTM"
        real = self.proj_size or self.hidden_size
        if hx is None:
            h0 = F.zeros((self.num_layers * dirs, n, real), dtype=x.dtype)
            c0 = F.zeros((self.num_layers * dirs, n, self.hidden_size), dtype=x.dtype) \
                if lstm else None
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
                xs = xw if mask is None else (xw, mask)
                last, ys = scan(self._cell(layer, d, mask is not None), init_state, xs,
                                reverse=bool(d))
                if lstm:
                    h_n.append(last[0])
                    c_n.append(last[1])
                else:
                    h_n.append(last)
                outs.append(ys)
            x = outs[0] if dirs == 1 else F.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = NF.dropout(x, self.dropout, True)
        return x, F.stack(h_n), (F.stack(c_n) if lstm else None)


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
