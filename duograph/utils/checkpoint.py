"""``duograph.utils.checkpoint`` (``torch.utils.checkpoint``): activation checkpointing.

``checkpoint(fn, *args, use_reentrant=..., preserve_rng_state=True)`` runs ``fn`` without
keeping its intermediates on the tape; backward runs it again (with the random generator
in the state the forward saw, so dropout draws the same masks, and in the same autocast
state) and takes the gradients from the recomputed piece. Eagerly it is one tape node whose
inputs are ``fn``'s tensor arguments and every outside tensor that requires grad it read
(weights included: a dispatch interceptor notes them during the forward, so no hidden
state escapes the gradient).

While a graph is being built (graph mode on Values, ``record()``, ``dg.compile``) the
function runs once, as it is, and the nodes it adds become a checkpointed region whose
outputs are what it returns (``passes.remat.mark_checkpointed``). The O2 ``remat`` pass
(``passes.remat.recompute_checkpointed``) then makes every value of the region that the
backward part of the graph reads again, from the region's inputs, right before backward
first needs it: the interior values die in the forward, as PyTorch keeps only the inputs.
Random ops inside the region are copied with their seed, so dropout draws the same mask.
Under ``dg.compile`` the copies go into the backward executable (before the forward and
backward are split), so the forward saves the region's inputs, not its interior; under
``record()`` and graph mode they are made when the graph runs through O2 (``passes="O2"``,
or ``passes.remat.recompute_checkpointed`` in a pass list).

Differences from PyTorch: ``use_reentrant=True`` works with ``dg.autograd.grad`` too (the
recomputation is one node's gradient rule, not a nested backward); ``context_fn``,
``determinism_check`` and ``debug`` are accepted with their defaults only.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

from ..amp.autocast_mode import autocast
from ..eager import Tensor, enable_grad, intercept, no_grad
from ..eager.autograd import grad as _grad
from ..eager.creation import _generator     # the eager random generator of this thread
from ..eager.dispatch import eager_apply
from ..eager.tensors import _own_recorders
from ..graphlib import autocast as _ac
from ..graphlib.ir import Value, _local as _graph_local
from ..graphlib.registry import OpDef
from ..graphlib.types import TensorType
from ..passes.remat import mark_checkpointed, recompute_checkpointed

__all__ = ["checkpoint", "checkpoint_sequential"]

_REENTRANT_WARNING = (
    "{who}: the use_reentrant parameter should be passed explicitly. Starting in PyTorch 2.9, "
    "calling checkpoint without use_reentrant will raise an exception. use_reentrant=False is "
    "recommended, but if you need to preserve the current default behavior, you can pass "
    "use_reentrant=True. Refer to docs for more details on the differences between the two "
    "variants.")


def _rng_state():
    return _generator().bit_generator.state


def _set_rng_state(state) -> None:
    _generator().bit_generator.state = state


class _Reads:
    """A dispatch interceptor that notes every tensor requiring grad an op reads (during a
    no-grad forward, only tensors from outside the checkpointed function do)."""

    def __init__(self):
        self.found: list = []
        self._ids: set = set()

    def __call__(self, op, inputs, attrs, proceed):
        for x in inputs:
            if isinstance(x, Tensor) and x.requires_grad and id(x) not in self._ids:
                self._ids.add(id(x))
                self.found.append(x)
        return proceed(op, inputs, attrs)


class _Substitute:
    """A dispatch interceptor that reads each noted outside tensor as its detached twin,
    so the recomputation's gradients stop there."""

    def __init__(self, twins: dict):
        self.twins = twins

    def __call__(self, op, inputs, attrs, proceed):
        twins = self.twins
        if any(id(x) in twins for x in inputs):
            inputs = tuple(twins.get(id(x), (None, x))[1] if isinstance(x, Tensor) else x
                           for x in inputs)
        return proceed(op, inputs, attrs)


def _as_outputs(out, who: str) -> tuple:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"{who}: expected the checkpointed function to return a tensor or "
                            f"a tuple of tensors, found {type(o).__name__}")
    return tuple(outs)


def _autocast_state() -> list:
    return [(d, _ac.get_dtype(d)) for d in ("cpu", "cuda") if _ac.is_enabled(d)]


