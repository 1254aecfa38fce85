"""One workspace's note index: documents / chunks / chunks_fts (FTS5, contentless) in one SQLite file.

What is indexed, and how a file becomes rows, is :mod:`memoryd.store.prepare`. Incremental by (mtime, size) then
sha256. A schema, chunker or text-processing version change, or a corrupt or missing file, triggers a rebuild; a
full rebuild writes ``index.sqlite.new`` and swaps it in with ``os.replace`` so a search never sees half an index.
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
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import apsw
import orjson
import structlog

from memoryd.fsio import FileTooLarge, NotRegularFile, read_regular
from memoryd.notes import chunker, textindex
from memoryd.store.prepare import (
    PIPELINE_MIN_BYTES,
    batches,
    indexed_files,
    indexed_stats,
    pool_size,
    prepare_many,
)

log = structlog.get_logger("memoryd.index")

SCHEMA_VERSION = 4
PRUNE_MIN_CHUNKS = 1000
PRUNE_MAX_SHARE = 0.05
MERGE_STEP_PAGES = 256

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents(
  doc_id INTEGER PRIMARY KEY,
  path TEXT NOT NULL UNIQUE,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks(
  chunk_id INTEGER PRIMARY KEY,
  doc_id INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
  start_line INTEGER NOT NULL,
  end_line INTEGER NOT NULL,
  heading TEXT NOT NULL,
  text TEXT NOT NULL,
  text_digest TEXT NOT NULL,
  text_length INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
-- Contentless: the segmented body and the identifier forms are only needed to build the index, and the raw
-- chunk text lives in chunks. contentless_delete lets a document's rows be deleted by rowid.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
  body, idents, content='', contentless_delete=1, tokenize='{textindex.TOKENIZER}'
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row');
"""


def versions(chunk_max_lines: int) -> dict[str, str]:
    return {
        "schema_version": str(SCHEMA_VERSION),
        "chunker_version": str(chunker.CHUNKER_VERSION),
        "text_version": str(textindex.TEXT_VERSION),
        "tokenizer": textindex.TOKENIZER,
        "chunk_max_lines": str(chunk_max_lines),
    }


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


def _connect(path: Path, *, readonly: bool = False) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(5000)
    return conn


