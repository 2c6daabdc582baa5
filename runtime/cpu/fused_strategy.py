"""The fused compiler's choice of plan for a region: numba where it measured faster (or is
forced), else straight-line numpy or numpy chunks (``_build``), cached per body and input
signature (``_plan``), with the switches the choice reads in the key.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from ..backend import BodyPlans
from .fused_chunks import ChunkPlan, DirectPlan, _direct
from .fused_layout import PLANS, Layout, _region_shapes
from .fused_numba import NUMBA_MIN_PLANNED, NumbaPlan
from .numba_support import numba_available
from .options import options

STRATEGIES = ("auto", "numpy", "numba", "ops")
_plans_of = PLANS.get               # body -> its plans, or None (bound once)


def _layout(body) -> Layout:
    plans = PLANS(body)
    lay = plans.get(None)
    if lay is None:
        lay = plans[None] = Layout(body.graph)
    return lay


def _plan(body, lay: Layout, ins: Sequence[np.ndarray],
          numba_min: Optional[int] = None, transposed: bool = False,
          plans: Optional[BodyPlans] = None):
    """The cached plan for region inputs like ``ins``. ``transposed``: a 2-D input that is
    the transpose of a C-contiguous array may be read as such by a numba plan (the caller
    guarantees no output overlaps it). ``plans``: the body's entry in ``PLANS``, where the
    caller holds it already (one lookup fewer on the hot path)."""
    # the switches a plan depends on are part of its key: a change takes effect at once
    key = (options.fused_strategy, options.numba, options.numba_parallel, numba_min, transposed,
           tuple([(a.shape, a.dtype.char, a.flags.c_contiguous) for a in ins]))
    if plans is None:
        plans = _plans_of(body) or PLANS(body)
    plan = plans.get(key)
    if plan is None:
        with plans.lock:
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = _build(lay, ins, numba_min, transposed)
    return plan


def _build(lay: Layout, ins: Sequence[np.ndarray], numba_min: Optional[int] = None,
           transposed: bool = False):
    """The plan for region inputs shaped like ``ins``: a numba or chunked numpy callable, or
    False where neither applies (outputs of different shapes, empty arrays)."""
    found = _region_shapes(lay, [a.shape for a in ins])
    if found is None:
        return False
    shapes, consts, full = found
    strategy = options.fused_strategy
    if strategy in ("auto", "numba"):
        plan = NumbaPlan.build(lay, ins, shapes, consts, full, forced=strategy == "numba",
                               min_elements=numba_min, transposed=transposed)
        if plan is not None:
            return plan
    if _direct(lay, math.prod(full)):
        return DirectPlan(lay, shapes, consts, full)
    return ChunkPlan(lay, ins, shapes, consts, full)


def _numba_first(strategy: str, n: int) -> bool:
    """Whether a planned region of ``n`` elements tries a numba plan before numpy's."""
    return strategy == "auto" and n >= NUMBA_MIN_PLANNED and numba_available()
