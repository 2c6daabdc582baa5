"""Convolution, pooling and resampling layers beyond the 2-D basics of ``layers.py``: Conv1d,
Conv3d, ConvTranspose1d/2d/3d, MaxPool1d/3d, AvgPool1d/3d, MaxUnpool2d, AdaptiveMaxPool2d,
Unfold, Fold, PixelShuffle, PixelUnshuffle, Upsample and the padding layers.

Arguments, defaults, parameter names, shapes and initialisation follow PyTorch's, so a
PyTorch ``state_dict`` loads unchanged.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..eager.tensors import Parameter
from ..graphlib import dtypes
from . import functional as NF
from . import init
from ._checks import _check_input, _shape_error
from .module import Module

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(v, n: int, name: str) -> tuple:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    v = tuple(v)
    if len(v) != n or not all(isinstance(e, (int, np.integer)) for e in v):
        raise ValueError(f"expected an int or {n} ints for {name}, found {v}")
    return tuple(int(e) for e in v)


class _ConvNd(Module):
    """Shared by the convolutions: parameters, PyTorch's init and repr."""
    _n = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 output_padding=0, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if groups <= 0:
            raise ValueError(f"{name}: groups must be a positive integer, found {groups}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {', '.join(_PADDING_MODES)}"
                             f", found {padding_mode!r}")
        n = self._n
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"{name}: padding must be 'valid', 'same' or ints, found "
                                 f"{padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, n, "padding")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.output_padding = _ntuple(output_padding, n, "output_padding")
        self.groups, self.padding_mode = groups, padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        dt = np.float32 if dtype is None else np.dtype(dtypes.as_dtype(dtype))
        self.weight = Parameter(np.zeros(shape, dtype=dt))
        if bias:
            self.bias = Parameter(np.zeros((out_channels,), dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's init: kaiming_uniform_(a=sqrt(5)) for the weight, U(-1/sqrt(fan_in),
        1/sqrt(fan_in)) for the bias (fan_in from the weight's dim 1 and kernel)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * int(np.prod(self.kernel_size))
            if fan_in:
                bound = 1.0 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _check(self, x):
        n = self._n
        dims = ("D, H, W", "H, W", "L")[3 - n] if 1 <= n <= 3 else "..."
        _check_input(self, x, (n + 1, n + 2),
                     f"a {n + 2}-D (N, C, {dims}) or {n + 1}-D (C, {dims}) input")
        c = x.shape[x.ndim - n - 1]
        if isinstance(c, int) and c != self.in_channels:
            raise _shape_error(self, f"expected {self.in_channels} input channels (dim "
                               f"{x.ndim - n - 1}), found input of shape {list(x.shape)}")

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding not in ((0,) * self._n, "valid"):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    _fn = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 0, device, dtype)

    def forward(self, x):
        self._check(x)
        fn = type(self)._fn
        if self.padding_mode == "zeros":
            return fn(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)
        if self.padding == "same":
            pads = []
            for k, d in zip(self.kernel_size, self.dilation):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
        elif self.padding == "valid":
            pads = [(0, 0)] * self._n
        else:
            pads = [(p, p) for p in self.padding]
        flat = tuple(v for lo_hi in reversed(pads) for v in lo_hi)
        x = NF.pad(x, flat, mode=self.padding_mode)
        return fn(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class Conv1d(_Conv):
    """1-D convolution over (N, C, L) input (PyTorch's arguments, weight
    [out_channels, in_channels/groups, kL])."""
    _n = 1
    _fn = staticmethod(NF.conv1d)


class Conv3d(_Conv):
    """3-D convolution over (N, C, D, H, W) input (PyTorch's arguments, weight
    [out_channels, in_channels/groups, kD, kH, kW])."""
    _n = 3
    _fn = staticmethod(NF.conv3d)


class _ConvTranspose(_ConvNd):
    _transposed = True
    _fn = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f"{type(self).__name__}: only padding_mode='zeros' is supported "
                             f"(as PyTorch), found {padding_mode!r}")
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be ints, found {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def _output_padding(self, x, output_size):
        """PyTorch's rule: the output_padding that gives ``output_size`` (its last dims)."""
        if output_size is None:
            return self.output_padding
        n = self._n
        size = [int(s) for s in tuple(output_size)[-n:]]
        if len(tuple(output_size)) not in (n, n + 1, n + 2):
            raise _shape_error(self, f"expected output_size of {n} (or {n + 2}) entries, found "
                               f"{list(output_size)}")
        pads = []
        for d in range(n):
            size_in = x.shape[x.ndim - n + d]
            low = ((size_in - 1) * self.stride[d] - 2 * self.padding[d]
                   + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            high = low + self.stride[d] - 1
            if not low <= size[d] <= high:
                raise _shape_error(self, f"requested an output size of {size}, but valid "
                                   f"sizes range from {low} to {high} along dim {d} (for an "
                                   f"input of shape {list(x.shape)})")
            pads.append(size[d] - low)
        return tuple(pads)

    def forward(self, x, output_size=None):
        self._check(x)
        op = self._output_padding(x, output_size)
        return type(self)._fn(x, self.weight, self.bias, self.stride, self.padding, op,
                              self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """1-D transposed convolution (PyTorch's arguments, weight
    [in_channels, out_channels/groups, kL]); ``forward(x, output_size=None)``."""
    _n = 1
    _fn = staticmethod(NF.conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    """2-D transposed convolution (PyTorch's arguments, weight
    [in_channels, out_channels/groups, kH, kW]); ``forward(x, output_size=None)``."""
    _n = 2
    _fn = staticmethod(NF.conv_transpose2d)


class ConvTranspose3d(_ConvTranspose):
    """3-D transposed convolution (PyTorch's arguments, weight
    [in_channels, out_channels/groups, kD, kH, kW]); ``forward(x, output_size=None)``."""
    _n = 3
    _fn = staticmethod(NF.conv_transpose3d)


# -- pooling -----------------------------------------------------------------------------------
class _PoolNd(Module):
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def _check(self, x):
        n = self._n
        dims = ("D, H, W", "H, W", "L")[3 - n] if 1 <= n <= 3 else "..."
        _check_input(self, x, (n + 1, n + 2),
                     f"a {n + 2}-D (N, C, {dims}) or {n + 1}-D (C, {dims}) input")


class _MaxPoolNd(_PoolNd):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__(kernel_size, stride, padding)
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L) input (as torch.nn.MaxPool1d)."""
    _n = 1

    def forward(self, x):
        self._check(x)
        return NF.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, self.return_indices)


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) input (as torch.nn.MaxPool3d)."""
    _n = 3

    def forward(self, x):
        self._check(x)
        return NF.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, self.return_indices)


class _AvgPoolNd(_PoolNd):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, L) input (as torch.nn.AvgPool1d)."""
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(_ntuple(kernel_size, 1, "kernel_size"),
                         _ntuple(stride if stride is not None else kernel_size, 1, "stride"),
                         _ntuple(padding, 1, "padding"), ceil_mode, count_include_pad)

    def forward(self, x):
        self._check(x)
        return NF.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class AvgPool3d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, D, H, W) input (as torch.nn.AvgPool3d)."""
    _n = 3

    def forward(self, x):
        self._check(x)
        return NF.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class MaxUnpool2d(_PoolNd):
    """The inverse of MaxPool2d(return_indices=True) (as torch.nn.MaxUnpool2d):
    ``forward(input, indices, output_size=None)``."""
    _n = 2

    def forward(self, x, indices, output_size=None):
        self._check(x)
        return NF.max_unpool2d(x, indices, self.kernel_size, self.stride, self.padding,
                               output_size)


class AdaptiveMaxPool2d(Module):
    """Max over the windows that split the input into ``output_size`` cells (as
    torch.nn.AdaptiveMaxPool2d)."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        _check_input(self, x, (3, 4), "a 4-D (N, C, H, W) or 3-D (C, H, W) input")
        return NF.adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(Module):
    """Mean over the windows that split (N, C, L) input into ``output_size`` cells (as
    torch.nn.AdaptiveAvgPool1d)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        _check_input(self, x, (2, 3), "a 3-D (N, C, L) or 2-D (C, L) input")
        return NF.adaptive_avg_pool1d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(AdaptiveAvgPool1d):
    """Max over the windows that split (N, C, L) input into ``output_size`` cells (as
    torch.nn.AdaptiveMaxPool1d)."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x):
        _check_input(self, x, (2, 3), "a 3-D (N, C, L) or 2-D (C, L) input")
        return NF.adaptive_max_pool1d(x, self.output_size, self.return_indices)


# -- resampling --------------------------------------------------------------------------------
class Unfold(Module):
    """Sliding blocks as columns (as torch.nn.Unfold)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, x):
        return NF.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    """Columns summed back into an image (as torch.nn.Fold)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size, self.dilation = output_size, kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, x):
        return NF.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding,
                       self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")


class PixelShuffle(Module):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r) (as torch.nn.PixelShuffle)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return NF.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W) (as torch.nn.PixelUnshuffle)."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return NF.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Upsample(Module):
    """Resample to ``size`` or by ``scale_factor`` (as torch.nn.Upsample; see
    ``functional.interpolate`` for the modes)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: Optional[bool] = None,
                 recompute_scale_factor: Optional[bool] = None):
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) \
            else (tuple(float(f) for f in scale_factor) if scale_factor is not None else None)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        return NF.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                              recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest upsampling of 4-D input (as torch.nn.UpsamplingNearest2d)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling with align_corners=True (as torch.nn.UpsamplingBilinear2d)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


