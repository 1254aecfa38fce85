"""Section merge of MEMORY.md and INSIGHTS.md, as the consolidation pipeline uses it.

STAND-IN until ``client/memorysections`` (branch h-sections) lands: the same API (shared22.md) —
``merge(current, update) -> Merge`` and ``bullets(text)`` — over a small line-based reader. Once it lands this
module only re-exports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADING = re.compile(r"^##[ \t]+(.*?)[ \t]*$")
_REPLACE = re.compile(r"\s*\[replace\]\s*$", re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")


@dataclass(slots=True)
class Merge:
    text: str
    added: list[tuple[str, str]] = field(default_factory=list)
    duplicates: int = 0
    removed: list[tuple[str, str]] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    new_sections: list[str] = field(default_factory=list)
    kept_sections: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Section:
    title: str | None  # None: the preamble
    head: list[str]  # the heading line (none for the preamble)
    body: list[str]


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _sections(text: str) -> list[_Section]:
    sections = [_Section(None, [], [])]
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        opened = _FENCE.match(bare)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            sections[-1].body.append(line)
            continue
        if opened:
            fence = opened.group(1)
        heading = _HEADING.match(bare) if fence is None else None
        if heading:
            sections.append(_Section(heading.group(1), [line], []))
        else:
            sections[-1].body.append(line)
    return sections


def _bullets(body: list[str]) -> list[str]:
    """The bullets of a section body: a ``- `` or ``* `` line and its indented continuation lines, joined."""
    out: list[str] = []
    for line in body:
        bare = line.rstrip("\r\n")
        if bare.startswith(("- ", "* ")):
            out.append(bare[2:].strip())
        elif out and bare.startswith(("  ", "\t")) and bare.strip() and body:
            out[-1] += " " + bare.strip()
    return out


def bullets(text: str) -> list[tuple[str, str]]:
    """Every (section title, bullet) of ``text`` (the preamble's title is "")."""
    return [(s.title or "", b) for s in _sections(text) for b in _bullets(s.body)]


def _insert_at(body: list[str]) -> int:
    """Where new bullets go: after the section's last bullet (and its continuation lines), else after its last
    non-blank line."""
    last = None
    in_fence = False
    for n, line in enumerate(body):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (
            line.startswith(("- ", "* ")) or (last == n - 1 and line.startswith(("  ", "\t")) and line.strip())
        ):
            last = n
    if last is not None:
        return last + 1
    at = len(body)
    while at > 0 and not body[at - 1].strip():
        at -= 1
    return at


def merge(current: str, update: str) -> Merge:
    """``update``'s sections merged into ``current``: union of bullets without duplicates; ``## T [replace]``
    replaces T's bullets; sections the update leaves out are kept; new sections are appended in order."""
    sections = _sections(current)
    by_title = {_key(s.title): s for s in sections if s.title is not None}
    result = Merge(text="")
    touched: set[str] = set()
    for upd in _sections(update):
        if upd.title is None:
            continue
        replace = bool(_REPLACE.search(upd.title))
        title = _REPLACE.sub("", upd.title).strip()
        new = _bullets(upd.body)
        target = by_title.get(_key(title))
        touched.add(_key(title))
        if target is None:
            target = _Section(title, [f"## {title}\n"], [])
            sections.append(target)
            by_title[_key(title)] = target
            result.new_sections.append(title)
        have = _bullets(target.body)
        old = {_key(b) for b in have}
        if replace:
            keep = {_key(b) for b in new}
            result.removed += [(title, b) for b in have if _key(b) not in keep]
            result.replaced.append(title)
            target.body = [line for line in target.body if not line.startswith(("- ", "* ", "  ", "\t"))]
        seen = set() if replace else set(old)
        lines = []
        for bullet in new:
            if _key(bullet) in seen:
                result.duplicates += 1
                continue
            seen.add(_key(bullet))
            lines.append(f"- {bullet}\n")
            if _key(bullet) not in old:
                result.added.append((title, bullet))
        at = _insert_at(target.body)
        if at and not target.body[at - 1].endswith(("\n", "\r")):
            target.body[at - 1] += "\n"
        target.body[at:at] = lines
    result.kept_sections = [s.title for s in sections if s.title is not None and _key(s.title) not in touched]
    pieces: list[str] = []
    for s in sections:
        chunk = "".join(s.head + s.body)
        if pieces and pieces[-1] and chunk and not pieces[-1].endswith("\n"):
            pieces[-1] += "\n"
        fresh = s.title is not None and s.title in result.new_sections
        if fresh and pieces and pieces[-1].strip() and not pieces[-1].endswith("\n\n"):
            pieces[-1] += "\n"
        pieces.append(chunk)
    result.text = "".join(pieces)
    return result
