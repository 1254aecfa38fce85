"""The loss guard: what a consolidation may not do to MEMORY.md / INSIGHTS.md without saying so
(docs/reference/curation.md, "Guard").

``size_guard`` skips an update too large to look at (outcome ``truncated_skip``); ``loss_guard`` holds an update
that would remove more than ``curate.max_loss_share`` of the existing bullets without ``[replace]`` (outcome
``guard_rejected``: nothing written, the reason names the share). With ``[replace]`` the removal passes and is
counted (its reason says how much went). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memoryd.settings import CurateSettings

GuardOutcome = Literal["guard_rejected", "truncated_skip"]


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool  # False: do not write (the outcome says which row to record)
    reason: str | None  # why it was held, or what a [replace] removed; never memory text
    share: float  # of the existing bullets removed, 0-1
    outcome: GuardOutcome | None = None  # set when not ok


def size_guard(update: str, policy: CurateSettings) -> Verdict:
    """An update over ``curate.max_update_bytes`` (UTF-8) is skipped whole, before anything else looks at it."""
    size = len(update.encode("utf-8", "surrogatepass"))
    if size <= policy.max_update_bytes:
        return Verdict(ok=True, reason=None, share=0.0)
    return Verdict(
        ok=False,
        reason=f"update of {_bytes(size)} is over curate_max_update_bytes ({_bytes(policy.max_update_bytes)})",
        share=0.0,
        outcome="truncated_skip",
    )


def loss_guard(before_bullets: int, removed: int, replaced: bool, policy: CurateSettings) -> Verdict:
    """``before_bullets``: bullets in the file now; ``removed``: how many of them the merged result no longer has;
    ``replaced``: the update marked the sections it replaces with ``[replace]``."""
    if before_bullets < 0 or removed < 0:
        raise ValueError("bullet counts cannot be negative")
    removed = min(removed, before_bullets)
    share = removed / before_bullets if before_bullets else 0.0
    said = f"{removed} of {before_bullets} bullets ({share:.0%})"
    if replaced:
        return Verdict(ok=True, reason=f"[replace] removes {said}" if removed else None, share=share)
    if share > policy.max_loss_share:
        return Verdict(
            ok=False,
            reason=f"would remove {said}, over curate_max_loss_share ({policy.max_loss_share:.0%}) without [replace]",
            share=share,
            outcome="guard_rejected",
        )
    return Verdict(ok=True, reason=None, share=share)


def _bytes(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / 1024 / 1024:.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} bytes"
