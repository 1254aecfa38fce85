"""The observability rows curation writes under ``data/memory/observability/`` (append-only JSONL, one object a
line, ``ts`` ISO-8601 UTC with ``Z``; docs/reference/curation.md, "Outcome rows").

- ``outcomes.jsonl``: one row per update a consolidation handled, whatever became of it (the "passed" baseline
  the seed asks for, so every rate has a denominator): ``written | guard_rejected | sanitize_modified |
  no_change | truncated_skip``, a reason, counts. No memory text.
- ``sanitize.jsonl``: what sanitize dropped, counted per reason. No memory text, never a secret.

Rows are small and bounded (a reason is at most ``REASON_MAX`` characters, stripped of ``<private>`` spans and
refused if it looks like a secret), and the files only grow by whole lines (``fsio.append_line``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from memoryd import fsio
from memoryd.curate import patterns
from memoryd.notes.daily import strip_private

OBSERVABILITY_DIR = "data/memory/observability"
OUTCOMES_FILE = f"{OBSERVABILITY_DIR}/outcomes.jsonl"
SANITIZE_FILE = f"{OBSERVABILITY_DIR}/sanitize.jsonl"
REASON_MAX = 500
RUN_ID = r"^[A-Za-z0-9_.-]{1,100}$"  # as the journal's run ids

Target = Literal["memory", "insights", "daily", "history"]
Outcome = Literal["written", "guard_rejected", "sanitize_modified", "no_change", "truncated_skip"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def safe_reason(reason: str | None) -> str | None:
    """A reason as a row may keep it: <private> spans out, at most REASON_MAX characters, and never anything that
    looks like a secret (then it says only that)."""
    if reason is None:
        return None
    reason = strip_private(reason)[:REASON_MAX]
    return "(reason withheld: it looked like a secret)" if patterns.has_secret(reason) else reason


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class OutcomeCounts(Row):
    bullets_before: int = Field(0, ge=0, description="Bullets in the target file before.")
    bullets_after: int = Field(0, ge=0, description="Bullets it holds after (as before when nothing was written).")
    added: int = Field(0, ge=0)
    removed: int = Field(0, ge=0, description="Bullets the update removed (only a [replace] section removes).")
    duplicates: int = Field(0, ge=0, description="Bullets of the update the file already held.")
    sanitized: int = Field(0, ge=0, description="Things sanitize dropped or cut (sanitize.jsonl has them by reason).")


class OutcomeRow(Row):
    """One line of ``outcomes.jsonl``."""

    ts: str = Field(default_factory=utc_now, description="When, ISO-8601 UTC with Z.")
    run_id: str = Field(pattern=RUN_ID, description="The consolidation's run (its history line, `restore`).")
    target: Target
    outcome: Outcome
    reason: str | None = Field(None, description="Why held or skipped, or what a [replace] removed; no memory text.")
    counts: OutcomeCounts = Field(default_factory=OutcomeCounts)

    @field_validator("reason")
    @classmethod
    def _reason(cls, reason: str | None) -> str | None:
        return safe_reason(reason)


class SanitizeRow(Row):
    """One line of ``sanitize.jsonl``."""

    ts: str = Field(default_factory=utc_now)
    run_id: str = Field(pattern=RUN_ID)
    target: Target
    dropped: dict[str, int] = Field(
        description="Per reason (secret, url, date_line, too_long, duplicate, private always; outside_section, "
        "empty, empty_section when they happen): how many lines or bullets sanitize dropped or cut."
    )

    @field_validator("dropped")
    @classmethod
    def _dropped(cls, dropped: dict[str, int]) -> dict[str, int]:
        if len(dropped) > 50 or any(len(k) > 50 or n < 0 for k, n in dropped.items()):
            raise ValueError("at most 50 reasons, each named in 50 characters, counts not negative")
        return dropped


def record(root: Path, row: OutcomeRow) -> None:
    """Append ``row`` to the workspace's ``outcomes.jsonl`` (created with its directory when missing)."""
    _append(root, OUTCOMES_FILE, row)


def record_sanitize(root: Path, row: SanitizeRow) -> None:
    """Append ``row`` to the workspace's ``sanitize.jsonl``."""
    _append(root, SANITIZE_FILE, row)


def _append(root: Path, rel: str, row: Row) -> None:
    fsio.append_line(fsio.member(root, rel), orjson.dumps(row.model_dump(mode="json")), root=root)
