"""Recall on labelled sets through a real daemon: R@1 and R@5 per question class and search mode, where hybrid
loses what one of its sides found, and what the prompt hook's recall (``context``) injects.

A set is a directory under ``bench/sets/<name>/``: ``memory/`` as memoryd keeps it (daily files
``memory/YYYY-MM-DD.md`` with ``## YYYY-MM-DD HH:MM — type`` entries, ``memory/MEMORY.md``) and ``questions.yaml``
(each question's class, its text, the answer's file and a substring of exactly one line of it, optionally ``also``:
the same question in the other language; ``now``: the day relative dates are read from; ``unrelated``: prompts no
note answers). ``tidewell`` is a web/SaaS team's two months of bilingual notes with hand-written near-miss
entries; ``device`` is bench_semantic.py's device-lab set in the same form.

Each set is copied into a temporary workspace of a daemon started with the default settings (``make run``:
embeddings ``auto`` = use-m3, ``search_dictionary`` on; ``--setting`` changes one), indexed, and every passage
embedded and the CC-CEDICT dictionary read before the first question. A hit counts when its path is the answer's
file and its lines ``[start_line, start_line + lines)`` hold the answer's line. "hybrid worse/better" compares
hybrid's rank of the answer with the better of bm25 and vector (not found in the top ``--limit``: rank infinity).

Recall injection: ``context`` with ``query_text`` for each unrelated prompt (it should inject nothing) and each
question (precision: an injected passage is right when it lies in the answer's ``##`` entry; MEMORY.md is in the
stable part, so recall skips it and a question answered there can only inject wrong passages).

    .venv/bin/python bench/recall_sets.py [--set tidewell,device] [--mode bm25,vector,hybrid] [--also]
        [--json OUT] [--setting NAME=VALUE] [--locomo] [--check]

Not yet: ``--since/--until`` (a date window for temporal questions) once ``search`` takes them.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import orjson
import yaml
from common import ROOT, Rpc, conditions, daemon

SETS = ROOT / "bench" / "sets"
MODES = ("bm25", "vector", "hybrid")
CLASSES = (
    "identifier",
    "words_en",
    "words_zh",
    "paraphrase_en",
    "paraphrase_zh",
    "cross_en_zh",
    "cross_zh_en",
    "temporal",
)
REWORDED = {"paraphrase_en", "paraphrase_zh", "cross_en_zh", "cross_zh_en"}  # written without the note's words
ENTRY = re.compile(r"^## \d{4}-\d{2}-\d{2} \d{2}:\d{2} — \S+")


@dataclass(frozen=True)
class Question:
    n: int
    cls: str
    text: str
    path: str  # relative to the workspace
    line: int  # 1-based: the answer's line
    entry: tuple[int, int]  # the answer's ``##`` section, first and last line
    also: str | None = None

    def label(self) -> str:
        return f"{self.cls} #{self.n}: {self.text}"


@dataclass
class LabelledSet:
    name: str
    root: Path  # the set's directory; memory/ inside
    now: str | None
    questions: list[Question]
    unrelated: list[str]
    entries: int = 0
    bullets: int = 0  # MEMORY.md's
    chinese_entries: int = 0
    problems: list[str] = field(default_factory=list)


def _section(lines: list[str], index: int) -> tuple[int, int]:
    """The ``##`` section holding line ``index`` (0-based), as 1-based first and last lines."""
    start = next((i for i in range(index, -1, -1) if lines[i].startswith("## ")), 0)
    end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    while end - 1 > index and not lines[end - 1].strip():
        end -= 1
    return start + 1, end


def load(name: str) -> LabelledSet:
    root = SETS / name
    spec = yaml.safe_load((root / "questions.yaml").read_text(encoding="utf-8"))
    texts: dict[str, list[str]] = {}
    questions: list[Question] = []
    problems: list[str] = []
    for n, item in enumerate(spec["questions"], 1):
        if item["class"] not in CLASSES:
            raise SystemExit(f"{name} question {n}: unknown class {item['class']!r}")
        lines = texts.setdefault(item["file"], (root / item["file"]).read_text(encoding="utf-8").splitlines())
        found = [i for i, line in enumerate(lines) if item["line"] in line]
        if len(found) != 1:
            raise SystemExit(f"{name} question {n}: {item['line']!r} is on {len(found)} lines of {item['file']}")
        question = Question(
            n, item["class"], item["q"], item["file"], found[0] + 1, _section(lines, found[0]), item.get("also")
        )
        questions.append(question)
        if question.cls in REWORDED and (shared := _shared_words(question.text, lines[found[0]])):
            problems.append(f"{question.label()} shares {sorted(shared)} with its answer")
    labelled = LabelledSet(name, root, spec.get("now"), questions, list(spec.get("unrelated") or []), problems=problems)
    for path in sorted((root / "memory").rglob("*.md")):
        body = path.read_text(encoding="utf-8")
        if path.name == "MEMORY.md":
            labelled.bullets += sum(line.startswith("- ") for line in body.splitlines())
            continue
        for block in re.split(r"\n(?=## )", body):
            if ENTRY.match(block):
                labelled.entries += 1
                labelled.chinese_entries += bool(_HAN.search(block))
    return labelled


