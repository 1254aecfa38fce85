"""The memory browser: the workspace's Markdown memory files (MEMORY.md, INSIGHTS.md, HISTORY.md, the daily files
newest first, the archive), and one file rendered a window of 200 lines at a time (``get``; nothing loads a file
the user did not open), each entry remember wrote shown with its id, a forgotten one struck through with the forget
that hid it (and its restore). ``?hl=a-b`` marks the lines of a search hit and ``mark=`` its matched words.

Its write: forget an entry (a confirm page first, then ``forget``; the answer is the recorded change)."""

from __future__ import annotations

import re
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from memoryctl.ui.pages import PAGE_SIZE, UI, after_write, form, int_arg, url
from memoryctl.ui.render import Entry, document

WINDOW = 200  # lines of a file per page (get's maximum)
ITEM_ID = re.compile(r"^ent_[0-9a-f]{12,40}$")


def routes(ui: UI) -> list[Route]:
    def files(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        page = int_arg(request, "page", 0)
        listed = ui.call(ws, "files", offset=page * PAGE_SIZE, limit=PAGE_SIZE)
        pages = (int(listed.get("total", 0)) + PAGE_SIZE - 1) // PAGE_SIZE
        return ui.page(request, "memory.html", files=listed["files"], total=listed["total"], page=page, pages=pages)

    def show(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        path = request.query_params.get("path", "")
        start = int_arg(request, "from", 1, 1)
        got = ui.call(ws, "get", path=path, from_line=start, lines=WINDOW)
        items = _items_of(ui, ws, got["path"])
        entries = {
            (str(i["heading"]), str(i.get("first_line") or "")): Entry(str(i["id"]), i.get("deleted_run"))
            for i in items["items"]
        }
        yaml = not got["path"].endswith(".md")
        lines = document(got["text"], start, entries, _span(request.query_params.get("hl", "")), _marks(request), yaml)
        total = int(got["total_lines"])
        return ui.page(
            request,
            "file.html",
            path=got["path"],
            lines=lines,
            start=start,
            total=total,
            prev=url(request.url.path, path=got["path"], **{"from": max(1, start - WINDOW)}) if start > 1 else None,
            next=url(request.url.path, path=got["path"], **{"from": start + WINDOW})
            if start + WINDOW <= total
            else None,
            items=items,
        )

    def forget_confirm(request: Request) -> HTMLResponse:
        ws = ui.ws(request)
        item = _item(ui, ws, request)
        return ui.page(request, "forget.html", item=item)

    async def forget(request: Request) -> RedirectResponse:
        from starlette.concurrency import run_in_threadpool

        ui.writable()
        ws = ui.ws(request)
        item_id = _item_id(request)
        reason = form(request).get("reason") or "reviewed in memoryctl ui"
        done = await run_in_threadpool(ui.call, ws, "forget", id=item_id, reason=reason[:2000])
        return after_write(f"/w/{ws}/change/{done['run_id']}?done=forget")

    return [
        Route("/w/{ws}/memory", files),
        Route("/w/{ws}/file", show),
        Route("/w/{ws}/forget/{item_id}", forget_confirm, methods=["GET"]),
        Route("/w/{ws}/forget/{item_id}", forget, methods=["POST"]),
    ]


ITEM_PAGES = 10  # 10,000 entries of one file at most are marked


def _items_of(ui: UI, ws: str, path: str) -> dict[str, Any]:
    """Every item of ``path`` (an archived daily file's too: items keep the path remember wrote them at), paged."""
    paths = [path]
    if path.startswith("memory/archive/"):
        paths.append("memory/" + path.rsplit("/", 1)[-1])
    found: list[dict[str, Any]] = []
    total = forgotten = 0
    for where in paths:
        for page in range(ITEM_PAGES):
            got = ui.call(ws, "items", path=where, offset=page * 1000, limit=1000)
            found.extend(got["items"])
            if page == 0:
                total += int(got["total"])
                forgotten += int(got["forgotten"])
            if len(found) >= total:
                break
    return {"items": found, "total": total, "forgotten": forgotten}


def _span(text: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d{1,9})-(\d{1,9})", text)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _marks(request: Request) -> tuple[str, ...]:
    return tuple(w[:100] for w in request.query_params.getlist("mark")[:12])


def _item_id(request: Request) -> str:
    item_id = str(request.path_params.get("item_id", ""))
    if not ITEM_ID.match(item_id):
        raise HTTPException(404, "Not an item id.")
    return item_id


def _item(ui: UI, ws: str, request: Request) -> dict[str, Any]:
    """The item the URL names, found among its file's items (``?path=``) or, without one, all items' first page."""
    item_id = _item_id(request)
    path = request.query_params.get("path") or None
    listed = ui.call(ws, "items", path=path, limit=1000)
    found: dict[str, Any] | None = next((i for i in listed["items"] if i["id"] == item_id), None)
    if found is None:
        raise HTTPException(404, f"No item {item_id} here.")
    return found
