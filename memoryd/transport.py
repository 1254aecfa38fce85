"""Unix socket and line framing only: who is on the other end, and where one request ends.

One JSON value per line, UTF-8. A line over ``max_line_bytes`` is answered with REQUEST_TOO_LARGE and skipped up
to its newline; the connection (and everyone else) keeps being served. Requests on one connection are answered in
order; a slow or idle client holds only its own connection.

Bytes in flight per connection are bounded: one partial request line (``max_line_bytes``), the kernel's socket
buffers, and one reply (``max_reply_bytes``, capped by the dispatcher) that is being sent. Reading stops while a
request is handled and its reply sent, so a client that pipelines without reading stalls only itself; one that
has not taken its reply within ``send_timeout_s`` is disconnected (the transport aborted, its reply freed).
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc
import structlog

from memoryd.rpc import error_line

log = structlog.get_logger("memoryd.transport")

_RECEIVE = 256 * 1024


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end, or None where the platform cannot tell."""
    if sys.platform.startswith("linux"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    if sys.platform == "darwin" or "bsd" in sys.platform:
        # LOCAL_PEERCRED (0x001) at SOL_LOCAL (0) answers a struct xucred: version, uid, ngroups, groups[16].
        raw = sock.getsockopt(0, 0x001, struct.calcsize("IIh16I") + 8)
        _version, uid = struct.unpack_from("II", raw)
        return int(uid)
    return None


def uid_allowed(uid: int | None, own_uid: int | None = None) -> bool:
    """Only the daemon's own uid may talk to it. Unknown peers are refused."""
    return uid is not None and uid == (os.getuid() if own_uid is None else own_uid)


LineHandler = Callable[[bytes, int | None, int], Awaitable[bytes | None]]


@dataclass
class Connection:
    conn_id: int
    busy: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


async def serve_connection(  # noqa: C901, PLR0912, PLR0915 (one connection's read loop: framing, limits, drain)
    stream: anyio.abc.SocketStream,
    conn: Connection,
    handle: LineHandler,
    *,
    max_line_bytes: int,
    idle_timeout_s: float,
    draining: anyio.Event,
    send_timeout_s: float = 30.0,
    sent: Callable[[bytes], None] = lambda reply: None,
) -> None:
    """Serve one client. ``sent(reply)`` is called once for every reply ``handle`` returned, when the transport is
    done with it (sent, or the client gone): the dispatcher counts the bytes waiting for clients."""
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    try:
        uid = peer_uid(raw)
    except OSError:
        uid = None
    if not uid_allowed(uid):
        log.warning("peer_refused", peer_uid=uid, conn=conn.conn_id)
        await stream.aclose()
        return
    now = _clock()
    buffer = bytearray()
    discarding = False
    # One cancel scope for the connection's life whose deadline moves after each request: cheaper than a
    # move_on_after per receive (measured ~9 µs a request), and it also bounds a client trickling bytes.
    idle = anyio.CancelScope(deadline=now() + idle_timeout_s)
    sending = 0  # bytes of the reply being sent, while one is
    async with stream:
        with idle:
            while not draining.is_set():
                try:
                    chunk = await stream.receive(_RECEIVE)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                start = 0
                while True:
                    newline = chunk.find(b"\n", start)
                    if newline < 0:
                        break
                    piece = chunk[start:newline]
                    start = newline + 1
                    if discarding:
                        discarding = False
                        buffer.clear()
                        continue
                    if len(buffer) + len(piece) > max_line_bytes:
                        buffer.clear()
                        if not await _send(
                            stream, error_line("REQUEST_TOO_LARGE", limit=max_line_bytes), conn, send_timeout_s
                        ):
                            return
                        continue
                    if buffer:
                        buffer += piece
                        line = bytes(buffer)
                        buffer.clear()
                    else:
                        line = piece
                    if not line.strip():
                        continue
                    conn.busy = True
                    idle.deadline = math.inf  # the idle timeout never cuts a request short
                    reply = None
                    try:
                        reply = await handle(line, uid, conn.conn_id)
                        if reply is not None:
                            # the connection's one scope bounds the send too (a scope per send cost ~10 µs)
                            idle.deadline = now() + send_timeout_s
                            sending = len(reply)
                            await stream.send(reply)
                            sending = 0
                    finally:
                        conn.busy = False
                        if reply is not None:
                            sent(reply)
                            del reply
                    idle.deadline = now() + idle_timeout_s
                    if draining.is_set():
                        return
                if not discarding:
                    buffer += chunk[start:]
                    if len(buffer) > max_line_bytes:
                        buffer.clear()
                        discarding = True
                        if not await _send(
                            stream, error_line("REQUEST_TOO_LARGE", limit=max_line_bytes), conn, send_timeout_s
                        ):
                            return
        if idle.cancelled_caught:
            if sending:  # the client did not take its reply: closing aborts the transport and frees it
                log.warning("send_timeout", conn=conn.conn_id, bytes=sending, timeout_s=send_timeout_s)
            else:
                log.debug("idle_close", conn=conn.conn_id)


def _clock() -> Callable[[], float]:
    """anyio's clock without its per-call backend lookup (~5 µs, twice a request): on asyncio it is the loop's."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # another anyio backend
        return anyio.current_time


async def _send(stream: anyio.abc.SocketStream, data: bytes, conn: Connection, timeout_s: float) -> bool:
    """Send one reply; False (and the caller closes the connection, which aborts the transport and frees what is
    still queued) when the client has not taken it within ``timeout_s``."""
    with anyio.move_on_after(timeout_s):
        await stream.send(data)
        return True
    log.warning("send_timeout", conn=conn.conn_id, bytes=len(data), timeout_s=timeout_s)
    return False
