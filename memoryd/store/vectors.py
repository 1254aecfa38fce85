"""One workspace's vector index: its passages ("units") and their embeddings, in ``vectors.sqlite`` beside the
text index.

Tables: ``units`` (a passage: path, lines, its section, its text and the text's digest, whether it is embedded,
and a priority: long-term memory and the newest days first), ``units_vec`` (sqlite-vec ``vec0``, rowid = unit id,
L2 distance between unit vectors: the order of cosine), ``cache`` (digest → vector: a text seen before is never embedded again, whether its file was
re-chunked, the text index rebuilt, or a file renamed) and ``meta`` (the model and dimension the vectors were made
with, and the schema version). The file is separate from the text index because a text-index rebuild swaps that
file whole: vectors would be lost with it.

The extension is loaded by its file path into every connection (``import sqlite_vec`` costs ~350 ms with numpy
installed; its location is found without importing it). One writer, the embedding worker thread; reads from any
thread, each on its own connection (:class:`~memoryd.store.readers.ReaderPool`). Blocking: call from worker
threads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw

from memoryd.store.readers import ReaderPool

SCHEMA_VERSION = 2  # 2: L2 distance (vectors are unit length: the same order as cosine, ~12% faster)


class VectorsUnavailable(RuntimeError):
    """The vector index cannot be used: ``reason`` is stable, ``hint`` says what to do."""

    def __init__(self, reason: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.hint = hint


REBUILD_HINT = "Run `memoryctl index --rebuild-vectors` to embed this workspace again with the current model."


@dataclass(frozen=True, slots=True)
class Unit:
    path: str
    start_line: int  # 1-based line of the file
    lines: int
    heading: str
    section_start: int
    section_lines: int
    text: str
    digest: str
    priority: int  # lower first: embedded before the rest


@dataclass(frozen=True, slots=True)
class VectorHit:
    path: str
    start_line: int
    lines: int
    heading: str
    section_start: int
    section_lines: int
    text: str
    digest: str
    distance: float  # cosine distance (1 - cosine similarity), 0 = same direction


def extension_path(configured: str = "") -> Path | None:
    """The sqlite-vec loadable extension: ``configured`` when set, else the one the ``sqlite-vec`` package ships
    (found without importing the package). None when there is none."""
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "vec0"


def _load(conn: apsw.Connection, extension: Path | None) -> None:
    if extension is None:
        raise VectorsUnavailable(
            "vector_extension_unavailable",
            "sqlite-vec is not installed",
            "Install the semantic extra: pip install 'memoryd[semantic]' (make run and make test do).",
        )
    try:
        conn.enable_load_extension(True)
        conn.load_extension(str(extension))
        conn.enable_load_extension(False)
    except apsw.Error as exc:
        raise VectorsUnavailable(
            "vector_extension_unavailable",
            f"sqlite-vec could not be loaded from {extension}: {exc}",
            "Reinstall it (pip install --force-reinstall sqlite-vec) or fix vector_extension in settings.yaml.",
        ) from exc


class VectorIndex:
    def __init__(self, db_path: Path, extension: Path | None) -> None:
        self.db_path = db_path
        self.extension = extension
        self._writer: apsw.Connection | None = None
        self._write_lock = threading.Lock()
        self._readers = ReaderPool(self._connect_reader)
        self.dimension = 0
        self.model = ""
        self.embedded = 0  # kept current by every write: count(*) of a vec0 table is slow
        self.total = 0

    def _connect_reader(self) -> apsw.Connection:
        conn = apsw.Connection(str(self.db_path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(5000)
        _load(conn, self.extension)
        return conn

    # --- lifecycle ----------------------------------------------------------------------------------------

    def open(self, model: str, dimension: int) -> None:
        """Open (or create) the file for vectors of ``model`` with ``dimension``. Raises
        :class:`VectorsUnavailable`: the extension cannot be loaded, or the file holds vectors of another model
        or dimension (nothing is changed then: ``drop`` and open again to re-embed)."""
        with self._write_lock:
            self.db_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            conn = apsw.Connection(str(self.db_path))
            try:
                conn.set_busy_timeout(5000)
                _load(conn, self.extension)
                conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
                conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                stored = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
                if stored and stored.get("schema_version") != str(SCHEMA_VERSION):
                    # derived data in an older layout: start again (the texts are embedded anew)
                    conn.close()
                    self._unlink()
                    conn = apsw.Connection(str(self.db_path))
                    conn.set_busy_timeout(5000)
                    _load(conn, self.extension)
                    conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
                    conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    stored = {}
                if stored:
                    _check_meta(stored, model, dimension)
                else:
                    _create(conn, model, dimension)
                self.embedded = _scalar(conn, "SELECT count(*) FROM units WHERE embedded")
                self.total = _scalar(conn, "SELECT count(*) FROM units")
            except VectorsUnavailable:
                conn.close()
                raise
            except apsw.Error as exc:
                conn.close()
                raise VectorsUnavailable(
                    "vector_index_unusable", f"{self.db_path}: {type(exc).__name__}: {exc}", REBUILD_HINT
                ) from exc
            self._writer = conn
            self.model, self.dimension = model, dimension
            self._readers.reset(open_after=True)

    def close(self) -> None:
        with self._write_lock, self._readers.lock.exclusive():
            self._readers.reset(open_after=False)
            if self._writer is not None:
                with contextlib.suppress(apsw.Error):
                    self._writer.close()
                self._writer = None

    def drop(self) -> None:
        """Close and delete the file (and its WAL): the next ``open`` starts empty."""
        self.close()
        self._unlink()
        self.embedded = self.total = 0

    def _unlink(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.db_path) + suffix)

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[apsw.Connection | None]:
        with self._readers.lock.shared():
            yield self._readers.get()

    # --- the worker's side --------------------------------------------------------------------------------

    def documents(self) -> dict[str, str]:
        """path → the sha256 its units were made from."""
        assert self._writer is not None
        return {str(p): str(s) for p, s in self._writer.execute("SELECT path, sha256 FROM docs")}

    def replace(self, changed: dict[str, tuple[str, list[Unit]]], removed: Iterable[str]) -> None:
        """Replace the units of ``changed`` paths (path → (sha256, units)) and remove those of ``removed``, in one
        transaction. New units whose text was embedded before get their vector from the cache at once."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            paths = list(changed) + list(removed)
            with conn:
                for path in paths:
                    conn.execute(
                        "DELETE FROM units_vec WHERE rowid IN (SELECT unit_id FROM units WHERE path = ? AND embedded)",
                        (path,),
                    )
                    conn.execute("DELETE FROM units WHERE path = ?", (path,))
                    conn.execute("DELETE FROM docs WHERE path = ?", (path,))
                conn.executemany(
                    "INSERT INTO docs(path, sha256) VALUES(?, ?)", [(path, sha) for path, (sha, _) in changed.items()]
                )
                conn.executemany(
                    "INSERT INTO units(path, start_line, lines, heading, section_start, section_lines, text, digest, "
                    "priority, embedded) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                    [
                        (
                            u.path,
                            u.start_line,
                            u.lines,
                            u.heading,
                            u.section_start,
                            u.section_lines,
                            u.text,
                            u.digest,
                            u.priority,
                        )
                        for _, units in changed.values()
                        for u in units
                    ],
                )
                for path in changed:  # from the cache: texts embedded before
                    conn.execute(
                        "INSERT INTO units_vec(rowid, embedding) SELECT u.unit_id, c.vector FROM units u "
                        "JOIN cache c ON c.digest = u.digest WHERE u.path = ?",
                        (path,),
                    )
                    conn.execute(
                        "UPDATE units SET embedded = 1 WHERE path = ? AND digest IN (SELECT digest FROM cache)",
                        (path,),
                    )
                self.embedded = _scalar(conn, "SELECT count(*) FROM units WHERE embedded")
                self.total = _scalar(conn, "SELECT count(*) FROM units")

    def todo(self, limit: int) -> list[tuple[int, str, str]]:
        """Up to ``limit`` units not embedded yet, most wanted first: (unit id, text, digest)."""
        assert self._writer is not None
        rows = self._writer.execute(
            "SELECT unit_id, text, digest FROM units WHERE NOT embedded ORDER BY priority, unit_id LIMIT ?", (limit,)
        ).fetchall()
        return [(int(i), str(t), str(d)) for i, t, d in rows]  # type: ignore[arg-type]

    def store(self, items: list[tuple[int, str, bytes]]) -> None:
        """Vectors for units (unit id, digest, vector), cached by digest. A unit deleted meanwhile is skipped."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            with conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO cache(digest, vector) VALUES(?, ?)", [(d, v) for _, d, v in items]
                )
                added = 0
                for unit_id, _digest, vector in items:
                    conn.execute("UPDATE units SET embedded = 1 WHERE unit_id = ? AND NOT embedded", (unit_id,))
                    if conn.changes():
                        conn.execute("INSERT INTO units_vec(rowid, embedding) VALUES(?, ?)", (unit_id, vector))
                        added += 1
            self.embedded += added

    def prune_cache(self) -> int:
        """Forget cached vectors of texts no unit has any more, once they outnumber the units; returns how many."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            if _scalar(conn, "SELECT count(*) FROM cache") <= max(1000, 2 * self.total):
                return 0
            with conn:
                conn.execute("DELETE FROM cache WHERE digest NOT IN (SELECT digest FROM units)")
            return int(conn.changes())

    # --- search -------------------------------------------------------------------------------------------

    def search(self, vector: bytes, k: int) -> list[VectorHit]:
        """The ``k`` embedded units nearest to ``vector``, nearest first."""
        sql = (
            "SELECT u.path, u.start_line, u.lines, u.heading, u.section_start, u.section_lines, u.text, u.digest, "
            "near.distance FROM (SELECT rowid, distance FROM units_vec WHERE embedding MATCH ? AND k = ?) AS near "
            "JOIN units u ON u.unit_id = near.rowid ORDER BY near.distance, u.unit_id"
        )
        with self._reading() as reader:
            if reader is None:
                return []
            rows = reader.execute(sql, (vector, k)).fetchall()
        return [
            # L2 between unit vectors: d² = 2 - 2·cos, so the cosine distance is d² / 2
            VectorHit(str(p), int(s), int(n), str(h), int(ss), int(sl), str(t), str(d), float(dist) ** 2 / 2)  # type: ignore[arg-type]
            for p, s, n, h, ss, sl, t, d, dist in rows
        ]


