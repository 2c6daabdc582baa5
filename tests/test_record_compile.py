"""record() captures eager code as the same IR; compile() replays it under guards."""
import re

import numpy as np
import pytest

import duograph as dg


def _mlp_params(seed=0):
    rng = np.random.default_rng(seed)
    x = dg.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    w1 = dg.tensor(rng.standard_normal((4, 16)).astype(np.float32), requires_grad=True)
    b1 = dg.tensor(np.zeros(16, np.float32), requires_grad=True)
    w2 = dg.tensor(rng.standard_normal((16, 1)).astype(np.float32), requires_grad=True)
    return x, w1, b1, w2


def _mlp_loss(x, w1, b1, w2):
    h = dg.tanh(x @ w1 + b1)
    return ((h @ w2) ** 2).mean()


def test_record_mlp_forward_backward_matches_eager():
    x, w1, b1, w2 = _mlp_params()
    with dg.record(names={"x": x, "w1": w1, "b1": b1, "w2": w2}) as rec:
        loss = _mlp_loss(x, w1, b1, w2)
        loss.backward()
    g = rec.graph
    g.verify()
    assert [v.name for v in g.inputs] == ["x"]
    assert sorted(v.name for v in g.state) == ["b1", "w1", "w2"]
    text = str(g)
    assert "matmul(%x, %w1)" in text and "tanh" in text
    assert "test_record_compile.py" in g.to_text(source=True)
    exe = g.compile(outputs=[rec.value(loss), rec.value(w1.grad), rec.value(b1.grad),
                             rec.value(w2.grad)])
    lv, g1, gb, g2 = exe(**rec.feeds())
    np.testing.assert_allclose(lv, loss.item(), rtol=1e-6)
    np.testing.assert_allclose(g1, w1.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gb, b1.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g2, w2.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_recorded_graph_runs_on_new_inputs_like_eager():
    x, w1, b1, w2 = _mlp_params()
    with dg.record(names={"x": x}) as rec:
        out = dg.softmax(x @ w1 + b1, dim=1)
    exe = rec.graph.compile(outputs=[rec.value(out)])
    x2 = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    (got,) = exe(x=x2)
    want = dg.softmax(dg.tensor(x2) @ w1 + b1, dim=1)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-6)


def test_record_outputs_default_to_unconsumed_values():
    a = dg.tensor([1.0, 2.0])
    with dg.record() as rec:
        b = a * 2
        c = b + 1
    assert len(rec.graph.outputs) == 1
    assert rec.graph.outputs[0] is rec.value(c)
    with pytest.raises(dg.GraphError, match="neither made inside"):
        rec.value(dg.tensor([0.0]))


def test_compile_matches_eager_values_and_gradients():
    x, w1, b1, w2 = _mlp_params()
    fast = dg.compile(_mlp_loss)
    for _ in range(3):
        for p in (w1, b1, w2):
            p.grad = None
        loss = fast(x, w1, b1, w2)
        loss.backward()
        got = [p.grad.numpy().copy() for p in (w1, b1, w2)]
        for p in (w1, b1, w2):
            p.grad = None
        ref = _mlp_loss(x, w1, b1, w2)
        ref.backward()
        np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-6)
        for a, b, p in zip(got, (w1.grad, b1.grad, w2.grad), (w1, b1, w2)):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-7)
        with dg.no_grad():      # a training step changes parameters: compile must see it
            for p in (w1, b1, w2):
                p.sub_(p.grad * 0.1)
    assert len(fast) == 1


def test_compile_reads_closure_parameters_live():
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    fast = dg.compile(lambda x: (x * w).sum())
    x = dg.tensor([3.0, 4.0])
    assert fast(x).item() == 11.0
    with dg.no_grad():
        w.mul_(10)
    assert fast(x).item() == 110.0


