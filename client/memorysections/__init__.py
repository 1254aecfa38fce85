"""Markdown memory files (MEMORY.md, INSIGHTS.md, daily files) as ``##`` sections of ``- `` bullets: parse and
render (the identity on any text), the section merge of an update into a file (``merge``), and the three-way merge
git runs as a merge driver (``merge3``). Standard library only; shared by the daemon and the client.

The format and the rules: docs/reference/files.md ("Sections and bullets"), docs/decisions (section merge).
"""

from __future__ import annotations

from memorysections.document import Block, Document, Section, bullet_key, bullets, parse, render, title_key
from memorysections.merge import Merge, merge
from memorysections.merge3 import merge3

__all__ = [
    "Block",
    "Document",
    "Merge",
    "Section",
    "bullet_key",
    "bullets",
    "merge",
    "merge3",
    "parse",
    "render",
    "title_key",
]
