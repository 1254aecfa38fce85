"""Merge an update (Markdown ``## Section`` + ``- `` bullets, as a model writes it) into a memory file, section by
section, so that nothing the file holds can be lost by an update that leaves it out.

* A section of the update is matched to the file's section of the same title (``title_key``: case, white space,
  full-width and half-width forms and trailing punctuation do not matter). Its bullets are added after the
  section's last bullet, unless the section already has one with the same ``bullet_key`` (a **duplicate**: the
  file's bullet stays as it is, except that a newer ``<!-- seen: YYYY-MM-DD -->`` marker replaces its own).
* ``## Title [replace]`` in the update replaces the section's bullets with the update's, explicitly (the bullets
  that go are listed in ``Merge.removed``; the section's other lines stay; the mark is not written).
* A section of the update the file does not have is appended at the end, in the update's order.
* Every section the update leaves out is kept byte for byte, and so is every line the merge does not touch.
* Only bullets are merged into a section that exists: the update's other lines there (prose, its own headings of
  other levels) are counted in ``Merge.ignored`` and not written. A new section is written with its lines.
* Bullets in the update before its first heading are merged into the file's preamble in the same way.

The result is a function of the two texts alone (no clock, no randomness): the same inputs give the same bytes.
"""

from __future__ import annotations

from memorysections.document import BOM, SEEN, Block, Document, Section, parse, render, title_key

__all__ = ["Merge", "close_open", "merge", "refresh_seen"]


class Merge:
    """What a merge wrote and why (a plain class, not a dataclass: importing dataclasses costs the git merge
    driver, a process per file, ~8 ms).

    ``text``: the merged file; ``added``: (section title, bullet text) of each bullet added; ``duplicates``:
    bullets of the update the section already had (by ``bullet_key``), also repeats inside the update;
    ``removed``: bullets an explicit ``[replace]`` section took out; ``replaced``: titles of the sections
    replaced; ``new_sections``: titles appended; ``kept_sections``: titles of the file's sections the update left
    out (kept as they were); ``refreshed``: duplicates whose ``seen`` marker the update made newer; ``ignored``:
    lines of the update that were not merged (other lines in a section that exists, empty bullets)."""

    __slots__ = (
        "added",
        "duplicates",
        "ignored",
        "kept_sections",
        "new_sections",
        "refreshed",
        "removed",
        "replaced",
        "text",
    )

    def __init__(
        self,
        text: str,
        added: list[tuple[str, str]] | None = None,
        duplicates: int = 0,
        removed: list[tuple[str, str]] | None = None,
        replaced: list[str] | None = None,
        new_sections: list[str] | None = None,
        kept_sections: list[str] | None = None,
        refreshed: int = 0,
        ignored: int = 0,
    ) -> None:
        self.text = text
        self.added: list[tuple[str, str]] = added or []
        self.duplicates = duplicates
        self.removed: list[tuple[str, str]] = removed or []
        self.replaced: list[str] = replaced or []
        self.new_sections: list[str] = new_sections or []
        self.kept_sections: list[str] = kept_sections or []
        self.refreshed = refreshed
        self.ignored = ignored

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in Merge.__slots__}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Merge) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable lists inside

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in Merge.__slots__)
        return f"Merge({fields})"


class _Group:
    """The update's sections of one title (a title may come twice), in the update's order."""

    __slots__ = ("blocks", "heading", "ignored", "replace", "title")

    def __init__(self, section: Section) -> None:
        self.title = section.title
        self.heading = section.heading
        self.replace = False
        self.blocks: list[Block] = []
        self.ignored = 0


def _eol_of(lines: list[str], eol: str) -> list[str]:
    """Lines with the file's line ending (the last one given one if it had none)."""
    out = []
    for line in lines:
        body = line[:-1] if line.endswith("\n") else line
        body = body[:-1] if body.endswith("\r") else body
        out.append(body + eol)
    return out


