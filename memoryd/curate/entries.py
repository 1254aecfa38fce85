"""Daily entries as consolidation sees them: read from ``memory/YYYY-MM-DD.md``, named by a digest, and the entry
block a consolidation's ``daily_sections`` becomes.

An entry is a ``## YYYY-MM-DD HH:MM — type`` block of a daily file (the day header is not one). Its id is ``dn_`` and
the first 20 hex of sha256 over its path, heading and text: stable while the entry is unchanged, new when a person
edits it (an edited entry is offered again). Entries ``forget`` hid are never offered. Everything read is bounded:
at most ``MAX_FILES`` daily files, each at most ``MAX_FILE_BYTES``; a file that is not a regular file (a FIFO a clone
shipped) or too large is skipped.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from memoryd.fsio import FileTooLarge, NotRegularFile, list_dir, read_regular
from memoryd.notes import items
from memoryd.notes.daily import DAILY_NAME, ENTRY_HEADING, escape_structure, strip_private
from memoryd.rules.models import DAILY_SECTIONS
from memoryd.text import chunker

MAX_FILES = 400
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_ENTRY_CHARS = 4000  # one entry's text in a request; longer is cut (the file keeps it whole)
# daily_sections key → the entry type its block is written as
SECTION_TYPES = {"Topics": "summary", "Decisions": "decision", "Tool Activity": "event", "Open Questions": "note"}
assert tuple(SECTION_TYPES) == DAILY_SECTIONS


@dataclass(frozen=True, slots=True)
class Entry:
    entry_id: str
    path: str
    heading: str
    text: str
    day: str
    item_id: str | None


def entry_id(path: str, heading: str, text: str) -> str:
    digest = hashlib.sha256(f"{path}\0{heading}\0{text}".encode()).hexdigest()
    return f"dn_{digest[:20]}"


def daily_files(root: Path, *, since: date | None) -> list[str]:
    """``memory/YYYY-MM-DD.md`` paths from ``since`` on (all when None), oldest first, at most MAX_FILES (the
    newest)."""
    names = []
    for name, kind in list_dir(root / "memory", root=root):
        match = DAILY_NAME.match(name)
        if kind != "file" or match is None:
            continue
        try:
            day = date.fromisoformat(match.group(1))
        except ValueError:
            continue
        if since is None or day >= since:
            names.append(name)
    return [f"memory/{name}" for name in sorted(names)[-MAX_FILES:]]


def signature(root: Path, rels: tuple[str, ...]) -> tuple[object, ...]:
    """What the files ``rels`` hold, cheaply: each one's inode, size and change times (a stat, not a read)."""
    found: list[object] = []
    for rel in rels:
        try:
            info = os.lstat(root / rel)
            found.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        except OSError:
            found.append(None)
    return tuple(found)


def read(root: Path, rel: str) -> str | None:
    try:
        return read_regular(root / rel, MAX_FILE_BYTES, root=root).decode("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, NotRegularFile, FileTooLarge, OSError):
        return None


def parse(rel: str, text: str) -> list[Entry]:
    """The entries of one daily file, in file order (headings as the index's chunker sees them: none in code)."""
    lines = chunker.split_lines(text)
    starts = chunker.heading_lines(lines)
    out = []
    for n, start in enumerate(starts):
        heading = lines[start].strip()
        match = ENTRY_HEADING.match(heading)
        if match is None:
            continue
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = [line.rstrip() for line in lines[start + 1 : end]]
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        raw = "\n".join(body)
        if not raw.strip():
            continue
        out.append(Entry(entry_id(rel, heading, raw), rel, heading, raw, match.group(1), None))
    return out


def scan(root: Path, *, since: date | None) -> list[Entry]:
    """Every entry of the daily files from ``since`` on, oldest first, forgotten ones left out, each with its
    ``ent_…`` item id when remember wrote it."""
    hidden = items.hidden(root)
    by_key = item_ids(root)
    return [with_item(e, by_key) for rel in daily_files(root, since=since) for e in visible(root, rel, hidden)]


def visible(root: Path, rel: str, hidden: dict[str, set[tuple[str, str]]]) -> list[Entry]:
    """The entries of the daily file ``rel`` that ``forget`` did not hide (``hidden``: :func:`items.hidden`)."""
    text = read(root, rel)
    if text is None:
        return []
    gone = hidden.get(rel, set())
    return [
        e for e in parse(rel, text) if not gone or not items.names(gone, items.key_of(e.heading, e.text.split("\n")))
    ]


def item_ids(root: Path) -> dict[tuple[str, tuple[str, str]], str]:
    """(path, section key) → the ``ent_…`` id remember gave the entry."""
    return {(str(i.get("path")), items.section_key(i)): item_id for item_id, i in items.load(root).items()}


def with_item(entry: Entry, by_key: dict[tuple[str, tuple[str, str]], str]) -> Entry:
    found = by_key.get((entry.path, items.key_of(entry.heading, entry.text.split("\n"))))
    return Entry(entry.entry_id, entry.path, entry.heading, entry.text, entry.day, found)


def window_start(today: date, days: int) -> date:
    return today - timedelta(days=days - 1)


def for_request(entry: Entry) -> str:
    """An entry's text as a request carries it: private spans stripped, bounded."""
    text = strip_private(entry.text)
    return text if len(text) <= MAX_ENTRY_CHARS else text[: MAX_ENTRY_CHARS - 1] + "…"


def block(sections: dict[str, list[str]], now: datetime) -> tuple[str, list[tuple[str, str]]]:
    """The entries ``daily_sections`` become (one per non-empty section, typed by SECTION_TYPES, each bullet
    labelled with its section), and their (heading, text) pairs — what their entry ids are made of."""
    stamp = now.strftime("%Y-%m-%d %H:%M")
    parts: list[str] = []
    made = []
    for name in DAILY_SECTIONS:
        lines = [f"- {name}: {escape_structure(line)}" for line in sections.get(name, [])]
        if not lines:
            continue
        heading = f"## {stamp} — {SECTION_TYPES[name]}"
        parts.append("\n".join([heading, *lines]) + "\n")
        made.append((heading, "\n".join(lines)))
    return "\n".join(parts), made


def fallback_block(history_entry: str, now: datetime) -> tuple[str, list[tuple[str, str]]]:
    """The unstructured fallback: the consolidation's history line as one summary entry."""
    heading = f"## {now.strftime('%Y-%m-%d %H:%M')} — summary"
    line = f"- {escape_structure(history_entry)}"
    return f"{heading}\n{line}\n", [(heading, line)]


def appended(current: str | None, day: str, text: str) -> str:
    """A daily file with ``text`` (entry blocks) appended as remember would: the day header when the file is new,
    a blank line between blocks."""
    if not current:
        return f"## {day}\n\n{text}"
    sep = "\n" if current.endswith("\n") else "\n\n"
    return current + sep + text
