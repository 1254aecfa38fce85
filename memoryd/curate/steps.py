"""The consolidation pipeline's steps (seed 002 §5.3): normalize → route daily sections → sanitize → guard
(size, preference conflicts, loss) → section merge; the write step is ``Consolidator._writes``. Each step is a plain function over one ``Run`` (the
pipeline's context): it reads what the steps before it left, sets its own outputs and counts what it did in
``run.counters[<step>]``. No I/O here: the files are read before and written after, by the caller.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from memoryd.curate import entries, policy, sectionmerge
from memoryd.notes.daily import strip_private
from memoryd.rules.models import DAILY_SECTIONS
from memoryd.settings import CurateSettings

RoutingMode = Literal["compatible", "preferred", "required"]
RoutingResult = Literal["routed", "fallback", "missing", "invalid", "rejected"]
Target = Literal["memory", "insights"]

HISTORY_MAX_CHARS = 500
DAILY_LINE_MAX_CHARS = 300
DAILY_LINES_MAX = 50  # per section
DEFAULT_CONFIDENCE = 1.0
_MARKER = re.compile(r"\s*\[(?=[^\]]*\b(?:evidence|confidence)\s*:)([^\]]*)\]\s*$", re.IGNORECASE)
_IDS = re.compile(r"\b(?:obs_[0-9A-HJKMNP-TV-Z]{26}|dn_[0-9a-f]{20}|ent_[0-9a-f]{12,40})\b")
_CONFIDENCE = re.compile(r"confidence\s*:\s*([01](?:\.\d+)?)", re.IGNORECASE)
SEEN = re.compile(r"\s*<!-- seen: (\d{4}-\d{2}-\d{2}) -->\s*$")
_REPLACE = re.compile(r"\s*\[replace\]\s*$", re.IGNORECASE)
_HEADING = re.compile(r"^##[ \t]+(.*?)[ \t]*$")


def key(text: str) -> str:
    """A bullet's identity, as the section merge de-duplicates (its seen marker and other end comments aside)."""
    return sectionmerge.bullet_key(text)


def title(text: str) -> str:
    """A section title's identity, as the section merge matches sections."""
    return sectionmerge.title_key(text)


@dataclass(slots=True)
class Meta:
    evidence: list[str]
    confidence: float
    stated: bool  # the bullet carried a marker


@dataclass(slots=True)
class Update:
    """One target's update (memory_update or insights_update) as it goes through the steps."""

    target: Target
    text: str  # after normalize, then after sanitize
    meta: dict[tuple[str, str], Meta] = field(default_factory=dict)  # (section key, bullet key) → its metadata
    current: str = ""  # the file now
    base: str = ""  # what the update is merged into: the file after its preference conflicts were settled
    asked: list[policy.Conflict] = field(default_factory=list)  # ask_user conflicts, recorded after the commit
    sanitized: policy.Sanitized | None = None
    merged: sectionmerge.Merge | None = None
    held: str | None = None  # guard_rejected / truncated_skip reason
    outcome: str = "no_change"


@dataclass(slots=True)
class Run:
    """The pipeline's context for one apply."""

    raw: dict[str, Any]
    now: datetime
    mode: RoutingMode
    retried: bool  # preferred: this request's answer was refused once already
    cited: list[str]  # observation ids the response lists
    unseen: dict[Target, set[str]]  # keys of sections with bullets the request left out (bounded)
    policy: CurateSettings = field(default_factory=CurateSettings)
    updates: dict[Target, Update] = field(default_factory=dict)
    history: str | None = None
    daily: dict[str, list[str]] | None = None
    routing: RoutingResult = "missing"
    daily_text: str = ""
    daily_entries: list[tuple[str, str]] = field(default_factory=list)  # (heading, text) written
    refused: str | None = None  # why the routing mode refuses the apply
    counters: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, step: str, what: str, n: int = 1) -> None:
        self.counters.setdefault(step, Counter())[what] += n

    @property
    def today(self) -> str:
        return self.now.strftime("%Y-%m-%d")