def refresh_seen(block: Block, seen: str | None, eol: str) -> bool:
    """Give ``block`` the newer ``seen`` date (its marker replaced, or one added at the end of its last line);
    True when it changed."""
    if seen is None:
        return False
    current = block.seen
    if current is not None and current >= seen:
        return False
    if current is not None:
        last = max(i for i, line in enumerate(block.lines) if SEEN.search(line))
        line = block.lines[last]
        start, end = list(SEEN.finditer(line))[-1].span(1)
        block.lines[last] = line[:start] + seen + line[end:]
    else:
        last = max(i for i, line in enumerate(block.lines) if line.strip())
        line = block.lines[last]
        ending = line[len(line.rstrip("\r\n")) :] or (eol if last < len(block.lines) - 1 else "")
        block.lines[last] = line.rstrip("\r\n").rstrip(" \t") + f" <!-- seen: {seen} -->" + ending
    block._key = None
    return True


def close_open(doc: Document, eol: str) -> None:
    """Close a code fence or comment the document leaves open at its end, so that what is appended after it is
    read as what it is."""
    if not doc.open_at_end:
        return
    last = (doc.sections or [doc.preamble])[-1]
    _end_line(last, eol)
    block = last.blocks[-1]  # what is open at the end is the last block's: a bullet or the lines that opened it
    block.lines.append(("  " if block.bullet else "") + doc.open_at_end + eol)
    block._key = None
    doc.open_at_end = ""


def _end_line(section: Section, eol: str) -> None:
    """Give the section's last line an ending (it was the file's last line, without one)."""
    if section.blocks:
        block = section.blocks[-1]
        if not block.lines[-1].endswith("\n"):
            block.lines[-1] += eol
    elif section.heading is not None and not section.heading.endswith("\n"):
        section.heading += eol


def _insert_at(section: Section) -> int:
    """Where new bullets go in a section: after its last bullet, else after its last non-blank line."""
    for i in range(len(section.blocks) - 1, -1, -1):
        if section.blocks[i].bullet:
            return i + 1
    for i in range(len(section.blocks) - 1, -1, -1):
        if section.blocks[i].lines[0].strip():
            return i + 1
    return 0


def _insert(section: Section, at: int, blocks: list[Block], eol: str) -> None:
    if not blocks:
        return
    if at > 0:
        before = section.blocks[at - 1]
        if not before.lines[-1].endswith("\n"):
            before.lines[-1] += eol
    elif section.heading is not None and not section.heading.endswith("\n"):
        section.heading += eol
    for block in blocks:  # a block moved from the end of the file now has something after it
        if not block.lines[-1].endswith("\n"):
            block.lines[-1] += eol
    section.blocks[at:at] = blocks


