"""Lifecycle runs per workspace: archive and TTL, asked for (``lifecycle.archive`` / ``lifecycle.ttl``) or
automatic (the ``lifecycle_auto`` setting). The work is :mod:`memoryd.curate.lifecycle`'s; this module runs it under
the workspace's change lock (the rules service's: one change at a time per workspace, whoever makes it) in a worker
thread, and schedules the automatic runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import date

import anyio
import structlog

from memoryd.curate import lifecycle
from memoryd.curate.lifecycle import LifecycleAction, Outcome
from memoryd.errors import AppError
from memoryd.rules.service import RulesService
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import LifecycleSettings
from memoryd.workspaces import Registry, Workspace

log = structlog.get_logger("memoryd.lifecycle")
ACTIONS: tuple[LifecycleAction, ...] = ("archive", "ttl")

Claim = Callable[[Workspace], Awaitable[bool]]  # take the workspace's write lock: False when another daemon holds it
Index = Callable[[Workspace, list[str]], Awaitable[None]]  # index the files a change wrote


class LifecycleService:
    def __init__(self, settings: LifecycleSettings, rules: RulesService) -> None:
        self.settings = settings
        self.rules = rules

    async def run(
        self,
        ws: Workspace,
        action: LifecycleAction,
        *,
        older_than_days: int | None = None,
        dry_run: bool = False,
        today: date | None = None,
    ) -> Outcome:
        """Plan ``action`` for ``ws`` (ages counted from ``today``, default the local date) and carry it out unless
        ``dry_run``: one recorded change, one row in lifecycle.jsonl."""
        day = today or date.today()

        def work(wr: WorkspaceRules) -> Outcome:
            if action == "archive":
                plan = lifecycle.plan_archive(wr.root, self.settings, day, older_than_days)
            else:
                plan = lifecycle.plan_ttl(wr.root, self.settings, day, older_than_days)
            return lifecycle.run(wr.root, plan, dry_run=dry_run, progress=wr.reporter(f"lifecycle.{action}"))

        outcome = await self.rules.change(ws, work)
        log.info(
            "lifecycle_run",
            workspace_id=ws.id,
            run_id=outcome.run_id,
            action=action,
            dry_run=dry_run,
            files=len(outcome.files),
            bytes=outcome.bytes,
            skipped=len(outcome.skipped),
            remaining=outcome.remaining,
        )
        return outcome

    async def auto(self, registry: Registry, claim: Claim, index: Index) -> None:
        """Every ``auto_interval_hours``: archive, then TTL, on every registered workspace this daemon may write —
        dry runs unless ``auto_apply``. A failure is logged and leaves the next workspace and the next round be."""
        while True:
            await anyio.sleep(self.settings.auto_interval_hours * 3600)
            await self.auto_round(registry, claim, index)

    async def auto_round(self, registry: Registry, claim: Claim, index: Index) -> list[Outcome]:
        outcomes = []
        for ws in registry.all():
            try:
                if not await claim(ws):
                    continue
                for action in ACTIONS:
                    outcome = await self.run(ws, action, dry_run=not self.settings.auto_apply)
                    outcomes.append(outcome)
                    if outcome.recorded:
                        await index(ws, [f.path for f in outcome.files])
            except AppError as exc:
                log.warning("lifecycle_auto_failed", workspace_id=ws.id, error=exc.name)
            except Exception:
                log.exception("lifecycle_auto_failed", workspace_id=ws.id)
        return outcomes
