"""nn.utils.clip_grad_value_, parameters_to_vector and vector_to_parameters against torch."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn

torch = pytest.importorskip("torch")


def _pair():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    ours = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32) * 4
    (theirs(torch.tensor(x)) ** 2).sum().backward()
    (ours(dg.tensor(x)) ** 2).sum().backward()
    return ours, theirs


def test_clip_grad_value_matches_torch():
    ours, theirs = _pair()
    assert torch.nn.utils.clip_grad_value_(theirs.parameters(), 0.3) is None
    assert nn.utils.clip_grad_value_(ours.parameters(), 0.3) is None
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
        assert np.abs(p.grad.numpy()).max() <= 0.3
    assert (np.abs(theirs[0].weight.grad.numpy()) == 0.3).any()    # something was clipped
    single = ours[0].bias
    nn.utils.clip_grad_value_(single, 0.01)                         # one tensor is accepted
    assert np.abs(single.grad.numpy()).max() <= 0.01


def test_parameters_to_vector_and_back_match_torch():
    ours, theirs = _pair()
    v_ours = nn.utils.parameters_to_vector(ours.parameters())
    v_theirs = torch.nn.utils.parameters_to_vector(theirs.parameters())
    assert v_ours.shape == tuple(v_theirs.shape) == (4 * 3 + 4 + 2 * 4 + 2,)
    np.testing.assert_array_equal(v_ours.detach().numpy(), v_theirs.detach().numpy())
    # differentiable, as torch's
    weights = np.arange(v_ours.shape[0], dtype=np.float32)
    for p in ours.parameters():
        p.grad = None
    (v_ours * dg.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(ours[0].weight.grad.numpy(), weights[:12].reshape(4, 3))
    new = np.linspace(-1, 1, v_ours.shape[0]).astype(np.float32)
    first = ours[0].weight
    nn.utils.vector_to_parameters(dg.tensor(new), ours.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), theirs.parameters())
    assert ours[0].weight is first                                  # updated in place
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    with pytest.raises(TypeError):
        torch.nn.utils.vector_to_parameters(new, theirs.parameters())
    with pytest.raises(TypeError):
        nn.utils.vector_to_parameters(new, ours.parameters())
    with pytest.raises(ValueError):
        nn.utils.vector_to_parameters(dg.tensor(new[:-1]), ours.parameters())
