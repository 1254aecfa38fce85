"""Lifecycle — a marked place for issue 22's archive and TTL runs: the page will list what a dry run of
``lifecycle.archive`` / ``lifecycle.ttl`` would move or expire (the risk summary, every file with its bytes and
action) and offer the run itself only after that dry run, confirmed with the CSRF token like every other write.
Until the daemon has those methods this module serves no routes and its tab is hidden."""

from __future__ import annotations

from starlette.routing import Route

from memoryctl.ui.pages import UI


def routes(ui: UI) -> list[Route]:
    return []
