"""duograph.data: datasets, collation, and the DataLoader with and without worker processes."""
from __future__ import annotations

import gc
import os
import time
from collections import namedtuple

import numpy as np
import pytest

import duograph as dg
from duograph.data import (DataLoader, DataLoaderError, Dataset, IterableDataset, Subset,
                           TensorDataset, default_collate, get_worker_info, random_split)

Pair = namedtuple("Pair", ["a", "b"])


# Datasets at module level so that worker processes can unpickle them under "spawn".
class RangeDataset(Dataset):
    """Sample i is {"x": float32 vector, "y": i, "name": str(i)}."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"x": np.full(3, i, dtype=np.float32), "y": i, "name": str(i)}


class FailingDataset(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if i == 5:
            raise ValueError("sample 5 is broken")
        return np.array([i])


class DyingDataset(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if i == 5:
            os._exit(3)
        return np.array([i])


class Stream(IterableDataset):
    """0 .. n-1; with workers, each worker takes every num_workers-th item."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.n


def _values(loader, key=None) -> list:
    out = []
    for batch in loader:
        t = batch if key is None else batch[key]
        out.append(t.numpy().tolist())
    return out


# -- datasets ------------------------------------------------------------------------------------

def test_tensor_dataset_rows_keep_their_kind():
    x = dg.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3))
    y = np.arange(4)
    ds = TensorDataset(x, y)
    assert len(ds) == 4
    row_x, row_y = ds[2]
    assert isinstance(row_x, dg.Tensor) and row_x.numpy().tolist() == [6.0, 7.0, 8.0]
    assert isinstance(row_y, np.integer) and row_y == 2
    assert isinstance(ds.tensors[0], dg.Tensor) and isinstance(ds.tensors[1], np.ndarray)


