"""dg.compile never goes stale: every Python value a compiled function reads is a guard.

The table below lists ways a Python value can change between two calls of a compiled
function. Each case is run the same way: compile, call, change the value, call again; both
calls must give what eager gives (values, dtype, requires_grad), the change must cause a
recompile, and the recompile reason must name what changed.
"""
import enum
import logging
import math
import threading
import types
import warnings

import numpy as np
import pytest

import duograph as dg
from duograph import nn

# -- module-level state the cases read (each case restores what it changes) -------------------
SCALE = 2
MODE = "relu"
USE_BIAS = True
CONFIG = {"scale": 2.0}
ACT = dg.relu
W = dg.tensor([1.0, 2.0, 3.0])
ARR = np.array([1.0, 2.0, 3.0], np.float32)
INNER_SCALE = 3.0


class Color(enum.Enum):
    RED = 1
    BLUE = 2


COLOR = Color.RED


def double(x):
    return x * 2


def triple(x):
    return x * 3


HELPER = double


def helper_reading_global(x):
    return x * INNER_SCALE


class Cfg:
    scale = 2.0


class Holder:
    def __init__(self):
        self._f = 1.0

    @property
    def factor(self):
        return self._f * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.use_relu = True

    def forward(self, x):
        y = self.lin(x)
        return dg.relu(y) if self.use_relu else y


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x) + 1


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale


def _x():
    return dg.tensor([1.0, -2.0, 3.0])


def _set_global(name, value):
    def change():
        globals()[name] = value
    return change


def _closure_number():
    k = 2

    def f(x):
        return x * k

    def change():
        nonlocal k
        k = 5
    return f, change


def _closure_list():
    items = [dg.tensor([1.0, 1.0, 1.0])]

    def f(x):
        out = x
        for t in items:
            out = out + t
        return out
    return f, lambda: items.append(dg.tensor([10.0, 10.0, 10.0]))


def _closure_list_item():
    coeffs = [1.0, 2.0]

    def f(x):
        return x * coeffs[0] + coeffs[1]

    def change():
        coeffs[1] = 3.0
    return f, change


def _closure_object_attribute():
    cfg = Holder()

    def f(x):
        return x * cfg._f

    def change():
        cfg._f = 4.0
    return f, change


def _property_reads_attribute():
    h = Holder()

    def f(x):
        return x * h.factor

    def change():
        h._f = 3.0
    return f, change


def _instance_shadows_class_attribute():
    cfg = Cfg()

    def f(x):
        return x * cfg.scale

    def change():
        cfg.scale = 7.0
    return f, change


def _module_flag():
    dg.manual_seed(0)
    net = Net()

    def change():
        net.use_relu = False
    return net, change


def _module_flag_through_closure():
    dg.manual_seed(0)
    net = Net()

    def change():
        net.use_relu = False
    return (lambda x: net(x)), change


def _nested_module_attribute():
    outer = Outer()

    def change():
        outer.inner.scale = 5.0
    return outer, change


def _hook_added_after_compile():
    dg.manual_seed(0)
    net = Net()

    def change():
        net.lin.register_forward_hook(lambda m, args, out: out * 10)
    return net, change


def _hook_removed_after_compile():
    dg.manual_seed(0)
    net = Net()
    handle = net.register_forward_hook(lambda m, args, out: out * 10)
    return net, handle.remove


def _parameter_replaced_in_closure_module():
    dg.manual_seed(0)
    net = Net()

    def change():
        net.lin.weight = nn.Parameter(dg.ones(3, 3))
    return (lambda x: net(x)), change


def _default_argument():
    def f(x, s=2.0):
        return x * s

    def change():
        f.__defaults__ = (3.0,)
    return f, change


def _keyword_only_default():
    def f(x, *, s=2.0):
        return x * s

    def change():
        f.__kwdefaults__ = {"s": -1.0}
    return f, change


def _user_module_attribute():
    mod = types.ModuleType("user_settings")
    mod.FACTOR = 2.0

    def f(x):
        return x * mod.FACTOR

    def change():
        mod.FACTOR = 9.0
    return f, change


def _method_reads_attribute():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, x):
            return x * self.k

    s = Scaler()

    def change():
        s.k = 6.0
    return s, change


