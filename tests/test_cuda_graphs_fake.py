"""CUDA-graph capture and replay (``runtime/cuda/graphs.py``) on a fake cupy, without a GPU.

``fake_cupy.py`` emulates stream capture over the fake device (see its docstring: writes
are recorded, not run; fresh results are recorded with their arrays; host reads raise and
invalidate the capture; a launch replays the calls in order). Training steps compiled with
``device="cuda"`` at O2 run through duograph's real ``CUDABackend`` over that module (its
fused compiler, its generated ElementwiseKernels compiled for the host, its device
softmax-cross-entropy), captured by ``CudaGraphStep`` and replayed.

Replays are compared with uncaptured steps of an identical model for EXACT equality: both
run the very same numpy calls on the same dtypes in the same order (a replay re-issues the
calls the capture recorded), so any difference is a replay that skipped, reordered or baked
something, not rounding.

What this cannot show is cupy itself (which cupy calls really capture, kernel launches,
concurrency between streams): that is ``test_gpu.py``'s job on a GPU.
"""
import shutil
import sys

import numpy as np
import pytest
from fake_cupy import CUDARuntimeError, fake_cupy

import duograph as dg
import duograph.nn as nn
from duograph.runtime.cuda import capture

CXX = shutil.which("g++") or shutil.which("clang++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler for the generated "
                                                    "ElementwiseKernels")


@pytest.fixture
def cupy():
    """The fake cupy with duograph's CUDABackend as the "cuda" backend."""
    if CXX is None:
        pytest.skip("no host C++ compiler for the generated ElementwiseKernels")
    with fake_cupy(cuda_backend=True) as cp:
        yield cp


@pytest.fixture
def ref_cupy():
    """The fake cupy with the ops' reference kernels as the "cuda" backend."""
    with fake_cupy() as cp:
        yield cp


def _model(opt_kind: str):
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("cuda")
    if opt_kind == "sgd":
        opt = dg.optim.SGD(model.parameters(), lr=0.1)
    elif opt_kind == "momentum":
        opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    else:
        opt = dg.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def _step(opt_kind="momentum", batch=16, static=True, passes="O2"):
    """(the executable of one training step on "cuda", model, optimizer)."""
    model, opt = _model(opt_kind)
    g = dg.Graph("step")
    n = batch if static else "N"
    with g:
        x = dg.placeholder("x", (n, 8))
        y = dg.placeholder("y", (n,), "int64")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.minimize(loss)
    g.outputs = [loss]
    return g.compile(passes=passes, device="cuda"), model, opt


def _batches(k, batch=16, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((batch, 8)).astype(np.float32),
             "y": rng.integers(0, 4, batch).astype(np.int64)} for _ in range(k)]


def _params(model):
    return [p.detach().cpu().numpy() for p in model.parameters()]


def _assert_same_params(m1, m2):
    for p, q in zip(_params(m1), _params(m2)):
        np.testing.assert_array_equal(p, q)


# -- the fake itself ----------------------------------------------------------------------------
def test_the_fake_records_writes_runs_fresh_results_and_replays_them(ref_cupy):
    cp = ref_cupy
    import cupy
    assert cupy is cp and sys.modules["cupy"] is cp
    a = cp.asarray(np.arange(4.0))
    b = cp.ones(4)
    c = cp.empty(4)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        cp.add(a, b, out=c)                     # a write: recorded, not run
        d = c * 2.0                             # a fresh result: run, recorded
        v = d.reshape(2, 2)                     # a view: nothing recorded
        b += 1.0
        a[0] = 10.0
        a.fill(3.0)
        with pytest.raises(CUDARuntimeError, match="StreamCaptureUnsupported"):
            cp.asarray(np.ones(2))              # host -> device
        g = None
        with pytest.raises(CUDARuntimeError, match="Invalidated"):
            g = s.end_capture()
    assert g is None
    np.testing.assert_array_equal(a.get(), [0, 1, 2, 3])     # nothing written
    np.testing.assert_array_equal(b.get(), [1, 1, 1, 1])
    with s:
        s.begin_capture()
        cp.add(a, b, out=c)
        d = c * 2.0
        v = d.reshape(2, 2)
        m = d.sum()
        assert isinstance(m, cp.ndarray) and m.shape == ()      # a 0-d device array
        b += 1.0
        a.fill(3.0)
        with pytest.raises(ValueError, match="read-only"):
            np.ndarray.__setitem__(a, 0, 1.0)     # a write the fake does not intercept
        g = s.end_capture()
    assert [repr(x) for x in g.calls] == [
        "<add.__call__>", "<multiply.__call__ -> fresh>", "<add.reduce -> fresh>",
        "<add.__call__>", "<ndarray.fill>"]
    np.testing.assert_array_equal(a.get(), [0, 1, 2, 3])
    g.launch(s)
    np.testing.assert_array_equal(v.get(), [[2, 4], [6, 8]])
    assert float(m) == 20.0 and b.get()[0] == 2.0 and a.get()[0] == 3.0
    g.launch(s)                                  # c = 3 + 2, d = 10, b = 3
    np.testing.assert_array_equal(d.get(), [10] * 4)
    assert float(m) == 40.0 and b.get()[0] == 3.0
    a[1] = 7.0                                   # writable again after the capture
    with s:
        s.begin_capture()
        with pytest.raises(CUDARuntimeError, match="StreamCaptureUnsupported"):
            float(m)
        with pytest.raises(CUDARuntimeError, match="Invalidated"):
            s.end_capture()
    np.testing.assert_array_equal(a.get(), [3, 7, 3, 3])