_HAN = re.compile(r"[\u4e00-\u9fff]")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "the a an and or of to in on at for by with is are be was were we our you your do does did what when why how who "
        "which where can may must its it that this than then from into about after before over under each every any all "
        "more most very get gets got much many long so not no one two new old out up down use used using",
    )
)


def _shared_words(question: str, answer: str) -> set[str]:
    """Content words (English, crudely stemmed) and Chinese character pairs the question shares with the answer."""

    def words(text: str) -> set[str]:
        english = {
            re.sub(r"(ies|es|s)$", "", w) if len(w) > 4 else w
            for w in re.findall(r"[a-z][a-z0-9]+", text.lower())
            if len(w) >= 3 and w not in _STOP
        }
        pairs = {run[i : i + 2] for run in re.findall(r"[\u4e00-\u9fff]+", text) for i in range(len(run) - 1)}
        return english | pairs

    return words(question) & words(answer)


# --- the daemon ----------------------------------------------------------------------------------------------------


def _ready(rpc: Rpc, ws: str, timeout: float = 3600) -> dict[str, Any]:
    """Index, then wait until every passage is embedded and the dictionary has been read; returns the status."""
    report = rpc.call("index", {"workspace": ws})["workspaces"][0]
    started = time.perf_counter()
    while True:
        status = rpc.call("status", {"workspace": ws})["workspaces"][0]
        vectors = status.get("vectors") or {}
        problem = vectors.get("problem")
        if problem and problem["reason"] not in ("embeddings_loading", "vectors_loading", "vectors_behind"):
            raise SystemExit(f"vectors unavailable: {problem}")
        if vectors.get("total", 0) > 0 and vectors["embedded"] == vectors["total"]:
            break
        if time.perf_counter() - started > timeout:
            raise SystemExit("embedding did not finish in time")
        time.sleep(0.2)
    embedded_s = time.perf_counter() - started
    # The dictionary may be read at the first search (or at start): ask once, then wait until it is read.
    rpc.call("search", {"workspace": ws, "query": "warm up 预热", "limit": 1, "mode": "bm25"})
    while (state := rpc.call("status", {"workspace": ws})["workspaces"][0].get("dictionary")) == "loading":
        time.sleep(0.05)
    print(
        f"  indexed {report.get('chunks')} chunks; {vectors['total']} passages embedded in {embedded_s:.1f} s "
        f"(provider {vectors.get('provider')}, model {vectors.get('model')}); dictionary {state}"
    )
    return {"chunks": report.get("chunks"), "vectors": vectors, "dictionary": state}


def _rank(hits: list[dict[str, Any]], question: Question) -> int:
    """1-based rank of the first hit holding the answer's line; 0 when none does."""
    for rank, hit in enumerate(hits, 1):
        if hit["path"] == question.path and hit["start_line"] <= question.line < hit["start_line"] + hit["lines"]:
            return rank
    return 0


NOW: dict[str, str] = {}  # the set's "now": relative times in questions are read from it (search's `now`)


def _search(rpc: Rpc, ws: str, query: str, mode: str, limit: int, also: str | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"workspace": ws, "query": query, "limit": limit, "mode": mode, **NOW}
    if also is not None:
        params["also"] = [also]
    answer = rpc.call("search", params)
    if answer.get("degraded") or answer.get("mode", mode) != mode:
        raise SystemExit(f"search {mode} {query!r} degraded: {answer.get('degraded')} (ran {answer.get('mode')})")
    return list(answer["hits"])


def _also_supported(rpc: Rpc, ws: str) -> bool:
    try:
        rpc.call("search", {"workspace": ws, "query": "probe", "also": ["探测"], "limit": 1, "mode": "bm25"})
    except RuntimeError as error:
        name = re.search(r"'name': '(\w+)'", str(error))
        print(f"  --also: search refuses the param ({name.group(1) if name else error}): n/a")
        return False
    return True


