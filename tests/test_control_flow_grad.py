"""Control flow, continued: eager calls run the Python functions (one node on the tape and in
dg.record); a bounded while_loop's gradient runs only the trips the forward made; scan's
gradient reads the carries its forward saved instead of running the loop again; region
type checks; the op-table samples of the four ops under dg.compile. References are numpy
loops, finite differences and the same computation unrolled."""
import traceback

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops import control, loops
from duograph.graphlib.ops.control import call_op, scan_op, trace_region, while_op
from duograph.graphlib.types import RUNTIME_DIM, TensorType

from op_samples import BY_NAME, finite_difference, grad_targets, leaves, reference, \
    replace_leaves

RNG = np.random.default_rng(15)
W = RNG.standard_normal((3, 3)) * 0.5
X = RNG.standard_normal(3) * 0.5


def _fd(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


class _Trips:
    """Counts the trips of every while_loop kernel run: eager calls (``loops._while_run``)
    and the region kernel executables run (calls of its prepared body)."""

    def __init__(self, monkeypatch):
        self.runs = []
        orig = loops._while_run

        def wrapper(xp, test, step, as_array, carry, bound, save):
            n = [0]

            def counted(c):
                n[0] += 1
                return step(c)
            self.runs.append(n)
            return orig(xp, test, counted, as_array, carry, bound, save)
        monkeypatch.setattr(loops, "_while_run", wrapper)
        region_kernel = while_op.region_kernel

        def counting_kernel(xp, bodies, *arrays, **attrs):
            if getattr(control._pending, "compute", None) is not None:     # eager: counted
                return region_kernel(xp, bodies, *arrays, **attrs)         # by _while_run
            n = [0]
            self.runs.append(n)

            def counting_bodies(region, args):
                body = bodies(region, args)
                return _Counted(body, n) if region is attrs["body"] else body
            return region_kernel(xp, counting_bodies, *arrays, **attrs)
        monkeypatch.setattr(while_op, "region_kernel", counting_kernel)

    @property
    def trips(self):
        return [n[0] for n in self.runs]


class _Counted:
    def __init__(self, body, n):
        self.body, self.n, self.types = body, n, body.types

    def __call__(self, arrays, out=None):
        self.n[0] += 1
        return self.body(arrays, out)


# -- 1. eager calls run the Python functions ---------------------------------------------------
@pytest.mark.parametrize("taken", [True, False])
def test_eager_cond_runs_the_taken_function_and_records_one_node(taken, capsys):
    seen = []
    w = dg.tensor(W[0], requires_grad=True)

    def yes(a):
        seen.append(("yes", type(a).__name__))
        print("yes ran")
        return dg.sin(a) * w

    def no(a):
        seen.append(("no", type(a).__name__))
        return a * a * w
    x = dg.tensor(X, requires_grad=True)
    with dg.record() as rec:
        y = dg.cond(dg.tensor(taken), yes, no, x)
    # both traced once (on Values), then the taken one ran on eager tensors
    assert seen[:2] == [("yes", "Value"), ("no", "Value")]
    assert seen[2:] == [("yes" if taken else "no", "Tensor")]
    assert capsys.readouterr().out.count("yes ran") == (2 if taken else 1)
    assert [n.op.name for n in rec.nodes] == ["cond"]
    assert y.grad_fn is not None and y.grad_fn.op.name == "cond"
    want = np.sin(X) * W[0] if taken else X * X * W[0]
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12)

    def loss_np(xv):
        return float(np.sum((np.sin(xv) * W[0] if taken else xv * xv * W[0]) ** 2))
    gx, = dg.autograd.grad((y * y).sum(), [x], create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), _fd(loss_np, X), rtol=1e-6, atol=1e-9)
    hx, = dg.autograd.grad(gx.sum(), [x])
    want_h = 2 * np.cos(2 * X) * W[0] ** 2 if taken else 12 * X ** 2 * W[0] ** 2
    np.testing.assert_allclose(hx.numpy(), want_h, rtol=1e-10)


