"""The index file's tables and their migrations (the scheme is :mod:`memoryd.store.migrations`), and the versions
stored in its ``meta`` table (a difference means: rebuild).

The text index is derived data: a file of an older schema or text-processing version is rebuilt from the
workspace's files, and the new file records why (``rebuilt_from_schema_<N>``, ``rebuilt_from_chunker_version_<N>``,
… beside its migrations). A file of schema 4 written before the scheme (a ``meta`` table only) is adopted in place:
its tables are the first migration's.
"""

from __future__ import annotations

import apsw

from memoryd.store.migrations import Migration, Migrations
from memoryd.text import chunker, textindex

SCHEMA_VERSION = 4

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents(
  doc_id INTEGER PRIMARY KEY,
  path TEXT NOT NULL UNIQUE,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks(
  chunk_id INTEGER PRIMARY KEY,
  doc_id INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
  start_line INTEGER NOT NULL,
  end_line INTEGER NOT NULL,
  heading TEXT NOT NULL,
  text TEXT NOT NULL,
  text_digest TEXT NOT NULL,
  text_length INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
-- Contentless: the segmented body and the identifier forms are only needed to build the index, and the raw
-- chunk text lives in chunks. contentless_delete lets a document's rows be deleted by rowid.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
  body, idents, content='', contentless_delete=1, tokenize='{textindex.TOKENIZER}'
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row');
"""


def versions(chunk_max_lines: int) -> dict[str, str]:
    return {
        "schema_version": str(SCHEMA_VERSION),
        "chunker_version": str(chunker.CHUNKER_VERSION),
        "text_version": str(textindex.TEXT_VERSION),
        "tokenizer": textindex.TOKENIZER,
        "chunk_max_lines": str(chunk_max_lines),
    }


def _documents_chunks_fts(conn: apsw.Connection, _: None) -> None:
    conn.execute(SCHEMA)
    conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{textindex.rank_sql()}')")


MIGRATIONS: Migrations[None] = Migrations(
    [Migration("0001_documents_chunks_fts", _documents_chunks_fts)],
    legacy={str(SCHEMA_VERSION): 1},
)


def rebuilt_from(stored: dict[str, str], chunk_max_lines: int) -> list[str]:
    """The records a rebuild of a file whose ``meta`` held ``stored`` leaves in the new file: one per version that
    differed (``rebuilt_from_schema_3``, ``rebuilt_from_chunker_version_2``, …)."""
    records = []
    for key, value in versions(chunk_max_lines).items():
        old = stored.get(key)
        if old is not None and old != value:
            name = "schema" if key == "schema_version" else key
            records.append(f"rebuilt_from_{name}_{old}")
    return records
