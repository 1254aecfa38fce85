"""File formats of the evidence-to-rules loop (seed 000): observations, the compile exchange, rules.

``schemas/observation.schema.json``, ``compile_request``, ``compile_response`` and ``rule`` are generated from these
models (``make schemas``). The compile response is what a host's LLM writes, so its schema is strict: unknown
fields, wrong types and out-of-range values are violations, each reported with its JSON pointer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from memoryd.models import Wire

# Ids that become file or directory names: no separators, no leading dot, nothing a shell or YAML mangles.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
OBSERVATION_ID_PATTERN = r"^obs_[0-9A-HJKMNP-TV-Z]{26}$"
REQUEST_ID_PATTERN = r"^cr_[0-9A-HJKMNP-TV-Z]{26}$"
# Dotted fact keys: `transport.uart.baud`; letters of any script, digits, `_` and `-` between the dots.
FACT_KEY_PATTERN = r"^[\w-]+(\.[\w-]+)*$"
RECOMMENDED_PREFIXES = ("transport", "procedure", "analysis", "known_issues", "calibration")


def unrecommended(keys: Iterable[str]) -> list[str]:
    """The fact keys outside the recommended prefixes, sorted: a warning (apply, validate), never an error."""
    return sorted(key for key in keys if key.split(".", 1)[0] not in RECOMMENDED_PREFIXES)


IdStr = Field(pattern=ID_PATTERN, min_length=1, max_length=128)


class Observation(Wire):
    """One piece of evidence, one line of ``observations.jsonl``."""

    observation_id: str = Field(pattern=OBSERVATION_ID_PATTERN, description="obs_ + a ULID: unique, time-sortable.")
    ts: str = Field(description="When it was observed (ISO 8601 with offset), the time of the id.")
    kind: str = Field(
        pattern=r"^[a-z][a-z0-9_.-]{0,63}$",
        description="What sort of evidence: test_result, log, measurement, report, conversation, …",
    )
    text: str = Field(min_length=1, description="The evidence in words; <private>…</private> spans are removed.")
    source: str = Field(min_length=1, max_length=256, description="Who or what produced it: a host, a tool, a file.")
    run_id: str | None = Field(default=None, pattern=ID_PATTERN, description="The test or analysis run, if any.")
    model_id: str | None = Field(default=None, pattern=ID_PATTERN)
    fw_version: str | None = Field(default=None, max_length=64)
    tags: list[str] | None = Field(default=None, max_length=32)
    data: dict[str, Any] | None = Field(default=None, description="Structured details (any JSON object).")


class Provenance(Wire):
    observation_ids: list[str] = Field(
        min_length=1,
        max_length=1000,
        description="The observations this item rests on; each must exist in the workspace's store.",
    )
    request_id: str | None = Field(default=None, description="Filled in by apply: the request that produced it.")


class ProposedRule(Wire):
    """A rule or candidate as the host LLM proposes it."""

    rule_id: str = IdStr
    model_id: str = IdStr
    fw_range: str = Field(
        min_length=1, max_length=128, description="`*`, `1.2.*`, `1.2.3` or `>=1.2.0 <1.3.0` (docs/reference/rules.md)."
    )
    priority: int = Field(default=0, ge=-1000, le=1000, description="Higher wins among rules of equal range width.")
    facts: dict[str, Any] = Field(
        min_length=1,
        description="Dotted keys (transport.uart.baud) to JSON values; null removes a key from an existing rule.",
    )
    confidence: float = Field(ge=0, le=1)
    provenance: Provenance
    summary: str | None = Field(default=None, max_length=2000, description="Why the rule exists, in one line.")


class ProposedOverride(Wire):
    """A machine-local override for one instance (a bench, a board on this desk)."""

    instance_id: str = IdStr
    rule_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Defaults to one derived from model_id and fw_range."
    )
    model_id: str = IdStr
    fw_range: str = Field(min_length=1, max_length=128)
    priority: int = Field(default=0, ge=-1000, le=1000)
    facts: dict[str, Any] = Field(min_length=1)
    confidence: float = Field(ge=0, le=1)
    provenance: Provenance
    summary: str | None = Field(default=None, max_length=2000)


class ProvenanceSummary(Wire):
    observation_ids_used: list[str] = Field(description="Every observation id cited anywhere in the response.")


DAILY_SECTIONS = ("Topics", "Decisions", "Tool Activity", "Open Questions")
MEMORY_UPDATE_MAX_CHARS = 200_000  # a whole MEMORY.md's worth; sanitize caps bullets and sections further
HISTORY_ENTRY_MAX_CHARS = 2_000


class CompileResponse(Wire):
    """What the host LLM answers to a compile request: proposals only, never file contents."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN, description="Copied from compile_request.json.")
    rules: list[ProposedRule] = Field(default_factory=list, max_length=1000)  # and 1,000 in all: compile.MAX_ITEMS
    candidates: list[ProposedRule] = Field(default_factory=list, max_length=1000)
    overrides: list[ProposedOverride] = Field(default_factory=list, max_length=1000)
    provenance_summary: ProvenanceSummary
    notes: str | None = Field(default=None, max_length=10_000, description="Free text for the reviewer.")
    memory_update: str | None = Field(
        default=None,
        max_length=MEMORY_UPDATE_MAX_CHARS,
        description="Markdown for MEMORY.md: `## Section` headings with `- ` bullets, merged section by section "
        "(union, duplicates dropped; sections left out are kept). `## Title [replace]` replaces that section's "
        "bullets. A bullet may end with `[evidence: obs_…, ent_…; confidence: 0.8]` (kept as the bullet's item "
        "metadata, not in the file).",
    )
    daily_sections: Any = Field(
        default=None,
        description="For today's daily file: an object whose keys are among "
        + ", ".join(DAILY_SECTIONS)
        + " and whose values are lists of one-line strings. How a missing or broken value is treated is the "
        "routing mode's (curate_routing_mode); it is checked by the routing step, not by this schema.",
        json_schema_extra={
            "examples": [
                {
                    "Topics": ["UART flow control"],
                    "Decisions": ["use RTS/CTS"],
                    "Tool Activity": [],
                    "Open Questions": [],
                }
            ]
        },
    )
    history_entry: str | None = Field(
        default=None,
        max_length=HISTORY_ENTRY_MAX_CHARS,
        description="One line for HISTORY.md (append-only): what this consolidation covered.",
    )
    insights_update: str | None = Field(
        default=None,
        max_length=MEMORY_UPDATE_MAX_CHARS,
        description="Markdown for INSIGHTS.md (semi-durable lessons, expire after the TTL), merged like memory_update.",
    )


