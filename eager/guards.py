"""Guards of ``dg.compile``: Python decisions taken from tensor values (``bool(t)``,
``t.item()``, ``t.numpy()``, ``t.tolist()``, ``np.asarray(t)``), noted while ``compile``
records a function so that replays can check them; and the Python values the function can
read (globals, closure cells, defaults, attributes: ``GuardBuilder``), checked before a
replay, with the ``Change``s that explain a recompile."""
from __future__ import annotations

import dis
import enum
import functools
import operator
import os
import sys
import sysconfig
import types
from typing import Dict, List, NamedTuple, Optional

import numpy as np
from operator import is_ as _is

from ..graphlib.source import _PACKAGE_DIRS
from .decisions import _stack, note_attribute, note_decision, tracing  # noqa: F401
from .tensors import Tensor


def same_decision(kind: str, recorded, now) -> bool:
    """Whether a replay sees what the recording saw (NaN equals NaN)."""
    if kind == "data":
        now = np.asarray(now)
        if now.shape != recorded.shape:
            return False
        if now.dtype.kind in "fc":
            return bool(np.array_equal(now, recorded, equal_nan=True))
        return bool(np.array_equal(now, recorded))
    if recorded != recorded:        # NaN
        return now != now
    return now == recorded


class DecisionTracer:
    """Collects (tensor, kind, value, source, what) for every decision made while open."""

    def __init__(self):
        self.decisions = []
        self.attributes = {}        # (id(obj), name) -> (obj, name, value), first seen

    def note(self, tensor, kind, value, source=None, what=None):
        self.decisions.append((tensor, kind, value, source, what or f"{kind}()"))

    def note_attribute(self, obj, name: str, value) -> None:
        self.attributes.setdefault((id(obj), name), (obj, name, value))

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().remove(self)


# -- Python values a compiled function reads ---------------------------------------------------
#
# ``dg.compile`` specialises a function on everything Python decided while recording. Besides
# the decisions taken from tensor values (above), Python reads globals, closure cells, default
# arguments, attributes of modules and objects, and non-tensor arguments. ``GuardBuilder``
# walks the code the function can run (its code objects, recursively into the user functions,
# methods and module ``forward``s it reaches) and makes a guard of every such value: by type
# and value for numbers, strings, bools, None and tuples of them (``2``, ``2.0`` and ``True``
# differ, and so do ``0.0`` and ``-0.0``), by identity plus contents for lists, dicts, sets,
# arrays, modules and other objects. Conservative: a value that cannot change the graph may be
# guarded too, which costs at most a recompile; a value left unguarded could cost a wrong
# answer. The guards of one specialisation are checked by one generated function.


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


MISSING = _Missing()


def typed_key(v):
    """A key equal for two values only when they have the same type and value (floats by
    their bits: ``-0.0`` differs from ``0.0``, NaN equals NaN); None for values guarded by
    identity instead (lists, dicts, objects)."""
    t = type(v)
    if t is float:
        return (float, v.hex())
    if t is int or t is str or t is bool or t is bytes or v is None:
        return (t, v)
    if t is tuple or t is frozenset:
        keys = []
        for item in v:
            k = typed_key(item)
            if k is None:
                return None
            keys.append(k)
        return (t, tuple(keys) if t is tuple else frozenset(keys))
    if t is complex:
        return (t, v.real.hex(), v.imag.hex())
    if v is MISSING or v is Ellipsis or v is NotImplemented:
        return (t,)
    if t is slice:
        parts = (typed_key(v.start), typed_key(v.stop), typed_key(v.step))
        return None if None in parts else (t, parts)
    if t is np.dtype:
        return (t, v.str)
    if isinstance(v, np.generic):
        return (t, typed_key(v.item()))
    if isinstance(v, enum.Enum) and typed_key(v.value) is not None:
        return (t, v.name)
    return None


class _Items(tuple):
    """The snapshot of a large list or dict: its keys (dicts) and items, compared by
    identity (one C-level pass)."""
    __slots__ = ()


def _same_content(now, recorded) -> bool:
    """Snapshot comparison for sets, small arrays and large lists and dicts."""
    if type(recorded) is _Items:
        keys, items = recorded
        if type(now) is list:
            return keys is None and len(now) == len(items) and all(map(_is, now, items))
        return (len(now) == len(items) and all(map(_is, now.values(), items))
                and list(now) == keys)
    if isinstance(recorded, np.ndarray):
        return (type(now) is np.ndarray and now.dtype == recorded.dtype
                and now.shape == recorded.shape
                and bool(np.array_equal(now, recorded,
                                        equal_nan=recorded.dtype.kind in "fc")))
    return type(now) is type(recorded) and now == recorded


