"""``dg.compare``: one model, every way of running it, side by side.

    cmp = dg.compare(model, (x,), targets=(y,), loss=F.cross_entropy,
                     optimizer=lambda ps: dg.optim.SGD(ps, lr=0.1))
    print(cmp)                      # a table: time, first call, kernels, nodes, memory, drift
    cmp.numerics["O2"].first        # the first node whose value left the tolerance, if any
    cmp.save_json("run.json"); cmp.report("report/")    # HTML page with plots

Modes: ``eager`` (the tape), ``compiled`` (``dg.compile``), ``O0``/``O1``/``O2`` (graph mode:
the model called on placeholders, the optimizer's update inside the graph via
``minimize``), and, for the bundled models (``duograph.models``) when PyTorch is installed,
``torch`` (PyTorch eager on a twin with the same weights) and ``torch.compile`` (the twin
through ``torch.compile``; its first call includes Inductor's compilation), and, for the
models with a JAX twin when JAX is installed, ``jax`` (one ``jax.jit`` training step).

Every mode starts from the same weights and optimizer state. What is measured per mode:

- time: the first call alone (recording, passes, planning, compiling), then the median,
  min, max and quartiles of ``repeats`` steps, and the share of a step spent outside
  kernels (a fresh build of the mode whose kernels time themselves: the backend's tables
  and eager dispatch's provider are wrapped while it is built and run, so planned programs,
  fused regions, compiled replays and eager ops are all timed the same way);
- kernels per step and IR nodes (graph modes: after the passes), recompiles and their
  reasons (compiled);
- memory: the peak of numpy allocations during one step (``tracemalloc``), the live bytes
  over a step (planned graphs: after every node of the plan, with the arena against its
  lower bound and the no-reuse total; other modes: tracemalloc's bytes after every kernel);
- drift: the loss of every step of ``steps`` steps, and how far each mode's parameters end
  from those of the eager mode.

Numerics are matched node by node through the shared IR: one eager step (forward and
backward) is recorded with the values each op computed (``record(keep_values=True)``); the
recorded graph is then optimised at every graph level and traced with the backend's own
kernels (``Executable.trace``); passes keep provenance, so every node of an optimised graph
(a fused node: each of its members' outputs) maps back to the recorded node it stands for.
For each mode the report gives the max absolute and relative difference per node, and the
first node (in graph order) whose difference exceeds the tolerance, with its op and the
user's source line.
"""
from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .eager import Tensor, no_grad, record
from .eager import compile as eager_compile
from .graphlib.builder import placeholder
from .graphlib.ir import Graph

GRAPH_LEVELS = ("O0", "O1", "O2")
DEFAULT_MODES = ("eager", "compiled", "O0", "O1", "O2")
PEER_MODES = ("torch", "torch.compile", "jax")
KNOWN_MODES = DEFAULT_MODES + PEER_MODES


@dataclass
class NodeDiff:
    """How far one node's value in a mode is from eager's."""
    index: int                 # position in the recorded graph
    op: str
    source: str
    shape: List[int]
    max_abs: float
    max_rel: float
    exceeds: bool


@dataclass
class Numerics:
    """Per-node differences of one mode against eager execution."""
    mode: str
    nodes: List[NodeDiff]
    matched: int               # recorded nodes whose value this mode computed
    total: int                 # nodes of the recorded graph
    first: Optional[NodeDiff]  # the first node beyond the tolerance, in graph order

    @property
    def max_abs(self) -> float:
        return max((d.max_abs for d in self.nodes), default=0.0)

    def describe(self) -> str:
        """One line on this mode's numerics: how many nodes matched within tolerance, or where
        (node, op, shape, source line) the first difference beyond tolerance is."""
        if self.first is None:
            return (f"{self.mode}: {self.matched} of {self.total} nodes matched, all within "
                    f"tolerance (max abs {self.max_abs:.3g})")
        d = self.first
        return (f"{self.mode}: first difference beyond tolerance at node %{d.index} "
                f"({d.op}{d.shape}): max abs {d.max_abs:.3g}, rel {d.max_rel:.3g}"
                + (f"\n  in: {d.source}" if d.source else ""))


