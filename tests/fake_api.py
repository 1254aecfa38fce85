"""A model API on 127.0.0.1 for the host end-to-end tests (Claude Code, Codex, OpenCode): records every request
body; a subclass says what to answer. Keyless: the hosts are pointed at it with their base-URL settings."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeAPI:
    def __init__(self, prefix: str = "") -> None:
        self.bodies: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                self._send(*api.answer(self.path, body))

            def do_GET(self) -> None:  # model lists
                self._send(
                    "application/json", json.dumps({"data": [{"id": "m", "object": "model"}], "models": []}).encode()
                )

            def _send(self, kind: str, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        """(content type, bytes) for a POST; record ``body`` in ``bodies`` if it is a model request."""
        raise NotImplementedError

    def text(self, n: int) -> str:
        return json.dumps(self.bodies[n], ensure_ascii=False)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sse(events: list[tuple[str | None, dict[str, Any]]]) -> tuple[str, bytes]:
    """Server-sent events: (event name or None, data)."""
    lines = "".join((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n" for name, data in events)
    return "text/event-stream", lines.encode()
