"""The scatter family, with PyTorch's semantics: ``scatter`` (``torch.scatter``, with
``reduce=``) and ``scatter_reduce`` (``torch.scatter_reduce``: sum, prod, mean, amax, amin;
``include_self``), their ops and gradients.
"""
from __future__ import annotations


import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, format_shape, normalize_dim
from ._common import operand
from .creation import full, ones_like, zeros
from .elementwise import cast, eq, logical_not, ne
from .elementwise import where
from .index_ops import _checked, _dtype_of, _scalar_as
from .shape import (gather,
                    getitem_op, pad, scatter_add, zeros_like_for_grad)

# -- scatter and scatter_reduce ----------------------------------------------------------------


def _scatter_shapes(op, x, idx, src, dim):
    if idx.dtype != "int64":
        raise DTypeError(f"{op}: expected an int64 index tensor, found {idx.dtype}")
    if idx.ndim != x.ndim or (src.ndim != 0 and src.ndim != x.ndim):
        raise ShapeError(f"{op}: index and src need as many dims as self ({x.ndim}), found "
                         f"index {format_shape(idx.shape)} and src {format_shape(src.shape)}")
    for i, n in enumerate(idx.shape):
        if not isinstance(n, int):
            continue
        if src.ndim and isinstance(src.shape[i], int) and n > src.shape[i]:
            raise ShapeError(f"{op}: index {format_shape(idx.shape)} is larger than src "
                             f"{format_shape(src.shape)} in dim {i}")
        if i != dim and isinstance(x.shape[i], int) and n > x.shape[i]:
            raise ShapeError(f"{op}: index {format_shape(idx.shape)} is larger than self "
                             f"{format_shape(x.shape)} in dim {i}")


def _grids(xp, x, index, dim, op):
    """Open grids over ``index``'s shape with ``index`` itself along ``dim``."""
    grids = list(xpu.open_grids(xp, index.shape))
    grids[dim] = _checked(xp, index, x.shape[dim], dim, op)
    return tuple(grids)


def _src_part(xp, src, index, dtype):
    src = src.astype(dtype, copy=False)
    if src.ndim == 0:
        return xp.broadcast_to(src, index.shape)
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter_infer(types, attrs):
    x, idx, src = types
    _scatter_shapes("scatter", x, idx, src, attrs["dim"])
    return [TensorType(x.shape, x.dtype)]


def _scatter_kernel(xp, x, index, src, dim, reduce=None):
    out = x.copy()
    key = _grids(xp, x, index, dim, "scatter")
    part = _src_part(xp, src, index, x.dtype)
    if reduce is None:
        out[key] = part
    elif reduce == "add":
        xpu.add_at(xp, out, key, part)
    else:
        xpu.ufunc_at(xp, "multiply", out, key, part)
    return out


def _src_grad(g, index, src, dim):
    """gather(g, dim, index), zero-padded to src's shape (index may be smaller)."""
    part = gather(g, dim, index)
    if src.ndim == 0 or tuple(part.shape) == tuple(src.shape):
        return part
    widths = []
    for n, m in reversed(list(zip(index.shape, src.shape))):
        widths += [0, m - n]
    return pad(part, widths)


def _scatter_vjp(cts, ins, outs, a, needs):
    g = cts[0]
    x, index, src = ins
    dim, reduce = a["dim"], a.get("reduce")
    if reduce == "multiply":
        raise NotImplementedError("scatter: the gradient of reduce='multiply' is not "
                                  "implemented (PyTorch has none either); use "
                                  "scatter_reduce(..., 'prod')")
    gx = gs = None
    if needs[0]:
        gx = g if reduce == "add" else scatter_op(g, index, _zero_scalar(g), dim=dim)
    if needs[2]:
        gs = _src_grad(g, index, src, dim)
        if src.ndim == 0:
            gs = gs.sum()
    return [gx, None, gs]


def _zero_scalar(g):
    return zeros(dtype=g.dtype)


scatter_op = register(OpDef(
    "scatter", _scatter_infer, _scatter_kernel, _scatter_vjp, nondiff_inputs=(1,),
    attrs=Attrs(dim=Attr(int), reduce=Attr(str, default=None, choices=("add", "multiply"))),
    doc="self with self[index[i][j]][j] = src[i][j] for dim=0 (torch.scatter)"))


def _scatter_reduce_infer(types, attrs):
    x, idx, src = types
    _scatter_shapes("scatter_reduce", x, idx, src, attrs["dim"])
    if src.dtype != x.dtype:
        raise DTypeError(f"scatter_reduce: expected self and src of one dtype, found "
                         f"{x.dtype} and {src.dtype}")
    return [TensorType(x.shape, x.dtype)]


def _scatter_reduce_kernel(xp, x, index, src, dim, reduce, include_self=True):
    key = _grids(xp, x, index, dim, "scatter_reduce")
    part = _src_part(xp, src, index, x.dtype)
    out = x.copy()
    if not include_self:
        hit = xp.zeros(x.shape, dtype=bool)
        hit[key] = True
        if reduce in ("sum", "mean"):
            out[hit] = 0
        elif reduce == "prod":
            out[hit] = 1
        elif part.size:     # the smallest (largest) src element cannot win a max (min)
            out[hit] = part.min() if reduce == "amax" else part.max()
    ufunc = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
             "amin": "minimum"}[reduce]
    xpu.ufunc_at(xp, ufunc, out, key, part)
    if reduce == "mean":
        count = xp.zeros(x.shape, dtype=xp.int64) + (1 if include_self else 0)
        xpu.add_at(xp, count, key, xp.ones(part.shape, dtype=xp.int64))
        count = xp.maximum(count, 1)
        if dtypes.is_float(out.dtype.name):
            out = out / count.astype(out.dtype)
        else:
            out = xp.floor_divide(out, count).astype(out.dtype)
    return out.astype(x.dtype, copy=False)


