"""Window geometry shared by convolution (``conv``) and pooling (``pool``): output sizes, image
and dtype checks, strided window views, and the normalisation of ``stride``/``padding``-style
arguments and of unbatched inputs. It registers no op.
"""
from __future__ import annotations

from typing import Tuple, Union

from .. import dtypes
from ..errors import DTypeError, ShapeError, located
from ..types import TensorType, dim_add, dim_ceil_div, dim_floor_div, format_shape
from ._common import operand
from .shape import reshape

IntOrPair = Union[int, Tuple[int, int]]

# -- geometry ----------------------------------------------------------------------------------


def _out_dim(size, kernel: int, stride: int, dilation: int, pad_lo: int, pad_hi: int,
             ceil_mode: bool = False):
    """Output length along one spatial dim (PyTorch's formula); 0 or less means empty.

    The windows start at t * stride for the t with t * stride < size + c, where c is
    pad_lo + pad_hi - span + 1 (floor mode) or min(pad_lo + pad_hi - span + stride, pad_lo)
    (ceil mode: partial windows count, but the last must start inside the input or the left
    padding). A symbolic ``size`` gives that count as a symbolic dim (``H-2``,
    ``ceiling(H/2)``...), simplified by sympy."""
    span = dilation * (kernel - 1) + 1
    c = pad_lo + pad_hi - span + 1
    if ceil_mode:
        c = min(pad_lo + pad_hi - span + stride, pad_lo)
    if not isinstance(size, str):
        if size + pad_lo + pad_hi < span:
            return 0
        return -(-(size + c) // stride)
    if ceil_mode:
        return dim_ceil_div(dim_add(size, c), stride)
    # PyTorch's floor((size + pads - span) / stride) + 1, which sympy keeps readable
    return dim_add(dim_floor_div(dim_add(size, c - 1), stride), 1)


def _spatial_out(name: str, shape, kernel, stride, dilation, padding, ceil_mode=False):
    """(H_out, W_out) for an input ``shape``; ``padding`` is (top, bottom, left, right)."""
    pt, pb, pl, pr = padding
    ho = _out_dim(shape[2], kernel[0], stride[0], dilation[0], pt, pb, ceil_mode)
    wo = _out_dim(shape[3], kernel[1], stride[1], dilation[1], pl, pr, ceil_mode)
    if (isinstance(ho, int) and ho <= 0) or (isinstance(wo, int) and wo <= 0):
        spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        padded = tuple(s + a + b if isinstance(s, int) else s
                       for s, a, b in ((shape[2], pt, pb), (shape[3], pl, pr)))
        raise ShapeError(
            f"{name}: the output would be empty: input {format_shape(shape)} padded to "
            f"{padded[0]}x{padded[1]} is smaller than the kernel, which spans "
            f"{spans[0]}x{spans[1]} (kernel_size {tuple(kernel)}, dilation {tuple(dilation)}); "
            f"expected a padded input at least as large as the kernel span")
    return ho, wo


def _check_image(name: str, t, what: str = "input"):
    if t.ndim != 4:
        raise ShapeError(f"{name}: expected a 4-D {what} [N,C,H,W] (or 3-D [C,H,W]), found "
                         f"{format_shape(t.shape)}")


def _check_float(name: str, *types):
    first = types[0]
    for t in types:
        if not dtypes.is_float(t.dtype):
            raise DTypeError(f"{name}: expected floating-point tensors, found {t.dtype}; "
                             f"cast it first (x.cast('float32'))")
        if t.dtype != first.dtype:
            found = ", ".join(str(t.dtype) for t in types)
            raise DTypeError(f"{name}: expected operands of one dtype, found {found}; "
                             f"cast them to the same dtype")


def _window(a, i: int, j: int, stride, dilation, out_hw):
    """The strided slice of padded ``a`` that kernel offset (i, j) sees at every output pixel."""
    (sh, sw), (dh, dw), (ho, wo) = stride, dilation, out_hw
    return a[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]


def _embed(xp, x, rows: int, cols: int, top: int, left: int, fill=0):
    """``x`` placed at (top, left) in a new (N, C, rows, cols) array filled with ``fill``."""
    n, c, h, w = x.shape
    if fill == 0:
        out = xp.zeros((n, c, rows, cols), dtype=x.dtype)
    else:
        out = xp.full((n, c, rows, cols), fill, dtype=x.dtype)
    out[:, :, top:top + h, left:left + w] = x
    return out


def _conv_attrs(attrs) -> dict:
    return {k: v for k, v in attrs.items() if k != "shape"}


def _grad_infer(name: str):
    def infer(types, attrs):
        _check_float(name, *types)
        for t in types:
            _check_image(name, t, "operand")
        return [TensorType(attrs["shape"], types[0].dtype)]
    return infer

# -- public functions --------------------------------------------------------------------------


def _pair(value, name: str, arg: str, minimum: int) -> Tuple[int, int]:
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if hasattr(value, "__index__") and not isinstance(value, bool):
        pair = (int(value.__index__()),) * 2
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
            hasattr(v, "__index__") and not isinstance(v, bool) for v in value):
        pair = (int(value[0].__index__()), int(value[1].__index__()))
    elif isinstance(value, (tuple, list)) and all(
            hasattr(v, "__index__") and not isinstance(v, bool) for v in value):
        # ints, but not one or two of them: a RuntimeError in PyTorch
        raise ShapeError(located(f"{name}: expected {arg} as an int or a pair of ints, found "
                                 f"{len(value)} values {list(value)}"))
    else:
        raise TypeError(located(f"{name}: expected {arg} as an int or a pair of ints, found "
                                f"{value!r}"))
    if min(pair) < minimum:
        raise ShapeError(located(f"{name}: expected {arg} >= {minimum}, found {value!r}"))
    return pair