def _f_global_number(x):
    return x * SCALE


def _f_global_string(x):
    return dg.relu(x) if MODE == "relu" else dg.tanh(x)


def _f_global_flag(x):
    return x + 1.0 if USE_BIAS else x


def _f_global_dict(x):
    return x * CONFIG["scale"]


def _f_global_library_function(x):
    return ACT(x)


def _f_global_user_function(x):
    return HELPER(x)


def _f_helper_reads_global(x):
    return helper_reading_global(x) + 1


def _f_class_attribute(x):
    return x * Cfg.scale


def _f_global_tensor(x):
    return x * W


def _f_global_array(x):
    return x * dg.tensor(ARR)


def _f_enum(x):
    return x * 2 if COLOR is Color.RED else x * 3


def _restore_dict(key, value):
    def change():
        CONFIG[key] = value
    return change


def _array_in_place():
    ARR[0] = 5.0


def _class_attribute():
    Cfg.scale = 4.0


# name -> (make() -> (fn, change), the field the recompile reason must name)
CASES = {
    "global number": (lambda: (_f_global_number, _set_global("SCALE", 5)), "global SCALE"),
    "global number int -> float": (lambda: (_f_global_number, _set_global("SCALE", 2.0)),
                                   "global SCALE: 2 (int) -> 2.0 (float)"),
    "global string": (lambda: (_f_global_string, _set_global("MODE", "tanh")), "global MODE"),
    "global bool flag": (lambda: (_f_global_flag, _set_global("USE_BIAS", False)),
                         "global USE_BIAS: True -> False"),
    "global bool -> int": (lambda: (_f_global_flag, _set_global("USE_BIAS", 1)),
                           "global USE_BIAS: True (bool) -> 1 (int)"),
    "global dict mutated": (lambda: (_f_global_dict, _restore_dict("scale", 3.0)),
                            "CONFIG['scale']: 2.0 -> 3.0"),
    "global library function rebound": (
        lambda: (_f_global_library_function, _set_global("ACT", dg.tanh)), "global ACT"),
    "global user function rebound": (
        lambda: (_f_global_user_function, _set_global("HELPER", triple)), "global HELPER"),
    "global read by a called helper": (
        lambda: (_f_helper_reads_global, _set_global("INNER_SCALE", -1.0)),
        "global INNER_SCALE"),
    "global tensor rebound": (
        lambda: (_f_global_tensor, _set_global("W", dg.tensor([5.0, 6.0, 7.0]))), "global W"),
    "global array changed in place": (lambda: (_f_global_array, _array_in_place),
                                      "contents of ARR"),
    "global enum": (lambda: (_f_enum, _set_global("COLOR", Color.BLUE)), "global COLOR"),
    "class attribute": (lambda: (_f_class_attribute, _class_attribute),
                        "class attribute Cfg.scale: 2.0 -> 4.0"),
    "closure cell": (_closure_number, "closure variable k: 2 -> 5"),
    "closure list append": (_closure_list, "len(items): 1 -> 2"),
    "closure list item": (_closure_list_item, "coeffs[1]: 2.0 -> 3.0"),
    "closure object attribute": (_closure_object_attribute, "cfg._f: 1.0 -> 4.0"),
    "property reading an attribute": (_property_reads_attribute, "h._f: 1.0 -> 3.0"),
    "instance shadows class attribute": (_instance_shadows_class_attribute, "cfg.scale"),
    "module attribute flag": (_module_flag, "self.use_relu: True -> False"),
    "module flag through a closure": (_module_flag_through_closure,
                                      "net.use_relu: True -> False"),
    "nested module attribute": (_nested_module_attribute, "self.inner.scale: 2.0 -> 5.0"),
    "forward hook added after compile": (_hook_added_after_compile,
                                         "len(self.lin._forward_hooks): 0 -> 1"),
    "forward hook removed": (_hook_removed_after_compile, "len(self._forward_hooks): 1 -> 0"),
    "parameter replaced": (_parameter_replaced_in_closure_module, "net.lin.weight"),
    "default argument": (_default_argument, "f.__defaults__: (2.0,) -> (3.0,)"),
    "keyword-only default": (_keyword_only_default, "f.__kwdefaults__"),
    "user module attribute": (_user_module_attribute, "global mod.FACTOR: 2.0 -> 9.0"),
    "callable object attribute": (_method_reads_attribute, "self.k: 2.0 -> 6.0"),
}

