"""Backends own execution: a backend defined here, in the test, plugs in without touching
graphlib; the kernel-call loop; the eager hook; the state-version protocol; and the layering
that keeps CPU code out of graphlib."""
import ast
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from op_samples import OPS, assert_matches, build

import duograph as dg
from duograph.eager import device as eager_device
from duograph.graphlib.kernels import run_kernel, state_written
from duograph.graphlib.registry import REGISTRY
from duograph.passes.memory import plan_memory
from duograph.runtime.backend import Backend, FusedCompiler
from duograph.runtime.backends import backend_for_device, get_backend
from duograph.runtime.cpu import cpu_backend

ROOT = Path(__file__).resolve().parent.parent
ADD, EXP, SUM = REGISTRY["add"], REGISTRY["exp"], REGISTRY["sum"]


class ToyBackend(Backend):
    """numpy, with three ops of its own that count their calls: ``add`` and ``exp`` as plain
    kernels, ``sum`` as an ``out=`` form; every other op falls back to its reference kernel,
    and fused bodies run op by op through these tables (the base FusedCompiler)."""

    def __init__(self):
        super().__init__("toy", np)
        self.calls = Counter()
        self.register_kernel(ADD, self._counted("add", ADD.kernel))
        self.register_kernel(EXP, self._counted("exp", EXP.kernel))
        self.register_out(SUM, self._sum_out)

    def _counted(self, name, kernel):
        def run(xp, *arrays, **attrs):
            self.calls[name] += 1
            return kernel(xp, *arrays, **attrs)
        return run

    def _sum_out(self, xp, x, *, out, dim, keepdim, dtype=None):
        self.calls["sum_out"] += 1
        res = SUM.kernel(xp, x, dim=dim, keepdim=keepdim, dtype=dtype)
        xp.copyto(out, res, casting="unsafe")
        return True


def _forward_samples():
    return [pytest.param(op, s, id=f"{op.name}-{s.name}")
            for op in OPS for s in op.samples if not op.random]


@pytest.mark.parametrize("op, sample", _forward_samples())
def test_op_table_through_a_toy_backend_equals_the_cpu_backend(op, sample):
    """Every op-table graph, interpreted and planned, on a backend that specialises three ops
    and falls back for the rest: the CPU backend's results, within the op's tolerance."""
    toy = ToyBackend()
    built = build(op, sample)
    want = dg.compile_graph(built.graph, built.outputs, backend=cpu_backend)(**built.feeds)
    for planner in (None, plan_memory):
        got = dg.compile_graph(built.graph, built.outputs, backend=toy,
                               planner=planner)(**built.feeds)
        for g, w in zip(got, want):
            assert_matches(g, w, op.tol, f"{op.name} on the toy backend: ")
    for o in built.graph.nodes:
        if o.op.region_kernel is not None:       # bodies compiled once on this backend
            assert toy.kernel(o.op) is toy.kernels.regions.kernel(o.op)
        elif o.op not in (ADD, EXP) and o.op.name != "fused":
            assert toy.kernel(o.op) is o.op.kernel       # the fallback: the reference


def test_toy_backend_runs_its_own_kernels_everywhere():
    """Its specialisations run in the interpreter, the planned runtime (the out= form), the
    fused bodies of an O2 graph (through the backend's fused compiler) and its gradients."""
    g = dg.Graph("toy")
    with g:
        x = dg.placeholder("x", (4, 3))
        w = dg.placeholder("w", (3, 3))
        y = dg.sum(dg.exp(x @ w + 1.0), 1)
        (gw,) = dg.grad(dg.sum(y), [w])
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
             "w": np.eye(3, dtype=np.float32)}
    want = g.compile(outputs=[y, gw])(**feeds)
    for passes in ("O0", "O2"):
        toy = ToyBackend()
        exe = g.compile(outputs=[y, gw], passes=passes, backend=toy)
        assert exe.backend == "toy" and exe.runner is toy
        got = exe(**feeds)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert toy.calls["add"] >= 1 and toy.calls["exp"] >= 1
        if passes == "O2":
            assert exe.planned and toy.calls["sum_out"] >= 1
            assert any(n.op.name == "fused" for n in exe.graph.nodes)


def test_a_backend_may_bring_its_own_fused_compiler():
    class Counting(FusedCompiler):
        runs = 0

        def run(self, body, arrays, out=None):
            Counting.runs += 1
            return super().run(body, arrays, out)
    toy = Backend("toy-fused", np, fused_compiler=Counting)
    g = dg.Graph("f")
    with g:
        x = dg.placeholder("x", (8,))
        y = dg.tanh(x * 2.0) + 1.0
    xs = np.arange(8, dtype=np.float32) / 8
    (got,) = g.compile(outputs=[y], passes=["fuse"], backend=toy)(x=xs)
    np.testing.assert_allclose(got, np.tanh(xs * 2) + 1, rtol=1e-6)
    assert Counting.runs == 1


