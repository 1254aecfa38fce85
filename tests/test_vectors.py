"""The vector index on its own (real SQLite, the real sqlite-vec extension, real files): cells (IVF) trained from the
vectors give the exact answer when every cell is probed, nearly the exact answer with the default probes, and survive
a reopen; the cache gives a re-chunked text its vector back without embedding it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memoryd.store.passage import Passage
from memoryd.store.vector_schema import MARK_SQL, TODO_SQL, VectorsUnavailable, extension_path
from memoryd.store.vectors import Unit, VectorIndex

DIM = 16


def unit(n: int, path: str = "memory/2026-01-01.md") -> Unit:
    return Unit(Passage(path, n + 1, 1, "h", 1, 5000, f"- text {n}"), f"d{n}", 0)


def vectors(count: int, seed: int = 1) -> np.ndarray:
    """Clustered unit vectors (as real embeddings are): 40 directions, noise around each."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIM))
    data = centres[rng.integers(0, 40, count)] + 0.35 * rng.standard_normal((count, DIM))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4")


@pytest.fixture(params=["memory", "vec0"])
def scan(request: pytest.FixtureRequest) -> int:
    """Where the vectors are scanned: in memory (the default budget), or by sqlite-vec from the file (budget 0)."""
    return 256 * 1024 * 1024 if request.param == "memory" else 0


@pytest.fixture
def index(tmp_path: Path, scan: int) -> VectorIndex:
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=scan)
    vi.open("test-model", DIM)
    return vi


def fill(vi: VectorIndex, data: np.ndarray) -> None:
    vi.replace({"memory/2026-01-01.md": ("sha", [unit(n) for n in range(len(data))])}, [])
    todo = vi.todo(len(data))
    vi.store([(unit_id, digest, data[int(digest[1:])].tobytes()) for unit_id, _text, digest in todo])


def nearest(vi: VectorIndex, query: np.ndarray, k: int, probes: int | None = None) -> list[str]:
    return [h.digest for h in vi.search(query.tobytes(), k, probes)]


def test_cells_answer_like_a_full_scan(index: VectorIndex, tmp_path: Path, scan: int) -> None:
    data = vectors(3000)
    fill(index, data)
    assert index.embedded == 3000 and index.probes() == 1
    queries = vectors(40, seed=2)
    exact = [nearest(index, q, 10) for q in queries]
    # a full scan is exact but for int8's rounding, which may swap near-ties
    truth = [[f"d{i}" for i in np.argsort(-(data @ q))[:10]] for q in queries]
    assert sum(len(set(e) & set(t)) for e, t in zip(exact, truth, strict=True)) / (10 * len(queries)) >= 0.95

    cells = index.train()
    assert cells == 16 and index.probes() == 6  # at least 16 cells, a quarter of them probed (at least 6)
    # every cell: the same answer (before training the scan is in memory with a float query, vec0's cells quantise
    # the query too: near-ties may swap places, the sets are the same)
    every = [nearest(index, q, 10, probes=cells) for q in queries]
    assert sum(len(set(a) & set(e)) for a, e in zip(every, exact, strict=True)) / (10 * len(queries)) >= 0.95
    found = sum(len(set(nearest(index, q, 10)) & set(e)) for q, e in zip(queries, every, strict=True))
    assert found / (10 * len(queries)) >= 0.9  # the default probes: nearly all of what every cell finds

    index.close()  # the cells are in the file
    again = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=scan)
    again.open("test-model", DIM)
    assert again.probes() == 6 and again.trained_at == 3000
    assert [nearest(again, q, 10, probes=cells) for q in queries[:5]] == every[:5]  # the cells, from the file
    # a vector stored after training goes to its nearest cell
    extra = vectors(1, seed=3)[0]
    again.replace({"memory/2026-02-01.md": ("sha2", [unit(9999, "memory/2026-02-01.md")])}, [])
    (todo,) = again.todo(5)
    again.store([(todo[0], todo[2], extra.tobytes())])
    assert nearest(again, extra, 1) == ["d9999"]


