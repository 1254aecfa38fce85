"""INSIGHTS.md bullets past their TTL, removed line by line with everything else kept byte for byte.

A bullet carries the day it was last confirmed as a trailing HTML comment, `` <!-- seen: YYYY-MM-DD -->``
(the consolidation writes it on every bullet it adds or confirms). A bullet is a top-level list item (``- ``,
``* `` or ``+ `` at the start of a line) with its continuation lines (the indented, non-blank lines after it:
wrapped text, nested items); its mark may sit on any of them, the latest day counting. A bullet without a mark, or
with a day that is not a date, never expires. Nothing inside a fenced code block is a bullet. Every other byte —
headings, the preamble, comments, blank lines, line endings (``\\r\\n`` too), a missing final newline — stays as
it was.

This is the minimal line-level removal; the section parser of ``client/memorysections`` (h-sections) will do the
same once it lands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

SEEN = re.compile(r"<!--\s*seen:\s*(\d{4}-\d{2}-\d{2})\s*-->")
_BULLET = re.compile(r"[-*+][ \t]")
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Expired:
    line: int  # 1-based, in the file before the removal
    seen: date
    text: str  # the bullet's lines, as they were
    bytes: int  # UTF-8 bytes removed


def lines_of(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n`` (the last without one when the text has no final newline):
    split on ``\\n`` only, so ``"".join(lines_of(t)) == t`` for any text."""
    parts = text.split("\n")
    out = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def seen_day(block: list[str]) -> date | None:
    """The latest valid ``seen`` day marked on a bullet's lines, None when none is."""
    days = []
    for line in block:
        for match in SEEN.finditer(line):
            try:
                days.append(date.fromisoformat(match.group(1)))
            except ValueError:
                continue
    return max(days, default=None)


def expire(text: str, cutoff: date) -> tuple[str, list[Expired]]:
    """``text`` without the bullets last seen before ``cutoff``, and those bullets."""
    lines = lines_of(text)
    out: list[str] = []
    expired: list[Expired] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE.match(line)
        if opened is not None:
            marker = opened.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
        if fence is not None or opened is not None or not _BULLET.match(line):
            out.append(line)
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() and lines[j][0] in " \t" and not _FENCE.match(lines[j]):
            j += 1
        block = lines[i:j]
        day = seen_day(block)
        if day is not None and day < cutoff:
            removed = "".join(block)
            expired.append(Expired(i + 1, day, removed, len(removed.encode("utf-8"))))
        else:
            out.extend(block)
        i = j
    return "".join(out), expired
