"""The vector side's exact search in memory, for a workspace below the cells' threshold (store/vectors.py trains
cells from 20,000 vectors): its vectors as one float32 matrix, scanned with one product — ~1 ms at 14,000 × 512,
where vec0's int8 scan took ~8 — then the nearest ones' units read from SQLite.

The matrix is read by the first search, grown as vectors are stored (the next search joins the new rows), and
forgotten when vectors are removed, cells are trained or the file is reopened. Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any

import apsw

from memoryd.store.passage import Passage, VectorHit
from memoryd.store.vector_schema import arithmetic as _cells


class MemoryScan:
    def __init__(self) -> None:
        self._memory: tuple[Any, Any] | None = None  # (vector ids, float32 rows)
        self._parts: list[tuple[list[int], Any]] = []
        self._lock = threading.Lock()

    def add(self, ids: list[int], rows: Any) -> None:
        """Vectors just stored (float rows, as quantised) join the matrix, if one is kept."""
        with self._lock:
            if self._memory is not None:
                self._parts.append((ids, rows))

    def forget(self) -> None:
        with self._lock:
            self._memory, self._parts = None, []

    def _matrix(self, reader: apsw.Connection, table: str, dimension: int, scale: float) -> tuple[Any, Any]:
        arithmetic = _cells()
        with self._lock:
            if self._memory is None:
                ids, raw = [], []
                for i, v in reader.execute(f"SELECT rowid, embedding FROM {table}"):
                    ids.append(int(i))
                    raw.append(bytes(v))
                rows = arithmetic.from_bytes(b"".join(raw), dimension, "int8")
                self._memory = (arithmetic.ids(ids), arithmetic.dequantise(rows, scale))
                self._parts = []
            elif self._parts:
                parts = [self._memory, *((arithmetic.ids(i), r) for i, r in self._parts)]
                self._memory = arithmetic.stack(parts)
                self._parts = []
            return self._memory

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
    ) -> tuple[list[VectorHit], list[float]]:
        """The ``k`` units nearest ``vector`` (float32 bytes, unit length), nearest first, and the cosine distances
        of the nearest ``max(k, depth)`` vectors (the units of only the first ones are read)."""
        arithmetic = _cells()
        ids, rows = self._matrix(reader, table, dimension, scale)
        if not len(ids):
            return [], []
        near, similarity = arithmetic.top(rows, arithmetic.from_bytes(vector, dimension)[0], max(k, depth) + 8)
        distances = [1.0 - float(s) for s in similarity]
        return units_of(reader, [int(ids[n]) for n in near], distances, k, exclude), distances


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
