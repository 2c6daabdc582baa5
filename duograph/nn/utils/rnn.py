"""``nn.utils.rnn``: packed and padded batches of variable-length sequences, as
``torch.nn.utils.rnn``.

A ``PackedSequence`` holds the steps of a batch of sequences sorted by decreasing length,
time-major: ``data`` stacks step 0 of every sequence, then step 1 of those at least 2 long,
and so on; ``batch_sizes[t]`` says how many sequences have a step ``t``. ``nn.RNN``,
``nn.LSTM`` and ``nn.GRU`` take one and return one, with each sequence's final state taken
at its own last step.

Every function here is made of differentiable ops (gathers, pads, stacks), so gradients
flow to the data eagerly, under ``dg.compile`` and in graph mode. Deliberate differences
from PyTorch:

- ``lengths`` (and ``batch_sizes``) must be known when the op runs: a list, a numpy array
  or an eager tensor, never a graph-mode ``Value`` (the packed data's shape is their sum).
  In graph mode, feed a symbolic padded batch with concrete lengths, or give the recurrent
  layers the lengths as a tensor (``rnn(padded, lengths=...)``), which works with
  symbolic lengths. Under ``dg.compile`` the lengths are read as a guarded decision: other
  lengths record again.
- A length larger than the padded input's time dimension raises (PyTorch reads past the
  end of the input).
- ``batch_sizes``, ``sorted_indices`` and ``unsorted_indices`` are int64 tensors on the
  host, as PyTorch's; no ``pin_memory``.
"""
from __future__ import annotations

from collections import namedtuple
from typing import List, Optional, Sequence

import numpy as np

from ...eager.creation import as_tensor
from ...eager.tensors import Tensor
from ...graphlib import functional as F
from ...graphlib.errors import DuographError, ShapeError, located
from ...graphlib.ir import Value

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence",
           "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
           "unpack_sequence"]


class PackedSequenceArgError(DuographError, ValueError, RuntimeError):
    """A bad argument to a packing function (a ``RuntimeError``, as PyTorch raises, and a
    ``ValueError``)."""


def _int_array(x, name: str, who: str) -> np.ndarray:
    """``x`` (a list, tuple, numpy array or eager tensor of integers) as a 1-D int64 numpy
    array; a symbolic ``Value`` is refused with what to do instead."""
    if isinstance(x, Value):
        raise TypeError(located(
            f"{who}: '{name}' must be known when the sequence is packed (a list, a numpy "
            f"array or an eager tensor), found a graph-mode Value {x!r}; pack a symbolic "
            "batch with concrete lengths, or pass the padded batch and the lengths tensor to "
            "the recurrent layer (rnn(padded, lengths=lengths))"))
    if isinstance(x, Tensor):
        if x.ndim != 1:
            raise ShapeError(located(
                f"{who}: '{name}' argument should be a 1D CPU int64 tensor, but got "
                f"{x.ndim}D {x.device} {x.dtype} tensor"))
        arr = np.asarray(x.detach().numpy() if x.device == "cpu" else x.detach().cpu().numpy())
    else:
        arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeError(located(f"{who}: '{name}' must be 1-D, found shape {list(arr.shape)}"))
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer)
                                     or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(located(f"{who}: '{name}' must hold integers, found dtype {arr.dtype}"))
    return arr.astype(np.int64)          # floats are truncated, as torch.as_tensor(int64)


def _index_tensor(arr) -> Optional[Tensor]:
    return None if arr is None else Tensor._wrap(np.ascontiguousarray(arr, dtype=np.int64))


def invert_permutation(permutation) -> Optional[Tensor]:
    """The inverse of a permutation (``None`` stays ``None``): ``out[permutation[i]] = i``."""
    if permutation is None:
        return None
    p = _int_array(permutation, "permutation", "invert_permutation")
    out = np.empty_like(p)
    out[p] = np.arange(p.size, dtype=np.int64)
    return _index_tensor(out)


