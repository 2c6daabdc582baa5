"""Lossless JSON for graphs: ``graph.to_json()`` / ``Graph.from_json()``, and
``save_graph`` / ``load_graph`` (JSON plus arrays in one safetensors file).

The schema is versioned (``FORMAT``, ``VERSION``). Everything in a file is data: ops are
looked up by name in the registry, attributes are rebuilt from tagged JSON values and checked
against the op's attribute schema (``attrs.Attrs``, as when a node is built; in regions too),
arrays are raw bytes with a dtype and a shape. Nothing is unpickled, imported or evaluated,
and a malformed, truncated or newer file raises ``GraphFormatError`` saying what is wrong
where: "graph 'main', node 3 (leaky_relu): attribute negative_slope must be a number (bool,
int or float), found str '1+1'".

A document::

    {"format": "duograph.graph", "version": 1,
     "graph": {"name": ..., "inputs": [{"name", "type"}], "state": [{"name", "type",
               "init": <array>}], "nodes": [{"op", "inputs": [value ids], "attrs",
               "outputs": [types], "names", "source"}], "outputs": [ids],
               "updates": [[state id, value id]], "random_streams": n,
               "gradient_blockers": [...]}}

Values are numbered in definition order (inputs, state, then node outputs). A type is
``{"shape": [dims], "dtype": name}`` with symbolic dims in the dims' own JSON form. Tagged
attribute values: JSON numbers, strings, booleans and null stand for themselves (ints of
any size); ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"float": "nan"|"inf"|"-inf"}``,
``{"dim": ...}`` (a symbolic dim), ``{"array": <array>}`` (a ``ConstArray``),
``{"region": kind, "graph": {...}}`` (a sub-graph). An array is ``{"dtype", "shape",
"data": base64}`` inline, or ``{"dtype", "shape", "ref": key}`` naming a tensor stored
beside the JSON (``save_graph`` keeps them in the safetensors file).
"""
from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import os
from typing import Dict, List, Optional

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as _st_load, save as _st_save

from . import dtypes, types
from .attrs import AttrTypeError, AttrValueError
from .errors import DuographError
from .files import MAX_HEADER_BYTES, NotRegularFileError, atomic_write, open_regular
from .ir import ConstArray, Graph, Node, Region, Value, install_service
from .registry import REGISTRY
from .source import SourceLocation
from .types import TensorType

FORMAT = "duograph.graph"
VERSION = 1
# a file nested deeper than this (regions in regions...) is refused, not recursed into
MAX_DEPTH = 64

# Region kinds a file may name: the class is looked up here, never imported by name.
REGION_KINDS: Dict[str, type] = {"region": Region}


class GraphFormatError(DuographError, ValueError):
    """A graph file or document that cannot be read: malformed, truncated, or newer."""


