"""The per-workspace state the rules service keeps: evidence store, rule set, write lock (the resolve cache is the rule set's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from memoryd.rules.evidence import EvidenceStore
from memoryd.rules.ruleset import RuleSet
from memoryd.workspaces import Workspace


@dataclass(eq=False)
class WorkspaceRules:
    ws: Workspace
    evidence: EvidenceStore
    rules: RuleSet
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    opened: anyio.Event = field(default_factory=anyio.Event)
    open_error: str | None = None
    recovered: list[str] = field(default_factory=list)
    recover_on_open: bool = True  # this daemon holds the write lock: finish a crashed change before loading
    # (op, files done, files in all) while a change is written: status shows it, memoryctl draws a bar from it
    progress: tuple[str, int, int] | None = None

    def reporter(self, op: str) -> Callable[[int, int], None]:
        """What ``journal.commit`` tells of a change ``op`` as it goes (called from the worker thread; a tuple
        swap is atomic)."""

        def report(done: int, total: int) -> None:
            self.progress = (op, done, total)

        return report

    @property
    def root(self) -> Path:
        return self.ws.path
