"""Attribute schemas (graphlib/attrs.py): every registered op declares its attributes, the
declarations cover what the op-sample graphs and the kernels use, and building a node with a
bad attribute raises a clear error (op, attribute, expected, found, the user's line) in graph
mode and eagerly alike; lists are accepted where PyTorch accepts them."""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.attrs import Attr, Attrs, AttrTypeError, AttrValueError
from duograph.graphlib.registry import REGISTRY
from test_registry import node_samples

THIS_FILE = os.path.basename(__file__)


def test_every_registered_op_declares_a_schema():
    missing = sorted(name for name, op in REGISTRY.items() if not isinstance(op.attrs, Attrs))
    assert not missing, f"ops without an attribute schema: {missing}"


def test_every_attribute_the_samples_use_is_declared():
    for name, samples in node_samples().items():
        schema = REGISTRY[name].attrs
        for s in samples:
            unknown = [k for k in s.node.attrs if k not in schema]
            assert not unknown, f"{name}: attributes {unknown} used but not declared"
            # the built node's attributes pass their own schema unchanged
            assert schema.validate(name, s.node.attrs) is s.node.attrs, name


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_schema_matches_the_kernel_keywords(name):
    """The kernel's keyword parameters are the declared attributes, and a kernel default is
    the schema's default."""
    op = REGISTRY[name]
    params = list(inspect.signature(op.kernel).parameters.values())[1:]
    # the leading positional parameters are the input arrays
    named = [p for p in params if p.kind is p.KEYWORD_ONLY or (
        p.kind is p.POSITIONAL_OR_KEYWORD and p.name in op.attrs)]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        # a wrapper (``float_kernel``) passes every attribute on: the samples test covers it
        assert {p.name for p in named} <= set(op.attrs), name
    else:
        assert {p.name for p in named} == set(op.attrs), (
            f"{name}: kernel keywords {[p.name for p in named]}, schema {list(op.attrs)}")
    for p in named:
        if p.default is not p.empty:
            assert op.attrs.fields[p.name].default == p.default, f"{name}.{p.name}"


# -- errors ----------------------------------------------------------------------------------------

def _in_graph(fn):
    with dg.Graph("attrs"):
        return fn(dg.placeholder("x", (2, 3)))


def _eager(fn):
    return fn(dg.tensor(np.ones((2, 3), np.float32)))


MODES = {"graph": _in_graph, "eager": _eager}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("keepdim", [1.5, 1, None, "yes", np.bool_(True)])
def test_non_bool_keepdim_is_refused_as_pytorch_does(mode, keepdim):
    with pytest.raises(TypeError) as info:
        MODES[mode](lambda x: dg.sum(x, 0, keepdim=keepdim))
    assert isinstance(info.value, AttrTypeError)
    msg = str(info.value)
    assert msg.startswith("sum: attribute keepdim must be a bool, found "), msg
    assert type(keepdim).__name__ in msg and THIS_FILE in msg


@pytest.mark.parametrize("mode", MODES)
def test_unknown_attribute(mode):
    op = REGISTRY["softmax"]
    with pytest.raises(TypeError, match=r"softmax: attribute axis is not an attribute of "
                                        r"softmax \(its attributes: dim\)") as info:
        MODES[mode](lambda x: op(x, axis=1))
    assert THIS_FILE in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_missing_required_attribute(mode):
    with pytest.raises(TypeError, match="softmax: attribute dim is required"):
        MODES[mode](lambda x: REGISTRY["softmax"](x))


@pytest.mark.parametrize("mode", MODES)
def test_out_of_range_and_choices_are_value_errors(mode):
    with pytest.raises(ValueError, match=r"permute: attribute dims must be a tuple or list of "
                                         r"ints >= 0, found tuple \(-1, 0\)") as info:
        MODES[mode](lambda x: REGISTRY["permute"](x, dims=(-1, 0)))
    assert isinstance(info.value, AttrValueError) and THIS_FILE in str(info.value)
    with pytest.raises(ValueError, match=r"gelu: attribute approximate must be one of "
                                         r"'none', 'tanh', found str 'fast'"):
        MODES[mode](lambda x: REGISTRY["gelu"](x, approximate="fast"))


@pytest.mark.parametrize("mode", MODES)
def test_wrong_types(mode):
    with pytest.raises(TypeError, match=r"cast: attribute dtype must be a dtype name .*, found "
                                        r"str 'float128'"):
        MODES[mode](lambda x: REGISTRY["cast"](x, dtype="float128"))
    with pytest.raises(TypeError, match=r"softmax: attribute dim must be an int, found "
                                        r"float 1.0"):
        MODES[mode](lambda x: REGISTRY["softmax"](x, dim=1.0))
    with pytest.raises(TypeError, match=r"sum: attribute dim must be a tuple or list of ints"):
        MODES[mode](lambda x: REGISTRY["sum"](x, dim=(0, 1.5), keepdim=False))


# -- normalisation -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_lists_and_numpy_ints_are_normalised(mode):
    def fn(x):
        a = dg.sum(x, dim=[0, 1])
        b = x.reshape([3, 2])
        c = REGISTRY["permute"](x, dims=[1, 0])
        d = REGISTRY["softmax"](x, dim=np.int64(1))
        return a, b, c, d
    a, b, c, d = MODES[mode](fn)
    assert tuple(a.shape) == () and tuple(b.shape) == (3, 2) and tuple(c.shape) == (3, 2)
    if mode == "graph":
        assert b.node.attrs["shape"] == (3, 2) and type(b.node.attrs["shape"]) is tuple
        assert c.node.attrs["dims"] == (1, 0) and type(c.node.attrs["dims"]) is tuple
        assert type(d.node.attrs["dim"]) is int
    else:
        np.testing.assert_allclose(d.numpy(), np.full((2, 3), 1 / 3, np.float32), rtol=1e-6)


def test_an_int_where_a_float_is_expected_becomes_a_float():
    schema = Attrs(eps=Attr(float, min=0), dims=Attr("dims"), n=Attr(int, default=None))
    out = schema.validate("op", {"eps": 1, "dims": [1, np.int32(2)], "n": None})
    assert out == {"eps": 1.0, "dims": (1, 2), "n": None}
    assert type(out["eps"]) is float and type(out["dims"][1]) is int
    same = {"eps": 1e-5, "dims": (0,)}
    assert schema.validate("op", same) is same          # nothing to normalise: no copy
    with pytest.raises(ValueError, match="op: attribute eps must be a float >= 0, found "
                                         "float -1.0"):
        schema.validate("op", {"eps": -1.0})
    with pytest.raises(TypeError, match="op: attribute eps must be a float >= 0, found bool True"):
        schema.validate("op", {"eps": True})


def test_unknown_kind_is_refused_when_declaring():
    with pytest.raises(ValueError, match="unknown attribute kind"):
        Attr("tensor")
