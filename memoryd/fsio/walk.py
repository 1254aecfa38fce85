"""Confinement: a workspace path walked from its root one directory at a time without following a symlink
(``openat`` with ``O_NOFOLLOW``), paths read from files checked lexically, and the errors every reader and writer
raises. See the package's docstring."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from memoryd.errors import AppError


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


class ChangedMeanwhile(OSError):
    """The file is not in the state the caller planned its append on (someone else wrote it meanwhile)."""