def test_a_rechunked_text_gets_its_vector_from_the_cache(index: VectorIndex) -> None:
    data = vectors(5)
    fill(index, data)
    assert index.embedded == 5 and index.todo(10) == []
    # the file changes: its units are made again, the same texts at other lines, one new
    moved = [Unit(Passage("memory/2026-01-01.md", n + 10, 1, "h", 1, 50, f"- text {n}"), f"d{n}", 0) for n in range(5)]
    index.replace({"memory/2026-01-01.md": ("sha-b", [*moved, unit(7)])}, [])
    assert index.total == 6 and index.embedded == 5
    assert [d for _, _, d in index.todo(10)] == ["d7"]  # only the new text waits for the model
    assert index.search(data[3].tobytes(), 1)[0].passage.start_line == 13


def test_another_dimension_is_refused_not_overwritten(index: VectorIndex, tmp_path: Path) -> None:
    fill(index, vectors(3))
    index.close()
    other = VectorIndex(tmp_path / "vectors.sqlite", extension_path())
    with pytest.raises(VectorsUnavailable) as info:
        other.open("test-model", DIM * 2)
    assert info.value.reason == "vector_dimension_mismatch" and "--rebuild-vectors" in info.value.hint
    with pytest.raises(VectorsUnavailable) as info:
        other.open("another-model", DIM)
    assert info.value.reason == "vector_model_mismatch"
    other.open("test-model", DIM)
    assert other.embedded == 3  # nothing was lost


def test_each_text_has_one_vector_and_orphans_are_pruned_when_many(index: VectorIndex) -> None:
    data = vectors(1200)
    fill(index, data)
    # the same texts in a second file: embedded at once, no second vector
    index.replace({"memory/2026-01-02.md": ("sha2", [unit(n, "memory/2026-01-02.md") for n in range(1200)])}, [])
    assert (index.total, index.embedded, index.vectors) == (2400, 2400, 1200) and index.todo(5) == []
    assert {h.passage.path for h in index.search(data[7].tobytes(), 2)} == {
        "memory/2026-01-01.md",
        "memory/2026-01-02.md",
    }
    index.replace({}, ["memory/2026-01-01.md"])
    assert index.prune_cache() == 0  # every text still has a unit
    index.replace({}, ["memory/2026-01-02.md"])
    assert index.search(data[7].tobytes(), 5) == []  # an orphaned vector finds no unit
    # a text that comes back before the orphans are many keeps its vector
    index.replace({"memory/2026-01-03.md": ("sha3", [unit(7, "memory/2026-01-03.md")])}, [])
    assert index.todo(5) == [] and index.search(data[7].tobytes(), 1)[0].passage.path == "memory/2026-01-03.md"
    assert index.prune_cache() == 1199 and index.vectors == 1  # 1,199 orphans of 1,200: forgotten
    assert index.search(data[7].tobytes(), 1)[0].passage.path == "memory/2026-01-03.md"
    index.replace({"memory/2026-01-04.md": ("sha4", [unit(8, "memory/2026-01-04.md")])}, [])
    assert [d for _, _, d in index.todo(5)] == ["d8"]  # forgotten: embedded again when it comes back