def _overlaps(item: dict[str, Any], question: Question) -> bool:
    first, last = question.entry
    return bool(
        item["path"] == question.path and item["start_line"] <= last and item["start_line"] + item["lines"] - 1 >= first
    )


def injection(rpc: Rpc, ws: str, labelled: LabelledSet) -> dict[str, Any]:
    """What ``context`` recalls for unrelated prompts and for the questions."""
    quiet = 0
    unrelated_items = 0
    noisy: list[str] = []
    for prompt in labelled.unrelated:
        items = rpc.call("context", {"workspace": ws, "query_text": prompt})["dynamic"]["items"]
        unrelated_items += len(items)
        if items:
            noisy.append(f"{prompt!r}: {len(items)} item(s)")
        else:
            quiet += 1
    right = total = answered = answerable = 0
    for question in labelled.questions:
        items = rpc.call("context", {"workspace": ws, "query_text": question.text})["dynamic"]["items"]
        good = sum(_overlaps(item, question) for item in items)
        right += good
        total += len(items)
        if question.path != "memory/MEMORY.md":
            answerable += 1
            answered += good > 0
    return {
        "unrelated": len(labelled.unrelated),
        "unrelated_quiet": quiet,
        "unrelated_items": unrelated_items,
        "unrelated_noisy": noisy,
        "question_items": total,
        "question_items_right": right,
        "precision": right / total if total else None,
        "answer_injected": answered,
        "answer_injected_of": answerable,
    }