@dataclass
class ModeResult:
    """What was measured for one mode."""
    mode: str
    first_call_s: Optional[float] = None
    times_s: List[float] = field(default_factory=list)
    kernels: Optional[int] = None
    nodes: Optional[int] = None
    peak_bytes: Optional[int] = None
    arena_bytes: Optional[int] = None
    lower_bound_bytes: Optional[int] = None
    no_reuse_bytes: Optional[int] = None
    # live bytes after each node of the plan (planned graphs), else after each kernel of a
    # step (tracemalloc)
    live_bytes: List[int] = field(default_factory=list)
    kernel_s: Optional[float] = None         # seconds inside kernels during a timed step
    timed_step_s: Optional[float] = None     # that step's whole time
    recompiles: Optional[int] = None
    recompile_reasons: List[str] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)
    param_drift: Optional[float] = None      # max |param - eager's param| after the steps
    error: Optional[str] = None

    @property
    def median_s(self) -> Optional[float]:
        return statistics.median(self.times_s) if self.times_s else None

    @property
    def dispatch_share(self) -> Optional[float]:
        """The share of a step spent outside kernels (Python dispatch, feed checks, the tape,
        bookkeeping): 1 - kernel time / step time of a timed step, clamped to [0, 1]."""
        if self.kernel_s is None or not self.timed_step_s:
            return None
        return min(1.0, max(0.0, 1.0 - self.kernel_s / self.timed_step_s))

    @property
    def spread_s(self) -> Optional[tuple]:
        """(min, first quartile, third quartile, max) of the step times."""
        if not self.times_s:
            return None
        ts = sorted(self.times_s)
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        return (ts[0], q[0], q[2], ts[-1])


class Comparison:
    """The result of ``dg.compare``: ``modes`` (name -> ModeResult), ``numerics`` (graph
    mode -> Numerics against eager), ``table()``, ``to_json()``, ``report(dir)``."""

    def __init__(self, name: str, training: bool, modes: Dict[str, ModeResult],
                 numerics: Dict[str, Numerics], config: dict):
        self.name = name
        self.training = training
        self.modes = modes
        self.numerics = numerics
        self.config = config

    def table(self) -> str:
        """The comparison as a plain-text table, one row per mode: median, spread and first run
        times, time outside kernels, kernel and node counts, peak memory, arena use, final
        loss and drift (a failed mode is a row of dashes and a line with its error), then
        the node-by-node numerics and any recompile reasons."""
        failed = []
        rows = [("mode", "median ms", "min-max ms", "first ms", "outside", "kernels", "nodes",
                 "peak KiB", "arena/lb", "final loss", "drift")]
        for r in self.modes.values():
            if r.error:
                rows.append((r.mode,) + ("-",) * 10)
                failed.append(f"{r.mode} failed: {r.error.splitlines()[0]}")
                continue
            sp = r.spread_s
            rows.append((
                r.mode, _ms(r.median_s), f"{_ms(sp[0])}-{_ms(sp[3])}" if sp else "-",
                _ms(r.first_call_s),
                f"{r.dispatch_share:.0%}" if r.dispatch_share is not None else "-",
                _int(r.kernels), _int(r.nodes),
                f"{r.peak_bytes / 1024:.1f}" if r.peak_bytes is not None else "-",
                f"{r.arena_bytes / r.lower_bound_bytes:.3f}"
                if r.arena_bytes and r.lower_bound_bytes else "-",
                f"{r.losses[-1]:.6g}" if r.losses else "-",
                f"{r.param_drift:.2g}" if r.param_drift is not None else "-"))
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        lines = [f"{self.name}: {'training step' if self.training else 'forward'}, "
                 f"{self.config['repeats']} repeats, {self.config['steps']} steps"]
        for k, row in enumerate(rows):
            lines.append("  ".join(str(c).rjust(w) if k and i else str(c).ljust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))))
        lines.extend(failed)
        if self.numerics:
            lines.append("numerics against eager, node by node:")
            lines.extend("  " + n.describe().replace("\n", "\n  ")
                         for n in self.numerics.values())
        for r in self.modes.values():
            for reason in r.recompile_reasons:
                lines.append(f"{r.mode} recompiled: {reason}")
        return "\n".join(lines)

    __str__ = table

    def __repr__(self) -> str:
        return f"<Comparison {self.name!r}: {', '.join(self.modes)}>"

    def to_json(self) -> dict:
        """Everything measured, as plain JSON data."""
        modes = {}
        for name, r in self.modes.items():
            d = asdict(r)
            d["median_s"] = r.median_s
            d["spread_s"] = r.spread_s
            d["dispatch_share"] = r.dispatch_share
            modes[name] = d
        numerics = {}
        for name, n in self.numerics.items():
            numerics[name] = {"matched": n.matched, "total": n.total,
                              "first": asdict(n.first) if n.first else None,
                              "nodes": [asdict(d) for d in n.nodes]}
        return {"name": self.name, "training": self.training, "config": self.config,
                "modes": modes, "numerics": numerics}

    def save_json(self, path: str) -> None:
        """Write ``to_json()`` to the file ``path`` as JSON (atomically; a symlink at
        ``path`` is replaced, never written through)."""
        from .graphlib.files import write_text
        write_text(path, json.dumps(self.to_json(), indent=1))

    def report(self, directory: str) -> str:
        """Write ``index.html``, ``comparison.json`` and the plots (PNG, matplotlib) into
        ``directory``; returns the page's path. Each file is written atomically, and a
        symlink planted under one of these names is replaced, never written through."""
        from ._compare_report import write_report
        return write_report(self, directory)