class _Merger:
    def __init__(self, doc: Document, eol: str) -> None:
        self.doc = doc
        self.eol = eol
        self.added: list[tuple[str, str]] = []
        self.removed: list[tuple[str, str]] = []
        self.duplicates = 0
        self.refreshed = 0
        self.ignored = 0
        self.replaced: list[str] = []
        self.new_sections: list[str] = []
        self.targets: dict[str | None, list[Section]] = {}
        for section in doc.all_sections():
            self.targets.setdefault(section.key, []).append(section)

    def copy(self, block: Block) -> Block:
        return Block(_eol_of(block.lines, self.eol), block.bullet)

    def into(self, group: _Group, sections: list[Section]) -> None:
        """Merge a group's bullets into the file's sections of its title (the first of them takes new ones)."""
        title = sections[0].title
        existing: dict[str, Block] = {}
        for section in sections:
            for b in section.bullets:
                existing.setdefault(b.key, b)
        new: list[Block] = []
        taken: dict[str, Block] = {}
        for block in group.blocks:
            if not block.bullet or not block.key:
                self.ignored += bool(block.lines[0].strip())
                continue
            same = taken.get(block.key) or (None if group.replace else existing.get(block.key))
            if same is not None:
                self.duplicates += 1
                self.refreshed += refresh_seen(same, block.seen, self.eol)
                continue
            kept = existing.get(block.key) if group.replace else None
            if kept is not None:
                self.refreshed += refresh_seen(kept, block.seen, self.eol)
                taken[block.key] = kept
                new.append(kept)
                continue
            copy = self.copy(block)
            taken[block.key] = copy
            new.append(copy)
            self.added.append((title, block.text))
        first = sections[0]
        if group.replace:
            self.replaced.append(title)
            at = next((i for i, b in enumerate(first.blocks) if b.bullet), None)
            for section in sections:
                self.removed += [(title, b.text) for b in section.bullets if b.key not in taken]
                section.blocks = [b for b in section.blocks if not b.bullet]
            at = _insert_at(first) if at is None else min(at, len(first.blocks))
            _insert(first, at, new, self.eol)
        else:
            at = _insert_at(first)
            if first.heading is None and at == 0 and new and self.doc.sections:
                heading = self.doc.sections[0].heading or ""
                if heading.startswith(BOM):  # bullets before the file's first line: the BOM stays first
                    self.doc.sections[0].heading = heading[1:]
                    new[0].lines[0] = BOM + new[0].lines[0]
            _insert(first, at, new, self.eol)

    def append(self, group: _Group) -> None:
        """A section the file does not have, at its end: its heading without the mark, then its lines."""
        heading = f"## {group.title}".rstrip(" ") + self.eol
        blocks: list[Block] = []
        taken: dict[str, Block] = {}
        for block in group.blocks:
            copy = self.copy(block)
            if block.bullet:
                if not block.key:
                    self.ignored += 1
                    continue
                if block.key in taken:  # the newer seen date of the two is written
                    self.duplicates += 1
                    refresh_seen(taken[block.key], block.seen, self.eol)
                    continue
                taken[block.key] = copy
                self.added.append((group.title, block.text))
            blocks.append(copy)
        if group.replace:  # as a [replace] of the section would leave it: its bullets together where the first was
            first = next((i for i, b in enumerate(blocks) if b.bullet), len(blocks))
            rest = [b for b in blocks[first:] if not b.bullet]
            blocks = blocks[:first] + [b for b in blocks if b.bullet] + rest
        while blocks and not blocks[-1].bullet and not blocks[-1].lines[0].strip():
            blocks.pop()
        last = (self.doc.sections or [self.doc.preamble])[-1]
        if self.doc.sections or self.doc.preamble.raw:  # after what the file has, a blank line
            _end_line(last, self.eol)
            final = last.blocks[-1].lines[-1] if last.blocks else (last.heading or "")
            if final.strip():
                last.blocks.append(Block([self.eol], False))
        section = Section(heading, blocks)
        self.doc.sections.append(section)
        self.targets.setdefault(section.key, []).append(section)
        self.new_sections.append(group.title)


def _groups(update: Document) -> list[_Group]:
    groups: dict[str | None, _Group] = {}
    for section in update.all_sections():
        group = groups.get(section.key)
        if group is None:
            group = groups[section.key] = _Group(section)
            group.blocks.extend(section.blocks)
        else:  # a title again: its bullets join the first one's (its other lines are not taken)
            group.blocks.extend(b for b in section.blocks if b.bullet)
            group.ignored += sum(1 for b in section.blocks if not b.bullet and b.lines[0].strip())
        group.replace = group.replace or section.replace
    return list(groups.values())


def merge(current: str, update: str) -> Merge:
    """``update`` merged into ``current`` (both Markdown; see the module's doc for the rules)."""
    doc = parse(current)
    update = update.removeprefix(BOM)
    upd = parse(update)
    if upd.open_at_end:  # an update whose fence or comment never closes: closed at its end
        upd = parse(update + ("" if update.endswith("\n") else "\n") + upd.open_at_end + "\n")
    eol = doc.eol if current else upd.eol
    groups = _groups(upd)
    keys = {None if g.heading is None else title_key(g.title) for g in groups}
    kept = [s.title for s in doc.sections if s.key not in keys]
    merger = _Merger(doc, eol)
    for group in groups:
        merger.ignored += group.ignored
        sections = merger.targets.get(None if group.heading is None else title_key(group.title))
        if sections:
            last = (doc.sections or [doc.preamble])[-1]
            if (
                doc.open_at_end
                and any(s is last for s in sections)
                and (group.replace or any(b.bullet for b in group.blocks))
            ):
                close_open(doc, eol)
            merger.into(group, sections)
        else:
            close_open(doc, eol)
            merger.append(group)
    return Merge(
        text=render(doc),
        added=merger.added,
        duplicates=merger.duplicates,
        removed=merger.removed,
        replaced=merger.replaced,
        new_sections=merger.new_sections,
        kept_sections=kept,
        refreshed=merger.refreshed,
        ignored=merger.ignored,
    )