def _scalar(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _create(conn: apsw.Connection, model: str, dimension: int) -> None:
    with conn:
        conn.execute(
            f"""
            CREATE TABLE docs(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
            CREATE TABLE units(
              unit_id INTEGER PRIMARY KEY,
              path TEXT NOT NULL,
              start_line INTEGER NOT NULL,
              lines INTEGER NOT NULL,
              heading TEXT NOT NULL,
              section_start INTEGER NOT NULL,
              section_lines INTEGER NOT NULL,
              text TEXT NOT NULL,
              digest TEXT NOT NULL,
              priority INTEGER NOT NULL,
              embedded INTEGER NOT NULL
            );
            CREATE INDEX units_path ON units(path);
            CREATE INDEX units_todo ON units(embedded, priority, unit_id);
            CREATE TABLE cache(digest TEXT PRIMARY KEY, vector BLOB NOT NULL);
            CREATE VIRTUAL TABLE units_vec USING vec0(embedding float[{int(dimension)}]);
            """
        )
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES(?, ?)",
            [("schema_version", str(SCHEMA_VERSION)), ("model", model), ("dimension", str(dimension))],
        )


def _check_meta(stored: dict[str, str], model: str, dimension: int) -> None:
    if stored.get("dimension") != str(dimension):
        raise VectorsUnavailable(
            "vector_dimension_mismatch",
            f"the stored vectors have {stored.get('dimension')} dimensions; the embedding model gives {dimension}",
            REBUILD_HINT,
        )
    if stored.get("model") != model:
        raise VectorsUnavailable(
            "vector_model_mismatch",
            f"the stored vectors were made by {stored.get('model')!r}; the embedding model now is {model!r}",
            REBUILD_HINT,
        )
