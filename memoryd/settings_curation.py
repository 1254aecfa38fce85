"""The curation groups of settings (issue "Curate"; docs/reference/curation.md, docs/howto/lifecycle.md): the
policy and consolidation (``curate``), the observability rows and audit (``observability``), the lifecycle
(``lifecycle``). Read with the others through memoryd/settings.py."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from memoryd.settings_base import Group, setting

TooLong = Literal["truncate", "drop"]
OutsideSections = Literal["drop", "keep"]
Resolution = Literal["keep_old", "keep_new", "ask_user", "merge"]

# Preference keys a consolidation may not change silently (docs/reference/curation.md): a bullet "key: value" whose
# value differs between MEMORY.md and an update is a conflict. Matched ignoring case, "_"/"-" as spaces; "*" globs.
CONFLICT_KEYS = (
    "language",
    "* language",
    "communication style",
    "package manager",
    "indent*",
    "python version",
    "node version",
    "test runner",
    "formatter",
    "语言",
    "*语言",
    "包管理器",
    "缩进",
    "沟通风格",
)


RoutingMode = Literal["compatible", "preferred", "required"]


class CurateSettings(Group):
    """Curation policy: what a consolidation may write into MEMORY.md / INSIGHTS.md (sanitize), how much it may
    remove (the loss guard) and which preferences it may not change silently (conflicts). Secrets and
    <private> spans are never written, whatever these say. docs/reference/curation.md."""

    max_bullet_chars: int = setting(
        500,
        "Longest bullet (with its continuation lines) an update may write, in characters.",
        flat="curate_max_bullet_chars",
        ge=20,
    )
    too_long: TooLong = setting(
        "truncate",
        "A longer bullet: truncate (cut to the limit, ending in …) or drop. A code block or a heading over the "
        "limit is dropped either way (cutting one would break the file's structure).",
        flat="curate_too_long",
    )
    drop_date_lines: bool = setting(
        True,
        "Drop bullets and lines that hold only a date or time (2026-02-28, 2026年2月28日 14:00).",
        flat="curate_drop_date_lines",
    )
    drop_url_lines: bool = setting(
        True,
        "Drop bullets and lines that hold only a URL (a link with no words saying what it is).",
        flat="curate_drop_url_lines",
    )
    drop_duplicates: bool = setting(
        True,
        "Drop a bullet repeated within one section of an update (ignoring case, spacing, end punctuation).",
        flat="curate_drop_duplicates",
    )
    outside_sections: OutsideSections = setting(
        "drop",
        "Lines of an update before its first ## heading (a model's preamble, stray bullets): drop or keep. "
        "Headings are always kept, unless sanitize emptied their section.",
        flat="curate_outside_sections",
    )
    max_loss_share: float = setting(
        0.10,
        "Loss guard: an update that would remove more than this share of the existing bullets without [replace] "
        "is held (outcome guard_rejected), not written. 0 holds any loss; 1 turns the guard off.",
        flat="curate_max_loss_share",
        ge=0,
        le=1,
    )
    max_update_bytes: int = setting(
        256 * 1024,
        "Largest update (memory_update, insights_update: UTF-8 bytes) looked at; a larger one is skipped whole "
        "(outcome truncated_skip).",
        flat="curate_max_update_bytes",
        gt=0,
    )
    conflict_keys: tuple[str, ...] = setting(
        CONFLICT_KEYS,
        "Preference keys: a bullet `key: value` (also `key = value`, `key：value`) whose value an update changes "
        "is a conflict. Ignoring case, _ and - as spaces; * is a wildcard. In the environment or on the "
        "command line: comma-separated; in the file: a list or comma-separated.",
        flat="curate_conflict_keys",
    )
    conflict_resolution: Resolution = setting(
        "ask_user",
        "A conflict's resolution: keep_old (the update's bullet is dropped), keep_new (it replaces the old one), "
        "merge (both kept, marked <!-- conflict: key -->) or ask_user (the old one kept for now; the question "
        "is shown in context.dynamic until `memoryctl answer` settles it).",
        flat="curate_conflict_resolution",
    )

    routing_mode: RoutingMode = setting(
        "compatible",
        "What a consolidation does with a response whose daily_sections are missing or broken (seed 002 R2): "
        "compatible (write its history_entry to the daily file instead), preferred (refuse it once, asking the "
        "host for daily_sections; the second answer falls back like compatible), required (refuse it: nothing "
        "is written without valid daily_sections). Each apply writes one routing.jsonl row.",
        flat="curate_routing_mode",
    )
    entries_per_chunk: int = setting(
        40,
        "Daily entries per consolidation request; more are split into chunks, each prepared with a progress "
        "record and applied as its own change (a crash resumes at the first unfinished chunk).",
        flat="consolidate_entries_per_chunk",
        gt=0,
    )
    recent_days: int = setting(
        14,
        "Daily files of the last this many days are offered to a consolidation (entries not consolidated yet).",
        flat="consolidate_recent_days",
        gt=0,
    )
    request_memory_chars: int = setting(
        16000,
        "Characters of MEMORY.md (and again of INSIGHTS.md) a consolidation request carries at most, whole "
        "bullets; the request says when it left some out.",
        flat="consolidate_memory_chars",
        gt=0,
    )
    request_daily_chars: int = setting(
        24000,
        "Characters of daily entries one consolidation request carries at most (with entries_per_chunk).",
        flat="consolidate_daily_chars",
        gt=0,
    )

    replay_check: bool = setting(
        True,
        "Before a consolidation writes, replay the prompts kept in replay.jsonl against the memory as it would be; "
        "an answer that would no longer be found holds the apply (false: no check).",
        flat="replay_check",
    )
    replay_top_k: int = setting(
        6,
        "The replay check's k: a kept answer counts as found while its section ranks in the top k (BM25 over the "
        "sections of the files the consolidation changes) for its prompt.",
        flat="replay_top_k",
        gt=0,
        le=100,
    )

    @field_validator("conflict_keys")
    @classmethod
    def _keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(" ".join(k.split()) for k in keys)
        if len(cleaned) > 200:
            raise ValueError("at most 200 keys")
        if any(not k or len(k) > 100 or not k.strip("*? ") for k in cleaned):
            raise ValueError("each key 1-100 characters, not only wildcards")
        return cleaned


class ObservabilitySettings(Group):
    """The rows the daemon keeps under a workspace's ``data/memory/observability/`` and ``audit``, which reads
    them (docs/reference/curation.md, "Observability and audit")."""

    trace: bool = setting(
        True,
        "Append one row per recall for a prompt (context with query_text: the hooks, the MCP tool) to "
        "data/memory/observability/recall.jsonl: why recall fired or not, hits, injected, item ids; never text.",
        flat="observability_trace",
    )
    replay: bool = setting(
        True,
        "Keep the last observability_replay_keep prompts whose recalled passages were injected (the prompt's text, "
        "the passages' paths, line ranges, item ids and line digests — not their text) in "
        "data/memory/observability/replay.jsonl, in the workspace only, for the replay check before a "
        "consolidation; false keeps none (and the check has nothing to replay).",
        flat="observability_replay",
    )
    replay_keep: int = setting(
        200,
        "Prompts replay.jsonl keeps; the file is cut back to the newest this many when it holds twice as many.",
        flat="observability_replay_keep",
        gt=0,
        le=100_000,
    )
    recall_max_bytes: int = setting(
        8 * 1024 * 1024,
        "recall.jsonl grows by a row per prompt: when it would pass this many bytes it becomes recall.1.jsonl "
        "(replacing the one before) and a new recall.jsonl starts, so the two stay under twice this; audit reads "
        "across both.",
        flat="observability_recall_max_bytes",
        ge=4096,
    )
    audit_max_bytes: int = setting(
        8 * 1024 * 1024,
        "audit reads at most this many bytes from the end of each observability file (and history.jsonl); older "
        "rows are left out and the answer says so.",
        flat="audit_max_bytes",
        gt=0,
    )
    gate_preferred_window_days: int = setting(
        7, "Routing phase gate compatible → preferred: the window, in days.", gt=0
    )
    gate_preferred_min_runs: int = setting(
        50, "Routing phase gate compatible → preferred: consolidations needed in the window.", gt=0
    )
    gate_preferred_structured_rate: float = setting(
        0.75,
        "Routing phase gate compatible → preferred: share of consolidations whose daily sections were routed.",
        ge=0,
        le=1,
    )
    gate_preferred_written_rate: float = setting(
        0.80,
        "Routing phase gate compatible → preferred: share of MEMORY.md updates written (written or "
        "sanitize_modified, of those that had something to write).",
        ge=0,
        le=1,
    )
    gate_required_window_days: int = setting(14, "Routing phase gate preferred → required: the window, in days.", gt=0)
    gate_required_min_runs: int = setting(
        100, "Routing phase gate preferred → required: consolidations needed in the window.", gt=0
    )
    gate_required_daily_sections_rate: float = setting(
        0.95,
        "Routing phase gate preferred → required: share of consolidations whose answer carried daily_sections.",
        ge=0,
        le=1,
    )
    gate_required_guard_rejected_max: float = setting(
        0.05,
        "Routing phase gate preferred → required: largest share of MEMORY.md updates the guard may hold (reasons "
        "starting heading_retention not counted).",
        ge=0,
        le=1,
    )


class LifecycleSettings(Group):
    """Archive, TTL and restore of daily files and insights (docs/howto/lifecycle.md)."""

    archive_after_days: int = setting(
        30,
        "lifecycle.archive moves daily files memory/YYYY-MM-DD.md dated (by their name) more than this many days "
        "ago to memory/archive/; a call's older_than_days overrides it.",
        flat="lifecycle_archive_after_days",
        ge=1,
    )
    archive_ttl_days: int = setting(
        365,
        "lifecycle.ttl deletes archived daily files dated more than this many days ago (their bytes stay in "
        "data/memory/backups/<run_id>/, so `restore` brings them back).",
        flat="lifecycle_archive_ttl_days",
        ge=1,
    )
    insights_ttl_days: int = setting(
        60,
        "lifecycle.ttl removes INSIGHTS.md bullets last confirmed (their `<!-- seen: YYYY-MM-DD -->`) more than "
        "this many days ago; a bullet without the mark never expires.",
        flat="lifecycle_insights_ttl_days",
        ge=1,
    )
    max_files: int = setting(
        10000,
        "Files one lifecycle run touches at most; the rest wait for the next run (its answer says how many).",
        flat="lifecycle_max_files",
        gt=0,
    )
    max_bytes: int = setting(
        24 * 1024 * 1024,
        "Bytes one lifecycle run writes at most (its intent journal holds them all); the rest wait for the next run.",
        flat="lifecycle_max_bytes",
        gt=0,
    )
    auto: bool = setting(
        False,
        "Run lifecycle.archive and lifecycle.ttl on every workspace this daemon writes, every "
        "lifecycle_auto_interval_hours: as dry runs (a row in lifecycle.jsonl, nothing changed) unless "
        "lifecycle_auto_apply is on too.",
        flat="lifecycle_auto",
    )
    auto_apply: bool = setting(
        False,
        "With lifecycle_auto: the automatic runs change files (each a recorded change `restore` undoes).",
        flat="lifecycle_auto_apply",
    )
    auto_interval_hours: float = setting(
        24.0,
        "How often automatic lifecycle runs happen (the first an interval after start).",
        flat="lifecycle_auto_interval_hours",
        gt=0,
    )
