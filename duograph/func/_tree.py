"""Pytrees of tensors: nested tuples, lists and dicts, flattened and rebuilt."""
from __future__ import annotations

from typing import Any, List, Tuple


class TreeSpec:
    """The structure of a pytree: ``kind`` ("leaf", "tuple", "list", "dict"), the dict's
    keys, and the children's specs."""

    __slots__ = ("kind", "keys", "children")

    def __init__(self, kind: str, keys=None, children=()):
        self.kind, self.keys, self.children = kind, keys, tuple(children)

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __eq__(self, other):
        return (isinstance(other, TreeSpec) and self.kind == other.kind
                and self.keys == other.keys and self.children == other.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children))
            return "{" + inner + "}"
        return f"({inner})" if self.kind == "tuple" else f"[{inner}]"


def tree_flatten(tree: Any) -> Tuple[List[Any], TreeSpec]:
    """The leaves of ``tree`` in order, and its structure."""
    leaves: List[Any] = []

    def walk(node):
        if isinstance(node, tuple) and not hasattr(node, "_fields"):
            return TreeSpec("tuple", None, [walk(c) for c in node])
        if isinstance(node, list):
            return TreeSpec("list", None, [walk(c) for c in node])
        if isinstance(node, dict):
            keys = tuple(node)
            return TreeSpec("dict", keys, [walk(node[k]) for k in keys])
        leaves.append(node)
        return TreeSpec("leaf")
    return leaves, walk(tree)


def tree_unflatten(leaves, spec: TreeSpec) -> Any:
    """The pytree of structure ``spec`` holding ``leaves`` in order."""
    it = iter(leaves)

    def build(s):
        if s.kind == "leaf":
            return next(it)
        children = [build(c) for c in s.children]
        if s.kind == "tuple":
            return tuple(children)
        if s.kind == "list":
            return children
        return dict(zip(s.keys, children))
    return build(spec)


def broadcast_prefix(prefix: Any, tree: Any, what: str) -> list:
    """One entry of ``prefix`` (an int/None, or a tree matching ``tree``'s top levels) per
    leaf of ``tree``; raises ValueError naming ``what`` when the structures differ."""
    out: list = []

    def walk(p, t):
        if isinstance(p, (tuple, list)) and not isinstance(t, (tuple, list)) or (
                isinstance(p, dict) and not isinstance(t, dict)):
            raise ValueError(what)
        if isinstance(p, (tuple, list)):
            if len(p) != len(t):
                raise ValueError(what)
            for a, b in zip(p, t):
                walk(a, b)
        elif isinstance(p, dict):
            if set(p) != set(t):
                raise ValueError(what)
            for k in t:
                walk(p[k], t[k])
        else:
            out.extend([p] * len(tree_flatten(t)[0]))
    walk(prefix, tree)
    return out
