"""LoCoMo through the daemon: the conversations stored as a user would keep them, every question asked through
``search``, recall scored in turns of context.

Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024;
snap-research/LoCoMo, data/locomo10.json), licence CC BY-NC 4.0: read from ``../shared/benchmarks/locomo/`` beside
the project, used for evaluation only, never packaged (see that folder's README).

Layout (one workspace per conversation): one daily file ``memory/YYYY-MM-DD.md`` per session date, one
``## YYYY-MM-DD HH:MM — event`` section per session, one ``- speaker: text`` bullet per turn. A real daemon indexes
it; each question goes through ``search`` (limit 50).

Scoring, as in the paper's Table 3 but in what the daemon serves: a hit covers the turns whose lines fall inside its
``start_line``/``lines``; the hits' turns, in rank order (line order inside a hit, each turn once), are the ranked
turns. R@k is the share of a question's evidence turns among the first k ranked turns, averaged over the questions
with evidence; any@k is the share of questions with at least one there; section@5 is the share of questions with an
evidence turn inside one of the first 5 hits, whatever their length. Reference: DRAGON 56.7 / 66.2 / 76.7 / 82.7 and
per-turn BM25 54.8 / 63.3 / 71.3 / 76.8 at k = 5 / 10 / 25 / 50.

Per session, as local memory tools publish LoCoMo and LongMemEval figures (MemPalace: per-session R@10 88.9% on
LoCoMo): a hit counts for its ``##`` section, which is one session here; the sessions are ranked by the first hit
in each (the order of their first appearance in the hits), and per-session R@k is the share of a question's
evidence sessions among the first k sessions, averaged over the questions (R@1 / 3 / 5 / 10; a conversation has
19–32 sessions); any@k is the share of questions with at least one evidence session there. Coarser than per turn:
it says whether the right session reaches the top, not whether the right line does.

    .venv/bin/python bench/locomo_daemon.py [--data PATH] [--limit 50] [--mode hybrid --provider use-m3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from common import ROOT, Rpc, conditions, daemon
from locomo_recall import CATEGORIES, normalise_evidence

DATA = ROOT.parent / "shared" / "benchmarks" / "locomo" / "locomo10.json"
KS = (5, 10, 25, 50)
SESSION_KS = (1, 3, 5, 10)
REFERENCE = {"DRAGON (paper)": (56.7, 66.2, 76.7, 82.7), "per-turn BM25 (README)": (54.8, 63.3, 71.3, 76.8)}


def session_time(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y")


def write_workspace(
    sample: dict[str, Any], root: Path
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], str], dict[str, str]]:
    """The conversation as daily files under ``root/memory``; returns (path, line) → turn id, (path, heading line)
    → session, and turn id → session."""
    conversation = sample["conversation"]
    sessions = sorted(
        (session_time(conversation[f"{key}_date_time"]), key)
        for key in conversation
        if key.startswith("session_") and not key.endswith("date_time") and f"{key}_date_time" in conversation
    )
    days: dict[str, list[str]] = defaultdict(list)
    where: dict[tuple[str, int], str] = {}
    section_of: dict[tuple[str, int], str] = {}
    session_of: dict[str, str] = {}
    for when, key in sessions:
        day = when.strftime("%Y-%m-%d")
        lines = days[day]
        if not lines:
            lines += [f"## {day}", ""]
        lines += [f"## {day} {when.strftime('%H:%M')} — event", ""]
        section_of[(f"memory/{day}.md", len(lines) - 1)] = key
        for turn in conversation[key]:
            lines.append(f"- {turn['speaker']}: {' '.join(turn['text'].split())}")
            where[(f"memory/{day}.md", len(lines))] = turn["dia_id"]
            session_of[turn["dia_id"]] = key
        lines.append("")
    (root / "memory").mkdir(parents=True)
    for day, lines in days.items():
        (root / "memory" / f"{day}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where, section_of, session_of


def ranked_sessions(hits: list[dict[str, Any]], section_of: dict[tuple[str, int], str]) -> list[str]:
    """The sessions the hits lie in, ranked by the first hit in each (each once)."""
    order: list[str] = []
    for hit in hits:
        session = section_of.get((hit["path"], hit["section_start_line"]))
        if session is not None and session not in order:
            order.append(session)
    return order


def ranked_turns(hits: list[dict[str, Any]], where: dict[tuple[str, int], str]) -> tuple[list[str], list[set[str]]]:
    """The turns the hits cover, in rank order (each once), and the set of turns of each hit."""
    order: list[str] = []
    seen: set[str] = set()
    per_hit: list[set[str]] = []
    for hit in hits:
        covered = [
            where[(hit["path"], line)]
            for line in range(hit["start_line"], hit["start_line"] + hit["lines"])
            if (hit["path"], line) in where
        ]
        per_hit.append(set(covered))
        for turn in covered:
            if turn not in seen:
                seen.add(turn)
                order.append(turn)
    return order, per_hit


def _embedded(rpc: Rpc, workspaces: list[str]) -> int:
    """Wait until every workspace's passages are embedded; returns how many there are."""
    while True:
        counts = []
        for ws in workspaces:
            vectors = rpc.call("status", {"workspace": ws})["workspaces"][0].get("vectors") or {}
            if vectors.get("problem") and vectors["problem"]["reason"] not in (
                "embeddings_loading",
                "vectors_loading",
                "vectors_behind",
            ):
                raise SystemExit(f"vectors unavailable: {vectors['problem']}")
            counts.append((vectors.get("embedded", 0), vectors.get("total", 0)))
        if all(total and done == total for done, total in counts):
            return sum(total for _, total in counts)
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=50, help="hits asked of each search")
    parser.add_argument("--mode", choices=["bm25", "vector", "hybrid"], default="bm25", help="search mode")
    parser.add_argument(
        "--provider", default="none", help="embedding_provider for the daemon (use-m3, e5-small; none for bm25)"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a daemon setting, e.g. search_fusion=weighted",
    )
    args = parser.parse_args()
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    print(f"# locomo_daemon · {conditions()}")
    print(f"mode {args.mode}, provider {args.provider}, limit {args.limit}, settings {args.setting}")
    scores: dict[int, list[tuple[float, ...]]] = defaultdict(list)
    by_session: dict[int, list[tuple[float, ...]]] = defaultdict(list)
    hit_lines: list[int] = []
    dropped: list[str] = []
    fixed: list[str] = []
    no_evidence: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="mdlc", dir="/tmp"))
    search_s: list[float] = []
    try:
        provider = {"MEMORYD_EMBEDDING_PROVIDER": args.provider}
        provider.update({f"MEMORYD_{k.upper()}": v for k, _, v in (x.partition("=") for x in args.setting)})
        with daemon(log_level="warning", extra_env=provider) as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            started = time.perf_counter()
            spaces = []
            for sample in samples:
                root = work / sample["sample_id"]
                where, section_of, session_of = write_workspace(sample, root)
                ws = rpc.call("workspace.add", {"path": str(root)})["workspace_id"]
                rpc.call("index", {"workspace": ws})
                spaces.append((sample, ws, where, section_of, session_of))
            print(f"{len(samples)} conversations written and indexed in {time.perf_counter() - started:.1f} s")
            if args.provider != "none":
                started = time.perf_counter()
                total = _embedded(rpc, [space[1] for space in spaces])
                elapsed = time.perf_counter() - started
                print(
                    f"{total} passages embedded in {elapsed:.1f} s ({total / elapsed:.0f} texts/s, model load included)"
                )
            for sample, ws, where, section_of, session_of in spaces:
                known = set(where.values())
                for n, qa in enumerate(sample["qa"]):
                    label = f"{sample['sample_id']} q{n} (cat {qa['category']})"
                    evidence = normalise_evidence(qa.get("evidence", []), known, label, dropped, fixed)
                    if not evidence:
                        no_evidence.append(label)
                        continue
                    wanted = set(evidence)
                    started = time.perf_counter()
                    answer = rpc.call(
                        "search", {"workspace": ws, "query": qa["question"], "limit": args.limit, "mode": args.mode}
                    )
                    if answer.get("degraded"):
                        raise SystemExit(f"search degraded: {answer['degraded']}")
                    hits = answer["hits"]
                    search_s.append(time.perf_counter() - started)
                    hit_lines += [h["lines"] for h in hits[:5]]
                    order, per_hit = ranked_turns(hits, where)
                    recall = tuple(len(wanted & set(order[:k])) / len(wanted) for k in KS)
                    anyk = tuple(float(bool(wanted & set(order[:k]))) for k in KS)
                    section5 = float(any(wanted & turns for turns in per_hit[:5]))
                    scores[qa["category"]].append((*recall, *anyk, section5))
                    sessions = {session_of[turn] for turn in wanted}
                    ranked = ranked_sessions(hits, section_of)
                    share = tuple(len(sessions & set(ranked[:k])) / len(sessions) for k in SESSION_KS)
                    by_session[qa["category"]].append(
                        (*share, *(float(bool(sessions & set(ranked[:k]))) for k in SESSION_KS))
                    )
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    questions = sum(len(v) for v in scores.values())
    search_s.sort()
    print(
        f"{questions} questions scored; search p50 {1000 * search_s[len(search_s) // 2]:.2f} ms; "
        f"lines per hit in the top 5: mean {sum(hit_lines) / max(len(hit_lines), 1):.1f}, max {max(hit_lines)}"
    )
    print(
        f"evidence ids repaired: {len(fixed)}; dropped (no such turn): {len(dropped)}; "
        f"questions without usable evidence, not scored: {len(no_evidence)} ({', '.join(no_evidence)})"
    )
    header = "".join(f"{'R@' + str(k):>7}" for k in KS) + "".join(f"{'any@' + str(k):>8}" for k in KS)
    print(f"\n{'category':<18}{'n':>5}{header}{'section@5':>11}")
    groups = [("all", list(CATEGORIES))] + [(f"{c} {name}", [c]) for c, name in CATEGORIES.items()]
    for label, cats in groups:
        values = [s for c in cats for s in scores[c]]
        if values:
            means = [100 * sum(v[i] for v in values) / len(values) for i in range(2 * len(KS) + 1)]
            cells = "".join(f"{m:7.1f}" for m in means[: len(KS)]) + "".join(
                f"{m:8.1f}" for m in means[len(KS) : 2 * len(KS)]
            )
            print(f"{label:<18}{len(values):>5}{cells}{means[-1]:11.1f}")
    for name, figures in REFERENCE.items():
        print(f"{name:<23}" + "".join(f"{f:7.1f}" for f in figures))
    print("\nper session (a hit counts for its ## section: one session; sessions ranked by their first hit)")
    header = "".join(f"{'R@' + str(k):>7}" for k in SESSION_KS) + "".join(f"{'any@' + str(k):>8}" for k in SESSION_KS)
    print(f"{'category':<18}{'n':>5}{header}")
    for label, cats in groups:
        values = [s for c in cats for s in by_session[c]]
        if values:
            means = [100 * sum(v[i] for v in values) / len(values) for i in range(2 * len(SESSION_KS))]
            cells = "".join(f"{m:7.1f}" for m in means[: len(SESSION_KS)])
            print(f"{label:<18}{len(values):>5}{cells}" + "".join(f"{m:8.1f}" for m in means[len(SESSION_KS) :]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
