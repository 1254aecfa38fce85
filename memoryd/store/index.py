"""One workspace's note index: documents / chunks / chunks_fts (FTS5, external content) in one SQLite file.

Incremental by (mtime, size) then sha256. A schema, chunker or text-processing version change, or a corrupt or
missing file, triggers a rebuild; a full rebuild writes ``index.sqlite.new`` and swaps it in with ``os.replace``
so a search never sees half an index. Blocking: call from a worker thread, never from the event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import structlog

from memoryd.notes import chunker, textindex

log = structlog.get_logger("memoryd.index")

SCHEMA_VERSION = 3
PRUNE_MIN_CHUNKS = 1000
PRUNE_MAX_SHARE = 0.05
INDEXED_SUFFIXES = (".md",)

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


def memory_files(root: Path) -> Iterable[tuple[str, os.stat_result]]:
    """(relative path, stat) of every indexable file under ``root/memory``: no hidden entries, no symlinks
    that leave the workspace."""
    memory = root / "memory"
    if not memory.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(memory, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(INDEXED_SUFFIXES):
                continue
            full = Path(dirpath) / name
            try:
                if full.is_symlink():
                    target = full.resolve()
                    if root not in target.parents:
                        continue
                info = full.stat()
            except OSError:
                continue
            yield full.relative_to(root).as_posix(), info


class NoteIndex:
    """The index file of one workspace. Thread-safe: one writer at a time, readers on their own connection."""

    def __init__(self, root: Path, db_path: Path, *, chunk_max_lines: int = 40) -> None:
        self.root = root
        self.db_path = db_path
        self.chunk_max_lines = chunk_max_lines
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer: apsw.Connection | None = None
        self._reader: apsw.Connection | None = None
        self.last_indexed: float | None = None
        self._chunk_count = 0  # kept current after every write: count(*) costs ms at 100k chunks
        self._df_cache: dict[str, int] = {}
        self._df_basis = 0
        self.last_rebuild_reason: str | None = None

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
            conn.execute(SCHEMA)
            conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{textindex.rank_sql()}')")
            conn.executemany("INSERT INTO meta(key, value) VALUES(?, ?)", versions(self.chunk_max_lines).items())
            report = self._sync_into(conn, None, progress)
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
        report.rebuilt = True
        report.rebuild_reason = reason
        report.ms = round((time.perf_counter() - started) * 1000, 2)
        self.last_indexed = time.time()
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
        if only is None:
            present = dict(memory_files(self.root))
        else:
            present = {}
            for rel in only:
                full = self.root / rel
                if full.suffix.lower() in INDEXED_SUFFIXES and full.is_file():
                    with contextlib.suppress(OSError):
                        present[rel] = full.stat()
        targets = sorted(present)
        work: list[tuple[str, os.stat_result, str, str, tuple[int, str, int, str] | None]] = []
        with conn:
            for number, rel in enumerate(targets, 1):
                info = present[rel]
                old = known.get(rel)
                if progress is not None and number % 50 == 0:
                    progress(number - 1, len(targets) * 2)
                if old is not None and old[1] == info.st_mtime_ns and old[2] == info.st_size:
                    report.files_unchanged += 1
                    continue
                try:
                    data = (self.root / rel).read_bytes()
                except OSError:
                    continue
                sha = hashlib.sha256(data).hexdigest()
                if old is not None and old[3] == sha:
                    conn.execute(
                        "UPDATE documents SET mtime_ns=?, size=? WHERE doc_id=?",
                        (info.st_mtime_ns, info.st_size, old[0]),
                    )
                    report.files_unchanged += 1
                    continue
                work.append((rel, info, sha, data.decode("utf-8", errors="replace"), old))
                report.bytes_indexed += len(data)
            prepared = prepare_many([text for _, _, _, text, _ in work], self.chunk_max_lines, report.bytes_indexed)
            for number, ((rel, info, sha, _text, old), rows) in enumerate(zip(work, prepared, strict=True), 1):
                if old is not None:
                    report.chunk_delta -= self._delete_doc(conn, old[0])
                self._insert_doc(conn, rel, info, sha, rows)
                report.chunk_delta += len(rows)
                report.files_indexed += 1
                if progress is not None and number % 20 == 0:
                    progress(len(targets) + number * len(targets) // max(1, len(work)), len(targets) * 2)
            if progress is not None:
                progress(len(targets) * 2, len(targets) * 2)
            gone = (set(known) - set(present)) if only is None else {p for p in only if p in known and p not in present}
            for rel in gone:
                report.chunk_delta -= self._delete_doc(conn, known[rel][0])
                report.files_removed += 1
        return report

    def _delete_doc(self, conn: apsw.Connection, doc_id: int) -> int:
        """Remove one document; returns how many chunks went with it."""
        conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT chunk_id FROM chunks WHERE doc_id=?)", (doc_id,))
        conn.execute("DELETE FROM chunks WHERE doc_id=?", (doc_id,))
        removed = conn.changes()
        conn.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,))
        return removed

    def _insert_doc(
        self, conn: apsw.Connection, rel: str, info: os.stat_result, sha: str, rows: list[Prepared]
    ) -> None:
        conn.execute(
            "INSERT INTO documents(path, mtime_ns, size, sha256, indexed_at) VALUES(?, ?, ?, ?, ?)",
            (rel, info.st_mtime_ns, info.st_size, sha, time.time()),
        )
        doc_id = conn.last_insert_rowid()
        if not rows:
            return
        first_id = int(conn.execute("SELECT coalesce(max(chunk_id), 0) + 1 FROM chunks").fetchone()[0])  # type: ignore[index]
        conn.executemany(
            "INSERT INTO chunks(chunk_id, doc_id, start_line, end_line, heading, text, text_digest, text_length) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
            [(first_id + n, doc_id, *row[:6]) for n, row in enumerate(rows)],
        )
        conn.executemany(
            "INSERT INTO chunks_fts(rowid, body, idents) VALUES(?, ?, ?)",
            [(first_id + n, row[6], row[7]) for n, row in enumerate(rows)],
        )

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

    def dirty_files(self) -> list[str]:
        """Files whose (mtime, size) differ from the index, plus indexed files that are gone."""
        with self._read_lock:
            if self._reader is None:
                return []
            known = {p: (m, s) for p, m, s in self._reader.execute("SELECT path, mtime_ns, size FROM documents")}
        present = {rel: (info.st_mtime_ns, info.st_size) for rel, info in memory_files(self.root)}
        dirty = [rel for rel, sig in present.items() if known.get(rel) != sig]
        dirty += [rel for rel in known if rel not in present]
        return sorted(dirty)


# start_line, end_line, heading, text, text_digest, text_length, body, idents
Prepared = tuple[int, int, str, str, str, int, str, str]
PARALLEL_MIN_BYTES = 8 * 1024 * 1024


def prepare_text(text: str, max_lines: int = 40) -> list[Prepared]:
    """Chunk one document and compute its FTS fields: the CPU-heavy part of indexing (pure, picklable)."""
    rows: list[Prepared] = []
    for chunk in chunker.chunk_markdown(text, max_lines=max_lines):
        body, idents = textindex.index_fields(chunk.text)
        digest = hashlib.sha256(chunk.text.encode()).hexdigest()[:16]
        rows.append(
            (chunk.start_line, chunk.end_line, chunk.heading, chunk.text, digest, len(chunk.text), body, idents)
        )
    return rows


def prepare_many(texts: list[str], max_lines: int, total_bytes: int) -> Iterator[list[Prepared]]:
    """Prepare documents; large batches (a rebuild) are spread over worker processes, one per core.

    SQLite writes stay in this thread; only chunking and segmentation (about three quarters of the time) move.
    Worker processes are spawned, not forked: the daemon has threads.
    """
    workers = min(os.cpu_count() or 1, 8)
    if total_bytes < PARALLEL_MIN_BYTES or workers < 2 or len(texts) < 4:
        for text in texts:
            yield prepare_text(text, max_lines)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from functools import partial

    done = 0
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            # results arrive in order while later ones are still being computed: the caller inserts meanwhile
            for rows in pool.map(partial(prepare_text, max_lines=max_lines), texts, chunksize=4):
                done += 1
                yield rows
    except (OSError, RuntimeError, BrokenProcessPool) as exc:  # no processes to be had: do the rest here
        log.warning("parallel_index_unavailable", error=type(exc).__name__)
        for text in texts[done:]:
            yield prepare_text(text, max_lines)


def _unlink(path: Path, suffixes: tuple[str, ...]) -> None:
    """Remove a database file and/or its sidecars (``-wal``, ``-shm``, …), whichever exist."""
    for suffix in suffixes:
        with contextlib.suppress(FileNotFoundError):
            Path(str(path) + suffix).unlink()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