def _batched(x, fn, name: str):
    """Run ``fn`` on a 4-D ``x``; a 3-D (unbatched) ``x`` gets a batch dim and loses it after."""
    x = operand(x, name)
    if x.ndim == 3:
        out = fn(reshape(x, 1, *x.shape))
        return reshape(out, *out.shape[1:])
    return fn(x)

# -- 1-D and 3-D convolution, transposed convolution (compositions of the 2-D ops) -------------


def _ntuple(value, n: int, name: str, arg: str, minimum: int) -> tuple:
    """``value`` (an int or n ints) as an n-tuple of ints >= ``minimum``."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if hasattr(value, "__index__") and not isinstance(value, bool):
        out = (int(value.__index__()),) * n
    elif isinstance(value, (tuple, list)) and len(value) == n and all(
            hasattr(v, "__index__") and not isinstance(v, bool) for v in value):
        out = tuple(int(v.__index__()) for v in value)
    else:
        raise TypeError(located(f"{name}: expected {arg} as an int or {n} ints, found "
                                f"{value!r}"))
    if min(out) < minimum:
        raise ShapeError(located(f"{name}: expected {arg} >= {minimum}, found {value!r}"))
    return out


def _batched_nd(x, spatial: int, fn, name: str, like=()):
    """Run ``fn`` on an (N, C, *spatial) ``x``; an unbatched (C, *spatial) ``x`` gets a batch
    dim and loses it after. ``like``: the weight (and bias) ``x`` must share a float dtype
    with, checked here so the error names ``name``, not the op ``fn`` is built from."""
    x = operand(x, name)
    if like:
        try:
            _check_float(name, x, *[operand(t, name) for t in like if t is not None])
        except DTypeError as e:
            raise DTypeError(located(str(e))) from None
    if x.ndim == spatial + 1:
        out = fn(reshape(x, 1, *x.shape))
        return reshape(out, *out.shape[1:])
    if x.ndim != spatial + 2:
        letters = "DHW"[3 - spatial:]
        raise ShapeError(located(
            f"{name}: expected a {spatial + 2}-D input [N,C,{','.join(letters)}] (or "
            f"{spatial + 1}-D [C,{','.join(letters)}]), found {format_shape(x.shape)}"))
    return fn(x)
