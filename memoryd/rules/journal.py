"""Multi-file changes that survive a crash at any point (docs/reference/architecture.md, data safety).

``commit`` runs these steps; a crash between any two is repaired by ``recover`` on the next start:

1. pre-images of the files to be replaced or deleted → ``data/memory/backups/<run_id>/<path>``
2. the intent journal → ``data/memory/journal/<run_id>.json`` (atomic), then one flush of the backups and the
   journal: the commit point. Before it the change never happened (recover removes stray backups); after it the
   change will be completed.
3. every file written atomically (or deleted), then one flush of them all (syncfs on Linux: one call instead of
   two fsyncs per file; a crash before the flush is repaired from the journal)
4. one line appended to ``data/memory/history.jsonl``
5. the journal removed

``recover`` rolls every journal forward: files already at their new content are skipped, the rest written, the
history line appended unless it is there. Each step is idempotent, so a crash during recovery is fine too.

Crash injection for tests: with ``MEMORYD_CRASH_AT=<step>`` (backups, journal, write, history, done) the process
exits abruptly right after that step (``write``: after the first file). Never set it outside tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import structlog

from memoryd import fsio
from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, append_line, atomic_write, flush, member, read_regular
from memoryd.rules.records import Change, HistoryEntry, JournalRecord, JournalWrite, RuleRevision

__all__ = ["Change", "HistoryEntry", "JournalRecord", "RuleRevision"]  # the records, typed (records.py)

log = structlog.get_logger("memoryd.journal")

JOURNAL_DIR = "data/memory/journal"
BACKUP_DIR = "data/memory/backups"
HISTORY_FILE = "data/memory/history.jsonl"
CRASH_ENV = "MEMORYD_CRASH_AT"
READ_MAX_BYTES = 64 * 1024 * 1024  # files a change replaces, compile state
HISTORY_MAX_BYTES = 64 * 1024 * 1024  # history.jsonl: ~100,000 changes; a larger one is refused (status says so)
JOURNAL_MAX_BYTES = 64 * 1024 * 1024  # one intent record: the new content of every file of one change
# Internal bookkeeping that no change (nor a restore, nor a crafted record) may name as a file it writes.
_BOOKKEEPING = (JOURNAL_DIR + "/", BACKUP_DIR + "/", HISTORY_FILE)
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")


@dataclass(frozen=True, slots=True)
class FileWrite:
    path: str  # relative to the workspace
    content: bytes | None  # None deletes the file
    meta: dict[str, Any] = field(default_factory=dict)  # layer, rule_id, revisions: copied into history
    record: bool = True  # False for bookkeeping files (compile state): no backup, not listed in history
    # True: the file already holds ``content`` (a person saved it: a hand edit). The change is recorded — the
    # pre-image passed to ``commit`` backed up, a history line — and the file is never written, so an editor that
    # has it open sees no change on disk.
    on_disk: bool = False


def sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _crash(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os._exit(86)


def read_bytes(root: Path, rel: str, max_bytes: int = READ_MAX_BYTES) -> bytes | None:
    """A workspace file's bytes, None when it does not exist. ``rel`` must lie in the workspace's memory trees
    (MEMORY_PATH_TRAVERSAL), no symlink on the way or at the file is followed, and only a regular file within
    ``max_bytes`` is read (a FIFO or a device a cloned repository put there would hang or flood the daemon):
    MEMORY_FILE_REFUSED."""
    try:
        return read_regular(member(root, rel), max_bytes, root=root)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (NotRegularFile, FileTooLarge) as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{rel}: {exc.strerror or exc}") from exc


def target(root: Path, rel: object) -> Path:
    """The file a change (or a record of one: a journal, a history line) may write: in the workspace's memory trees
    and not the daemon's own bookkeeping (journal, backups, history)."""
    path = member(root, rel)
    if str(rel).startswith(_BOOKKEEPING):
        raise AppError("MEMORY_PATH_TRAVERSAL", f"Refused a recorded path: {str(rel)[:200]!r} is bookkeeping")
    return path


Action = Literal["create", "update", "delete", "unchanged"]
Progress = Callable[[int, int], None]  # (files done, files in all)


def action(before: bytes | None, after: bytes | None) -> Action:
    """What writing ``after`` over ``before`` does to a file (None: absent)."""
    if before == after:
        return "unchanged"
    if before is None:
        return "create"
    return "delete" if after is None else "update"


