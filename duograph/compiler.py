"""What ``Graph.compile`` runs: the pass pipeline (passes), then the runtime (runtime).

The engine folders never import each other sideways (runtime knows nothing of passes), so
the face package joins them and installs this function into graphlib.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from .graphlib.ir import Graph, Value
from .graphlib.rewrite import clone
from .passes import PassManager
from .runtime import Executable, compile_graph


def compile(graph: Graph, outputs: Optional[Sequence[Value]] = None,
            passes: Union[None, str, Sequence] = None, backend: str = "numpy",
            device: Optional[str] = None, debug: Union[bool, str] = False) -> Executable:
    """Optimise a clone of ``graph`` with ``passes`` ("O0", "O1", "O2" or a list of pass
    names/functions; None = "O0") and build an Executable returning ``outputs``."""
    if passes in (None, "O0") or (not isinstance(passes, str) and not list(passes)):
        exe = compile_graph(graph, outputs, backend=backend, device=device)
        exe.pass_stats = []
        return exe
    if outputs is None:
        outputs = list(graph.outputs)
    elif isinstance(outputs, Value):
        outputs = [outputs]
    for i, o in enumerate(outputs):
        if not isinstance(o, Value) or o.graph is not graph:
            # let the runtime raise its usual, precise error
            return compile_graph(graph, outputs, backend=backend, device=device)
    work, _ = clone(graph, outputs)
    pm = PassManager(passes, verify=True, debug=debug)
    work = pm.run(work)
    exe = compile_graph(work, work.outputs, backend=backend, device=device)
    exe.pass_stats = pm.stats
    exe.source_graph = graph
    return exe
