"""Attribute schemas: what attributes an op takes, of which type, with which default.

Each ``OpDef`` declares its attributes once, where it is registered::

    OpDef("sum", ..., attrs=Attrs(dim=Attr("dims"), keepdim=Attr(bool, default=False),
                                  dtype=Attr("dtype", default=None)))

Building a node (``dispatch.apply``: graph mode and eager alike) validates the attributes it
is given against the schema: an unknown attribute, a value of the wrong type or one out of
range raises ``AttrTypeError`` (a ``TypeError``) or ``AttrValueError`` (a ``ValueError``),
naming the op, the attribute, what was expected, what was found and the user's line.
Values PyTorch accepts in another form are normalised: a list where a tuple of dims or a
shape is expected becomes a tuple, numpy integers become ints, an int where a float is
expected becomes a float. Missing attributes with a default are left out (the kernel's and
infer's own default is the same); a missing attribute without one is an error.

Kinds: a Python type (``bool``, ``int``, ``float``, ``str``), or one of the names in
``KINDS``: ``"number"`` (bool, int or float, kept as it is), ``"dtype"`` (a dtype name),
``"dims"`` (a tuple of ints), ``"shape"`` (a tuple of dims: ints or symbolic dims),
``"any"`` (any hashable value: an index, a device), ``"region"`` (a sub-graph),
``"constant"`` (a number or a ``ConstArray``). ``default=None`` also admits None; ``choices``
and ``min`` constrain the value.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import dtypes
from .errors import DuographError
from .ir import ConstArray, Region
from .source import user_source

REQUIRED = object()   # the default of an attribute that must be given


class AttrTypeError(DuographError, TypeError):
    """An op attribute is unknown, missing, or of the wrong type."""


class AttrValueError(DuographError, ValueError, RuntimeError):
    """An op attribute has the right type but a value the op cannot take (also a
    ``RuntimeError``, as PyTorch's checks of argument values raise)."""


class _Refused(Exception):
    """Raised by a kind's converter: the value is not of the kind."""


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _to_int(v):
    if _is_int(v):
        return int(v)
    raise _Refused


def _to_float(v):
    if _is_int(v) or isinstance(v, (float, np.floating)):
        return float(v)
    raise _Refused


def _to_number(v):
    if isinstance(v, (bool, int, float, complex)):
        return v
    if isinstance(v, (np.bool_, np.integer, np.floating, np.complexfloating)):
        return v.item()
    raise _Refused


def _to_dtype(v):
    if isinstance(v, str) and v in dtypes.DTYPE_NAMES:
        return v
    if isinstance(v, (str, np.dtype, type)):
        try:
            return dtypes.as_dtype(v)
        except Exception:
            pass
    raise _Refused


def _to_dims(v):
    if isinstance(v, (tuple, list)) and all(_is_int(d) for d in v):
        return tuple(int(d) for d in v)
    raise _Refused


def _is_dim(d) -> bool:
    """An int or a symbolic dim (a name, or an expression object of the types module)."""
    if _is_int(d) or isinstance(d, str):
        return True
    return not isinstance(d, (bool, float, complex, tuple, list, dict, set, type(None),
                              np.bool_, np.floating, np.ndarray))


def _to_shape(v):
    if isinstance(v, (tuple, list)) and all(_is_dim(d) for d in v):
        return tuple(int(d) if _is_int(d) else d for d in v)
    raise _Refused


def _to_hashable(v):
    if isinstance(v, list):
        v = tuple(v)
    try:
        hash(v)
    except TypeError:
        raise _Refused from None
    return v


def _to_region(v):
    if isinstance(v, Region):
        return v
    raise _Refused


def _to_constant(v):
    if isinstance(v, ConstArray):
        return v
    return _to_number(v)


def _refuse(v):
    raise _Refused


class Kind:
    """One attribute type: ``exact`` holds the Python types taken as they are when every
    element check passes (the fast path); ``convert(value)`` normalises anything else or
    raises ``_Refused``; ``expected`` reads "a bool", "a tuple of ints"."""

    __slots__ = ("name", "expected", "exact", "convert", "items")

    def __init__(self, name: str, expected: str, exact: tuple, convert: Callable,
                 items: Optional[tuple] = None):
        self.name = name
        self.expected = expected
        self.exact = frozenset(exact)
        self.convert = convert
        self.items = None if items is None else frozenset(items)   # exact element types

    def __repr__(self):
        return self.name


KINDS: Dict[Any, Kind] = {
    bool: Kind("bool", "a bool", (bool,), _refuse),
    int: Kind("int", "an int", (int,), _to_int),
    float: Kind("float", "a float", (float,), _to_float),
    str: Kind("str", "a string", (str,), _refuse),
    "number": Kind("number", "a number (bool, int or float)", (bool, int, float), _to_number),
    "dtype": Kind("dtype", f"a dtype name ({', '.join(dtypes.DTYPE_NAMES)})", (), _to_dtype),
    "dims": Kind("dims", "a tuple or list of ints", (tuple,), _to_dims, items=(int,)),
    "shape": Kind("shape", "a tuple or list of dims (ints or symbols)", (tuple,), _to_shape,
                  items=(int, str)),
    "any": Kind("any", "a hashable value", (), _to_hashable),
    "region": Kind("region", "a sub-graph (Region)", (), _to_region),
    "constant": Kind("constant", "a number or a ConstArray", (bool, int, float, ConstArray),
                     _to_constant),
}


class Attr:
    """One declared attribute: its kind, default (``REQUIRED`` when it must be given;
    ``None`` also admits None as a value), and optional constraints ``choices`` (the values
    allowed) and ``min`` (a lower bound, for numbers and for each int of a tuple)."""

    __slots__ = ("kind", "default", "choices", "min", "doc")

    def __init__(self, kind, default=REQUIRED, *, choices: Optional[tuple] = None,
                 min: Optional[float] = None, doc: str = ""):
        if kind not in KINDS:
            raise ValueError(f"unknown attribute kind {kind!r}; expected one of "
                             f"{[getattr(k, '__name__', k) for k in KINDS]}")
        self.kind = KINDS[kind]
        self.default = default
        self.choices = None if choices is None else tuple(choices)
        self.min = min
        self.doc = doc

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        """What is expected, in words."""
        text = self.kind.expected
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        if self.min is not None:
            text += f" >= {self.min}"
        if self.default is None:
            text += " or None"
        return text

    def __repr__(self):
        parts = [repr(self.kind)]
        if not self.required:
            parts.append(f"default={self.default!r}")
        if self.choices is not None:
            parts.append(f"choices={self.choices!r}")
        if self.min is not None:
            parts.append(f"min={self.min!r}")
        return f"Attr({', '.join(parts)})"


def _found(value) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


class Attrs:
    """The attribute schema of one op: ``Attrs(dim=Attr("dims"), keepdim=Attr(bool,
    default=False))``. ``validate(op_name, attrs)`` returns the attributes (a new dict only
    when a value was normalised) or raises; the checks are precomputed per schema."""

    __slots__ = ("fields", "required", "_fast")

    def __init__(self, **fields: Attr):
        for name, attr in fields.items():
            if not isinstance(attr, Attr):
                raise TypeError(f"attribute {name!r}: expected an Attr, found {attr!r}")
        self.fields: Dict[str, Attr] = dict(fields)
        self.required: Tuple[str, ...] = tuple(n for n, a in fields.items() if a.required)
        # name -> (exact types, exact element types or None): values passing these need
        # no conversion and no constraint check
        self._fast = {n: (a.kind.exact | ({type(None)} if a.default is None else set()),
                          a.kind.items)
                      for n, a in fields.items() if a.choices is None and a.min is None}

    def __iter__(self):
        return iter(self.fields)

    def __contains__(self, name) -> bool:
        return name in self.fields

    def __repr__(self):
        return "Attrs(" + ", ".join(f"{n}={a!r}" for n, a in self.fields.items()) + ")"

    def validate(self, op_name: str, attrs: dict, where: Optional[str] = None) -> dict:
        """``attrs`` checked (and normalised) against the schema; see the module docstring.
        Errors name ``where`` (a node of a file being read) instead of the user's line."""
        fast = self._fast
        out = None
        for name, value in attrs.items():
            rule = fast.get(name)
            if rule is not None and type(value) in rule[0]:
                items = rule[1]
                if items is None or value is None:
                    continue
                for d in value:         # (a loop: a generator costs more on short tuples)
                    if type(d) not in items:
                        break
                else:
                    continue
            new = self._check(op_name, name, value, where)
            if new is not value:
                if out is None:
                    out = dict(attrs)
                out[name] = new
        for name in self.required:
            if name not in attrs:
                raise self._error(AttrTypeError, op_name, name, "is required but was not given",
                                  where)
        return attrs if out is None else out

    def _check(self, op_name: str, name: str, value, where: Optional[str] = None):
        attr = self.fields.get(name)
        if attr is None:
            known = ", ".join(self.fields) or "none"
            raise self._error(AttrTypeError, op_name, name,
                              f"is not an attribute of {op_name} (its attributes: {known})",
                              where)
        if value is None and attr.default is None:
            return value
        kind = attr.kind
        if type(value) in kind.exact and (kind.items is None or all(
                type(d) in kind.items for d in value)):
            new = value
        else:
            try:
                new = kind.convert(value)
            except _Refused:
                raise self._error(AttrTypeError, op_name, name,
                                  f"must be {attr.describe()}, found {_found(value)}",
                                  where) from None
        if attr.choices is not None and new not in attr.choices:
            raise self._error(AttrValueError, op_name, name,
                              f"must be {attr.describe()}, found {_found(value)}", where)
        if attr.min is not None:
            items = new if isinstance(new, tuple) else (new,)
            if any(isinstance(d, (int, float)) and d < attr.min for d in items):
                raise self._error(AttrValueError, op_name, name,
                                  f"must be {attr.describe()}, found {_found(value)}", where)
        return new

    @staticmethod
    def _error(cls, op_name: str, name: str, what: str, where: Optional[str] = None):
        if where is not None:
            return cls(f"{where}: attribute {name} {what}")
        return cls(f"{op_name}: attribute {name} {what}\n  in: {user_source()}")