# -- padding -----------------------------------------------------------------------------------
class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = _ntuple(padding, 2 * self._n, "padding")
        self.value = value

    def forward(self, x):
        if self._mode == "constant":
            return NF.pad(x, self.padding, "constant", self.value)
        return NF.pad(x, self.padding, self._mode)

    def extra_repr(self) -> str:
        if self._mode == "constant" and not type(self).__name__.startswith("Zero"):
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _pad_layer(name: str, n: int, mode: str, doc: str):
    if mode == "constant" and not name.startswith("Zero"):
        def __init__(self, padding, value: float):
            _PadNd.__init__(self, padding, value)
    else:
        def __init__(self, padding):
            _PadNd.__init__(self, padding)
    return type(name, (_PadNd,), {"_n": n, "_mode": mode, "__init__": __init__,
                                  "__doc__": doc, "__module__": __name__})


ConstantPad1d = _pad_layer("ConstantPad1d", 1, "constant", "Pad the last dim with ``value``.")
ConstantPad2d = _pad_layer("ConstantPad2d", 2, "constant",
                           "Pad the last 2 dims with ``value``.")
ConstantPad3d = _pad_layer("ConstantPad3d", 3, "constant",
                           "Pad the last 3 dims with ``value``.")
ZeroPad1d = _pad_layer("ZeroPad1d", 1, "constant", "Pad the last dim with zeros.")
ZeroPad2d = _pad_layer("ZeroPad2d", 2, "constant", "Pad the last 2 dims with zeros.")
ZeroPad3d = _pad_layer("ZeroPad3d", 3, "constant", "Pad the last 3 dims with zeros.")
ReflectionPad1d = _pad_layer("ReflectionPad1d", 1, "reflect",
                             "Pad the last dim with its reflection.")
