"""``dg.compile(module)`` returns an ``OptimizedModule`` that is still the module (as
``torch.compile`` does): attributes, parameters, state dicts, modes, hooks, ``to()``."""
import numpy as np
import pytest

import duograph as dg
from duograph.nn.compiled import OptimizedModule


class Net(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = dg.nn.Linear(4, 8)
        self.fc2 = dg.nn.Linear(8, 1)
        self.drop = dg.nn.Dropout(0.5)

    def forward(self, x):
        return self.fc2(self.drop(dg.relu(self.fc1(x))))


def _pair():
    dg.manual_seed(0)
    eager = Net()
    dg.manual_seed(0)
    base = Net()
    return eager, base, dg.compile(base)


def test_compiled_module_trains_like_the_module_with_the_common_pattern():
    eager, base, model = _pair()
    eager.eval()
    model.eval()
    assert isinstance(model, dg.nn.Module) and isinstance(model, OptimizedModule)
    assert model._orig_mod is base
    assert [id(p) for p in model.parameters()] == [id(p) for p in base.parameters()]
    opt_e = dg.optim.Adam(eager.parameters(), lr=0.05, weight_decay=0.01)
    opt_c = dg.optim.Adam(model.parameters(), lr=0.05, weight_decay=0.01)
    x, y = dg.randn(16, 4), dg.randn(16, 1)
    for _ in range(6):
        for net, opt in ((eager, opt_e), (model, opt_c)):
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        np.testing.assert_allclose(model.fc1.weight.grad.numpy(),
                                   eager.fc1.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    # the compiled call sees the updated parameters (and recorded once per mode)
    np.testing.assert_allclose(model(x).detach().numpy(), eager(x).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert model.fc1.weight is base.fc1.weight
    assert len(model.specializations) >= 1


def test_attributes_are_forwarded_to_the_original_module():
    _, base, model = _pair()
    model.scale = 3                      # set on the original, as PyTorch does
    assert base.scale == 3 and model.scale == 3
    del model.scale
    assert not hasattr(base, "scale")
    assert model.fc2 is base.fc2
    with pytest.raises(AttributeError, match="nope"):
        model.nope
    assert "fc1" in dir(model)


def test_names_and_state_dict_carry_the_orig_mod_prefix_as_pytorch():
    _, base, model = _pair()
    names = [n for n, _ in model.named_parameters()]
    assert names == ["_orig_mod." + n for n, _ in base.named_parameters()]
    sd = model.state_dict()
    assert list(sd) == ["_orig_mod." + k for k in base.state_dict()]
    new = {k: v * 0 for k, v in sd.items()}
    model.load_state_dict(new)
    assert float(base.fc1.weight.abs().sum().item()) == 0.0
    with pytest.raises(dg.nn.StateDictError, match="missing keys"):
        model.load_state_dict(base.state_dict())      # PyTorch refuses unprefixed keys too
    base.load_state_dict({k[len("_orig_mod."):]: v + 1 for k, v in new.items()})


def test_train_eval_and_training_flag_are_the_originals():
    _, base, model = _pair()
    assert model.training and base.training
    model.eval()
    assert not base.training and not base.fc1.training and not model.training
    base.train()
    assert model.training
    x = dg.randn(5, 4)
    model.eval()
    with dg.no_grad():
        np.testing.assert_allclose(model(x).numpy(), base(x).numpy(), rtol=1e-6)


def test_hooks_on_wrapper_and_on_original_run():
    _, base, model = _pair()
    model.eval()
    seen = []
    h1 = model.register_forward_hook(lambda m, a, out: seen.append("outer") or out * 2)
    h2 = base.fc2.register_forward_hook(lambda m, a, out: out + 1)
    x = dg.randn(3, 4)
    with dg.no_grad():
        want = (base.fc2(dg.relu(base.fc1(x)))) * 2
        got = model(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert seen == ["outer"]
    h1.remove()
    h2.remove()
    with dg.no_grad():
        np.testing.assert_allclose(model(x).numpy(), base(x).numpy(), rtol=1e-6)


def test_to_converts_the_original_and_the_compiled_call_follows():
    _, base, model = _pair()
    model.eval()
    assert model.to(dg.float64) is model
    assert base.fc1.weight.dtype == "float64"
    x = dg.randn(2, 4).double()
    assert model(x).dtype == "float64"


def test_compile_options_of_pytorch_are_accepted_and_others_refused():
    _, base, _ = _pair()
    assert dg.compile(base, disable=True) is base
    assert isinstance(dg.compile(base, mode="reduce-overhead", fullgraph=True),
                      OptimizedModule)
    with pytest.raises(TypeError, match="unexpected keyword"):
        dg.compile(base, modee="x")
    f = dg.compile(lambda t: t * 2)
    assert not isinstance(f, dg.nn.Module)
    assert float(f(dg.tensor(2.0)).item()) == 4.0


def test_backward_hook_on_the_compiled_module_runs():
    _, base, model = _pair()
    model.eval()
    seen = []
    model.register_full_backward_hook(lambda m, gi, go: seen.append(go[0].shape))
    x = dg.randn(3, 4, requires_grad=True)
    model(x).sum().backward()
    assert seen == [(3, 1)] and x.grad is not None
