"""Bad input gets a clear error: a fuzz over the op table (hypothesis, bounded).

Each call is an op-table sample with one argument replaced by a mistake (a Python list, None,
a string, a float, a bool, a wrong-rank tensor...). A call may succeed (lists of numbers are
accepted wherever tensors are, as elementwise ops always did) or raise a duograph error or the
built-in type PyTorch raises (TypeError, ValueError, IndexError, RuntimeError). It must never
escape as another exception (AttributeError, KeyError, ZeroDivisionError, a bare numpy
error), and every message names the op (or the op it is written with: ``mm`` is ``matmul``).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import duograph as dg
from op_samples import OPS

CLEAR = (dg.DuographError, TypeError, ValueError, IndexError, RuntimeError, NotImplementedError)
TENSOR_MISTAKES = ("list", "none", "str", "rank+1", "bool", "int")
VALUE_MISTAKES = ("none", "str", "float", "negative", "large", "list", "bad tuple", "bool")


def _eager(x):
    if isinstance(x, np.ndarray):
        return dg.tensor(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_eager(i) for i in x)
    return x


def _mistake(value, kind):
    if isinstance(value, np.ndarray):
        return {"list": value.tolist(), "none": None, "str": "abc",
                "rank+1": dg.tensor(value[None]), "bool": dg.tensor(value.astype(bool)),
                "int": dg.tensor(value.astype(np.int64))}[kind]
    return {"none": None, "str": "abc", "float": 1.5, "negative": -7, "large": 99,
            "list": list(value) if isinstance(value, (list, tuple)) else [value],
            "bad tuple": (1.5, "x"), "bool": True}[kind]


CALLS = [(op, s) for op in OPS for s in op.samples[:2]]
# functions written with another op, whose messages name that op
WRITTEN_WITH = {"mm": "matmul", "broadcast_to": "expand", "rand": "uniform", "randn": "normal"}


@st.composite
def mistaken_calls(draw):
    op, sample = draw(st.sampled_from(CALLS))
    args, kwargs = list(sample.args), dict(sample.kwargs)
    slots = [("arg", i) for i in range(len(args))] + [("kw", k) for k in kwargs]
    if not slots:
        return op, tuple(args), kwargs, None, None
    where, key = draw(st.sampled_from(slots))
    value = args[key] if where == "arg" else kwargs[key]
    kinds = TENSOR_MISTAKES if isinstance(value, np.ndarray) else VALUE_MISTAKES
    kind = draw(st.sampled_from(kinds))
    args, kwargs = [_eager(a) for a in args], {k: _eager(v) for k, v in kwargs.items()}
    if where == "arg":
        args[key] = _mistake(value, kind)
    else:
        kwargs[key] = _mistake(value, kind)
    return op, tuple(args), kwargs, kind, isinstance(value, np.ndarray)


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(mistaken_calls())
def test_mistakes_raise_clear_errors_never_bare_ones(call):
    op, args, kwargs, kind, was_tensor = call
    try:
        op.fn(*args, **kwargs)
    except CLEAR as e:
        names = {op.name, op.fn.__name__, WRITTEN_WITH.get(op.name, op.name)}
        assert any(f"{n}:" in str(e) or f"{n}(" in str(e) for n in names), (
            f"{op.name} with a {kind} in place of a {'tensor' if was_tensor else 'value'}: "
            f"the message does not name the op: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - what the test is about
        pytest.fail(f"{op.name}{args!r:.200}: bare {type(e).__name__}: {e}")


# -- lists wherever tensors go, and what PyTorch refuses --------------------------------------
@pytest.mark.parametrize("fn, args, want", [
    (dg.sum, ([[1.0, 2.0], [3.0, 4.0]],), 10.0),
    (dg.mean, ([1.0, 2.0, 3.0],), 2.0),
    (lambda x: dg.softmax(x, 0), ([0.0, 0.0],), [0.5, 0.5]),
    (lambda x: dg.transpose(x, 0, 1), ([[1, 2], [3, 4]],), [[1, 3], [2, 4]]),
    (lambda x: dg.reshape(x, 4), ([[1, 2], [3, 4]],), [1, 2, 3, 4]),
    (lambda a, b: dg.mm(a, b), ([[1.0, 2.0]], [[3.0], [4.0]]), [[11.0]]),
    (lambda x: dg.cat([x, [5.0]]), ([1.0],), [1.0, 5.0]),
    (lambda x: dg.argmax(x), ([1.0, 7.0, 3.0],), 1),
    (lambda x: dg.amax(x, 1), ([[1.0, 5.0], [3.0, 4.0]],), [5.0, 4.0]),
    (lambda x: dg.permute(x, 1, 0), ([[1, 2], [3, 4]],), [[1, 3], [2, 4]]),
    (lambda x: dg.nn.functional.log_softmax(x, 0), ([0.0, 0.0],), np.log([0.5, 0.5])),
    (lambda x, w: dg.nn.functional.conv2d(x, w),
     ([[[[0.0, 1.0], [2.0, 3.0]]]], [[[[1.0, 1.0], [1.0, 1.0]]]]), [[[[6.0]]]]),
    (lambda x: dg.nn.functional.max_pool2d(x, 2), ([[[[0.0, 1.0], [2.0, 3.0]]]],), [[[[3.0]]]]),
    (lambda x: dg.nn.functional.avg_pool2d(x, 2), ([[[[0.0, 1.0], [2.0, 3.0]]]],),
     [[[[1.5]]]]),
])
def test_python_lists_are_accepted_where_tensors_are(fn, args, want):
    out = fn(*args)
    np.testing.assert_allclose(np.asarray(out.numpy()), want)
    assert out.dtype in (dg.float32, dg.int64), out.dtype      # PyTorch's default dtypes


@pytest.mark.parametrize("fn", [dg.sum, dg.mean, dg.amax, dg.argmax, dg.logsumexp])
def test_keepdim_must_be_a_bool(fn):
    x = dg.tensor([[1.0, 2.0]])
    with pytest.raises(TypeError, match=r"attribute keepdim must be a bool, found float 1\.5"):
        fn(x, 1, keepdim=1.5)


def test_ragged_lists_are_refused_naming_the_op():
    with pytest.raises(TypeError, match=r"^sum: expected input to be a tensor or a "
                                        r"rectangular nest of numbers"):
        dg.sum([[1.0, 2.0], [3.0]])


def test_graph_mode_names_the_op_for_a_bad_operand():
    g = dg.Graph("bad")
    with g:
        x = dg.placeholder("x", (2, 3))
        with pytest.raises(TypeError, match=r"^permute: expected input to be a tensor, "
                                            r"found str[\s\S]*test_bad_input\.py"):
            dg.permute("abc", 1, 0)
        with pytest.raises(TypeError, match=r"^add: "):
            dg.add(x, None)


@pytest.mark.parametrize("call, exc", [
    (lambda x: dg.gather(x, 1, dg.tensor([[-1, 0], [0, 1]])), RuntimeError),
    (lambda x: dg.gather(x, 1, dg.tensor([[2, 0], [0, 1]])), RuntimeError),
    (lambda x: dg.index_select(x, 0, dg.tensor([-1])), IndexError),
    (lambda x: dg.index_select(x, 0, dg.tensor([2])), IndexError),
    (lambda x: dg.index_add(x, 0, dg.tensor([-1]), dg.ones(1, 2)), IndexError),
    (lambda x: dg.scatter_add(x, 0, dg.tensor([[5, 0]]), dg.ones(1, 2)), IndexError),
])
def test_out_of_range_indices_are_refused_as_pytorch_refuses_them(call, exc):
    x = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(exc, match=r"out of bounds for dim \d with size 2"):
        call(x)
    g = dg.Graph("idx")                       # the same at run time in graph mode
    with g:
        out = call(dg.placeholder("x", (2, 2)))
    with pytest.raises(exc, match=r"out of bounds"):
        g.compile(outputs=[out])(x=x.numpy())


@pytest.mark.parametrize("training, eps", [(True, 0.0), (True, -1.0), (False, -1.0),
                                           (True, None)])
def test_batch_norm_refuses_eps_pytorch_refuses(training, eps):
    x = dg.randn(4, 2)
    with pytest.raises(ValueError, match=r"batch_norm: expected eps"):
        dg.nn.functional.batch_norm(x, dg.zeros(2), dg.ones(2), training=training, eps=eps)
    if training:
        with pytest.raises(ValueError, match=r"batch_norm_train: expected eps > 0"):
            dg.batch_norm_train(x, dg.ones(2), dg.zeros(2), eps)


def test_every_mistake_on_every_sample_names_the_op():
    """Not a sample of the mistakes but all of them: each of the first two samples of every
    op, each argument slot, each kind of mistake (a few thousand calls, a few seconds). A
    function written with other ops must name itself, not the op it is built from."""
    unnamed, bare = [], []
    for op, sample in CALLS:
        args0, kw0 = list(sample.args), dict(sample.kwargs)
        slots = [("arg", i) for i in range(len(args0))] + [("kw", k) for k in kw0]
        for where, key in slots:
            value = args0[key] if where == "arg" else kw0[key]
            kinds = TENSOR_MISTAKES if isinstance(value, np.ndarray) else VALUE_MISTAKES
            for kind in kinds:
                args = [_eager(a) for a in args0]
                kwargs = {k: _eager(v) for k, v in kw0.items()}
                if where == "arg":
                    args[key] = _mistake(value, kind)
                else:
                    kwargs[key] = _mistake(value, kind)
                try:
                    with np.errstate(all="ignore"):
                        op.fn(*args, **kwargs)
                except CLEAR as e:
                    names = {op.name, op.fn.__name__, WRITTEN_WITH.get(op.name, op.name)}
                    if not any(f"{n}:" in str(e) or f"{n}(" in str(e) for n in names):
                        unnamed.append(f"{op.name} ({kind} at {key}): {type(e).__name__}: "
                                       f"{str(e).splitlines()[0][:100]}")
                except Exception as e:  # noqa: BLE001 - what the test is about
                    bare.append(f"{op.name} ({kind} at {key}): {type(e).__name__}: {e}")
    assert not bare, "bare exceptions:\n" + "\n".join(bare[:20])
    assert not unnamed, "messages that do not name the op:\n" + "\n".join(unnamed[:20])
