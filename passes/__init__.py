"""duograph.passes: the pass manager and graph-to-graph rewrites.

``PassManager`` runs one of the pipelines in ``manager.PIPELINES`` (O0 none, O1 cleanup,
O2 everything available), verifies the IR after each pass and reports per-pass statistics.
Passes: dead-code elimination, common-subexpression elimination, constant folding and
algebraic simplification (``cleanup.py``).
"""
from .cleanup import (algebraic_simplification, common_subexpression_elimination,
                      constant_folding, dead_code_elimination)
from .manager import (PASSES, PIPELINES, PassManager, kernel_count, optimize,
                      register_pass)

__all__ = ["PassManager", "PASSES", "PIPELINES", "register_pass", "optimize",
           "kernel_count", "dead_code_elimination", "common_subexpression_elimination",
           "constant_folding", "algebraic_simplification"]
