"""Consolidation benchmark: compile.apply of a consolidation answer into a 200-section MEMORY.md, through a real
daemon (issue 22 item 13: ≤ 200 ms), and compile.prepare of its request.

Each round remembers a few entries, prepares the request (MEMORY.md's sections, the notes), and applies an answer
that adds bullets to 5 existing sections and 1 new one, carries daily_sections, a history line and an insights
update — the whole pipeline (normalize, route, sanitize, guard with conflicts, section merge, replay check, the
journal's one change over MEMORY.md, INSIGHTS.md, today's daily file, HISTORY.md, curated.jsonl, consolidated.json).

Run: .venv/bin/python bench/bench_consolidate.py [--sections 200] [--bullets 10] [--rounds 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import Rpc, conditions, daemon, summary


def memory_md(sections: int, bullets: int) -> str:
    parts = ["# Project memory\n\n<!-- consolidated by memoryd -->\n"]
    for s in range(sections):
        lines = [f"## Section {s} 设备{s}"]
        lines += [f"- fact {s}.{b}: 串口 {s} uses {b * 1200} baud, timeout {b}0 ms" for b in range(bullets)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sections", type=int, default=200)
    parser.add_argument("--bullets", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    extra = {"MEMORYD_EMBEDDING_PROVIDER": "none", "MEMORYD_SEARCH_DICTIONARY": "false"}
    with daemon("warning", extra) as (home, _env):
        root = Path(tempfile.mkdtemp(prefix="mdbw", dir="/tmp"))
        (root / "memory").mkdir()
        text = memory_md(args.sections, args.bullets)
        (root / "memory/MEMORY.md").write_text(text)
        rpc = Rpc(str(home / "run" / "memoryd.sock"))
        ws = rpc.call("workspace.add", {"path": str(root)})["workspace_id"]
        prepares: list[float] = []
        applies: list[float] = []
        for r in range(args.rounds):
            for n in range(3):
                rpc.call("remember", {"workspace": ws, "text": f"round {r} note {n}: 串口超时 on bench-{n}"})
            t = time.perf_counter()
            request = rpc.call("compile.prepare", {"workspace": ws})
            prepares.append((time.perf_counter() - t) * 1000)
            touched = [(r * 7 + k * 37) % args.sections for k in range(5)]
            update = "".join(
                f"## Section {s} 设备{s}\n- round {r}: section {s} needs RTS/CTS 流控\n- fact {s}.0: 串口 {s} uses 0 baud, timeout 00 ms\n"
                for s in touched
            )
            update += f"## Round {r}\n- new section of round {r}\n"
            response = {
                "request_id": request["request_id"],
                "provenance_summary": {"observation_ids_used": []},
                "memory_update": update,
                "daily_sections": {
                    "Topics": [f"round {r}"],
                    "Decisions": ["RTS/CTS"],
                    "Tool Activity": [],
                    "Open Questions": [],
                },
                "history_entry": f"round {r} consolidated",
                "insights_update": f"## Debugging\n- lesson of round {r}\n",
            }
            t = time.perf_counter()
            done = rpc.call("compile.apply", {"workspace": ws, "response": response})
            applies.append((time.perf_counter() - t) * 1000)
            assert done["applied"], done
        final = (root / "memory/MEMORY.md").read_text()
        rpc.close()
    print(conditions())
    print(
        f"MEMORY.md: {args.sections} sections × {args.bullets} bullets, {len(text.encode()) // 1024} KiB before, "
        f"{len(final.encode()) // 1024} KiB after {args.rounds} rounds"
    )
    print(f"compile.prepare (ms): {summary(prepares)}")
    print(f"compile.apply   (ms): {summary(applies)}   target ≤ 200 ms")
    if sorted(applies)[len(applies) // 2] > 200:
        sys.exit(1)


if __name__ == "__main__":
    main()
