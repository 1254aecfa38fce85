"""observe, compile.prepare / compile.apply, resolve, rules.search / rules.show / rules.diff, timeline,
candidates.list / candidates.promote / candidates.reject — evidence to rules (seed 000); forget / restore — any
recorded change undone (decision 0009)."""

from __future__ import annotations

from typing import Literal

from memoryd.methods.services import Ctx, Handlers, Services, services
from memoryd.rules.api import (
    ApplyParams,
    ApplyResult,
    CandidateMoveResult,
    CandidateRef,
    CandidatesListParams,
    CandidatesListResult,
    ForgetParams,
    ForgetResult,
    ObserveParams,
    ObserveResult,
    PrepareParams,
    PrepareResult,
    ResolveParams,
    ResolveResult,
    RestoreParams,
    RestoreResult,
    RuleRef,
    RulesDiffParams,
    RulesDiffResult,
    RulesSearchParams,
    RulesSearchResult,
    RulesShowResult,
    TimelineParams,
    TimelineResult,
)
from memoryd.workspaces import Workspace


def register(d: Handlers) -> None:
    @d.register("observe", ObserveParams, ObserveResult, writes=True)
    async def observe(ctx: Ctx, p: ObserveParams) -> ObserveResult:
        """Append one observation (evidence) to runs/<run_id>/observations.jsonl or data/memory/observations.jsonl."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        return await app.rules.observe(
            ws,
            p.kind,
            p.text,
            p.source,
            run_id=p.run_id,
            model_id=p.model_id,
            fw_version=p.fw_version,
            tags=p.tags,
            data=p.data,
            dry_run=p.dry_run,
        )

    @d.register("compile.prepare", PrepareParams, PrepareResult, writes=True)
    async def prepare(ctx: Ctx, p: PrepareParams) -> PrepareResult:
        """Gather uncompiled observations, the current rules and the daily notes not consolidated yet (with
        MEMORY.md's and INSIGHTS.md's sections and the open questions) into compile_request.json for the host's
        LLM; a progress record is written before each chunk is handed out."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=True)
        return await app.curate.prepare(ws, run_id=p.run_id, model_id=p.model_id, since=p.since, restart=p.restart)

    @d.register("compile.apply", ApplyParams, ApplyResult, writes=True)
    async def apply(ctx: Ctx, p: ApplyParams) -> ApplyResult:
        """Validate a compile response and write rules, candidates and overrides, and its consolidation
        (memory_update merged into MEMORY.md, daily_sections, history_entry, insights_update) as one change
        (journaled, idempotent, restorable)."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        result = await app.curate.apply(ws, response=p.response, path=p.path, dry_run=p.dry_run)
        return await app.runtime.wrote(ws, result)

    @d.register("resolve", ResolveParams, ResolveResult)
    async def resolve(ctx: Ctx, p: ResolveParams) -> ResolveResult:
        """Merged facts for a model and firmware version, and for every key the winning rule and why."""
        app = services(ctx)
        return await app.rules.resolve(await app.workspace(p.workspace), p.model_id, p.fw_version, p.instance_id)

    @d.register("rules.search", RulesSearchParams, RulesSearchResult)
    async def rules_search(ctx: Ctx, p: RulesSearchParams) -> RulesSearchResult:
        """List rules by model, firmware version, layer and words."""
        app = services(ctx)
        ws = await app.workspace(p.workspace)
        return await app.rules.search(
            ws, model_id=p.model_id, fw_version=p.fw_version, query=p.query, layer=p.layer, limit=p.limit
        )

    @d.register("rules.show", RuleRef, RulesShowResult)
    async def rules_show(ctx: Ctx, p: RuleRef) -> RulesShowResult:
        """One rule with its provenance observations expanded and its change history."""
        app = services(ctx)
        return await app.rules.show(await app.workspace(p.workspace), p.rule_id, p.layer)

    @d.register("rules.diff", RulesDiffParams, RulesDiffResult)
    async def rules_diff(ctx: Ctx, p: RulesDiffParams) -> RulesDiffResult:
        """Compare two revisions of a rule (from the backups kept by every change)."""
        app = services(ctx)
        return await app.rules.diff(await app.workspace(p.workspace), p.rule_id, p.from_rev, p.to_rev, p.layer)

    @d.register("timeline", TimelineParams, TimelineResult)
    async def timeline(ctx: Ctx, p: TimelineParams) -> TimelineResult:
        """Observations, the entries remember wrote and changes (apply, promote, reject, hand edit, forget,
        restore) interleaved by time, newest first. A forget names what it hid: item id, path:line, first line."""
        app = services(ctx)
        ws = await app.workspace(p.workspace)
        return await app.rules.timeline(ws, since=p.since, until=p.until, run_id=p.run_id, limit=p.limit, types=p.types)

    @d.register("candidates.list", CandidatesListParams, CandidatesListResult)
    async def candidates_list(ctx: Ctx, p: CandidatesListParams) -> CandidatesListResult:
        """Low-confidence rules waiting for review."""
        app = services(ctx)
        return await app.rules.candidates(await app.workspace(p.workspace), p.model_id)

    @d.register("candidates.promote", CandidateRef, CandidateMoveResult, writes=True)
    async def candidates_promote(ctx: Ctx, p: CandidateRef) -> CandidateMoveResult:
        """Move a candidate into profiles/ (or its instance's overrides), with history and a backup."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        return await app.runtime.wrote(ws, await _move(app, ws, p, "promote"))

    @d.register("forget", ForgetParams, ForgetResult, writes=True)
    async def forget(ctx: Ctx, p: ForgetParams) -> ForgetResult:
        """Soft-delete a memory item (an entry remember wrote): hidden from search and context, kept in its file for
        audit, recorded in history as a change with its own run_id; `restore` with that run_id undoes it."""
        app = services(ctx)
        return await app.rules.forget(await app.workspace(p.workspace, write=True), p.id, p.reason)

    @d.register("restore", RestoreParams, RestoreResult, writes=True)
    async def restore(ctx: Ctx, p: RestoreParams) -> RestoreResult:
        """Undo any recorded change (forget, compile.apply, candidates.promote/reject, lifecycle.archive/ttl,
        restore): every file it touched goes back to its backup byte for byte (a file it created is deleted), as a
        new change with its own run_id. A file changed since is refused (MEMORY_CONFLICT names the later change to
        restore first). status shows a long restore's progress (rules.change)."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        if p.dry_run:
            return await app.rules.restore(ws, p.run_id, p.reason, p.dry_run)
        async with app.runtime.deferred(ws):  # an archive undone: thousands of files, indexed once
            return await app.runtime.wrote(ws, await app.rules.restore(ws, p.run_id, p.reason))

    @d.register("candidates.reject", CandidateRef, CandidateMoveResult, writes=True)
    async def candidates_reject(ctx: Ctx, p: CandidateRef) -> CandidateMoveResult:
        """Remove a candidate (its pre-image stays in backups/, the reason in history)."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        return await app.runtime.wrote(ws, await _move(app, ws, p, "reject"))


async def _move(
    app: Services, ws: Workspace, p: CandidateRef, action: Literal["promote", "reject"]
) -> CandidateMoveResult:
    return await app.rules.move_candidate(
        ws, p.rule_id, action, model_id=p.model_id, reason=p.reason, dry_run=p.dry_run
    )
