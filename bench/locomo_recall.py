"""LoCoMo evidence recall of memoryd's query builder against an AND-of-words baseline.

Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024;
snap-research/LoCoMo, data/locomo10.json), licence CC BY-NC 4.0: used here for evaluation only, never packaged.
See ../shared/benchmarks/README.md (beside the project).

One in-memory FTS5 table per conversation, one row per turn (``speaker: text``), indexed with
``textindex.index_fields`` and the daemon's tokenizer and ranking. Every question is run through
(a) ``textindex.match_terms`` OR-joined (quoted terms, stop words removed, OR-joined, BM25) and (b) the same words
AND-joined. Recall@k is the share of a question's evidence turns found in the top k, averaged over the
questions that have evidence; hit@k is the share of questions with at least one evidence turn in the top k.
Reference (README): FTS5 BM25 OR baseline 54.8 / 63.3 / 71.3 R@5/10/25; AND finds evidence in the top 5 for 12%.

    .venv/bin/python bench/locomo_recall.py [--data PATH] [--tokenizer "porter unicode61 remove_diacritics 2"]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import apsw

from memoryd.text import textindex

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "locomo" / "locomo10.json"
KS = (5, 10, 25)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_ID = re.compile(r"^D:?(\d+):0*(\d+)$")


def turns_of(sample: dict[str, Any]) -> list[dict[str, Any]]:
    conversation = sample["conversation"]
    sessions = sorted((int(k.split("_")[1]), v) for k, v in conversation.items() if re.fullmatch(r"session_\d+", k))
    return [turn for _, session in sessions for turn in session]


def normalise_evidence(raw: list[str], known: set[str], where: str, dropped: list[str], fixed: list[str]) -> list[str]:
    """Split lists written as one string, repair "D:11:26" / "D30:05", drop ids of turns that do not exist."""
    out: list[str] = []
    for item in raw:
        pieces = [p for p in re.split(r"[;,\s]+", item) if p]
        if len(pieces) > 1:
            fixed.append(f"{where}: {item!r} split into {pieces}")
        for piece in pieces:
            m = _ID.match(piece)
            norm = f"D{int(m[1])}:{int(m[2])}" if m else piece
            if norm != piece:
                fixed.append(f"{where}: {piece!r} read as {norm!r}")
            if norm in known:
                out.append(norm)
            else:
                dropped.append(f"{where}: {piece!r} (no such turn)")
    return list(dict.fromkeys(out))


def and_expression(question: str) -> str | None:
    """The naive baseline: the question's words minus stop words, quoted and AND-ed."""
    words = [w.lower() for w in re.findall(r"[^\W_]+", question)]
    kept = [w for w in dict.fromkeys(words) if w not in textindex.STOP_WORDS]
    return " AND ".join(f'body : "{w}"' for w in kept) or None


def plain_or_expression(question: str) -> str | None:
    """The README's baseline shape: the same words OR-ed (no identifier column, no CJK handling)."""
    words = [w.lower() for w in re.findall(r"[^\W_]+", question)]
    kept = [w for w in dict.fromkeys(words) if w not in textindex.STOP_WORDS]
    return " OR ".join(f'body : "{w}"' for w in kept) or None


def build(turns: list[dict[str, Any]], tokenizer: str) -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(body, idents, tokenize='{tokenizer}')")
    conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{textindex.rank_sql()}')")
    rows = [(i, *textindex.index_fields(f"{t['speaker']}: {t['text']}")) for i, t in enumerate(turns)]
    with conn:
        conn.executemany("INSERT INTO chunks_fts(rowid, body, idents) VALUES(?, ?, ?)", rows)
    return conn


def top(conn: apsw.Connection, match: str | None, k: int) -> list[int]:
    if match is None:
        return []
    sql = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?"
    return [int(r[0]) for r in conn.execute(sql, (match, k))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--tokenizer", default=textindex.TOKENIZER)
    args = parser.parse_args()
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    methods = {
        "match_terms (OR/BM25)": lambda q: textindex.join_terms(textindex.match_terms(q)),
        "plain OR of words": plain_or_expression,
        "AND of words": and_expression,
    }
    # method -> category -> list of (recall@k..., hit@k...)
    scores: dict[str, dict[int, list[tuple[float, ...]]]] = {m: defaultdict(list) for m in methods}
    dropped: list[str] = []
    fixed: list[str] = []
    no_evidence: list[str] = []
    questions = 0
    build_s = query_s = 0.0
    for sample in samples:
        turns = turns_of(sample)
        ids = {t["dia_id"]: i for i, t in enumerate(turns)}
        started = time.perf_counter()
        conn = build(turns, args.tokenizer)
        build_s += time.perf_counter() - started
        for n, qa in enumerate(sample["qa"]):
            questions += 1
            where = f"{sample['sample_id']} q{n} (cat {qa['category']})"
            evidence = normalise_evidence(qa.get("evidence", []), set(ids), where, dropped, fixed)
            if not evidence:
                no_evidence.append(where)
                continue
            wanted = {ids[e] for e in evidence}
            for name, make in methods.items():
                started = time.perf_counter()
                ranked = top(conn, make(qa["question"]), max(KS))
                query_s += time.perf_counter() - started
                recall = tuple(len(wanted & set(ranked[:k])) / len(wanted) for k in KS)
                hit = tuple(float(bool(wanted & set(ranked[:k]))) for k in KS)
                scores[name][qa["category"]].append(recall + hit)
        conn.close()

    print(f"LoCoMo: {len(samples)} conversations, {questions} questions; tokenizer {args.tokenizer!r}")
    print(f"index build {build_s:.2f} s, {3 * questions} queries {query_s:.2f} s")
    print(f"evidence ids repaired ({len(fixed)}):")
    for line in fixed:
        print(f"  {line}")
    print(f"evidence ids dropped ({len(dropped)}):")
    for line in dropped:
        print(f"  {line}")
    print(f"questions without usable evidence, not scored ({len(no_evidence)}): {', '.join(no_evidence)}")
    header = "".join(f"{'R@' + str(k):>8}" for k in KS) + "".join(f"{'hit@' + str(k):>8}" for k in KS)
    for name in methods:
        print(f"\n{name}\n  {'category':<18}{'n':>5}{header}")
        for label, cats in _groups():
            values = [s for c in cats for s in scores[name][c]]
            if values:
                means = [100 * sum(v[i] for v in values) / len(values) for i in range(2 * len(KS))]
                print(f"  {label:<18}{len(values):>5}" + "".join(f"{m:8.1f}" for m in means))
    return 0


def _groups() -> list[tuple[str, list[int]]]:
    return [("all", list(CATEGORIES))] + [(f"{c} {name}", [c]) for c, name in CATEGORIES.items()]


if __name__ == "__main__":
    raise SystemExit(main())
