"""Text → FTS5 input, on both sides: what the index stores and what a query asks.

- Chinese (and other CJK) runs are pre-segmented with ``rjieba.cut_for_search`` and joined with spaces, so the
  ``unicode61`` tokenizer sees words: ``串口超时`` is found inside a sentence, so is the 2-character ``串口``.
- Exact identifiers (``ERR_UART_TIMEOUT_0x3F``, ``facts.transport.baud``, ``src/drivers/uart.c``, ``KX-200``)
  are split into parts by unicode61; their joined form (lower-case, separators removed) goes into a second column,
  ``idents``, weighted high, so an exact identifier match ranks first.
- A query is user text, never FTS5 syntax: every term is quoted, stop words are dropped, terms are OR-ed and BM25
  ranks them (on LoCoMo an AND of all words finds evidence for 12% of questions, OR/BM25 for 58%).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import rjieba

TOKENIZER = "unicode61 remove_diacritics 2"
TEXT_VERSION = 3
IDENT_WEIGHT = 8.0
MAX_TERMS = 64

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
# Starts only at a word boundary and never backtracks into a word (possessive ``++``): the naive form of this
# pattern made index_fields 4x slower on ordinary prose.
_IDENT = re.compile(r"(?<![^\W_])[^\W_]++(?:[_./:\\-]+[^\W_]++)+")
_WORD = re.compile(r"[^\W_]+")

STOP_EN = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "did",
        "does",
        "tell",
        "said",
        "say",
        "know",
        "also",
        "just",
        "like",
        "get",
        "got",
        "go",
        "went",
        "ever",
        "anything",
        "something",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
    ]
)
STOP_ZH = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "吗",
        "呢",
        "吧",
        "啊",
        "呀",
        "么",
        "什么",
        "怎么",
        "怎样",
        "如何",
        "为什么",
        "哪",
        "哪里",
        "哪个",
        "哪些",
        "谁",
        "我",
        "你",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "她们",
        "它们",
        "这",
        "那",
        "这个",
        "那个",
        "这些",
        "那些",
        "和",
        "与",
        "及",
        "或",
        "或者",
        "也",
        "都",
        "就",
        "还",
        "又",
        "被",
        "把",
        "给",
        "对",
        "从",
        "向",
        "到",
        "以",
        "之",
        "其",
        "而",
        "但",
        "但是",
        "因为",
        "所以",
        "如果",
        "一个",
        "一些",
        "有",
        "没有",
        "没",
        "不",
        "很",
        "会",
        "能",
        "要",
        "可以",
        "上",
        "下",
        "中",
        "里",
        "个",
        "过",
        "着",
        "等",
        "请",
        "问",
        "吗？",
    ]
)


def _segment(run: str) -> list[str]:
    return [w for w in rjieba.cut_for_search(run) if w.strip()]


@lru_cache(maxsize=4096)
def _segment_cached(run: str) -> tuple[str, ...]:
    return tuple(_segment(run))


def _joined(ident: str) -> str:
    return "".join(_WORD.findall(ident)).lower()


def index_fields(text: str) -> tuple[str, str]:
    """(body, idents) column values for one chunk."""
    body = _CJK.sub(lambda m: " " + " ".join(_segment_cached(m.group(0))) + " ", text) if _CJK.search(text) else text
    idents = " ".join(dict.fromkeys(_joined(m.group(0)) for m in _IDENT.finditer(text)))
    return body, idents


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def query_terms(query: str) -> tuple[list[str], list[str], list[str]]:
    """(identifier forms, phrases, words) of a query, de-duplicated, stop words removed where something else
    remains. Words are single index tokens (their document frequency can be looked up); phrases are not."""
    idents: list[str] = []
    phrases: list[str] = []
    for m in _IDENT.finditer(query):
        parts = [p.lower() for p in _WORD.findall(m.group(0))]
        idents.append("".join(parts))
        phrases.append(" ".join(parts))
    words: list[str] = []
    for piece in _WORD.findall(query):
        if _CJK.search(piece):
            # a token can mix CJK and Latin ("KX200固件"): split the runs
            for part in re.split(f"({_CJK.pattern})", piece):
                if not part:
                    continue
                if _CJK.fullmatch(part):
                    segmented = _segment_cached(part)
                    words.extend(segmented)
                    content = [w for w in segmented if w not in STOP_ZH]
                    if 2 <= len(content) <= 8:
                        # the run's words close together beat the same words scattered over a chunk
                        phrases.append("NEAR(" + " ".join(_quote(w) for w in content) + ", 6)")
                else:
                    words.append(part.lower())
        else:
            words.append(piece.lower())
    kept = [w for w in words if w not in STOP_EN and w not in STOP_ZH]
    words = list(dict.fromkeys(kept or words))
    return list(dict.fromkeys(idents)), list(dict.fromkeys(phrases)), words


@dataclass(frozen=True, slots=True)
class Term:
    expr: str  # the quoted FTS5 expression
    token: str | None  # the single index token, when the term is one (for document-frequency look-ups)


def match_terms(query: str) -> list[Term]:
    idents, phrases, words = query_terms(query[:20_000])
    terms = [Term(f"idents : {_quote(i)}", None) for i in idents]
    terms += [Term(p if p.startswith("NEAR(") else _quote(p), None) for p in phrases]
    terms += [Term(_quote(w), w) for w in words]
    return terms[:MAX_TERMS]


def join_terms(terms: list[Term]) -> str | None:
    return " OR ".join(t.expr for t in terms) if terms else None


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH string for any user text, or None when nothing searchable is left."""
    return join_terms(match_terms(query))


def rank_sql() -> str:
    """The ranking function, installed as the FTS5 table's ``rank`` (lower is better)."""
    return f"bm25(1.0, {IDENT_WEIGHT})"
