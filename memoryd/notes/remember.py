"""remember: an entry appended to today's daily file, with group commit — whoever holds the workspace's write lock
writes every remember queued meanwhile in one append and one fsync, and the others find theirs done (anyio's lock
is fair, so a caller waits for at most one batch ahead) — and the entries' sidecar lines (decision 0009)."""

from __future__ import annotations

import contextlib
from datetime import datetime

import anyio
import structlog

from memoryd.errors import AppError
from memoryd.notes import append, daily, items
from memoryd.notes.append import Written
from memoryd.notes.workspace import WorkspaceNotes

log = structlog.get_logger("memoryd.notes")


def request(
    kind: str,
    text: str,
    reason: str | None,
    followup: str | None,
    max_bytes: int,
    keywords: tuple[str, ...] | list[str] = (),
    item: items.ItemFields | None = None,
) -> append.Request:
    """The entry to write, ``<private>`` spans stripped (keywords cleaned: daily.clean_keywords);
    MEMORY_TOO_LARGE / MEMORY_EMPTY for what cannot be one."""
    text = daily.strip_private(text)
    reason = daily.strip_private(reason) if reason else None
    followup = daily.strip_private(followup) if followup else None
    words = daily.clean_keywords(keywords) if keywords else ()
    size = sum(len(part.encode("utf-8")) for part in (text, reason or "", followup or "", *words))
    if size > max_bytes:
        raise AppError("MEMORY_TOO_LARGE", f"Entry is {size} bytes; the limit is {max_bytes}", limit=max_bytes)
    if not text.strip():
        raise AppError("MEMORY_EMPTY")
    return append.Request(kind, text, reason, followup, words, item)


async def dry_run(notes: WorkspaceNotes, entry: append.Request) -> tuple[Written, str]:
    """What ``entry`` would be, and the text that would be appended; nothing is written."""
    async with notes.write_lock:
        return await anyio.to_thread.run_sync(notes.writer.dry_run, entry)


async def write(notes: WorkspaceNotes, entry: append.Request) -> Written:
    """Append ``entry`` (with whatever else is queued), index it and record its sidecar line."""
    notes.writer.queue.append(entry)
    try:
        async with notes.write_lock:
            while not entry.taken:
                batch = notes.writer.take()
                await anyio.to_thread.run_sync(_write, notes, batch)
    finally:
        if not entry.taken:  # cancelled while waiting: never written later behind the caller's back
            with contextlib.suppress(ValueError):
                notes.writer.queue.remove(entry)
    if entry.error is not None:
        raise entry.error
    assert entry.result is not None
    return entry.result


def _write(notes: WorkspaceNotes, batch: list[append.Request]) -> None:
    """Append ``batch`` to today's file and index it (worker thread); each request gets its answer."""
    try:
        behind = notes.writer.write(batch, notes.index if notes.open_error is None else None)
    except Exception:  # a bug: every caller of the batch hears of it, not only the one that wrote
        log.exception("remember_failed", workspace_id=notes.ws.id, entries=len(batch))
        for one in batch:
            if one.result is None and one.error is None:
                one.error = AppError("INTERNAL_ERROR")
        return
    if behind is not None:  # written, not indexed: the watcher or `memoryctl index` catches up
        notes.pending.add(behind)
    written = [one.result for one in batch if one.result is not None]
    fields = {one.result.id: one.item for one in batch if one.result is not None and one.item is not None}
    try:  # the entries' ids, for forget and audit (decision 0009)
        items.record(notes.root, written, datetime.now().astimezone().isoformat(timespec="seconds"), fields)
    except OSError as exc:  # the entries are written; only their sidecar lines are missing
        log.warning("items_record_failed", workspace_id=notes.ws.id, error=type(exc).__name__)
