"""forget and restore: a memory item soft-deleted as a recorded change, and any recorded change undone.

``forget`` writes a tombstone into ``data/memory/forgotten.json`` through the change journal: the old file is backed
up, ``history.jsonl`` gets a line with the change's own run_id. ``restore {run_id}`` undoes any change history
records (a forget, a compile.apply, a promote, a restore): each file it touched goes back to its backup (or is
deleted, if the change created it) — as a new change with its own run_id, so a restore can be restored too. A file
changed again since (its sha256 is no longer what the change left) is not overwritten: MEMORY_CONFLICT names it and
the later change to undo first. Blocking: called under the workspace's lock from a worker thread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from memoryd import ids
from memoryd.errors import AppError
from memoryd.notes import items
from memoryd.notes.daily import strip_private
from memoryd.rules import api as m
from memoryd.rules import changeview, journal
from memoryd.rules.workspace import WorkspaceRules


def forget(wr: WorkspaceRules, item_id: str, reason: str | None) -> m.ForgetResult:
    known = items.load(wr.root)
    item = known.get(item_id)
    if item is None:
        raise AppError("MEMORY_ITEM_NOT_FOUND", f"No memory item {item_id}")
    if item.get("deleted_at"):
        raise AppError(
            "MEMORY_CONFLICT",
            f"{item_id} is already forgotten",
            hint=f"`memoryctl restore {item.get('deleted_run')}` brings it back.",
        )
    now = ids.iso(datetime.now())
    run_id = ids.new_id("forget")
    tombstones = dict(items.forgotten(wr.root))
    tombstones[item_id] = {
        "path": item["path"],
        "heading": item["heading"],
        "first_line": item.get("first_line", ""),
        "deleted_at": now,
        "run_id": run_id,
    }
    entry: dict[str, Any] = {"op": "forget", "ts": now, "item_id": item_id, "path": item["path"]}
    if reason:
        entry["reason"] = strip_private(reason)
    journal.commit(wr.root, run_id, entry, [_tombstones(tombstones, {"item_id": item_id})])
    # items.jsonl is a file: its record is validated here, at the file boundary
    return m.ForgetResult(
        run_id=run_id, item=m.MemoryItem.model_validate({**item, "deleted_at": now, "deleted_run": run_id})
    )


def restore(wr: WorkspaceRules, run_id: str, reason: str | None, dry_run: bool = False) -> m.RestoreResult:
    history = journal.read_history(wr.root)
    entry = next((e for e in history if e.run_id == run_id), None)
    if entry is None:
        raise AppError("MEMORY_RUN_NOT_FOUND", f"No recorded change {run_id}")
    earlier = changeview.restored_by(history, run_id)
    if earlier is not None:
        raise AppError(
            "MEMORY_CONFLICT",
            f"{run_id} is already restored (by {earlier}); nothing to undo",
            hint=f"`memoryctl restore {earlier}` would undo that restore, i.e. redo {run_id}.",
        )
    current: dict[str, bytes | None] = {}  # each file as it is now, read once
    if entry.op == "forget" and entry.item_id is not None:
        writes = [_unforget(wr, run_id, entry.item_id)]
    elif entry.op == "restore" and entry.restored_op == "forget":
        writes = [_reforget(wr, history, entry)]
    else:
        writes = [_put_back(wr, history, run_id, change, current) for change in entry.changes]
    for w in writes:
        if w.path not in current:
            current[w.path] = journal.read_bytes(wr.root, w.path)
    now = ids.iso(datetime.now())
    new_run = ids.new_id("restore")
    planned = [m.PlannedWrite(path=w.path, action=journal.action(current[w.path], w.content)) for w in writes]
    if dry_run:  # what the review page shows before the restore button does anything
        diffs = [
            changeview.diff_of(w.path, p.action, current[w.path], w.content)
            for w, p in zip(writes, planned, strict=True)
        ]
        return m.RestoreResult(run_id=None, restored=run_id, writes=planned, dry_run=True, diffs=diffs)
    record: dict[str, Any] = {"op": "restore", "ts": now, "restores": run_id, "restored_op": entry.op}
    if entry.kind is not None:  # a curation change undone: its kind too (archive, ttl, consolidate…)
        record["restored_kind"] = entry.kind
    if reason:
        record["reason"] = strip_private(reason)
    journal.commit(wr.root, new_run, record, writes, progress=wr.reporter("restore"), current=current)
    wr.rules.reload([w.path for w in writes])
    return m.RestoreResult(run_id=new_run, restored=run_id, writes=planned)


def _reforget(
    wr: WorkspaceRules, history: list[journal.HistoryEntry], entry: journal.HistoryEntry
) -> journal.FileWrite:
    """A restore of a forget undone: the forget's tombstone put back (its own run id, so restoring that forget
    again works), whatever other items were forgotten or restored meanwhile."""
    forget_run = str(entry.restores)
    original = next((e for e in history if e.run_id == forget_run), None)
    item_id = None if original is None else original.item_id
    known = items.load(wr.root).get(item_id) if item_id is not None else None
    if original is None or known is None or item_id is None:
        raise AppError("MEMORY_CONFLICT", f"The forget {forget_run} is not on record any more")
    tombstones = dict(items.forgotten(wr.root))
    if item_id in tombstones:
        raise AppError("MEMORY_CONFLICT", f"{item_id} is forgotten again already")
    tombstones[item_id] = {
        "path": known["path"],
        "heading": known["heading"],
        "first_line": known.get("first_line", ""),
        "deleted_at": original.ts,
        "run_id": forget_run,
    }
    return _tombstones(tombstones, {"restores": str(entry.run_id), "item_id": item_id})


def _tombstones(tombstones: dict[str, Any], meta: dict[str, Any]) -> journal.FileWrite:
    """``forgotten.json`` with these tombstones; none left: no file (as before the first forget)."""
    content = orjson.dumps(tombstones, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    return journal.FileWrite(items.FORGOTTEN_FILE, content if tombstones else None, meta)


def _unforget(wr: WorkspaceRules, run_id: str, item_id: str) -> journal.FileWrite:
    """A forget undone by taking its own tombstone out of ``forgotten.json``: forgets of other items, before or
    after it, stay as they are (restoring one never conflicts with another)."""
    tombstones = dict(items.forgotten(wr.root))
    tomb = tombstones.get(item_id)
    if tomb is None or tomb.get("run_id") != run_id:
        raise AppError(
            "MEMORY_CONFLICT",
            f"{item_id} is not forgotten by {run_id} any more",
            hint="`memoryctl timeline` shows what changed it since.",
        )
    del tombstones[item_id]
    return _tombstones(tombstones, {"restores": run_id, "item_id": item_id})


def _put_back(
    wr: WorkspaceRules,
    history: list[journal.HistoryEntry],
    run_id: str,
    change: journal.Change,
    current: dict[str, bytes | None],
) -> journal.FileWrite:
    """One file of a recorded change back as it was before it (``current``: gets the file as it is now). The path
    and the backup come from history.jsonl, which a cloned repository can ship: both must lie in the workspace's
    memory trees (the backup among the backups), no symlink is followed, and a file changed since is never
    overwritten."""
    path = change.path
    journal.target(wr.root, path)
    now = current[path] = journal.read_bytes(wr.root, path)
    if journal.sha(now) != change.sha_after:
        later = next((e.run_id for e in reversed(history) if e.touches(path)), None)
        raise AppError(
            "MEMORY_CONFLICT",
            f"{path} changed after {run_id}",
            hint=f"Restore the later change first ({later})." if later and later != run_id else None,
        )
    backup = change.backup
    before = None
    if backup:
        if not backup.startswith(journal.BACKUP_DIR + "/"):
            raise AppError("MEMORY_PATH_TRAVERSAL", f"Refused a recorded backup outside {journal.BACKUP_DIR}/")
        before = journal.read_bytes(wr.root, backup)
        if before is None:
            raise AppError("MEMORY_CONFLICT", f"The backup of {path} from {run_id} is gone ({backup})")
        if journal.sha(before) != change.sha_before:
            raise AppError("MEMORY_CONFLICT", f"The backup of {path} from {run_id} does not match its record")
    return journal.FileWrite(path, before, {"restores": run_id})
