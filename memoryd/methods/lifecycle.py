"""lifecycle.archive, lifecycle.ttl — daily files archived, archived days and insights past their TTL removed; each
run one recorded change that ``restore`` undoes (docs/howto/lifecycle.md)."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from memoryd.curate.lifecycle import LifecycleAction, Outcome
from memoryd.methods.services import Ctx, Handlers, services
from memoryd.models import Wire, WorkspaceRef


def _valid_day(value: str) -> str:
    date.fromisoformat(value)  # ValueError: not a day (2026-02-31): INVALID_PARAMS
    return value


class LifecycleParams(Wire):
    workspace: str = WorkspaceRef
    older_than_days: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="archive: move daily files dated more than this many days ago (default the "
        "lifecycle_archive_after_days setting, 30). ttl: the TTL of archived days and of INSIGHTS.md bullets alike "
        "for this run (default the settings lifecycle_archive_ttl_days, 365, and lifecycle_insights_ttl_days, 60).",
    )
    dry_run: bool = Field(
        default=False,
        description="List every file the run would touch, with its bytes and what would happen to it; change "
        "nothing (only the run's row in lifecycle.jsonl is written).",
    )
    now: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_valid_day)] | None = Field(
        default=None, description="The day ages are counted from; default today (the daemon's local date)."
    )


class LifecycleFile(Wire):
    path: str = Field(description="Relative to the workspace.")
    bytes: int = Field(description="The file's size for a create or a delete; the bytes removed for an update.")
    action: Literal["create", "update", "delete"]
    bullets: int | None = Field(default=None, description="INSIGHTS.md bullets an update removes.")


class LifecycleSkipped(Wire):
    path: str
    reason: str = Field(description="Why the file is left as it is (a symlink, not UTF-8, an archived copy differs…).")


class LifecycleResult(Wire):
    run_id: str = Field(
        description="The change's id in history.jsonl and backups/ (`restore` undoes it); a dry run's (or an empty "
        "run's) id names only its row in lifecycle.jsonl."
    )
    action: Literal["archive", "ttl"]
    dry_run: bool
    recorded: bool = Field(description="True when files changed: a change under run_id is in history.")
    files: list[LifecycleFile] = Field(description="Every file the run touches (or would): the risk summary.")
    bytes: int = Field(description="The files' bytes together.")
    skipped: list[LifecycleSkipped] = Field(default_factory=list)
    remaining: int = Field(
        default=0, description="Files left for the next run (lifecycle_max_files, lifecycle_max_bytes)."
    )
    days: dict[str, int] = Field(description="The thresholds the run used, in days.")


def result(outcome: Outcome) -> LifecycleResult:
    return LifecycleResult(
        run_id=outcome.run_id,
        action=outcome.action,
        dry_run=outcome.dry_run,
        recorded=outcome.recorded,
        files=[LifecycleFile(path=f.path, bytes=f.bytes, action=f.action, bullets=f.bullets) for f in outcome.files],
        bytes=outcome.bytes,
        skipped=[LifecycleSkipped(path=s.path, reason=s.reason) for s in outcome.skipped],
        remaining=outcome.remaining,
        days=outcome.days,
    )


def register(d: Handlers) -> None:
    async def run(ctx: Ctx, p: LifecycleParams, action: LifecycleAction) -> LifecycleResult:
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=True)  # a dry run writes its row in lifecycle.jsonl
        outcome = await app.lifecycle.run(
            ws,
            action,
            older_than_days=p.older_than_days,
            dry_run=p.dry_run,
            today=None if p.now is None else date.fromisoformat(p.now),
        )
        if outcome.recorded:
            await app.runtime.changed(ws, [f.path for f in outcome.files])
        return result(outcome)

    @d.register("lifecycle.archive", LifecycleParams, LifecycleResult, writes=True)
    async def archive(ctx: Ctx, p: LifecycleParams) -> LifecycleResult:
        """Move daily files memory/YYYY-MM-DD.md dated (by name) more than older_than_days ago to memory/archive/,
        as one recorded change (restore undoes it). Archived files stay indexed; search and recall leave them out
        unless asked (include_archive, the search_include_archive setting)."""
        return await run(ctx, p, "archive")

    @d.register("lifecycle.ttl", LifecycleParams, LifecycleResult, writes=True)
    async def ttl(ctx: Ctx, p: LifecycleParams) -> LifecycleResult:
        """Delete archived daily files past the archive TTL and remove INSIGHTS.md bullets whose `<!-- seen:
        YYYY-MM-DD -->` is past the insights TTL (a bullet without it never expires), as one recorded change: the
        deleted bytes stay in data/memory/backups/<run_id>/ and restore brings them back."""
        return await run(ctx, p, "ttl")