def test_the_fake_is_removed_afterwards():
    with fake_cupy() as cp:
        assert sys.modules["cupy"] is cp
    assert sys.modules.get("cupy") is not cp
    assert "__array_ufunc__" not in type(cp.ones(1)).__dict__


# -- training steps -----------------------------------------------------------------------------
@needs_cxx
@pytest.mark.parametrize("opt_kind", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("feed_kind", ["numpy", "device"])
def test_replayed_training_steps_equal_uncaptured_steps(cupy, opt_kind, feed_kind):
    """K replays of a captured step == K uncaptured steps of an identical model: losses
    and final parameters exactly, feeds changing every step, given as numpy or device
    arrays."""
    plain, m1, _ = _step(opt_kind)
    exe, m2, _ = _step(opt_kind)
    assert exe.planned and exe.xp is cupy
    batches = _batches(6)
    step = capture(exe, batches[0], warmup=2)
    assert step.captured, step.reason
    assert step.graph.uploaded and step.graph.allocations_outside_pool == 0
    # the warm-up ran two uncaptured steps (capturing runs nothing): bring the plain one level
    for _ in range(2):
        plain(**batches[0])
    _assert_same_params(m1, m2)
    losses = []
    for feeds in batches[1:]:
        want = plain(**feeds)[0]
        if feed_kind == "device":
            feeds = {k: cupy.asarray(v) for k, v in feeds.items()}
        got = step(feeds)
        assert isinstance(got[0], cupy.ndarray)
        np.testing.assert_array_equal(got[0].get(), want)
        losses.append(float(want))
    assert step.graph.launches == 5
    _assert_same_params(m1, m2)
    assert losses[-1] != losses[0]
    # host=True gives numpy arrays; replay() launches on the current static feeds
    want = plain(**batches[-1])[0]
    (got,) = step(host=True)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, want)
    step.replay()
    step.synchronize()
    plain(**batches[-1])
    _assert_same_params(m1, m2)


@needs_cxx
def test_outputs_are_copies_and_the_parameters_stay_in_place(cupy):
    exe, model, _ = _step("momentum")
    arrays = [p.array for p in model.parameters()]
    feeds = _batches(1)[0]
    step = capture(exe, feeds)
    assert step.captured, step.reason
    a = step(feeds)[0]
    b = step(feeds)[0]
    assert a is not b and float(a) != float(b)
    assert [p.array for p in model.parameters()] == arrays


# -- refusals and feed errors -------------------------------------------------------------------
@needs_cxx
def test_feed_names_shapes_and_dtypes_are_checked(cupy):
    exe, _, _ = _step("sgd")
    feeds = _batches(1)[0]
    with pytest.raises(ValueError, match="missing example feed 'y'"):
        capture(exe, {"x": feeds["x"]})
    with pytest.raises(ValueError, match=r"feed 'x' has float64\[16, 8\], expected "
                                         r"float32\[16, 8\]"):
        capture(exe, dict(feeds, x=feeds["x"].astype(np.float64)))
    step = capture(exe, feeds)
    assert step.captured, step.reason
    with pytest.raises(ValueError, match=r"unknown feed 'z'.*\['x', 'y'\]"):
        step({"z": feeds["x"]})
    with pytest.raises(ValueError, match=r"feed 'x' has float32\[8, 8\], expected "
                                         r"float32\[16, 8\]"):
        step(x=feeds["x"][:8])
    with pytest.raises(ValueError, match=r"feed 'y' has int32\[16\], expected int64\[16\]"):
        step(y=cupy.asarray(feeds["y"].astype(np.int32)))
    with pytest.raises(ValueError, match=r"feed 'x' has float32\[16, 4\]"):
        step(x=cupy.asarray(feeds["x"][:, :4]))
    assert step.graph.launches == 0          # nothing ran


