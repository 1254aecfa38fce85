"""structlog, configured once: JSON lines on stderr under a service manager, a console renderer on a TTY.

Never log memory text or query text: only digests, lengths, paths and line ranges (DESIGN.md §4).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _orjson_dumps(obj: Any, default: Any = None) -> bytes:
    return orjson.dumps(obj, default=default or str)


def _epoch(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
    event["ts"] = round(time.time(), 6)
    return event


def configure(level: str = "info", *, json: bool | None = None) -> None:
    if json is None:
        json = not sys.stderr.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if json:
        # Epoch seconds: the ISO formatter costs several µs per line, on every request.
        processors = [
            *shared,
            _epoch,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ]
        factory: Any = structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    else:
        processors = [
            *shared,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            structlog.dev.ConsoleRenderer(colors=False),
        ]
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