_ARRAY_SNAPSHOT_LIMIT = 4096        # larger arrays are guarded by identity only
_ITEM_LIMIT = 64                    # larger lists and dicts: one snapshot guard


def _library_dirs() -> tuple:
    paths = sysconfig.get_paths()
    found = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    return tuple(_PACKAGE_DIRS) + tuple(os.path.join(p, "") for p in found if p)


_LIBRARY_DIRS: Optional[tuple] = None


def is_library_file(filename: Optional[str]) -> bool:
    """Whether code from ``filename`` belongs to duograph, the standard library or an
    installed package (its globals are not the user's: not walked)."""
    global _LIBRARY_DIRS
    if not filename or filename.startswith("<frozen"):
        return True
    if _LIBRARY_DIRS is None:
        _LIBRARY_DIRS = _library_dirs()
    return os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def _is_library_module(mod) -> bool:
    filename = getattr(mod, "__file__", None)
    if filename is None:      # built in, or made at run time (types.ModuleType): by name
        top = str(getattr(mod, "__name__", "")).split(".")[0]
        return top in sys.builtin_module_names or top in sys.stdlib_module_names
    return is_library_file(filename)


def _is_library_class(cls) -> bool:
    mod = sys.modules.get(getattr(cls, "__module__", None) or "")
    return mod is None or cls.__module__ == "builtins" or _is_library_module(mod)


class CodeReads(NamedTuple):
    """What one function's code objects (nested ones included) can read by name, and the
    first source line of each read."""
    globals: Dict[str, str]      # global name -> "file:line (function)"
    attributes: Dict[str, str]   # attribute name (or identifier constant) -> first line
    cells: Dict[str, str]        # free variable -> first line


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})
_ATTR_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR",
                       "LOAD_SUPER_ATTR"})
_CELL_OPS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "STORE_DEREF"})


@functools.lru_cache(maxsize=4096)
def code_reads(code: types.CodeType) -> CodeReads:
    """The names ``code`` (and the code objects nested in it) can read: by ``dis``."""
    reads = CodeReads({}, {}, {})
    stack = [code]
    while stack:
        co = stack.pop()
        where_prefix = f"{os.path.basename(co.co_filename)}:"
        line = co.co_firstlineno
        for ins in dis.get_instructions(co):
            if ins.starts_line is not None:
                line = ins.starts_line
            op = ins.opname
            if op in _GLOBAL_OPS:
                table = reads.globals
            elif op in _ATTR_OPS:
                table = reads.attributes
            elif op in _CELL_OPS:
                table = reads.cells
            else:
                continue
            name = ins.argval if isinstance(ins.argval, str) else None
            if name is not None and name not in table:
                table[name] = f"{where_prefix}{line} in {co.co_name}"
        for const in co.co_consts:
            if isinstance(const, types.CodeType):
                stack.append(const)
            elif isinstance(const, str) and const.isidentifier():
                # getattr(obj, "name") and friends
                reads.attributes.setdefault(const, f"{where_prefix}{co.co_firstlineno} in "
                                                   f"{co.co_name}")
    return reads


def _show(v) -> str:
    """A short description of a value for recompile explanations."""
    if typed_key(v) is not None:
        text = repr(v)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(v, Tensor):
        return f"<{type(v).__name__} {list(v.shape)} {v.dtype}>"
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"<{type(v).__name__} {getattr(v, '__qualname__', '?')}>"
    if isinstance(v, types.MethodType):
        return f"<method {getattr(v.__func__, '__qualname__', '?')}>"
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        return f"<{type(v).__name__} of {len(v)}>"
    if isinstance(v, np.ndarray):
        return f"<ndarray {list(v.shape)} {v.dtype}>"
    return f"<{type(v).__name__}>"


def _show_pair(old, new):
    """``old`` and ``new`` as explanation text: types shown where the reprs alone would not
    tell them apart, "another ... (replaced)" for a different object of the same look."""
    a, b = _show(old), _show(new)
    if a == b:
        if typed_key(old) is None or typed_key(new) is None:
            return a, f"another {b} (replaced)"
    if typed_key(old) is not None and typed_key(new) is not None and type(old) is not type(
            new):
        return f"{a} ({type(old).__name__})", f"{b} ({type(new).__name__})"
    return a, b


