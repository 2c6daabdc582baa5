"""The pass manager and the one explicit pipeline table.

A pass is a plain function ``pass(graph) -> PassResult`` (the graph that holds now, whether
it changed, notes on what it did) that may rewrite the graph in place. ``PassManager`` runs
a named pipeline, verifies the IR after every pass, records per-pass statistics, and can
print or save the IR after each pass.

    pm = PassManager("O1", debug=True)
    graph = pm.run(graph)
    print(pm.report())

Users add passes by name (``register_pass``) or by passing functions in the list.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Union

from ..graphlib.errors import GraphError
from ..graphlib.files import write_text
from ..graphlib.ir import Graph
from .buckets import bucket_all_reduces
from .casts import remove_redundant_casts
from .cleanup import (algebraic_simplification, common_subexpression_elimination,
                      constant_folding, dead_code_elimination)
from .fusion import fuse_elementwise
from .loops import loop_invariant_code_motion
from .memory import peak_live_bytes
from .remat import remat_o2
from .result import PassResult
from .schedule import memory_aware_schedule

PassFn = Callable[[Graph], PassResult]

PASSES: Dict[str, PassFn] = {
    "dce": dead_code_elimination,
    "cse": common_subexpression_elimination,
    "fold": constant_folding,
    "simplify": algebraic_simplification,
    "fuse": fuse_elementwise,
    "schedule": memory_aware_schedule,
    "licm": loop_invariant_code_motion,
    "ddp_buckets": bucket_all_reduces,
    "casts": remove_redundant_casts,
    "remat": remat_o2,
}

class Pipeline:
    """A named sequence of passes plus what running its result needs: ``plan`` says whether
    the executable runs over a memory-planned arena by default (``compile(plan=...)``
    overrides it). Iterates over its pass names."""

    __slots__ = ("passes", "plan")

    def __init__(self, passes: Sequence[str], plan: bool = False):
        self.passes = list(passes)
        self.plan = plan

    def __iter__(self):
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __repr__(self) -> str:
        return f"Pipeline({self.passes}, plan={self.plan})"


# The pipelines, in order. O2 grows with fusion and memory planning. CSE runs again after
# licm: nodes hoisted out of several loop bodies (one weight's transpose per body) are equal.
# casts drops what autocast left redundant (after CSE merged repeated casts of one value).
# ddp_buckets groups data-parallel gradient all-reduces (a no-op without them). remat makes
# checkpointed regions' values again for backward (and cheap ones inside the kernels that read
# them late), after the last CSE (which would merge the copies back) and before fusion.
PIPELINES: Dict[str, Pipeline] = {
    "O0": Pipeline([]),
    "O1": Pipeline(["dce", "fold", "simplify", "cse", "casts", "licm", "cse", "dce"]),
    "O2": Pipeline(["dce", "fold", "simplify", "cse", "casts", "licm", "cse", "simplify", "dce",
                    "ddp_buckets", "remat", "fuse", "schedule"],
                   plan=True),
}


def register_pass(name: str, fn: PassFn) -> None:
    """Make ``fn`` selectable by ``name`` in pass lists."""
    if not callable(fn):
        raise TypeError(f"register_pass: {name!r} must be callable")
    PASSES[name] = fn


@dataclass
class PassStat:
    name: str
    nodes_before: int
    nodes_after: int
    kernels_before: int
    kernels_after: int
    seconds: float
    changed: bool
    bytes_before: int = 0      # planned bytes: the most intermediate bytes live at once
    bytes_after: int = 0
    notes: tuple = ()          # what the pass said it did (PassResult.notes)

    def row(self) -> str:
        return (f"{self.name:<12}{self.nodes_before:>8}{self.nodes_after:>8}"
                f"{self.kernels_before:>9}{self.kernels_after:>9}"
                f"{_kib(self.bytes_before):>12}{_kib(self.bytes_after):>12}"
                f"{self.seconds * 1e3:>10.2f}  {'yes' if self.changed else 'no'}")


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K"


def planned_bytes(graph: Graph) -> int:
    """The most intermediate bytes live at once in ``graph``'s order (the memory plan's
    lower bound; symbolic dims counted as 64): the figure the pass report tracks."""
    return peak_live_bytes(graph)


def kernel_count(graph: Graph) -> int:
    """Kernels a run launches: every node but constants (prepared once)."""
    return sum(1 for n in graph.nodes if not n.op.constant)


def pipeline_plans(passes) -> bool:
    """Whether ``passes`` (a pipeline name, a Pipeline, or a list) plans memory by default:
    a pipeline says so (O2 does); a plain list of passes does not."""
    if passes is None:
        passes = "O0"
    if isinstance(passes, str):
        passes = PIPELINES.get(passes)
    return bool(getattr(passes, "plan", False))


def _resolve(passes) -> List[tuple]:
    if passes is None:
        passes = "O0"
    if isinstance(passes, str):
        if passes not in PIPELINES:
            raise ValueError(f"unknown pass pipeline {passes!r}: expected one of "
                             f"{sorted(PIPELINES)} or a list of pass names/functions")
        passes = PIPELINES[passes]
    out = []
    for p in passes:
        if isinstance(p, str):
            if p not in PASSES:
                raise ValueError(f"unknown pass {p!r}: known passes are {sorted(PASSES)}")
            out.append((p, PASSES[p]))
        elif callable(p):
            out.append((getattr(p, "__name__", "custom"), p))
        else:
            raise TypeError(f"a pass must be a name or a function, found {p!r}")
    return out


class PassReport(str):
    """The pass table (it is the table's text, so it prints and saves as before) plus what
    each pass did to the IR: ``diff(name)`` is a unified diff of the text IR (with source
    lines) before and after that pass; ``ir_after(name)`` the IR it left. A pass that runs
    twice (``simplify``, ``dce``) is ``name`` for its first run and ``name#2`` for the
    second."""

    def __new__(cls, table: str, stats: Sequence[PassStat] = (), before: str = "",
                after: Sequence[str] = ()):
        report = super().__new__(cls, table)
        report.stats = list(stats)
        report._before = before
        report._after = list(after)
        return report

    def names(self) -> List[str]:
        """The passes in order, a repeated one as ``name#k``."""
        seen: Dict[str, int] = {}
        out = []
        for st in self.stats:
            seen[st.name] = seen.get(st.name, 0) + 1
            out.append(st.name if seen[st.name] == 1 else f"{st.name}#{seen[st.name]}")
        return out

    def _index(self, name: str) -> int:
        names = self.names()
        if name not in names:
            raise KeyError(f"no pass {name!r} in this report; it has {names}")
        if len(self._after) != len(names):
            raise KeyError("this report kept no IR (PassManager(keep_ir=False))")
        return names.index(name)

    def ir_after(self, name: str) -> str:
        return self._after[self._index(name)]

    def diff(self, name: str, context: int = 2) -> str:
        """What pass ``name`` changed, as a unified diff of the text IR (empty when the pass
        changed nothing)."""
        import difflib
        i = self._index(name)
        before = self._before if i == 0 else self._after[i - 1]
        return "".join(difflib.unified_diff(
            before.splitlines(True), self._after[i].splitlines(True),
            fromfile=f"before {name}", tofile=f"after {name}", n=context))


class PassManager:
    """Run a pipeline (a name such as "O2", or a list of pass names/functions)."""

    def __init__(self, passes: Union[str, Sequence] = "O1", verify: bool = True,
                 debug: Union[bool, str] = False, keep_ir: bool = True):
        self.passes = _resolve(passes)
        self.verify = verify
        self.debug = debug            # True: print the IR after each pass; a folder: save it
        self.keep_ir = keep_ir        # keep the text IR after each pass for report().diff
        self.stats: List[PassStat] = []
        self._before = ""
        self._after: List[str] = []

    def run(self, graph: Graph) -> Graph:
        """Run the passes in order on ``graph`` and return the result, recording per-pass
        statistics for ``report()``; with ``verify`` the IR is checked after every pass
        (GraphError naming the pass that broke it), with ``keep_ir``/``debug`` the text after
        each pass is kept or dumped."""
        self.stats = []
        self._after = []
        self._before = graph.to_text(source=True) if self.keep_ir and self.passes else ""
        bytes_now = planned_bytes(graph) if self.passes else 0
        text_now = self._before or None
        for i, (name, fn) in enumerate(self.passes):
            nb, kb, bb = len(graph.nodes), kernel_count(graph), bytes_now
            t0 = time.perf_counter()
            result = fn(graph)
            seconds = time.perf_counter() - t0
            if not isinstance(result, PassResult):
                raise GraphError(f"pass {name!r} returned {type(result).__name__}, expected a "
                                 "PassResult (duograph.passes.PassResult(graph, changed))")
            same = graph is result.graph and not result.changed and len(graph.nodes) == nb
            graph, changed = result.graph, result.changed
            if not result.preserves_gradients and not graph.gradient_blockers:
                graph.gradient_blockers.append(name)
            # A pass that changed nothing leaves the IR, its bytes and its text as they were:
            # checking and printing it again would only cost time (a third of an O2 compile
            # of a 10k-node chain, where most passes find nothing).
            if self.verify and not same:
                try:
                    graph.verify()
                except GraphError as e:
                    raise GraphError(f"the IR is broken after pass {name!r}:\n{e}") from None
            if not same:
                bytes_now = planned_bytes(graph)
            self.stats.append(PassStat(name, nb, len(graph.nodes), kb, kernel_count(graph),
                                       seconds, bool(changed), bb, bytes_now,
                                       tuple(result.notes)))
            if not (self.keep_ir or self.debug):
                text = ""
            elif same and text_now is not None:
                text = text_now
            else:
                text = graph.to_text(source=True)
            text_now = text
            if self.keep_ir:
                self._after.append(text)
            self._dump(text, i, name)
        return graph

    def _dump(self, text: str, index: int, name: str) -> None:
        if not self.debug:
            return
        if isinstance(self.debug, str):
            os.makedirs(self.debug, exist_ok=True)
            path = os.path.join(self.debug, f"{index:02d}_{name}.txt")
            write_text(path, text + "\n")
        else:
            print(f"--- after {name} ---\n{text}")

    def report(self) -> PassReport:
        """A table of the last run: nodes, kernels and planned bytes (peak live, symbols as
        64) before/after, and time per pass; ``.diff(name)`` shows what a pass changed."""
        head = (f"{'pass':<12}{'nodes':>8}{'->':>8}{'kernels':>9}{'->':>9}"
                f"{'bytes':>12}{'->':>12}{'ms':>10}  changed")
        table = "\n".join([head] + [s.row() for s in self.stats])
        return PassReport(table, self.stats, self._before, self._after)


def optimize(graph: Graph, passes="O1", outputs=None, verify: bool = True,
             debug: Union[bool, str] = False) -> Graph:
    """Run ``passes`` on a clone of ``graph`` (the original is never changed); returns the
    optimised clone, whose ``outputs`` correspond to ``outputs`` (default graph.outputs)."""
    from ..graphlib.rewrite import clone
    g, _ = clone(graph, outputs)
    return PassManager(passes, verify, debug).run(g)