def commit(
    root: Path,
    run_id: str,
    entry: dict[str, Any],
    writes: list[FileWrite],
    pre_images: dict[str, bytes] | None = None,
    progress: Progress | None = None,
    current: dict[str, bytes | None] | None = None,
) -> HistoryEntry | None:
    """Apply ``writes`` as one change; returns the history entry (None when nothing changed). ``pre_images``:
    the content to back up for a path instead of what is on disk; a write marked ``on_disk`` (a hand edit: the
    file already holds its content) needs one, and is recorded from it without writing the file. ``progress``
    is told (files done, files in all) as backups and then writes are made: a long change (an archive of
    thousands of days) shows a bar. ``current``: files the caller just read under the lock, as they are on disk
    (None: absent), not read again.

    A change an earlier failure left half done (a full disk after the commit point) is finished first; a failure
    before this change's commit point removes its backups, so nothing of it remains."""
    if _journals(root):
        recover(root)
    pre_images = pre_images or {}
    planned = _plan(root, writes, pre_images, current or {})
    if not any(w.record for w, _ in planned):  # only bookkeeping changes: no history, no journal needed
        for write, _ in planned:
            atomic_write(root / write.path, write.content or b"", root=root)
        return None
    journal_path = root / JOURNAL_DIR / f"{run_id}.json"
    total = 2 * len(planned)
    try:
        changes = []
        backups = []
        for number, (write, before) in enumerate(planned):
            if progress is not None and number % 100 == 0:
                progress(number, total)
            backup = None
            if write.record and before is not None:
                backup = f"{BACKUP_DIR}/{run_id}/{write.path}"
                _back_up(root, write, backup, before, from_disk=write.path not in pre_images)
                backups.append(root / backup)
            if write.record:
                changes.append(
                    {
                        "path": write.path,
                        "action": action(before, write.content),
                        **write.meta,
                        "sha_before": sha(before),
                        "sha_after": sha(write.content),
                        "backup": backup,
                    }
                )
        _crash("backups")
        history = {**entry, "run_id": run_id, "changes": changes}
        journal = JournalRecord(
            run_id,
            history,
            # what recovery rolls forward: never a file a person wrote (on_disk)
            tuple(JournalWrite(w.path, w.content) for w, _ in planned if not w.on_disk),
        )
        atomic_write(journal_path, orjson.dumps(journal.to_json()), root=root, durable=False)
        flush([*backups, journal_path])  # pre-images and the journal are on disk before any file changes
    except OSError:  # before the commit point (a full disk): the change never happened, nothing of it remains
        with contextlib.suppress(OSError):
            fsio.remove(journal_path, root=root)
            fsio.remove_tree(root / BACKUP_DIR / run_id, root=root)
        raise
    _crash("journal")
    report = None if progress is None else lambda done: progress(len(planned) + done, total)
    _roll_forward(root, journal, report, fresh=True)
    fsio.remove(journal_path, root=root)
    _crash("done")
    if progress is not None:
        progress(total, total)
    return HistoryEntry.parse(history)


def _plan(
    root: Path, writes: list[FileWrite], pre_images: dict[str, bytes], current: dict[str, bytes | None]
) -> list[tuple[FileWrite, bytes | None]]:
    """The writes that change their file, each with the file's bytes before it (None: absent)."""
    for write in writes:
        target(root, write.path)
    planned: list[tuple[FileWrite, bytes | None]] = []
    for write in writes:
        if write.on_disk and write.path not in pre_images:
            raise ValueError(f"{write.path}: a change already on disk needs its pre-image")
        if write.path in pre_images:
            before: bytes | None = pre_images[write.path]
        elif write.path in current:
            before = current[write.path]
        else:
            before = read_bytes(root, write.path)
        if before != write.content:
            planned.append((write, before))
    return planned


def _back_up(root: Path, write: FileWrite, backup: str, before: bytes, *, from_disk: bool) -> None:
    """Keep ``before`` (the file's bytes now) at ``backup``. A file read from the disk that this change replaces
    atomically or deletes keeps its bytes under a second name (a hard link: the change gives the file a new inode
    or none, so nothing ever writes into the backup's); checked to hold ``before`` (a file changed since it was
    read is copied instead). Anything else is copied."""
    if from_disk and fsio.link_copy(root / write.path, root / backup, root=root):
        try:
            if read_bytes(root, backup) == before:
                return
        except AppError:
            pass
    atomic_write(root / backup, before, root=root, durable=False)


