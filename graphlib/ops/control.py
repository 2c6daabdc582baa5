"""Ops that hold regions, as one family: ``call`` (``call``), ``cond`` (``cond``), ``scan``,
``while_loop`` and ``fori_loop`` (``loops``), and how they trace Python functions into regions
and run them eagerly (``tracing``). Importing this module registers them in that order; every
name they export is importable from here, as before they were split by responsibility.

Each control-flow op holds its bodies as Regions in its attributes. The public functions trace
the user's Python functions once, on placeholders of the operands' types, into those regions;
the values a body reads from outside (a weight, an outer Value, an eager Parameter) are
captured as extra region inputs and passed to the node as explicit operands, so gradients
reach them. The op then dispatches like any other: a node in graph mode, a kernel run (and
one tape node) eagerly, one recorded node under dg.record / dg.compile.
"""
from .call import (OpByOpBody, body_result_types, call, call_op, give_results,  # noqa: F401
                   op_by_op_bodies, replay, trace_region)
from .tracing import (Captures, _pending, eager_support, set_eager_support,  # noqa: F401
                      tree_flatten, tree_unflatten)
from .cond import cond, cond_op  # noqa: F401
from .loops import (_grown, _scan_loop, _while_run, fori_loop, scan, scan_op,  # noqa: F401
                    while_loop, while_op)
