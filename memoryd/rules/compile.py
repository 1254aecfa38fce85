"""The compile exchange (seed 000 §6): the request for the host's LLM, the checks on its answer, and the
bookkeeping of which observations are compiled.

Compile state (``data/memory/compile/state.json``): per source (``global`` or ``run:<run_id>``) a watermark — every
observation of that source up to it is compiled — plus the ids compiled beyond it (by a filtered prepare), and every
request with its status (outstanding, applied, abandoned). Requests live in ``data/memory/compile/<request_id>/``
next to the response that was applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, SupportsIndex

import jsonschema
import orjson

from memoryd.errors import AppError
from memoryd.rules.evidence import EvidenceStore
from memoryd.rules.fwrange import FwRangeError, parse_range
from memoryd.rules.models import FACT_KEY_PATTERN, CompileResponse, unrecommended
from memoryd.rules.ruleset import RuleSet

STATE_FILE = "data/memory/compile/state.json"
# Bounds on one response (issue 19, 2.4): a host model proposes tens of rules, never thousands; every item is
# checked and may raise several violations, so both are bounded before the work is done, not after.
MAX_ITEMS = 1000  # rules + candidates + overrides; more is MEMORY_TOO_LARGE, unchecked
MAX_VIOLATIONS = 100  # listed in the error (pointer + reason); the rest are counted
MAX_WARNINGS = 100
_FACT_KEY = re.compile(FACT_KEY_PATTERN)

INSTRUCTIONS = """\
You consolidate evidence into rules for embedded devices. Read `observations` (evidence) and `rules` (what is
known today for the same model_ids), then answer with ONE JSON object that validates against `response_schema`.
Write nothing else: no prose, no Markdown fences.

- Copy `request_id` exactly.
- `rules`: shared facts about a device model that the evidence supports: {rule_id, model_id, fw_range, priority,
  facts, confidence, provenance: {observation_ids}, summary}. Reuse an existing rule_id to update a rule: facts are
  merged into the existing ones (a key set to null is removed); keep unrelated facts out of it.
- `candidates`: plausible but unconfirmed rules, same shape. Anything with confidence below
  policy.min_confidence is staged as a candidate anyway, for a person to review.
- `overrides`: facts true only for one physical instance (a bench, a board): add instance_id.
- facts are dotted keys with JSON values. Prefer these prefixes: transport.* (serial/I2C/SPI/network parameters,
  timeouts, retries), procedure.* (required command sequences), analysis.* (default analysis templates, metrics),
  known_issues.* (known faults, edge conditions), calibration.* (calibration, offsets).
- fw_range selects firmware versions: "*", "1.2.*", "1.2.3", or ">=1.2.0 <1.3.0". Use the narrowest range the
  evidence supports; a narrower range beats a wider one, then a higher priority wins.
- Every rule, candidate and override cites the observations it rests on in provenance.observation_ids (ids from
  `observations` or earlier ones), and provenance_summary.observation_ids_used lists every id you cited.
- confidence is 0..1: how sure the evidence makes you. Do not invent facts the evidence does not state.
- Nothing to propose? Answer with empty lists and an empty observation_ids_used.
"""


CONSOLIDATION_INSTRUCTIONS = """
This request also consolidates daily notes (`consolidation`). Besides the rules above, answer with:

- `memory_update`: Markdown for MEMORY.md, durable facts only: `## Section` headings, one `- ` bullet per fact,
  one line each. Write only the sections you add to or change; a section you leave out is kept as it is, and a
  bullet already in `consolidation.memory` need not be repeated (duplicates are dropped). To drop or rewrite
  bullets of a section, write its heading as `## Title [replace]` followed by the complete new list: only then are
  bullets removed. End a bullet with `[evidence: <ids>; confidence: <0..1>]` naming the observation ids
  (obs_…) and daily entry ids (dn_…) it rests on; that marker is kept as the bullet's metadata, not in the file.
  No dates, URLs, secrets, tokens or <private> content in MEMORY.md.
