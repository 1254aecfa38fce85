"""Rules, resolve and provenance. Rules: by model, then firmware range, filtered by model, firmware version, layer
and words, a page at a time. Resolve: a model and firmware version (and instance) → every key's value, the rule that
won it, its layer, range and priority, and the rules it beat. A rule's page is the provenance chain: the fact (the
key asked about, marked) → the rule (its facts, confidence, summary) → the observations it cites (and any cited one
that is missing) → the runs they came from and the recorded changes that wrote the rule."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from memoryctl.ui.daemon import DaemonError
from memoryctl.ui.pages import PAGE_SIZE, UI, int_arg
from memoryctl.ui.render import diff_lines

LAYERS = ("", "profile", "override", "candidate")
RULE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def routes(ui: UI) -> list[Route]:
    def rules(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        q = {k: request.query_params.get(k, "").strip()[:200] for k in ("model", "fw", "layer", "q")}
        layer = q["layer"] if q["layer"] in LAYERS else ""
        page = int_arg(request, "page", 0, 0, 19)
        result = ui.call(
            ws,
            "rules.search",
            model_id=q["model"] or None,
            fw_version=q["fw"] or None,
            layer=layer or None,
            query=q["q"] or None,
            limit=min((page + 1) * PAGE_SIZE, 1000),
        )
        shown = sorted(result["rules"], key=lambda r: (r["model_id"], r["fw_range"], r["layer"], r["rule_id"]))
        shown = shown[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
        models: dict[str, list[dict[str, Any]]] = {}
        for r in shown:
            models.setdefault(str(r["model_id"]), []).append(r)
        more = int(result["total"]) > (page + 1) * PAGE_SIZE
        return ui.page(
            request,
            "rules.html",
            q=q,
            layer=layer,
            layers=LAYERS,
            models=models,
            total=result["total"],
            page=page,
            more=more,
        )

    def resolve(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        q = {k: request.query_params.get(k, "").strip()[:200] for k in ("model", "fw", "instance")}
        answer: dict[str, Any] | None = None
        error: DaemonError | None = None
        if q["model"] and q["fw"]:
            try:
                answer = ui.call(
                    ws, "resolve", model_id=q["model"], fw_version=q["fw"], instance_id=q["instance"] or None
                )
            except DaemonError as exc:
                error = exc
        return ui.page(request, "resolve.html", q=q, answer=answer, error=error)

    def rule(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        rule_id = str(request.path_params["rule_id"])
        layer = request.query_params.get("layer", "")
        shown = ui.call(ws, "rules.show", rule_id=rule_id, layer=layer if layer in LAYERS[1:] else None)
        key = request.query_params.get("key", "")
        revision = int(shown["rule"].get("revision") or 1)
        diff = None
        if revision > 1:
            try:
                diff = ui.call(ws, "rules.diff", rule_id=rule_id, layer=shown["layer"], from_rev=revision - 1)
            except DaemonError:
                diff = None
        runs = sorted({str(o["run_id"]) for o in shown["observations"] if o.get("run_id")})
        return ui.page(
            request,
            "rule.html",
            shown=shown,
            rule=shown["rule"],
            key=key,
            runs=runs,
            diff=diff_lines(diff["diff"]) if diff else None,
            diff_from=revision - 1,
        )

    return [
        Route("/w/{ws}/rules", rules),
        Route("/w/{ws}/resolve", resolve),
        Route("/w/{ws}/rule/{rule_id}", rule),
    ]
