"""What every pass returns: ``PassResult``.

A pass is a function ``pass(graph, ...) -> PassResult``. It may rewrite ``graph`` in place
(through the IR editing API) or build a new one; the result names the graph that holds now,
whether anything changed, and what the pass did, in a few words for the pass report.

    result = dead_code_elimination(graph)
    graph, changed = result           # unpacks as a pair
    result.notes                      # ["dropped 3 nodes"]

``preserves_gradients`` is False for a pass that removed something only autodiff needs
(``stop_gradient``): the graph is then marked (``Graph.gradient_blockers``) and
``dg.grad`` on it raises instead of giving a wrong gradient.
"""
from __future__ import annotations

from typing import Iterator, List, Sequence

from ..graphlib.ir import Graph


class PassResult:
    """The graph after a pass, whether the pass changed it, and notes on what it did."""

    __slots__ = ("graph", "changed", "notes", "preserves_gradients")

    def __init__(self, graph: Graph, changed: bool, notes: Sequence[str] = (),
                 preserves_gradients: bool = True):
        if not isinstance(graph, Graph):
            raise TypeError(f"PassResult: expected the Graph the pass leaves, found "
                            f"{type(graph).__name__}")
        self.graph = graph
        self.changed = bool(changed)
        self.notes: List[str] = list(notes)
        self.preserves_gradients = preserves_gradients

    def __iter__(self) -> Iterator:
        """``graph, changed = some_pass(g)``."""
        yield self.graph
        yield self.changed

    def __repr__(self) -> str:
        notes = "; ".join(self.notes)
        return (f"PassResult(changed={self.changed}"
                + (f", {notes}" if notes else "")
                + ("" if self.preserves_gradients else ", gradients not preserved") + ")")
