"""An index file found damaged, truncated, deleted or replaced while the daemon runs is rebuilt in the background.

Noticed by a read that meets a damaged page (``IndexCorrupted``), by ``status`` and every indexer wake-up
(:meth:`~memoryd.store.index.NoteIndex.check_file`: a stat that compares (st_dev, st_ino) with the open file's,
and a 16-byte header read), and by a stat after each search. Searches meanwhile read the old file (a deleted one
still answers); one that cannot read it waits for the rebuild (at most ``WAIT_S``, :func:`wait`) and answers from
the new file, or answers no hits with ``stale: true``; only a rebuild that failed answers MEMORY_INDEX_CORRUPTED.
``status`` says what is wrong in ``error``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import structlog

if TYPE_CHECKING:
    from memoryd.notes.service import WorkspaceNotes

log = structlog.get_logger("memoryd.notes")
RETRY_S = 5.0  # after a failed rebuild, at least this long before the next try
WAIT_S = 2.0  # how long a search that cannot read the index waits for its rebuild before answering stale


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
