"""The only code that writes files: atomic replace, whole-line JSONL appends, path confinement (docs/reference/architecture.md)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import cast

import structlog

from memoryd.errors import AppError

log = structlog.get_logger("memoryd.fsio")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new content, never a mix.

    Temp file in the same directory, fsync, ``os.replace``, fsync the directory. ``durable=False`` skips both
    fsyncs: for batches that call ``flush`` once afterwards, under an intent journal that can redo them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def remove(path: Path) -> bool:
    """Delete the file ``path`` (never a directory); False when it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


@cache
def _syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2): flush one filesystem. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    return cast("Callable[[int], int]", function)


def flush(paths: Iterable[Path]) -> None:
    """Make earlier ``durable=False`` writes (and deletions) of ``paths`` durable.

    One syncfs per filesystem where Linux offers it (hundreds of files cost one call); otherwise an fsync of
    every file that exists and of every directory involved.
    """
    directories: dict[Path, int] = {}
    files = []
    for path in paths:
        files.append(path)
        with contextlib.suppress(OSError):
            directories.setdefault(path.parent, path.parent.stat().st_dev)
    syncfs = _syncfs()
    if syncfs is not None:
        done: set[int] = set()
        for directory, device in directories.items():
            if device in done:
                continue
            fd = os.open(directory, os.O_RDONLY)
            try:
                if syncfs(fd) == 0:
                    done.add(device)
            finally:
                os.close(fd)
        if len(done) == len(set(directories.values())):
            return
    for path in files:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for directory in directories:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(directory)


def append_line(path: Path, line: bytes) -> None:
    """Append one whole line with a single ``write`` on O_APPEND, then fsync (docs/reference/architecture.md, data safety).

    A file whose last line is torn (no newline) gets one first, so the torn line is not glued to this one. A write
    or fsync that fails (a full disk: ENOSPC, EDQUOT, EFBIG) cuts the file back to its size before, so no torn
    line of ours is left behind, and the error is raised.
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _append_lock(path):  # one append at a time per file: cutting back must never cut another's line
        _append(path, line)


def _append(path: Path, line: bytes) -> None:
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        size = info.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write: the disk filled up in the middle
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(line)} bytes")
            os.fsync(fd)
        except OSError:
            _cut_back(fd, size, path)
            raise
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


_APPEND_LOCKS = tuple(threading.Lock() for _ in range(64))  # striped: bounded, and one path always one lock


def _append_lock(path: Path) -> threading.Lock:
    return _APPEND_LOCKS[hash(str(path)) % len(_APPEND_LOCKS)]


def _cut_back(fd: int, size: int, path: Path) -> None:
    """After a failed append: truncate to ``size`` (what was there before), as far as the file system lets us."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError as exc:  # the torn line stays; readers skip and report a torn last line
        log.error("append_cut_back_failed", path=path.name, error=exc.strerror)


NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PATH_MAX = 4096  # bytes in a whole path with its NUL (Linux)


def within(root: Path, path: Path) -> Path | None:
    """``path`` resolved (symlinks followed; it need not exist) when that is ``root`` or inside it, else None —
    also when it cannot be resolved (a symlink loop, a name too long). ``root`` must already be resolved. The one
    check of "stays inside the workspace": ``confine``, the index's walk and ``validate`` all use it."""
    try:
        resolved = path.resolve(strict=False)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return None
    return resolved if resolved == root or root in resolved.parents else None


def confine(root: Path, relative: str, *, suffixes: tuple[str, ...] = (".md",)) -> Path:
    """Resolve ``relative`` (or an absolute path) and prove it stays inside ``root``.

    ``root`` must already be resolved. Refuses NUL bytes, escapes through ``..`` or symlinks, and files
    without an allowed suffix, with MEMORY_PATH_TRAVERSAL. The file need not exist.
    """
    if "\x00" in relative:
        raise AppError("MEMORY_PATH_TRAVERSAL", "Path contains a NUL byte")
    if not relative.strip():
        raise AppError("MEMORY_PATH_TRAVERSAL", "Path is empty")
    try:
        encoded = os.fsencode(relative)
    except UnicodeEncodeError as exc:  # a lone surrogate from JSON
        raise AppError("MEMORY_PATH_TRAVERSAL", "Path is not valid Unicode") from exc
    if len(encoded) >= PATH_MAX or any(len(part) > NAME_MAX for part in encoded.split(b"/")):
        raise AppError(
            "MEMORY_PATH_TRAVERSAL",
            f"Path too long: at most {NAME_MAX} bytes a component and {PATH_MAX - 1} in all",
        )
    candidate = Path(relative)
    resolved = within(root, candidate if candidate.is_absolute() else root / candidate)
    if resolved is None:
        raise AppError("MEMORY_PATH_TRAVERSAL")
    if resolved.suffix.lower() not in suffixes:
        raise AppError("MEMORY_PATH_TRAVERSAL", f"Only {', '.join(suffixes)} files can be read here")
    return resolved