class PackedSequence(namedtuple("PackedSequence_",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """A packed batch of variable-length sequences (``torch.nn.utils.rnn.PackedSequence``):
    a namedtuple of ``data`` (``(sum(lengths), *)``), ``batch_sizes`` (int64, one entry per
    time step), ``sorted_indices`` (the batch order that sorts the sequences by decreasing
    length, or ``None`` when they came sorted) and ``unsorted_indices`` (its inverse).
    Build one with ``pack_padded_sequence`` or ``pack_sequence``, not by hand.
    ``data`` may be an eager tensor or a graph-mode ``Value``."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise TypeError("PackedSequence: give (data, batch_sizes), found "
                                f"{type(data).__name__}")
            data, batch_sizes = data
        if isinstance(batch_sizes, Value):
            _int_array(batch_sizes, "batch_sizes", "PackedSequence")
        if not isinstance(batch_sizes, Tensor):
            batch_sizes = _index_tensor(_int_array(batch_sizes, "batch_sizes",
                                                   "PackedSequence"))
        if sorted_indices is not None and not isinstance(sorted_indices, Tensor):
            sorted_indices = _index_tensor(_int_array(sorted_indices, "sorted_indices",
                                                      "PackedSequence"))
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        elif not isinstance(unsorted_indices, Tensor):
            unsorted_indices = _index_tensor(_int_array(unsorted_indices, "unsorted_indices",
                                                        "PackedSequence"))
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> "PackedSequence":
        """``data.to(*args, **kwargs)``; the index tensors stay on the host."""
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else type(self)(data, self.batch_sizes,
                                                         self.sorted_indices,
                                                         self.unsorted_indices)

    def cpu(self) -> "PackedSequence":
        """The data on the host."""
        return self.to("cpu")

    def cuda(self, *args, **kwargs) -> "PackedSequence":
        """The data on the GPU."""
        return self.to("cuda", *args, **kwargs)

    def double(self) -> "PackedSequence":
        """The data as float64."""
        return self.to(dtype="float64")

    def float(self) -> "PackedSequence":
        """The data as float32."""
        return self.to(dtype="float32")

    def half(self) -> "PackedSequence":
        """The data as float16."""
        return self.to(dtype="float16")

    def long(self) -> "PackedSequence":
        """The data as int64."""
        return self.to(dtype="int64")

    def int(self) -> "PackedSequence":
        """The data as int32."""
        return self.to(dtype="int32")

    @property
    def is_cuda(self) -> bool:
        """Whether ``data`` lives on a GPU."""
        return getattr(self.data, "device", "cpu") != "cpu"


def _lengths_from_batch_sizes(bs: np.ndarray) -> np.ndarray:
    """The length of each sequence, in the packed (sorted) order."""
    n = int(bs[0]) if bs.size else 0
    return (bs[None, :] > np.arange(n)[:, None]).sum(1).astype(np.int64)


def _pack_index(bs: np.ndarray, n: int) -> np.ndarray:
    """Rows of a time-major ``(T * n, ...)`` padded batch that make up the packed data."""
    return np.concatenate([t * n + np.arange(b) for t, b in enumerate(bs)]).astype(np.int64)


def _padded_index(bs: np.ndarray, steps: int, fill: int) -> np.ndarray:
    """For each (t, b) of a ``(steps, bs[0])`` padded batch, the row of the packed data that
    holds it, or ``fill`` where the sequence has ended."""
    n = int(bs[0])
    offsets = np.concatenate([[0], np.cumsum(bs)[:-1]])
    idx = np.full((steps, n), fill, dtype=np.int64)
    for t, b in enumerate(bs):
        idx[t, :b] = offsets[t] + np.arange(b)
    return idx


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch ``input`` (``(T, B, *)``, or ``(B, T, *)`` with
    ``batch_first``) of sequences of the given ``lengths`` (``torch.nn.utils.rnn
    .pack_padded_sequence``). With ``enforce_sorted`` the lengths must be decreasing;
    otherwise the batch is sorted first (a stable sort, as PyTorch's) and the permutation is
    kept in ``sorted_indices``. Every length must be in ``1..T``."""
    who = "pack_padded_sequence"
    lens = _int_array(lengths, "lengths", who)
    x = input if isinstance(input, (Tensor, Value)) else as_tensor(input)
    if x.ndim < 2:
        raise ShapeError(located(f"{who}: expected a padded batch with at least 2 dims "
                                 f"(time and batch), found shape {list(x.shape)}"))
    batch_dim = 0 if batch_first else 1
    if lens.size != x.shape[batch_dim]:
        raise ShapeError(located(f"{who}: Expected `len(lengths)` to be equal to batch_size, "
                                 f"but got {lens.size} (batch_size={x.shape[batch_dim]})"))
    sorted_indices = None
    if not enforce_sorted:
        sorted_indices = np.argsort(-lens, kind="stable").astype(np.int64)
        lens = lens[sorted_indices]
        x = F.index_select(x, batch_dim, sorted_indices)
    if batch_first:
        x = F.transpose(x, 0, 1)
    steps, n = x.shape[0], x.shape[1]
    if n == 0 or lens[-1] <= 0:
        raise ShapeError(located(f"{who}: Length of all samples has to be greater than 0, "
                                 "but found an element in 'lengths' that is <= 0"))
    if np.any(np.diff(lens) > 0):
        raise ShapeError(located(
            f"{who}: `lengths` array must be sorted in decreasing order when `enforce_sorted` "
            f"is True (found {lens.tolist()}). You can pass `enforce_sorted=False` to "
            "pack_padded_sequence and/or pack_sequence to sidestep this requirement"))
    if isinstance(steps, int) and lens[0] > steps:
        raise ShapeError(located(f"{who}: a length ({int(lens[0])}) is larger than the "
                                 f"input's time dimension ({steps}), input shape "
                                 f"{list(input.shape)}"))
    bs = (lens[None, :] > np.arange(int(lens[0]))[:, None]).sum(1).astype(np.int64)
    flat = F.reshape(x, (-1,) + tuple(x.shape[2:]))
    data = F.index_select(flat, 0, _pack_index(bs, n))
    return PackedSequence(data, _index_tensor(bs), _index_tensor(sorted_indices), None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: Optional[int] = None):
    """Undo ``pack_padded_sequence``: returns ``(padded, lengths)``, the batch padded with
    ``padding_value`` to the longest length (or ``total_length``) in the original batch
    order, and an int64 tensor of the lengths (``torch.nn.utils.rnn.pad_packed_sequence``)."""
    who = "pad_packed_sequence"
    if not isinstance(sequence, tuple) or len(sequence) != 4:
        raise TypeError(located(f"{who}: expected a PackedSequence, found "
                                f"{type(sequence).__name__}"))
    data, batch_sizes, _, unsorted = sequence
    bs = _int_array(batch_sizes, "batch_sizes", who)
    max_len = int(bs.size)
    if total_length is not None:
        if isinstance(total_length, bool) or not isinstance(total_length, (int, np.integer)):
            raise TypeError(located(f"{who}: total_length must be an int, found "
                                    f"{total_length!r}"))
        if total_length < max_len:
            raise ShapeError(located(
                f"{who}: Expected total_length to be at least the length of the longest "
                f"sequence in input, but got total_length={total_length} and max sequence "
                f"length being {max_len}"))
        max_len = int(total_length)
    rows = int(bs.sum())
    if tuple(data.shape[:1]) != (rows,):
        raise ShapeError(located(f"{who}: the packed data has shape {list(data.shape)}, but "
                                 f"batch_sizes add up to {rows} rows"))
    n = int(bs[0])
    rest = tuple(data.shape[1:])
    filler = F.full_like(data[0:1], padding_value)         # on data's device
    src = F.cat([data, filler], 0)
    idx = _padded_index(bs, max_len, rows).reshape(-1)
    padded = F.reshape(F.index_select(src, 0, idx), (max_len, n) + rest)
    lengths = _lengths_from_batch_sizes(bs)
    if unsorted is not None:
        order = _int_array(unsorted, "unsorted_indices", who)
        padded = F.index_select(padded, 1, order)
        lengths = lengths[order]
    if batch_first:
        padded = F.transpose(padded, 0, 1)
    return padded, _index_tensor(lengths)


def _sequence_list(sequences, who: str) -> list:
    if isinstance(sequences, (Tensor, Value)):
        return [sequences[i] for i in range(int(sequences.shape[0]))]
    if not isinstance(sequences, (list, tuple)):
        sequences = list(sequences)
    if not sequences:
        raise PackedSequenceArgError(located(f"{who}: received an empty list of sequences"))
    return list(sequences)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right"):
    """Stack tensors of shapes ``(L_i, *)`` into one ``(max L, B, *)`` batch (``(B, max L,
    *)`` with ``batch_first``), padded with ``padding_value`` on the ``padding_side``
    ('right' or 'left'), as ``torch.nn.utils.rnn.pad_sequence``."""
    who = "pad_sequence"
    if padding_side not in ("left", "right"):
        raise PackedSequenceArgError(located(
            f"{who}: Expected padding_side to be one of left or right, but got "
            f"{padding_side}."))
    seqs = _sequence_list(sequences, who)
    seqs = [s if isinstance(s, (Tensor, Value)) else as_tensor(s) for s in seqs]
    trailing = tuple(seqs[0].shape[1:])
    for i, s in enumerate(seqs):
        if s.ndim < 1 or tuple(s.shape[1:]) != trailing:
            raise ShapeError(located(
                f"{who}: every sequence must have shape (L, {', '.join(map(str, trailing))}"
                f"{',' if len(trailing) == 1 else ''}) after its length, but sequence {i} has "
                f"shape {list(s.shape)} and sequence 0 {list(seqs[0].shape)}"))
    max_len = max(int(s.shape[0]) for s in seqs)
    dtype = seqs[0].dtype
    out = []
    for s in seqs:
        missing = max_len - int(s.shape[0])
        if s.dtype != dtype:
            s = s.to(dtype) if isinstance(s, Tensor) else F.cast(s, dtype)
        if missing:
            ends = (0, missing) if padding_side == "right" else (missing, 0)
            s = F.pad(s, (0, 0) * len(trailing) + ends, value=padding_value)
        out.append(s)
    return F.stack(out, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> List:
    """Split a padded batch back into its sequences, each cut to its length
    (``torch.nn.utils.rnn.unpad_sequence``)."""
    lens = _int_array(lengths, "lengths", "unpad_sequence")
    x = padded_sequences if batch_first else F.transpose(padded_sequences, 0, 1)
    return [x[i][:int(n)] for i, n in enumerate(lens)]


def pack_sequence(sequences: Sequence, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors of shapes ``(L_i, *)`` (``torch.nn.utils.rnn.pack_sequence``):
    ``pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=...)``."""
    seqs = _sequence_list(sequences, "pack_sequence")
    lengths = [int(s.shape[0]) for s in seqs]
    return pack_padded_sequence(pad_sequence(seqs), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> List:
    """The list of sequences a ``PackedSequence`` holds, in the original order
    (``torch.nn.utils.rnn.unpack_sequence``)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
