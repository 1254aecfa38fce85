"""The generic JSONL summarizer behind ``audit`` (memoryd/curate/summarize.py, metrics.py, audit.py) and the
routing phase gates (gates.py), on hand-written JSONL fixtures: real files in a temp workspace, hostile ones too (a
1 GB sparse file, a FIFO, a symlink, torn and wrong-shaped lines)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from memoryd.curate import audit, gates, metrics, observe
from memoryd.curate.summarize import OTHER, MetricSpec, Rate, one_of, summarize
from memoryd.settings import ObservabilitySettings

NOW = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)
SETTINGS = ObservabilitySettings()


def at(days_ago: float) -> str:
    return observe.ts(NOW - timedelta(days=days_ago))


def write_rows(root: Path, rel: str, rows: list[Any], tail: bytes = b"") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + tail)
    return path


def outcome(outcome: str, days_ago: float = 1, target: str = "memory", reason: str | None = None) -> dict[str, Any]:
    return {
        "ts": at(days_ago),
        "run_id": "run_x",
        "target": target,
        "outcome": outcome,
        "reason": reason,
        "counts": {
            "bullets_before": 10,
            "bullets_after": 12,
            "added": 2,
            "removed": 0,
            "duplicates": 1,
            "sanitized": 0,
        },
    }


def metric(result: Any, name: str) -> Any:
    return next(m for m in result.metrics if m.name == name)


def test_one_spec_counts_groups_rates_and_sums(tmp_path: Path) -> None:
    rows = [outcome("written"), outcome("written"), outcome("guard_rejected", reason="loss_share 0.4")]
    rows += [outcome("no_change", target="insights"), outcome("sanitize_modified", target="insights")]
    write_rows(tmp_path, observe.OUTCOMES, rows)
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW)
    outcomes = metric(result, "outcomes")
    assert outcomes.total.rows == 5
    assert outcomes.total.counts["outcome"] == {
        "written": 2,
        "guard_rejected": 1,
        "no_change": 1,
        "sanitize_modified": 1,
    }
    assert outcomes.total.rates["written"].value == 0.6  # written + sanitize_modified of all
    assert outcomes.total.sums["counts.added"] == 10
    by = {g.key: g for g in outcomes.groups}
    assert by["memory"].rows == 3 and by["insights"].rows == 2
    assert by["memory"].rates["guard_rejected"].numerator == 1 and by["memory"].rates["guard_rejected"].denominator == 3
    guard = metric(result, "guard")  # the same file, another spec: only the held updates, tallied by reason
    assert guard.total.rows == 1 and guard.total.counts["reason"] == {"loss_share 0.4": 1}
    assert not outcomes.skipped and not outcomes.truncated and outcomes.refused is None


def test_a_new_metric_is_a_spec_not_a_function() -> None:
    spec = MetricSpec(
        name="conflicts",
        file="data/memory/observability/conflicts.jsonl",
        title="Preference conflicts",
        shape={"key": (str,), "resolution": (str,)},
        group_by=("key",),
        tally=("resolution",),
        rates=(Rate("asked", {"resolution": one_of("ask_user")}),),
    )
    rows = [
        {"ts": at(1), "key": "language", "resolution": "ask_user"},
        {"ts": at(1), "key": "language", "resolution": "keep_new"},
        {"ts": at(1), "key": "语言风格", "resolution": "ask_user"},
    ]
    summary = summarize(spec, rows)
    assert summary.total.rate("asked") == pytest.approx(2 / 3)
    assert summary.groups["语言风格"].rows == 1


def test_since_leaves_older_rows_out(tmp_path: Path) -> None:
    write_rows(tmp_path, observe.OUTCOMES, [outcome("written", 10), outcome("written", 3), outcome("no_change", 1)])
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW, since=NOW - timedelta(days=5))
    assert metric(result, "outcomes").total.rows == 2
    assert result.since is not None and result.since.endswith("Z")


def test_torn_wrong_shape_and_foreign_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    good = outcome("written")
    lines = [
        good,
        {**good, "outcome": 3},  # wrong type
        {**good, "ts": "yesterday"},  # no valid ts
        {"ts": at(1)},  # fields missing
        [1, 2, 3],  # not an object
        "a string",
    ]
    path = write_rows(tmp_path, observe.OUTCOMES, lines)
    with path.open("ab") as f:
        f.write(b"{not json\n")
        f.write(b"\x00" * 1000 + b"\n")
        f.write(b'{"ts": "' + b"x" * 300_000 + b'"}\n')  # longer than any row
        f.write(orjson.dumps(good)[:-5])  # torn: a writer died mid-line
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW)
    outcomes = metric(result, "outcomes")
    assert outcomes.total.rows == 1
    assert outcomes.skipped == {"wrong_shape": 3, "not_an_object": 2, "not_json": 2, "too_long": 1, "torn": 1}
    md = audit.render_markdown(result)
    assert "skipped" in md and "torn" in md


def test_a_1gb_sparse_file_costs_its_tail_only(tmp_path: Path) -> None:
    path = tmp_path / observe.OUTCOMES
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(1024**3)  # a gigabyte of holes (NUL bytes), no line break
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + b"".join(orjson.dumps(outcome("written")) + b"\n" for _ in range(3)))
    settings = ObservabilitySettings(audit_max_bytes=64 * 1024)
    t = time.perf_counter()
    result = audit.audit(tmp_path, "ws_x", settings, NOW)
    assert time.perf_counter() - t < 10  # not a timing target: a whole read of 1 GB would take far longer
    outcomes = metric(result, "outcomes")
    assert outcomes.truncated and outcomes.total.rows == 3
    assert "oldest rows left out" in audit.render_markdown(result)


def test_a_1gb_sparse_file_without_any_row_is_one_skipped_line(tmp_path: Path) -> None:
    path = tmp_path / observe.RECALL
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(1024**3)
    result = audit.audit(tmp_path, "ws_x", ObservabilitySettings(audit_max_bytes=1024 * 1024), NOW)
    recall = metric(result, "recall")
    assert recall.truncated and recall.total.rows == 0


def test_a_fifo_named_outcomes_jsonl_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / observe.OUTCOMES
    path.parent.mkdir(parents=True)
    os.mkfifo(path)  # nobody ever writes to it: opening it for reading would block
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW)
    outcomes = metric(result, "outcomes")
    assert outcomes.refused == "NotRegularFile" and outcomes.total.rows == 0
    assert metric(result, "guard").refused == "NotRegularFile"


def test_a_symlinked_observability_file_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(orjson.dumps(outcome("written")) + b"\n")
    ws = tmp_path / "ws"
    (ws / observe.OBSERVABILITY_DIR).mkdir(parents=True)
    (ws / observe.ROUTING).symlink_to(outside)
    result = audit.audit(ws, "ws_x", SETTINGS, NOW)
    assert metric(result, "routing").refused == "SymlinkRefused"


def test_tallies_are_bounded_against_crafted_files(tmp_path: Path) -> None:
    rows = [outcome("guard_rejected", reason=f"reason {n}") for n in range(500)]
    rows += [{**outcome("written"), "target": f"target {n}"} for n in range(500)]
    write_rows(tmp_path, observe.OUTCOMES, rows)
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW)
    guard = metric(result, "guard")
    assert len(guard.total.counts["reason"]) == 51 and guard.total.counts["reason"][OTHER] == 450
    assert len(metric(result, "outcomes").groups) == 51


def test_sanitize_lifecycle_recall_and_history_metrics(tmp_path: Path) -> None:
    write_rows(
        tmp_path,
        observe.SANITIZE,
        [
            {"ts": at(1), "run_id": "r1", "target": "memory", "dropped": {"secret": 2, "url": 1, "private": 0}},
            {"ts": at(1), "run_id": "r2", "target": "memory", "dropped": {"secret": 1, "date_line": 4}},
        ],
    )
    write_rows(
        tmp_path,
        observe.LIFECYCLE,
        [
            {"ts": at(2), "run_id": "r3", "action": "archive", "dry_run": True, "files": 30, "bytes": 9000},
            {"ts": at(1), "run_id": "r4", "action": "archive", "dry_run": False, "files": 30, "bytes": 9000},
            {"ts": at(1), "run_id": "r5", "action": "ttl", "dry_run": False, "files": 2, "bytes": 100},
        ],
    )
    write_rows(
        tmp_path,
        observe.RECALL,
        [
            {
                "ts": at(1),
                "session": "s",
                "trigger": "injected",
                "hits": 3,
                "injected": 2,
                "item_ids": [],
                "past": False,
            },
            {"ts": at(1), "session": "s", "trigger": "below_floor", "hits": 4, "injected": 0, "item_ids": []},
            {
                "ts": at(1),
                "session": None,
                "trigger": "no_hits",
                "hits": 0,
                "injected": 0,
                "item_ids": [],
                "past": True,
            },
        ],
    )
    write_rows(
        tmp_path,
        observe.HISTORY,
        [
            {"op": "compile.apply", "ts": "2026-03-19T10:00:00.000+08:00", "run_id": "run_1", "changes": []},
            {"op": "forget", "ts": "2026-03-19T10:01:00.000+08:00", "run_id": "run_2", "changes": []},
            {"op": "consolidate", "kind": "consolidate", "ts": at(1), "run_id": "run_3", "changes": []},
            {"op": "restore", "ts": at(1), "run_id": "run_4", "changes": []},
        ],
    )
    result = audit.audit(tmp_path, "ws_x", SETTINGS, NOW)
    sanitize = metric(result, "sanitize")
    assert sanitize.total.sums == {"dropped.secret": 3, "dropped.url": 1, "dropped.private": 0, "dropped.date_line": 4}
    lifecycle = metric(result, "lifecycle")
    assert {g.key: g.sums["files"] for g in lifecycle.groups} == {"archive": 60, "ttl": 2}
    assert lifecycle.total.rates["dry_run"].numerator == 1
    recall = metric(result, "recall")
    assert recall.total.rates["found"].value == pytest.approx(2 / 3, abs=1e-4)
    assert recall.total.rates["injected_when_found"].value == 0.5
    assert recall.total.counts["trigger"] == {"injected": 1, "below_floor": 1, "no_hits": 1}
    history = metric(result, "history")
    assert {g.key: g.rows for g in history.groups} == {"compile.apply": 1, "forget": 1, "consolidate": 1, "restore": 1}


def test_the_markdown_report_cannot_be_broken_by_a_crafted_value(tmp_path: Path) -> None:
    write_rows(tmp_path, observe.OUTCOMES, [outcome("guard_rejected", reason="a | b\n## injected <script>")])
    md = audit.audit(tmp_path, "ws_x", SETTINGS, NOW, markdown=True).markdown
    assert md is not None
    table = [line for line in md.splitlines() if line.startswith("| all |")]
    assert table and all(line.count("|") == 6 for line in table)
    assert "<script>" not in md and "\n## injected" not in md


# --- the routing phase gates ------------------------------------------------------------------------------------


def routing_rows(mode: str, n: int, days: float, routed_share: float, fallback_early: float = 0.2) -> list[Any]:
    """``n`` runs spread over ``days`` (oldest first): ``routed_share`` routed; the rest fallback, more of them in
    the first half (a declining fallback share) when ``fallback_early`` is larger than the second half's."""
    rows = []
    for k in range(n):
        age = days * (n - k) / (n + 1)
        first_half = k < n // 2
        routed = (k * 7919 % 100) / 100 < routed_share
        if first_half and (k * 31 % 100) / 100 < fallback_early:
            routed = False
        rows.append(
            {
                "ts": at(age),
                "run_id": f"r{k}",
                "mode": mode,
                "result": "routed" if routed else "fallback",
                "sections": 4,
            }
        )
    return rows


