"""Text → FTS5 input, on both sides: what the index stores for a chunk and what a query asks for.

The table is ``fts5(body, idents, tokenize='<TOKENIZER>')`` ranked by :func:`rank_sql`.

- ``body`` is the chunk text with CJK runs pre-segmented by ``rjieba.cut_for_search`` and joined with spaces, so
  ``unicode61`` sees words: it would otherwise index a whole Chinese sentence as one token, and ``串口超时`` could
  never be found inside ``今天调试发现串口超时问题``. (trigram would find that, but misses 2-character words like
  ``串口``, the most common length in Chinese.) Queries are segmented the same way, so for the same string the
  query's tokens are a subset of the index's. Everything else is left to unicode61.
- ``idents`` holds one token per identifier-like word (``ERR_UART_TIMEOUT_0x3F``, ``facts.transport.baud``,
  ``src/drivers/uart.c``, ``KX-200``, ``0x3F``): unicode61 splits these into common parts (err, uart, …), so an
  exact match could not outrank a chunk that merely says "uart timeout" a lot. The token is the lower-cased
  parts joined by ``ǀ`` (U+01C0, a letter to unicode61, so the form stays one token) and ended by one:
  ``errǀuartǀtimeoutǀ0x3fǀ``. The part boundaries keep ``fw_1.2.0`` and ``fw_12.0`` apart (stripping the
  separators would make both ``fw120``) while the separator itself does not matter (``KX-200`` = ``kx_200``, a
  typist's variation); the final ``ǀ`` keeps porter from stemming the form (it strips only ASCII suffixes), so
  ``ERR_RETRYING`` and ``ERR_RETRY`` stay distinct. The column is weighted :data:`IDENT_WEIGHT` times the body.
  A query adds the form of each identifier it contains, plus the phrase of its parts for the body.
- A query is user text, never FTS5 syntax: every term is quoted, stop words are dropped, and terms are OR-ed so
  BM25 ranks (an AND of all words finds evidence for 12% of LoCoMo questions, OR/BM25 for over half).

Both sides fold full-width letters and digits first, so ``ＵＡＲＴ２`` (common in Chinese text) matches ``UART2``. (Full NFKC
would also fold ligatures and circled digits, but costs as much as segmentation on Chinese text.)
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, pairwise
from typing import Any

import apsw
import rjieba

# porter: on LoCoMo, R@5 51.8 -> 55.0 (questions say "paint", turns say "painting"). It only stems ASCII
# words, so CJK words and the identifier forms (which end in a non-ASCII letter) are indexed as they are.
TOKENIZER = "porter unicode61 remove_diacritics 2"
# Bump when index-side processing changes: stored rows would no longer match what queries produce (rebuild).
TEXT_VERSION = 4
IDENT_WEIGHT = 8.0
MAX_TERMS = 64  # OR clauses per query: bounds the cost of a pasted 10 kB question
MAX_QUERY_CHARS = 20_000
NEAR_DISTANCE = 6  # tokens allowed between two adjacent CJK query words (cut_for_search puts sub-words between)
IDENT_JOINER = "\u01c0"

# Han (incl. extensions and compatibility), kana and Hangul: scripts written without spaces between words.
# (One range from kana to the end of the unified ideographs: fewer ranges scan faster, and the CJK symbol blocks
# in between are harmless as single-character words.)
_CJK_CHARS = "\u3040-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
# Splits out CJK runs, and full-width letters and digits with them so one pass notices those too (a second
# alternative would double the cost of the scan: sre then tries the whole pattern at every position). Written
# "[…][…]*+" rather than "[…]+": sre only skips ahead at C speed to a pattern's first character set (2-3× faster).
_RUN_CHAR = f"[{_CJK_CHARS}\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]"
_CJK_SPLIT = re.compile(f"({_RUN_CHAR}{_RUN_CHAR}*+)")
_PART_CHAR = f"[^\\W_{_CJK_CHARS}{IDENT_JOINER}]"  # a letter or digit outside CJK
_LETTER = f"[^\\W0-9_{_CJK_CHARS}{IDENT_JOINER}]"  # ASCII digits: see _ANCHOR
_SEPARATOR = r"[_./:\\-]"
_PART = re.compile(f"{_PART_CHAR}+")
_TOKEN_CHAR = f"(?:{_PART_CHAR}|{_SEPARATOR})"
# Parts joined by separators, or one part mixing letters and digits, with at least one letter (the lookaheads).
# Pure-number compounds (dates, times, versions, addresses) are left to the body phrase, which is just as
# exact for them; daily headings would otherwise put two in every chunk. Starts only at a word boundary and
# never backtracks into a part (possessive quantifiers), so a scan stays linear.
_IDENT = re.compile(
    f"(?<!{_PART_CHAR})(?={_LETTER}++[0-9]|[0-9]++{_LETTER}|{_PART_CHAR}++{_SEPARATOR}++{_PART_CHAR})"
    f"(?={_TOKEN_CHAR}*?{_LETTER}){_PART_CHAR}++(?:{_SEPARATOR}++{_PART_CHAR}++)*"
)
# Parts joined by separators, letters or not: the query side searches these as a body phrase.
_COMPOUND = re.compile(f"{_PART_CHAR}++(?:{_SEPARATOR}++{_PART_CHAR}++)+")
# Every identifier has an anchor: a digit next to a letter, or a separator run between a letter and a part.
# Anchors are rare in prose, and sre finds this pattern's leading character class at C speed, while running
# _IDENT at every position costs ~40 ns a character (index_fields went from ~25 MB/s on English prose to ~50).
# The match runs on to the end of the token; the start of the token is found by walking back. The anchor, a
# digit or a separator, is followed by a letter, or preceded by one and then either a digit itself or followed by
# a part: the commonest candidates (digits in dates and times) fail after two one-character tests (-30%).
_ANCHOR = re.compile(
    f"[0-9_./:\\\\-](?:(?={_LETTER})|(?<={_LETTER}.)(?:(?<=[0-9])|(?={_SEPARATOR}*+{_PART_CHAR}))){_TOKEN_CHAR}*+"
)
_TOKEN_RUN = re.compile(f"{_TOKEN_CHAR}*+")
_SEPARATOR_RUN = re.compile(f"{_SEPARATOR}+")
_LETTER_DIGIT = re.compile(f"{_LETTER}[0-9]|[0-9]{_LETTER}")
_PATH_SEPARATOR = re.compile(r"[/\\]+")
# A query token: a CJK run (segmented later) or a word as unicode61 sees it (letters, digits, combining marks).
_MARK = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_TOKEN = re.compile(f"([{_CJK_CHARS}]+)|(?:[^\\W_{_CJK_CHARS}]|[{_MARK}])+")
_MARKS_ONLY = re.compile(f"[{_MARK}]+")
# Full-width ASCII (ＵＡＲＴ２, common in Chinese text) is folded to ASCII. Only letters and digits trigger the
# fold: full-width punctuation is in almost every Chinese sentence and unicode61 already treats it as a separator.
_FULLWIDTH_ALNUM = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
_FULLWIDTH_TO_ASCII = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# English: the usual ~170 function words (NLTK's list and contraction pieces: "didn't" is tokenised "didn", "t").
STOP_EN = _word_set(
    """
    a about above after again against ain all also am an and any are aren as at be because been before being
    below between both but by can could couldn d did didn do does doesn doing don down during each either else
    etc ever few for from further had hadn has hasn have haven having he her here hers herself him himself his
    how however i if in into is isn it its itself just ll m ma may me might mightn more most must mustn my
    myself needn neither no nor not now o of off on once only or other our ours ourselves out over own re s
    same shall shan she should shouldn so some such t than that the their theirs them themselves then there
    these they this those through to too under until up ve very was wasn we were weren what whatever when
    where whether which while who whom whose why will with won would wouldn y yet you your yours yourself
    yourselves
    """
)
# Chinese: particles, pronouns, question words and conjunctions, as rjieba cuts them.
STOP_ZH = _word_set(
    """
    的 地 得 了 着 过 是 在 吗 呢 吧 啊 呀 嘛 哦 么 啥 什么 怎么 怎样 怎么样 如何 为什么 为何 哪 哪里 哪儿 哪个 哪些
    谁 多少 是否 是不是 有没有 我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 自己 这 那 这个 那个 这些 那些 这样
    那样 这里 那里 和 与 及 以及 或 或者 也 都 就 还 又 被 把 给 对 对于 从 向 到 以 之 其 而 但 但是 因为 所以 如果
    一个 一些 有 没有 没 不 很 会 能 要 可以 个 等 请 问 之前 之后 时候
    """
)
STOP_WORDS = STOP_EN | STOP_ZH


@dataclass(frozen=True, slots=True)
class Term:
    """One OR clause of a MATCH expression."""

    expr: str  # FTS5 syntax, every string quoted
    token: str | None  # the single index token it looks up (for document-frequency pruning), else None


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _cut_for_search(run: str) -> list[str]:
    return [w for w in rjieba.cut_for_search(run) if not w.isspace()]


@lru_cache(maxsize=1024)
def _segment_query_run(run: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(cut_for_search words, precise-mode words) of one CJK run of a query."""
    return tuple(_cut_for_search(run)), tuple(w for w in rjieba.cut(run) if not w.isspace())


