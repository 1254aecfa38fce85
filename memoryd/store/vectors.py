"""One workspace's vector index: its passages ("units") and their embeddings, in ``vectors.sqlite`` beside the
text index.

Tables: ``units`` (a passage: path, lines, its section, its text and the text's digest, whether it is embedded,
and a priority: long-term memory and the newest days first), ``cache`` (a text's digest → its vector's id: a text
seen before is never embedded again, whether its file was re-chunked, the text index rebuilt, or a file renamed),
the vectors themselves in one sqlite-vec ``vec0`` table (rowid = vector id, one vector per distinct text, in the
partition of its cell; int8 components — a quarter of float32's bytes, scanned faster — compared by L2, which
orders unit vectors as cosine does), ``centroids`` (the cells) and ``meta`` (the model and dimension the vectors
were made with, the int8 scale, which vec0 table is current, the schema version). Each vector is stored once: the
vec0 table is the cache's store too. The file is separate from the text index because a text-index rebuild swaps
that file whole: vectors would be lost with it.

The extension is loaded by its file path into every connection (``import sqlite_vec`` costs ~350 ms with numpy
installed; its location is found without importing it). One writer, the embedding worker thread; reads from any
thread, each on its own connection (:class:`~memoryd.store.readers.ReaderPool`). Blocking: call from worker
threads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from memoryd.store.readers import DAMAGE_ERRORS, ReaderPool, file_problem

SCHEMA_VERSION = 4  # 2: L2 distance (unit vectors: the order of cosine); 3: cells (IVF); 4: int8, each vector once
TRAIN_MIN = 20_000  # below this many vectors a search scans them all (~7 ms); from here on, cells
RETRAIN_GROWTH = 2  # cells are trained again when the vectors have doubled since: cells stay near CELL_SIZE
SAMPLE_PER_CELL = 40  # k-means sample: this many vectors per cell
CELL_SIZE = 1500  # vectors per cell: a probe's fixed cost (~0.35 ms) against its scan (~0.33 µs a vector)


# The next units to embed, found by the index units_todo (a bare `NOT embedded` would scan and sort them all)
TODO_SQL = "SELECT unit_id, text, digest FROM units WHERE embedded = 0 ORDER BY priority, unit_id LIMIT ?"
# The units a new vector embeds: by their digest (left to itself the planner may walk units_todo's embedded = 0)
MARK_SQL = "UPDATE units INDEXED BY units_digest SET embedded = 1 WHERE digest = ? AND embedded = 0"


class _Interrupted(Exception):
    pass


class VectorsUnavailable(RuntimeError):
    """The vector index cannot be used: ``reason`` is stable, ``hint`` says what to do."""

    def __init__(self, reason: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.hint = hint


def damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the vector file itself is damaged (overwritten, truncated, unreadable) — not busy."""
    return isinstance(exc, (*DAMAGE_ERRORS, apsw.IOError, apsw.CantOpenError))


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
        self.embedded = 0  # units with a vector: kept current by every write
        self.total = 0  # units that can have one (all but the refused)
        self.refused = 0  # units whose text the provider refused (see refuse)
        self.vectors = 0  # rows of the vec0 table (distinct texts, some of them no unit's any more)
        # the current vec0 table and its cells' centroids (numpy (cells, dimension); None: one cell, exact
        # search), swapped as one: training fills the other table, then switches
        self._layout: tuple[str, Any] = ("vec_a", None)
        self._scale = 0.0  # int8 component = round(float component × scale); set by the first vectors stored
        self.trained_at = 0  # how many vectors there were when the cells were trained
        self._removed = False  # units were removed since the last prune: vectors may be orphaned
        self._interrupted = threading.Event()  # set by interrupt(): a training in progress gives up
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened

    def _connect_reader(self) -> apsw.Connection:
        conn = apsw.Connection(str(self.db_path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(5000)
        _load(conn, self.extension)
        return conn

    # --- lifecycle ----------------------------------------------------------------------------------------

    def open(self, model: str, dimension: int) -> None:
        """Open (or create) the file for vectors of ``model`` with ``dimension``. Raises
        :class:`VectorsUnavailable`: the extension cannot be loaded, or the file holds vectors of another model
        or dimension (nothing is changed then: ``drop`` and open again to re-embed). A file of schema 3 is
        migrated in place, its vectors kept; an older one is started again (its texts are embedded anew)."""
        with self._write_lock:
            self.db_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                conn = self._connect_writer()
            except apsw.Error as exc:  # not a database (overwritten, truncated), unreadable
                raise VectorsUnavailable(
                    "vector_index_unusable", f"{self.db_path}: {type(exc).__name__}: {exc}", REBUILD_HINT
                ) from exc
            try:
                stored = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
                if stored and stored.get("schema_version") not in (str(SCHEMA_VERSION), "3"):
                    conn.close()
                    self._unlink()
                    conn = self._connect_writer()
                    stored = {}
                if stored:
                    _check_meta(stored, model, dimension)
                    if stored["schema_version"] == "3":
                        _migrate_from_3(conn, dimension)
                        conn.execute("VACUUM")  # give back the second copy's pages: GBs for a large workspace
                        stored = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
                else:
                    _create(conn, model, dimension)
                    stored = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
                self._scale = float(stored.get("int8_scale", "0"))
                conn.execute("CREATE TABLE IF NOT EXISTS refused(digest TEXT PRIMARY KEY)")
                self._count(conn)
                self.vectors = _scalar(conn, "SELECT count(*) FROM cache")
                centroids, self.trained_at = _load_centroids(conn, dimension)
                self._layout = (stored.get("vec_table", "vec_a"), centroids)
            except VectorsUnavailable:
                conn.close()
                raise
            except apsw.Error as exc:
                conn.close()
                raise VectorsUnavailable(
                    "vector_index_unusable", f"{self.db_path}: {type(exc).__name__}: {exc}", REBUILD_HINT
                ) from exc
            self._writer = conn
            info = os.stat(self.db_path)
            self._file_id = (info.st_dev, info.st_ino)
            self.model, self.dimension = model, dimension
            self._removed = True  # look for orphans once
            self._interrupted.clear()
            self._readers.reset(open_after=True)

    def check_file(self) -> str | None:
        """Why the open vector file is unusable, cheaply (a stat and a 16-byte read): "missing" (deleted while
        open), "replaced", "corrupt" (not a SQLite header); None when it looks sound or is not open. SQLite
        itself may not notice for a long while: in WAL mode its reads are served from the log and its cache."""
        if self._writer is None or self._file_id is None:
            return None
        return file_problem(self.db_path, self._file_id, header=True)

    def _connect_writer(self) -> apsw.Connection:
        conn = apsw.Connection(str(self.db_path))
        conn.set_busy_timeout(5000)
        try:
            _load(conn, self.extension)
            # the log is cut back after a checkpoint: training rewrites every vector in one transaction
            conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864;")
            conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        except BaseException:
            conn.close()
            raise
        return conn

    def interrupt(self) -> None:
        """Make a training in progress give up (its transaction rolls back; the cells stay as they were): the
        daemon stops without waiting a minute for 700k vectors to be filed again. Any thread."""
        self._interrupted.set()

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
        self.embedded = self.total = self.refused = self.vectors = 0

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
        transaction. New units whose text was embedded before have their vector at once (the cache)."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            paths = list(changed) + list(removed)
            with conn:
                for path in paths:
                    conn.execute("DELETE FROM units WHERE path = ?", (path,))
                    self._removed = self._removed or conn.changes() > 0
                    conn.execute("DELETE FROM docs WHERE path = ?", (path,))
                conn.executemany(
                    "INSERT INTO docs(path, sha256) VALUES(?, ?)", [(path, sha) for path, (sha, _) in changed.items()]
                )
                conn.executemany(
                    "INSERT INTO units(path, start_line, lines, heading, section_start, section_lines, text, digest, "
                    "priority, embedded) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, CASE "
                    "WHEN EXISTS(SELECT 1 FROM cache WHERE cache.digest = ?8) THEN 1 "
                    "WHEN EXISTS(SELECT 1 FROM refused WHERE refused.digest = ?8) THEN 2 ELSE 0 END)",
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
                self._count(conn)

    def _count(self, conn: apsw.Connection) -> None:
        counts = {int(e): int(n) for e, n in conn.execute("SELECT embedded, count(*) FROM units GROUP BY embedded")}
        self.embedded, self.refused = counts.get(1, 0), counts.get(2, 0)
        self.total = self.embedded + counts.get(0, 0)

    def refuse(self, items: list[tuple[int, str]]) -> None:
        """Units (unit id, digest) whose text the provider will not embed (an endpoint's 4xx, a vector that is not
        a number): set aside, and any unit with the same text, so that the backlog goes on. A changed text is a
        new digest and is tried again; so is everything after ``drop`` (a new model)."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            with conn:
                conn.executemany("INSERT OR IGNORE INTO refused(digest) VALUES(?)", [(d,) for _, d in items])
                conn.executemany(
                    "UPDATE units INDEXED BY units_digest SET embedded = 2 WHERE digest = ? AND embedded = 0",
                    [(d,) for _, d in items],
                )
                self._count(conn)

    def todo(self, limit: int) -> list[tuple[int, str, str]]:
        """Up to ``limit`` units not embedded yet, most wanted first: (unit id, text, digest)."""
        assert self._writer is not None
        rows = self._writer.execute(TODO_SQL, (limit,)).fetchall()
        return [(int(i), str(t), str(d)) for i, t, d in rows]  # type: ignore[arg-type]

    def store(self, items: list[tuple[int, str, bytes]]) -> None:
        """Vectors (float32, unit length) for units (unit id, digest, vector): one per distinct text, and every
        unit with that text is embedded by it. A unit deleted meanwhile leaves its vector to the cache."""
        if not items:
            return
        np = _numpy()
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            fresh: dict[str, bytes] = {}
            for _unit_id, digest, vector in items:
                fresh.setdefault(digest, vector)
            with conn:
                known = {
                    str(d)
                    for (d,) in conn.execute(
                        f"SELECT digest FROM cache WHERE digest IN ({','.join('?' * len(fresh))})", list(fresh)
                    )
                }
                new = [(d, v) for d, v in fresh.items() if d not in known]
                scale = self._scale
                if new:
                    data = np.frombuffer(b"".join(v for _, v in new), dtype="<f4").reshape(len(new), -1)
                    if not scale:  # from the first vectors: room for components a quarter larger
                        scale = _int8_scale(np, data)
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('int8_scale', ?)", (repr(scale),))
                    ids = []
                    for digest, _ in new:
                        conn.execute("INSERT INTO cache(digest) VALUES(?)", (digest,))
                        ids.append(conn.last_insert_rowid())
                    self._insert(conn, ids, data, scale)
                before = conn.total_changes()
                conn.executemany(MARK_SQL, [(d,) for d in fresh])
                marked = conn.total_changes() - before
            self._scale = scale  # committed: the counters and the scale follow
            self.vectors += len(new)
            self.embedded += marked

    def _insert(self, conn: apsw.Connection, ids: list[int], data: Any, scale: float) -> None:
        """Vectors (float rows of ``data``) into the current vec0 table, each in the cell of its nearest centroid
        (cell 0 before training)."""
        table, centroids = self._layout
        cells = _cells(centroids, data)
        quantised = _int8(_numpy(), data, scale)
        conn.executemany(
            f"INSERT INTO {table}(rowid, cell, embedding) VALUES(?, ?, vec_int8(?))",
            [(i, c, row.tobytes()) for i, c, row in zip(ids, cells, quantised, strict=True)],
        )

    # --- cells: an inverted file (IVF) in vec0's partitions ----------------------------------------------

    def should_train(self) -> bool:
        return self.vectors >= TRAIN_MIN and self.vectors >= RETRAIN_GROWTH * max(self.trained_at, TRAIN_MIN // 4)

    def train(self, cells: int | None = None) -> int:
        """Cluster the vectors (spherical k-means on a sample, one cell per CELL_SIZE vectors) and file every
        vector under its nearest centroid in the other vec0 table, which then becomes the current one, in one
        transaction (searches read the old cells until it commits). Returns the cells, or 0 when
        :meth:`interrupt` stopped it (nothing changed)."""
        np = _numpy()
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            count = self.vectors
            cells = cells or int(min(1024, max(16, round(count / CELL_SIZE))))
            sample_ids = [
                int(i)
                for (i,) in conn.execute(  # a digest-ordered sample: spread, and the same every time
                    "SELECT vector_id FROM cache ORDER BY digest LIMIT ?", (cells * SAMPLE_PER_CELL,)
                )
            ]
            sample = self._read(conn, sample_ids)
            centroids = _kmeans(np, sample, cells)
            current = self._layout[0]
            target = "vec_b" if current == "vec_a" else "vec_a"
            try:
                self._refile(conn, centroids, count, current, target)
            except _Interrupted:
                return 0
            self._layout, self.trained_at = (target, centroids), count
            return cells

    def _refile(self, conn: apsw.Connection, centroids: Any, count: int, current: str, target: str) -> None:
        np = _numpy()
        with conn:
            conn.execute(f"DROP TABLE IF EXISTS {target}")
            conn.execute(_vec0_ddl(target, self.dimension))
            conn.execute("DELETE FROM centroids")
            conn.executemany(
                "INSERT INTO centroids(cell, vector) VALUES(?, ?)",
                [(n, row.astype("<f4").tobytes()) for n, row in enumerate(centroids)],
            )
            source = conn.execute(f"SELECT rowid, embedding FROM {current}")
            while True:  # in batches: a 50 MB workspace has ~700k vectors
                batch = list(itertools.islice(source, 20_000))
                if not batch:
                    break
                if self._interrupted.is_set():
                    source.close()
                    raise _Interrupted  # the transaction rolls back
                ids = [int(i) for i, _ in batch]
                raw = np.frombuffer(b"".join(bytes(v) for _, v in batch), dtype=np.int8)
                raw = raw.reshape(len(batch), self.dimension)
                assigned = _cells(centroids, raw.astype("<f4"))  # the scale does not change which is nearest
                conn.executemany(
                    f"INSERT INTO {target}(rowid, cell, embedding) VALUES(?, ?, vec_int8(?))",
                    [(i, c, row.tobytes()) for i, c, row in zip(ids, assigned, raw, strict=True)],
                )
            conn.execute(f"DROP TABLE {current}")
            conn.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                [("trained_at", str(count)), ("vec_table", target)],
            )

    def _read(self, conn: apsw.Connection, ids: list[int]) -> Any:
        """The vectors of ``ids`` as float rows (int8 / scale), in that order."""
        np = _numpy()
        rows: dict[int, bytes] = {}
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            sql = f"SELECT rowid, embedding FROM {self._layout[0]} WHERE rowid IN ({','.join(map(str, part))})"
            rows.update((int(i), bytes(v)) for i, v in conn.execute(sql))
        data = np.frombuffer(b"".join(rows[i] for i in ids if i in rows), dtype=np.int8)
        return data.reshape(-1, self.dimension).astype("<f4") / np.float32(self._scale or 1.0)

    def probes(self) -> int:
        """Cells a search looks in: a quarter of them, 6 to 32 (a probe of ~1,500 int8 vectors costs ~0.7 ms)."""
        centroids = self._layout[1]
        if centroids is None:
            return 1
        cells = len(centroids)
        return int(min(cells, max(6, min(32, cells // 4))))

    def prune_cache(self) -> int:
        """Forget the vectors of texts no unit has any more, once they are many (a quarter of the vectors, or
        1,000): a text that comes back soon — a file renamed, an edit undone — keeps its vector. Returns how
        many were forgotten."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            if not self._removed:
                return 0
            distinct = _scalar(conn, "SELECT count(DISTINCT digest) FROM units WHERE embedded = 1")
            if self.vectors - distinct <= max(1000, self.vectors // 4):
                self._removed = False
                return 0
            with conn:
                conn.execute(
                    "CREATE TEMP TABLE gone AS SELECT vector_id FROM cache "
                    "WHERE NOT EXISTS (SELECT 1 FROM units WHERE units.digest = cache.digest)"
                )
                conn.execute(f"DELETE FROM {self._layout[0]} WHERE rowid IN (SELECT vector_id FROM temp.gone)")
                conn.execute("DELETE FROM cache WHERE vector_id IN (SELECT vector_id FROM temp.gone)")
                forgotten = int(conn.changes())
                conn.execute("DROP TABLE temp.gone")
            self.vectors -= forgotten
            self._removed = False
            return forgotten

    # --- search -------------------------------------------------------------------------------------------

    def search(self, vector: bytes, k: int, probes: int | None = None) -> list[VectorHit]:
        """The ``k`` embedded units nearest to ``vector``, nearest first: among all of them before the cells are
        trained, then among those in the ``probes`` cells whose centroids are nearest (approximate)."""
        layout = self._layout
        try:
            return self._search(layout, vector, k, probes)
        except apsw.SQLError:
            if self._layout is layout:
                raise
            return self._search(self._layout, vector, k, probes)  # trained meanwhile: the old table is gone

    def _search(self, layout: tuple[str, Any], vector: bytes, k: int, probes: int | None) -> list[VectorHit]:
        np = _numpy()
        table, centroids = layout
        scale = self._scale
        if not scale:
            return []
        query = np.frombuffer(vector, dtype="<f4")
        if centroids is None:
            cells = [0]
        else:
            scores = centroids @ query
            want = min(len(scores), probes or self.probes())
            cells = [int(c) for c in np.argpartition(-scores, want - 1)[:want]]
        # vec0 answers k per cell: the nearest k of them all are kept; a vector no unit has any more (waiting
        # for prune_cache) finds no unit, so a few more are asked for
        sql = (
            "SELECT u.path, u.start_line, u.lines, u.heading, u.section_start, u.section_lines, u.text, u.digest, "
            f"near.distance FROM (SELECT rowid, distance FROM {table} WHERE embedding MATCH vec_int8(?) AND k = ? "
            f"AND cell IN ({','.join(str(c) for c in cells)})) AS near "
            "JOIN cache c ON c.vector_id = near.rowid JOIN units u ON u.digest = c.digest "
            "ORDER BY near.distance, u.unit_id LIMIT ?"
        )
        with self._reading() as reader:
            if reader is None:
                return []
            rows = reader.execute(sql, (_int8(np, query[None, :], scale)[0].tobytes(), k + 8, k)).fetchall()
        # L2 between unit vectors: d² = 2 - 2·cos, so the cosine distance is d² / 2 (d in int8 units: / scale)
        return [
            VectorHit(str(p), int(s), int(n), str(h), int(ss), int(sl), str(t), str(d), (float(dist) / scale) ** 2 / 2)  # type: ignore[arg-type]
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


def _int8_scale(np: Any, data: Any) -> float:
    """The factor that maps components to int8: the largest component seen, with a quarter more room, to 127
    (at least 4/√d of room: a unit vector's components are ~1/√d)."""
    room = max(4 / float(np.sqrt(data.shape[1])), 1.25 * float(np.abs(data).max()))
    return 127.0 / room


def _int8(np: Any, data: Any, scale: float) -> Any:
    return np.clip(np.rint(data * scale), -127, 127).astype(np.int8)


def _cells(centroids: Any, data: Any) -> list[int]:
    if centroids is None or not len(data):
        return [0] * len(data)
    return [int(c) for c in _numpy().argmax(data @ centroids.T, axis=1)]


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


def _vec0_ddl(name: str, dimension: int) -> str:
    return f"CREATE VIRTUAL TABLE {name} USING vec0(cell INTEGER PARTITION KEY, embedding int8[{int(dimension)}])"


def _create(conn: apsw.Connection, model: str, dimension: int) -> None:
    with conn:
        conn.execute(
            """
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
            CREATE INDEX units_digest ON units(digest);
            CREATE TABLE cache(vector_id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE);
            CREATE TABLE refused(digest TEXT PRIMARY KEY);
            CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
            """
        )
        conn.execute(_vec0_ddl("vec_a", dimension))
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES(?, ?)",
            [
                ("schema_version", str(SCHEMA_VERSION)),
                ("model", model),
                ("dimension", str(dimension)),
                ("vec_table", "vec_a"),
            ],
        )


def _migrate_from_3(conn: apsw.Connection, dimension: int) -> None:
    """Schema 3 (float32 vectors twice: in ``units_vec`` by unit and in ``cache`` by digest) to 4, in one
    transaction: each cached vector once, as int8, in cell 0 (the worker trains cells again when they are many).
    The units and their embedded flags stay as they are: every embedded unit's digest is in the cache."""
    np = _numpy()
    with conn:
        conn.execute(
            """
            ALTER TABLE cache RENAME TO cache_v3;
            DROP TABLE units_vec;
            DELETE FROM centroids;
            DELETE FROM meta WHERE key = 'trained_at';
            CREATE INDEX IF NOT EXISTS units_digest ON units(digest);
            CREATE TABLE cache(vector_id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE);
            """
        )
        conn.execute(_vec0_ddl("vec_a", dimension))
        scale = 0.0
        rows = conn.execute("SELECT digest, vector FROM cache_v3 ORDER BY digest")
        while batch := list(itertools.islice(rows, 5000)):
            data = np.frombuffer(b"".join(bytes(v) for _, v in batch), dtype="<f4").reshape(len(batch), dimension)
            scale = scale or _int8_scale(np, data)
            ids = []
            for digest, _ in batch:
                conn.execute("INSERT INTO cache(digest) VALUES(?)", (digest,))
                ids.append(conn.last_insert_rowid())
            conn.executemany(
                "INSERT INTO vec_a(rowid, cell, embedding) VALUES(?, 0, vec_int8(?))",
                [(i, row.tobytes()) for i, row in zip(ids, _int8(np, data, scale), strict=True)],
            )
        conn.execute("DROP TABLE cache_v3")
        conn.execute("UPDATE units SET embedded = 0 WHERE embedded = 1 AND digest NOT IN (SELECT digest FROM cache)")
        conn.executemany(
            "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
            [("schema_version", str(SCHEMA_VERSION)), ("vec_table", "vec_a")]
            + ([("int8_scale", repr(scale))] if scale else []),
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