def test_eager_scan_while_and_fori_bodies_run_every_iteration(capsys):
    steps = []

    def body(h, x):
        steps.append(type(h).__name__)
        print("step")
        return dg.tanh(h + x), h * 2.0
    xs = dg.tensor(RNG.standard_normal((4, 3)))
    with dg.record() as rec:
        h, ys = dg.scan(body, dg.tensor(np.zeros(3)), xs)
    assert steps == ["Value"] + ["Tensor"] * 4
    assert capsys.readouterr().out.count("step") == 5
    assert [n.op.name for n in rec.nodes] == ["scan"]

    trips = []

    def wbody(v):
        trips.append(type(v).__name__)
        return v * 1.5

    with dg.record() as rec:
        v = dg.while_loop(lambda v: dg.sum(v) < 10.0, wbody, dg.tensor(np.ones(2)))
    np.testing.assert_allclose(v.numpy(), np.full(2, 1.5 ** 4))
    assert trips == ["Value"] + ["Tensor"] * 4
    assert [n.op.name for n in rec.nodes] == ["while_loop"]

    seen = []

    def fbody(i, v):
        seen.append(int(i.item()) if hasattr(i, "item") and type(i).__name__ == "Tensor"
                    else "traced")
        return v + i

    out = dg.fori_loop(2, 5, fbody, dg.tensor(np.zeros(2)))
    np.testing.assert_allclose(out.numpy(), np.full(2, 9.0))
    assert seen == ["traced", 2, 3, 4]


def test_an_eager_body_that_changes_its_result_is_a_clear_error():
    calls = [0]

    def body(h, x):
        calls[0] += 1
        return (h + x, h) if calls[0] < 3 else (h + x, h[:2])
    with pytest.raises(dg.GraphError, match=r"scan: the y leaf 0 of .*body.* when run eagerly"):
        dg.scan(body, dg.tensor(np.zeros(3)), dg.tensor(np.ones((4, 3))))


# -- 2. bounded while_loop: the gradient runs the trips the forward made -------------------------
def _while(w, x, bound, limit):
    def cond_fn(s):
        return s[0] < limit

    def body_fn(s):
        i, h = s
        return i + 1, dg.tanh(dg.matmul(w, h) + x)
    zero = dg.zeros((), dtype="int64") if isinstance(w, dg.Value) else dg.tensor(np.array(0))
    i, h = dg.while_loop(cond_fn, body_fn, (zero, x), max_iterations=bound)
    return dg.sum(h * h), i


def _unrolled(w, x, trips):
    h = x
    for _ in range(trips):
        h = dg.tanh(dg.matmul(w, h) + x)
    return dg.sum(h * h)


def _while_np(w, x, trips):
    h = x
    for _ in range(trips):
        h = np.tanh(w @ h + x)
    return float(np.sum(h * h))


@pytest.mark.parametrize("limit, bound", [(3, 40), (1, 40), (7, 4), (3, 10**12)])
def test_bounded_while_eager_gradient_runs_only_the_trips(monkeypatch, limit, bound):
    trips = min(limit, bound)
    got = []
    for f in ("while", "unrolled"):
        w = dg.tensor(W, requires_grad=True)
        x = dg.tensor(X, requires_grad=True)
        loss = _while(w, x, bound, limit)[0] if f == "while" else _unrolled(w, x, trips)
        counter = _Trips(monkeypatch)
        gw, gx = dg.autograd.grad(loss, [w, x], create_graph=True)
        if f == "while":
            node = loss.grad_fn
            while node.op.name != "while_loop":       # sum <- mul <- while_loop
                node = node.inputs[0].grad_fn
            assert node.attrs["save"] is True
            # one reverse loop of one step per trip (not per bound)
            assert counter.trips == [trips]
        monkeypatch.undo()
        hw, = dg.autograd.grad((gw * gw).sum() + gx.sum(), [w])
        got.append([t.detach().numpy() for t in (loss, gw, gx, hw)])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got[0][1], _fd(lambda v: _while_np(v, X, trips), W),
                               rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("level", ["O0", "O2"])
