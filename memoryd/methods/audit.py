"""audit — what the observability files and history say: outcome, guard, sanitize, routing, recall and lifecycle
metrics, changes by kind, and the routing phase gates. Thin: the domain is memoryd/curate/audit.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import anyio
from pydantic import Field, field_validator

from memoryd.curate import audit as domain
from memoryd.curate.auditapi import AuditResult
from memoryd.methods.services import Ctx, Handlers, services
from memoryd.models import Wire, WorkspaceRef

_AGO = re.compile(r"(\d{1,6})([dhm])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


class AuditParams(Wire):
    workspace: str = WorkspaceRef
    since: str | None = Field(
        default=None,
        max_length=64,
        description="Only rows from then on: an ISO-8601 date or time (2026-03-01, 2026-03-01T08:00:00Z; without "
        "a zone: UTC), or a span back from now (7d, 12h, 30m). The phase gates use their own windows.",
    )
    markdown: bool = Field(default=False, description="Also answer the report as Markdown (the markdown field).")

    @field_validator("since")
    @classmethod
    def _since(cls, value: str | None) -> str | None:
        if value is not None:
            since_moment(value, datetime.now(UTC))
        return value


def since_moment(value: str, now: datetime) -> datetime:
    """``since`` as a moment: a span back from ``now`` or an ISO-8601 date/time (naive: UTC)."""
    ago = _AGO.fullmatch(value.strip())
    if ago is not None:
        return now - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            "since: an ISO-8601 date or time (2026-03-01, 2026-03-01T08:00Z) or a span (7d, 12h, 30m)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def register(d: Handlers) -> None:
    @d.register("audit", AuditParams, AuditResult)
    async def audit(ctx: Ctx, p: AuditParams) -> AuditResult:
        """Summaries of the workspace's data/memory/observability/ files (update outcomes, guard, sanitize, daily
        routing, recall for prompts, lifecycle runs) and of history.jsonl (changes by kind), from one summarizer
        driven by configuration; and the routing phase gates: whether the numbers allow moving from compatible to
        preferred and from preferred to required. Each file is read from its end, at most audit_max_bytes; lines
        that are torn, not JSON or of the wrong shape are skipped and counted. Reads only."""
        app = services(ctx)
        ws = await app.workspace(p.workspace)
        await app.trace.flush()  # recalls answered before this call are in the rows it reads
        now = datetime.now(UTC)
        since = None if p.since is None else since_moment(p.since, now)
        settings = app.settings.observability
        return await anyio.to_thread.run_sync(
            lambda: domain.audit(ws.path, ws.id, settings, now, since, markdown=p.markdown)
        )
