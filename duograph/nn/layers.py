"""Layers and containers. Defaults and initialisations follow PyTorch's documentation."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Iterable, Optional

import numpy as np

from ..eager.tensors import Parameter, Tensor
from ..graphlib import functional as F
from . import functional as NF
from . import init
from ._checks import _IMAGE, _check_input, _shape_error  # noqa: F401
from .conv_layers import _Conv
from .module import Module


def _empty(*shape) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


# -- containers --------------------------------------------------------------------------------
class Sequential(Module):
    """Modules applied in order; built from arguments or an OrderedDict."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __getitem__(self, i):
        if isinstance(i, slice):       # keeps the names, as PyTorch
            return Sequential(OrderedDict(list(self._modules.items())[i]))
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        """Append ``module`` as the last layer (named by its position) and return this
        Sequential."""
        self.add_module(str(len(self._modules)), module)
        return self

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    """A list whose modules are registered (a plain Python list is not)."""

    def __init__(self, modules: Optional[Iterable[Module]] = None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        """Append ``module`` (named by its position) and return this ModuleList."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Append every module of ``modules`` in order and return this ModuleList."""
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        items = list(self._modules.values())
        return ModuleList(items[i]) if isinstance(i, slice) else items[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict whose modules are registered."""

    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        """The names of the held modules, in insertion order."""
        return self._modules.keys()

    def values(self):
        """The held modules, in insertion order."""
        return self._modules.values()

    def items(self):
        """``(name, module)`` pairs of the held modules, in insertion order."""
        return self._modules.items()


# -- basic layers ------------------------------------------------------------------------------
class Identity(Module):
    """Returns its input unchanged; constructor arguments are accepted and ignored (as
    ``torch.nn.Identity``)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """y = x @ W.T + b; W, b ~ U(-1/sqrt(in_features), 1/sqrt(in_features))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features))
        if bias:
            self.bias = Parameter(_empty(out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's init: ``kaiming_uniform_(a=sqrt(5))`` for the weight,
        U(-1/sqrt(in_features), 1/sqrt(in_features)) for the bias. Called by the constructor."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        _check_input(self, x, range(1, 64), "at least 1 dim")
        if x.shape[-1] != self.in_features and isinstance(x.shape[-1], int):
            raise _shape_error(self, f"expected input with {self.in_features} features in "
                               f"its last dim, found shape {list(x.shape)}")
        return NF.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Conv2d(_Conv):
    """2-D convolution over (N, C, H, W) or (C, H, W) input, as ``torch.nn.Conv2d(in_channels,
    out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
    padding_mode='zeros', device=None, dtype=None)``: weight [out_channels,
    in_channels/groups, kH, kW], PyTorch's init (``reset_parameters``). The constructor checks,
    parameters, init, padding modes and repr are the other convolutions' (``_ConvNd``)."""
    _n = 2
    _fn = staticmethod(NF.conv2d)


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool):
    """2-D max pooling over an (N, C, H, W) or (C, H, W) input, as
    ``torch.nn.MaxPool2d(kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)``; ``stride`` defaults to ``kernel_size``. See
    ``dg.nn.functional.max_pool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__(kernel_size, stride, padding)
        self.dilation, self.ceil_mode = dilation, ceil_mode
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")

    def forward(self, x):
        _check_input(self, x, (3, 4), _IMAGE)
        return NF.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, self.return_indices)


class AvgPool2d(_Pool):
    """2-D average pooling over an (N, C, H, W) or (C, H, W) input, as
    ``torch.nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True)``; ``stride`` defaults to ``kernel_size``. See
    ``dg.nn.functional.avg_pool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        _check_input(self, x, (3, 4), _IMAGE)
        return NF.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class AdaptiveAvgPool2d(Module):
    """2-D average pooling to a fixed ``output_size`` (an int or (H, W)) over an (N, C, H, W) or
    (C, H, W) input, as ``torch.nn.AdaptiveAvgPool2d``."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        _check_input(self, x, (3, 4), _IMAGE)
        return NF.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _BatchNorm(Module):
    _dims = (2,)
    _what = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(np.ones(num_features, np.float32))
            if bias:
                self.bias = Parameter(np.zeros(num_features, np.float32))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor._wrap(np.zeros(num_features, np.float32)))
            self.register_buffer("running_var", Tensor._wrap(np.ones(num_features, np.float32)))
            self.register_buffer("num_batches_tracked", Tensor._wrap(np.zeros((), np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x):
        _check_input(self, x, self._dims, self._what)
        if isinstance(x.shape[1], int) and x.shape[1] != self.num_features:
            raise _shape_error(self, f"expected {self.num_features} channels in dim 1, found "
                               f"input of shape {list(x.shape)}")
        use_batch = self.training or self.running_mean is None
        return NF.batch_norm(
            x, self.running_mean if self.training or not use_batch else None,
            self.running_var if self.training or not use_batch else None,
            self.weight, self.bias, use_batch, self.momentum, self.eps,
            self.num_batches_tracked if self.training else None)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over a 2-D (N, C) or 3-D (N, C, L) input, as
    ``torch.nn.BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True, *, bias=True)``.

    In training it normalises with the batch statistics and updates the ``running_mean`` and
    ``running_var`` buffers; in eval mode it uses the running statistics (the batch ones when
    ``track_running_stats=False``). ``weight`` starts at 1, ``bias`` at 0.
    """

    _dims = (2, 3)
    _what = "a 2-D (N, C) or 3-D (N, C, L) input"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over a 4-D (N, C, H, W) input, per channel, as
    ``torch.nn.BatchNorm2d(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True, *, bias=True)``.

    In training it normalises with the batch statistics and updates the ``running_mean`` and
    ``running_var`` buffers; in eval mode it uses the running statistics (the batch ones when
    ``track_running_stats=False``). ``weight`` starts at 1, ``bias`` at 0.
    """

    _dims = (4,)
    _what = "a 4-D input (N, C, H, W)"


class LayerNorm(Module):
    """Layer normalisation over the last dims given by ``normalized_shape`` (an int or a tuple),
    as ``torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)``;
    ``weight`` starts at 1, ``bias`` at 0."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.ones(shape, np.float32))
            if bias:
                self.bias = Parameter(np.zeros(shape, np.float32))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return NF.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class Dropout(Module):
    """Zero elements with probability ``p`` and scale the rest by 1/(1-p) in training."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must lie in [0, 1], found {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return NF.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors; weight ~ N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 padding_idx: Optional[int] = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(_empty(num_embeddings, embedding_dim))
        init.normal_(self.weight)
        if padding_idx is not None:
            self.weight.array[padding_idx] = 0.0

    def forward(self, idx):
        return NF.embedding(idx, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class Flatten(Module):
    """Flattens dims ``start_dim..end_dim`` (default 1..-1, keeping the batch dim) into one, as
    ``torch.nn.Flatten``."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