_TENSOR_PROPERTIES = ("shape", "dtype", "device", "requires_grad")


class Change(NamedTuple):
    """One field of a cache key that differs: ``field: old -> new (read at where)``."""
    field: str
    old: str
    new: str
    where: Optional[str] = None

    def __str__(self) -> str:
        at = f" (read at {self.where})" if self.where else ""
        # a tensor argument's property reads "argument x: shape (2,) -> (3,)"
        tensor = (self.field.startswith("argument ")
                  and self.field.rpartition(": ")[2] in _TENSOR_PROPERTIES)
        return f"{self.field}{' ' if tensor else ': '}{self.old} -> {self.new}{at}"


class RecompileReason(str):
    """Why ``dg.compile`` recorded a function again: the text (a ``str``), and ``changes``,
    the ``Change``s from the nearest cached specialisation, old -> new."""

    changes: tuple = ()

    def __new__(cls, text: str, changes=()):
        self = super().__new__(cls, text)
        self.changes = tuple(changes)
        return self


class Guard:
    """One Python value a specialisation depends on: how to fetch it now from its holder
    (``access``: "get" on a dict, "cell", "attr", "item" of a list, "len", "self"), what it
    was (``mode``: "value" by type and value, "id" by identity, "eq" by a snapshot), and the
    field name and source line that explain it."""

    __slots__ = ("holder", "access", "key", "mode", "expected", "vkey", "field", "where",
                 "parent")

    def __init__(self, holder, access, key, expected, field, where, parent):
        self.holder, self.access, self.key = holder, access, key
        self.field, self.where, self.parent = field, where, parent
        self.expected = expected
        self.vkey = typed_key(expected)
        self.mode = "value" if self.vkey is not None else "id"

    def fetch(self):
        h, a = self.holder, self.access
        try:
            if a == "get":
                return h.get(self.key, MISSING)
            if a == "cell":
                return h.cell_contents
            if a == "attr":
                return getattr(h, self.key, MISSING)
            if a == "item":
                return h[self.key] if self.key < len(h) else MISSING
            if a == "len":
                return len(h)
            return h
        except ValueError:       # an empty closure cell
            return MISSING

    def holds(self, now) -> bool:
        if self.mode == "id":
            return now is self.expected
        if self.mode == "value":
            return now is self.expected or typed_key(now) == self.vkey
        return _same_content(now, self.expected)

    def change(self, now) -> Change:
        if self.mode == "eq":
            return Change(self.field, "the recorded contents", "other contents", self.where)
        old, new = _show_pair(self.expected, now)
        return Change(self.field, old, new, self.where)


_FETCH = {"get": "h{i}.get(k{i}, M)", "cell": "h{i}.cell_contents", "attr": "h{i}.{key}",
          "item": "h{i}[k{i}]", "len": "len(h{i})", "self": "h{i}"}
_TEST = {"id": "v is e{i}", "value": "v is e{i} or _vk(v) == K{i}", "eq": "_eq(v, e{i})"}


def compile_checker(guards: List[Guard]):
    """One generated function checking ``guards`` in order: returns -1 when all hold, the
    index of the first that fails, or -2 when fetching raised (check them one by one).

    It runs a grouped pass first: the "get" guards on one dict fetched by one
    ``operator.itemgetter`` and compared by identity in one ``map`` (a value guard whose
    object is the recorded one holds), every "len" guard in one tuple comparison, the rest
    one by one. Only where that pass finds something (a value equal but not identical, a
    change, a fetch that raised) does the guard-by-guard function run, for its answer."""
    if not guards:
        return None
    slow = _guard_by_guard(guards)
    ns = {"M": MISSING, "_vk": typed_key, "_eq": _same_content, "_slow": slow,
          "_all": all, "_map": map, "_is": operator.is_, "_tuple": tuple, "_len": len}
    body = []
    groups: Dict[int, tuple] = {}                   # id(holder) -> (holder, keys, expected)
    lens: tuple = ([], [])
    rest = []
    for i, g in enumerate(guards):
        if g.access == "get" and g.mode in ("id", "value"):
            entry = groups.setdefault(id(g.holder), (g.holder, [], []))
            entry[1].append(g.key)
            entry[2].append(g.expected)
        elif g.access == "len" and g.mode == "value" and type(g.expected) is int:
            lens[0].append(g.holder)
            lens[1].append(g.expected)
        else:
            rest.append((i, g))
    for n, (holder, keys, expected) in enumerate(groups.values()):
        if len(keys) == 1:
            ns[f"gh{n}"], ns[f"gk{n}"], ns[f"ge{n}"] = holder, keys[0], expected[0]
            body.append(f"        if gh{n}.get(gk{n}, M) is not ge{n}: return _slow()")
        else:
            ns[f"gh{n}"], ns[f"gg{n}"] = holder, operator.itemgetter(*keys)
            ns[f"gE{n}"] = tuple(expected)
            body.append(f"        if not _all(_map(_is, gg{n}(gh{n}), gE{n})): return _slow()")
    if lens[0]:
        ns["LH"], ns["LE"] = tuple(lens[0]), tuple(lens[1])
        body.append("        if _tuple(_map(_len, LH)) != LE: return _slow()")
    for i, g in rest:
        ns[f"H{i}"], ns[f"k{i}"], ns[f"e{i}"], ns[f"K{i}"] = (g.holder, g.key, g.expected,
                                                              g.vkey)
        fetch = _FETCH[g.access].replace("h{i}", "H{i}")
        if g.access == "attr" and not (isinstance(g.key, str) and g.key.isidentifier()):
            fetch = "getattr(H{i}, k{i}, M)"
        body.append("        v = " + fetch.format(i=i, key=g.key))
        body.append(f"        if not ({_TEST[g.mode].format(i=i)}): return _slow()")
    src = ("def check():\n    try:\n" + "\n".join(body)
           + "\n    except Exception:\n        return _slow()\n    return -1\n")
    exec(compile(src, "<dg.compile guards>", "exec"), ns)
    return ns["check"]


