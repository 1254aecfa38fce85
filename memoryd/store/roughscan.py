"""The vector side past the memory budget for float rows (decision 0022): every vector's rough row in memory, the
shortlist's full vectors read from the file by id.

While the vectors fit ``vector_memory_mb`` as float32 rows, :class:`~memoryd.store.vectorscan.MemoryScan` scans
them. Past that (the 50 MB corpus: 670,000 vectors, 1.3 GB as floats) sqlite-vec scanned the probed cells from the
file: ~50,000 int8 vectors in a scalar loop, ~26 ms a search. Here each vector is kept only as its projection on the
``ROUGH_DIMS`` principal directions, as int8 (192 bytes: 670,000 vectors are 129 MB), in cell order. A search scores
the rows of twice the cells vec0 would probe on those directions, takes the best ``SHORTLIST_PER_HIT`` per hit
wanted (at least ``SHORTLIST_MIN``), reads their int8 vectors from ``vector_rows`` by id (~1.3 ms for 512) and
scores those in full: the similarities it returns are the full ones, as on the other two paths.

The embedding worker builds it when it has nothing else to do (:meth:`RoughScan.build`: ~8 s for 670,000 vectors,
given up when the daemon stops); until then, and after the cells are trained again (another vec0 table), searches
read the file as before. Vectors stored since the build wait in a tail (projected as they come), scanned with the
probed cells' rows, and join the rows in cell order when the tail is large. Thread-safe.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import apsw

from memoryd.store.passage import VectorHit
from memoryd.store.vector_schema import arithmetic as _cells
from memoryd.store.vectorscan import TAIL_MIN, TAIL_SHARE, units_of

ROUGH_DIMS = 192  # principal directions kept per vector (128 kept .617 of the exact top 10 at 50 MB; 192 .745)
ROUGH_PROBE_FACTOR = 2  # cells scored: twice vec0's probes (the rough rows are cheap; the shortlist is exact)
BUILD_BATCH = 50_000  # vectors read from vec0 at a time while building (the stop flag is looked at between)
ROOM = 1.5  # the rough rows' int8 scale leaves this much room over the sample's largest component
ROW_BYTES = ROUGH_DIMS + 16  # a rough row, its id and its cell


@dataclass(frozen=True, slots=True)
class _Rows:
    table: str  # the vec0 table (cells) the rows were read from
    ids: Any  # vector ids, in cell order
    cells: Any
    rows: Any  # int8 (vectors, ROUGH_DIMS), in cell order
    starts: Any  # cell c is starts[c]:starts[c + 1]
    directions: Any  # float32 (dimension, ROUGH_DIMS)
    scale: float  # rough int8 component = round(projected component × scale)


class RoughScan:
    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._rows: _Rows | None = None
        # vectors stored since the build, (ids, cells, rough int8 rows) a batch each: joined into one tail by the
        # next search (not copied again for every batch), into the rows when they are many
        self._tail: list[tuple[Any, Any, Any]] = []
        self._waiting = 0
        self._lock = threading.Lock()

    def fits(self, vectors: int) -> bool:
        return vectors * ROW_BYTES <= self.max_bytes

    def ready(self, table: str) -> bool:
        rows = self._rows
        return rows is not None and rows.table == table

    def forget(self) -> None:
        with self._lock:
            self._rows, self._tail, self._waiting = None, [], 0

    def build(self, reader: apsw.Connection, table: str, dimension: int, scale: float, stop: threading.Event) -> bool:
        """Read every vector of ``table`` and keep its rough row. False when ``stop`` was set meanwhile (nothing
        kept). The principal directions come from a digest-ordered sample of the vectors (spread over the cells;
        vec0 hands its rows out cell by cell)."""
        arithmetic = _cells()
        sample_ids = [int(i) for (i,) in reader.execute("SELECT vector_id FROM cache ORDER BY digest LIMIT 4096")]
        _, sample = read_rows(reader, sample_ids, dimension, scale)
        if not len(sample):
            return False
        directions = arithmetic.basis(sample, ROUGH_DIMS)
        largest = float(abs(arithmetic.project(sample, directions)).max())
        rough_scale = 127.0 / (ROOM * largest) if largest > 0 else 1.0
        parts = []
        source = reader.execute(f"SELECT rowid, cell, embedding FROM {table}")
        while batch := list(itertools.islice(source, BUILD_BATCH)):
            if stop.is_set():
                source.close()
                return False
            raw = arithmetic.from_bytes(b"".join(bytes(v) for _, _, v in batch), dimension, "int8")
            parts.append(
                (
                    arithmetic.ids([int(i) for i, _, _ in batch]),
                    arithmetic.ids([int(c) for _, c, _ in batch]),
                    rough_rows(arithmetic.dequantise(raw, scale), directions, rough_scale),
                )
            )
        if not parts:
            return False
        stacked = arithmetic.stack3(parts, dtype="int8")
        parts.clear()  # two copies of the rows at most while they are put in cell order, not three
        ids, cells, rows, starts = arithmetic.by_cell(*stacked)
        del stacked
        with self._lock:
            self._rows = _Rows(table, ids, cells, rows, starts, directions, rough_scale)
            self._tail, self._waiting = [], 0
        return True

    def add(self, ids: list[int], cells: list[int], rows: Any) -> None:
        """Vectors just stored (float rows as quantised, in the cells they went to) join the tail, if rows are kept."""
        arithmetic = _cells()
        with self._lock:
            current = self._rows
            if current is None:
                return
            self._tail.append(
                (arithmetic.ids(ids), arithmetic.ids(cells), rough_rows(rows, current.directions, current.scale))
            )
            self._waiting += len(ids)
            if self._waiting >= max(TAIL_MIN, len(current.ids) // TAIL_SHARE):  # join, in cell order
                ids_, cells_, rows_, starts = arithmetic.by_cell(
                    *arithmetic.stack3([(current.ids, current.cells, current.rows), *self._tail], dtype="int8")
                )
                self._rows = _Rows(current.table, ids_, cells_, rows_, starts, current.directions, current.scale)
                self._tail, self._waiting = [], 0

    def search(
        self,
        reader: apsw.Connection,
        table: str,
        dimension: int,
        scale: float,
        vector: bytes,
        k: int,
        depth: int,
        exclude: str | None,
        centroids: Any,
        probes: int,
    ) -> tuple[list[VectorHit], list[float]] | None:
        """:meth:`MemoryScan.search`'s answer from the rough rows and the shortlist's vectors; None when no rows are
        kept for ``table`` (not built yet, or the cells were trained since): the caller reads the file."""
        arithmetic = _cells()
        with self._lock:
            if len(self._tail) > 1:
                self._tail = [arithmetic.stack3(self._tail, dtype="int8")]
            current, tail = self._rows, (self._tail[0] if self._tail else None)
        if current is None or current.table != table:
            return None
        query = arithmetic.from_bytes(vector, dimension)[0]
        count = 1 if centroids is None else len(centroids)
        chosen = arithmetic.nearest_cells(centroids, query, min(count, ROUGH_PROBE_FACTOR * probes))
        low = query @ current.directions
        spans = arithmetic.spans_of(current.starts, chosen)
        scores = arithmetic.scored(current.rows, spans, low)
        candidates = current.ids[arithmetic.rows_of(spans)]
        if tail is not None:  # the vectors stored since: those in the probed cells
            tail_ids, tail_cells, tail_rows = tail
            keep = arithmetic.in_cells(tail_cells, chosen)
            scores = arithmetic.concat([scores, tail_rows[keep].astype("<f4") @ low])
            candidates = arithmetic.concat([candidates, tail_ids[keep]])
        wanted = max(k, depth) + 8
        shortlist = sorted(int(i) for i in candidates[arithmetic.best(scores, arithmetic.shortlist_size(wanted))])
        kept, full = read_rows(reader, shortlist, dimension, scale)  # in id order: the table is read front to back
        near, similarity = arithmetic.top(full, query, wanted)
        distances = [1.0 - s for s in similarity]
        return units_of(reader, [kept[n] for n in near], distances, k, exclude), distances


def rough_rows(rows: Any, directions: Any, scale: float) -> Any:
    """Float rows → their rough rows: the projection on ``directions``, as int8."""
    arithmetic = _cells()
    return arithmetic.quantise(arithmetic.project(rows, directions), scale)


def read_rows(reader: apsw.Connection, ids: list[int], dimension: int, scale: float) -> tuple[list[int], Any]:
    """The vectors of ``ids`` from ``vector_rows`` as float rows (int8 / scale), and the ids found, in the order
    asked (a vector pruned meanwhile is left out)."""
    arithmetic = _cells()
    found: dict[int, bytes] = {}
    for start in range(0, len(ids), 900):
        part = ids[start : start + 900]
        sql = f"SELECT vector_id, embedding FROM vector_rows WHERE vector_id IN ({','.join(map(str, part))})"
        found.update((int(i), bytes(v)) for i, v in reader.execute(sql))
    kept = [i for i in ids if i in found]
    data = b"".join(found[i] for i in kept)
    return kept, arithmetic.dequantise(arithmetic.from_bytes(data, dimension, "int8"), scale)