V3_DDL = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE docs(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE units(unit_id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL,
  lines INTEGER NOT NULL, heading TEXT NOT NULL, section_start INTEGER NOT NULL, section_lines INTEGER NOT NULL,
  text TEXT NOT NULL, digest TEXT NOT NULL, priority INTEGER NOT NULL, embedded INTEGER NOT NULL);
CREATE INDEX units_path ON units(path);
CREATE INDEX units_todo ON units(embedded, priority, unit_id);
CREATE TABLE cache(digest TEXT PRIMARY KEY, vector BLOB NOT NULL);
CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
"""


def test_a_schema_3_file_is_migrated_with_its_vectors(tmp_path: Path) -> None:
    """A file written before int8 (schema 3: float32 vectors in vec0 by unit and again in the cache) opens as
    schema 4 with every vector kept: nothing is embedded again."""
    import apsw

    path = tmp_path / "vectors.sqlite"
    data = vectors(300)
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(str(extension_path()))
    conn.execute(V3_DDL)
    conn.execute(f"CREATE VIRTUAL TABLE units_vec USING vec0(cell INTEGER PARTITION KEY, embedding float[{DIM}])")
    conn.executemany(
        "INSERT INTO meta VALUES(?, ?)", [("schema_version", "3"), ("model", "test-model"), ("dimension", str(DIM))]
    )
    conn.execute("INSERT INTO docs VALUES('memory/2026-01-01.md', 'sha')")
    for n in range(300):
        u = unit(n)
        embedded = n < 290  # ten still waiting for the model
        conn.execute(
            "INSERT INTO units VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                n + 1,
                u.passage.path,
                u.passage.start_line,
                u.passage.lines,
                u.passage.heading,
                u.passage.section_start,
                u.passage.section_lines,
                u.passage.text,
                u.digest,
                0,
                embedded,
            ),
        )
        if embedded:
            conn.execute("INSERT INTO cache VALUES(?, ?)", (u.digest, data[n].tobytes()))
            conn.execute("INSERT INTO units_vec(rowid, cell, embedding) VALUES(?, 0, ?)", (n + 1, data[n].tobytes()))
    conn.close()
    before = path.stat().st_size

    vi = VectorIndex(path, extension_path())
    vi.open("test-model", DIM)
    assert (vi.total, vi.embedded, vi.vectors) == (300, 290, 290)
    assert sorted(d for _, _, d in vi.todo(20)) == sorted(f"d{n}" for n in range(290, 300))
    assert vi.search(data[42].tobytes(), 1)[0].digest == "d42"
    vi.close()
    assert path.stat().st_size < before  # the second copy's pages are given back
    check = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    tables = {str(name) for (name,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "cache_v3" not in tables and "units_vec" not in tables
    assert dict(check.execute("SELECT key, value FROM meta"))["schema_version"] == "4"
    check.close()


def test_searches_go_on_while_cells_are_trained_again(index: VectorIndex) -> None:
    """Training fills the other vec0 table and drops the old one: a search that began on the old one is answered
    from the new one (searches run on their own connections, in other threads, as the daemon's do)."""
    import threading

    data = vectors(3000)
    fill(index, data)
    errors: list[BaseException] = []
    answered = [0]
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            try:
                assert index.search(data[5].tobytes(), 3)
                answered[0] += 1
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=search)
    thread.start()
    try:
        for cells in (16, 8, 16, 4):
            index.train(cells)
            assert index.search(data[5].tobytes(), 1)[0].digest == "d5"
    finally:
        stop.set()
        thread.join()
    assert errors == [] and answered[0] > 0


def test_the_next_batch_is_found_by_an_index(tmp_path: Path) -> None:
    """The worker asks for its next batch and marks what it embedded ~20 times a second: at 670k passages a scan
    of every unit took 52 ms or more a batch, more than embedding it."""
    import apsw

    index = VectorIndex(tmp_path / "vectors.sqlite", extension_path())
    index.open("test-model", DIM)
    index.close()
    conn = apsw.Connection(str(tmp_path / "vectors.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + TODO_SQL, (32,)))
    assert "USING INDEX units_todo" in plan and "TEMP B-TREE" not in plan
    # and marking the units a new vector embeds: by digest (the planner had walked units_todo: 15 texts/s)
    plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + MARK_SQL, ("d1",)))
    conn.close()
    assert "USING INDEX units_digest" in plan


def test_an_interrupted_training_changes_nothing(index: VectorIndex, tmp_path: Path, scan: int) -> None:
    """The daemon stops during a training (a minute at 700k vectors): it gives up at its next batch, the old cells
    stay and answer, and a later training (after a reopen) runs."""
    data = vectors(3000)
    fill(index, data)
    assert index.train(16) == 16
    before = [nearest(index, q, 5) for q in data[:10]]
    index.interrupt()
    assert index.train(8) == 0
    assert index.probes() == 6 and [nearest(index, q, 5) for q in data[:10]] == before
    index.close()
    again = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=scan)
    again.open("test-model", DIM)
    assert again.probes() == 6 and [nearest(again, q, 5) for q in data[:10]] == before
    assert again.train(8) == 8 and again.probes() == 6 and len(again._layout[1]) == 8


