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
from typing import Any

import apsw

from memoryd.store.readers import ReaderPool

SCHEMA_VERSION = 3  # 2: L2 distance (unit vectors: the order of cosine, ~12% faster); 3: cells (IVF)
TRAIN_MIN = 20_000  # below this many vectors a search scans them all (~7 ms); from here on, cells
RETRAIN_GROWTH = 4  # cells are trained again when the vectors have grown this many times since
SAMPLE_PER_CELL = 40  # k-means sample: this many vectors per cell
CELL_SIZE = 1500  # vectors per cell: a probe's fixed cost (~0.35 ms) against its scan (~0.33 µs a vector)


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
        self._centroids: Any = None  # numpy (cells, dimension) once trained; None: one cell, exact search
        self.trained_at = 0  # how many vectors there were when the cells were trained

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
                self._centroids, self.trained_at = _load_centroids(conn, dimension)
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
                    cached = conn.execute(
                        "SELECT u.unit_id, c.vector FROM units u JOIN cache c ON c.digest = u.digest WHERE u.path = ?",
                        (path,),
                    ).fetchall()
                    self._insert(conn, [(int(i), bytes(v)) for i, v in cached])  # type: ignore[arg-type]
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
                fresh = []
                for unit_id, _digest, vector in items:
                    conn.execute("UPDATE units SET embedded = 1 WHERE unit_id = ? AND NOT embedded", (unit_id,))
                    if conn.changes():
                        fresh.append((unit_id, vector))
                self._insert(conn, fresh)
            self.embedded += len(fresh)

    def _insert(self, conn: apsw.Connection, rows: list[tuple[int, bytes]]) -> None:
        """Vectors into ``units_vec``, each in the cell of its nearest centroid (cell 0 before training)."""
        if rows:
            cells = _cells(self._centroids, [v for _, v in rows])
            conn.executemany(
                "INSERT INTO units_vec(rowid, cell, embedding) VALUES(?, ?, ?)",
                [(unit_id, cell, vector) for (unit_id, vector), cell in zip(rows, cells, strict=True)],
            )

    # --- cells: an inverted file (IVF) in vec0's partitions ----------------------------------------------

    def should_train(self) -> bool:
        return self.embedded >= TRAIN_MIN and self.embedded >= RETRAIN_GROWTH * max(self.trained_at, TRAIN_MIN // 4)

    def train(self, cells: int | None = None) -> int:
        """Cluster the vectors (spherical k-means on a sample, one cell per CELL_SIZE vectors) and move every vector into the cell of its
        nearest centroid, in one transaction (searches read the old cells until it commits). Returns the cells."""
        np = _numpy()
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            count = self.embedded
            cells = cells or int(min(1024, max(16, round(count / CELL_SIZE))))
            sample = conn.execute(
                "SELECT c.vector FROM units u JOIN cache c ON c.digest = u.digest WHERE u.embedded "
                "ORDER BY u.digest LIMIT ?",  # a digest-ordered sample: spread, and the same every time
                (cells * SAMPLE_PER_CELL,),
            ).fetchall()
            data = np.frombuffer(b"".join(bytes(v) for (v,) in sample), dtype="<f4").reshape(len(sample), -1)  # type: ignore[arg-type]
            centroids = _kmeans(np, data, cells)
            with conn:
                conn.execute("DELETE FROM units_vec")
                conn.execute("DELETE FROM centroids")
                conn.executemany(
                    "INSERT INTO centroids(cell, vector) VALUES(?, ?)",
                    [(n, row.astype("<f4").tobytes()) for n, row in enumerate(centroids)],
                )
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('trained_at', ?)", (str(count),))
                last = 0
                while True:  # in batches: a 50 MB workspace has ~700k vectors
                    batch = conn.execute(
                        "SELECT u.unit_id, c.vector FROM units u JOIN cache c ON c.digest = u.digest "
                        "WHERE u.embedded AND u.unit_id > ? ORDER BY u.unit_id LIMIT 20000",
                        (last,),
                    ).fetchall()
                    if not batch:
                        break
                    rows = [(int(i), bytes(v)) for i, v in batch]  # type: ignore[arg-type]
                    assigned = _cells(centroids, [v for _, v in rows])
                    conn.executemany(
                        "INSERT INTO units_vec(rowid, cell, embedding) VALUES(?, ?, ?)",
                        [(i, c, v) for (i, v), c in zip(rows, assigned, strict=True)],
                    )
                    last = rows[-1][0]
            self._centroids, self.trained_at = centroids, count
            return cells

    def probes(self) -> int:
        """Cells a search looks in: a quarter of them, 6 to 32 (each costs ~0.35 ms of setup whatever its size)."""
        if self._centroids is None:
            return 1
        cells = len(self._centroids)
        return int(min(cells, max(6, min(32, cells // 4))))

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

    def search(self, vector: bytes, k: int, probes: int | None = None) -> list[VectorHit]:
        """The ``k`` embedded units nearest to ``vector``, nearest first: among all of them before the cells are
        trained, then among those in the ``probes`` cells whose centroids are nearest (approximate)."""
        centroids = self._centroids
        if centroids is None:
            cells = [0]
        else:
            np = _numpy()
            scores = centroids @ np.frombuffer(vector, dtype="<f4")
            want = min(len(scores), probes or self.probes())
            cells = [int(c) for c in np.argpartition(-scores, want - 1)[:want]]
        # vec0 answers k per cell: the nearest k of them all are kept
        sql = (
            "SELECT u.path, u.start_line, u.lines, u.heading, u.section_start, u.section_lines, u.text, u.digest, "
            "near.distance FROM (SELECT rowid, distance FROM units_vec WHERE embedding MATCH ? AND k = ? "
            f"AND cell IN ({','.join(str(c) for c in cells)})) AS near "
            "JOIN units u ON u.unit_id = near.rowid ORDER BY near.distance, u.unit_id LIMIT ?"
        )
        with self._reading() as reader:
            if reader is None:
                return []
            rows = reader.execute(sql, (vector, k, k)).fetchall()
        return [
            # L2 between unit vectors: d² = 2 - 2·cos, so the cosine distance is d² / 2
            VectorHit(str(p), int(s), int(n), str(h), int(ss), int(sl), str(t), str(d), float(dist) ** 2 / 2)  # type: ignore[arg-type]
            for p, s, n, h, ss, sl, t, d, dist in rows
        ]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise VectorsUnavailable(
            "semantic_not_installed",
            "numpy is not installed",
            "Install the semantic extra: pip install 'memoryd[semantic]'.",
        ) from exc
    return numpy


def _cells(centroids: Any, vectors: list[bytes]) -> list[int]:
    if centroids is None or not vectors:
        return [0] * len(vectors)
    np = _numpy()
    data = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), -1)
    return [int(c) for c in np.argmax(data @ centroids.T, axis=1)]


def _kmeans(np: Any, data: Any, cells: int, rounds: int = 10) -> Any:
    """Spherical k-means: unit-length centroids, each the normalised mean of the vectors nearest it; seeded with a
    fixed generator (the same vectors give the same cells)."""
    rng = np.random.default_rng(0)
    cells = min(cells, len(data))
    centroids = data[rng.choice(len(data), cells, replace=False)].copy()
    for _ in range(rounds):
        nearest = np.argmax(data @ centroids.T, axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, data)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = norms[:, 0] == 0
        if empty.any():  # a centroid nothing chose: start it again from a random vector
            sums[empty] = data[rng.choice(len(data), int(empty.sum()), replace=False)]
            norms[empty] = 1.0
        centroids = (sums / norms).astype("<f4")
    return centroids


def _load_centroids(conn: apsw.Connection, dimension: int) -> tuple[Any, int]:
    rows = conn.execute("SELECT vector FROM centroids ORDER BY cell").fetchall()
    if not rows:
        return None, 0
    np = _numpy()
    centroids = np.frombuffer(b"".join(bytes(v) for (v,) in rows), dtype="<f4").reshape(len(rows), dimension)  # type: ignore[arg-type]
    trained = conn.execute("SELECT value FROM meta WHERE key = 'trained_at'").fetchone()
    return centroids, int(str(trained[0])) if trained else 0


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
            CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
            CREATE VIRTUAL TABLE units_vec USING vec0(cell INTEGER PARTITION KEY, embedding float[{int(dimension)}]);
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