# -- activations -------------------------------------------------------------------------------
class ReLU(Module):
    """max(x, 0). ``inplace`` is accepted for PyTorch compatibility (never in place here)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """``x`` where positive, else ``negative_slope * x`` (default 0.01). ``inplace`` is accepted
    for PyTorch compatibility (never in place here)."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                           else "")


class GELU(Module):
    """The Gaussian error linear unit ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh
    approximation, as ``torch.nn.GELU``."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    """The logistic function ``1 / (1 + exp(-x))``, elementwise."""

    def forward(self, x):
        return F.sigmoid(x)


class LogSigmoid(Module):
    """log(sigmoid(x)), computed stably (``torch.nn.LogSigmoid``)."""

    def forward(self, x):
        return F.logsigmoid(x)


class Tanh(Module):
    """The hyperbolic tangent, elementwise."""

    def forward(self, x):
        return F.tanh(x)


class _Activation(Module):
    """A module applying ``fn(x, **its settings)`` from ``duograph.nn.functional``."""

    fn = None
    settings: tuple = ()

    def forward(self, x):
        return type(self).fn(x, **{k: getattr(self, k) for k in self.settings})

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k in self.settings)


def _activation(name: str, fn, doc: str, **defaults):
    """A Module class for ``fn`` whose constructor takes ``defaults`` (PyTorch's arguments,
    ``inplace`` accepted and ignored)."""
    settings = tuple(defaults)

    def __init__(self, *args, inplace: bool = False, **kwargs):
        _Activation.__init__(self)
        values = dict(defaults)
        if len(args) > len(settings):
            raise TypeError(f"{name}() takes at most {len(settings)} arguments, found "
                            f"{len(args)}")
        values.update(zip(settings, args))
        unknown = set(kwargs) - set(settings)
        if unknown:
            raise TypeError(f"{name}() got unexpected arguments {sorted(unknown)}")
        values.update(kwargs)
        for k, v in values.items():
            setattr(self, k, v)
        self.inplace = inplace

    return type(name, (_Activation,), {"__init__": __init__, "fn": staticmethod(fn),
                                       "settings": settings, "__doc__": doc})


SiLU = _activation("SiLU", NF.silu, "x * sigmoid(x).")
Mish = _activation("Mish", NF.mish, "x * tanh(softplus(x)).")
ELU = _activation("ELU", NF.elu, "x if x > 0 else alpha * (exp(x) - 1).", alpha=1.0)
SELU = _activation("SELU", NF.selu, "scale * elu(x, alpha), self-normalising.")
CELU = _activation("CELU", NF.celu, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).",
                   alpha=1.0)
Hardtanh = _activation("Hardtanh", NF.hardtanh, "x clamped to [min_val, max_val].",
                       min_val=-1.0, max_val=1.0)
ReLU6 = _activation("ReLU6", NF.relu6, "min(max(x, 0), 6).")
Hardsigmoid = _activation("Hardsigmoid", NF.hardsigmoid, "relu6(x + 3) / 6.")
Hardswish = _activation("Hardswish", NF.hardswish, "x * relu6(x + 3) / 6.")
Softsign = _activation("Softsign", NF.softsign, "x / (1 + |x|).")
Tanhshrink = _activation("Tanhshrink", NF.tanhshrink, "x - tanh(x).")
Threshold = _activation("Threshold", NF.threshold, "x if x > threshold else value.",
                        threshold=0.0, value=0.0)
GLU = _activation("GLU", NF.glu, "a * sigmoid(b) over the halves of dim.", dim=-1)
Softmin = _activation("Softmin", NF.softmin, "softmax(-x) along dim.", dim=None)


class PReLU(Module):
    """x if x >= 0 else a * x, with a learnt slope ``a`` (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None,
                 dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full((num_parameters,), init,
                                        dtype=np.dtype(dtype or "float32")))

    def forward(self, x):
        return NF.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class Softmax(Module):
    """``exp(x)`` normalised to sum to 1 along ``dim`` (default -1; PyTorch's default of None
    picks a dim implicitly and warns)."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``log(softmax(x, dim))``, computed stably, along ``dim`` (default -1)."""

    def forward(self, x):
        return F.log_softmax(x, self.dim)


