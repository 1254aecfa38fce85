"""The observability files: where they are, how a row is appended, and how they are read back — bounded and
hostile-proof — for ``audit`` and the replay check.

Every file is append-only JSON lines under the workspace's ``data/memory/observability/``, one object per line with
``ts`` (ISO-8601, UTC, ``Z``); their shapes are in docs/reference/curation.md. A workspace arrives by git clone, so
these files are untrusted input like any other: read with :func:`fsio.read_tail` (a regular file only, at most
``max_bytes`` from its end: a 1 GB sparse file costs its last ``max_bytes``, a FIFO is refused unopened), each line
parsed alone; a torn, oversized, non-JSON or non-object line is skipped and counted, never fatal.

Blocking: call from a worker thread.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from memoryd import fsio

log = structlog.get_logger("memoryd.curate")

OBSERVABILITY_DIR = "data/memory/observability"
OUTCOMES = f"{OBSERVABILITY_DIR}/outcomes.jsonl"
ROUTING = f"{OBSERVABILITY_DIR}/routing.jsonl"
SANITIZE = f"{OBSERVABILITY_DIR}/sanitize.jsonl"
RECALL = f"{OBSERVABILITY_DIR}/recall.jsonl"
REPLAY = f"{OBSERVABILITY_DIR}/replay.jsonl"
LIFECYCLE = f"{OBSERVABILITY_DIR}/lifecycle.jsonl"
HISTORY = "data/memory/history.jsonl"

LINE_MAX_BYTES = 256 * 1024  # a longer line is nobody's row: skipped unparsed


def ts(moment: datetime | None = None) -> str:
    """``moment`` (now) as the rows write it: ISO-8601 in UTC with ``Z``, milliseconds."""
    moment = datetime.now(UTC) if moment is None else moment.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_ts(value: object) -> datetime | None:
    """A row's ``ts`` as an aware datetime; None when it is not an ISO-8601 string (a naive one is read as UTC)."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def dumps(rows: list[dict[str, Any]]) -> bytes:
    """Rows as JSON lines (the last without its line break: ``fsio.append_line`` adds it)."""
    return b"\n".join(orjson.dumps(row) for row in rows)


def append(root: Path, rel: str, rows: list[dict[str, Any]], *, rotate_bytes: int | None = None) -> None:
    """Append ``rows`` to the workspace file ``rel`` with one write (``fsio.append_line``: whole lines, fsynced,
    no symlink followed). With ``rotate_bytes``, a file that would grow past it is first renamed to its older
    generation (:func:`older`, replacing the one before): the file and its older generation together stay under
    twice ``rotate_bytes`` however long the workspace lives, and :func:`read_rows` reads across both."""
    if not rows:
        return
    data = dumps(rows)
    if rotate_bytes is not None:
        try:
            _, size = fsio.read_tail(root / rel, 0, root=root)
        except FileNotFoundError:
            size = 0
        except OSError:  # not a regular file (a FIFO, a symlink planted there): the append below refuses it
            size = 0
        if size and size + len(data) + 1 > rotate_bytes:
            fsio.rename(root / rel, root / older(rel), root=root)
            log.info("observability_file_rotated", path=rel, bytes=size)
    append_raw(root, rel, data)


def older(rel: str) -> str:
    """The older generation of the rotated file ``rel``: ``recall.jsonl`` → ``recall.1.jsonl``."""
    stem, dot, suffix = rel.rpartition(".")
    return f"{stem}.1.{suffix}" if dot else f"{rel}.1"


def append_raw(root: Path, rel: str, data: bytes) -> None:
    fsio.append_line(root / rel, data, root=root)


@dataclass(slots=True)
class Rows:
    """What one file read back holds: its rows (parsed objects, file order) and what was left out."""

    rel: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # why → lines
    truncated: bool = False  # the file is larger than the bytes read: its oldest rows were left out
    size: int = 0  # the file's size in bytes
    refused: str | None = None  # why the file was not read at all (a FIFO, a symlink, unreadable)


def read_rows(root: Path, rel: str, max_bytes: int, *, rotated: bool = False) -> Rows:
    """The rows of the workspace file ``rel`` (with ``rotated``, of its older generation before them, :func:`append`):
    at most ``max_bytes`` from the end (of the two together), each line alone. A missing file has no rows; one that
    is not a regular file (or a symlink) is refused and says why."""
    out = _read_one(root, rel, max_bytes)
    left = max_bytes - out.size
    if not rotated or out.truncated or out.refused is not None or left <= 0:
        return out
    before = _read_one(root, older(rel), left)
    if before.size == 0 and before.refused is None:
        return out
    before.rows.extend(out.rows)
    out.rows = before.rows
    out.skipped.update(before.skipped)
    out.truncated = before.truncated
    out.size += before.size
    if before.refused is not None:
        out.refused = before.refused
    return out


def _read_one(root: Path, rel: str, max_bytes: int) -> Rows:
    out = Rows(rel)
    try:
        data, out.size = fsio.read_tail(root / rel, max_bytes, root=root)
    except (FileNotFoundError, NotADirectoryError):
        return out
    except OSError as exc:  # a FIFO, a device, a symlink, unreadable
        out.refused = type(exc).__name__
        log.warning("observability_file_refused", path=rel, error=out.refused)
        return out
    if len(data) < out.size:
        out.truncated = True
        cut = data.find(b"\n")  # the first line read is the tail of an older one
        data = b"" if cut < 0 else data[cut + 1 :]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:  # no line break at the end: a torn last line (a writer died mid-line) or one being written
        lines.pop()
        out.skipped["torn"] += 1
    for line in lines:
        if not line.strip():
            continue
        if len(line) > LINE_MAX_BYTES:
            out.skipped["too_long"] += 1
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.skipped["not_json"] += 1
            continue
        if not isinstance(value, dict):
            out.skipped["not_an_object"] += 1
            continue
        out.rows.append(value)
    if out.skipped:
        log.warning("observability_lines_skipped", path=rel, **dict(out.skipped))
    return out
