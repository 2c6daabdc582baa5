"""Compiled calls on tiny work: a small fused region of a planned program tiers up to one
numba call (``dg.config.cpu.numba_small_after``), a planned call without state runs one
generated function (``planned.fast_call``), and a repeated ``dg.compile`` call replays its
last specialisation through the executable's prepared call. Each checked for its numbers
against the unfused reference, its cache, its fallbacks and its guards."""
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.errors import FeedError
from duograph.runtime.cpu import fused_numba, numba_support, tier_up

HAVE_NUMBA = numba_support.numba_available()
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")

SCALE, SHIFT = 0.5, 1.0


def chain(x, tanh):
    y = x
    for _ in range(5):
        y = tanh(y * SCALE + SHIFT) * x
    return y


def chain_graph(n=16, exact=False, dtype="float32"):
    """The 20-op chain as a graph (``exact``: tanh replaced by maximum with 0, so every op
    is one numpy computes exactly)."""
    g = dg.Graph("chain20")
    with g:
        x = dg.placeholder("x", (n,), dtype)
        y = chain(x, (lambda v: dg.maximum(v, v * 0.0)) if exact else dg.tanh)
    g.outputs = [y]
    return g


def _x(n=16, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(n).astype(dtype)


def _tiered(exe):
    """The fused step's bound runner (``fused.bind``'s tiered runner)."""
    (step,) = exe.steps.last_program.steps
    return step[3][0]


@pytest.fixture(autouse=True)
def _defaults(tmp_path):
    with dg.config.override(fused_strategy="auto", numba_small_after=100,
                            cache_dir=str(tmp_path / "cache")):
        yield
        assert tier_up.drain(120), "a background compilation did not finish"


@needs_numba
def test_small_region_tiers_up_on_the_nth_call():
    x = _x()
    with dg.config.override(numba_small_after=3):
        exe = chain_graph().compile(passes="O2")
        ref = chain_graph().compile(passes="O0")(x=x)[0]
        first = [exe(x=x)[0] for _ in range(2)]
        runner = _tiered(exe)
        assert runner.state[1] is None           # numpy's plan so far: O0's bits
        for got in first:
            np.testing.assert_array_equal(got, ref)
        exe(x=x)                                 # the third call queues the compilation
        assert runner.state[0] == -1
        assert tier_up.drain(120)
        assert runner.state[1] is not None
        got = exe(x=x)[0]
    # the rational tanh: a few float32 ulp from numpy's
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-7)
    assert got.dtype == np.float32


@needs_numba
def test_small_region_of_exact_ops_gives_numpy_bits():
    """No fast-math flags in small kernels: + * max give exactly the unfused results."""
    x = _x(37)
    with dg.config.override(numba_small_after=1):
        exe = chain_graph(37, exact=True).compile(passes="O2")
        got = [exe(x=x)[0] for _ in range(3)]
    assert _tiered(exe).state[1] is not None
    ref = chain_graph(37, exact=True).compile(passes="O0")(x=x)[0]
    for g in got:
        np.testing.assert_array_equal(g, ref)


@needs_numba
def test_small_kernel_float64_and_scalar_input():
    g = dg.Graph("two")
    with g:
        x = dg.placeholder("x", (3, 5), "float64")
        s = dg.placeholder("s", (), "float64")
        g.outputs = [dg.tanh(x * s + 1.0) - x]
    x, s = _x(15, np.float64).reshape(3, 5), np.float64(0.25)
    want = np.tanh(x * s + 1.0) - x
    with dg.config.override(numba_small_after=1):
        exe = g.compile(passes="O2")
        for _ in range(3):
            got = exe(x=x, s=np.asarray(s))[0]
            np.testing.assert_allclose(got, want, rtol=1e-13)
    assert _tiered(exe).state[1] is not None


