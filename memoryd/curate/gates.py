"""The routing phase gates (seed 002 §6 R2, §7): do the numbers allow moving daily routing from ``compatible`` to
``preferred``, and from ``preferred`` to ``required``?

Computed from the same rows ``audit`` reads, with the one summarizer (specs below), over each gate's window ending
now, counting the consolidations made in the gate's *from* mode:

- compatible → preferred (7 days): at least 50 runs; routed share (``structured_daily_ok_rate``) ≥ 75%; the
  fallback-or-missing share not rising (second half of the window against the first); guard and sanitize not
  regressing (their shares in the second half at most 5 points above the first); MEMORY.md updates written ≥ 80%
  (written or sanitize_modified, of the updates that had something to write: no_change left out).
- preferred → required (14 days): at least 100 runs; routed share (``tool_call_has_daily_sections_rate``, counted
  strictly: only answers whose daily sections were routed) ≥ 95%; guard_rejected < 5% of MEMORY.md updates (reasons
  starting ``heading_retention`` not counted); recall not regressing (the share of prompts with hits that got
  something injected, second half against first, at most 5 points lower); fallback-or-missing not rising.

A check whose threshold the seed names must pass with rows behind it (no rows: not allowed); a trend check that
has too few rows to compare says so (``ok: null``) without blocking. What the rows cannot measure at all (retries
in preferred mode, how many sessions, alerts) is listed under ``manual`` for a person. The thresholds are settings
(``gate_*``). Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, get_args

from memoryd.curate import metrics
from memoryd.curate.auditapi import Gate, GateCheck, Gates, Mode
from memoryd.curate.summarize import MetricSpec, Not, Rate, Summary, one_of, summarize
from memoryd.settings import ObservabilitySettings

TREND_TOLERANCE = 0.05  # how far a share may move the wrong way between the window's halves before it is a regression
MODES: tuple[Mode, ...] = get_args(Mode)

_MEMORY = {"target": one_of("memory")}
_OUTCOMES = replace(
    metrics.OUTCOMES,
    name="gate_outcomes",
    where=_MEMORY,
    group_by=(),
    rates=(
        Rate("written", {"outcome": metrics.WRITTEN}, {"outcome": Not(one_of("no_change"))}),
        Rate("guard_rejected", {"outcome": one_of("guard_rejected")}),
        Rate("guard_counted", metrics.GUARD_COUNTED),
        Rate("sanitize_modified", {"outcome": one_of("sanitize_modified")}),
    ),
)


def _routing(mode: Mode) -> MetricSpec:
    return replace(metrics.ROUTING, name=f"gate_routing_{mode}", where={"mode": one_of(mode)}, group_by=())


@dataclass(frozen=True, slots=True)
class _Window:
    start: datetime
    mid: datetime
    end: datetime

    @classmethod
    def ending(cls, end: datetime, days: int) -> _Window:
        start = end - timedelta(days=days)
        return cls(start, start + (end - start) / 2, end)

    def whole(self, spec: MetricSpec, rows: Sequence[Mapping[str, Any]]) -> Summary:
        return summarize(spec, rows, self.start, self.end)

    def halves(self, spec: MetricSpec, rows: Sequence[Mapping[str, Any]]) -> tuple[Summary, Summary]:
        return summarize(spec, rows, self.start, self.mid), summarize(spec, rows, self.mid, self.end)


def current_mode(routing: Sequence[Mapping[str, Any]]) -> Mode | None:
    """The mode of the newest routing row that names a known one."""
    for row in reversed(routing):
        mode = row.get("mode")
        if mode in MODES:
            return mode  # type: ignore[no-any-return]
    return None


def gates(
    routing: Sequence[Mapping[str, Any]],
    outcomes: Sequence[Mapping[str, Any]],
    recall: Sequence[Mapping[str, Any]],
    now: datetime,
    settings: ObservabilitySettings,
) -> Gates:
    both = [_to_preferred(routing, outcomes, now, settings), _to_required(routing, outcomes, recall, now, settings)]
    mode = current_mode(routing)
    following = next((g for g in both if g.from_mode == mode), None)
    return Gates(current_mode=mode, next=following, gates=both)


def _to_preferred(
    routing: Sequence[Mapping[str, Any]], outcomes: Sequence[Mapping[str, Any]], now: datetime, s: ObservabilitySettings
) -> Gate:
    window = _Window.ending(now, s.gate_preferred_window_days)
    runs = window.whole(_routing("compatible"), routing)
    written = window.whole(_OUTCOMES, outcomes)
    checks = [
        _at_least(
            "runs", "consolidations in compatible mode in the window", runs.total.rows, s.gate_preferred_min_runs
        ),
        _share_at_least(
            "structured_daily_ok_rate",
            "share of runs whose daily_sections were routed",
            runs,
            "routed",
            s.gate_preferred_structured_rate,
        ),
        _not_rising(
            "fallback_missing_trend",
            "fallback-or-missing share, second half vs first",
            *window.halves(_routing("compatible"), routing),
            "fallback_or_missing",
        ),
        _not_rising(
            "guard_trend",
            "guard_rejected share of MEMORY.md updates, second half vs first",
            *window.halves(_OUTCOMES, outcomes),
            "guard_rejected",
            TREND_TOLERANCE,
        ),
        _not_rising(
            "sanitize_trend",
            "sanitize_modified share of MEMORY.md updates, second half vs first",
            *window.halves(_OUTCOMES, outcomes),
            "sanitize_modified",
            TREND_TOLERANCE,
        ),
        _share_at_least(
            "written_rate",
            "MEMORY.md updates written (written or sanitize_modified) of those with something to write",
            written,
            "written",
            s.gate_preferred_written_rate,
        ),
    ]
    manual = [
        "preferred_retry_used: the share of runs that needed preferred's one retry (routing rows do not record it)"
    ]
    return _gate(
        "compatible",
        "preferred",
        s.gate_preferred_window_days,
        runs.total.rows,
        s.gate_preferred_min_runs,
        checks,
        manual,
    )


def _to_required(
    routing: Sequence[Mapping[str, Any]],
    outcomes: Sequence[Mapping[str, Any]],
    recall: Sequence[Mapping[str, Any]],
    now: datetime,
    s: ObservabilitySettings,
) -> Gate:
    window = _Window.ending(now, s.gate_required_window_days)
    runs = window.whole(_routing("preferred"), routing)
    guarded = window.whole(_OUTCOMES, outcomes)
    before, after = window.halves(metrics.RECALL, recall)
    checks = [
        _at_least("runs", "consolidations in preferred mode in the window", runs.total.rows, s.gate_required_min_runs),
        _share_at_least(
            "daily_sections_rate",
            "share of runs whose answer's daily_sections were routed",
            runs,
            "routed",
            s.gate_required_daily_sections_rate,
        ),
        _share_below(
            "guard_rejected_rate",
            "MEMORY.md updates held by the guard (heading_retention reasons not counted)",
            guarded,
            "guard_counted",
            s.gate_required_guard_rejected_max,
        ),
        _not_rising(
            "recall_trend",
            "prompts with hits that got nothing injected, second half vs first",
            before,
            after,
            "injected_when_found",
            TREND_TOLERANCE,
            inverse=True,
        ),
        _not_rising(
            "fallback_missing_trend",
            "fallback-or-missing share, second half vs first",
            *window.halves(_routing("preferred"), routing),
            "fallback_or_missing",
        ),
    ]
    manual = [
        "the runs cover several active sessions (routing rows do not name sessions)",
        "fallback alerts are under control",
    ]
    return _gate(
        "preferred", "required", s.gate_required_window_days, runs.total.rows, s.gate_required_min_runs, checks, manual
    )


def _gate(
    src: Mode, dst: Mode, days: int, runs: int, min_runs: int, checks: list[tuple[GateCheck, bool]], manual: list[str]
) -> Gate:
    allowed = all(c.ok is True if needed else c.ok is not False for c, needed in checks)
    return Gate(
        from_mode=src,
        to_mode=dst,
        window_days=days,
        runs=runs,
        min_runs=min_runs,
        allowed=allowed,
        checks=[c for c, _ in checks],
        manual=manual,
    )


def _at_least(name: str, description: str, value: int, threshold: int) -> tuple[GateCheck, bool]:
    return GateCheck(name=name, description=description, value=value, threshold=threshold, ok=value >= threshold), True


def _share_at_least(
    name: str, description: str, summary: Summary, rate: str, threshold: float
) -> tuple[GateCheck, bool]:
    value = summary.total.rate(rate)
    ok = None if value is None else value >= threshold
    return GateCheck(name=name, description=description, value=_round(value), threshold=threshold, ok=ok), True


def _share_below(name: str, description: str, summary: Summary, rate: str, threshold: float) -> tuple[GateCheck, bool]:
    value = summary.total.rate(rate)
    ok = None if value is None else value < threshold
    return GateCheck(name=name, description=description, value=_round(value), threshold=threshold, ok=ok), True


def _not_rising(
    name: str,
    description: str,
    first: Summary,
    second: Summary,
    rate: str,
    tolerance: float = 0.0,
    *,
    inverse: bool = False,
) -> tuple[GateCheck, bool]:
    """The rise of a share from the window's first half to its second (``inverse``: of its complement)."""
    a, b = first.total.rate(rate), second.total.rate(rate)
    if a is None or b is None:
        return GateCheck(
            name=name, description=description + " (too few rows in a half)", value=None, threshold=tolerance, ok=None
        ), False
    rise = (a - b) if inverse else (b - a)
    return GateCheck(
        name=name, description=description, value=_round(rise), threshold=tolerance, ok=rise <= tolerance + 1e-9
    ), False


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