def test_tensor_dataset_errors():
    with pytest.raises(dg.ShapeError, match=r"same size in dimension 0.*4 \(argument 0.*3 \(arg"):
        TensorDataset(np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(TypeError, match="argument 1 must be a dg tensor or a numpy array"):
        TensorDataset(np.zeros(3), [1, 2, 3])
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()


def test_subset_and_random_split():
    ds = TensorDataset(np.arange(10))
    sub = Subset(ds, [7, 3])
    assert len(sub) == 2 and int(sub[0][0]) == 7 and int(sub[1][0]) == 3

    parts = random_split(ds, [5, 3, 2], generator=0)
    assert [len(p) for p in parts] == [5, 3, 2]
    seen = [i for p in parts for i in p.indices]
    assert sorted(seen) == list(range(10))   # disjoint and complete
    again = random_split(ds, [5, 3, 2], generator=0)
    assert [p.indices for p in parts] == [p.indices for p in again]

    fractions = random_split(TensorDataset(np.arange(11)), [0.5, 0.3, 0.2],
                             generator=np.random.default_rng(1))
    assert [len(p) for p in fractions] == [6, 3, 2]   # floor 5, 3, 2; remainder to the first
    assert len({i for p in fractions for i in p.indices}) == 11

    with pytest.raises(ValueError, match="sum to the dataset's length 10"):
        random_split(ds, [5, 4])
    with pytest.raises(ValueError, match="sum to 1"):
        random_split(ds, [0.5, 0.4])


# -- collation -----------------------------------------------------------------------------------

def test_default_collate_dtypes():
    batch = default_collate([1, 2, 3])
    assert batch.dtype == "int64" and batch.shape == (3,)
    assert default_collate([0.5, 1.5]).dtype == "float32"
    assert default_collate([1, 2.5]).dtype == "float32"   # mixed ints and floats
    assert default_collate([True, False]).dtype == "bool"
    assert default_collate([np.float64(1.0), np.float64(2.0)]).dtype == "float64"
    assert default_collate([np.zeros(2), np.ones(2)]).dtype == "float64"   # numpy keeps its own
    assert default_collate([np.zeros(2, np.int16)] * 2).dtype == "int16"   # kept, as torch
    assert default_collate([np.zeros(2, np.uint16)] * 2).dtype == "uint16"  # kept, as torch
    with pytest.raises(TypeError, match="datetime64"):                     # never int64
        default_collate([np.zeros(2, "datetime64[s]")] * 2)
    stacked = default_collate([dg.ones(2, 3, dtype="float16"), dg.zeros(2, 3, dtype="float16")])
    assert stacked.dtype == "float16" and stacked.shape == (2, 2, 3)
    assert default_collate(["a", "b"]) == ["a", "b"]


def test_default_collate_recurses_into_containers():
    samples = [{"x": np.full(2, i, np.float32), "meta": (i, [float(i), "s"]), "p": Pair(i, 2 * i)}
               for i in range(3)]
    batch = default_collate(samples)
    assert set(batch) == {"x", "meta", "p"}
    assert batch["x"].shape == (3, 2) and batch["x"].dtype == "float32"
    ids, inner = batch["meta"]
    assert isinstance(batch["meta"], tuple) and isinstance(inner, list)
    assert ids.numpy().tolist() == [0, 1, 2] and ids.dtype == "int64"
    assert inner[0].numpy().tolist() == [0.0, 1.0, 2.0] and inner[1] == ["s", "s", "s"]
    assert isinstance(batch["p"], Pair) and batch["p"].b.numpy().tolist() == [0, 2, 4]


def test_default_collate_errors_are_clear():
    with pytest.raises(dg.ShapeError, match="different shapes"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(KeyError, match="same|keys"):
        default_collate([{"a": 1}, {"b": 1}])
    with pytest.raises(TypeError, match="cannot batch samples of type object"):
        default_collate([object(), object()])


# -- the loader, one process ---------------------------------------------------------------------

@pytest.mark.parametrize("n, batch_size, drop_last, sizes", [
    (10, 3, False, [3, 3, 3, 1]),
    (10, 3, True, [3, 3, 3]),
    (9, 3, False, [3, 3, 3]),
    (2, 5, True, []),
])
def test_batch_shapes_drop_last_and_len(n, batch_size, drop_last, sizes):
    loader = DataLoader(RangeDataset(n), batch_size=batch_size, drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(sizes) == len(batches)
    assert [b["x"].shape for b in batches] == [(s, 3) for s in sizes]
    assert all(b["y"].dtype == "int64" and b["x"].dtype == "float32" for b in batches)
    assert [len(b["name"]) for b in batches] == sizes


def test_batch_size_none_converts_without_batching():
    items = list(DataLoader(RangeDataset(3), batch_size=None))
    assert len(items) == 3 and items[1]["y"] == 1
    assert isinstance(items[1]["x"], dg.Tensor) and items[1]["x"].shape == (3,)


def test_shuffle_is_reproducible_and_new_each_epoch():
    def epochs(loader, count=3):
        return [sum(_values(loader, "y"), []) for _ in range(count)]

    first = epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True, seed=7))
    assert first == epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True, seed=7))
    assert all(sorted(e) == list(range(20)) for e in first)
    assert first[0] != first[1] != first[2]
    other_seed = epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True, seed=8), 1)
    assert other_seed[0] != first[0]
    # with an int seed the order depends on (seed, epoch) only: resuming at epoch 2 works
    resumed = DataLoader(RangeDataset(20), batch_size=4, shuffle=True, seed=7)
    resumed.set_epoch(2)
    assert epochs(resumed, 1) == first[2:]
    # a numpy Generator is a stream: the same generator state gives the same epochs
    from_generator = [epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True,
                                        generator=np.random.default_rng(7))) for _ in range(2)]
    assert from_generator[0] == from_generator[1]
    assert from_generator[0][0] != from_generator[0][1]
    # without a generator, dg.manual_seed decides
    dg.manual_seed(3)
    a = epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True), 1)
    dg.manual_seed(3)
    b = epochs(DataLoader(RangeDataset(20), batch_size=4, shuffle=True), 1)
    assert a == b
    assert sum(_values(DataLoader(RangeDataset(5), batch_size=2), "y"), []) == [0, 1, 2, 3, 4]


def test_collate_fn_and_sampler():
    loader = DataLoader(RangeDataset(6), batch_size=2, sampler=[5, 0, 3],
                        collate_fn=lambda samples: [s["y"] for s in samples])
    assert list(loader) == [[5, 0], [3]] and len(loader) == 2
    with pytest.raises(ValueError, match="not both"):
        DataLoader(RangeDataset(6), shuffle=True, sampler=[0])
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(RangeDataset(6), batch_size=0)