def one_line(text: str, limit: int) -> str:
    line = " ".join(strip_private(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --- normalize ----------------------------------------------------------------------------------------------


def normalize(run: Run) -> None:
    """history_entry to one line; memory_update and insights_update to ``## `` sections of ``- `` bullets with
    their evidence markers taken out into metadata (insights' seen markers too: the merge sets them)."""
    entry = run.raw.get("history_entry")
    if isinstance(entry, str) and entry.strip():
        run.history = one_line(entry, HISTORY_MAX_CHARS)
        run.count("normalize", "history_entry")
    targets: tuple[tuple[Target, str], ...] = (("memory", "memory_update"), ("insights", "insights_update"))
    for target, name in targets:
        text = run.raw.get(name)
        if not isinstance(text, str) or not text.strip():
            continue
        size = policy.size_guard(text, run.policy)
        if not size.ok:  # too large to look at: skipped whole, before anything reads it
            run.updates[target] = Update(target, "", held=size.reason, outcome="truncated_skip")
            run.count("normalize", f"{target}_truncated_skip")
            continue
        run.updates[target] = _normalize_update(run, target, text)


def _normalize_update(run: Run, target: Target, text: str) -> Update:
    update = Update(target, "")
    lines: list[str] = []
    section = ""
    default = Meta(sorted(set(run.cited)), DEFAULT_CONFIDENCE, False)
    for raw_line in strip_private(text).replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw_line.rstrip()
        heading = _HEADING.match(line)
        if heading:
            section = title(_REPLACE.sub("", heading.group(1)))
            lines.append(line)
            continue
        bare = line.lstrip()
        if bare.startswith(("* ", "+ ")):
            line = "- " + bare[2:]
        elif bare.startswith("- "):
            line = bare
        if line.startswith("- "):
            body = SEEN.sub("", line[2:]) if target == "insights" else line[2:]
            meta = default
            marker = _MARKER.search(body)
            if marker:
                body = body[: marker.start()]
                stated = _CONFIDENCE.search(marker.group(1))
                confidence = min(1.0, float(stated.group(1))) if stated else DEFAULT_CONFIDENCE
                meta = Meta(sorted(set(_IDS.findall(marker.group(1)))), confidence, True)
                run.count("normalize", f"{target}_markers")
            line = "- " + body.strip()
            if line == "- ":
                continue
            update.meta[(section, key(body))] = meta
        lines.append(line)
    update.text = "\n".join(lines).strip("\n") + "\n"
    run.count("normalize", f"{target}_bullets", len(update.meta))
    return update


# --- route daily sections -----------------------------------------------------------------------------------


def route(run: Run) -> None:
    """daily_sections checked and routed by the mode (seed §6 R2): valid → its entries (routed); missing or
    broken → compatible writes history_entry as one summary entry (fallback), or nothing (missing / invalid);
    preferred refuses the first answer of a request (rejected: the host answers again) and falls back on the
    second; required refuses (rejected)."""
    sections, problem = _daily(run.raw.get("daily_sections"))
    if problem is None:
        assert sections is not None
        run.daily = sections
        run.routing = "routed"
        run.daily_text, run.daily_entries = entries.block(sections, run.now)
        run.count("route", "routed_sections", sum(1 for v in sections.values() if v))
        return
    if run.mode == "required" or (run.mode == "preferred" and not run.retried):
        run.routing = "rejected"
        run.refused = problem
        run.count("route", "rejected")
        return
    if run.history:
        run.routing = "fallback"
        run.daily_text, run.daily_entries = entries.fallback_block(run.history, run.now)
    else:
        run.routing = "missing" if run.raw.get("daily_sections") is None else "invalid"
    run.count("route", run.routing)


def _daily(value: Any) -> tuple[dict[str, list[str]] | None, str | None]:
    """The sections, cleaned (one line each, empties dropped, bounded), or why they are broken."""
    if value is None:
        return None, "daily_sections is missing"
    if not isinstance(value, dict):
        return None, f"daily_sections is a {type(value).__name__}, not an object"
    unknown = [k for k in value if k not in DAILY_SECTIONS]
    if unknown:
        return None, f"daily_sections has unknown keys {sorted(unknown)[:5]}; use {list(DAILY_SECTIONS)}"
    out: dict[str, list[str]] = {}
    for name in DAILY_SECTIONS:
        items = value.get(name, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            return None, f"daily_sections.{name} is not a list of strings"
        lines = [one_line(i, DAILY_LINE_MAX_CHARS) for i in items[:DAILY_LINES_MAX]]
        out[name] = [line for line in lines if line]
    return out, None


# --- sanitize -----------------------------------------------------------------------------------------------


def sanitize(run: Run) -> None:
    """Each update through the sanitize policy (secrets, private, dates, URLs, length, duplicates); daily lines
    and the history line through the same policy without the date and URL rules (a day's notes name both)."""
    for update in run.updates.values():
        if update.held is not None:
            continue
        update.sanitized = policy.sanitize(update.text, run.policy)
        for dropped in update.sanitized.dropped:
            run.count("sanitize", f"{update.target}_{dropped.reason}")
        update.text = update.sanitized.text
    daily = policy.daily_policy(run.policy)
    if run.daily_text:
        cleaned = policy.sanitize(run.daily_text, daily)
        for dropped in cleaned.dropped:
            run.count("sanitize", f"daily_{dropped.reason}")
        if cleaned.modified:
            run.daily_text, run.daily_entries = _rebuilt_daily(run, cleaned.text)
    if run.history is not None:
        cleaned = policy.sanitize(f"- {run.history}", daily)
        if cleaned.modified:
            run.count("sanitize", "history_dropped")
            run.history = None


def _rebuilt_daily(run: Run, text: str) -> tuple[str, list[tuple[str, str]]]:
    """The daily block again from what sanitize kept (an entry whose every line was dropped goes)."""
    kept: dict[str, list[str]] = {name: [] for name in DAILY_SECTIONS}
    for line in text.splitlines():
        for name in DAILY_SECTIONS:
            prefix = f"- {name}: "
            if line.startswith(prefix):
                kept[name].append(line[len(prefix) :].lstrip("\\"))
    if run.routing == "fallback":
        body = next((line[2:] for line in text.splitlines() if line.startswith("- ")), "")
        return entries.fallback_block(body, run.now) if body else ("", [])
    return entries.block(kept, run.now)


# --- guard --------------------------------------------------------------------------------------------------


def guard(run: Run) -> None:
    """Each update checked before anything is written: preference conflicts settled by the policy (keep_old,
    keep_new, merge, ask_user), then merged in memory and checked by the loss guard (bullets removed without
    [replace]), and for truncation (a [replace] of a section the request did not show whole would drop bullets the
    model never saw: truncated_skip)."""
    for update in run.updates.values():
        if update.held is not None:
            continue
        update.base = update.current
        # the current file is scanned for preferences only when the update states one (a 200-section file costs)
        stated = policy.preferences(update.text, run.policy.conflict_keys)
        found = policy.find_conflicts(update.current, update.text, run.policy) if stated else []
        if found:
            settled = policy.resolve(update.current, update.text, found)
            update.base, update.text, update.asked = settled.current, settled.update, settled.asked
            run.count("guard", f"{update.target}_conflicts", len(found))
        merged = sectionmerge.merge(update.base, update.text)
        update.merged = merged
        partial = run.unseen.get(update.target, set())
        unseen = [t for t in merged.replaced if title(t) in partial]
        if unseen:
            update.held = f"[replace] of {unseen[0]!r}, which the request did not show whole"
            update.outcome = "truncated_skip"
            run.count("guard", f"{update.target}_truncated_skip")
            continue
        before = len(sectionmerge.bullets(update.current))
        verdict = policy.loss_guard(before, len(merged.removed), bool(merged.replaced), run.policy)
        if not verdict.ok:
            update.held = verdict.reason
            update.outcome = verdict.outcome or "guard_rejected"
            run.count("guard", f"{update.target}_rejected")
        else:
            run.count("guard", f"{update.target}_passed")


# --- section merge ------------------------------------------------------------------------------------------


def merge(run: Run) -> dict[Target, str]:
    """The new text of each target that changes (held ones are not merged). INSIGHTS.md bullets the update adds
    or confirms carry ``<!-- seen: today -->`` (what the TTL expires by; the merge moves a confirmed bullet's
    marker to the newer date)."""
    out: dict[Target, str] = {}
    for target, update in run.updates.items():
        if update.held is not None:
            continue
        if target == "insights":
            update.merged = sectionmerge.merge(update.base, _with_seen(update.text, run.today))
        merged = update.merged
        assert merged is not None and update.sanitized is not None
        run.count("merge", f"{target}_added", len(merged.added))
        run.count("merge", f"{target}_duplicates", merged.duplicates)
        run.count("merge", f"{target}_removed", len(merged.removed))
        if merged.text != update.current:
            out[target] = merged.text
            update.outcome = "sanitize_modified" if update.sanitized.modified else "written"
        else:
            update.outcome = "no_change"
    return out


def _with_seen(text: str, today: str) -> str:
    """Every bullet of an insights update marked seen today."""
    return "\n".join(f"{line} <!-- seen: {today} -->" if line.startswith("- ") else line for line in text.split("\n"))