def _full_form(ident: str) -> str:
    """The ``idents`` token of an identifier: lower-cased, each separator run replaced by the joiner, and the
    joiner at the end, so porter never stems it (it only strips ASCII suffixes) and it never equals a body word.
    """
    return _SEPARATOR_RUN.sub(IDENT_JOINER, ident.lower()) + IDENT_JOINER


def _token_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each token (a run of letters, digits and separators) of ``text`` that holds an anchor, in
    order: every identifier has one (see _ANCHOR), and the anchor match runs on to the token's end."""
    reverse = ""
    for anchor in _ANCHOR.finditer(text):
        start, end = anchor.span()
        if start:
            # walk back to the token's start: a forward match on the reversed text, in C
            reverse = reverse or text[::-1]
            back = len(text) - start
            start -= _TOKEN_RUN.match(reverse, back).end() - back  # type: ignore[union-attr]
        yield start, end


def _identifiers_in(tokens: list[str]) -> list[str]:
    # one findall over all tokens: each starts after a non-token character, as "\n" is, so the result is the same
    return _IDENT.findall("\n".join(tokens)) if tokens else []


def _identifiers(text: str) -> list[str]:
    """The identifiers of ``text``, as typed; the same as ``_IDENT.findall(text)``, several times faster: only
    the tokens that hold an anchor are examined."""
    return _identifiers_in([text[start:end] for start, end in _token_spans(text)])