- `daily_sections`: what today's notes add, as {"Topics": [...], "Decisions": [...], "Tool Activity": [...],
  "Open Questions": [...]}, each a list of one-line strings (empty lists are fine). It is written to today's daily
  file (`consolidation.today`).
- `history_entry`: ONE line for HISTORY.md saying what this consolidation covered.
- `insights_update`: optional Markdown for INSIGHTS.md, lessons learned that matter for weeks, not forever
  (trade-offs, debugging findings), in the same `## Section` / `- ` shape.
- Answer `consolidation.open_questions` in `memory_update` when the notes settle them; keep the rest open.
- Cite every observation id you use in provenance_summary.observation_ids_used (entry ids dn_… go only in the
  evidence markers). If the notes hold nothing durable, leave memory_update out.
"""


COMPACT_INSTRUCTIONS = """
This request COMPACTS archived days (`consolidation.compact`): answer with a `history_entry` of one line
summarizing what those days did and decided (it is appended to HISTORY.md; the archived files stay until their
TTL). `memory_update` is optional (durable facts the archive holds that MEMORY.md lacks); daily_sections are not
used.
"""


@cache
def response_schema() -> dict[str, Any]:
    schema = CompileResponse.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "compile_response"
    return schema


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(response_schema())


def pointer(parts: Iterable[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def parse_when(text: str, field: str) -> datetime:
    """An ISO date or date-time; a naive one is local time."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        from memoryd.errors import AppError

        raise AppError("INVALID_PARAMS", f"{field}: expected an ISO date or time such as 2026-11-23") from exc
    return moment if moment.tzinfo is not None else moment.astimezone()


# --- state ------------------------------------------------------------------------------------------------------


def empty_state() -> dict[str, Any]:
    return {"version": 1, "watermarks": {}, "compiled": {}, "requests": {}}


def load_state(data: bytes | None) -> dict[str, Any]:
    """The compile state the daemon keeps in ``STATE_FILE``, proved to have the shape it writes: the file lives in
    the workspace, so a cloned repository can ship any JSON there (a request id like ``../../x`` would become a
    path). MEMORY_FILE_REFUSED names what is wrong; nothing is guessed or thrown away."""
    if not data:
        return empty_state()
    try:
        state = orjson.loads(data)
        why = _state_problem(state)
    except orjson.JSONDecodeError:
        why = "not JSON"
    if why is not None:
        raise AppError(
            "MEMORY_FILE_REFUSED",
            f"{STATE_FILE} is not a compile state this daemon wrote: {why}",
            hint=f"Move {STATE_FILE} aside; the next `memoryctl compile prepare` starts a new state "
            "(the observations it had compiled are offered again).",
        )
    for key, value in empty_state().items():
        state.setdefault(key, value)
    return dict(state)


_REQUEST_ID = re.compile(r"cr_[0-9A-Za-z]{1,64}")
# a daily entry a request holds (memoryd.curate): its daily file (or archived day) and its id
_ENTRY = re.compile(r"memory/(?:archive/)?\d{4}-\d{2}-\d{2}\.md#dn_[0-9a-f]{20}")
_ARCHIVED = re.compile(r"memory/archive/\d{4}-\d{2}-\d{2}\.md")
_RECORD_TYPES = {"status": str, "batch_id": str, "index": int, "of": int, "filters": dict, "observation_ids": list}


