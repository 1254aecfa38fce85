"""One workspace's note index: documents / chunks / chunks_fts (FTS5, contentless) in one SQLite file.

What is indexed, and how a file becomes rows, is :mod:`memoryd.store.prepare`. Incremental by (mtime, size) then
sha256. A schema, chunker or text-processing version change, or a corrupt or missing file, triggers a rebuild; a
full rebuild writes ``index.sqlite.new`` and swaps it in with ``os.replace`` so a search never sees half an index.
Reads run side by side, each thread on its own connection (:mod:`memoryd.store.readers`); the swap waits for the
reads in flight and the next ones read the new file, so a search never fails during a rebuild. A read or write
that meets a damaged file raises :class:`IndexCorrupted`, and :meth:`NoteIndex.check_file` notices a file
deleted, replaced or overwritten under the open connections: the caller rebuilds (:mod:`memoryd.notes.healing`).
Blocking: call from a worker thread, never from the event loop.

This module holds the connections and their lifecycle (open, check, heal by rebuild, swap, merge); a write pass
over a connection is :mod:`memoryd.store.sync`, and what the index answers (search, the adaptive stop list, the
small read queries) is :mod:`memoryd.store.queries`.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import apsw
import structlog

from memoryd import fsio
from memoryd.store import queries
from memoryd.store.migrations import UnknownMigrations
from memoryd.store.queries import PRUNE_MIN_CHUNKS, Hit
from memoryd.store.readers import (
    DAMAGE_ERRORS,
    IndexCorrupted,
    IndexUnavailable,
    ReaderPool,
    file_problem,
)
from memoryd.store.schema import MIGRATIONS, rebuilt_from, versions
from memoryd.store.sync import Signature, SyncPass, SyncReport, replace_tail
from memoryd.text import textindex

__all__ = ["Hit", "NoteIndex", "SyncReport"]  # what other modules import from here

log = structlog.get_logger("memoryd.index")

MERGE_STEP_PAGES = 256


def _connect(path: Path, *, readonly: bool = False) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(5000)
    return conn


class NoteIndex:
    """The index file of one workspace. Thread-safe: one writer at a time (the write lock), any number of readers
    (a read connection per thread, under the readers' shared lock, which only a swap or close takes exclusively)."""

    def __init__(
        self, root: Path, db_path: Path, *, chunk_max_lines: int = 40, max_file_bytes: int = 8 * 1024 * 1024
    ) -> None:
        self.root = root
        self.db_path = db_path
        self.chunk_max_lines = chunk_max_lines
        self.max_file_bytes = max_file_bytes  # larger files are not read, not indexed, and reported in refused
        # Files named like memory files that indexing left out, with why (a FIFO, a device, a symlink loop or
        # dangling, over max_file_bytes, unreadable): replaced whole by each sync, never changed in place.
        self.refused: dict[str, str] = {}
        self._write_lock = threading.Lock()
        # Read connections, one per thread; their lock is taken exclusively only to swap or close the file.
        self._readers = ReaderPool(lambda: _connect(self.db_path, readonly=True))
        self._writer: apsw.Connection | None = None
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the connections have open
        self.damaged: str | None = None  # why the open file needs a rebuild (a read or write met a damaged file)
        self.last_indexed: float | None = None
        self._chunk_count = 0  # kept current after every write: count(*) costs ms at 100k chunks
        self._frequencies = queries.Frequencies()
        self.last_rebuild_reason: str | None = None
        self.last_write = time.monotonic()  # when a sync last changed the index, or it was rebuilt
        self.merge_pending = False  # segments to merge (merge_step): after a rebuild, or found at open
        self._merging = False

    # --- lifecycle ----------------------------------------------------------------------------------------

    def open(self) -> str | None:
        """Open the index; returns why it had to be rebuilt (None when it was usable as is)."""
        with self._write_lock:
            fsio.make_private_dir(self.db_path.parent)
            reason = self._check_usable()
            if reason is not None:
                self._rebuild_locked(reason)
            else:
                self._open_connections()
                # segments a rebuild left unmerged when the daemon stopped, or that writes added since: merged
                # once idle, as after a rebuild
                self.merge_pending, self._merging = self.segments() > 1, False
            return reason

    def close(self) -> None:
        with self._write_lock, self._readers.lock.exclusive():
            self._close_connections(open_after=False)

    def _close_connections(self, *, open_after: bool) -> None:
        """Close the writer and every reader. Under the write lock and the readers' exclusive lock."""
        self._readers.reset(open_after=open_after)
        if self._writer is not None:
            with contextlib.suppress(apsw.Error):  # a broken file: the connection is dropped either way
                self._writer.close()
        self._writer = None

    def drop(self) -> None:
        self.close()
        _unlink(self.db_path, ("", "-wal", "-shm", ".new"))

    def _check_usable(self) -> str | None:
        if not self.db_path.exists():
            return "missing"
        try:
            conn = _connect(self.db_path)
            try:
                rows = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
                if rows != versions(self.chunk_max_lines):
                    return "version_changed"
                (check,) = conn.execute("PRAGMA quick_check").fetchone() or ("?",)
                if check != "ok":
                    return "corrupt"
                conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'probe'").fetchall()
                MIGRATIONS.apply(conn, None)  # a file from before the scheme is adopted; in-place ones run
            except UnknownMigrations:  # written by a newer version
                return "version_changed"
            finally:
                conn.close()
        except apsw.Error:
            return "corrupt"
        return None

    def _open_connections(self) -> None:
        """(Re)open the writer; readers reopen on their next read. Under the write lock."""
        with self._readers.lock.exclusive():
            self._close_connections(open_after=True)
            self._open_writer()

    def _open_writer(self) -> None:
        writer = _connect(self.db_path)
        try:
            writer.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            self._chunk_count = int(writer.execute("SELECT count(*) FROM chunks").fetchone()[0])  # type: ignore[index]
        except apsw.Error:
            writer.close()
            raise
        self._writer = writer
        info = os.stat(self.db_path)
        self._file_id = (info.st_dev, info.st_ino)
        self.damaged = None

    def check_file(self, *, header: bool = True) -> str | None:
        """Why the open index file needs a rebuild, cheaply (a stat, and a 16-byte read when ``header``): "missing"
        (deleted while open), "replaced" (another file at its path), "corrupt" (not a SQLite header, or a read or
        write met a damaged page); None when it looks sound or is not open."""
        with self._readers.lock.shared():
            if not self._readers.is_open or self._file_id is None:
                return None
            if self.damaged is not None:
                return self.damaged
            return file_problem(self.db_path, self._file_id, header=header)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[apsw.Connection | None]:
        """This thread's read connection under the shared lock (None while closed); a damaged file raises
        :class:`IndexCorrupted` and is flagged for a rebuild."""
        with self._readers.lock.shared():
            try:
                yield self._readers.get()
            except DAMAGE_ERRORS as exc:
                self.damaged = "corrupt"
                log.warning("index_damaged", root_digest=_digest(str(self.root)), error=type(exc).__name__)
                raise IndexCorrupted("corrupt", type(exc).__name__) from exc
            except apsw.CantOpenError as exc:  # a thread's first read of a file deleted since it was opened
                raise IndexCorrupted("missing", type(exc).__name__) from exc
            except apsw.IOError as exc:  # say a directory now stands at its path: status reports it, not a crash
                raise IndexCorrupted("unreadable", type(exc).__name__) from exc

    def readers(self) -> int:
        """How many read connections are open (one per thread that has searched since the last swap)."""
        return self._readers.count()

    # --- writing ------------------------------------------------------------------------------------------

    def rebuild(self, reason: str = "requested", progress: Callable[[int, int], None] | None = None) -> SyncReport:
        with self._write_lock:
            return self._rebuild_locked(reason, progress)

    def _rebuild_locked(self, reason: str, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        started = time.perf_counter()
        fresh = Path(str(self.db_path) + ".new")
        _unlink(fresh, ("", "-wal", "-shm", "-journal"))
        conn = _connect(fresh)
        try:
            conn.execute("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-131072;")
            with conn:  # one transaction: a dozen schema statements each in their own cost ~3 ms
                MIGRATIONS.apply(conn, None, self._rebuild_records(reason))
                conn.executemany("INSERT INTO meta(key, value) VALUES(?, ?)", versions(self.chunk_max_lines).items())
            report = self._sync_into(conn, None, progress)
            # Each bulk insert left an FTS5 segment (a multi-row INSERT flushes FTS5's pending terms). A query
            # reads every segment, so they are merged into one, but afterwards, in steps (merge_step): the index
            # is complete and searchable without it, and merging at once here cost ~8% of a rebuild.
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
        fd = os.open(fresh, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # The swap: no reader is inside a read meanwhile (they wait on the shared lock, then read the new file).
        with self._readers.lock.exclusive():
            self._close_connections(open_after=True)
            _unlink(self.db_path, ("-wal", "-shm"))
            fsio.replace(fresh, self.db_path)
            self._open_writer()
        self._frequencies.clear()
        self.merge_pending, self._merging = True, False
        report.rebuilt = True
        report.rebuild_reason = reason
        report.ms = round((time.perf_counter() - started) * 1000, 2)
        self.last_indexed = time.time()
        self.last_write = time.monotonic()
        self.last_rebuild_reason = reason
        log.info(
            "index_rebuilt",
            root_digest=_digest(str(self.root)),
            reason=reason,
            files=report.files_indexed,
            ms=report.ms,
            **{f"{phase}_ms": ms for phase, ms in report.phases.items()},
        )
        return report

    def _rebuild_records(self, reason: str) -> list[str]:
        """What a rebuild for ``reason`` records in the new file: the versions of the old one that differed."""
        if reason != "version_changed":
            return []
        try:
            conn = _connect(self.db_path, readonly=True)
            try:
                stored = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
            finally:
                conn.close()
        except apsw.Error:
            return []
        return rebuilt_from(stored, self.chunk_max_lines)

    def sync(
        self, paths: Iterable[str] | None = None, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Bring the index up to date: every file (``paths`` None) or just these relative paths."""
        started = time.perf_counter()
        with self._write_lock:
            if self._writer is None:
                raise IndexUnavailable("index is not open")
            with self._damage_raises():
                report = self._sync_into(self._writer, None if paths is None else set(paths), progress)
            self._chunk_count += report.chunk_delta  # count(*) costs milliseconds at 100k chunks
        if report.files_indexed or report.files_removed:
            self.last_write = time.monotonic()
        report.ms = round((time.perf_counter() - started) * 1000, 2)
        self.last_indexed = time.time()
        return report

    def _sync_into(
        self, conn: apsw.Connection, only: set[str] | None, progress: Callable[[int, int], None] | None
    ) -> SyncReport:
        """One write pass (:class:`~memoryd.store.sync.SyncPass`) over ``conn``; then notes what it refused."""
        sync = SyncPass(conn, self.root, self.chunk_max_lines, self.max_file_bytes)
        report = sync.run(only, progress)
        self._note_refused(sync.refused, only)
        return report

    def index_section(
        self,
        rel: str,
        section: str,
        first_line: int,
        before: Signature,
        after: Signature,
    ) -> bool:
        """Index what an append changed without reading or re-chunking the rest of the file: ``section`` is the
        file's text from line ``first_line`` (1-based) to its end, where ``first_line`` starts the file's last
        ``## `` block before the append (outside any fence) or is 1. The chunks that started there or later are
        replaced by ``section``'s; earlier blocks' chunks cannot change, as they end before a heading that is still
        a heading. ``before`` and ``after`` are the file's (mtime_ns, size, sha256) before and after the append.

        Returns False, changing nothing, when the index's row for ``rel`` does not hold ``before`` (the index was
        behind, or the file changed): the caller then syncs the whole file.
        """
        with self._write_lock, self._damage_raises():
            if self._writer is None:
                return False
            delta = replace_tail(self._writer, rel, section, first_line, before, after, self.chunk_max_lines)
            if delta is None:
                return False
            self._chunk_count += delta
        self.last_write = time.monotonic()
        self.last_indexed = time.time()
        return True

    @contextlib.contextmanager
    def _damage_raises(self) -> Iterator[None]:
        """A write that finds the file damaged marks it so (the indexer heals it) and raises IndexCorrupted."""
        try:
            yield
        except DAMAGE_ERRORS as exc:
            self.damaged = "corrupt"
            raise IndexCorrupted("corrupt", type(exc).__name__) from exc

    def _note_refused(self, refused: dict[str, str], only: set[str] | None) -> None:
        """Replace :attr:`refused` with what this sync found (for ``only``, just those paths), logging each new one
        once (paths and reasons only)."""
        before = self.refused
        for rel, reason in refused.items():
            if before.get(rel) != reason:
                log.warning("file_refused", root_digest=_digest(str(self.root)), path=rel, reason=reason)
        if only is None:
            self.refused = refused
        else:
            self.refused = {rel: reason for rel, reason in before.items() if rel not in only} | refused

    def merge_step(self, pages: int = MERGE_STEP_PAGES) -> bool:
        """Merge the index's FTS5 segments a step towards one (after a rebuild, or an open that found several):
        what ``optimize`` does at once, in steps of about ``pages`` FTS pages, each holding the write lock briefly
        (~16 ms at 256 on the 50 MB index, 19 steps). Returns whether more remains.

        A query looks up each term in every segment: at 1 MB, targeted searches ran ~3× faster on one segment
        than on the five a rebuild leaves."""
        with self._write_lock:
            if self._writer is None:
                self.merge_pending = self._merging = False
            if not self.merge_pending or self._writer is None:
                return False
            before = self._writer.total_changes()
            # Negative the first time, so that every segment joins the merge; positive after, so that a segment
            # written meanwhile does not restart it (FTS5's documented way to optimize incrementally). Less than
            # two changes: nothing was left to merge.
            step = pages if self._merging else -pages
            try:
                self._writer.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES('merge', ?)", (step,))
            except apsw.Error as exc:  # only search speed depends on it: give up, searches read every segment
                if isinstance(exc, DAMAGE_ERRORS):
                    self.damaged = "corrupt"
                log.warning("index_merge_failed", root_digest=_digest(str(self.root)), error=type(exc).__name__)
                self.merge_pending = self._merging = False
                return False
            self._merging = self._writer.total_changes() - before >= 2
            self.merge_pending = self._merging
            return self.merge_pending

    # --- reading ------------------------------------------------------------------------------------------

    def idf(self, tokens: list[str]) -> dict[str, float]:
        """Each token's inverse document frequency over the chunks, as BM25 weighs it (``ln(1 + (N - n + 0.5) /
        (n + 0.5))``; a token no chunk holds as one held once). Frequencies are cached as :meth:`prune` caches them."""
        total = self._chunk_count
        df = self._frequencies_of(tokens, total)
        # a word no chunk holds weighs as one held once: the question's words the notes lack count against a passage
        # as much as the rarest they hold, not more (in a small workspace every word they hold is "common")
        held = {t: max(df[t], 1) for t in tokens}
        return {t: math.log(1 + (total - held[t] + 0.5) / (held[t] + 0.5)) for t in tokens}

    def prune(self, terms: list[textindex.Term]) -> list[textindex.Term]:
        """Drop very common single-word terms when a rarer word that occurs remains (an adaptive stop list).

        An OR query must score every row that matches any term; a word in a fifth of all chunks makes that
        tens of thousands of rows at 100k chunks, while its BM25 weight (idf) is close to nothing. Identifier
        and phrase terms are always kept, and so are unknown words (document frequency 0: they cost nothing and
        match nothing). A common word is only dropped for a rarer word that does occur; when every word that
        occurs is common, the two rarest are kept, so a query with one known word always finds it. Small
        indexes are not pruned: they are fast anyway.
        """
        total = self._chunk_count
        if total < PRUNE_MIN_CHUNKS:
            return terms
        df = self._frequencies_of([t.token for t in terms if t.token is not None], total)
        return queries.prune(terms, df, total)

    def _frequencies_of(self, tokens: list[str], total: int) -> dict[str, int]:
        """The document frequencies of ``tokens``: from the cache when it holds them all, else those it lacks read
        (:class:`queries.Frequencies`)."""
        known = self._frequencies.known(tokens, total)
        if known is not None:
            return known
        with self._reading() as reader:
            if reader is None:
                raise IndexUnavailable("index is not open")
            return self._frequencies.of_tokens(reader, tokens, total)

    def search(self, match: str, limit: int, paths: list[str] | None = None, exclude: str | None = None) -> list[Hit]:
        """The best ``limit`` chunks for ``match``; with ``paths``, among those files' chunks only; with
        ``exclude``, none of the files under that path prefix."""
        with self._reading() as reader:
            if reader is None:
                raise IndexUnavailable("index is not open")
            return queries.search(reader, match, limit, paths, exclude)

    def is_current(self, rel: str) -> bool:
        """Whether the index holds ``rel`` as the file is now (its mtime and size), or holds nothing of a file that
        is gone: a change the watcher reports after the index took it in (remember's own write) is not pending."""
        with self._reading() as reader:
            return reader is not None and queries.is_current(reader, self.root, rel)

    def documents(self) -> dict[str, str]:
        """path → sha256 of every indexed file."""
        with self._reading() as reader:
            return {} if reader is None else queries.documents(reader)

    def listing(self, prefix: str) -> list[tuple[str, int, int]]:
        """(path, size, mtime_ns) of the indexed files under ``prefix``."""
        with self._reading() as reader:
            return [] if reader is None else queries.listing(reader, prefix)

    def sections(self, path: str) -> list[tuple[int, int, str, str]]:
        """The chunks of one indexed file, in order: (start_line, end_line, heading, text)."""
        with self._reading() as reader:
            return [] if reader is None else queries.sections(reader, path)

    def counts(self) -> tuple[int, int]:
        with self._reading() as reader:
            return (0, 0) if reader is None else queries.counts(reader)

    def segments(self) -> int:
        """How many FTS5 segments the index has (1 once a rebuild's have been merged; writes add more, which FTS5
        merges as they accumulate)."""
        with self._reading() as reader:
            return 0 if reader is None else queries.segments(reader)

    def dirty_files(self) -> list[str]:
        """Files whose (mtime, size) differ from the index, plus indexed files that are gone."""
        with self._reading() as reader:
            if reader is None:
                return []
            known = queries.signatures(reader)
        return queries.dirty(known, self.root, self.max_file_bytes, self.refused)


def _unlink(path: Path, suffixes: tuple[str, ...]) -> None:
    """Remove a database file and/or its sidecars (``-wal``, ``-shm``, …), whichever exist."""
    for suffix in suffixes:
        fsio.remove(Path(str(path) + suffix))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
