"""duograph.io: checkpoints as safetensors files, never pickle.

    dg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3},
            "ckpt.safetensors")
    ckpt = dg.load("ckpt.safetensors")

``save`` stores nested containers (dicts, lists, tuples) whose leaves are dg tensors, numpy
arrays and numpy scalars, ints, floats, bools, strings and None. Every array goes into a
safetensors file (dtype and shape kept: bool, uint8, uint16, uint32, uint64, int8, int16,
int32, int64, float16, bfloat16, float32, float64, complex64, float8_e4m3fn, float8_e5m2,
float8_e8m0fnu (as PyTorch's safetensors writes them: F8_E4M3, F8_E5M2, F8_E8M0);
safetensors has no complex128, fnuz float8, int4 or float4 code: those are refused); everything
else is described by JSON in the safetensors header's ``__metadata__``::

    {"format": "duograph.checkpoint", "version": "1", "tree": "<JSON of the nesting>"}

The tree is made of nodes ``{"type": "dict", "items": [[key, node], ...]}`` (keys str, int or
bool; order kept), ``{"type": "list" | "tuple", "items": [node, ...]}``,
``{"type": "tensor" | "ndarray" | "numpy_scalar", "name": "<safetensors name>"}`` and scalar
leaves ``{"type": "int" | "bool" | "str", "value": ...}``, ``{"type": "float", "value":
repr(x)}`` (exact, inf and nan included) and ``{"type": "none"}``.

A tensor's safetensors name is its path, components joined by "/": dict string keys are
escaped ("~" -> "~0", "/" -> "~1", as in JSON Pointer; "__metadata__", which safetensors
reserves, -> "~m"), int and bool keys are written "~i3", "~b1", list positions as digits; so
names are readable and two different paths never share a name. A tensor (or array) met twice
is stored once and comes back as one object (tied weights).

Loading never unpickles and never runs code from the file: the header is checked by hand,
the tree is plain JSON, and the only leaf types are those above. Any problem with the file
raises ``CheckpointError`` naming the file and what is wrong. Tensors load onto the CPU
(``device=`` moves them) and keep ``requires_grad``; mappings come back as plain dicts.

Bounded work. ``load`` opens only regular files (a FIFO, ``/dev/zero`` or another device is
refused at once, without blocking or reading), and a header longer than
``MAX_HEADER_BYTES`` (16 MiB) is refused from its 8-byte length prefix before it is read
(``save`` refuses to write one), so a hostile file cannot make ``load`` hang or parse
gigabytes of JSON; the sizes the header gives are checked against the file's before any
tensor is read.

Plain safetensors files. A file without duograph's metadata (``safetensors.torch.save_file``
of a PyTorch ``state_dict``, ``safetensors.numpy.save_file``) loads as a dict from tensor name
to dg tensor, in name order, as ``safetensors.torch.load_file`` gives it, so
``model.load_state_dict(dg.load("model.safetensors"))`` works; dtypes safetensors has but
duograph does not (float4, float6) are refused, naming the tensor. Such a file carries no
checksums (nothing is verified beyond the header's consistency).

Integrity. Since format version 2 the metadata also holds ``"checksums"`` (JSON: tensor name ->
CRC-32 of its bytes, 8 hex digits) and ``"header_crc32"`` (the CRC-32 of the whole header,
tensor table and metadata, written as canonical JSON without that entry). ``load`` always
checks the header's CRC and, with ``verify=True`` (the default), every tensor's, so a flipped
bit anywhere in the file is a ``CheckpointError``, never a silently different value
(``verify=False`` skips reading the data for speed; a CRC detects accidents, not tampering).
Files of version 1 (written before checksums) still load, unverified. The files remain plain
safetensors files: ``safetensors.numpy.load_file`` reads them.

Memory. ``save`` streams each tensor to the file in pieces of at most 16 MB (the checksums
are computed in a first pass over the same memory), so it needs no copy of the state. ``load``
memory-maps the file copy-on-write (``mmap=True``): tensors are views of the mapping, read
from disk on first use and writable without touching the file. ``dg.save`` replaces files
atomically, so saving over a mapped checkpoint is safe on POSIX systems; but a file
overwritten *in place* by another program while its tensors are alive can change them or
crash the process (SIGBUS), as with any memory map, and each mapping holds an open file
descriptor until its tensors are freed: pass ``mmap=False`` to read the tensors into memory.

Writes are atomic: the bytes go to a temporary file beside the target (``.<name>.<12 hex
digits>.tmp``), are flushed and fsync'ed, and replace the target with ``os.replace`` (then the
directory is fsync'ed), so a crash mid-save leaves the previous checkpoint intact. Links are
not followed: a symlink at the target is replaced by the checkpoint, and the file it pointed
to is left as it was. A re-saved file keeps the existing file's permission bits (and owner,
where allowed). A process
killed mid-save leaves its temporary file behind: the next save of the same target removes
the temporary files of that target that are regular files of the current user, untouched for
``STALE_TEMP_SECONDS`` (10 minutes) and not locked by a live writer (each writer holds an
``flock`` on its temporary file); nothing else in the directory is touched.
"""
from __future__ import annotations

