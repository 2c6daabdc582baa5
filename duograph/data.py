"""duograph.data: datasets, and a DataLoader that batches them into tensors.

    ds = dg.data.TensorDataset(x_np, y_np)
    train, val = dg.data.random_split(ds, [0.8, 0.2], generator=0)
    loader = dg.data.DataLoader(train, batch_size=32, shuffle=True, seed=0, num_workers=2)
    for xb, yb in loader:          # dg tensors, stacked along a new first dimension
        ...

Map-style datasets (``Dataset``) are indexed with integers; the loader decides the order in the
main process (shuffled with a seedable numpy generator, a new permutation every epoch), so the
batches are the same whatever ``num_workers`` is. ``IterableDataset`` streams samples and is
batched as it goes.

With ``num_workers > 0`` samples are loaded and collated *as numpy* in worker processes (so
datasets must be picklable under the "spawn" start method, and tensors never cross a process
boundary); the main process turns the arrays into tensors and yields batches in order. An
exception inside a worker stops the loader and is raised in the main process as a
``DataLoaderError`` carrying the worker's traceback text; a worker that dies is reported, never
waited for forever.

Batching rules of ``default_collate`` (PyTorch's, except that Python floats become float32,
not float64, and tuples stay tuples, where PyTorch makes them lists):

==============================  ==================================================
sample element                  batched as
==============================  ==================================================
dg tensor / numpy array         stacked; dtype kept (float64 arrays stay float64).
                                longdouble -> float64; other dtypes duograph
                                lacks are refused (never silently int64)
other array-like (a PyTorch     read through DLPack (bfloat16 too; a PyTorch tensor
tensor, a JAX array...)         that requires grad: its detach()), else through
                                ``__array__``; then stacked as above
numpy scalar (``np.float32``)   1-d tensor of its dtype
Python bool / int / float       1-d bool / int64 / **float32** tensor (PyTorch gives
                                float64: duograph's default float is float32, as
                                for ``dg.tensor(0.5)``); a batch mixing ints and
                                floats is float32
str / bytes                     list, unchanged
dict (any Mapping)              dict with each key collated
namedtuple / tuple / list       the same type, each position collated
==============================  ==================================================

Batches are CPU tensors. ``batch_size=None`` turns batching off: each sample is converted
(arrays -> tensors, containers walked) but not stacked.
"""
from __future__ import annotations

import bisect
import collections.abc as cabc
import ctypes
import itertools
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import random
import select
import signal
import struct
import time
import traceback
from dataclasses import dataclass
from typing import (Any, Callable, Generic, Iterable, Iterator, List, Optional, Sequence,
                    Sized, TypeVar, Union)

import numpy as np

from .eager import Tensor
from .eager.creation import _next_seed, from_dlpack, manual_seed
from .graphlib import dtypes
from .graphlib.errors import DuographError, ShapeError

__all__ = [
    "Dataset", "IterableDataset", "TensorDataset", "Subset", "random_split", "DataLoader",
    "DataLoaderError", "WorkerInfo", "get_worker_info", "default_collate", "default_convert",
    "ConcatDataset", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
    "WeightedRandomSampler", "BatchSampler", "DistributedSampler",
]

T_co = TypeVar("T_co", covariant=True)
GeneratorLike = Union[np.random.Generator, int, None]

# How often a waiting process wakes to check that its peers are still alive (seconds).
_POLL_INTERVAL = 0.1
# How long shutdown waits for a worker to exit on its own before terminating it (seconds).
_JOIN_TIMEOUT = 5.0
# A result travels as an 8-byte little-endian length, then that many bytes of pickle.
_FRAME_HEADER = struct.Struct("<Q")


class DataLoaderError(DuographError, RuntimeError):
    """A DataLoader worker raised, died, or produced nothing within ``timeout``."""


# -- datasets ------------------------------------------------------------------------------------

class Dataset(Generic[T_co]):
    """A map-style dataset: ``dataset[i]`` is sample ``i`` for ``0 <= i < len(dataset)``.

    Subclasses implement ``__getitem__`` and ``__len__``.
    """

    def __getitem__(self, index: int) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: "Dataset[T_co]") -> "ConcatDataset[T_co]":
        """``a + b`` is ``ConcatDataset([a, b])``, as in PyTorch."""
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset that is a stream of samples: subclasses implement ``__iter__``.

    With ``num_workers > 0`` every worker iterates its own copy of the dataset; to avoid
    duplicates, split the stream inside ``__iter__`` with ``get_worker_info()`` (its ``id`` and
    ``num_workers``), as in PyTorch.
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __getitem__(self, index):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: iterate it, "
                        "it cannot be indexed")


