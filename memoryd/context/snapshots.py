"""Per-session snapshots of the stable part: the same session gets the same bytes after memory changed.

One JSON file per (session, request shape) under ``<state_dir>/<workspace id>/context/``, named by the SHA-256 of
the session id and the parameters that shape the stable text (model, firmware, instance, budget): a hostile
session id never reaches the file system, and a session that asks about another device gets that device's text.
Written atomically (``fsio.atomic_write``), read with ``fsio.read_regular`` and a size limit; a file that does not
parse, fails its checksum or has expired is ignored and replaced. At most ``max_files`` per workspace: creating one
beyond that removes the expired, then the oldest. Blocking: call from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import structlog

from memoryd import fsio
from memoryd.context.api import StableContext
from memoryd.context.render import sha256_text

log = structlog.get_logger("memoryd.context")

VERSION = 1
MAX_BYTES = 1024 * 1024  # far above what a budget of 100,000 characters renders to
SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Shape:
    """What, besides the files, decides the stable text."""

    model_id: str | None
    fw_version: str | None
    instance_id: str | None
    budget: int


def key(session_id: str, shape: Shape) -> str:
    parts = [session_id, shape.model_id or "", shape.fw_version or "", shape.instance_id or "", str(shape.budget)]
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class SnapshotStore:
    def __init__(self, directory: Path, ttl_s: float, max_files: int) -> None:
        self.directory = directory
        self.ttl_s = ttl_s
        self.max_files = max_files

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}{SUFFIX}"

    def load(self, name: str, now: float | None = None) -> StableContext | None:
        """The snapshot ``name`` when it exists, is intact and has not expired."""
        now = time.time() if now is None else now
        try:
            raw = orjson.loads(fsio.read_regular(self._path(name), MAX_BYTES))
            created = float(raw["created"])
            stable = StableContext.model_validate(raw["stable"], strict=False)
            if raw.get("v") != VERSION or stable.sha256 != sha256_text(stable.text):
                raise ValueError("not a snapshot of this version, or its text does not match its checksum")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged or foreign: rendered again, replaced
            log.warning("context_snapshot_unreadable", error=type(exc).__name__)
            return None
        if not created <= now < created + self.ttl_s:  # expired (or dated in the future: a clock moved back)
            return None
        return stable

    def save(self, name: str, stable: StableContext, now: float | None = None) -> None:
        now = time.time() if now is None else now
        data = {"v": VERSION, "created": now, "stable": stable.model_dump(mode="json", exclude={"snapshot"})}
        fsio.make_private_dir(self.directory)
        fsio.atomic_write(self._path(name), orjson.dumps(data), mode=0o600, durable=False)
        self._prune(now, keep=name)

    def _prune(self, now: float, keep: str) -> None:
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.endswith(SUFFIX) and e.is_file()]
        except OSError:
            return
        if len(entries) <= self.max_files:
            return
        aged = sorted(entries, key=lambda e: e.stat().st_mtime)
        expired = [e for e in aged if e.stat().st_mtime + self.ttl_s <= now]
        fresh = [e for e in aged if e not in expired and e.name != f"{keep}{SUFFIX}"]
        excess = len(entries) - len(expired) - self.max_files
        for entry in expired + fresh[: max(excess, 0)]:
            fsio.remove(Path(entry.path))