import io
import json
import mmap as mmap_module
import os
import struct
import sys
import zlib
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .eager import Tensor
from .graphlib import dtypes
from .graphlib.errors import DuographError
from .graphlib.files import MAX_HEADER_BYTES, NotRegularFileError, atomic_write, open_regular

__all__ = ["save", "load", "to_bytes", "from_bytes", "CheckpointError", "FORMAT_NAME",
           "FORMAT_VERSION", "MAX_NESTING", "MAX_HEADER_BYTES", "STALE_TEMP_SECONDS"]

FORMAT_NAME = "duograph.checkpoint"
FORMAT_VERSION = 2   # 2: checksums in the metadata; 1: none (still read)
# Containers nested deeper than this are refused on save and on load (a checkpoint that saves
# must load, and both walk the tree recursively).
MAX_NESTING = 100
# Temporary files of a target untouched for this long (seconds) are removed by its next save.
STALE_TEMP_SECONDS = 600.0

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO]

# numpy dtypes a numpy-array leaf may have (all of them safetensors dtypes); tensor leaves
# are limited to duograph's own dtypes.
_ARRAY_DTYPES = frozenset({"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16",
                           "int32", "int64", "float16", "bfloat16", "float32", "float64",
                           "complex64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"})
_ARRAY_TYPES = ("tensor", "ndarray", "numpy_scalar")
# safetensors dtype codes <-> numpy dtype names (the little-endian layout is the format's).
_SAFETENSORS_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16",
                       "I16": "int16", "U32": "uint32", "I32": "int32", "U64": "uint64",
                       "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
                       "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
                       "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}
_DTYPE_CODES = {name: code for code, name in _SAFETENSORS_DTYPES.items()}
# Arrays are hashed and written in pieces of at most this many bytes.
_CHUNK_BYTES = 16 << 20
# The largest int a checkpoint stores: 4300 digits, Python's default limit for converting ints
# to and from text (sys.get_int_max_str_digits), so every reader can parse the tree.
_MAX_INT_DIGITS = 4300
_INT_LIMIT = 10 ** _MAX_INT_DIGITS


class CheckpointError(DuographError, ValueError):
    """A checkpoint cannot be saved (unsupported content) or loaded (corrupt, truncated, not a
    duograph checkpoint, or from a newer format)."""


# -- saving --------------------------------------------------------------------------------------

def _component(step: tuple) -> str:
    """A path step ``("key", k)`` or ``("index", i)`` as one component of a tensor name."""
    kind, key = step
    if kind == "index":
        return str(key)
    if isinstance(key, bool):
        return f"~b{int(key)}"
    if isinstance(key, int):
        return f"~i{key}"
    if key == "__metadata__":   # safetensors reserves that name for its metadata
        return "~m"
    return key.replace("~", "~0").replace("/", "~1")


def _where(path: List[tuple]) -> str:
    return "checkpoint" + "".join(f"[{key!r}]" for _, key in path)


