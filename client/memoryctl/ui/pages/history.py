"""History: the timeline of every change (apply, promote, reject, hand edit, forget, restore — and consolidation,
archive and TTL once they record changes), observations and remembered entries, newest first, 50 at a time. A
change opens with its record and each file's diff (``changes.show``), whether a restore undid it, and a Restore
button whose confirm page shows the restore's dry run — every file it would put back, as a diff, or the conflict
that stops it — before ``restore`` runs."""

from __future__ import annotations

import re

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from memoryctl.ui.daemon import DaemonError
from memoryctl.ui.pages import PAGE_SIZE, UI, after_write, form, url
from memoryctl.ui.render import diff_lines

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
TYPES = ("", "change", "observation", "remember")


def routes(ui: UI) -> list[Route]:
    def timeline(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        until = request.query_params.get("until", "")[:40] or None
        run = request.query_params.get("run", "")[:128] or None
        kind = request.query_params.get("type", "")
        kind = kind if kind in TYPES else ""
        got = ui.call(ws, "timeline", until=until, run_id=run, limit=PAGE_SIZE)
        events = [e for e in got["events"] if not kind or e.get("type") == kind]
        older = None
        if got.get("truncated") and got["events"]:
            older = url(request.url.path, until=got["events"][-1]["ts"], run=run, type=kind)
        return ui.page(request, "history.html", events=events, older=older, run=run, kind=kind, types=TYPES)

    def change(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        run_id = _run(request)
        shown = ui.call(ws, "changes.show", run_id=run_id)
        files = [dict(f, lines=diff_lines(f.get("diff", ""))) for f in shown["files"]]
        done = request.query_params.get("done", "")[:20]
        return ui.page(request, "change.html", change=shown, files=files, done=done)

    def restore_confirm(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        run_id = _run(request)
        shown = ui.call(ws, "changes.show", run_id=run_id)
        try:
            dry = ui.call(ws, "restore", run_id=run_id, dry_run=True)
            blocked = None
        except DaemonError as exc:
            dry, blocked = None, exc
        diffs = [dict(d, lines=diff_lines(d.get("diff", ""))) for d in (dry or {}).get("diffs", [])]
        return ui.page(request, "restore.html", change=shown, dry=dry, diffs=diffs, blocked=blocked)

    async def restore(request: Request) -> RedirectResponse:
        ui.writable()
        ws = ui.ws(request)
        run_id = _run(request)
        reason = form(request).get("reason") or "restored in memoryctl ui"
        done = await run_in_threadpool(ui.call, ws, "restore", run_id=run_id, reason=reason[:2000])
        return after_write(f"/w/{ws}/change/{done['run_id']}?done=restore")

    return [
        Route("/w/{ws}/history", timeline),
        Route("/w/{ws}/change/{run_id}", change),
        Route("/w/{ws}/restore/{run_id}", restore_confirm, methods=["GET"]),
        Route("/w/{ws}/restore/{run_id}", restore, methods=["POST"]),
    ]


def _run(request: Request) -> str:
    run_id = str(request.path_params["run_id"])
    if not RUN_ID.match(run_id):
        raise HTTPException(404, "Not a run id.")
    return run_id
