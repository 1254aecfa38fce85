"""The rows a consolidation leaves under ``data/memory/observability/`` (formats fixed in the issue's shared file):
one outcome row per target per apply (memory, insights, daily, history — a target the answer left alone is
``no_change``, so every rate has its denominator), one sanitize row per target something was dropped from, one
routing row. No memory text in any of them. Appended after the change is committed (a refused or held apply writes
its rows with ``run_id`` null); a row that cannot be written is logged, never fails the apply.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd.curate import policy, sectionmerge, steps
from memoryd.fsio import append_line

log = structlog.get_logger("memoryd.curate")

ROUTING_FILE = policy.OBSERVABILITY_DIR + "/routing.jsonl"
TARGETS = ("memory", "insights", "daily", "history")
REASONS = ("secret", "url", "date_line", "too_long", "duplicate", "private")


def _counts(update: steps.Update | None) -> dict[str, int]:
    if update is None:
        return dict.fromkeys(("bullets_before", "bullets_after", "added", "removed", "duplicates", "sanitized"), 0)
    before = len(sectionmerge.bullets(update.current))
    merged = update.merged
    added = len(merged.added) if merged and update.held is None else 0
    removed = len(merged.removed) if merged and update.held is None else 0
    return {
        "bullets_before": before,
        "bullets_after": before + added - removed,
        "added": added,
        "removed": removed,
        "duplicates": merged.duplicates if merged else 0,
        "sanitized": len(update.sanitized.dropped) if update.sanitized else 0,
    }


def outcomes(run: steps.Run) -> dict[str, dict[str, Any]]:
    """Per target: outcome, reason, counts."""
    out: dict[str, dict[str, Any]] = {}
    targets: tuple[steps.Target, ...] = ("memory", "insights")
    for target in targets:
        update = run.updates.get(target)
        out[target] = {
            "outcome": update.outcome if update else "no_change",
            "reason": update.held if update else None,
            "counts": _counts(update),
        }
    zero = _counts(None)
    daily_dropped = sum(n for k, n in run.counters.get("sanitize", Counter()).items() if k.startswith("daily_"))
    out["daily"] = {
        "outcome": ("sanitize_modified" if daily_dropped else "written") if run.daily_entries else "no_change",
        "reason": None if run.routing == "routed" else run.routing,
        "counts": {**zero, "added": len(run.daily_entries), "sanitized": daily_dropped},
    }
    dropped_history = run.counters.get("sanitize", Counter()).get("history_dropped", 0)
    out["history"] = {
        "outcome": "written" if run.history is not None else ("sanitize_modified" if dropped_history else "no_change"),
        "reason": None,
        "counts": {**zero, "added": int(run.history is not None), "sanitized": dropped_history},
    }
    return out


def write(
    root: Path,
    run_id: str,
    run: steps.Run,
    daily_entries: list[tuple[str, str]],
    done: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Every row of one apply (held or written): outcomes, sanitize counts, the routing row, and the questions
    its ask_user conflicts leave open (``done``: the outcomes, when the caller has them already)."""
    try:
        for target, row in (done if done is not None else outcomes(run)).items():
            policy.outcomes.record(
                root,
                policy.outcomes.OutcomeRow(
                    run_id=run_id,
                    target=target,  # type: ignore[arg-type]
                    outcome=row["outcome"],
                    reason=row["reason"],
                    counts=policy.outcomes.OutcomeCounts(**row["counts"]),
                ),
            )
        sanitize = run.counters.get("sanitize", Counter())
        for update in run.updates.values():
            if update.sanitized is not None and update.sanitized.modified:
                counts = update.sanitized.counts()
                policy.outcomes.record_sanitize(
                    root, policy.outcomes.SanitizeRow(run_id=run_id, target=update.target, dropped=counts)
                )
        daily = {reason: sanitize.get(f"daily_{reason}", 0) for reason in REASONS}
        if any(daily.values()):
            policy.outcomes.record_sanitize(
                root, policy.outcomes.SanitizeRow(run_id=run_id, target="daily", dropped=daily)
            )
        for update in run.updates.values():
            if update.asked and update.held is None:
                policy.questions.ask(root, run_id, update.target, update.asked)
        routing_row(root, run_id, run, len(daily_entries))
    except (OSError, ValueError) as exc:  # the change is written; its rows are metrics
        log.warning("curate_rows_failed", error=type(exc).__name__)


def _ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def routing_row(root: Path, run_id: str, run: steps.Run, sections: int) -> None:
    row = {
        "ts": _ts(),
        "run_id": run_id,
        "mode": run.mode,
        "result": run.routing,
        "sections": sections,
    }
    try:
        append_line(root / ROUTING_FILE, orjson.dumps(row), root=root)
    except OSError as exc:
        log.warning("curate_rows_failed", error=type(exc).__name__)
