"""Advanced indexing as PyTorch has it, over the ops of ``index_ops``, ``scatter`` and
``masking``:

- ``x[index]`` with integer tensors, lists and bool masks in any position
  (``advanced_getitem``, installed as ``shape.getitem``'s advanced form), and
  ``x[index] = value`` out of place (``index_assign``, what ``Tensor.__setitem__`` writes back);
- ``index_put``, ``index_copy``, ``index_fill``, ``take_along_dim`` and ``take``.

The ops' own modules are imported for their names (which stay importable from here, as before
the split); ops/__init__ imports them first, which fixes the order they register in.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import DTypeError, ShapeError, composite, located
from ..ir import Value
from ..types import broadcast_shapes, format_shape, normalize_dim
from ._common import operand
from .creation import full, full_like
from .elementwise import cast
from .index_ops import (_INT_INDEX, _advanced_shape, _dtype_of, _is_tensor,  # noqa: F401
                        _scalar_as, _symbolic, _wrapped, index_op, index_put_op)
from .masking import (_count, _data_dependent, _fill_value, argwhere, masked_fill,  # noqa: F401
                      masked_scatter, masked_scatter_op, masked_select, masked_take_op, nonzero,
                      nonzero_op, nonzero_static, where)
from .scatter import (scatter, scatter_op, scatter_reduce, scatter_reduce_op,  # noqa: F401
                      src_part)
from .shape import (IndexingError, _normalize_index, _python_index, expand, gather,
                    getitem_grad_op, getitem_op, reshape, set_advanced_indexing)


def _as_index_array(it, name: str):
    """A list (or tuple) inside an index as an int64 or bool array, as PyTorch reads it."""
    try:
        arr = np.asarray(it)
    except ValueError as e:
        raise IndexingError(located(f"{name}: cannot read the list {it!r} as an index "
                                    f"({e})")) from None
    if arr.dtype == object or arr.dtype.kind not in "biu":
        if arr.size == 0:
            return arr.astype(np.int64)
        raise IndexingError(located(f"{name}: tensors used as indices must be integer or "
                                    f"bool, found a list of {arr.dtype} ({it!r})"))
    return arr.astype(bool if arr.dtype.kind == "b" else np.int64)


def _mask_mismatch(name, mask_shape, x_shape, at):
    return IndexingError(located(
        f"{name}: the shape of the mask {format_shape(mask_shape)} at index {at} does not "
        f"match the shape of the indexed tensor {format_shape(x_shape)} at index {at}"))


def _parts(x, index, name: str):
    """Classify the items of ``index``: ('basic', int|slice|None|...), ('tensor', integer
    tensor) or ('mask', bool tensor)."""
    if not isinstance(index, tuple):
        index = (index,)
    parts = []
    for it in index:
        if isinstance(it, (list, tuple)):
            it = _as_index_array(it, name)
        if not _is_tensor(it):
            if isinstance(it, np.generic) and it.dtype.kind == "b":
                raise IndexingError(located(f"{name}: a bool scalar index is not supported"))
            parts.append(("basic", it))
            continue
        dt = _dtype_of(it)
        if dt == "uint8":
            warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch): it is read "
                          "as a mask; use a bool tensor instead", UserWarning, stacklevel=4)
            it, dt = cast(it, "bool"), "bool"
        if dt == "bool":
            parts.append(("mask", it))
        elif dt in _INT_INDEX:
            if it.ndim == 0 and not isinstance(it, Value):
                parts.append(("basic", int(it)))   # a 0-d index selects, as an int (PyTorch)
            else:
                parts.append(("tensor", it))
        else:
            raise IndexingError(located(f"{name}: tensors used as indices must be integer "
                                        f"(int64, int32) or bool tensors, found {dt}"))
    return parts


def _split(x, parts, name: str):
    """(basic index, index tensors, their dims in the basic result): boolean masks become
    their nonzero coordinates (eager mode only)."""
    consumed = 0
    for kind, it in parts:
        if kind == "mask":
            consumed += it.ndim
        elif kind == "tensor" or (it is not None and it is not Ellipsis):
            consumed += 1
    if consumed > x.ndim:
        raise IndexingError(located(f"{name}: too many indices ({consumed}) for a tensor of "
                                    f"{x.ndim} dims"))
    basic, tensors, dims = [], [], []
    out_dim = in_dim = 0
    ellipsis = False
    for kind, it in parts:
        if kind == "basic":
            if it is Ellipsis:
                if ellipsis:
                    raise IndexingError(located(f"{name}: an index can only have one "
                                                "Ellipsis"))
                ellipsis = True
                n = x.ndim - consumed
                basic += [slice(None)] * n
                out_dim += n
                in_dim += n
            elif it is None:
                basic.append(None)
                out_dim += 1
            elif isinstance(it, slice):
                basic.append(it)
                out_dim += 1
                in_dim += 1
            else:
                basic.append(it)
                in_dim += 1
        elif kind == "tensor":
            basic.append(slice(None))
            tensors.append(it)
            dims.append(out_dim)
            out_dim += 1
            in_dim += 1
        else:
            k = it.ndim
            covered = tuple(x.shape[in_dim:in_dim + k])
            if k == 0:
                raise IndexingError(located(f"{name}: a 0-d bool index is not supported"))
            if any(isinstance(a, int) and isinstance(b, int) and a != b
                   for a, b in zip(it.shape, covered)):
                raise _mask_mismatch(name, it.shape, x.shape, in_dim)
            if _symbolic(x, it):
                raise _data_dependent(name, "masked_select(x, mask, size=N) or "
                                      "nonzero(mask, size=N)")
            for col in nonzero(it, as_tuple=True):
                basic.append(slice(None))
                tensors.append(col)
                dims.append(out_dim)
                out_dim += 1
                in_dim += 1
    return tuple(basic), tensors, tuple(dims)


def _basic_items(x, basic, name):
    try:
        items, part_shape = _normalize_index(basic, tuple(x.shape), name)
    except (ShapeError, TypeError) as e:
        raise type(e)(located(str(e))) from None
    trivial = all(it == ("s", None, None, None) for it in items)
    return items, part_shape, trivial


def _leading_mask(x, parts):
    """The mask when ``index`` is one bool mask over x's leading dims (with an optional
    trailing Ellipsis), else None."""
    if parts and parts[-1] == ("basic", Ellipsis):
        parts = parts[:-1]
    if len(parts) != 1 or parts[0][0] != "mask":
        return None
    return parts[0][1]


def _mask_to(x, mask, name):
    """``mask`` over x's leading dims broadcast to x's shape."""
    k = mask.ndim
    if k > x.ndim or any(isinstance(a, int) and isinstance(b, int) and a != b
                         for a, b in zip(mask.shape, x.shape[:k])):
        raise _mask_mismatch(name, mask.shape, x.shape, 0)
    if k == x.ndim:
        return mask
    m = reshape(mask, *(tuple(mask.shape) + (1,) * (x.ndim - k)))
    return expand(m, *x.shape)


def advanced_getitem(x, index):
    """``x[index]`` with integer tensors, lists or bool masks among the items."""
    name = "getitem"
    parts = _parts(x, index, name)
    mask = _leading_mask(x, parts)
    if mask is not None:
        m = _mask_to(x, mask, name)
        if _symbolic(x, mask):
            raise _data_dependent(name, "masked_select(x, mask, size=N)")
        rest = tuple(x.shape[mask.ndim:])
        return masked_take_op(x, m, shape=(_count(mask),) + rest)
    basic, tensors, dims = _split(x, parts, name)
    items, _, trivial = _basic_items(x, basic, name)
    y = x if trivial else getitem_op(x, index=items)
    if not tensors:
        return y
    return index_op(y, *tensors, dims=dims)


def write_in_place(x, data, xp, index, value) -> None:
    """``x[index] = value`` written straight into ``data`` (x's array, module ``xp``): the
    eager path when neither autograd nor ``record()`` watches. Same places and errors as
    ``index_assign``: basic items first (a view of ``data``), then the index tensors."""
    name = "__setitem__"
    basic, tensors, dims = _split(x, _parts(x, index, name), name)
    items, _, _ = _basic_items(x, basic, name)
    view = data[_python_index(items)]
    if not tensors:
        view[...] = value
        return
    key = [slice(None)] * (dims[-1] + 1)
    for t, d in zip(tensors, dims):
        arr = t.array if hasattr(t, "array") else xp.asarray(t)
        key[d] = _wrapped(xp, arr, view.shape[d], d, name)
    try:
        view[tuple(key)] = value
    except ValueError as e:
        raise ShapeError(located(f"{name}: cannot assign a value of shape "
                                 f"{format_shape(getattr(value, 'shape', ()))} to the "
                                 f"indexed shape {format_shape(view[tuple(key)].shape)} "
                                 f"({e})")) from None


def _value_for(x, value, name):
    """``value`` as an operand of x's dtype (PyTorch casts what it assigns)."""
    if isinstance(value, (bool, int, float, np.generic)):
        return _scalar_as(x, value)
    value = operand(value, name, "the value")
    return value if _dtype_of(value) == _dtype_of(x) else cast(value, _dtype_of(x))


def index_assign(x, index, value):
    """``x`` with ``x[index] = value``, out of place (what ``Tensor.__setitem__`` writes back):
    basic indices, integer tensors and lists, and bool masks, as PyTorch."""
    name = "__setitem__"
    x = operand(x, name)
    parts = _parts(x, index, name)
    value = _value_for(x, value, name)
    mask = _leading_mask(x, parts)
    if mask is not None:
        m = _mask_to(x, mask, name)
        rest = tuple(x.shape[mask.ndim:])
        vshape = tuple(getattr(value, "shape", ()))
        while vshape and vshape[0] == 1 and len(vshape) > len(rest):
            vshape = vshape[1:]
        if len(vshape) <= len(rest):    # one value (or row) for every selected place
            if vshape != tuple(getattr(value, "shape", ())):
                value = reshape(value, *vshape)
            return where(m, value, x)
        if _symbolic(x, mask):
            raise _data_dependent(name, "x = dg.masked_scatter(x, mask, source)")
        src = expand(value, *((_count(mask),) + rest))
        return masked_scatter_op(x, m, src)
    basic, tensors, dims = _split(x, parts, name)
    items, part_shape, trivial = _basic_items(x, basic, name)
    if not tensors:
        if trivial:     # x[...] = value: every element
            if not _is_tensor(value):
                return full_like(x, value)
            return expand(value, *x.shape) if tuple(value.shape) != tuple(x.shape) \
                else value + 0      # a node of its own, so x takes its history, not value's
        if not _is_tensor(value):
            part = full(part_shape, value, dtype=_dtype_of(x))
        else:
            part = value if tuple(value.shape) == part_shape else expand(value, *part_shape)
        keep = getitem_grad_op(full(part_shape, True, dtype="bool"), x, index=items)
        return where(keep, getitem_grad_op(part, x, index=items), x)
    if not _is_tensor(value):
        value = full((), value, dtype=_dtype_of(x))
    if trivial:
        return index_put_op(x, value, *tensors, dims=dims, accumulate=False)
    part = index_put_op(getitem_op(x, index=items), value, *tensors, dims=dims,
                        accumulate=False)
    keep = getitem_grad_op(full(part_shape, True, dtype="bool"), x, index=items)
    return where(keep, getitem_grad_op(part, x, index=items), x)


# -- public functions --------------------------------------------------------------------------


def index_put(input, indices, values, accumulate: bool = False):
    """``input`` with ``input[indices] = values`` (``+=`` when ``accumulate``), out of place
    (torch.index_put). ``indices`` is a tuple of index tensors (bool masks, and None for a
    whole dim, allowed); ``values`` must have input's dtype, as in PyTorch."""
    name = "index_put"
    x = operand(input, name)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(located(f"{name}: expected indices to be a tuple of tensors, found "
                                f"{type(indices).__name__}"))
    values = operand(values, name, "values")
    if _dtype_of(values) != _dtype_of(x):
        raise DTypeError(located(f"{name}: index put requires the source and destination "
                                 f"dtypes match, found {_dtype_of(x)} for the destination "
                                 f"and {_dtype_of(values)} for the source"))
    index = tuple(slice(None) if i is None else i for i in indices)
    for i in index:
        if not (isinstance(i, slice) or _is_tensor(i)):
            raise TypeError(located(f"{name}: expected index tensors (or None), found "
                                    f"{type(i).__name__}"))
    if not accumulate:
        return index_assign(x, index, values)
    parts = _parts(x, index, name)
    basic, tensors, dims = _split(x, parts, name)
    if not tensors:
        return x + values
    return index_put_op(x, values, *tensors, dims=dims, accumulate=True)


def _index_1d(index, name):
    index = operand(index, name, "index")
    if _dtype_of(index) not in _INT_INDEX:
        raise IndexingError(located(f"{name}: expected an integer index tensor, found "
                                    f"{_dtype_of(index)}"))
    if index.ndim > 1:
        raise IndexingError(located(f"{name}: index should have at most one dimension, "
                                    f"found shape {format_shape(index.shape)}"))
    if index.ndim == 0:
        index = reshape(index, 1)
    return index


def index_copy(input, dim: int, index, source):
    """``input`` with ``out[..., index[i], ...] = source[..., i, ...]`` along ``dim``
    (torch.index_copy)."""
    x = operand(input, "index_copy")
    d = normalize_dim(dim, max(x.ndim, 1), "index_copy")
    index = _index_1d(index, "index_copy")
    source = operand(source, "index_copy", "source")
    if _dtype_of(source) != _dtype_of(x):
        raise DTypeError(located(f"index_copy: expected source of dtype {_dtype_of(x)} "
                                 f"(self's), found {_dtype_of(source)}"))
    want = tuple(x.shape[:d]) + tuple(index.shape) + tuple(x.shape[d + 1:])
    if tuple(source.shape) != want:
        raise ShapeError(located(f"index_copy: expected source of shape "
                                 f"{format_shape(want)}, found {format_shape(source.shape)}"))
    return index_put_op(x, source, index, dims=(d,), accumulate=False)


@composite("index_fill")
def index_fill(input, dim: int, index, value):
    """``input`` with ``value`` at the entries ``index`` along ``dim`` (torch.index_fill);
    ``value`` is a number or a 0-d tensor."""
    x = operand(input, "index_fill")
    d = normalize_dim(dim, max(x.ndim, 1), "index_fill")
    index = _index_1d(index, "index_fill")
    value = _fill_value(x, value, "index_fill")
    if x.ndim == 0:
        col = full((1,), False, dtype="bool")
    else:
        col = full_like(getitem_op(x, index=tuple(
            ("s", None, None, None) if i == d else ("i", 0) for i in range(x.ndim))),
            False, dtype="bool")
    hit = index_put_op(col, full((), True, dtype="bool"), index, dims=(0,))
    if x.ndim == 0:
        hit = reshape(hit, ())
    elif d != x.ndim - 1:
        hit = reshape(hit, *((x.shape[d],) + (1,) * (x.ndim - d - 1)))
    return masked_fill(x, hit, value)


def take_along_dim(input, indices, dim=None):
    """Values of ``input`` at ``indices`` along ``dim`` (torch.take_along_dim): input and
    indices broadcast in the other dims; with ``dim=None`` both are flattened first."""
    x = operand(input, "take_along_dim")
    indices = operand(indices, "take_along_dim", "indices")
    if _dtype_of(indices) not in ("int64", "int32"):
        raise IndexingError(located(f"take_along_dim: expected an integer index tensor, "
                                    f"found {_dtype_of(indices)}"))
    if dim is None:
        return gather(reshape(x, -1), 0, reshape(indices, -1))
    if x.ndim != indices.ndim:
        raise ShapeError(located(f"take_along_dim: input and indices should have the same "
                                 f"number of dimensions, found {x.ndim} and {indices.ndim}"))
    d = normalize_dim(dim, x.ndim, "take_along_dim")
    shape = list(broadcast_shapes(tuple(x.shape), tuple(indices.shape), op="take_along_dim"))
    xs = tuple(shape[:d]) + (x.shape[d],) + tuple(shape[d + 1:])
    ish = tuple(shape[:d]) + (indices.shape[d],) + tuple(shape[d + 1:])
    if tuple(x.shape) != xs:
        x = expand(x, *xs)
    if tuple(indices.shape) != ish:
        indices = expand(indices, *ish)
    return gather(x, d, indices)


@composite("take")
def take(input, index):
    """``input`` flattened, at ``index`` (any shape; negative entries count from the end),
    as torch.take."""
    x = operand(input, "take")
    index = operand(index, "take", "index")
    return index_op(reshape(x, -1), index, dims=(0,))


set_advanced_indexing(advanced_getitem)     # x[index] with tensors or lists in index