def _scatter_reduce_vjp(cts, ins, outs, a, needs):
    g, (x, index, src), out = cts[0], ins, outs[0]
    dim, reduce, incl = a["dim"], a["reduce"], a.get("include_self", True)
    ones = _ones_like(index, g)

    def hit():      # where some src element lands
        return ne(scatter_add(zeros_like_for_grad(x, g), dim, index, ones), 0)
    gx = gs = None
    if reduce == "sum":
        gx = g if incl else where(hit(), 0.0, g)
        gs = _src_grad(g, index, src, dim)
    elif reduce == "mean":
        count = scatter_add(zeros_like_for_grad(x, g) + (1.0 if incl else 0.0), dim, index,
                            ones)
        count = where(eq(count, 0), 1.0, count)
        gx = g / count if incl else where(hit(), 0.0, g)
        gs = _src_grad(g / count, index, src, dim)
    elif reduce in ("amax", "amin"):
        picked_x = cast(eq(x, out), g.dtype)
        if not incl:
            picked_x = where(hit(), 0.0, picked_x)
        picked_s = cast(eq(src_part(src, index), gather(out, dim, index)), g.dtype)
        ties = scatter_add(picked_x, dim, index, picked_s)
        share = g / ties
        gx = where(logical_not(eq(picked_x, 0)), share, 0.0)
        gs = _pad_to(gather(share, dim, index) * picked_s, index, src)
    else:   # prod, without dividing by zero: products that leave one factor out
        zero_s = cast(eq(src_part(src, index), 0), g.dtype)
        zeros_x = cast(eq(x, 0), g.dtype) if incl else zeros_like_for_grad(x, g)
        nz = scatter_add(zeros_x, dim, index, zero_s)      # zero factors per place
        base = where(eq(x, 0), 1.0, x) if incl else ones_like(x)
        p_nz = scatter_reduce_op(base, index, where(eq(src, 0), 1.0, src), dim=dim,
                                 reduce="prod", include_self=True)   # product of nonzeros
        p_src = scatter_reduce_op(ones_like(x), index, src, dim=dim, reduce="prod",
                                  include_self=True)
        gx = g * p_src if incl else where(hit(), 0.0, g)
        # leave out src[j]: out/src[j] when src[j] != 0; else the nonzero product when
        # src[j] is the only zero factor of its place; else 0
        out_at = gather(out, dim, index)
        s = src_part(src, index)
        only_zero = eq(gather(nz, dim, index), 1.0)
        excl = where(eq(s, 0), where(only_zero, gather(p_nz, dim, index), 0.0),
                     out_at / where(eq(s, 0), 1.0, s))
        gs = _pad_to(gather(g, dim, index) * excl, index, src)
    return [gx if needs[0] else None, None, gs if needs[2] else None]


def src_part(src, index):
    """``src`` cut to ``index``'s shape (scatter reads only that corner of it)."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    return getitem_op(src, index=tuple(("s", 0, n, None) for n in index.shape))


def _pad_to(part, index, src):
    if tuple(part.shape) == tuple(src.shape):
        return part
    widths = []
    for n, m in reversed(list(zip(index.shape, src.shape))):
        widths += [0, m - n]
    return pad(part, widths)


def _ones_like(index, g):
    return ones_like(index, dtype=g.dtype)


scatter_reduce_op = register(OpDef(
    "scatter_reduce", _scatter_reduce_infer, _scatter_reduce_kernel, _scatter_reduce_vjp,
    nondiff_inputs=(1,), vjp_reads_output=True,
    attrs=Attrs(dim=Attr(int), reduce=Attr(str, choices=("sum", "prod", "mean", "amax", "amin")),
                include_self=Attr(bool, default=True)),
    doc="torch.scatter_reduce: src reduced into self at index along dim"))


def _src_or_value(x, src, value, name):
    if src is not None and value is not None:
        raise TypeError(located(f"{name}: give src or value, not both"))
    if src is None:
        src = value
    if src is None:
        raise TypeError(located(f"{name}: missing src (a tensor) or value (a number)"))
    if isinstance(src, (bool, int, float, np.generic)):
        return full((), _scalar_as(x, src), dtype=_dtype_of(x))
    src = operand(src, name, "src")
    if _dtype_of(src) != _dtype_of(x):
        raise DTypeError(located(f"{name}: expected self and src of one dtype, found "
                                 f"{_dtype_of(x)} and {_dtype_of(src)}"))
    return src


def scatter(input, dim: int, index, src=None, value=None, *, reduce=None):
    """``input`` with ``out[index[i][j]][j] = src[i][j]`` for dim=0 (torch.scatter); ``src``
    may be a number (the ``value`` form); ``reduce='add'|'multiply'`` combines instead.
    Where index repeats a place, the last write wins."""
    x = operand(input, "scatter")
    src = _src_or_value(x, src, value, "scatter")
    return scatter_op(x, index, src, dim=normalize_dim(dim, x.ndim, "scatter"),
                      reduce=reduce)


def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """``src`` reduced into ``input`` at ``index`` along ``dim`` with ``reduce`` = 'sum',
    'prod', 'mean', 'amax' or 'amin'; ``include_self=False`` leaves input's value out of the
    places that receive something (torch.scatter_reduce)."""
    x = operand(input, "scatter_reduce")
    src = operand(src, "scatter_reduce", "src")
    return scatter_reduce_op(x, index, src, dim=normalize_dim(dim, x.ndim, "scatter_reduce"),
                             reduce=reduce, include_self=include_self)
