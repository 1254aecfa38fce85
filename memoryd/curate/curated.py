"""The item lines of the bullets a consolidation writes (``data/memory/curated.jsonl``, memoryd/notes/items.py):
one per bullet added, confirmed with new evidence or another confidence, or removed by ``[replace]`` — its revision
one above the item's last line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from memoryd.curate import steps
from memoryd.notes import items
from memoryd.rules import journal

TARGET_FILES: dict[steps.Target, str] = {"memory": "memory/MEMORY.md", "insights": "memory/INSIGHTS.md"}


def write(root: Path, run: steps.Run, request_id: str, now: str) -> journal.FileWrite | None:
    """curated.jsonl with a line per bullet this consolidation added, confirmed with new evidence or another
    confidence, or removed by [replace] (revision + 1 over the item's last line)."""
    data, known = items.load_curated(root)
    lines: list[bytes] = []
    for target, update in run.updates.items():
        merged = update.merged
        if update.held is not None or merged is None:
            continue
        path = TARGET_FILES[target]
        added = set()
        for title, bullet in merged.added:
            bullet_key = steps.key(bullet)
            added.add((steps.title(title), bullet_key))
            meta = update.meta.get((steps.title(title), bullet_key))
            lines.append(
                _item_line(known, path, title, bullet_key, steps.SEEN.sub("", bullet), meta, run, request_id, now)
            )
        for (section, bullet_key), meta in update.meta.items():
            item_id = items.curated_id(path, section, bullet_key)
            old = known.get(item_id)
            if (section, bullet_key) in added or old is None or old.get("deleted_at"):
                continue
            evidence = sorted(set(old.get("evidence") or []) | set(meta.evidence))
            if evidence != sorted(old.get("evidence") or []) or (
                meta.stated and meta.confidence != old.get("confidence")
            ):
                lines.append(
                    _revised(
                        old,
                        evidence=evidence,
                        confidence=meta.confidence if meta.stated else old.get("confidence"),
                        updated_at=now,
                    )
                )
        for title, bullet in merged.removed:
            old = known.get(items.curated_id(path, steps.title(title), steps.key(bullet)))
            if old is not None and not old.get("deleted_at"):
                lines.append(_revised(old, deleted_at=now, updated_at=now))
    if not lines:
        return None
    if data and not data.endswith(b"\n"):
        data += b"\n"  # a torn last line stays torn and skipped; ours start on a line of their own
    return journal.FileWrite(items.CURATED_FILE, data + b"".join(lines), {"target": "items"})


def _item_line(
    known: dict[str, dict[str, Any]],
    path: str,
    title: str,
    bullet_key: str,
    bullet: str,
    meta: steps.Meta | None,
    run: steps.Run,
    request_id: str,
    now: str,
) -> bytes:
    item_id = items.curated_id(path, steps.title(title), bullet_key)
    old = known.get(item_id)
    meta = meta or steps.Meta(sorted(set(run.cited)), steps.DEFAULT_CONFIDENCE, False)
    record = {
        "id": item_id,
        "path": path,
        "heading": title,
        "first_line": bullet.strip(),
        "created_at": old.get("created_at", now) if old else now,
        "updated_at": now,
        "confidence": meta.confidence,
        "evidence": meta.evidence,
        "metadata": {"request_id": request_id, "stated": meta.stated},
        "revision": int(old.get("revision", 1)) + 1 if old else 1,
    }
    return orjson.dumps(record) + b"\n"


def _revised(old: dict[str, Any], **changes: Any) -> bytes:
    record = {k: v for k, v in old.items() if k not in ("deleted_at", "deleted_run") or v is not None}
    record.update(changes)
    record["revision"] = int(old.get("revision", 1)) + 1
    return orjson.dumps(record) + b"\n"