@needs_numba
def test_small_kernel_source_is_cached_on_disk(tmp_path, monkeypatch):
    """The kernel's source lands in the cache directory with numba's compiled code beside it
    (so a later process loads instead of compiling); a second executable of the same region
    reuses the loaded kernel."""
    monkeypatch.setattr(fused_numba, "_kernels", {})      # as in a fresh process
    x = _x()
    with dg.config.override(numba_small_after=1):
        chain_graph().compile(passes="O2")(x=x)
        files = sorted(p.name for p in (tmp_path / "cache").rglob("fused_*.py"))
        assert files, "no generated kernel source in the cache directory"
        assert list((tmp_path / "cache").rglob("*.nbi")), "no numba cache index"
        loaded = dict(fused_numba._kernels)
        chain_graph().compile(passes="O2")(x=x)
        assert sorted(p.name for p in (tmp_path / "cache").rglob("fused_*.py")) == files
        assert dict(fused_numba._kernels) == loaded


def test_small_region_stays_on_numpy_without_numba():
    x = _x()
    ref = chain_graph().compile(passes="O0")(x=x)[0]
    with dg.config.override(numba=False, numba_small_after=1):
        exe = chain_graph().compile(passes="O2")
        for _ in range(3):
            np.testing.assert_array_equal(exe(x=x)[0], ref)
    assert _tiered(exe).state[1] is None


@needs_numba
def test_small_kernel_turned_off_after_tier_up_goes_back_to_numpy():
    x = _x()
    ref = chain_graph().compile(passes="O0")(x=x)[0]
    with dg.config.override(numba_small_after=1):
        exe = chain_graph().compile(passes="O2")
        exe(x=x)
        assert _tiered(exe).state[1] is not None
        with dg.config.override(numba=False):
            np.testing.assert_array_equal(exe(x=x)[0], ref)


def test_numba_small_after_zero_never_compiles():
    x = _x()
    with dg.config.override(numba_small_after=0):
        exe = chain_graph().compile(passes="O2")
        for _ in range(5):
            exe(x=x)
    assert _tiered(exe).state[1] is None


@needs_numba
def test_small_kernel_declines_a_strided_feed():
    """A feed of the right shape and dtype but strided: the compiled call (closed to
    C-contiguous arrays) declines it and numpy's plan runs, with the right numbers."""
    base = _x(32)
    x = base[::2]
    ref = chain_graph().compile(passes="O0")(x=np.ascontiguousarray(x))[0]
    with dg.config.override(numba_small_after=1):
        exe = chain_graph().compile(passes="O2")
        exe(x=np.ascontiguousarray(x))
        assert _tiered(exe).state[1] is not None
        np.testing.assert_array_equal(exe(x=x)[0], ref)


def test_bad_option_value_is_named_and_environment_seeds_it():
    from duograph.graphlib.config import Config
    with pytest.raises(ValueError, match="int >= 0"):
        dg.config.cpu.numba_small_after = -1
    assert Config(environ={"DUOGRAPH_NUMBA_SMALL": "5"}).cpu.numba_small_after == 5
    assert Config(environ={}).numba_small_after == 16


# -- the generated prepared call ---------------------------------------------------------------
def test_prepared_call_is_generated_and_reuses_only_dropped_results():
    x = _x()
    exe = chain_graph().compile(passes="O2")
    a = exe(x=x)[0]
    assert hasattr(exe._prepared.call, "source")
    b = exe(x=x)[0]                      # ``a`` is held: a fresh array
    assert a is not b and not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)
    addr = b.__array_interface__["data"][0]
    del b
    gc.collect()
    c = exe(x=x)[0]                      # ``b`` was dropped: its array written again
    assert c.__array_interface__["data"][0] == addr
    assert not np.shares_memory(a, c) and not np.shares_memory(c, x)


def test_prepared_call_refuses_wrong_feeds_with_the_usual_errors():
    exe = chain_graph().compile(passes="O2")
    exe(x=_x())
    with pytest.raises(FeedError, match="dtype float64"):
        exe(x=_x(16, np.float64))
    with pytest.raises(FeedError, match="shape"):
        exe(x=_x(8))
    # Python data is converted by the general path, as before
    np.testing.assert_allclose(exe(x=[0.5] * 16)[0], exe(x=np.full(16, 0.5, np.float32))[0])


