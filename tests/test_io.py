"""duograph.io: safetensors checkpoints: round trips, atomic writes, clear errors, no pickle."""
from __future__ import annotations

import io
import json
import math
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import duograph as dg
from duograph.io import CheckpointError

DTYPES = ("float16", "float32", "float64", "int32", "int64", "uint8", "bool")


def _array(dtype: str, shape=(2, 3)) -> np.ndarray:
    values = np.arange(int(np.prod(shape))).reshape(shape) % 5
    return values.astype(dtype)


def _checkpoint() -> dict:
    return {
        "model": {f"layer.{d}": dg.from_numpy(_array(d)) for d in DTYPES},
        "buffers": {f"np_{d}": _array(d, (4,)) for d in DTYPES},
        "optimizer": {"state": {0: {"step": 12, "exp_avg": dg.zeros(2, 3)}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "nesterov": False,
                                        "name": None}]},
        "epoch": 3,
        "scalar": dg.tensor(2.5),
        "empty": np.zeros((0, 4), np.float32),
        "note": "ünïcode / text",
    }


class MarkerPayload:
    """Unpickling this creates the marker file: it must never happen."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _raw_safetensors(tensors: dict, metadata: dict) -> bytes:
    return safetensors.numpy.save(tensors, metadata=metadata)


def _duograph_metadata(tree) -> dict:
    return {"format": "duograph.checkpoint", "version": "1", "tree": json.dumps(tree)}


# -- round trips ---------------------------------------------------------------------------------

def test_round_trip_every_dtype_and_leaf_kind(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    saved = _checkpoint()
    dg.save(saved, path)
    loaded = dg.load(path)
    assert list(loaded) == list(saved)
    for d in DTYPES:
        t = loaded["model"][f"layer.{d}"]
        assert isinstance(t, dg.Tensor) and t.dtype == d and t.shape == (2, 3)
        np.testing.assert_array_equal(t.numpy(), _array(d))
        a = loaded["buffers"][f"np_{d}"]
        assert type(a) is np.ndarray and a.dtype == np.dtype(d) and a.shape == (4,)
        np.testing.assert_array_equal(a, _array(d, (4,)))
    optimizer = loaded["optimizer"]
    assert optimizer["state"][0]["step"] == 12 and 0 in optimizer["state"]
    assert optimizer["param_groups"] == [{"lr": 1e-3, "betas": (0.9, 0.999), "nesterov": False,
                                          "name": None}]
    assert isinstance(optimizer["param_groups"][0]["betas"], tuple)
    assert loaded["epoch"] == 3 and loaded["note"] == saved["note"]
    assert loaded["scalar"].shape == () and loaded["scalar"].item() == 2.5
    assert loaded["empty"].shape == (0, 4) and loaded["empty"].dtype == np.float32
    loaded["model"]["layer.float32"].add_(1.0)   # loaded tensors are writable


def test_plain_values_round_trip_exactly():
    values = {"third": 1 / 3, "inf": float("inf"), "nan": float("nan"), "big": 2**80,
              "neg": -7, "true": True, "np_f32": np.float32(0.1), "np_i64": np.int64(-3),
              "np_bool": np.bool_(True), "nested": [[], (), {}, [None, ("a", 1)]]}
    loaded = dg.io.from_bytes(dg.io.to_bytes(values))
    assert loaded["third"] == 1 / 3 and loaded["inf"] == math.inf and math.isnan(loaded["nan"])
    assert loaded["big"] == 2**80 and loaded["neg"] == -7 and loaded["true"] is True
    assert type(loaded["np_f32"]) is np.float32 and loaded["np_f32"] == np.float32(0.1)
    assert type(loaded["np_i64"]) is np.int64 and loaded["np_i64"] == -3
    assert type(loaded["np_bool"]) is np.bool_
    assert loaded["nested"] == [[], (), {}, [None, ("a", 1)]]
    assert dg.io.from_bytes(dg.io.to_bytes(dg.ones(2))).numpy().tolist() == [1.0, 1.0]


def test_keys_with_dots_slashes_and_lookalikes_do_not_collide():
    keys = ["a/b", "a~1b", "a", "a.b", "~", "~i1", "1", 1, "~b1", "", "__metadata__", "a//b"]
    saved = {key: dg.full((1,), float(i)) for i, key in enumerate(keys)}
    saved["a"] = {"b": dg.full((1,), 100.0)}   # nested a -> b versus the flat key "a/b"
    data = dg.io.to_bytes(saved)
    assert len(safetensors.numpy.load(data)) == len(keys)   # every tensor has its own name
    loaded = dg.io.from_bytes(data)
    assert list(loaded) == list(saved)
    for key, value in saved.items():
        if key == "a":
            assert loaded["a"]["b"].item() == 100.0
        else:
            assert loaded[key].item() == value.item(), key
    bool_keys = dg.io.from_bytes(dg.io.to_bytes({True: dg.ones(1), "~b1": dg.zeros(1)}))
    assert bool_keys[True].item() == 1.0 and bool_keys["~b1"].item() == 0.0
    assert type(next(iter(bool_keys))) is bool


def test_shared_tensors_are_stored_once_and_requires_grad_kept():
    w = dg.randn(3, 3, requires_grad=True)
    data = dg.io.to_bytes({"encoder": w, "decoder": w, "frozen": dg.ones(2)})
    assert len(safetensors.numpy.load(data)) == 2
    loaded = dg.io.from_bytes(data)
    assert loaded["encoder"] is loaded["decoder"] and loaded["encoder"].requires_grad
    assert not loaded["frozen"].requires_grad


def test_file_objects_and_unsupported_content():
    buffer = io.BytesIO()
    dg.save({"w": dg.ones(2)}, buffer)
    buffer.seek(0)
    assert dg.load(buffer)["w"].numpy().tolist() == [1.0, 1.0]
    with pytest.raises(CheckpointError, match=r"checkpoint\['opt'\]\[0\] is a set"):
        dg.io.to_bytes({"opt": [{1, 2}]})
    with pytest.raises(CheckpointError, match="key of type tuple"):
        dg.io.to_bytes({(1, 2): 3})
    with pytest.raises(CheckpointError, match="dtype complex128"):
        dg.io.to_bytes({"z": np.zeros(2, np.complex128)})
    cycle: dict = {}
    cycle["self"] = cycle
    with pytest.raises(CheckpointError, match="reference cycle"):
        dg.io.to_bytes(cycle)


# -- atomic writes -------------------------------------------------------------------------------

def test_crash_during_replace_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    dg.save({"epoch": 1, "w": dg.ones(3)}, path)
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("simulated crash during rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        dg.save({"epoch": 2, "w": dg.zeros(3)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]   # no temporary file left behind
    monkeypatch.undo()
    assert dg.load(path)["epoch"] == 1


def test_crash_during_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    dg.save({"epoch": 1}, path)

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        dg.save({"epoch": 2}, path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]
    assert dg.load(path)["epoch"] == 1
    dg.save({"epoch": 3}, path)   # a normal overwrite replaces it and leaves nothing else
    assert dg.load(path)["epoch"] == 3 and os.listdir(tmp_path) == ["ckpt.safetensors"]


# -- bad files -----------------------------------------------------------------------------------

def test_truncated_files_raise_checkpoint_error(tmp_path):
    data = dg.io.to_bytes(_checkpoint())
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    path = tmp_path / "cut.safetensors"
    for cut in (0, 5, header_end - 10, header_end + 3, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=r"cut\.safetensors.*(truncated|too short)"):
            dg.load(path)


def test_random_bytes_and_foreign_files_raise_checkpoint_error(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointError, match=r"noise\.bin: not a duograph checkpoint"):
        dg.load(path)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"{not json at all")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        dg.load(path)
    plain = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"w": np.ones(2)}, str(plain))
    with pytest.raises(CheckpointError, match="without duograph's metadata"):
        dg.load(plain)
    newer = dict(_duograph_metadata({"type": "none"}), version="99")
    plain.write_bytes(_raw_safetensors({}, newer))
    with pytest.raises(CheckpointError, match="newer"):
        dg.load(plain)


def test_corrupt_trees_raise_checkpoint_error(tmp_path):
    path = tmp_path / "bad.safetensors"
    cases = {
        "missing": ({"type": "tensor", "name": "nope"}, "does not hold"),
        "kind": ({"type": "function", "value": "os.system"}, "unknown node type"),
        "items": ({"type": "dict", "items": [["a"]]}, "must be \\[key, node\\]"),
        "int": ({"type": "int", "value": "3"}, "int leaf holds"),
    }
    for tree, message in cases.values():
        path.write_bytes(_raw_safetensors({}, _duograph_metadata(tree)))
        with pytest.raises(CheckpointError, match=message):
            dg.load(path)
    path.write_bytes(_raw_safetensors({"extra": np.ones(1)}, _duograph_metadata({"type": "none"})))
    with pytest.raises(CheckpointError, match="does not mention"):
        dg.load(path)


def test_pickles_are_never_unpickled(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"w": MarkerPayload(str(marker))})

    def forbidden(*args, **kwargs):
        raise AssertionError("duograph.load unpickled something")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)

    # a pickle file (what torch.save writes) is refused
    path = tmp_path / "model.pt"
    path.write_bytes(payload)
    with pytest.raises(CheckpointError, match="not a duograph checkpoint"):
        dg.load(path)
    # a tree that claims a pickled leaf is refused
    tree = {"type": "pickle", "value": payload.decode("latin-1")}
    path.write_bytes(_raw_safetensors({}, _duograph_metadata(tree)))
    with pytest.raises(CheckpointError, match="unknown node type 'pickle'"):
        dg.load(path)
    # pickle bytes stored as a uint8 array come back as bytes, not as an object
    raw = np.frombuffer(payload, dtype=np.uint8)
    path.write_bytes(_raw_safetensors({"p": raw}, _duograph_metadata(
        {"type": "ndarray", "name": "p"})))
    loaded = dg.load(path)
    assert loaded.dtype == np.uint8 and loaded.tobytes() == payload
    assert not marker.exists()
