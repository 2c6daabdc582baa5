"""A duograph error is also an instance of the exception class PyTorch raises for the same
mistake (shape mismatch: RuntimeError, dim out of range: IndexError...), so code written to
catch torch's exceptions catches ours; duograph keeps its own classes and messages.

Each row is one common mistake written once against a module ``M`` (``torch`` or
``duograph``) and a functional namespace ``F``; it runs on torch (the oracle: it must raise)
and on duograph, eagerly and, where the mistake is visible while a graph is built or run, in
graph mode, and duograph's exception must be an instance of the class torch raised.
"""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")


def _ns(mod):
    return mod, mod.nn.functional


# (name, eager mistake, graph-mode form or None). An eager mistake takes (M, F) and builds its
# own tensors with M; a graph form takes (dg, F, p) where p(shape, dtype) is a placeholder and
# returns the outputs to compile and run (feeds are ones of the placeholder's shape).
CASES = [
    ("add shape mismatch",
     lambda M, F: M.ones(2, 3) + M.ones(4, 3),
     lambda M, F, p: p((2, 3)) + p((4, 3))),
    ("mul shape mismatch",
     lambda M, F: M.mul(M.ones(2, 3), M.ones(2, 4)),
     lambda M, F, p: M.mul(p((2, 3)), p((2, 4)))),
    ("matmul inner dims",
     lambda M, F: M.matmul(M.ones(2, 3), M.ones(4, 5)),
     lambda M, F, p: M.matmul(p((2, 3)), p((4, 5)))),
    ("mm inner dims",
     lambda M, F: M.mm(M.ones(2, 3), M.ones(2, 3)),
     lambda M, F, p: M.mm(p((2, 3)), p((2, 3)))),
    ("bmm batch mismatch",
     lambda M, F: M.ones(2, 3, 4).bmm(M.ones(3, 4, 5)),
     lambda M, F, p: p((2, 3, 4)).bmm(p((3, 4, 5)))),
    ("bmm of 2-d tensors",
     lambda M, F: M.ones(3, 4).bmm(M.ones(4, 5)),
     lambda M, F, p: p((3, 4)).bmm(p((4, 5)))),
    ("cat shape mismatch",
     lambda M, F: M.cat([M.ones(2, 3), M.ones(2, 4)], 0),
     lambda M, F, p: M.cat([p((2, 3)), p((2, 4))], 0)),
    ("cat rank mismatch",
     lambda M, F: M.cat([M.ones(2, 3), M.ones(3)], 0),
     lambda M, F, p: M.cat([p((2, 3)), p((3,))], 0)),
    ("stack shape mismatch",
     lambda M, F: M.stack([M.ones(2, 3), M.ones(3, 2)]),
     lambda M, F, p: M.stack([p((2, 3)), p((3, 2))])),
    ("sum dim out of range",
     lambda M, F: M.sum(M.ones(2, 3), 2),
     lambda M, F, p: M.sum(p((2, 3)), 2)),
    ("mean negative dim out of range",
     lambda M, F: M.ones(2, 3).mean(-3),
     lambda M, F, p: M.mean(p((2, 3)), -3)),
    ("softmax dim out of range",
     lambda M, F: F.softmax(M.ones(2, 3), dim=5),
     lambda M, F, p: F.softmax(p((2, 3)), dim=5)),
    ("transpose dim out of range",
     lambda M, F: M.transpose(M.ones(2, 3), 0, 2),
     lambda M, F, p: M.transpose(p((2, 3)), 0, 2)),
    ("squeeze dim out of range",
     lambda M, F: M.squeeze(M.ones(2, 1), 3),
     lambda M, F, p: M.squeeze(p((2, 1)), 3)),
    ("unsqueeze dim out of range",
     lambda M, F: M.unsqueeze(M.ones(2, 3), 4),
     lambda M, F, p: M.unsqueeze(p((2, 3)), 4)),
    ("argmax dim out of range",
     lambda M, F: M.argmax(M.ones(2, 3), 2),
     lambda M, F, p: M.argmax(p((2, 3)), 2)),
    ("cat dim out of range",
     lambda M, F: M.cat([M.ones(2, 3), M.ones(2, 3)], 2),
     lambda M, F, p: M.cat([p((2, 3)), p((2, 3))], 2)),
    ("permute wrong number of dims",
     lambda M, F: M.ones(2, 3).permute(0, 1, 2),
     lambda M, F, p: M.permute(p((2, 3)), 0, 1, 2)),
    ("reshape to an incompatible size",
     lambda M, F: M.ones(2, 3).reshape(4, 2),
     lambda M, F, p: M.reshape(p((2, 3)), (4, 2))),
    ("view with two -1",
     lambda M, F: M.ones(2, 3).view(-1, -1),
     lambda M, F, p: M.reshape(p((2, 3)), (-1, -1))),
    ("expand to a smaller size",
     lambda M, F: M.ones(2, 3).expand(2, 2),
     lambda M, F, p: p((2, 3)).expand(2, 2)),
    ("view to a different element count",
     lambda M, F: M.ones(2, 3).view(5),
     lambda M, F, p: p((2, 3)).view(5)),
    ("split dim out of range",
     lambda M, F: M.ones(2, 3).split(1, dim=3),
     lambda M, F, p: M.split(p((2, 3)), 1, dim=3)),
    ("flatten dim out of range",
     lambda M, F: M.flatten(M.ones(2, 3), 3),
     lambda M, F, p: M.flatten(p((2, 3)), 3)),
    ("narrow past the end",
     lambda M, F: M.ones(4).narrow(0, 2, 5),
     lambda M, F, p: p((4,)).narrow(0, 2, 5)),
    ("narrow start out of range",
     lambda M, F: M.ones(4).narrow(0, -5, 1),
     lambda M, F, p: p((4,)).narrow(0, -5, 1)),
    ("narrow negative length",
     lambda M, F: M.ones(4).narrow(0, 1, -1),
     lambda M, F, p: p((4,)).narrow(0, 1, -1)),
    ("index out of bounds",
     lambda M, F: M.ones(3)[5],
     lambda M, F, p: p((3,))[5]),
    ("index out of bounds in the second dim",
     lambda M, F: M.ones(2, 3)[:, -4],
     lambda M, F, p: p((2, 3))[:, -4]),
    ("chunk into zero pieces",
     lambda M, F: M.ones(4).chunk(0),
     lambda M, F, p: p((4,)).chunk(0)),
    ("arange with a zero step",
     lambda M, F: M.arange(0, 5, 0),
     None),
    ("zeros of a negative size",
     lambda M, F: M.zeros(2, -1),
     None),
    ("a string where a tensor goes",
     lambda M, F: M.sqrt("x"),
     None),
    ("bitwise and of float tensors",
     lambda M, F: M.ones(2) & M.ones(2),
     lambda M, F, p: p((2,)) & p((2,))),
    ("matmul of bool tensors",
     lambda M, F: M.matmul(M.ones(2, 2, dtype=M.bool), M.ones(2, 2, dtype=M.bool)),
     lambda M, F, p: M.matmul(p((2, 2), "bool"), p((2, 2), "bool"))),
    ("mean of an int tensor",
     lambda M, F: M.tensor([1, 2]).mean(),
     lambda M, F, p: M.mean(p((2,), "int64"))),
    ("where with a float condition",
     lambda M, F: M.where(M.ones(2), M.ones(2), M.zeros(2)),
     lambda M, F, p: M.where(p((2,)), p((2,)), p((2,)))),
    ("masked_fill with a float mask",
     lambda M, F: M.ones(2).masked_fill(M.ones(2), 0.0),
     None),
    ("one_hot of float classes",
     lambda M, F: F.one_hot(M.tensor([1.0, 0.0]), 3),
     None),
    ("one_hot of a negative class",
     lambda M, F: F.one_hot(M.tensor([-1, 0]), 3),
     None),
    ("requires_grad on an int tensor",
     lambda M, F: M.tensor([1, 2], requires_grad=True),
     None),
    ("layer_norm shape mismatch",
     lambda M, F: F.layer_norm(M.ones(2, 3), (4,)),
     lambda M, F, p: F.layer_norm(p((2, 3)), (4,))),
    ("max_pool2d of a 1-d tensor",
     lambda M, F: F.max_pool2d(M.ones(4), 2),
     lambda M, F, p: F.max_pool2d(p((4,)), 2)),
    ("batch_norm running stats of the wrong size",
     lambda M, F: F.batch_norm(M.ones(2, 3), M.zeros(4), M.ones(4)),
     None),
    ("subtracting bool tensors",
     lambda M, F: M.tensor([True, False]) - M.tensor([True, True]),
     lambda M, F, p: p((2,), "bool") - p((2,), "bool")),
    ("negating a bool tensor",
     lambda M, F: -M.tensor([True, False]),
     lambda M, F, p: -p((2,), "bool")),
    ("index_select with a float index",
     lambda M, F: M.index_select(M.ones(3, 2), 0, M.ones(2)),
     None),
    ("embedding with float indices",
     lambda M, F: F.embedding(M.ones(2), M.ones(4, 3)),
     None),
    ("nll_loss with a float target",
     lambda M, F: F.nll_loss(M.ones(3, 4), M.ones(3)),
     None),
    ("gather index out of range",
     lambda M, F: M.gather(M.ones(2, 2), 1, M.tensor([[0, 2], [1, 0]])),
     None),
    ("index_select index out of range",
     lambda M, F: M.index_select(M.ones(3, 2), 0, M.tensor([0, 3])),
     None),
    ("embedding index out of range",
     lambda M, F: F.embedding(M.tensor([0, 5]), M.ones(4, 3)),
     None),
    ("gather with a float index",
     lambda M, F: M.gather(M.ones(2, 2), 1, M.ones(2, 2)),
     None),
    ("conv2d with a 5-d input",
     lambda M, F: F.conv2d(M.ones(1, 1, 1, 4, 4), M.ones(2, 1, 3, 3)),
     lambda M, F, p: F.conv2d(p((1, 1, 1, 4, 4)), p((2, 1, 3, 3)))),
    ("conv2d channel mismatch",
     lambda M, F: F.conv2d(M.ones(1, 3, 5, 5), M.ones(2, 4, 3, 3)),
     lambda M, F, p: F.conv2d(p((1, 3, 5, 5)), p((2, 4, 3, 3)))),
    ("conv2d kernel larger than the input",
     lambda M, F: F.conv2d(M.ones(1, 1, 2, 2), M.ones(1, 1, 3, 3)),
     lambda M, F, p: F.conv2d(p((1, 1, 2, 2)), p((1, 1, 3, 3)))),
    ("linear feature mismatch",
     lambda M, F: F.linear(M.ones(2, 3), M.ones(4, 5)),
     lambda M, F, p: F.linear(p((2, 3)), p((4, 5)))),
    ("cross_entropy batch mismatch",
     lambda M, F: F.cross_entropy(M.ones(3, 4), M.tensor([0, 1])),
     None),
    ("mse_loss broadcasting to a bigger shape",
     lambda M, F: F.mse_loss(M.ones(2, 3), M.ones(4, 3)),
     lambda M, F, p: F.mse_loss(p((2, 3)), p((4, 3)))),
    ("in-place op on a leaf that requires grad",
     lambda M, F: M.ones(3, requires_grad=True).add_(1.0),
     None),
    ("backward twice without retain_graph",
     lambda M, F: _backward_twice(M),
     None),
    ("backward of a non-scalar without a gradient",
     lambda M, F: (M.ones(3, requires_grad=True) * 2).backward(),
     None),
    ("backward of a tensor that does not require grad",
     lambda M, F: M.ones(3).sum().backward(),
     None),
    ("autograd.grad of a non-scalar without grad_outputs",
     lambda M, F: _grad_non_scalar(M),
     lambda M, F, p: _graph_grad_non_scalar(M, p)),
    ("item of a tensor with several elements",
     lambda M, F: M.ones(3).item(),
     None),
    # values a creation function cannot hold (issue 23: they wrapped or came out empty)
    ("arange end beyond int64",
     lambda M, F: M.arange(2 ** 63),
     lambda M, F, p: M.arange(2 ** 63)),
    ("arange step sign against the range",
     lambda M, F: M.arange(0, 10, -1),
     lambda M, F, p: M.arange(0, 10, -1)),
    ("arange infinite end",
     lambda M, F: M.arange(float("inf")),
     None),
    ("arange of bools",
     lambda M, F: M.arange(0, 2, dtype=M.bool),
     lambda M, F, p: M.arange(0, 2, dtype=M.bool)),
    ("arange int64 step truncated to 0",
     lambda M, F: M.arange(0, 5, 0.5, dtype=M.int64),
     None),
    ("arange size beyond int64",
     lambda M, F: M.arange(0, 1e20, 1e-5),
     None),
    ("one_hot num_classes below -1",
     lambda M, F: F.one_hot(M.tensor([0, 1]), num_classes=-100),
     lambda M, F, p: F.one_hot(p((2,), "int64"), num_classes=-100)),
    ("one_hot of an empty tensor without num_classes",
     lambda M, F: F.one_hot(M.zeros(0, dtype=M.int64)),
     None),
    ("randint beyond uint8",
     lambda M, F: M.randint(0, 300, (3,), dtype=M.uint8),
     lambda M, F, p: M.randint(0, 300, (3,), seed=p((), "int64"), dtype=M.uint8)),
    ("randint below uint8",
     lambda M, F: M.randint(-5, 3, (3,), dtype=M.uint8),
     None),
    ("randint beyond int8",
     lambda M, F: M.randint(0, 256, (3,), dtype=M.int8),
     None),
    ("randint beyond int32",
     lambda M, F: M.randint(0, 2 ** 40, (3,), dtype=M.int32),
     None),
    ("randint of bools beyond 1",
     lambda M, F: M.randint(0, 3, (3,), dtype=M.bool),
     None),
    ("randint beyond float16",
     lambda M, F: M.randint(0, 70000, (3,), dtype=M.float16),
     None),
    ("randint_like beyond uint8",
     lambda M, F: M.randint_like(M.zeros(2, dtype=M.uint8), 0, 300),
     None),
    ("full beyond uint8",
     lambda M, F: M.full((2,), 300, dtype=M.uint8),
     lambda M, F, p: M.full((2,), 300, dtype=M.uint8)),
    ("full beyond int32",
     lambda M, F: M.full((2,), 1e10, dtype=M.int32),
     None),
    ("full of NaN into int32",
     lambda M, F: M.full((2,), float("nan"), dtype=M.int32),
     None),
    ("full beyond float16",
     lambda M, F: M.full((2,), 70000, dtype=M.float16),
     None),
    ("full beyond float32",
     lambda M, F: M.full((2,), 1e39),
     None),
    ("full beyond int64",
     lambda M, F: M.full((2,), 2 ** 63),
     None),
    ("full_like beyond int8",
     lambda M, F: M.full_like(M.zeros(2, dtype=M.int8), 300),
     lambda M, F, p: M.full_like(p((2,), "int8"), 300)),
    ("fill_ beyond uint8",
     lambda M, F: M.zeros(2, dtype=M.uint8).fill_(300),
     None),
    ("linspace end beyond uint8",
     lambda M, F: M.linspace(0, 300, 4, dtype=M.uint8),
     lambda M, F, p: M.linspace(0, 300, 4, dtype=M.uint8)),
    ("linspace end beyond float16",
     lambda M, F: M.linspace(0, 1e5, 3, dtype=M.float16),
     None),
]


