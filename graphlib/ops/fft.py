"""Discrete Fourier transforms (``torch.fft``: fft, ifft, rfft, irfft, fft2, ifft2, fftn,
ifftn, rfft2, irfft2, rfftn, irfftn, fftfreq, rfftfreq, fftshift, ifftshift).

Three ops, as PyTorch's ATen has them, each with its scale as an attribute (the ``norm``
argument: ``'backward'`` leaves forward transforms unscaled and scales inverse ones by
``1/n``, ``'ortho'`` scales both by ``1/sqrt(n)``, ``'forward'`` the other way round):

- ``fft_c2c``: complex to complex, forward or inverse, over ``dims``;
- ``fft_r2c``: real to complex, forward, the last dim halved (``n // 2 + 1``) when onesided;
- ``fft_c2r``: a onesided half-spectrum to a real signal of ``last_size`` along the last dim
  (inverse).

Their gradients are PyTorch's (``fft_r2c_backward``, ``fft_c2r_backward``): the vjp of a
scaled DFT is the scaled DFT the other way (the conjugate-transpose), the r2c one zero-pads
the half-spectrum's cotangent and keeps the real part, the c2r one is a onesided r2c with
the entries that stand for two of the full spectrum doubled. ``n``/``s`` zero-pad or trim the
input first (differentiable: ``pad`` and slicing).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from .. import dtypes
from ..attrs import Attr, Attrs
from ..batching import lrank, norm_dim
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, normalize_dim
from ._common import operand
from .complexes import real as real_part
from .creation import constant
from .elementwise import cast
from .layout import roll
from .shape import getitem, pad_op

NORMS = ("backward", "ortho", "forward")


def _check_dims(t, dims, name):
    for d in dims:
        if not isinstance(t.shape[d], int):
            raise ShapeError(f"{name}: needs static sizes along the transformed dims, found "
                             f"{list(t.shape)}")


def _c2c_infer(types, attrs):
    (t,) = types
    if t.dtype not in dtypes.COMPLEX_DTYPES:
        raise DTypeError(f"fft_c2c: expected a complex tensor, found {t.dtype}")
    return [t]


def _c2c_kernel(xp, x, dims, forward, scale):
    if forward:
        out = xp.fft.fftn(x, axes=dims)
    else:
        out = xp.fft.ifftn(x, axes=dims, norm="forward")    # the unscaled inverse
    out = out * scale if scale != 1.0 else out
    return out.astype(x.dtype, copy=False)


def _fft_rule(op, args, batched, attrs, size):
    """The DFTs over ``dims``: the same dims behind the batch dim."""
    (x,) = args
    rank = lrank(x, True)
    return op(x, **dict(attrs, dims=tuple(norm_dim(int(d), rank) + 1 for d in attrs["dims"])))


fft_c2c_op = register(OpDef(
    "fft_c2c", _c2c_infer, _c2c_kernel,
    lambda cts, ins, outs, a, needs: [fft_c2c_op(cts[0], dims=a["dims"],
                                                 forward=not a["forward"], scale=a["scale"])],
    saves_no_data=True, complex_ok=True,
    doc="a scaled complex-to-complex DFT over dims (forward, or the unscaled inverse)",
    attrs=Attrs(dims=Attr("dims"), forward=Attr(bool), scale=Attr(float)), batch=_fft_rule))


def _r2c_infer(types, attrs):
    (t,) = types
    if t.dtype not in ("float32", "float64"):
        raise DTypeError(f"fft_r2c: expected a float32 or float64 tensor, found {t.dtype}")
    dims = attrs["dims"]
    _check_dims(t, dims, "fft_r2c")
    shape = list(t.shape)
    if attrs["onesided"]:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    return [TensorType(tuple(shape), dtypes.complex_of(t.dtype))]


def _r2c_kernel(xp, x, dims, scale, onesided):
    out = xp.fft.rfftn(x, axes=dims) if onesided else xp.fft.fftn(x, axes=dims)
    out = out * scale if scale != 1.0 else out
    return out.astype(dtypes.complex_of(x.dtype.name), copy=False)


def _r2c_vjp(cts, ins, outs, a, needs):
    # PyTorch's fft_r2c_backward: the half-spectrum's cotangent zero-padded to the full
    # length, the scaled inverse DFT, its real part
    (g,), (x,) = cts, ins
    dims = a["dims"]
    if a["onesided"]:
        last = dims[-1]
        missing = x.shape[last] - g.shape[last]
        if missing:
            widths = [0] * (2 * (x.ndim - last))
            widths[2 * (x.ndim - 1 - last) + 1] = missing
            g = pad_op(g, pad=tuple(widths), value=0.0)
    full = fft_c2c_op(g, dims=dims, forward=False, scale=a["scale"])
    return [real_part(full)]


fft_r2c_op = register(OpDef(
    "fft_r2c", _r2c_infer, _r2c_kernel, _r2c_vjp, saves_no_data=True, complex_ok=True,
    doc="a scaled real-to-complex DFT over dims (onesided: the last dim halved)",
    attrs=Attrs(dims=Attr("dims"), scale=Attr(float), onesided=Attr(bool)), batch=_fft_rule))


def _c2r_infer(types, attrs):
    (t,) = types
    if t.dtype not in dtypes.COMPLEX_DTYPES:
        raise DTypeError(f"fft_c2r: expected a complex tensor, found {t.dtype}")
    dims = attrs["dims"]
    _check_dims(t, dims, "fft_c2r")
    shape = list(t.shape)
    shape[dims[-1]] = attrs["last_size"]
    return [TensorType(tuple(shape), dtypes.real_of(t.dtype))]


def _c2r_kernel(xp, x, dims, scale, last_size):
    sizes = [x.shape[d] for d in dims[:-1]] + [last_size]
    out = xp.fft.irfftn(x, s=sizes, axes=dims, norm="forward")   # the unscaled inverse
    out = out * scale if scale != 1.0 else out
    return out.astype(dtypes.real_of(x.dtype.name), copy=False)


def _c2r_vjp(cts, ins, outs, a, needs):
    # PyTorch's fft_c2r_backward: a onesided r2c of the cotangent with the same scale; the
    # entries 1 .. n - m of the last dim stand for two of the full spectrum: doubled
    (g,) = cts
    dims, n = a["dims"], a["last_size"]
    gi = fft_r2c_op(g, dims=dims, scale=a["scale"], onesided=True)
    m = gi.shape[dims[-1]]
    if n - m > 0:
        weight = np.ones(m, dtypes.real_of(gi.dtype))
        weight[1:1 + n - m] = 2.0
        weight = weight.reshape((m,) + (1,) * (gi.ndim - 1 - dims[-1]))
        gi = gi * constant(weight)
    return [gi]


fft_c2r_op = register(OpDef(
    "fft_c2r", _c2r_infer, _c2r_kernel, _c2r_vjp, saves_no_data=True, complex_ok=True,
    doc="a scaled inverse DFT of a onesided half-spectrum to a real signal over dims",
    attrs=Attrs(dims=Attr("dims"), scale=Attr(float), last_size=Attr(int, min=1)), batch=_fft_rule))


# -- argument handling --------------------------------------------------------------------------
def _scale(norm, n: int, forward: bool, name: str) -> float:
    norm = "backward" if norm is None else norm
    if norm not in NORMS:
        raise ValueError(located(f"{name}: Invalid normalization mode: {norm!r}; expected "
                                 f"one of 'backward', 'ortho', 'forward'"))
    if norm == "ortho":
        return 1.0 / math.sqrt(n) if n else 1.0
    if (norm == "backward") == forward:
        return 1.0
    return 1.0 / n if n else 1.0


def _int_sequence(value, what: str, name: str) -> tuple:
    """``value`` (an int or a sequence of ints) as a tuple, or a TypeError naming ``name``."""
    items = (value,) if isinstance(value, (int, np.integer)) else value
    if not isinstance(items, (tuple, list)) or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in items):
        raise TypeError(located(f"{name}: expected {what} to be an int or a sequence of ints, "
                                f"found {value!r}"))
    return tuple(int(v) for v in items)


def _dims_and_sizes(x, s, dim, name, default_all: bool, default_dims=None):
    """(dims, sizes): the transformed dims (normalised, in order) and the signal sizes
    (``s``, or the input's), with PyTorch's rules: ``s`` without ``dim`` takes the last
    ``len(s)`` dims."""
    if s is not None:
        s = _int_sequence(s, "n" if name in _ONE_D else "s", name)
    if dim is not None:
        dims = _int_sequence(dim, "dim", name)
    elif s is not None:
        dims = tuple(range(x.ndim - len(s), x.ndim))
    elif default_dims is not None:
        dims = default_dims
    else:
        dims = tuple(range(x.ndim)) if default_all else (-1,)
    dims = tuple(normalize_dim(d, x.ndim, name) for d in dims)
    if len(set(dims)) != len(dims):
        raise ShapeError(located(f"{name}: dims must be unique, found {dims}"))
    if s is None:
        sizes = [x.shape[d] for d in dims]
    else:
        sizes = [x.shape[d] if n == -1 else n for n, d in zip(s, dims)]
        if len(s) != len(dims):
            raise ShapeError(located(f"{name}: When given, dim and shape arguments must have "
                                     f"the same length, found s={tuple(s)} and dim={dims}"))
    for n in sizes:
        if not isinstance(n, int) or n < 1:
            raise ShapeError(located(f"{name}: Invalid number of data points ({n}) "
                                     f"specified"))
    return dims, sizes


def _resize(x, dims, sizes):
    """``x`` zero-padded or trimmed to ``sizes`` along ``dims``."""
    index = [slice(None)] * x.ndim
    trimmed = False
    for d, n in zip(dims, sizes):
        if x.shape[d] > n:
            index[d], trimmed = slice(0, n), True
    if trimmed:
        x = getitem(x, tuple(index))
    widths = [0] * (2 * x.ndim)
    for d, n in zip(dims, sizes):
        if x.shape[d] < n:
            widths[2 * (x.ndim - 1 - d) + 1] = n - x.shape[d]
    if any(widths):
        last = max(i for i, w in enumerate(widths) if w)
        x = pad_op(x, pad=tuple(widths[:last + 1]), value=0.0)
    return x


def _float_or_complex(x, name):
    x = operand(x, name)
    if x.dtype in dtypes.COMPLEX_DTYPES or x.dtype in ("float32", "float64"):
        return x
    if x.dtype in dtypes.FLOAT_DTYPES or dtypes.kind(x.dtype) in "bi":
        return cast(x, dtypes.DEFAULT_FLOAT)     # PyTorch promotes to the default float
    raise DTypeError(located(f"{name}: unsupported dtype {x.dtype}"))


def _c2c_or_r2c(x, s, dim, norm, forward: bool, name, default_all=False, default_dims=None):
    x = _float_or_complex(x, name)
    dims, sizes = _dims_and_sizes(x, s, dim, name, default_all, default_dims)
    if x.dtype not in dtypes.COMPLEX_DTYPES:      # a real signal: its complex spectrum
        x = cast(x, dtypes.complex_of(x.dtype))
    x = _resize(x, dims, sizes)
    return fft_c2c_op(x, dims=dims, forward=forward,
                      scale=_scale(norm, math.prod(sizes), forward, name))


def _r2c(x, s, dim, norm, name, default_all=False, default_dims=None):
    x = _float_or_complex(x, name)
    if x.dtype in dtypes.COMPLEX_DTYPES:
        raise DTypeError(located(f"{name} expects a real input tensor, but got {x.dtype}"))
    dims, sizes = _dims_and_sizes(x, s, dim, name, default_all, default_dims)
    x = _resize(x, dims, sizes)
    return fft_r2c_op(x, dims=dims, scale=_scale(norm, math.prod(sizes), True, name),
                      onesided=True)


def _c2r(x, s, dim, norm, name, default_all=False, default_dims=None):
    x = _float_or_complex(x, name)
    if x.dtype not in dtypes.COMPLEX_DTYPES:
        x = cast(x, dtypes.complex_of(x.dtype))
    dims, sizes = _dims_and_sizes(x, s, dim, name, default_all, default_dims)
    if s is None or s[-1] == -1:
        sizes[-1] = 2 * (x.shape[dims[-1]] - 1)
        if sizes[-1] < 1:
            raise ShapeError(located(f"{name}: Invalid number of data points ({sizes[-1]}) "
                                     f"specified"))
    half = sizes[:-1] + [sizes[-1] // 2 + 1]
    x = _resize(x, dims, half)
    return fft_c2r_op(x, dims=dims, scale=_scale(norm, math.prod(sizes), False, name),
                      last_size=sizes[-1])


_ONE_D = ("fft", "ifft", "rfft", "irfft")


def _one(n):
    return None if n is None else (n,)


# -- public functions (torch.fft's names) -------------------------------------------------------
def fft(input, n: Optional[int] = None, dim: int = -1, norm: Optional[str] = None):
    """The 1-D discrete Fourier transform along ``dim`` (``n``: zero-pad or trim the input
    to that length first), as ``torch.fft.fft``; a real input gives the full complex
    spectrum. ``norm``: ``'backward'`` (default, unscaled), ``'ortho'`` or ``'forward'``."""
    return _c2c_or_r2c(input, _one(n), dim, norm, True, "fft")


def ifft(input, n: Optional[int] = None, dim: int = -1, norm: Optional[str] = None):
    """The 1-D inverse DFT along ``dim`` (scaled by ``1/n`` with the default norm), as
    ``torch.fft.ifft``."""
    return _c2c_or_r2c(input, _one(n), dim, norm, False, "ifft")


def fft2(input, s: Optional[Sequence[int]] = None, dim=(-2, -1), norm: Optional[str] = None):
    """The 2-D DFT over ``dim`` (the last two by default), as ``torch.fft.fft2``."""
    return _c2c_or_r2c(input, s, dim, norm, True, "fft2")


def ifft2(input, s: Optional[Sequence[int]] = None, dim=(-2, -1), norm: Optional[str] = None):
    """The 2-D inverse DFT over ``dim``, as ``torch.fft.ifft2``."""
    return _c2c_or_r2c(input, s, dim, norm, False, "ifft2")


def fftn(input, s: Optional[Sequence[int]] = None, dim=None, norm: Optional[str] = None):
    """The N-D DFT over ``dim`` (every dim by default; the last ``len(s)`` with ``s``), as
    ``torch.fft.fftn``."""
    return _c2c_or_r2c(input, s, dim, norm, True, "fftn", default_all=True)


def ifftn(input, s: Optional[Sequence[int]] = None, dim=None, norm: Optional[str] = None):
    """The N-D inverse DFT over ``dim``, as ``torch.fft.ifftn``."""
    return _c2c_or_r2c(input, s, dim, norm, False, "ifftn", default_all=True)


def rfft(input, n: Optional[int] = None, dim: int = -1, norm: Optional[str] = None):
    """The DFT of a real signal along ``dim``, the ``n // 2 + 1`` non-negative frequencies,
    as ``torch.fft.rfft`` (complex input is refused)."""
    return _r2c(input, _one(n), dim, norm, "rfft")


def irfft(input, n: Optional[int] = None, dim: int = -1, norm: Optional[str] = None):
    """The inverse of ``rfft``: a real signal of length ``n`` (default ``2 (m - 1)`` for
    ``m`` input frequencies) along ``dim``, as ``torch.fft.irfft``; the imaginary parts of
    the zero (and Nyquist) frequencies are ignored."""
    return _c2r(input, _one(n), dim, norm, "irfft")


def rfft2(input, s: Optional[Sequence[int]] = None, dim=(-2, -1), norm: Optional[str] = None):
    """``rfftn`` over two dims (the last two by default), as ``torch.fft.rfft2``."""
    return _r2c(input, s, dim, norm, "rfft2")


def irfft2(input, s: Optional[Sequence[int]] = None, dim=(-2, -1), norm: Optional[str] = None):
    """``irfftn`` over two dims, as ``torch.fft.irfft2``."""
    return _c2r(input, s, dim, norm, "irfft2")


def rfftn(input, s: Optional[Sequence[int]] = None, dim=None, norm: Optional[str] = None):
    """The N-D DFT of a real signal, the last transformed dim halved, as
    ``torch.fft.rfftn``."""
    return _r2c(input, s, dim, norm, "rfftn", default_all=True)


def irfftn(input, s: Optional[Sequence[int]] = None, dim=None, norm: Optional[str] = None):
    """The inverse of ``rfftn``, as ``torch.fft.irfftn``."""
    return _c2r(input, s, dim, norm, "irfftn", default_all=True)


def _freq_args(n, d, name: str):
    """``n`` (an int >= 0) and ``d`` (a real number), or a clear error naming ``name``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise TypeError(located(f"{name}: expected n to be a non-negative int, found {n!r}"))
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)):
        raise TypeError(located(f"{name}: expected d to be a real number, found {d!r}"))
    return int(n), float(d)