class _Encoder:
    """Walks the object to save, building the JSON tree and the name -> array table."""

    def __init__(self) -> None:
        self.arrays: Dict[str, np.ndarray] = {}
        self._names_by_id: Dict[int, str] = {}
        self._open: set = set()   # ids of the containers on the current path (cycle check)

    def encode(self, obj: Any, path: List[tuple]) -> dict:
        if obj is None:
            return {"type": "none"}
        if isinstance(obj, np.generic):   # before float: np.float64 subclasses float
            return self._array("numpy_scalar", np.asarray(obj), None, path)
        if isinstance(obj, bool):
            return {"type": "bool", "value": obj}
        if isinstance(obj, int):
            if abs(obj) >= _INT_LIMIT:
                raise CheckpointError(
                    f"save: {_where(path)} is an int of more than {_MAX_INT_DIGITS} digits, "
                    "more than Python reads back from text by default; store it as a string "
                    "or as the bytes of int.to_bytes in a uint8 array")
            return {"type": "int", "value": int(obj)}
        if isinstance(obj, float):
            return {"type": "float", "value": repr(float(obj))}
        if isinstance(obj, str):
            return {"type": "str", "value": obj}
        if isinstance(obj, Tensor):
            if obj.dtype not in dtypes.DTYPE_NAMES:
                raise CheckpointError(f"save: {_where(path)} is a tensor of unsupported dtype "
                                      f"{obj.dtype}")
            node = self._array("tensor", np.asarray(obj.__array__()), obj, path)
            if obj.requires_grad:
                node["requires_grad"] = True
            return node
        if isinstance(obj, np.ndarray):
            return self._array("ndarray", obj, obj, path)
        if isinstance(obj, (dict, list, tuple)):
            if len(self._open) >= MAX_NESTING:
                raise CheckpointError(f"save: {_where(path[:3])}... nests containers more than "
                                      f"{MAX_NESTING} levels deep; a checkpoint holds at most "
                                      f"{MAX_NESTING}")
            if id(obj) in self._open:
                raise CheckpointError(f"save: {_where(path)} contains itself (a reference "
                                      "cycle)")
            self._open.add(id(obj))
            try:
                return self._container(obj, path)
            finally:
                self._open.discard(id(obj))
        raise CheckpointError(
            f"save: {_where(path)} is a {type(obj).__name__}; a checkpoint holds dicts, lists "
            "and tuples of dg tensors, numpy arrays, numbers, bools, strings and None")

    def _container(self, obj, path: List[tuple]) -> dict:
        if isinstance(obj, dict):
            items = []
            for key, value in obj.items():
                if not isinstance(key, (str, int)):
                    raise CheckpointError(
                        f"save: {_where(path)} has a key of type {type(key).__name__} "
                        f"({key!r}); dict keys must be str, int or bool")
                items.append([key, self.encode(value, path + [("key", key)])])
            return {"type": "dict", "items": items}
        if hasattr(obj, "_fields"):
            raise CheckpointError(f"save: {_where(path)} is a namedtuple {type(obj).__name__}; "
                                  "convert it with ._asdict() first")
        return {"type": "tuple" if isinstance(obj, tuple) else "list",
                "items": [self.encode(value, path + [("index", i)])
                          for i, value in enumerate(obj)]}

    def _array(self, kind: str, arr: np.ndarray, original: Any, path: List[tuple]) -> dict:
        """Store ``arr`` under its path's name; ``original`` (None for numpy scalars, which are
        fresh objects) is remembered so that an object met again is stored once."""
        if original is not None and id(original) in self._names_by_id:
            return {"type": kind, "name": self._names_by_id[id(original)]}
        if arr.dtype.name not in _ARRAY_DTYPES:
            raise CheckpointError(f"save: {_where(path)} has dtype {arr.dtype}, which a "
                                  f"checkpoint cannot hold; supported: "
                                  f"{', '.join(sorted(_ARRAY_DTYPES))}")
        name = "/".join(_component(step) for step in path)
        if name in self.arrays:   # impossible with the escaping; guards against regressions
            raise CheckpointError(f"save: two entries map to the tensor name {name!r}")
        self.arrays[name] = arr   # made contiguous and little-endian piece by piece on writing
        if original is not None:
            self._names_by_id[id(original)] = name
        return {"type": kind, "name": name}