def test_prepared_call_of_identity_output_copies():
    """An output that is a feed itself (or the same value twice) is copied, never the
    caller's array or a shared one."""
    g = dg.Graph("ident")
    with g:
        x = dg.placeholder("x", (4,))
        y = dg.tanh(x)
        g.outputs = [x, y, y]
    exe = g.compile(passes="O2")
    xs = _x(4)
    o = exe(x=xs)
    assert o[0] is not xs and not np.shares_memory(o[0], xs)
    assert not np.shares_memory(o[1], o[2])
    np.testing.assert_array_equal(o[1], o[2])


# -- dg.compile's repeated call ------------------------------------------------------------------
def test_compiled_repeat_call_rechecks_guards_and_signature():
    scale = {"v": 0.5}

    def f(t):
        return (t * scale["v"]).tanh() * t

    fast = dg.compile(f, passes="O2")
    x = dg.tensor(_x())
    for _ in range(3):
        np.testing.assert_allclose(fast(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert fast._last.hot is not None
    scale["v"] = 2.0                      # a guarded value changed: recorded again
    np.testing.assert_allclose(fast(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert len(fast.recompile_reasons) == 2
    x8 = dg.tensor(_x(8))                 # another shape: another specialisation
    np.testing.assert_allclose(fast(x8).numpy(), f(x8).numpy(), rtol=1e-6)
    xd = dg.tensor(_x(16, np.float64))    # another dtype
    assert fast(xd).dtype == dg.float64
    xg = dg.tensor(_x(), requires_grad=True)   # requires_grad: a backward is built
    out = fast(xg)
    out.sum().backward()
    assert xg.grad is not None
    assert len(fast.recompile_reasons) == 5


def test_compiled_repeat_call_results_are_fresh_tensors():
    fast = dg.compile(lambda t: (t * 2.0).tanh(), passes="O2")
    x = dg.tensor(_x())
    a = fast(x)
    b = fast(x)
    assert a is not b and not np.shares_memory(a.numpy(), b.numpy())
    assert not np.shares_memory(a.numpy(), x.numpy())
    a.numpy()[...] = 7.0                  # writing a result changes nothing else
    np.testing.assert_allclose(fast(x).numpy(), np.tanh(x.numpy() * 2.0), rtol=1e-6)


def test_region_of_few_ops_never_tiers_up():
    """Below NUMBA_SMALL_MIN_OPS ops a region stays on numpy's plan (too little to save)."""
    g = dg.Graph("short")
    with g:
        x = dg.placeholder("x", (16,))
        g.outputs = [dg.tanh(x * 2.0)]
    assert len(g.nodes) < fused_numba.NUMBA_SMALL_MIN_OPS
    with dg.config.override(numba_small_after=1):
        exe = g.compile(passes="O2")
        for _ in range(3):
            np.testing.assert_array_equal(exe(x=_x())[0], np.tanh(_x() * np.float32(2.0)))
    assert not hasattr(_tiered(exe), "state")


# -- the switch off the caller's path ------------------------------------------------------------
def _calls_until_switch(exe, x, limit_s=120.0):
    """Call ``exe`` until its region runs the compiled kernel: (results, per-call seconds,
    seconds from the call that queued the compilation to the first call after the switch)."""
    results, times = [], []
    runner = None
    queued = None
    deadline = time.perf_counter() + limit_s
    while runner is None or results[-1][1] is None or results[-1][1] == "switching":
        before = None if runner is None else runner.state[1]
        t0 = time.perf_counter()
        out = exe(x=x)[0]
        t1 = time.perf_counter()
        runner = _tiered(exe)
        times.append(t1 - t0)
        if (before is None) != (runner.state[1] is None):
            before = "switching"               # the kernel arrived during this call
        results.append((out, before))
        if queued is None and runner.state[0] == -1:
            queued = t0
        assert t1 < deadline, "the compiled kernel never arrived"
    return results, times, t1 - queued


@needs_numba
def test_switch_does_not_block_the_caller(monkeypatch):
    """The call that reaches ``numba_small_after`` queues the compilation and returns; numpy's
    plan serves every call until the kernel is ready. A compilation on the caller's path
    would make one call as long as the whole wait (measured here, not assumed)."""
    monkeypatch.setattr(fused_numba, "_kernels", {})      # as in a fresh process: compiles
    x = _x()
    ref = chain_graph(exact=True).compile(passes="O0")(x=x)[0]
    with dg.config.override(numba_small_after=2):
        exe = chain_graph(exact=True).compile(passes="O2")
        results, times, waited = _calls_until_switch(exe, x)
    assert len(times) > 3, "the kernel arrived with no call in between: it blocked"
    assert max(times) < waited / 2, (max(times), waited)
    for out, _ in results:                     # + * max: numpy's bits before and after
        np.testing.assert_array_equal(out, ref)
    assert results[-1][1] is not None and results[0][1] is None


@needs_numba
def test_tanh_before_and_after_the_switch_within_the_documented_bound():
    x = _x()
    ref = chain_graph().compile(passes="O0")(x=x)[0]
    with dg.config.override(numba_small_after=2):
        exe = chain_graph().compile(passes="O2")
        results, _, _ = _calls_until_switch(exe, x)
    before = [out for out, fast in results if fast is None]
    after = [out for out, fast in results if fast is not None and fast != "switching"]
    assert before and after
    for out in before:
        np.testing.assert_array_equal(out, ref)
    for out in after:               # the rational tanh: 6 ulp an op, through five of them
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-7)


@needs_numba
def test_two_threads_call_through_the_switch(monkeypatch):
    monkeypatch.setattr(fused_numba, "_kernels", {})
    x = _x()
    ref = chain_graph(exact=True).compile(passes="O0")(x=x)[0]
    with dg.config.override(numba_small_after=2):
        exe = chain_graph(exact=True).compile(passes="O2")
        exe(x=x)
        runner = _tiered(exe)
        bad, seen = [], [set(), set()]

        def loop(k):
            deadline = time.perf_counter() + 120
            while time.perf_counter() < deadline:
                fast = runner.state[1]
                out = exe(x=x)[0]
                seen[k].add(fast is not None)
                if not np.array_equal(out, ref):
                    bad.append(out)
                if fast is not None and len(seen[k]) == 2:
                    break
        threads = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not bad, bad[:3]
    assert seen == [{False, True}, {False, True}]


@needs_numba
def test_exit_with_a_compilation_in_flight(tmp_path):
    """The interpreter exits at once with the compile thread busy: no wait, no traceback."""
    code = (
        "import numpy as np, duograph as dg\n"
        "from duograph.runtime.cpu import tier_up\n"
        "from tests.test_small_fused import chain_graph\n"
        "exe = chain_graph().compile(passes='O2')\n"
        "x = np.ones(16, np.float32)\n"
        "for _ in range(3):\n"
        "    exe(x=x)\n"
        "assert tier_up.pending() == 1, tier_up.pending()\n"
        "print('exiting')\n")
    env = dict(os.environ, DUOGRAPH_NUMBA_SMALL="2", DUOGRAPH_CACHE_DIR=str(tmp_path / "c"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    assert not list((tmp_path / "c").rglob("*.nbi")), f"the exit waited ({took:.1f} s)"


def test_failed_background_compilation_leaves_numpy_with_one_warning(monkeypatch):
    from duograph.runtime.cpu import fused

    def broken(*args):
        raise RuntimeError("no kernel today")
    monkeypatch.setattr(fused, "small_kernel", broken)
    x = _x()
    ref = chain_graph().compile(passes="O0")(x=x)[0]
    with dg.config.override(numba_small_after=2):
        exe = chain_graph().compile(passes="O2")
        with pytest.warns(RuntimeWarning, match="no kernel today") as got:
            for _ in range(3):
                exe(x=x)
            assert tier_up.drain(60)
        for _ in range(3):
            np.testing.assert_array_equal(exe(x=x)[0], ref)
    assert len(got) == 1
    assert _tiered(exe).state == [-1, None]
