"""Python decisions taken from tensor values (``bool(t)``, ``t.item()``), noted while
``compile`` records a function so that replays can check them (guards)."""
from __future__ import annotations

import threading

_state = threading.local()


def _stack() -> list:
    s = getattr(_state, "tracers", None)
    if s is None:
        s = _state.tracers = []
    return s


def note_decision(tensor, kind: str, value) -> None:
    """Called by Tensor.__bool__/item(): every open tracer records the decision."""
    s = getattr(_state, "tracers", None)
    if s:
        from ..graphlib.source import user_source
        source = user_source()
        for tracer in s:
            tracer.note(tensor, kind, value, source)


class DecisionTracer:
    """Collects (tensor, kind, value) for every decision made while it is open."""

    def __init__(self):
        self.decisions = []

    def note(self, tensor, kind, value, source=None):
        self.decisions.append((tensor, kind, value, source))

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().remove(self)
