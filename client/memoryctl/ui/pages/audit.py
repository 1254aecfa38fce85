"""The audit metrics panel — a marked place for issue 22's ``audit`` (outcome and guard rates with the "passed"
baseline, recall trigger and hit rates). Until the daemon answers an ``audit`` method this returns None and the
metrics page says the panel is not available; when it does, draw its series here with ``render.bars``."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from memoryctl.ui.pages import UI


def panel(ui: UI, workspace_id: str) -> dict[str, Any] | None:
    """What the metrics page shows of the audit metrics (None: the daemon has none to give yet)."""
    return None


def routes(ui: UI) -> list[Route]:
    return []
