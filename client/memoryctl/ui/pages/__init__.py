"""What every page module shares: the ``UI`` they are given (the binding to the daemon, the templates) and its
helpers — the workspace a URL names (404 unless this server may show it), a page rendered with its common context,
a write's form, a redirect after a write.

One module per page (overview, memory, search, rules, candidates, history, metrics, lifecycle, audit), each
exporting ``routes(ui)``; a page module that has nothing to serve yet returns no routes and its tab is not shown.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from memoryctl.ui.daemon import Binding

PAGE_SIZE = 50

# The tabs of a workspace: (name, path under /w/<id>/, module that serves it). lifecycle and audit are shown once
# their modules serve routes (issue 22's archive/TTL and audit metrics).
TABS = [
    ("Memory", "memory"),
    ("Search", "search"),
    ("Rules", "rules"),
    ("Resolve", "resolve"),
    ("Candidates", "candidates"),
    ("History", "history"),
    ("Metrics", "metrics"),
]


class UI:
    def __init__(self, binding: Binding, env: Environment) -> None:
        self.binding = binding
        self.env = env
        self.tabs = list(TABS)

    def ws(self, request: Request) -> str:
        """The workspace id the URL names; 404 when this server does not show it (another project's id)."""
        workspace_id = str(request.path_params.get("ws", ""))
        if not self.binding.allows(workspace_id):
            raise HTTPException(404, "No such workspace here.")
        return workspace_id

    def call(self, workspace_id: str, method: str, **params: Any) -> dict[str, Any]:
        return self.binding.call(workspace_id, method, **params)

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        workspace_id = context.get("ws") or request.path_params.get("ws")
        names = self.binding.bound
        body = self.env.get_template(template).render(
            request=request,
            csrf=request.scope.get("csrf", ""),
            writes=self.binding.writes,
            owner=self.binding.owner,
            read_only=self.binding.read_only,
            tabs=self.tabs,
            ws=workspace_id,
            ws_name=names.get(str(workspace_id), workspace_id) if workspace_id else None,
            **context,
        )
        return HTMLResponse(body, status_code=status)

    def writable(self) -> None:
        """Refuse a write when this server offers none (--read-only, the owner's view)."""
        if not self.binding.writes:
            raise HTTPException(403, "This review page is read-only.")


def form(request: Request) -> dict[str, str]:
    """The POST's form (the guard read it and checked its CSRF token), first value of each field."""
    body: bytes = request.scope.get("form_body", b"")
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items() if v}


def after_write(path: str) -> RedirectResponse:
    """A write's answer: see the recorded change (303, so a reload never repeats the write)."""
    return RedirectResponse(path, status_code=303)


def int_arg(request: Request, name: str, default: int, low: int = 0, high: int = 10**9) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        return default
    return min(max(value, low), high)


def url(base: str, /, **query: Any) -> str:
    """``base`` with the query's non-empty values (lists repeat the key)."""
    pairs = [(k, x) for k, v in query.items() for x in (v if isinstance(v, list) else [v]) if x not in (None, "")]
    return base + ("?" + urlencode(pairs) if pairs else "")