class NoteIndex:
    """The index file of one workspace. Thread-safe: one writer at a time, readers on their own connection."""

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
        self._read_lock = threading.Lock()
        self._writer: apsw.Connection | None = None
        self._reader: apsw.Connection | None = None
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
            self.db_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
        with self._write_lock, self._read_lock:
            self._close_connections()

    def _close_connections(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                with contextlib.suppress(apsw.Error):
                    conn.close()
        self._writer = self._reader = None

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
            finally:
                conn.close()
        except apsw.Error:
            return "corrupt"
        return None

    def _open_connections(self) -> None:
        writer = _connect(self.db_path)
        writer.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        self._writer = writer
        self._chunk_count = int(writer.execute("SELECT count(*) FROM chunks").fetchone()[0])  # type: ignore[index]
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
            self._reader = _connect(self.db_path, readonly=True)

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
                conn.execute(SCHEMA)
                conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{textindex.rank_sql()}')")
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
        with self._read_lock:
            self._close_connections()
            _unlink(self.db_path, ("-wal", "-shm"))
            os.replace(fresh, self.db_path)
        self._open_connections()
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

    def sync(
        self, paths: Iterable[str] | None = None, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Bring the index up to date: every file (``paths`` None) or just these relative paths."""
        started = time.perf_counter()
        with self._write_lock:
            if self._writer is None:
                raise RuntimeError("index is not open")
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
        report = SyncReport()
        known = {
            path: (doc_id, mtime_ns, size, sha)
            for doc_id, path, mtime_ns, size, sha in conn.execute(
                "SELECT doc_id, path, mtime_ns, size, sha256 FROM documents"
            )
        }
        refused: dict[str, str] = {}
        walked = indexed_files(self.root, refused) if only is None else None
        present = dict(walked) if walked is not None else indexed_stats(self.root, set(only or ()), refused)
        targets = sorted(present)
        total = len(targets) * 2
        changed: list[tuple[str, os.stat_result, str, str]] = []  # path, stat, sha256, text
        stale: list[int] = []  # documents to remove: changed or gone
        with conn:
            for number, rel in enumerate(targets, 1):
                info = present[rel]
                old = known.get(rel)
                if progress is not None and number % 50 == 0:
                    progress(number - 1, total)
                if info.st_size > self.max_file_bytes:  # not read at all, and no longer searchable
                    refused[rel] = _too_large(info.st_size, self.max_file_bytes)
                    del present[rel]
                    continue
                if old is not None and old[1] == info.st_mtime_ns and old[2] == info.st_size:
                    report.files_unchanged += 1
                    continue
                # Only a regular file is opened (a FIFO swapped in since the walk would block this thread), and
                # never more than the limit read. The stat above is older than the bytes read, so a file that
                # grew meanwhile differs from the stored (mtime, size) and is read again.
                try:
                    data = read_regular(self.root / rel, self.max_file_bytes)
                except FileNotFoundError:
                    del present[rel]
                    continue
                except FileTooLarge as exc:
                    refused[rel] = _too_large(exc.size, exc.limit)
                    del present[rel]
                    continue
                except NotRegularFile:
                    refused[rel] = "not a regular file"
                    del present[rel]
                    continue
                except OSError as exc:  # kept as indexed before: a passing error should not lose a file's chunks
                    refused[rel] = f"unreadable: {exc.strerror or type(exc).__name__}"
                    continue
                sha = hashlib.sha256(data).hexdigest()
                if old is not None and old[3] == sha:
                    conn.execute(
                        "UPDATE documents SET mtime_ns=?, size=? WHERE doc_id=?",
                        (info.st_mtime_ns, info.st_size, old[0]),
                    )
                    report.files_unchanged += 1
                    continue
                if old is not None:
                    stale.append(old[0])
                changed.append((rel, info, sha, data.decode("utf-8", errors="replace")))
                report.bytes_indexed += len(data)
            gone = (set(known) - set(present)) if only is None else {p for p in only if p in known and p not in present}
            stale += [known[rel][0] for rel in gone]
            report.files_removed = len(gone)
            if stale:
                report.chunk_delta -= _delete_docs(conn, stale)
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
                contextlib.closing(batches(prepared, threaded=threaded)) as runs,
            ):
                for batch in runs:
                    last_chunk = _insert_chunks(conn, batch, last_chunk)
                    report.files_indexed += len(batch)
                    if progress is not None:
                        progress(len(targets) + report.files_indexed * len(targets) // len(changed), total)
            report.chunk_delta += last_chunk - first_chunk
            if progress is not None:
                progress(total, total)
        self._note_refused(refused, only)
        return report

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
                log.warning("index_merge_failed", root_digest=_digest(str(self.root)), error=type(exc).__name__)
                self.merge_pending = self._merging = False
                return False
            self._merging = self._writer.total_changes() - before >= 2
            self.merge_pending = self._merging
            return self.merge_pending

    # --- reading ------------------------------------------------------------------------------------------

    def prune(self, terms: list[textindex.Term]) -> list[textindex.Term]:
        """Drop very common single-word terms when rarer ones remain (an adaptive stop list).

        An OR query must score every row that matches any term; a word in a fifth of all chunks makes that
        tens of thousands of rows at 100k chunks, while its BM25 weight (idf) is close to nothing. Identifier
        and phrase terms are always kept. Small indexes are not pruned: they are fast anyway.
        """
        with self._read_lock:
            if self._reader is None:
                raise RuntimeError("index is not open")
            total = self._chunk_count
            if total < PRUNE_MIN_CHUNKS:
                return terms
            # Frequencies only need to be roughly right: cache them until the index grows or shrinks by 1%.
            if abs(total - self._df_basis) > total // 100:
                self._df_cache.clear()
                self._df_basis = total
            frequency = self._df_cache
            for term in terms:
                if term.token is not None and term.token not in frequency:
                    row = self._reader.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (term.token,)).fetchone()
                    if len(frequency) > 100_000:
                        frequency.clear()
                    frequency[term.token] = int(row[0]) if row else 0
        limit = total * PRUNE_MAX_SHARE
        kept = [t for t in terms if t.token is None or frequency.get(t.token, 0) <= limit]
        if kept:
            return kept
        words = sorted((t for t in terms if t.token is not None), key=lambda t: frequency.get(t.token or "", 0))
        return words[:2]

    def search(self, match: str, limit: int) -> list[Hit]:
        # Rank inside FTS5 first (ORDER BY rank LIMIT), then join only the winners.
        sql = (
            "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, top.rank FROM "
            "(SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?) AS top "
            "JOIN chunks c ON c.chunk_id = top.rowid JOIN documents d ON d.doc_id = c.doc_id ORDER BY top.rank"
        )
        with self._read_lock:
            if self._reader is None:
                raise RuntimeError("index is not open")
            rows = self._reader.execute(sql, (match, limit)).fetchall()
        return [
            Hit(str(path), int(start), int(end), str(heading), str(text), round(-float(rank), 6))  # type: ignore[arg-type]
            for path, start, end, heading, text, rank in rows
        ]

    def counts(self) -> tuple[int, int]:
        with self._read_lock:
            if self._reader is None:
                return 0, 0
            (files,) = self._reader.execute("SELECT count(*) FROM documents").fetchone() or (0,)
            (chunks,) = self._reader.execute("SELECT count(*) FROM chunks").fetchone() or (0,)
        return int(files), int(chunks)

    def segments(self) -> int:
        """How many FTS5 segments the index has (1 once a rebuild's have been merged; writes add more, which FTS5
        merges as they accumulate)."""
        with self._read_lock:
            if self._reader is None:
                return 0
            (count,) = self._reader.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone() or (0,)
        return int(count)

    def dirty_files(self) -> list[str]:
        """Files whose (mtime, size) differ from the index, plus indexed files that are gone."""
        with self._read_lock:
            if self._reader is None:
                return []
            known = {p: (m, s) for p, m, s in self._reader.execute("SELECT path, mtime_ns, size FROM documents")}
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
        with contextlib.suppress(FileNotFoundError):
            Path(str(path) + suffix).unlink()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