def register_region_kind(name: str, cls: type) -> None:
    """Let files name ``cls`` (a ``Region`` subclass) as ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Region)):
        raise TypeError(f"register_region_kind: {cls!r} is not a Region subclass")
    REGION_KINDS[name] = cls


def _kind_of(region: Region) -> str:
    for name, cls in REGION_KINDS.items():
        if type(region) is cls:
            return name
    raise GraphFormatError(f"cannot serialise a region of kind {type(region).__name__}: "
                           "register it with register_region_kind")


# -- dims --------------------------------------------------------------------------------------
def _dim_to_json(d):
    enc = getattr(types, "dim_to_json", None)
    if enc is not None:
        return enc(d)
    if isinstance(d, int):
        return d
    return {"sym": str(d)}


def _dim_from_json(obj, where: str):
    dec = getattr(types, "dim_from_json", None)
    if dec is not None:
        try:
            return dec(obj)
        except (TypeError, ValueError, KeyError) as e:
            raise GraphFormatError(f"{where}: bad dim {obj!r}: {e}") from None
    if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0:
        return obj
    if isinstance(obj, dict) and set(obj) == {"sym"} and isinstance(obj["sym"], str) \
            and obj["sym"]:
        return obj["sym"]
    raise GraphFormatError(f"{where}: bad dim {obj!r}")


def _type_to_json(t: TensorType) -> dict:
    return {"shape": [_dim_to_json(d) for d in t.shape], "dtype": t.dtype}


def _type_from_json(obj, where: str) -> TensorType:
    if not isinstance(obj, dict) or set(obj) != {"shape", "dtype"} \
            or not isinstance(obj["shape"], list):
        raise GraphFormatError(f"{where}: expected a type {{shape, dtype}}, found {obj!r:.80}")
    if obj["dtype"] not in dtypes.DTYPE_NAMES:
        raise GraphFormatError(f"{where}: unknown dtype {obj['dtype']!r}")
    shape = tuple(_dim_from_json(d, where) for d in obj["shape"])
    return TensorType(shape, obj["dtype"])


# -- arrays ------------------------------------------------------------------------------------
class _Arrays:
    """Where arrays go: inline base64, or a dict of named tensors (safetensors)."""

    def __init__(self, store: Optional[Dict[str, np.ndarray]] = None):
        self.store = store
        self.count = itertools.count()

    def encode(self, arr: np.ndarray) -> dict:
        arr = np.asarray(arr, order="C")      # (ascontiguousarray makes 0-d arrays 1-d)
        head = {"dtype": dtypes.as_dtype(arr.dtype), "shape": list(arr.shape)}
        if self.store is None:
            return dict(head, data=base64.b64encode(arr.tobytes()).decode("ascii"))
        key = f"t{next(self.count)}"
        # safetensors has complex64 but no complex128: its float64 pairs, a last dim of 2
        self.store[key] = arr.view(np.float64).reshape(arr.shape + (2,)) if (
            arr.dtype == np.complex128) else arr
        return dict(head, ref=key)

    def decode(self, obj, where: str) -> np.ndarray:
        if not isinstance(obj, dict) or "dtype" not in obj or "shape" not in obj:
            raise GraphFormatError(f"{where}: expected an array, found {obj!r:.80}")
        dt = obj["dtype"]
        if dt not in dtypes.DTYPE_NAMES:
            raise GraphFormatError(f"{where}: unknown array dtype {dt!r}")
        shape = obj["shape"]
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise GraphFormatError(f"{where}: bad array shape {shape!r:.80}")
        if "data" in obj:
            try:
                raw = base64.b64decode(obj["data"], validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise GraphFormatError(f"{where}: array data is not base64") from None
            n = math.prod(shape) * np.dtype(dt).itemsize
            if len(raw) != n:
                raise GraphFormatError(f"{where}: array of shape {shape} {dt} needs {n} "
                                       f"bytes, found {len(raw)}")
            return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
        ref = obj.get("ref")
        if self.store is None or not isinstance(ref, str) or ref not in self.store:
            raise GraphFormatError(f"{where}: array {ref!r} is missing from the file")
        arr = np.asarray(self.store[ref])
        if dt == "complex128" and arr.dtype == np.float64 and list(arr.shape) == shape + [2]:
            arr = np.ascontiguousarray(arr).view(np.complex128).reshape(shape)
        if dtypes.as_dtype(arr.dtype) != dt or list(arr.shape) != shape:
            raise GraphFormatError(f"{where}: tensor {ref!r} is {arr.dtype}{list(arr.shape)}, "
                                   f"the graph expects {dt}{shape}")
        return arr


# -- attribute values --------------------------------------------------------------------------
def _attr_to_json(v, arrays: _Arrays, depth: int):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, (complex, np.complexfloating)):     # a complex constant's value
        return {"complex": [repr(float(v.real)), repr(float(v.imag))]}
    if isinstance(v, tuple):
        return {"tuple": [_attr_to_json(x, arrays, depth) for x in v]}
    if isinstance(v, list):
        return {"list": [_attr_to_json(x, arrays, depth) for x in v]}
    if isinstance(v, ConstArray):
        return {"array": arrays.encode(v.array)}
    if isinstance(v, Region):
        return {"region": _kind_of(v), "graph": _graph_to_json(v.graph, arrays, depth + 1)}
    if isinstance(v, (np.integer, np.bool_)):
        return _attr_to_json(v.item(), arrays, depth)
    if isinstance(v, np.floating):
        return _attr_to_json(float(v), arrays, depth)
    if type(v).__module__.split(".")[0] == "sympy":      # a symbolic dim
        return {"dim": _dim_to_json(v)}
    raise GraphFormatError(f"cannot serialise attribute value {v!r} of type "
                           f"{type(v).__name__}")


def _attr_from_json(obj, arrays: _Arrays, where: str, depth: int):
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj
    if isinstance(obj, dict) and len(obj) == 1:
        (tag, val), = obj.items()
        if tag in ("tuple", "list") and isinstance(val, list):
            items = [_attr_from_json(x, arrays, where, depth) for x in val]
            return tuple(items) if tag == "tuple" else items
        if tag == "float" and val in ("nan", "inf", "-inf"):
            return float(val)
        if tag == "array":
            return ConstArray(arrays.decode(val, where))
        if tag == "complex" and isinstance(val, list) and len(val) == 2:
            try:
                return complex(float(val[0]), float(val[1]))
            except (TypeError, ValueError):
                raise GraphFormatError(f"{where}: bad complex value {val!r:.80}") from None
        if tag == "dim":
            return _dim_from_json(val, where)
    if isinstance(obj, dict) and set(obj) == {"region", "graph"}:
        cls = REGION_KINDS.get(obj["region"])
        if cls is None:
            raise GraphFormatError(f"{where}: unknown region kind {obj['region']!r} (known: "
                                   f"{sorted(REGION_KINDS)})")
        return cls(_graph_from_json(obj["graph"], arrays, depth + 1, where))
    raise GraphFormatError(f"{where}: bad attribute value {obj!r:.80}")


# -- graphs ------------------------------------------------------------------------------------
def _graph_to_json(graph: Graph, arrays: _Arrays, depth: int = 0) -> dict:
    if depth > MAX_DEPTH:
        raise GraphFormatError(f"regions nested deeper than {MAX_DEPTH} levels")
    ids: Dict[Value, int] = {}

    def ref(v: Value, what: str) -> int:
        try:
            return ids[v]
        except KeyError:
            raise GraphFormatError(f"graph {graph.name!r}: {what} {v!r} is not defined in the "
                                   "graph (verify it first)") from None

    inputs = []
    for v in graph.inputs:
        ids[v] = len(ids)
        inputs.append({"name": v.name, "type": _type_to_json(v.type)})
    state = []
    for v in graph.state:
        ids[v] = len(ids)
        init = graph.state_init.get(v)
        if init is None:                       # bound to a live tensor: its current data
            init = np.asarray(graph.bindings[v].array)
        state.append({"name": v.name, "type": _type_to_json(v.type),
                      "init": arrays.encode(np.asarray(init))})
    nodes = []
    for node in graph.nodes:
        entry = {"op": node.op.name, "inputs": [ref(x, "input") for x in node.inputs],
                 "attrs": {k: _attr_to_json(a, arrays, depth) for k, a in node.attrs.items()},
                 "outputs": [_type_to_json(o.type) for o in node.outputs]}
        names = [o.name for o in node.outputs]
        if any(n is not None for n in names):
            entry["names"] = names
        if node.source is not None:
            entry["source"] = [node.source.filename, node.source.lineno, node.source.function]
        nodes.append(entry)
        for o in node.outputs:
            ids[o] = len(ids)
    streams = next(graph._random_streams)
    graph._random_streams = itertools.count(streams)
    return {"name": graph.name, "inputs": inputs, "state": state, "nodes": nodes,
            "outputs": [ref(o, "output") for o in graph.outputs],
            "updates": [[ref(s, "state"), ref(v, "update")]
                        for s, v in graph.updates.values()],
            "random_streams": streams, "gradient_blockers": list(graph.gradient_blockers)}


def _expect(obj, key: str, kind, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise GraphFormatError(f"{where}: missing {key!r}")
    val = obj[key]
    if not isinstance(val, kind) or (kind is int and isinstance(val, bool)):
        raise GraphFormatError(f"{where}: {key!r} should be {getattr(kind, '__name__', kind)}, "
                               f"found {type(val).__name__}")
    return val


def _graph_from_json(obj, arrays: _Arrays, depth: int = 0, parent: str = "") -> Graph:
    """The graph of ``obj``; ``parent`` names the attribute holding it when it is a region
    (errors read "graph 'main', node 3 (cond), attribute 'then' > graph 'then', node 0")."""
    if depth > MAX_DEPTH:
        raise GraphFormatError(f"regions nested deeper than {MAX_DEPTH} levels")
    if not isinstance(obj, dict):
        raise GraphFormatError(f"{parent or 'document'}: expected a graph object, found "
                               f"{type(obj).__name__}")
    name = _expect(obj, "name", str, f"{parent} > graph" if parent else "graph")
    where = f"{parent} > graph {name!r}" if parent else f"graph {name!r}"
    g = Graph(name)
    values: List[Value] = []

    def get(k, what: str) -> Value:
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(values):
            raise GraphFormatError(f"{where}: {what} refers to value {k!r}, which is not "
                                   "defined before it")
        return values[k]

    for i, entry in enumerate(_expect(obj, "inputs", list, where)):
        at = f"{where}, input {i}"
        try:
            values.append(g.add_input(_expect(entry, "name", str, at),
                                      _type_from_json(_expect(entry, "type", dict, at), at)))
        except (ValueError, DuographError) as e:
            raise GraphFormatError(f"{at}: {e}") from None
    for i, entry in enumerate(_expect(obj, "state", list, where)):
        at = f"{where}, state {i}"
        t = _type_from_json(_expect(entry, "type", dict, at), at)
        init = arrays.decode(_expect(entry, "init", dict, at), at)
        if TensorType(init.shape, dtypes.as_dtype(init.dtype)) != t:
            raise GraphFormatError(f"{at}: initial value {init.dtype}{list(init.shape)} does "
                                   f"not match its type {t!r}")
        try:
            values.append(g.add_state(_expect(entry, "name", str, at), init))
        except (ValueError, DuographError) as e:
            raise GraphFormatError(f"{at}: {e}") from None
    for i, entry in enumerate(_expect(obj, "nodes", list, where)):
        at = f"{where}, node {i}"
        op_name = _expect(entry, "op", str, at)
        op = REGISTRY.get(op_name)
        if op is None:
            raise GraphFormatError(f"{at}: unknown op {op_name!r} (not registered in this "
                                   "version of duograph)")
        at = f"{at} ({op_name})"
        ins = [get(k, f"{at} input") for k in _expect(entry, "inputs", list, at)]
        attrs = {}
        for k, a in _expect(entry, "attrs", dict, at).items():
            attrs[k] = _attr_from_json(a, arrays, f"{at}, attribute {k!r}", depth)
        if op.attrs is not None:       # the schema the node was built with (attrs.Attrs)
            try:
                attrs = op.attrs.validate(op_name, attrs, where=at)
            except (AttrTypeError, AttrValueError) as e:
                raise GraphFormatError(str(e)) from None
        types = [_type_from_json(t, at) for t in _expect(entry, "outputs", list, at)]
        src = entry.get("source")
        source = None
        if src is not None:
            if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str)
                    and isinstance(src[1], int) and isinstance(src[2], str)):
                raise GraphFormatError(f"{at}: bad source location {src!r:.80}")
            source = SourceLocation(*src)
        node = Node(op, ins, attrs, (), source)
        node.outputs = tuple(Value(t, node, k, g) for k, t in enumerate(types))
        for o, n in zip(node.outputs, entry.get("names") or ()):
            if n is not None and not isinstance(n, str):
                raise GraphFormatError(f"{at}: bad output name {n!r:.40}")
            o.name = n
        g.append(node)
        values.extend(node.outputs)
    g.outputs = [get(k, f"{where} output") for k in _expect(obj, "outputs", list, where)]
    for pair in _expect(obj, "updates", list, where):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise GraphFormatError(f"{where}: bad update {pair!r:.80}")
        s, v = get(pair[0], "an update"), get(pair[1], "an update")
        if all(s is not x for x in g.state):
            raise GraphFormatError(f"{where}: an update targets {s!r}, which is not state")
        g.updates[s] = (s, v)
    streams = obj.get("random_streams", 0)
    if not isinstance(streams, int) or isinstance(streams, bool) or streams < 0:
        raise GraphFormatError(f"{where}: bad random_streams {streams!r:.40}")
    g._random_streams = itertools.count(streams)
    blockers = obj.get("gradient_blockers", [])
    if not isinstance(blockers, list) or not all(isinstance(b, str) for b in blockers):
        raise GraphFormatError(f"{where}: bad gradient_blockers")
    g.gradient_blockers = list(blockers)
    try:
        g.verify()
    except DuographError as e:
        raise GraphFormatError(f"{where}: the graph in the file is not valid IR:\n{e}") from None
    return g


def graph_to_document(graph: Graph, store: Optional[Dict[str, np.ndarray]] = None) -> dict:
    """The versioned JSON document of ``graph`` (arrays inline, or into ``store``)."""
    return {"format": FORMAT, "version": VERSION,
            "graph": _graph_to_json(graph, _Arrays(store))}


def graph_from_document(doc, store: Optional[Dict[str, np.ndarray]] = None) -> Graph:
    """Rebuild a Graph from a document made by ``graph_to_document``."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphFormatError(f"not a duograph graph document (expected format {FORMAT!r})")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise GraphFormatError(f"bad format version {version!r:.40}")
    if version > VERSION:
        raise GraphFormatError(f"the file has graph format version {version}; this duograph "
                               f"reads versions up to {VERSION}: upgrade duograph")
    if version < 1:
        raise GraphFormatError(f"bad format version {version}")
    try:
        return _graph_from_json(doc.get("graph"), _Arrays(store))
    except RecursionError:
        raise GraphFormatError("the document is nested too deeply") from None


