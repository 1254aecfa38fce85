"""structlog, configured once: JSON lines on stderr under a service manager, a console renderer on a TTY.

Never log memory text or query text: only digests, lengths, paths and line ranges (docs/reference/architecture.md).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from typing import Any

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _orjson_dumps(obj: Any, default: Any = None) -> bytes:
    return orjson.dumps(obj, default=default or str)


class BufferedBytesLogger:
    """Writes rendered lines to a binary stream in batches: at most ``max_delay_s`` late, at once for warnings
    and errors, and on ``flush()`` (the daemon flushes on a timer and at exit).

    One write syscall per request line was a third of a ping's round trip; batching keeps "one summary line per
    request" without paying for it on the hot path. Worker threads log too: one lock guards the buffer and the
    write, so no line is lost or written twice when a thread writes while the loop flushes.
    """

    def __init__(self, stream: Any, max_delay_s: float = 0.05, max_bytes: int = 64 * 1024) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._max_delay_s = max_delay_s
        self._max_bytes = max_bytes
        self._oldest = 0.0
        self._lock = threading.Lock()

    def _write(self, message: bytes, urgent: bool) -> None:
        with self._lock:
            if not self._buffer:
                self._oldest = time.monotonic()
            self._buffer += message
            self._buffer += b"\n"
            if urgent or len(self._buffer) >= self._max_bytes or time.monotonic() - self._oldest >= self._max_delay_s:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            try:
                self._stream.write(data)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # stderr closed or gone: there is nowhere left to log to

    def debug(self, message: bytes) -> None:
        self._write(message, False)

    info = debug

    def warning(self, message: bytes) -> None:
        self._write(message, True)

    error = critical = exception = msg = warning


_BUFFERED: BufferedBytesLogger | None = None
_REQUESTS_ON = True


def request(method: str, ms: float, error: str | None, request_id: object, conn: int) -> None:
    """The one summary line per request, on the hot path: rendered straight to the same batched stream with
    the same JSON shape as every other line (structlog's processor chain costs ~8 µs a line; this ~1 µs)."""
    if not _REQUESTS_ON:
        return
    if _BUFFERED is not None:
        _BUFFERED.info(
            orjson.dumps(
                {
                    "method": method,
                    "ms": ms,
                    "error": error,
                    "request_id": request_id,
                    "conn": conn,
                    "event": "request",
                    "level": "info",
                    "ts": time.time(),
                },
                default=str,
            )
        )
    else:
        structlog.get_logger("memoryd.rpc").info(
            "request", method=method, ms=ms, error=error, request_id=request_id, conn=conn
        )


def flush() -> None:
    """Write out buffered log lines (called periodically by the daemon, and at exit)."""
    if _BUFFERED is not None:
        _BUFFERED.flush()


def _epoch(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
    event["ts"] = round(time.time(), 6)
    return event


def configure(level: str = "info", *, json: bool | None = None) -> None:
    if json is None:
        json = not sys.stderr.isatty()
    global _BUFFERED, _REQUESTS_ON
    _REQUESTS_ON = _LEVELS[level] <= logging.INFO
    shared: list[Any] = [structlog.processors.add_log_level]
    _BUFFERED = None
    if json:
        # Epoch seconds: the ISO formatter costs several µs per line, on every request.
        processors = [
            *shared,
            _epoch,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ]
        _BUFFERED = BufferedBytesLogger(sys.stderr.buffer)
        atexit.register(flush)
        buffered = _BUFFERED

        def buffered_factory(*args: Any) -> BufferedBytesLogger:
            return buffered

        factory: Any = buffered_factory
    else:
        processors = [
            *shared,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            structlog.dev.ConsoleRenderer(colors=False),
        ]
        factory = structlog.PrintLoggerFactory(file=sys.stderr)  # a person is watching: no batching
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