def save(obj: Any, path: PathOrFile) -> None:
    """Save ``obj`` (nested dicts/lists/tuples of tensors, arrays and plain values) to ``path``
    as a safetensors checkpoint with checksums, atomically (see the module docstring).

    Tensors are streamed to the file: saving needs no second copy of the state in memory. A
    file that is replaced keeps its permission bits; stale temporary files that earlier saves
    of the same target left behind (a process killed mid-save) are removed.

    ``path`` may also be a binary file object (written in order, without the atomic rename).
    Raises ``CheckpointError`` if ``obj`` holds anything a checkpoint cannot store.
    """
    plan = _plan(obj)
    if hasattr(path, "write"):
        plan.write(path)
        return
    atomic_write(os.fspath(path), plan.write, stale_seconds=STALE_TEMP_SECONDS)


def to_bytes(obj: Any) -> bytes:
    """The bytes of the checkpoint ``save`` would write for ``obj``."""
    buffer = io.BytesIO()
    _plan(obj).write(buffer)
    return buffer.getvalue()


def _little_endian(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        return arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def _pieces(arr: np.ndarray) -> Iterator[memoryview]:
    """The bytes of ``arr`` in C order, little-endian, as views of at most ``_CHUNK_BYTES``
    (copies of a few rows at a time when ``arr`` is not contiguous)."""
    if arr.size == 0:
        return
    if arr.flags.c_contiguous:
        flat = memoryview(_little_endian(arr).reshape(-1).view(np.uint8))
        for start in range(0, len(flat), _CHUNK_BYTES):
            yield flat[start:start + _CHUNK_BYTES]
        return
    rows = max(1, _CHUNK_BYTES // max(1, arr[0].nbytes))
    for start in range(0, arr.shape[0], rows):
        piece = _little_endian(np.ascontiguousarray(arr[start:start + rows]))
        yield memoryview(piece.reshape(-1).view(np.uint8))


def _crc32(arr: np.ndarray) -> str:
    crc = 0
    for piece in _pieces(arr):
        crc = zlib.crc32(piece, crc)
    return f"{crc:08x}"


def _canonical(header: dict) -> bytes:
    """The header as canonical JSON, without its own checksum: what ``header_crc32`` covers."""
    metadata = {key: value for key, value in header.get("__metadata__", {}).items()
                if key != "header_crc32"}
    return json.dumps(dict(header, __metadata__=metadata), sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True).encode("ascii")


class _Plan:
    """A checkpoint ready to write: its header bytes and its arrays in file order."""

    def __init__(self, header_bytes: bytes, arrays: List[np.ndarray]) -> None:
        self.header_bytes = header_bytes
        self.arrays = arrays

    def write(self, f: BinaryIO) -> None:
        f.write(self.header_bytes)
        for arr in self.arrays:
            for piece in _pieces(arr):
                f.write(piece)


def _plan(obj: Any) -> _Plan:
    """Encode ``obj``, lay its arrays out (largest items first, so every array is aligned) and
    build the header with the checksums (a first pass over the arrays, without copying)."""
    encoder = _Encoder()
    try:
        tree = encoder.encode(obj, [])
        tree_json = json.dumps(tree, separators=(",", ":"))
    except RecursionError:
        raise CheckpointError("save: the object is nested too deeply to save (a recursion "
                              f"limit was reached; a checkpoint holds at most {MAX_NESTING} "
                              "levels)") from None
    except ValueError as e:   # ints past this process's sys.get_int_max_str_digits
        raise CheckpointError(f"save: cannot write the checkpoint's tree ({e})") from None
    names = sorted(encoder.arrays, key=lambda n: (-encoder.arrays[n].dtype.itemsize, n))
    header: Dict[str, Any] = {}
    checksums = {}
    offset = 0
    for name in names:
        arr = encoder.arrays[name]
        header[name] = {"dtype": _DTYPE_CODES[arr.dtype.name], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        checksums[name] = _crc32(arr)
    header["__metadata__"] = {"format": FORMAT_NAME, "version": str(FORMAT_VERSION),
                              "tree": tree_json,
                              "checksums": json.dumps(checksums, separators=(",", ":"))}
    header["__metadata__"]["header_crc32"] = f"{zlib.crc32(_canonical(header)):08x}"
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)   # pad to 8 bytes, as safetensors does
    if len(text) > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"save: the checkpoint's header (the tensor table and the tree of plain values) "
            f"would take {len(text)} bytes, more than the {MAX_HEADER_BYTES} a checkpoint may "
            "have (load refuses longer ones unread); store long lists of numbers as numpy "
            "arrays, or split the state over several files")
    return _Plan(struct.pack("<Q", len(text)) + text, [encoder.arrays[n] for n in names])


# -- loading -------------------------------------------------------------------------------------

def load(path: PathOrFile, device: Optional[str] = None, *, verify: bool = True,
         mmap: bool = True, map_location=None) -> Any:
    """Load a checkpoint written by ``save``: tensors come back as dg tensors (on the CPU, or
    on ``device``), numpy arrays as numpy arrays, the rest as saved (mappings as dicts).

    ``map_location`` is PyTorch's name for ``device`` ("cpu", "cuda", "cuda:0" or a
    ``dg.device``); tensors saved from the GPU come back on the CPU unless one is given (a
    difference from ``torch.load``, which restores the saving device).

    ``verify=False`` skips the tensors' checksums (the header's is always checked).
    ``mmap=True`` maps the file copy-on-write instead of reading it (see the module
    docstring); file objects, and files that cannot be mapped, are read.

    ``path`` may also be a binary file object. Raises ``CheckpointError`` (naming the file) if
    it is corrupt, truncated, not a safetensors file, or from a newer format version. A
    plain safetensors file (one PyTorch's ``safetensors.torch.save_file`` wrote) loads as a
    dict from tensor name to tensor (see the module docstring).
    """
    device = _load_device(device, map_location, "load")
    if hasattr(path, "read"):
        where = str(getattr(path, "name", "<file object>"))
        layout = _read_layout(path.read, where, None)
        arrays = _read_arrays(path, layout, where, expect_end=True)
        return _finish_load(layout, arrays, where, device, verify)
    where = os.fspath(path)
    try:
        f = open_regular(where)
    except NotRegularFileError as e:
        raise CheckpointError(f"{where}: not a duograph checkpoint: it is {e.kind}, not a "
                              "regular file (refused without reading it)") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        layout = _read_layout(f.read, where, size)
        mapped = None
        if mmap:
            try:
                mapped = mmap_module.mmap(f.fileno(), 0, access=mmap_module.ACCESS_COPY)
            except (OSError, ValueError):   # not a regular file (a pipe, /proc, ...)
                mapped = None
        if mapped is not None:
            arrays = _views(mapped, layout, copy=False)
        else:
            arrays = _read_arrays(f, layout, where, expect_end=False)
    return _finish_load(layout, arrays, where, device, verify)


def from_bytes(data: bytes, where: str = "<bytes>", device: Optional[str] = None, *,
               verify: bool = True, map_location=None) -> Any:
    """The object stored in checkpoint bytes ``data``; ``where`` names them in errors
    (``device`` / ``map_location`` as ``load``)."""
    device = _load_device(device, map_location, "from_bytes")
    data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    layout = _read_layout(io.BytesIO(data).read, where, len(data))
    return _finish_load(layout, _views(data, layout, copy=True), where, device, verify)


def _load_device(device, map_location, fn: str) -> Optional[str]:
    """The device tensors are loaded to: ``device`` or ``map_location`` (one of them), as
    "cpu" or "cuda"."""
    if map_location is not None:
        if device is not None:
            raise TypeError(f"{fn}: pass device= or map_location=, not both")
        device = map_location
    if device is None:
        return None
    if not isinstance(device, str):
        raise TypeError(f"{fn}: map_location must be a device such as 'cpu' or 'cuda', found "
                        f"{type(device).__name__} (mappings and functions are not supported)")
    kind = str(device).split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"{fn}: unknown device {device!r}: expected 'cpu' or 'cuda'")
    return kind


