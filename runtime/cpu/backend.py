"""The CPU backend: numpy arrays, with numba loops, BLAS calls and generated fused kernels
where they measured faster than the ops' reference kernels."""
from __future__ import annotations

import numpy as np

from ..backend import Backend
from ...graphlib.ops import conv, layout, linalg, reduction
from ...graphlib.registry import REGISTRY
from . import autotune, half, kernels, out_kernels, tables, vjp_kernels
from .fused import CPUFusedCompiler
from .options import options


class CPUBackend(Backend):
    """numpy + numba + BLAS. Its tables are ``tables.KERNELS`` / ``OUT_KERNELS`` /
    ``PREPARE`` (shared with the fused compiler); what it does not specialise runs the ops'
    reference kernels on numpy. ``options`` is its section of ``dg.config`` (``dg.config.cpu``)
    and ``autotune`` its timing decisions, for callers above the runtime (eager's tape reaches
    them through the backend it dispatches to)."""

    options = options
    autotune = autotune

    def __init__(self):
        super().__init__("numpy", np, "cpu", kernels=tables.KERNELS,
                         out_kernels=tables.OUT_KERNELS, prepare=tables.PREPARE,
                         fused_compiler=CPUFusedCompiler)
        for op, kernel in kernels.table().items():
            self.register_kernel(op, kernel)
        for op in half_ops():       # half-precision products in float32 (``half.py``)
            self.register_kernel(op, half.in_float32(self.kernels[op]))
        for op in half_elementwise_ops():      # and elementwise ops, in chunks
            self.register_kernel(op, half.elementwise_in_float32(self.kernels[op]))
        for op in half_reductions():
            self.register_kernel(op, half.in_float32(self.kernels[op]))
        for op, form in out_kernels.table().items():
            self.register_out(op, form)
        for op, prepare in out_kernels.prepare_table().items():
            self.register_out(op, self.out_kernel(op), prepare)
        for op, kernel in vjp_kernels.table(self.kernels, self.autotune).items():
            self.vjp_kernels.register(op, kernel)


def half_ops() -> list:
    """The products whose half-precision operands compute in float32 (``half.py``)."""
    return [linalg.matmul_op, layout.einsum_op, conv.conv2d_op, conv.conv2d_input_grad_op,
            conv.conv2d_weight_grad_op]


def half_elementwise_ops() -> list:
    """Elementwise ops whose half-precision operands compute in float32 (``half.py``): all
    but those that choose their output dtype (``cast``)."""
    return [op for op in REGISTRY.values()
            if op.elementwise and not op.random and "dtype" not in list(op.attrs or ())]


def half_reductions() -> list:
    """Reductions that would otherwise accumulate in the half dtype (sum and mean already
    accumulate in float32)."""
    return [reduction.prod_op, reduction.var_op, reduction.std_op, reduction.logsumexp_op,
            reduction.amax_op, reduction.amin_op]


cpu_backend = CPUBackend()