class TensorDataset(Dataset[tuple]):
    """Samples are rows of the given tensors or numpy arrays: ``ds[i] == (t0[i], t1[i], ...)``.

    Every argument must have the same size in dimension 0. Rows of tensors come back as
    tensors (views without autograd history), rows of numpy arrays as numpy arrays.
    """

    def __init__(self, *tensors: Union[Tensor, np.ndarray]) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor or numpy array")
        arrays, is_tensor = [], []
        for position, t in enumerate(tensors):
            if isinstance(t, Tensor):
                arrays.append(t.detach().array)
                is_tensor.append(True)
            elif isinstance(t, np.ndarray):
                arrays.append(t)
                is_tensor.append(False)
            else:
                raise TypeError(f"TensorDataset: argument {position} must be a dg tensor or a "
                                f"numpy array, found {type(t).__name__}")
            if arrays[-1].ndim == 0:
                raise ShapeError(f"TensorDataset: argument {position} is 0-dimensional; "
                                 "expected at least one dimension to index samples along")
        sizes = [a.shape[0] for a in arrays]
        if len(set(sizes)) != 1:
            found = ", ".join(f"{s} (argument {i}, shape {tuple(a.shape)})"
                              for i, (s, a) in enumerate(zip(sizes, arrays)))
            raise ShapeError("TensorDataset: every tensor must have the same size in "
                             f"dimension 0; found {found}")
        # Arrays, not tensors, so the dataset pickles cheaply into worker processes.
        self._arrays = tuple(arrays)
        self._is_tensor = tuple(is_tensor)

    @property
    def tensors(self) -> tuple:
        """The stored tensors and arrays (tensors detached)."""
        return tuple(Tensor._wrap(a) if t else a for a, t in zip(self._arrays, self._is_tensor))

    def __getitem__(self, index: int) -> tuple:
        # a[index, ...] is an array even for a 1-d a (a[index] would be a numpy scalar)
        return tuple(Tensor._wrap(a[index, ...]) if t else a[index]
                     for a, t in zip(self._arrays, self._is_tensor))

    def __len__(self) -> int:
        return int(self._arrays[0].shape[0])


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __getitem__(self, index: int) -> T_co:
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def _make_rng(generator: GeneratorLike, who: str) -> np.random.Generator:
    """A numpy Generator from a Generator, an int seed, or None (duograph's global generator,
    so ``dg.manual_seed`` makes the result reproducible)."""
    if generator is None:
        return np.random.default_rng(_next_seed())
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"{who}: generator must be a numpy Generator, an int seed or None, "
                    f"found {type(generator).__name__}")


def random_split(dataset: Dataset[T_co], lengths: Sequence[Union[int, float]],
                 generator: GeneratorLike = None) -> List[Subset[T_co]]:
    """Split ``dataset`` into non-overlapping random ``Subset``s of the given lengths.

    ``lengths`` are either ints summing to ``len(dataset)`` or fractions summing to 1; with
    fractions each part gets ``floor(fraction * n)`` samples and the remainder is dealt out one
    by one from the first part on (as PyTorch does). ``generator`` is a numpy Generator or an
    int seed; None draws from duograph's global generator (``dg.manual_seed``).
    """
    n = len(dataset)
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: expected at least one length")
    if all(isinstance(x, float) for x in lengths):
        if any(x < 0 or x > 1 for x in lengths) or not math.isclose(sum(lengths), 1.0):
            raise ValueError(f"random_split: fractions must lie in [0, 1] and sum to 1, "
                             f"found {lengths} (sum {sum(lengths)})")
        counts = [int(math.floor(n * x)) for x in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    else:
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                   for x in lengths):
            raise TypeError(f"random_split: lengths must be all ints or all fractions, "
                            f"found {lengths}")
        counts = [int(x) for x in lengths]
        if any(c < 0 for c in counts) or sum(counts) != n:
            raise ValueError(f"random_split: lengths must be non-negative and sum to the "
                             f"dataset's length {n}, found {counts} (sum {sum(counts)})")
    permutation = _make_rng(generator, "random_split").permutation(n).tolist()
    parts, start = [], 0
    for count in counts:
        parts.append(Subset(dataset, permutation[start:start + count]))
        start += count
    return parts


# -- collation -----------------------------------------------------------------------------------

class ConcatDataset(Dataset[T_co]):
    """Map-style datasets one after the other (``torch.utils.data.ConcatDataset``);
    ``cumulative_sizes`` holds the running lengths."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ValueError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> T_co:
        n = len(self)
        if index < 0:
            if -index > n:
                raise ValueError("absolute value of index should not exceed dataset length")
            index += n
        if index >= n:
            raise IndexError(f"ConcatDataset: index {index} is out of range for {n} samples")
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


# -- samplers: what order a map-style dataset is visited in -------------------------------------

class Sampler(Generic[T_co]):
    """Base class: an iterable of dataset indices (or, for a batch sampler, of lists of
    indices), re-iterated every epoch by the DataLoader."""

    def __init__(self, data_source: Optional[Sized] = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _sampler_rng(generator: GeneratorLike, who: str) -> Optional[np.random.Generator]:
    """A generator kept for the sampler's life (a new draw every epoch), or None: each epoch
    draws from duograph's global generator (``dg.manual_seed``)."""
    return None if generator is None else _make_rng(generator, who)


def _check_num_samples(num_samples, who: str) -> None:
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) \
            or num_samples <= 0:
        raise ValueError(f"{who}: num_samples should be a positive integer value, but got "
                         f"num_samples={num_samples}")