ReflectionPad2d = _pad_layer("ReflectionPad2d", 2, "reflect",
                             "Pad the last 2 dims with their reflection.")
ReflectionPad3d = _pad_layer("ReflectionPad3d", 3, "reflect",
                             "Pad the last 3 dims with their reflection.")
ReplicationPad1d = _pad_layer("ReplicationPad1d", 1, "replicate",
                              "Pad the last dim by repeating its edge.")
ReplicationPad2d = _pad_layer("ReplicationPad2d", 2, "replicate",
                              "Pad the last 2 dims by repeating their edges.")
ReplicationPad3d = _pad_layer("ReplicationPad3d", 3, "replicate",
                              "Pad the last 3 dims by repeating their edges.")
CircularPad1d = _pad_layer("CircularPad1d", 1, "circular", "Pad the last dim circularly.")
CircularPad2d = _pad_layer("CircularPad2d", 2, "circular", "Pad the last 2 dims circularly.")
CircularPad3d = _pad_layer("CircularPad3d", 3, "circular", "Pad the last 3 dims circularly.")

__all__ = ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
           "MaxPool1d", "MaxPool3d", "AvgPool1d", "AvgPool3d", "MaxUnpool2d",
           "AdaptiveMaxPool2d", "Unfold", "Fold", "PixelShuffle", "PixelUnshuffle", "Upsample",
           "UpsamplingNearest2d", "UpsamplingBilinear2d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ReflectionPad1d",
           "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d",
           "AdaptiveAvgPool1d", "AdaptiveMaxPool1d"]
