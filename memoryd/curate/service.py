"""The curate domain's face for the methods layer: compile.prepare / compile.apply with consolidation.

The rules service owns the compile exchange and its lock; this service hands it the curator
(:class:`memoryd.curate.consolidate.Consolidator`) and, around an apply, also holds the workspace's notes write lock:
a consolidation rewrites today's daily file (atomically, through the change journal), and a ``remember`` appending
to that file meanwhile would be lost. Lock order: notes write lock, then the rules lock (nothing takes them the other
way round).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from memoryd.curate import compact
from memoryd.curate.consolidate import Consolidator
from memoryd.notes.service import NotesService
from memoryd.rules import api as m
from memoryd.rules.service import RulesService
from memoryd.settings import CurateSettings
from memoryd.workspaces import Workspace


class CurateService:
    def __init__(
        self, settings: CurateSettings, notes: NotesService, rules: RulesService, *, replay_keep: int = 200
    ) -> None:
        """``replay_keep``: observability_replay_keep, the prompts the replay check replays."""
        self.settings = settings
        self.notes = notes
        self.rules = rules
        self.curator = Consolidator(settings, replay_keep)

    async def prepare(
        self,
        ws: Workspace,
        *,
        run_id: str | None = None,
        model_id: str | None = None,
        since: str | None = None,
        restart: bool = False,
    ) -> m.PrepareResult:
        return await self.rules.prepare(
            ws, run_id=run_id, model_id=model_id, since=since, restart=restart, curator=self.curator
        )

    async def apply(
        self,
        ws: Workspace,
        *,
        response: dict[str, Any] | None = None,
        path: str | None = None,
        dry_run: bool = False,
    ) -> m.ApplyResult:
        async with self.notes.get_notes(ws).write_lock:
            return await self.rules.apply(ws, response=response, path=path, dry_run=dry_run, curator=self.curator)

    async def status(self, ws: Workspace) -> m.RulesStatus | None:
        """The rules' status, with the daily notes waiting for a consolidation counted."""
        return await self.rules.status(ws, curator=self.curator)

    async def compact(
        self, ws: Workspace, *, older_than_days: int | None, dry_run: bool, today: date | None = None
    ) -> compact.Compact:
        return await self.rules.locked(
            ws,
            lambda wr: compact.compact(
                self.rules.settings,
                wr,
                self.curator,
                older_than_days=older_than_days,
                dry_run=dry_run,
                today=today,
            ),
        )
