"""One recorded migration scheme for both SQLite files: a file of every earlier version — built here with the DDL
that version wrote (see ``git log -p memoryd/store/vectors.py memoryd/store/schema.py``) — opens with its
``migrations`` table filled, keeps its vectors where they were always kept (schema 3 and 4), is started again
where it always was (vectors 1 and 2; text index 1 and 3, rebuilt from the files), and answers searches."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest

from memoryd.store import cells, migrations
from memoryd.store.index import NoteIndex
from memoryd.store.migrations import Migration, Migrations
from memoryd.store.passage import Passage
from memoryd.store.schema import SCHEMA_VERSION as INDEX_SCHEMA_VERSION
from memoryd.store.vector_schema import extension_path
from memoryd.store.vectors import Unit, VectorIndex
from memoryd.text import textindex

DIM = 16
PATH = "memory/2026-01-01.md"
VECTOR_MIGRATIONS = ["0001_units_float_vectors", "0002_int8_vectors_once", "0003_refused_texts", "0004_vector_rows"]

UNITS_DDL = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE docs(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE units(unit_id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL,
  lines INTEGER NOT NULL, heading TEXT NOT NULL, section_start INTEGER NOT NULL, section_lines INTEGER NOT NULL,
  text TEXT NOT NULL, digest TEXT NOT NULL, priority INTEGER NOT NULL, embedded INTEGER NOT NULL);
CREATE INDEX units_path ON units(path);
CREATE INDEX units_todo ON units(embedded, priority, unit_id);
"""
# each schema's vector tables, as its _create wrote them
VECTOR_DDL = {
    "1": f"""CREATE TABLE cache(digest TEXT PRIMARY KEY, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE units_vec USING vec0(embedding float[{DIM}] distance_metric=cosine);""",
    "2": f"""CREATE TABLE cache(digest TEXT PRIMARY KEY, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE units_vec USING vec0(embedding float[{DIM}]);""",
    "3": f"""CREATE TABLE cache(digest TEXT PRIMARY KEY, vector BLOB NOT NULL);
        CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE units_vec USING vec0(cell INTEGER PARTITION KEY, embedding float[{DIM}]);""",
    # schema 4 as first written (1d3a5c4), before the refused table
    "4-first": f"""CREATE INDEX units_digest ON units(digest);
        CREATE TABLE cache(vector_id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE);
        CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE vec_a USING vec0(cell INTEGER PARTITION KEY, embedding int8[{DIM}]);""",
    # schema 4 as the last daemon before the migrations table wrote it (refused created at open)
    "4": f"""CREATE INDEX units_digest ON units(digest);
        CREATE TABLE cache(vector_id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE);
        CREATE TABLE refused(digest TEXT PRIMARY KEY);
        CREATE TABLE centroids(cell INTEGER PRIMARY KEY, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE vec_a USING vec0(cell INTEGER PARTITION KEY, embedding int8[{DIM}]);""",
}


def unit(n: int) -> Unit:
    return Unit(Passage(PATH, n + 1, 1, "h", 1, 500, f"- text {n}"), f"d{n}", 0)


