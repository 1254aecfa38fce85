"""History lines and intent journals are typed at the file boundary (issue 20 §3): what the daemon writes reads
back whole, a line of another shape is set aside and reported (never half-read), fields a later version adds are
kept."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from memoryd.errors import AppError
from memoryd.rules import journal
from memoryd.rules.records import HistoryEntry, JournalRecord
from tests.conftest import short_tmp

WRITTEN: dict[str, Any] = {
    "op": "compile.apply",
    "ts": "2026-03-01T09:30:00.000+00:00",
    "request_id": "cr_1",
    "observation_ids": ["obs_1"],
    "run_id": "apply_01",
    "changes": [
        {
            "path": "spec/memory/profiles/KX-200/uart.yaml",
            "action": "update",
            "layer": "profile",
            "rules": [{"rule_id": "uart", "rev_before": 1, "rev_after": 2}],
            "sha_before": "a" * 64,
            "sha_after": "b" * 64,
            "backup": "data/memory/backups/apply_01/spec/memory/profiles/KX-200/uart.yaml",
        }
    ],
}


def test_a_line_the_daemon_writes_reads_back_typed() -> None:
    entry = HistoryEntry.parse(WRITTEN)
    assert entry is not None
    assert (entry.op, entry.run_id, entry.kind) == ("compile.apply", "apply_01", None)
    [change] = entry.changes
    assert change.layer == "profile" and change.sha_after == "b" * 64 and change.backup is not None
    assert [(r.rule_id, r.rev_before, r.rev_after) for r in change.rules] == [("uart", 1, 2)]
    assert entry.extra == {"request_id": "cr_1", "observation_ids": ["obs_1"]}
    assert entry.touches(change.path) and not entry.touches("memory/MEMORY.md")
    later = HistoryEntry.parse({**WRITTEN, "kind": "archive", "added_later": {"x": 1}, "changes": []})
    assert later is not None and later.kind == "archive" and later.extra["added_later"] == {"x": 1}


def _change(**fields: Any) -> dict[str, Any]:
    return {**WRITTEN, "changes": [{**WRITTEN["changes"][0], **fields}]}


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "a string",
        {**WRITTEN, "op": 1},
        {**WRITTEN, "run_id": ["x"]},
        {**WRITTEN, "kind": 7},
        {**WRITTEN, "restores": {"run": 1}},
        {**WRITTEN, "changes": {}},
        {**WRITTEN, "changes": ["memory/x.md"]},
        _change(path=None),
        _change(backup=123),  # once read as "no backup", a restore would have deleted the file
        _change(sha_after=5),
        _change(rules={}),
        _change(rules=["uart"]),
        _change(rules=[{"rule_id": 3, "rev_before": 1, "rev_after": 2}]),
        _change(rules=[{"rule_id": "uart", "rev_before": 1, "rev_after": True}]),
        _change(rules=[{"rule_id": "uart", "rev_before": "1", "rev_after": 2}]),
    ],
)
def test_a_line_of_another_shape_is_set_aside(raw: Any) -> None:
    assert HistoryEntry.parse(raw) is None
    root = short_tmp("ws")
    path = root / journal.HISTORY_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(orjson.dumps(WRITTEN) + b"\n" + orjson.dumps(raw) + b"\n")
    assert [e.run_id for e in journal.read_history(root)] == ["apply_01"]
    [problem] = journal.history_problems(root)
    assert problem.startswith(f"{journal.HISTORY_FILE}: line 2:")


def test_an_intent_record_reads_typed_and_a_crafted_one_is_refused() -> None:
    record = JournalRecord.parse(
        {"run_id": "apply_01", "history": WRITTEN, "writes": [{"path": "memory/a.md", "content": "串口\n"}]}
    )
    assert record.writes[0].content == "串口\n".encode()
    assert JournalRecord.parse(record.to_json()) == record
    for raw in (
        {"run_id": "x", "history": [], "writes": []},
        {"run_id": "x", "history": {**WRITTEN, "op": 3}, "writes": []},
        {"run_id": 1, "history": WRITTEN, "writes": []},
        {"run_id": "x", "history": WRITTEN, "writes": {}},
        {"run_id": "x", "history": WRITTEN, "writes": [{"path": "memory/a.md", "content": 3}]},
        {"run_id": "x", "history": WRITTEN, "writes": [{"content": "x"}]},
        {"run_id": "x", "history": WRITTEN, "writes": [{"path": "memory/a.md", "content": "\ud800"}]},
    ):
        with pytest.raises(ValueError):
            JournalRecord.parse(raw)


def test_a_crafted_journal_is_set_aside_and_never_replayed() -> None:
    root = short_tmp("ws")
    (root / journal.JOURNAL_DIR).mkdir(parents=True)
    crafted = {"run_id": "x1", "history": WRITTEN, "writes": [{"path": "memory/../../etc/x.md", "content": "x"}]}
    (root / journal.JOURNAL_DIR / "x1.json").write_bytes(orjson.dumps(crafted))
    assert journal.recover(root) == []
    assert (root / journal.JOURNAL_DIR / "x1.json.unreadable").exists()
    with pytest.raises(AppError):
        journal.target(root, "memory/../../etc/x.md")
