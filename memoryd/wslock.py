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


class WorkspaceLock:
    def __init__(self, root: Path, me: dict[str, Any]) -> None:
        """``me``: what the holder notes in the file (pid, socket, home); ``since`` is added when it takes it."""
        self.root = root
        self.path = root / LOCK_REL
        self._me = me
        self._fd: int | None = None
        self._mutex = threading.Lock()

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
            try:
                fd = open_lock_file(self.path, root=self.root)
            except OSError as exc:
                log.warning("workspace_lock_open_failed", path=str(self.path), error=exc.strerror)
                return False
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
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
