"""What ``Graph.compile`` runs: the pass pipeline (passes), then the runtime (runtime).

The engine folders never import each other sideways (runtime knows nothing of passes), so
the face package joins them and installs this function into graphlib.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from .graphlib.ir import Graph, Value
from .graphlib.rewrite import clone
from .passes import PassManager, pipeline_plans
from .passes.memory import plan_memory, verify_plan
from .runtime import Executable, compile_graph


def plan_and_verify(graph: Graph, shapes=None, nodes=None, outputs=None):
    """The planner planned executables use: ``plan_memory``, then ``verify_plan`` (a plan
    is made once per shape signature, so proving it safe costs little)."""
    plan = plan_memory(graph, shapes=shapes, nodes=nodes, outputs=outputs)
    verify_plan(graph, plan)
    return plan


def compile(graph: Graph, outputs: Optional[Sequence[Value]] = None,
            passes: Union[None, str, Sequence] = None, backend: str = "numpy",
            device: Optional[str] = None, debug: Union[bool, str] = False,
            plan: Optional[bool] = None) -> Executable:
    """Optimise a clone of ``graph`` with ``passes`` ("O0", "O1", "O2" or a list of pass
    names/functions; None = "O0") and build an Executable returning ``outputs``.

    ``plan``: run over one preallocated arena laid out by the memory planner (per input
    shape signature; ``exe.memory_plan`` shows it). None (the default) takes the
    pipeline's own option (``Pipeline.plan``: O2 plans, O0 and O1 do not, a list of passes
    does not); True or False forces it either way.
    """
    if plan is None:
        plan = pipeline_plans(passes)
    planner = plan_and_verify if plan else None
    if passes in (None, "O0") or (not isinstance(passes, str) and not list(passes)):
        exe = compile_graph(graph, outputs, backend=backend, device=device, planner=planner)
        exe.pass_stats = []
        exe.pass_report = "no passes (O0)"
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
    exe = compile_graph(work, work.outputs, backend=backend, device=device, planner=planner)
    exe.pass_stats = pm.stats
    exe.pass_report = pm.report()
    exe.source_graph = graph
    return exe
