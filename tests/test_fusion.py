"""Hybrid search's fusion (memoryd/notes/fusion.py), through its public API: the two sides' passages become one
ranking."""

from __future__ import annotations

import math

from memoryd.notes.fusion import Candidate, fuse
from memoryd.store.passage import Passage


def candidate(path: str, line: int, text: str, *, ident: bool = False, via: str = "bm25") -> Candidate:
    return Candidate(Passage(path, line, 1, "## h", 1, 10, text), (), 0.0, ident, via)


def test_fusion_adds_both_sides_keeps_identifiers_on_top_and_collapses_duplicates() -> None:
    lexical = [candidate("a.md", 2, "- one"), candidate("a.md", 3, "- ERR_X here", ident=True)]
    semantic = [
        candidate("b.md", 5, "- One", via="vector"),  # the same text as a.md:2, case aside
        candidate("a.md", 2, "- one", via="vector"),
        candidate("c.md", 9, "- other", via="vector"),
    ]
    fused = fuse(lexical, semantic, 10, "rrf", 0.5)
    assert [(c.passage.path, c.passage.start_line) for c in fused] == [("a.md", 3), ("a.md", 2), ("c.md", 9)]
    assert fused[1].via == "bm25+vector" and math.isclose(fused[1].score, 1 / 61 + 1 / 62)
    assert len(fuse(lexical, semantic, 1, "rrf", 0.5)) == 1


def test_weighted_fusion_scales_each_side_and_leans_on_words() -> None:
    lexical = [candidate("a.md", 1, "- words"), candidate("a.md", 2, "- fewer words")]
    lexical[0].score, lexical[1].score = 2.0, 1.0
    semantic = [candidate("b.md", 1, "- meaning", via="vector"), candidate("a.md", 2, "- fewer words", via="vector")]
    semantic[0].score, semantic[1].score = 0.9, 0.5
    fused = fuse(lexical, semantic, 10, "weighted", 0.3)
    # BM25 scaled by its best (1.0, 0.5), cosine min-max (1.0, 0.0); weights 1.4 and 0.6
    assert [(c.passage.path, c.passage.start_line, round(c.score, 6)) for c in fused] == [
        ("a.md", 1, 1.4),
        ("a.md", 2, 0.7),
        ("b.md", 1, 0.6),
    ]
    assert [c.via for c in fused] == ["bm25", "bm25+vector", "vector"]
