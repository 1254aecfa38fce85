"""Candidates review: the low-confidence rules compile staged, a page at a time, each with its facts and the
evidence it cites (the observations, expanded). Promote or reject goes through a confirm page that shows the dry
run first — every file it would write, as a diff — and then calls ``candidates.promote`` / ``candidates.reject``
with the reason given; the answer is the recorded change (history, a backup, and restore undoes it)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from memoryctl.ui.daemon import DaemonError
from memoryctl.ui.pages import UI, after_write, form, int_arg
from memoryctl.ui.pages.rules import RULE_ID
from memoryctl.ui.render import diff_lines

PER_PAGE = 10  # each candidate's evidence is one rules.show
ACTIONS = ("promote", "reject")


def routes(ui: UI) -> list[Route]:
    def listing(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        page = int_arg(request, "page", 0)
        model = request.query_params.get("model", "").strip()[:200]
        everything = ui.call(ws, "candidates.list", model_id=model or None)["candidates"]
        shown = []
        for c in everything[page * PER_PAGE : (page + 1) * PER_PAGE]:
            try:
                detail = ui.call(ws, "rules.show", rule_id=c["rule_id"], layer="candidate")
            except DaemonError:
                detail = {"rule": {}, "observations": [], "missing_observations": []}
            shown.append({"summary": c, "rule": detail["rule"], "detail": detail})
        return ui.page(
            request,
            "candidates.html",
            candidates=shown,
            total=len(everything),
            page=page,
            more=len(everything) > (page + 1) * PER_PAGE,
            model=model,
        )

    def confirm(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        rule_id, action = _target(request)
        dry = ui.call(ws, f"candidates.{action}", rule_id=rule_id, dry_run=True)
        diffs = [dict(d, lines=diff_lines(d.get("diff", ""))) for d in dry.get("diffs", [])]
        detail = ui.call(ws, "rules.show", rule_id=rule_id, layer="candidate")
        return ui.page(request, "candidate_confirm.html", action=action, dry=dry, diffs=diffs, detail=detail)

    async def move(request: Request) -> RedirectResponse:
        ui.writable()
        ws = ui.ws(request)
        rule_id, action = _target(request)
        reason = form(request).get("reason") or f"{action}d in memoryctl ui"
        done = await run_in_threadpool(ui.call, ws, f"candidates.{action}", rule_id=rule_id, reason=reason[:2000])
        return after_write(f"/w/{ws}/change/{done['run_id']}?done={action}")

    return [
        Route("/w/{ws}/candidates", listing),
        Route("/w/{ws}/candidates/{rule_id}/{action}", confirm, methods=["GET"]),
        Route("/w/{ws}/candidates/{rule_id}/{action}", move, methods=["POST"]),
    ]


def _target(request: Request) -> tuple[str, str]:
    rule_id = str(request.path_params["rule_id"])
    action = str(request.path_params["action"])
    if action not in ACTIONS or not RULE_ID.match(rule_id):
        raise HTTPException(404, "No such review action.")
    return rule_id, action