class _Entry:
    """One tensor of the file: its name, little-endian dtype, shape and byte range (relative
    to the start of the data)."""
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: np.dtype, shape: Tuple[int, ...], begin: int,
                 end: int) -> None:
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


class _Layout:
    """What the header says: where the data starts, the tensors in file order, the tree, and
    the tensors' checksums (None for files written before checksums)."""

    def __init__(self, data_start: int, entries: List[_Entry], tree: Any,
                 checksums: Optional[Dict[str, str]]) -> None:
        self.data_start = data_start
        self.entries = entries
        self.tree = tree
        self.checksums = checksums


def _read_layout(read: Callable[[int], bytes], where: str, size: Optional[int]) -> _Layout:
    """Read and check the safetensors header by hand (clear messages for truncated, corrupt or
    foreign files; the header's checksum first, so a flipped bit is called corruption), and
    return the layout. ``size`` is the file's length when known."""
    not_ours = f"{where}: not a duograph checkpoint"
    first = read(8)
    if len(first) < 8:
        raise CheckpointError(f"{not_ours}: {len(first)} bytes is too short for a safetensors "
                              "header (truncated?)")
    header_size = struct.unpack("<Q", first)[0]
    if header_size > MAX_HEADER_BYTES:
        raise CheckpointError(f"{not_ours}: the first 8 bytes give a header of {header_size} "
                              f"bytes, more than the {MAX_HEADER_BYTES} a duograph checkpoint "
                              "may have (refused without reading it)")
    if size is not None and 8 + header_size > size:
        raise CheckpointError(f"{where}: truncated: its header needs {8 + header_size} bytes "
                              f"but the file has {size}")
    text = read(header_size)
    if len(text) < header_size:
        raise CheckpointError(f"{where}: truncated: its header needs {8 + header_size} bytes "
                              f"but the file has {8 + len(text)}")
    try:
        header = json.loads(bytes(text).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"{not_ours}: its header is not valid JSON (corrupt, or not a "
                              "safetensors file)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{not_ours}: its header is not a JSON object")
    metadata = header.get("__metadata__")
    stored_crc = metadata.get("header_crc32") if isinstance(metadata, dict) else None
    if stored_crc is not None and stored_crc != f"{zlib.crc32(_canonical(header)):08x}":
        raise CheckpointError(f"{where}: corrupt: the header fails its checksum (CRC-32); the "
                              "file was damaged after it was written")
    entries = _entries(header, where)
    data_length = entries[-1].end if entries else 0
    if size is not None and 8 + header_size + data_length != size:
        state = "truncated" if 8 + header_size + data_length > size else "corrupt"
        raise CheckpointError(f"{where}: {state}: the header describes "
                              f"{8 + header_size + data_length} bytes but the file has {size}")
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
        if metadata is not None and not (isinstance(metadata, dict) and all(
                isinstance(v, str) for v in metadata.values())):
            raise CheckpointError(f"{where}: corrupt header: __metadata__ must map strings to "
                                  "strings")
        return _Layout(8 + header_size, entries, _plain_tree(entries), None)
    version = metadata.get("version")
    if (not isinstance(version, str) or not version.isascii() or not version.isdigit()
            or len(version) > 9 or int(version) < 1):
        raise CheckpointError(f"{where}: corrupt metadata: format version {version!r:.40}")
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(f"{where}: written in checkpoint format version {version}, newer "
                              f"than this duograph reads ({FORMAT_VERSION}); upgrade duograph")
    try:
        tree = json.loads(metadata.get("tree", ""))
    except (ValueError, TypeError, RecursionError) as e:
        raise CheckpointError(f"{where}: corrupt metadata: the tree is not valid JSON "
                              f"({type(e).__name__}: {str(e):.100})") from None
    checksums = None
    if int(version) >= 2 or "checksums" in metadata:
        checksums = _checksums(metadata, entries, where)
    return _Layout(8 + header_size, entries, tree, checksums)


