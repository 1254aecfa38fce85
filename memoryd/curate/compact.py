"""lifecycle.compact: archived daily files (``memory/archive/YYYY-MM-DD.md``) summarized by the host's model into
HISTORY.md, through the compile exchange.

``compact`` lists the archived days older than ``older_than_days`` not compacted yet (``compacted.json``); a dry run
stops there (the files and their bytes: the risk summary) and writes only its ``lifecycle.jsonl`` row. Otherwise it
hands out one compile request whose ``consolidation`` carries the archived entries and ``compact`` (the files); the
host's answer goes through ``compile.apply``: its ``history_entry`` is appended to HISTORY.md and the files are marked
compacted in ``data/memory/curate/compacted.json`` — both in that apply's one change (history kind ``compact``,
restorable), with its own ``lifecycle.jsonl`` row. The archived files themselves are left as they are (``lifecycle.ttl``
deletes them later, restorably).

Blocking: called under the workspace's rules lock from a worker thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from memoryd import ids
from memoryd.curate import entries, state
from memoryd.curate.policy import OBSERVABILITY_DIR
from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, append_line, atomic_write, list_dir, read_regular
from memoryd.rules import compile as comp
from memoryd.rules import journal
from memoryd.rules import prepare as compile_prepare
from memoryd.rules.extension import Curator
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import RulesSettings

ARCHIVE = "memory/archive"
COMPACTED_FILE = "data/memory/curate/compacted.json"
LIFECYCLE_FILE = f"{OBSERVABILITY_DIR}/lifecycle.jsonl"
DEFAULT_OLDER_THAN_DAYS = 30
MAX_FILES = 60  # archived days one request summarizes; the rest wait for the next compact
_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
FILTERS = {"run_id": None, "model_id": None, "since": None, "compact": "archive"}


@dataclass(slots=True)
class Compact:
    run_id: str
    dry_run: bool
    files: list[dict[str, Any]] = field(default_factory=list)
    request_id: str | None = None
    path: str | None = None
    remaining: int = 0


def load_compacted(root: Path) -> set[str]:
    data = journal.read_bytes(root, COMPACTED_FILE, state.MAX_BYTES)
    try:
        raw = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{COMPACTED_FILE} is not JSON") from exc
    files = raw.get("files", []) if isinstance(raw, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise AppError("MEMORY_FILE_REFUSED", f"{COMPACTED_FILE} is not a list of compacted files")
    return set(files)


def compacted_write(done: set[str], add: list[str]) -> bytes:
    return state.dumps({"version": 1, "files": sorted(done | set(add))})


def candidates(root: Path, older_than_days: int, today: date) -> list[tuple[str, int]]:
    """Archived days dated more than ``older_than_days`` before ``today``, not compacted yet, oldest first:
    (path, bytes). Only regular files within the entries' size bound."""
    cutoff = today - timedelta(days=older_than_days)
    done = load_compacted(root)
    out = []
    for name, kind in sorted(list_dir(root / ARCHIVE, root=root)):
        match = _DAY.match(name)
        rel = f"{ARCHIVE}/{name}"
        if kind != "file" or match is None or rel in done:
            continue
        try:
            if date.fromisoformat(match.group(1)) >= cutoff:
                continue
            size = len(read_regular(root / rel, entries.MAX_FILE_BYTES, root=root))
        except (ValueError, OSError, NotRegularFile, FileTooLarge):
            continue
        out.append((rel, size))
    return out


def compact(
    settings: RulesSettings,
    wr: WorkspaceRules,
    curator: Curator,
    *,
    older_than_days: int | None,
    dry_run: bool,
    today: date | None = None,
) -> Compact:
    root = wr.root
    found = candidates(
        root, DEFAULT_OLDER_THAN_DAYS if older_than_days is None else older_than_days, today or date.today()
    )
    taken, rest = found[:MAX_FILES], found[MAX_FILES:]
    result = Compact(run_id=ids.new_id("compact"), dry_run=dry_run, remaining=len(rest))
    result.files = [{"path": p, "bytes": n, "action": "compact"} for p, n in taken]
    if dry_run or not taken:
        row(root, result.run_id, dry_run, result.files)
        return result
    comp_state = comp.load_state(journal.read_bytes(root, comp.STATE_FILE))
    for rid, held in comp_state["requests"].items():  # one outstanding compact request at a time: hand it out again
        if held["status"] == "outstanding" and held.get("filters") == FILTERS:
            request, rel = compile_prepare._request(settings, wr, rid, held, curator)
            result.request_id, result.path = request.request_id, rel
            return result
    composite = [f"{p}#{e.entry_id}" for p, _n in taken for e in entries.parse(p, entries.read(root, p) or "")]
    rid = ids.new_id("cr")
    record: dict[str, Any] = {
        "status": "outstanding",
        "batch_id": ids.new_id("cb"),
        "index": 1,
        "of": 1,
        "filters": dict(FILTERS),
        "observation_ids": [],
        "entries": composite,
        "compact": [p for p, _n in taken],
        "compact_run": result.run_id,
        "created_at": ids.iso(datetime.now()),
    }
    comp_state["requests"][rid] = record
    atomic_write(root / comp.STATE_FILE, comp.dump_state(comp_state), root=root)
    request, rel = compile_prepare._request(settings, wr, rid, record, curator)
    result.request_id, result.path = request.request_id, rel
    return result


def row(root: Path, run_id: str, dry_run: bool, files: list[dict[str, Any]]) -> None:
    """The run's row in lifecycle.jsonl (counts only)."""
    line = {
        "ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "run_id": run_id,
        "action": "compact",
        "dry_run": dry_run,
        "files": len(files),
        "bytes": sum(int(f["bytes"]) for f in files),
    }
    try:
        append_line(root / LIFECYCLE_FILE, orjson.dumps(line), root=root)
    except OSError:
        pass