_SAVED = {name: globals()[name] for name in
          ("SCALE", "MODE", "USE_BIAS", "ACT", "HELPER", "INNER_SCALE", "W", "COLOR")}


@pytest.fixture(autouse=True)
def _restore_module_state():
    yield
    globals().update(_SAVED)
    CONFIG["scale"] = 2.0
    ARR[:] = [1.0, 2.0, 3.0]
    Cfg.scale = 2.0


def _same(got, want):
    assert got.dtype == want.dtype
    assert got.requires_grad == want.requires_grad
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_function_follows_a_python_value_change(name):
    make, field = CASES[name]
    fn, change = make()
    fast = dg.compile(fn)
    x = _x()
    _same(fast(x), fn(x))
    _same(fast(x), fn(x))            # replayed
    assert len(fast.recompile_reasons) == 1
    change()
    _same(fast(x), fn(x))
    assert len(fast.recompile_reasons) == 2, fast.recompile_reasons
    assert field in fast.recompile_reasons[-1], fast.recompile_reasons[-1]
    _same(fast(x), fn(x))            # the new specialisation is replayed
    assert len(fast.recompile_reasons) == 2


# -- arguments: equal is not the same ---------------------------------------------------------
ARG_CASES = {
    # name: (fn, args before, args after, the field the reason names)
    "int vs float argument": (lambda t, s: t * s, (dg.tensor([1, 2]), 2),
                              (dg.tensor([1, 2]), 2.0), "argument s: 2 (int) -> 2.0 (float)"),
    "float vs bool argument": (lambda t, s: t * s, (dg.tensor([1, 2]), 1.0),
                               (dg.tensor([1, 2]), True), "argument s"),
    "isinstance branch": (lambda t, s: t + 1 if isinstance(s, float) else t - 1,
                          (_x(), 1.0), (_x(), 1), "argument s"),
    "identity branch": (lambda t, flag: t * 2 if flag is True else t * 3,
                        (_x(), True), (_x(), 1), "argument flag: True (bool) -> 1 (int)"),
    "negative zero": (lambda t, s: t * math.copysign(1.0, s), (_x(), 0.0), (_x(), -0.0),
                      "argument s: 0.0 -> -0.0"),
    "NaN is stable": (lambda t, s: t + (1.0 if s != s else 2.0), (_x(), float("nan")),
                      (_x(), 1.0), "argument s: nan -> 1.0"),
    "tuple argument": (lambda t, shape: t.reshape(shape), (dg.ones(6), (2, 3)),
                       (dg.ones(6), (3, 2)), "argument shape: (2, 3) -> (3, 2)"),
    "tuple int vs float": (lambda t, p: t * p[0], (_x(), (2,)), (_x(), (2.0,)),
                           "argument p: (2,) -> (2.0,)"),
    "None vs value": (lambda t, b: t if b is None else t + b, (_x(), None), (_x(), 1.5),
                      "argument b: None (NoneType) -> 1.5 (float)"),
    "dict argument contents": (lambda t, o: t * o["k"], (_x(), {"k": 2}), (_x(), {"k": 3}),
                               "argument o['k']: 2 -> 3"),
    "keyword argument": (lambda t, scale=1.0: t * scale, (_x(),), (_x(), 3.0),
                         "argument scale: absent -> 3.0"),
    "list of tensors length": (lambda ts: sum(ts[1:], ts[0]), ([_x(), _x()],),
                               ([_x(), _x(), _x()],), "argument ts[2]"),
    "dtype argument": (lambda t, d: t.to(dtype=d) * 2, (_x(), "float32"), (_x(), "float64"),
                       "argument d: 'float32' -> 'float64'"),
    "string argument": (lambda t, act: getattr(dg, act)(t), (_x(), "relu"), (_x(), "tanh"),
                        "argument act: 'relu' -> 'tanh'"),
    "shape change": (lambda t: t * 2, (dg.ones(3),), (dg.ones(4),),
                     "argument t: shape (3,) -> (4,)"),
}


