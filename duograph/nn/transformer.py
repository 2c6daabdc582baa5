"""PyTorch's transformer modules: ``TransformerEncoderLayer``, ``TransformerEncoder``,
``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer``.

Arguments, defaults, submodule and parameter names (so ``state_dict`` keys) and masks are
PyTorch's: ``batch_first=False`` by default ((seq, batch, embed) inputs), post-norm unless
``norm_first=True``, ``activation`` "relu" (default), "gelu" or any callable; boolean masks are
True where attention is NOT allowed, float masks are added to the scores. Written with op
functions, so they run eagerly, under ``dg.compile`` and on symbolic Values in graph mode.

Deliberate differences: PyTorch's inference fast path (eval mode under ``no_grad``, with
nested tensors when ``enable_nested_tensor``) returns zeros at padded positions of
``src_key_padding_mask``; duograph always takes the regular path, which gives the values the
regular path gives (``enable_nested_tensor`` is accepted and has no effect). A query whose
keys are all masked by boolean masks gets zeros here (PyTorch: NaN).
"""
from __future__ import annotations

import copy
import warnings
from typing import Callable, Optional, Union

import numpy as np

from ..eager.tensors import Tensor
from ..graphlib import dtypes
from ..graphlib import functional as F
from . import init
from ..graphlib.errors import ShapeError, located
from .layers import Dropout, LayerNorm, Linear, ModuleList, MultiheadAttention
from .module import Module

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer", "generate_square_subsequent_mask"]


def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
    """A float (sz, sz) causal mask: 0 on and below the diagonal, -inf above it (PyTorch's
    ``nn.Transformer.generate_square_subsequent_mask``)."""
    if isinstance(sz, bool) or not isinstance(sz, (int, np.integer)) or sz < 0:
        raise ValueError(f"generate_square_subsequent_mask: expected a size >= 0 (an int), "
                         f"found {sz!r}")
    name = "float32" if dtype is None else dtypes.as_dtype(dtype)
    if not dtypes.is_float(name):
        raise TypeError(f"generate_square_subsequent_mask: expected a floating dtype (the "
                        f"mask holds -inf), found {name}")
    mask = Tensor._wrap(np.triu(np.full((int(sz), int(sz)), -np.inf, dtype=np.float64), 1))
    mask = mask.to(name)
    return mask if device is None else mask.to(device=device)


def _activation(activation: Union[str, Callable], who: str) -> Callable:
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"{who}: activation should be relu/gelu, not {activation}")
    if not callable(activation):
        raise TypeError(f"{who}: activation must be 'relu', 'gelu' or a callable, found "
                        f"{type(activation).__name__}")
    return activation


def _check_mask_dtypes(who: str, mask, padding_mask) -> None:
    """PyTorch warns when the masks are of different kinds (one boolean, one float); both
    are honoured all the same."""
    if mask is None or padding_mask is None:
        return
    if (mask.dtype == "bool") != (padding_mask.dtype == "bool"):
        warnings.warn(f"{who}: support for mismatched key_padding_mask and attn_mask is "
                      f"deprecated. Use same type for both instead.", UserWarning,
                      stacklevel=3)


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and
    LayerNorm (after it, or before it with ``norm_first=True``), as
    ``torch.nn.TransformerEncoderLayer``.

    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Union[str, Callable] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.batch_first = batch_first
        self.activation = _activation(activation, "TransformerEncoderLayer")
        _to(self, device, dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        _check_mask_dtypes("TransformerEncoderLayer", src_mask, src_key_padding_mask)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's ``memory`` and a feed-forward block,
    as ``torch.nn.TransformerDecoderLayer``.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Union[str, Callable] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.batch_first = batch_first
        self.activation = _activation(activation, "TransformerDecoderLayer")
        _to(self, device, dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False):
        _check_mask_dtypes("TransformerDecoderLayer", tgt_mask, tgt_key_padding_mask)
        _check_mask_dtypes("TransformerDecoderLayer", memory_mask, memory_key_padding_mask)
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask,
                                               memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


def _to(module: Module, device, dtype) -> None:
    if dtype is not None:
        module.to(dtype=dtype)
    if device is not None:
        module.to(device=str(device))


def _clones(layer: Module, n: int, who: str) -> ModuleList:
    if not isinstance(layer, Module):
        raise TypeError(f"{who}: expected a layer Module to copy, found "
                        f"{type(layer).__name__}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{who}: num_layers must be an int >= 0, found {n!r}")
    return ModuleList([copy.deepcopy(layer) for _ in range(int(n))])


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies: independent weights, as
    PyTorch), then ``norm`` if given. ``enable_nested_tensor`` and ``mask_check`` are
    accepted for PyTorch compatibility (nested tensors are a fast path duograph does not take).

    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None)``.
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Optional[Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers = int(num_layers)
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None,
                is_causal: Optional[bool] = None):
        x = src
        causal = bool(is_causal) if is_causal is not None else False
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=causal)
        if self.norm is not None:
            x = self.norm(x)
        return x


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` if given.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)``.
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Optional[Module] = None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: Optional[bool] = None, memory_is_causal: bool = False):
        x = tgt
        causal = bool(tgt_is_causal) if tgt_is_causal is not None else False
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return x


class Transformer(Module):
    """The encoder-decoder transformer of "Attention Is All You Need", as
    ``torch.nn.Transformer``: an encoder and a decoder each ending in a LayerNorm, every
    matrix parameter initialised with ``xavier_uniform_``.

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False)``.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Union[str, Callable] = "relu",
                 custom_encoder: Optional[Module] = None,
                 custom_decoder: Optional[Module] = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
                                            activation, layer_norm_eps, batch_first,
                                            norm_first, bias)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps,
                                                        bias=bias))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout,
                                            activation, layer_norm_eps, batch_first,
                                            norm_first, bias)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps,
                                                        bias=bias))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        _to(self, device, dtype)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: Optional[bool] = None,
                tgt_is_causal: Optional[bool] = None, memory_is_causal: bool = False):
        batched = src.ndim == 3
        bdim = 0 if self.batch_first else 1
        if batched and src.shape[bdim] != tgt.shape[bdim] and all(
                isinstance(t.shape[bdim], int) for t in (src, tgt)):
            raise ShapeError(located(
                f"Transformer: the batch number of src and tgt must be equal, found src "
                f"{list(src.shape)} and tgt {list(tgt.shape)}"))
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(located(
                f"Transformer: the feature number of src and tgt must be equal to d_model "
                f"({self.d_model}), found src {list(src.shape)} and tgt {list(tgt.shape)}"))
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
