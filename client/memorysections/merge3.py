"""The three-way merge git runs on memory files (``memoryctl merge-file %O %A %B``): a section union that never
writes conflict markers and never loses a bullet one side has, except one the other side deliberately deleted.

The files are compared as sequences, first of sections (matched by title, ``title_key``; the n-th section of a
title matches the n-th), then, inside a section both sides changed, of units: bullets (matched by ``bullet_key``)
and other lines (matched by their text). Where only one side changed a stretch, its version is taken, as git
would. Where both changed the same stretch, the result is the union: ours, then what theirs adds, without a
bullet twice; a unit that was in the base and that one side removed while the other left it exactly as it was is
removed (a deliberate forget travels); a unit one side removed and the other changed is kept, changed. A bullet
both sides changed (the same key, different text) keeps the newer ``<!-- seen: … -->`` date's version, else ours.

``merge3(b, x, x) == x``, ``merge3(b, b, x) == x``, ``merge3(b, x, b) == x``; two sides that change different
sections give the same result in either order.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from memorysections.document import BOM, Block, Document, Section, parse, title_key
from memorysections.merge import close_open

__all__ = ["merge3"]

TYPE_CHECKING = False  # `import typing` costs the merge driver, a process per file, ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence
    from typing import TypeVar

    U = TypeVar("U")
OURS, THEIRS, BOTH = 0, 1, 2


def merge3(base: str, ours: str, theirs: str) -> str:
    """Ours and theirs merged against their common ancestor base (see the module's doc)."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    b, o, t = parse(base), parse(ours), parse(theirs)
    eol = o.eol if ours else t.eol
    for doc in (b, o, t):  # a fence or comment a side leaves open would swallow what the other side puts after it
        close_open(doc, doc.eol)
        _drop_bom(doc)
    ends = _ends(o, t)
    sides = _Sides()
    preamble = Section(None, sides.merge_blocks(b.preamble.blocks, o.preamble.blocks, t.preamble.blocks))
    sections = sides.merge_sections(b.sections, o.sections, t.sections)
    chunks: list[str] = []
    previous: Section | None = None
    for section in [preamble, *sections]:
        text = _text(section, eol)
        if not text:
            continue
        if chunks and not chunks[-1].endswith("\n"):  # a side's last line, without an ending, is no longer last
            chunks[-1] += eol
        if (  # what ended a side's file is now followed by a section: a blank line between them
            section.heading is not None
            and previous is not None
            and _ends_file(previous, ends)
            and _last_line(chunks[-1]).strip()
        ):
            chunks.append(eol)
        chunks.append(text)
        previous = section
    if chunks and (ours if ours else theirs).startswith(BOM):
        chunks[0] = BOM + chunks[0]
    return "".join(chunks)


def _text(section: Section, eol: str) -> str:
    """A section's text; in one merged from both sides, every line but its last ends with a line ending."""
    if not section.parsed:
        return section.raw
    lines = ([section.heading] if section.heading is not None else []) + [
        line for block in section.blocks for line in block.lines
    ]
    for i in range(len(lines) - 1):
        if not lines[i].endswith("\n"):
            lines[i] += eol
    return "".join(lines)


def _last_line(text: str) -> str:
    body = text[:-1] if text.endswith("\n") else text
    body = body[:-1] if body.endswith("\r") else body
    return body[body.rfind("\n") + 1 :]


def _ends(*docs: Document) -> set[int]:
    """What ends each side's file: its last section and that section's last block (by identity)."""
    out: set[int] = set()
    for doc in docs:
        last = (doc.sections or [doc.preamble])[-1]
        out.add(id(last))
        if last.blocks:
            out.add(id(last.blocks[-1]))
    return out


def _ends_file(section: Section, ends: set[int]) -> bool:
    if id(section) in ends:
        return True
    return section.parsed and bool(section.blocks) and id(section.blocks[-1]) in ends


def _drop_bom(doc: Document) -> None:
    """The BOM off a document's first line (that line may not be first in the merge; the result gets ours')."""
    if doc.preamble.blocks:
        block = doc.preamble.blocks[0]
        block.lines[0] = block.lines[0].removeprefix(BOM)
        block._key = None
    elif doc.sections and doc.sections[0].heading is not None:
        doc.sections[0].heading = doc.sections[0].heading.removeprefix(BOM)


# --- units ------------------------------------------------------------------------------------------------------


def _block_raw(block: Block) -> str:
    return block.raw


def _pick_block(base: Block | None, ours: Block, theirs: Block) -> Block:
    """One version of a unit both sides have: the side that changed it; if both did, the newer seen date, else
    ours."""
    o, t = ours.raw, theirs.raw
    if o == t or (base is not None and t == base.raw):
        return ours
    if base is not None and o == base.raw:
        return theirs
    so, st = ours.seen, theirs.seen
    return theirs if st is not None and (so is None or st > so) else ours


class _Sides:
    """The merge of sections and of their blocks, with what the three sides share computed once: a title's key
    per heading line, a block's key per text (most bullets are the same text on all three sides)."""

    def __init__(self) -> None:
        self.titles: dict[str, str] = {}
        self.blocks: dict[str, tuple[str, str]] = {}

    def title_key(self, section: Section) -> str:
        heading = section.heading or ""
        key = self.titles.get(heading)
        if key is None:
            key = self.titles[heading] = title_key(section.title)
        return key

    def section_keys(self, sections: Sequence[Section]) -> list[Hashable]:
        """(title key, n): the n-th section of a title matches the n-th on the other side."""
        counts: dict[str, int] = {}
        keys: list[Hashable] = []
        for s in sections:
            k = self.title_key(s)
            n = counts.get(k, 0)
            counts[k] = n + 1
            keys.append((k, n))
        return keys

    def block_key(self, block: Block) -> tuple[str, str]:
        raw = block.raw
        key = self.blocks.get(raw)
        if key is None:
            key = self.blocks[raw] = ("b", block.key) if block.bullet else ("l", block.key)
        else:
            block._key = key[1]
        return key

    def pick_section(self, base: Section | None, ours: Section, theirs: Section) -> Section:
        o, t = ours.raw, theirs.raw
        if o == t or (base is not None and t == base.raw):
            return ours
        if base is not None and o == base.raw:
            return theirs
        heading = ours.heading
        if base is not None and ours.heading == base.heading:
            heading = theirs.heading
        blocks = self.merge_blocks(base.blocks if base is not None else [], ours.blocks, theirs.blocks)
        return Section(heading, blocks)

    def merge_blocks(self, base: list[Block], ours: list[Block], theirs: list[Block]) -> list[Block]:
        keys: list[list[Hashable]] = [[self.block_key(b) for b in side] for side in (base, ours, theirs)]
        merged = _diff3(base, ours, theirs, keys, _block_raw, _pick_block)
        # a bullet theirs added that ours has elsewhere in the section: once
        ours_bullets = {b.key for b, origin in merged if b.bullet and origin != THEIRS}
        out: list[Block] = []
        seen: set[str] = set()
        for block, origin in merged:
            if block.bullet and origin == THEIRS:
                if block.key in ours_bullets or block.key in seen:
                    continue
                seen.add(block.key)
            out.append(block)
        return out

    def merge_sections(self, base: list[Section], ours: list[Section], theirs: list[Section]) -> list[Section]:
        keys = [self.section_keys(side) for side in (base, ours, theirs)]
        merged = _diff3(base, ours, theirs, keys, _section_raw, self.pick_section)
        # a section theirs added under a title ours also added elsewhere: its bullets go into ours'
        by_key: dict[str, int] = {}
        out: list[Section] = []
        for section, origin in merged:
            key = self.title_key(section)
            if origin == THEIRS and key in by_key:
                i = by_key[key]
                out[i] = self.pick_section(None, out[i], section)
                continue
            if origin != THEIRS and key not in by_key:
                by_key[key] = len(out)
            out.append(section)
        return out


def _section_raw(section: Section) -> str:
    return section.raw


# --- the merge of sequences -------------------------------------------------------------------------------------


def _occurrences(keys: Sequence[Hashable]) -> list[tuple[Hashable, int]]:
    counts: dict[Hashable, int] = {}
    out = []
    for k in keys:
        n = counts.get(k, 0)
        counts[k] = n + 1
        out.append((k, n))
    return out


MATCH_BUDGET = 4_000_000  # units × units a SequenceMatcher may compare (past it, the stretch is one change)


def _matches(a: Sequence[Hashable], b: Sequence[Hashable]) -> dict[int, int]:
    """Index in ``a`` → index in ``b`` of the units a longest matching finds in both (increasing in both): the
    common head and tail, then ``difflib`` in between — unless that would compare more than MATCH_BUDGET pairs
    (SequenceMatcher is quadratic on runs of equal units, which a crafted file can hold): then the middle matches
    nothing, and the merge takes the union of the two sides there."""
    n, m = len(a), len(b)
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    out = {i: i for i in range(head)}
    out.update({n - 1 - d: m - 1 - d for d in range(tail)})
    middle_a, middle_b = a[head : n - tail], b[head : m - tail]
    if middle_a and middle_b and len(middle_a) * len(middle_b) <= MATCH_BUDGET:
        for i, j, size in SequenceMatcher(None, middle_a, middle_b, autojunk=False).get_matching_blocks():
            for d in range(size):
                out[head + i + d] = head + j + d
    return out


def _diff3(
    base: Sequence[U],
    ours: Sequence[U],
    theirs: Sequence[U],
    keys: list[list[Hashable]],
    raw: Callable[[U], str],
    pick: Callable[[U | None, U, U], U],
) -> list[tuple[U, int]]:
    """The three sequences merged: the units all three share are the fixed points; between two fixed points a
    stretch only one side changed is taken from it, one both changed is their union (``_union``)."""
    bk, ok, tk = keys
    to_ours, to_theirs = _matches(bk, ok), _matches(bk, tk)
    out: list[tuple[U, int]] = []
    pb = po = pt = 0
    for i in [*(i for i in range(len(base)) if i in to_ours and i in to_theirs), len(base)]:
        j = to_ours[i] if i < len(base) else len(ours)
        k = to_theirs[i] if i < len(base) else len(theirs)
        if j < po or k < pt:  # not increasing on both sides (cannot happen with one matching per side): skip
            continue
        out += _stretch(base[pb:i], ours[po:j], theirs[pt:k], (bk[pb:i], ok[po:j], tk[pt:k]), raw, pick)
        if i < len(base):
            out.append((pick(base[i], ours[j], theirs[k]), BOTH))
        pb, po, pt = i + 1, j + 1, k + 1
    return out


def _stretch(
    base: Sequence[U],
    ours: Sequence[U],
    theirs: Sequence[U],
    keys: tuple[Sequence[Hashable], Sequence[Hashable], Sequence[Hashable]],
    raw: Callable[[U], str],
    pick: Callable[[U | None, U, U], U],
) -> list[tuple[U, int]]:
    b_raw, o_raw, t_raw = [raw(u) for u in base], [raw(u) for u in ours], [raw(u) for u in theirs]
    if o_raw == b_raw:
        return [(u, THEIRS) for u in theirs]
    if t_raw == b_raw or o_raw == t_raw:
        return [(u, OURS) for u in ours]
    return _union(base, ours, theirs, keys, raw, pick)


def _union(
    base: Sequence[U],
    ours: Sequence[U],
    theirs: Sequence[U],
    keys: tuple[Sequence[Hashable], Sequence[Hashable], Sequence[Hashable]],
    raw: Callable[[U], str],
    pick: Callable[[U | None, U, U], U],
) -> list[tuple[U, int]]:
    """Both sides changed this stretch: ours, then what theirs adds; a base unit one side removed and the other
    left exactly as it was stays removed."""
    bk, ok, tk = (_occurrences(k) for k in keys)
    in_base = dict(zip(bk, base, strict=True))
    in_ours = dict(zip(ok, ours, strict=True))
    in_theirs = dict(zip(tk, theirs, strict=True))
    out: list[tuple[U, int]] = []
    for key, unit in zip(ok, ours, strict=True):
        was = in_base.get(key)
        other = in_theirs.get(key)
        if other is not None:
            out.append((pick(was, unit, other), OURS))
        elif was is None or raw(unit) != raw(was):
            out.append((unit, OURS))
    for key, unit in zip(tk, theirs, strict=True):
        was = in_base.get(key)
        if key not in in_ours and (was is None or raw(unit) != raw(was)):
            out.append((unit, THEIRS))
    return out