@pytest.mark.parametrize("name", list(ARG_CASES))
def test_arguments_equal_is_not_the_same(name):
    fn, before, after, field = ARG_CASES[name]
    fast = dg.compile(fn)
    for args in (before, after, before, after):
        _same(fast(*args), fn(*args))
    assert len(fast.recompile_reasons) == 2, fast.recompile_reasons
    assert field in fast.recompile_reasons[1], fast.recompile_reasons[1]


def test_int_then_float_argument_gives_eager_dtype():
    fast = dg.compile(lambda t, s: t * s)
    ints = dg.tensor([1, 2])
    assert fast(ints, 2).dtype == "int64"
    assert fast(ints, 2.0).dtype == "float32"
    assert fast(ints, True).dtype == "int64"
    assert len(fast) == 3


def test_keyword_arguments_are_matched_by_name():
    fast = dg.compile(lambda t, a=1.0, b=1.0: t * a - b)
    x = _x()
    _same(fast(x, a=2.0), x * 2.0 - 1.0)
    _same(fast(x, b=2.0), x * 1.0 - 2.0)
    assert len(fast) == 2


def test_grad_mode_is_a_guard():
    fast = dg.compile(lambda t: t * 2)
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    assert fast(x).requires_grad
    with dg.no_grad():
        assert not fast(x).requires_grad
    assert fast(x).requires_grad
    assert "grad mode: enabled -> disabled" in fast.recompile_reasons[1]


def test_object_argument_attributes_are_guards():
    class Opts:
        def __init__(self):
            self.k = 2.0

    def f(t, opts):
        return t * opts.k

    fast = dg.compile(f)
    opts = Opts()
    x = _x()
    _same(fast(x, opts), f(x, opts))
    opts.k = 3.0
    _same(fast(x, opts), f(x, opts))
    assert "opts.k: 2.0 -> 3.0" in fast.recompile_reasons[-1]
    other = Opts()
    _same(fast(x, other), f(x, other))       # another object: another specialisation
    assert len(fast) == 3


def test_a_function_changing_its_own_guard_is_never_stale():
    state = {"calls": 0}

    def f(t):
        state["calls"] += 1
        return t * state["calls"]

    fast = dg.compile(f, cache_limit=3)
    x = _x()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(x).tolist() for _ in range(6)]
    assert got == [[v * n for v in x.tolist()] for n in range(1, 7)]
    assert len(fast.recompile_reasons) == 3
    assert sum("cache limit" in str(w.message) for w in caught) == 1


# -- cache limit ------------------------------------------------------------------------------
def test_cache_limit_warns_once_and_falls_back_to_eager():
    fast = dg.compile(lambda t, k: t * k)
    x = _x()
    with dg.config.override(compile_cache_limit=3):
        with pytest.warns(RuntimeWarning, match="compile_cache_limit = 3") as caught:
            for k in range(1, 7):
                _same(fast(x, k), x * k)
        assert len(caught) == 1
        assert "argument k" in str(caught[0].message)
        assert len(fast) == 3 and len(fast.recompile_reasons) == 3
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _same(fast(x, 2), x * 2)          # still served by its specialisation
            _same(fast(x, 9), x * 9)          # eager, no second warning
    assert dg.config.compile_cache_limit == 8


def test_cache_limit_argument_overrides_config():
    fast = dg.compile(lambda t, k: t * k, cache_limit=1)
    x = _x()
    fast(x, 1)
    with pytest.warns(RuntimeWarning, match="cache limit"):
        _same(fast(x, 2), x * 2)
    assert len(fast) == 1


# -- concurrency ------------------------------------------------------------------------------
def test_concurrent_first_calls_record_each_shape_once():
    fast = dg.compile(lambda t: (t * 2 + 1).sum())
    barrier = threading.Barrier(8)
    errors = []

    def work(n):
        try:
            barrier.wait()
            for _ in range(5):
                got = fast(dg.ones(n))
                assert got.item() == 3.0 * n
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (1, 2, 3, 4) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(fast) == 4
    assert len(fast.recompile_reasons) == 4