def _ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _int(n) -> str:
    return "-" if n is None else str(n)


# -- the workload ------------------------------------------------------------------------------
class _Workload:
    """The model or function, its inputs, and how one step of each mode runs."""

    def __init__(self, target, inputs, targets, loss, optimizer, backend="numpy"):
        from .nn import Module
        self.backend = backend
        self.target = target
        self.module = target if isinstance(target, Module) else None
        self.inputs = tuple(_as_tensor(x) for x in _as_tuple(inputs))
        self.targets = tuple(_as_tensor(y) for y in _as_tuple(targets))
        self.loss = loss
        self.optimizer_spec = optimizer
        self.training = loss is not None
        if optimizer is not None and loss is None:
            raise ValueError("compare: an optimizer needs a loss (loss=...) to minimise")
        if self.training and optimizer is not None and self.module is None:
            raise TypeError("compare: training with an optimizer needs an nn.Module (its "
                            f"parameters are what the optimizer updates), found "
                            f"{type(target).__name__}")
        self._initial = self._snapshot()

    # state
    def _snapshot(self) -> Optional[dict]:
        if self.module is None:
            return None
        return {k: np.array(v.detach().numpy(), copy=True)
                for k, v in self.module.state_dict().items()}

    def reset(self) -> None:
        """Back to the initial weights (every mode starts from the same ones)."""
        if self.module is not None:
            self.module.load_state_dict(self._initial)

    def params(self) -> Dict[str, np.ndarray]:
        return self._snapshot() or {}

    def optimizer(self):
        spec = self.optimizer_spec
        if spec is None:
            return None
        params = self.module.parameters()
        if callable(spec) and not hasattr(spec, "param_groups"):
            return spec(params)
        return type(spec)(params, **spec.defaults)     # a fresh one like the user's

    def objective(self, *args):
        """The forward (and loss) on tensors or Values: inputs first, then targets."""
        n = len(self.inputs)
        out = self.target(*args[:n])
        if self.loss is None:
            return out
        return self.loss(out, *args[n:])

    @property
    def arrays(self) -> List[np.ndarray]:
        return [np.asarray(t.numpy()) for t in self.inputs + self.targets]

    # steps of each mode: a function running one step and returning the loss (or output)
    def eager_step(self) -> Callable:
        opt = self.optimizer()
        args = self.inputs + self.targets

        if not self.training:
            def forward():
                with no_grad():
                    return self.objective(*args)
            return forward

        def step():
            if opt is not None:
                opt.zero_grad()
            loss = self.objective(*args)
            loss.backward()
            if opt is not None:
                opt.step()
            return loss
        return step

    def compiled_step(self, passes: str = "O1"):
        opt = self.optimizer()
        args = self.inputs + self.targets
        fast = eager_compile(self.objective, passes=passes)
        if not self.training:
            def forward():
                with no_grad():
                    return fast(*args)
            return forward, fast

        def step():
            if opt is not None:
                opt.zero_grad()
            loss = fast(*args)
            loss.backward()
            if opt is not None:
                opt.step()
            return loss
        return step, fast

    def graph_step(self, level: str):
        opt = self.optimizer()
        g = Graph(f"compare_{level}")
        names = []
        with g:
            values = []
            for i, t in enumerate(self.inputs + self.targets):
                name = f"x{i}" if i < len(self.inputs) else f"y{i - len(self.inputs)}"
                names.append(name)
                values.append(placeholder(name, tuple(t.shape), t.dtype))
            out = self.objective(*values)
            if opt is not None:
                opt.minimize(out)
            elif self.training:
                raise ValueError("compare: graph modes of a training comparison need an "
                                 "optimizer (the update is part of the step graph)")
        exe = g.compile(outputs=[out], passes=level, backend=self.backend)
        feeds = dict(zip(names, self.arrays))

        def step():
            return exe(**feeds)[0]
        step.feeds = feeds
        return step, exe


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _as_tensor(x):
    from .eager import as_tensor
    return x if isinstance(x, Tensor) else as_tensor(np.asarray(x))


