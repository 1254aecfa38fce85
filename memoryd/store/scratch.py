"""A throw-away FTS5 index of a few texts in memory, ranked exactly like a workspace's note index: the same
tokenizer, the same two columns (the segmented body, the identifier forms) and the same BM25 weights, fed by the same
chunker and text processing. For questions about text that is not on disk yet (the replay check asks whether a
consolidation's would-be MEMORY.md still answers past prompts). Not shared between threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import apsw

from memoryd.text import chunker, textindex


@dataclass(frozen=True, slots=True)
class ScratchChunk:
    doc: str  # the caller's name for the text it came from
    start: int  # the chunk's first line (0-based) in that text's lines
    end: int  # exclusive


class ScratchIndex:
    def __init__(self, texts: Sequence[tuple[str, list[str]]], *, max_lines: int = 40) -> None:
        """``texts``: (name, lines) pairs, each chunked like a Markdown memory file."""
        self.conn = apsw.Connection(":memory:")
        self.conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, idents, tokenize='{textindex.TOKENIZER}')")
        self.conn.execute(f"INSERT INTO t(t, rank) VALUES('rank', '{textindex.rank_sql()}')")
        self.chunks: list[ScratchChunk] = []
        rows = []
        for name, lines in texts:
            spans = [(lo, hi) for lo, hi, _heading in chunker.chunk_spans(lines, max_lines=max_lines)]
            for (lo, hi), (_text, body, idents) in zip(spans, textindex.index_chunks(lines, spans), strict=True):
                self.chunks.append(ScratchChunk(name, lo, hi))
                rows.append((len(self.chunks), body, idents))
        with self.conn:
            self.conn.executemany("INSERT INTO t(rowid, body, idents) VALUES(?, ?, ?)", rows)

    def top(self, query: str, k: int) -> list[int]:
        """The positions in :attr:`chunks` of the ``k`` best chunks for ``query``, best first."""
        match = textindex.join_terms(textindex.parse_query(query).terms)
        if match is None:
            return []
        try:
            found = self.conn.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (match, k))
            return [int(rowid) - 1 for (rowid,) in found]
        except apsw.SQLError:  # a query FTS5 still refuses: nothing found, as search would degrade
            return []

    def close(self) -> None:
        self.conn.close()