# -- explanations -----------------------------------------------------------------------------
def test_recompile_reason_is_a_diff_from_the_nearest_entry():
    def f(t, k, mode="a"):
        return t * k * SCALE if mode == "a" else t

    fast = dg.compile(f)
    x = _x()
    fast(x, 2)
    fast(dg.ones(4), 3)                   # far from entry 1 in two fields
    globals()["SCALE"] = 7
    fast(x, 2, mode="b")                  # nearest: entry 1 (mode and SCALE differ)
    reason = fast.recompile_reasons[-1]
    assert isinstance(reason, str)
    fields = [c.field for c in reason.changes]
    assert fields == ["argument mode", "global SCALE"], reason
    change = reason.changes[1]
    assert (change.old, change.new) == ("2", "7")
    assert change.where.startswith("test_compile_guards.py:")
    assert change.where.endswith(" in f")
    assert str(change) == f"global SCALE: 2 -> 7 (read at {change.where})"
    assert str(reason) == "; ".join(str(c) for c in reason.changes)
    assert "argument mode: absent -> 'b'" in reason
    second = fast.recompile_reasons[1]
    assert [c.field for c in second.changes] == ["argument t: shape", "argument k"]
    assert "argument t: shape (3,) -> (4,)" in second and "argument k: 2 -> 3" in second


def test_recompile_reason_names_every_differing_field():
    def f(t, a, b):
        return t * a + b

    fast = dg.compile(f)
    x = _x()
    fast(x, 1, 2)
    fast(x.to(dtype="float64"), 1.0, 3)
    reason = fast.recompile_reasons[-1]
    assert [str(c) for c in reason.changes] == [
        "argument t: dtype float32 -> float64", "argument a: 1 (int) -> 1.0 (float)",
        "argument b: 2 -> 3"]


def test_recompiles_are_logged_when_config_says_so(caplog):
    fast = dg.compile(lambda t, k: t * k)
    x = _x()
    with caplog.at_level(logging.WARNING, logger="duograph.compile"):
        fast(x, 1)
        fast(x, 2)
        with dg.config.override(log_recompiles=True):
            fast(x, 3)
            fast(x, 3)
    records = [r.getMessage() for r in caplog.records if r.name == "duograph.compile"]
    assert len(records) == 1
    assert "argument k: 2 -> 3" in records[0] or "argument k: 1 -> 3" in records[0]


def test_guards_are_checked_by_one_generated_function():
    dg.manual_seed(0)
    net = Net()
    fast = dg.compile(net)
    fast(_x())
    spec = fast._last
    assert spec.check() == -1
    assert len(spec.guards) > 10
    net.use_relu = False
    failed = spec.check()
    assert spec.guards[failed].field == "attribute self.use_relu"


def test_attributes_of_library_objects_are_guards():
    w = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    opt = dg.optim.SGD([w], lr=0.1)

    def f(x):
        return x * opt.param_groups[0]["lr"]

    fast = dg.compile(f)
    x = _x()
    _same(fast(x), f(x))
    opt.param_groups[0]["lr"] = 0.5
    _same(fast(x), f(x))
    assert "opt.param_groups[0]['lr']: 0.1 -> 0.5" in fast.recompile_reasons[-1]


def test_fresh_argument_objects_never_share_a_specialisation():
    class Opts:
        def __init__(self, k):
            self.k = k

    def f(t, opts):
        return t * opts.k

    fast = dg.compile(f, cache_limit=100)
    x = _x()
    for k in range(12):               # each object dies after its call: ids get reused
        _same(fast(x, Opts(float(k))), x * float(k))


def test_an_emptied_closure_cell_is_a_guard():
    def make():
        def f(t):
            return t * k if "k" in dir() else t * k
        k = 2.0

        def clear():
            nonlocal k
            del k
        return f, clear

    f, clear = make()
    fast = dg.compile(f)
    x = _x()
    _same(fast(x), f(x))
    clear()
    with pytest.raises(NameError):
        fast(x)


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_large_containers_are_one_snapshot_guard(kind):
    n = 200
    data = [dg.tensor([float(i)] * 3) for i in range(n)]
    store = data if kind == "list" else {i: t for i, t in enumerate(data)}

    def f(x):
        return x + store[3]

    fast = dg.compile(f)
    x = _x()
    _same(fast(x), f(x))
    assert len(fast._last.guards) < 10
    store[3] = dg.tensor([-1.0, -1.0, -1.0])
    _same(fast(x), f(x))
    assert "items of store" in fast.recompile_reasons[-1]
    if kind == "list":
        store.append(dg.ones(3))
    else:
        store[n] = dg.ones(3)
    _same(fast(x), f(x))
    assert len(fast.recompile_reasons) == 3