def _plain_tree(entries: List[_Entry]) -> dict:
    """The tree of a plain safetensors file: a dict from tensor name to tensor, in name
    order (numpy arrays for dtypes a dg tensor cannot hold)."""
    def leaf(entry):
        kind = "tensor" if entry.dtype.name in dtypes.DTYPE_NAMES else "ndarray"
        return {"type": kind, "name": entry.name}
    return {"type": "dict", "items": [[e.name, leaf(e)]
                                      for e in sorted(entries, key=lambda e: e.name)]}


def _entries(header: dict, where: str) -> List[_Entry]:
    """The header's tensor table, checked as safetensors does: known dtypes, sizes that match
    the shapes, and byte ranges that tile the data exactly (sorted by offset)."""
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        info = info if isinstance(info, dict) else {}
        offsets, shape, code = info.get("data_offsets"), info.get("shape"), info.get("dtype")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(o) is int and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            raise CheckpointError(f"{where}: corrupt header: tensor {name!r:.80} has no valid "
                                  "data_offsets")
        if code not in _SAFETENSORS_DTYPES:
            raise CheckpointError(f"{where}: corrupt header: tensor {name!r:.80} has dtype "
                                  f"{code!r:.20}; a duograph checkpoint holds "
                                  f"{', '.join(_SAFETENSORS_DTYPES)}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise CheckpointError(f"{where}: corrupt header: tensor {name!r:.80} has no valid "
                                  "shape")
        dtype = np.dtype(_SAFETENSORS_DTYPES[code]).newbyteorder("<")
        count = 1
        for d in shape:
            count *= d
        if count * dtype.itemsize != offsets[1] - offsets[0]:
            raise CheckpointError(f"{where}: corrupt header: tensor {name!r:.80} of shape "
                                  f"{shape} and dtype {code} needs {count * dtype.itemsize} "
                                  f"bytes, but its data_offsets span {offsets[1] - offsets[0]}")
        entries.append(_Entry(name, dtype, tuple(shape), offsets[0], offsets[1]))
    entries.sort(key=lambda e: (e.begin, e.end))
    position = 0
    for entry in entries:
        if entry.begin != position:
            raise CheckpointError(f"{where}: corrupt header: tensor {entry.name!r:.80} starts "
                                  f"at byte {entry.begin} of the data, expected {position} "
                                  "(tensors overlap or leave a gap)")
        position = entry.end
    return entries