def test_a_damaged_file_is_unusable_not_a_crash(tmp_path: Path) -> None:
    """A vectors file overwritten with something else: open says why (and how to rebuild), and drop + open starts
    again."""
    path = tmp_path / "vectors.sqlite"
    path.write_bytes(b"this is not a database\n" * 400)
    index = VectorIndex(path, extension_path())
    with pytest.raises(VectorsUnavailable) as info:
        index.open("test-model", DIM)
    assert info.value.reason == "vector_index_unusable" and "--rebuild-vectors" in info.value.hint
    index.drop()
    index.open("test-model", DIM)
    fill(index, vectors(3))
    assert index.embedded == 3


def test_nearest_gives_the_noise_floor_s_distances_without_their_units(index: VectorIndex) -> None:
    """The vector side reads the units of the passages it returns only; the floor's 40th distance comes from the
    scan itself — in memory, and from vec0 once cells are trained — and an excluded path's units are left out."""
    data = vectors(3000)
    fill(index, data)
    query = vectors(1, seed=3)[0]
    for trained in (False, True):
        if trained:
            index.train()
        hits, distances = index.nearest(query.tobytes(), 5, depth=40)
        assert len(hits) == 5 and len(distances) == 48  # depth + 8 distances, five units read
        assert distances == sorted(distances)
        truth = np.sort(1.0 - data @ query)[:40]
        assert abs(distances[39] - truth[39]) < 0.05  # int8's rounding aside, the 40th nearest
        assert [round(h.distance, 6) for h in hits] == [round(d, 6) for d in distances[:5]]
        assert not index.nearest(query.tobytes(), 5, depth=40, exclude="memory/")[0]


def test_memory_and_vec0_probe_the_same_cells_and_agree(tmp_path: Path) -> None:
    """The in-memory scan probes the cells vec0 would: after training, over the same file, both find the same
    nearest (near-ties aside: vec0 quantises the query), and a vector stored since joins the memory's cells."""
    path = tmp_path / "vectors.sqlite"
    writer = VectorIndex(path, extension_path(), memory_max_bytes=0)
    writer.open("test-model", DIM)
    data = vectors(3000)
    fill(writer, data)
    assert writer.train() == 16
    memory = VectorIndex(path, extension_path(), memory_max_bytes=256 * 1024 * 1024)
    memory.open("test-model", DIM)
    queries = vectors(40, seed=4)
    on_file = [nearest(writer, q, 10) for q in queries]
    in_memory = [nearest(memory, q, 10) for q in queries]
    assert sum(len(set(a) & set(b)) for a, b in zip(on_file, in_memory, strict=True)) / 400 >= 0.95
    extra = vectors(1, seed=5)[0]
    memory.replace({"memory/2026-01-02.md": ("sha2", [unit(9999, "memory/2026-01-02.md")])}, [])
    memory.store([(unit_id, digest, extra.tobytes()) for unit_id, _text, digest in memory.todo(1)])
    assert nearest(memory, extra, 1) == ["d9999"]  # in the cell it was stored in, found by the next search
    assert nearest(writer, extra, 1) == ["d9999"]