class DailyNote(Wire):
    """One daily entry a consolidation request offers."""

    entry_id: str = Field(description="dn_ + a digest of path, heading and text: cite it as evidence.")
    item_id: str | None = Field(default=None, description="The entry's ent_… id when remember wrote it.")
    path: str
    heading: str
    text: str = Field(description="The entry's lines under its heading (private spans stripped).")


class MemorySection(Wire):
    title: str
    bullets: list[str]


class ConsolidationMaterial(Wire):
    """What a request carries for consolidation: the memory as it is, the notes to fold in, the open questions."""

    routing_mode: Literal["compatible", "preferred", "required"]
    today: str = Field(description="The day daily_sections are written to (YYYY-MM-DD).")
    memory: list[MemorySection] = Field(description="MEMORY.md's sections now (whole bullets, bounded).")
    memory_truncated: bool = Field(description="True when sections or bullets of MEMORY.md were left out.")
    insights: list[MemorySection] = Field(description="INSIGHTS.md's sections now (bounded like memory).")
    insights_truncated: bool
    daily_notes: list[DailyNote] = Field(description="Daily entries not consolidated yet, oldest first.")
    open_questions: list[str] = Field(description="Questions still open (daily Open Questions, ask_user conflicts).")
    retry: str | None = Field(
        default=None, description="Set when an earlier answer to this request was refused: what it lacked."
    )
    compact: list[str] | None = Field(
        default=None,
        description="lifecycle.compact: the archived daily files these notes come from; the answer's history_entry "
        "summarizes them for HISTORY.md.",
    )


class Rule(Wire):
    """A rule as stored: ``spec/memory/profiles/<model_id>/<rule_id>.yaml``, a candidate under
    ``spec/memory/candidates/``, or one item of ``data/memory/overrides/<instance_id>.yaml`` (``rules:``)."""

    rule_id: str = IdStr
    model_id: str = IdStr
    fw_range: str = Field(min_length=1, max_length=128)
    priority: int = 0
    summary: str | None = None
    facts: dict[str, Any] = Field(description="Flat dotted keys after normalisation.")
    confidence: float = Field(ge=0, le=1)
    provenance: Provenance
    revision: int = Field(
        ge=1, description="1 when created (a promoted candidate starts a profile at 1); +1 with every later change."
    )
    created_at: str
    updated_at: str
    status: Literal["candidate"] | None = Field(default=None, description="Set on candidates only.")
    target: Literal["profile", "override"] | None = Field(
        default=None, description="Candidates: where promote puts the rule."
    )
    instance_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Overrides and their candidates.")
    reason: str | None = Field(default=None, description="Candidates: why it was staged.")


class Policy(Wire):
    min_confidence: float = Field(description="Items below it go to spec/memory/candidates/.")
    recommended_prefixes: list[str]
    max_observations_per_request: int


class RequestChunk(Wire):
    batch_id: str
    index: int = Field(ge=1)
    of: int = Field(ge=1)


class CompileRequest(Wire):
    """``compile_request.json``: everything the host LLM needs to answer, and the schema its answer must meet."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
    workspace_id: str
    created_at: str
    chunk: RequestChunk
    filters: dict[str, str | None] = Field(description="run_id, model_id and since as given to prepare.")
    observations: list[Observation]
    rules: list[Rule] = Field(description="Current rules (profiles, overrides, candidates) of the affected model_ids.")
    policy: Policy
    instructions: str
    response_schema: dict[str, Any]
    consolidation: ConsolidationMaterial | None = Field(
        default=None, description="Present when the request also consolidates daily notes into MEMORY.md."
    )