def test_compile_guards_on_value_dependent_branch():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x * -3

    fast = dg.compile(f)
    pos, neg = dg.tensor([1.0, 2.0]), dg.tensor([-1.0, -2.0])
    assert fast(pos).tolist() == [2.0, 4.0]
    assert fast(neg).tolist() == [3.0, 6.0]     # would be [-2, -4] if the trace were reused
    assert fast(pos).tolist() == [2.0, 4.0]
    assert fast(neg).tolist() == [3.0, 6.0]
    assert len(fast) == 2
    assert fast.recompile_reasons[0] == "first call"
    assert "guard failed: bool()" in fast.recompile_reasons[1]
    assert "test_record_compile.py" in fast.recompile_reasons[1]


def test_compile_guards_on_while_loop_and_item():
    def grow(x):
        while x.sum() < 100:
            x = x * 2
        return x

    fast = dg.compile(grow)
    assert fast(dg.tensor([1.0, 2.0])).tolist() == [64.0, 128.0]
    assert fast(dg.tensor([1.0, 2.0])).tolist() == [64.0, 128.0]
    assert fast(dg.tensor([30.0, 40.0])).tolist() == [60.0, 80.0]
    assert fast(dg.tensor([3.0, 4.0])).tolist() == [48.0, 64.0]   # 4 doublings, not 6

    def scale(x):
        return x * int(x.amax().item())

    fs = dg.compile(scale)
    assert fs(dg.tensor([1.0, 3.0])).tolist() == [3.0, 9.0]
    assert fs(dg.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]


def test_compile_respecializes_on_shape_dtype_and_grad_mode():
    fast = dg.compile(lambda x: (x * x).sum())
    fast(dg.ones(2, 3))
    fast(dg.ones(2, 3))
    fast(dg.ones(4, 3))
    fast(dg.ones(4, 3, dtype="float64"))
    with dg.no_grad():
        fast(dg.ones(4, 3, dtype="float64"))
    reasons = fast.recompile_reasons
    assert reasons[0] == "first call"
    assert "shape (2, 3) -> (4, 3)" in reasons[1]
    assert "dtype float32 -> float64" in reasons[2]
    assert "grad mode" in reasons[3]
    assert len(fast.specializations) == 4


def test_compile_cache_is_bounded():
    fast = dg.compile(lambda x: x + 1, max_specializations=3)
    for n in range(1, 7):
        fast(dg.ones(n))
    assert len(fast) == 3
    assert len(fast.recompile_reasons) == 6


def test_compile_multiple_outputs_and_containers():
    def f(x, y, scale=2.0):
        return {"sum": (x + y) * scale, "parts": [x * scale, y.exp()]}

    fast = dg.compile(f)
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = dg.tensor([0.5, 0.0], requires_grad=True)
    for _ in range(2):
        x.grad = y.grad = None
        out = fast(x, y, scale=3.0)
        total = out["sum"].sum() + out["parts"][0].sum() + out["parts"][1].sum()
        total.backward()
        np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
        np.testing.assert_allclose(y.grad.numpy(), 3.0 + np.exp([0.5, 0.0]), rtol=1e-6)
    fast(x, y, scale=4.0)
    assert "argument scale: 3.0 -> 4.0" in fast.recompile_reasons[-1]


