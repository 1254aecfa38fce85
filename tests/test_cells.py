"""The vector index's arithmetic on plain numpy arrays (no SQLite): int8 quantisation, spherical k-means, filing
vectors in cells and choosing the cells a search probes."""

from __future__ import annotations

import numpy as np
import pytest

from memoryd.store import cells

DIM = 32


def unit_rows(count: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((count, dim))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4")


def clusters(per: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Four well separated directions with tight noise around each: (data, its true cluster, the directions)."""
    rng = np.random.default_rng(seed)
    centres = np.eye(DIM, dtype="<f4")[[0, 8, 16, 24]]
    labels = np.repeat(np.arange(4), per)
    data = centres[labels] + 0.05 * rng.standard_normal((4 * per, DIM))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4"), labels, centres


def test_quantisation_round_trip_is_within_half_a_step() -> None:
    data = unit_rows(500)
    scale = cells.int8_scale(data)
    quantised = cells.quantise(data, scale)
    assert quantised.dtype == np.int8 and quantised.shape == data.shape
    back = cells.dequantise(quantised, scale)
    assert back.dtype == np.float32
    # every component within half an int8 step; the largest one has a quarter more room, so nothing is clipped
    assert float(np.abs(back - data).max()) <= 0.5 / scale + 1e-7
    assert int(np.abs(quantised).max()) <= 127 and int(np.abs(quantised).max()) >= 90
    # cosine is kept to within a small error: what search ranks by
    cosine = np.sum(back * data, axis=1) / np.linalg.norm(back, axis=1)
    assert float(cosine.min()) > 0.999


def test_components_beyond_the_scale_are_clipped_not_wrapped() -> None:
    data = np.array([[0.1, -0.1], [5.0, -5.0]], dtype="<f4")
    quantised = cells.quantise(data, cells.int8_scale(data[:1]))
    assert quantised[1].tolist() == [127, -127]


def test_a_scale_for_no_vectors_or_zero_vectors_has_room_for_unit_vectors() -> None:
    empty = np.zeros((0, 16), dtype="<f4")
    zeros = np.zeros((3, 16), dtype="<f4")
    assert cells.int8_scale(empty) == cells.int8_scale(zeros) == pytest.approx(127 / (4 / 4))
    assert cells.quantise(zeros, cells.int8_scale(zeros)).tolist() == [[0] * 16] * 3


def test_kmeans_finds_separable_clusters() -> None:
    data, labels, centres = clusters(60)
    centroids = cells.kmeans(data, 4)
    assert centroids.shape == (4, DIM) and centroids.dtype == np.float32
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    # each true direction has exactly one centroid close to it
    assert sorted(int(np.argmax(centroids @ c)) for c in centres) == [0, 1, 2, 3]
    assert float((centroids @ centres.T).max(axis=0).min()) > 0.99
    # and every vector of one cluster lands in one cell, a different one per cluster
    assigned = np.array(cells.assign(centroids, data))
    assert all(len(set(assigned[labels == k].tolist())) == 1 for k in range(4))
    assert len(set(assigned.tolist())) == 4


def test_kmeans_is_deterministic() -> None:
    data = unit_rows(400, seed=5)
    assert np.array_equal(cells.kmeans(data, 8), cells.kmeans(data, 8))


def test_assignment_is_the_nearest_centroid() -> None:
    data = unit_rows(300, seed=1)
    centroids = unit_rows(7, seed=2)
    assigned = cells.assign(centroids, data)
    for row, cell in zip(data, assigned, strict=True):
        assert cell == int(np.argmax(centroids @ row))
    # int8 rows go to the same cells as their floats: the scale does not change which centroid is nearest
    scale = cells.int8_scale(data)
    assert cells.assign(centroids, cells.quantise(data, scale)) == cells.assign(
        centroids, cells.dequantise(cells.quantise(data, scale), scale)
    )


def test_before_training_everything_is_in_cell_zero() -> None:
    data = unit_rows(5)
    assert cells.assign(None, data) == [0] * 5
    assert cells.assign(unit_rows(3), data[:0]) == []
    assert cells.nearest_cells(None, data[0]) == [0]
    assert cells.probe_count(0) == 1


@pytest.mark.parametrize(
    ("count", "probes"), [(1, 1), (4, 4), (6, 6), (16, 6), (24, 6), (40, 10), (128, 32), (1024, 32)]
)
def test_probes_are_a_quarter_of_the_cells_from_6_to_32(count: int, probes: int) -> None:
    assert cells.probe_count(count) == probes
    centroids = unit_rows(count, seed=count)
    query = unit_rows(1, seed=99)[0]
    chosen = cells.nearest_cells(centroids, query)
    assert len(chosen) == probes == len(set(chosen))
    # they are the nearest ones
    best = set(np.argsort(-(centroids @ query))[:probes].tolist())
    assert set(chosen) == best
    assert len(cells.nearest_cells(centroids, query, probes=count + 5)) == count  # never more than there are


def test_fewer_vectors_than_cells_gives_one_cell_per_vector() -> None:
    data = unit_rows(3)
    centroids = cells.kmeans(data, 16)
    assert centroids.shape == (3, DIM)
    assert sorted(cells.assign(centroids, data)) == [0, 1, 2]


def test_no_vectors_give_no_cells_and_zero_vectors_no_nan() -> None:
    assert cells.kmeans(np.zeros((0, DIM), dtype="<f4"), 16).shape == (0, DIM)
    zeros = np.zeros((10, DIM), dtype="<f4")
    centroids = cells.kmeans(zeros, 4)
    assert centroids.shape == (4, DIM) and not np.isnan(centroids).any()
    assert all(0 <= c < 4 for c in cells.assign(centroids, zeros))


def test_cells_and_training_schedule() -> None:
    assert cells.cells_for(0) == 16 and cells.cells_for(30_000) == 20 and cells.cells_for(10**7) == 1024
    assert not cells.should_train(cells.TRAIN_MIN - 1, 0)
    assert cells.should_train(cells.TRAIN_MIN, 0)
    assert not cells.should_train(30_000, 20_000) and cells.should_train(40_000, 20_000)


def embedding_like(count: int, dim: int = 512, seed: int = 5) -> np.ndarray:
    """Unit rows whose variance lies in a few dozen directions, decaying (as a sentence model's do), plus noise."""
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.standard_normal((dim, 64)))[0]
    latent = rng.standard_normal((count, 64)) * np.geomspace(1.0, 0.05, 64)
    data = latent @ directions.T + 0.01 * rng.standard_normal((count, dim))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    rows: np.ndarray = data.astype("<f4")
    return rows


def test_the_rough_pass_finds_the_exact_nearest_rows() -> None:
    data = embedding_like(6000)
    directions = cells.basis(data)
    assert directions.shape == (512, cells.SHORTLIST_DIMS)
    shortlist = (cells.project(data, directions), directions)
    starts = np.array([0, len(data)], dtype=np.int64)
    same = 0
    for q in range(40):
        query = data[q * 97]
        exact = cells.top_in(data, starts, None, query, 48)
        rough = cells.top_in(data, starts, None, query, 48, shortlist)
        assert rough[1] == pytest.approx([float(data[n] @ query) for n in rough[0]], abs=1e-5)  # full scores
        same += len(set(exact[0]) & set(rough[0]))
    assert same >= 0.995 * 40 * 48


def test_only_the_rows_the_rough_pass_picks_are_scored_in_full() -> None:
    """The shortlist is what is scored: rows the rough pass ranks last never come back, however near they are."""
    data = embedding_like(6000)
    directions = cells.basis(data)
    low = cells.project(data, directions)
    query = data[7]
    low_only = np.zeros_like(low)
    picked = np.arange(3000, 3000 + cells.SHORTLIST_MIN)  # the rough pass prefers these and no others
    low_only[picked] = low[picked] + 10.0 * (query @ directions)
    starts = np.array([0, len(data)], dtype=np.int64)
    rows, _ = cells.top_in(data, starts, None, query, 10, (low_only, directions))
    assert rows and set(rows) <= set(picked.tolist()) and 7 not in rows
    assert 7 in cells.top_in(data, starts, None, query, 10)[0]  # without the shortlist: the row itself
