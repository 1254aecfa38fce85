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
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, append_line, atomic_write, flush, read_regular

log = structlog.get_logger("memoryd.journal")

JOURNAL_DIR = "data/memory/journal"
BACKUP_DIR = "data/memory/backups"
HISTORY_FILE = "data/memory/history.jsonl"
CRASH_ENV = "MEMORYD_CRASH_AT"
READ_MAX_BYTES = 256 * 1024 * 1024  # history, compile state, files a change replaces


@dataclass(frozen=True, slots=True)
class FileWrite:
    path: str  # relative to the workspace
    content: bytes | None  # None deletes the file
    meta: dict[str, Any] = field(default_factory=dict)  # layer, rule_id, revisions: copied into history
    record: bool = True  # False for bookkeeping files (compile state): no backup, not listed in history


def sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _crash(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os._exit(86)


def read_bytes(root: Path, rel: str) -> bytes | None:
    """A workspace file's bytes, None when it does not exist. Only a regular file within READ_MAX_BYTES is read
    (a FIFO or a device a cloned repository put there would hang or flood the daemon): MEMORY_FILE_REFUSED."""
    try:
        return read_regular(root / rel, READ_MAX_BYTES)
    except FileNotFoundError:
        return None
    except (NotRegularFile, FileTooLarge) as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{rel}: {exc.strerror or exc}") from exc


def action(before: bytes | None, after: bytes | None) -> str:
    """What writing ``after`` over ``before`` does to a file (None: absent)."""
    if before == after:
        return "unchanged"
    if before is None:
        return "create"
    return "delete" if after is None else "update"


def plan(root: Path, writes: list[FileWrite]) -> list[tuple[FileWrite, bytes | None]]:
    """Pair each write with the file's current content; writes that would change nothing are dropped."""
    out = []
    for write in writes:
        before = read_bytes(root, write.path)
        if before != write.content:
            out.append((write, before))
    return out


def commit(
    root: Path,
    run_id: str,
    entry: dict[str, Any],
    writes: list[FileWrite],
    pre_images: dict[str, bytes] | None = None,
) -> dict[str, Any] | None:
    """Apply ``writes`` as one change; returns the history entry (None when nothing changed). ``pre_images``:
    the content to back up for a path instead of what is on disk (a hand edit: the content before it).

    A change an earlier failure left half done (a full disk after the commit point) is finished first; a failure
    before this change's commit point removes its backups, so nothing of it remains."""
    if any((root / JOURNAL_DIR).glob("*.json")):
        recover(root)
    planned = plan(root, writes)
    if pre_images:
        planned = [(w, pre_images.get(w.path, before)) for w, before in planned]
    if not any(w.record for w, _ in planned):  # only bookkeeping changes: no history, no journal needed
        for write, _ in planned:
            atomic_write(root / write.path, write.content or b"")
        return None
    journal_path = root / JOURNAL_DIR / f"{run_id}.json"
    try:
        changes = []
        backups = []
        for write, before in planned:
            backup = None
            if write.record and before is not None:
                backup = f"{BACKUP_DIR}/{run_id}/{write.path}"
                atomic_write(root / backup, before, durable=False)
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
        journal = {
            "run_id": run_id,
            "history": history,
            "writes": [
                {"path": w.path, "content": None if w.content is None else w.content.decode("utf-8")}
                for w, _ in planned
            ],
        }
        atomic_write(journal_path, orjson.dumps(journal), durable=False)
        flush([*backups, journal_path])  # pre-images and the journal are on disk before any file changes
    except OSError:  # before the commit point (a full disk): the change never happened, nothing of it remains
        with contextlib.suppress(FileNotFoundError):
            journal_path.unlink()
        shutil.rmtree(root / BACKUP_DIR / run_id, ignore_errors=True)
        raise
    _crash("journal")
    _roll_forward(root, journal)
    with contextlib.suppress(FileNotFoundError):
        journal_path.unlink()
    _crash("done")
    return history


def _roll_forward(root: Path, journal: dict[str, Any]) -> None:
    touched = []
    for number, item in enumerate(journal["writes"]):
        target = root / item["path"]
        content = None if item["content"] is None else str(item["content"]).encode("utf-8")
        if read_bytes(root, item["path"]) == content:
            continue
        if content is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        else:
            atomic_write(target, content, durable=False)
        touched.append(target)
        if number == 0:
            _crash("write")
    flush(touched)  # every file is on disk before the history says so and the journal goes
    history = journal["history"]
    if not history_has(root, str(journal["run_id"])):
        append_line(root / HISTORY_FILE, orjson.dumps(history))
    _crash("history")


def history_has(root: Path, run_id: str) -> bool:
    needle = f'"run_id":"{run_id}"'.encode()
    data = read_bytes(root, HISTORY_FILE) or b""
    return needle in data


def read_history(root: Path) -> list[dict[str, Any]]:
    """Every complete, parseable line of history.jsonl, oldest first; the others are :func:`history_problems`."""
    return list(_history(root)[1])


def history_problems(root: Path) -> list[str]:
    """The lines of history.jsonl that are skipped (torn, not JSON, not an object), as ``path: line N: why``."""
    return list(_history(root)[2])


# root → (the file's signature, its entries, its problems): status asks on every call; parse only what changed.
_HISTORY: dict[Path, tuple[tuple[int, int, int], list[dict[str, Any]], list[str]]] = {}


def _history(root: Path) -> tuple[tuple[int, int, int], list[dict[str, Any]], list[str]]:
    try:
        info = os.stat(root / HISTORY_FILE)
        signature = (info.st_ino, info.st_size, info.st_mtime_ns)
    except OSError:
        signature = (0, 0, 0)
    known = _HISTORY.get(root)
    if known is not None and known[0] == signature:
        return known
    try:
        data = read_bytes(root, HISTORY_FILE) or b""
    except AppError as exc:
        parsed: tuple[tuple[int, int, int], list[dict[str, Any]], list[str]] = (signature, [], [exc.message])
    else:
        entries, problems = [], []
        for number, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                entries.append(value)
            else:
                torn = number == data.count(b"\n") + 1 and not data.endswith(b"\n")
                why = "torn (the daemon stopped while writing it)" if torn else "not a JSON object"
                problems.append(f"{HISTORY_FILE}: line {number}: {why}, skipped")
        parsed = (signature, entries, problems)
    if len(_HISTORY) > 1000:
        _HISTORY.clear()
    _HISTORY[root] = parsed
    return parsed


def recover(root: Path) -> list[str]:
    """Finish every change a crash interrupted; drop backups of changes that never committed. Returns run ids."""
    finished = []
    journal_dir = root / JOURNAL_DIR
    if journal_dir.is_dir():
        for path in sorted(journal_dir.glob("*.json")):
            try:
                journal = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):  # atomic writes make this unlikely; keep it for a human
                log.error("journal_unreadable", path=path.name)
                with contextlib.suppress(OSError):
                    path.rename(path.with_suffix(".unreadable"))
                continue
            _roll_forward(root, journal)
            path.unlink()
            finished.append(str(journal["run_id"]))
            log.warning("change_recovered", run_id=journal["run_id"], files=len(journal["writes"]))
    backups = root / BACKUP_DIR
    if backups.is_dir():
        pending = {p.stem for p in journal_dir.glob("*.json")} if journal_dir.is_dir() else set()
        for candidate in backups.iterdir():
            if candidate.is_dir() and candidate.name not in pending and not history_has(root, candidate.name):
                shutil.rmtree(candidate, ignore_errors=True)  # pre-images of a change that never committed
                log.warning("uncommitted_change_discarded", run_id=candidate.name)
    return finished