def _backward_twice(M):
    x = M.ones(3, requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    y.backward()


def _grad_non_scalar(M):
    x = M.ones(3, requires_grad=True)
    return M.autograd.grad(x * 2, x)


def _graph_grad_non_scalar(M, p):
    x = p((3,))
    return M.grad(x * 2, [x])


def _torch_class(mistake):
    try:
        mistake(*_ns(torch))
    except Exception as e:   # noqa: BLE001 - the oracle's class is what we want
        return type(e)
    pytest.fail("torch accepted the mistake: the row is wrong")


@pytest.mark.parametrize("name, mistake, graph", CASES, ids=[c[0] for c in CASES])
def test_eager_mistake_raises_what_torch_raises(name, mistake, graph):
    expected = _torch_class(mistake)
    with pytest.raises(Exception) as info:   # noqa: PT011 - the class is checked below
        mistake(*_ns(dg))
    assert isinstance(info.value, expected), (
        f"{name}: torch raises {expected.__name__}, duograph raised "
        f"{type(info.value).__name__}: {info.value}")
    assert isinstance(info.value, dg.DuographError) or type(info.value) is expected, (
        f"{name}: a bare {type(info.value).__name__} instead of a duograph error: {info.value}")


GRAPH_CASES = [c for c in CASES if c[2] is not None]


@pytest.mark.parametrize("name, mistake, graph", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_graph_mode_mistake_raises_what_torch_raises(name, mistake, graph):
    expected = _torch_class(mistake)
    feeds = {}

    def placeholder(shape, dtype="float32"):
        key = f"x{len(feeds)}"
        feeds[key] = np.ones(shape, dtype)
        return dg.placeholder(key, shape, dtype)

    g = dg.Graph("mistake")
    with pytest.raises(Exception) as info:   # noqa: PT011 - the class is checked below
        with g:
            outs = graph(dg, dg.nn.functional, placeholder)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        g.compile(outputs=list(outs))(**feeds)
    assert isinstance(info.value, expected), (
        f"{name}: torch raises {expected.__name__}, duograph raised "
        f"{type(info.value).__name__}: {info.value}")
    assert isinstance(info.value, dg.DuographError), (
        f"{name}: a bare {type(info.value).__name__} instead of a duograph error: {info.value}")


def test_the_hierarchy_keeps_duograph_classes_and_adds_torch_ones():
    assert issubclass(dg.ShapeError, (dg.DuographError)) and issubclass(dg.ShapeError, ValueError)
    assert issubclass(dg.ShapeError, RuntimeError)
    assert issubclass(dg.DimError, dg.ShapeError) and issubclass(dg.DimError, IndexError)
    assert issubclass(dg.IndexBoundsError, dg.ShapeError)
    assert issubclass(dg.IndexBoundsError, IndexError)
    assert issubclass(dg.DTypeError, TypeError) and issubclass(dg.DTypeError, RuntimeError)
    assert issubclass(dg.UnsupportedDTypeError, dg.DTypeError)
    assert issubclass(dg.UnsupportedDTypeError, NotImplementedError)
    assert issubclass(dg.GraphError, RuntimeError)
    with pytest.raises(dg.DimError, match=r"^sum: dim 2 out of range for a tensor with 2 dims"):
        dg.ones(2, 3).sum(2)


def test_random_draws_of_integer_dtypes_and_unknown_init_modes_raise_as_torch():
    torch = pytest.importorskip("torch")
    cases = [
        (lambda m: m.rand(3, dtype=m.int64), "rand"),
        (lambda m: m.randn(2, dtype=m.int32), "randn"),
        (lambda m: m.rand_like(m.tensor([1, 2])), "rand_like"),
        (lambda m: m.randn_like(m.tensor([1, 2])), "randn_like"),
        (lambda m: m.nn.init.kaiming_uniform_(m.zeros(3, 4), mode="fan_avg"), "Mode fan_avg"),
        (lambda m: m.nn.init.kaiming_normal_(m.zeros(3, 4), mode="x"), "Mode x"),
    ]
    for make, name in cases:
        with pytest.raises(Exception) as want:
            make(torch)
        with pytest.raises(want.type) as got:
            make(dg)
        assert name in str(got.value), got.value
