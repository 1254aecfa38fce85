"""context — what a coding agent's host injects: a stable part (rules, long-term memory) and a dynamic part (recall
for the prompt). Thin: the domain is memoryd/context/."""

from __future__ import annotations

from pydantic import Field, model_validator

from memoryd.context.api import ContextResult
from memoryd.context.service import ContextRequest
from memoryd.methods.services import Ctx, Handlers, services
from memoryd.models import Wire, WorkspaceRef
from memoryd.rules.models import ID_PATTERN


class ContextParams(Wire):
    workspace: str = WorkspaceRef
    model_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="With fw_version: the device whose resolved rules are included."
    )
    fw_version: str | None = Field(default=None, min_length=1, max_length=64)
    instance_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Include this instance's overrides (needs model_id)."
    )
    query_text: str | None = Field(
        default=None, max_length=100_000, description="The prompt: recall for it goes into dynamic only."
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The host's session: its stable part is snapshotted, so it gets the same bytes all session.",
    )
    budget_chars: int | None = Field(
        default=None,
        ge=1000,
        le=100_000,
        description="Lower the stable part's ceiling (the context_budget_chars setting) for this call; never raises "
        "it.",
    )

    @model_validator(mode="after")
    def _device(self) -> ContextParams:
        if (self.model_id is None) != (self.fw_version is None):
            raise ValueError("give model_id and fw_version together (or neither)")
        if self.instance_id is not None and self.model_id is None:
            raise ValueError("instance_id needs model_id and fw_version")
        return self


def register(d: Handlers) -> None:
    @d.register("context", ContextParams, ContextResult)
    async def context(ctx: Ctx, p: ContextParams) -> ContextResult:
        """What a host injects into a coding agent's prompt. `stable`: the rules resolved for model_id/fw_version
        (/instance_id) — none without them — then memory/MEMORY.md, rendered deterministically within the
        budget (the last line names what was cut); byte-identical whatever query_text is, and with session_id the
        same bytes for the whole session (a snapshot kept context_snapshot_ttl_hours, across restarts).
        `dynamic`: passages recalled for query_text (none without it; never a candidate rule, which is
        unreviewed: `search` shows those), then the newest daily entries when the prompt asks about the past
        (yesterday, 上周, what did we decide…)."""
        app = services(ctx)
        ws = await app.workspace(p.workspace)
        return await app.context.context(
            ws,
            ContextRequest(
                model_id=p.model_id,
                fw_version=p.fw_version,
                instance_id=p.instance_id,
                query_text=p.query_text,
                session_id=p.session_id,
                budget_chars=p.budget_chars,
            ),
        )
