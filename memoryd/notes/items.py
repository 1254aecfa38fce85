"""Memory items: the entries ``remember`` writes, made auditable without changing their Markdown.

The daily files stay plain Markdown as a person writes them. What seed 001's data model adds lives in two sidecar
files under ``data/memory/`` (decision 0009):

- ``items.jsonl``, append-only, one line per entry ``remember`` wrote: its id (``ent_…``), where it is (path,
  heading, first line), when, and ``confidence`` / ``evidence`` / ``metadata`` / ``revision``. A line missing a field
  (written by an older version, or by hand) reads with the stable defaults: confidence 1.0, evidence [], metadata
  {}, revision 1.
- ``forgotten.json``, the tombstones: item id → {path, heading, deleted_at, run_id}. ``forget`` rewrites it through
  the change journal (a backup, a history line with its own run_id), so ``restore {run_id}`` undoes it like any
  other change. Search and context leave out the sections a tombstone names; the Markdown keeps them (audit).

- ``curated.jsonl``, append-only, one line per bullet a consolidation wrote into MEMORY.md or INSIGHTS.md (or
  changed): its id (``mem_…``, from path, section and the bullet's words), the observation and entry ids it rests on
  (``evidence``), ``confidence``, ``metadata`` (request, whether the model stated them) and a ``revision`` that goes
  up each time a later consolidation changes it (new evidence, another confidence, removed by ``[replace]``:
  ``deleted_at``). The last line of an id is its current state. Written only inside the consolidation's change
  (``journal.commit``), so ``restore`` of that change takes its lines back out too; never by ``remember``, whose
  sidecar (items.jsonl) is appended outside the rules lock.

Plain functions over files; the journal that writes ``forgotten.json`` is the rules domain's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd.fsio import FileTooLarge, NotRegularFile, append_line, read_regular
from memoryd.notes.append import Written
from memoryd.notes.daily import strip_private, strip_private_value

log = structlog.get_logger("memoryd.items")

ITEMS_FILE = "data/memory/items.jsonl"
FORGOTTEN_FILE = "data/memory/forgotten.json"
CURATED_FILE = "data/memory/curated.jsonl"
READ_MAX_BYTES = 64 * 1024 * 1024
DEFAULTS: dict[str, Any] = {"confidence": 1.0, "evidence": [], "metadata": {}, "revision": 1, "deleted_at": None}


@dataclass(frozen=True, slots=True)
class ItemFields:
    """What remember may say of its entry's item besides where it is (decision 0009's defaults otherwise)."""

    confidence: float | None = None
    evidence: tuple[str, ...] = ()
    metadata: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        return {
            "confidence": DEFAULTS["confidence"] if self.confidence is None else self.confidence,
            "evidence": [strip_private(e) for e in self.evidence if strip_private(e).strip()],
            "metadata": {} if self.metadata is None else strip_private_value(self.metadata),
            "revision": 1,
        }


def heading_key(heading: str) -> str:
    """A heading as the index keeps it: without its ``## ``."""
    return heading.lstrip("#").strip()


def record(root: Path, entries: list[Written], created_at: str, fields: dict[str, ItemFields] | None = None) -> None:
    """Append one line per entry remember wrote (``fields``: by entry id, what its remember said of the item)."""
    fields = fields or {}
    lines = b"".join(
        orjson.dumps(
            {
                "id": e.id,
                "path": e.path,
                "heading": heading_key(e.heading),
                "first_line": e.first_line,
                "start_line": e.start_line,
                "created_at": created_at,
                **fields.get(e.id, ItemFields()).fields(),
            }
        )
        + b"\n"
        for e in entries
    )
    if lines:
        append_line(root / ITEMS_FILE, lines[:-1], root=root)


def curated_id(path: str, section: str, bullet_key: str) -> str:
    """A consolidated bullet's id: stable for the same words in the same section of the same file."""
    digest = hashlib.sha256(f"{path}\0{section}\0{bullet_key}".encode()).hexdigest()
    return f"mem_{digest[:20]}"


def load_curated(root: Path) -> tuple[bytes, dict[str, dict[str, Any]]]:
    """curated.jsonl's bytes and every item's current state (its last line), defaults filled in; torn or
    foreign lines skipped."""
    data = _read(root, CURATED_FILE)
    out: dict[str, dict[str, Any]] = {}
    for line in data.splitlines():
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"].startswith("mem_"):
            out[raw["id"]] = {**DEFAULTS, **raw}
    return data, out