def test_backends_by_name():
    assert get_backend("numpy") is cpu_backend and get_backend("cpu") is cpu_backend
    assert backend_for_device("cpu") is cpu_backend
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        get_backend("tpu")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs cupy"):
            get_backend("cupy")


def test_cpu_backend_tables_are_keyed_by_the_opdef():
    assert all(not isinstance(k, str) for k in cpu_backend.kernels)
    conv = REGISTRY["conv2d"]
    assert cpu_backend.kernel(conv) is not conv.kernel            # numba im2col
    assert cpu_backend.out_kernel(REGISTRY["matmul"]) is not None
    assert cpu_backend.out_kernel(REGISTRY["softplus"]) is None
    assert not hasattr(conv, "out_kernel") and not hasattr(conv, "prepare_out")


# -- eager dispatch through the hook ---------------------------------------------------------
def test_eager_dispatch_takes_its_kernels_from_the_installed_provider():
    toy = ToyBackend()
    eager_device.set_backend_provider(lambda device: toy)
    try:
        a = dg.tensor([1.0, 2.0], requires_grad=True)
        y = dg.sum(dg.exp(a) + a)
        y.backward()
    finally:
        eager_device.set_backend_provider(backend_for_device)
    assert toy.calls["exp"] >= 1 and toy.calls["add"] >= 1
    np.testing.assert_allclose(a.grad.numpy(), np.exp([1.0, 2.0]) + 1, rtol=1e-6)
    assert eager_device.backend_for("cpu") is cpu_backend


# -- the one kernel-call loop ----------------------------------------------------------------
def test_run_kernel_coerces_casts_and_checks():
    f32 = np.dtype("float32")
    (r,) = run_kernel(lambda xp, a: 3, np, [np.ones(2)], {}, False, [f32])
    assert type(r) is np.ndarray and r.dtype == f32 and r.shape == ()
    (r,) = run_kernel(lambda xp, a: a * 2, np, [np.ones(2)], {}, False, [f32], [(2,)])
    assert r.dtype == f32
    with pytest.raises(ValueError, match="expected a tuple of 2 arrays"):
        run_kernel(lambda xp, a: (a,), np, [np.ones(2)], {}, True, [f32, f32])
    with pytest.raises(ValueError, match=r"shape \[3\], inferred \[N\]"):
        run_kernel(lambda xp, a: np.ones(3), np, [np.ones(2)], {}, False, [f32], [("N",)],
                   {"N": 2})


def test_eager_interpreter_and_constant_folding_share_the_kernel_loop():
    """A kernel returning a Python number or another dtype gives the inferred dtype in every
    executor (the loop casts it once, for all)."""
    g = dg.Graph("fold")
    with g:
        c = dg.constant(np.float32(2.0)) * dg.constant(np.float32(3.0))
        x = dg.placeholder("x", (2,))
        y = x * c
    for passes in ("O0", "O1", "O2"):
        (got,) = g.compile(outputs=[y], passes=passes)(x=np.ones(2, np.float32))
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, [6.0, 6.0])


# -- the state-version protocol --------------------------------------------------------------
def test_state_holders_are_told_through_bump_version():
    class Holder:
        def __init__(self):
            self.array = np.zeros(3, np.float32)
            self.bumps = 0

        def bump_version(self):
            self.bumps += 1

    class Plain:
        def __init__(self):
            self.array = np.zeros(3, np.float32)
    holder, plain = Holder(), Plain()
    state_written(holder)
    state_written(plain)                   # no version counter: nothing to do
    assert holder.bumps == 1
    t = dg.tensor([1.0, 2.0])
    v = t.version
    t.bump_version()
    assert t.version == v + 1


def test_a_training_step_bumps_bound_state_versions():
    """Interpreted and planned runs tell a bound eager tensor that its data changed."""
    w = dg.tensor(np.ones((3,), np.float32))
    g = dg.Graph("step")
    with g:
        x = dg.placeholder("x", (3,))
        ws = g.bind_state(w)
        g.update(ws, ws - 0.1 * x)
        g.outputs = [dg.sum(ws * x)]
    for passes in ("O0", "O2"):
        exe = g.compile(passes=passes)
        before = w.version
        exe(x=np.ones(3, np.float32))
        assert w.version > before


# -- layering --------------------------------------------------------------------------------
def _imports(path: Path):
    """Every module a file imports (top level and inside functions), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or "", node.level


FORBIDDEN_IN_GRAPHLIB = ("numba", "ctypes", "scipy.linalg", "cupy", "cupyx")


def test_graphlib_holds_no_backend_code():
    """No numba, ctypes, BLAS or cupy anywhere in graphlib: what cupy lacks of numpy's API
    reaches the reference kernels through graphlib.xp's table, which the runtime fills."""
    offenders = []
    for path in sorted((ROOT / "graphlib").rglob("*.py")):
        for line, module, level in _imports(path):
            if level == 0 and module.startswith(FORBIDDEN_IN_GRAPHLIB):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {module}")
        text = path.read_text()
        for needle in ("xp is np", "xp is not np", "nb is not None"):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle!r}")
    assert not offenders, "backend code in graphlib:\n  " + "\n  ".join(offenders)


