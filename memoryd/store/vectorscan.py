"""The vector side's scans. In memory while the vectors fit a budget (``vector_memory_mb``, 256 MB: ~104,000 vectors
of 512 floats and their projected rows): the vectors as float32 rows in cell order, a search scanning the rows of
the cells it probes (all of them before store/vectors.py trains cells, from 20,000 vectors) — ~1 ms at 14,000 ×
512 in one pass, ~0.4 in two (decision 0021), where vec0's int8 scan took ~8 — then the nearest ones' units read
from SQLite. Past the budget, sqlite-vec scans the probed cells from the file (:func:`file_search`).

The matrix is read by the first search, grown as vectors are stored (the next search joins the new rows), and
forgotten when vectors are removed, cells are trained or the file is reopened. Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any

import apsw

from memoryd.store.passage import Passage, VectorHit
from memoryd.store.vector_schema import arithmetic as _cells

TAIL_MIN = 2048  # vectors stored since the matrix was read are kept apart (scanned whole) up to this many …
TAIL_SHARE = 8  # … or an eighth of the matrix, whichever is more; then merged into its cells (one sort, one copy)


class MemoryScan:
    """The vectors as float32 rows in memory, in cell order (one cell before training), each search scanning the
    rows of the cells it probes — the cells vec0 would probe, scanned with numpy's product instead of vec0's
    int8 loop (a fifth of the time or less). Kept while the vectors fit ``max_bytes``.

    Vectors stored after the matrix was read (a backlog being embedded: 32 at a time) wait in a small tail,
    scanned whole with the probed cells' rows, and join the matrix once the tail is large: not a sort and a copy of
    the whole matrix for every batch."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        # (vector ids, their cells, float32 rows, where each cell's rows start): see cells.by_cell
        self._memory: tuple[Any, Any, Any, Any] | None = None
        self._tail: tuple[Any, Any, Any] | None = None  # (ids, cells, float32 rows) stored since, not yet merged
        self._parts: list[tuple[list[int], list[int], Any]] = []
        # The rough pass (cells.top_in): the matrix's rows on their principal directions, and those directions
        # (worked out again when the rows have doubled since); None below SHORTLIST_MIN_ROWS rows.
        self._shortlist: tuple[Any, Any] | None = None
        self._basis_rows = 0
        self._table = ""  # the vec0 table the matrix was read from
        self._lock = threading.Lock()

    def fits(self, vectors: int, dimension: int) -> bool:
        """Whether ``vectors`` rows, and their rough pass's, fit the budget."""
        return vectors * (dimension + int(_cells().SHORTLIST_DIMS)) * 4 <= self.max_bytes

    def add(self, ids: list[int], cells: list[int], rows: Any) -> None:
        """Vectors just stored (float rows, as quantised, in the cells they went to) join the matrix, if one is
        kept."""
        with self._lock:
            if self._memory is not None:
                self._parts.append((ids, cells, rows))

    def forget(self) -> None:
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._memory, self._tail, self._parts, self._shortlist, self._basis_rows = None, None, [], None, 0

    def _project(self) -> None:
        """The rough pass's matrix for the rows now kept (under the lock, after they changed)."""
        arithmetic = _cells()
        assert self._memory is not None
        rows = self._memory[2]
        if len(rows) < arithmetic.SHORTLIST_MIN_ROWS:
            self._shortlist = None
            return
        directions = None if self._shortlist is None else self._shortlist[1]
        if directions is None or len(rows) >= 2 * self._basis_rows:
            directions, self._basis_rows = arithmetic.basis(rows), len(rows)
        self._shortlist = (arithmetic.project(rows, directions), directions)

    def _matrix(
        self, reader: apsw.Connection, table: str, dimension: int, scale: float
    ) -> tuple[tuple[Any, Any, Any, Any], tuple[Any, Any, Any] | None, tuple[Any, Any] | None]:
        arithmetic = _cells()
        with self._lock:
            if self._memory is not None and self._table != table:  # cells trained since: another table
                self._forget()
            if self._memory is None:
                self._table = table
                ids, cells, raw = [], [], []
                for i, c, v in reader.execute(f"SELECT rowid, cell, embedding FROM {table}"):
                    ids.append(int(i))
                    cells.append(int(c))
                    raw.append(bytes(v))
                # put in cell order as int8 (a quarter of the floats' bytes), then made floats once
                ordered = arithmetic.by_cell(
                    arithmetic.ids(ids), arithmetic.ids(cells), arithmetic.from_bytes(b"".join(raw), dimension, "int8")
                )
                self._memory = (*ordered[:2], arithmetic.dequantise(ordered[2], scale), ordered[3])
                self._tail, self._parts = None, []
                self._project()
            elif self._parts:
                parts = [] if self._tail is None else [self._tail]
                parts += [(arithmetic.ids(i), arithmetic.ids(c), r) for i, c, r in self._parts]
                self._parts = []
                tail = arithmetic.stack3(parts)
                ids_, cells_, rows_, _ = self._memory
                if len(tail[0]) >= max(TAIL_MIN, len(ids_) // TAIL_SHARE):
                    self._memory = arithmetic.by_cell(*arithmetic.stack3([(ids_, cells_, rows_), tail]))
                    self._tail = None
                    self._project()
                else:
                    self._tail = tail
            return self._memory, self._tail, self._shortlist

    def search(
        self,
        reader: apsw.Connection,
        table: str,
        dimension: int,
        scale: float,
        vector: bytes,
        k: int,
        depth: int = 0,
        exclude: str | None = None,
        centroids: Any = None,
        probes: int | None = None,
    ) -> tuple[list[VectorHit], list[float]]:
        """The ``k`` units nearest ``vector`` (float32 bytes, unit length), nearest first, among the rows of the
        ``probes`` cells nearest it (every row before training: ``centroids`` None), and the cosine distances of
        the nearest ``max(k, depth)`` vectors (the units of only the first ones are read)."""
        arithmetic = _cells()
        (ids, _cells_of, rows, starts), tail, shortlist = self._matrix(reader, table, dimension, scale)
        if not len(ids) and tail is None:
            return [], []
        query = arithmetic.from_bytes(vector, dimension)[0]
        chosen = None if centroids is None else arithmetic.nearest_cells(centroids, query, probes)
        wanted = max(k, depth) + 8
        near, similarity = arithmetic.top_in(rows, starts, chosen, query, wanted, shortlist)
        found = [(float(s), int(ids[n])) for n, s in zip(near, similarity, strict=True)]
        if tail is not None:  # the vectors stored since: those in the probed cells
            tail_ids, tail_cells, tail_rows = tail
            keep = arithmetic.in_cells(tail_cells, chosen)
            kept_ids = tail_ids[keep]
            more, more_similarity = arithmetic.top(tail_rows[keep], query, wanted)
            found += [(float(s), int(kept_ids[n])) for n, s in zip(more, more_similarity, strict=True)]
            found.sort(key=lambda f: -f[0])
            del found[wanted:]
        distances = [1.0 - s for s, _ in found]
        return units_of(reader, [vid for _, vid in found], distances, k, exclude), distances


def file_search(
    reader: apsw.Connection,
    table: str,
    scale: float,
    vector: bytes,
    k: int,
    depth: int = 0,
    exclude: str | None = None,
    centroids: Any = None,
    probes: int | None = None,
) -> tuple[list[VectorHit], list[float]]:
    """:meth:`MemoryScan.search` by sqlite-vec over the file: its int8 scan of the probed cells (past the budget)."""
    arithmetic = _cells()
    query = arithmetic.from_bytes(vector, len(vector) // 4)
    cells = arithmetic.nearest_cells(centroids, query[0], probes)
    # vec0 answers k per cell (it takes no LIMIT beside k): the nearest of them all are kept; then the units of the
    # first ones only
    wanted = max(k, depth) + 8
    sql = (
        f"SELECT rowid, distance FROM {table} WHERE embedding MATCH vec_int8(?) AND k = ? "
        f"AND cell IN ({','.join(str(c) for c in cells)})"
    )
    rows = reader.execute(sql, (arithmetic.quantise(query, scale)[0].tobytes(), wanted))
    found = sorted((float(d), int(i)) for i, d in rows)
    del found[wanted:]
    # L2 between unit vectors: d² = 2 - 2·cos, so the cosine distance is d² / 2 (d in int8 units: / scale)
    distances = [(d / scale) ** 2 / 2 for d, _ in found]
    return units_of(reader, [i for _, i in found], distances, k, exclude), distances


def units_of(
    reader: apsw.Connection, vector_ids: list[int], distances: list[float], k: int, exclude: str | None = None
) -> list[VectorHit]:
    """The nearest ``k`` units of the vectors ``vector_ids`` (nearest first, ``distances`` theirs), none whose path
    starts with ``exclude``: each vector's units, in unit order (one text in many places has one vector and many
    units), from the first ``k + 8`` vectors (a vector no unit has any more, waiting for prune_cache, finds none:
    the slack covers it)."""
    chosen = vector_ids[: k + 8]
    if not chosen or k <= 0:
        return []
    sql = (
        "SELECT c.vector_id, u.path, u.start_line, u.lines, u.heading, u.section_start, u.section_lines, u.text, "
        f"u.digest FROM cache c JOIN units u ON u.digest = c.digest WHERE c.vector_id IN ({','.join('?' * len(chosen))}) "
        + ("" if exclude is None else "AND substr(u.path, 1, ?) != ? ")
        + "ORDER BY u.unit_id"
    )
    args: list[Any] = [*chosen] if exclude is None else [*chosen, len(exclude), exclude]
    units: dict[int, list[Any]] = {}
    for vid, *row in reader.execute(sql, args):
        units.setdefault(int(vid), []).append(row)
    out = []
    for vid, distance in zip(chosen, distances, strict=False):
        for p, s, n, h, ss, sl, t, d in units.get(vid, ()):
            out.append(VectorHit(Passage(str(p), int(s), int(n), str(h), int(ss), int(sl), str(t)), str(d), distance))
            if len(out) == k:
                return out
    return out
