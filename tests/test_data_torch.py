"""DataLoader options PyTorch code passes (pin_memory, persistent_workers, prefetch_factor,
worker_init_fn, sampler / batch_sampler), the sampler classes and ConcatDataset, against
torch.utils.data where the result is deterministic."""
import os

import numpy as np
import pytest

import duograph as dg
from duograph import data

torch = pytest.importorskip("torch")
tdata = torch.utils.data


class Squares(data.Dataset):
    """Sample i is (i, i*i) as float32 arrays: deterministic and picklable."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.float32(i), np.float32(i * i)


class Pids(data.Dataset):
    """Sample i is (i, the pid of the process that loaded it)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return i, os.getpid()


class Stream(data.IterableDataset):
    """0..n-1 split between workers by worker id."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(wid, self.n, nw))


def _set_env_seed(worker_id):
    os.environ["DG_TEST_WORKER"] = str(worker_id)


def _values(loader):
    return [[b.numpy().tolist() for b in batch] for batch in loader]


def test_pin_memory_is_accepted_and_changes_nothing():
    ds = Squares(10)
    plain = _values(data.DataLoader(ds, batch_size=3))
    assert _values(data.DataLoader(ds, batch_size=3, pin_memory=True)) == plain
    assert _values(data.DataLoader(ds, batch_size=3, pin_memory=True,
                                   pin_memory_device="cpu")) == plain
    assert data.DataLoader(ds, pin_memory=True).pin_memory is True


def test_persistent_workers_keep_their_processes_across_epochs():
    loader = data.DataLoader(Pids(), batch_size=4, num_workers=2, persistent_workers=True,
                             prefetch_factor=3)
    epochs = []
    for _ in range(3):
        batches = list(loader)
        assert [int(i) for b in batches for i in b[0].numpy()] == list(range(12))
        epochs.append({int(p) for b in batches for p in b[1].numpy()})
    assert len(epochs[0]) == 2 and os.getpid() not in epochs[0]
    assert epochs[0] == epochs[1] == epochs[2]
    # without persistent_workers each epoch starts new processes
    loader2 = data.DataLoader(Pids(), batch_size=4, num_workers=2)
    first = {int(p) for b in loader2 for p in b[1].numpy()}
    second = {int(p) for b in loader2 for p in b[1].numpy()}
    assert first.isdisjoint(second)


def test_persistent_workers_restart_after_an_unfinished_epoch_and_shuffle():
    loader = data.DataLoader(Squares(20), batch_size=3, num_workers=2, shuffle=True, seed=4,
                             persistent_workers=True)
    reference = data.DataLoader(Squares(20), batch_size=3, shuffle=True, seed=4)
    it = iter(loader)
    next(it)                                    # leave the first epoch halfway
    iter(reference)
    assert _values(loader) == _values(reference)   # epoch 1: the right batches only
    assert _values(loader) == _values(reference)


def test_persistent_workers_with_an_iterable_dataset_restart_the_stream():
    loader = data.DataLoader(Stream(10), batch_size=2, num_workers=2, persistent_workers=True)
    for _ in range(3):
        got = sorted(int(v) for b in loader for v in b.numpy())
        assert got == list(range(10))


def test_worker_init_fn_runs_in_each_worker():
    class Env(data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return int(os.environ.get("DG_TEST_WORKER", "-1"))
    loader = data.DataLoader(Env(), batch_size=1, num_workers=2, worker_init_fn=_set_env_seed,
                             multiprocessing_context="fork")
    assert sorted(int(b.numpy()[0]) for b in loader) == [0, 0, 1, 1]


@pytest.mark.parametrize("kwargs", [dict(prefetch_factor=2), dict(persistent_workers=True),
                                    dict(batch_sampler=[[0, 1]], batch_size=2),
                                    dict(batch_sampler=[[0, 1]], shuffle=True),
                                    dict(batch_sampler=[[0, 1]], drop_last=True),
                                    dict(batch_sampler=[[0, 1]], sampler=[0, 1]),
                                    dict(shuffle=True, sampler=[0, 1])])
def test_bad_option_combinations_raise_value_error_like_torch(kwargs):
    with pytest.raises(ValueError):
        tdata.DataLoader(list(range(4)), **kwargs)
    with pytest.raises(ValueError):
        data.DataLoader(Squares(4), **kwargs)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_sampler_gives_torchs_batches(num_workers):
    ds = Squares(11)
    tds = tdata.TensorDataset(torch.arange(11, dtype=torch.float32),
                              torch.arange(11, dtype=torch.float32) ** 2)
    for drop_last in (False, True):
        ours_bs = data.BatchSampler(data.SequentialSampler(ds), 4, drop_last)
        theirs_bs = tdata.BatchSampler(tdata.SequentialSampler(tds), 4, drop_last)
        assert list(ours_bs) == list(theirs_bs) and len(ours_bs) == len(theirs_bs)
        loader = data.DataLoader(ds, batch_sampler=ours_bs, num_workers=num_workers)
        tloader = tdata.DataLoader(tds, batch_sampler=theirs_bs)
        assert len(loader) == len(tloader) and loader.batch_size is None
        assert _values(loader) == [[b.numpy().tolist() for b in tb] for tb in tloader]
    custom = [[3, 1], [0, 2, 4], [10]]          # any iterable of index lists
    assert _values(data.DataLoader(ds, batch_sampler=custom)) == [
        [b.numpy().tolist() for b in tb] for tb in tdata.DataLoader(tds, batch_sampler=custom)]


def test_batch_sampler_argument_checks_match_torch():
    for bad in (dict(batch_size=0, drop_last=False), dict(batch_size=True, drop_last=False),
                dict(batch_size=2, drop_last=1)):
        with pytest.raises(ValueError):
            tdata.BatchSampler(range(4), **bad)
        with pytest.raises(ValueError):
            data.BatchSampler(range(4), **bad)


def test_sequential_random_and_subset_samplers():
    ds = Squares(9)
    assert list(data.SequentialSampler(ds)) == list(tdata.SequentialSampler(range(9)))
    rs = data.RandomSampler(ds, generator=0)
    a, b = list(rs), list(rs)
    assert sorted(a) == sorted(b) == list(range(9)) and a != b     # a new order each epoch
    assert list(data.RandomSampler(ds, generator=0)) == a          # seeded: reproducible
    assert len(data.RandomSampler(ds, num_samples=20)) == 20
    more = list(data.RandomSampler(ds, num_samples=20, generator=1))
    assert sorted(more) == sorted(list(range(9)) * 2 + more[18:]) or len(set(more)) == 9
    rep = list(data.RandomSampler(ds, replacement=True, num_samples=50, generator=2))
    assert len(rep) == 50 and set(rep) <= set(range(9))
    sub = list(data.SubsetRandomSampler([5, 7, 1], generator=3))
    assert sorted(sub) == [1, 5, 7]
    with pytest.raises(ValueError):
        data.RandomSampler(ds, num_samples=0)
    with pytest.raises(TypeError):
        data.RandomSampler(ds, replacement=1)
    loader = data.DataLoader(ds, batch_size=4, sampler=data.SubsetRandomSampler(
        [0, 2, 4, 6, 8], generator=5))
    assert sorted(v for b in loader for v in b[0].numpy().tolist()) == [0, 2, 4, 6, 8]
    assert len(loader) == 2


def test_weighted_random_sampler_follows_the_weights():
    weights = [0.1, 0.0, 0.6, 0.3]
    s = data.WeightedRandomSampler(weights, 20000, generator=0)
    counts = np.bincount(list(s), minlength=4) / 20000
    np.testing.assert_allclose(counts, weights, atol=0.015)
    assert counts[1] == 0 and len(s) == 20000
    no_rep = list(data.WeightedRandomSampler(dg.tensor([1.0, 2.0, 3.0, 0.5]), 4,
                                             replacement=False, generator=1))
    assert sorted(no_rep) == [0, 1, 2, 3]
    for bad in (dict(weights=[1.0, 2.0], num_samples=0),
                dict(weights=[[1.0, 2.0]], num_samples=2),
                dict(weights=[1.0, 2.0], num_samples=2, replacement=1)):
        with pytest.raises(ValueError):
            tdata.WeightedRandomSampler(**bad)
        with pytest.raises(ValueError):
            data.WeightedRandomSampler(**bad)
    with pytest.raises(RuntimeError):
        list(tdata.WeightedRandomSampler([1.0, 0.0], 3, replacement=False))
    with pytest.raises(RuntimeError):
        data.WeightedRandomSampler([1.0, 0.0], 3, replacement=False)
    assert list(data.WeightedRandomSampler([0.0, 1.0, 0.0], 3, replacement=False)) == [1, 0, 2]
    loader = data.DataLoader(Squares(4), batch_size=5,
                             sampler=data.WeightedRandomSampler(weights, 10, generator=2))
    assert len(loader) == 2 and all(v != 1 for b in loader for v in b[0].numpy().tolist())


def test_concat_dataset_indexes_like_torch():
    parts = [Squares(3), Squares(0), Squares(5)]
    tparts = [[(float(i), float(i * i)) for i in range(n)] for n in (3, 0, 5)]
    ours, theirs = data.ConcatDataset(parts), tdata.ConcatDataset(tparts)
    assert len(ours) == len(theirs) == 8
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    for i in list(range(8)) + [-1, -8, -3]:
        assert tuple(map(float, ours[i])) == theirs[i]
    for bad in (8, -9):
        with pytest.raises((IndexError, ValueError)):
            theirs[bad]
        with pytest.raises((IndexError, ValueError)):
            ours[bad]
    both = Squares(2) + Squares(3)
    assert isinstance(both, data.ConcatDataset) and len(both) == 5
    with pytest.raises(ValueError):
        data.ConcatDataset([])
    with pytest.raises(ValueError):
        data.ConcatDataset([Stream(3)])
    loader = data.DataLoader(ours, batch_size=3, shuffle=True, seed=0, num_workers=2)
    assert sorted(v for b in loader for v in b[0].numpy().tolist()) == [0, 0, 1, 1, 2, 2, 3, 4]