def _eager_checkpoint(function: Callable, args: tuple, kwargs: dict, preserve_rng_state: bool,
                      reentrant: bool):
    rng = _rng_state() if preserve_rng_state else None
    autocast_state = _autocast_state()
    reads = _Reads()
    with no_grad(), intercept(reads):
        out = function(*args, **kwargs)
    outs = _as_outputs(out, "checkpoint")
    needs_grad = reads.found
    if reentrant and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      UserWarning, stacklevel=3)
        return out
    if not needs_grad:
        return out
    single = not isinstance(out, (tuple, list))

    def infer(types, attrs):
        return [TensorType(o.shape, o.dtype) for o in outs]

    def kernel(xp, *arrays):
        return outs[0].array if single else tuple(o.array for o in outs)

    def vjp(cts, ins, results, attrs, needs):
        twins = {}
        for t, need in zip(needs_grad, needs):
            twin = t.detach()
            twin.requires_grad = True
            twins[id(t)] = (t, twin)
        saved = _rng_state() if preserve_rng_state else None
        if preserve_rng_state:
            _set_rng_state(rng)
        try:
            with enable_grad(), intercept(_Substitute(twins)):
                blocks = [_autocast_block(d, dt) for d, dt in autocast_state]
                for b in blocks:
                    b.__enter__()
                try:
                    again = _as_outputs(function(*args, **kwargs), "checkpoint")
                finally:
                    for b in reversed(blocks):
                        b.__exit__(None, None, None)
        finally:
            if preserve_rng_state:
                _set_rng_state(saved)
        pairs = [(o, c) for o, c in zip(again, cts) if c is not None and o.requires_grad]
        leaves = [twins[id(t)][1] for t in needs_grad]
        if not pairs:
            return [None] * len(needs_grad)
        grads = _grad([o for o, _ in pairs], leaves, [c for _, c in pairs],
                      allow_unused=True)
        return [g if need else None for g, need in zip(grads, needs)]

    op = OpDef("checkpoint", infer, kernel, vjp, multi_output=not single,
               doc="a checkpointed function: recomputed by its gradient rule")
    results = eager_apply(op, tuple(needs_grad), {})
    return results


def _autocast_block(device_type: str, dtype: str):
    return autocast(device_type, dtype=dtype)


def _graph_checkpoint(function: Callable, args: tuple, kwargs: dict):
    graph = _graph_local.graphs[-1] if _graph_local.graphs else next(
        a.graph for a in args if isinstance(a, Value))
    before = set(graph.nodes)
    out = function(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    mark_checkpointed([n for n in graph.nodes if n not in before],
                      [o for o in outs if isinstance(o, Value)])
    return out


def _recorded_checkpoint(function: Callable, args: tuple, kwargs: dict, recorders: list):
    """Run ``function`` eagerly under ``record()``/``dg.compile``; when the graph is built,
    mark the nodes it recorded as a checkpointed region, and when compile appends the
    backward, make the region's values again there."""
    starts = [rec.position() for rec in recorders]
    out = function(*args, **kwargs)
    outs = _as_outputs(out, "checkpoint")
    for rec, start in zip(recorders, starts):
        end = rec.position()

        def mark(rec, start=start, end=end):
            values = [rec.value_if_any(o) for o in outs]
            mark_checkpointed(rec.built_nodes(start, end),
                              None if any(v is None for v in values) else values)
        rec.on_build.append(mark)
        if recompute_checkpointed not in rec.on_backward:
            rec.on_backward.append(recompute_checkpointed)
    return out


def checkpoint(function: Callable, *args, use_reentrant: bool = None,
               preserve_rng_state: bool = True, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, **kwargs):
    """``function(*args, **kwargs)``, recomputed in backward instead of keeping its
    intermediates (``torch.utils.checkpoint.checkpoint``). Pass ``use_reentrant``
    explicitly (PyTorch warns without it and defaults to True); ``use_reentrant=True``
    refuses keyword arguments for ``function`` and, as PyTorch, gives outputs that need no
    gradient when no tensor argument requires grad."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING.format(who="duograph.utils.checkpoint"),
                      UserWarning, stacklevel=2)
        use_reentrant = True
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if context_fn is not None or determinism_check != "default" or debug:
        raise ValueError("checkpoint: context_fn, determinism_check and debug are supported "
                         f"with their defaults only (found context_fn={context_fn!r}, "
                         f"determinism_check={determinism_check!r}, debug={debug!r})")
    if not callable(function):
        raise TypeError(f"checkpoint: expected a callable function, found "
                        f"{type(function).__name__}")
    if _graph_local.graphs or any(isinstance(a, Value) for a in args):
        return _graph_checkpoint(function, args, kwargs)
    recorders = _own_recorders()
    if recorders:
        # record() / dg.compile capture the ops themselves (a checkpoint node has no IR form):
        # the recorded nodes become a region the remat pass makes again for backward
        return _recorded_checkpoint(function, args, kwargs, recorders)
    return _eager_checkpoint(function, args, kwargs, preserve_rng_state, use_reentrant)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool = None,
                          **kwargs):
    """Run ``functions`` (a list of callables, or an ``nn.Sequential``) one after another on
    ``input``, checkpointing all but the last of ``segments`` equal segments
    (``torch.utils.checkpoint.checkpoint_sequential``)."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING.format(
            who="duograph.utils.checkpoint.checkpoint_sequential"), UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: expected segments to be a positive int, "
                         f"found {segments!r}")

    def run_function(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1)(input)