@needs_cxx
def test_symbolic_shapes_unplanned_and_cpu_executables_are_refused(cupy):
    feeds = _batches(1)[0]
    exe, _, _ = _step("sgd", static=False)
    with pytest.raises(ValueError, match=r"symbolic dims \['N'\]"):
        capture(exe, feeds)
    exe, _, _ = _step("sgd", passes="O0")
    assert not exe.planned
    with pytest.raises(ValueError, match=r"no memory plan \(compile with passes='O2' or "
                                         r"plan=True\)"):
        capture(exe, feeds)
    g = dg.Graph("cpu")
    with g:
        x = dg.placeholder("x", (4,))
        g.outputs = [dg.tanh(x)]
    with pytest.raises(ValueError, match="device='cuda'"):
        capture(g.compile(passes="O2"), {"x": np.zeros(4, np.float32)})


# -- fallback -----------------------------------------------------------------------------------
def test_a_kernel_reading_the_host_falls_back_with_its_reason(ref_cupy):
    """The reference softmax-cross-entropy reads ``valid.all()`` back to the host (the cuda
    backend's own kernel does not): capture fails, the step runs uncaptured, gives the
    uncaptured results and says why."""
    plain, m1, _ = _step("momentum")
    exe, m2, _ = _step("momentum")
    batches = _batches(4)
    step = capture(exe, batches[0], warmup=1)
    assert not step.captured
    assert "StreamCaptureUnsupported" in step.reason and "__bool__" in step.reason
    plain(**batches[0])
    for feeds in batches[1:]:
        want = plain(**feeds)[0]
        np.testing.assert_array_equal(step(feeds, host=True)[0], want)
    _assert_same_params(m1, m2)
    step.replay()                             # runs the executable uncaptured
    plain(**batches[-1])
    _assert_same_params(m1, m2)


# -- state changed after the capture ------------------------------------------------------------
@needs_cxx
@pytest.mark.parametrize("how", ["param_groups", "scheduler"])
def test_a_learning_rate_changed_after_capture_is_seen_by_replays(cupy, how):
    """The learning rate is a host 0-d state read through one device copy; the replay must
    refresh that copy (outside the graph, before the launch) when the host value changes."""
    plain, m1, o1 = _step("momentum")
    exe, m2, o2 = _step("momentum")
    batches = _batches(5)
    step = capture(exe, batches[0], warmup=1)
    assert step.captured, step.reason
    plain(**batches[0])
    if how == "scheduler":
        s1 = dg.optim.lr_scheduler.StepLR(o1, step_size=1, gamma=0.5)
        s2 = dg.optim.lr_scheduler.StepLR(o2, step_size=1, gamma=0.5)
    for k, feeds in enumerate(batches[1:]):
        if how == "param_groups" and k == 1:
            o1.param_groups[0]["lr"] = 0.25
            o2.param_groups[0]["lr"] = 0.25
        np.testing.assert_array_equal(step(feeds, host=True)[0], plain(**feeds)[0])
        _assert_same_params(m1, m2)
        if how == "scheduler":
            s1.step()
            s2.step()
    assert step.captured


@needs_cxx
def test_a_parameter_given_a_new_array_after_capture_is_recaptured(cupy):
    """``p.data = ...`` gives a bound state a new array: the graph bakes the old buffer's
    address, so the step must notice and capture again (never a stale answer)."""
    plain, m1, _ = _step("momentum")
    exe, m2, _ = _step("momentum")
    batches = _batches(4)
    step = capture(exe, batches[0], warmup=1)
    assert step.captured, step.reason
    plain(**batches[0])
    first = step.graph
    for m in (m1, m2):
        w = next(iter(m.parameters()))
        w.data = cupy.asarray(np.full(w.shape, 0.05, np.float32))
    for feeds in batches[1:]:
        np.testing.assert_array_equal(step(feeds, host=True)[0], plain(**feeds)[0])
        _assert_same_params(m1, m2)
    assert step.captured and step.graph is not first
    w2 = next(iter(m2.parameters()))
    assert not np.all(w2.detach().cpu().numpy() == 0.05)        # trained in place