def _guard_by_guard(guards: List[Guard]):
    """The generated function checking ``guards`` one at a time, in order (see
    ``compile_checker``)."""
    ns = {"M": MISSING, "_vk": typed_key, "_eq": _same_content}
    body = []
    for i, g in enumerate(guards):
        ns[f"h{i}"], ns[f"k{i}"], ns[f"e{i}"], ns[f"K{i}"] = (g.holder, g.key, g.expected,
                                                              g.vkey)
        fetch = _FETCH[g.access]
        if g.access == "attr" and not (isinstance(g.key, str) and g.key.isidentifier()):
            fetch = "getattr(h{i}, k{i}, M)"
        body.append("        v = " + fetch.format(i=i, key=g.key))
        body.append(f"        if not ({_TEST[g.mode].format(i=i)}): return {i}")
    src = ("def check():\n    try:\n" + "\n".join(body)
           + "\n    except Exception:\n        return -2\n    return -1\n")
    exec(compile(src, "<dg.compile guards>", "exec"), ns)
    return ns["check"]


def first_failure(guards: List[Guard]) -> Optional[tuple]:
    """(guard, value now) of the first guard that fails, checked one by one; or None."""
    for g in guards:
        now = g.fetch()
        if not g.holds(now):
            return g, now
    return None


def failed_changes(guards: List[Guard]) -> List[Change]:
    """Every guard that fails, as a Change; guards under an object that was replaced (whose
    own identity guard failed) are not looked at."""
    bad = set()
    changes = []
    for i, g in enumerate(guards):
        if g.parent is not None and g.parent in bad:
            bad.add(i)
            continue
        now = g.fetch()
        if not g.holds(now):
            bad.add(i)
            changes.append(g.change(now))
    return changes


def _is_module(obj) -> bool:
    d = getattr(obj, "__dict__", None)
    return (type(d) is dict and "_parameters" in d and "_modules" in d
            and "_forward_hooks" in d and not isinstance(obj, type))


