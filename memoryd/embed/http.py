"""An OpenAI-compatible embeddings endpoint (``POST {url}/embeddings``): a local Ollama, llama.cpp or LM Studio
server. Standard library only; the vectors are normalised here whatever the server does.

Bounds (issue 19): every request has a *total* deadline (connect, headers and body together, not a per-read
timeout: an endpoint that trickles a byte a second is cut off when it runs out), enforced by shutting the socket
down from a timer; :meth:`Cancel.set` (the daemon stopping) shuts every request in flight down at once. A reply is
read only up to what the batch can need (``reply_cap``: texts × dimension × a generous bytes-per-number bound, plus
slack), so a reply under any fixed cap cannot make the parse take hundreds of megabytes."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import struct
import threading
import time
import urllib.parse

from memoryd.embed import MAX_TEXT_CHARS, Cancel, EmbeddingUnavailable

PROBE_REPLY_BYTES = 4 * 1024 * 1024  # the dimension probe's reply (dimension unknown yet): 100,000+ numbers
BYTES_PER_NUMBER = 48  # "-1.2345678901234567e-05, " is 25; whitespace-padded pretty printers stay under 48
REPLY_SLACK_BYTES = 64 * 1024  # the envelope (model, usage, object names)
PER_TEXT_SLACK_BYTES = 512  # {"object": "embedding", "index": …} around each vector

UNREACHABLE_HINT = "Start the embedding server, or set embedding_provider to use-m3 (bundled)."


def reply_cap(texts: int, dimension: int | None) -> int:
    """The most bytes a reply for ``texts`` vectors of ``dimension`` numbers can need (None: the probe's)."""
    if dimension is None:
        return PROBE_REPLY_BYTES
    return REPLY_SLACK_BYTES + texts * (PER_TEXT_SLACK_BYTES + dimension * BYTES_PER_NUMBER)


class OpenAICompatible:
    name = "openai-compatible"
    inline = False  # an endpoint can hang: the query embedding threads' budget bounds it

    def __init__(self, url: str, model: str, timeout_s: float, cancel: Cancel | None = None) -> None:
        if not url or not model:
            raise EmbeddingUnavailable(
                "embedding_endpoint_unset",
                "the openai-compatible provider needs embedding_url and embedding_model",
                "Set embedding_url (e.g. http://127.0.0.1:11434/v1) and embedding_model in config/memoryd.yaml.",
            )
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EmbeddingUnavailable(
                "embedding_endpoint_unset", f"embedding_url must be http(s): {url!r}", "Fix embedding_url."
            )
        self.url = url.rstrip("/") + "/embeddings"
        self._parts = urllib.parse.urlsplit(self.url)
        self.model = model
        self.timeout_s = timeout_s
        self.cancel = cancel or Cancel()
        self._known: int | None = None  # the dimension, once the probe has answered
        self.dimension = self._known = len(self._call(["dimension probe"])[0]) // 4  # the endpoint says by answering

    def encode(self, texts: list[str], *, query: bool = False, timeout_s: float | None = None) -> list[bytes]:
        """``timeout_s``: the whole request's deadline (default: the ``embedding_timeout_s`` setting)."""
        return self._call([t[:MAX_TEXT_CHARS] for t in texts], timeout_s) if texts else []

    # --- one request, bounded in time and size -----------------------------------------------------------------

    def _post(self, body: bytes, cap: int, timeout_s: float) -> tuple[int, bytes | None]:
        """(HTTP status, the reply's body or None when it is larger than ``cap``), all within ``timeout_s``."""
        if self.cancel.is_set():
            raise TimeoutError("the daemon is stopping")
        deadline = time.monotonic() + timeout_s
        host, port = self._parts.hostname or "", self._parts.port
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(host, port, timeout=timeout_s)
            if self._parts.scheme == "https"
            else http.client.HTTPConnection(host, port, timeout=timeout_s)
        )
        expired = threading.Event()
        held: list[socket.socket] = []  # the connection's socket (http.client lets go of it for the reply)

        def cut() -> None:  # the deadline passed, or the daemon stops: a blocked read returns at once
            expired.set()
            for sock in list(held):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(timeout_s, cut)
        timer.daemon = True
        timer.start()
        self.cancel.add(cut)
        reply: http.client.HTTPResponse | None = None
        try:
            conn.connect()
            held.append(conn.sock)
            if expired.is_set():
                raise TimeoutError("cut off")
            path = self._parts.path + (f"?{self._parts.query}" if self._parts.query else "")
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            length = reply.getheader("Content-Length")
            if length is not None and length.strip().isdigit() and int(length) > cap:
                return reply.status, None  # refused unread
            raw = reply.read(cap + 1)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set() or self.cancel.is_set() or time.monotonic() >= deadline:
                raise TimeoutError(self._late(timeout_s)) from exc
            raise
        finally:
            timer.cancel()
            self.cancel.discard(cut)
            if reply is not None:
                reply.close()
            conn.close()
        if expired.is_set() or self.cancel.is_set():  # cut off mid-reply: what was read is not the reply
            raise TimeoutError(self._late(timeout_s))
        return reply.status, None if len(raw) > cap else raw

    def _late(self, timeout_s: float) -> str:
        return (
            "cut off: the daemon is stopping" if self.cancel.is_set() else f"no complete reply within {timeout_s:g} s"
        )

    def _call(self, texts: list[str], timeout_s: float | None = None) -> list[bytes]:
        body = json.dumps({"model": self.model, "input": texts}).encode()
        cap = reply_cap(len(texts), self._known)
        try:
            status, raw = self._post(body, cap, self.timeout_s if timeout_s is None else timeout_s)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise EmbeddingUnavailable(
                "embedding_endpoint_unreachable", f"{self.url}: {exc}", UNREACHABLE_HINT
            ) from exc
        if status >= 400:
            if 400 <= status < 500 and status not in (401, 403, 404, 408, 429):
                raise EmbeddingUnavailable(  # this input: too long for the model, a character it cannot take
                    "embedding_text_refused",
                    f"{self.url}: HTTP {status}",
                    "The text is left to BM25; a changed text is tried again.",
                )
            raise EmbeddingUnavailable("embedding_endpoint_unreachable", f"{self.url}: HTTP {status}", UNREACHABLE_HINT)
        if raw is None:
            raise EmbeddingUnavailable(
                "embedding_reply_too_large",
                f"{self.url}: a reply larger than {cap} bytes for {len(texts)} text(s)"
                + ("" if self._known is None else f" of dimension {self._known}"),
                "The reply was refused unread (the text is left to BM25); check embedding_url and embedding_model.",
            )
        try:
            data = sorted(json.loads(raw)["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
            if len(vectors) != len(texts) or not vectors[0] or any(len(v) != len(vectors[0]) for v in vectors):
                raise ValueError("wrong number or size of vectors")
            if not all(math.isfinite(x) for v in vectors for x in v):  # JSON's NaN and Infinity parse as floats
                raise ValueError("a vector that is not a number")
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise EmbeddingUnavailable(
                "embedding_endpoint_invalid",
                f"{self.url}: not an embeddings reply ({exc})",
                "Check that embedding_url is an OpenAI-compatible /v1 base and embedding_model exists there.",
            ) from exc
        if self._known is not None and len(vectors[0]) != self._known:
            raise EmbeddingUnavailable(
                "embedding_dimension_changed",
                f"{self.url}: vectors of {len(vectors[0])} numbers, {self._known} when the daemon started",
                "The endpoint's model changed: restart memoryd, then run `memoryctl index --rebuild-vectors`.",
            )
        out = []
        for vector in vectors:
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            out.append(struct.pack(f"<{len(vector)}f", *(x / norm for x in vector)))
        return out
