"""The audit panel of the metrics page: what the daemon's ``audit`` method (issue 22) summarizes of the workspace's
observability rows over the last 30 days — update outcomes and guard rates (with the "passed" baseline), sanitize,
daily routing, recall trigger and hit rates, lifecycle runs, changes by kind — each metric's rates as bars and its
groups as a chart, and the routing phase gates (the current mode, whether the next gate allows moving on, each
check). A daemon without ``audit`` (METHOD_NOT_FOUND) gets no panel: the page says it is not reported."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup
from starlette.routing import Route

from memoryctl.ui.daemon import DaemonError
from memoryctl.ui.pages import UI
from memoryctl.ui.render import bars, meter

WINDOW = "30d"
GROUPS_SHOWN = 8


def panel(ui: UI, workspace_id: str) -> dict[str, Any] | None:
    """What the metrics page shows of the audit metrics (None: the daemon has none to give)."""
    try:
        report = ui.call(workspace_id, "audit", since=WINDOW)
    except DaemonError as exc:
        if exc.name == "METHOD_NOT_FOUND":
            return None
        return {"error": exc, "metrics": [], "gates": None}
    return {"window": WINDOW, "metrics": [_metric(m) for m in report.get("metrics", [])], "gates": report.get("gates")}


def _metric(metric: dict[str, Any]) -> dict[str, Any]:
    total = metric.get("total") or {}
    rates = []
    for name, rate in sorted((total.get("rates") or {}).items()):
        value = rate.get("value")
        rates.append(
            {
                "name": name,
                "value": value,
                "of": f"{rate.get('numerator', 0)} of {rate.get('denominator', 0)}",
                "bar": meter(name, float(rate.get("numerator", 0)), float(rate.get("denominator", 0))),
            }
        )
    groups = (metric.get("groups") or [])[:GROUPS_SHOWN]
    chart: Markup | None = None
    if len(groups) > 1:
        chart = bars(
            str(metric.get("title", "")),
            [str(g.get("key")) for g in groups],
            {"rows": [float(g.get("rows", 0)) for g in groups]},
        )
    return {
        "name": metric.get("name"),
        "title": metric.get("title"),
        "rows": total.get("rows", 0),
        "rates": rates,
        "chart": chart,
        "skipped": metric.get("skipped") or {},
        "refused": metric.get("refused"),
        "truncated": metric.get("truncated"),
        "last_ts": metric.get("last_ts"),
    }


def routes(ui: UI) -> list[Route]:
    return []
