"""Where in the user's code a node was created.

Graph building always records the user's ``file:line`` (the first frame outside duograph).
Eager execution skips the stack walk on its hot path unless ``set_capture_source(True)`` asks
for it (that sets ``dg.config.capture_source``; ``DUOGRAPH_SOURCE=1`` seeds it).
"""
from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional

from .config import config

_ENGINE_FOLDERS = ("graphlib", "eager", "passes", "runtime", "duograph")


def package_dirs(root: str) -> tuple:
    """The folders whose frames count as duograph's own, given the folder above graphlib/.

    Installed from a wheel, ``root`` is the ``duograph`` package itself (it has an
    ``__init__.py``) and everything under it is internal. In a source checkout (an editable
    install) the engine folders and the face package sit side by side in the repository,
    whatever the clone is called: tests/ and examples/ there are user code.
    """
    if os.path.isfile(os.path.join(root, "__init__.py")):
        return (root + os.sep,)
    return tuple(os.path.join(root, name) + os.sep for name in _ENGINE_FOLDERS)


_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIRS = package_dirs(os.path.dirname(_HERE))


class SourceLocation(NamedTuple):
    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} ({self.function})"

    def short(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"


def _is_internal(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIRS)


def is_duograph_file(filename: str) -> bool:
    """Whether ``filename`` is one of duograph's own modules (not the user's code)."""
    return _is_internal(filename)


def user_source(skip: int = 1) -> Optional[SourceLocation]:
    """The innermost frame outside duograph (None when there is none)."""
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            return SourceLocation(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


def set_capture_source(enabled: bool) -> None:
    """Record source locations for eagerly executed ops too (slower; for debugging): sets
    ``dg.config.capture_source``."""
    config.capture_source = bool(enabled)


def capture_source_eagerly() -> bool:
    """Whether eager ops record their source line (``config.capture_source``)."""
    return config.capture_source