def _idents_column(idents: list[str]) -> str:
    """Every form under which these identifiers can be looked up, space-separated, de-duplicated.

    Besides the full form: a path's file name (``uart.c`` finds ``src/drivers/uart.c``) and any part mixing
    letters and digits (``0x3F`` finds ``ERR_UART_TIMEOUT_0x3F``). The query side only uses the full form of
    what was typed, so these extras never widen a query, they only let a shorter identifier find a longer one.
    Works on all identifiers at once (one string, C-speed regexes): per-identifier Python cost added up.
    """
    if not idents:
        return ""
    blob = "\n".join(idents).lower()
    forms = (_SEPARATOR_RUN.sub(IDENT_JOINER, blob).replace("\n", IDENT_JOINER + "\n") + IDENT_JOINER).split("\n")
    if _LETTER_DIGIT.search(blob):
        forms += [part + IDENT_JOINER for part in _PART.findall(blob) if not part.isalpha() and not part.isdigit()]
    if "/" in blob or "\\" in blob:
        names = (_PATH_SEPARATOR.split(ident)[-1] for ident in idents if "/" in ident or "\\" in ident)
        forms += [_full_form(name) for name in names if _IDENT.fullmatch(name)]
    return " ".join(dict.fromkeys(forms))


def _normalize(text: str) -> str:
    """Fold full-width ASCII to ASCII, the same way on both sides (only when there is some to fold)."""
    if not text.isascii() and _FULLWIDTH_ALNUM.search(text):
        return text.translate(_FULLWIDTH_TO_ASCII)
    return text