def memory_outcomes(n: int, days: float, written_share: float, guard_reason: str = "loss_share") -> list[Any]:
    rows = []
    for k in range(n):
        age = days * (n - k) / (n + 1)
        kind = "written" if (k * 7919 % 100) / 100 < written_share else "guard_rejected"
        rows.append(outcome(kind, age, reason=None if kind == "written" else guard_reason))
    return rows


def gate(result: Any, to_mode: str) -> Any:
    return next(g for g in result.gates if g.to_mode == to_mode)


def test_compatible_to_preferred_is_allowed_when_the_numbers_say_so() -> None:
    routing = routing_rows("compatible", 60, 6.5, 0.85)
    outcomes = memory_outcomes(60, 6.5, 0.9)
    result = gates.gates(routing, outcomes, [], NOW, SETTINGS)
    assert result.current_mode == "compatible" and result.next is not None and result.next.to_mode == "preferred"
    up = gate(result, "preferred")
    checks = {c.name: c for c in up.checks}
    assert up.runs == 60 and checks["runs"].ok
    assert checks["structured_daily_ok_rate"].ok and checks["written_rate"].ok
    assert checks["fallback_missing_trend"].ok and checks["fallback_missing_trend"].value is not None
    assert up.allowed, [c for c in up.checks if c.ok is False]
    assert up.manual  # preferred_retry_used: not in the rows


