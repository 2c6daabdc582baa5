"""duograph.io: checkpoints as safetensors files, never pickle.

    dg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3},
            "ckpt.safetensors")
    ckpt = dg.load("ckpt.safetensors")

``save`` stores nested containers (dicts, lists, tuples) whose leaves are dg tensors, numpy
arrays and numpy scalars, ints, floats, bools, strings and None. Every array goes into a
safetensors file (dtype and shape kept: bool, uint8, int32, int64, float16, float32, float64,
and for numpy arrays also the other integer widths); everything else is described by JSON in
the safetensors header's ``__metadata__``::

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

Writes are atomic: the bytes go to a temporary file beside the target, are flushed and
fsync'ed, and replace the target with ``os.replace`` (then the directory is fsync'ed), so a
crash mid-save leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import os
import secrets
import struct
from typing import Any, BinaryIO, Dict, List, Optional, Union

import numpy as np

from .eager import Tensor
from .graphlib import dtypes
from .graphlib.errors import DuographError

__all__ = ["save", "load", "to_bytes", "from_bytes", "CheckpointError", "FORMAT_NAME",
           "FORMAT_VERSION"]

FORMAT_NAME = "duograph.checkpoint"
FORMAT_VERSION = 1

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO]

# numpy dtypes a numpy-array leaf may have (all of them safetensors dtypes); tensor leaves
# are limited to duograph's own dtypes.
_ARRAY_DTYPES = frozenset({"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16",
                           "int32", "int64", "float16", "float32", "float64"})
_ARRAY_TYPES = ("tensor", "ndarray", "numpy_scalar")
# safetensors refuses headers larger than this; a larger length means "not safetensors".
_MAX_HEADER_BYTES = 100_000_000


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
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        # (not np.ascontiguousarray: it turns 0-d arrays into 1-d ones)
        self.arrays[name] = arr if arr.flags.c_contiguous else arr.copy(order="C")
        if original is not None:
            self._names_by_id[id(original)] = name
        return {"type": kind, "name": name}


def save(obj: Any, path: PathOrFile) -> None:
    """Save ``obj`` (nested dicts/lists/tuples of tensors, arrays and plain values) to ``path``
    as a safetensors checkpoint, atomically (see the module docstring).

    ``path`` may also be a binary file object (written in one go, without the atomic rename).
    Raises ``CheckpointError`` if ``obj`` holds anything a checkpoint cannot store.
    """
    data = to_bytes(obj)
    if hasattr(path, "write"):
        path.write(data)
        return
    _atomic_write(os.fspath(path), data)


def to_bytes(obj: Any) -> bytes:
    """The bytes of the checkpoint ``save`` would write for ``obj``."""
    encoder = _Encoder()
    tree = encoder.encode(obj, [])
    metadata = {"format": FORMAT_NAME, "version": str(FORMAT_VERSION),
                "tree": json.dumps(tree, separators=(",", ":"))}
    return _safetensors_numpy().save(encoder.arrays, metadata=metadata)


def _safetensors_numpy():
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError("duograph.save and duograph.load need the safetensors package: "
                          "pip install safetensors") from None
    return safetensors.numpy


def _atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, and rename it over
    ``path``; on any failure the temporary file is removed and ``path`` is untouched."""
    target = os.path.realpath(path)   # write through a symlink, as open() would
    directory = os.path.dirname(target) or "."
    while True:
        temporary = os.path.join(directory,
                                 f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make the rename durable where the platform allows opening directories (POSIX)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- loading -------------------------------------------------------------------------------------

def load(path: PathOrFile, device: Optional[str] = None) -> Any:
    """Load a checkpoint written by ``save``: tensors come back as dg tensors (on the CPU, or
    on ``device``), numpy arrays as numpy arrays, the rest as saved (mappings as dicts).

    ``path`` may also be a binary file object. Raises ``CheckpointError`` (naming the file) if
    it is corrupt, truncated, not a duograph checkpoint, or from a newer format version.
    """
    if hasattr(path, "read"):
        where = str(getattr(path, "name", "<file object>"))
        data = path.read()
    else:
        where = os.fspath(path)
        with open(where, "rb") as f:
            data = f.read()
    return from_bytes(data, where, device)


def from_bytes(data: bytes, where: str = "<bytes>", device: Optional[str] = None) -> Any:
    """The object stored in checkpoint bytes ``data``; ``where`` names them in errors."""
    data = bytes(data)
    tree = _read_tree(data, where)
    try:
        arrays = _safetensors_numpy().load(data)
    except Exception as e:   # safetensors raises its own error types; report them as ours
        raise CheckpointError(f"{where}: the tensor data is corrupt ({type(e).__name__}: {e})"
                              ) from None
    decoder = _Decoder(arrays, where, device)
    try:
        obj = decoder.decode(tree, "checkpoint")
    except RecursionError:
        raise CheckpointError(f"{where}: the checkpoint's tree is nested too deeply") from None
    unused = sorted(set(arrays) - decoder.used)
    if unused:
        raise CheckpointError(f"{where}: the file holds tensors the checkpoint's tree does not "
                              f"mention ({', '.join(map(repr, unused[:5]))}); it is corrupt")
    return obj


def _read_tree(data: bytes, where: str) -> dict:
    """Check the safetensors header by hand (clear messages for truncated or foreign files)
    and return the checkpoint's tree from its metadata."""
    not_ours = f"{where}: not a duograph checkpoint"
    if len(data) < 8:
        raise CheckpointError(f"{not_ours}: {len(data)} bytes is too short for a safetensors "
                              "header (truncated?)")
    header_size = struct.unpack("<Q", data[:8])[0]
    if header_size > _MAX_HEADER_BYTES:
        raise CheckpointError(f"{not_ours}: the first 8 bytes give a header of {header_size} "
                              "bytes, which no safetensors file has")
    if 8 + header_size > len(data):
        raise CheckpointError(f"{where}: truncated: its header needs {8 + header_size} bytes "
                              f"but the file has {len(data)}")
    try:
        header = json.loads(data[8:8 + header_size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"{not_ours}: its header is not valid JSON (corrupt, or not a "
                              "safetensors file)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{not_ours}: its header is not a JSON object")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)):
            raise CheckpointError(f"{where}: corrupt header: tensor {name!r} has no valid "
                                  "data_offsets")
        end = max(end, offsets[1])
    if 8 + header_size + end != len(data):
        state = "truncated" if 8 + header_size + end > len(data) else "corrupt"
        raise CheckpointError(f"{where}: {state}: the header describes "
                              f"{8 + header_size + end} bytes but the file has {len(data)}")
    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{not_ours}: it is a safetensors file without duograph's "
                              "metadata (read plain safetensors files with "
                              "safetensors.numpy.load_file)")
    version = metadata.get("version")
    if not isinstance(version, str) or not version.isdigit():
        raise CheckpointError(f"{where}: corrupt metadata: format version {version!r}")
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(f"{where}: written in checkpoint format version {version}, newer "
                              f"than this duograph reads ({FORMAT_VERSION}); upgrade duograph")
    try:
        tree = json.loads(metadata.get("tree", ""))
    except (ValueError, TypeError, RecursionError):
        raise CheckpointError(f"{where}: corrupt metadata: the tree is not valid JSON") from None
    return tree


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

    def decode(self, node: Any, at: str) -> Any:
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
        if kind == "dict":
            items = node.get("items")
            if not isinstance(items, list):
                raise self._fail(at, "a dict node without an items list")
            result = {}
            for item in items:
                if (not isinstance(item, list) or len(item) != 2
                        or not isinstance(item[0], (str, int))):
                    raise self._fail(at, f"a dict item must be [key, node], found {item!r:.80}")
                result[item[0]] = self.decode(item[1], f"{at}[{item[0]!r}]")
            return result
        if kind in ("list", "tuple"):
            items = node.get("items")
            if not isinstance(items, list):
                raise self._fail(at, f"a {kind} node without an items list")
            values = [self.decode(value, f"{at}[{i}]") for i, value in enumerate(items)]
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
            result = Tensor(arr)
            if self.device is not None and self.device != "cpu":
                result = result.to(device=self.device)
            if node.get("requires_grad") is True:
                result.requires_grad_(True)
        self._by_name[(kind, name)] = result
        return result