@pytest.mark.parametrize("limit, bound", [(3, 40), (7, 4), (3, 10**12)])
def test_bounded_while_graph_gradient_saves_the_trip_count(monkeypatch, level, limit, bound):
    trips = min(limit, bound)
    outs = {}
    for f in ("while", "unrolled"):
        g = dg.Graph(f"w_{f}")
        with g:
            wv = dg.placeholder("w", (3, 3), "float64")
            xv = dg.placeholder("x", (3,), "float64")
            loss = _while(wv, xv, bound, limit)[0] if f == "while" else _unrolled(
                wv, xv, trips)
            gw, gx = dg.grad(loss, [wv, xv])
            hw, = dg.grad(dg.sum(gw * gw) + dg.sum(gx), [wv])
        if f == "while":
            fwd = next(n for n in g.nodes if n.op is while_op)
            assert fwd.attrs["save"] and fwd.outputs[2].type == TensorType((), "int64")
            # one saved row per trip made, a size only known at run time (not the bound)
            assert fwd.outputs[3].shape == (RUNTIME_DIM,)
            assert fwd.outputs[4].shape == (RUNTIME_DIM, 3)
            exe = g.compile(outputs=fwd.outputs[2:], passes=level)
            count, saved_h, saved_x = exe(w=W, x=X)
            assert int(count) == trips and saved_h.shape == (trips,)
            assert saved_x.shape == (trips, 3)
        exe = g.compile(outputs=[loss, gw, gx, hw], passes=level)
        counter = _Trips(monkeypatch)
        outs[f] = exe(w=W, x=X)
        if f == "while":
            # the forward, its reverse loop and the loops of the second order: each ran the
            # forward's trips, none ran to the bound
            assert len(counter.trips) >= 3 and set(counter.trips) == {trips}, counter.trips
        monkeypatch.undo()
    for a, b in zip(outs["while"], outs["unrolled"]):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(outs["while"][1], _fd(lambda v: _while_np(v, X, trips), W),
                               rtol=1e-6, atol=1e-9)


def _geometric(x, limit, bound):
    """x * 1.5 ** min(limit, bound), as a while_loop of that many trips."""
    zero = dg.zeros((), dtype="int64") if isinstance(x, dg.Value) else dg.tensor(np.array(0))
    i, h = dg.while_loop(lambda s: s[0] < limit, lambda s: (s[0] + 1, s[1] * 1.5),
                         (zero, x), max_iterations=bound)
    return h


@pytest.mark.parametrize("mode", ["eager", "compiled", "compiled_O2", "O0", "O2"])
def test_a_huge_bound_costs_nothing_the_saved_rows_grow_with_the_trips(mode):
    """Issue 23: max_iterations=N with a gradient reserved N rows up front (1e9 asked for
    7.45 GiB for a 3-trip loop). The rows grow with the trips made: a bound of 10**12
    (8 TB of rows for a 2-float carry) runs in a few kB, with the unbounded loop's values."""
    import tracemalloc
    bound, x0 = 10**12, np.array([1.0, -2.0])
    tracemalloc.start()
    try:
        if mode in ("eager", "compiled", "compiled_O2"):
            def f(x):
                return dg.sum(_geometric(x, 3, bound) ** 2)
            x = dg.tensor(x0, requires_grad=True)
            # compiled_O2: the recorded loop's saved rows keep the run-time trip count as
            # their type (it was the recorded run's 3, which O2's verify refused)
            fn = dg.compile(f, passes="O2" if mode == "compiled_O2" else None) \
                if mode.startswith("compiled") else f
            for _ in range(2):                   # compiled: recorded, then replayed
                x.grad = None
                loss = fn(x)
                loss.backward()
            got = [loss.detach().numpy(), x.grad.numpy()]
        else:
            g = dg.Graph("huge_bound")
            with g:
                xv = dg.placeholder("x", (2,), "float64")
                loss = dg.sum(_geometric(xv, 3, bound) ** 2)
                gx, = dg.grad(loss, [xv])
            exe = g.compile(outputs=[loss, gx], passes=mode)
            got = [exe(x=x0) for _ in range(2)][-1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got[0], np.sum((x0 * 1.5 ** 3) ** 2), rtol=1e-12)
    np.testing.assert_allclose(got[1], 2 * x0 * 1.5 ** 6, rtol=1e-12)
    assert peak < 32 * 2**20, f"{mode}: {peak} bytes traced for a 3-trip loop"


