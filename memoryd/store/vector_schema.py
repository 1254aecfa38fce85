"""``vectors.sqlite``'s tables and their migrations (the scheme is :mod:`memoryd.store.migrations`).

Tables: ``units`` (a passage: path, lines, its section, its text and the text's digest, whether it is embedded —
0 waiting, 1 embedded, 2 refused by the provider — and a priority: long-term memory and the newest days first),
``docs`` (path → the sha256 its units were made from), ``cache`` (a text's digest → its vector's id: a text seen
before is never embedded again), the vectors themselves in one sqlite-vec ``vec0`` table (rowid = vector id, int8
components, partitioned by cell; ``vec_a`` or ``vec_b``: training fills the other and switches) and again by id in
``vector_rows`` (read by id: a search's shortlist past the memory budget, training's sample), ``centroids``
(the cells), ``refused`` (digests the provider will not embed) and ``meta`` (the model and dimension the vectors
were made with, the int8 scale, which vec0 table is current, when the cells were trained, ``schema_version``).

The migrations, in order (a file of the earlier ``schema_version`` style is recognised: 3 has had the first, 4 the
first two; 1 and 2 — cosine then L2 over float vectors, without cells — are started again, as they always were):

1. ``0001_units_float_vectors``: schema 3 — units, docs, the float32 cache, cells, a float ``vec0`` table by unit;
2. ``0002_int8_vectors_once``: schema 4 — each cached vector once, as int8, in cell 0 of ``vec_a`` (the cells are
   trained again when they are many); units whose vector is not in the cache wait to be embedded;
3. ``0003_refused_texts``: the ``refused`` table (added to schema 4 files at open before this scheme);
4. ``0004_vector_rows``: ``vector_rows`` (vector id → its int8 components, a plain table beside vec0, filled from
   the current vec0 table): past the memory budget a search reads its shortlist's vectors from here by id — ~2.5 µs
   a vector, where vec0 takes ~37 µs for one read by rowid and scans every vector for ``rowid IN`` (decision 0022).
"""

from __future__ import annotations

import importlib.util
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from memoryd.names import DegradedReason
from memoryd.store.migrations import Migration, Migrations
from memoryd.store.readers import DAMAGE_ERRORS

SCHEMA_VERSION = 4  # meta's schema_version, still written: an older daemon reads the file as its own


