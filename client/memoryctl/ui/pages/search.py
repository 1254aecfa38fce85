"""Search: the workspace's ``search`` with its mode (hybrid, bm25, vector), what each hit came by (``via``: words,
meaning or both), its relevance, the reason when the search was degraded (and its hint), files not yet indexed, and
each hit's snippet with its matched words marked; a hit opens its file at its lines, marked, in context."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from memoryctl.ui.pages import UI, int_arg, url
from memoryctl.ui.render import marked_words, snippet

MODES = ("", "hybrid", "bm25", "vector")
CONTEXT_LINES = 12  # lines shown above a hit when it is opened


def hit_link(ws: str, hit: dict[str, Any]) -> str:
    start = int(hit.get("start_line", 1))
    end = start + max(int(hit.get("lines", 1)), 1) - 1
    link = url(
        f"/w/{ws}/file",
        path=str(hit.get("path", "")),
        **{"from": max(1, start - CONTEXT_LINES)},
        hl=f"{start}-{end}",
        mark=marked_words(str(hit.get("snippet", ""))),
    )
    return f"{link}#L{start}"


def routes(ui: UI) -> list[Route]:
    def search(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        query = request.query_params.get("q", "").strip()
        mode = request.query_params.get("mode", "")
        mode = mode if mode in MODES else ""
        limit = int_arg(request, "limit", 20, 1, 100)
        archive = request.query_params.get("archive") == "1"
        result: dict[str, Any] = {}
        if query:
            params: dict[str, Any] = {"query": query[:2000], "mode": mode or None, "limit": limit}
            if archive:  # archived daily files are searched only when asked (lifecycle.archive)
                params["include_archive"] = True
            result = ui.call(ws, "search", **params)
        hits = [
            dict(h, html=snippet(str(h.get("snippet", ""))), link=hit_link(str(h.get("workspace_id") or ws), h))
            for h in result.get("hits", [])
        ]
        return ui.page(
            request, "search.html", query=query, mode=mode, modes=MODES, result=result, hits=hits, archive=archive
        )

    return [Route("/w/{ws}/search", search)]