class NotRegularFile(OSError):
    """The path names something other than a regular file (FIFO, device, socket, directory), or a symlink that
    loops or dangles: never opened for reading, so a FIFO cannot block a worker thread and a device cannot flood
    memory."""


class FileTooLarge(OSError):
    """A regular file larger than the caller's limit; nothing of it was read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


def read_regular(path: Path, max_bytes: int, offset: int = 0) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), read through one descriptor that is proved to
    be a regular file before a byte is read.

    Checked with ``stat`` before the open, opened with ``O_NONBLOCK`` (a FIFO swapped in after the stat then
    opens at once instead of waiting for a writer) and checked again with ``fstat`` on that descriptor, so a path
    swapped between the two cannot slip through. Raises
    :class:`NotRegularFile` for anything but a regular file (symlink loops included), :class:`FileTooLarge` when
    it holds more than ``max_bytes`` (also when it grows past that while being read: at most ``max_bytes`` + 1
    bytes are ever read), and other ``OSError`` as they come. With ``offset``, the bytes from there on (what an
    append added since the last read); ``max_bytes`` then bounds those.
    """
    try:
        # stat first: opening a device can have effects of its own (a tape rewinds, a terminal becomes ours)
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except NotRegularFile:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # loop; socket or FIFO without reader; directory
            raise NotRegularFile(exc.errno, exc.strerror, str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if info.st_size - offset > max_bytes:
            raise FileTooLarge(info.st_size - offset, max_bytes)
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.pread(fd, min(remaining, 1 << 20), offset)
            offset += len(chunk)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileTooLarge(len(data), max_bytes)
        return data
    finally:
        os.close(fd)


class ChangedMeanwhile(OSError):
    """The file is not in the state the caller planned its append on (someone else wrote it meanwhile)."""


def append_block(path: Path, data: bytes, expect: tuple[int, int, int] | None) -> os.stat_result:
    """Append ``data`` (whole lines) to ``path`` with one ``write`` on O_APPEND, then fsync; returns the file's
    stat afterwards. The bytes already in the file are never rewritten: a crash can at worst leave a torn tail of
    ``data``, never damage what was there.

    ``expect`` is the (inode, size, mtime_ns) the caller planned on, checked on the open descriptor before writing
    (:class:`ChangedMeanwhile` when it differs); None means the file must not exist yet (created with O_EXCL, the
    directory fsynced after).
    """
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if expect is None else 0), 0o644)
    except FileExistsError as exc:
        raise ChangedMeanwhile(errno.EEXIST, "created meanwhile", str(path)) from exc
    except FileNotFoundError as exc:
        raise ChangedMeanwhile(errno.ENOENT, "removed meanwhile", str(path)) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if expect is not None and (info.st_ino, info.st_size, info.st_mtime_ns) != expect:
            raise ChangedMeanwhile(errno.EAGAIN, "changed meanwhile", str(path))
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):  # a regular file takes it in one write; a full disk may take part, then raise
                done += os.write(fd, view[done:])
            os.fsync(fd)
        except OSError:
            # Take back what got in (only if nothing else was appended since), so a failed append leaves no torn
            # entry behind; the caller reports the failure.
            with contextlib.suppress(OSError):
                if done and os.fstat(fd).st_size == info.st_size + done:
                    os.ftruncate(fd, info.st_size)
            raise
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if expect is None:
        fsync_dir(path.parent)
    return after


def read_range(path: Path, offset: int, length: int) -> bytes:
    """``length`` bytes of ``path`` from ``offset`` (fewer at the end of the file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        parts = []
        while length > 0:
            part = os.pread(fd, min(length, 1 << 20), offset)
            if not part:
                break
            parts.append(part)
            offset += len(part)
            length -= len(part)
        return b"".join(parts)
    finally:
        os.close(fd)