class VectorsUnavailable(RuntimeError):
    """The vector index cannot be used: ``reason`` is stable, ``hint`` says what to do."""

    def __init__(self, reason: DegradedReason, message: str, hint: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.hint = hint


def damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the vector file itself is damaged (overwritten, truncated, unreadable) — not busy."""
    return isinstance(exc, (*DAMAGE_ERRORS, apsw.IOError, apsw.CantOpenError))


REBUILD_HINT = "Run `memoryctl index --rebuild-vectors` to embed this workspace again with the current model."


def extension_path(configured: str = "") -> Path | None:
    """The sqlite-vec loadable extension: ``configured`` when set, else the one the ``sqlite-vec`` package ships
    (found without importing the package). None when there is none."""
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "vec0"


def load_extension(conn: apsw.Connection, extension: Path | None) -> None:
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
            "Reinstall it (pip install --force-reinstall sqlite-vec) or fix vector_extension (MEMORYD_VECTOR_EXTENSION, "
            "or the settings file config/memoryd.yaml under the memoryd home).",
        ) from exc


# The next units to embed, found by the index units_todo (a bare `NOT embedded` would scan and sort them all)
TODO_SQL = "SELECT unit_id, text, digest FROM units WHERE embedded = 0 ORDER BY priority, unit_id LIMIT ?"
# The units a new vector embeds: by their digest (left to itself the planner may walk units_todo's embedded = 0)
MARK_SQL = "UPDATE units INDEXED BY units_digest SET embedded = 1 WHERE digest = ? AND embedded = 0"


@dataclass(frozen=True, slots=True)
class VectorSpace:
    """What a migration needs to know: the model and dimension the file's vectors are for."""

    model: str
    dimension: int


VECTOR_ROWS_DDL = "CREATE TABLE vector_rows(vector_id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)"


def vec0_ddl(name: str, dimension: int) -> str:
    return f"CREATE VIRTUAL TABLE {name} USING vec0(cell INTEGER PARTITION KEY, embedding int8[{int(dimension)}])"


def _units_float_vectors(conn: apsw.Connection, space: VectorSpace) -> None:
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
        CREATE VIRTUAL TABLE units_vec USING vec0(cell INTEGER PARTITION KEY, embedding float[{int(space.dimension)}]);
        """
    )
    conn.executemany(
        "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
        [("schema_version", "3"), ("model", space.model), ("dimension", str(space.dimension))],
    )


def _int8_vectors_once(conn: apsw.Connection, space: VectorSpace) -> None:
    """Schema 3 (float32 vectors twice: in ``units_vec`` by unit and in ``cache`` by digest) to 4: each cached
    vector once, as int8, in cell 0. The units and their embedded flags stay as they are: every embedded unit's
    digest is in the cache (a unit marked embedded whose digest is not waits to be embedded again)."""
    cells = arithmetic()

    dimension = space.dimension
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
    conn.execute(vec0_ddl("vec_a", dimension))
    scale = 0.0
    rows = conn.execute("SELECT digest, vector FROM cache_v3 ORDER BY digest")
    while batch := list(itertools.islice(rows, 5000)):
        data: Any = cells.from_bytes(b"".join(bytes(v) for _, v in batch), dimension)
        scale = scale or cells.int8_scale(data)
        ids = []
        for digest, _ in batch:
            conn.execute("INSERT INTO cache(digest) VALUES(?)", (digest,))
            ids.append(conn.last_insert_rowid())
        conn.executemany(
            "INSERT INTO vec_a(rowid, cell, embedding) VALUES(?, 0, vec_int8(?))",
            [(i, row.tobytes()) for i, row in zip(ids, cells.quantise(data, scale), strict=True)],
        )
    conn.execute("DROP TABLE cache_v3")
    conn.execute("UPDATE units SET embedded = 0 WHERE embedded = 1 AND digest NOT IN (SELECT digest FROM cache)")
    conn.executemany(
        "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
        [("schema_version", str(SCHEMA_VERSION)), ("vec_table", "vec_a")]
        + ([("int8_scale", repr(scale))] if scale else []),
    )


def _refused_texts(conn: apsw.Connection, space: VectorSpace) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS refused(digest TEXT PRIMARY KEY)")


def _vector_rows(conn: apsw.Connection, space: VectorSpace) -> None:
    conn.execute(VECTOR_ROWS_DDL)
    table = meta(conn).get("vec_table", "vec_a")
    if table in ("vec_a", "vec_b"):  # (the only names ever written: the value is read from the file)
        conn.execute(f"INSERT INTO vector_rows(vector_id, embedding) SELECT rowid, embedding FROM {table}")


MIGRATIONS: Migrations[VectorSpace] = Migrations(
    [
        Migration("0001_units_float_vectors", _units_float_vectors),
        Migration("0002_int8_vectors_once", _int8_vectors_once),
        Migration("0003_refused_texts", _refused_texts),
        Migration("0004_vector_rows", _vector_rows),
    ],
    legacy={"3": 1, "4": 2},
)

# what a file of each pre-scheme schema_version becomes at open: kept (its migrations adopted) or started again
KEPT_LEGACY = frozenset(MIGRATIONS.legacy)


def meta(conn: apsw.Connection) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def check_meta(stored: dict[str, str], model: str, dimension: int) -> None:
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


def arithmetic() -> Any:
    """:mod:`memoryd.store.cells` (numpy: the semantic extra), or the stated reason why not."""
    try:
        from memoryd.store import cells
    except ImportError as exc:
        raise VectorsUnavailable(
            "semantic_not_installed",
            "numpy is not installed",
            "Install the semantic extra: pip install 'memoryd[semantic]'.",
        ) from exc
    return cells


def load_centroids(conn: apsw.Connection, dimension: int) -> tuple[Any, int]:
    rows = conn.execute("SELECT vector FROM centroids ORDER BY cell").fetchall()
    if not rows:
        return None, 0
    centroids = arithmetic().from_bytes(b"".join(bytes(v) for (v,) in rows), dimension)  # type: ignore[arg-type]
    trained = conn.execute("SELECT value FROM meta WHERE key = 'trained_at'").fetchone()
    return centroids, int(str(trained[0])) if trained else 0


def scalar(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0
