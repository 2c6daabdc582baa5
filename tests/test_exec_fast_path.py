"""The executables' fast paths (issue 11): the interpreter's inline kernel calls, the planned
steps, the floating-point state set per run, and the numba softmax cross-entropy loops;
each checked against the reference path (plain numpy, the ops' reference kernels, torch)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.ops import nn as nn_ops
from duograph.graphlib.registry import OpDef
from duograph.graphlib.types import TensorType
from duograph.runtime import fperr
from duograph.runtime.cpu import kernels as cpu_kernels
from duograph.runtime.cpu import out_kernels

LEVELS = ["O0", "O2"]


# -- the interpreter's inline calls ---------------------------------------------------------------
@pytest.mark.parametrize("level", LEVELS)
def test_chain_with_attrs_several_inputs_and_frees_matches_numpy(level):
    """Instructions of every call form (one input, several, attrs, a multi-output op) give
    numpy's values, run after run (slots freed at their last use are refilled)."""
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((4, 6)).astype(np.float32)
    ya = rng.standard_normal((4, 6)).astype(np.float32)
    g = dg.Graph("forms")
    with g:
        x = dg.placeholder("x", (4, 6))
        y = dg.placeholder("y", (4, 6))
        a = dg.tanh(x)                              # one input
        b = a * y + x                               # several inputs
        c = dg.sum(b, 1, keepdim=True)              # attrs
        lo, hi = dg.chunk(b - c, 2, 1)              # several outputs
        out = dg.transpose(lo * hi, 0, 1)
    exe = g.compile(outputs=[out, c], passes=level)
    tb = np.tanh(xa) * ya + xa
    tc = tb.sum(1, keepdims=True)
    want = ((tb - tc)[:, :3] * (tb - tc)[:, 3:]).T
    for _ in range(3):
        got, got_c = exe(x=xa, y=ya)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_c, tc, rtol=1e-5, atol=1e-5)


def _loose_op():
    """An (unregistered) op whose kernel returns a Python float / float64 array for a
    float32 output: the interpreter's inline path must still hand on float32 arrays."""
    return OpDef("loose_total", infer=lambda types, attrs: [TensorType((), "float32")],
                 kernel=lambda xp, x: float(np.asarray(x, np.float64).sum()))


@pytest.mark.parametrize("level", LEVELS)
def test_kernel_results_of_another_type_are_converted(level):
    op = _loose_op()
    g = dg.Graph("loose")
    with g:
        x = dg.placeholder("x", ("N",))
        y = op(x) * 2.0
    exe = g.compile(outputs=[y], passes=level)
    (got,) = exe(x=np.arange(4, dtype=np.float32))
    assert type(got) is np.ndarray and got.dtype == np.float32 and got.shape == ()
    assert float(got) == 12.0


def test_kernel_error_inside_the_loop_names_the_failing_op():
    """An error raised by the third of several kernels names that op (not the last one
    that ran) and the inputs it failed on."""
    g = dg.Graph("fails")
    with g:
        labels = dg.placeholder("labels", ("N",), "int64")
        scaled = labels * 1
        encoded = dg.one_hot(scaled, 3)
        out = encoded * 2
    exe = g.compile(outputs=[out], passes="O0")
    with pytest.raises(dg.KernelError, match=r"(?s)^one_hot failed at run time.*int64\[2\]"):
        exe(labels=np.array([0, 7]))
    np.testing.assert_array_equal(exe(labels=np.array([0, 2]))[0], [[2, 0, 0], [0, 0, 2]])


# -- the floating-point state of a run ------------------------------------------------------------
def test_fperr_ignore_and_restore_keep_the_callers_state():
    with np.errstate(divide="raise", over="warn", invalid="ignore", under="ignore"):
        before = np.geterr()
        token = fperr.ignore()
        assert np.geterr() == {"divide": "ignore", "over": "ignore", "under": "ignore",
                               "invalid": "ignore"}
        fperr.restore(token)
        assert np.geterr() == before
        token = fperr.ignore()          # the cached quiet state, for the same caller state
        fperr.restore(token)
        assert np.geterr() == before
    with np.errstate(all="warn"):       # another caller state gets its own quiet state
        token = fperr.ignore()
        assert set(np.geterr().values()) == {"ignore"}
        fperr.restore(token)
        assert set(np.geterr().values()) == {"warn"}


