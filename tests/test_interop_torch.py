"""Reading what PyTorch writes and hands over: plain safetensors files (``dg.load``),
bfloat16 through DLPack both ways, and the DataLoader over datasets of PyTorch tensors."""
from __future__ import annotations

import numpy as np
import pytest

import duograph as dg
from duograph.data import DataLoader, default_collate

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def test_load_state_dict_from_a_file_pytorch_saved(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(net.state_dict(), str(path))
    state = dg.load(path)
    assert sorted(state) == sorted(net.state_dict()) and list(state) == sorted(state)
    ours = dg.nn.Sequential(dg.nn.Linear(4, 3), dg.nn.ReLU(), dg.nn.Linear(3, 2))
    ours.load_state_dict(state)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(ours(dg.tensor(x)).detach().numpy(),
                               net(torch.tensor(x)).detach().numpy(), rtol=1e-6)


def test_plain_file_with_bfloat16_and_odd_dtypes(tmp_path):
    path = tmp_path / "mixed.safetensors"
    tensors = {"w": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
               "i": torch.arange(3, dtype=torch.int32), "u": torch.zeros(2, dtype=torch.uint16)}
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    state = dg.load(path)
    assert state["w"].dtype == "bfloat16" and state["i"].dtype == "int32"
    np.testing.assert_array_equal(state["w"].float().numpy(), [1.5, -2.25])
    assert state["u"].dtype == "uint16"          # a real dtype now, as in PyTorch


def test_uint_and_float8_checkpoints_round_trip_with_pytorch(tmp_path):
    path = tmp_path / "f8.safetensors"
    x = torch.tensor([1.0, -3.5, 448.0, 0.015625])
    tensors = {"a": x.to(torch.float8_e4m3fn), "b": x.to(torch.float8_e5m2),
               "u": torch.tensor([1, 70000], dtype=torch.uint32),
               "v": torch.tensor([2 ** 63 + 5], dtype=torch.uint64)}
    safetensors_torch.save_file(tensors, str(path))
    state = dg.load(path)
    for name, t in tensors.items():
        assert state[name].dtype == str(t.dtype).replace("torch.", "")
        np.testing.assert_array_equal(state[name].cast("float64").numpy()
                                      if name in "ab" else state[name].numpy(),
                                      t.double().numpy() if name in "ab" else t.numpy())
    out = tmp_path / "back.safetensors"
    dg.save(state, out)
    back = safetensors_torch.load_file(str(out))
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].view(torch.uint8).equal(
            t.view(torch.uint8))


def test_bfloat16_checkpoint_round_trip_reads_in_pytorch(tmp_path):
    path = tmp_path / "bf16.safetensors"
    w = dg.tensor([[0.5, -3.0], [7.25, 1e-3]]).to("bfloat16")
    dg.save({"w": w}, path)
    back = dg.load(path)["w"]
    assert back.dtype == "bfloat16"
    np.testing.assert_array_equal(back.float().numpy(), w.float().numpy())
    theirs = safetensors_torch.load_file(str(path))["w"]
    assert theirs.dtype == torch.bfloat16
    np.testing.assert_array_equal(theirs.float().numpy(), w.float().numpy())


def test_bfloat16_through_dlpack_both_ways_shares_memory():
    t = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    for ours in (dg.from_dlpack(t), dg.as_tensor(t)):
        assert ours.dtype == "bfloat16"
        np.testing.assert_array_equal(ours.float().numpy(), [1.5, -2.25, 3.0])
    ours = dg.from_dlpack(t)
    t[0] = 8.0
    assert ours.float().numpy()[0] == 8.0
    back = torch.from_dlpack(ours)
    assert back.dtype == torch.bfloat16 and back.data_ptr() == t.data_ptr()
    mine = dg.tensor([0.25, 4.0]).to("bfloat16")
    theirs = torch.from_dlpack(mine)
    assert theirs.dtype == torch.bfloat16 and theirs.tolist() == [0.25, 4.0]
    grad_t = torch.ones(2, dtype=torch.bfloat16, requires_grad=True)
    assert dg.as_tensor(grad_t).dtype == "bfloat16"
    assert dg.as_tensor(torch.ones(2, dtype=torch.float64), dtype="float32").dtype == "float32"


class _TorchDataset:
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return (torch.full((2, 3), float(i)), torch.tensor(i),
                {"half": torch.full((2,), i, dtype=torch.bfloat16),
                 "grad": torch.ones(3, requires_grad=True) * i})


def test_data_loader_batches_pytorch_tensors():
    batches = list(DataLoader(_TorchDataset(), batch_size=2))
    assert len(batches) == 3
    x, y, extra = batches[0]
    assert isinstance(x, dg.Tensor) and x.shape == (2, 2, 3) and x.dtype == "float32"
    assert y.dtype == "int64" and y.tolist() == [0, 1]
    assert extra["half"].dtype == "bfloat16" and extra["half"].shape == (2, 2)
    np.testing.assert_array_equal(extra["grad"].numpy(), [[0, 0, 0], [1, 1, 1]])
    assert not extra["grad"].requires_grad
    assert batches[2][0].shape == (1, 2, 3)


def test_default_collate_refuses_a_mixed_batch():
    with pytest.raises(TypeError, match="mixes arrays"):
        default_collate([torch.ones(2), 3])
