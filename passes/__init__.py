"""duograph.passes: the pass manager and graph-to-graph rewrites.

``PassManager`` runs one of the pipelines in ``manager.PIPELINES`` (O0 none, O1 cleanup,
O2 everything), verifies the IR after each pass and reports per-pass statistics (nodes,
kernels, planned bytes, time). The passes, one file each:

- ``cleanup.py``: dead-code elimination, common-subexpression elimination, constant folding,
  algebraic simplification (small pattern -> replacement rules);
- ``fusion.py``: elementwise fusion into ``fused`` nodes (chains, trees, siblings, epilogues
  after matmul and reductions), never creating a cycle;
- ``loops.py``: loop-invariant code motion out of loop bodies (ops declaring
  ``loop_invariant_from``);
- ``schedule.py``: memory-aware scheduling (another topological order with a lower peak);
- ``remat.py``: rematerialisation: in O2 (``remat``), checkpointed regions made again for
  backward and cheap elementwise values recomputed inside the kernels that read them late
  where the planned peak drops; with a memory budget (``rematerialize``), opt-in;
- ``memory.py``: liveness, the greedy-by-size arena planner and its verifier. The planner is
  not a graph rewrite: ``duograph.compile`` hands it to the runtime, which plans once per
  input shape signature (``exe.memory_plan``);
- ``buckets.py``: gradient buckets for data parallelism (all-reduce nodes merged into a few);
- ``result.py``: ``PassResult``, what every pass returns.

Imports: graphlib (the IR, the registry's traits, ``rewrite``), numpy and networkx, and its
own modules; never eager or runtime (tests/test_layering.py reads every import).
"""
from .cleanup import (algebraic_simplification, common_subexpression_elimination,
                      constant_folding, dead_code_elimination)
from .fusion import fuse_elementwise, fused_nodes
from .manager import (PASSES, PIPELINES, PassManager, Pipeline, kernel_count, optimize,
                      pipeline_plans,
                      register_pass)
from .loops import loop_invariant_code_motion
from .memory import MemoryPlan, MemoryPlanError, plan_memory, verify_plan
from .remat import recompute_checkpointed, rematerialize
from .result import PassResult
from .schedule import memory_aware_schedule

__all__ = ["PassManager", "PassResult", "Pipeline", "pipeline_plans", "PASSES", "PIPELINES",
           "register_pass", "optimize",
           "kernel_count", "dead_code_elimination", "common_subexpression_elimination",
           "constant_folding", "algebraic_simplification", "fuse_elementwise", "fused_nodes",
           "memory_aware_schedule", "rematerialize", "plan_memory", "verify_plan",
           "MemoryPlan", "MemoryPlanError", "loop_invariant_code_motion", "recompute_checkpointed"]
