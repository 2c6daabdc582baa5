"""The backend: how ops execute on one kind of device.

A ``Backend`` holds an array module (``xp``: numpy, cupy) and kernel tables keyed by the
``OpDef`` object (never by name), so that everything backend-specific lives beside the ops,
not inside them (as JAX keeps lowering rules in tables keyed by primitive and platform):

- ``kernels[op]``: the plain kernel ``kernel(xp, *arrays, **attrs)``. A backend registers
  specialisations with ``register_kernel``; for any other op the table answers the op's own
  reference ``op.kernel`` (the table fills itself on first lookup, so a lookup is one dict
  access on the hot path).
- ``out_kernel(op)``: an ``out=`` form ``fn(xp, *arrays, out=..., **attrs) -> bool`` that writes
  the result into a preallocated buffer (an array, or a tuple of arrays for a multi-output op)
  and returns True, or returns False where it cannot for these operands (the planned runtime
  then calls the plain kernel and copies). None where the backend has none.
- ``prepare_out(op, attrs, in_shapes)``: a shortcut ``runner(arrays, outs) -> bool`` the
  planned runtime prepares once per program when every input shape is known, or None (a
  runner returning False sends the call back to the ``out=`` form).
- ``vjp_kernels``: kernels for ops' vjp rules (``VjpKernelTable``), each tied to the rule it
  implements, so a faster gradient is a faster kernel for the one rule, never a second rule.
- ``fused_compiler``: how the ``fused`` op's body runs (``run(body, arrays, out=None)`` and
  ``bind(body, in_shapes)``). The base ``FusedCompiler`` evaluates the body op by op with the
  backend's own kernel table; the CPU backend generates numpy-chunk and numba code.

Adding a backend is a subclass (or instance) of ``Backend`` that registers what it speeds up;
no file of ``graphlib`` changes.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Dict, Optional, Sequence, Tuple

from ..graphlib.ops.collectives import all_reduce_start_into, all_reduce_start_op
from ..graphlib.ops.fused import FusedBody, fused_op, run_ops
from ..graphlib.registry import OpDef
from .regions import RegionRunner


class KernelTable(dict):
    """OpDef -> kernel: the specialisations registered, and the op's reference kernel for
    every other op (filled in on first lookup); an op with regions gets its region kernel
    over ``regions`` (the backend's runner: bodies compiled once) where one is set."""

    regions = None

    def __missing__(self, op: OpDef) -> Callable:
        kernel = op.kernel
        if op.region_kernel is not None and self.regions is not None:
            kernel = self.regions.kernel(op)
        self[op] = kernel
        return kernel


class VjpKernelTable(dict):
    """OpDef -> ``(rule, kernel)``: a kernel computing, on this backend's arrays, what the
    op's vjp rule ``rule`` computes (``kernel(g, ins, outs, attrs, needs)`` on the output
    cotangent's array and the node's input and output arrays; one array or None per input,
    or None where it does not apply and the rule runs). ``kernel(op)`` answers it only while
    ``op.vjp`` is still that rule: a replaced rule is what runs, never a stale kernel."""

    def register(self, op: OpDef, kernel: Callable) -> None:
        """Run ``kernel`` for ``op``'s current vjp rule."""
        if op.vjp is None:
            raise ValueError(f"{op.name}: a vjp kernel for an op without a vjp rule")
        self[op] = (op.vjp, kernel)

    def kernel(self, op: OpDef) -> Optional[Callable]:
        """The kernel for ``op``'s vjp rule as it is now, or None."""
        entry = self.get(op)
        return entry[1] if entry is not None and entry[0] is op.vjp else None


def split_body(graph) -> tuple:
    """A fused body's nodes split once, for a backend's fused compiler: ``(prologue,
    constants, region, region_inputs, region_outputs)``. The prologue is its non-elementwise
    nodes (a matmul or reduction feeding the region), the region its elementwise nodes, whose
    inputs are the values it reads and neither makes nor takes from a constant (each once,
    in first-read order), and whose outputs are the body's outputs it makes."""
    prologue = [n for n in graph.nodes if not n.op.elementwise and not n.op.constant]
    constants = [n for n in graph.nodes if n.op.constant]
    region = [n for n in graph.nodes if n.op.elementwise]
    made = {o for n in region for o in n.outputs}
    consts = {n.outputs[0] for n in constants}
    seen: dict = {}
    for n in region:
        for x in n.inputs:
            if x not in made and x not in consts:
                seen.setdefault(x, x)
    region_outputs = [o for o in graph.outputs if o in made]
    return prologue, constants, region, list(seen.values()), region_outputs


class BodyPlans(dict):
    """One body's plans in a ``PlanCache``: a dict the backend fills as it likes (its keys
    are the backend's: input signatures, switches), and ``lock``, held while a plan is
    built so two threads never build the same one."""

    __slots__ = ("lock", "_ref")

    def __init__(self, body, entries: dict):
        super().__init__()
        self.lock = threading.Lock()
        key = id(body)
        # the entry goes when its body does (the callback runs while the body is being
        # freed, before its id can be reused)
        self._ref = weakref.ref(body, lambda _, key=key: entries.pop(key, None))


class PlanCache:
    """A backend's run plans per fused body (or any Region), held weakly and by identity:
    ``cache(body)`` is the body's ``BodyPlans`` (made on first use), ``cache.get(body)``
    the same or None. By identity, not by structure: a plan holds the body's own Values, so
    two equal bodies of different graphs keep plans of their own; an entry lives as long as
    its body. The IR holds no backend state: the cache belongs to the backend's compiler."""

    __slots__ = ("entries", "_lock")

    def __init__(self):
        self.entries: Dict[int, BodyPlans] = {}     # id(body) -> its plans
        self._lock = threading.Lock()

    def get(self, body) -> Optional[BodyPlans]:
        return self.entries.get(id(body))

    def __call__(self, body) -> BodyPlans:
        plans = self.entries.get(id(body))
        if plans is None:
            with self._lock:
                plans = self.entries.get(id(body))
                if plans is None:
                    plans = self.entries[id(body)] = BodyPlans(body, self.entries)
        return plans

    def __len__(self) -> int:
        return len(self.entries)


class FusedCompiler:
    """Runs a fused body op by op with its backend's kernels: correct on any array module,
    and the reference every faster compiler is tested against."""

    def __init__(self, backend: "Backend"):
        self.backend = backend

    def run(self, body: FusedBody, arrays: Sequence, out: Optional[Sequence] = None) -> Tuple:
        """The body's outputs for ``arrays`` (a tuple, one array per output), written into
        ``out`` when given (one preallocated array per output)."""
        xp = self.backend.xp
        res = run_ops(body.graph, xp, arrays, self.backend.kernels)
        if out is None:
            return res
        for r, o in zip(res, out):
            xp.copyto(o, r, casting="unsafe")
        return tuple(out)

    def bind(self, body: FusedBody, in_shapes: Sequence[tuple]):
        """A shortcut runner for inputs that always have ``in_shapes``, or None (none here)."""
        return None


class Backend:
    """One execution backend: an array module and kernel tables keyed by OpDef (see the
    module docstring). ``options``: its section of ``dg.config`` (None where it registers
    none); ``autotune``: the module of its timing decisions (None where it makes none)."""

    options = None
    autotune = None

    def __init__(self, name: str, xp, device: str = "cpu", *,
                 kernels: Optional[KernelTable] = None,
                 out_kernels: Optional[Dict[OpDef, Callable]] = None,
                 prepare: Optional[Dict[OpDef, Callable]] = None,
                 fused_compiler: Optional[type] = None):
        self.name = name
        self.xp = xp
        self.device = device
        self.kernels = KernelTable() if kernels is None else kernels
        self._out: Dict[OpDef, Callable] = {} if out_kernels is None else out_kernels
        self._prepare: Dict[OpDef, Callable] = {} if prepare is None else prepare
        self.fused_compiler = (fused_compiler or FusedCompiler)(self)
        self.vjp_kernels = VjpKernelTable()
        # region ops called outside an executable (eager dispatch) run their bodies compiled
        # once, interpreted (runtime/regions.py)
        self.kernels.regions = RegionRunner(self)
        for op in [op for op, k in self.kernels.items()
                   if op.region_kernel is not None and k is op.kernel]:
            del self.kernels[op]
        # the fused op runs through whatever compiler the backend holds at call time
        self.register_kernel(fused_op, self._fused_kernel)
        self.register_out(fused_op, self._fused_out, self._fused_prepare)
        # a non-blocking all-reduce starts in its planned buffer, which its wait yields
        self.register_out(all_reduce_start_op, all_reduce_start_into)

    # -- registration --------------------------------------------------------------------------
    def register_kernel(self, op: OpDef, kernel: Callable) -> None:
        """Run ``kernel(xp, *arrays, **attrs)`` for ``op`` on this backend."""
        self.kernels[op] = kernel

    def register_out(self, op: OpDef, out_kernel: Callable,
                     prepare: Optional[Callable] = None) -> None:
        """Give ``op`` an ``out=`` form (and optionally a per-program ``prepare``)."""
        self._out[op] = out_kernel
        if prepare is not None:
            self._prepare[op] = prepare

    # -- lookup --------------------------------------------------------------------------------
    def kernel(self, op: OpDef) -> Callable:
        """The kernel this backend runs for ``op`` (a specialisation, or ``op.kernel``)."""
        return self.kernels[op]

    def out_kernel(self, op: OpDef) -> Optional[Callable]:
        """The ``out=`` form for ``op``, or None."""
        return self._out.get(op)

    def prepare_out(self, op: OpDef, attrs: dict, in_shapes: Sequence[tuple]):
        """A prepared runner for ``op`` with ``attrs`` on inputs of ``in_shapes``, or None."""
        prepare = self._prepare.get(op)
        return None if prepare is None else prepare(self.xp, attrs, in_shapes)

    # -- the fused op --------------------------------------------------------------------------
    def _fused_kernel(self, xp, *arrays, sub: FusedBody):
        return self.fused_compiler.run(sub, arrays)

    def _fused_out(self, xp, *arrays, out, sub: FusedBody) -> bool:
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(sub.graph.outputs):
            return False
        self.fused_compiler.run(sub, arrays, outs)
        return True

    def _fused_prepare(self, xp, attrs: dict, in_shapes: Sequence[tuple]):
        return self.fused_compiler.bind(attrs["sub"], in_shapes)

    def __repr__(self) -> str:
        return f"<Backend {self.name} ({self.device}): {len(self._out)} out= forms>"
