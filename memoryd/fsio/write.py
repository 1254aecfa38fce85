"""Writing: atomic replace, whole-line appends, removals and directories — confined like every read."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import cast

import structlog

from memoryd.fsio.read import list_dir
from memoryd.fsio.walk import (
    _NOFOLLOW,
    ChangedMeanwhile,
    NotRegularFile,
    SymlinkRefused,
    _open_child_dir,
    _open_parent,
    _refuse_link,
    fsync_dir,
)

log = structlog.get_logger("memoryd.fsio")


def make_dirs(path: Path, *, root: Path | None = None, mode: int = 0o755) -> None:
    """Create the directory ``path`` and its parents (below ``root`` without following a symlink)."""
    if root is None:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
        return
    if path == root:
        return
    fd, name = _open_parent(root, path, create=True)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=fd)
        os.close(_open_child_dir(fd, name, path))
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, root: Path | None = None, mode: int = 0o644, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new content, never a mix.

    Temp file in the same directory, fsync, ``os.replace``, fsync the directory. ``durable=False`` skips both
    fsyncs: for batches that call ``flush`` once afterwards, under an intent journal that can redo them. With
    ``root`` (a workspace), no symlink between ``root`` and ``path`` nor at ``path`` is followed (SymlinkRefused).
    """
    dir_fd, name = _open_parent(root, path, create=True)
    try:
        if root is not None:
            _refuse_link(dir_fd, name, path)
        tmp = f".{name[:200]}.{secrets.token_hex(6)}{TMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fchmod(f.fileno(), mode)
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if durable:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


TMP_SUFFIX = ".tmp"


def remove(path: Path, *, root: Path | None = None) -> bool:
    """Delete the file ``path`` (never a directory; a symlink is removed, not followed); False when it was
    already gone."""
    try:
        dir_fd, name = _open_parent(root, path, create=False)
    except FileNotFoundError:
        return False
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)
    return True


def remove_tree(path: Path, *, root: Path | None = None) -> None:
    """Delete the directory ``path`` and everything in it, never following a symlink (a symlinked ``path`` is
    refused); nothing when it is gone."""
    try:
        dir_fd, name = _open_parent(root, path, create=False)
    except FileNotFoundError:
        return
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise SymlinkRefused(errno.ENOTDIR, "not a directory; not removed", str(path))
        shutil.rmtree(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    finally:
        os.close(dir_fd)


def link_copy(path: Path, target: Path, *, root: Path) -> bool:
    """Make ``target`` a second name of the regular file ``path`` (a hard link: no bytes copied), for a copy that
    must keep the bytes ``path`` has now — safe only when ``path`` is then replaced atomically or deleted, never
    written in place. False (nothing done) when that cannot be: ``path`` is not a regular file of one name (a
    symlink is never followed), ``target`` exists, or the file system refuses links; the caller then copies."""
    src_fd, src = _open_parent(root, path, create=False)
    try:
        info = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return False
        dst_fd, dst = _open_parent(root, target, create=True)
        try:
            os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except OSError:
            return False
        finally:
            os.close(dst_fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(src_fd)
    return True


def rename(path: Path, target: Path, *, root: Path | None = None) -> None:
    """Rename ``path`` to ``target`` (both in the same directory tree below ``root``, no symlink followed on the
    way; the entry itself is moved, whatever it is)."""
    src_fd, src = _open_parent(root, path, create=False)
    try:
        dst_fd, dst = _open_parent(root, target, create=True)
        try:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def replace(path: Path, target: Path) -> None:
    """``os.replace`` for the daemon's own state files (an index swapped in whole)."""
    os.replace(path, target)


def open_lock_file(path: Path, *, root: Path | None = None) -> int:
    """A read-write descriptor of the lock file ``path``, created (0600) when missing; never through a symlink
    (below ``root``, none on the way either) and never blocking on a FIFO (O_NONBLOCK). The caller flocks it."""
    dir_fd, name = _open_parent(root, path, create=True)
    try:
        return os.open(name, os.O_RDWR | os.O_CREAT | _NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (0700) and its missing parents (0700); the daemon's runtime and state directories."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)


def remove_stale_temps(directory: Path, older_than_s: float, *, root: Path | None = None) -> int:
    """Remove the ``.<name>.<random>.tmp`` files an atomic write left in ``directory`` when the process was killed
    (kill -9, a power cut) and that are older than ``older_than_s``; returns how many."""
    removed = 0
    cutoff = time.time() - older_than_s
    for name, kind in list_dir(directory, root=root):
        if kind != "file" or not _TEMP_NAME.fullmatch(name):
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            if os.stat(path, follow_symlinks=False).st_mtime < cutoff and remove(path, root=root):
                removed += 1
    return removed


_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}" + re.escape(TMP_SUFFIX))


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


def append_line(path: Path, line: bytes, *, root: Path | None = None) -> None:
    """Append one whole line with a single ``write`` on O_APPEND, then fsync (docs/reference/architecture.md, data safety).

    A file whose last line is torn (no newline) gets one first, so the torn line is not glued to this one. A write
    or fsync that fails (a full disk: ENOSPC, EDQUOT, EFBIG) cuts the file back to its size before, so no torn
    line of ours is left behind, and the error is raised. With ``root``, no symlink on the way or at ``path`` is
    followed (SymlinkRefused).
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    with _append_lock(path):  # one append at a time per file: cutting back must never cut another's line
        _append(path, line, root)


def _append(path: Path, line: bytes, root: Path | None) -> None:
    dir_fd, name = _open_parent(root, path, create=True)
    try:
        try:
            fd = os.open(
                name,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                raise NotRegularFile(exc.errno, "not a regular file (or a symlink)", str(path)) from None
            raise
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
        if size == 0:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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


def append_block(
    path: Path, data: bytes, expect: tuple[int, int, int] | None, *, root: Path | None = None
) -> os.stat_result:
    """Append ``data`` (whole lines) to ``path`` with one ``write`` on O_APPEND, then fsync; returns the file's
    stat afterwards. The bytes already in the file are never rewritten: a crash can at worst leave a torn tail of
    ``data``, never damage what was there.

    ``expect`` is the (inode, size, mtime_ns) the caller planned on, checked on the open descriptor before writing
    (:class:`ChangedMeanwhile` when it differs); None means the file must not exist yet (created with O_EXCL, the
    directory fsynced after). With ``root``, no symlink on the way or at ``path`` is followed.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW
    dir_fd, name = _open_parent(root, path, create=False)
    try:
        return _append_block(dir_fd, name, path, data, expect, flags)
    finally:
        os.close(dir_fd)


def _append_block(
    dir_fd: int, name: str, path: Path, data: bytes, expect: tuple[int, int, int] | None, flags: int
) -> os.stat_result:
    try:
        fd = os.open(name, flags | (os.O_CREAT | os.O_EXCL if expect is None else 0), 0o644, dir_fd=dir_fd)
    except FileExistsError as exc:
        raise ChangedMeanwhile(errno.EEXIST, "created meanwhile", str(path)) from exc
    except FileNotFoundError as exc:
        raise ChangedMeanwhile(errno.ENOENT, "removed meanwhile", str(path)) from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO):
            raise NotRegularFile(exc.errno, "not a regular file (or a symlink)", str(path)) from None
        raise
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
        os.fsync(dir_fd)
    return after
