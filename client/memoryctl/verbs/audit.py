"""memoryctl audit: what the workspace's observability files and history say (update outcomes, guard, sanitize,
daily routing, recall for prompts, lifecycle runs, changes by kind) and whether the routing phase gates allow moving
up a mode. A table for people, `--json` for scripts, `--markdown` for a report to keep or paste."""

from __future__ import annotations

from memoryctl.common import EXIT_OK, Args, workspace_of

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from memoryctl.quick import Spec
    from memoryctl.rpc import Connection

QUICK: dict[str, Spec] = {}


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        metavar="WHEN",
        help="only rows from then on: 7d, 12h, 30m, or an ISO-8601 date/time (2026-03-01; UTC unless it says)",
    )
    p.add_argument("--markdown", action="store_true", help="print the report as Markdown")


def local(args: Args, path: str, timeout: float) -> int | None:
    return None


def call(args: Args) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    if args.since:
        params["since"] = args.since
    if args.markdown:
        params["markdown"] = True
    return "audit", params


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    return conn.call(method, params)


def exit_code(args: Args, result: Any) -> int:
    return EXIT_OK


def render(args: Args, result: Any) -> str:
    if args.markdown and isinstance(result.get("markdown"), str):
        return str(result["markdown"]).rstrip("\n")
    lines = [f"audit of {result['workspace_id']} · rows since {result.get('since') or 'the start'} · {result['until']}"]
    lines += _gates(result["gates"])
    rows: list[tuple[str, ...]] = [("metric", "group", "rows", "counts", "rates")]
    notes = []
    for metric in result["metrics"]:
        groups = [metric["total"], *metric.get("groups", [])]
        for n, group in enumerate(groups):
            rows.append(
                (
                    metric["name"] if n == 0 else "",
                    group["key"],
                    str(group["rows"]),
                    _counts(group.get("counts", {})),
                    _rates(group.get("rates", {})),
                )
            )
        notes += _notes(metric)
    lines += ["", *_table(rows)]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _gates(gates: dict[str, Any]) -> list[str]:
    lines = ["", f"routing mode now: {gates.get('current_mode') or 'unknown (no routing rows)'}"]
    for gate in gates["gates"]:
        verdict = "allowed" if gate["allowed"] else "not yet"
        lines.append(
            f"  {gate['from_mode']} → {gate['to_mode']}: {verdict} "
            f"({gate['runs']}/{gate['min_runs']} runs in {gate['window_days']} days)"
        )
        for check in gate["checks"]:
            ok = check.get("ok")
            mark = "·" if ok is None else ("ok" if ok else "NO")
            lines.append(
                f"    {mark:>2} {check['name']}: {_num(check.get('value'))} (threshold {_num(check.get('threshold'))})"
            )
        for item in gate.get("manual", []):
            lines.append(f"     ? {item}")
    return lines


def _counts(counts: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{name}: " + ", ".join(f"{value} {n}" for value, n in list(values.items())[:6])
        for name, values in counts.items()
    )


def _rates(rates: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{name} {rate['value'] * 100:.0f}%" for name, rate in rates.items() if rate.get("value") is not None
    )


def _notes(metric: dict[str, Any]) -> list[str]:
    out = []
    if metric.get("refused"):
        out.append(f"{metric['file']}: not read ({metric.get('refused')})")
    if metric.get("truncated"):
        out.append(f"{metric['file']}: larger than audit_max_bytes; its oldest rows were left out")
    if metric.get("skipped"):
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(metric["skipped"].items()))
        out.append(f"{metric['name']}: lines skipped: {why}")
    return out


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows]


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
