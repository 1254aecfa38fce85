"""Chunk Markdown by ``## `` headings (one chunk per heading block), falling back to line windows for long blocks.

Line numbers are 1-based and inclusive, as an editor shows them. Lines inside fenced code blocks never start a
chunk. Blank-only chunks are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

CHUNKER_VERSION = 1


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    heading: str
    text: str


def _blocks(lines: list[str]) -> list[tuple[int, str, list[str]]]:
    """(first line number, heading, lines) per ``## `` block; text before the first heading has heading ""."""
    blocks: list[tuple[int, str, list[str]]] = []
    current: list[str] = []
    start, heading = 1, ""
    fence: str | None = None
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is None and line.startswith("## "):
            if current:
                blocks.append((start, heading, current))
            start, heading, current = number, line.rstrip(), []
        current.append(line)
    if current:
        blocks.append((start, heading, current))
    return blocks


def chunk_markdown(text: str, *, max_lines: int = 40) -> list[Chunk]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    chunks: list[Chunk] = []
    for start, heading, block in _blocks(lines):
        for offset in range(0, len(block), max_lines):
            window = block[offset : offset + max_lines]
            # trim blank lines at both ends so line ranges point at content
            lo, hi = 0, len(window)
            while lo < hi and not window[lo].strip():
                lo += 1
            while hi > lo and not window[hi - 1].strip():
                hi -= 1
            if lo == hi:
                continue
            first = start + offset + lo
            chunks.append(Chunk(first, first + (hi - lo) - 1, heading, "\n".join(window[lo:hi])))
    return chunks
