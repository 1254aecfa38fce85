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
from memoryd.rules import journal
from memoryd.rules.workspace import WorkspaceRules


def forget(wr: WorkspaceRules, item_id: str, reason: str | None) -> dict[str, Any]:
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
    content = orjson.dumps(tombstones, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    entry: dict[str, Any] = {"op": "forget", "ts": now, "item_id": item_id, "path": item["path"]}
    if reason:
        entry["reason"] = strip_private(reason)
    journal.commit(wr.root, run_id, entry, [journal.FileWrite(items.FORGOTTEN_FILE, content, {"item_id": item_id})])
    return {"run_id": run_id, "item": {**item, "deleted_at": now, "deleted_run": run_id}}


def restore(wr: WorkspaceRules, run_id: str, reason: str | None) -> dict[str, Any]:
    history = journal.read_history(wr.root)
    entry = next((e for e in history if e.get("run_id") == run_id), None)
    if entry is None:
        raise AppError("MEMORY_RUN_NOT_FOUND", f"No recorded change {run_id}")
    writes = []
    for change in entry.get("changes") or []:
        path = str(change.get("path"))
        current = journal.read_bytes(wr.root, path)
        if journal.sha(current) != change.get("sha_after"):
            later = next(
                (
                    e.get("run_id")
                    for e in reversed(history)
                    if any(c.get("path") == path for c in e.get("changes") or [])
                ),
                None,
            )
            raise AppError(
                "MEMORY_CONFLICT",
                f"{path} changed after {run_id}",
                hint=f"Restore the later change first ({later})." if later and later != run_id else None,
            )
        backup = change.get("backup")
        before = None
        if backup:
            before = journal.read_bytes(wr.root, str(backup))
            if before is None:
                raise AppError("MEMORY_CONFLICT", f"The backup of {path} from {run_id} is gone ({backup})")
        writes.append(journal.FileWrite(path, before, {"restores": run_id}))
    now = ids.iso(datetime.now())
    new_run = ids.new_id("restore")
    planned = [
        {"path": w.path, "action": journal.action(journal.read_bytes(wr.root, w.path), w.content)} for w in writes
    ]
    record: dict[str, Any] = {"op": "restore", "ts": now, "restores": run_id, "restored_op": entry.get("op")}
    if reason:
        record["reason"] = strip_private(reason)
    journal.commit(wr.root, new_run, record, writes)
    wr.rules.reload([w.path for w in writes])
    return {"run_id": new_run, "restored": run_id, "writes": planned}
