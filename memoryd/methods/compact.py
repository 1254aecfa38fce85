"""lifecycle.compact — archived daily files summarized into HISTORY.md by the host's model, through the compile
exchange (docs/reference/curation.md, "Compaction")."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from memoryd.methods.services import Ctx, Handlers, services
from memoryd.models import Wire, WorkspaceRef


def _valid_day(value: str) -> str:
    date.fromisoformat(value)  # ValueError: not a day: INVALID_PARAMS
    return value


class CompactParams(Wire):
    workspace: str = WorkspaceRef
    older_than_days: int | None = Field(
        default=None, ge=0, le=100_000, description="Archived days dated more than this many days ago (default 30)."
    )
    dry_run: bool = Field(
        default=False,
        description="List the archived files it would summarize, with their bytes; hand out no request, change "
        "nothing (only the run's row in lifecycle.jsonl is written).",
    )
    now: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_valid_day)] | None = Field(
        default=None, description="The day ages are counted from; default today."
    )


class CompactFile(Wire):
    path: str
    bytes: int
    action: Literal["compact"]


class CompactResult(Wire):
    run_id: str = Field(
        description="This run's id in lifecycle.jsonl. The change itself is the compile.apply of the request's "
        "answer (its own run id, history kind compact, `restore` undoes it)."
    )
    files: list[CompactFile] = Field(description="The archived files the request covers (or would).")
    dry_run: bool
    request_id: str | None = Field(
        default=None, description="The compile request to answer (with a history_entry); None on a dry run."
    )
    path: str | None = Field(default=None, description="Its compile_request.json, relative to the workspace.")
    remaining: int = Field(default=0, description="Archived files left for the next compact.")


def register(d: Handlers) -> None:
    @d.register("lifecycle.compact", CompactParams, CompactResult, writes=True)
    async def compact(ctx: Ctx, p: CompactParams) -> CompactResult:
        """Archived daily files (memory/archive/) older than older_than_days and not compacted yet → one compile
        request for the host's model; its answer's history_entry (compile.apply) is appended to HISTORY.md and the
        files are marked compacted, in one recorded change. A dry run lists the files and bytes and touches
        nothing."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=True)  # a dry run writes its row in lifecycle.jsonl
        done = await app.curate.compact(
            ws,
            older_than_days=p.older_than_days,
            dry_run=p.dry_run,
            today=None if p.now is None else date.fromisoformat(p.now),
        )
        return CompactResult(
            run_id=done.run_id,
            files=[CompactFile.model_validate(f) for f in done.files],
            dry_run=done.dry_run,
            request_id=done.request_id,
            path=done.path,
            remaining=done.remaining,
        )
