"""``ParameterList`` and ``ParameterDict``: containers whose parameters are registered (a
plain list or dict of Parameters is invisible to ``parameters()``), as PyTorch's. A tensor
that is not a Parameter is wrapped in one when stored; other values are kept as plain
attributes, as PyTorch does."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator, Optional

from ..eager.tensors import Parameter, Tensor
from .module import Module


def _as_parameter(value: Any) -> Any:
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value, requires_grad=value.requires_grad or value.is_leaf)
    return value


class ParameterList(Module):
    """A list of parameters, registered under the names ``"0"``, ``"1"``..."""

    def __init__(self, values: Optional[Iterable[Any]] = None):
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self.extend(values)

    def _key(self, idx: int) -> str:
        if not isinstance(idx, int):
            raise TypeError(f"ParameterList indices must be integers or slices, not "
                            f"{type(idx).__name__}")
        n = self._size
        if not -n <= idx < n:
            raise IndexError(f"ParameterList index {idx} is out of range (length {n})")
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(self._size)[idx]])
        return getattr(self, self._key(idx))

    def __setitem__(self, idx: int, value: Any) -> None:
        setattr(self, self._key(idx), _as_parameter(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def __iadd__(self, values: Iterable[Any]) -> "ParameterList":
        return self.extend(values)

    def append(self, value: Any) -> "ParameterList":
        """Add ``value`` (a Parameter; a tensor is wrapped in one) at the end; returns self."""
        object.__setattr__(self, "_size", self._size + 1)
        setattr(self, str(self._size - 1), _as_parameter(value))
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        """Append every value of ``values`` in order; returns self."""
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"ParameterList.extend should be called with an iterable, but "
                            f"got {type(values).__name__}")
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        lines = []
        for i, p in enumerate(self):
            if isinstance(p, Tensor):
                lines.append(f"({i}): Parameter containing: [{p.dtype} of size "
                             f"{'x'.join(str(s) for s in p.shape)}]")
            else:
                lines.append(f"({i}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


class ParameterDict(Module):
    """An ordered dict of parameters, registered under their keys."""

    def __init__(self, parameters: Any = None):
        super().__init__()
        object.__setattr__(self, "_keys", {})
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, found {type(key).__name__}")
        self._keys[key] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self):
        """The keys, in insertion order."""
        return list(self._keys)

    def values(self):
        """The stored values (parameters), in insertion order."""
        return [self[k] for k in self._keys]

    def items(self):
        """``(key, value)`` pairs, in insertion order."""
        return [(k, self[k]) for k in self._keys]

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default``."""
        return self[key] if key in self._keys else default

    def pop(self, key: str) -> Any:
        """Remove ``key`` and return its value."""
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        """Remove every item."""
        for k in list(self._keys):
            del self[k]

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value under ``key``; stores ``default`` there first when absent."""
        if key not in self._keys:
            self[key] = default
        return self[key]

    def copy(self) -> "ParameterDict":
        """A new ParameterDict holding the same parameter objects."""
        return ParameterDict(dict(self.items()))

    def update(self, values: Any) -> None:
        """Add or replace items from a mapping, or from an iterable of ``(key, value)`` pairs.
        As PyTorch, an ``OrderedDict`` or ``ParameterDict`` keeps its order and any other
        mapping (a plain dict) is added in sorted key order."""
        if isinstance(values, (OrderedDict, ParameterDict)):
            pairs = [(k, values[k]) for k in values.keys()]
        elif hasattr(values, "keys") and hasattr(values, "__getitem__"):
            pairs = sorted((k, values[k]) for k in values.keys())
        elif hasattr(values, "__iter__") and not isinstance(values, (str, bytes)):
            pairs = []
            for j, item in enumerate(values):
                if not isinstance(item, (tuple, list)) or len(item) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} should be a "
                                     f"(key, value) pair, found {item!r}")
                pairs.append(tuple(item))
        else:
            raise TypeError(f"ParameterDict.update should be called with a mapping or an "
                            f"iterable of key/value pairs, but got {type(values).__name__}")
        for k, v in pairs:
            self[k] = v

    def extra_repr(self) -> str:
        lines = []
        for k, p in self.items():
            if isinstance(p, Tensor):
                lines.append(f"({k}): Parameter containing: [{p.dtype} of size "
                             f"{'x'.join(str(s) for s in p.shape)}]")
            else:
                lines.append(f"({k}): Object of type: {type(p).__name__}")
        return "\n".join(lines)
