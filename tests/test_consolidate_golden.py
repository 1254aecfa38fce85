"""Golden cases of consolidation (seed 002 R0): fixtures in tests/fixtures/curate_golden/, each a session's daily
notes, MEMORY.md before, and the host model's answer; the expected MEMORY.md, daily entries, routing result,
outcomes and pipeline counters after, through the real daemon. ``CURATE_GOLDEN_UPDATE=1`` writes the expectations
(review the diff before committing them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon
from tests.test_consolidate import apply, prepare, remember, rows

FIXTURES = ROOT / "tests/fixtures/curate_golden"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))
_CLOCK = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}")


def _stable(text: str) -> str:
    """Dates and times of today's run replaced, so the expectation holds on any day."""
    return _CLOCK.sub("YYYY-MM-DD HH:MM", re.sub(r"seen: \d{4}-\d{2}-\d{2}", "seen: YYYY-MM-DD", text))


def _fill(value: Any, ids: list[str]) -> Any:
    if isinstance(value, str):
        for n, entry_id in enumerate(ids):
            value = value.replace(f"{{e{n}}}", entry_id)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


@pytest.mark.golden
@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory/MEMORY.md").write_text(fixture["memory"])
    for kind, text in fixture["remember"]:
        remember(daemon, ws, text, kind)
    daily_before = {p.name: p.read_text() for p in (root / "memory").glob("20*.md")}
    request = prepare(daemon, ws)
    notes = request["request"]["consolidation"]["daily_notes"]
    assert len(notes) == len(fixture["remember"])
    resp = {
        "request_id": request["request_id"],
        "provenance_summary": {"observation_ids_used": []},
        **_fill(fixture["response"], [n["entry_id"] for n in notes]),
    }
    done = apply(daemon, ws, resp)
    memory = (root / "memory/MEMORY.md").read_text()
    daily = {p.name: p.read_text() for p in (root / "memory").glob("20*.md")}
    added = {name: text[len(daily_before.get(name, "")) :] for name, text in daily.items()}
    got = {
        "memory": memory,
        "daily_added": _stable("".join(added.values())),
        "routing": done["consolidation"]["routing"]["result"],
        "outcomes": {r["target"]: r["outcome"] for r in rows(root, "outcomes.jsonl")},
        "counters": done["consolidation"]["counters"],
    }
    if os.environ.get("CURATE_GOLDEN_UPDATE"):
        fixture["expect"] = got
        (FIXTURES / f"{case}.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=2) + "\n")
        pytest.skip("expectation written")
    assert got == fixture["expect"]
    # whatever the answer, nothing of MEMORY.md before is lost: every line is still there, in order
    before = fixture["memory"].splitlines()
    after = iter(memory.splitlines())
    assert all(any(line == seen for seen in after) for line in before)
