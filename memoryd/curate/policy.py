"""The policy the consolidation pipeline applies, from h-policy's modules: sanitize (``sanitize.py``), the size
and loss guards (``guard.py``), preference conflicts (``conflicts.py``) and their open questions
(``questions.py``), and the outcome and sanitize rows (``outcomes.py``). One import point, so the pipeline's steps
read as the seed's (memoryd/curate/steps.py).
"""

from __future__ import annotations

from memoryd.curate import outcomes, questions
from memoryd.curate.conflicts import Conflict, Resolved, find_conflicts, preferences, resolve
from memoryd.curate.guard import Verdict, loss_guard, size_guard
from memoryd.curate.sanitize import Dropped, Sanitized, SanitizePolicy, sanitize
from memoryd.settings import CurateSettings

__all__ = [
    "Conflict",
    "Dropped",
    "Resolved",
    "SanitizePolicy",
    "Sanitized",
    "Verdict",
    "daily_policy",
    "find_conflicts",
    "loss_guard",
    "outcomes",
    "preferences",
    "questions",
    "resolve",
    "sanitize",
    "size_guard",
]

OBSERVABILITY_DIR = outcomes.OBSERVABILITY_DIR


def daily_policy(policy: CurateSettings) -> CurateSettings:
    """Sanitize for daily lines and the history line: secrets and private spans as always, lengths, but dates and
    URLs are what a day's notes are made of, and their entry headings are the sections."""
    return policy.model_copy(update={"drop_date_lines": False, "drop_url_lines": False, "outside_sections": "keep"})