def _state_problem(state: Any) -> str | None:
    if not isinstance(state, dict):
        return "not an object"
    for key in ("watermarks", "compiled", "requests"):
        if not isinstance(state.get(key, {}), dict):
            return f"{key} is not an object"
    if not all(isinstance(v, str) for v in state.get("watermarks", {}).values()):
        return "a watermark is not a string"
    for ids in state.get("compiled", {}).values():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return "a compiled list is not a list of ids"
    for rid, record in state.get("requests", {}).items():
        if not _REQUEST_ID.fullmatch(rid):
            return f"request id {rid[:80]!r}"
        if not isinstance(record, dict):
            return f"request {rid} is not an object"
        for key, kind in _RECORD_TYPES.items():
            if not isinstance(record.get(key), kind):
                return f"request {rid}: {key}"
        if not all(isinstance(i, str) for i in record["observation_ids"]):
            return f"request {rid}: observation_ids"
        entries = record.get("entries", [])
        if not isinstance(entries, list) or not all(isinstance(i, str) and _ENTRY.fullmatch(i) for i in entries):
            return f"request {rid}: entries"
        compact = record.get("compact", [])
        if not isinstance(compact, list) or not all(isinstance(p, str) and _ARCHIVED.fullmatch(p) for p in compact):
            return f"request {rid}: compact"
    return None


def dump_state(state: dict[str, Any]) -> bytes:
    return orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def is_compiled(state: dict[str, Any], source: str, observation_id: str) -> bool:
    return observation_id <= state["watermarks"].get(source, "") or observation_id in set(
        state["compiled"].get(source, ())
    )


def uncompiled(state: dict[str, Any], evidence: EvidenceStore) -> int:
    """How many stored observations are not compiled yet (is_compiled for each, with the sets built once)."""
    watermarks: dict[str, str] = state["watermarks"]
    compiled = {source: set(ids) for source, ids in state["compiled"].items()}
    count = 0
    for stored in evidence.iter_ordered():
        oid = stored.observation.observation_id
        if oid > watermarks.get(stored.source, "") and oid not in compiled.get(stored.source, ()):
            count += 1
    return count


def mark_compiled(state: dict[str, Any], evidence: EvidenceStore, ids: Iterable[str]) -> None:
    """Record ``ids`` as compiled and move each source's watermark over every contiguous compiled id."""
    by_source: dict[str, set[str]] = {}
    for oid in ids:
        stored = evidence.get(oid)
        if stored is not None:
            by_source.setdefault(stored.source, set()).add(oid)
    for source, new in by_source.items():
        done = set(state["compiled"].get(source, ())) | new
        mark = state["watermarks"].get(source, "")
        for stored in evidence.iter_ordered():
            oid = stored.observation.observation_id
            if stored.source != source or oid <= mark:
                continue
            if oid not in done:
                break
            mark = oid
            done.discard(oid)
        state["watermarks"][source] = mark
        state["compiled"][source] = sorted(o for o in done if o > mark)


# --- checking a response ----------------------------------------------------------------------------------------


def count_items(raw: Any) -> int:
    """How many rules, candidates and overrides ``raw`` proposes (what is not a list counts nothing)."""
    if not isinstance(raw, dict):
        return 0
    return sum(
        len(items) for items in (raw.get(s) for s in ("rules", "candidates", "overrides")) if isinstance(items, list)
    )