def test_vectors_stored_after_the_matrix_was_read_are_found_before_and_after_they_join_it(tmp_path: Path) -> None:
    """A backlog embedded while searches run: the memory's first batches wait in a tail (scanned with the probed
    cells), a large tail is merged into the cells; both answer as vec0 does over the same file."""
    from memoryd.store import vectorscan

    path = tmp_path / "vectors.sqlite"
    memory = VectorIndex(path, extension_path(), memory_max_bytes=256 * 1024 * 1024)
    memory.open("test-model", DIM)
    data = vectors(6000, seed=6)
    memory.replace({"memory/2026-01-01.md": ("sha", [unit(n) for n in range(len(data))])}, [])
    todo = memory.todo(len(data))
    store = [(unit_id, digest, data[int(digest[1:])].tobytes()) for unit_id, _text, digest in todo]
    memory.store(store[:3000])
    assert memory.train() == 16
    queries = vectors(30, seed=7)
    nearest(memory, queries[0], 10)  # the matrix is read: 3,000 rows
    on_file = VectorIndex(path, extension_path(), memory_max_bytes=0)
    on_file.open("test-model", DIM)
    for batch in (store[3000:3032], store[3032:]):  # a small batch (the tail), then enough to merge
        memory.store(batch)
        ours = [nearest(memory, q, 10) for q in queries]
        theirs = [nearest(on_file, q, 10) for q in queries]
        assert sum(len(set(a) & set(b)) for a, b in zip(ours, theirs, strict=True)) / 300 >= 0.95
    merged = memory._scan._memory
    assert memory._scan._tail is None and merged is not None and len(merged[0]) == 6000  # merged: 2,968 ≥ TAIL_MIN
    assert vectorscan.TAIL_MIN <= 2968


def agreement(vi: VectorIndex, data: np.ndarray, count: int) -> float:
    """How much of the exact nearest 10 among the first ``count`` rows (as the file holds them: int8) a search
    finds, over 30 queries."""
    from memoryd.store import cells

    stored = cells.dequantise(cells.quantise(data[:count], vi._scale), vi._scale)
    same = 0
    for q in range(30):
        query = data[q * 191]
        exact = np.argsort(-(stored @ query), kind="stable")[:10]
        same += len({f"d{n}" for n in exact} & set(nearest(vi, query, 10)))
    return same / 300


def test_a_large_matrix_in_memory_answers_like_a_full_scan(tmp_path: Path) -> None:
    """From SHORTLIST_MIN_ROWS vectors the matrix in memory is scanned in two passes (a rough one on its principal
    directions, then the shortlist in full); the nearest are still the nearest, also once more vectors joined."""
    from memoryd.store import cells
    from tests.test_cells import embedding_like

    data = embedding_like(9000)  # 512 dimensions, as the bundled model's
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=256 * 1024 * 1024)
    vi.open("test-model", data.shape[1])
    first = 6000
    assert first >= cells.SHORTLIST_MIN_ROWS
    fill(vi, data[:first])

    assert agreement(vi, data, first) >= 0.99
    assert vi._scan._shortlist is not None  # the two passes were used
    vi.replace({"memory/2026-01-02.md": ("sha2", [unit(n) for n in range(first, len(data))])}, [])
    todo = vi.todo(len(data))
    vi.store([(unit_id, digest, data[int(digest[1:])].tobytes()) for unit_id, _text, digest in todo])
    assert agreement(vi, data, len(data)) >= 0.99
    vi.close()


def test_past_the_budget_the_matrix_is_let_go_and_the_file_answers(tmp_path: Path) -> None:
    """A matrix read while the vectors fit is dropped as soon as stored vectors pass the budget (the vectors it
    would have had to take in included), and search goes on from sqlite-vec with the same nearest."""
    data = vectors(400)
    budget = 300 * (DIM + 128) * 4  # room for 300 vectors and their projected rows
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=budget)
    vi.open("test-model", DIM)
    vi.replace({"memory/2026-01-01.md": ("sha", [unit(n) for n in range(len(data))])}, [])
    todo = vi.todo(len(data))
    vi.store([(u, d, data[int(d[1:])].tobytes()) for u, _t, d in todo if int(d[1:]) < 250])
    assert nearest(vi, data[7], 1) == ["d7"]
    assert vi._scan._memory is not None  # read by that search: 250 vectors fit
    vi.store([(u, d, data[int(d[1:])].tobytes()) for u, _t, d in todo if int(d[1:]) >= 250])
    assert vi._scan._memory is None and vi._scan._parts == []
    assert nearest(vi, data[7], 1) == ["d7"] and nearest(vi, data[333], 1) == ["d333"]
    assert vi._scan._memory is None  # and not read again
    vi.close()


