"""Tensor methods PyTorch code calls, against torch: values, eager gradients, graph mode."""
import numpy as np
import pytest

import duograph as dg

torch = pytest.importorskip("torch")

X = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7.0 - 1.0
CASES = {
    "chunk": lambda t: t.chunk(2, 2)[1],
    "view_as": lambda t: t.view_as(t.reshape(6, 4)),
    "narrow": lambda t: t.narrow(2, 1, 2),
    "movedim": lambda t: t.movedim(0, 2),
    "movedim_many": lambda t: t.movedim((0, 1), (2, 0)),
    "unflatten": lambda t: t.unflatten(2, (2, 2)),
    "tril": lambda t: t.tril(),
    "triu_1": lambda t: t.triu(1),
    "tril_neg": lambda t: t.tril(-1),
    "repeat_more_dims": lambda t: t.repeat(2, 1, 1, 2),
    "repeat": lambda t: t.repeat(1, 2, 3),
    "masked_fill": lambda t: t.masked_fill(t > 0.5, -1.0),
    "where": lambda t: t.where(t > 0, t * 2),
    "bmm": lambda t: t.bmm(t.transpose(1, 2)),
    "baddbmm": lambda t: t.bmm(t.transpose(1, 2)).baddbmm(t, t.transpose(1, 2), beta=0.5,
                                                          alpha=2.0),
    "outer": lambda t: t.reshape(24).outer(t.reshape(24)[:3]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_methods_match_torch_with_gradients(name):
    fn = CASES[name]
    tx = torch.tensor(X, requires_grad=True)
    want = fn(tx)
    (want * want).sum().backward()
    x = dg.tensor(X, requires_grad=True)
    got = fn(x)
    (got * got).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    g = dg.Graph("m")
    with g:
        v = dg.placeholder("x", X.shape, "float64")
        y = fn(v)
    np.testing.assert_allclose(g.compile(outputs=[y], passes="O2")(x=X)[0],
                               want.detach().numpy(), rtol=1e-12)


def test_constructors_and_queries():
    t, tt = dg.tensor(X), torch.tensor(X)
    for a, b in [(t.new_zeros(2, 3), tt.new_zeros(2, 3)), (t.new_ones(2), tt.new_ones(2)),
                 (t.new_full((2,), 7.0), tt.new_full((2,), 7.0)),
                 (t.new_tensor([1, 2]), tt.new_tensor([1, 2])), (t.byte(), tt.byte()),
                 (t.short(), tt.short())]:
        assert str(a.dtype) == str(b.dtype).replace("torch.", "")
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert (t.nelement(), t.ndimension(), t.is_contiguous()) == (24, 3, True)
    with pytest.raises(dg.ShapeError, match="bmm: expected two 3-D tensors"):
        t[0].bmm(t)
