"""Markdown memory per workspace — remember, search, get, index, validate, status: the notes domain's face.

One ``WorkspaceNotes`` per registered workspace (notes/workspace.py); nothing here ever touches another workspace's
files or index. The work is in its own modules: the indexer and its healing (notes/indexer.py), remember's group
commit (notes/remember.py), the search pipeline (notes/search.py) and its fusion (notes/fusion.py). The runtime
(memoryd/runtime.py) tells this service what the watcher saw. Blocking work runs in worker threads.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.abc
import structlog

from memoryd.errors import AppError
from memoryd.notes import api, indexer, remember
from memoryd.notes import files as memory_files
from memoryd.notes.append import Written
from memoryd.notes.items import ItemFields
from memoryd.notes.search import Options, SearchPipeline
from memoryd.notes.semantic import Semantic
from memoryd.notes.workspace import WorkspaceNotes
from memoryd.settings import NotesSettings, SearchSettings, SemanticSettings
from memoryd.store.index import NoteIndex
from memoryd.store.readers import IndexCorrupted
from memoryd.tasks import task
from memoryd.text import dictionary
from memoryd.workspaces import Workspace

log = structlog.get_logger("memoryd.notes")

# Why vectors cannot serve that `index --rebuild-vectors` fixes (status recommends it).
REBUILD_VECTORS_REASONS = frozenset({"vector_dimension_mismatch", "vector_model_mismatch", "vector_index_unusable"})


DAILY_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
GET_CONCURRENCY = 4  # gets reading a file and building its answer at once (see NotesService.get)


class NotesService:
    def __init__(
        self, settings: NotesSettings, search: SearchSettings, semantic: SemanticSettings, state_dir: Path
    ) -> None:
        """``state_dir``: index files go to ``<state_dir>/<workspace id>/index.sqlite``."""
        self.settings = settings
        self.search_settings = search
        self.state_dir = state_dir
        # read from start(), in a thread: a search before it is ready says dictionary_loading (issue 21 item 5)
        cache = state_dir.parent / dictionary.CACHE_FILE
        self.dictionary = dictionary.Dictionary(cache=cache) if search.dictionary else None
        self._by_id: dict[str, WorkspaceNotes] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.semantic = Semantic(semantic, state_dir)
        self.pipeline = SearchPipeline(search, self.semantic, self.dictionary)
        self._get_limiter: anyio.CapacityLimiter | None = None  # made on the first get (inside the event loop)

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        if self.dictionary is not None:
            self.dictionary.start()  # ~1 s in its own thread, beside the embedding model's load
        tg.start_soon(task("semantic", self.semantic.run))

    def attach(self, ws: Workspace) -> WorkspaceNotes:
        existing = self._by_id.get(ws.id)
        if existing is not None:
            return existing
        db = self.state_dir / ws.id / "index.sqlite"
        index = NoteIndex(
            ws.path,
            db,
            chunk_max_lines=self.settings.chunk_max_lines,
            max_file_bytes=self.settings.index_max_file_bytes,
        )
        notes = WorkspaceNotes(ws, index, self.settings.index_max_file_bytes)
        self.semantic.attach(ws.id, index)
        self._by_id[ws.id] = notes
        if self._tg is not None:
            self._tg.start_soon(task("notes", indexer.run, notes, self.settings, self.semantic, workspace_id=ws.id))
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
        await self.pipeline.aclose()
        await self.semantic.aclose()
        for notes in list(self._by_id.values()):
            await anyio.to_thread.run_sync(notes.index.close)

    # --- what the runtime tells (memoryd/runtime.py) ----------------------------------------------------------

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

    async def sync_paths(self, ws: Workspace, rels: list[str]) -> None:
        """Index files a change of the daemon's wrote (the runtime asks, once per change)."""
        notes = self._by_id.get(ws.id)
        if notes is not None:
            await indexer.sync_paths(notes, rels)

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

    # --- remember, search, get ------------------------------------------------------------------------------

    async def remember(
        self,
        ws: Workspace,
        *,
        kind: str,
        text: str,
        reason: str | None,
        followup: str | None,
        dry_run: bool,
        keywords: tuple[str, ...] = (),
        item: ItemFields | None = None,
    ) -> api.RememberResult:
        entry = remember.request(kind, text, reason, followup, self.settings.remember_max_bytes, keywords, item)
        # The Markdown file is the truth: a broken index must not stop a write (data safety first).
        notes = self.get_notes(ws)
        await notes.opened.wait()
        if dry_run:
            planned, appended = await remember.dry_run(notes, entry)
            return _answer(planned, dry_run=True, text=appended)
        written = await remember.write(notes, entry)
        self.semantic.poke()  # the new entry's passage is embedded next (its file is the newest day)
        return _answer(written)

    def search_limit(self, limit: int) -> int:
        """The hits a search asking for ``limit`` gets at most: the search_max_limit setting caps it."""
        return min(limit, self.search_settings.max_limit)

    async def search(
        self,
        ws: Workspace,
        query: str,
        limit: int,
        snippet_max_chars: int | None = None,
        mode: str | None = None,
        options: Options | None = None,
    ) -> api.WorkspaceHits:
        """``mode``: bm25, vector or hybrid; None = hybrid when vectors can serve, else BM25 (and say why).
        ``limit`` is capped by :meth:`search_limit`; ``snippet_max_chars`` None: the setting's."""
        notes = await self._ready(self.get_notes(ws))
        snippet = snippet_max_chars or self.search_settings.snippet_max_chars
        return await self.pipeline.search(notes, query, self.search_limit(limit), snippet, mode, options)

    async def get(self, ws: Workspace, path: str, from_line: int, lines: int) -> api.GetResult:
        """At most the get_max_lines setting's lines from ``from_line``. At most GET_CONCURRENCY gets read and
        build their answer at once: each holds its file, the file's text and lines and the answer together, and a
        hundred clients asking for a 1.2 MB answer at once added +321 MB (the rest wait their turn, briefly)."""
        lines = min(lines, self.settings.get_max_lines)
        limit = self.settings.index_max_file_bytes
        if self._get_limiter is None:
            self._get_limiter = anyio.CapacityLimiter(GET_CONCURRENCY)
        async with self._get_limiter:
            return api.GetResult.model_validate(
                await anyio.to_thread.run_sync(lambda: memory_files.read(ws.path, path, from_line, lines, limit))
            )

    async def files(self, ws: Workspace, offset: int, limit: int) -> api.FilesResult:
        """The Markdown memory files the index holds (so no file walk: the review page lists them per request)."""
        notes = await self._ready(self.get_notes(ws))
        rows = await anyio.to_thread.run_sync(lambda: notes.index.listing("memory/"))
        listed = _in_order([_file_entry(*row) for row in rows])
        return api.FilesResult(files=listed[offset : offset + limit], total=len(listed))

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
        report = await indexer.index_now(notes, full=full)
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
            indexer.schedule(notes, problem)
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
            dictionary=None if self.dictionary is None else self.dictionary.state,
        )


