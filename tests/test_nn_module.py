"""nn.Module: registration, traversal, modes, dtype conversion, state dicts, hooks, repr.

PyTorch is only an oracle here: without it the comparisons skip, the rest still runs."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn

try:
    import torch
except ImportError:  # the oracle is optional
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)
        self.scale = nn.Parameter(np.ones(1, np.float32))
        self.register_buffer("steps", dg.tensor(np.zeros((), np.int64)))
        self.register_buffer("scratch", dg.tensor(np.zeros(3, np.float32)), persistent=False)
        self.plain_list = [nn.Linear(2, 2)]          # NOT registered
        self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Tanh()])
        self.heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Identity()})

    def forward(self, x):
        return self.fc2(self.act(self.bn(self.fc1(x)))) * self.scale


def _arr(t):
    return np.array(t.detach().numpy() if hasattr(t, "detach") else t)


# -- registration ------------------------------------------------------------------------------
def test_registration_by_attribute_assignment():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight",
                     "fc2.bias", "blocks.0.weight", "blocks.0.bias", "heads.a.weight",
                     "heads.a.bias"]
    assert not any(n.startswith("plain_list") for n in names)
    assert [n for n, _ in net.named_buffers()] == [
        "steps", "scratch", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert [n for n, _ in net.named_children()] == ["fc1", "bn", "act", "fc2", "blocks",
                                                    "heads"]
    assert list(net.children())[0] is net.fc1
    mods = [n for n, _ in net.named_modules()]
    assert mods == ["", "fc1", "bn", "act", "fc2", "blocks", "blocks.0", "blocks.1", "heads",
                    "heads.a", "heads.b"]
    assert len(list(net.modules())) == len(mods)
    assert len(list(net.parameters())) == len(names)
    assert len(list(net.parameters(recurse=False))) == 1
    assert len(list(net.buffers())) == 5
    assert isinstance(net.fc1.weight, nn.Parameter) and net.fc1.weight.requires_grad


@needs_torch
def test_same_order_and_names_as_torch():
    ours = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(),
                         nn.Sequential(nn.Linear(4, 2), nn.LayerNorm(2)))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                 torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2),
                                                                      torch.nn.LayerNorm(2)))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (n, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert tuple(a.shape) == tuple(b.shape), n


def test_reassigning_and_deleting_attributes():
    m = nn.Module()
    m.w = nn.Parameter(np.ones(2, np.float32))
    m.sub = nn.Linear(2, 2)
    assert [n for n, _ in m.named_parameters()] == ["w", "sub.weight", "sub.bias"]
    m.sub = None                       # as PyTorch: the slot stays, holding None
    assert m.sub is None and [n for n, _ in m.named_parameters()] == ["w"]
    m.w = None
    assert m.w is None and list(m.parameters()) == []
    with pytest.raises(TypeError, match="Parameter"):
        m.w = dg.tensor(np.ones(2, np.float32))   # a plain tensor is not a parameter
    m.w = nn.Parameter(np.zeros(2, np.float32))
    del m.w
    assert not hasattr(m, "w")
    m.register_buffer("buf", dg.tensor(np.ones(2, np.float32)))
    m.buf = dg.tensor(np.zeros(2, np.float32))
    assert np.all(_arr(dict(m.named_buffers())["buf"]) == 0)
    with pytest.raises(TypeError, match="buf"):
        m.buf = 3.0
    m.count = 3                          # a plain attribute
    assert m.count == 3 and "count" not in m.state_dict()


def test_shared_module_counts_once_but_is_saved_under_each_name():
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(seq.parameters())) == 2
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1"]          # as PyTorch
    assert [n for n, _ in seq.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    if torch is None:
        return
    tshared = torch.nn.Linear(2, 2)
    tseq = torch.nn.Sequential(tshared, torch.nn.ReLU(), tshared)
    assert [n for n, _ in seq.named_modules()] == [n for n, _ in tseq.named_modules()]
    assert list(seq.state_dict()) == list(tseq.state_dict())
    seq.load_state_dict(tseq.state_dict())       # a torch checkpoint loads strictly
    np.testing.assert_array_equal(_arr(shared.weight), tshared.weight.detach().numpy())


def test_super_init_missing_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"super\(\)\.__init__\(\)"):
        Bad()


def test_sequential_modulelist_moduledict_api():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seq.append(nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    assert isinstance(seq[1:], nn.Sequential) and len(seq[1:]) == 2
    assert [n for n, _ in seq[1:].named_children()] == ["1", "2"]     # names kept, as torch
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict([("inp", nn.Linear(2, 2)), ("out", nn.Linear(2, 1))]))
    assert [n for n, _ in named.named_children()] == ["inp", "out"]
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.extend([nn.ReLU(), nn.Tanh()])
    assert len(ml) == 3 and [type(m).__name__ for m in ml] == ["Linear", "ReLU", "Tanh"]
    md = nn.ModuleDict()
    md["x"] = nn.Linear(1, 1)
    assert "x" in md and list(md.keys()) == ["x"] and len(list(md.parameters())) == 2


# -- modes, grads, dtype -------------------------------------------------------------------------
def test_train_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.blocks.eval()
    assert not net.blocks[0].training and net.fc1.training


def test_zero_grad():
    net = nn.Sequential(nn.Linear(3, 2))
    net(dg.randn(4, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np.any(_arr(p.grad)) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net[0].bias.grad = dg.tensor(np.array([np.nan, np.inf]))
    net.zero_grad(set_to_none=False)             # zeros, not nan * 0
    np.testing.assert_array_equal(_arr(net[0].bias.grad), [0.0, 0.0])


def test_to_dtype_converts_float_parameters_and_buffers_only():
    net = Net()
    params = list(net.parameters())
    assert net.double() is net
    assert all(p.dtype == "float64" for p in net.parameters())
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]   # same objects
    assert all(p.requires_grad for p in net.parameters())
    assert net.bn.running_mean.dtype == "float64"
    assert net.bn.num_batches_tracked.dtype == "int64"
    assert net.steps.dtype == "int64"
    net.to(dg.float32)
    assert net.fc1.weight.dtype == "float32" and net.bn.running_var.dtype == "float32"
    out = net.double()(dg.randn(3, 4).double())
    assert out.dtype == "float64"


def test_to_device_and_dtype_arguments():
    net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    weight = net[0].weight
    assert net.to("cpu") is net and net.to(device="cpu", dtype="float64") is net
    assert net[0].weight is weight and weight.dtype == "float64" and weight.device == "cpu"
    assert net.to(np.float32)[1].running_mean.dtype == "float32"
    net.cpu()
    with pytest.raises((TypeError, ValueError), match="xpu"):
        net.to("xpu")


def test_requires_grad_and_apply():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Linear", "Sequential"]     # children first, as PyTorch


# -- state dicts --------------------------------------------------------------------------------
def test_state_dict_round_trip():
    a, b = Net(), Net()
    sd = a.state_dict()
    assert "scratch" not in sd and "steps" in sd and "bn.num_batches_tracked" in sd
    assert "plain_list.0.weight" not in sd
    result = b.load_state_dict(sd)
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(_arr(v), _arr(sd[k]))
    x = dg.randn(5, 4)
    a.eval(), b.eval()
    np.testing.assert_array_equal(_arr(a(x)), _arr(b(x)))
    # the loaded values are copies: changing the source does not change the target
    with dg.no_grad():
        a.fc1.weight.add_(1.0)
    assert not np.array_equal(_arr(a.fc1.weight), _arr(b.fc1.weight))


def test_state_dict_accepts_numpy_values():
    ours, source = nn.Linear(3, 2), nn.Linear(3, 2)
    ours.load_state_dict({k: np.array(_arr(v)) for k, v in source.state_dict().items()})
    np.testing.assert_array_equal(_arr(ours.weight), _arr(source.weight))
    assert isinstance(ours.weight, nn.Parameter) and ours.weight.requires_grad


@needs_torch
def test_state_dict_accepts_numpy_and_torch_values():
    ours = nn.Linear(3, 2)
    theirs = torch.nn.Linear(3, 2)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    np.testing.assert_array_equal(_arr(ours.weight), theirs.weight.detach().numpy())
    ours.load_state_dict(theirs.state_dict())          # torch tensors convert via __array__
    np.testing.assert_array_equal(_arr(ours.bias), theirs.bias.detach().numpy())


def test_load_state_dict_missing_keys():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    sd = net.state_dict()
    del sd["1.bias"]
    with pytest.raises(nn.StateDictError, match=r"(?s)Sequential.*missing.*1\.bias"):
        net.load_state_dict(sd)
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert missing == ["1.bias"] and unexpected == []


def test_load_state_dict_unexpected_keys():
    net = nn.Linear(2, 2)
    sd = dict(net.state_dict())
    sd["extra.weight"] = np.zeros(3)
    with pytest.raises(nn.StateDictError, match=r"unexpected.*extra\.weight"):
        net.load_state_dict(sd)
    before = _arr(net.weight)
    sd["weight"] = np.full((2, 2), 7.0)
    result = net.load_state_dict(sd, strict=False)
    assert result.unexpected_keys == ["extra.weight"] and result.missing_keys == []
    np.testing.assert_array_equal(_arr(net.weight), np.full((2, 2), 7.0))
    assert before.shape == (2, 2)


def test_load_state_dict_shape_mismatch_raises_even_when_not_strict():
    net = nn.Linear(2, 3)
    bias = _arr(net.bias).copy()
    sd = {"weight": np.zeros((3, 5)), "bias": bias + 1.0}
    for strict in (True, False):
        with pytest.raises(nn.StateDictError, match=r"weight.*\[3, 5\].*\[3, 2\]"):
            net.load_state_dict(sd, strict=strict)
    np.testing.assert_array_equal(_arr(net.bias), bias)       # nothing was half-loaded
    assert isinstance(nn.StateDictError("x"), KeyError)


def test_load_state_dict_error_lists_every_problem_at_once():
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    sd = dict(net.state_dict())
    del sd["1.running_var"]
    sd["0.weight"] = np.zeros((1, 1))
    sd["bogus"] = np.zeros(1)
    with pytest.raises(nn.StateDictError) as info:
        net.load_state_dict(sd)
    text = str(info.value)
    assert "1.running_var" in text and "bogus" in text and "0.weight" in text


def test_buffers_and_num_batches_tracked_load():
    a, b = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    a(dg.randn(8, 3))
    a(dg.randn(8, 3))
    b.load_state_dict(a.state_dict())
    assert int(b.num_batches_tracked.item()) == 2
    np.testing.assert_array_equal(_arr(b.running_mean), _arr(a.running_mean))


# -- hooks -------------------------------------------------------------------------------------
def test_forward_pre_and_post_hooks_and_removal():
    lin = nn.Linear(2, 2)
    calls = []

    def pre(module, args):
        calls.append(("pre", module))
        return (args[0] * 0.0,)

    def post(module, args, output):
        calls.append(("post", output.shape))
        return output + 1.0

    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    x = dg.randn(3, 2)
    out = lin(x)
    assert calls == [("pre", lin), ("post", (3, 2))]
    expected = _arr(lin.bias) + 1.0
    np.testing.assert_allclose(_arr(out), np.broadcast_to(expected, (3, 2)), rtol=1e-6)
    h1.remove()
    h2.remove()
    h2.remove()                                  # removing twice is harmless
    calls.clear()
    np.testing.assert_allclose(_arr(lin(x)), _arr(x) @ _arr(lin.weight).T + _arr(lin.bias),
                               rtol=1e-5)
    assert calls == []


def test_hook_returning_none_keeps_values_and_hooks_run_in_order():
    lin = nn.Identity()
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append(1))
    lin.register_forward_hook(lambda m, a, o: order.append(2))
    x = dg.randn(2)
    assert lin(x) is x and order == [1, 2]


def test_hooks_fire_in_graph_mode():
    lin = nn.Linear(2, 2)
    seen = []
    lin.register_forward_hook(lambda m, args, out: seen.append(type(out).__name__))
    g = dg.Graph("hooks")
    with g:
        x = dg.placeholder("x", ("N", 2))
        y = lin(x)
    assert seen == ["Value"] and tuple(y.shape) == ("N", 2)


# -- repr --------------------------------------------------------------------------------------
def _pairs():
    return [
        (nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)),
         torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))),
        (nn.Sequential(nn.Linear(4, 3, bias=False), nn.BatchNorm1d(3), nn.GELU(),
                       nn.Dropout(0.1), nn.Sequential(nn.LayerNorm(3), nn.Tanh()),
                       nn.Linear(3, 2)),
         torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.BatchNorm1d(3),
                             torch.nn.GELU(), torch.nn.Dropout(0.1),
                             torch.nn.Sequential(torch.nn.LayerNorm(3), torch.nn.Tanh()),
                             torch.nn.Linear(3, 2))),
        (nn.ModuleList([nn.Embedding(10, 3, padding_idx=0), nn.LeakyReLU(0.2),
                        nn.Softmax(dim=1), nn.LogSoftmax(dim=-1), nn.Flatten(),
                        nn.Identity(), nn.Sigmoid(), nn.BatchNorm2d(4), nn.GELU("tanh")]),
         torch.nn.ModuleList([torch.nn.Embedding(10, 3, padding_idx=0),
                              torch.nn.LeakyReLU(0.2), torch.nn.Softmax(dim=1),
                              torch.nn.LogSoftmax(dim=-1), torch.nn.Flatten(),
                              torch.nn.Identity(), torch.nn.Sigmoid(),
                              torch.nn.BatchNorm2d(4), torch.nn.GELU("tanh")])),
        (nn.ModuleDict({"a": nn.Linear(1, 1), "b": nn.MSELoss(), "c": nn.CrossEntropyLoss()}),
         torch.nn.ModuleDict({"a": torch.nn.Linear(1, 1), "b": torch.nn.MSELoss(),
                              "c": torch.nn.CrossEntropyLoss()})),
        (nn.Linear(2, 2), torch.nn.Linear(2, 2)),
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.Sequential(), torch.nn.Sequential()),
    ]


@needs_torch
@pytest.mark.parametrize("index", range(7))
def test_repr_matches_torch(index):
    ours, theirs = _pairs()[index]
    assert repr(ours) == repr(theirs)


@needs_torch
def test_conv_and_pool_repr_matches_torch():
    ours = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, (3, 5), stride=2, bias=False), nn.AvgPool2d(2),
                         nn.AdaptiveAvgPool2d((1, 1)))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.MaxPool2d(2),
                                 torch.nn.Conv2d(4, 4, (3, 5), stride=2, bias=False),
                                 torch.nn.AvgPool2d(2), torch.nn.AdaptiveAvgPool2d((1, 1)))
    assert repr(ours) == repr(theirs)


def test_nested_repr_layout_as_torch_prints_it():
    ours = nn.Sequential(nn.Linear(4, 3, bias=False), nn.BatchNorm1d(3), nn.Dropout(0.1),
                         nn.Sequential(nn.LayerNorm(3), nn.Tanh()))
    assert repr(ours) == """Sequential(
  (0): Linear(in_features=4, out_features=3, bias=False)
  (1): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
  (2): Dropout(p=0.1, inplace=False)
  (3): Sequential(
    (0): LayerNorm((3,), eps=1e-05, elementwise_affine=True, bias=True)
    (1): Tanh()
  )
)"""


def test_custom_module_repr_layout():
    net = Net()
    text = repr(net)
    assert text.startswith("Net(\n  (fc1): Linear(in_features=4, out_features=8, bias=True)")
    assert "  (blocks): ModuleList(\n    (0): Linear(in_features=2, out_features=2" in text
    assert text.endswith("\n)")
    assert "plain_list" not in text


def test_dir_lists_registered_names():
    net = Net()
    assert {"fc1", "scale", "steps"} <= set(dir(net))
