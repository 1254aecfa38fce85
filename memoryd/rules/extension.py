"""How the compile exchange carries more than rules without the rules domain knowing what: a ``Curator``.

``compile.prepare`` and ``compile.apply`` are the rules domain's (its state, its request files, its journal); the
consolidation of daily notes into MEMORY.md, INSIGHTS.md, HISTORY.md and daily files is the curate domain's, a layer
above. The composition root hands the rules service a curator (``memoryd.curate.consolidate.Consolidator``); the
rules code calls it at four points and writes whatever it plans in the same change (one ``journal.commit``, one
run_id) as the rules:

- ``select``: the daily entries a new request gathers, in chunks (prepare);
- ``material``: what a request carries for the host model about them (prepare, on every hand-out);
- ``started``: a chunk is being handed out — the progress record, written before the host sees it;
- ``plan``: the files an answer changes (apply), or an AppError refusing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from memoryd.rules.journal import FileWrite
from memoryd.rules.models import ConsolidationMaterial
from memoryd.rules.workspace import WorkspaceRules


@dataclass(slots=True)
class CuratorPlan:
    """What an answer's consolidation fields change: recorded writes (backed up, restorable), bookkeeping writes
    (state, progress), fields for the history line and for the answer, and what to do once committed (metrics rows,
    given the run_id; never called on a dry run)."""

    writes: list[FileWrite] = field(default_factory=list)
    bookkeeping: list[FileWrite] = field(default_factory=list)
    entry: dict[str, Any] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)
    after: Callable[[str], None] | None = None


class Curator(Protocol):
    def select(self, wr: WorkspaceRules, taken: set[str], since: datetime | None) -> list[list[str]]:
        """Chunks of entry ids a new request gathers: not consolidated yet (or from ``since`` on: a redo), not in
        ``taken`` (an outstanding request holds them)."""
        ...

    def unconsolidated(self, wr: WorkspaceRules) -> int:
        """How many daily entries no consolidation has covered yet (status: cheap while nothing changed)."""
        ...

    def material(self, wr: WorkspaceRules, record: dict[str, Any]) -> ConsolidationMaterial | None:
        """What the request of ``record`` carries for consolidation, from the files as they are now."""
        ...

    def started(self, wr: WorkspaceRules, request_id: str, record: dict[str, Any]) -> None:
        """The request is handed out: write the progress record (before the host sees the chunk)."""
        ...

    def plan(
        self,
        wr: WorkspaceRules,
        raw: dict[str, Any],
        request_id: str,
        record: dict[str, Any],
        now: str,
        dry_run: bool,
    ) -> CuratorPlan | None:
        """The changes of an answer's consolidation fields (None: it has none and the request had no notes);
        an AppError refuses the whole apply (nothing is written but metrics rows and, on a real apply, the
        request's retry mark)."""
        ...