def to_json(graph: Graph, indent: Optional[int] = None) -> str:
    """``graph`` as JSON text (arrays inline as base64)."""
    return json.dumps(graph_to_document(graph), indent=indent, allow_nan=False)


def from_json(text) -> Graph:
    """The Graph ``to_json`` wrote."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise GraphFormatError(f"not valid JSON: {e}") from None
    except RecursionError:
        raise GraphFormatError("the JSON is nested too deeply") from None
    return graph_from_document(doc)


_META_KEY = "duograph.graph"


def save_graph(graph: Graph, path) -> None:
    """Write ``graph`` to ``path``: one safetensors file holding the arrays (constants and
    state) as tensors and the JSON document in its metadata. Written atomically
    (``files.atomic_write``; a symlink at ``path`` is replaced, never followed): a crash
    never leaves half a file. A graph whose JSON would pass ``files.MAX_HEADER_BYTES`` is
    refused, as ``load_graph`` would refuse the file."""

    store: Dict[str, np.ndarray] = {}
    doc = graph_to_document(graph, store)
    data = _st_save(store, metadata={_META_KEY: json.dumps(doc, allow_nan=False)})
    header = int.from_bytes(data[:8], "little")
    if header > MAX_HEADER_BYTES:
        raise GraphFormatError(f"save_graph: the graph's JSON header would take {header} "
                               f"bytes, more than the {MAX_HEADER_BYTES} a graph file may "
                               "have (load_graph refuses longer ones unread)")
    atomic_write(os.fspath(path), lambda f: f.write(data))


def load_graph(path) -> Graph:
    """Read a graph ``save_graph`` wrote (verified; nothing in the file is executed).

    The work is bounded before it starts: only a regular file is opened (a FIFO or a device
    is refused at once), a header longer than ``files.MAX_HEADER_BYTES`` is refused from its
    length prefix, the data the header describes must fill the file exactly before the rest
    is read, JSON nested too deeply is a ``GraphFormatError``, and every node's attributes
    are checked against its op's schema."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            header = _safetensors_header(f, size, path)
            meta = header.get("__metadata__")
            meta = meta if isinstance(meta, dict) else {}
            text = meta.get(_META_KEY)
            if text is None:
                raise GraphFormatError(f"{path!r} is a safetensors file without a duograph "
                                       "graph")
            f.seek(0)
            raw = f.read()
    except NotRegularFileError as e:
        raise GraphFormatError(f"cannot read graph file {path!r}: it is {e.kind}, not a "
                               "regular file (refused without reading it)") from None
    except OSError as e:
        raise GraphFormatError(f"cannot read graph file {path!r}: {e}") from None
    try:
        store = _st_load(raw)
    except (SafetensorError, ValueError, OSError) as e:
        raise GraphFormatError(f"{path!r}: the tensors are unreadable: {e}") from None
    if not isinstance(text, str):
        raise GraphFormatError(f"{path!r}: the graph JSON is not a string")
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise GraphFormatError(f"{path!r}: the graph JSON is malformed: {e}") from None
    except RecursionError:
        raise GraphFormatError(f"{path!r}: the graph JSON is nested too deeply") from None
    return graph_from_document(doc, store)


