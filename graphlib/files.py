"""Every file duograph writes or reads goes through here.

Writing: ``atomic_write`` (and ``write_bytes`` / ``write_text`` over it) is the one writer of
checkpoints, graph files, ONNX models, ``dg.compare`` reports and plots, command outputs,
pictures and the kernel cache. The data goes to a temporary file beside the target
(``.<name>.<12 hex>.tmp``, created with ``O_EXCL | O_NOFOLLOW``), is fsynced, and is renamed
over the target, so a crash leaves the old file or the new one, never half of one. Links are
never followed: a symlink (or a hard link) planted under the target's name is replaced by the
new file, and the file it pointed to is left untouched. The new file keeps the replaced
regular file's permission bits. A writer holds an ``flock`` on its temporary file; the next
write of the same target removes temporaries that killed writers left, but only ours (by name
pattern), regular files of this user, untouched for ``stale_seconds`` and not locked by a live
writer.

Reading: ``open_regular`` opens a file only if it is a regular file, and never blocks doing
so (a FIFO, a device such as ``/dev/zero``, a socket is refused at once with
``NotRegularFileError``; a directory with ``IsADirectoryError``), so a reader can trust the
size ``fstat`` gives and check a length prefix against it before reading.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import time
from typing import BinaryIO, Callable, Optional, Union

try:
    import fcntl
except ImportError:     # not on Windows: no flock, no fcntl flags
    fcntl = None

STALE_TEMP_SECONDS = 600.0
# The largest header (JSON) duograph's safetensors files may have: checkpoints and graph
# files. Parsing JSON in Python costs about 20 bytes of memory per byte of text (a crafted
# 78 MB header took 24 s and 1.6 GB to reject), so readers refuse a longer header from its
# 8-byte length prefix, before reading it, and writers refuse to write one. safetensors
# itself allows 100 MB; 16 MiB holds the table of some 60,000 tensors.
MAX_HEADER_BYTES = 16 << 20

PathLike = Union[str, "os.PathLike[str]"]


class NotRegularFileError(OSError):
    """A file to read is a FIFO, a device, a socket or another kind of non-regular file;
    ``kind`` says which ("a FIFO (named pipe)", "a character device"...)."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path!r} is {kind}, not a regular file: refused without reading it")
        self.path = path
        self.kind = kind


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _refuse_non_regular(path: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    raise NotRegularFileError(path, _kind(mode))


def open_regular(path: PathLike) -> BinaryIO:
    """``path`` opened for reading in binary mode, if it is a regular file (links in the path
    are followed, as ``open`` does). Anything else is refused before a byte is read and
    without blocking: ``NotRegularFileError`` for FIFOs, devices and sockets,
    ``IsADirectoryError`` for directories; other ``OSError``s (``FileNotFoundError``...) as
    ``open`` raises them. The file is stat'ed before it is opened (opening a FIFO for reading
    waits for a writer; opening a device may act on it) and opened with ``O_NONBLOCK`` and
    fstat'ed again, so a file swapped in between is caught as well."""
    name = os.fspath(path)
    _refuse_non_regular(name, os.stat(name).st_mode)
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        _refuse_non_regular(name, os.fstat(fd).st_mode)
        _clear_nonblocking(fd)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _clear_nonblocking(fd: int) -> None:
    """Reads of a regular file do not depend on ``O_NONBLOCK``; cleared anyway, so the file
    object behaves as one ``open`` returned."""
    if fcntl is None:
        return
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if flags & os.O_NONBLOCK:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


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
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:   # file systems without locks: the age alone decides
        return True
    return True


def atomic_write(path: PathLike, write: Callable[[BinaryIO], None],
                 stale_seconds: float = STALE_TEMP_SECONDS) -> None:
    """Write a temporary file beside ``path`` with ``write``, fsync it, and rename it over
    ``path``; on any failure the temporary file is removed and ``path`` is untouched. A
    symlink at ``path`` is replaced, never followed (the directories on the way are followed,
    as ``open`` does). The replaced regular file's mode (and owner, where allowed) carries
    over; temporaries that killed writes of the same target left behind are removed first
    (see the module docstring)."""
    target = os.fspath(path)
    directory, basename = os.path.split(target)
    directory = directory or "."
    if not basename:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", target)
    _remove_stale_temporaries(directory, basename, stale_seconds)
    try:
        existing: Optional[os.stat_result] = os.lstat(target)
    except OSError:
        existing = None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", target)
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        existing = None      # a link (or a FIFO...) is replaced: nothing of it carries over
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


def write_bytes(path: PathLike, data: bytes,
                stale_seconds: float = STALE_TEMP_SECONDS) -> None:
    """Write ``data`` to ``path`` with ``atomic_write``."""
    atomic_write(path, lambda f: f.write(data), stale_seconds)


def write_text(path: PathLike, text: str, encoding: str = "utf-8",
               stale_seconds: float = STALE_TEMP_SECONDS) -> None:
    """Write ``text`` to ``path`` with ``atomic_write`` (encoded, newlines as given)."""
    write_bytes(path, text.encode(encoding), stale_seconds)


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