def _while_in_scan(w, xs, h0, bound):
    """A bounded while_loop of 3 trips inside each step of a scan."""
    def step(h, x):
        def body(s):
            return s[0] + 1, dg.tanh(dg.matmul(w, s[1]) + x)
        zero = dg.zeros((), dtype="int64") if isinstance(w, dg.Value) else dg.tensor(np.array(0))
        _, v = dg.while_loop(lambda s: s[0] < 3, body, (zero, h), max_iterations=bound)
        return v, dg.sum(v)
    return dg.scan(step, h0, xs)[1]


def test_a_huge_bound_inside_a_scan_differentiates_twice_in_every_mode():
    """The saved rows, of a size known only at run time, flow through a scan's reverse loop
    and a second-order gradient, interpreted and planned, as eagerly."""
    w0 = RNG.standard_normal((2, 2)) * 0.5
    xs0, h00 = RNG.standard_normal((4, 2)), RNG.standard_normal(2)
    w = dg.tensor(w0, requires_grad=True)
    ys = _while_in_scan(w, dg.tensor(xs0), dg.tensor(h00), 10**12)
    gw, = dg.autograd.grad(ys.sum(), [w], create_graph=True)
    hw, = dg.autograd.grad((gw * gw).sum(), [w])
    want = [gw.detach().numpy(), hw.numpy()]

    def loss_np(v):
        h, total = h00, 0.0
        for x in xs0:
            for _ in range(3):
                h = np.tanh(v @ h + x)
            total += h.sum()
        return total
    np.testing.assert_allclose(want[0], _fd(loss_np, w0), rtol=1e-6, atol=1e-9)
    g = dg.Graph("while_in_scan")
    with g:
        wv = dg.placeholder("w", (2, 2), "float64")
        ys = _while_in_scan(wv, dg.placeholder("xs", (4, 2), "float64"),
                            dg.placeholder("h0", (2,), "float64"), 10**12)
        gwv, = dg.grad(dg.sum(ys), [wv])
        hwv, = dg.grad(dg.sum(gwv * gwv), [wv])
    for level in ("O0", "O1", "O2"):
        got = g.compile(outputs=[gwv, hwv], passes=level)(w=w0, xs=xs0, h0=h00)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("mode", ["eager", "O0", "O2"])
@pytest.mark.parametrize("trips", [0, 1, 5, 37])
def test_saved_rows_are_the_carries_entering_each_trip_however_many(mode, trips):
    """The saved rows grow by doubling across many trips (37 crosses six doublings) and hold
    the carry entering each trip, T rows exactly (none for a loop that made no trip)."""
    x0 = np.array([1.0, -2.0])
    want_h = x0 * 1.5 ** np.arange(trips)[:, None]
    if mode == "eager":
        x = dg.tensor(x0, requires_grad=True)
        h = _geometric(x, trips, 1000)
        node = h.grad_fn
        assert node.attrs["save"] is True
        saved = [o.detach().numpy() for o in node.outputs[2:]]
    else:
        g = dg.Graph("rows")
        with g:
            xv = dg.placeholder("x", (2,), "float64")
            h = _geometric(xv, trips, 1000)
            dg.grad(dg.sum(h), [xv])
        fwd = next(n for n in g.nodes if n.op is while_op)
        exe = g.compile(outputs=fwd.outputs[2:], passes=mode)
        saved = exe(x=x0)
        if mode == "O2":         # left to the kernel, never given arena bytes
            plan = exe.memory_plan
            assert sorted(v.shape for v in plan.dynamic) == [(RUNTIME_DIM,), (RUNTIME_DIM, 2)]
            assert all(plan.storage(v) == ("kernel", None) for v in plan.dynamic)
    count, rows_i, rows_h = saved
    assert int(count) == trips
    np.testing.assert_array_equal(rows_i, np.arange(trips))
    np.testing.assert_allclose(rows_h, want_h, rtol=1e-15)
    assert rows_h.shape == (trips, 2) and rows_i.dtype == np.int64


