"""Reading: only regular files, within a size, never blocking on a FIFO; directory listings that follow no link."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from memoryd.fsio.walk import (
    _DIR_FLAGS,
    _NOFOLLOW,
    FileTooLarge,
    NotRegularFile,
    SymlinkRefused,
    _open_parent,
)


def list_dir(path: Path, *, root: Path | None = None) -> list[tuple[str, str]]:
    """``(name, kind)`` of the entries of the directory ``path``, kind ``file``/``dir``/``link``/``other``, without
    following a symlink (below ``root``, none on the way either); empty when it does not exist or is refused."""
    try:
        dir_fd, name = _open_parent(root, path, create=False)
    except (FileNotFoundError, SymlinkRefused, NotADirectoryError):
        return []
    try:
        fd = os.open(name, _DIR_FLAGS | (_NOFOLLOW if root is not None else 0), dir_fd=dir_fd)
    except OSError:
        return []
    finally:
        os.close(dir_fd)
    out = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_symlink():
                    kind = "link"
                elif entry.is_dir(follow_symlinks=False):
                    kind = "dir"
                elif entry.is_file(follow_symlinks=False):
                    kind = "file"
                else:
                    kind = "other"
                out.append((entry.name, kind))
    finally:
        os.close(fd)
    return sorted(out)


def read_regular(path: Path, max_bytes: int, offset: int = 0, *, root: Path | None = None) -> bytes:
    """The bytes of the regular file ``path``, read through one descriptor that is proved to be a regular file
    before a byte is read. Without ``root`` symlinks are followed (callers that resolved and confined the path
    first); with ``root`` none is, on the way or at ``path`` (:class:`SymlinkRefused`).

    Checked with ``stat`` before the open, opened with ``O_NONBLOCK`` (a FIFO swapped in after the stat then
    opens at once instead of waiting for a writer) and checked again with ``fstat`` on that descriptor, so a path
    swapped between the two cannot slip through. Raises
    :class:`NotRegularFile` for anything but a regular file (symlink loops included), :class:`FileTooLarge` when
    it holds more than ``max_bytes`` (also when it grows past that while being read: at most ``max_bytes`` + 1
    bytes are ever read), and other ``OSError`` as they come. With ``offset``, the bytes from there on (what an
    append added since the last read); ``max_bytes`` then bounds those.
    """
    fd = _open_regular(path, root)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if info.st_size - offset > max_bytes:
            raise FileTooLarge(info.st_size - offset, max_bytes)
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            asked = min(remaining, 1 << 20)
            chunk = os.pread(fd, asked, offset)
            offset += len(chunk)
            chunks.append(chunk)
            remaining -= len(chunk)
            if len(chunk) < asked:  # a regular file's read is short only at its end: no second call to learn it
                break
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileTooLarge(len(data), max_bytes)
        return data
    finally:
        os.close(fd)


def _open_regular(path: Path, root: Path | None) -> int:
    """A read-only descriptor of ``path`` after ``stat`` says it is a regular file (opening a device can have
    effects of its own: a tape rewinds, a terminal becomes ours); with ``root``, reached without a symlink."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if root is None:
        dir_fd, name, follow = None, str(path), True
    else:
        dir_fd, name = _open_parent(root, path, create=False)
        flags |= _NOFOLLOW
        follow = False
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow)
        if stat.S_ISLNK(info.st_mode):
            raise SymlinkRefused(errno.ELOOP, "a symlink; not followed", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        return os.open(name, flags, dir_fd=dir_fd)
    except NotRegularFile:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # loop; socket or FIFO without reader; directory
            raise NotRegularFile(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def read_range(path: Path, offset: int, length: int, *, root: Path | None = None) -> bytes:
    """``length`` bytes of ``path`` from ``offset`` (fewer at the end of the file)."""
    fd = _open_regular(path, root)
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
