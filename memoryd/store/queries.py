"""What the note index answers: a ranked FTS5 search, the adaptive stop list that keeps OR queries cheap, and the
small read queries (documents, sections, counts, segments, what is stale). Each takes a read connection, which
:class:`~memoryd.store.index.NoteIndex` hands out under its readers' shared lock."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from memoryd.store.prepare import indexed_files
from memoryd.text import textindex

PRUNE_MIN_CHUNKS = 1000
PRUNE_MAX_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    score: float


def search(
    reader: apsw.Connection, match: str, limit: int, paths: list[str] | None = None, exclude: str | None = None
) -> list[Hit]:
    """The best ``limit`` chunks for ``match``; with ``paths``, among those files' chunks only; with ``exclude``
    (a path prefix such as ``memory/archive/``), none of the files under it.

    Without ``paths`` the ranking happens inside FTS5 first (ORDER BY rank LIMIT), then only the winners are
    joined. An ``exclude`` under which no file is indexed (most workspaces have no archive) costs one lookup;
    else it first asks for four times ``limit`` that way and drops the excluded; only when they leave fewer than
    ``limit`` of a full answer does it rank every match with the files joined."""
    if exclude is not None and not _any_under(reader, exclude):
        exclude = None
    if paths is not None or exclude is None:
        return _search(reader, match, limit, paths, None)
    wider = _search(reader, match, 4 * limit, None, None)
    kept = [h for h in wider if not h.path.startswith(exclude)]
    if len(kept) >= limit or len(wider) < 4 * limit:
        return kept[:limit]
    return _search(reader, match, limit, None, exclude)


def _any_under(reader: apsw.Connection, prefix: str) -> bool:
    """Whether a file under ``prefix`` is indexed (a range over the path's unique index)."""
    sql = "SELECT 1 FROM documents WHERE path >= ? AND path < ? LIMIT 1"
    return reader.execute(sql, (prefix, _past(prefix))).fetchone() is not None


def _past(prefix: str) -> str:
    """The least string after every string that starts with ``prefix``, for a range over an index."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _search(reader: apsw.Connection, match: str, limit: int, paths: list[str] | None, exclude: str | None) -> list[Hit]:
    if paths is None and exclude is None:
        sql = (
            "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, top.rank FROM "
            "(SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?) AS top "
            "JOIN chunks c ON c.chunk_id = top.rowid JOIN documents d ON d.doc_id = c.doc_id ORDER BY top.rank"
        )
        args: tuple[object, ...] = (match, limit)
    elif paths is not None:
        sql = (
            "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, f.rank FROM chunks_fts f "
            "JOIN chunks c ON c.chunk_id = f.rowid JOIN documents d ON d.doc_id = c.doc_id "
            f"WHERE chunks_fts MATCH ? AND d.path IN ({','.join('?' * len(paths))}) ORDER BY f.rank LIMIT ?"
        )
        args = (match, *paths, limit)
    else:
        assert exclude is not None
        sql = (
            "SELECT d.path, c.start_line, c.end_line, c.heading, c.text, f.rank FROM chunks_fts f "
            "JOIN chunks c ON c.chunk_id = f.rowid JOIN documents d ON d.doc_id = c.doc_id "
            "WHERE chunks_fts MATCH ? AND NOT (d.path >= ? AND d.path < ?) ORDER BY f.rank LIMIT ?"
        )
        args = (match, exclude, _past(exclude), limit)
    rows = reader.execute(sql, args).fetchall()
    return [
        Hit(str(path), int(start), int(end), str(heading), str(text), round(-float(rank), 6))  # type: ignore[arg-type]
        for path, start, end, heading, text, rank in rows
    ]


@dataclass(slots=True)
class Frequencies:
    """Document frequencies of single-word terms, cached until the index grows or shrinks by 1% (they only need to
    be roughly right)."""

    cache: dict[str, int] = field(default_factory=dict)
    basis: int = 0

    def clear(self) -> None:
        self.cache.clear()

    def known(self, tokens: list[str], total: int) -> dict[str, int] | None:
        """:meth:`of_tokens` from the cache alone (no read connection needed), or None when one is not cached."""
        if abs(total - self.basis) > total // 100:
            return None
        found = {t: self.cache.get(t) for t in tokens}  # another thread may clear the cache meanwhile: then None
        return None if None in found.values() else found  # type: ignore[return-value]

    def of_tokens(self, reader: apsw.Connection, tokens: list[str], total: int) -> dict[str, int]:
        """token → in how many chunks it occurs; ``total``: the chunks."""
        if abs(total - self.basis) > total // 100:
            self.cache.clear()
            self.basis = total
        frequency = self.cache
        for token in tokens:
            if token not in frequency:
                row = reader.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (token,)).fetchone()
                if len(frequency) > 100_000:
                    frequency.clear()
                frequency[token] = int(row[0]) if row else 0
        return {t: frequency.get(t, 0) for t in tokens}


def prune(terms: list[textindex.Term], df: dict[str, int], total: int) -> list[textindex.Term]:
    """Drop very common single-word terms when a rarer word that occurs remains (see
    :meth:`~memoryd.store.index.NoteIndex.prune`); ``df``: their document frequencies, ``total``: the chunks."""
    limit = total * PRUNE_MAX_SHARE
    known = sorted((t for t in terms if t.token is not None and df[t.token] > 0), key=lambda t: df[t.token or ""])
    if not known or df[known[0].token or ""] <= limit:
        # a rare word occurs (or none does at all): the common ones add cost, not results
        return [t for t in terms if t.token is None or df[t.token] <= limit]
    rarest = {id(t) for t in known[:2]}
    return [t for t in terms if t.token is None or df[t.token] == 0 or id(t) in rarest]


def is_current(reader: apsw.Connection, root: Path, rel: str) -> bool:
    """Whether the index holds ``rel`` as the file is now (its mtime and size), or nothing of a file that is gone."""
    try:
        info = os.stat(root / rel)
        now: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
    except OSError:
        now = None
    row = reader.execute("SELECT mtime_ns, size FROM documents WHERE path = ?", (rel,)).fetchone()
    return (None if row is None else (int(row[0]), int(row[1]))) == now


def documents(reader: apsw.Connection) -> dict[str, str]:
    """path → sha256 of every indexed file."""
    return {str(p): str(s) for p, s in reader.execute("SELECT path, sha256 FROM documents")}


def listing(reader: apsw.Connection, prefix: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every indexed file under ``prefix``, by path."""
    sql = "SELECT path, size, mtime_ns FROM documents WHERE substr(path, 1, ?) = ? ORDER BY path"
    return [(str(p), int(s), int(t)) for p, s, t in reader.execute(sql, (len(prefix), prefix))]


def sections(reader: apsw.Connection, path: str) -> list[tuple[int, int, str, str]]:
    """The chunks of one indexed file, in order: (start_line, end_line, heading, text)."""
    sql = (
        "SELECT c.start_line, c.end_line, c.heading, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
        "WHERE d.path = ? ORDER BY c.start_line"
    )
    return [(int(s), int(e), str(h), str(t)) for s, e, h, t in reader.execute(sql, (path,))]


def counts(reader: apsw.Connection) -> tuple[int, int]:
    """(documents, chunks)."""
    (files,) = reader.execute("SELECT count(*) FROM documents").fetchone() or (0,)
    (chunks,) = reader.execute("SELECT count(*) FROM chunks").fetchone() or (0,)
    return int(files), int(chunks)


def segments(reader: apsw.Connection) -> int:
    """How many FTS5 segments the index has."""
    (count,) = reader.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone() or (0,)
    return int(count)


def signatures(reader: apsw.Connection) -> dict[str, tuple[int, int]]:
    """path → (mtime_ns, size) of every indexed file."""
    return {str(p): (int(m), int(s)) for p, m, s in reader.execute("SELECT path, mtime_ns, size FROM documents")}


def dirty(known: dict[str, tuple[int, int]], root: Path, max_file_bytes: int, refused: dict[str, str]) -> list[str]:
    """Files whose (mtime, size) differ from ``known`` (the index's :func:`signatures`), plus indexed files that
    are gone; files over ``max_file_bytes`` or refused are not pending."""
    present = {
        rel: (info.st_mtime_ns, info.st_size)
        for rel, info in indexed_files(root)
        if info.st_size <= max_file_bytes and rel not in refused
    }
    stale = [rel for rel, sig in present.items() if known.get(rel) != sig]
    stale += [rel for rel in known if rel not in present]
    return sorted(stale)