def test_past_the_float_budget_the_rough_rows_answer_like_a_full_scan(tmp_path: Path) -> None:
    """Past the budget for float rows the embedding worker builds each vector's rough row (decision 0022); a search
    scores them, reads its shortlist's vectors by id and answers with the exact nearest — before and after more
    vectors come (the tail, then joined), and after the cells are trained again (the rows are built anew)."""
    import apsw

    from memoryd.store import roughscan
    from tests.test_cells import embedding_like

    data = embedding_like(9000)
    budget = 4 * 1024 * 1024  # 9,000 float rows need 23 MB; their rough rows 1.9 MB
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=budget)
    vi.open("test-model", data.shape[1])
    fill(vi, data[:6000])

    assert vi.scan_path() == "file" and nearest(vi, data[7], 1) == ["d7"]  # not built yet: sqlite-vec
    assert vi.prepare() and vi.scan_path() == "rough" and not vi.prepare()  # built once
    rows = vi._rough._rows
    assert rows is not None and rows.rows.dtype == np.int8 and rows.rows.shape == (6000, roughscan.ROUGH_DIMS)
    assert agreement(vi, data, 6000) >= 0.99

    def more(start: int, end: int) -> None:
        vi.replace({f"memory/2026-02-{start % 28 + 1:02d}.md": ("s", [unit(n) for n in range(start, end)])}, [])
        vi.store([(u, d, data[int(d[1:])].tobytes()) for u, _t, d in vi.todo(end - start)])

    more(6000, 7000)  # waits in the tail
    assert vi._rough._tail != [] and nearest(vi, data[6500], 1) == ["d6500"]
    assert agreement(vi, data, 7000) >= 0.99
    more(7000, 9000)  # the tail is large: joined in cell order
    assert vi._rough._tail == [] and len(vi._rough._rows.ids) == 9000  # type: ignore[union-attr]
    assert agreement(vi, data, 9000) >= 0.99

    assert vi.train(8) == 8 and vi.scan_path() == "file"  # another vec0 table: the rows are let go …
    assert agreement(vi, data, 9000) >= 0.95
    assert vi.prepare() and vi.scan_path() == "rough"  # … and built again, in the new cells (all of them probed)
    assert agreement(vi, data, 9000) >= 0.99

    conn = apsw.Connection(str(tmp_path / "vectors.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT count(*) FROM vector_rows").fetchone() == (9000,)
    conn.close()
    vi.close()


def test_a_rough_row_build_stops_when_the_daemon_does(tmp_path: Path) -> None:
    from tests.test_cells import embedding_like

    data = embedding_like(3000)
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=1024 * 1024)
    vi.open("test-model", data.shape[1])
    fill(vi, data)
    vi.interrupt()
    assert not vi.prepare() and vi.scan_path() == "file" and vi._rough._rows is None
    assert nearest(vi, data[42], 1) == ["d42"]
    vi.close()


def test_pruned_vectors_leave_the_rows_read_by_id(tmp_path: Path) -> None:
    """prune_cache forgets vectors no unit has: from vec0 and from vector_rows alike, and the rough rows are let go
    (built again without them)."""
    import apsw

    from tests.test_cells import embedding_like

    data = embedding_like(3000)
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path(), memory_max_bytes=1024 * 1024)
    vi.open("test-model", data.shape[1])
    fill(vi, data)
    assert vi.prepare()
    vi.replace({"memory/2026-01-01.md": ("sha-2", [unit(n) for n in range(1000)])}, [])
    assert vi.prune_cache() == 2000 and vi.scan_path() == "file"
    conn = apsw.Connection(str(tmp_path / "vectors.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT count(*) FROM vector_rows").fetchone() == (1000,)
    conn.close()
    assert vi.prepare() and len(vi._rough._rows.ids) == 1000  # type: ignore[union-attr]
    assert nearest(vi, data[42], 1) == ["d42"]
    vi.close()