def run_set(
    labelled: LabelledSet, modes: list[str], limit: int, also: bool, settings: dict[str, str]
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="mdrs", dir="/tmp"))
    NOW.clear()
    if labelled.now:
        NOW["now"] = str(labelled.now)
    try:
        shutil.copytree(labelled.root / "memory", work / "memory")
        with daemon(log_level="warning", extra_env=settings) as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            state = _ready(rpc, ws)
            ranks: dict[str, dict[int, int]] = {}
            times: dict[str, list[float]] = {}
            for mode in modes:
                ranks[mode], times[mode] = {}, []
                for question in labelled.questions:
                    started = time.perf_counter()
                    ranks[mode][question.n] = _rank(_search(rpc, ws, question.text, mode, limit), question)
                    times[mode].append(time.perf_counter() - started)
            also_state = "off"
            if also:
                also_state = "n/a"
                if _also_supported(rpc, ws):
                    also_state = "on"
                    for mode in modes:
                        ranks[f"{mode}+also"] = {
                            q.n: _rank(_search(rpc, ws, q.text, mode, limit, q.also), q) for q in labelled.questions
                        }
            injected = injection(rpc, ws, labelled)
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "state": state,
        "ranks": ranks,
        "search_ms_p50": {m: 1000 * sorted(t)[len(t) // 2] for m, t in times.items()},
        "also": also_state,
        "injection": injected,
    }


# --- the report ----------------------------------------------------------------------------------------------------


def _recall(ranks: dict[int, int], questions: list[Question], k: int) -> float:
    return sum(0 < ranks[q.n] <= k for q in questions) / len(questions)


def _inf(rank: int) -> float:
    return rank if rank else math.inf


def report(labelled: LabelledSet, result: dict[str, Any]) -> dict[str, Any]:
    ranks: dict[str, dict[int, int]] = result["ranks"]
    columns = list(ranks)
    questions = labelled.questions
    table: dict[str, dict[str, dict[str, float]]] = {}
    print(f"\n{'class':<15}{'n':>4}" + "".join(f"{c + ' R@1':>17}{'R@5':>6}" for c in columns))
    groups = [(c, [q for q in questions if q.cls == c]) for c in CLASSES] + [("all", questions)]
    for cls, asked in groups:
        if not asked:
            continue
        table[cls] = {
            c: {"n": len(asked), "r1": _recall(ranks[c], asked, 1), "r5": _recall(ranks[c], asked, 5)} for c in columns
        }
        print(
            f"{cls:<15}{len(asked):>4}"
            + "".join(f"{table[cls][c]['r1']:17.2f}{table[cls][c]['r5']:6.2f}" for c in columns)
        )
    out: dict[str, Any] = {"table": table}
    if all(m in ranks for m in MODES):
        worse = better = 0
        lost: list[str] = []
        for q in questions:
            side = min(_inf(ranks["bm25"][q.n]), _inf(ranks["vector"][q.n]))
            hybrid = _inf(ranks["hybrid"][q.n])
            worse += hybrid > side
            better += hybrid < side
            if side <= 5 < hybrid:
                lost.append(
                    f"{q.label()} — bm25 {ranks['bm25'][q.n] or '-'}, vector {ranks['vector'][q.n] or '-'}, "
                    f"hybrid {ranks['hybrid'][q.n] or '-'}"
                )
        print(
            f"\nhybrid ranks the answer worse than the better of its sides on {worse} of {len(questions)}, better on {better}"
        )
        print(f"hybrid loses the answer from the top 5 while a side has it there: {len(lost)}")
        for line in lost:
            print(f"  {line}")
        out |= {"hybrid_worse": worse, "hybrid_better": better, "hybrid_lost_top5": lost}
    print("search p50 ms: " + ", ".join(f"{m} {v:.2f}" for m, v in result["search_ms_p50"].items()))
    if result["also"] != "off":
        print(f"--also: {result['also']}")
    inj = result["injection"]
    if inj["unrelated"]:
        print(
            f"\nunrelated prompts injecting nothing: {inj['unrelated_quiet']} of {inj['unrelated']} "
            f"({inj['unrelated_items']} items injected in all)"
        )
    precision = "n/a" if inj["precision"] is None else f"{inj['precision']:.2f}"
    print(
        f"questions: {inj['question_items']} items injected, precision {precision}; the answer's entry among them "
        f"for {inj['answer_injected']} of {inj['answer_injected_of']} (questions answered in daily files)"
    )
    return out | {
        "search_ms_p50": result["search_ms_p50"],
        "also": result["also"],
        "injection": inj,
        "ranks": {c: {str(n): r for n, r in v.items()} for c, v in ranks.items()},
        "state": result["state"],
    }


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memoryd"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" (memoryd/ modified)" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="tidewell,device", help="sets under bench/sets/, comma-separated")
    parser.add_argument("--mode", default=",".join(MODES), help="search modes, comma-separated")
    parser.add_argument("--limit", type=int, default=10, help="hits asked of each search (ranks beyond: not found)")
    parser.add_argument("--also", action="store_true", help="also ask with each question's `also` phrasing")
    parser.add_argument("--json", type=Path, help="save the tables and every rank here")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", help="a daemon setting")
    parser.add_argument("--locomo", action="store_true", help="then run locomo_daemon.py in each mode (slow)")
    parser.add_argument("--check", action="store_true", help="only load and check the sets")
    args = parser.parse_args()
    modes = [m for m in args.mode.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown mode(s) {sorted(unknown)}")
    settings = {f"MEMORYD_{k.upper()}": v for k, _, v in (x.partition("=") for x in args.setting)}
    commit = _commit()
    print(f"# recall_sets · {conditions()} · {date.today()} · commit {commit} · settings {args.setting or 'default'}")
    saved: dict[str, Any] = {"conditions": conditions(), "date": str(date.today()), "commit": commit, "sets": {}}
    saved["settings"] = args.setting
    for name in [s for s in args.set.split(",") if s]:
        labelled = load(name)
        share = labelled.chinese_entries / max(labelled.entries, 1)
        print(
            f"\n## {name}: {labelled.entries} daily entries ({share:.0%} with Chinese), {labelled.bullets} MEMORY.md "
            f"bullets, {len(labelled.questions)} questions, {len(labelled.unrelated)} unrelated prompts, "
            f"now {labelled.now}"
        )
        for problem in labelled.problems:
            print(f"  check: {problem}")
        if args.check:
            continue
        result = run_set(labelled, modes, args.limit, args.also, settings)
        saved["sets"][name] = report(labelled, result) | {
            "entries": labelled.entries,
            "chinese_entries": labelled.chinese_entries,
            "memory_bullets": labelled.bullets,
            "now": labelled.now,
            "questions": [
                {"n": q.n, "class": q.cls, "q": q.text, "path": q.path, "line": q.line} for q in labelled.questions
            ],
        }
    if args.json:
        args.json.write_bytes(orjson.dumps(saved, option=orjson.OPT_INDENT_2))
        print(f"\nsaved {args.json}")
    if args.locomo:
        for mode in modes:
            print(f"\n## LoCoMo, {mode} (bench/locomo_daemon.py)", flush=True)
            command = [sys.executable, str(ROOT / "bench" / "locomo_daemon.py"), "--mode", mode, "--provider", "auto"]
            subprocess.run(command + [f"--setting={s}" for s in args.setting], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
