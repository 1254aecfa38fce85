"""Hybrid search's fusion: the passages each side found (BM25 over words, the vector side over meaning) become one
ranking (decision 0008). Plain functions over :class:`Candidate`; tested on their own (tests/test_fusion.py)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from memoryd.notes import api
from memoryd.store.index import Hit
from memoryd.store.passage import Passage
from memoryd.store.vectors import VectorHit
from memoryd.text import passages, textindex

RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009): measured in docs/decisions/0008
FUSION_CANDIDATES = 20  # passages each side brings to a hybrid fusion (at least twice the limit)
FLOOR_RANK = 40  # the vector side's noise floor is the similarity of this many nearest passages' last
VECTOR_SCALE = 1.5  # a vector strength counts this much against a lexical one (tuned: decision 0011)
AGREEMENT = 0.3  # what the weaker side adds when both found a passage (tuned: decision 0011)
TRUST_POWER = 1.5  # words are trusted as much as the best lexical passage covers the question, to this power
MEANING_SHARE = 0.5  # what the meaning side adds to a trusted lexical ranking


@dataclass(slots=True)
class Candidate:
    """A passage one side of a search found, with what it matched and its score on that side's scale."""

    passage: Passage
    matched: tuple[str, ...]  # the query's words it says (marked in the snippet)
    score: float
    ident: bool = False  # says one of the query's identifiers: stays on top
    via: str = "bm25"  # bm25, vector, or bm25+vector once fused
    strength: float = 0.0  # calibrated 0-1 on its side's scale (see from_lexical, from_vector): the hit's relevance

    def hit(self, workspace_id: str, snippet_max_chars: int, item_id: str | None = None) -> api.SearchHit:
        p = self.passage
        # validated from a dict: pydantic-core does that in about half the time model_construct takes (1.3 µs)
        return api.SearchHit.model_validate(
            {
                "workspace_id": workspace_id,
                "path": p.path,
                "start_line": p.start_line,
                "lines": p.lines,
                "heading": p.heading,
                "section_start_line": p.section_start,
                "section_lines": p.section_lines,
                "snippet": passages.snippet(p.text.split("\n"), self.matched, snippet_max_chars),
                "score": round(self.score, 6),
                "via": self.via,
                "item_id": item_id,
                "relevance": round(self.strength, 4),
            }
        )


def coverage(matched: tuple[str, ...], weights: dict[str, float], mass: float) -> float:
    """How much of the question a passage says: the inverse document frequency of the query's words it says, over
    the question's own (``mass``, every content word counted, those no note holds at their highest). A line that
    matches one common word of a long question is weak however it ranks among the other weak ones."""
    if mass <= 0:
        return 0.0
    return min(1.0, sum(weights.get(w, 0.0) for w in set(matched)) / mass)


# A hyphenated compound of plain lower-case words (on-call, e-mail, follow-up) is indexed as an identifier, so its
# exact form ranks well, but it is an ordinary word: it does not put a passage on top at full strength as
# ERR_UART_TIMEOUT_0x3F or facts.transport.baud do ("on-call handover Monday" recalled every line saying on-call).
PLAIN_COMPOUND = re.compile(r"[a-z]+(?:-[a-z]+)+")


def from_lexical(
    found: list[Hit],
    words: list[str],
    idents: set[str],
    limit: int,
    weights: dict[str, float] | None = None,
    mass: float = 0.0,
) -> list[Candidate]:
    """The BM25 side: the passages of the sections the index found, ranked (text/passages.py). ``weights`` (word →
    idf) and ``mass`` (the question's total) make each passage's strength its :func:`coverage`; a passage that says
    one of the query's identifiers is full strength."""
    words = words[: textindex.MAX_TERMS]  # a pasted 10 kB question: bounded work
    idents = {i for i in idents if not PLAIN_COMPOUND.fullmatch(i)}
    sections = [(h.score, h.text.split("\n")) for h in found]
    out = []
    for n, p, score in passages.ranked(sections, words, limit):
        section = found[n]
        passage = Passage(
            path=section.path,
            start_line=section.start_line + p.start,
            lines=p.end - p.start,
            heading=section.heading,
            section_start=section.start_line,
            section_lines=section.end_line - section.start_line + 1,
            text="\n".join(sections[n][1][p.start : p.end]),
        )
        ident = not idents.isdisjoint(p.matched)
        strength = 1.0 if ident else coverage(p.matched, weights or {}, mass)
        out.append(Candidate(passage, p.matched, score, ident=ident, strength=strength))
    return out


def from_vector(hit: VectorHit, words: list[str], floor: float = 0.0) -> Candidate:
    """The vector side: a passage near the query, scored by its cosine similarity; its strength is how far that
    similarity stands above ``floor``, the query's own noise level in this workspace (:func:`noise_floor`), on
    the way to 1, times VECTOR_SCALE (capped at 1): on the scale of a lexical passage's coverage."""
    folded = hit.passage.text.lower()
    cosine = 1.0 - hit.distance
    strength = min(1.0, VECTOR_SCALE * max(0.0, cosine - floor) / max(1e-6, 1.0 - floor))
    return Candidate(hit.passage, tuple(w for w in words if w in folded), cosine, via="vector", strength=strength)


