"""What the notes domain keeps per workspace (its settings are the ``notes`` group, memoryd/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio

from memoryd.notes import append, itemids
from memoryd.store.index import NoteIndex
from memoryd.workspaces import Workspace


@dataclass(eq=False)
class WorkspaceNotes:
    ws: Workspace
    index: NoteIndex
    max_file_bytes: int  # the index_max_file_bytes setting: remember's writer reads today's file up to it
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    pending: set[str] = field(default_factory=set)
    # Paths reported while a sync runs: they stay pending after it (it may have read them before the change).
    reported: set[str] = field(default_factory=set)
    full_rescan: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)
    opened: anyio.Event = field(default_factory=anyio.Event)
    open_error: str | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    watching: bool = False  # a watcher reports this workspace's changes (the runtime says so)
    progress: tuple[int, int] | None = None  # (files done, files total) while an explicit index runs
    heal: str | None = None  # why the index file must be rebuilt (damaged, deleted, replaced): the indexer does it
    heal_failed: str | None = None  # the last automatic rebuild failed (status recommends `index --full`)
    healed: anyio.Event = field(default_factory=anyio.Event)  # set when the indexer next checked the index file
    # the sections forgotten entries are in: ((index write mark, tombstones), {(path, first line)})
    hidden: tuple[object, set[tuple[str, int]]] = (None, set())
    item_ids: itemids.ItemIds = field(default_factory=itemids.ItemIds)  # which entry a hit lies in
    writer: append.Writer = field(init=False)  # remember's: queue of waiting entries, today's file as last left

    def __post_init__(self) -> None:
        self.writer = append.Writer(self.ws.path, self.ws.id, self.max_file_bytes)

    @property
    def root(self) -> Path:
        return self.ws.path
