"""The rules domain's questions and answers: what observe, compile, resolve, review and the candidates verbs take
and return. Pydantic models defined in the domain, so the domain never imports the wire layer; ``methods/rules.py``
registers them as the RPC params and results (the generated schemas come from these classes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from memoryd.models import Wire, WorkspaceRef
from memoryd.rules.models import ID_PATTERN, CompileRequest, Observation, Rule

Layer = Literal["profile", "override", "candidate"]


class WorkspaceParams(Wire):
    workspace: str = WorkspaceRef
    scope: Literal["workspace"] = Field(default="workspace", description="Rules are per workspace; no 'all' view.")


# --- observe ----------------------------------------------------------------------------------------------------


MAX_DATA_DEPTH = 64  # orjson writes at most 254 levels; evidence needs far fewer


class ObserveParams(WorkspaceParams):
    kind: str = Field(
        pattern=r"^[a-z][a-z0-9_.-]{0,63}$", description="test_result, log, measurement, report, conversation, …"
    )
    text: str = Field(min_length=1, description="The evidence; <private>…</private> spans are stripped.")
    source: str = Field(min_length=1, max_length=256, description="Who produced it: claude-code, pytest, a path, …")
    run_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Append to runs/<run_id>/.")
    model_id: str | None = Field(default=None, pattern=ID_PATTERN)
    fw_version: str | None = Field(default=None, min_length=1, max_length=64)
    tags: list[str] | None = Field(default=None, max_length=32)
    data: dict[str, Any] | None = Field(
        default=None, description=f"Structured details (any JSON object nested at most {MAX_DATA_DEPTH} levels)."
    )
    dry_run: bool = False

    @field_validator("data")
    @classmethod
    def _shallow(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and _deeper_than(value, MAX_DATA_DEPTH):
            raise ValueError(f"data is nested more than {MAX_DATA_DEPTH} levels deep")
        return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether the JSON value nests objects and arrays more than ``limit`` deep (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((inner, depth + 1) for inner in item.values() if isinstance(inner, dict | list))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item if isinstance(inner, dict | list))
    return False


class ObserveResult(Wire):
    observation_id: str
    ts: str
    path: str = Field(description="The observations.jsonl it was appended to, relative to the workspace.")
    dry_run: bool | None = None


# --- compile ----------------------------------------------------------------------------------------------------


class PrepareParams(WorkspaceParams):
    run_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Only this run's observations.")
    model_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Only observations of this model.")
    since: str | None = Field(
        default=None,
        max_length=64,
        description="ISO date or time: observations from then on, compiled before or not (a recompile).",
    )
    restart: bool = Field(default=False, description="Abandon outstanding requests and prepare afresh.")


class PrepareResult(Wire):
    request_id: str | None = Field(description="None when there is nothing to compile.")
    path: str | None = Field(description="compile_request.json, relative to the workspace.")
    observation_count: int = Field(
        description="How many observations the request holds (renamed from `observations`, which is the list "
        "inside `request`)."
    )
    entry_count: int = Field(
        default=0, description="How many daily entries the request offers for consolidation (memoryd.curate)."
    )
    chunk: dict[str, Any] | None = Field(default=None, description="{batch_id, index, of}: large evidence is split.")
    remaining: int = Field(description="Outstanding requests after this one (apply them one by one).")
    resumed: bool = Field(description="True when an outstanding request was handed out again.")
    request: CompileRequest | None = None


class ApplyParams(WorkspaceParams):
    response: dict[str, Any] | None = Field(
        default=None,
        description="The compile response object; <private>…</private> spans are stripped from every string in it.",
    )
    path: str | None = Field(
        default=None, min_length=1, max_length=4096, description="Or a .json file inside the workspace."
    )
    dry_run: bool = Field(default=False, description="Validate and return the planned writes; write nothing.")

    @model_validator(mode="after")
    def _one_source(self) -> ApplyParams:
        if (self.response is None) == (self.path is None):
            raise ValueError("give exactly one of response or path")
        return self


class PlannedWrite(Wire):
    path: str
    action: Literal["create", "update", "delete", "unchanged"]
    layer: Layer | None = None
    rule_id: str | None = None
    revision: int | None = None


class FileDiff(Wire):
    """One file of a change as a unified diff (bounded: ``truncated`` when lines were left out)."""

    path: str
    action: str = Field(description="create, update, delete or unchanged.")
    diff: str = Field(description="Unified diff, before → after; empty when a side is unknown or too large.")
    truncated: bool = False
    after_known: bool = Field(
        default=True,
        description="False when the file changed again and no later backup holds what this change left.",
    )
    too_large: bool = False


class ApplyResult(Wire):
    request_id: str
    run_id: str | None = Field(description="The change's id in history.jsonl and backups/ (None on dry_run).")
    applied: bool
    already_applied: bool = False
    dry_run: bool = False
    writes: list[PlannedWrite]
    demoted: list[str] = Field(default_factory=list, description="Items staged as candidates for low confidence.")
    warnings: list[str] = Field(default_factory=list)
    consolidation: dict[str, Any] | None = Field(
        default=None,
        description="What the consolidation fields did: per target (memory, insights, daily, history) its outcome "
        "and counts, the routing result, the entries marked consolidated (docs/reference/curation.md).",
    )


# --- resolve ----------------------------------------------------------------------------------------------------


class ResolveParams(WorkspaceParams):
    model_id: str = Field(pattern=ID_PATTERN)
    fw_version: str = Field(min_length=1, max_length=64)
    instance_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Include this instance's overrides.")


class TraceEntry(Wire):
    rule_id: str
    layer: Literal["profile", "override"]
    fw_range: str
    priority: int
    path: str
    beat: list[str] = Field(description="Rules that also set this key and lost, strongest first.")


class ResolveResult(Wire):
    model_id: str
    fw_version: str
    instance_id: str | None = None
    facts: dict[str, Any]
    trace: dict[str, TraceEntry]
    rules: list[str] = Field(description="The matching rules, lowest precedence first.")
    generation: int = Field(description="Rule-set generation the answer was computed from.")
    errors: list[str] = Field(default_factory=list, description="Rule files skipped as invalid (last good kept).")


# --- rules ------------------------------------------------------------------------------------------------------


class RulesSearchParams(WorkspaceParams):
    model_id: str | None = Field(default=None, pattern=ID_PATTERN)
    fw_version: str | None = Field(default=None, min_length=1, max_length=64, description="Rules whose range matches.")
    query: str | None = Field(default=None, max_length=10_000, description="Words in rule id, summary or facts.")
    layer: Layer | None = None
    limit: int = Field(default=50, ge=1, le=1000)


class RuleSummary(Wire):
    rule_id: str
    layer: Layer
    model_id: str
    fw_range: str
    priority: int
    confidence: float
    revision: int
    summary: str | None = None
    instance_id: str | None = None
    path: str
    facts: list[str] = Field(description="The fact keys it sets.")


class RulesSearchResult(Wire):
    rules: list[RuleSummary]
    total: int


class RuleRef(WorkspaceParams):
    rule_id: str = Field(pattern=ID_PATTERN)
    layer: Layer | None = Field(default=None, description="When the id exists in more than one layer.")


class RulesShowResult(Wire):
    rule: Rule
    layer: Layer
    path: str
    observations: list[Observation] = Field(description="Its provenance, expanded.")
    missing_observations: list[str] = Field(description="Cited ids no longer in the store.")
    history: list[dict[str, Any]] = Field(description="The history.jsonl changes that touched it, oldest first.")


class RulesDiffParams(RuleRef):
    from_rev: int = Field(ge=1)
    to_rev: int | None = Field(default=None, ge=1, description="Default: the current revision.")


class FactChange(Wire):
    key: str
    before: Any = None
    after: Any = None
    change: Literal["added", "removed", "changed"]


class RulesDiffResult(Wire):
    rule_id: str
    from_rev: int
    to_rev: int
    diff: str = Field(description="Unified diff of the YAML.")
    facts: list[FactChange]


# --- timeline ---------------------------------------------------------------------------------------------------


class TimelineParams(WorkspaceParams):
    since: str | None = Field(default=None, max_length=64, description="ISO date or time (inclusive).")
    until: str | None = Field(default=None, max_length=64, description="ISO date or time (exclusive).")
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    limit: int = Field(default=50, ge=1, le=1000)
    types: list[Literal["observation", "change", "remember"]] | None = Field(
        default=None,
        max_length=3,
        description='Only events of these types (e.g. ["change"]: the newest changes however many notes came '
        "after them); null: all.",
    )


class TimelineEvent(Wire):
    ts: str
    type: Literal["observation", "change", "remember"]
    id: str = Field(description="observation_id, the change's run_id, or the remembered entry's item id (ent_…).")
    summary: str
    op: str | None = Field(default=None, description="Changes: compile.apply, candidates.promote, …")
    kind: str | None = Field(
        default=None,
        description="Observations: their kind. Changes: what a curation change was (consolidate, compact, archive, "
        "ttl), as history records it.",
    )
    run_id: str | None = None
    model_id: str | None = None
    paths: list[str] | None = None


class TimelineResult(Wire):
    events: list[TimelineEvent] = Field(description="Newest first.")
    truncated: bool


# --- candidates -------------------------------------------------------------------------------------------------


class CandidatesListParams(WorkspaceParams):
    model_id: str | None = Field(default=None, pattern=ID_PATTERN)


class CandidatesListResult(Wire):
    candidates: list[RuleSummary]


class CandidateRef(WorkspaceParams):
    rule_id: str = Field(pattern=ID_PATTERN, description="The candidate's id (its file name).")
    model_id: str | None = Field(default=None, pattern=ID_PATTERN, description="When two models share the id.")
    reason: str | None = Field(default=None, max_length=2000, description="Recorded in history.")
    dry_run: bool = False


class CandidateMoveResult(Wire):
    run_id: str | None
    rule_id: str
    writes: list[PlannedWrite]
    dry_run: bool = False
    diffs: list[FileDiff] = Field(default_factory=list, description="With dry_run: each file's diff, now → after.")


class ChangeProgress(Wire):
    op: str = Field(description="What is written: restore, lifecycle.archive, lifecycle.ttl…")
    done: int = Field(description="Files done (pre-images, then the files themselves).")
    total: int = Field(description="Files in all: twice the files the change touches.")


class RulesStatus(Wire):
    profiles: int
    overrides: int
    candidates: int
    observations: int
    uncompiled_observations: int = Field(
        description="Observations no compile.apply has covered yet (what compile.prepare would gather); "
        "`memoryctl hook … Stop` asks the agent to consolidate when they pass MEMORYD_CONSOLIDATE_AFTER."
    )
    unconsolidated_notes: int = Field(
        default=0,
        description="Daily entries of the last consolidate_recent_days no consolidation has folded into MEMORY.md "
        "yet (an outstanding request's included, until an apply covers them); `memoryctl hook … Stop` counts them "
        "with the observations.",
    )
    outstanding_requests: int = Field(description="compile requests prepared and not yet applied")
    generation: int = Field(description="Bumped whenever the loaded rule set changes.")
    errors: list[str] = Field(
        description="Rule files that do not parse (their last good rules stay in effect) and skipped evidence lines."
    )
    recovered: list[str] = Field(description="Changes a crash interrupted, finished at start-up (run ids).")
    error: str | None = None
    change: ChangeProgress | None = Field(
        default=None, description="The change being written right now (a restore, an archive…), None when none is."
    )


# --- forget / restore -------------------------------------------------------------------------------------------


class ForgetParams(WorkspaceParams):
    id: str = Field(pattern=r"^ent_[0-9a-f]{12,40}$", description="The item's id, as remember answered it.")
    reason: str | None = Field(default=None, max_length=2000, description="Recorded in history.")


class MemoryItem(Wire):
    """An entry remember wrote, as data/memory/items.jsonl and forgotten.json describe it (decision 0009)."""

    id: str
    path: str
    heading: str
    first_line: str = Field(default="", description="The entry's first line: with the heading, names its section.")
    start_line: int | None = None
    created_at: str | None = None
    confidence: float = 1.0
    evidence: list[Any] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    revision: int = 1
    deleted_at: str | None = Field(default=None, description="Set by forget: hidden from search and context.")
    deleted_run: str | None = Field(default=None, description="The forget's run_id (restore it to undo).")


class ForgetResult(Wire):
    run_id: str = Field(description="The change's id in history.jsonl: `restore` with it undoes the forget.")
    item: MemoryItem


class RestoreParams(WorkspaceParams):
    run_id: str = Field(
        pattern=ID_PATTERN, description="Any recorded change: a forget, a compile.apply, a promote, an archive…"
    )
    reason: str | None = Field(default=None, max_length=2000, description="Recorded in history.")
    dry_run: bool = Field(
        default=False,
        description="Check and return what the restore would write, each file's diff included; write nothing "
        "(a conflict is the same MEMORY_CONFLICT the restore would meet).",
    )


class RestoreResult(Wire):
    run_id: str | None = Field(description="This restore's own id (restore it to redo the change); None on dry_run.")
    restored: str = Field(description="The run it undid.")
    writes: list[PlannedWrite]
    dry_run: bool = False
    diffs: list[FileDiff] = Field(default_factory=list, description="With dry_run: each file's diff, now → restored.")


# --- the review page's reads: items of a file, one change's diffs ------------------------------------------------


class ItemsParams(WorkspaceParams):
    path: str | None = Field(default=None, max_length=4096, description="Only the items of this memory file.")
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


class ItemsResult(Wire):
    items: list[MemoryItem] = Field(description="By path, then line; forgotten ones carry deleted_at.")
    total: int
    forgotten: int = Field(description="How many of the total are forgotten.")


class ChangeShowParams(WorkspaceParams):
    run_id: str = Field(pattern=ID_PATTERN, description="A change history.jsonl records.")


class ChangeShowResult(Wire):
    run_id: str
    op: str
    ts: str | None = None
    reason: str | None = None
    record: dict[str, Any] = Field(description="The history line, its per-file changes left out (they are `files`).")
    files: list[FileDiff]
    restored_by: str | None = Field(default=None, description="The restore that undid it and is still in force.")
