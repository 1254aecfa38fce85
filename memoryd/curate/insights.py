"""INSIGHTS.md bullets past their TTL, removed with everything else kept byte for byte.

A bullet carries the day it was last confirmed as a trailing HTML comment, `` <!-- seen: YYYY-MM-DD -->``
(the consolidation writes it on every bullet it adds or confirms). What a bullet is — a ``- ``, ``* `` or ``+ ``
item with the lines indented under it, never inside a code fence or an HTML comment — is
``memorysections``' model (the section parser the merge and the git driver use, so the three agree); the mark may
sit on any of its lines, the latest valid day counting. A bullet without a mark, or with a day that is not a date,
never expires. Every other byte — headings, the preamble, comments, blank lines, line endings (``\r\n`` too), a
missing final newline — stays as it was (``render(parse(text)) == text`` for any text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

import memorysections

SEEN = re.compile(r"<!--\s*seen:\s*(\d{4}-\d{2}-\d{2})\s*-->")


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
    doc = memorysections.parse(text)
    expired: list[Expired] = []
    line = 1
    for section in doc.all_sections():
        if section.heading is not None:
            line += 1
        if SEEN.search(section.raw) is None:  # nothing marked: its blocks are not even read
            line += section.raw.count("\n") - (section.heading is not None)
            continue
        kept = []
        for block in section.blocks:
            day = seen_day(block.lines) if block.bullet else None
            if day is not None and day < cutoff:
                raw = block.raw
                expired.append(Expired(line, day, raw, len(raw.encode("utf-8"))))
            else:
                kept.append(block)
            line += len(block.lines)
        if len(kept) != len(section.blocks):
            section.blocks = kept
    return (memorysections.render(doc) if expired else text), expired
