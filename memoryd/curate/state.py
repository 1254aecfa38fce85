"""Consolidation bookkeeping: which daily entries are consolidated, and the progress of a chunked consolidation.

- ``data/memory/curate/consolidated.json`` — daily file → the entry ids (``dn_…``) consolidated from it. Written only
  inside the apply that consolidated them (same ``journal.commit``, recorded: ``restore`` of that apply puts the
  entries back among the unconsolidated), so nothing is marked consolidated before it is written. Paths whose
  daily file is gone (archived) are dropped when it is next written.
- ``data/memory/curate/progress.json`` — the batch under way: its chunks, each ``handed_out`` (the progress record
  written before the host sees the chunk), ``retry`` (an answer refused by the routing mode) or ``applied``, with
  the run that applied it. A crash between chunks resumes at the first chunk not applied. Bookkeeping: never
  recorded, never restored.

Both files live in the workspace, so a clone can ship anything there: each is read bounded and proved to have the
shape written here; a consolidated.json that is not is refused (MEMORY_FILE_REFUSED, nothing guessed), a
progress.json that is not is started afresh (it only says where a batch stood).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd.errors import AppError
from memoryd.fsio import atomic_write
from memoryd.rules import journal

log = structlog.get_logger("memoryd.curate")

CONSOLIDATED_FILE = "data/memory/curate/consolidated.json"
PROGRESS_FILE = "data/memory/curate/progress.json"
MAX_BYTES = 16 * 1024 * 1024
_ENTRY_ID = re.compile(r"dn_[0-9a-f]{20}")
_DAILY = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")
_REQUEST = re.compile(r"cr_[0-9A-Za-z]{1,64}")


def dumps(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


# --- consolidated -------------------------------------------------------------------------------------------


def load_consolidated(root: Path) -> dict[str, list[str]]:
    try:
        data = journal.read_bytes(root, CONSOLIDATED_FILE, MAX_BYTES)
    except AppError as exc:
        raise _refused(exc.message) from exc
    if not data:
        return {}
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _refused("not JSON") from exc
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        raise _refused("no files object")
    out: dict[str, list[str]] = {}
    for path, ids in files.items():
        if (
            not _DAILY.fullmatch(path)
            or not isinstance(ids, list)
            or not all(isinstance(i, str) and _ENTRY_ID.fullmatch(i) for i in ids)
        ):
            raise _refused(f"entry {str(path)[:80]!r}")
        out[path] = ids
    return out


def _refused(why: str) -> AppError:
    return AppError(
        "MEMORY_FILE_REFUSED",
        f"{CONSOLIDATED_FILE} is not a consolidation state this daemon wrote: {why}",
        hint=f"Move {CONSOLIDATED_FILE} aside: the daily notes of the last days are then offered again.",
    )


def consolidated_write(current: dict[str, list[str]], add: dict[str, list[str]], existing: set[str]) -> bytes:
    """consolidated.json with ``add`` marked, files not in ``existing`` (archived, deleted) dropped."""
    files = {path: list(ids) for path, ids in current.items() if path in existing}
    for path, ids in add.items():
        have = files.setdefault(path, [])
        seen = set(have)
        have.extend(i for i in ids if i not in seen)
    return dumps({"version": 1, "files": {p: sorted(set(ids)) for p, ids in sorted(files.items())}})


# --- progress -----------------------------------------------------------------------------------------------


def empty_progress() -> dict[str, Any]:
    return {"version": 1, "batch_id": None, "chunks": {}}


def load_progress(root: Path) -> dict[str, Any]:
    try:
        data = journal.read_bytes(root, PROGRESS_FILE, MAX_BYTES)
        raw = orjson.loads(data) if data else None
    except (AppError, orjson.JSONDecodeError):
        log.warning("progress_unreadable", file=PROGRESS_FILE)
        return empty_progress()
    if raw is None:
        return empty_progress()
    if not _progress_ok(raw):
        log.warning("progress_unreadable", file=PROGRESS_FILE)
        return empty_progress()
    return dict(raw)


def _progress_ok(raw: Any) -> bool:
    if not isinstance(raw, dict) or not isinstance(raw.get("chunks"), dict):
        return False
    if not isinstance(raw.get("batch_id"), str | None):
        return False
    for rid, chunk in raw["chunks"].items():
        if not _REQUEST.fullmatch(rid) or not isinstance(chunk, dict):
            return False
        if not isinstance(chunk.get("index"), int) or not isinstance(chunk.get("status"), str):
            return False
    return True


def chunk_record(progress: dict[str, Any], request_id: str, record: dict[str, Any], status: str, ts: str) -> None:
    """Set one chunk's line in ``progress`` (a new batch replaces the old one's chunks)."""
    if progress.get("batch_id") != record["batch_id"]:
        progress["batch_id"] = record["batch_id"]
        progress["chunks"] = {}
    chunk = progress["chunks"].setdefault(request_id, {})
    chunk.update(index=record["index"], of=record["of"], entries=len(record.get("entries", [])), status=status, ts=ts)


def chunk_of(progress: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """The progress line of the request ``record`` describes ({} when there is none)."""
    if progress.get("batch_id") != record.get("batch_id"):
        return {}
    return next((c for c in progress["chunks"].values() if c.get("index") == record.get("index")), {})


def write_progress(root: Path, progress: dict[str, Any]) -> None:
    atomic_write(root / PROGRESS_FILE, dumps(progress), root=root)
