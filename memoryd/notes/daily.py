"""The daily log format (seed 003 templates): ``memory/YYYY-MM-DD.md`` with a ``## YYYY-MM-DD`` header written
once, then entries ``## YYYY-MM-DD HH:MM — <type>`` followed by bullets.

Plain functions, no I/O: the service decides where and when to write.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memoryd.text import chunker

ENTRY_TYPES = ("decision", "event", "summary", "note")
# <private> tags as people and models type them: any case, spaces or line breaks inside the brackets, attributes,
# a self-closing slash, ASCII or full-width brackets (＜private＞: stripping too much is the safe mistake). A line
# break or tab may also arrive JSON-escaped (``\n``, ``\t``, ``\u000b``, escaped again inside a JSON string): the
# hooks send a tool's structured input as compact JSON text, and this is the one function that strips it.
_SPACE = r"(?:\s|\\+[nrtfb]|\\+u00[01][0-9a-fA-F])"
_PRIVATE_TAG = re.compile(
    # possessive quantifiers: no backtracking, so a long run of spaces or backslashes after a "<" costs linear time
    rf"[<\uff1c]{_SPACE}*+(?:(/){_SPACE}*+)?private(?:(?:{_SPACE}|/)[^<>\uff1c\uff1e]*+)?[>\uff1e]",
    re.IGNORECASE,
)
ARCHIVE_DIR = "memory/archive"  # archived daily files (lifecycle.archive): indexed; searched only when asked
DAILY_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
DAY_HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2})\s*$")
ENTRY_HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) — (\S+)\s*$")
LABELS = {"reason": "Reason", "followup": "Follow-up"}
KEYWORDS_LABEL = "Keywords"
_KEYWORD_SPLIT = re.compile(r"[,\uff0c\u3001;\uff1b\n\r]")  # , ， 、 ; ； and line breaks end a keyword


def strip_private(text: str) -> str:
    """Remove ``<private>…</private>`` spans: nested ones count (the outermost closing tag ends the span), an
    unclosed one runs to the end (the safe reading), a stray closing tag is dropped. What is left holds no tag,
    also none that removing a span glued together (``<pri<private>x</private>vate>``)."""
    for _pass in range(4):
        stripped = _strip_spans(text)
        if stripped == text:
            return text
        text = stripped
    found = _PRIVATE_TAG.search(text)  # still glued tags after several passes: a crafted text, cut at the first
    return text if found is None else text[: found.start()]


def strip_private_value(value: Any) -> Any:
    """``value`` (a JSON value) with <private> spans stripped from every string inside it, keys included. The
    callers' params were checked for depth, so the recursion is bounded."""
    if isinstance(value, str):
        return strip_private(value)
    if isinstance(value, dict):
        return {strip_private(k) if isinstance(k, str) else k: strip_private_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_private_value(v) for v in value]
    return value


def _strip_spans(text: str) -> str:
    kept: list[str] = []
    depth = 0
    position = 0
    for tag in _PRIVATE_TAG.finditer(text):
        if depth == 0:
            kept.append(text[position : tag.start()])
        if tag.group(1):
            depth = max(depth - 1, 0)
        else:
            depth += 1
        position = tag.end()
    if depth == 0:
        kept.append(text[position:])
    return "".join(kept)