def test_iterable_dataset_batching():
    assert _values(DataLoader(Stream(7), batch_size=3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _values(DataLoader(Stream(7), batch_size=3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(DataLoader(SizedStream(7), batch_size=3)) == 3
    with pytest.raises(TypeError, match="no __len__"):
        len(DataLoader(Stream(7), batch_size=3))
    with pytest.raises(ValueError, match="IterableDataset"):
        DataLoader(Stream(7), shuffle=True)


# -- the loader with worker processes ------------------------------------------------------------

def test_workers_give_the_single_process_order():
    def run(num_workers):
        loader = DataLoader(RangeDataset(23), batch_size=4, shuffle=True, seed=5,
                            num_workers=num_workers)
        return [[_values([b["x"]]), b["y"].numpy().tolist(), b["name"]] for b in loader]

    assert run(2) == run(0)
    assert get_worker_info() is None


def test_worker_exception_surfaces_with_its_traceback():
    loader = DataLoader(FailingDataset(), batch_size=2, num_workers=2)
    start = time.monotonic()
    with pytest.raises(DataLoaderError) as info:
        list(loader)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "raised ValueError while loading batch 2 (indices [4, 5])" in message
    assert "Traceback (most recent call last)" in message
    assert "in __getitem__" in message and "sample 5 is broken" in message


def test_dead_worker_is_reported_not_waited_for():
    loader = DataLoader(DyingDataset(), batch_size=2, num_workers=2)
    with pytest.raises(DataLoaderError, match="exited with code 3 unexpectedly"):
        list(loader)


def test_workers_stop_when_exhausted_or_collected():
    it = iter(DataLoader(RangeDataset(10), batch_size=2, num_workers=2))
    processes = list(it._workers)
    assert all(p.is_alive() for p in processes)
    assert len(list(it)) == 5
    assert not any(p.is_alive() for p in processes)

    it = iter(DataLoader(RangeDataset(10), batch_size=2, num_workers=2))
    next(it)
    processes = list(it._workers)
    del it
    gc.collect()
    assert not any(p.is_alive() for p in processes)


def test_iterable_dataset_with_workers():
    loader = DataLoader(Stream(9), batch_size=2, num_workers=2)
    # worker 0 streams 0,2,4,6,8 and worker 1 streams 1,3,5,7; batches alternate between them
    assert _values(loader) == [[0, 2], [1, 3], [4, 6], [5, 7], [8]]


def test_spawn_workers():
    x = dg.from_numpy(np.arange(10, dtype=np.float32))
    loader = DataLoader(TensorDataset(x, np.arange(10)), batch_size=4, num_workers=2,
                        multiprocessing_context="spawn")
    batches = list(loader)
    assert [b[0].numpy().tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].dtype == "float32" and batches[0][1].dtype == "int64"


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        time.sleep(1.0)
        return i


class WorkerSeedDataset(Dataset):
    """Each sample records which worker loaded it and a draw from numpy's global generator."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        info = get_worker_info()
        return [info.id, info.num_workers, float(np.random.random())]


def test_timeout_raises_instead_of_waiting():
    start = time.monotonic()
    with pytest.raises(DataLoaderError, match="timed out after 0.2 s waiting for batch 0"):
        list(DataLoader(SlowDataset(), num_workers=2, timeout=0.2))
    assert time.monotonic() - start < 5


def test_workers_know_who_they_are_and_draw_different_numbers():
    batches = list(DataLoader(WorkerSeedDataset(), batch_size=1, num_workers=2, seed=0))
    ids = [int(b[0].item()) for b in batches]
    draws = [float(b[2].item()) for b in batches]
    assert ids == [0, 1, 0, 1] and all(int(b[1].item()) == 2 for b in batches)
    assert draws[0] != draws[1]   # each worker seeds its own generators
    again = list(DataLoader(WorkerSeedDataset(), batch_size=1, num_workers=2, seed=0))
    assert draws == [float(b[2].item()) for b in again]   # reproducible with an int seed


def test_spawn_with_an_unpicklable_collate_fn_is_a_clear_error():
    loader = DataLoader(RangeDataset(4), num_workers=2, multiprocessing_context="spawn",
                        collate_fn=lambda samples: samples)
    with pytest.raises(DataLoaderError, match="must be picklable"):
        next(iter(loader))


# -- workers that die or stall mid-transfer ------------------------------------------------------

class BigDataset(Dataset):
    """``n`` samples of ``floats`` float32 each: big enough that sending one batch fills the
    pipe many times over, so a worker spends most of its life mid-transfer."""

    def __init__(self, n: int, floats: int) -> None:
        self.n = n
        self.floats = floats

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return np.full(self.floats, i, np.float32)


def _consume_in_thread(it, limit: float) -> dict:
    """Iterate ``it`` to the end in a daemon thread; returns {"batches": n, "error": e} or
    {"hung": True} when it did not finish within ``limit`` seconds (the bug this guards)."""
    import threading
    result: dict = {"batches": 0}

    def consume():
        try:
            for _ in it:
                result["batches"] += 1
        except BaseException as e:   # noqa: BLE001 - handed to the test
            result["error"] = e
        result["done"] = True

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(limit)
    if not result.get("done"):
        result["hung"] = True
    return result


def _assert_reaped(processes) -> None:
    """Every worker has exited and been waited for (an exit code is only known once the
    process is reaped: no orphan, no zombie)."""
    assert all(p.exitcode is not None for p in processes), [p.pid for p in processes]


@pytest.mark.parametrize("victim", [0, 1])
def test_worker_killed_mid_transfer_of_a_40mb_batch_is_reported(victim):
    import signal
    # 2 samples of 20 MB: each batch is 40 MB. After batch 0 the main process pauses, so the
    # workers block mid-send on their next batches; then one is killed (kill -9).
    it = iter(DataLoader(BigDataset(8, 5_000_000), batch_size=2, num_workers=2, timeout=5))
    next(it)
    time.sleep(0.5)
    processes = list(it._workers)
    os.kill(processes[victim].pid, signal.SIGKILL)
    result = _consume_in_thread(it, limit=30)
    assert not result.get("hung"), "the main process hung after a worker was killed"
    error = result.get("error")
    assert isinstance(error, DataLoaderError), error
    assert f"worker {victim} (pid {processes[victim].pid}) was killed by signal 9 (SIGKILL)" \
        in str(error)
    _assert_reaped(processes)


def test_worker_stopped_mid_transfer_times_out_and_is_reaped():
    import signal
    it = iter(DataLoader(BigDataset(8, 2_000_000), batch_size=2, num_workers=2, timeout=1))
    next(it)
    time.sleep(0.3)
    processes = list(it._workers)
    for p in processes:   # both stall mid-send (SIGSTOP): a partial batch and no EOF
        os.kill(p.pid, signal.SIGSTOP)
    start = time.monotonic()
    result = _consume_in_thread(it, limit=30)
    assert not result.get("hung"), "timeout= was not honoured during a partial transfer"
    assert isinstance(result.get("error"), DataLoaderError), result
    assert "timed out after 1 s" in str(result["error"])
    assert time.monotonic() - start < 20
    _assert_reaped(processes)   # stopped workers are killed, not left behind


def test_twenty_kills_at_random_moments_never_hang_nor_orphan():
    import random
    import signal
    import threading
    rng = random.Random(16)
    outcomes = []
    for trial in range(20):
        # batches of 40 MB, as in the report: an epoch of 20 of them takes far longer than
        # the 0.3 s before the kill, which lands while a worker builds or sends one
        it = iter(DataLoader(BigDataset(40, 5_000_000), batch_size=2, num_workers=2, timeout=5))
        processes = list(it._workers)
        victim = rng.randrange(2)

        def kill(pid=processes[victim].pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:   # the epoch ended first
                pass

        killer = threading.Timer(rng.uniform(0.0, 0.3), kill)
        killer.start()
        result = _consume_in_thread(it, limit=30)
        killer.join()
        assert not result.get("hung"), f"trial {trial}: the main process hung"
        error = result.get("error")
        if error is not None:
            assert isinstance(error, DataLoaderError), (trial, error)
            assert f"worker {victim} " in str(error) and "signal 9" in str(error), str(error)
        it.close()
        _assert_reaped(processes)
        outcomes.append("error" if error is not None else result["batches"])
    assert outcomes.count("error") >= 15, outcomes   # nearly every kill lands mid-epoch


_ABANDONING_MAIN = """
import sys, time
sys.path.insert(0, sys.argv[1])
from test_data import BigDataset
from duograph.data import DataLoader
it = iter(DataLoader(BigDataset(16, 2_000_000), batch_size=2, num_workers=2))
next(it)
print(*(p.pid for p in it._workers), flush=True)
time.sleep(60)   # never reads again: both workers block mid-send; then this process is killed
"""


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for a reaper counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_workers_exit_when_the_main_process_is_killed():
    import signal
    import subprocess
    import sys
    main = subprocess.Popen([sys.executable, "-c", _ABANDONING_MAIN, os.path.dirname(__file__)],
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in main.stdout.readline().split()]
        assert len(pids) == 2
        time.sleep(0.3)
        main.send_signal(signal.SIGKILL)
        main.wait()
        deadline = time.monotonic() + 10
        while not all(map(_gone, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        orphans = [pid for pid in pids if not _gone(pid)]
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
        assert not orphans, "workers outlived their killed main process"
    finally:
        main.kill()
        main.stdout.close()
