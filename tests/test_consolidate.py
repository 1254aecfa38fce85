"""Consolidation through the compile exchange, through the real daemon: daily notes → MEMORY.md, INSIGHTS.md,
HISTORY.md and today's daily file in one change; routing modes; the loss guard; restore; interruption safety."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from tests.conftest import Daemon

TODAY = date.today().isoformat()


def remember(d: Daemon, ws: str, text: str, kind: str = "note") -> str:
    rid: str = d.call("remember", {"workspace": ws, "text": text, "type": kind})["id"]
    return rid


def prepare(d: Daemon, ws: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.prepare", {"workspace": ws, **extra})
    return result


def answer(request_id: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "provenance_summary": {"observation_ids_used": []}, **fields}


def apply(d: Daemon, ws: str, resp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.apply", {"workspace": ws, "response": resp, **extra})
    return result


def rows(root: Path, name: str) -> list[dict[str, Any]]:
    path = root / "data/memory/observability" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def history(root: Path) -> list[dict[str, Any]]:
    path = root / "data/memory/history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


DAILY = {
    "Topics": ["UART flow control on KX-200", "串口超时的原因"],
    "Decisions": ["use RTS/CTS above 115200 baud"],
    "Tool Activity": ["ran pytest tests/test_uart.py 3 times"],
    "Open Questions": ["does fw 1.3 still need it?"],
}


def test_a_consolidation_writes_every_target_in_one_change(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    memory = "# Memory\n\nKept as is.\n\n## Devices\n- KX-200 runs at 115200 baud\n\n## People\n- 张三 owns the bench\n"
    (root / "memory/MEMORY.md").write_text(memory)
    ids = [
        remember(daemon, ws, "decided: RTS/CTS for KX-200 above 115200", "decision"),
        remember(daemon, ws, "串口超时 again"),
    ]
    request = prepare(daemon, ws)
    assert request["request_id"] and request["entry_count"] == 2 and request["observation_count"] == 0
    material = request["request"]["consolidation"]
    assert [s["title"] for s in material["memory"]] == ["Devices", "People"]
    assert [n["item_id"] for n in material["daily_notes"]] == ids
    assert "memory_update" in request["request"]["instructions"]
    note = material["daily_notes"][0]["entry_id"]
    resp = answer(
        request["request_id"],
        memory_update=f"## Devices\n- KX-200 needs RTS/CTS above 115200 baud [evidence: {note}; confidence: 0.9]\n",
        daily_sections=DAILY,
        history_entry="Consolidated the UART notes\nof today",
        insights_update="## Debugging\n- 串口超时 came from missing flow control\n",
    )
    done = apply(daemon, ws, resp)
    assert done["applied"] and done["run_id"]
    text = (root / "memory/MEMORY.md").read_text()
    assert text.startswith(
        "# Memory\n\nKept as is.\n\n## Devices\n- KX-200 runs at 115200 baud\n- KX-200 needs RTS/CTS"
    )
    assert "## People\n- 张三 owns the bench" in text and "[evidence" not in text
    insights = (root / "memory/INSIGHTS.md").read_text()
    assert f"- 串口超时 came from missing flow control <!-- seen: {TODAY} -->" in insights
    assert (root / "memory/HISTORY.md").read_text().endswith("] Consolidated the UART notes of today\n")
    daily = (root / f"memory/{TODAY}.md").read_text()
    assert "— decision\n- Decisions: use RTS/CTS above 115200 baud" in daily and "- Topics: 串口超时的原因" in daily
    # one change, one history line of kind consolidate, listing every file
    entry = next(e for e in history(root) if e["run_id"] == done["run_id"])
    assert entry["kind"] == "consolidate" and entry["entries"] == 2 and entry["routing"] == "routed"
    paths = {c["path"] for c in entry["changes"]}
    assert {"memory/MEMORY.md", "memory/INSIGHTS.md", "memory/HISTORY.md", f"memory/{TODAY}.md"} <= paths
    assert {"data/memory/curated.jsonl", "data/memory/curate/consolidated.json"} <= paths
    # one outcome row per target, one routing row
    outcomes = {r["target"]: r for r in rows(root, "outcomes.jsonl")}
    assert set(outcomes) == {"memory", "insights", "daily", "history"}
    assert outcomes["memory"]["outcome"] == "written" and outcomes["memory"]["counts"]["added"] == 1
    assert all(r["run_id"] == done["run_id"] for r in outcomes.values())
    assert rows(root, "routing.jsonl") == [
        {
            "ts": rows(root, "routing.jsonl")[0]["ts"],
            "run_id": done["run_id"],
            "mode": "compatible",
            "result": "routed",
            "sections": 4,
        }
    ]
    # the bullet is an item: evidence, confidence, revision 1
    items = [json.loads(line) for line in (root / "data/memory/curated.jsonl").read_text().splitlines()]
    bullet = next(i for i in items if i["path"] == "memory/MEMORY.md")
    assert bullet["evidence"] == [note] and bullet["confidence"] == 0.9 and bullet["revision"] == 1
    # consolidated entries (and the ones it wrote) are not offered again
    assert prepare(daemon, ws).get("request_id") is None
    # the same response again changes nothing
    again = apply(daemon, ws, resp)
    assert again["already_applied"] and (root / "memory/MEMORY.md").read_text() == text
    assert len(rows(root, "outcomes.jsonl")) == 4