class RandomSampler(Sampler[int]):
    """A random permutation of the indices every epoch, or ``num_samples`` indices drawn with
    ``replacement``. The randomness is numpy's (``generator``: a numpy Generator or an int
    seed; None draws from ``dg.manual_seed``'s generator), so the order is not PyTorch's."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: Optional[int] = None, generator: GeneratorLike = None) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples = num_samples
        self.generator = generator
        self._rng = _sampler_rng(generator, "RandomSampler")
        _check_num_samples(self.num_samples, "RandomSampler")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        rng = self._rng or _make_rng(None, "RandomSampler")
        if self.replacement:
            return iter(rng.integers(0, n, size=self.num_samples).tolist())
        whole, rest = divmod(self.num_samples, n)
        order = [i for _ in range(whole) for i in rng.permutation(n).tolist()]
        return iter(order + rng.permutation(n).tolist()[:rest])

    def __len__(self) -> int:
        return self.num_samples


class DistributedSampler(Sampler[int]):
    """Each rank's share of the dataset, as PyTorch's: the indices (shuffled per epoch with
    ``seed + epoch`` when ``shuffle``) padded by repeating from the start to a multiple of
    ``num_replicas`` (or cut down to one with ``drop_last``), then every
    ``num_replicas``-th from ``rank``. Every rank must call ``set_epoch(e)`` before each epoch
    for a new order; the same seed and epoch give every rank the same permutation, so the
    shares never overlap and together cover the dataset once. ``num_replicas`` and ``rank``
    default to the process group's. The permutation is numpy's, not PyTorch's."""

    def __init__(self, dataset: Sized, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            from . import distributed as dist
            if num_replicas is None:
                num_replicas = dist.get_world_size()
            if rank is None:
                rank = dist.get_rank()
        if not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be a positive int, found "
                             f"{num_replicas!r}")
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % self.num_replicas:
            self.num_samples = n // self.num_replicas     # ceil((n - r) / r), as PyTorch
        else:
            self.num_samples = -(-n // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            order = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(order)
            if pad > 0:
                order += (order * (-(-pad // max(len(order), 1))))[:pad]
        else:
            order = order[:self.total_size]
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order ``__iter__`` gives (with ``shuffle``)."""
        self.epoch = int(epoch)


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in a new random order every epoch."""

    def __init__(self, indices: Sequence[int], generator: GeneratorLike = None) -> None:
        self.indices = indices
        self.generator = generator
        self._rng = _sampler_rng(generator, "SubsetRandomSampler")

    def __iter__(self) -> Iterator[int]:
        rng = self._rng or _make_rng(None, "SubsetRandomSampler")
        return iter([self.indices[i] for i in rng.permutation(len(self.indices)).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices in [0, len(weights)) drawn with probabilities proportional to
    ``weights`` (with ``replacement`` by default), a new draw every epoch; numpy's randomness
    (see ``RandomSampler``)."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: GeneratorLike = None) -> None:
        _check_num_samples(num_samples, "WeightedRandomSampler")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        w = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights,
                       dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(w.shape)}")
        if w.size == 0 or np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
            raise ValueError("WeightedRandomSampler: weights must be finite, >= 0 and not all "
                             "zero")
        if not replacement and num_samples > w.size:
            raise RuntimeError(f"WeightedRandomSampler: cannot sample n_sample > "
                               f"prob_dist.size(-1) samples without replacement (found "
                               f"num_samples={num_samples} and {w.size} weights)")
        self.weights = w
        self.num_samples, self.replacement = int(num_samples), replacement
        self.generator = generator
        self._rng = _sampler_rng(generator, "WeightedRandomSampler")

    def __iter__(self) -> Iterator[int]:
        rng = self._rng or _make_rng(None, "WeightedRandomSampler")
        w = self.weights
        if self.replacement:
            return iter(rng.choice(len(w), size=self.num_samples, p=w / w.sum()).tolist())
        # without replacement: an exponential race (as torch.multinomial), so indices of zero
        # weight come last, in index order, once the others are drawn
        with np.errstate(divide="ignore"):
            keys = np.where(w > 0, rng.exponential(size=len(w)) / w, np.inf)
        return iter(np.argsort(keys, kind="stable")[:self.num_samples].tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[List[int]]):
    """Groups the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter
    unless ``drop_last``); pass it to ``DataLoader(batch_sampler=...)``."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def __iter__(self) -> Iterator[List[int]]:
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _supported_array(arr: np.ndarray, who: str) -> np.ndarray:
    """``arr`` with a dtype duograph tensors can hold (see the module docstring)."""
    name = arr.dtype.name
    if name in dtypes.DTYPE_NAMES:
        return arr
    if arr.dtype.kind == "f":
        return arr.astype(np.float64)
    raise TypeError(f"{who}: cannot make a tensor from a numpy array of dtype {arr.dtype}; "
                    f"supported: {', '.join(dtypes.DTYPE_NAMES)} (pass collate_fn= to batch "
                    "other data)")


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _is_number(x) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.number)) and not isinstance(x, complex)


def _is_array_like(x) -> bool:
    """A tensor or array of any library: DLPack or ``__array__`` (numbers, strings and
    containers are not)."""
    return isinstance(x, (Tensor, np.ndarray)) or (
        not _is_number(x) and not isinstance(x, (str, bytes, cabc.Mapping, tuple, list))
        and (hasattr(x, "__dlpack__") or hasattr(x, "__array__")))


def _as_array(x) -> np.ndarray:
    """An array-like sample as a numpy array on the CPU: through DLPack where the object
    speaks it (sharing memory; bfloat16 too), else ``np.asarray``."""
    if isinstance(x, (Tensor, np.ndarray)):
        return np.asarray(x)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        source = x.detach() if getattr(x, "requires_grad", False) and hasattr(
            x, "detach") else x
        try:
            return np.asarray(from_dlpack(source).cpu())
        except (BufferError, RuntimeError, TypeError):
            pass                # a dtype DLPack cannot carry: __array__ may still work
    return np.asarray(x)


def numpy_collate(batch: Sequence[Any]) -> Any:
    """Batch a list of samples into numpy arrays (containers kept): the half of
    ``default_collate`` that runs in worker processes."""
    if len(batch) == 0:
        raise ValueError("default_collate: cannot collate an empty batch")
    elem = batch[0]
    if _is_array_like(elem):
        arrays = []
        for x in batch:
            if not _is_array_like(x):
                raise TypeError("default_collate: a batch mixes arrays with "
                                f"{type(x).__name__}; every sample must have the same structure")
            arrays.append(_as_array(x))
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise ShapeError("default_collate: cannot stack samples of different shapes "
                             f"{sorted(shapes)}; pad them to one shape or pass collate_fn=")
        return _supported_array(np.stack(arrays), "default_collate")
    if _is_number(elem):
        if not all(_is_number(x) for x in batch):
            raise TypeError("default_collate: a batch mixes numbers with other types; every "
                            "sample must have the same structure")
        if all(isinstance(x, (np.bool_, np.number)) for x in batch):
            return _supported_array(np.array(batch), "default_collate")   # numpy scalars
        if all(isinstance(x, (bool, np.bool_)) for x in batch):
            return np.array(batch, dtype=np.bool_)
        if any(isinstance(x, (float, np.floating)) for x in batch):
            return np.array(batch, dtype=np.float32)
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, cabc.Mapping):
        keys = list(elem.keys())
        for x in batch:
            if not isinstance(x, cabc.Mapping) or set(x.keys()) != set(keys):
                found = sorted(map(str, x.keys())) if isinstance(x, cabc.Mapping) else type(x)
                raise KeyError(f"default_collate: every sample must be a dict with keys "
                               f"{sorted(map(str, keys))}, found {found}")
        return {key: numpy_collate([x[key] for x in batch]) for key in keys}
    if isinstance(elem, (tuple, list)):
        size = len(elem)
        if any(not isinstance(x, (tuple, list)) or len(x) != size for x in batch):
            raise ValueError(f"default_collate: every sample must be a sequence of length "
                             f"{size}, found lengths {[len(x) for x in batch]}")
        columns = [numpy_collate(list(column)) for column in zip(*batch)]
        if _is_namedtuple(elem):
            return type(elem)(*columns)
        return tuple(columns) if isinstance(elem, tuple) else columns
    raise TypeError(f"default_collate: cannot batch samples of type {type(elem).__name__}; "
                    "expected tensors, numpy arrays, numbers, strings, dicts, tuples or lists "
                    "(pass collate_fn= to batch other types)")


def numpy_convert(sample: Any) -> Any:
    """One sample with tensors as numpy arrays (containers walked, nothing stacked)."""
    if _is_array_like(sample):
        return _supported_array(_as_array(sample), "default_convert")
    if isinstance(sample, cabc.Mapping):
        return {key: numpy_convert(value) for key, value in sample.items()}
    if _is_namedtuple(sample):
        return type(sample)(*(numpy_convert(x) for x in sample))
    if isinstance(sample, (tuple, list)):
        return type(sample)(numpy_convert(x) for x in sample)
    return sample


def arrays_to_tensors(tree: Any) -> Any:
    """``tree`` with every numpy array turned into a dg tensor (sharing its memory)."""
    if isinstance(tree, np.ndarray):
        return Tensor._wrap(_supported_array(tree, "DataLoader"))
    if isinstance(tree, cabc.Mapping):
        return {key: arrays_to_tensors(value) for key, value in tree.items()}
    if _is_namedtuple(tree):
        return type(tree)(*(arrays_to_tensors(x) for x in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(arrays_to_tensors(x) for x in tree)
    return tree


def default_collate(batch: Sequence[Any]) -> Any:
    """Stack a list of samples into a batch of dg tensors (rules in the module docstring)."""
    return arrays_to_tensors(numpy_collate(batch))


def default_convert(sample: Any) -> Any:
    """Convert one sample's numpy arrays to dg tensors without batching
    (used when ``batch_size=None``)."""
    return arrays_to_tensors(numpy_convert(sample))


# -- worker side ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerInfo:
    """What a worker process knows about itself (``get_worker_info()`` inside a worker)."""
    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: Optional[WorkerInfo] = None


def get_worker_info() -> Optional[WorkerInfo]:
    """Inside a DataLoader worker process, its ``WorkerInfo``; None in the main process."""
    return _worker_info


class _Fetcher:
    """Turns indices (map-style) or the next items of an iterator (iterable) into one batch.

    Picklable: it is what a worker process receives."""

    def __init__(self, dataset, batch_size: Optional[int], drop_last: bool,
                 collate: Callable, convert: Callable) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate = collate
        self.convert = convert

    def fetch(self, indices: List[int]) -> Any:
        if self.batch_size is None:
            return self.convert(self.dataset[indices[0]])
        return self.collate([self.dataset[i] for i in indices])

    def fetch_next(self, iterator: Iterator) -> Any:
        """The next batch from ``iterator``; raises StopIteration when there is none."""
        if self.batch_size is None:
            return self.convert(next(iterator))
        samples = list(itertools.islice(iterator, self.batch_size))
        if not samples or (self.drop_last and len(samples) < self.batch_size):
            raise StopIteration
        return self.collate(samples)


@dataclass(frozen=True)
class _WorkerFailure:
    """An exception raised inside a worker, as text (always picklable)."""
    worker_id: int
    pid: int
    exc_type: str
    traceback: str


_EXHAUSTED = "exhausted"   # an iterable worker's reply once its stream has ended
_RESET = "reset"           # a task telling a persistent worker that a new epoch starts


class _StopWorker(Exception):
    """The main process is gone or stopped reading: the worker leaves its loop."""


def _wait_writable(fd: int, timeout: float) -> None:
    """Wait until ``fd`` can be written, at most ``timeout`` seconds (poll where it exists:
    select() refuses descriptors past 1024)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        poller.poll(timeout * 1000)
    else:
        select.select([], [fd], [], timeout)


def _send_frame(fd: int, data: bytes, stop, parent) -> None:
    """Write one result frame to the worker's own pipe ``fd`` (non-blocking).

    While the pipe is full, wake every ``_POLL_INTERVAL`` to check that the main process is
    alive and still reading; raise ``_StopWorker`` when it is not (or closed its end)."""
    for part in (memoryview(_FRAME_HEADER.pack(len(data))), memoryview(data)):
        while len(part):
            try:
                written = os.write(fd, part)
            except BlockingIOError:
                written = 0
            except OSError:   # the main process closed its end (EPIPE), or is gone
                raise _StopWorker from None
            part = part[written:]
            if len(part):
                _wait_writable(fd, _POLL_INTERVAL)
                if stop.value or (parent is not None and not parent.is_alive()):
                    raise _StopWorker


def _worker_loop(fetcher: _Fetcher, index_queue, result_conn, stop, worker_id: int,
                 num_workers: int, seed: int, worker_init_fn, is_iterable: bool) -> None:
    """Body of a worker process: answer each task ``(task_id, indices)`` from ``index_queue``
    with a frame holding the pickle of ``(task_id, status, payload)`` on its own pipe
    ``result_conn`` until told to stop (a ``None`` task, or ``stop.value`` set: a lock-free
    shared flag, as a lock held by a worker killed inside it would block the main process).

    The pipe is this worker's alone, so a worker killed mid-frame cannot block the others, and
    the main process sees the pipe's end (and the process sentinel) instead of waiting for the
    rest of the frame. Results are pickled here, inside the try, so an unpicklable batch is
    reported as an error."""
    global _worker_info
    _worker_info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    manual_seed(seed)
    parent = multiprocessing.parent_process()
    fd = result_conn.fileno()
    os.set_blocking(fd, False)
    iterator = None
    init_failure = None
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        if is_iterable:
            iterator = iter(fetcher.dataset)
    except Exception as e:
        init_failure = _WorkerFailure(worker_id, os.getpid(), type(e).__name__,
                                      traceback.format_exc())

    def send(task_id: int, status: str, payload: Any) -> None:
        try:
            frame = pickle.dumps((task_id, status, payload), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            frame = pickle.dumps((task_id, "error", _WorkerFailure(
                worker_id, os.getpid(), type(e).__name__, traceback.format_exc())))
        _send_frame(fd, frame, stop, parent)

    try:
        while not stop.value:
            try:
                task = index_queue.get(timeout=_POLL_INTERVAL)
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    break
                continue
            if task is None:
                break
            if task == _RESET:    # a new epoch for a persistent worker: restart its stream
                if is_iterable and init_failure is None:
                    try:
                        iterator = iter(fetcher.dataset)
                    except Exception as e:
                        init_failure = _WorkerFailure(worker_id, os.getpid(), type(e).__name__,
                                                      traceback.format_exc())
                continue
            task_id, indices = task
            if init_failure is not None:
                send(task_id, "error", init_failure)
                continue
            try:
                if is_iterable:
                    try:
                        batch = fetcher.fetch_next(iterator)
                    except StopIteration:
                        send(task_id, _EXHAUSTED, None)
                        continue
                else:
                    batch = fetcher.fetch(indices)
            except Exception as e:
                send(task_id, "error", _WorkerFailure(
                    worker_id, os.getpid(), type(e).__name__, traceback.format_exc()))
                continue
            send(task_id, "ok", batch)
            del batch
    except (KeyboardInterrupt, _StopWorker):
        # KeyboardInterrupt: the main process gets it too and shuts the workers down.
        pass
    finally:
        result_conn.close()


# -- the loader ----------------------------------------------------------------------------------

class DataLoader(Generic[T_co]):
    """Iterate over ``dataset`` in batches.

    Args:
        dataset: a ``Dataset`` (map-style: ``__getitem__`` + ``__len__``) or an
            ``IterableDataset``.
        batch_size: samples per batch; None turns batching off (each sample converted alone).
        shuffle: visit a map-style dataset in a new random order every epoch.
        sampler: an iterable of indices to visit instead (re-iterated each epoch), such as a
            ``RandomSampler`` or ``WeightedRandomSampler``; not with ``shuffle``.
        batch_sampler: an iterable of lists of indices, one list per batch (a
            ``BatchSampler``); excludes ``batch_size``, ``shuffle``, ``sampler`` and
            ``drop_last``.
        drop_last: drop the last batch when it is smaller than ``batch_size`` (with workers and
            an IterableDataset, each worker drops its own last partial batch).
        collate_fn: turns a list of samples into a batch; default ``default_collate``. With
            workers it runs in the workers and its result must be picklable; the default
            collates to numpy there and makes tensors in the main process.
        num_workers: 0 loads in the main process; more starts that many worker processes per
            epoch (each iteration of the loader), which stop when the iterator is exhausted,
            garbage-collected or ``close()``d.
        generator / seed: the shuffle's randomness. An int seed: epoch ``e``'s order (and the
            worker seeds) depend on (seed, e) only: a new permutation each epoch, the same in
            every run, and ``set_epoch`` resumes at any epoch. A numpy Generator: each epoch
            draws the next permutation from it. None: each epoch draws from duograph's global
            generator (``dg.manual_seed``).
        worker_init_fn: called with the worker id in each worker before it loads anything.
        prefetch_factor: batches requested ahead per worker (None: 2; only with workers).
        persistent_workers: keep the worker processes alive between epochs (each is seeded
            once, when first started, as PyTorch); they stop when the loader is collected.
        pin_memory, pin_memory_device: accepted for PyTorch compatibility; batches are CPU
            tensors and pinning is a no-op.
        in_order: accepted; batches always come in order.
        timeout: seconds to wait for one batch from the workers before raising (a batch that
            stops arriving halfway counts); 0 waits as long as the workers are alive.
        multiprocessing_context: a start method name ("spawn", "fork", "forkserver") or a
            context; default the platform's. Use "spawn" once CUDA is initialised. Under "spawn"
            the dataset and functions must be picklable (defined at module level).
    """

    def __init__(self, dataset: Dataset[T_co], batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None, sampler: Optional[Iterable[int]] = None,
                 batch_sampler: Optional[Iterable[List[int]]] = None, num_workers: int = 0,
                 collate_fn: Optional[Callable] = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Optional[Callable] = None,
                 multiprocessing_context: Union[str, Any, None] = None,
                 generator: GeneratorLike = None, *, prefetch_factor: Optional[int] = None,
                 persistent_workers: bool = False, pin_memory_device: str = "",
                 in_order: bool = True, seed: Optional[int] = None) -> None:
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, (int, np.integer))
                                       or batch_size <= 0):
            raise ValueError(f"DataLoader: batch_size must be a positive int or None, "
                             f"found {batch_size!r}")
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be an int >= 0, "
                             f"found {num_workers!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in "
                             "multiprocessing. let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor < 1:
            raise ValueError(f"DataLoader: prefetch_factor must be >= 1, found {prefetch_factor}")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        if timeout < 0:
            raise ValueError(f"DataLoader: timeout must be >= 0, found {timeout}")
        shuffle = bool(shuffle) if shuffle is not None else False
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            if isinstance(dataset, IterableDataset):
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "batch_sampler option")
            batch_size = None
        self._is_iterable = isinstance(dataset, IterableDataset)
        if self._is_iterable and (shuffle or sampler is not None):
            raise ValueError("DataLoader: an IterableDataset decides its own order; shuffle= "
                             "and sampler= apply to map-style datasets only")
        if shuffle and sampler is not None:
            raise ValueError("DataLoader: give shuffle=True or a sampler, not both")
        if seed is not None:
            if generator is not None:
                raise ValueError("DataLoader: give generator= or seed=, not both")
            generator = seed
        # An int seed makes each epoch's order a function of (seed, epoch) alone: the same in
        # every run, and the same after resuming at an epoch with set_epoch.
        self._seed: Optional[int] = None
        self._generator: Optional[np.random.Generator] = None
        if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
            if generator < 0:
                raise ValueError(f"DataLoader: seed must be >= 0, found {generator}")
            self._seed = int(generator)
        elif generator is not None:
            self._generator = _make_rng(generator, "DataLoader")
        self._epoch = 0
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.pin_memory, self.pin_memory_device = bool(pin_memory), pin_memory_device
        self.persistent_workers = bool(persistent_workers)
        self.in_order = in_order
        self._persistent_iter: Optional["_MultiProcessIter"] = None
        self.drop_last = bool(drop_last)
        self.num_workers = int(num_workers)
        self.worker_init_fn = worker_init_fn
        self.prefetch_factor = int(prefetch_factor)
        self.timeout = float(timeout)
        self.multiprocessing_context = multiprocessing_context
        if collate_fn is None or collate_fn is default_collate:
            # Collate to numpy (cheap to send between processes); make tensors at the end.
            self.collate_fn = default_collate
            self._fetcher = _Fetcher(dataset, self._fetch_size, self.drop_last,
                                     numpy_collate, numpy_convert)
            self._finish = arrays_to_tensors
        else:
            self.collate_fn = collate_fn
            self._fetcher = _Fetcher(dataset, self._fetch_size, self.drop_last,
                                     collate_fn, _identity)
            self._finish = _identity

    @property
    def _fetch_size(self) -> Optional[int]:
        """The fetcher's batch size: a batch sampler's lists are collated whatever their
        length (any int does), no batching is None."""
        return 1 if self.batch_sampler is not None else self.batch_size

    def __len__(self) -> int:
        """Number of batches per epoch (for an IterableDataset, from its ``__len__``)."""
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        source = self.sampler if self.sampler is not None else self.dataset
        try:
            n = len(source)
        except TypeError:
            raise TypeError(f"DataLoader: {type(source).__name__} has no __len__, so the "
                            "number of batches is unknown") from None
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch number ``epoch`` (0-based; each iteration then counts
        on from it). With an int seed the shuffle order and the worker seeds depend on
        (seed, epoch) only, so a run resumed at epoch k sees the batches of an uninterrupted
        run; with a Generator or no seed the epoch number changes nothing."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"DataLoader.set_epoch: expected an int >= 0, found {epoch!r}")
        self._epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        # The order is drawn now, not at the first next(): iterators made one after the other
        # get consecutive epochs.
        order = None if self._is_iterable else self._epoch_order(epoch)
        if self.num_workers == 0:
            return self._single_process_iter(order)
        if self.persistent_workers:
            it = self._persistent_iter
            if it is not None and not it._shut_down:
                it._reset(self, order)
                return it
            it = self._persistent_iter = _MultiProcessIter(self, order,
                                                           self._worker_base_seed(epoch))
            return it
        return _MultiProcessIter(self, order, self._worker_base_seed(epoch))

    # -- epoch plan ------------------------------------------------------------------------------
    def _epoch_order(self, epoch: int) -> Iterable[int]:
        if self.sampler is not None:
            return self.sampler
        n = len(self.dataset)
        if not self.shuffle:
            return range(n)
        if self._seed is not None:
            rng = np.random.default_rng(np.random.SeedSequence([self._seed, epoch]))
        elif self._generator is not None:
            rng = self._generator
        else:
            rng = _make_rng(None, "DataLoader")
        return rng.permutation(n).tolist()

    def _worker_base_seed(self, epoch: int) -> int:
        """Worker ``i`` seeds its generators with this + i: from (seed, epoch) with an int seed
        (kept apart from the shuffle, so the order does not depend on num_workers), fresh
        entropy otherwise."""
        words = None if self._seed is None else [self._seed, epoch, 1]
        return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> 2)

    def _index_batches(self, order: Iterable[int]) -> Iterator[List[int]]:
        """The lists of indices that make the batches of an epoch visiting ``order`` (or the
        lists the batch sampler gives)."""
        if self.batch_sampler is not None:
            for batch in self.batch_sampler:
                yield [int(i) for i in batch]
            return
        order = iter(order)
        size = 1 if self.batch_size is None else self.batch_size
        while True:
            indices = [int(i) for i in itertools.islice(order, size)]
            if not indices or (self.drop_last and len(indices) < size):
                return
            yield indices

    def _single_process_iter(self, order: Optional[Iterable[int]]) -> Iterator[Any]:
        if self._is_iterable:
            iterator = iter(self.dataset)
            while True:
                try:
                    batch = self._fetcher.fetch_next(iterator)
                except StopIteration:
                    return
                yield self._finish(batch)
        else:
            for indices in self._index_batches(order):
                yield self._finish(self._fetcher.fetch(indices))

    def _context(self):
        ctx = self.multiprocessing_context
        if ctx is None or isinstance(ctx, str):
            return multiprocessing.get_context(ctx)
        return ctx


def _identity(x):
    return x


def _short(indices: Optional[List[int]]) -> str:
    if indices is None:
        return ""
    shown = ", ".join(map(str, indices[:8]))
    return f" (indices [{shown}{', ...' if len(indices) > 8 else ''}])"


class _Inbox:
    """The main process's end of one worker's result pipe: reads whatever bytes are there
    without blocking and cuts them into frames (see ``_send_frame``), so a frame that stops
    halfway never blocks the reader."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self.fd = connection.fileno()
        os.set_blocking(self.fd, False)
        self.closed = False   # the worker's end is closed (it exited or was killed)
        self._header = bytearray(_FRAME_HEADER.size)
        self._body: Optional[bytearray] = None
        self._filled = 0

    def read(self) -> List[bytearray]:
        """The frames completed by the bytes available now (sets ``closed`` at the end)."""
        frames = []
        while not self.closed:
            target = self._header if self._body is None else self._body
            if self._filled < len(target):
                try:
                    n = os.readv(self.fd, [memoryview(target)[self._filled:]])
                except BlockingIOError:
                    break
                except OSError:
                    n = 0
                if n == 0:   # end of file: the worker's end is closed
                    self.closed = True
                    break
                self._filled += n
                if self._filled < len(target):
                    continue
            self._filled = 0
            if self._body is None:
                self._body = bytearray(_FRAME_HEADER.unpack(self._header)[0])
            else:
                frames.append(self._body)
                self._body = None
        return frames

    @property
    def partial(self) -> int:
        """Bytes of an unfinished frame received so far (0 between frames)."""
        if self._body is None:
            return self._filled
        return _FRAME_HEADER.size + self._filled

    def close(self) -> None:
        self.closed = True
        self.connection.close()


class _MultiProcessIter:
    """One epoch over a DataLoader with worker processes.

    Tasks are numbered in the order their batches must come out and dealt round-robin to
    per-worker index queues, at most ``prefetch_factor`` per worker ahead; each worker answers
    on its own pipe, and results wait in ``_buffer`` until their turn. For an IterableDataset a
    task asks a worker for its next batch; a worker whose stream has ended gets no more tasks.

    Waiting is one ``multiprocessing.connection.wait`` on the pipes and the process sentinels:
    a worker that dies (even halfway through sending a batch) wakes the main process at once,
    which raises a ``DataLoaderError`` naming the worker and its exit signal; ``timeout`` bounds
    every wait, partial transfers included. Shutdown asks the workers to stop, then terminates
    and finally kills those still alive, and joins every one of them.
    """

    def __init__(self, loader: DataLoader, order: Optional[Iterable[int]],
                 base_seed: int) -> None:
        self._is_iterable = loader._is_iterable
        self._finish = loader._finish
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._prefetch = loader.prefetch_factor
        self._epoch_start = 0    # results of tasks numbered below this belong to an old epoch
        self._batches = None if self._is_iterable else loader._index_batches(order)
        self._shut_down = False
        self._workers: list = []
        self._index_queues: list = []
        self._inboxes: List[_Inbox] = []
        ctx = loader._context()
        self._stop = ctx.RawValue(ctypes.c_bool, False)
        num_workers = loader.num_workers
        try:
            for worker_id in range(num_workers):
                index_queue = ctx.Queue()
                index_queue.cancel_join_thread()   # never block exit on unsent tasks
                reader, writer = ctx.Pipe(duplex=False)
                self._index_queues.append(index_queue)
                self._inboxes.append(_Inbox(reader))
                process = ctx.Process(
                    target=_worker_loop, daemon=True,
                    args=(loader._fetcher, index_queue, writer, self._stop,
                          worker_id, num_workers, base_seed + worker_id,
                          loader.worker_init_fn, self._is_iterable))
                try:
                    process.start()
                except (pickle.PicklingError, AttributeError, TypeError) as e:
                    raise DataLoaderError(
                        f"DataLoader: cannot send the dataset, collate_fn or worker_init_fn to "
                        f"a worker process ({type(e).__name__}: {e}); with the "
                        f"{ctx.get_start_method()!r} start method they must be picklable: "
                        "define them at module level (no lambdas or local classes), or use "
                        "num_workers=0") from None
                finally:
                    # Only the worker holds the writing end: its death closes the pipe.
                    writer.close()
                self._workers.append(process)
        except BaseException:
            self._shutdown()
            raise
        self._active = [True] * num_workers
        self._next_worker = itertools.cycle(range(num_workers))
        self._send_id = 0        # id of the next task to send
        self._receive_id = 0     # id of the next batch to yield
        self._task_worker: dict = {}   # task id -> (worker id, indices), until yielded
        self._buffer: dict = {}        # task id -> (status, payload), arrived early
        self._fill()

    def _fill(self) -> None:
        for _ in range(self._prefetch * len(self._workers)):
            if not self._send_task():
                break

    def _reset(self, loader: "DataLoader", order: Optional[Iterable[int]]) -> None:
        """Start a new epoch on the same (persistent) workers. Results still due from an
        epoch left unfinished are dropped when they arrive; an iterable dataset's workers
        restart their streams."""
        self._finish = loader._finish
        self._epoch_start = self._send_id
        self._receive_id = self._send_id
        self._buffer.clear()
        self._task_worker.clear()
        if self._is_iterable:
            for q in self._index_queues:
                q.put(_RESET)
            self._active = [True] * len(self._workers)
        else:
            self._batches = loader._index_batches(order)
        self._fill()

    def __iter__(self) -> "_MultiProcessIter":
        return self

    def _send_task(self) -> bool:
        """Give the next task to the next worker in turn; False when there is none to give."""
        if self._is_iterable:
            if not any(self._active):
                return False
            worker_id = next(self._next_worker)
            while not self._active[worker_id]:
                worker_id = next(self._next_worker)
            indices = None
        else:
            indices = next(self._batches, None)
            if indices is None:
                return False
            worker_id = next(self._next_worker)
        self._index_queues[worker_id].put((self._send_id, indices))
        self._task_worker[self._send_id] = (worker_id, indices)
        self._send_id += 1
        return True

    def __next__(self) -> Any:
        while True:
            if self._shut_down or self._receive_id == self._send_id:
                if not self._persistent:
                    self._shutdown()
                raise StopIteration
            task_id = self._receive_id
            while task_id not in self._buffer:
                self._receive(task_id)
            status, payload = self._buffer.pop(task_id)
            worker_id, indices = self._task_worker.pop(task_id)
            self._receive_id += 1
            if status == _EXHAUSTED:
                self._active[worker_id] = False
                continue
            if status == "error":
                self._shutdown()
                raise DataLoaderError(
                    f"DataLoader worker {payload.worker_id} (pid {payload.pid}) raised "
                    f"{payload.exc_type} while loading batch {task_id}{_short(indices)}; "
                    f"its traceback:\n{payload.traceback.rstrip()}")
            self._send_task()
            return self._finish(payload)

    def _receive(self, task_id: int) -> None:
        """Wait until at least one more result is in ``_buffer``; raise ``DataLoaderError`` if
        a worker dies or ``timeout`` passes first (batch ``task_id`` is the one awaited)."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        by_fd = {inbox.fd: (worker_id, inbox) for worker_id, inbox in enumerate(self._inboxes)}
        by_sentinel = {process.sentinel: worker_id
                       for worker_id, process in enumerate(self._workers)}
        while True:
            waiting = [inbox.fd for inbox in self._inboxes if not inbox.closed]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait(waiting + list(by_sentinel), remaining)
            received = False
            for handle in ready:
                if handle in by_fd:
                    worker_id, inbox = by_fd[handle]
                    for frame in inbox.read():
                        received_id, status, payload = self._unpickle(frame, worker_id)
                        if received_id >= self._epoch_start:
                            self._buffer[received_id] = (status, payload)
                            received = True
            for handle in ready:
                if handle in by_sentinel:
                    self._worker_died(by_sentinel[handle], task_id)
            if received:
                return
            if deadline is not None and time.monotonic() >= deadline:
                partial = sum(inbox.partial for inbox in self._inboxes)
                self._shutdown(grace=0.5)
                raise DataLoaderError(
                    f"DataLoader timed out after {self._timeout:g} s waiting for batch "
                    f"{task_id} from its workers"
                    + (f" ({partial} bytes of an unfinished batch had arrived)" if partial
                       else ""))

    def _unpickle(self, frame: bytearray, worker_id: int) -> tuple:
        try:
            return pickle.loads(frame)
        except Exception as e:
            self._shutdown(grace=0.5)
            raise DataLoaderError(
                f"DataLoader: the main process cannot unpickle a batch from worker {worker_id} "
                f"({type(e).__name__}: {e}); a batch must be made of types the main process "
                "can import") from None

    def _worker_died(self, worker_id: int, task_id: int) -> None:
        """A worker's process ended during the epoch: stop everything and say how it ended."""
        process = self._workers[worker_id]
        process.join(timeout=1.0)
        code = process.exitcode
        self._shutdown(grace=0.5)
        if code is not None and code < 0:
            try:
                name = f" ({signal.Signals(-code).name})"
            except ValueError:
                name = ""
            how = f"was killed by signal {-code}{name}"
        else:
            how = f"exited with code {code}"
        raise DataLoaderError(
            f"DataLoader worker {worker_id} (pid {process.pid}) {how} unexpectedly while "
            f"batch {task_id} was pending (out of memory? a crash in native code? os._exit "
            "in the dataset?)")

    def close(self) -> None:
        """Stop the workers now (also done when the iterator is exhausted or collected)."""
        self._shutdown()

    def _shutdown(self, grace: float = _JOIN_TIMEOUT) -> None:
        """Stop and reap every worker: ask them to exit and close their pipes (a worker blocked
        sending sees the pipe's end), wait up to ``grace`` seconds, then terminate, then kill
        (a stopped process ignores SIGTERM until continued), and join each one."""
        if self._shut_down:
            return
        self._shut_down = True
        self._stop.value = True
        for index_queue in self._index_queues:
            try:
                index_queue.put(None)
            except (OSError, ValueError):
                pass
        for inbox in self._inboxes:
            inbox.close()
        deadline = time.monotonic() + grace
        for process in self._workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._workers:
            if process.exitcode is None:
                process.terminate()
        deadline = time.monotonic() + 1.0
        for process in self._workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._workers:
            if process.exitcode is None:
                process.kill()
                process.join()
        for q in self._index_queues:
            q.cancel_join_thread()
            q.close()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:
            pass
