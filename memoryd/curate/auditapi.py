"""``audit``'s answer: pydantic models defined in the domain (``memoryd/curate/audit.py`` builds them,
``methods/audit.py`` registers the result made of them, so the generated schema comes from here)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from memoryd.models import Wire

Mode = Literal["compatible", "preferred", "required"]


class RateValue(Wire):
    numerator: int
    denominator: int
    value: float | None = Field(description="numerator / denominator, rounded to 4 places; null when no rows.")


class MetricGroup(Wire):
    key: str = Field(description="The group's value (the spec's group-by field), or 'all' for the metric's total.")
    rows: int
    counts: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="Field → value → rows (at most 50 values; the rest under '(other)')."
    )
    sums: dict[str, float] = Field(default_factory=dict, description="Numeric fields summed (objects key by key).")
    rates: dict[str, RateValue] = Field(default_factory=dict)


class Metric(Wire):
    name: str = Field(description="outcomes, guard, sanitize, routing, recall, lifecycle, history.")
    title: str
    file: str = Field(description="The file read, relative to the workspace.")
    total: MetricGroup
    groups: list[MetricGroup] = Field(default_factory=list, description="By the spec's group-by field, largest first.")
    skipped: dict[str, int] = Field(
        default_factory=dict,
        description="Lines left out and why: torn (no line break at the end), not_json, not_an_object, too_long "
        "(over 256 KiB), wrong_shape (a field missing or of the wrong type, or no valid ts).",
    )
    truncated: bool = Field(
        description="The file is larger than audit_max_bytes: only its newest rows (its last audit_max_bytes) were read."
    )
    refused: str | None = Field(
        default=None, description="Why the file was not read at all (a FIFO, a symlink, …); null when read or absent."
    )
    first_ts: str | None = None
    last_ts: str | None = None


class GateCheck(Wire):
    name: str
    description: str
    value: float | None = Field(description="What the rows say (a rate, a count); null when not measurable.")
    threshold: float | None = None
    ok: bool | None = Field(description="Whether the check passes; null when the rows cannot tell (see description).")


class Gate(Wire):
    from_mode: Mode
    to_mode: Mode
    window_days: int
    runs: int = Field(description="Consolidations in from_mode within the window (routing.jsonl rows).")
    min_runs: int
    allowed: bool = Field(description="Every check that can be measured passes (manual ones are for a person).")
    checks: list[GateCheck]
    manual: list[str] = Field(
        default_factory=list, description="Criteria of seed 002 §7 the rows cannot measure: a person judges them."
    )


class Gates(Wire):
    current_mode: Mode | None = Field(description="The mode of the newest routing.jsonl row; null without rows.")
    next: Gate | None = Field(description="The gate out of the current mode (none out of required).")
    gates: list[Gate]


class AuditResult(Wire):
    workspace_id: str
    since: str | None = Field(description="Rows from this moment on (ISO-8601, UTC); null: all rows read.")
    until: str = Field(description="When the audit ran (ISO-8601, UTC).")
    metrics: list[Metric]
    gates: Gates
    markdown: str | None = Field(default=None, description="The same as a Markdown report (when asked for).")
