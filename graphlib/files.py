"""Files written whole or not at all: ``atomic_write`` (checkpoints, graph files).

The data goes to a temporary file beside the target (``.<name>.<12 hex>.tmp``, created with
``O_EXCL | O_NOFOLLOW``), is fsynced, and is renamed over the target, so a crash leaves the
old file or the new one, never half of one. The new file keeps the replaced file's
permission bits. A writer holds an ``flock`` on its temporary file; the next write of the
same target removes temporaries that killed writers left, but only ours (by name pattern),
regular files of this user, untouched for ``stale_seconds`` and not locked by a live writer.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
import time
from typing import BinaryIO, Callable, Optional

STALE_TEMP_SECONDS = 600.0


def _temporary_pattern(basename: str) -> "re.Pattern[str]":
    return re.compile(re.escape(f".{basename}.") + r"[0-9a-f]{12}\.tmp\Z")


def _remove_stale_temporaries(directory: str, basename: str, stale_seconds: float) -> None:
    """Remove what killed saves of ``basename`` left in ``directory``: files named like our
    temporaries of that target, regular files of this user, untouched for
    ``stale_seconds``, and not locked by a writer that is still alive."""
    pattern = _temporary_pattern(basename)
    now = time.time()
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not pattern.match(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (not stat.S_ISREG(info.st_mode) or (uid is not None and info.st_uid != uid)
                or now - info.st_mtime < stale_seconds):
            continue
        _remove_unless_locked(entry.path)


def _remove_unless_locked(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        if _try_lock(fd):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; True where there is no flock."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:   # file systems without locks: the age alone decides
        return True
    return True


def atomic_write(path: str, write: Callable[[BinaryIO], None],
                 stale_seconds: float = STALE_TEMP_SECONDS) -> None:
    """Write a temporary file beside ``path`` with ``write``, fsync it, and rename it over
    ``path``; on any failure the temporary file is removed and ``path`` is untouched. The
    replaced file's mode (and owner, where allowed) carries over; temporaries that killed
    writes of the same target left behind are removed first (see the module docstring)."""
    target = os.path.realpath(path)   # write through a symlink, as open() would
    directory = os.path.dirname(target) or "."
    basename = os.path.basename(target)
    _remove_stale_temporaries(directory, basename, stale_seconds)
    try:
        existing: Optional[os.stat_result] = os.stat(target)
    except OSError:
        existing = None
    while True:
        temporary = os.path.join(directory, f".{basename}.{secrets.token_hex(6)}.tmp")
        try:
            # 0600 while writing when the target exists (its own bits are set below);
            # a new file gets the usual 0666 less the umask.
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0),
                         0o600 if existing is not None else 0o666)
            break
        except FileExistsError:
            continue
    try:
        _try_lock(fd)   # tells cleaners of stale temporaries that this writer is alive
        if existing is not None:
            _copy_mode(fd, existing)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def _copy_mode(fd: int, existing: os.stat_result) -> None:
    """Give the new file the replaced file's permission bits (and owner and group where this
    process may: as root, or a group it belongs to)."""
    if hasattr(os, "fchown") and (hasattr(os, "getuid")
                                  and (existing.st_uid, existing.st_gid)
                                  != (os.getuid(), os.getgid())):
        try:
            os.fchown(fd, existing.st_uid, existing.st_gid)
        except OSError:
            pass
    try:
        os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    except (OSError, AttributeError):
        pass


def _fsync_directory(directory: str) -> None:
    """Make the rename durable where the platform allows opening directories (POSIX)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
