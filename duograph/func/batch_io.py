"""What vmap does with a mapped function's results: the batch moved to ``out_dims``, the
same value broadcast for outputs that do not depend on the batch (eager and graph vmap)."""
from __future__ import annotations

import functools

from ..graphlib.registry import get_op
from ._tree import broadcast_prefix, tree_flatten, tree_unflatten
from .batched import BatchedTensor, is_tensor


def _name(func) -> str:
    if isinstance(func, functools.partial):
        return f"functools.partial({_name(func.func)}, ...)"
    return getattr(func, "__name__", repr(func))


def _move(x, src: int, dst: int):
    """``x`` with dim ``src`` moved to ``dst`` (a permute; nothing when they agree)."""
    n = len(x.shape)
    src, dst = src % n, dst % n
    if src == dst:
        return x
    dims = [d for d in range(n) if d != src]
    dims.insert(dst, src)
    return get_op("permute")(x, dims=tuple(dims))


class Batched:
    """A graph Value with the batch at dim 0 (graph vmap's stand-in for a BatchedTensor)."""

    __slots__ = ("value", "level")

    def __init__(self, value):
        self.value, self.level = value, -1


def _unwrap(func, out, out_dims, level: int, size: int):
    name = _name(func)
    leaves, spec = tree_flatten(out)
    try:
        dims = broadcast_prefix(out_dims, out, "")
    except ValueError:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible "
            f"with the structure of `outputs`. out_dims has structure "
            f"{tree_flatten(out_dims)[1]} but outputs has structure {spec}.") from None
    result = []
    for x, d in zip(leaves, dims):
        if d is not None and (not isinstance(d, int) or isinstance(d, bool)):
            raise ValueError(f"vmap({name}, ..., out_dims={out_dims}): `out_dims` must be an "
                             "int, None or a python collection of ints representing where in "
                             "the outputs the vmapped dimension should appear.")
        if type(x) in (BatchedTensor, Batched) and x.level == level:
            if d is None:
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a "
                                 "BatchedTensor when out_dim is None")
            result.append(_move(x.value, 0, d))
        elif is_tensor(x):
            if d is None:
                result.append(x)
            else:
                # the same for every example: broadcast, as torch.func does
                full = get_op("expand")(x, shape=(size,) + tuple(x.shape))
                result.append(_move(full, 0, d))
        else:
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got "
                             f"type {type(x)}. Did you mean to set out_dims= to None for "
                             "output?")
    return tree_unflatten(result, spec)
