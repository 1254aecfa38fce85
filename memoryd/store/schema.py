"""The index file's tables, and the versions stored in it (a difference means: rebuild)."""

from __future__ import annotations

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
