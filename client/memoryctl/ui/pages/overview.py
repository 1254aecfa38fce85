"""The workspaces overview (``/``): per workspace its index (files, chunks, segments, last indexed), what waits
(dirty files, the embedding backlog, uncompiled observations, outstanding compile requests), what is degraded
(vectors unusable and why, refused files, rule files that do not parse, a recommended command) and the last
consolidation when history records one. The owner's view (``memoryctl ui --all``) lists every workspace and adds a
search across all of them (read-only, with the owner token, as ``memoryctl search --all``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from memoryctl.ui.daemon import DaemonError
from memoryctl.ui.pages import PAGE_SIZE, UI, int_arg
from memoryctl.ui.render import snippet


def routes(ui: UI) -> list[Route]:
    def overview(request: Request) -> HTMLResponse:
        if ui.binding.owner:
            ui.binding.workspaces()
            status = ui.binding.daemon.call("status", {"scope": "all", "owner_token": ui.binding.token()})
        else:
            (only,) = ui.binding.bound
            status = ui.binding.daemon.call("status", {"workspace": only})
        rows = [_row(ui, w) for w in status.get("workspaces", []) if ui.binding.allows(str(w.get("workspace_id")))]
        return ui.page(request, "overview.html", daemon=status, rows=rows)

    def search_all(request: Request) -> HTMLResponse:
        if not ui.binding.owner:
            return ui.page(request, "error.html", 404, name="NOT_FOUND", message="Only the owner's view searches all.")
        query = request.query_params.get("q", "").strip()
        limit = int_arg(request, "limit", 20, 1, 100)
        result: dict[str, Any] = {}
        if query:
            params = {"scope": "all", "owner_token": ui.binding.token(), "query": query, "limit": limit}
            result = ui.binding.daemon.call("search", params)
        hits = [dict(h, html=snippet(str(h.get("snippet", "")))) for h in result.get("hits", [])]
        return ui.page(request, "search_all.html", query=query, result=result, hits=hits, names=ui.binding.bound)

    return [Route("/", overview), Route("/all/search", search_all)]


def _row(ui: UI, w: dict[str, Any]) -> dict[str, Any]:
    """One workspace's line: its status, and what history says of consolidation (nothing until it records one)."""
    workspace_id = str(w.get("workspace_id"))
    vectors = w.get("vectors") or {}
    rules = w.get("rules") or {}
    problems: list[str] = []
    problem = vectors.get("problem") or {}
    if problem.get("reason") and problem.get("reason") != "semantic_disabled":
        problems.append(f"vectors: {problem.get('reason')} — {problem.get('hint', '')}")
    if w.get("refused_count"):
        problems.append(f"{w['refused_count']} file(s) refused by the index")
    problems.extend(f"rules: {e}" for e in (rules.get("errors") or [])[:5])
    if w.get("error"):
        problems.append(str(w["error"]))
    return {
        "id": workspace_id,
        "status": w,
        "vectors": vectors,
        "rules": rules,
        "problems": problems,
        "semantic_off": problem.get("reason") == "semantic_disabled",
        "consolidation": _last_consolidation(ui, workspace_id),
        "page_size": PAGE_SIZE,
    }


def _last_consolidation(ui: UI, workspace_id: str) -> dict[str, Any] | None:
    """The newest history change that is a consolidation, if the newest 50 changes hold one (notes remembered
    since do not push it out)."""
    try:
        events = ui.call(workspace_id, "timeline", limit=50, types=["change"]).get("events", [])
    except DaemonError:  # a broken workspace still gets its line
        return None
    return next((e for e in events if e.get("type") == "change" and _consolidation(e)), None)


def _consolidation(event: dict[str, Any]) -> bool:
    """A change history records as a consolidation (its kind, or an op of that name)."""
    return event.get("kind") in ("consolidate", "compact") or "consolidat" in str(event.get("op", ""))
