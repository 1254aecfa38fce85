"""Which remembered entry a search hit lies in: its item id (``ent_…``), so a note found weeks later can be
forgotten by the id the hit names.

``items.jsonl`` keeps, for every entry ``remember`` wrote, its path and its section key (heading and first line,
:func:`items.section_key`); a hit's section, read back from the index, has a key of the same shape
(:func:`items.key_of`). The map is read again only when ``items.jsonl`` changed (its size and mtime).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.notes import items


@dataclass(slots=True)
class ItemIds:
    """One workspace's (path, section key) → item id, kept while ``items.jsonl`` is unchanged."""

    signature: tuple[int, int, int] | None = None
    by_key: dict[tuple[str, tuple[str, str]], str] = field(default_factory=dict)
    paths: frozenset[str] = frozenset()

    def current(self, root: Path) -> ItemIds:
        """This map, read again first when the file changed (worker thread)."""
        try:
            info = os.stat(items.sidecar_path(root, items.ITEMS_FILE))
            signature: tuple[int, int, int] | None = (info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            signature = None
        if signature != self.signature:
            by_key: dict[tuple[str, tuple[str, str]], str] = {}
            loaded = items.load(root) if signature is not None else {}
            for item_id, item in loaded.items():  # file order: of two entries with one key, the later one wins
                by_key[(str(item.get("path", "")), items.section_key(item))] = item_id
            self.signature = signature
            self.by_key = by_key
            self.paths = frozenset(path for path, _key in by_key)
        return self


def lookup(ids: ItemIds, sections: list[tuple[int, int, str, str]], path: str, section_start: int) -> str | None:
    """The item id of the entry whose section starts at ``section_start`` in ``path`` (``sections``: the index's
    chunks of that file), or None: a hand-written section, MEMORY.md, a rule file."""
    at = next((n for n, s in enumerate(sections) if s[0] == section_start), None)
    if at is None:
        return None
    heading = sections[at][2]
    # a long entry is indexed in several windows under one heading: its key is its first window's
    while at > 0 and sections[at - 1][2] == heading and sections[at - 1][1] + 1 >= sections[at][0]:
        found = ids.by_key.get((path, items.key_of(heading, sections[at][3].split("\n")[1:])))
        if found is not None:
            return found
        at -= 1
    return ids.by_key.get((path, items.key_of(heading, sections[at][3].split("\n")[1:])))