def vectors(count: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((count, DIM))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4")


def old_vector_file(path: Path, version: str, data: np.ndarray, embedded: int) -> None:
    """A vectors file of ``version`` holding len(data) units of one file, the first ``embedded`` with vectors."""
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(str(extension_path()))
    with conn:
        conn.execute(UNITS_DDL + VECTOR_DDL[version])
        meta = [("schema_version", version.split("-")[0]), ("model", "test-model"), ("dimension", str(DIM))]
        scale = cells.int8_scale(data)
        if version.startswith("4"):
            meta += [("vec_table", "vec_a"), ("int8_scale", repr(scale))]
        conn.executemany("INSERT INTO meta VALUES(?, ?)", meta)
        conn.execute("INSERT INTO docs VALUES(?, 'sha')", (PATH,))
        for n in range(len(data)):
            u = unit(n)
            q = u.passage
            row = (n + 1, q.path, q.start_line, q.lines, q.heading, q.section_start, q.section_lines, q.text)
            conn.execute("INSERT INTO units VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)", (*row, u.digest, n < embedded))
            if n >= embedded:
                continue
            if version.startswith("4"):
                conn.execute("INSERT INTO cache(vector_id, digest) VALUES(?, ?)", (n + 1, u.digest))
                quantised = cells.quantise(data[n : n + 1], scale)[0].tobytes()
                conn.execute("INSERT INTO vec_a(rowid, cell, embedding) VALUES(?, 0, vec_int8(?))", (n + 1, quantised))
            else:
                conn.execute("INSERT INTO cache VALUES(?, ?)", (u.digest, data[n].tobytes()))
                cell = "cell, " if version == "3" else ""
                conn.execute(
                    f"INSERT INTO units_vec(rowid, {cell}embedding) VALUES(?, {'0, ' if cell else ''}?)",
                    (n + 1, data[n].tobytes()),
                )
    conn.close()


def recorded(path: Path) -> list[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(migrations.applied(conn))
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("version", "kept", "applied"),
    [
        ("1", False, ["rebuilt_from_schema_1", *VECTOR_MIGRATIONS]),
        ("2", False, ["rebuilt_from_schema_2", *VECTOR_MIGRATIONS]),
        ("3", True, VECTOR_MIGRATIONS),
        ("4-first", True, VECTOR_MIGRATIONS),
        ("4", True, VECTOR_MIGRATIONS),
    ],
)
def test_a_vectors_file_of_every_earlier_version_is_brought_into_the_scheme(
    tmp_path: Path, version: str, kept: bool, applied: list[str]
) -> None:
    path = tmp_path / "vectors.sqlite"
    data = vectors(120)
    old_vector_file(path, version, data, embedded=100)

    vi = VectorIndex(path, extension_path())
    vi.open("test-model", DIM)
    assert recorded(path) == applied
    if kept:  # every vector kept: only the twenty that never had one wait for the model
        assert (vi.total, vi.embedded, vi.vectors) == (120, 100, 100)
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)  # and each is readable by id too
        assert conn.execute("SELECT count(*) FROM vector_rows").fetchone() == (100,)
        conn.close()
        assert sorted(d for _, _, d in vi.todo(50)) == sorted(f"d{n}" for n in range(100, 120))
        assert [h.digest for h in vi.search(data[42].tobytes(), 1)] == ["d42"]
    else:  # started again, as these versions always were: the worker embeds the workspace anew
        assert (vi.total, vi.embedded, vi.vectors) == (0, 0, 0)
        vi.replace({PATH: ("sha", [unit(n) for n in range(120)])}, [])
        vi.store([(i, d, data[int(d[1:])].tobytes()) for i, _t, d in vi.todo(120)])
        assert [h.digest for h in vi.search(data[42].tobytes(), 1)] == ["d42"]
    vi.refuse([(0, "never-seen")])  # the refused table is there, whichever version the file came from
    vi.close()

    again = VectorIndex(path, extension_path())  # a second open applies nothing and records nothing new
    again.open("test-model", DIM)
    assert recorded(path) == applied
    assert again.embedded == (100 if kept else 120)
    again.close()


def test_a_new_vectors_file_records_every_migration(tmp_path: Path) -> None:
    vi = VectorIndex(tmp_path / "vectors.sqlite", extension_path())
    vi.open("test-model", DIM)
    vi.close()
    assert recorded(tmp_path / "vectors.sqlite") == VECTOR_MIGRATIONS


