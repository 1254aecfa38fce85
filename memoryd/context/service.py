"""What a coding agent's host injects at session start and per prompt (issue 12 item 7): ``context``.

The stable part (resolved rules + memory/MEMORY.md) is the same bytes for every prompt and, with a session id, for
the whole session (snapshots); the dynamic part is recall for the prompt, plus recent daily notes when the prompt
asks about the past. Decision 0007 says what goes where and why.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from memoryd import fsio
from memoryd.context import dynamic, recent, render, snapshots, trigger
from memoryd.context.api import ContextItem, ContextResult, DynamicContext, StableContext
from memoryd.curate import questions as curate_questions
from memoryd.errors import AppError
from memoryd.models import Degraded
from memoryd.notes.daily import strip_private
from memoryd.notes.service import NotesService
from memoryd.rules.service import RulesService
from memoryd.settings import ContextSettings
from memoryd.store.prepare import CANDIDATES
from memoryd.workspaces import Workspace

log = structlog.get_logger("memoryd.context")


RECALL_LIMIT = 6  # passages recalled for a prompt
RECALL_SNIPPET_CHARS = 400
RECENT_DAYS = 3  # daily files shown when a prompt asks about the past
WORDS_ONLY_SHARE = 0.49  # of recall_min_relevance, when the search ran on words alone (0.39 at the default 0.8)
RELATIVE_CUT = 0.85  # a recalled passage needs this share of the best one's relevance: a clear answer is not padded


@dataclass(frozen=True, slots=True)
class ContextRequest:
    model_id: str | None = None
    fw_version: str | None = None
    instance_id: str | None = None
    query_text: str | None = None
    session_id: str | None = None
    budget_chars: int | None = None


class ContextService:
    def __init__(self, settings: ContextSettings, state_dir: Path, notes: NotesService, rules: RulesService) -> None:
        """``state_dir``: snapshots go to ``<state_dir>/<workspace id>/context/``."""
        self.settings = settings
        self.state_dir = state_dir
        # MEMORY.md and daily files larger than the notes' index_max_file_bytes are not read (nor indexed)
        self.memory_max_bytes = notes.settings.index_max_file_bytes
        self.notes = notes
        self.rules = rules
        self._snapshot_locks: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)

    async def context(self, ws: Workspace, request: ContextRequest) -> ContextResult:
        stable, _fresh = await self.stable(ws, request)
        # A passage of MEMORY.md the stable part already shows (rendered now, or the session's snapshot the host
        # received at its start) is not recalled again; one it left out (cut, or added since) is.
        return ContextResult(stable=stable, dynamic=await self.dynamic(ws, request.query_text, stable.text))

    # --- stable -------------------------------------------------------------------------------------------

    async def stable(self, ws: Workspace, request: ContextRequest) -> tuple[StableContext, bool]:
        """The stable part, and whether it was rendered from the files now (not a session's older snapshot)."""
        budget = min(request.budget_chars or self.settings.budget_chars, self.settings.budget_chars)
        if request.session_id is None:
            return await self._render(ws, request, budget), True
        shape = snapshots.Shape(request.model_id, request.fw_version, request.instance_id, budget)
        name = snapshots.key(request.session_id, shape)
        store = snapshots.SnapshotStore(
            self.state_dir / ws.id / "context",
            self.settings.snapshot_ttl_hours * 3600,
            self.settings.snapshot_max_files,
        )
        async with self._snapshot_locks[ws.id]:  # two first calls of one session: one renders, the other reuses
            kept = await anyio.to_thread.run_sync(store.load, name)
            if kept is not None:
                return kept.model_copy(update={"snapshot": "reused"}), False
            stable = await self._render(ws, request, budget)
            try:
                await anyio.to_thread.run_sync(store.save, name, stable)
            except OSError as exc:  # a full or read-only state dir: the answer stands, the next call renders again
                log.warning("context_snapshot_not_saved", workspace_id=ws.id, error=type(exc).__name__)
            return stable.model_copy(update={"snapshot": "created"}), True

    async def _render(self, ws: Workspace, request: ContextRequest, budget: int) -> StableContext:
        rules = None
        if request.model_id is not None and request.fw_version is not None:
            answer = await self.rules.resolve(ws, request.model_id, request.fw_version, request.instance_id)
            rules = render.ResolvedRules(
                model_id=answer.model_id,
                fw_version=answer.fw_version,
                instance_id=answer.instance_id,
                facts=answer.facts,
                winners={key: entry.rule_id for key, entry in answer.trace.items()},
                rules=answer.rules,
            )
        data = await anyio.to_thread.run_sync(self._read_memory, ws.path)
        memory = None if data is None else render.normalise_memory(data)
        digest = None if data is None else hashlib.sha256(data).hexdigest()
        return render.render(rules, memory, digest, budget)

    def _read_memory(self, root: Path) -> bytes | None:
        target = fsio.within(root, root / render.MEMORY_FILE)
        if target is None:  # a symlink out of the workspace
            log.warning("context_memory_refused", reason="outside the workspace")
            return None
        try:
            return fsio.read_regular(target, self.memory_max_bytes)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # a FIFO, a directory, too large, unreadable: left out, logged
            log.warning("context_memory_unreadable", error=type(exc).__name__)
            return None

    # --- dynamic ------------------------------------------------------------------------------------------

    async def dynamic(self, ws: Workspace, query_text: str | None, stable_text: str) -> DynamicContext:
        # open questions (preference conflicts left to the user) are asked whatever the prompt, until answered
        asking = (await anyio.to_thread.run_sync(curate_questions.open_questions, ws.path))[
            : curate_questions.SHOWN_MAX
        ]
        block = dynamic.questions_block(asking) if asking else ""
        if block and len(block) > self.settings.dynamic_max_chars // 2:
            block, asking = "", []
        if not query_text or not query_text.strip():
            return DynamicContext(text=block, items=[], questions=asking or None)
        past = trigger.asks_about_past(query_text)
        degraded = None
        items: list[ContextItem] = []
        try:
            found = await self.notes.search(ws, query_text, RECALL_LIMIT, RECALL_SNIPPET_CHARS)
        except AppError as exc:  # the index is being rebuilt, …: the stable part and recent notes still answer
            degraded = Degraded(reason=exc.name, message=exc.message)
        else:
            best = max((h.relevance for h in found.hits), default=0.0)
            # words alone (no meaning side: semantic off, or degraded) cannot confirm what a passage means: a lower
            # floor keeps their recall (a question of five content words, two of them the note's, is recalled)
            least = self.settings.min_relevance * (1.0 if found.mode != "bm25" else WORDS_ONLY_SHARE)
            floor = max(least, RELATIVE_CUT * best)
            items = [
                ContextItem(
                    path=h.path,
                    start_line=h.start_line,
                    lines=h.lines,
                    heading=h.heading,
                    snippet=strip_private(h.snippet),  # a hand-edited file's private spans: never into a prompt
                    score=h.score,
                )
                for h in found.hits
                # only what answers: an unrelated prompt ("write a haiku about cats") injects nothing
                if h.relevance >= floor
                # candidate rules are low-confidence and unreviewed: `search` shows them, a prompt never gets them
                and (h.path != render.MEMORY_FILE or not dynamic.shown_in(stable_text, strip_private(h.snippet)))
                and not h.path.startswith(f"{CANDIDATES}/")
            ]
            if found.stale:
                degraded = Degraded(
                    reason="stale",
                    message=f"{len(found.pending)} changed file(s) not yet indexed; recall may miss them",
                )
        entries = []
        if past:
            entries = await anyio.to_thread.run_sync(recent.entries, ws.path, RECENT_DAYS, self.memory_max_bytes)
        text, shown, notes = dynamic.render(items, entries, self.settings.dynamic_max_chars, block)
        return DynamicContext(
            text=text,
            items=shown,
            recent=notes,
            asks_about_past=past,
            degraded=degraded,
            questions=asking or None,
        )
