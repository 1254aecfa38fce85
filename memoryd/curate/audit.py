"""``audit``: what the observability files and history say, as JSON and as a Markdown report.

Each file is read once (bounded: its last ``audit_max_bytes``; hostile lines skipped and counted) and every metric of
``memoryd/curate/metrics.py`` is summarized from it by the one summarizer; the routing phase gates come from the
same rows (``memoryd/curate/gates.py``). Blocking: call from a worker thread.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from memoryd.curate import gates, metrics, observe
from memoryd.curate.auditapi import AuditResult, Gate, Metric, MetricGroup, RateValue
from memoryd.curate.summarize import MetricSpec, Summary, Tally, summarize
from memoryd.settings import ObservabilitySettings


def audit(
    root: Path,
    workspace_id: str,
    settings: ObservabilitySettings,
    now: datetime,
    since: datetime | None = None,
    *,
    markdown: bool = False,
) -> AuditResult:
    files = {spec.file for spec in metrics.AUDIT}
    read = {rel: observe.read_rows(root, rel, settings.audit_max_bytes, rotated=True) for rel in sorted(files)}
    out = [_metric(spec, summarize(spec, read[spec.file].rows, since, None), read[spec.file]) for spec in metrics.AUDIT]
    gated = gates.gates(
        read[observe.ROUTING].rows, read[observe.OUTCOMES].rows, read[observe.RECALL].rows, now, settings
    )
    result = AuditResult(
        workspace_id=workspace_id,
        since=None if since is None else observe.ts(since),
        until=observe.ts(now),
        metrics=out,
        gates=gated,
    )
    return result.model_copy(update={"markdown": render_markdown(result)}) if markdown else result


def _metric(spec: MetricSpec, summary: Summary, rows: observe.Rows) -> Metric:
    skipped = dict(rows.skipped)
    if summary.wrong_shape:
        skipped["wrong_shape"] = summary.wrong_shape
    groups = sorted(summary.groups.items(), key=lambda kv: (-kv[1].rows, kv[0]))
    return Metric(
        name=spec.name,
        title=spec.title,
        file=spec.file,
        total=_group("all", summary.total),
        groups=[_group(key, tally) for key, tally in groups],
        skipped=skipped,
        truncated=rows.truncated,
        refused=rows.refused,
        first_ts=None if summary.first is None else observe.ts(summary.first),
        last_ts=None if summary.last is None else observe.ts(summary.last),
    )


def _group(key: str, tally: Tally) -> MetricGroup:
    return MetricGroup(
        key=key,
        rows=tally.rows,
        counts={name: dict(counter.most_common()) for name, counter in tally.counts.items()},
        sums={name: round(value, 4) for name, value in tally.sums.items()},
        rates={
            name: RateValue(numerator=num, denominator=den, value=None if not den else round(num / den, 4))
            for name, (num, den) in tally.rates.items()
        },
    )


# --- the Markdown report ----------------------------------------------------------------------------------------


def render_markdown(result: AuditResult) -> str:
    lines = [f"# Memory audit — {result.workspace_id}", ""]
    lines.append(f"Rows from {result.since or 'the start of each file'} to {result.until}.")
    lines.append("")
    lines += _gates_markdown(result)
    for metric in result.metrics:
        lines += _metric_markdown(metric)
    return "\n".join(lines).rstrip() + "\n"


def _gates_markdown(result: AuditResult) -> list[str]:
    g = result.gates
    lines = ["## Routing phase gates", "", f"Current mode: {g.current_mode or 'unknown (no routing rows)'}.", ""]
    for gate in g.gates:
        lines += _gate_markdown(gate)
    return lines


def _gate_markdown(gate: Gate) -> list[str]:
    verdict = "allowed" if gate.allowed else "not yet"
    lines = [
        f"### {gate.from_mode} → {gate.to_mode}: {verdict}",
        "",
        f"{gate.runs} runs in {gate.from_mode} mode over {gate.window_days} days (needs {gate.min_runs}).",
        "",
        "| check | value | threshold | ok |",
        "|---|---|---|---|",
    ]
    for check in gate.checks:
        ok = "—" if check.ok is None else ("yes" if check.ok else "no")
        lines.append(
            f"| {check.name}: {_cell(check.description)} | {_num(check.value)} | {_num(check.threshold)} | {ok} |"
        )
    lines.append("")
    if gate.manual:
        lines += ["For a person to judge:", "", *[f"- {_cell(m)}" for m in gate.manual], ""]
    return lines


def _metric_markdown(metric: Metric) -> list[str]:
    lines = [f"## {metric.title}", "", f"`{metric.file}`: {metric.total.rows} rows"]
    notes = []
    if metric.refused:
        notes.append(f"not read ({metric.refused})")
    if metric.truncated:
        notes.append("oldest rows left out (file over audit_max_bytes)")
    if metric.skipped:
        notes.append("skipped " + ", ".join(f"{n} {why}" for why, n in sorted(metric.skipped.items())))
    if metric.first_ts:
        notes.append(f"{metric.first_ts} … {metric.last_ts}")
    lines[-1] += (" — " + "; ".join(notes) if notes else "") + "."
    lines.append("")
    if not metric.total.rows:
        return lines
    groups = [metric.total, *metric.groups] if metric.groups else [metric.total]
    lines += ["| group | rows | counts | rates | sums |", "|---|---|---|---|---|"]
    for group in groups:
        counts = "; ".join(
            f"{name}: " + ", ".join(f"{_cell(v)} {n}" for v, n in values.items())
            for name, values in group.counts.items()
        )
        rates = ", ".join(f"{name} {_percent(r.value)}" for name, r in group.rates.items())
        sums = ", ".join(f"{name} {_num(v)}" for name, v in group.sums.items())
        lines.append(f"| {_cell(group.key)} | {group.rows} | {counts} | {rates} | {sums} |")
    lines.append("")
    return lines


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipe, no line break, no HTML."""
    return text.replace("|", "/").replace("\n", " ").replace("<", "‹").replace(">", "›")[:120]


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"
