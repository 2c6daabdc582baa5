"""Grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled`` (thread-local, nestable)."""
from __future__ import annotations

import functools
import threading



class _State(threading.local):
    """Per-thread grad mode; the class default answers a thread that never set it without
    the AttributeError a missing attribute would cost (~0.4 us on every op)."""

    enabled = True


_state = _State()


def is_grad_enabled() -> bool:
    """Whether gradient recording is on in this thread (True unless inside ``dg.no_grad()`` or
    ``dg.set_grad_enabled(False)``)."""
    return _state.enabled


def _set(enabled: bool) -> None:
    _state.enabled = bool(enabled)


class _GradModeContext:
    """Base for the grad-mode contexts; each also works as a function decorator, with or
    without parentheses (``@dg.no_grad()`` or ``@dg.no_grad``)."""

    _target = True

    def __new__(cls, fn=None):
        if fn is None or cls is set_grad_enabled:
            return super().__new__(cls)
        if not callable(fn):
            raise TypeError(f"{cls.__name__}() takes no arguments; as a decorator it wraps "
                            f"a function, found {type(fn).__name__}")
        return cls()(fn)      # used bare as a decorator: @dg.no_grad

    def __enter__(self):
        self._prev = is_grad_enabled()
        _set(self._target)
        return self

    def __exit__(self, *exc):
        _set(self._prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradModeContext):
    """Inside, ops are not recorded for autograd (results have requires_grad=False)."""

    _target = False


class inference_mode(_GradModeContext):
    """PyTorch's ``inference_mode``: here the same as ``no_grad`` (nothing is recorded);
    ``inference_mode(False)`` leaves grad mode as it is."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):
            return cls()(mode)        # used bare as a decorator
        self = object.__new__(cls)
        self._mode = bool(mode)
        return self

    def __init__(self, mode=True):
        pass

    def __enter__(self):
        self._prev = is_grad_enabled()
        if self._mode:
            _set(False)
        return self

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(_GradModeContext):
    """Re-enable gradient recording inside a ``no_grad`` block."""

    _target = True


class set_grad_enabled(_GradModeContext):
    """Set grad mode to ``mode`` (takes effect at once; also usable as a context manager)."""

    def __init__(self, mode: bool):
        self._prev = is_grad_enabled()
        self._target = bool(mode)
        _set(self._target)

    def __enter__(self):
        return self

    def __call__(self, fn):
        mode = self._target
        _set(self._prev)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
