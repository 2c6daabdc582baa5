"""A fused body as the CPU fused compiler sees it (``Layout``: prologue, constants, the
elementwise region, its inputs and outputs), the iteration space of its region, the output
buffers plans write, and the backend's cache of run plans per body (``PLANS``).
"""
from __future__ import annotations

import math
from typing import Dict, Sequence, Tuple

import numpy as np

from ...graphlib.ir import Value
from ..backend import PlanCache, split_body
from .tables import KERNELS

# body -> its plans: the layout (key None) and one run plan per input signature and switches,
# held weakly by the body's identity (a plan lives as long as its body)
PLANS = PlanCache()


# -- layout: prologue, region, inputs and outputs of a body ----------------------------------
class Layout:
    """A body split once into prologue nodes, constants and the elementwise region."""

    __slots__ = ("prologue", "constants", "region", "region_inputs", "region_outputs",
                 "outputs", "direct")

    def __init__(self, graph):
        (self.prologue, self.constants, self.region, self.region_inputs,
         self.region_outputs) = split_body(graph)
        self.outputs = list(graph.outputs)
        # no prologue, and the region reads the body's inputs in order: no remapping needed
        self.direct = (not self.prologue and len(self.region_outputs) == len(self.outputs)
                       and len(self.region_inputs) == len(graph.inputs)
                       and all(a is b for a, b in zip(self.region_inputs, graph.inputs)))


def _outputs(full: tuple, dtypes, out, contiguous: bool) -> Tuple[list, list]:
    """(arrays to return, arrays to write): fresh ones, or the caller's ``out``; a
    non-contiguous ``out`` where the plan needs reshaped views gets a temporary (the
    caller copies it back)."""
    if out is None:
        outs = [np.empty(full, d) for d in dtypes]
        return outs, outs
    work = [o if (o.flags.c_contiguous or not contiguous) else np.empty(full, d)
            for o, d in zip(out, dtypes)]
    return list(out), work


def _copy_back(outs: list, work: list) -> None:
    for o, w in zip(outs, work):
        if o is not w:
            np.copyto(o, w)


def _region_shapes(lay: Layout, in_shapes: Sequence[tuple]):
    """(shape of every region value, constant arrays, the iteration shape) for region
    inputs of ``in_shapes``, or None when the region cannot run as one loop (outputs of
    different shapes, an empty iteration space)."""
    shapes: Dict[Value, tuple] = {v: tuple(s) for v, s in zip(lay.region_inputs, in_shapes)}
    consts: Dict[Value, np.ndarray] = {}
    for c in lay.constants:
        arr = np.asarray(KERNELS[c.op](np, **c.attrs))
        consts[c.outputs[0]] = arr
        shapes[c.outputs[0]] = arr.shape
    try:
        for n in lay.region:
            s = np.broadcast_shapes(*[shapes[x] for x in n.inputs])
            for o in n.outputs:
                shapes[o] = s
        out_shapes = [shapes[v] for v in lay.region_outputs]
        full = np.broadcast_shapes(*out_shapes)
    except ValueError:
        return None
    if any(s != full for s in out_shapes) or math.prod(full) == 0:
        return None
    return shapes, consts, full
