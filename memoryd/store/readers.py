"""Read connections of one index file: one per worker thread, shared by nobody, all swapped at once.

datasette's model: each thread that reads gets its own read-only APSW connection (thread-local), so searches of
one workspace run side by side (SQLite releases the GIL while it works). A generation number changes whenever
the file is swapped or closed; a thread whose connection belongs to an older generation opens a new one.

The swap (a rebuild's ``os.replace``, ``close``) takes the lock exclusively, readers take it shared: a read
never sees a closed or half-swapped index, and every old connection is closed *before* the file is replaced
(closing the last connection to a WAL database removes the ``-wal`` file by name, which after a replace would
be the new file's).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw

_HEADER = b"SQLite format 3\x00"


# What SQLite raises for a file that is not (or no longer) a sound database: overwritten, truncated, damaged.
DAMAGE_ERRORS: tuple[type[apsw.Error], ...] = (apsw.CorruptError, apsw.NotADBError)


class IndexUnavailable(RuntimeError):
    """The index is closed (the workspace is being removed, or the daemon stops)."""


class IndexCorrupted(RuntimeError):
    """Reading the index file met a damaged database (flagged in ``NoteIndex.damaged`` for a rebuild), or could
    not open it at all (deleted while open: "missing"). ``reason`` is what a rebuild reports."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(f"{reason} ({error})")
        self.reason = reason


class SharedLock:
    """A readers-writer lock that prefers the writer: once ``exclusive`` waits, new readers wait behind it, so a
    stream of searches cannot starve a swap (which holds it for milliseconds)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class ReaderPool:
    """Thread-local read connections to one file. ``get`` only under ``lock.shared()``; ``reset`` only under
    ``lock.exclusive()``."""

    def __init__(self, connect: Callable[[], apsw.Connection]) -> None:
        self.lock = SharedLock()
        self._connect = connect
        self._local = threading.local()
        self._generation = 0
        self._open = False
        # Weak: a worker thread that exits drops its thread-local connection, and APSW closes it when collected.
        self._all: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
        self._all_lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._open

    def get(self) -> apsw.Connection | None:
        """This thread's connection (opened on first use or after a swap); None while the index is closed."""
        if not self._open:
            return None
        local = self._local
        conn: apsw.Connection | None = getattr(local, "conn", None)
        if conn is None or getattr(local, "generation", -1) != self._generation:
            conn = self._connect()
            with self._all_lock:
                self._all.add(conn)
            local.conn, local.generation = conn, self._generation
        return conn

    def reset(self, *, open_after: bool) -> None:
        """Close every thread's connection (they reopen on their next read when ``open_after``)."""
        with self._all_lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            with contextlib.suppress(apsw.Error):  # already closed or broken: it is being dropped either way
                conn.close()
        self._generation += 1
        self._open = open_after

    def count(self) -> int:
        with self._all_lock:
            return len(self._all)


def file_problem(path: Path, file_id: tuple[int, int], *, header: bool) -> str | None:
    """Whether the database file at ``path`` is still the one opened as ``file_id`` (st_dev, st_ino) and still
    starts as a SQLite file: "missing", "replaced", "corrupt" or None. A stat, and a 16-byte read when ``header``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "corrupt"
    if (info.st_dev, info.st_ino) != file_id:
        return "replaced"
    if header:
        try:  # a raw descriptor: no buffered file object (a search asks each time: ~5 µs, not ~20)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                start = os.pread(fd, len(_HEADER), 0)
            finally:
                os.close(fd)
        except OSError:
            return "corrupt"
        if start != _HEADER:
            return "corrupt"
    return None
