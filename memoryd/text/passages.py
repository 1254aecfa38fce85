"""The lines of a section that answer a query: its passages, ranked.

The index ranks ``##`` sections; an agent wants the few lines inside one that match, not the section's first 700
characters. A section splits into units that are never cut: a bullet with its continuation lines, a fenced code
block, a paragraph (a plain paragraph longer than ``MAX_LINES`` is split at line boundaries into windows). The
heading line and blank lines belong to no unit. Units are ranked by BM25 over the section's own units, so a word
that every line of the section says (a speaker's name in a chat log, the project's name) weighs little and the
line that says the rare word wins.

Plain functions over text: no I/O, no index.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from memoryd.text.chunker import fence_blocks

MAX_LINES = 8  # a paragraph window; a bullet or a code block is kept whole whatever its length
PER_SECTION = 50  # passages of one section that may come back (measured: 10 → R@50 79.0, 50 → 84.0 on LoCoMo)
MARK = "**"  # around each matched word in a snippet (Markdown bold: what an agent and a terminal read as emphasis)
_BULLET = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_WORD = re.compile(r"[^\W_]+")
_K1, _B = 1.2, 0.75
_IDF_ALONE = math.log(1 + 0.5 / 1.5)  # BM25's idf of a word in the only span there is


@dataclass(frozen=True, slots=True)
class Passage:
    start: int  # index of the first line in the section's lines (0 = the section's first line)
    end: int  # exclusive
    score: float
    matched: tuple[str, ...]  # the query words it contains, as given


def units(lines: list[str]) -> list[tuple[int, int, bool]]:
    """(start, end, cuttable) spans of ``lines``: bullets with their continuation lines, fenced blocks and
    paragraphs; blank lines and ``#`` headings outside fences belong to none. Only paragraphs are cuttable."""
    # no line can open a fence without "```" or "~~~" somewhere: skip the fence reader (most sections)
    blocks = fence_blocks(lines) if any("```" in line or "~~~" in line for line in lines) else [0] * len(lines)
    spans: list[tuple[int, int, bool]] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if blocks[i]:  # a fence and its body (to its closing fence or the end) are one unit
            start = i
            while i + 1 < n and blocks[i + 1] == blocks[start]:
                i += 1
            spans.append((start, i + 1, False))
            i += 1
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        start = i
        bullet = _BULLET.match(line) is not None
        i += 1
        while i < n and lines[i].strip() and not blocks[i] and not lines[i].lstrip().startswith("#"):
            if _BULLET.match(lines[i]) is not None and (bullet or not lines[i][:1].isspace()):
                break  # a new bullet (a bullet inside a paragraph's indented block continues it)
            i += 1
        spans.append((start, i, not bullet))
    return spans


def passage_spans(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) of every passage of a section: its units, a paragraph over ``MAX_LINES`` cut into windows. What
    search ranks, and what the vector index embeds (so the two name the same lines)."""
    spans: list[tuple[int, int]] = []
    for start, end, cuttable in units(lines):
        if cuttable and end - start > MAX_LINES:
            spans += [(s, min(s + MAX_LINES, end)) for s in range(start, end, MAX_LINES)]
        else:
            spans.append((start, end))
    return spans


def _stem(word: str) -> str:
    """A light English stem (plural and verb endings), enough to match 'migrations' to 'migration' inside one
    section; CJK and identifiers are left as they are."""
    if len(word) > 4 and word.isascii():
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                return word[: -len(suffix)]
    return word


def rank(lines: list[str], words: list[str]) -> list[Passage]:
    """The passages of a section's ``lines`` that contain a query word, best first (ties: the earlier one)."""
    # Lower-cased once (lower() keeps line breaks, so its lines stay aligned with ``lines``); a word that the
    # section does not say at all (most of a query's, in most sections) is not looked for span by span.
    folded = "\n".join(lines).lower()
    keys = [k for k in _keys(tuple(words)) if k[1] in folded]
    if not keys:
        return []
    spans = passage_spans(lines)
    if not spans:
        return []
    folded_lines = folded.split("\n")
    if len(spans) == 1:  # one bullet or paragraph (many daily entries): BM25 with one span is just this
        start, end = spans[0]
        text = "\n".join(folded_lines[start:end])
        found = {word: tf for word, key, latin in keys if (tf := _count(text, key, latin))}
        if not found:
            return []
        score = sum(_IDF_ALONE * tf * (_K1 + 1) / (tf + _K1) for tf in found.values())
        return [Passage(start, end, round(score, 6), tuple(found))]
    # Each span's words counted with str.count/find on its lower-cased text, in C (a regex alternation of CJK
    # words tries every position: ~20 µs for 200 characters).
    texts = ["\n".join(folded_lines[start:end]) for start, end in spans]
    counts = [{word: tf for word, key, latin in keys if (tf := _count(t, key, latin))} for t in texts]
    frequency: dict[str, int] = {}
    for found in counts:
        for word in found:
            frequency[word] = frequency.get(word, 0) + 1
    if not frequency:
        return []
    total = len(spans)
    lengths = [max(1, len(t) - (end - start - 1)) for t, (start, end) in zip(texts, spans, strict=True)]
    average = sum(lengths) / total  # characters, line breaks not counted
    idf = {w: math.log(1 + (total - f + 0.5) / (f + 0.5)) for w, f in frequency.items()}
    passages = []
    for (start, end), found, length in zip(spans, counts, lengths, strict=True):
        if found:
            norm = _K1 * (1 - _B + _B * length / average)
            score = sum(idf[w] * tf * (_K1 + 1) / (tf + norm) for w, tf in found.items())
            passages.append(Passage(start, end, round(score, 6), tuple(found)))
    return sorted(passages, key=lambda p: (-p.score, p.start))


