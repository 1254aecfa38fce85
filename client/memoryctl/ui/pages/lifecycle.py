"""Lifecycle: archive daily files past their age and expire what is past its TTL (``lifecycle.archive`` /
``lifecycle.ttl``), only after a dry run. The form asks for the action and, optionally, the age; its dry run (a POST:
it writes the run's row in lifecycle.jsonl, nothing else) shows the risk summary — every file the run would touch,
with its bytes and what would happen to it, the files it would skip and why, what would be left for a next run —
and only that page offers the run, which must name a dry run this page made. The run is one recorded change
(history, backups; restore undoes it), shown after it like every write."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from memoryctl.ui.pages import UI, after_write, form

ACTIONS = ("archive", "ttl")


def routes(ui: UI) -> list[Route]:
    previewed: dict[str, tuple[str, str, int | None]] = {}  # dry run id → (workspace, action, older_than_days)

    def page(request: Request) -> HTMLResponse:
        ui.ws(request)
        return ui.page(request, "lifecycle.html", actions=ACTIONS, preview=None)

    async def dry_run(request: Request) -> HTMLResponse:
        ui.writable()  # a dry run writes its row in lifecycle.jsonl: read-only pages offer none
        ws = ui.ws(request)
        action, days = _params(form(request))
        preview = await run_in_threadpool(ui.call, ws, f"lifecycle.{action}", older_than_days=days, dry_run=True)
        previewed[str(preview["run_id"])] = (ws, action, days)
        return ui.page(request, "lifecycle.html", actions=ACTIONS, preview=preview, days=days)

    async def run(request: Request) -> RedirectResponse | HTMLResponse:
        ui.writable()
        ws = ui.ws(request)
        fields = form(request)
        planned = previewed.get(fields.get("dry_run_id", ""))
        if planned is None or planned[0] != ws:
            raise HTTPException(409, "Run the dry run first: a lifecycle run is offered only after its risk summary.")
        _, action, days = planned
        done = await run_in_threadpool(ui.call, ws, f"lifecycle.{action}", older_than_days=days)
        previewed.pop(fields["dry_run_id"], None)
        if done.get("recorded"):
            return after_write(f"/w/{ws}/change/{done['run_id']}?done={action}")
        return ui.page(request, "lifecycle.html", actions=ACTIONS, preview=None, nothing=done)

    return [
        Route("/w/{ws}/lifecycle", page, methods=["GET"]),
        Route("/w/{ws}/lifecycle/dry-run", dry_run, methods=["POST"]),
        Route("/w/{ws}/lifecycle/run", run, methods=["POST"]),
    ]


def _params(fields: dict[str, str]) -> tuple[str, int | None]:
    action = fields.get("action", "")
    if action not in ACTIONS:
        raise HTTPException(400, "Choose archive or ttl.")
    raw = fields.get("older_than_days", "").strip()
    if not raw:
        return action, None
    if not raw.isdigit() or int(raw) > 100_000:
        raise HTTPException(400, "older_than_days is a number of days, 0-100000.")
    return action, int(raw)
