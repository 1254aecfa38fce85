"""Sanitize: what a consolidation's Markdown (``memory_update``, ``insights_update``) may write, under the
``curate`` settings (docs/reference/curation.md, "Sanitize").

``sanitize(markdown, policy)`` returns the text to merge, whether anything was taken out, and what was dropped and
why — reasons and line numbers only, never the text (a dropped line may be a secret). Never written, whatever the
policy: ``<private>`` spans (every spelling the notes' stripper knows) and secrets (API keys, tokens, JWTs, private
key blocks, ``password=``-style assignments, also split over two lines). The rest is policy: too long bullets, lines
that hold only a date or a URL, repeated bullets, lines outside any ``##`` section. Headings are kept (a section's
bullets stay in their section) unless sanitize emptied their section, so a ``[replace]`` section never becomes
"replace with nothing" because its bullets were dropped.

Pure functions, linear in the update's size (a 10 MB update or 100,000 bullets included).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from memoryd.curate import patterns
from memoryd.notes.daily import private_spans, strip_private
from memoryd.settings import CurateSettings

Reason = Literal[
    "secret", "private", "too_long", "date_line", "url", "duplicate", "outside_section", "empty", "empty_section"
]
# The reasons sanitize.jsonl always counts (zeros included); the others are counted when they happen.
ROW_REASONS: tuple[Reason, ...] = ("secret", "url", "date_line", "too_long", "duplicate", "private")
FENCE_FACTOR = 4  # a code block may be this many times max_bullet_chars long, whole
ELLIPSIS = "…"

_HEADING = re.compile(r" {0,3}##(?:[ \t]|$)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_BULLET = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")

SanitizePolicy = CurateSettings  # the policy is the settings group, whole


@dataclass(frozen=True, slots=True)
class Dropped:
    """One thing sanitize took out (or cut, ``cut=True``): why, and where — the update's line number (1-based,
    counted after ``<private>`` spans are removed; for ``private``, where the span opened in the update as given)
    and how many lines. Never the text."""

    reason: Reason
    line: int
    lines: int = 1
    cut: bool = False


@dataclass(frozen=True, slots=True)
class Sanitized:
    text: str  # what may be merged: lines kept as given (line endings "\n"), runs of blank lines collapsed
    modified: bool  # something was dropped or cut
    dropped: list[Dropped] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Dropped (and cut) per reason: every reason of ``ROW_REASONS``, zeros included, then any other."""
        found = Counter(d.reason for d in self.dropped)
        return {**{r: found.get(r, 0) for r in ROW_REASONS}, **{r: n for r, n in found.items() if r not in ROW_REASONS}}


@dataclass(slots=True)
class _Item:
    kind: Literal["heading", "bullet", "text", "fence", "blank"]
    start: int  # index of its first line
    lines: list[str]
    section: int  # index of its section's heading item, -1 before the first
    reason: Reason | None = None
    cut: bool = False

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def sanitize(markdown: str, policy: SanitizePolicy) -> Sanitized:
    """The update as it may be written (module docstring)."""
    dropped: list[Dropped] = []
    raw = markdown.replace("\r\n", "\n").replace("\r", "\n")
    opened = private_spans(raw)
    if opened:
        line, position = 1, 0
        for offset in opened:  # ascending: one pass over the text
            line += raw.count("\n", position, offset)
            position = offset
            dropped.append(Dropped("private", line))
        raw = strip_private(raw)
    items = _items(raw.split("\n"))
    _secrets(items)
    _policy(items, policy)
    _empty_sections(items)
    kept: list[tuple[int, str]] = []
    cut: set[int] = set()
    for item in items:
        if item.reason is not None:
            dropped.append(Dropped(item.reason, item.start + 1, len(item.lines), item.cut))
            if not item.cut:
                continue
            cut.update(range(item.start, item.start + len(item.lines)))
        elif item.kind == "blank" and (not kept or kept[-1][1] == ""):
            continue
        kept += [(item.start + i, line) for i, line in enumerate(item.lines)]
    kept = _verified(kept, dropped, cut)
    while kept and kept[-1][1] == "":
        kept.pop()
    text = "".join(line + "\n" for _, line in kept)
    dropped.sort(key=lambda d: d.line)
    return Sanitized(text=text, modified=bool(dropped), dropped=dropped)


def _items(lines: list[str]) -> list[_Item]:
    """The update cut into headings, bullets (with their indented continuation lines), text lines, code blocks
    and blank lines."""
    items: list[_Item] = []
    section = -1
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            mark = fence.group(1)
            end = i + 1
            while end < len(lines) and not _closes(lines[end], mark):
                end += 1
            end = min(end + 1, len(lines))
            items.append(_Item("fence", i, lines[i:end], section))
            i = end
            continue
        if not line.strip():
            items.append(_Item("blank", i, [line], section))
        elif _HEADING.match(line):
            section = len(items)
            items.append(_Item("heading", i, [line], section))
        elif _BULLET.match(line):
            end = i + 1
            while end < len(lines) and _continues(lines[end]):
                end += 1
            items.append(_Item("bullet", i, lines[i:end], section))
            i = end
            continue
        else:
            items.append(_Item("text", i, [line], section))
        i += 1
    return items


