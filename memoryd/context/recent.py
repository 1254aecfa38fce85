"""Recent daily notes for a prompt that asks about the past: the entries of the newest daily files
(``memory/YYYY-MM-DD.md``), newest first. Blocking (reads files): call from a worker thread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd import fsio
from memoryd.notes import items
from memoryd.notes.daily import DAILY_NAME, DAY_HEADING, strip_private
from memoryd.text.chunker import heading_lines, split_lines

log = structlog.get_logger("memoryd.context")


@dataclass(frozen=True, slots=True)
class Entry:
    path: str  # memory/YYYY-MM-DD.md
    start_line: int  # the entry's heading line (1-based)
    lines: int
    heading: str  # without the "## "
    body: list[str]  # the lines after the heading, private spans stripped, trailing blanks dropped


def daily_files(root: Path, days: int) -> list[str]:
    """The newest ``days`` daily files' names, newest first."""
    try:
        names = [p.name for p in (root / "memory").iterdir() if DAILY_NAME.match(p.name)]
    except OSError:
        return []
    return sorted(names, reverse=True)[:days]


def entries(root: Path, days: int, max_file_bytes: int) -> list[Entry]:
    """The entries of the newest ``days`` daily files, newest first (a day's last entry before its first); forgotten
    entries left out."""
    found: list[Entry] = []
    hide = items.hidden(root)
    for name in daily_files(root, days):
        rel = f"memory/{name}"
        target = fsio.within(root, root / rel)
        if target is None:  # a symlink out of the workspace
            continue
        try:
            text = fsio.read_regular(target, max_file_bytes).decode("utf-8", "replace")
        except OSError as exc:  # gone meanwhile, a FIFO, too large: the other days still count
            log.warning("context_daily_unreadable", path=rel, error=type(exc).__name__)
            continue
        lines = split_lines(text)
        starts = heading_lines(lines)
        day: list[Entry] = []
        for lo, hi in zip(starts, [*starts[1:], len(lines)], strict=True):
            if DAY_HEADING.match(lines[lo]):  # the day's own header: no entry
                continue
            raw = lines[lo + 1 : hi]
            while raw and not raw[-1].strip():
                raw.pop()
            body = strip_private("\n".join(raw)).split("\n") if raw else []
            heading = lines[lo][3:].strip()
            if not items.names(hide.get(rel, set()), items.key_of(heading, raw)):
                day.append(Entry(rel, lo + 1, 1 + len(raw), heading, body))
        found.extend(reversed(day))
    return found