def _safetensors_header(f, size: int, path) -> dict:
    """The header of the safetensors file ``f`` (``size`` bytes), with a clear error for
    anything that is not one (too short, header length past the end or past
    ``MAX_HEADER_BYTES``, header not a JSON object, tensors that do not fill the file)."""
    first = f.read(8)
    if len(first) < 8:
        raise GraphFormatError(f"{path!r} is not a graph file (only {len(first)} bytes)")
    n = int.from_bytes(first, "little")
    if n > MAX_HEADER_BYTES:
        raise GraphFormatError(f"{path!r} is not a graph file: its first 8 bytes give a header "
                               f"of {n} bytes, more than the {MAX_HEADER_BYTES} a graph file "
                               "may have (refused without reading it)")
    if n > size - 8:
        raise GraphFormatError(f"{path!r} is truncated: its header needs {n} bytes, the file "
                               f"has {size - 8}")
    try:
        header = json.loads(f.read(n))
    except (UnicodeDecodeError, ValueError):
        raise GraphFormatError(f"{path!r} is not a graph file (its header is not JSON)") \
            from None
    except RecursionError:
        raise GraphFormatError(f"{path!r} is not a graph file (its header is JSON nested too "
                               "deeply)") from None
    if not isinstance(header, dict):
        raise GraphFormatError(f"{path!r} is not a graph file (its header is not a JSON "
                               "object)")
    end = 0
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if name != "__metadata__" and isinstance(offsets, list) and len(offsets) == 2 \
                and all(type(o) is int for o in offsets):
            end = max(end, *offsets)
    if 8 + n + end != size:
        state = "truncated" if 8 + n + end > size else "corrupt"
        raise GraphFormatError(f"{path!r} is {state}: its header describes {8 + n + end} "
                               f"bytes, the file has {size}")
    return header


install_service("to_json", to_json)     # graph.to_json(), pickling
install_service("from_json", from_json)  # Graph.from_json