def test_compile_identity_gradient():
    fast = dg.compile(lambda x: x)
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        x.grad = None
        (fast(x) * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_compile_as_decorator():
    @dg.compile
    def f(x):
        return x * 2

    assert f(dg.tensor([1.0])).tolist() == [2.0]
    assert f.__name__ == "f"


def test_record_names_inputs_state_and_seeds_by_default():
    x = dg.tensor([1.0, 2.0])
    w = dg.tensor([3.0, 4.0], requires_grad=True)
    dg.manual_seed(5)
    with dg.record() as rec:
        y = x * w + dg.rand(2)
    g = rec.graph
    g.verify()
    assert [v.name for v in g.inputs] == ["input0", "seed0"]
    assert [v.name for v in g.state] == ["param0"]
    (got,) = g.compile(outputs=[rec.value(y)])(**rec.feeds())
    np.testing.assert_allclose(got, y.detach().numpy())      # feeds() holds the drawn seed


def test_record_detach_and_no_grad_cut_gradients_in_the_graph():
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    with dg.record() as rec:
        a = w.detach() * w
        with dg.no_grad():
            b = w * 3
        out = (a + b * w).sum()
    g = rec.graph
    assert "stop_gradient" in str(g)
    with g:
        (gw,) = dg.grad(rec.value(out), [g["param0"]])
    (got,) = g.compile(outputs=[gw])()
    out.backward()
    np.testing.assert_allclose(got, w.grad.numpy())      # [1, 2] + [3, 6], not doubled


def test_record_refuses_in_place_change_through_a_view():
    x = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(dg.GraphError, match="view"):
        with dg.record():
            y = x * 1
            y[0].mul_(2)


def test_record_after_an_exception_says_so():
    with pytest.raises(KeyError):
        with dg.record() as rec:
            dg.ones(2) * 2
            raise KeyError("boom")
    with pytest.raises(dg.GraphError, match="raised an exception"):
        rec.graph


def test_compile_guards_on_any_and_all():
    def f(x):
        if (x > 0).any():
            return x * 2
        return x * -1

    def g(x):
        return x * 2 if (x > 0).all(dim=0).all() else x * -1

    for fn in (f, g):
        fast = dg.compile(fn)
        for v in ([1.0, -2.0], [-1.0, -2.0], [1.0, 2.0], [-1.0, -2.0], [1.0, -2.0]):
            x = dg.tensor(v)
            assert fast(x).tolist() == fn(x).tolist(), (fn.__name__, v)


@pytest.mark.parametrize("read", [lambda t: t.tolist()[0], lambda t: float(t.numpy()[0]),
                                  lambda t: float(np.asarray(t)[0])],
                         ids=["tolist", "numpy", "asarray"])
def test_compile_guards_on_data_read_into_python(read):
    def f(x):
        return x * read(x)

    fast = dg.compile(f)
    assert fast(dg.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]
    assert fast(dg.tensor([3.0, 2.0])).tolist() == [9.0, 6.0]
    assert fast(dg.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]
    assert "guard failed" in fast.recompile_reasons[1]


def test_compile_printing_a_tensor_adds_no_guard():
    def f(x):
        repr(x)
        return x + 1

    fast = dg.compile(f)
    fast(dg.tensor([1.0]))
    fast(dg.tensor([2.0]))
    assert len(fast.recompile_reasons) == 1


def test_compile_sees_setitem_and_bool_clone():
    def s(x):
        y = x * 1
        y[0] = 10.0
        y[x < 0] = 0.0
        return y

    def c(x):
        return dg.where((x > 0).clone(), x, x * 0)

    for fn in (s, c):
        fast = dg.compile(fn)
        for v in ([1.0, -2.0, 3.0], [-3.0, 4.0, -5.0]):
            assert fast(dg.tensor(v)).tolist() == fn(dg.tensor(v)).tolist()


def test_compile_draws_fresh_random_numbers_each_call():
    fast = dg.compile(lambda x: x + dg.rand(4))
    import duograph.nn.functional as NF
    drop = dg.compile(lambda x: NF.dropout(x, 0.5))
    draws = [fast(dg.zeros(4)).tolist() for _ in range(3)]
    masks = [drop(dg.ones(32)).tolist() for _ in range(3)]
    assert draws[0] != draws[1] != draws[2]
    assert masks[0] != masks[1] != masks[2]
    dg.manual_seed(11)
    a = [fast(dg.zeros(4)).tolist() for _ in range(2)]
    dg.manual_seed(11)
    assert [fast(dg.zeros(4)).tolist() for _ in range(2)] == a


# -- issue 23: random numbers drawn outside duograph's random ops ---------------------------------
_GLOBAL_RNG = np.random.default_rng(7)


class _DrawingNet(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.rng = np.random.default_rng(3)

    def forward(self, x):
        return x + float(self.rng.standard_normal())


def _python_draws():
    """(name, function, what the warning names) for each way to draw outside duograph."""
    import random
    mine = random.Random(5)
    return [
        ("random.random", lambda x: x + random.random(), r"random\.random at .*:\d+"),
        ("random.uniform", lambda x: x + random.uniform(0.0, 1.0),
         r"random\.uniform at .*:\d+"),
        ("random.Random", lambda x: x + mine.gauss(0.0, 1.0), r"random\.gauss at .*:\d+"),
        ("np.random.rand", lambda x: x + float(np.random.rand()), "numpy's global random"),
        ("np.random.normal", lambda x: x + dg.tensor(np.random.normal(size=4)),
         "numpy's global random"),
        ("Generator", lambda x: x + float(_GLOBAL_RNG.normal()),
         r"Generator global _GLOBAL_RNG, read at .*test_record_compile\.py:\d+"),
        ("unseeded default_rng", lambda x: x + float(np.random.default_rng().random()),
         r"at .*test_record_compile\.py:\d+"),
        ("module attribute", _DrawingNet(), r"Generator attribute self\.rng"),
    ]


@pytest.mark.parametrize("case", range(len(_python_draws())),
                         ids=[c[0] for c in _python_draws()])
def test_compile_runs_python_level_random_draws_eagerly_with_one_warning(case):
    """Issue 23: ``random.random()`` or ``np.random`` inside a compiled function was frozen
    at its recorded value. As torch.compile falls back to Python for such calls, the
    function runs eagerly on every call (fresh numbers, as plain Python), warned once,
    naming the function and the draw."""
    _, fn, what = _python_draws()[case]
    fast = dg.compile(fn)
    x = dg.tensor(np.zeros(4, np.float32))
    with pytest.warns(RuntimeWarning) as caught:
        got = [fast(x).tolist() for _ in range(4)]
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    name = getattr(fn, "__name__", type(fn).__name__)
    assert message.startswith(f"dg.compile: {name!r} draws random numbers outside "
                              "duograph's random ops"), message
    assert re.search(what, message), message
    assert "runs eagerly from now on" in message
    assert len({tuple(v) for v in got}) == 4, got          # a fresh draw on every call
    assert fast.specializations == []                     # nothing replayed


def test_compile_still_replays_duograph_randomness_and_self_seeded_generators(recwarn):
    """What a replay repeats correctly is not refused: dg.rand/dropout (fresh seeds each
    replay) and a generator the function seeds itself (the same numbers every call)."""
    import duograph.nn.functional as NF
    drawn = dg.compile(lambda x: NF.dropout(x + dg.rand(8), 0.5))
    seeded = dg.compile(lambda x: x + float(np.random.default_rng(0).random()))
    x = dg.tensor(np.zeros(8, np.float32))
    a = [drawn(x).tolist() for _ in range(3)]
    b = [seeded(x).tolist() for _ in range(3)]
    assert a[0] != a[1] != a[2] and b[0] == b[1] == b[2]
    assert len(drawn.specializations) == 1 and len(seeded.specializations) == 1
    assert not [w for w in recwarn if "dg.compile" in str(w.message)]


def test_compile_sees_random_draws_under_a_profiler_and_leaves_it_installed():
    import random
    import sys
    calls = []

    def profiler(frame, event, arg):
        calls.append(event)
    fast = dg.compile(lambda x: x + random.random())
    sys.setprofile(profiler)
    try:
        with pytest.warns(RuntimeWarning, match="the random module's state"):
            got = [fast(dg.zeros(2)).tolist() for _ in range(3)]
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert calls and len({tuple(v) for v in got}) == 3


def test_compile_module_guards_on_train_eval_and_replaced_parameters():
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = dg.nn.Linear(3, 2)

        def forward(self, x):
            y = self.lin(x)
            return y * 2 if self.training else y

    net = Net()
    fast = dg.compile(net)
    x = dg.randn(4, 3)
    with dg.no_grad():
        np.testing.assert_allclose(fast(x).numpy(), net(x).numpy())
        net.eval()
        np.testing.assert_allclose(fast(x).numpy(), net(x).numpy())
        net.lin.weight = dg.nn.Parameter(dg.ones(2, 3))
        np.testing.assert_allclose(fast(x).numpy(), net(x).numpy())
    reasons = fast.recompile_reasons
    assert "self.training: True -> False" in reasons[1]
    assert "self.lin.weight: <Parameter [2, 3] float32> -> another" in reasons[2]
    assert "(replaced)" in reasons[2]


def test_compile_cuts_gradients_at_detach_and_no_grad():
    def f(x):
        with dg.no_grad():
            s = x * 3
        return x.detach() * x + s * x, (x * 5).detach()

    fast = dg.compile(f)
    for _ in range(3):
        grads = []
        for fn in (fast, f):
            x = dg.tensor([1.0, 2.0], requires_grad=True)
            a, b = fn(x)
            assert not b.requires_grad
            a.sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_allclose(grads[0], grads[1])       # [4, 8]


def test_compile_writes_back_in_place_changes_to_arguments_and_state():
    buf = dg.zeros(2)

    def f(x, counter):
        counter.add_(1)
        with dg.no_grad():
            buf.mul_(0.5).add_(x)      # two in-place ops: both must reach buf
        return x * 2

    fast = dg.compile(f)
    counter = dg.zeros(1)
    expect = np.zeros(2)
    for i in range(4):
        fast(dg.ones(2), counter)
        expect = expect * 0.5 + 1
        np.testing.assert_allclose(buf.numpy(), expect)
        assert counter.item() == i + 1
    assert len(fast) == 1


def test_compile_guard_failure_does_not_apply_state_twice():
    buf = dg.zeros(1)

    def f(x):
        with dg.no_grad():
            buf.add_(1)
        return x * 2 if x.sum() > 0 else x * 3

    fast = dg.compile(f)
    fast(dg.ones(1))
    fast(dg.ones(1))
    fast(-dg.ones(1))           # the replay's guard fails: f runs again eagerly
    assert buf.item() == 3.0


def test_compile_guards_on_outside_tensors_requires_grad():
    w = dg.tensor([1.0, 2.0])
    fast = dg.compile(lambda x: (x * w).sum())
    fast(dg.tensor([3.0, 4.0]))
    w.requires_grad_(True)
    fast(dg.tensor([3.0, 4.0])).backward()
    assert w.grad.tolist() == [3.0, 4.0]
    assert "requires_grad False -> True" in fast.recompile_reasons[-1]


def test_compile_refuses_double_backward_clearly():
    fast = dg.compile(lambda x: (x ** 3).sum())
    x = dg.tensor([2.0], requires_grad=True)
    fast(x)
    with pytest.raises(RuntimeError, match="double backward"):
        dg.autograd.grad(fast(x), [x], create_graph=True)


def test_compiled_closure_over_a_module_follows_train_and_eval():
    """dg.compile(lambda x: model(x)) sees the module only through a closure: the training
    flag Module.__call__ reads while recording is a guard, so eval() re-records instead of
    replaying Dropout and BatchNorm's training behaviour."""
    from duograph import nn
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.BatchNorm1d(8))
    fast = dg.compile(lambda t: model(t))
    x = dg.randn(16, 4)
    fast(x)
    model.eval()
    got = fast(x)
    with dg.no_grad():
        want = model(x)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    assert any("training: True -> False" in r
               for r in fast.recompile_reasons)
    model.train()
    fast(x)
    assert len(fast) == 2                     # the training specialisation is reused


# -- record() blocks belong to their thread ---------------------------------------------------
def _in_thread(fn):
    """Start ``fn`` in a thread; the joiner re-raises what it raised."""
    import threading
    box = {}

    def run():
        try:
            fn()
        except BaseException as e:      # noqa: BLE001 - handed to the joining thread
            box["error"] = e
    th = threading.Thread(target=run)
    th.start()

    def join():
        th.join(30)
        assert not th.is_alive()
        if "error" in box:
            raise box["error"]
    return join


def test_record_ignores_another_threads_ops():
    """Ops another thread runs while a block is open (an in-place write among them) are not
    part of the block's graph; before, the write made the block fail."""
    import threading
    t = dg.tensor(np.zeros(3, np.float32))
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait(30)
        t.add_(1.0)
        _ = t * 2
        done.set()
    join = _in_thread(other)
    a = dg.tensor(np.ones(3, np.float32))
    with dg.record() as rec:
        inside.set()
        assert done.wait(30)
        y = a * 3
    join()
    assert [n.op.name for n in rec.graph.nodes if not n.op.constant] == ["mul"]
    exe = rec.graph.compile(outputs=[rec.value(y)])
    np.testing.assert_array_equal(exe(**rec.feeds())[0], np.full(3, 3, np.float32))
    np.testing.assert_array_equal(t.numpy(), np.ones(3, np.float32))


def test_compile_does_not_replay_another_threads_in_place_write():
    """dg.compile records with bound state: another thread's ``add_`` during the recording
    would have become a state update replayed by every call. (C-level locks hand over, so
    no guard sees them.)"""
    import _thread
    counter = dg.tensor(np.zeros(2, np.float32))
    ready, finished, first = (_thread.allocate_lock() for _ in range(3))
    ready.acquire()
    finished.acquire()

    def other():
        assert ready.acquire(timeout=30)
        counter.add_(1.0)
        finished.release()
    join = _in_thread(other)
    w = dg.tensor(np.full(2, 2.0, np.float32))

    @dg.compile
    def f(x):
        if first.acquire(blocking=False):       # the first call, which records
            ready.release()
            assert finished.acquire(timeout=30)
        return x * w

    x = dg.tensor(np.ones(2, np.float32))
    np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0])
    join()
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(counter.numpy(), [1.0, 1.0])
    assert f.recompile_reasons == ["first call"]