def noise_floor(cosines: list[float], rank: int = FLOOR_RANK) -> float:
    """What an unrelated passage scores for this query here: the similarity of the ``rank``-th nearest vector
    (most of them are not the answer), which calibrates every model's cosines to the workspace; 0 when the
    workspace has fewer (every passage may be an answer)."""
    return cosines[rank - 1] if len(cosines) >= rank else 0.0


def fuse(
    lexical: list[Candidate],
    semantic: list[Candidate],
    limit: int,
    method: str = "weighted",
    vector_weight: float = 0.3,
) -> list[Candidate]:
    """Fuse the two rankings, passages that say one of the query's identifiers first, and near-duplicates (the same
    text, case and spacing aside) collapsed into the best of them.

    ``rrf``: reciprocal rank fusion, each side's 1 / (K + rank) weighted (a passage both found adds both);
    ``weighted``: a weighted sum of each side's score scaled to 0-1 (BM25 by its best; cosine similarity
    min-max over the candidates). ``vector_weight`` is the meaning side's share (0-1)."""
    if method == "calibrated":
        return _calibrated(lexical, semantic, limit)
    weights = (2 * (1 - vector_weight), 2 * vector_weight)  # 0.5: both 1, as plain RRF
    fused: dict[tuple[str, int, int], Candidate] = {}
    for side, ranking in enumerate((lexical, semantic)):
        if method == "weighted" and ranking:
            top, low = max(c.score for c in ranking), min(c.score for c in ranking)
            shares = [
                weights[side]
                * ((c.score / top if top > 0 else 0.0) if side == 0 else (c.score - low) / ((top - low) or 1))
                for c in ranking
            ]
        else:
            shares = [weights[side] / (RRF_K + rank) for rank in range(1, len(ranking) + 1)]
        for c, share in zip(ranking, shares, strict=True):
            key = (c.passage.path, c.passage.start_line, c.passage.lines)
            seen = fused.get(key)
            if seen is None:
                fused[key] = dataclasses.replace(c, score=share)
            else:
                seen.score += share
                seen.via = "bm25+vector"
                seen.ident = seen.ident or c.ident
    return best(fused.values(), limit)


def _calibrated(lexical: list[Candidate], semantic: list[Candidate], limit: int) -> list[Candidate]:
    """Both sides on one scale, weighed per query (decision 0011).

    Each candidate has a calibrated strength: a lexical passage the share of the question's word weight it says
    (:func:`coverage`), a vector passage its similarity above the query's noise floor (:func:`from_vector`). How
    far words can be trusted for this query is how well the best lexical passage covers it: ``trust`` =
    best coverage ** TRUST_POWER. Trusted, the lexical ranking leads (BM25's own order, relative to its best, plus
    a share of the meaning side); untrusted — the question's words are not in the notes, only a loose word matches —
    each passage scores by its stronger side, plus a share of the weaker when both found it, so a weak one-word
    match never buries a passage whose meaning answers."""
    both: dict[tuple[str, int, int], tuple[Candidate | None, Candidate | None]] = {}
    for c in lexical:
        both[(c.passage.path, c.passage.start_line, c.passage.lines)] = (c, None)
    for c in semantic:
        key = (c.passage.path, c.passage.start_line, c.passage.lines)
        both[key] = (both.get(key, (None, None))[0], c)
    trust = max((c.strength for c in lexical), default=0.0) ** TRUST_POWER
    fused = []
    for words, meaning in both.values():
        covered = words.strength if words is not None else 0.0
        ranked = words.score / 2 if words is not None else 0.0  # passages.ranked: 0-2, relative to the best
        near = meaning.strength if meaning is not None else 0.0
        stronger = max(covered, near) + AGREEMENT * min(covered, near)
        score = trust * (ranked + MEANING_SHARE * near) + (1 - trust) * stronger
        first = words if words is not None else meaning
        assert first is not None
        fused.append(
            Candidate(  # not dataclasses.replace: a third of its time, forty times a search
                first.passage,
                first.matched,
                score,
                first.ident,
                "bm25+vector" if words is not None and meaning is not None else first.via,
                min(1.0, trust * max(covered, near) + (1 - trust) * stronger),
            )
        )
    return best(fused, limit)


def best(fused: Iterable[Candidate], limit: int) -> list[Candidate]:
    """The best ``limit``: identifiers first, then by score; near-duplicates collapsed into the best of them."""
    ordered = sorted(fused, key=lambda c: (not c.ident, -c.score, c.passage.path, c.passage.start_line))
    out: list[Candidate] = []
    texts: set[str] = set()
    for c in ordered:
        same = " ".join(c.passage.text.lower().split())
        if same not in texts:
            texts.add(same)
            out.append(c)
            if len(out) == limit:
                break
    return out
