"""One workspace's note index: documents / chunks / chunks_fts (FTS5, contentless) in one SQLite file.

What is indexed, and how a file becomes rows, is :mod:`memoryd.store.prepare`. Incremental by (mtime, size) then
sha256. A schema, chunker or text-processing version change, or a corrupt or missing file, triggers a rebuild; a
full rebuild writes ``index.sqlite.new`` and swaps it in with ``os.replace`` so a search never sees half an index.
Reads run side by side, each thread on its own connection (:mod:`memoryd.store.readers`); the swap waits for the
reads in flight and the next ones read the new file, so a search never fails during a rebuild. A read or write
that meets a damaged file raises :class:`IndexCorrupted`, and :meth:`NoteIndex.check_file` notices a file
deleted, replaced or overwritten under the open connections: the caller rebuilds (:mod:`memoryd.notes.healing`).
Blocking: call from a worker thread, never from the event loop.

Indexing is preparation (:func:`~memoryd.store.prepare.prepare_text`) and SQLite inserts. Prepared rows travel as
JSON and go in with one ``INSERT … SELECT … FROM jsonb_each(?)`` per table and batch, so SQLite works a whole batch
with the GIL released; while it does, a worker thread prepares the next files
(:func:`~memoryd.store.prepare.batches`), which on two cores hides the inserts. Large rebuilds on three or more
cores also prepare in worker processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import orjson
import structlog

from memoryd import fsio
from memoryd.fsio import FileTooLarge, NotRegularFile, read_regular
from memoryd.store.migrations import UnknownMigrations
from memoryd.store.prepare import (
    PIPELINE_MIN_BYTES,
    batches,
    indexed_files,
    indexed_stats,
    pool_size,
    prepare_many,
    prepare_text,
)
from memoryd.store.readers import (
    DAMAGE_ERRORS,
    IndexCorrupted,
    IndexUnavailable,
    ReaderPool,
    file_problem,
)
from memoryd.store.schema import MIGRATIONS, rebuilt_from, versions
from memoryd.text import textindex

log = structlog.get_logger("memoryd.index")

PRUNE_MIN_CHUNKS = 1000
PRUNE_MAX_SHARE = 0.05
MERGE_STEP_PAGES = 256


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    score: float


@dataclass(slots=True)
class SyncReport:
    files_indexed: int = 0
    files_removed: int = 0
    files_unchanged: int = 0
    bytes_indexed: int = 0
    rebuilt: bool = False
    rebuild_reason: str | None = None
    ms: float = 0.0
    chunk_delta: int = 0  # chunks added minus chunks removed


_Changed = tuple[str, os.stat_result, str, str]  # a file to (re)index: path, stat, sha256, text


class _Progress:
    """A sync's progress for the caller's callback: reading the files is the first half, inserting the second."""

    def __init__(self, callback: Callable[[int, int], None] | None, files: int) -> None:
        self.callback, self.files, self.total = callback, files, files * 2

    def reading(self, number: int) -> None:
        if self.callback is not None and number % 50 == 0:
            self.callback(number - 1, self.total)

    def inserted(self, files: int, of: int) -> None:
        if self.callback is not None:
            self.callback(self.files + files * self.files // of, self.total)

    def done(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


def _encoded_size(prepared: tuple[int, bytes]) -> int:
    return len(prepared[1])


def _known_documents(conn: apsw.Connection) -> dict[str, tuple[int, int, int, str]]:
    """path → (doc_id, mtime_ns, size, sha256) of every indexed file."""
    return {
        str(path): (int(doc_id), int(mtime_ns), int(size), str(sha))
        for doc_id, path, mtime_ns, size, sha in conn.execute(
            "SELECT doc_id, path, mtime_ns, size, sha256 FROM documents"
        )
    }


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
        self._df_cache: dict[str, int] = {}
        self._df_basis = 0
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
        self._df_cache.clear()
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
        """One pass, in one transaction: find the files (every one, or ``only``), read those whose (mtime, size)
        differ from the index, remove the documents changed or gone, insert the changed ones."""
        report = SyncReport()
        refused: dict[str, str] = {}
        known = _known_documents(conn)
        present = self._present(only, refused)
        steps = _Progress(progress, len(present))
        with conn:
            changed, stale = self._read_changed(conn, known, present, refused, report, steps)
            gone = (set(known) - set(present)) if only is None else {p for p in only if p in known and p not in present}
            stale += [known[rel][0] for rel in gone]
            report.files_removed = len(gone)
            if stale:
                report.chunk_delta -= _delete_docs(conn, stale)
            self._insert_changed(conn, changed, report, steps)
            steps.done()
        self._note_refused(refused, only)
        return report

    def _present(self, only: set[str] | None, refused: dict[str, str]) -> dict[str, os.stat_result]:
        """relative path → stat of the files to index: the walk of every tree, or just ``only`` (what is not a
        file to index goes to ``refused`` with why)."""
        if only is None:
            return dict(indexed_files(self.root, refused))
        return indexed_stats(self.root, set(only), refused)

    def _read_changed(
        self,
        conn: apsw.Connection,
        known: dict[str, tuple[int, int, int, str]],
        present: dict[str, os.stat_result],
        refused: dict[str, str],
        report: SyncReport,
        steps: _Progress,
    ) -> tuple[list[_Changed], list[int]]:
        """The files whose (mtime, size) differ from the index, read (at most ``max_file_bytes``), and the ids of
        the documents they replace. A file whose bytes did not change keeps its chunks (its new mtime is stored);
        one that cannot be read is refused (and dropped from ``present`` when it is not a file to index)."""
        changed: list[_Changed] = []
        stale: list[int] = []
        for number, rel in enumerate(sorted(present), 1):
            info = present[rel]
            old = known.get(rel)
            steps.reading(number)
            if info.st_size > self.max_file_bytes:  # not read at all, and no longer searchable
                refused[rel] = _too_large(info.st_size, self.max_file_bytes)
                del present[rel]
                continue
            if old is not None and old[1] == info.st_mtime_ns and old[2] == info.st_size:
                report.files_unchanged += 1
                continue
            data = self._read(rel, present, refused)
            if data is None:
                continue
            sha = hashlib.sha256(data).hexdigest()
            if old is not None and old[3] == sha:
                conn.execute(
                    "UPDATE documents SET mtime_ns=?, size=? WHERE doc_id=?", (info.st_mtime_ns, info.st_size, old[0])
                )
                report.files_unchanged += 1
                continue
            if old is not None:
                stale.append(old[0])
            changed.append((rel, info, sha, data.decode("utf-8", errors="replace")))
            report.bytes_indexed += len(data)
        return changed, stale

    def _read(self, rel: str, present: dict[str, os.stat_result], refused: dict[str, str]) -> bytes | None:
        """A file's bytes, or None (refused, or gone: then dropped from ``present``). Only a regular file is opened
        (a FIFO swapped in since the walk would block this thread), and never more than the limit read. The stat
        is older than the bytes read, so a file that grew meanwhile differs from the stored (mtime, size) and is
        read again."""
        try:
            return read_regular(self.root / rel, self.max_file_bytes)
        except FileNotFoundError:
            del present[rel]
        except FileTooLarge as exc:
            refused[rel] = _too_large(exc.size, exc.limit)
            del present[rel]
        except NotRegularFile:
            refused[rel] = "not a regular file"
            del present[rel]
        except OSError as exc:  # kept as indexed before: a passing error should not lose a file's chunks
            refused[rel] = f"unreadable: {exc.strerror or type(exc).__name__}"
        return None

    def _insert_changed(
        self, conn: apsw.Connection, changed: list[_Changed], report: SyncReport, steps: _Progress
    ) -> None:
        """Insert the changed files as new documents and their chunks, numbered on from the highest ids: prepared
        in batches (a thread, or worker processes for large rebuilds) while SQLite inserts the previous ones."""
        row = conn.execute(
            "SELECT (SELECT coalesce(max(doc_id), 0) FROM documents), (SELECT coalesce(max(chunk_id), 0) FROM chunks)"
        ).fetchone()
        last_doc, first_chunk = int(row[0]), int(row[1])  # type: ignore[index]
        last_chunk = first_chunk
        items = [(last_doc + n, rel, text) for n, (rel, _info, _sha, text) in enumerate(changed, 1)]
        documents = [
            (last_doc + n, rel, info.st_mtime_ns, info.st_size, sha, time.time())
            for n, (rel, info, sha, _text) in enumerate(changed, 1)
        ]
        conn.execute(_INSERT_DOCUMENTS, (orjson.dumps(documents),))
        processes = pool_size(report.bytes_indexed, len(items))
        threaded = len(items) > 1 and report.bytes_indexed >= PIPELINE_MIN_BYTES
        with (
            contextlib.closing(prepare_many(items, self.chunk_max_lines, processes)) as prepared,
            contextlib.closing(batches(prepared, threaded=threaded, size=_encoded_size)) as runs,
        ):
            for batch in runs:
                last_chunk = _insert_chunks(conn, batch, last_chunk)
                report.files_indexed += len(batch)
                steps.inserted(report.files_indexed, len(changed))
        report.chunk_delta += last_chunk - first_chunk

    def index_section(
        self,
        rel: str,
        section: str,
        first_line: int,
        before: tuple[int, int, str],
        after: tuple[int, int, str],
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
            conn = self._writer
            if conn is None:
                return False
            row = conn.execute("SELECT doc_id, mtime_ns, size, sha256 FROM documents WHERE path = ?", (rel,)).fetchone()
            if row is None or (int(row[1]), int(row[2]), str(row[3])) != before:
                return False
            doc_id = int(row[0])
            offset = first_line - 1
            rows = [
                [doc_id, start + offset, end + offset, *rest]
                for start, end, *rest in prepare_text(rel, section, self.chunk_max_lines)
            ]
            with conn:
                # The file's chunks were inserted in file order (a sync, or earlier sections), so the last block's
                # are the document's highest chunk ids: read backwards along chunks_doc, not through every chunk.
                old_ids: list[int] = []
                for chunk_id, start_line in conn.execute(
                    "SELECT chunk_id, start_line FROM chunks WHERE doc_id = ? ORDER BY chunk_id DESC", (doc_id,)
                ):
                    if int(start_line) < first_line:
                        break
                    old_ids.append(int(chunk_id))
                old = orjson.dumps(old_ids)
                chosen = "IN (SELECT value FROM json_each(?))"
                conn.execute(f"DELETE FROM chunks_fts WHERE rowid {chosen}", (old,))
                conn.execute(f"DELETE FROM chunks WHERE chunk_id {chosen}", (old,))
                removed = conn.changes()
                (last_chunk,) = conn.execute("SELECT coalesce(max(chunk_id), 0) FROM chunks").fetchone() or (0,)
                _insert_chunks(conn, [(len(rows), orjson.dumps(rows))], int(last_chunk))
                conn.execute(
                    "UPDATE documents SET mtime_ns=?, size=?, sha256=?, indexed_at=? WHERE doc_id=?",
                    (after[0], after[1], after[2], time.time(), doc_id),
                )
            self._chunk_count += len(rows) - removed
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
        (n + 0.5))``; a token no chunk holds weighs most). Frequencies are cached as :meth:`prune` caches them."""
        total = self._chunk_count
        with self._reading() as reader:
            if reader is None:
                raise IndexUnavailable("index is not open")
            if abs(total - self._df_basis) > total // 100:
                self._df_cache.clear()
                self._df_basis = total
            frequency = self._df_cache
            for token in tokens:
                if token not in frequency:
                    row = reader.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (token,)).fetchone()
                    if len(frequency) > 100_000:
                        frequency.clear()
                    frequency[token] = int(row[0]) if row else 0
            return {t: math.log(1 + (total - frequency[t] + 0.5) / (frequency[t] + 0.5)) for t in tokens}

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
        with self._reading() as reader:
            if reader is None:
                raise IndexUnavailable("index is not open")
            # Frequencies only need to be roughly right: cache them until the index grows or shrinks by 1%.
            if abs(total - self._df_basis) > total // 100:
                self._df_cache.clear()
                self._df_basis = total
            frequency = self._df_cache
            for term in terms:
                if term.token is not None and term.token not in frequency:
                    row = reader.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (term.token,)).fetchone()
                    if len(frequency) > 100_000:
                        frequency.clear()
                    frequency[term.token] = int(row[0]) if row else 0
            df = {t.token: frequency.get(t.token, 0) for t in terms if t.token is not None}
        limit = total * PRUNE_MAX_SHARE
        known = sorted((t for t in terms if t.token is not None and df[t.token] > 0), key=lambda t: df[t.token or ""])
        if not known or df[known[0].token or ""] <= limit:
            # a rare word occurs (or none does at all): the common ones add cost, not results
            return [t for t in terms if t.token is None or df[t.token] <= limit]
        rarest = {id(t) for t in known[:2]}
        return [t for t in terms if t.token is None or df[t.token] == 0 or id(t) in rarest]

    def search(self, match: str, limit: int, paths: list[str] | None = None) -> list[Hit]:
        """The best ``limit`` chunks for ``match``; with ``paths``, among those files' chunks only."""
        if paths is None:  # rank inside FTS5 first (ORDER BY rank LIMIT), then join only the winners
            sql = (
                "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, top.rank FROM "
                "(SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?) AS top "
                "JOIN chunks c ON c.chunk_id = top.rowid JOIN documents d ON d.doc_id = c.doc_id ORDER BY top.rank"
            )
            args: tuple[object, ...] = (match, limit)
        else:
            sql = (
                "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, f.rank FROM chunks_fts f "
                "JOIN chunks c ON c.chunk_id = f.rowid JOIN documents d ON d.doc_id = c.doc_id "
                f"WHERE chunks_fts MATCH ? AND d.path IN ({','.join('?' * len(paths))}) ORDER BY f.rank LIMIT ?"
            )
            args = (match, *paths, limit)
        with self._reading() as reader:
            if reader is None:
                raise IndexUnavailable("index is not open")
            rows = reader.execute(sql, args).fetchall()
        return [
            Hit(str(path), int(start), int(end), str(heading), str(text), round(-float(rank), 6))  # type: ignore[arg-type]
            for path, start, end, heading, text, rank in rows
        ]

    def is_current(self, rel: str) -> bool:
        """Whether the index holds ``rel`` as the file is now (its mtime and size), or holds nothing of a file that
        is gone: a change the watcher reports after the index took it in (remember's own write) is not pending."""
        try:
            info = os.stat(self.root / rel)
            now: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
        except OSError:
            now = None
        with self._reading() as reader:
            if reader is None:
                return False
            row = reader.execute("SELECT mtime_ns, size FROM documents WHERE path = ?", (rel,)).fetchone()
        return (None if row is None else (int(row[0]), int(row[1]))) == now

    def documents(self) -> dict[str, str]:
        """path → sha256 of every indexed file."""
        with self._reading() as reader:
            if reader is None:
                return {}
            return {str(p): str(s) for p, s in reader.execute("SELECT path, sha256 FROM documents")}

    def sections(self, path: str) -> list[tuple[int, int, str, str]]:
        """The chunks of one indexed file, in order: (start_line, end_line, heading, text)."""
        sql = (
            "SELECT c.start_line, c.end_line, c.heading, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
            "WHERE d.path = ? ORDER BY c.start_line"
        )
        with self._reading() as reader:
            if reader is None:
                return []
            return [(int(s), int(e), str(h), str(t)) for s, e, h, t in reader.execute(sql, (path,))]

    def counts(self) -> tuple[int, int]:
        with self._reading() as reader:
            if reader is None:
                return 0, 0
            (files,) = reader.execute("SELECT count(*) FROM documents").fetchone() or (0,)
            (chunks,) = reader.execute("SELECT count(*) FROM chunks").fetchone() or (0,)
        return int(files), int(chunks)

    def segments(self) -> int:
        """How many FTS5 segments the index has (1 once a rebuild's have been merged; writes add more, which FTS5
        merges as they accumulate)."""
        with self._reading() as reader:
            if reader is None:
                return 0
            (count,) = reader.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone() or (0,)
        return int(count)

    def dirty_files(self) -> list[str]:
        """Files whose (mtime, size) differ from the index, plus indexed files that are gone."""
        with self._reading() as reader:
            if reader is None:
                return []
            known = {p: (m, s) for p, m, s in reader.execute("SELECT path, mtime_ns, size FROM documents")}
        present = {
            rel: (info.st_mtime_ns, info.st_size)
            for rel, info in indexed_files(self.root)
            if info.st_size <= self.max_file_bytes and rel not in self.refused
        }
        dirty = [rel for rel, sig in present.items() if known.get(rel) != sig]
        dirty += [rel for rel in known if rel not in present]
        return sorted(dirty)