def ranked(sections: list[tuple[float, list[str]]], words: list[str], limit: int) -> list[tuple[int, Passage, float]]:
    """The best ``limit`` passages of ranked sections, as (section index, passage, score).

    ``sections`` are (BM25 score, higher is better; lines) in the index's order. A passage's score is its
    section's score relative to the best section plus its own relative to the best passage of all sections
    (0–2): a strong line in the second section beats a weak one in the first (measured on LoCoMo against ranking
    each section's passages by their section first: R@25 73.9 vs 57.6). A section none of whose units says a query
    word (it matched through its heading, or an identifier form) comes back whole, with its section's score only.
    """
    top = max((score for score, _ in sections), default=0.0)
    chosen: list[tuple[int, list[Passage]]] = []
    best = 0.0
    for n, (_, lines) in enumerate(sections):
        found = rank(lines, words)[:PER_SECTION]
        chosen.append((n, found or [Passage(0, len(lines), 0.0, ())]))
        best = max([best] + [p.score for p in found[:1]])
    out = []
    for n, found in chosen:
        relative = sections[n][0] / top if top > 0 else 1.0
        for p in found:
            out.append((n, p, round(relative + (p.score / best if best > 0 else 0.0), 6)))
    out.sort(key=lambda t: (-t[2], t[0], t[1].start))
    return out[:limit]


def snippet(lines: list[str], matched: tuple[str, ...], max_chars: int) -> str:
    """The passage's text, at most ``max_chars`` characters of it around the first matched word (… marks a cut),
    each matched word wrapped in ``MARK``. The cap counts everything returned, markers and ellipses included, and a
    cut never falls inside a marked word: a marked word that does not fit is left out whole."""
    if lines and lines[0].startswith("#"):
        lines = lines[1:]  # a section that came back whole: its heading is in the hit already
    body = "\n".join(lines).strip("\n")
    start = 0
    first = _first_word(body, matched) if len(body) > max_chars and matched else None
    if first is not None and first > max_chars // 2:
        start = body.rfind("\n", 0, first) + 1
        if first - start > max_chars // 3:
            start = first - max_chars // 4
    lead = "…" if start else ""
    # Plain text and marked runs after ``start``; no run that starts past the window can fit.
    window = start + max_chars + 64
    pieces: list[tuple[str, bool]] = []  # (text, marked)
    last = start
    for at, end in word_spans(body, matched, start, min(window, len(body))) if matched else ():
        if pieces and pieces[-1][1] and at == last:  # adjacent words (串口 then 超时): one marked run
            pieces[-1] = (pieces[-1][0] + body[at:end], True)
        else:
            if at > last:
                pieces.append((body[last:at], False))
            pieces.append((body[at:end], True))
        last = end
    pieces.append((body[last:], False))
    whole = len(lead) + sum(len(text) + (2 * len(MARK) if marked else 0) for text, marked in pieces)
    if whole <= max_chars:
        return lead + "".join(f"{MARK}{text}{MARK}" if marked else text for text, marked in pieces)
    budget = max_chars - len(lead) - 1  # the trailing …
    out: list[str] = []
    for text, marked in pieces:
        if marked:
            if len(text) + 2 * len(MARK) > budget:
                if not out:  # the first word alone is longer than the cap: its text, unmarked
                    out.append(text[:budget])
                break
            out.append(f"{MARK}{text}{MARK}")
            budget -= len(text) + 2 * len(MARK)
        else:
            out.append(text[:budget])
            budget -= len(out[-1])
            if budget <= 0:
                break
    return lead + "".join(out) + "…"


