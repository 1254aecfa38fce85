"""The only code that writes files: atomic replace, whole-line JSONL appends, path confinement (docs/reference/architecture.md)."""

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

from memoryd.errors import AppError

log = structlog.get_logger("memoryd.fsio")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- confinement: a workspace's files are reached from its root without following a symlink ----------------------
#
# A workspace arrives by git clone, and git commits symlinks: ``data/memory/backups -> /etc`` or
# ``runs/x/observations.jsonl -> ../other-project/...``. Every read and write of a file the daemon keeps in a
# workspace (journal, history, backups, sidecars, compile state, evidence, rules, daily files) therefore goes
# through ``root=``: the path is walked component by component from the workspace root with ``O_NOFOLLOW`` on
# directory descriptors (``openat``), so neither a symlinked directory on the way nor a symlink at the end is
# followed, and nothing can swap one in between a check and the use. Paths that come *from* a file (a journal
# record, a history line) are checked lexically first by :func:`member`.

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# The trees of a workspace the daemon may write (docs/reference/files.md): nothing else, never ``.git/``.
WORKSPACE_TREES = ("memory", "spec/memory", "data/memory", "runs")


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


class SymlinkRefused(NotRegularFile):
    """A symlink (or something that is not a directory) where a workspace path needs a real directory or file:
    never followed, so a cloned repository cannot point the daemon's reads or writes elsewhere."""


def member(root: Path, rel: object, *, trees: tuple[str, ...] = WORKSPACE_TREES) -> Path:
    """``root / rel`` for a workspace-relative path that came from a file (a journal record, a history line, a
    tombstone), after proving it lexically harmless: a non-empty string, relative, no NUL, no ``.``/``..``/empty
    component, no backslash, inside one of ``trees``. Raises MEMORY_PATH_TRAVERSAL otherwise. Symlinks are the
    business of the ``root=`` readers and writers, which never follow them."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        raise AppError("MEMORY_PATH_TRAVERSAL", f"Refused a recorded path: {str(rel)[:200]!r}")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts) or len(os.fsencode(rel)) >= PATH_MAX:
        raise AppError("MEMORY_PATH_TRAVERSAL", f"Refused a recorded path: {rel[:200]!r}")
    if not any(rel.startswith(tree + "/") for tree in trees):
        raise AppError(
            "MEMORY_PATH_TRAVERSAL",
            f"Refused a recorded path outside {', '.join(t + '/' for t in trees)}: {rel[:200]!r}",
        )
    return root / rel


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise AppError("MEMORY_PATH_TRAVERSAL", f"{path} is not inside {root}") from None
    if not parts or any(part in (".", "..") for part in parts):
        raise AppError("MEMORY_PATH_TRAVERSAL", f"{path} is not a file inside {root}")
    return parts


def _open_parent(root: Path | None, path: Path, *, create: bool) -> tuple[int, str]:
    """A descriptor of ``path``'s directory and the last component of ``path``. With ``root``: reached from
    ``root`` one component at a time without following a symlink (SymlinkRefused), directories created on the way
    when ``create``. Without: the directory as the path names it (the daemon's own state dir, trusted)."""
    if root is None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path.parent, _DIR_FLAGS), path.name
    parts = _parts(root, path)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = _open_child_dir(fd, part, path)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise SymlinkRefused(exc.errno, f"{part} is a symlink or not a directory", str(path)) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _open_child_dir(fd: int, part: str, path: Path) -> int:
    try:
        return os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise SymlinkRefused(exc.errno, f"{part} is a symlink or not a directory", str(path)) from None
        raise


def _refuse_link(dir_fd: int, name: str, path: Path) -> None:
    """SymlinkRefused when ``name`` in ``dir_fd`` is a symlink (a write must not replace a committed link blindly,
    nor write through it)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise SymlinkRefused(errno.ELOOP, "a symlink; not followed", str(path))


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


class ChangedMeanwhile(OSError):
    """The file is not in the state the caller planned its append on (someone else wrote it meanwhile)."""


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