@pytest.mark.parametrize(
    ("routing", "outcomes", "failing"),
    [
        (routing_rows("compatible", 40, 6.5, 0.9), memory_outcomes(60, 6.5, 0.9), "runs"),
        (routing_rows("compatible", 60, 6.5, 0.6), memory_outcomes(60, 6.5, 0.9), "structured_daily_ok_rate"),
        (routing_rows("compatible", 60, 6.5, 0.9), memory_outcomes(60, 6.5, 0.7), "written_rate"),
        (routing_rows("compatible", 60, 6.5, 0.9), [], "written_rate"),  # no outcome rows: not measured, not allowed
        (routing_rows("compatible", 60, 20, 0.9), memory_outcomes(60, 6.5, 0.9), "runs"),  # most runs are too old
    ],
)
def test_compatible_to_preferred_is_held_by_each_threshold(routing: Any, outcomes: Any, failing: str) -> None:
    up = gate(gates.gates(routing, outcomes, [], NOW, SETTINGS), "preferred")
    assert not up.allowed
    assert {c.name: c for c in up.checks}[failing].ok is not True


def test_a_rising_fallback_share_holds_preferred() -> None:
    rows = routing_rows("compatible", 60, 6.5, 1.0, fallback_early=0.0)
    for row in rows[-12:]:  # the newest runs fall back: the share rises
        row["result"] = "missing"
    up = gate(gates.gates(rows, memory_outcomes(60, 6.5, 0.95), [], NOW, SETTINGS), "preferred")
    trend = {c.name: c for c in up.checks}["fallback_missing_trend"]
    assert trend.ok is False and trend.value is not None and trend.value > 0
    assert not up.allowed


