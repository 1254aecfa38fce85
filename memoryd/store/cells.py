"""The vector index's arithmetic, on numpy arrays only (no SQLite): int8 quantisation, spherical k-means, which
cell a vector is filed in, and which cells a search probes.

Vectors are unit length (float32). Stored as int8 (a quarter of float32's bytes, scanned faster) with one scale per
file: ``int8 = round(float × scale)``. The cells are an inverted file (IVF): k-means centroids, each vector filed
under its nearest one, and a search looks only in the cells whose centroids are nearest the query.

numpy is the ``semantic`` extra: import this module only where vectors are used (:mod:`memoryd.store.vectors`
does so lazily and turns a missing numpy into a stated degradation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float32]
Int8s = npt.NDArray[np.int8]

TRAIN_MIN = 20_000  # below this many vectors a search scans them all (~7 ms); from here on, cells
RETRAIN_GROWTH = 2  # cells are trained again when the vectors have doubled since: cells stay near CELL_SIZE
SAMPLE_PER_CELL = 40  # k-means sample: this many vectors per cell
CELL_SIZE = 1500  # vectors per cell: a probe's fixed cost (~0.35 ms) against its scan (~0.33 µs a vector)
MAX_CELLS = 1024
MIN_CELLS = 16
# The rough first pass of a scan in memory (top_in): from SHORTLIST_MIN_ROWS rows, every row is scored on its
# SHORTLIST_DIMS principal directions, and the best SHORTLIST_PER_HIT per hit wanted (at least SHORTLIST_MIN) in
# full. Measured on 13,371 real passages, 200 queries: the nearest 48 are the exact ones but for 0.12% (decision 0021).
SHORTLIST_MIN_ROWS = 4096
SHORTLIST_DIMS = 128
SHORTLIST_PER_HIT = 8
SHORTLIST_MIN = 512
BASIS_SAMPLE = 4096  # rows the principal directions are worked out from


def int8_scale(data: Floats) -> float:
    """The factor that maps components to int8: the largest component seen, with a quarter more room, to 127
    (at least 4/√d of room: a unit vector's components are ~1/√d). ``data`` is (vectors, dimension)."""
    room = 4 / math.sqrt(max(1, data.shape[1]))
    if data.size:
        room = max(room, 1.25 * float(np.abs(data).max()))
    return 127.0 / room


def quantise(data: Floats, scale: float) -> Int8s:
    """Float rows → int8 rows (components beyond the scale's room are clipped to ±127)."""
    quantised: Int8s = np.clip(np.rint(data * scale), -127, 127).astype(np.int8)
    return quantised


def dequantise(data: Int8s, scale: float) -> Floats:
    """int8 rows → float rows (each component within half a step, 0.5 / scale, of what was quantised)."""
    return (data.astype("<f4") / np.float32(scale or 1.0)).astype("<f4")


def from_bytes(raw: bytes, dimension: int, dtype: str = "<f4") -> npt.NDArray[np.generic]:
    """Packed rows (float32 by default, or "int8") as a (rows, dimension) array."""
    return np.frombuffer(raw, dtype=dtype).reshape(-1, dimension)


def cells_for(vectors: int) -> int:
    """How many cells to train for ``vectors``: one per CELL_SIZE, MIN_CELLS to MAX_CELLS."""
    return int(min(MAX_CELLS, max(MIN_CELLS, round(vectors / CELL_SIZE))))


def should_train(vectors: int, trained_at: int) -> bool:
    """Whether the cells are due (again): from TRAIN_MIN vectors, and each time they have grown RETRAIN_GROWTH×."""
    return vectors >= TRAIN_MIN and vectors >= RETRAIN_GROWTH * max(trained_at, TRAIN_MIN // 4)


def kmeans(data: Floats, cells: int, rounds: int = 10) -> Floats:
    """Spherical k-means: unit-length centroids, each the normalised mean of the vectors nearest it; seeded with a
    fixed generator (the same vectors give the same cells). At most one cell per vector; no vectors, no cells."""
    rng = np.random.default_rng(0)
    cells = min(cells, len(data))
    if cells <= 0:
        return np.zeros((0, data.shape[1] if data.ndim == 2 else 0), dtype="<f4")
    centroids = data[rng.choice(len(data), cells, replace=False)].astype("<f4")
    for _ in range(rounds):
        nearest = np.argmax(data @ centroids.T, axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, data)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = norms[:, 0] == 0
        if empty.any():  # a centroid nothing chose: start it again from a random vector
            sums[empty] = data[rng.choice(len(data), int(empty.sum()), replace=False)]
            norms[empty] = 1.0  # (a zero vector stays a zero centroid: never NaN)
        centroids = (sums / norms).astype("<f4")
    return centroids


def assign(centroids: Floats | None, data: npt.NDArray[np.generic]) -> list[int]:
    """The cell of each row of ``data``: its nearest centroid by cosine (cell 0 for all before training). Scaled
    rows (int8 as floats) go to the same cells: the scale does not change which centroid is nearest."""
    if centroids is None or not len(centroids) or not len(data):
        return [0] * len(data)
    return [int(c) for c in np.argmax(data.astype("<f4") @ centroids.T, axis=1)]


def probe_count(cells: int) -> int:
    """Cells a search looks in: a quarter of them, 6 to 32 (a probe of ~1,500 int8 vectors costs ~0.7 ms), never
    more than there are; 1 before training (``cells`` 0)."""
    if cells <= 0:
        return 1
    return int(min(cells, max(6, min(32, cells // 4))))


def nearest_cells(centroids: Floats | None, query: Floats, probes: int | None = None) -> list[int]:
    """The ``probes`` cells (default :func:`probe_count`) whose centroids are nearest ``query``; [0] before
    training."""
    if centroids is None or not len(centroids):
        return [0]
    scores = centroids @ query
    want = max(1, min(len(scores), probes or probe_count(len(centroids))))
    return [int(c) for c in np.argpartition(-scores, want - 1)[:want]]


def ids(values: list[int]) -> npt.NDArray[np.int64]:
    return np.asarray(values, dtype=np.int64)


def stack(parts: list[tuple[npt.NDArray[np.int64], Floats]]) -> tuple[npt.NDArray[np.int64], Floats]:
    """Parts of an in-memory matrix (ids, rows) as one."""
    return np.concatenate([i for i, _ in parts]), np.concatenate([r for _, r in parts]).astype("<f4", copy=False)


def top(rows: Floats, query: Floats, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` rows most similar to ``query`` (dot product: cosine, for unit rows), best first, and their
    similarities."""
    scores = rows @ query
    k = min(k, len(scores))
    if k <= 0:
        return [], []
    first = best(scores, k)
    order = first[np.argsort(-scores[first], kind="stable")]
    return [int(n) for n in order], [float(scores[n]) for n in order]


def by_cell(
    ids_: npt.NDArray[np.int64], cells: npt.NDArray[np.int64], rows: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[np.int64]]:
    """The rows (with their ids and cells) in cell order, and where each cell's run starts: cell ``c`` is
    ``starts[c]:starts[c + 1]`` (``starts`` has one more entry than the highest cell)."""
    order = np.argsort(cells, kind="stable")
    ids_, cells, rows = ids_[order], cells[order], rows[order]
    highest = int(cells[-1]) if len(cells) else 0
    return ids_, cells, rows, np.searchsorted(cells, np.arange(highest + 2)).astype(np.int64)


def concat(arrays: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    return np.concatenate(arrays)


def stack3(
    parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]]], dtype: str = "<f4"
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Parts of an in-memory matrix (ids, cells, rows: float32, or int8 for the rough rows) as one."""
    return (
        np.concatenate([i for i, _, _ in parts]),
        np.concatenate([c for _, c, _ in parts]),
        np.concatenate([r for _, _, r in parts]).astype(dtype, copy=False),
    )


def in_cells(cells: npt.NDArray[np.int64], chosen: list[int] | None) -> npt.NDArray[np.bool_]:
    """Which of the rows (their ``cells``) are in the ``chosen`` cells (all of them for None)."""
    if chosen is None:
        return np.ones(len(cells), dtype=bool)
    return np.isin(cells, np.asarray(chosen, dtype=np.int64))


def top_in(
    rows: Floats,
    starts: npt.NDArray[np.int64],
    chosen: list[int] | None,
    query: Floats,
    k: int,
    shortlist: tuple[Floats, Floats] | None = None,
) -> tuple[list[int], list[float]]:
    """:func:`top` among the rows of the ``chosen`` cells only (all rows for None): row numbers of ``rows``.

    With ``shortlist`` — (the rows projected on their principal directions, those directions: :func:`basis`) —
    every row is first scored on the few directions, and only the best of that rough pass (SHORTLIST_PER_HIT per
    row wanted, at least SHORTLIST_MIN) are scored in full: a quarter of the bytes read (the product is bound by
    memory: 14,000 × 512 floats are 29 MB), the same answer but for one in ~1,000 of the nearest (decision 0021)."""
    spans = [(0, len(rows))] if chosen is None else spans_of(starts, chosen)
    total = sum(b - a for a, b in spans)
    k = min(k, total)
    if k <= 0:
        return [], []
    wanted = shortlist_size(k)
    if shortlist is None or total <= wanted:
        where = rows_of(spans)
        scores = scored(rows, spans, query)
    else:
        low, directions = shortlist
        rough = scored(low, spans, query @ directions)
        where = np.sort(rows_of(spans)[best(rough, wanted)])  # in row order: the full rows are read front to back
        scores = rows[where] @ query
    first = best(scores, k)
    order = first[np.argsort(-scores[first], kind="stable")]
    return [int(where[n]) for n in order], [float(scores[n]) for n in order]


def shortlist_size(k: int) -> int:
    """Rows a rough pass hands to the full one for ``k`` wanted."""
    return max(SHORTLIST_MIN, SHORTLIST_PER_HIT * k)


def spans_of(starts: npt.NDArray[np.int64], chosen: list[int]) -> list[tuple[int, int]]:
    """The non-empty row ranges of the ``chosen`` cells (see :func:`by_cell`)."""
    spans = [(int(starts[c]), int(starts[c + 1])) for c in chosen if 0 <= c < len(starts) - 1]
    return [(a, b) for a, b in spans if b > a]


def best(scores: npt.NDArray[Any], count: int) -> npt.NDArray[np.intp]:
    """Where the ``count`` highest ``scores`` are (in no order); all of them when there are no more."""
    if count >= len(scores):
        return np.arange(len(scores))
    return np.argpartition(-scores, count - 1)[:count]


def rows_of(spans: list[tuple[int, int]]) -> npt.NDArray[np.int64]:
    if len(spans) == 1:
        return np.arange(*spans[0], dtype=np.int64)
    if not spans:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])


def scored(rows: npt.NDArray[Any], spans: list[tuple[int, int]], query: Floats) -> Floats:
    """Each row of the ``spans`` times ``query`` (int8 rows are made floats a span at a time)."""
    if len(spans) == 1:
        a, b = spans[0]
        one: Floats = rows[a:b].astype("<f4", copy=False) @ query
        return one
    if not spans:
        return np.zeros(0, dtype="<f4")
    return np.concatenate([rows[a:b].astype("<f4", copy=False) @ query for a, b in spans])


def basis(rows: Floats, dims: int = SHORTLIST_DIMS) -> Floats:
    """The ``dims`` principal directions of ``rows`` (of a fixed sample of BASIS_SAMPLE of them), as a
    (dimension, dims) matrix: ``rows @ basis`` is the rough pass's matrix. ~35 ms."""
    if len(rows) > BASIS_SAMPLE:
        rows = rows[np.sort(np.random.default_rng(0).choice(len(rows), BASIS_SAMPLE, replace=False))]
    centred = rows - rows.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    directions: Floats = np.ascontiguousarray(vectors[:, np.argsort(-values)[:dims]], dtype="<f4")
    return directions


def project(rows: Floats, directions: Floats) -> Floats:
    projected: Floats = np.ascontiguousarray(rows @ directions, dtype="<f4")
    return projected