@needs_cxx
def test_an_owned_state_replaced_after_capture_is_recaptured(cupy):
    """``exe.state[name] = value`` replaces a state array the executable owns."""
    def build():
        g = dg.Graph("acc")
        with g:
            x = dg.placeholder("x", (4,))
            acc = dg.variable("acc", np.zeros(4, np.float32))
            new = acc + x * 2.0
            dg.assign(acc, new)
            g.outputs = [dg.sum(new)]
        return g.compile(passes="O2", device="cuda")
    plain, exe = build(), build()
    x = np.arange(4, dtype=np.float32)
    step = capture(exe, {"x": x}, warmup=1)
    assert step.captured, step.reason
    plain(x=x)
    for k in range(3):
        if k == 1:
            plain.state["acc"] = np.full(4, 100.0, np.float32)
            exe.state["acc"] = np.full(4, 100.0, np.float32)
        np.testing.assert_array_equal(step(x=x, host=True)[0], plain(x=x)[0])
        np.testing.assert_array_equal(exe.state["acc"].get(), plain.state["acc"].get())


@needs_cxx
def test_a_replay_bumps_the_versions_of_the_state_it_writes(cupy):
    """An uncaptured step tells each parameter it was written (its version counter, which
    autograd checks); a replay writes them too, so it must say so as well."""
    exe, model, _ = _step("sgd")
    feeds = _batches(1)[0]
    step = capture(exe, feeds)
    assert step.captured, step.reason
    w = next(iter(model.parameters()))
    before = w._version[0]
    step(feeds)
    assert w._version[0] > before


@needs_cxx
def test_failing_to_capture_again_falls_back_and_says_why(cupy, monkeypatch):
    plain, m1, _ = _step("sgd")
    exe, m2, _ = _step("sgd")
    batches = _batches(3)
    step = capture(exe, batches[0], warmup=1)
    plain(**batches[0])
    assert step.captured, step.reason

    def refuse(mode=None):
        raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported", "refused by the test")
    monkeypatch.setattr(step.stream, "begin_capture", refuse)
    for m in (m1, m2):
        b = list(m.parameters())[1]
        b.data = cupy.asarray(np.zeros(b.shape, np.float32))
    for feeds in batches[1:]:
        np.testing.assert_array_equal(step(feeds, host=True)[0], plain(**feeds)[0])
    assert not step.captured
    assert "capturing again after the state" in step.reason
    assert "refused by the test" in step.reason
    _assert_same_params(m1, m2)


@needs_cxx
def test_feeds_are_all_checked_before_any_is_copied_and_numbers_take_the_dtype(cupy):
    g = dg.Graph("scale")
    with g:
        x = dg.placeholder("x", (3,))
        s = dg.placeholder("s", ())
        g.outputs = [x * s]
    exe = g.compile(passes="O2", device="cuda")
    x0 = np.arange(3, dtype=np.float32)
    with pytest.raises(ValueError, match=r"unknown example feed 'z'.*\['s', 'x'\]"):
        capture(exe, {"x": x0, "s": 2.0, "z": x0})
    step = capture(exe, {"x": x0, "s": 2.0})          # a Python float for an f32[] feed
    assert step.captured, step.reason
    np.testing.assert_array_equal(step(host=True)[0], x0 * 2)
    with pytest.raises(ValueError, match="unknown feed 'q'"):
        step(x=x0 + 1, q=1.0)
    np.testing.assert_array_equal(step(host=True)[0], x0 * 2)     # x0 + 1 not copied
    with pytest.raises(ValueError, match=r"feed 's' has float64\[\], expected float32"):
        step(x=x0 + 1, s=np.float64(3.0))
    np.testing.assert_array_equal(step(host=True)[0], x0 * 2)
    # Python numbers and lists take the placeholder's dtype, as the executable's feeds do
    np.testing.assert_array_equal(step(x=[1, 2, 3], s=2, host=True)[0], [2, 4, 6])
    np.testing.assert_array_equal(step(x=[1, 2, 3], s=2, host=True)[0],
                                  exe(x=[1, 2, 3], s=2)[0])
    np.testing.assert_array_equal(step(host=True)[0], [2, 4, 6])


