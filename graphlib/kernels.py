"""Calling kernels, backend-neutral: the one loop every executor shares, and the protocol for
state holders.

``run_kernel`` is how eager dispatch, the interpreter, the planned runtime's fresh-result
steps, fused bodies run op by op and constant folding all call a kernel: call it, make a
single result a tuple (or check a multi-output op's count), coerce each result to an array of
the array module, cast it to the inferred dtype and, when shapes are given, check it against
the inferred shape. Which kernel runs is the caller's choice (a backend's specialisation or
the op's reference ``kernel``); errors are left to the caller to wrap with its context.

State holders: ``graph.bind_state(holder)`` binds a live object (an eager parameter, buffer
or optimizer slot) whose ``array`` attribute holds the array a run reads and writes in place.
A holder that keeps a version counter (eager tensors do: autograd refuses a gradient whose
saved input changed) implements ``bump_version()``; executors call ``state_written(holder)``
after writing its ``array``.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Protocol, Sequence, runtime_checkable

from .types import eval_dim, format_shape


@runtime_checkable
class StateHolder(Protocol):
    """A live object bound as graph state: ``array`` is its array, written in place by runs;
    ``bump_version()`` (optional) is called after every such write."""

    array: object


def state_written(holder) -> None:
    """Tell ``holder`` its ``array`` was written in place (calls its ``bump_version()`` where
    it has one; a plain holder without a version counter needs nothing)."""
    bump = getattr(type(holder), "bump_version", None)
    if bump is not None:
        bump(holder)


def direct_kernel(kernel: Callable, in_dtypes: Sequence[str]) -> Callable:
    """``kernel`` itself, or the function it wraps when its casts are known to do nothing
    for inputs of ``in_dtypes`` (fixed when an executable is built): one call less per run.
    A wrapping kernel says so with a ``direct(in_dtypes) -> inner kernel or None``
    attribute (the elementwise ops' float and promoting wrappers have one)."""
    direct = getattr(kernel, "direct", None)
    inner = direct(tuple(in_dtypes)) if direct is not None else None
    return kernel if inner is None else inner


def shape_matches(actual: tuple, inferred: tuple, bindings: Dict[str, int]) -> bool:
    """Whether a kernel's result shape agrees with the inferred one: same rank, equal static
    dims, and each symbol or derived dim (``N+2``, ``N*6``, ``N[1:]``) equal to the size the
    feeds' bindings give it; one that cannot be evaluated is not checked."""
    if len(actual) != len(inferred):
        return False
    for a, d in zip(actual, inferred):
        if isinstance(d, str):
            d = eval_dim(d, bindings)
        if d is not None and a != d:
            return False
    return True


def run_kernel(kernel: Callable, xp, arrays: Sequence, attrs: dict, multi: bool,
               dtypes: Sequence, shapes: Optional[Sequence[tuple]] = None,
               bindings: Optional[Dict[str, int]] = None) -> list:
    """``kernel(xp, *arrays, **attrs)`` as a list of arrays, one per output.

    ``multi``: the kernel returns a tuple (a multi-output op, or a node with several
    outputs), whose length must be ``len(dtypes)``. Each result becomes an ``xp`` array of
    ``dtypes[k]`` (a numpy dtype); with ``shapes`` (inferred, possibly symbolic, resolved
    through ``bindings``) a result of another shape raises ValueError.
    """
    res = kernel(xp, *arrays, **attrs)
    if not multi:                  # the hot case (eager dispatch, most instructions)
        if type(res) is not xp.ndarray:
            res = xp.asarray(res)
        if res.dtype != dtypes[0]:
            res = res.astype(dtypes[0])
        if shapes is not None and res.shape != shapes[0] and not shape_matches(
                res.shape, shapes[0], bindings or {}):
            raise _shape_error(res, shapes[0])
        return [res]
    if not isinstance(res, (tuple, list)) or len(res) != len(dtypes):
        raise ValueError(f"kernel returned {type(res).__name__}, expected a tuple of "
                         f"{len(dtypes)} arrays")
    ndarray = xp.ndarray
    out = []
    for k, r in enumerate(res):
        if type(r) is not ndarray:
            r = xp.asarray(r)
        dt = dtypes[k]
        if r.dtype != dt:
            r = r.astype(dt)
        if shapes is not None:
            shape = shapes[k]
            if r.shape != shape and not shape_matches(r.shape, shape, bindings or {}):
                raise _shape_error(r, shape)
        out.append(r)
    return out


def _shape_error(result, inferred: tuple) -> ValueError:
    return ValueError(f"kernel returned shape {list(result.shape)}, inferred "
                      f"{format_shape(inferred)}")
