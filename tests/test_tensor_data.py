"""``Tensor.data`` is PyTorch's: a tensor sharing the storage, without autograd history, whose
in-place changes autograd does not see; ``t.data = other`` swaps the storage. The raw array is
``t.array`` (also the state-holder protocol the runtime reads and writes)."""
import numpy as np
import pytest

import duograph as dg


def _both():
    torch = pytest.importorskip("torch")
    return torch


def test_data_is_a_tensor_sharing_memory_without_history():
    w = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    d = w.data
    assert isinstance(d, dg.Tensor) and not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d.array, w.array)
    d[0] = 5.0                                   # writes through to w
    assert w.detach().numpy().tolist() == [5.0, 2.0, 3.0]
    assert isinstance(w.array, np.ndarray)


def test_tutorial_idioms_match_torch():
    torch = _both()
    init = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    x_np = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    results = {}
    for lib in (torch, dg):
        w = lib.tensor(init.copy(), requires_grad=True)
        x = lib.tensor(x_np)
        for _ in range(3):
            loss = ((x @ w) ** 2).sum()
            loss.backward()
            w.data -= 0.01 * w.grad.data            # the classic manual SGD step
            w.grad.data.zero_()                     # and zeroing the gradient through .data
        snapshot = w.data.clone()
        results[lib.__name__] = (np.array(w.detach().numpy()), np.array(w.grad.numpy()),
                                 np.array(snapshot.numpy()), w.requires_grad,
                                 snapshot.requires_grad)
    t, d = results["torch"], results["duograph"]
    np.testing.assert_allclose(d[0], t[0], rtol=1e-6)
    np.testing.assert_array_equal(d[1], t[1])      # zeroed in both
    np.testing.assert_allclose(d[2], t[2], rtol=1e-6)
    assert d[3:] == t[3:] == (True, False)


def test_data_assignment_swaps_the_storage_like_torch():
    torch = _both()
    for lib in (torch, dg):
        w = lib.zeros(2, 3, requires_grad=True)
        w.data = lib.ones(4)                      # any shape, as torch allows
        assert tuple(w.shape) == (4,) and w.requires_grad
        assert float(w.sum().item() if lib is torch else w.sum().item()) == 4.0
    w = dg.zeros(2)
    with pytest.raises(TypeError, match="Tensor.data: expected a tensor"):
        w.data = [1.0, 2.0]


def test_writes_through_data_are_not_seen_by_autograd_as_in_torch():
    torch = _both()
    grads = {}
    for lib in (torch, dg):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        b = a * 1.0
        y = (b * b).sum()          # saves b
        b.data.mul_(0.0)           # torch does not notice this write: no error at backward
        y.backward()
        grads[lib.__name__] = np.array(a.grad.numpy())
    np.testing.assert_array_equal(grads["duograph"], grads["torch"])


def test_graph_state_binds_through_the_array_protocol():
    w = dg.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    g = dg.Graph("bind")
    with g:
        v = g.bind_state(w, "w")
        g.update(v, v * 2.0)
    exe = g.compile()
    before = w.array
    exe()
    assert w.array is before and np.all(w.array == 2.0)   # written in place, same array