def test_a_seeded_random_op_reads_its_seed_and_falls_back(ref_cupy):
    """A random op seeds the generator from its seed feed on the host: no capture, the
    uncaptured results."""
    g = dg.Graph("noise")
    with g:
        x = dg.placeholder("x", (8,))
        s = dg.placeholder("seed", (), "int64")
        z = x * dg.uniform(8, seed=s)
    exe = g.compile(outputs=[z], passes="O2", device="cuda")
    feeds = {"x": np.linspace(-1, 1, 8).astype(np.float32), "seed": np.int64(5)}
    step = capture(exe, feeds)
    assert not step.captured and "StreamCaptureUnsupported" in step.reason
    for seed in (5, 6):
        feeds["seed"] = np.int64(seed)
        np.testing.assert_array_equal(step(feeds, host=True)[0], exe(**feeds)[0])


@needs_cxx
def test_a_cnn_step_with_batch_norm_gives_the_uncaptured_results(cupy):
    """Conv, batch norm, max pooling and AdamW: the step captures, and replays equal
    uncaptured steps exactly. (The max-pool backward once made a device scalar from a
    Python int per window position, ``xp.asarray(k)``: a host -> device copy, refused
    during capture; it now passes a typed scalar.)"""
    def build():
        dg.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 4)).to("cuda")
        opt = dg.optim.AdamW(model.parameters(), lr=0.01)
        g = dg.Graph("cnn")
        with g:
            x = dg.placeholder("x", (6, 1, 8, 8))
            y = dg.placeholder("y", (6,), "int64")
            loss = nn.functional.cross_entropy(model(x), y)
            opt.minimize(loss)
        g.outputs = [loss]
        return g.compile(passes="O2", device="cuda"), model
    (plain, m1), (exe, m2) = build(), build()
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((6, 1, 8, 8)).astype(np.float32),
                "y": rng.integers(0, 4, 6).astype(np.int64)} for _ in range(4)]
    step = capture(exe, batches[0], warmup=1)
    assert step.captured, step.reason
    plain(**batches[0])
    for feeds in batches[1:]:
        np.testing.assert_array_equal(step(feeds, host=True)[0], plain(**feeds)[0])
    _assert_same_params(m1, m2)


@needs_cxx
def test_load_state_dict_after_capture_writes_in_place_and_replays_see_it(cupy):
    """``Module.load_state_dict`` copies into the parameters' own arrays: the graph keeps
    its capture and reads the loaded values."""
    plain, m1, _ = _step("momentum")
    exe, m2, _ = _step("momentum")
    batches = _batches(3)
    step = capture(exe, batches[0], warmup=1)
    assert step.captured, step.reason
    plain(**batches[0])
    first = step.graph
    rng = np.random.default_rng(5)
    loaded = {k: rng.standard_normal(v.shape).astype(np.float32)
              for k, v in m1.state_dict().items()}
    m1.load_state_dict(loaded)
    m2.load_state_dict(loaded)
    for feeds in batches[1:]:
        np.testing.assert_array_equal(step(feeds, host=True)[0], plain(**feeds)[0])
    _assert_same_params(m1, m2)
    assert step.graph is first and step.graph.launches == 2


@needs_cxx
def test_a_fused_region_run_op_by_op_makes_its_constants_once(cupy):
    """A fused region without a generated kernel (here: softplus has no expr template)
    runs op by op on the device; its constants are device arrays made once, not a host ->
    device copy per run, so the step captures and replays."""
    from duograph.runtime.cuda import fused as cuda_fused
    g = dg.Graph("const_region")
    with g:
        x = dg.placeholder("x", (3, 4))
        y = nn.functional.softplus(x * 3.0 + 1.0) * 2.0
    exe = g.compile(outputs=[y], passes="O2", device="cuda")
    fused = [n for n in exe.nodes if n.op.name == "fused"]
    assert len(fused) == 1
    lay = cuda_fused.layout(fused[0].attrs["sub"])
    assert lay.source is None and lay.constants        # op by op, with constants
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
    step = capture(exe, {"x": feeds[0]}, warmup=1)
    assert step.captured, step.reason
    for f in feeds:
        z = f * np.float32(3.0) + np.float32(1.0)
        want = np.logaddexp(np.float32(0.0), z) * np.float32(2.0)
        np.testing.assert_allclose(step({"x": f}, host=True)[0], want, rtol=1e-5)