def load(root: Path) -> dict[str, dict[str, Any]]:
    """Every recorded item by id, defaults filled in, tombstones applied (``deleted_at``, ``deleted_run``). A line
    that is torn or not an object is skipped (and logged). The parsed file is kept while its signature holds (the
    review page and timeline ask per request; 10,000 lines take ~20 ms to parse); each call gets its own dicts."""
    items = {item_id: dict(item) for item_id, item in _parsed(root).items()}
    for item_id, tomb in forgotten(root).items():
        if item_id in items:
            items[item_id]["deleted_at"] = tomb.get("deleted_at")
            items[item_id]["deleted_run"] = tomb.get("run_id")
    return items


def records(root: Path) -> dict[str, dict[str, Any]]:
    """Every recorded item by id with defaults, tombstones *not* applied: the shared parse, not a copy (read it,
    never change it)."""
    return _parsed(root)


# root → (items.jsonl's signature, its records with defaults): read again only when the file changed.
_ITEMS: dict[Path, tuple[tuple[int, int, int], dict[str, dict[str, Any]]]] = {}


def _parsed(root: Path) -> dict[str, dict[str, Any]]:
    try:
        info = os.stat(root / ITEMS_FILE)
    except OSError:
        _ITEMS.pop(root, None)
        return {}
    signature = (info.st_ino, info.st_size, info.st_mtime_ns)
    cached = _ITEMS.get(root)
    if cached is not None and cached[0] == signature:
        return cached[1]
    items: dict[str, dict[str, Any]] = {}
    skipped = 0
    for line in _read(root, ITEMS_FILE).splitlines():
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            skipped += 1
            continue
        items[raw["id"]] = {**DEFAULTS, **raw}
    if skipped:
        log.warning("items_lines_skipped", count=skipped)
    if len(_ITEMS) > 256:
        _ITEMS.clear()
    _ITEMS[root] = (signature, items)
    return items


# root → (the file's signature, its tombstones): search asks on every call; read only when the file changed.
_FORGOTTEN: dict[Path, tuple[tuple[int, int, int], dict[str, dict[str, Any]]]] = {}


_PATHS: dict[tuple[Path, str], str] = {}  # (root, sidecar) → its path as a string: searches stat two on every call


def sidecar_path(root: Path, rel: str) -> str:
    """``root / rel`` as a string, kept (joining Paths costs more than the stat it is for)."""
    path = _PATHS.get((root, rel))
    if path is None:
        if len(_PATHS) > 4096:
            _PATHS.clear()
        path = _PATHS[(root, rel)] = str(root / rel)
    return path


def forgotten(root: Path) -> dict[str, dict[str, Any]]:
    """The tombstones: item id → {path, heading, deleted_at, run_id}. An unreadable file reads as none (logged)."""
    try:
        info = os.stat(sidecar_path(root, FORGOTTEN_FILE))
    except OSError:
        _FORGOTTEN.pop(root, None)
        return {}
    signature = (info.st_ino, info.st_size, info.st_mtime_ns)
    cached = _FORGOTTEN.get(root)
    if cached is not None and cached[0] == signature:
        return cached[1]
    data: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(orjson.JSONDecodeError, ValueError):
        raw = orjson.loads(_read(root, FORGOTTEN_FILE) or b"{}")
        if isinstance(raw, dict):
            data = {str(k): v for k, v in raw.items() if isinstance(v, dict)}
    if len(_FORGOTTEN) > 1024:
        _FORGOTTEN.clear()
    _FORGOTTEN[root] = (signature, data)
    return data


def section_key(item: dict[str, Any]) -> tuple[str, str]:
    """What names an entry's section: its heading and its first line that is not blank. Two entries of the same
    minute and type differ by the second; a tombstone without it (written by hand) names every such section."""
    return heading_key(str(item.get("heading", ""))), str(item.get("first_line") or "")


def key_of(heading: str, body: list[str]) -> tuple[str, str]:
    """:func:`section_key` of a section as the files have it (its heading line, the lines under it)."""
    return heading_key(heading), next((line.strip() for line in body if line.strip()), "")


def names(keys: set[tuple[str, str]], key: tuple[str, str]) -> bool:
    """Whether one of ``keys`` names the section with ``key`` (a key without a first line: by its heading alone)."""
    return key in keys or (key[0], "") in keys


def hidden(root: Path) -> dict[str, set[tuple[str, str]]]:
    """path → the section keys of its forgotten entries: what search and context leave out."""
    out: dict[str, set[tuple[str, str]]] = {}
    for t in forgotten(root).values():
        out.setdefault(str(t.get("path")), set()).add(section_key(t))
    return out


def _read(root: Path, rel: str) -> bytes:
    """A sidecar's bytes (no symlink followed: a cloned repository's link to elsewhere reads as nothing)."""
    try:
        return read_regular(root / rel, READ_MAX_BYTES, root=root)
    except (FileNotFoundError, NotADirectoryError):
        return b""
    except (NotRegularFile, FileTooLarge, OSError) as exc:
        log.warning("items_file_refused", file=rel, error=type(exc).__name__)
        return b""
