"""Chunk Markdown by ``## `` headings (one chunk per heading block), with line windows for long blocks.

A chunk is what a search hit points at (``path`` + line range) and what ``get`` reads back, so line numbers must
be the ones an editor shows: 1-based, inclusive, counted the way :func:`split_lines` counts (``\\r\\n``, ``\\r``
and ``\\n`` end a line, as in Python's universal newlines and VS Code; nothing else does, unlike
``str.splitlines`` which also breaks on ``\\f``, ``\\x1c``, ``\\u2028``… that editors show inside a line).

Only level-2 ATX headings split (the daily and MEMORY.md formats use ``## `` for entries and sections); ``#`` and
``###`` stay inside their block. Lines inside fenced code blocks are never headings: a pasted shell session or
Markdown sample must not cut a note in two. Chunks are trimmed of blank lines at both ends so a hit's range
points at content; blank-only chunks are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Bump when chunk boundaries change for the same text: stored line ranges would be stale (forces a rebuild).
CHUNKER_VERSION = 2

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# CommonMark: up to three spaces of indentation, then "##" followed by a space, a tab or the end of the line.
_HEADING = re.compile(r" {0,3}##(?:[ \t]|$)")
# CommonMark fences: up to three spaces, then at least three backticks or tildes.
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    heading: str  # the nearest "## ..." line, stripped; "" before the first heading
    text: str  # the chunk's lines (without line terminators) joined by "\n"


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor numbers them (line N is ``split_lines(text)[N - 1]``).

    A final line terminator does not start another line, so ``"a\\n"`` is one line, as ``wc -l`` and editors
    count it. ``get`` should use this too, or its line numbers drift from the chunks'.
    """
    lines = _LINE_BREAK.split(text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _is_blank(line: str) -> bool:
    return not line.strip() or not line.replace("\ufeff", "").strip()


def _blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first index, end index exclusive, heading) of each ``## `` block; the preamble has heading ""."""
    blocks: list[tuple[int, int, str]] = []
    start, heading = 0, ""
    fence_char, fence_len = "", 0
    for index, raw in enumerate(lines):
        line = raw.removeprefix("\ufeff") if index == 0 else raw  # an editor hides a byte-order mark
        if fence_len:
            closing = _FENCE.fullmatch(line)
            if closing and closing[1][0] == fence_char and len(closing[1]) >= fence_len and not closing[2].strip():
                fence_len = 0
            continue
        opening = _FENCE.fullmatch(line)
        if opening and not (opening[1][0] == "`" and "`" in opening[2]):  # a backtick fence's info has none
            fence_char, fence_len = opening[1][0], len(opening[1])
            continue
        if _HEADING.match(line):
            if index > start:
                blocks.append((start, index, heading))
            start, heading = index, line.strip()
    if len(lines) > start:
        blocks.append((start, len(lines), heading))
    return blocks


def _windows(lines: list[str], start: int, end: int, max_lines: int) -> list[tuple[int, int]]:
    """Split ``lines[start:end]`` into windows of at most ``max_lines`` lines, cutting after a blank line in
    the second half of a window when there is one (a paragraph or bullet group stays whole)."""
    windows: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        cut = min(pos + max_lines, end)
        if cut < end:
            for candidate in range(cut, pos + max_lines // 2, -1):
                if _is_blank(lines[candidate - 1]):
                    cut = candidate
                    break
        windows.append((pos, cut))
        pos = cut
    return windows


def chunk_markdown(text: str, *, max_lines: int = 40) -> list[Chunk]:
    """Chunks of ``text`` in order; together they cover every non-blank line exactly once."""
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    lines = split_lines(text)
    chunks: list[Chunk] = []
    for block_start, block_end, heading in _blocks(lines):
        for lo, hi in _windows(lines, block_start, block_end, max_lines):
            while lo < hi and _is_blank(lines[lo]):
                lo += 1
            while hi > lo and _is_blank(lines[hi - 1]):
                hi -= 1
            if lo < hi:
                chunks.append(Chunk(lo + 1, hi, heading, "\n".join(lines[lo:hi])))
    return chunks