# -- attention ---------------------------------------------------------------------------------
class MultiheadAttention(Module):
    """Multi-head attention with ``torch.nn.MultiheadAttention``'s parameters and call.

    ``forward(query, key, value, key_padding_mask, need_weights, attn_mask,
    average_attn_weights, is_causal)`` returns ``(output, weights or None)``. As in PyTorch a
    boolean ``attn_mask`` (L, S) or (batch * num_heads, L, S), and a boolean
    ``key_padding_mask`` (batch, S), are True where attention is NOT allowed; float masks are
    added to the scores. Unlike PyTorch, ``is_causal=True`` alone (no ``attn_mask``) builds
    the causal mask. As in PyTorch, ``batch_first`` defaults to False: inputs are
    (seq, batch, embed); pass ``batch_first=True`` for (batch, seq, embed).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, batch_first: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible "
                             f"by num_heads ({num_heads})")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim))
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, np.float32))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            init.zeros_(self.out_proj.bias)

    def _heads(self, t, b, s):
        return F.transpose(F.reshape(t, b, s, self.num_heads, self.head_dim), 1, 2)

    def _check(self, name: str, t, ndim: int) -> None:
        if t.ndim != ndim or (isinstance(t.shape[-1], int) and t.shape[-1] != self.embed_dim):
            layout = "(batch, seq, embed)" if self.batch_first else "(seq, batch, embed)"
            raise _shape_error(self, f"expected a 3-D {layout} {name} (or an unbatched 2-D "
                               f"one) with embed = {self.embed_dim}, found shape "
                               f"{list(t.shape)}")

    def _mask(self, mask, name: str, b, sq, sk):
        """A user mask as (keep: bool or None, additive: float or None), shaped to broadcast
        against the (batch, heads, L, S) scores."""
        if mask is None:
            return None, None
        if name == "key_padding_mask":
            mask = F.reshape(mask, b, 1, 1, sk)
        elif mask.ndim == 3:
            mask = F.reshape(mask, b, self.num_heads, sq, sk)
        elif mask.ndim != 2:
            raise _shape_error(self, f"expected a 2-D (L, S) or 3-D (batch * num_heads, L, S) "
                               f"attn_mask, found shape {list(mask.shape)}")
        if mask.dtype == "bool":
            return F.logical_not(mask), None
        return None, mask

    def forward(self, query, key=None, value=None, key_padding_mask=None,
                need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False):
        key = query if key is None else key
        value = key if value is None else value
        batched = query.ndim == 3
        for name, t in (("query", query), ("key", key), ("value", value)):
            self._check(name, t, 3 if batched else 2)
        if not batched:
            query, key, value = (F.unsqueeze(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = F.unsqueeze(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (F.transpose(t, 0, 1) for t in (query, key, value))
        e = self.embed_dim
        w, bias = self.in_proj_weight, self.in_proj_bias
        wq, wk, wv = F.split(w, e, 0)
        bq, bk, bv = F.split(bias, e, 0) if bias is not None else (None, None, None)
        b, sq = query.shape[0], query.shape[1]
        sk = key.shape[1]
        q = self._heads(NF.linear(query, wq, bq), b, sq)
        k = self._heads(NF.linear(key, wk, bk), b, sk)
        v = self._heads(NF.linear(value, wv, bv), b, sk)
        keep_a, add_a = self._mask(attn_mask, "attn_mask", b, sq, sk)
        keep_k, add_k = self._mask(key_padding_mask, "key_padding_mask", b, sq, sk)
        keep = keep_a if keep_k is None else (keep_k if keep_a is None
                                              else F.logical_and(keep_a, keep_k))
        add = add_a if add_k is None else (add_k if add_a is None else add_a + add_k)
        p = self.dropout if self.training else 0.0
        out, weights = NF._attention(q, k, v, add, p, is_causal, None, keep)
        out = self.out_proj(F.reshape(F.transpose(out, 1, 2), b, sq, e))
        if not batched:
            out = F.squeeze(out, 0)
        elif not self.batch_first:
            out = F.transpose(out, 0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = F.mean(weights, 1)
        if not batched:
            weights = F.squeeze(weights, 0)
        return out, weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class TransformerBlock(Module):
    """Pre-norm transformer encoder block: x + attn(ln(x)); x + mlp(ln(x)), over
    (batch, seq, embed) inputs."""

    def __init__(self, embed_dim: int, num_heads: int, mlp_ratio: float = 4.0,
                 dropout: float = 0.0):
        super().__init__()
        hidden = int(embed_dim * mlp_ratio)
        self.ln1 = LayerNorm(embed_dim)
        self.attn = MultiheadAttention(embed_dim, num_heads, dropout, batch_first=True)
        self.ln2 = LayerNorm(embed_dim)
        self.mlp = Sequential(Linear(embed_dim, hidden), GELU(), Linear(hidden, embed_dim),
                              Dropout(dropout))

    def forward(self, x, attn_mask=None, is_causal: bool = False):
        """``attn_mask`` as MultiheadAttention's (boolean True = masked out)."""
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=attn_mask, is_causal=is_causal,
                          need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


