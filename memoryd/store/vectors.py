"""One workspace's vector index: its passages ("units") and their embeddings, in ``vectors.sqlite`` beside the
text index (its tables and migrations: :mod:`memoryd.store.vector_schema`; the arithmetic — int8, k-means, cells,
probes — :mod:`memoryd.store.cells`).

Each vector is stored once, as int8 in a sqlite-vec ``vec0`` table that is the cache's store too (a text seen
before is never embedded again, whether its file was re-chunked, the text index rebuilt, or a file renamed), and
compared by L2, which orders unit vectors as cosine does. From TRAIN_MIN vectors they are filed in cells (IVF) and
a search probes the nearest cells only. The file is separate from the text index because a text-index rebuild
swaps that file whole: vectors would be lost with it.

The extension is loaded by its file path into every connection (``import sqlite_vec`` costs ~350 ms with numpy
installed; its location is found without importing it). One writer, the embedding worker thread; reads from any
thread, each on its own connection (:class:`~memoryd.store.readers.ReaderPool`). Blocking: call from worker
threads.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import apsw

from memoryd import fsio
from memoryd.store import migrations
from memoryd.store.migrations import UnknownMigrations
from memoryd.store.passage import Unit, VectorHit
from memoryd.store.readers import ReaderPool, file_problem
from memoryd.store.roughscan import RoughScan, read_rows
from memoryd.store.vector_schema import (
    KEPT_LEGACY,
    MARK_SQL,
    MIGRATIONS,
    REBUILD_HINT,
    TODO_SQL,
    VectorSpace,
    VectorsUnavailable,
    check_meta,
    load_centroids,
    load_extension,
    meta,
    scalar,
    vec0_ddl,
)
from memoryd.store.vector_schema import arithmetic as _cells
from memoryd.store.vectorscan import MemoryScan, file_search


class _Interrupted(Exception):
    pass


__all__ = ["Unit", "VectorHit", "VectorIndex"]  # Unit and VectorHit live with Passage (store/passage.py)


class VectorIndex:
    def __init__(self, db_path: Path, extension: Path | None, memory_max_bytes: int = 256 * 1024 * 1024) -> None:
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
        # While they fit memory_max_bytes the vectors are scanned in memory (store/vectorscan.py); past that their
        # rough rows are, once the embedding worker has built them (store/roughscan.py); else vec0 scans the file
        self._scan = MemoryScan(memory_max_bytes)
        self._rough = RoughScan(memory_max_bytes)

    def _connect_reader(self) -> apsw.Connection:
        conn = apsw.Connection(str(self.db_path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(5000)
        load_extension(conn, self.extension)
        return conn

    # --- lifecycle ----------------------------------------------------------------------------------------

    def open(self, model: str, dimension: int) -> None:
        """Open (or create) the file for vectors of ``model`` with ``dimension``. Raises
        :class:`VectorsUnavailable`: the extension cannot be loaded, or the file holds vectors of another model
        or dimension (nothing is changed then: ``drop`` and open again to re-embed). A file of schema 3 is
        migrated in place, its vectors kept; an older one is started again (its texts are embedded anew)."""
        with self._write_lock:
            fsio.make_private_dir(self.db_path.parent)
            try:
                conn = self._connect_writer()
            except apsw.Error as exc:  # not a database (overwritten, truncated), unreadable
                raise VectorsUnavailable(
                    "vector_index_unusable", f"{self.db_path}: {type(exc).__name__}: {exc}", REBUILD_HINT
                ) from exc
            try:
                conn = self._migrate(conn, VectorSpace(model, dimension))
                stored = meta(conn)
                self._scale = float(stored.get("int8_scale", "0"))
                self._count(conn)
                self.vectors = scalar(conn, "SELECT count(*) FROM cache")
                centroids, self.trained_at = load_centroids(conn, dimension)
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
            self._scan.forget()
            self._rough.forget()
            self._readers.reset(open_after=True)

    def _migrate(self, conn: apsw.Connection, space: VectorSpace) -> apsw.Connection:
        """Bring the file to the current schema: its missing migrations, in one transaction, recorded
        (:mod:`memoryd.store.migrations`). A file of another model or dimension raises, changing nothing; a file
        whose vectors are not kept (schema 1 or 2, or from a newer version) is started again, recorded as
        ``rebuilt_from_schema_<N>``. Returns the connection to use (a new one when the file was started again)."""
        stored = meta(conn)
        recorded = migrations.has_table(conn)
        try:
            MIGRATIONS.pending(conn)
            kept = recorded or stored.get("schema_version") in KEPT_LEGACY
        except UnknownMigrations:
            kept = False
        records: list[str] = []
        if stored and kept:
            check_meta(stored, space.model, space.dimension)
        elif stored or recorded:
            records = [f"rebuilt_from_schema_{stored.get('schema_version', 'unknown')}"]
            conn.close()
            self._unlink()
            conn = self._connect_writer()
        applied = MIGRATIONS.apply(conn, space, records)
        if "0002_int8_vectors_once" in applied and "0001_units_float_vectors" not in applied:
            conn.execute("VACUUM")  # give back the float copies' pages: GBs for a large workspace
        return conn

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
            load_extension(conn, self.extension)
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
        self._scan.forget()
        self._rough.forget()

    def drop(self) -> None:
        """Close and delete the file (and its WAL): the next ``open`` starts empty."""
        self.close()
        self._unlink()
        self.embedded = self.total = self.refused = self.vectors = 0

    def _unlink(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            fsio.remove(Path(str(self.db_path) + suffix))

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
                            u.passage.path,
                            u.passage.start_line,
                            u.passage.lines,
                            u.passage.heading,
                            u.passage.section_start,
                            u.passage.section_lines,
                            u.passage.text,
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
        cells = _cells()
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
                    data = cells.from_bytes(b"".join(v for _, v in new), len(new[0][1]) // 4)
                    if not scale:  # from the first vectors: room for components a quarter larger
                        scale = cells.int8_scale(data)
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('int8_scale', ?)", (repr(scale),))
                    ids = []
                    for digest, _ in new:
                        conn.execute("INSERT INTO cache(digest) VALUES(?)", (digest,))
                        ids.append(conn.last_insert_rowid())
                    assigned = self._insert(conn, ids, data, scale)
                    stored = cells.dequantise(cells.quantise(data, scale), scale)
                    self._scan.add(ids, assigned, stored)
                    self._rough.add(ids, assigned, stored)
                before = conn.total_changes()
                conn.executemany(MARK_SQL, [(d,) for d in fresh])
                marked = conn.total_changes() - before
            self._scale = scale  # committed: the counters and the scale follow
            self.vectors += len(new)
            self.embedded += marked
            if new and not self._scan.fits(self.vectors, self.dimension):  # past the budget: rough rows, or the file
                self._scan.forget()  # and the matrix (with what waited to join it) is let go
            if new and not self._rough.fits(self.vectors):
                self._rough.forget()

    def _insert(self, conn: apsw.Connection, ids: list[int], data: Any, scale: float) -> list[int]:
        """Vectors (float rows of ``data``) into the current vec0 table, each in the cell of its nearest centroid
        (cell 0 before training); returns their cells."""
        table, centroids = self._layout
        cells = _cells()
        assigned: list[int] = cells.assign(centroids, data)
        rows = [(i, c, row.tobytes()) for i, c, row in zip(ids, assigned, cells.quantise(data, scale), strict=True)]
        conn.executemany(f"INSERT INTO {table}(rowid, cell, embedding) VALUES(?, ?, vec_int8(?))", rows)
        conn.executemany("INSERT INTO vector_rows(vector_id, embedding) VALUES(?, ?)", [(i, v) for i, _, v in rows])
        return assigned

    # --- cells: an inverted file (IVF) in vec0's partitions ----------------------------------------------

    def should_train(self) -> bool:
        return bool(_cells().should_train(self.vectors, self.trained_at))

    def train(self, cells: int | None = None) -> int:
        """Cluster the vectors (spherical k-means on a sample, one cell per CELL_SIZE vectors) and file every
        vector under its nearest centroid in the other vec0 table, which then becomes the current one, in one
        transaction (searches read the old cells until it commits). Returns the cells, or 0 when
        :meth:`interrupt` stopped it (nothing changed)."""
        arithmetic = _cells()
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            count = self.vectors
            cells = cells or arithmetic.cells_for(count)
            sample_ids = [
                int(i)
                for (i,) in conn.execute(  # a digest-ordered sample: spread, and the same every time
                    "SELECT vector_id FROM cache ORDER BY digest LIMIT ?", (cells * arithmetic.SAMPLE_PER_CELL,)
                )
            ]
            sample = read_rows(conn, sample_ids, self.dimension, self._scale)[1]
            centroids = arithmetic.kmeans(sample, cells)
            current = self._layout[0]
            target = "vec_b" if current == "vec_a" else "vec_a"
            try:
                self._refile(conn, centroids, count, current, target)
            except _Interrupted:
                return 0
            # The new table becomes the current one for the file and for the searches at once: a search that read
            # the old name meanwhile finds it gone afterwards, sees the new one and asks again (nearest).
            with self._readers.lock.exclusive(), conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                    [("trained_at", str(count)), ("vec_table", target)],
                )
                self._layout, self.trained_at = (target, centroids), count
                self._scan.forget()
                self._rough.forget()
            conn.execute(f"DROP TABLE {current}")  # (a crash before it: the next training drops it first)
            return cells

    def _refile(self, conn: apsw.Connection, centroids: Any, count: int, current: str, target: str) -> None:
        cells = _cells()
        with conn:
            conn.execute(f"DROP TABLE IF EXISTS {target}")
            conn.execute(vec0_ddl(target, self.dimension))
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
                raw = cells.from_bytes(b"".join(bytes(v) for _, v in batch), self.dimension, "int8")
                assigned = cells.assign(centroids, raw)  # the scale does not change which is nearest
                conn.executemany(
                    f"INSERT INTO {target}(rowid, cell, embedding) VALUES(?, ?, vec_int8(?))",
                    [(i, c, row.tobytes()) for i, c, row in zip(ids, assigned, raw, strict=True)],
                )

    def probes(self) -> int:
        """Cells a search looks in: a quarter of them, 6 to 32 (a probe of ~1,500 int8 vectors costs ~0.7 ms)."""
        centroids = self._layout[1]
        return int(_cells().probe_count(0 if centroids is None else len(centroids)))

    def prune_cache(self) -> int:
        """Forget the vectors of texts no unit has any more, once they are many (a quarter of the vectors, or
        1,000): a text that comes back soon — a file renamed, an edit undone — keeps its vector. Returns how
        many were forgotten."""
        with self._write_lock:
            conn = self._writer
            assert conn is not None
            if not self._removed:
                return 0
            distinct = scalar(conn, "SELECT count(DISTINCT digest) FROM units WHERE embedded = 1")
            if self.vectors - distinct <= max(1000, self.vectors // 4):
                self._removed = False
                return 0
            with conn:
                conn.execute(
                    "CREATE TEMP TABLE gone AS SELECT vector_id FROM cache "
                    "WHERE NOT EXISTS (SELECT 1 FROM units WHERE units.digest = cache.digest)"
                )
                conn.execute(f"DELETE FROM {self._layout[0]} WHERE rowid IN (SELECT vector_id FROM temp.gone)")
                conn.execute("DELETE FROM vector_rows WHERE vector_id IN (SELECT vector_id FROM temp.gone)")
                conn.execute("DELETE FROM cache WHERE vector_id IN (SELECT vector_id FROM temp.gone)")
                forgotten = int(conn.changes())
                conn.execute("DROP TABLE temp.gone")
            self._scan.forget()
            self._rough.forget()
            self.vectors -= forgotten
            self._removed = False
            return forgotten

    # --- search -------------------------------------------------------------------------------------------

    def search(self, vector: bytes, k: int, probes: int | None = None) -> list[VectorHit]:
        """The ``k`` embedded units nearest to ``vector``, nearest first: among all of them before the cells are
        trained (in memory), then among those in the ``probes`` cells whose centroids are nearest (approximate)."""
        return self.nearest(vector, k, probes=probes)[0]

    def nearest(
        self, vector: bytes, k: int, depth: int = 0, probes: int | None = None, exclude: str | None = None
    ) -> tuple[list[VectorHit], list[float]]:
        """:meth:`search` (no unit whose path starts with ``exclude``), and the cosine distances of the nearest
        ``max(k, depth)`` vectors: how near the passages a query does not want come (a noise floor), without
        reading the units of them all."""
        layout = self._layout
        for _ in range(3):
            try:
                return self._nearest(layout, vector, k, depth, probes, exclude)
            except apsw.SQLError:
                if self._layout is layout:
                    raise
                layout = self._layout  # trained meanwhile (maybe more than once): the old table is gone
        return self._nearest(layout, vector, k, depth, probes, exclude)

    def _nearest(
        self, layout: tuple[str, Any], vector: bytes, k: int, depth: int, probes: int | None, exclude: str | None
    ) -> tuple[list[VectorHit], list[float]]:
        table, centroids = layout
        with self._reading() as reader:
            if reader is None or not self._scale:
                return [], []
            args = (reader, table, self.dimension, self._scale, vector, k, depth, exclude, centroids)
            if self._scan.fits(self.vectors, self.dimension):  # float rows in memory
                return self._scan.search(*args, probes)
            found = self._rough.search(*args, probes or self.probes())  # rough rows in memory, once built
            if found is not None:
                return found
            return file_search(reader, table, self._scale, vector, k, depth, exclude, centroids, probes)

    def scan_path(self) -> Literal["memory", "rough", "file"]:
        """How a search reads the vectors now (status)."""
        if self._scan.fits(self.vectors, self.dimension):
            return "memory"
        return "rough" if self._rough.ready(self._layout[0]) else "file"

    def prepare(self) -> bool:
        """Past the budget for float rows, build the rough rows for searches (store/roughscan.py): the embedding
        worker calls this when it has nothing else to do. True when it built them (seconds for a large file;
        given up, False, when :meth:`interrupt` is called)."""
        table = self._layout[0]
        if not self._scale or self._scan.fits(self.vectors, self.dimension) or not self._rough.fits(self.vectors):
            return False
        if self._rough.ready(table):
            return False
        with self._reading() as reader:
            if reader is None:
                return False
            return self._rough.build(reader, table, self.dimension, self._scale, self._interrupted)