class GuardBuilder:
    """Walks what a function can read and makes the guards (see the section comment)."""

    def __init__(self):
        self.guards: List[Guard] = []
        self._seen: Dict[int, object] = {}        # id -> object (kept alive: ids stay unique)
        self._guarded = set()                     # (id(holder), access, key)
        self._deferred: List[list] = []           # [obj, path, parent, kind, names done]
        self._module_dicts = set()                # ids of nn.Module __dict__s walked
        self.tensors: list = []                   # tensors reached (read live, not guarded)
        self.attributes: Dict[str, str] = {}      # attribute name -> where first read

    # -- adding guards -----------------------------------------------------------------------
    def add(self, holder, access, key, value, field, path, parent, where=None,
            visit: bool = True) -> Optional[int]:
        """Guard the value fetched by (holder, access, key), recorded as ``value``; an object
        guarded by identity is then walked (its contents under ``path``)."""
        mark = (id(holder), access, key if access != "self" else None)
        try:
            hash(mark)
        except TypeError:
            return None
        if mark in self._guarded:
            return None
        self._guarded.add(mark)
        g = Guard(holder, access, key, value, field, where, parent)
        index = len(self.guards)
        self.guards.append(g)
        if g.mode == "id" and visit:
            self.visit(value, path, index)
        return index

    def add_snapshot(self, obj, field, parent, where=None, items=None) -> None:
        mark = (id(obj), "self", None)
        if mark in self._guarded:
            return
        self._guarded.add(mark)
        if items is not None:
            snap = items
        elif isinstance(obj, np.ndarray):
            snap = obj.copy()
        else:
            snap = set(obj) if isinstance(obj, set) else frozenset(obj)
        g = Guard(obj, "self", None, snap, field, where, parent)
        g.mode, g.vkey = "eq", None
        self.guards.append(g)

    # -- walking -----------------------------------------------------------------------------
    def visit(self, obj, path: str, parent: Optional[int]) -> None:
        """Guard what can change inside ``obj`` (identity already guarded by ``parent``)."""
        if id(obj) in self._seen:
            return
        self._seen[id(obj)] = obj
        if isinstance(obj, Tensor):
            # its data, shape and dtype are read live or checked at replay; ``t.grad`` is
            # another tensor object after every backward(): guarded when the code names it
            self.tensors.append(obj)
            self._defer(obj, path, parent, "tensor")
            return
        if typed_key(obj) is not None:
            return
        t = type(obj)
        if _is_module(obj):
            self._visit_module(obj, path, parent)
        elif t is types.FunctionType:
            self._visit_function(obj, path, parent)
        elif t is types.MethodType:
            self.visit(obj.__func__, path, parent)
            self.visit(obj.__self__, f"{path}.__self__", parent)
        elif isinstance(obj, property):
            for part in ("fget", "fset"):
                self.visit(getattr(obj, part), f"{path}.{part}", parent)
        elif isinstance(obj, (staticmethod, classmethod)):
            self.visit(obj.__func__, path, parent)
        elif isinstance(obj, functools.partial):
            self.visit(obj.func, f"{path}.func", parent)
            self.visit(obj.args, f"{path}.args", parent)
            self.visit(obj.keywords, f"{path}.keywords", parent)
        elif isinstance(obj, (list, dict)) and len(obj) > _ITEM_LIMIT:
            # one identity snapshot of all items; their own contents walked
            items = list(obj.values()) if isinstance(obj, dict) else list(obj)
            self.add_snapshot(obj, f"items of {path}", parent, items=_Items((
                list(obj) if isinstance(obj, dict) else None, tuple(items))))
            for i, item in enumerate(items):
                self.visit(item, f"{path}[...]", parent)
        elif isinstance(obj, list):
            self.add(obj, "len", None, len(obj), f"len({path})", path, parent)
            for i, item in enumerate(obj):
                self.add(obj, "item", i, item, f"{path}[{i}]", f"{path}[{i}]", parent)
        elif isinstance(obj, dict):
            self._visit_dict(obj, path, parent, lambda k: f"{path}[{k!r}]")
        elif isinstance(obj, tuple):
            for i, item in enumerate(obj):
                self.visit(item, f"{path}[{i}]", parent)
        elif isinstance(obj, (set, frozenset)):
            self.add_snapshot(obj, f"contents of {path}", parent)
        elif isinstance(obj, np.ndarray):
            if obj.size <= _ARRAY_SNAPSHOT_LIMIT:
                self.add_snapshot(obj, f"contents of {path}", parent)
        elif isinstance(obj, types.ModuleType):
            if not _is_library_module(obj):
                self._defer(obj, path, parent, "module")
        elif isinstance(obj, type):
            if not _is_library_class(obj):
                self._defer(obj, path, parent, "class")
        elif isinstance(obj, (types.BuiltinFunctionType, types.CodeType)):
            return
        elif _is_library_class(t):
            # an instance of a library class (an optimizer...): its code is not walked, so
            # every attribute it holds is a guard (an optimizer's ``lr`` is read by ``step``)
            d = getattr(obj, "__dict__", None)
            if type(d) is dict:
                self._visit_dict(d, path, parent, lambda k: f"{path}.{k}", "attribute ")
            else:
                self._defer(obj, path, parent, "object")
        else:
            # a user object: the attributes the walked code names; its methods are walked
            self._defer(obj, path, parent, "object")
            self.visit(t, f"type({path})", parent)

    def _visit_dict(self, d, path, parent, child_path, prefix="") -> None:
        self.add(d, "len", None, len(d), f"len({path})", path, parent)
        for k, v in list(d.items()):
            p = child_path(k)
            self.add(d, "get", k, v, prefix + p, p, parent)

    def _visit_module(self, m, path, parent) -> None:
        d = m.__dict__
        self._module_dicts.add(id(d))
        self.add(d, "len", None, len(d), f"number of attributes of {path}", path, parent)
        for name, value in list(d.items()):
            if name == "_non_persistent":         # only state_dict reads it
                continue
            field = f"{path}.{name}"
            if name in ("_parameters", "_buffers", "_modules") and type(value) is not list:
                i = self.add(d, "get", name, value, "attribute " + field, path, parent,
                             visit=False)
                self._seen[id(value)] = value
                self._visit_dict(value, field, i, lambda k: f"{path}.{k}", "attribute ")
            else:
                self.add(d, "get", name, value, "attribute " + field, field, parent)
        if not _is_library_class(type(m)):
            self._defer(type(m), f"type({path})", parent, "class", extra=("forward",))

    def _visit_function(self, f, path, parent) -> None:
        code = f.__code__
        if is_library_file(code.co_filename):
            return
        self.add(f, "attr", "__defaults__", f.__defaults__, f"{path}.__defaults__",
                 f"{path}.__defaults__", parent)
        self.add(f, "attr", "__kwdefaults__", f.__kwdefaults__, f"{path}.__kwdefaults__",
                 f"{path}.__kwdefaults__", parent)
        reads = code_reads(code)
        for name, where in reads.attributes.items():
            self.attributes.setdefault(name, where)
        g = f.__globals__
        for name, where in reads.globals.items():
            if name in g:
                self.add(g, "get", name, g[name], f"global {name}", name, parent, where)
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                value = MISSING
            self.add(cell, "cell", None, value, f"closure variable {name}", name, parent,
                     reads.cells.get(name))

    def _defer(self, obj, path, parent, kind, extra=()) -> None:
        """Objects whose attributes are guarded by name: every attribute name the walked
        code reads (known only when the walk is over)."""
        self._deferred.append([obj, path, parent, kind, set(), tuple(extra)])

    def finish(self) -> List[Guard]:
        """Guard the attributes of the deferred objects until no new code is reached."""
        changed = True
        while changed:
            changed = False
            for entry in list(self._deferred):
                obj, path, parent, kind, done, extra = entry
                todo = [n for n in list(self.attributes) + list(extra) if n not in done]
                if not todo:
                    continue
                changed = True
                for name in todo:
                    done.add(name)
                    self._attribute(obj, name, path, parent, kind)
        for g in self.guards:       # module attributes: the line that first read the name
            if g.where is None and g.access == "get" and id(g.holder) in self._module_dicts:
                g.where = self.attributes.get(g.key)
        return self.guards

    def _attribute(self, obj, name, path, parent, kind) -> None:
        field = f"{path}.{name}"
        where = self.attributes.get(name)
        if kind == "module":
            d = obj.__dict__
            if name in d:
                self.add(d, "get", name, d[name], f"global {field}", field, parent, where)
            return
        if kind == "tensor":
            if name == "grad":
                self.add(obj, "attr", "grad", obj.grad, f"{field}", field, parent, where)
            return
        if kind == "class":
            for cls in obj.__mro__:
                if _is_library_class(cls):
                    break
                if name in cls.__dict__:
                    self.add(cls.__dict__, "get", name, cls.__dict__[name],
                             f"class attribute {cls.__qualname__}.{name}", field, parent, where)
                    return
            return
        d = getattr(obj, "__dict__", None)
        if type(d) is dict:
            if name in d:
                self.add(d, "get", name, d[name], f"attribute {field}", field, parent, where)
            elif any(name in c.__dict__ for c in type(obj).__mro__[:-1]):
                self.add(d, "get", name, MISSING, f"attribute {field}", field, parent, where)
        elif hasattr(type(obj), "__slots__"):
            value = getattr(obj, name, MISSING)
            if value is not MISSING:
                self.add(obj, "attr", name, value, f"attribute {field}", field, parent, where)

    def add_root(self, obj, path: str) -> None:
        """Walk the compiled callable itself, or a non-tensor argument (their identity is
        part of the cache key)."""
        if (callable(obj) and not isinstance(obj, (types.FunctionType, types.MethodType, type))
                and not _is_module(obj)):
            self.attributes.setdefault("__call__", None)
        self.visit(obj, path, None)