def test_grown_doubles_the_capacity_only_when_full():
    rows = np.empty((0, 3))
    capacities = []
    for t in range(9):
        rows = control._grown(np, rows, t)
        rows[t] = t
        capacities.append(rows.shape[0])
    assert capacities == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    np.testing.assert_array_equal(rows[:9, 0], np.arange(9.0))


def test_a_placeholder_may_not_use_the_run_time_dim():
    with dg.Graph("bad"):
        with pytest.raises(ValueError, match=r"placeholder 'x'.*reserved.*while_loop"):
            dg.placeholder("x", (RUNTIME_DIM, 2))


# -- 2b. an exception from a loop body keeps its type ----------------------------------------------
class _Boom(Exception):
    """A user's exception type, not one duograph knows."""


def _failing(fail_at, exc):
    """A body that raises ``exc`` on its ``fail_at``-th eager call (the trace is not one)."""
    calls = [0]

    def body(s):
        i, h = s
        if isinstance(h, dg.Tensor):
            calls[0] += 1
            if calls[0] == fail_at:
                raise exc(f"user error on call {calls[0]}")
        return i + 1, h * 2.0
    return body


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("exc", [ValueError, KeyError, _Boom, dg.ShapeError])
@pytest.mark.parametrize("fail_at", [1, 3])
def test_an_exception_from_a_while_body_keeps_its_type_on_every_trip(fail_at, exc, grad):
    """Issue 23: a body's exception kept its type on trip 1 but became a KernelError on trip
    3. PyTorch runs the Python as it is: the user's exception comes out, on every trip."""
    x = dg.tensor(np.ones(2), requires_grad=grad)
    with pytest.raises(exc, match="user error on call") as info:
        dg.while_loop(lambda s: s[0] < 5, _failing(fail_at, exc),
                      (dg.tensor(np.array(0)), x), max_iterations=10 if grad else None)
    assert not isinstance(info.value, dg.KernelError) or exc is dg.KernelError
    notes = getattr(info.value, "__notes__", None)
    if notes is not None:                            # Python 3.11+: where it happened
        assert any("body_fn" in n and f"on trip {fail_at}" in n for n in notes), notes
    # the user's own line is in the traceback
    assert any(t.name == "body" for t in traceback.extract_tb(info.value.__traceback__))


def test_exceptions_from_cond_fn_scan_fori_and_cond_bodies_keep_their_types():
    calls = [0]

    def cond_fn(s):
        if isinstance(s, dg.Tensor):
            calls[0] += 1
            if calls[0] == 3:
                raise LookupError("cond_fn says no")
        return dg.sum(s) < 100.0
    with pytest.raises(LookupError, match="cond_fn says no"):
        dg.while_loop(cond_fn, lambda s: s * 2.0, dg.tensor(np.ones(2)))

    def step(c, x):
        if isinstance(c, dg.Tensor) and float(x.sum()) > 2.5:
            raise ZeroDivisionError("step 3")
        return c + x, c
    xs = dg.tensor(np.arange(8.0).reshape(4, 2) / 2)
    with pytest.raises(ZeroDivisionError, match="step 3"):
        dg.scan(step, dg.tensor(np.zeros(2)), xs)

    def fbody(i, v):
        if isinstance(v, dg.Tensor) and int(i) == 2:
            raise _Boom("fori trip 2")
        return v + 1.0
    with pytest.raises(_Boom, match="fori trip 2"):
        dg.fori_loop(0, 4, fbody, dg.tensor(np.zeros(2)))

    def branch(v):
        if isinstance(v, dg.Tensor):
            raise TypeError("eager branch")
        return v * 2.0
    with pytest.raises(TypeError, match="eager branch"):
        dg.cond(dg.tensor(np.array(True)), branch, lambda v: v, dg.tensor(np.ones(2)))


def test_an_exception_from_a_compiled_while_body_keeps_its_type():
    body = _failing(2, _Boom)

    @dg.compile
    def f(x):
        return dg.while_loop(lambda s: s[0] < 5, body, (dg.tensor(np.array(0)), x))[1]
    with pytest.raises(_Boom, match="user error on call 2"):
        f(dg.tensor(np.ones(2)))


