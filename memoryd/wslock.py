"""One writer per workspace (docs/reference/architecture.md, data safety): ``memory/.memoryd.lock``, held with flock by the daemon that writes.

The file lives in ``memory/`` because the daemon writes nowhere else it is sure to be allowed (memory/,
spec/memory/, data/memory/, runs/) and because a hidden name there is skipped by the index, the watcher, ``get``
and ``validate``. flock belongs to the open file: a killed daemon releases it with its last descriptor, so a
stale lock is impossible and the file is never deleted (deleting it would let two daemons lock two different
files). The holder writes ``{"pid", "socket", "home", "since"}`` into it so others can say who holds it.

If ``memory/`` is deleted and re-created while held, the held file is no longer the one at the path; every
``try_acquire`` compares the two (device, inode) and locks the new file in that case.

All methods block (open, flock, stat): call them in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd.fsio import FileTooLarge, NotRegularFile, open_lock_file, read_regular

log = structlog.get_logger("memoryd.wslock")

LOCK_REL = "memory/.memoryd.lock"
_MAX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int | None
    socket: str | None
    home: str | None
    since: str | None


@dataclass(frozen=True, slots=True)
class LockProblem:
    """Why :meth:`WorkspaceLock.try_acquire` could not even try: ``workspace_gone`` when the workspace directory
    itself is missing or not a directory; ``reason`` for a person."""

    workspace_gone: bool
    reason: str


class WorkspaceLock:
    def __init__(self, root: Path, me: dict[str, Any]) -> None:
        """``me``: what the holder notes in the file (pid, socket, home); ``since`` is added when it takes it."""
        self.root = root
        self.path = root / LOCK_REL
        self._me = me
        self._fd: int | None = None
        self._mutex = threading.Lock()
        # Set by try_acquire when the lock file cannot be used as a lock at all (None: free, held, or busy)
        self.problem: LockProblem | None = None

    @property
    def held(self) -> bool:
        """Whether this daemon held the lock at its last ``try_acquire`` (no system call)."""
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Hold the lock (already held, or taken now without waiting); False when another process holds it."""
        with self._mutex:
            if self._fd is not None:
                if self._same_file(self._fd):
                    return True
                log.warning("workspace_lock_file_replaced", path=str(self.path))
                self._close()
            self.problem = None
            try:
                fd = open_lock_file(self.path, root=self.root)
            except OSError as exc:
                log.warning("workspace_lock_open_failed", path=str(self.path), error=exc.strerror)
                self.problem = self._unusable()
                return False
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    self.problem = self._unusable()
                    raise OSError("not a regular file")
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # BlockingIOError: someone else holds it
                os.close(fd)
                return False
            try:
                os.ftruncate(fd, 0)
                note = {**self._me, "since": datetime.now(UTC).isoformat(timespec="seconds")}
                os.pwrite(fd, orjson.dumps(note) + b"\n", 0)
            except OSError as exc:  # the lock is what matters; the note of who holds it is a courtesy
                log.warning("workspace_lock_note_failed", path=str(self.path), error=exc.strerror)
            self._fd = fd
            return True

    def _unusable(self) -> LockProblem:
        """Why the lock file cannot be opened as a lock at all (nobody holds it: there is nothing to hold)."""
        try:
            if not stat.S_ISDIR(os.stat(self.root).st_mode):
                return LockProblem(True, f"{self.root} is not a directory")
        except OSError as exc:
            return LockProblem(True, f"{self.root}: {exc.strerror}")
        memory = self.path.parent
        for path, rel in ((memory, "memory"), (self.path, LOCK_REL)):
            try:
                mode = os.stat(path, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                return LockProblem(False, f"{rel}: {exc.strerror}")
            want_dir = path == memory
            if stat.S_ISLNK(mode):
                return LockProblem(False, f"{rel} is a symlink")
            if want_dir and not stat.S_ISDIR(mode):
                return LockProblem(False, "memory is not a directory")
            if not want_dir and not stat.S_ISREG(mode):
                kind = (
                    "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
                )
                return LockProblem(False, f"{rel} is {kind}")
        return LockProblem(False, f"{LOCK_REL} cannot be opened for writing")

    def _same_file(self, fd: int) -> bool:
        try:
            held, current = os.fstat(fd), os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino)

    def holder(self) -> Holder:
        """Who wrote the lock file last (the holder, or the last holder when the lock is free)."""
        try:
            raw: Any = orjson.loads(read_regular(self.path, _MAX_BYTES, root=self.root))
        except (OSError, NotRegularFile, FileTooLarge, orjson.JSONDecodeError):
            raw = {}
        if not isinstance(raw, dict):
            raw = {}

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) else None

        pid = raw.get("pid")
        return Holder(pid if type(pid) is int else None, text("socket"), text("home"), text("since"))

    def release(self) -> None:
        with self._mutex:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