def _segment_runs(runs: list[str]) -> list[str]:
    """``" ".join(cut_for_search(run))`` for every run, in one rjieba call: the per-call overhead dominates
    for the many short runs of Chinese prose. Runs hold no whitespace and jieba never joins words across a
    line break, so splitting the result at the "\\n" tokens gives each run's words."""
    joined = " ".join(rjieba.cut_for_search("\n".join(runs)))
    return joined.split(" \n ")


def index_fields(text: str, identifiers: Sequence[str] = ()) -> tuple[str, str]:
    """(body, idents) column values for one chunk's text. ``identifiers`` adds the identifiers in these strings
    to the idents column only (a rule's dotted keys, which its YAML spells out only in parts). Deterministic: the
    same input always gives the same values (bump :data:`TEXT_VERSION` when that changes)."""
    body = text
    if not text.isascii():
        pieces = _CJK_SPLIT.split(text)  # [other, run, other, run, ..., other]
        if len(pieces) > 1 and _FULLWIDTH_ALNUM.search("".join(pieces[1::2])):
            text = text.translate(_FULLWIDTH_TO_ASCII)  # rare: fold, then split again
            body, pieces = text, _CJK_SPLIT.split(text)
        if len(pieces) > 1:
            pieces[1::2] = [f" {words} " for words in _segment_runs(pieces[1::2])]
            body = "".join(pieces)
    idents = _identifiers(text)
    if identifiers:
        idents += _identifiers(_normalize("\n".join(identifiers)))
    return body, _idents_column(idents)


def index_chunks(lines: list[str], spans: Sequence[tuple[int, int]]) -> list[tuple[str, str, str]]:
    """``(text, *index_fields(text))`` with ``text = "\\n".join(lines[lo:hi])`` for the chunks of one document
    (spans in order, not overlapping), computed over the whole document at once: one scan for CJK runs, one
    rjieba call and one identifier scan instead of one of each per chunk (~40% less time on daily notes), and
    each chunk's text and body sliced out of the document's rather than joined from lines. A body that
    segmentation left unchanged is the text itself (the same object)."""
    text = "\n".join(lines)
    # line i starts at starts[i] + i in text (the line breaks before it); a chunk ends before its last line break
    starts = list(accumulate(map(len, lines), initial=0))
    texts = [text[starts[lo] + lo : starts[hi] + hi - 1] for lo, hi in spans]
    bodies = texts
    if not text.isascii():
        pieces = _CJK_SPLIT.split(text)
        if len(pieces) > 1:
            runs = pieces[1::2]
            if _FULLWIDTH_ALNUM.search("".join(runs)):  # rare: whether to fold is decided chunk by chunk
                return [(chunk, *index_fields(chunk)) for chunk in texts]
            # neither a run nor its words hold a line break, so every line keeps its number; segmentation makes a
            # run longer (" words "), so a chunk whose body is as long as its text holds none
            pieces[1::2] = [f" {words} " for words in _segment_runs(runs)]
            body = "".join(pieces)
            ends = list(accumulate(map(len, body.split("\n")), initial=0))
            bodies = [
                chunk if ends[hi] + hi - ends[lo] - lo - 1 == len(chunk) else body[ends[lo] + lo : ends[hi] + hi - 1]
                for (lo, hi), chunk in zip(spans, texts, strict=True)
            ]
    found: dict[int, list[str]] = {}  # chunk number -> its tokens holding an anchor
    firsts = [lo for lo, _ in spans]
    line = position = 0
    for start, end in _token_spans(text):  # tokens never cross a line: each goes to the chunk holding its line
        line += text.count("\n", position, start)
        position = start
        n = bisect_right(firsts, line) - 1
        if n >= 0 and line < spans[n][1]:
            found.setdefault(n, []).append(text[start:end])
    idents = {n: _idents_column(_identifiers_in(tokens)) for n, tokens in found.items()}
    return [(chunk, body, idents.get(n, "")) for n, (chunk, body) in enumerate(zip(texts, bodies, strict=True))]


@lru_cache(maxsize=1)
def _tokenizer() -> tuple[Any, Callable[..., Any], threading.Lock]:
    name, *args = TOKENIZER.split()
    conn = apsw.Connection(":memory:")
    return conn, conn.fts5_tokenizer(name, args), threading.Lock()


