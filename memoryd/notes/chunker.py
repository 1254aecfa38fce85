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
from itertools import pairwise

# Bump when chunk boundaries change for the same text: stored line ranges would be stale (forces a rebuild).
CHUNKER_VERSION = 2

# The lines that can matter, found by one regex over the whole text instead of a Python test per line:
# CommonMark level-2 ATX headings (up to three spaces, "##", then a space, a tab or the end of the line) and
# fences (up to three spaces, then at least three backticks or tildes, then an info string).
_MARKER = re.compile(r"^ {0,3}(?:##(?:[ \t]|$)|(`{3,}|~{3,})(.*))", re.MULTILINE)
# What str.strip() removes, plus the byte-order mark an editor hides: a line of only these is blank.
_BLANK = "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "\ufeff"


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
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _is_blank(line: str) -> bool:
    return not line.strip(_BLANK)


def _heading_lines(lines: list[str]) -> list[int]:
    """Indexes of the lines that start a ``## `` block, skipping fenced code."""
    text = "\n".join(lines).removeprefix("\ufeff")  # the mark does not move line numbers
    found: list[int] = []
    fence_char, fence_len = "", 0
    index, last = 0, 0
    for marker in _MARKER.finditer(text):
        index += text.count("\n", last, marker.start())
        last = marker.start()
        fence, info = marker[1], marker[2]
        if fence_len:
            if fence and fence[0] == fence_char and len(fence) >= fence_len and not info.strip():
                fence_len = 0
        elif fence:
            if not (fence[0] == "`" and "`" in info):  # a backtick fence's info string has no backtick
                fence_char, fence_len = fence[0], len(fence)
        else:
            found.append(index)
    return found


def _blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first index, end index exclusive, heading) of each ``## `` block; the preamble has heading ""."""
    starts = _heading_lines(lines)
    headings = set(starts)
    bounds = [*sorted({0, *starts}), len(lines)]
    return [
        (start, end, lines[start].removeprefix("\ufeff").strip() if start in headings else "")
        for start, end in pairwise(bounds)
    ]


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
        windows = (
            [(block_start, block_end)]
            if block_end - block_start <= max_lines
            else _windows(lines, block_start, block_end, max_lines)
        )
        for lo, hi in windows:
            while lo < hi and not lines[lo].strip(_BLANK):
                lo += 1
            while hi > lo and not lines[hi - 1].strip(_BLANK):
                hi -= 1
            if lo < hi:
                chunks.append(Chunk(lo + 1, hi, heading, "\n".join(lines[lo:hi])))
    return chunks
