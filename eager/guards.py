"""Python decisions taken from tensor values (``bool(t)``, ``t.item()``, ``t.numpy()``,
``t.tolist()``, ``np.asarray(t)``), noted while ``compile`` records a function so that
replays can check them (guards)."""
from __future__ import annotations

import threading

import numpy as np

_state = threading.local()


def _stack() -> list:
    s = getattr(_state, "tracers", None)
    if s is None:
        s = _state.tracers = []
    return s


def tracing() -> bool:
    """Whether a compile() recording is listening for decisions."""
    return bool(getattr(_state, "tracers", None))


def note_decision(tensor, kind: str, value, what=None) -> None:
    """Called by Tensor.__bool__/item()/numpy()...: every open tracer records the decision.

    ``kind`` is "bool", "item" (a Python number) or "data" (an array read whole)."""
    s = getattr(_state, "tracers", None)
    if s:
        from ..graphlib.source import user_source
        source = user_source()
        for tracer in s:
            tracer.note(tensor, kind, value, source, what or f"{kind}()")


def note_attribute(obj, name: str) -> None:
    """Called where Python branches on an object's attribute while a function may be
    recorded (``Module.__call__`` notes ``training``, which Dropout and BatchNorm branch
    on): a replay checks the attribute still holds the recorded value."""
    s = getattr(_state, "tracers", None)
    if s:
        value = getattr(obj, name)
        for tracer in s:
            tracer.note_attribute(obj, name, value)


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