def _roll_forward(
    root: Path, journal: JournalRecord, progress: Callable[[int], None] | None = None, *, fresh: bool = False
) -> None:
    """Write (or delete) every file of ``journal`` not yet at its new content. ``fresh``: right after ``commit``
    read every file and planned only those that differ, so none is read again."""
    touched = []
    for number, item in enumerate(journal.writes):
        if progress is not None and number % 100 == 0:
            progress(number)
        path = target(root, item.path)
        content = item.content
        if not fresh and read_bytes(root, item.path) == content:
            continue
        if content is None:
            fsio.remove(path, root=root)
        else:
            atomic_write(path, content, root=root, durable=False)
        touched.append(path)
        if number == 0:
            _crash("write")
    flush(touched)  # every file is on disk before the history says so and the journal goes
    if not history_has(root, journal.run_id):
        append_line(root / HISTORY_FILE, orjson.dumps(dict(journal.history)), root=root)
    _crash("history")


def history_has(root: Path, run_id: str) -> bool:
    needle = f'"run_id":"{run_id}"'.encode()
    try:
        data = read_bytes(root, HISTORY_FILE, HISTORY_MAX_BYTES) or b""
    except AppError:
        return False
    return needle in data


def read_history(root: Path) -> list[HistoryEntry]:
    """Every complete, parseable line of history.jsonl, oldest first; the others are :func:`history_problems`."""
    return list(_history(root)[1])


def history_problems(root: Path) -> list[str]:
    """The lines of history.jsonl that are skipped (torn, not JSON, not an object), as ``path: line N: why``."""
    return list(_history(root)[2])


# root → (the file's signature, its entries, its problems): status asks on every call; parse only what changed.
_HISTORY: dict[Path, tuple[tuple[int, int, int], list[HistoryEntry], list[str]]] = {}


def _history(root: Path) -> tuple[tuple[int, int, int], list[HistoryEntry], list[str]]:
    try:
        info = os.stat(root / HISTORY_FILE)
        signature = (info.st_ino, info.st_size, info.st_mtime_ns)
    except OSError:
        signature = (0, 0, 0)
    known = _HISTORY.get(root)
    if known is not None and known[0] == signature:
        return known
    try:
        data = read_bytes(root, HISTORY_FILE, HISTORY_MAX_BYTES) or b""
    except AppError as exc:
        parsed: tuple[tuple[int, int, int], list[HistoryEntry], list[str]] = (signature, [], [exc.message])
    else:
        entries: list[HistoryEntry] = []
        problems: list[str] = []
        for number, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                value = None
            entry = HistoryEntry.parse(value)
            if entry is not None:
                entries.append(entry)
            else:
                torn = number == data.count(b"\n") + 1 and not data.endswith(b"\n")
                why = (
                    "torn (the daemon stopped while writing it)"
                    if torn
                    else "not a JSON object"
                    if not isinstance(value, dict)
                    else "not of the shape the daemon writes"
                )
                problems.append(f"{HISTORY_FILE}: line {number}: {why}, skipped")
        parsed = (signature, entries, problems)
    if len(_HISTORY) > 1000:
        _HISTORY.clear()
    _HISTORY[root] = parsed
    return parsed


@dataclass(frozen=True, slots=True)
class Recorded:
    """What history says of the rule files as they are now, for revisions a file does not carry itself.

    ``latest``: path → the sha256 the latest recorded change left it at (None: deleted). A file at that content is
    the daemon's own (a change, a restore), never a hand edit. ``revisions``: (path, sha256) → rule_id →
    (revision, when), from the hand edits history records: a hand edit is never written back into the file, so a
    file at the content a hand edit recorded has those revisions whatever its ``revision:`` line says."""

    latest: dict[str, str | None]
    revisions: dict[tuple[str, str], dict[str, tuple[int, str]]]


# root → (history's signature, what it records): reloads ask on every pass; computed only when history changed.
_RECORDED: dict[Path, tuple[tuple[int, int, int], Recorded]] = {}


