"""Hybrid search's fusion (memoryd/notes/fusion.py), through its public API: the two sides' passages become one
ranking."""

from __future__ import annotations

import math

from memoryd.notes.fusion import Candidate, coverage, from_lexical, fuse
from memoryd.store.passage import Passage
from memoryd.store.queries import Hit


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


def scored(
    path: str, line: int, text: str, score: float, strength: float, *, via: str = "bm25", ident: bool = False
) -> Candidate:
    return Candidate(Passage(path, line, 1, "## h", 1, 10, text), (), score, ident, via, strength)


def test_calibrated_an_identifier_stays_first() -> None:
    lexical = [scored("a.md", 1, "- words words", 2.0, 0.9), scored("a.md", 5, "- ERR_X_0x3F", 0.4, 1.0, ident=True)]
    semantic = [scored("b.md", 2, "- meaning", 0.9, 1.0, via="vector")]
    fused = fuse(lexical, semantic, 10, "calibrated")
    assert fused[0].passage.start_line == 5 and fused[0].ident


def test_calibrated_a_vector_answer_beats_a_weak_one_word_match() -> None:
    """The issue's failure: a line matching only "per" of a long question outranked the note whose meaning answers,
    because BM25 was scaled by its own best however weak that was. Coverage (the question's word weight a passage
    says) is low for it, and words are not trusted for this query."""
    weak = scored("a.md", 1, "- per user per day", 2.0, 0.15)  # the best word match, relative score 2.0
    answer = scored("b.md", 7, "- the note that answers", 0.62, 0.7, via="vector")
    fused = fuse([weak], [answer], 10, "calibrated")
    assert [c.passage.path for c in fused] == ["b.md", "a.md"]
    assert fused[0].strength > fused[1].strength  # relevance: calibrated, comparable


def test_calibrated_trusted_words_keep_their_order() -> None:
    """When the best word match covers the question, BM25's own order leads (LoCoMo: conversation English)."""
    first = scored("a.md", 1, "- says it all", 2.0, 1.0)
    second = scored("a.md", 2, "- says most of it", 1.2, 0.8)
    loose = scored("c.md", 3, "- somewhat near", 0.5, 0.6, via="vector")
    fused = fuse([first, second], [loose], 10, "calibrated")
    assert [c.passage.start_line for c in fused] == [1, 2, 3]


def test_coverage_is_the_share_of_the_questions_word_weight() -> None:
    assert coverage(("uart",), {"uart": 3.0, "timeout": 1.0}, 4.0) == 0.75
    assert coverage(("uart", "uart"), {"uart": 3.0}, 4.0) == 0.75  # a word once
    assert coverage((), {"uart": 3.0}, 4.0) == 0.0 and coverage(("x",), {}, 0.0) == 0.0


def test_a_plain_hyphenated_word_is_not_an_identifier_that_stays_on_top() -> None:
    """on-call, e-mail, follow-up are indexed as identifiers (their exact form ranks well) but are ordinary words:
    a passage saying only "on-call" must not come first at full strength for "on-call handover Monday"."""
    found = [
        Hit("memory/a.md", 1, 1, "## a", "- On-call escalation: the secondary is paged after 10 minutes", 9.0),
        Hit("memory/b.md", 1, 1, "## b", "- ERR_UART_TIMEOUT_0x3F after the handover", 5.0),
    ]
    words = ["on-call", "call", "handover", "monday", "err_uart_timeout_0x3f"]
    weights = {w: 1.0 for w in words}
    plain, code = from_lexical(found, words, {"on-call", "err_uart_timeout_0x3f"}, 2, weights, len(words))
    assert not plain.ident and plain.strength < 1.0
    assert code.ident and code.strength == 1.0


def test_the_noise_floor_is_the_rank_th_similarity_and_nothing_when_the_workspace_is_smaller() -> None:
    from memoryd.notes import fusion

    cosines = [0.9 - n / 100 for n in range(48)]
    assert fusion.noise_floor(cosines, 40) == cosines[39]
    assert fusion.noise_floor(cosines[:39], 40) == 0.0  # fewer passages than the rank: every one may be an answer
