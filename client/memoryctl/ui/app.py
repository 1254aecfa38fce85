"""The ASGI app: the page modules' routes, the templates, the static files, and errors shown as pages (a daemon
error keeps its stable name and hint). The guard (``guard.py``) wraps it all."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from memoryctl.ui.daemon import Binding, DaemonError
from memoryctl.ui.pages import UI, audit, candidates, history, lifecycle, memory, metrics, overview, rules, search

HERE = Path(__file__).resolve().parent
STATUS = {"MEMORY_CONFLICT": 409, "DAEMON_UNAVAILABLE": 503, "MEMORY_FORBIDDEN": 403, "MEMORY_PATH_TRAVERSAL": 400}


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def build(binding: Binding) -> Starlette:
    ui = UI(binding, environment())
    routes: list[BaseRoute] = []
    for module in (overview, memory, search, rules, candidates, history, metrics, lifecycle, audit):
        served = module.routes(ui)
        routes.extend(served)
        if module in (lifecycle, audit) and served:
            ui.tabs.append((module.__name__.rsplit(".", 1)[-1].title(), module.__name__.rsplit(".", 1)[-1]))
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))

    async def daemon_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DaemonError)
        status = STATUS.get(exc.name, 404 if exc.name.endswith("NOT_FOUND") else 400)
        return _error(ui, request, status, exc.name, exc.message, exc.hint)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(ui, request, exc.status_code, f"HTTP_{exc.status_code}", str(exc.detail), "")

    return Starlette(routes=routes, exception_handlers={DaemonError: daemon_error, HTTPException: http_error})


def _error(ui: UI, request: Request, status: int, name: str, message: str, hint: str) -> HTMLResponse:
    body = ui.env.get_template("error.html").render(
        request=request, name=name, message=message, hint=hint, tabs=[], ws=None, writes=False, owner=False
    )
    return HTMLResponse(body, status_code=status)