def recorded(root: Path) -> Recorded:
    signature, entries, _problems = _history(root)
    known = _RECORDED.get(root)
    if known is not None and known[0] == signature:
        return known[1]
    latest: dict[str, str | None] = {}
    revisions: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}
    for entry in entries:
        for change in entry.changes:
            path, after, before = change.path, change.sha_after, change.sha_before
            latest[path] = after
            if entry.op != "hand_edit" or after is None:
                continue
            revs = dict(revisions.get((path, before), {})) if before is not None else {}
            for rule in change.rules:
                if rule.rev_after is not None:
                    revs[rule.rule_id] = (rule.rev_after, entry.ts or "")
            revisions[(path, after)] = revs
    answer = Recorded(latest, revisions)
    if len(_RECORDED) > 1000:
        _RECORDED.clear()
    _RECORDED[root] = (signature, answer)
    return answer


def _journals(root: Path) -> list[str]:
    """Names of the intent records in the journal directory (regular files or not: a FIFO is set aside too)."""
    return [n for n, kind in fsio.list_dir(root / JOURNAL_DIR, root=root) if n.endswith(".json") and kind != "dir"]


def _load_journal(root: Path, name: str) -> JournalRecord:
    """One intent record, proved to have the shape ``commit`` writes and to name only files a change may write;
    ValueError (or an OSError / AppError) otherwise."""
    raw = read_regular(root / JOURNAL_DIR / name, JOURNAL_MAX_BYTES, root=root)
    journal = JournalRecord.parse(orjson.loads(raw))
    if not _RUN_ID.fullmatch(journal.run_id) or name != f"{journal.run_id}.json":
        raise ValueError("its run id does not match its name")
    for item in journal.writes:
        target(root, item.path)
    return journal


def recover(root: Path) -> list[str]:
    """Finish every change a crash interrupted; drop backups of changes that never committed. Returns run ids.

    A record that cannot be read (a FIFO, a device, a huge file, a symlink, not JSON, a path outside the memory
    trees or into the daemon's bookkeeping: a cloned repository can ship any of them) is set aside as
    ``<name>.unreadable`` for a person and never replayed."""
    finished = []
    journal_dir = root / JOURNAL_DIR
    sweep_temps(root)
    for name in _journals(root):
        try:
            journal = _load_journal(root, name)
        except (OSError, ValueError, AppError) as exc:
            log.error("journal_unreadable", path=name, error=type(exc).__name__)
            with contextlib.suppress(OSError, AppError):
                fsio.rename(journal_dir / name, journal_dir / (name + ".unreadable"), root=root)
            continue
        try:
            _roll_forward(root, journal)
        except (AppError, NotRegularFile) as exc:  # a file it names is refused (a symlink, a FIFO): not ours
            log.error("journal_refused", path=name, error=type(exc).__name__)
            with contextlib.suppress(OSError, AppError):
                fsio.rename(journal_dir / name, journal_dir / (name + ".unreadable"), root=root)
            continue
        fsio.remove(journal_dir / name, root=root)
        finished.append(journal.run_id)
        log.warning("change_recovered", run_id=journal.run_id, files=len(journal.writes))
    pending = {n.removesuffix(".json") for n in _journals(root)}
    for name, kind in fsio.list_dir(root / BACKUP_DIR, root=root):
        if kind == "dir" and name not in pending and not history_has(root, name):
            with contextlib.suppress(OSError):  # pre-images of a change that never committed
                fsio.remove_tree(root / BACKUP_DIR / name, root=root)
            log.warning("uncommitted_change_discarded", run_id=name)
    return finished


TEMP_MAX_DIRS = 2000  # directories a sweep looks into at most
TEMP_MIN_AGE_S = 60.0


def sweep_temps(root: Path) -> int:
    """Remove the temp files of atomic writes a killed daemon left in the trees it writes (``memory/``,
    ``spec/memory/``, ``data/memory/``). Runs under the workspace's lock, when no write of ours is under way; a
    temp younger than a minute is left alone all the same. Symlinked directories are not entered."""
    removed = 0
    pending = [root / tree for tree in ("memory", "spec/memory", "data/memory")]
    visited = 0
    while pending and visited < TEMP_MAX_DIRS:
        directory = pending.pop()
        visited += 1
        with contextlib.suppress(OSError, AppError):
            removed += fsio.remove_stale_temps(directory, TEMP_MIN_AGE_S, root=root)
        pending.extend(directory / name for name, kind in fsio.list_dir(directory, root=root) if kind == "dir")
    if removed:
        log.warning("stale_temp_files_removed", count=removed)
    return removed