def clean_keywords(keywords: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The words an entry should also be found by, as its keywords line keeps them: ``<private>`` spans stripped
    (over all of them together, so a span that runs across two keywords goes whole), split at commas (ASCII and
    full-width), 、, semicolons and line breaks, spaces collapsed, empty and repeated ones (ignoring case) dropped."""
    stripped = strip_private("\n".join(keywords))
    seen: set[str] = set()
    out: list[str] = []
    for part in _KEYWORD_SPLIT.split(stripped):
        word = " ".join(part.split())
        if word and word.casefold() not in seen:
            seen.add(word.casefold())
            out.append(word)
    return tuple(out)


def keywords_line(keywords: tuple[str, ...]) -> str:
    """The line that keeps an entry's keywords, a continuation of its text's bullet (so the passage search ranks
    and the vector index embeds for the text holds them too: decision 0012)."""
    return f"  {KEYWORDS_LABEL}: {', '.join(keywords)}"


# What Markdown (CommonMark) or the chunker would read as structure at the start of a line with at most three
# columns of indentation: an ATX heading, a code fence, a setext underline. 4+ columns is code or paragraph text.
_STRUCTURE = re.compile(r"#{1,6}(?:[ \t]|$)|`{3,}|~{3,}|=+[ \t]*$|-+[ \t]*$")


def escape_structure(line: str) -> str:
    """``line`` with a backslash before its first character when that character would start a heading, a code
    fence or a setext underline: it then renders as the text it is (``\\## x`` shows ``## x``)."""
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    # columns counted from where the bullet's content starts (column 2), as a tab stop there counts them
    if len(("  " + indent).expandtabs(4)) - 2 < 4 and _STRUCTURE.match(body):
        return f"{indent}\\{body}"
    return line


def entry_id(now: float | None = None) -> str:
    """Unique and time-sortable: milliseconds since the epoch in hex, then randomness."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"ent_{ms:012x}{secrets.token_hex(4)}"


def _bullet(text: str, label: str | None = None) -> list[str]:
    lines = [escape_structure(line.rstrip()) for line in text.strip().splitlines()] or [""]
    head = lines[0]
    if label:
        first = f"- {label}: {head}"
    elif head.startswith("- "):
        first = f"- {escape_structure(head[2:])}"
    else:
        first = f"- {head}"
    # Continuation lines are indented so they stay inside the bullet; escape_structure has made sure none of them
    # (nor the first) reads as a heading, a fence or an underline, which would split the entry in the index,
    # swallow the entries after it, or break the file's layout.
    return [first] + [f"  {line}" if line else "" for line in lines[1:]]


@dataclass(frozen=True, slots=True)
class PlannedEntry:
    path: str  # relative to the workspace
    header: str  # text to write first when the file is new ("" otherwise)
    entry: str  # the entry block, ending with a newline
    day: str
    heading: str


def plan_entry(
    *,
    now: datetime,
    kind: str,
    text: str,
    reason: str | None,
    followup: str | None,
    file_exists: bool,
    file_ends_with_newline: bool = True,
    keywords: tuple[str, ...] = (),
) -> PlannedEntry:
    day = now.strftime("%Y-%m-%d")
    heading = f"## {day} {now.strftime('%H:%M')} — {kind}"
    lines = [heading, *_bullet(text)]
    if keywords:  # the text's last line is never blank (_bullet strips it): this line continues its bullet
        lines.append(keywords_line(keywords))
    for key, value in (("reason", reason), ("followup", followup)):
        if value and value.strip():
            lines += _bullet(value, LABELS[key])
    header = "" if file_exists else f"## {day}\n"
    prefix = "\n" if file_exists and file_ends_with_newline else ("\n\n" if file_exists else "\n")
    return PlannedEntry(f"memory/{day}.md", header, prefix + "\n".join(lines) + "\n", day, heading)


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str  # "error" | "warning"
    path: str
    line: int | None
    message: str


def check_daily(rel_path: str, text: str) -> list[Problem]:
    """Heading formats of one daily file: the day header first, entries dated that day with a known type."""
    name = rel_path.rsplit("/", 1)[-1]
    match = DAILY_NAME.match(name)
    if match is None:
        return []
    day = match.group(1)
    problems: list[Problem] = []
    try:
        datetime.strptime(day, "%Y-%m-%d")
    except ValueError:
        problems.append(Problem("error", rel_path, None, f"file name {name} is not a real date"))
    seen_header = False
    lines = chunker.split_lines(text)
    # the index's own reader: a "## " line inside any fence the index sees as code is code here too
    for index in chunker.heading_lines(lines):
        number, line = index + 1, lines[index].strip(" \t")
        if DAY_HEADING.match(line):
            if line.strip() != f"## {day}":
                problems.append(
                    Problem("error", rel_path, number, f"day header says {line[3:].strip()}, file is {day}")
                )
            elif seen_header:
                problems.append(Problem("warning", rel_path, number, "day header repeated"))
            seen_header = True
            continue
        entry = ENTRY_HEADING.match(line)
        if entry is None:
            problems.append(
                Problem(
                    "warning",
                    rel_path,
                    number,
                    f"heading {line.strip()[:60]!r} is not '## YYYY-MM-DD HH:MM — type' (decision, event, summary, note)",
                )
            )
            continue
        if entry.group(1) != day:
            problems.append(Problem("warning", rel_path, number, f"entry dated {entry.group(1)} in the file for {day}"))
        if entry.group(3) not in ENTRY_TYPES:
            problems.append(Problem("warning", rel_path, number, f"unknown entry type {entry.group(3)!r}"))
        try:
            datetime.strptime(entry.group(2), "%H:%M")
        except ValueError:
            problems.append(Problem("error", rel_path, number, f"time {entry.group(2)} is not HH:MM"))
    if text.strip() and not seen_header:
        problems.append(Problem("warning", rel_path, 1, f"missing the day header '## {day}'"))
    return problems