def _file_entry(path: str, size: int, mtime_ns: int) -> api.MemoryFile:
    name = path.removeprefix("memory/")
    kinds = {"MEMORY.md": "memory", "INSIGHTS.md": "insights", "HISTORY.md": "history"}
    kind = kinds.get(name) or (
        "archive" if name.startswith("archive/") else "daily" if DAILY_NAME.match(name) else "other"
    )
    modified = datetime.fromtimestamp(mtime_ns / 1e9, UTC).isoformat(timespec="seconds")
    return api.MemoryFile.model_validate({"path": path, "kind": kind, "bytes": size, "modified": modified})


FILE_KINDS = ("memory", "insights", "history", "daily", "other", "archive")


def _in_order(files: list[api.MemoryFile]) -> list[api.MemoryFile]:
    """The long-term files first, then the daily files newest first, others, then the archive newest first."""
    out: list[api.MemoryFile] = []
    for kind in FILE_KINDS:
        out.extend(
            sorted((f for f in files if f.kind == kind), key=lambda f: f.path, reverse=kind in ("daily", "archive"))
        )
    return out


def rjieba_ok() -> bool:
    try:
        import rjieba

        return bool(rjieba.cut_for_search("串口超时"))
    except ImportError:
        return False  # not installed: Chinese is searched by bigrams
    except Exception:
        log.warning("rjieba_probe_failed", exc_info=True)
        return False


def _answer(written: Written, *, dry_run: bool | None = None, text: str | None = None) -> api.RememberResult:
    return api.RememberResult(
        id=written.id,
        path=written.path,
        start_line=written.start_line,
        lines=written.lines,
        heading=written.heading,
        dry_run=dry_run,
        text=text,
    )