def test_a_vectors_file_from_a_newer_version_is_started_again(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    vi = VectorIndex(path, extension_path())
    vi.open("test-model", DIM)
    vi.close()
    conn = apsw.Connection(str(path))
    conn.execute("INSERT INTO migrations VALUES('0099_from_the_future', '2030-01-01T00:00:00+00:00')")
    conn.close()
    vi.open("test-model", DIM)
    vi.close()
    assert recorded(path) == ["rebuilt_from_schema_4", *VECTOR_MIGRATIONS]


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    def create(conn: apsw.Connection, _: None) -> None:
        conn.execute("CREATE TABLE t(x)")

    def fail(conn: apsw.Connection, _: None) -> None:
        conn.execute("INSERT INTO t VALUES(1)")
        raise RuntimeError("half way")

    conn = apsw.Connection(str(tmp_path / "x.sqlite"))
    steps = Migrations([Migration("0001_create", create), Migration("0002_fail", fail)])
    with pytest.raises(RuntimeError):
        steps.apply(conn, None)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []  # one transaction: all or nothing
    assert Migrations([Migration("0001_create", create)]).apply(conn, None) == ["0001_create"]
    assert [m.name for m in steps.pending(conn)] == ["0002_fail"]
    with pytest.raises(ValueError, match="unique"):
        Migrations([Migration("a", create), Migration("a", fail)])


# --- the text index ---------------------------------------------------------------------------------------

# schema 1 (0f12bca): external content in chunks, with the segmented body and identifiers stored there
INDEX_V1_DDL = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents(doc_id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL, sha256 TEXT NOT NULL, indexed_at REAL NOT NULL);
CREATE TABLE chunks(chunk_id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL REFERENCES documents(doc_id)
  ON DELETE CASCADE, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, heading TEXT NOT NULL,
  text TEXT NOT NULL, text_digest TEXT NOT NULL, text_length INTEGER NOT NULL, body TEXT NOT NULL,
  idents TEXT NOT NULL);
CREATE INDEX chunks_doc ON chunks(doc_id);
CREATE VIRTUAL TABLE chunks_fts USING fts5(body, idents, content='chunks', content_rowid='chunk_id',
  tokenize='{textindex.TOKENIZER}');
"""
# schema 3 (ecca23d): contentless FTS5 and the vocabulary table, as schema 4 (which indexed rule files too)
INDEX_V3_DDL = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents(doc_id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL, sha256 TEXT NOT NULL, indexed_at REAL NOT NULL);
CREATE TABLE chunks(chunk_id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL REFERENCES documents(doc_id)
  ON DELETE CASCADE, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, heading TEXT NOT NULL,
  text TEXT NOT NULL, text_digest TEXT NOT NULL, text_length INTEGER NOT NULL);
CREATE INDEX chunks_doc ON chunks(doc_id);
CREATE VIRTUAL TABLE chunks_fts USING fts5(body, idents, content='', contentless_delete=1,
  tokenize='{textindex.TOKENIZER}');
CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
"""


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "2026-01-01.md").write_text("## 2026-01-01\n- 串口超时 ERR_UART_TIMEOUT_0x3F gamma\n")
    return root


def found(index: NoteIndex, query: str) -> list[str]:
    return [h.path for h in index.search(textindex.join_terms(textindex.match_terms(query)) or "", 5)]


@pytest.mark.parametrize(("version", "ddl"), [("1", INDEX_V1_DDL), ("3", INDEX_V3_DDL)])
def test_a_text_index_of_an_older_schema_is_rebuilt_and_that_is_recorded(
    tmp_path: Path, version: str, ddl: str
) -> None:
    root = workspace(tmp_path)
    db = tmp_path / "index.sqlite"
    conn = apsw.Connection(str(db))
    conn.execute(ddl)
    conn.executemany(
        "INSERT INTO meta VALUES(?, ?)",
        [("schema_version", version), ("chunker_version", "1"), ("tokenizer", textindex.TOKENIZER)],
    )
    conn.close()

    index = NoteIndex(root, db)
    assert index.open() == "version_changed"
    history = recorded(db)  # why the file is new first, then its migrations
    assert history[0] == f"rebuilt_from_schema_{version}" and history[-1] == "0001_documents_chunks_fts"
    assert found(index, "串口超时") == found(index, "ERR_UART_TIMEOUT_0x3F") == [PATH]
    index.close()
    assert NoteIndex(root, db).open() is None  # and it is current now


def test_a_text_index_of_schema_4_from_before_the_scheme_is_adopted_in_place(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    db = tmp_path / "index.sqlite"
    index = NoteIndex(root, db)
    assert index.open() == "missing"
    index.close()
    assert recorded(db) == ["0001_documents_chunks_fts"]
    # what the last daemon before the scheme wrote: the same tables, schema_version 4, no migrations table
    conn = apsw.Connection(str(db))
    conn.execute("DROP TABLE migrations")
    assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == str(INDEX_SCHEMA_VERSION)
    conn.close()
    inode = db.stat().st_ino

    index = NoteIndex(root, db)
    assert index.open() is None  # not rebuilt: the file is the one it was
    assert db.stat().st_ino == inode
    assert recorded(db) == ["0001_documents_chunks_fts"]
    assert found(index, "gamma") == [PATH]
    index.close()


def test_a_text_index_rebuilt_for_a_changed_setting_records_it(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    db = tmp_path / "index.sqlite"
    first = NoteIndex(root, db, chunk_max_lines=40)
    first.open()
    first.close()
    index = NoteIndex(root, db, chunk_max_lines=20)
    assert index.open() == "version_changed"
    assert recorded(db) == ["rebuilt_from_chunk_max_lines_40", "0001_documents_chunks_fts"]
    index.close()
