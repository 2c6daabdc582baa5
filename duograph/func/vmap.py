"""``vmap``: torch.func.vmap over duograph's ops, eagerly and on graph Values."""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..graphlib.ir import Value
from ..graphlib.registry import get_op
from ._tree import broadcast_prefix, tree_flatten, tree_unflatten
from .batch_io import _move, _name, _unwrap
from .batched import BatchedTensor, is_tensor, vmap_level
from .graph_vmap import vmap_values

_RANDOMNESS = ("error", "different", "same")


def _check_in_dims(func, in_dims, args) -> list:
    name = _name(func)
    if not isinstance(in_dims, (int, tuple)) or isinstance(in_dims, bool):
        if in_dims is not None:
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): expected "
                             f"`in_dims` to be int or a (potentially nested) tuple matching "
                             f"the structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add "
                         "inputs, or you are trying to vmap over a function with no inputs. "
                         "The latter is unsupported.")
    try:
        dims = broadcast_prefix(in_dims, args, "")
    except ValueError:
        raise ValueError(
            f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with "
            f"the structure of `inputs`. in_dims has structure {tree_flatten(in_dims)[1]} but "
            f"inputs has structure {tree_flatten(args)[1]}.") from None
    leaves = tree_flatten(args)[0]
    for d, x in zip(dims, leaves):
        if d is None:
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} "
                             "for an input but in_dim must be either an integer dimension or "
                             "None.")
        if not is_tensor(x):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} "
                             f"for an input but the input is of type {type(x)}. We cannot "
                             "vmap over non-Tensor arguments, please use None as the "
                             "respective in_dim")
        n = len(x.shape)
        if not -n <= d < n:
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} "
                             f"for some input, but that input is a Tensor of dimensionality "
                             f"{n} so expected in_dim to satisfy -{n} <= in_dim < {n}.")
    return dims


def _batch_size(dims, leaves) -> int:
    sizes = [x.shape[d] for d, x in zip(dims, leaves) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return int(sizes[0])


def vmap(func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error", *,
         chunk_size: Optional[int] = None) -> Callable:
    """``torch.func.vmap``: ``func`` mapped over dim ``in_dims`` of its inputs (an int for
    all, None for an input shared by every example, or a tuple/pytree matching the
    positional arguments); the results carry the batch at ``out_dims``. Keyword arguments
    are not mapped. ``randomness``: "error" (random ops raise), "different" (fresh values per
    example) or "same" (one draw shared by the batch). ``chunk_size`` maps that many
    examples at a time. Nested vmaps, ``vmap(grad(f))`` and ``grad(vmap(f))`` compose.
    Called on graph Values (inside a ``with graph:`` block), the batched ops become nodes of
    that graph."""
    if randomness not in _RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got "
                         f"{chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        dims = _check_in_dims(func, in_dims, args)
        leaves, spec = tree_flatten(args)
        size = _batch_size(dims, leaves)
        if chunk_size is None or chunk_size >= size:
            return _run(func, leaves, spec, dims, size, out_dims, randomness, kwargs)
        pieces = []
        for start in range(0, size, chunk_size):
            stop = min(start + chunk_size, size)
            chunk = [_slice(x, d, start, stop) if d is not None else x
                     for x, d in zip(leaves, dims)]
            pieces.append(_run(func, chunk, spec, dims, stop - start, out_dims, randomness,
                               kwargs))
        return _concat(pieces, out_dims)
    return wrapped


def _slice(x, d: int, start: int, stop: int):
    index = tuple(("s", None, None, None) for _ in range(d % len(x.shape))) + (
        ("s", start, stop, None),)
    return get_op("getitem")(x, index=index)


def _concat(pieces, out_dims):
    leaves0, spec = tree_flatten(pieces[0])
    dims = broadcast_prefix(out_dims, pieces[0], "out_dims")
    result = []
    for k, d in enumerate(dims):
        parts = [tree_flatten(p)[0][k] for p in pieces]
        if d is None:
            result.append(parts[0])
        else:
            result.append(get_op("cat")(*parts, dim=d % len(parts[0].shape)))
    return tree_unflatten(result, spec)


def _run(func, leaves, spec, dims, size, out_dims, randomness, kwargs):
    if any(type(x) is Value for x in leaves):
        return vmap_values(func, leaves, spec, dims, size, out_dims, randomness, kwargs)
    with vmap_level(size, randomness) as entry:
        batched = [BatchedTensor(_move(x, d, 0), entry.level) if d is not None else x
                   for x, d in zip(leaves, dims)]
        out = func(*tree_unflatten(batched, spec), **kwargs)
    return _unwrap(func, out, out_dims, entry.level, size)
