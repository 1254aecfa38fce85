"""What the review page reads besides search and rules: the memory items of a file, and what a recorded change did,
file by file, as unified diffs (the history page and the restore preview).

A change's *before* is its backup (none: the change created the file); its *after* is the backup the next change of
the same file took (its ``sha_before`` is this change's ``sha_after``), else the file as it is now when it still has
that digest, else unknown (``after_known`` false). Every path comes from ``history.jsonl``, which a cloned repository
can ship: backups must lie under ``backups/``, files in the memory trees, no symlink followed, sizes bounded
(``journal.read_bytes``). Blocking: called from a worker thread.
"""

from __future__ import annotations

import difflib
from typing import Any

from memoryd.errors import AppError
from memoryd.notes import items as memory_items
from memoryd.rules import api as m
from memoryd.rules import journal
from memoryd.rules.workspace import WorkspaceRules

DIFF_MAX_LINES = 400  # lines of one file's diff shown; the rest is counted out (truncated)
DIFF_MAX_BYTES = 2 * 1024 * 1024  # a side larger than this is not diffed (too_large)


def items(wr: WorkspaceRules, path: str | None, offset: int, limit: int) -> m.ItemsResult:
    """The items remember wrote (of ``path``), by path and line, tombstones applied; a page of them."""
    tombs = memory_items.forgotten(wr.root)
    known = [
        _tombstoned(i, tombs.get(str(i.get("id"))))
        for i in memory_items.records(wr.root).values()
        if path is None or i.get("path") == path
    ]
    known.sort(key=lambda i: (str(i.get("path")), _line(i.get("start_line")), str(i.get("id"))))
    page = [m.MemoryItem.model_validate(_item(i)) for i in known[offset : offset + limit]]
    return m.ItemsResult(items=page, total=len(known), forgotten=sum(1 for i in known if i.get("deleted_at")))


def _tombstoned(item: dict[str, Any], tomb: dict[str, Any] | None) -> dict[str, Any]:
    if tomb is None:
        return item
    return {**item, "deleted_at": tomb.get("deleted_at"), "deleted_run": tomb.get("run_id")}


def _line(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _item(raw: dict[str, Any]) -> dict[str, Any]:
    """A record of items.jsonl as the model takes it (a hand-written line's stray fields and bad types dropped)."""
    fields = m.MemoryItem.model_fields
    out = {k: v for k, v in raw.items() if k in fields}
    for key in ("id", "path", "heading"):
        out[key] = str(out.get(key, ""))
    for key in ("first_line", "created_at", "deleted_at", "deleted_run"):
        if out.get(key) is not None and not isinstance(out[key], str):
            out[key] = str(out[key])
    if not isinstance(out.get("start_line"), int):
        out["start_line"] = None
    if not isinstance(out.get("confidence"), int | float):
        out["confidence"] = 1.0
    if not isinstance(out.get("evidence"), list):
        out["evidence"] = []
    if not isinstance(out.get("metadata"), dict):
        out["metadata"] = {}
    if not isinstance(out.get("revision"), int):
        out["revision"] = 1
    return out


def show(wr: WorkspaceRules, run_id: str) -> m.ChangeShowResult:
    history = journal.read_history(wr.root)
    at = next((n for n, e in enumerate(history) if e.run_id == run_id), None)
    if at is None:
        raise AppError("MEMORY_RUN_NOT_FOUND", f"No recorded change {run_id}", hint="`memoryctl timeline` lists them.")
    entry = history[at]
    files = [_file(wr, history, at, c) for c in entry.changes]
    return m.ChangeShowResult(
        run_id=run_id,
        op=entry.op or "",
        ts=entry.ts,
        reason=entry.reason,
        record=_record(entry),
        files=files,
        restored_by=restored_by(history, run_id),
    )


def _record(entry: journal.HistoryEntry) -> dict[str, Any]:
    """The history line as written, its per-file changes left out."""
    fields = ("op", "ts", "run_id", "kind", "item_id", "path", "restores", "restored_op", "reason")
    named = {k: getattr(entry, k) for k in fields if getattr(entry, k) is not None}
    return {**{k: v for k, v in entry.extra.items() if k != "changes"}, **named}


def restored_by(history: list[journal.HistoryEntry], run_id: str) -> str | None:
    """The restore that undid ``run_id`` and is still in force (not itself restored since), if any. Newest first:
    a restore's own fate is known before it is met, since whatever undid it came later."""
    undone_by: dict[str, str] = {}
    for e in reversed(history):
        if e.op == "restore" and e.restores is not None:
            me = str(e.run_id)
            if me not in undone_by:
                undone_by.setdefault(e.restores, me)
    return undone_by.get(run_id)


def _file(wr: WorkspaceRules, history: list[journal.HistoryEntry], at: int, change: journal.Change) -> m.FileDiff:
    path = change.path
    action = change.action or "update"
    try:
        journal.target(wr.root, path)
        before = _backup(wr, change.backup) if change.backup else None
        after, known = _after(wr, history, at, path, change.sha_after)
    except AppError:  # a record naming a path outside the trees, or a refused file: shown, not read
        return m.FileDiff(path=path, action=action, diff="", after_known=False)
    if not known:
        return m.FileDiff(path=path, action=action, diff="", after_known=False)
    return diff_of(path, action, before, after)


def _backup(wr: WorkspaceRules, backup: object) -> bytes | None:
    if not isinstance(backup, str) or not backup.startswith(journal.BACKUP_DIR + "/"):
        raise AppError("MEMORY_PATH_TRAVERSAL", "a recorded backup outside backups/")
    return journal.read_bytes(wr.root, backup, DIFF_MAX_BYTES + 1)


def _after(
    wr: WorkspaceRules, history: list[journal.HistoryEntry], at: int, path: str, sha_after: str | None
) -> tuple[bytes | None, bool]:
    """What the change left in ``path`` and whether that is known."""
    if sha_after is None:
        return None, True  # it deleted the file
    for later in history[at + 1 :]:
        for c in later.changes:
            if c.path == path and c.sha_before == sha_after and c.backup:
                data = _backup(wr, c.backup)
                return data, data is not None and journal.sha(data) == sha_after
    now = journal.read_bytes(wr.root, path, DIFF_MAX_BYTES + 1)
    return now, now is not None and journal.sha(now) == sha_after


def diff_of(path: str, action: str, before: bytes | None, after: bytes | None) -> m.FileDiff:
    """``before`` → ``after`` as a unified diff of at most DIFF_MAX_LINES lines."""
    if max(len(before or b""), len(after or b"")) > DIFF_MAX_BYTES:
        return m.FileDiff(path=path, action=action, diff="", too_large=True)
    old = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    new = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    lines: list[str] = []
    truncated = False
    for line in difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"):
        if len(lines) >= DIFF_MAX_LINES:
            truncated = True
            break
        lines.append(line if line.endswith("\n") else line + "\n")
    return m.FileDiff(path=path, action=action, diff="".join(lines), truncated=truncated)
