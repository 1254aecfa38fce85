"""The policy the consolidation pipeline applies: sanitize (``memoryd/curate/sanitize.py``, h-policy), the loss
guard, and where the observability rows go.

The loss guard is a STAND-IN until ``memoryd/curate/guard.py`` (h-policy) lands, with the API shared22.md fixes:
``loss_guard(before_bullets, removed, replaced, policy) -> Verdict``. A section merge removes bullets only where the
answer says ``[replace]``; this stand-in holds a removal without it beyond ``max_loss_share``, and a ``[replace]``
that would remove more than half of the file's bullets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from memoryd.curate.sanitize import Dropped, Sanitized, SanitizePolicy, sanitize
from memoryd.fsio import append_line
from memoryd.settings import CurateSettings

__all__ = ["Dropped", "SanitizePolicy", "Sanitized", "Verdict", "loss_guard", "sanitize"]

OBSERVABILITY_DIR = "data/memory/observability"
REPLACE_MAX_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None
    share: float


def loss_guard(before_bullets: int, removed: int, replaced: bool, policy: CurateSettings) -> Verdict:
    share = removed / before_bullets if before_bullets else 0.0
    if removed and not replaced and share > policy.max_loss_share:
        return Verdict(False, "removal_without_replace", share)
    if replaced and share > max(REPLACE_MAX_SHARE, policy.max_loss_share):
        return Verdict(False, "replace_removes_too_much", share)
    return Verdict(True, None, share)


def daily_policy(policy: CurateSettings) -> CurateSettings:
    """Sanitize for daily lines and the history line: secrets and private spans as always, lengths, but dates and
    URLs are what a day's notes are made of, and their entry headings are the sections."""
    return policy.model_copy(update={"drop_date_lines": False, "drop_url_lines": False, "outside_sections": "keep"})


def append_row(root: Path, name: str, row: dict[str, Any]) -> None:
    append_line(root / OBSERVABILITY_DIR / name, orjson.dumps(row), root=root)


def open_questions(root: Path) -> list[str]:
    """Questions ask_user conflicts left open (h-policy stores them; read here once its reader lands)."""
    return []