@lru_cache(maxsize=4096)
def index_token(word: str) -> str | None:
    """The one token the index stores for ``word`` (case-folded, diacritics removed, stemmed), or None if it is
    not exactly one token. Asks SQLite's own tokenizer rather than imitating it: for vocabulary look-ups."""
    _, tokenize, lock = _tokenizer()
    with lock:  # a tokenizer instance keeps state between calls (porter's buffer)
        tokens = tokenize(word.encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)
    return str(tokens[0][0]) if len(tokens) == 1 else None


def _query_words(query: str) -> tuple[list[str], list[tuple[str, str]]]:
    """All words of ``query`` in order (lower-cased, CJK segmented), and the adjacent pairs of content words
    inside each CJK run (for a proximity clause: ``串口超时`` beats a chunk saying 串口 here and 超时 there)."""
    words: list[str] = []
    pairs: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(query):
        if match[1] is None:
            if not _MARKS_ONLY.fullmatch(match[0]):  # combining marks alone: nothing once diacritics are removed
                words.append(match[0].lower())
            continue
        search_words, precise = _segment_query_run(match[1])
        words.extend(search_words)
        content = [w for w in precise if w not in STOP_ZH]
        pairs.extend(pairwise(content))
    return words, pairs


@dataclass(frozen=True, slots=True)
class Query:
    """A user's query read once: the OR clauses to search for and the words a passage is ranked and marked by."""

    terms: list[Term]
    words: list[str]
    idents: list[str]  # its identifiers, lower-cased (ERR_UART_TIMEOUT_0x3F): hits saying one stay on top


def parse_query(query: str) -> Query:
    """:func:`match_terms` and :func:`query_words` of ``query`` from one pass over it (segmenting CJK is most of the
    cost of either)."""
    query = _normalize(query[:MAX_QUERY_CHARS])
    idents = _IDENT.findall(query)
    words, pairs = _query_words(query)
    return Query(_terms(query, idents, words, pairs), _marked(idents, words), [i.lower() for i in idents])


def match_terms(query: str) -> list[Term]:
    """The OR clauses for a user's query, most specific first, at most :data:`MAX_TERMS`.

    Order: identifier forms (``idents`` column) and their part phrases (``body``), then words, then CJK
    proximity pairs, so a cap cuts boosts before it cuts words.
    """
    return parse_query(query).terms


def query_words(query: str) -> list[str]:
    """The searched words and identifiers of ``query``, lower-cased, as they appear in raw text (CJK
    segmented): what a snippet should be centred on."""
    return parse_query(query).words


def _terms(query: str, idents: list[str], words: list[str], pairs: list[tuple[str, str]]) -> list[Term]:
    terms: list[Term] = []
    seen: set[str] = set()

    def add(expr: str, token: str | None = None) -> None:
        if expr not in seen:
            seen.add(expr)
            terms.append(Term(expr, token))

    for ident in idents:
        add(f"idents : {_quote(_full_form(ident))}")
    for compound in _COMPOUND.findall(query):
        add(f"body : {_quote(' '.join(_SEPARATOR_RUN.split(compound.lower())))}")
    content = [w for w in words if w not in STOP_WORDS]
    if not content and not terms:
        content = words  # "what is it" still searches for something
    for word in content:
        add(f"body : {_quote(word)}", index_token(word))
    for first, second in pairs:
        add(f"body : NEAR({_quote(first)} {_quote(second)}, {NEAR_DISTANCE})")
    return terms[:MAX_TERMS]


def _marked(idents: list[str], words: list[str]) -> list[str]:
    content = [w for w in words if w not in STOP_WORDS] or words
    return list(dict.fromkeys([i.lower() for i in idents] + content))


def join_terms(terms: list[Term]) -> str | None:
    """OR-join clauses into a MATCH string; None when there are none (nothing searchable: do not query)."""
    return " OR ".join(t.expr for t in terms) if terms else None


def rank_sql() -> str:
    """The ranking function in the form FTS5's ``rank`` option takes (``INSERT INTO chunks_fts(chunks_fts,
    rank) VALUES('rank', ...)``): column weights body 1.0, idents :data:`IDENT_WEIGHT`. Lower is better."""
    return f"bm25(1.0, {IDENT_WEIGHT})"
