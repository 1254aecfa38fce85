"""Metrics, as charts drawn here in inline SVG (no script): activity per day over the last 1,000 timeline events
(changes by kind, observations, remembered entries), the memory's growth (entries remembered, cumulative), the
embedding backlog and the index's size, the rule counts. The audit metrics of issue 22 (outcome and guard rates,
recall trigger and hit rates) are drawn by ``pages/audit.py`` once the daemon reports them."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import date, timedelta
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from memoryctl.ui.pages import UI, audit
from memoryctl.ui.render import bars, meter

DAYS = 30


def routes(ui: UI) -> list[Route]:
    def metrics(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        status = ui.binding.daemon.call("status", {"workspace": ws})
        (mine,) = [w for w in status["workspaces"] if w.get("workspace_id") == ws] or [{}]
        events = ui.call(ws, "timeline", limit=1000)["events"]
        charts = activity(events)
        vectors = mine.get("vectors") or {}
        backlog = meter("embedded passages", float(vectors.get("embedded", 0)), float(vectors.get("total", 0)))
        return ui.page(
            request,
            "metrics.html",
            ws_status=mine,
            charts=charts,
            backlog=backlog,
            vectors=vectors,
            audit=audit.panel(ui, ws),
            sample=len(events),
        )

    return [Route("/w/{ws}/metrics", metrics)]


def activity(events: list[dict[str, Any]]) -> list[tuple[str, Markup]]:
    """(title, chart) for the last DAYS days the events cover."""
    per_day: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        day = str(e.get("ts", ""))[:10]
        kind = str(e.get("op") or e.get("type") or "other")
        per_day[day][kind] += 1
    if not per_day:
        return []
    last = max(per_day)
    try:
        end = date.fromisoformat(last)
    except ValueError:
        return []
    days = [(end - timedelta(days=n)).isoformat() for n in range(DAYS - 1, -1, -1)]
    changes = sorted({k for c in per_day.values() for k in c if k not in ("observation", "remember")})
    out = []
    if changes:
        out.append(
            (
                "Changes per day, by kind",
                bars("changes", days, {k: [float(per_day[d][k]) for d in days] for k in changes}),
            )
        )
    evidence = {
        "observations": [per_day[d]["observation"] for d in days],
        "remembered": [per_day[d]["remember"] for d in days],
    }
    out.append(("Evidence and entries per day", bars("evidence", days, evidence)))
    total = 0
    growth = []
    before = sum(c["remember"] for d, c in per_day.items() if d < days[0])
    for d in days:
        total += per_day[d]["remember"]
        growth.append(float(before + total))
    out.append(("Entries remembered (cumulative, within the events read)", bars("growth", days, {"entries": growth})))
    return out
