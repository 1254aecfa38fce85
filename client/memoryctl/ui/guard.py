"""Who may use the review page, checked on every request before any page runs (docs/reference/threat-model.md,
"The review page").

- **Host**: only ``127.0.0.1:<port>`` or ``localhost:<port>``. A page of another site that rebinds its own DNS name
  to 127.0.0.1 (DNS rebinding) still sends its own name as Host: 403.
- **Origin** (and ``Sec-Fetch-Site``): a request another site's page makes (a form, a fetch, an image) says so:
  403. A write must carry a same-origin Origin.
- **The session**: ``memoryctl ui`` prints a URL with a one-time token; ``/login?token=…`` exchanges it (once) for
  an HttpOnly, SameSite=Strict cookie holding a fresh random session id. Every other request needs that cookie:
  403 without it.
- **CSRF**: every write is a POST whose form carries the session's CSRF token (compared in constant time): 403
  otherwise.
- Every answer carries a strict Content-Security-Policy (no script at all, styles and images from this server
  only, no framing, forms posting only here), ``nosniff``, a same-origin referrer policy (with ``no-referrer`` Chromium sends ``Origin: null`` on a form post) and ``no-store``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

COOKIE = "memoryd_ui"
CSP = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
FORM_MAX_BYTES = 64 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Session:
    """The one-time login token and, once it is used, the one session and its CSRF token."""

    def __init__(self, login_token: str | None = None) -> None:
        self.login_token: str | None = login_token or secrets.token_urlsafe(32)
        self.session_id: str | None = None
        self.csrf = secrets.token_urlsafe(32)

    def log_in(self, token: str) -> str | None:
        """The new session id if ``token`` is the login token (which is then spent), else None."""
        expected = self.login_token
        if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
            return None
        self.login_token = None
        self.session_id = secrets.token_urlsafe(32)
        return self.session_id

    def valid(self, cookie: str | None) -> bool:
        return (
            cookie is not None
            and self.session_id is not None
            and hmac.compare_digest(cookie.encode(), self.session_id.encode())
        )

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _cookie(headers: dict[str, str]) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header reads as none
        return None
    morsel = jar.get(COOKIE)
    return None if morsel is None else morsel.value


async def _answer(send: Send, status: int, body: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = body.encode("utf-8")
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(data)).encode()),
        *HEADERS,
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def refusal(why: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>403 · memoryd</title>'
        '<link rel="stylesheet" href="/static/app.css"></head><body><main class="refused"><h1>403 Forbidden</h1>'
        f"<p>{why}</p><p>Open the URL <code>memoryctl ui</code> printed: it carries a one-time token. To start "
        "again, stop it and run <code>memoryctl ui</code> once more.</p></main></body></html>"
    )


class Guard:
    """ASGI middleware: the checks above, then the app (with ``scope["csrf"]`` for its forms)."""

    def __init__(self, app: ASGIApp, session: Session, port: int) -> None:
        self.app = app
        self.session = session
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no websockets
        headers = _headers(scope)
        why = self._foreign(scope, headers)
        if why is not None:
            await _answer(send, 403, refusal(why))
            return
        path = scope.get("path", "")
        if path == "/login":
            await self._login(scope, send)
            return
        if not path.startswith("/static/") and not self.session.valid(_cookie(headers)):
            await _answer(send, 403, refusal("No session: this browser has not logged in."))
            return
        if scope.get("method") == "POST":
            body = await _body(receive)
            if body is None:
                await _answer(send, 413, refusal("The form is too large."))
                return
            tokens = parse_qs(body.decode("utf-8", "replace")).get("csrf") or []
            token = tokens[0] if tokens else None
            if not self.session.csrf_ok(token):
                await _answer(send, 403, refusal("The form's CSRF token is missing or wrong."))
                return
            scope["form_body"] = body
            receive = _replay(body)
        scope["csrf"] = self.session.csrf
        await self.app(scope, receive, _with_headers(send, time.perf_counter()))

    def _foreign(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """Why this request does not come from this server's own pages, or None."""
        if headers.get("host") not in self.hosts:
            return "The Host header names another site (a DNS rebinding attempt?)."
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return "The request comes from another site's page."
        if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return "The request comes from another site's page."
        if scope.get("method") not in ("GET", "HEAD", "POST"):
            return "Only GET and POST are served."
        if scope.get("method") == "POST" and origin is None:
            return "A write must say where it comes from (Origin)."
        return None

    async def _login(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = (query.get("token") or [""])[0]
        session_id = self.session.log_in(token) if token else None
        if session_id is None:
            await _answer(send, 403, refusal("This login link is wrong or was used already (it works once)."))
            return
        cookie = f"{COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode()), (b"content-length", b"0"), *HEADERS],
            }
        )
        await send({"type": "http.response.body", "body": b""})


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > FORM_MAX_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _with_headers(send: Send, started: float) -> Send:
    """The security headers on every answer, and ``Server-Timing: app;dur=<ms>`` (bench/bench_ui.py reads it)."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            took = f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()
            message["headers"] = [
                *message.get("headers", []),
                *(h for h in HEADERS if h[0] not in names),
                (b"server-timing", took),
            ]
        await send(message)

    return wrapped