def fftfreq(n: int, d: float = 1.0, *, dtype=None):
    """The sample frequencies of an ``n``-point DFT with sample spacing ``d``:
    ``[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d n)``, as ``torch.fft.fftfreq``
    (float32 by default)."""
    n, d = _freq_args(n, d, "fftfreq")
    dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.DEFAULT_FLOAT
    return constant(np.fft.fftfreq(n, d).astype(dtype))


def rfftfreq(n: int, d: float = 1.0, *, dtype=None):
    """The non-negative sample frequencies of an ``n``-point real DFT, ``[0, ..., n // 2] /
    (d n)``, as ``torch.fft.rfftfreq`` (float32 by default)."""
    n, d = _freq_args(n, d, "rfftfreq")
    dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.DEFAULT_FLOAT
    return constant(np.fft.rfftfreq(n, d).astype(dtype))


def fftshift(input, dim=None):
    """The zero frequency moved to the centre (a roll by ``n // 2`` along each of ``dim``,
    every dim by default), as ``torch.fft.fftshift``."""
    x = operand(input, "fftshift")
    dims = tuple(range(x.ndim)) if dim is None else tuple(
        normalize_dim(d, x.ndim, "fftshift") for d in _int_sequence(dim, "dim", "fftshift"))
    return roll(x, tuple(x.shape[d] // 2 for d in dims), dims)


def ifftshift(input, dim=None):
    """The inverse of ``fftshift``, as ``torch.fft.ifftshift``."""
    x = operand(input, "ifftshift")
    dims = tuple(range(x.ndim)) if dim is None else tuple(
        normalize_dim(d, x.ndim, "ifftshift") for d in _int_sequence(dim, "dim", "ifftshift"))
    return roll(x, tuple(-(x.shape[d] // 2) for d in dims), dims)