# -- 3. scan: the gradient reads the saved carries -----------------------------------------------
def _rnn(w):
    def step(h, x):
        h = dg.tanh(dg.matmul(h, w) + x)
        return h, h * 2.0
    return step


def _rnn_np(w, xs, h, reverse=False):
    ys = [None] * len(xs)
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = np.tanh(h @ w + xs[t])
        ys[t] = h * 2.0
    return float(np.sum(np.stack(ys) ** 2) + np.sum(np.sin(h)))


class _Loops:
    """Counts the loops every scan kernel runs, by length: eager calls
    (``loops._scan_loop``) and the region kernel executables run."""

    def __init__(self, monkeypatch):
        self.lengths = []
        orig = loops._scan_loop

        def wrapper(xp, step, as_array, carry, length, *rest):
            self.lengths.append(length)
            return orig(xp, step, as_array, carry, length, *rest)
        monkeypatch.setattr(loops, "_scan_loop", wrapper)
        region_kernel = scan_op.region_kernel

        def counting_kernel(xp, bodies, *arrays, **attrs):
            if getattr(control._pending, "compute", None) is None:     # not eager
                self.lengths.append(attrs["length"])
            return region_kernel(xp, bodies, *arrays, **attrs)
        monkeypatch.setattr(scan_op, "region_kernel", counting_kernel)


@pytest.mark.parametrize("reverse", [False, True])
def test_eager_scan_gradient_does_not_run_the_forward_again(monkeypatch, reverse):
    xs0 = RNG.standard_normal((6, 3))
    got = []
    for how in ("scan", "unrolled"):
        w = dg.tensor(W, requires_grad=True)
        xs = dg.tensor(xs0, requires_grad=True)
        h = dg.tensor(np.zeros(3))
        loops = _Loops(monkeypatch)
        if how == "scan":
            h, ys = dg.scan(_rnn(w), h, xs, reverse=reverse)
            assert ys.grad_fn.attrs["save"] is True       # the tape node saved its carries
        else:
            order = range(5, -1, -1) if reverse else range(6)
            yl = [None] * 6
            for t in order:
                h, yl[t] = _rnn(w)(h, xs[t])
            ys = dg.stack(yl)
        loss = (ys * ys).sum() + dg.sin(h).sum()
        gw, gx = dg.autograd.grad(loss, [w, xs], create_graph=True)
        if how == "scan":
            assert loops.lengths == [6, 6]        # the forward, then the reverse scan only
        monkeypatch.undo()
        hw, = dg.autograd.grad((gw * gw).sum() + (gx * gx).sum(), [w])
        got.append([t.detach().numpy() for t in (loss, gw, gx, hw)])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got[0][1], _fd(lambda v: _rnn_np(v, xs0, np.zeros(3), reverse),
                                              W), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("level", ["O0", "O2"])
