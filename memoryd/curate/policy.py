"""The policy the consolidation pipeline applies: sanitize, the loss guard, and the outcome rows.

STAND-IN until ``memoryd/curate/sanitize.py``, ``guard.py`` and ``outcomes.py`` (branch h-policy) land: the same
API as shared22.md fixes it, with the seed's defaults. Once they land this module only re-exports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memoryd.fsio import append_line

OBSERVABILITY_DIR = "data/memory/observability"


@dataclass(frozen=True, slots=True)
class SanitizePolicy:
    max_bullet_chars: int = 400
    drop_date_lines: bool = True
    drop_url_lines: bool = True


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    max_loss_share: float = 0.10


@dataclass(frozen=True, slots=True)
class Dropped:
    reason: str  # secret | url | date_line | too_long | duplicate | private
    line: str


@dataclass(frozen=True, slots=True)
class Sanitized:
    text: str
    modified: bool
    dropped: list[Dropped] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None
    share: float


_SECRET = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|(?i:(?:api[_-]?key|token|secret|password)\s*[:=]\s*\S{8,}))"
)
_URL = re.compile(r"https?://\S+", re.IGNORECASE)
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_PRIVATE = re.compile(r"[<\uff1c]\s*/?\s*private", re.IGNORECASE)


def sanitize(markdown: str, policy: SanitizePolicy) -> Sanitized:
    kept: list[str] = []
    dropped: list[Dropped] = []
    seen: set[str] = set()
    for line in markdown.splitlines():
        bare = line.strip()
        is_bullet = bare.startswith(("- ", "* "))
        reason = None
        if _PRIVATE.search(line):
            reason = "private"
        elif _SECRET.search(line):
            reason = "secret"
        elif is_bullet and policy.drop_url_lines and _URL.search(line):
            reason = "url"
        elif is_bullet and policy.drop_date_lines and _DATE.search(line):
            reason = "date_line"
        elif is_bullet and len(bare) > policy.max_bullet_chars:
            reason = "too_long"
        elif is_bullet and " ".join(bare.split()).casefold() in seen:
            reason = "duplicate"
        if reason is not None:
            dropped.append(Dropped(reason, line))
            continue
        if is_bullet:
            seen.add(" ".join(bare.split()).casefold())
        kept.append(line)
    text = "\n".join(kept) + ("\n" if kept else "")
    return Sanitized(text, bool(dropped), dropped)


def loss_guard(before_bullets: int, removed: int, replaced: bool, policy: GuardPolicy) -> Verdict:
    share = removed / before_bullets if before_bullets else 0.0
    if removed and not replaced:
        return Verdict(False, "removal_without_replace", share)
    if replaced and share > 0.5:  # a [replace] that empties most of the file is held too
        return Verdict(False, "replace_removes_too_much", share)
    return Verdict(True, None, share)


def record_outcome(root: Path, row: dict[str, Any]) -> None:
    """One outcome row (shared22.md's outcomes.jsonl format)."""
    _append(root, "outcomes.jsonl", row)


def record_sanitize(root: Path, row: dict[str, Any]) -> None:
    _append(root, "sanitize.jsonl", row)


def _append(root: Path, name: str, row: dict[str, Any]) -> None:
    stamped = {"ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **row}
    append_line(root / OBSERVABILITY_DIR / name, orjson.dumps(stamped), root=root)


def open_questions(root: Path) -> list[str]:
    """Questions ask_user conflicts left open (h-policy stores them); none until it lands."""
    return []
