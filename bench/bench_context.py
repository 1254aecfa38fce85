"""context benchmark (issue 12 item 7): p50/p99 of `context` over RPC on a 1 MB workspace.

The workspace: ~1 MB of generated daily logs (bench/corpus.py), a MEMORY.md of ~12 kB (so the stable part is cut
at its 9,000-character budget) and 20 rules of 5 facts for one model. Measured, each over one persistent
connection: stable only (no query), with a session snapshot (reused), with a query (recall), and with a query that
asks about the past (recall + recent daily notes).

Target: p50 ≤ 20 ms for every shape.
Run: .venv/bin/python bench/bench_context.py [--mb 1] [--calls 300]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import Rpc, conditions, daemon, pct, summary
from corpus import generate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def memory_md() -> str:
    sections = []
    for n in range(60):
        bullets = "".join(
            f"- 约定 {n}.{k}: keep the uart retry budget at {n * 10 + k} ms, 串口超时后重试\n" for k in range(4)
        )
        sections.append(f"## Convention {n}\n{bullets}")
    return "# Long-term memory\n\n" + "\n".join(sections)


def rules(rpc: Rpc, ws: str) -> None:
    oid = rpc.call(
        "observe",
        {"workspace": ws, "kind": "test_result", "text": "bench", "source": "bench", "model_id": "KX-200"},
    )["observation_id"]
    request = rpc.call("compile.prepare", {"workspace": ws})
    proposed = [
        {
            "rule_id": f"bench-rule-{n:02d}",
            "model_id": "KX-200",
            "fw_range": ">=1.0.0 <2.0.0",
            "priority": n,
            "facts": {f"bench.group{n}.key{k}": n * 100 + k for k in range(5)},
            "confidence": 0.9,
            "provenance": {"observation_ids": [oid]},
            "summary": f"bench rule {n}",
        }
        for n in range(20)
    ]
    rpc.call(
        "compile.apply",
        {
            "workspace": ws,
            "response": {
                "request_id": request["request_id"],
                "rules": proposed,
                "candidates": [],
                "overrides": [],
                "provenance_summary": {"observation_ids_used": [oid]},
            },
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(f"context benchmark · {conditions()}")
    work = Path(tempfile.mkdtemp(prefix="mdbc", dir="/tmp"))
    try:
        targets = generate(work, args.mb)
        (work / "memory" / "MEMORY.md").write_text(memory_md(), encoding="utf-8")
        size = sum(p.stat().st_size for p in (work / "memory").glob("*.md")) / 1024 / 1024
        with daemon(log_level="warning") as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            rules(rpc, ws)
            device = {"model_id": "KX-200", "fw_version": "1.4.2"}
            first = rpc.call("context", {"workspace": ws, **device})
            print(
                f"  workspace: {size:.2f} MB of memory files; stable {len(first['stable']['text'])} characters, "
                f"truncated {first['stable']['truncated']}"
            )
            shapes = {
                "stable only (no query)": lambda n: {},
                "session snapshot (reused)": lambda n: {"session_id": "bench-session"},
                "query (recall)": lambda n: {"query_text": targets[n % len(targets)].query},
                "query asking about the past": lambda n: {
                    "query_text": f"what did we decide yesterday about {targets[n % len(targets)].query}?"
                },
            }
            for name, extra in shapes.items():
                for n in range(20):  # warm up
                    rpc.call("context", {"workspace": ws, **device, **extra(n)})
                times = []
                for n in range(args.calls):
                    t = time.perf_counter()
                    answer = rpc.call("context", {"workspace": ws, **device, **extra(n)})
                    times.append((time.perf_counter() - t) * 1000)
                p50 = pct(times, 0.5)
                verdict = "ok" if p50 <= 20 else "MISSED"
                print(
                    f"  {name:<30} ms: {summary(times)}  (target p50 ≤ 20 ms: {verdict}); "
                    f"dynamic {len(answer['dynamic']['text'])} chars, {len(answer['dynamic']['items'])} items, "
                    f"{len(answer['dynamic']['recent'])} recent"
                )
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
