"""Python decisions taken from tensor values while ``dg.compile`` records: ``Tensor.__bool__``,
``item()``, ``numpy()``... tell every open ``guards.DecisionTracer`` (this thread's), which turns
them into guards. The bottom of eager: it imports nothing of eager, so ``tensors`` can note
decisions without importing ``guards``."""
from __future__ import annotations

import threading

from ..graphlib.source import user_source

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