@pytest.mark.parametrize("level", LEVELS)
def test_runs_ignore_fp_errors_and_restore_the_state_even_after_an_error(level):
    g = dg.Graph("fp")
    with g:
        x = dg.placeholder("x", (3,))
        y = dg.log(x) / x
    exe = g.compile(outputs=[y], passes=level)
    with np.errstate(all="raise"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (got,) = exe(x=np.array([0.0, -1.0, 1.0], np.float32))
        assert got[0] == -np.inf and np.isnan(got[1]) and got[2] == 0.0
        with pytest.raises(dg.FeedError):
            exe(x=np.zeros(4, np.float32))
        assert set(np.geterr().values()) == {"raise"}
        with pytest.raises(FloatingPointError):
            np.float32(1.0) / np.zeros(1, np.float32)


# -- softmax cross-entropy: the numba loops against the reference kernels -------------------------
def _sce_case(dtype, target_dtype, special):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((13, 7)) * 3).astype(dtype)
    t = rng.integers(0, 7, 13).astype(target_dtype)
    if special:
        x[2, 3] = np.inf
        x[5, 1] = np.nan
        x[7, :] = -np.inf
        x[8, 4] = -np.inf
    return x, t


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target_dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 3])
@pytest.mark.parametrize("special", [False, True])
def test_sce_numba_matches_the_reference_kernels(dtype, target_dtype, reduction, ignore_index,
                                                 special):
    if cpu_kernels._loss_numba(*_sce_case(dtype, target_dtype, False)) is None:
        pytest.skip("numba not available")
    x, t = _sce_case(dtype, target_dtype, special)
    kw = dict(ignore_index=ignore_index, reduction=reduction)
    got = cpu_kernels.softmax_cross_entropy(np, x, t, **kw)
    want = nn_ops._sce_kernel(np, x, t, **kw)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    rng = np.random.default_rng(2)
    g = (np.asarray(rng.standard_normal(13), dtype) if reduction == "none"
         else np.asarray(0.75, dtype))
    got_g = cpu_kernels.softmax_cross_entropy_backward(np, g, x, t, **kw)
    want_g = nn_ops._sce_backward_kernel(np, g, x, t, **kw)
    assert got_g.dtype == want_g.dtype
    # ignored rows are 0, as torch's (the reference multiplies a non-finite row by 0: NaN)
    ignored = t == ignore_index
    np.testing.assert_array_equal(got_g[ignored], 0)
    np.testing.assert_allclose(got_g[~ignored], want_g[~ignored], rtol=rtol, atol=rtol)
    out = np.full(x.shape, 99, dtype)                  # the planned runtime's out= form
    assert out_kernels._sce_backward_out(np, g, x, t, out=out, **kw)
    np.testing.assert_array_equal(out, got_g)


@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_sce_numba_refuses_out_of_range_targets_as_the_reference(ignore_index):
    x = np.zeros((4, 3), np.float32)
    for bad in (3, -1):
        t = np.array([0, 1, bad, 2])
        kw = dict(ignore_index=ignore_index, reduction="mean")
        with pytest.raises(ValueError) as ref:
            nn_ops._sce_kernel(np, x, t, **kw)
        with pytest.raises(ValueError) as fast:
            cpu_kernels.softmax_cross_entropy(np, x, t, **kw)
        assert str(fast.value) == str(ref.value)
        with pytest.raises(ValueError, match="out of bounds"):
            cpu_kernels.softmax_cross_entropy_backward(np, np.asarray(1.0, np.float32), x,
                                                       t, **kw)


def test_sce_every_target_ignored_is_nan_and_zero_gradient():
    x = np.ones((3, 4), np.float32)
    t = np.full(3, -100)
    kw = dict(ignore_index=-100, reduction="mean")
    assert np.isnan(cpu_kernels.softmax_cross_entropy(np, x, t, **kw))
    g = cpu_kernels.softmax_cross_entropy_backward(np, np.asarray(1.0, np.float32), x, t, **kw)
    np.testing.assert_array_equal(g, np.zeros((3, 4), np.float32))