def _closes(line: str, mark: str) -> bool:
    body = line.lstrip(" ")
    return len(line) - len(body) <= 3 and body.startswith(mark[0] * len(mark)) and not body.strip(mark[0]).strip()


def _continues(line: str) -> bool:
    """An indented, non-blank line that is not itself a bullet, a heading or a fence: part of the bullet above."""
    return (
        line[:1] in (" ", "\t")
        and bool(line.strip())
        and not _BULLET.match(line)
        and not _HEADING.match(line)
        and not _FENCE.match(line)
    )


def _secrets(items: list[_Item]) -> None:
    """Mark every item holding a secret: in one line, across a line break (a key split over two lines), or inside
    a private key block (from its BEGIN line to its END line, or to the next section). A heading holding one takes
    its whole section with it."""
    in_key = False
    previous: tuple[_Item, str] | None = None
    for item in items:
        if item.kind == "heading":
            in_key = False
        text = item.text
        if in_key:
            item.reason = "secret"
            if patterns.KEY_END.search(text):
                in_key = False
        elif patterns.has_secret(text) or any(
            patterns.split_secret(a, b) for a, b in zip(item.lines, item.lines[1:], strict=False)
        ):
            item.reason = "secret"
            begin = patterns.KEY_BEGIN.search(text)
            in_key = begin is not None and patterns.KEY_END.search(text, begin.end()) is None
        if item.kind == "blank":
            continue
        if previous is not None and patterns.split_secret(previous[1], item.lines[0]):
            previous[0].reason = item.reason = "secret"
        previous = (item, item.lines[-1])
    for item in items:
        if item.kind != "heading" and item.section >= 0 and items[item.section].reason == "secret":
            item.reason = "secret"


def _policy(items: list[_Item], policy: SanitizePolicy) -> None:
    """Mark what the policy drops or cuts (items already marked as secrets are left so)."""
    limit = policy.max_bullet_chars
    seen: set[tuple[int, str]] = set()
    for item in items:
        if item.reason is not None or item.kind == "blank":
            continue
        if item.section < 0 and policy.outside_sections == "drop":
            item.reason = "outside_section"
        elif item.kind == "heading":
            item.reason = "too_long" if len(item.text) > limit else None
        elif item.kind == "fence":
            item.reason = "too_long" if len(item.text) > limit * FENCE_FACTOR else None
        else:
            item.reason = _judge(item, policy, seen)
        if item.reason is None and item.kind in ("bullet", "text") and len(item.text) > limit:
            _too_long(item, limit, policy.too_long == "truncate")
    for item in items:  # a section heading over the limit takes its section (cutting it would rename it)
        if item.reason is None and item.section >= 0 and items[item.section].reason == "too_long":
            item.reason = "too_long"


def _judge(item: _Item, policy: SanitizePolicy, seen: set[tuple[int, str]]) -> Reason | None:
    """Why a bullet or text line goes (None: it stays): empty, only a date, only a URL, said before in its
    section."""
    said = patterns.content(item.text)
    if not said:
        return "empty"
    if policy.drop_date_lines and patterns.date_only(said):
        return "date_line"
    if policy.drop_url_lines and patterns.url_only(said):
        return "url"
    if item.kind == "bullet" and policy.drop_duplicates:
        key = (item.section, patterns.normal(said))
        if key in seen:
            return "duplicate"
        seen.add(key)
    return None


def _too_long(item: _Item, limit: int, truncate: bool) -> None:
    item.reason = "too_long"
    if not truncate:
        return
    cut = item.text[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS
    item.lines = cut.split("\n")
    item.cut = True


def _empty_sections(items: list[_Item]) -> None:
    """A heading whose section had lines in the update and lost them all to sanitize goes too."""
    had: Counter[int] = Counter()
    left: Counter[int] = Counter()
    for item in items:
        if item.kind in ("blank", "heading") or item.section < 0:
            continue
        had[item.section] += 1
        if item.reason is None or item.cut:
            left[item.section] += 1
    for section in had:
        heading = items[section]
        if heading.reason is None and not left[section]:
            heading.reason = "empty_section"


def _verified(kept: list[tuple[int, str]], dropped: list[Dropped], cut: set[int]) -> list[tuple[int, str]]:
    """The kept lines checked once more where dropping or cutting changed them: a cut bullet's lines, and each line
    break between lines that were not neighbours in the update (removing what lay between may join a secret's two
    halves). A line still holding a secret is removed, and the check repeats."""
    for _pass in range(8):
        bad = {i for i, (n, line) in enumerate(kept) if n in cut and patterns.has_secret(line)}
        bad |= {
            j
            for i in range(len(kept) - 1)
            if (kept[i + 1][0] != kept[i][0] + 1 or kept[i][0] in cut)
            and patterns.split_secret(kept[i][1], kept[i + 1][1])
            for j in (i, i + 1)
        }
        if not bad:
            return kept
        dropped += [Dropped("secret", kept[i][0] + 1) for i in sorted(bad)]
        kept = [line for i, line in enumerate(kept) if i not in bad]
        cut |= {n for n, _ in kept}  # after a removal, check every break again
    dropped += [Dropped("secret", n + 1) for n, _ in kept]
    return []
