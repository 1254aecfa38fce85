"""The indexer: one background task per workspace keeps its text index as the files are — opens it, syncs what the
watcher reported, merges a rebuild's segments once idle — and heals it.

Healing: an index file found damaged, truncated, deleted or replaced while the daemon runs is rebuilt in the
background. Noticed by a read that meets a damaged page (``IndexCorrupted``), by ``status`` and every indexer
wake-up (:meth:`~memoryd.store.index.NoteIndex.check_file`: a stat that compares (st_dev, st_ino) with the open
file's, and a 16-byte header read), and by a stat after each search. Searches meanwhile read the old file (a deleted
one still answers); one that cannot read it waits for the rebuild (at most ``WAIT_S``, :func:`wait`) and answers
from the new file, or answers no hits with ``stale: true``; only a rebuild that failed answers
MEMORY_INDEX_CORRUPTED. ``status`` says what is wrong in ``error``.
"""

from __future__ import annotations

import time

import anyio
import structlog

from memoryd.errors import AppError
from memoryd.notes.semantic import Semantic
from memoryd.notes.workspace import WorkspaceNotes
from memoryd.settings import NotesSettings
from memoryd.store.index import SyncReport
from memoryd.store.readers import IndexCorrupted

log = structlog.get_logger("memoryd.notes")
RETRY_S = 5.0  # after a failed rebuild, at least this long before the next try
WAIT_S = 2.0  # how long a search that cannot read the index waits for its rebuild before answering stale


async def run(notes: WorkspaceNotes, settings: NotesSettings, semantic: Semantic) -> None:
    """Open the index, then keep it current until cancelled (the workspace's task)."""
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
        vectors = semantic.get(notes.ws.id)
        if vectors is not None:
            vectors.ready = True
            semantic.poke()
        await _loop(notes, settings, semantic)


async def _loop(notes: WorkspaceNotes, settings: NotesSettings, semantic: Semantic) -> None:
    while True:
        if notes.index.merge_pending:
            # A rebuild's segments are merged step by step once the index has had no writes for a while.
            quiet = notes.index.last_write + settings.merge_idle_s - time.monotonic()
            with anyio.move_on_after(max(quiet, 0.0)):
                await notes.wake.wait()
            if not notes.wake.is_set():
                async with notes.write_lock:
                    await anyio.to_thread.run_sync(notes.index.merge_step)
                continue
        await notes.wake.wait()
        notes.wake = anyio.Event()
        await heal(notes)
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
            semantic.poke()
        except IndexCorrupted as exc:
            notes.pending |= batch
            schedule(notes, exc.reason)
        except Exception:
            log.exception("index_sync_failed", workspace_id=notes.ws.id)
            await anyio.sleep(1.0)
            notes.wake.set()


async def sync_paths(notes: WorkspaceNotes, rels: list[str], *, wait_max: int = 50) -> None:
    """Index files a change of the daemon's wrote: at once when there are at most ``wait_max`` (search finds them
    before the change is answered), else by the background indexer (search says ``stale`` meanwhile)."""
    if not notes.opened.is_set() or notes.open_error is not None:
        return
    if len(rels) > wait_max:
        notes.pending.update(rels)
        notes.wake.set()
        return
    try:
        async with notes.write_lock:
            await anyio.to_thread.run_sync(notes.index.sync, rels)
        log.info("changes_indexed", workspace_id=notes.ws.id, paths=rels[:50])
    except Exception:  # the files are written; the watcher or `memoryctl index` catches up
        notes.pending.update(rels)
        notes.wake.set()
        log.exception("index_after_change_failed", workspace_id=notes.ws.id)


async def index_now(notes: WorkspaceNotes, *, full: bool) -> SyncReport:
    """``memoryctl index``: sync every file (or rebuild with ``full``, or when the file is damaged), now."""

    def progress(done: int, total: int) -> None:
        notes.progress = (done, total)  # read by status; a tuple swap is atomic

    async with notes.write_lock:
        notes.progress = (0, 0)
        notes.heal = None

        def work() -> SyncReport:  # a damaged, deleted or replaced file is rebuilt, not synced
            problem = notes.index.check_file()
            if full or problem:
                return notes.index.rebuild(problem or "requested", progress)
            try:
                return notes.index.sync(None, progress)
            except IndexCorrupted as exc:
                return notes.index.rebuild(exc.reason, progress)

        try:
            report = await anyio.to_thread.run_sync(work)
        except Exception as exc:
            log.exception("index_failed", workspace_id=notes.ws.id)
            raise AppError("MEMORY_INDEX_FAILED") from exc
        finally:
            notes.progress = None
        notes.pending.clear()
        notes.full_rescan = False
    if report.rebuilt:
        notes.wake.set()  # the indexer then merges the rebuild's segments once idle
    return report


# --- healing ---------------------------------------------------------------------------------------------------


async def wait(notes: WorkspaceNotes, reason: str, deadline: float) -> None:
    """Schedule a rebuild and wait for the indexer's next check of the file (a heal, or finding it sound), until
    ``deadline`` (anyio's clock) at the latest."""
    done = notes.healed
    schedule(notes, reason)
    with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
        await done.wait()


def schedule(notes: WorkspaceNotes, reason: str) -> None:
    """Have the indexer check the index file and rebuild it (at its next wake-up, which this causes)."""
    if notes.heal is None:
        log.warning("index_heal_scheduled", workspace_id=notes.ws.id, reason=reason)
    notes.heal = reason
    notes.wake.set()


async def heal(notes: WorkspaceNotes) -> None:
    """Rebuild an index file found damaged, deleted or replaced while open; searches meanwhile read the old
    one (a deleted file still answers) or answer MEMORY_INDEX_CORRUPTED. Checked (a stat and a 16-byte read)
    on every wake-up, under the write lock: what a status or search saw may have been healed since. Searches
    waiting in :func:`wait` are woken when the check (and the rebuild) is done."""
    try:
        await _heal(notes)
    finally:
        done, notes.healed = notes.healed, anyio.Event()
        done.set()


async def _heal(notes: WorkspaceNotes) -> None:
    notes.heal = None
    batch, full = set(notes.pending), notes.full_rescan
    async with notes.write_lock:
        reason = await anyio.to_thread.run_sync(notes.index.check_file)
        if reason is None:
            return
        try:
            await anyio.to_thread.run_sync(notes.index.rebuild, reason)
            failed = False
        except Exception:
            log.exception("index_heal_failed", workspace_id=notes.ws.id, reason=reason)
            failed = True
    if failed:
        notes.heal_failed = reason
        done, notes.healed = notes.healed, anyio.Event()
        done.set()  # the searches waiting need not wait out the retry pause
        await anyio.sleep(RETRY_S)  # tried again on the next wake-up (a change, the reconcile, a status)
        return
    notes.heal_failed = None
    notes.pending -= batch  # a rebuild reads every file; changes since are still pending
    notes.full_rescan = notes.full_rescan and not full
    notes.wake.set()  # merge the rebuild's segments once idle
