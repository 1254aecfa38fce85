"""A passage: the few lines of a section that answer (a bullet, a code block, a few lines of a paragraph), where
they are and under which heading. The one record the text index's ranking, the vector store and the search
pipeline share (decision 0005)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Passage:
    path: str  # relative to the workspace
    start_line: int  # 1-based line of the file
    lines: int
    heading: str  # its section's heading, without the ##
    section_start: int  # the section's first line
    section_lines: int
    text: str  # the passage's lines, joined by "\n"


@dataclass(frozen=True, slots=True)
class Unit:
    """A passage to embed: its text's digest finds a vector made before for the same text."""

    passage: Passage
    digest: str
    priority: int  # lower first: embedded before the rest


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A passage the vector side found."""

    passage: Passage
    digest: str
    distance: float  # cosine distance (1 - cosine similarity), 0 = same direction