def test_control_flow_in_another_thread_keeps_this_threads_recording():
    """An eager ``cond`` pauses recording while its branch runs: in its own thread only. An
    op this thread runs meanwhile is still recorded."""
    import threading
    in_branch, recorded, opened = threading.Event(), threading.Event(), threading.Event()
    armed = [True]

    def branch(v):
        if armed[0] and isinstance(v, dg.Tensor):     # the eager run, not the tracing
            armed[0] = False
            in_branch.set()
            assert recorded.wait(30)
        return v + 1

    def other():
        v = dg.tensor(np.zeros(2, np.float32))
        assert opened.wait(30)                        # this thread's block is open
        dg.cond(dg.tensor(True), branch, lambda v: v - 1, v)
    join = _in_thread(other)
    a = dg.tensor(np.ones(2, np.float32))
    with dg.record() as rec:
        opened.set()
        assert in_branch.wait(30)
        y = a * 5
        recorded.set()
    join()
    assert not armed[0]                               # the branch ran eagerly and waited
    assert [n.op.name for n in rec.graph.nodes if not n.op.constant] == ["mul"]
    exe = rec.graph.compile(outputs=[rec.value(y)])
    np.testing.assert_array_equal(exe(**rec.feeds())[0], [5.0, 5.0])


def test_a_library_imported_while_recording_may_seed_its_own_random(tmp_path, monkeypatch):
    """A module imported for the first time inside the compiled function (a library that
    seeds a ``random.Random`` at import, as sympy does) draws once per process, not once
    per call: the function is still compiled, without the eager-fallback warning."""
    import sys
    import warnings
    (tmp_path / "seeds_at_import.py").write_text(
        "import random\n_rng = random.Random()\nSCALE = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("seeds_at_import", None)

    def f(x):
        import seeds_at_import
        return x * seeds_at_import.SCALE

    fn = dg.compile(f)
    x = dg.tensor(np.arange(3.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            np.testing.assert_array_equal(fn(x).numpy(), np.arange(3.0) * 2)
    assert fn._eager_only is None and "seeds_at_import" in sys.modules

    def g(x):
        import random
        return x * random.Random().random()          # a draw on every call: still refused

    with pytest.warns(RuntimeWarning, match="draws random numbers outside"):
        dg.compile(g)(x)