# -- losses ------------------------------------------------------------------------------------
class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        reduction = NF._legacy_reduction(size_average, reduce, reduction)
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"{type(self).__name__}: unknown reduction {reduction!r}")
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}" if self.reduction != "mean" else ""


class MSELoss(_Loss):
    """Mean squared error; ``MSELoss(size_average=None, reduce=None, reduction="mean")``."""

    def forward(self, input, target):
        return NF.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error; ``L1Loss(size_average=None, reduce=None, reduction="mean")``."""

    def forward(self, input, target):
        return NF.l1_loss(input, target, reduction=self.reduction)


class _WeightedLoss(_Loss):
    """A loss whose per-class ``weight`` (and ``pos_weight``) are buffers, as in PyTorch: in
    ``state_dict``, converted by ``to()``, captured as state in graph mode."""

    def _weights(self, **weights) -> None:
        for name, value in weights.items():
            if value is not None and not isinstance(value, Tensor):
                if not isinstance(value, np.ndarray):
                    raise TypeError(f"{type(self).__name__}: {name} must be a tensor, a "
                                    f"numpy array or None, found {type(value).__name__}")
                value = Tensor._wrap(value)
            self.register_buffer(name, value)


class CrossEntropyLoss(_WeightedLoss):
    """The cross entropy between logits ``input`` (N, C, ...) and ``target`` (class indices, or
    class probabilities of ``input``'s shape), as ``torch.nn.CrossEntropyLoss(weight=None,
    size_average=None, ignore_index=-100, reduce=None, reduction='mean',
    label_smoothing=0.0)``. ``weight`` is kept as a buffer. See
    ``dg.nn.functional.cross_entropy``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(size_average, reduce, reduction)
        self._weights(weight=weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return NF.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                                reduction=self.reduction,
                                label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """The negative log likelihood of log-probabilities ``input`` (N, C, ...) at the class
    indices ``target``, as ``torch.nn.NLLLoss(weight=None, size_average=None,
    ignore_index=-100, reduce=None, reduction='mean')``. ``weight`` is kept as a buffer."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self._weights(weight=weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return NF.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                           reduction=self.reduction)


class BCELoss(_WeightedLoss):
    """Binary cross entropy between probabilities ``input`` and ``target``, as
    ``torch.nn.BCELoss(weight=None, size_average=None, reduce=None, reduction='mean')``.
    ``weight`` is kept as a buffer."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self._weights(weight=weight)

    def forward(self, input, target):
        return NF.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Binary cross entropy on logits (a stable sigmoid + BCELoss), as
    ``torch.nn.BCEWithLogitsLoss(weight=None, size_average=None, reduce=None,
    reduction='mean', pos_weight=None)``. ``weight`` and ``pos_weight`` are kept as buffers."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self._weights(weight=weight, pos_weight=pos_weight)

    def forward(self, input, target):
        return NF.binary_cross_entropy_with_logits(input, target, self.weight,
                                                   reduction=self.reduction,
                                                   pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """The Kullback-Leibler divergence of log-probabilities ``input`` from ``target``
    (log-probabilities too with ``log_target=True``), as
    ``torch.nn.KLDivLoss(size_average=None, reduce=None, reduction='mean',
    log_target=False)``; use ``reduction='batchmean'`` for the mathematical KL divergence."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return NF.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