class Bounded(list[Any]):
    """A list that keeps its first ``limit`` entries and counts the rest (``total``)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.total = 0

    def append(self, item: Any) -> None:
        self.total += 1
        if len(self) < self.limit:
            super().append(item)

    def __iadd__(self, items: Iterable[Any]) -> Bounded:  # type: ignore[misc]
        for item in items:
            self.append(item)
        return self

    def insert(self, index: SupportsIndex, item: Any) -> None:
        self.total += 1
        super().insert(index, item)
        if len(self) > self.limit:
            self.pop()


def check_response(raw: Any, evidence: EvidenceStore, rules: RuleSet) -> tuple[Bounded, Bounded, set[str]]:
    """The violations of the schema and of the seed's constraints (pointer + reason; the first MAX_VIOLATIONS, and
    ``.total``), warnings (the first MAX_WARNINGS), and the cited ids. The caller has refused a response of more
    than MAX_ITEMS items (:func:`count_items`), so the work here is bounded.

    Does not look at the request state (the caller checks request_id against it).
    """
    check = _Check(evidence, {r.rule_id: r.rule.model_id for r in rules.all() if r.layer != "override"})
    for error in _validator().iter_errors(raw):  # kept or counted one at a time: never all held at once
        check.violations.append({"pointer": pointer(error.absolute_path), "reason": _short(error.message)})
    check.violations.sort(key=lambda v: v["pointer"])
    if isinstance(raw, dict):
        for section in ("rules", "candidates", "overrides"):
            items = raw.get(section)
            if isinstance(items, list):
                for n, item in enumerate(items):
                    if isinstance(item, dict):
                        check.item(section, n, item)
        check.summary(raw.get("provenance_summary"))
    return check.violations, check.warnings, check.cited


@dataclass(slots=True)
class _Check:
    """What :func:`check_response` finds, item by item, in document order."""

    evidence: EvidenceStore
    owners: dict[str, str]  # rule_id → its model, for every profile and candidate
    violations: Bounded = field(default_factory=lambda: Bounded(MAX_VIOLATIONS))
    warnings: Bounded = field(default_factory=lambda: Bounded(MAX_WARNINGS))
    cited: set[str] = field(default_factory=set)
    seen: dict[tuple[str, ...], str] = field(default_factory=dict)  # (instance, model, rule) → where first

    def item(self, section: str, n: int, item: dict[str, Any]) -> None:
        where = f"/{section}/{n}"
        fw_range = item.get("fw_range")
        if isinstance(fw_range, str):
            try:
                parse_range(fw_range)
            except FwRangeError as exc:
                self.violations.append({"pointer": f"{where}/fw_range", "reason": str(exc)})
        facts = item.get("facts")
        if isinstance(facts, dict):
            dotted = [key for key in facts if _FACT_KEY.match(key)]
            self.violations += [
                {"pointer": pointer([section, n, "facts", key]), "reason": "fact keys are dotted names"}
                for key in facts
                if key not in dotted
            ]
            self.warnings += [f"{where}/facts/{key}: not under a recommended prefix" for key in unrecommended(dotted)]
        rule_id, model_id = item.get("rule_id"), item.get("model_id")
        if isinstance(rule_id, str) and isinstance(model_id, str):
            self._identity(section, where, item, rule_id, model_id)
        provenance = item.get("provenance")
        ids = provenance.get("observation_ids") if isinstance(provenance, dict) else None
        if isinstance(ids, list):
            for m, oid in enumerate(ids):
                if not isinstance(oid, str):
                    continue
                self.cited.add(oid)
                if oid not in self.evidence:
                    self.violations.append(
                        {
                            "pointer": f"{where}/provenance/observation_ids/{m}",
                            "reason": f"unknown observation id {oid}",
                        }
                    )

    def _identity(self, section: str, where: str, item: dict[str, Any], rule_id: str, model_id: str) -> None:
        """An id proposed twice in one response, or a profile or candidate id another model owns."""
        key = (section == "overrides" and str(item.get("instance_id"))) or "", model_id, rule_id
        if key in self.seen:
            self.violations.append({"pointer": f"{where}/rule_id", "reason": f"{rule_id} also at {self.seen[key]}"})
        self.seen.setdefault(key, f"{where}/rule_id")
        owner = self.owners.get(rule_id)
        if section != "overrides" and owner is not None and owner != model_id:
            self.violations.append(
                {"pointer": f"{where}/rule_id", "reason": f"{rule_id} already belongs to model {owner}"}
            )

    def summary(self, summary: Any) -> None:
        """``provenance_summary.observation_ids_used`` lists every cited id, and only known ones."""
        used = summary.get("observation_ids_used") if isinstance(summary, dict) else None
        if not isinstance(used, list):
            return
        listed = {u for u in used if isinstance(u, str)}
        for oid in sorted(self.cited - listed):
            self.violations.append(
                {"pointer": "/provenance_summary/observation_ids_used", "reason": f"does not list cited {oid}"}
            )
        for m, oid in enumerate(used):
            if isinstance(oid, str) and oid not in self.evidence:
                self.violations.append(
                    {
                        "pointer": f"/provenance_summary/observation_ids_used/{m}",
                        "reason": f"unknown observation id {oid}",
                    }
                )


def _short(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"