def _checksums(metadata: dict, entries: List[_Entry], where: str) -> Dict[str, str]:
    if not isinstance(metadata.get("header_crc32"), str):
        raise CheckpointError(f"{where}: corrupt metadata: the header's checksum is missing")
    try:
        checksums = json.loads(metadata.get("checksums", ""))
    except (ValueError, TypeError, RecursionError):
        checksums = None
    names = {entry.name for entry in entries}
    if (not isinstance(checksums, dict) or set(checksums) != names
            or not all(isinstance(c, str) for c in checksums.values())):
        raise CheckpointError(f"{where}: corrupt metadata: the tensors' checksums are missing "
                              "or do not match the tensor table")
    return checksums


def _views(buffer, layout: _Layout, copy: bool) -> Dict[str, np.ndarray]:
    """The tensors as arrays over ``buffer`` (a memory map or bytes); ``copy`` copies them out
    (bytes are read-only). Misaligned data (possible in foreign files) is copied too."""
    arrays = {}
    for entry in layout.entries:
        start = layout.data_start + entry.begin
        if entry.end == entry.begin:
            arr = np.empty(entry.shape, entry.dtype)
        else:
            arr = np.frombuffer(buffer, entry.dtype, (entry.end - entry.begin)
                                // entry.dtype.itemsize, start).reshape(entry.shape)
            if copy or start % entry.dtype.itemsize:
                arr = arr.copy()
        arrays[entry.name] = arr
    return arrays


def _read_arrays(f: BinaryIO, layout: _Layout, where: str,
                 expect_end: bool) -> Dict[str, np.ndarray]:
    """Read the tensors one after the other from ``f`` (positioned after the header) into
    fresh arrays; ``expect_end`` checks that nothing follows (when the size was unknown)."""
    arrays = {}
    for entry in layout.entries:
        arr = np.empty(entry.shape, entry.dtype)
        view = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")
        filled = 0
        while filled < len(view):
            if hasattr(f, "readinto"):
                n = f.readinto(view[filled:])
            else:
                chunk = f.read(len(view) - filled)
                n = len(chunk)
                view[filled:filled + n] = chunk
            if not n:
                raise CheckpointError(f"{where}: truncated: the file ends inside tensor "
                                      f"{entry.name!r:.80}")
            filled += n
        arrays[entry.name] = arr
    if expect_end and f.read(1):
        raise CheckpointError(f"{where}: corrupt: bytes follow the data the header describes")
    return arrays


def _verify(layout: _Layout, arrays: Dict[str, np.ndarray], where: str) -> None:
    for entry in layout.entries:
        arr = arrays[entry.name]
        crc = f"{zlib.crc32(arr.reshape(-1).view(np.uint8)) if arr.size else 0:08x}"
        if crc != layout.checksums[entry.name]:
            raise CheckpointError(f"{where}: corrupt: tensor {entry.name!r:.80} fails its "
                                  f"checksum (CRC-32 of its bytes {crc}, the file says "
                                  f"{layout.checksums[entry.name]!r:.20}); the file was damaged "
                                  "after it was written")


def _finish_load(layout: _Layout, arrays: Dict[str, np.ndarray], where: str,
                 device: Optional[str], verify: bool) -> Any:
    if verify and layout.checksums is not None:
        _verify(layout, arrays, where)
    if sys.byteorder == "big":
        arrays = {name: arr.astype(arr.dtype.newbyteorder("=")) for name, arr in arrays.items()}
    decoder = _Decoder(arrays, where, device)
    try:
        obj = decoder.decode(layout.tree, "checkpoint")
    except RecursionError:
        raise CheckpointError(f"{where}: the checkpoint's tree is nested too deeply") from None
    unused = sorted(set(arrays) - decoder.used)
    if unused:
        raise CheckpointError(f"{where}: the file holds tensors the checkpoint's tree does not "
                              f"mention ({', '.join(map(repr, unused[:5]))}); it is corrupt")
    return obj


class _Decoder:
    """Rebuilds the saved object from the tree, checking every node."""

    def __init__(self, arrays: Dict[str, np.ndarray], where: str, device: Optional[str]):
        self.arrays = arrays
        self.where = where
        self.device = device
        self.used: set = set()
        self._by_name: Dict[tuple, Any] = {}   # (type, name) -> object, for shared tensors

    def _fail(self, at: str, message: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: corrupt tree at {at}: {message}")

    def decode(self, node: Any, at: str, depth: int = 0) -> Any:
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise self._fail(at, f"expected a node object, found {node!r:.80}")
        kind = node["type"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            value = node.get("value")
            expected = {"bool": bool, "int": int, "str": str}[kind]
            if type(value) is not expected:
                raise self._fail(at, f"a {kind} leaf holds {value!r:.80}")
            return value
        if kind == "float":
            value = node.get("value")
            try:
                return float(value)
            except (TypeError, ValueError):
                raise self._fail(at, f"a float leaf holds {value!r:.80}") from None
        if kind in ("dict", "list", "tuple") and depth >= MAX_NESTING:
            raise self._fail(at[:80] + "...", f"containers nested more than {MAX_NESTING} "
                             "levels deep")
        if kind == "dict":
            items = node.get("items")
            if not isinstance(items, list):
                raise self._fail(at, "a dict node without an items list")
            result = {}
            for item in items:
                if (not isinstance(item, list) or len(item) != 2
                        or not isinstance(item[0], (str, int))):
                    raise self._fail(at, f"a dict item must be [key, node], found {item!r:.80}")
                result[item[0]] = self.decode(item[1], f"{at}[{item[0]!r:.40}]", depth + 1)
            return result
        if kind in ("list", "tuple"):
            items = node.get("items")
            if not isinstance(items, list):
                raise self._fail(at, f"a {kind} node without an items list")
            values = [self.decode(value, f"{at}[{i}]", depth + 1)
                      for i, value in enumerate(items)]
            return tuple(values) if kind == "tuple" else values
        if kind in _ARRAY_TYPES:
            return self._array(node, kind, at)
        raise self._fail(at, f"unknown node type {kind!r} (duograph checkpoints hold only "
                             "containers, arrays and plain values)")

    def _array(self, node: dict, kind: str, at: str) -> Any:
        name = node.get("name")
        if not isinstance(name, str) or name not in self.arrays:
            raise self._fail(at, f"it names tensor {name!r:.80}, which the file does not hold")
        if (kind, name) in self._by_name:
            return self._by_name[(kind, name)]
        self.used.add(name)
        arr = self.arrays[name]
        if kind == "numpy_scalar":
            value = arr[()] if arr.ndim == 0 else None
            if value is None:
                raise self._fail(at, f"a numpy scalar stored with shape {arr.shape}")
            return value
        if kind == "ndarray":
            result = arr
        else:
            if arr.dtype.name not in dtypes.DTYPE_NAMES:
                raise self._fail(at, f"a tensor of dtype {arr.dtype}, which duograph tensors "
                                     "cannot hold")
            result = Tensor._wrap(arr)
            if self.device is not None and self.device != "cpu":
                result = result.to(device=self.device)
            if node.get("requires_grad") is True:
                result.requires_grad_(True)
        self._by_name[(kind, name)] = result
        return result
