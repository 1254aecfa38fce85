"""Recall trace benchmark (issue 22 items 8, 9): does writing recall.jsonl / replay.jsonl slow the prompt path, and
what does the replay check cost?

1. `context` with a query (what the prompt hook sends) on the 1 MB workspace of bench_context.py, p50/p90 over one
   persistent connection, the trace on (default: recall.jsonl + replay.jsonl) and off (observability_trace=false,
   observability_replay=false), two daemons started alternately, rounds interleaved (A B A B …) so load drift hits
   both alike. The rows are written by a background task, never on the call's path; the target: p50 within 1 ms
   (or 10%) of the trace off.
2. The replay check: 200 kept prompts (the default replay_keep) against a 200-section MEMORY.md, one consolidation
   that drops one bullet. Target: ≤ 200 ms (the apply bench's budget).

Run: .venv/bin/python bench/bench_recall_trace.py [--calls 200] [--rounds 4]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_context import memory_md
from common import Rpc, conditions, daemon, pct, summary
from corpus import generate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memoryd.curate import observe
from memoryd.curate.replay import replay_check
from memoryd.curate.trace import Answer, Job, Recall, TraceWriter
from memoryd.settings import ObservabilitySettings

OFF = {"MEMORYD_OBSERVABILITY_TRACE": "false", "MEMORYD_OBSERVABILITY_REPLAY": "false"}


def prompt_path(calls: int, rounds: int, mb: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="mdbt", dir="/tmp"))
    try:
        targets = generate(work / "on", mb)
        (work / "on" / "memory" / "MEMORY.md").write_text(memory_md(), encoding="utf-8")
        shutil.copytree(work / "on", work / "off")  # a workspace each: each daemon holds its own write lock
        times: dict[str, list[float]] = {"trace on": [], "trace off": []}
        injected = 0
        with daemon(log_level="warning") as (on_home, _), daemon(log_level="warning", extra_env=OFF) as (off_home, _):
            rpcs = {}
            for name, home in (("trace on", on_home), ("trace off", off_home)):
                rpc = Rpc(str(home / "run" / "memoryd.sock"))
                ws = rpc.call("workspace.add", {"path": str(work / name.split()[-1])})["workspace_id"]
                rpc.call("index", {"workspace": ws})
                rpcs[name] = (rpc, ws)
            for rpc, ws in rpcs.values():  # warm up
                for n in range(20):
                    rpc.call("context", {"workspace": ws, "query_text": targets[n % len(targets)].query})
            for r in range(rounds):
                for name in ["trace on", "trace off"] if r % 2 == 0 else ["trace off", "trace on"]:
                    rpc, ws = rpcs[name]
                    for n in range(calls):
                        params = {"workspace": ws, "query_text": targets[n % len(targets)].query, "session_id": "b"}
                        t = time.perf_counter()
                        answer = rpc.call("context", params)
                        times[name].append((time.perf_counter() - t) * 1000)
                        injected += name == "trace on" and bool(answer["dynamic"]["items"])
            rpc, ws = rpcs["trace on"]
            rpc.call("audit", {"workspace": ws})
            for rpc, _ in rpcs.values():
                rpc.close()
        recall_rows = len((work / "on" / observe.RECALL).read_bytes().splitlines())
        replay_rows = len((work / "on" / observe.REPLAY).read_bytes().splitlines())
        assert not (work / "off" / observe.OBSERVABILITY_DIR).exists()
        print(f"  context with a query, {calls} calls × {rounds} rounds each, interleaved:")
        for name, values in times.items():
            print(f"    {name:<10} ms: {summary(values)}")
        on, off = pct(times["trace on"], 0.5), pct(times["trace off"], 0.5)
        ok = on <= off + 1 or on <= off * 1.1
        print(f"    p50 difference: {on - off:+.3f} ms (target within 1 ms or 10%: {'ok' if ok else 'MISSED'})")
        print(
            f"    rows written with the trace on: recall.jsonl {recall_rows}, replay.jsonl {replay_rows} "
            f"(replay_keep 200: cut back at 400), {injected} recalls injected"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def replay_cost(kept: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="mdbr", dir="/tmp"))
    try:
        sections = [
            f"## Topic {n} 主题{n}\n"
            + "".join(f"- fact {n}.{k}: the setting key_{n}_{k} is {n * k} (串口 {k})\n" for k in range(5))
            for n in range(200)
        ]
        memory = "# Memory\n\n" + "\n".join(sections)
        (work / "memory").mkdir()
        (work / "memory" / "MEMORY.md").write_text(memory, encoding="utf-8")
        lines = memory.split("\n")
        writer = TraceWriter(ObservabilitySettings(replay_keep=kept))
        jobs = []
        for q in range(kept):
            n, k = q % 200, q % 5
            line = next(i for i, text in enumerate(lines, 1) if text.startswith(f"- fact {n}.{k}:"))
            recall = Recall(
                observe.ts(),
                "b",
                f"what is key_{n}_{k}?",
                "injected",
                1,
                1,
                False,
                0,
                answers=(Answer("memory/MEMORY.md", line, 1, None, lines[line - 1]),),
            )
            jobs.append(Job("ws_b", work, recall))
        writer.write(jobs)
        would_be = memory.replace("- fact 7.2: the setting key_7_2 is 14 (串口 2)\n", "")
        times = []
        for _ in range(5):
            t = time.perf_counter()
            verdict = replay_check(work, {"memory/MEMORY.md": would_be}, keep=kept)
            times.append((time.perf_counter() - t) * 1000)
        print(
            f"  replay check, {kept} kept prompts, 200-section MEMORY.md ({len(memory) // 1024} kB), one bullet "
            f"dropped: ms {summary(times)}; held {verdict.held}, lost {len(verdict.lost)}, checked "
            f"{verdict.checked}, stale {verdict.stale} (target ≤ 200 ms: {'ok' if pct(times, 0.5) <= 200 else 'MISSED'})"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--mb", type=float, default=1.0)
    args = parser.parse_args()
    print(f"recall trace benchmark · {conditions()}")
    prompt_path(args.calls, args.rounds, args.mb)
    replay_cost(200)


if __name__ == "__main__":
    main()