def test_sce_without_numba_runs_the_reference():
    x, t = _sce_case("float32", "int64", False)
    with dg.config.override(numba=False):
        assert cpu_kernels._loss_numba(x, t) is None
        got = cpu_kernels.softmax_cross_entropy(np, x, t, ignore_index=-100,
                                                reduction="mean")
    np.testing.assert_array_equal(got, nn_ops._sce_kernel(np, x, t, ignore_index=-100,
                                                           reduction="mean"))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_training_graph_matches_torch(torch, level, reduction):
    """Loss and logits gradient of a graph (which runs the numba loops where numba is
    installed) against torch."""
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((9, 5)).astype(np.float32)
    ta = rng.integers(0, 5, 9)
    ta[3] = 1
    g = dg.Graph("ce")
    with g:
        x = dg.placeholder("x", ("N", 5))
        t = dg.placeholder("t", ("N",), "int64")
        loss = dg.nn.functional.cross_entropy(x, t, ignore_index=1, reduction=reduction)
        total = dg.sum(loss) if reduction == "none" else loss
        (gx,) = dg.grad(total, [x])
    got_loss, got_g = g.compile(outputs=[loss, gx], passes=level)(x=xa, t=ta)
    xt = torch.tensor(xa, requires_grad=True)
    want = torch.nn.functional.cross_entropy(xt, torch.tensor(ta), ignore_index=1,
                                             reduction=reduction)
    want.sum().backward()
    np.testing.assert_allclose(got_loss, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_g, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


# -- dg.compile's replay: external tensors checked on their arrays ---------------------------------
def test_compiled_call_notices_an_external_tensor_changing_dtype_or_shape():
    """A tensor read from outside the function whose data changes dtype or shape is a
    recompile (named in ``recompile_reasons``), never a replay of the old graph."""
    w = dg.tensor(np.ones(3, np.float32))
    fast = dg.compile(lambda t: t * w)
    x = dg.tensor(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(fast(x).numpy(), [0, 1, 2])
    np.testing.assert_array_equal(fast(x).numpy(), [0, 1, 2])          # replayed
    w.data = dg.tensor(np.full(3, 2.0, np.float64))
    got = fast(x)
    assert got.dtype == (x * w).dtype == "float64"
    np.testing.assert_array_equal(got.numpy(), [0, 2, 4])
    assert fast.recompile_reasons[-1] == ("a tensor read from outside the function changed: "
                                          "dtype float32 -> float64")
    w.data = dg.tensor(np.full(1, 3.0, np.float64))                    # broadcasts now
    np.testing.assert_array_equal(fast(x).numpy(), [0, 3, 6])
    assert fast.recompile_reasons[-1] == ("a tensor read from outside the function changed: "
                                          "shape (3,) -> (1,)")


GAIN = 2.5


def test_grouped_guard_pass_falls_back_to_the_guard_by_guard_answer():
    """The grouped pass compares by identity; a global rebound to an equal value (another
    object) still replays, a different value or type records again, as eager computes."""
    global GAIN
    fast = dg.compile(lambda t: t * GAIN)
    x = dg.tensor(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(fast(x).numpy(), [0, 2.5, 5])
    GAIN = float("2.5") + 0.0 * len(fast.recompile_reasons)     # equal, not identical
    np.testing.assert_array_equal(fast(x).numpy(), [0, 2.5, 5])
    assert len(fast.recompile_reasons) == 1                        # replayed
    GAIN = 3.0
    np.testing.assert_array_equal(fast(x).numpy(), [0, 3, 6])
    assert "GAIN" in fast.recompile_reasons[-1] and "2.5 -> 3.0" in fast.recompile_reasons[-1]
    GAIN = 3                                                       # equal, another type
    got = fast(x)
    np.testing.assert_array_equal(got.numpy(), (x * 3).numpy())
    assert len(fast.recompile_reasons) == 3
    del GAIN
    with pytest.raises(NameError):
        fast(x)
    GAIN = 2.5
    np.testing.assert_array_equal(fast(x).numpy(), [0, 2.5, 5])


def test_grouped_guard_pass_sees_a_submodule_replaced_and_an_attribute_added():
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(4, 4), dg.nn.ReLU(), dg.nn.Linear(4, 2))
    fast = dg.compile(model)
    x = dg.tensor(np.ones((3, 4), np.float32))
    with dg.no_grad():
        fast(x)
        n = len(fast.recompile_reasons)
        fast(x)
        assert len(fast.recompile_reasons) == n
        setattr(model, "1", dg.nn.Tanh())                         # a submodule replaced
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-6)
        assert len(fast.recompile_reasons) == n + 1
        model[0].extra = 1                                          # the module's dict grew
        fast(x)
        assert len(fast.recompile_reasons) == n + 2