def test_preferred_to_required_counts_guard_rejections_but_not_heading_retention() -> None:
    routing = routing_rows("preferred", 120, 13, 0.99, fallback_early=0.0)
    held_by_headings = memory_outcomes(120, 13, 0.8, guard_reason="heading_retention_too_low")
    result = gates.gates(routing, held_by_headings, [], NOW, SETTINGS)
    assert result.current_mode == "preferred" and result.next is not None and result.next.to_mode == "required"
    up = gate(result, "required")
    checks = {c.name: c for c in up.checks}
    assert checks["daily_sections_rate"].ok and checks["guard_rejected_rate"].value == 0
    assert up.allowed, [c for c in up.checks if c.ok is False]
    held_by_loss = memory_outcomes(120, 13, 0.8, guard_reason="loss_share 0.3")
    up = gate(gates.gates(routing, held_by_loss, [], NOW, SETTINGS), "required")
    assert {c.name: c for c in up.checks}["guard_rejected_rate"].ok is False and not up.allowed


def test_a_recall_regression_holds_required() -> None:
    routing = routing_rows("preferred", 120, 13, 1.0, fallback_early=0.0)
    recall = [
        {"ts": at(13 * (100 - k) / 101), "trigger": "x", "hits": 2, "injected": 1 if k < 50 else (1 if k % 2 else 0)}
        for k in range(100)
    ]  # the second half injects half as often
    up = gate(gates.gates(routing, memory_outcomes(120, 13, 1.0), recall, NOW, SETTINGS), "required")
    trend = {c.name: c for c in up.checks}["recall_trend"]
    assert trend.ok is False and trend.value is not None and 0.3 < trend.value <= 0.5
    assert not up.allowed


def test_gate_thresholds_are_settings() -> None:
    routing = routing_rows("compatible", 20, 6.5, 0.9)
    strict = gate(gates.gates(routing, memory_outcomes(20, 6.5, 0.9), [], NOW, SETTINGS), "preferred")
    lenient = ObservabilitySettings(gate_preferred_min_runs=20, gate_preferred_written_rate=0.5)
    relaxed = gate(gates.gates(routing, memory_outcomes(20, 6.5, 0.9), [], NOW, lenient), "preferred")
    assert not strict.allowed and relaxed.allowed and relaxed.min_runs == 20


def test_metrics_are_configuration() -> None:
    # one summarizer for all of them: every metric is a spec naming a file under data/memory/
    assert len({m.name for m in metrics.AUDIT}) == len(metrics.AUDIT)
    assert all(isinstance(m, MetricSpec) and m.file.startswith("data/memory/") for m in metrics.AUDIT)