def test_every_attribute_of_a_library_object_is_a_guard():
    """Library code (Optimizer.step reads group["lr"] as a Python float) is not walked, so
    an object of a library class has all of its attributes guarded, named or not."""
    w = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    opt = dg.optim.SGD([w], lr=0.1)

    def f(x):
        return x * 2 if opt is not None else x

    fast = dg.compile(f)
    x = _x()
    _same(fast(x), f(x))
    opt.param_groups[0]["lr"] = 0.01
    _same(fast(x), f(x))
    assert "opt.param_groups[0]['lr']: 0.1 -> 0.01" in fast.recompile_reasons[-1]


def test_a_training_step_with_backward_and_step_runs_eagerly_not_stale():
    """``.grad`` assignments and an optimizer's direct ``.data`` writes have no place in the
    recorded graph: such a function is run eagerly (warned once), never replayed stale."""
    def run(compiled, with_backward=True):
        dg.manual_seed(0)
        model = nn.Linear(3, 1)
        opt = dg.optim.SGD(model.parameters(), lr=0.1)
        x, y = dg.randn(8, 3), dg.randn(8, 1)
        if not with_backward:
            ((model(x) - y) ** 2).mean().backward()

        def step():
            if with_backward:
                opt.zero_grad()
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
            else:
                loss = model.weight.sum()
            opt.step()
            return loss.detach()

        fn = dg.compile(step) if compiled else step
        losses = []
        for i in range(6):
            if i == 3:
                opt.param_groups[0]["lr"] = 0.01
            losses.append(fn().item())
        return losses, model.weight.detach().numpy().copy()

    for with_backward, what in ((True, "assigns .grad"), (False, "writes the data")):
        eager, w_eager = run(False, with_backward)
        with pytest.warns(RuntimeWarning, match=what) as caught:
            compiled, w_compiled = run(True, with_backward)
        assert len(caught) == 1
        np.testing.assert_allclose(compiled, eager, rtol=1e-6)
        np.testing.assert_allclose(w_compiled, w_eager, rtol=1e-6)


def test_a_function_changing_an_attribute_it_reads_is_never_stale():
    class Counter:
        def __init__(self):
            self.n = 0

    c = Counter()

    def f(x):
        c.n += 1
        return x * c.n

    fast = dg.compile(f, cache_limit=4)
    x = _x()
    with pytest.warns(RuntimeWarning, match="cache limit"):
        got = [fast(x).tolist()[0] for _ in range(6)]
    assert got == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_reading_a_tensors_grad_follows_the_new_grad():
    w = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * 2).sum().backward()

    def f(x):
        return x * w.grad

    fast = dg.compile(f)
    x = _x()
    _same(fast(x), f(x))
    (w * 5).sum().backward()          # w.grad is a new tensor: [7, 7, 7]
    _same(fast(x), f(x))
    assert "w.grad: <Tensor [3] float32> -> another" in fast.recompile_reasons[-1]


def test_a_compiled_module_names_forwards_arguments():
    dg.manual_seed(0)
    fast = dg.compile(Net())
    fast(dg.ones(2, 3))
    fast(dg.ones(5, 3))
    assert fast.recompile_reasons[-1] == "argument x: shape (2, 3) -> (5, 3)"


def test_a_compiled_bound_method_guards_its_objects_attributes():
    class Model:
        def __init__(self):
            self.k = 2.0

        def apply(self, x):
            return x * self.k

    m = Model()
    fast = dg.compile(m.apply)
    x = _x()
    _same(fast(x), m.apply(x))
    m.k = -1.0
    _same(fast(x), m.apply(x))
    assert fast.recompile_reasons[-1].startswith("attribute self.k: 2.0 -> -1.0 (read at ")
