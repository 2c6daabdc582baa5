"""Python-level random numbers met while ``dg.compile`` records a function.

A replay runs the recorded graph, not the Python: a number that ``random.random()`` or
``np.random.rand()`` drew while recording is a constant of the graph, the same on every call.
``RandomWatch`` finds such draws while a recording runs:

- calls into C on a ``random.Random`` (the ``random`` module's functions, or any instance)
  and ``os.urandom`` (``SystemRandom``, ``secrets``, an unseeded ``np.random.default_rng()``),
  made by code outside duograph (seen through ``sys.setprofile``; a profiler already
  installed is left alone);
- a changed state of numpy's global ``RandomState`` (``np.random.rand``, ``np.random.normal``),
  of the ``random`` module's generator, or of a numpy ``Generator``, ``RandomState``,
  ``BitGenerator`` or ``random.Random`` the function can reach (its globals, closures,
  module attributes: what compile's guard walk visited), whose Cython methods a profile
  function does not see.

``dg.compile`` then runs the function eagerly on every call, warned once, as torch.compile
falls back to Python for such calls. duograph's own random ops (``dg.rand``, dropout) draw
from their own generator and get fresh seeds on every replay: they are not reported.
"""
from __future__ import annotations

import os
import random
import sys
import types
from typing import Iterable, List, Optional, Tuple

import numpy as np

from ..graphlib.source import is_duograph_file

_NUMPY_RNGS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
# modules whose frames stand between the user's call and the draw (the user called them)
_LIBRARY_MODULES = ("random", "secrets", "uuid", "tempfile")


def _rng_state(obj):
    """The state of a generator, comparable with ``_same``."""
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator.state
    if isinstance(obj, np.random.RandomState):
        return obj.get_state(legacy=False)
    if isinstance(obj, np.random.BitGenerator):
        return obj.state
    return obj.getstate()                                 # random.Random


def _same(a, b) -> bool:
    """Deep equality of generator states (dicts, tuples and arrays of numbers)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _from_library(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name in _LIBRARY_MODULES or name == "numpy" or name.startswith("numpy.")


class RandomWatch:
    """Open while a recording runs; ``found`` then names the first Python-level random draw
    (``"random.random at /home/me/model.py:12"``) or is None. ``reachable``: (object, name, line)
    of what the function can read; the generators among them are watched by state."""

    def __init__(self, reachable: Iterable[Tuple[object, str, object]] = ()):
        self.found: Optional[str] = None
        watched = [(np.random.mtrand._rand, "numpy's global random state (np.random.*)",
                    None), (random._inst, "the random module's state (random.*)", None)]
        watched += [(obj, f"the {type(obj).__name__} {name}", where)
                    for obj, name, where in reachable
                    if isinstance(obj, _NUMPY_RNGS + (random.Random,))]
        self._watched: List[tuple] = []
        seen = set()
        for obj, what, where in watched:
            if id(obj) not in seen:
                seen.add(id(obj))
                self._watched.append((obj, what, where))
        self._before: list = []
        self._profiling = False

    def __enter__(self) -> "RandomWatch":
        self._before = [_rng_state(obj) for obj, _, _ in self._watched]
        if sys.getprofile() is None:
            sys.setprofile(self._profile)
            self._profiling = True
        return self

    def __exit__(self, *exc) -> None:
        if self._profiling:
            if sys.getprofile() == self._profile:        # (a bound method: equal, not same)
                sys.setprofile(None)
            self._profiling = False
        if self.found is not None:
            return
        for (obj, what, where), before in zip(self._watched, self._before):
            if not _same(_rng_state(obj), before):
                self.found = what + (f", read at {where}" if where else "")
                return

    def _profile(self, frame, event, arg) -> None:
        if event != "c_call" or self.found is not None:
            return
        owner = getattr(arg, "__self__", None)
        if not (isinstance(owner, random.Random) or arg is os.urandom):
            return
        if arg is os.urandom:
            called = "os.urandom"
        elif owner is getattr(random, "_inst", None):     # the random module's functions
            called = f"random.{arg.__name__}"
        else:
            called = f"{type(owner).__name__}.{arg.__name__}"
        # the frame that called it: the user's, or duograph's own (never reported); frames of
        # the random module and numpy in between belong to the function the user called
        while frame is not None and not is_duograph_file(frame.f_code.co_filename) \
                and _from_library(frame):
            called = f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"
            frame = frame.f_back
        if frame is None or is_duograph_file(frame.f_code.co_filename) or _importing(frame):
            return
        self.found = f"{called} at {frame.f_code.co_filename}:{frame.f_lineno}"


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside a module import (a library imported lazily while the
    function records, e.g. sympy seeding its own ``random.Random`` at import): such a draw
    happens once per process, not once per call, so a replay loses nothing."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def reachable_objects(builder) -> List[Tuple[object, str, object]]:
    """(object, field, line) for every value a compile ``GuardBuilder`` guarded by identity."""
    return [(g.expected, g.field, g.where) for g in builder.guards
            if g.mode == "id" and not isinstance(g.expected, (types.ModuleType, type))]