def _scalar(v) -> float:
    if isinstance(v, Tensor):
        v = v.detach().numpy()
    arr = np.asarray(v)
    return float(arr) if arr.size == 1 else float(np.abs(arr).max())


# -- measuring ---------------------------------------------------------------------------------
def _time_steps(step: Callable, repeats: int) -> List[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def _peak_bytes(step: Callable) -> int:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        step()
        return max(0, tracemalloc.get_traced_memory()[1] - base)
    finally:
        if started:
            tracemalloc.stop()


class _KernelClock:
    """Adds the seconds spent inside kernels to ``spent``; a kernel that calls kernels (a
    fused body run op by op) counts once, as the outermost call."""

    def __init__(self, memory: bool = False):
        self.spent = 0.0
        self._depth = 0
        self.memory = memory            # also note tracemalloc's bytes after each kernel
        self.samples: List[int] = []

    def wrap(self, fn: Optional[Callable]) -> Optional[Callable]:
        if fn is None:
            return None

        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t0
                self._depth = 0
                if self.memory:
                    self.samples.append(tracemalloc.get_traced_memory()[0])
        return timed


class _TimedKernels:
    """A backend's kernel table (OpDef -> kernel) whose kernels time themselves."""

    def __init__(self, kernels, clock: _KernelClock):
        self._kernels, self._clock, self._made = kernels, clock, {}

    def __getitem__(self, op):
        timed = self._made.get(op)
        if timed is None:
            timed = self._made[op] = self._clock.wrap(self._kernels[op])
        return timed


class _TimedProvider:
    """An eager backend whose kernels time themselves (for the backend-provider hook)."""

    def __init__(self, backend, clock: _KernelClock):
        self.name, self.xp = backend.name, backend.xp
        self.device = getattr(backend, "device", "cpu")
        self.kernels = _TimedKernels(backend.kernels, clock)


@contextlib.contextmanager
def _kernels_timed(backend, clock: _KernelClock):
    """While open, everything built to run on ``backend`` (executables, planned programs,
    fused regions) and every eager op gets kernels that add their time to ``clock``: the
    backend's tables are wrapped in place and a timing provider is installed for eager
    dispatch; both are put back after."""
    from .eager import device as eager_device
    from .runtime.backends import get_backend
    be = get_backend(backend) if isinstance(backend, str) else backend
    previous = eager_device.get_backend_provider()
    kernels, out_kernel, prepare_out = be.kernels, be.out_kernel, be.prepare_out
    be.kernels = _TimedKernels(kernels, clock)
    be.out_kernel = lambda op: clock.wrap(out_kernel(op))
    be.prepare_out = lambda op, attrs, shapes: clock.wrap(prepare_out(op, attrs, shapes))
    if previous is not None:
        eager_device.set_backend_provider(lambda d: _TimedProvider(previous(d), clock))
    try:
        yield
    finally:
        be.kernels = kernels
        del be.out_kernel, be.prepare_out           # the class's methods again
        eager_device.set_backend_provider(previous)


def _build(work: "_Workload", mode: str) -> Callable:
    if mode == "eager":
        return work.eager_step()
    step, _ = work.compiled_step() if mode == "compiled" else work.graph_step(mode)
    return step


def _memory_timeline(work: "_Workload", mode: str) -> List[int]:
    """Bytes of numpy allocations alive after each kernel of one step (tracemalloc, above
    what was alive when the step began): the live-bytes timeline of a mode that allocates
    as it goes (eager, compiled, interpreted graphs)."""
    clock = _KernelClock(memory=True)
    with _kernels_timed(work.backend, clock):
        step = _build(work, mode)
        step()
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            clock.samples = []
            step()
            return [max(0, b - base) for b in clock.samples]
        finally:
            if started:
                tracemalloc.stop()


def _timed_step(work: "_Workload", mode: str) -> tuple:
    """(seconds in kernels, seconds of the whole step) for the fastest of three steps of a
    fresh build of ``mode`` whose kernels time themselves (the timing wrappers' own cost,
    about a microsecond per kernel, counts as outside)."""
    clock = _KernelClock()
    with _kernels_timed(work.backend, clock):
        step = _build(work, mode)
        step()
        step()
        best = None
        for _ in range(3):
            clock.spent = 0.0
            t0 = time.perf_counter()
            step()
            wall = time.perf_counter() - t0
            if best is None or wall < best[1]:
                best = (clock.spent, wall)
    return best


def _plan_figures(result: ModeResult, exe) -> None:
    plan = exe.memory_plan if getattr(exe, "planned", False) else None
    if plan is None:
        return
    result.arena_bytes = int(plan.arena_bytes)
    result.lower_bound_bytes = int(plan.lower_bound_bytes)
    result.no_reuse_bytes = int(plan.no_reuse_bytes)
    result.live_bytes = live_bytes(plan)


def live_bytes(plan) -> List[int]:
    """Bytes of arena values live after each node of a memory plan (values written in place
    or viewing another are counted once, with the value owning the bytes)."""
    n = len(plan.order)
    a = int(plan.alignment)
    live = [0] * n
    for v, (first, last) in plan.intervals.items():
        if v not in plan.offsets or v in plan.aliases or v in plan.views:
            continue            # only arena buffers, each counted once, by its owner
        size = -(-plan.sizes.get(v, 0) // a) * a          # aligned, as the planner counts
        for i in range(max(first, 0), min(last, n - 1) + 1):
            live[i] += size
    return live


def _run_mode(work: _Workload, mode: str, steps: int, repeats: int) -> ModeResult:
    result = ModeResult(mode)
    work.reset()
    t0 = time.perf_counter()
    handle = None
    if mode == "eager":
        step = work.eager_step()
    elif mode == "compiled":
        step, handle = work.compiled_step()
    elif mode in GRAPH_LEVELS:
        step, handle = work.graph_step(mode)
        result.kernels = handle.kernel_count
        result.nodes = len(handle.graph.nodes)
    else:
        raise ValueError(f"compare: unknown mode {mode!r}: expected one of {KNOWN_MODES}")
    first = step()                          # the first call: recording, passes, planning
    result.first_call_s = time.perf_counter() - t0
    result.losses.append(_scalar(first))
    for _ in range(steps - 1):
        result.losses.append(_scalar(step()))
    params_after = work.params()
    result.times_s = _time_steps(step, repeats)
    result.peak_bytes = _peak_bytes(step)
    if mode == "compiled":
        result.recompiles = max(0, len(handle) - 1)
        result.recompile_reasons = list(handle.recompile_reasons)[1:]   # after the first
        result.kernels = handle.kernel_count
    elif mode in GRAPH_LEVELS:
        _plan_figures(result, handle)
    result.kernel_s, result.timed_step_s = _timed_step(work, mode)
    if not result.live_bytes:           # planned graphs have their plan's exact timeline
        result.live_bytes = _memory_timeline(work, mode)
    if mode == "eager":
        work.reset()
        with record(bind=True) as rec:
            step()
        result.kernels = len(rec.nodes)
    result._params_after = params_after       # compared with eager's by compare()
    return result


def _run_torch(work: _Workload, case, steps: int, repeats: int,
               compiled: bool = False) -> ModeResult:
    import torch
    result = ModeResult("torch.compile" if compiled else "torch")
    work.reset()
    t0 = time.perf_counter()
    twin = case.torch_twin()
    model = torch.compile(twin) if compiled else twin

    def torch_opt(params):
        probe = work.optimizer()
        kind = type(probe).__name__
        return getattr(torch.optim, kind)(params, **probe.defaults)
    step = case.torch_step(model, torch_opt)
    first = step()
    result.first_call_s = time.perf_counter() - t0
    result.losses.append(float(first.detach()))
    for _ in range(steps - 1):
        result.losses.append(float(step().detach()))
    result._params_after = {k: v.detach().numpy().copy()
                            for k, v in twin.state_dict().items()}
    result.times_s = _time_steps(step, repeats)
    return result


def _run_jax(work: _Workload, case, steps: int, repeats: int) -> ModeResult:
    """The case's JAX twin: one ``jax.jit``-compiled training step (loss, gradients, the SGD
    update as PyTorch's, with momentum) over the same initial weights."""
    import jax
    import jax.numpy as jnp
    if case.jax_loss is None:
        raise NotImplementedError(f"{case.name}: no JAX twin (the MLP and the CNN have one)")
    probe = work.optimizer()
    if type(probe).__name__ != "SGD":
        raise NotImplementedError(f"the jax mode runs SGD only, found {type(probe).__name__}")
    hp = probe.defaults
    lr, mom = float(hp["lr"]), float(hp.get("momentum", 0.0))
    damp, wd = float(hp.get("dampening", 0.0)), float(hp.get("weight_decay", 0.0))
    if hp.get("nesterov") or hp.get("maximize"):
        raise NotImplementedError("the jax mode runs plain SGD (no nesterov, no maximize)")
    result = ModeResult("jax")
    work.reset()
    t0 = time.perf_counter()
    state = work.params()
    params = {k: jnp.asarray(v) for k, v in state.items() if k not in case.jax_stats}
    stats = {k: jnp.asarray(v) for k, v in state.items() if k in case.jax_stats}
    bufs = {k: jnp.zeros_like(v) for k, v in params.items()}

    def step(p, b, s, first, x, y):
        (loss, new_s), g = jax.value_and_grad(case.jax_loss, has_aux=True)(p, s, x, y)
        new_p, new_b = {}, {}
        for k in p:
            d = g[k] + wd * p[k]
            if mom:             # PyTorch's buffer: the first step takes the gradient itself
                d = jnp.where(first, d, mom * b[k] + (1 - damp) * d)
                new_b[k] = d
            else:
                new_b[k] = b[k]
            new_p[k] = p[k] - lr * d
        return loss, new_p, new_b, new_s

    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    xs = [jnp.asarray(np.asarray(t.numpy())) for t in work.inputs]
    ys = [jnp.asarray(np.asarray(t.numpy())) for t in work.targets]
    held = {"p": params, "b": bufs, "s": stats, "first": True}

    def run():
        loss, held["p"], held["b"], held["s"] = jitted(held["p"], held["b"], held["s"],
                                                       held["first"], *xs, *ys)
        held["first"] = False
        return float(loss.block_until_ready())
    result.losses.append(run())
    result.first_call_s = time.perf_counter() - t0
    for _ in range(steps - 1):
        result.losses.append(run())
    after = {k: np.asarray(v) for k, v in held["p"].items()}
    after.update({k: np.asarray(v) for k, v in held["s"].items()})
    result._params_after = after
    result.times_s = _time_steps(run, repeats)
    return result


def _numerics(work: _Workload, levels: Sequence[str], rtol: float, atol: float) -> dict:
    """Node-by-node differences of each graph level against one recorded eager step."""
    work.reset()
    args = work.inputs + work.targets
    names = {f"x{i}": t for i, t in enumerate(work.inputs)}
    names.update({f"y{i}": t for i, t in enumerate(work.targets)})
    # bind=True: parameters and buffers (BatchNorm's running statistics, which the step
    # writes in place) are state bound to the live tensors; reset() puts the initial values
    # back into them before every trace
    with record("eager_step", names=names, bind=True, keep_values=True) as rec:
        out = work.objective(*args)
        if work.training:
            out.backward()
    graph = rec.graph
    eager = rec.eager_values
    feeds = rec.feeds()
    order = {n: i for i, n in enumerate(graph.nodes)}
    by_uid = {n.uid: n for n in graph.nodes}
    results = {}
    for level in levels:
        exe = graph.compile(passes=level, plan=False, backend=work.backend)
        work.reset()
        traced = exe.trace(feeds)
        # recorded Value -> this level's array. A rule that replaces a node may add several
        # nodes standing for it ((a @ b).T -> b.T @ a.T gives b.T, a.T and the matmul the old
        # node's provenance): a node counts as the old one's twin only when it also reads
        # what the old one read (the twins of its non-constant inputs).
        found: Dict = {}
        for node in exe.nodes:
            pairs = list(_members(node)) or [(o, node, k) for k, o in enumerate(node.outputs)]
            outer = _outer_inputs(node)
            for value, member, k in pairs:
                if len(member.provenance) != 1 or value not in traced:
                    continue
                original = by_uid.get(member.provenance[0])
                if (original is not None and k < len(original.outputs)
                        and _same_reads(original, member, outer)):
                    found[original.outputs[k]] = traced[value]
        diffs = []
        for v, got in found.items():
            want = eager.get(v)
            if want is None or v.node is None or np.shape(want) != np.shape(got):
                continue      # a rewrite may compute an equivalent value of another shape
            diffs.append(_diff(order[v.node], v.node, want, got, rtol, atol))
        diffs.sort(key=lambda d: d.index)
        first = next((d for d in diffs if d.exceeds), None)
        results[level] = Numerics(level, diffs, len(diffs), len(graph.nodes), first)
    return results


def _members(node):
    """(outer value, member node, output index) for each member of a region node (a fused
    node) whose output leaves the region as one of the node's outputs."""
    for region in node.regions:
        body = region.graph
        outer = dict(zip(body.outputs, node.outputs))
        for member in body.nodes:
            for k, o in enumerate(member.outputs):
                if o in outer:
                    yield outer[o], member, k


def _outer_inputs(node) -> dict:
    """Inside a region node: each body input -> the node's operand it stands for."""
    mapping = {}
    for region in node.regions:
        mapping.update(zip(region.graph.inputs, node.inputs))
    return mapping


def _reads(values, outer=None) -> list:
    """What each value is, for matching: the provenance of its producer, or its name (an
    input), or None for constants (folded, merged and rewritten freely by the passes)."""
    out = []
    for v in values:
        v = (outer or {}).get(v, v)
        node = v.node
        if node is None:
            out.append(("input", v.name))
        elif node.op.constant:
            out.append(None)
        elif node.regions:          # a fused node's output: the member that computed it
            body = node.regions[0].graph
            inner = body.outputs[next(i for i, o in enumerate(node.outputs) if o is v)]
            out.append(_reads([inner])[0] if inner.node is not None else None)
        else:
            out.append(tuple(node.provenance))
    return out


def _same_reads(original, member, outer) -> bool:
    want, got = _reads(original.inputs), _reads(member.inputs, outer)
    return len(want) == len(got) and all(
        w is None or g is None or w == g for w, g in zip(want, got))


def _diff(index, node, want, got, rtol, atol) -> NodeDiff:
    want = np.asarray(want)
    got = np.asarray(got)
    if want.shape != got.shape or want.dtype.kind in "bOSU":
        same = want.shape == got.shape and np.array_equal(want, got)
        err = 0.0 if same else math.inf
        return NodeDiff(index, node.op.name, str(node.source or ""), list(want.shape),
                        err, err, not same)
    w = want.astype(np.float64)
    g = got.astype(np.float64)
    with np.errstate(all="ignore"):
        both_nan = np.isnan(w) & np.isnan(g)
        same_inf = np.isinf(w) & (w == g)
        err = np.where(both_nan | same_inf, 0.0, np.abs(w - g))
        rel = err / np.maximum(np.abs(w), np.finfo(np.float64).tiny)
    err = np.where(np.isnan(err), np.inf, err)
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float(np.where(err == 0, 0.0, rel).max()) if err.size else 0.0
    exceeds = bool(np.any(err > atol + rtol * np.abs(w))) if err.size else False
    return NodeDiff(index, node.op.name, str(node.source or ""), list(want.shape),
                    max_abs, max_rel, exceeds)


# -- the entry point ---------------------------------------------------------------------------
def compare(model_or_fn, example_inputs, *, targets=(), loss=None, optimizer=None,
            modes: Sequence[str] = DEFAULT_MODES, steps: int = 3, repeats: int = 10,
            rtol: Optional[float] = None, atol: Optional[float] = None,
            numerics: bool = True, case=None, progress: bool = False,
            backend="numpy") -> Comparison:
    """Run ``model_or_fn`` in every mode of ``modes`` from the same weights and compare.

    ``example_inputs``: the model's inputs (a tensor, an array or a tuple of them);
    ``targets``: what ``loss(output, *targets)`` also takes. With ``loss`` (and for an
    ``nn.Module``, an ``optimizer``: an optimizer made on the model's parameters, whose
    class and defaults are reused, or a function ``params -> optimizer``) each step is a
    training step; without, a forward pass. ``steps`` steps are run for the loss curves and
    the parameter drift, then ``repeats`` timed steps. ``rtol``/``atol`` (default: by dtype,
    1e-4/1e-5 for float32) decide which nodes differ. ``case``: a ``duograph.models`` case,
    which enables the ``torch`` mode. ``backend``: the runtime backend (a name or a
    ``Backend``) the graph modes run on, so eager on one backend can be checked node by node
    against graphs on another. See the module docstring for what is measured.
    """
    work = _Workload(model_or_fn, example_inputs, targets, loss, optimizer, backend)
    modes = tuple(modes)
    for m in modes:
        if m not in KNOWN_MODES:
            raise ValueError(f"compare: unknown mode {m!r}: expected some of {KNOWN_MODES}")
    if any(m in PEER_MODES for m in modes) and case is None:
        raise ValueError("compare: the torch and jax modes need a duograph.models case "
                         "(case=...), whose twins share the model's weights")
    if steps < 1 or repeats < 1:
        raise ValueError(f"compare: steps and repeats must be at least 1, found steps={steps}"
                         f", repeats={repeats}")
    dtype = work.inputs[0].dtype if work.inputs else "float32"
    default_tol = {"float64": (1e-9, 1e-11), "float16": (1e-2, 1e-3)}.get(dtype, (1e-4, 1e-5))
    rtol = default_tol[0] if rtol is None else rtol
    atol = default_tol[1] if atol is None else atol
    name = getattr(case, "name", None) or type(model_or_fn).__name__
    if name == "function":
        name = getattr(model_or_fn, "__name__", "function")
    bar = _progress(len(modes) + 1, progress)
    results: Dict[str, ModeResult] = {}
    for m in modes:
        bar.set_description(m)
        try:
            if m == "jax":
                results[m] = _run_jax(work, case, steps, repeats)
            elif m in PEER_MODES:
                results[m] = _run_torch(work, case, steps, repeats, m == "torch.compile")
            else:
                results[m] = _run_mode(work, m, steps, repeats)
        except Exception as e:          # a mode that fails is reported, not fatal
            results[m] = ModeResult(m, error=f"{type(e).__name__}: {e}")
        bar.update(1)
    base = getattr(results.get("eager"), "_params_after", None)
    for r in results.values():
        after = getattr(r, "_params_after", None)
        if base is not None and after is not None and r.error is None:
            common = [k for k in base if k in after]
            r.param_drift = max((float(np.abs(base[k] - after[k]).max()) for k in common),
                                default=0.0)
        if hasattr(r, "_params_after"):
            del r._params_after
    levels = [m for m in modes if m in GRAPH_LEVELS]
    bar.set_description("numerics")
    found = _numerics(work, levels, rtol, atol) if numerics and levels else {}
    bar.update(1)
    bar.close()
    work.reset()
    config = {"modes": list(modes), "steps": steps, "repeats": repeats, "rtol": rtol,
              "atol": atol, "backend": getattr(backend, "name", backend)}
    return Comparison(name, work.training, results, found, config)


class _NoBar:
    def set_description(self, _):
        pass

    def update(self, _):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="compare", leave=False)

