"""remember, search, get, index, validate — the Markdown memory (seed 003), per workspace or the owner's view."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

import anyio
import orjson
from pydantic import AfterValidator, Field, field_validator, model_validator

from memoryd.methods.services import Ctx, Handlers, Services, services
from memoryd.models import Degraded, OwnerToken, Wire, WorkspaceRef
from memoryd.notes.api import (
    FilesResult,
    GetResult,
    IndexReport,
    RememberResult,
    SearchHit,
    ValidationReport,
    WorkspaceHits,
)
from memoryd.notes.items import ItemFields
from memoryd.notes.search import Options
from memoryd.rules.api import _deeper_than
from memoryd.workspaces import Workspace

Scope = Literal["workspace", "all"]
METADATA_MAX_BYTES = 8 * 1024
METADATA_MAX_DEPTH = 8


class ScopedParams(Wire):
    workspace: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="A workspace id (ws_…) or a path inside one; required unless scope is 'all'.",
    )
    scope: Scope = Field(default="workspace", description="'all' is the owner's read-only cross-workspace view.")
    owner_token: str | None = OwnerToken

    @model_validator(mode="after")
    def _scope_needs(self) -> ScopedParams:
        if self.scope == "workspace" and self.workspace is None:
            raise ValueError("workspace is required unless scope is 'all'")
        return self


class RememberParams(Wire):
    workspace: str = WorkspaceRef
    text: str = Field(
        min_length=1,
        description="The entry text; <private>…</private> spans are stripped (any case, spacing or attributes; "
        "nested; an unclosed one to the end), here and in reason and followup. A line that would read as a "
        "Markdown heading, code fence or setext underline is stored with a backslash before it.",
    )
    type: Literal["decision", "event", "summary", "note"] = "note"
    reason: str | None = None
    followup: str | None = None
    keywords: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list,
        max_length=32,
        description="Words the entry should also be found by, best in English and Chinese ('uart timeout', "
        "'串口', '超时'): kept visibly as the last line of the entry's text (`Keywords: uart timeout, 串口, 超时`), "
        "so they are indexed and embedded with it. Split at commas (also ， and 、), <private> spans stripped, "
        "repeats dropped; they count toward remember_max_bytes.",
    )
    confidence: float | None = Field(
        default=None, ge=0, le=1, description="How sure the entry is, 0-1 (its item's confidence; default 1.0)."
    )
    evidence: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list,
        max_length=100,
        description="What it rests on: observation ids (obs_…), other entries' ids (ent_…), run ids, file paths.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description=f"Any JSON object kept with the entry's item (data/memory/items.jsonl), at most "
        f"{METADATA_MAX_BYTES} bytes as JSON, nested at most {METADATA_MAX_DEPTH} levels.",
    )
    dry_run: bool = Field(default=False, description="Return the planned write; write nothing.")
    scope: Literal["workspace"] = Field(default="workspace", description="Writes never take scope 'all'.")

    @field_validator("metadata")
    @classmethod
    def _small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if _deeper_than(value, METADATA_MAX_DEPTH):
            raise ValueError(f"metadata is nested more than {METADATA_MAX_DEPTH} levels deep")
        if len(orjson.dumps(value)) > METADATA_MAX_BYTES:
            raise ValueError(f"metadata is over {METADATA_MAX_BYTES} bytes as JSON")
        return value


def _valid_day(value: str) -> str:
    date.fromisoformat(value)  # ValueError: not a day (2026-02-31): INVALID_PARAMS
    return value


IsoDay = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_valid_day)]


def _day(value: str | None) -> date | None:
    return None if value is None else date.fromisoformat(value)


class SearchParams(ScopedParams):
    query: str = Field(max_length=100_000, description="Any text: words are OR-ranked by BM25; never FTS5 syntax.")
    limit: int = Field(default=8, ge=1, le=100)
    mode: Literal["bm25", "vector", "hybrid"] | None = Field(
        default=None,
        description="bm25: words only; vector: meaning only; hybrid: both, fused. Default: hybrid when the "
        "workspace has vectors, else bm25 (and `degraded` says why).",
    )
    snippet_max_chars: int | None = Field(
        default=None,
        ge=20,
        le=4000,
        description="Snippet length in characters, markers included; default the snippet_max_chars setting (700).",
    )
    also: list[Annotated[str, Field(max_length=10_000)]] = Field(
        default_factory=list,
        max_length=4,
        description="The same question in other words or the other language (an English and a Chinese phrasing): "
        "each is searched too and the passages fused into one ranking, each kept at its best.",
    )
    since: IsoDay | None = Field(
        default=None,
        description="Prefer entries dated on or after this day (an entry's heading date, else its daily file's). "
        "Without since/until, a date or relative time in the query (2026-02-24, Jan 8, 1月8日, last Tuesday, "
        "yesterday, 上周, last month) is read as the window, and left out of the words searched.",
    )
    until: IsoDay | None = Field(default=None, description="Prefer entries dated on or before this day.")
    now: IsoDay | None = Field(
        default=None, description="The day relative times in the query are read from; default today."
    )
    include_archive: bool | None = Field(
        default=None,
        description="Search archived daily files (memory/archive/, moved there by lifecycle.archive) too; default "
        "the search_include_archive setting (off: they stay indexed and readable with get, but out of answers).",
    )


class SearchResult(Wire):
    hits: list[SearchHit]
    stale: bool = Field(description="True when the watcher has changes not yet indexed; see pending.")
    pending: list[str] = Field(default_factory=list, description="Files waiting to be indexed.")
    scope: Scope = "workspace"
    mode: str = Field(default="bm25", description="The mode the search ran in (bm25 when vectors could not serve).")
    degraded: Degraded | None = Field(
        default=None, description="Why the search used less than asked (reason, hint); None when it did not."
    )


class GetParams(Wire):
    workspace: str = WorkspaceRef
    path: str = Field(min_length=1, max_length=4096, description="Relative to the workspace (as search returns it).")
    from_line: int = Field(default=1, ge=1)
    lines: int = Field(default=40, ge=1, le=200)


class FilesParams(Wire):
    workspace: str = WorkspaceRef
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


class IndexParams(ScopedParams):
    full: bool = Field(default=False, description="Rebuild from the files instead of an incremental pass.")
    rebuild_vectors: bool = Field(
        default=False,
        description="Drop the workspace's vectors and embed everything again with the current model (after a "
        "model or dimension change: status and search name it as vector_dimension_mismatch or vector_model_mismatch).",
    )


class IndexResult(Wire):
    workspaces: list[IndexReport]
    ms: float


class ValidateParams(ScopedParams):
    pass


class ValidateResult(Wire):
    ok: bool
    reports: list[ValidationReport]


async def targets(app: Services, params: ScopedParams) -> list[Workspace]:
    if params.scope == "all":
        app.owner.check(params.owner_token)
        return app.registry.all()
    assert params.workspace is not None
    return [await app.workspace(params.workspace)]


def register(d: Handlers) -> None:
    @d.register("remember", RememberParams, RememberResult, writes=True)
    async def remember(ctx: Ctx, p: RememberParams) -> RememberResult:
        """Append an entry to today's daily file memory/YYYY-MM-DD.md (one append + fsync); immediately searchable."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=not p.dry_run)
        result = await app.notes.remember(
            ws,
            kind=p.type,
            text=p.text,
            reason=p.reason,
            followup=p.followup,
            dry_run=p.dry_run,
            keywords=tuple(p.keywords),
            item=ItemFields(confidence=p.confidence, evidence=tuple(p.evidence), metadata=p.metadata),
        )
        return result

    @d.register("search", SearchParams, SearchResult)
    async def search(ctx: Ctx, p: SearchParams) -> SearchResult:
        """BM25 search over the workspace's Markdown memory (Chinese and exact identifiers work). A hit is a
        passage: a bullet with its continuation lines, a fenced code block, or up to 8 lines of a paragraph, inside
        a `##` section. start_line/lines name the passage (`get` reads exactly it), section_start_line and
        section_lines its section; the snippet wraps matched words in **…**. Several passages of one section may
        come back as separate hits. scope 'all' (owner token) fans out over every workspace, read-only, merged
        by score."""
        app = services(ctx)
        workspaces = await targets(app, p)
        limit = app.notes.search_limit(p.limit)
        options = Options(
            also=tuple(p.also),
            since=_day(p.since),
            until=_day(p.until),
            today=_day(p.now),
            include_archive=p.include_archive,
        )
        answers: list[tuple[Workspace, WorkspaceHits]] = []

        async def one(ws: Workspace) -> None:
            answers.append((ws, await app.notes.search(ws, p.query, limit, p.snippet_max_chars, p.mode, options)))

        if len(workspaces) == 1:  # the common case: no task group (its setup is a tenth of a search on the loop)
            await one(workspaces[0])
        else:
            async with anyio.create_task_group() as tg:
                for ws in workspaces:
                    tg.start_soon(one, ws)
        if len(answers) == 1:  # one workspace: already ranked
            hits = answers[0][1].hits
        else:
            merged = [h for _, a in answers for h in a.hits]
            hits = sorted(merged, key=lambda h: (-h.score, h.workspace_id, h.path, h.start_line))[:limit]
        if p.scope == "all":  # name the workspace of each pending file
            pending = sorted(f"{ws.id}:{f}" for ws, a in answers for f in a.pending)
        else:
            pending = [f for _, a in answers for f in a.pending]
        return SearchResult(
            hits=hits,
            stale=any(a.stale for _, a in answers),
            pending=pending,
            scope=p.scope,
            mode=answers[0][1].mode if len({a.mode for _, a in answers}) == 1 else "mixed",
            degraded=next((a.degraded for _, a in answers if a.degraded is not None), None),
        )

    @d.register("get", GetParams, GetResult)
    async def get(ctx: Ctx, p: GetParams) -> GetResult:
        """Read up to 200 lines of a memory file: Markdown under memory/, or rule YAML under spec/memory/profiles/,
        spec/memory/candidates/ and data/memory/overrides/ (the files search finds)."""
        app = services(ctx)
        ws = await app.workspace(p.workspace)
        return await app.notes.get(ws, p.path, p.from_line, p.lines)

    @d.register("files", FilesParams, FilesResult)
    async def files(ctx: Ctx, p: FilesParams) -> FilesResult:
        """The workspace's Markdown memory files as the index has them (path, kind, size, time): MEMORY.md,
        INSIGHTS.md, HISTORY.md, the daily files newest first, then the archive; a page at a time."""
        app = services(ctx)
        return await app.notes.files(await app.workspace(p.workspace), p.offset, p.limit)

    @d.register("index", IndexParams, IndexResult)
    async def index(ctx: Ctx, p: IndexParams) -> IndexResult:
        """Bring the index up to date (incremental by mtime + sha256), or rebuild it with full."""
        app = services(ctx)
        started = anyio.current_time()
        reports = [
            await app.notes.index(ws, full=p.full, rebuild_vectors=p.rebuild_vectors) for ws in await targets(app, p)
        ]
        return IndexResult(workspaces=reports, ms=round((anyio.current_time() - started) * 1000, 2))

    @d.register("validate", ValidateParams, ValidateResult)
    async def validate(ctx: Ctx, p: ValidateParams) -> ValidateResult:
        """Check memory/ exists, daily heading formats, files outside the layout, broken or escaping links; rule
        files that do not parse, invalid fw_range, unknown provenance, torn evidence lines."""
        app = services(ctx)
        reports = []
        for ws in await targets(app, p):
            report = await app.notes.validate(ws)
            rules = await app.rules.validate(ws)
            problems = report.problems + rules
            ok = report.ok and not any(r.severity == "error" for r in rules)
            reports.append(ValidationReport(workspace_id=report.workspace_id, ok=ok, problems=problems))
        return ValidateResult(ok=all(r.ok for r in reports), reports=reports)