def test_eager_never_imports_the_runtime():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in sorted((ROOT / "eager").rglob("*.py"))
                 for line, module, level in _imports(path)
                 if (level >= 2 and module.split(".")[0] == "runtime")
                 or module.startswith("duograph.runtime")]
    assert not offenders, "eager imports the runtime:\n  " + "\n  ".join(offenders)


def test_runtime_never_touches_private_version_counters():
    """No ``._version`` (a tensor's private counter) in the runtime: it calls the holder's
    public ``bump_version`` instead."""
    private = re.compile(r"\._version\b|[\"']_version[\"']")
    hits = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "runtime").rglob("*.py"))
            if private.search(p.read_text())]
    assert not hits, hits


def test_array_module_extras_come_from_the_registered_table():
    """graphlib's kernels reach what an array module lacks (erf, scatter-add, device
    transfer) through the table a backend fills; an unknown module is a clear error."""
    from types import SimpleNamespace

    from duograph.graphlib import xp as xpu

    assert xpu.extras(np).add_at == np.add.at
    fake = SimpleNamespace(__name__="fakearrays")
    with pytest.raises(RuntimeError, match="no backend registered the array module"):
        xpu.extras(fake)
    calls = []
    xpu.register_array_module("fakearrays", lambda: calls.append(1) or xpu.ArrayModuleExtras(
        erf=lambda x: x, add_at=lambda t, i, v: None, asarray=lambda x: ("on fake", x)),
        device="fakedev")
    try:
        assert calls == []                       # registering runs nothing
        assert xpu.erf(fake, 3) == 3 and xpu.extras(fake) is xpu.extras(fake)
        assert calls == [1]
        assert xpu.to_device(5, "fakedev") == ("on fake", 5)
    finally:
        xpu._LOADERS.pop("fakearrays")
        xpu._EXTRAS.pop("fakearrays", None)
        xpu._DEVICES.pop("fakedev")
    with pytest.raises(RuntimeError, match="no backend for the device 'fakedev'"):
        xpu.to_device(5, "fakedev")


@pytest.mark.parametrize("out_form_takes_it", [True, False])
def test_a_prepared_runner_that_declines_falls_back_for_a_one_output_op(out_form_takes_it):
    """A single-output op's prepared runner may decline: its ``out=`` form then gets the one
    buffer (not a tuple), and where that declines too the kernel's array is copied in."""
    seen = Counter()

    def prepare(xp, attrs, in_shapes):
        def runner(args, buffers):
            seen["runner"] += 1
            return False
        return runner

    def sum_out(xp, x, *, out, dim, keepdim, dtype=None):
        seen["out"] += 1
        assert isinstance(out, np.ndarray), type(out)
        if not out_form_takes_it:
            return False
        xp.copyto(out, SUM.kernel(xp, x, dim=dim, keepdim=keepdim, dtype=dtype))
        return True

    toy = ToyBackend()
    toy.register_out(SUM, sum_out, prepare)
    g = dg.Graph("declined")
    with g:
        x = dg.placeholder("x", (4, 3))
        y = dg.exp(dg.sum(dg.exp(x), 1)) * 2.0
    xs = np.arange(12.0, dtype=np.float32).reshape(4, 3) / 10
    (got,) = dg.compile_graph(g, [y], backend=toy, planner=plan_memory)(x=xs)
    np.testing.assert_allclose(got, np.exp(np.exp(xs).sum(1)) * 2.0, rtol=1e-6)
    assert seen["runner"] == 1 and seen["out"] == 1


def test_fused_plans_live_in_the_backend_keyed_weakly_by_the_body():
    """The IR holds no backend state: the CPU backend's plans for a fused body are in its
    compiler's PlanCache, found by the body's identity (two equal bodies keep plans of their
    own: a plan holds one body's Values) and dropped when the body goes."""
    import gc

    from duograph.graphlib.ops.fused import FusedBody
    from duograph.runtime.backend import PlanCache
    g = dg.Graph("body")
    with g:
        x = dg.placeholder("x", (64,))
        g.outputs = [dg.tanh(x) * 2.0]
    first, second = FusedBody(g), FusedBody(g)
    assert first == second and first is not second
    assert not hasattr(first, "_plans") and not hasattr(first, "__dict__")
    cache = cpu_backend.fused_compiler.plans
    assert isinstance(cache, PlanCache)
    xs = np.linspace(-1, 1, 64, dtype=np.float32)
    with dg.config.override(fused_strategy="numpy"):
        a = cpu_backend.fused_compiler.run(first, [xs])
        b = cpu_backend.fused_compiler.run(second, [xs])
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0], np.tanh(xs) * np.float32(2.0))
    plans_a, plans_b = cache.get(first), cache.get(second)
    assert plans_a is not None and plans_b is not None and plans_a is not plans_b
    assert [k for k in plans_a if k is not None]        # a layout and a plan
    before = len(cache)
    del first, plans_a
    gc.collect()
    assert len(cache) == before - 1 and cache.get(second) is plans_b
