"""A last resort for background tasks: whatever escapes one is logged with its context and ends (or restarts) that
task only, never the task group it runs in (which is the daemon's)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import structlog

log = structlog.get_logger("memoryd.tasks")

RESTART_FIRST_S = 1.0
RESTART_MAX_S = 60.0


async def guarded(
    name: str, fn: Callable[..., Awaitable[Any]], *args: Any, restart: bool = False, **context: Any
) -> None:
    """Run ``fn(*args)``. An exception is logged (``task_failed`` with ``name`` and ``context``, and the
    traceback); then the task ends, or with ``restart`` runs again after a back-off that doubles from
    RESTART_FIRST_S up to RESTART_MAX_S. Cancellation passes through untouched."""
    delay = RESTART_FIRST_S
    while True:
        try:
            await fn(*args)
            return
        except Exception:
            log.exception("task_failed", task=name, restart=restart, **context)
            if not restart:
                return
        await anyio.sleep(delay)
        delay = min(delay * 2, RESTART_MAX_S)


def task(
    name: str, fn: Callable[..., Awaitable[Any]], *args: Any, restart: bool = False, **context: Any
) -> Callable[[], Coroutine[Any, Any, None]]:
    """``guarded`` ready for ``start_soon``: ``tg.start_soon(task("notes", self._run, notes, workspace_id=...))``."""
    return functools.partial(guarded, name, fn, *args, restart=restart, **context)