def word_spans(text: str, matched: tuple[str, ...], pos: int = 0, endpos: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each of the ``matched`` words in ``text[pos:endpos]`` that starts a word (or is not Latin
    letters): a Latin word by its stem and a plain ending, case aside, the longest word first where two start
    together, left to right without overlaps — what :func:`_pattern` finds, found with ``str.find`` (compiling
    that pattern costs 80–200 µs, and a new question's hits bring new word sets)."""
    endpos = len(text) if endpos is None else min(endpos, len(text))
    folded = text[:endpos].lower()  # what a span or its next character can be read from
    if len(folded) != endpos:  # a letter whose lower case is longer (İ): offsets would drift; the pattern
        pattern = _pattern(matched)
        return [] if pattern is None else [m.span() for m in _matches(pattern, text, pos, endpos)]
    found: dict[int, int] = {}  # start → end of the first word (in the pattern's order) found there
    for key, latin in _alternatives(matched):
        at = folded.find(key, pos, endpos)
        while at >= 0:
            if at not in found:
                end = at + len(key)
                if latin:  # the stem, then the first plain ending after which no letter or digit follows
                    end = next(
                        (
                            e
                            for ending in _PATTERN_ENDINGS
                            if (e := end + len(ending)) <= endpos
                            and folded.startswith(ending, end)
                            and (e == endpos or not folded[e].isalnum())
                        ),
                        -1,
                    )
                if end > at:
                    found[at] = end
            at = folded.find(key, at + 1, endpos)
    spans, last = [], pos
    for at in sorted(found):
        if at >= last:  # the pattern's matches do not overlap: a word inside the one before is not one
            last = found[at]
            if not (at and _is_word_char(text[at - 1]) and _is_word_char(text[at])):
                spans.append((at, last))
    return spans


_PATTERN_ENDINGS = ("ing", "ed", "es", "s", "")  # the pattern's ending, tried in its order


def _first_word(text: str, matched: tuple[str, ...]) -> int | None:
    """Where :func:`word_spans`' first span starts, reading the text only as far as that (a code block kept whole
    can be a megabyte): spans starting before ``size`` are exact once the read reaches a word's length past it."""
    reach = max((len(key) for key, _ in _alternatives(matched)), default=0) + 4  # a stem, its ending, the next char
    size = 1024
    while True:
        end = min(len(text), size + reach)
        spans = word_spans(text, matched, 0, end)
        if end == len(text) or (spans and spans[0][0] < size):
            return spans[0][0] if spans else None
        size *= 4


@lru_cache(maxsize=1024)
def _alternatives(matched: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """The words as :func:`_pattern` tries them: longest first, each as (what to find in lower-cased text, whether
    it is a Latin word found by its stem)."""
    return tuple((key, latin) for _, key, latin in sorted(_keys(matched), key=lambda k: len(k[0]), reverse=True))


def _matches(pattern: re.Pattern[str], text: str, pos: int = 0, endpos: int | None = None) -> Iterator[re.Match[str]]:
    """The pattern's matches in ``text[pos:endpos]`` that start a word (or are not Latin letters)."""
    for match in pattern.finditer(text, pos, len(text) if endpos is None else endpos):
        at = match.start()
        if not (at and _is_word_char(text[at - 1]) and _is_word_char(text[at])):
            yield match


def _is_word_char(char: str) -> bool:
    return char.isalnum() and char.isascii()


@lru_cache(maxsize=1024)
def _keys(words: tuple[str, ...]) -> tuple[tuple[str, str, bool], ...]:
    """(word, what to look for in lower-cased text, whether it is a Latin word matched by its stem at a word start),
    once per query."""
    out = []
    for word in dict.fromkeys(words):
        key = word.lower()
        latin = key.isascii() and _WORD.fullmatch(key) is not None
        key = _stem(key) if latin else key
        if key:
            out.append((word, key, latin))
    return tuple(out)


_ENDINGS = (
    "",
    "s",
    "es",
    "ed",
    "ing",
)  # what may follow a Latin word's stem: "timeouts" is "timeout", "good" is not "go"


def _count(folded: str, key: str, latin: bool) -> int:
    if not latin:
        return folded.count(key)
    count, at, size = 0, folded.find(key), len(folded)
    while at >= 0:
        end = at + len(key)
        tail = end
        while tail < size and _is_word_char(folded[tail]):
            tail += 1
        if not (at and _is_word_char(folded[at - 1])) and folded[end:tail] in _ENDINGS:
            count += 1
        at = folded.find(key, end)
    return count


def _part(word: str) -> str:
    key = word.lower()
    if key.isascii() and _WORD.fullmatch(key):
        return rf"{re.escape(_stem(key))}(?:ing|ed|es|s)?(?![^\W_])"
    return re.escape(key)


@lru_cache(maxsize=4096)
def _pattern(matched: tuple[str, ...], *, ignore_case: bool = True) -> re.Pattern[str] | None:
    """Latin words by their stem and a plain ending (``timeouts`` finds ``timeout``), other words as they are. Without
    ``ignore_case`` the pattern is lower-case, for lower-cased text. A Latin word's start is checked by the caller
    (a leading ``\\b`` makes re try every position: ten times slower)."""
    parts = [_part(word) for word in sorted(matched, key=len, reverse=True)]
    if not parts:
        return None
    return re.compile("|".join(parts), re.IGNORECASE if ignore_case else 0)