_INSERT_DOCUMENTS = (
    "INSERT INTO documents(doc_id, path, mtime_ns, size, sha256, indexed_at) "
    "SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5 FROM json_each(?)"
)
# ?1: the chunk id before the batch's first; ?2: the batch's rows (see prepare_encoded), converted to JSONB once
# per statement: jsonb_each then hands each row over as a blob that ->> reads without parsing it again.
_INSERT_CHUNKS = (
    "INSERT INTO chunks(chunk_id, doc_id, start_line, end_line, heading, text, text_digest, text_length) "
    "SELECT ?1 + key + 1, value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 "
    "FROM jsonb_each(jsonb(?2))"
)
_INSERT_FTS = (
    "INSERT INTO chunks_fts(rowid, body, idents) "
    "SELECT ?1 + key + 1, coalesce(value->>7, value->>4), value->>8 FROM jsonb_each(jsonb(?2))"
)


def _insert_chunks(conn: apsw.Connection, prepared: list[tuple[int, bytes]], last_chunk: int) -> int:
    """Insert prepared chunks numbered on from ``last_chunk``; returns the last number used. Two statements in all:
    with a worker thread holding the GIL, every call into SQLite waits up to 5 ms to get it back."""
    rows = b",".join(encoded[1:-1] for count, encoded in prepared if count)
    if rows:
        batch = b"[" + rows + b"]"
        conn.execute(_INSERT_CHUNKS, (last_chunk, batch))
        conn.execute(_INSERT_FTS, (last_chunk, batch))
    return last_chunk + sum(count for count, _encoded in prepared)


def _delete_docs(conn: apsw.Connection, doc_ids: list[int]) -> int:
    """Remove documents with their chunks; returns how many chunks went."""
    ids = (orjson.dumps(doc_ids),)
    chosen = "IN (SELECT value FROM json_each(?))"
    conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN (SELECT chunk_id FROM chunks WHERE doc_id {chosen})", ids)
    conn.execute(f"DELETE FROM chunks WHERE doc_id {chosen}", ids)
    removed = conn.changes()
    conn.execute(f"DELETE FROM documents WHERE doc_id {chosen}", ids)
    return removed


def _too_large(size: int, limit: int) -> str:
    return f"too large: {size} bytes; the limit is {limit} (index_max_file_bytes)"


def _unlink(path: Path, suffixes: tuple[str, ...]) -> None:
    """Remove a database file and/or its sidecars (``-wal``, ``-shm``, …), whichever exist."""
    for suffix in suffixes:
        fsio.remove(Path(str(path) + suffix))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