def test_graph_scan_gradient_reads_the_saved_carries(monkeypatch, checkpoint, level):
    length = 10
    xs0 = RNG.standard_normal((length, 3))
    g = dg.Graph("saved")
    with g:
        wv = dg.placeholder("w", (3, 3), "float64")
        xv = dg.placeholder("xs", (length, 3), "float64")
        h, ys = dg.scan(_rnn(wv), dg.zeros(3, dtype="float64"), xv, checkpoint=checkpoint)
        loss = dg.sum(ys * ys) + dg.sum(dg.sin(h))
        fwd = h.node
        assert "save" not in fwd.attrs and len(fwd.outputs) == 2
        gw, = dg.grad(loss, [wv])
        # taking the gradient made the forward node save its carries (every step's, or
        # with checkpoint the starts of k = 3 segments and the carry at step 9)
        assert fwd.attrs["save"] is True and len(fwd.outputs) == 3
        assert fwd.outputs[2].shape == ((4, 3) if checkpoint else (length, 3))
        hw, = dg.grad(dg.sum(gw * gw), [wv])
    loops = _Loops(monkeypatch)
    g.compile(outputs=[loss, gw], passes=level)(w=W, xs=xs0)
    # the first-order gradient runs no loop over all the steps but the forward's and
    # (without checkpoint) the reverse scan's: the forward does not run again; with
    # checkpoint the backward loops over m = 3 segments, recomputing k = 3 steps in each
    # (and the remaining step)
    assert loops.lengths[0] == length
    if checkpoint:
        assert loops.lengths.count(length) == 1 and max(loops.lengths[1:]) == 3, loops.lengths
    else:
        assert loops.lengths == [length, length]
    del loops.lengths[:]
    got = g.compile(outputs=[loss, gw, hw], passes=level)(w=W, xs=xs0)
    if not checkpoint:      # + the second order: the reverse scans of both loops
        assert loops.lengths == [length] * 4
    monkeypatch.undo()
    np.testing.assert_allclose(got[1], _fd(lambda v: _rnn_np(v, xs0, np.zeros(3)), W),
                               rtol=1e-6, atol=1e-9)
    # the same graph unrolled: equal values, gradients and second-order gradients
    u = dg.Graph("unrolled")
    with u:
        wv = dg.placeholder("w", (3, 3), "float64")
        xv = dg.placeholder("xs", (length, 3), "float64")
        h, yl = dg.zeros(3, dtype="float64"), []
        for t in range(length):
            h, y = _rnn(wv)(h, xv[t])
            yl.append(y)
        ys = dg.stack(yl)
        loss = dg.sum(ys * ys) + dg.sum(dg.sin(h))
        gw, = dg.grad(loss, [wv])
        hw, = dg.grad(dg.sum(gw * gw), [wv])
    want = u.compile(outputs=[loss, gw, hw], passes=level)(w=W, xs=xs0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# -- 4. region type checks ----------------------------------------------------------------------
def my_body(a, b):
    return dg.tanh(a) + b


def test_region_infer_checks_shapes_symbols_and_dtypes():
    region = trace_region(my_body, [TensorType(("N", 3), "float64")] * 2, "my_body")
    g = dg.Graph("outer")
    with g:
        x = dg.placeholder("x", (4, 3), "float64")
        y = dg.placeholder("y", (5, 3), "float64")
        z = dg.placeholder("z", (4, 2), "float64")
        f = dg.placeholder("f", (4, 3), "float32")
        out, = call_op(x, x, body=region)           # N = 4 for both inputs
        assert out.shape == (4, 3)
        with pytest.raises(dg.ShapeError, match=r"region 'my_body' input 1 \(i1\) expects "
                           r"shape \[N,3\], found \[5,3\](.|\n)*test_control_flow_grad"):
            call_op(x, y, body=region)              # N cannot be 4 and 5
        with pytest.raises(dg.ShapeError, match=r"input 0 \(i0\) expects shape \[N,3\], "
                                                r"found \[4,2\]"):
            call_op(z, z, body=region)
        with pytest.raises(dg.DTypeError, match=r"region 'my_body' input 0 \(i0\) expects "
                                                r"dtype float64, found float32"):
            call_op(f, f, body=region)
    fixed = trace_region(my_body, [TensorType((4, 3), "float64")] * 2, "my_body")
    with g:
        with pytest.raises(dg.ShapeError, match=r"expects shape \[4,3\], found \[5,3\]"):
            call_op(y, y, body=fixed)


def test_a_loop_node_with_a_wrong_body_is_refused_naming_the_function():
    def step(h, x):
        return h + x, h
    g = dg.Graph("bad")
    with g:
        h = dg.placeholder("h", (3,), "float64")
        xs = dg.placeholder("xs", (4, 3), "float64")
        _, ys = dg.scan(step, h, xs)
        body = ys.node.attrs["body"]
        h2 = dg.placeholder("h2", (2,), "float64")
        with pytest.raises(dg.ShapeError, match=r"scan: region 'scan_step' input 0 \(i0\) "
                                                r"expects shape \[3\], found \[2\]"):
            scan_op(h2, xs, body=body, length=4, n_carry=1, n_xs=1)


# -- 5. the op-table samples of the control-flow ops under dg.compile ---------------------------
CF_SAMPLES = [(BY_NAME[n], s) for n in ("cond", "scan", "while_loop", "fori_loop")
              for s in BY_NAME[n].samples]


@pytest.mark.parametrize("op, sample", CF_SAMPLES, ids=lambda v: getattr(v, "name", None))
def test_control_flow_samples_under_compile_equal_eager_and_numpy(op, sample):
    arrays = leaves(sample.args, sample.kwargs)
    targets = grad_targets(op, sample)

    def run(*tensors):
        args, kwargs = replace_leaves(sample.args, sample.kwargs, tensors)
        out = op.fn(*args, **kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    fast = dg.compile(run)
    for k in range(2):          # the second call replays the recording on other data
        data = [a if k == 0 or a.dtype.kind != "f" else
                (a + 0.01 * RNG.standard_normal(a.shape)).astype(a.dtype) for a in arrays]
        want = reference(op, sample, data)
        tensors = [dg.tensor(a, requires_grad=(i in targets)) for i, a in enumerate(data)]
        got = fast(*tensors)
        eager = run(*[dg.tensor(a) for a in data])
        for g_, e, w in zip(got, eager, want):
            rtol, atol = op.tol[w.dtype.name] if w.dtype.kind == "f" else (0, 0)
            np.testing.assert_allclose(g_.detach().numpy(), w, rtol=rtol, atol=atol)
            np.testing.assert_allclose(e.detach().numpy(), w, rtol=rtol, atol=atol)
        if not targets:
            continue
        loss = None
        for o in got:
            if o.dtype == "float64":
                term = (dg.tanh(o) * o).sum()
                loss = term if loss is None else loss + term
        loss.backward()

        def f(arrs):
            return sum(float(np.sum(np.tanh(o) * o)) for o in reference(op, sample, arrs)
                       if o.dtype == np.float64)
        for i in targets:
            np.testing.assert_allclose(tensors[i].grad.numpy(), finite_difference(f, data, i),
                                       rtol=1e-5, atol=1e-7)
    assert len(fast.specializations) == 1, fast.specializations


def test_a_node_that_saved_nothing_still_gets_its_gradient_by_recomputing():
    """A vjp called on eager tensors of a node built without ``save`` (no tape node can be
    upgraded afterwards) recomputes what it needs: the same cotangents as the saving node."""
    g = dg.Graph("both")
    with g:
        wv = dg.placeholder("w", (3, 3), "float64")
        xv = dg.placeholder("x", (3,), "float64")
        xs = dg.placeholder("xs", (4, 3), "float64")
        _while(wv, xv, 6, 3)
        dg.scan(_rnn(wv), xv, xs)
    xs0 = RNG.standard_normal((4, 3))
    feeds = {"w": W, "x": X, "xs": xs0}
    for node in [n for n in g.nodes if n.op in (while_op, scan_op)]:
        plain = dict(node.attrs)
        saving = dict(plain, save=True)
        sub = dg.Graph("one")
        with sub:
            ins = [dg.placeholder(f"in{k}", v.shape, v.dtype)
                   for k, v in enumerate(node.inputs)]
            outs = node.op(*ins, **saving)
        names = [v.name for v in ins]
        got_ins = g.compile(outputs=list(node.inputs))(**feeds)
        got_outs = sub.compile(outputs=list(outs))(**dict(zip(names, got_ins)))
        n_plain = len(node.outputs)
        rng = np.random.default_rng(3)
        cts = [rng.standard_normal(o.shape) if o.dtype.kind == "f" else np.zeros_like(o)
               for o in got_outs]
        needs = [a.dtype.kind == "f" for a in got_ins]
        t = lambda arrays: [dg.tensor(a) for a in arrays]       # noqa: E731
        zero_saved = cts[:n_plain] + [np.zeros_like(c) for c in cts[n_plain:]]
        with_saved = node.op.vjp(t(zero_saved), t(got_ins), t(got_outs), saving, needs)
        recomputed = node.op.vjp(t(cts[:n_plain]), t(got_ins), t(got_outs[:n_plain]), plain,
                                 needs)
        for a, b in zip(with_saved, recomputed):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
