"""A disk cache for generated kernel sources that never runs what it did not write.

Generated kernels (numba loops) are written as Python files and imported, so that numba's
``cache=True`` keeps their machine code across processes. A cache of importable files is
an attack surface: anyone who can write into it, or predict a file's name and plant it
first, runs code in the next process that imports it. So:

- the directory is per user, created with mode 0700, and refused (``KernelCacheError``)
  when it is owned by someone else, is group- or world-writable, or is a symlink; the
  fallback when ``~/.cache`` cannot be used is ``<tmp>/duograph-<uid>``, held to the same
  rules (never a shared folder);
- a file is trusted only if its bytes equal the source the caller generated in this
  process: the cache stores nothing it would need to believe (a planted or damaged file is
  replaced, atomically, by the real source before anything imports it);
- files are written by ``graphlib.files.write_bytes`` (duograph's one writer): a fresh
  temporary name opened with ``O_EXCL | O_NOFOLLOW``, renamed into place, so a symlink
  planted under either name is never followed.
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import Optional

from ..graphlib.files import write_bytes


class KernelCacheError(OSError):
    """The kernel cache directory cannot be used safely."""


def _check_private(path: str) -> None:
    """``path`` must be a real directory (not a link) owned by this user, writable by no one
    else."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise KernelCacheError(f"kernel cache {path!r}: {e}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise KernelCacheError(f"kernel cache {path!r} is not a plain directory (a link or a "
                               "file): refused")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise KernelCacheError(f"kernel cache {path!r} is owned by uid {st.st_uid}, not by "
                               f"this user ({os.getuid()}): refused")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise KernelCacheError(f"kernel cache {path!r} is writable by group or others (mode "
                               f"{stat.S_IMODE(st.st_mode):o}): refused; make it 0700")


def _make_private(path: str) -> str:
    """Create ``path`` (and missing parents) with mode 0700 and check it."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    _check_private(path)
    return path


def cache_dir(base: Optional[str] = None) -> str:
    """The private directory for generated kernels: ``<base>/numba`` (``base`` defaults to
    ``~/.cache/duograph``), else ``<tmp>/duograph-<uid>/numba``. Raises KernelCacheError
    when neither is safe to use."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    if base is None:
        base = os.path.join(os.path.expanduser("~"), ".cache", "duograph")
    errors = []
    for root in (base, os.path.join(tempfile.gettempdir(), f"duograph-{uid}")):
        try:
            _make_private(root)
            return _make_private(os.path.join(root, "numba"))
        except OSError as e:
            errors.append(str(e))
    raise KernelCacheError("no safe directory for generated kernels: " + "; ".join(errors))


def write_verified(folder: str, name: str, text: str) -> str:
    """The path of ``folder/name`` holding exactly ``text``: an existing file is kept only if
    its bytes are ``text`` (read without following links), otherwise it is replaced
    atomically. ``name`` is a plain file name."""
    if os.path.basename(name) != name or name in ("", ".", ".."):
        raise ValueError(f"write_verified: {name!r} is not a plain file name")
    _check_private(folder)
    path = os.path.join(folder, name)
    data = text.encode("utf-8")
    if _holds(path, data):
        return path
    write_bytes(path, data)            # replaces a planted link itself, never its target
    if not _holds(path, data):
        raise KernelCacheError(f"kernel cache file {path!r} changed while it was written")
    return path


def _holds(path: str, data: bytes) -> bool:
    """Whether ``path`` is a regular file (not a link) whose bytes are ``data``."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return False
        return f.read(len(data) + 1) == data
