"""Observations: the append-only evidence of a workspace (``data/memory/observations.jsonl`` and
``runs/<run_id>/observations.jsonl``), read incrementally into memory.

Files are appended by whole lines (fsio.append_line); a line without its newline is an append in flight or a torn
write: it is not read until completed, and reported. Lines that are not JSON objects of the observation format are
skipped and reported, never fatal. Blocking: call from a worker thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from memoryd.fsio import FileTooLarge, NotRegularFile, read_regular
from memoryd.rules.models import Observation
from memoryd.store.prepare import utf8_name

GLOBAL = "global"
READ_MAX_BYTES = 256 * 1024 * 1024  # one read of what was appended since the last
GLOBAL_FILE = "data/memory/observations.jsonl"


def file_of(run_id: str | None) -> str:
    return GLOBAL_FILE if run_id is None else f"runs/{run_id}/observations.jsonl"


@dataclass(frozen=True, slots=True)
class Stored:
    observation: Observation
    source: str  # "global" or "run:<run_id>" — from the file it was read from
    path: str


@dataclass(slots=True)
class _FileState:
    inode: int = -1
    offset: int = 0
    lines: int = 0
    ids: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn_tail: bool = False


class EvidenceStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._files: dict[str, _FileState] = {}
        self._by_id: dict[str, Stored] = {}
        self._sorted: list[str] | None = []

    def _paths(self) -> list[str]:
        found = [GLOBAL_FILE] if (self.root / GLOBAL_FILE).is_file() else []
        runs = self.root / "runs"
        if runs.is_dir():
            with os.scandir(runs) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") and utf8_name(entry.name):
                        rel = f"runs/{entry.name}/observations.jsonl"
                        if (self.root / rel).is_file():
                            found.append(rel)
        return sorted(found)

    def refresh(self) -> None:
        """Read what was appended since the last call (a replaced or truncated file is read again)."""
        with self._lock:
            present = self._paths()
            for rel in set(self._files) - set(present):
                self._forget(rel)
            for rel in present:
                self._read(rel)

    def _forget(self, rel: str) -> None:
        state = self._files.pop(rel, None)
        if state is not None:
            for oid in state.ids:
                self._by_id.pop(oid, None)
            self._sorted = None

    def _read(self, rel: str) -> None:
        full = self.root / rel
        try:
            info = full.stat()
        except OSError:
            self._forget(rel)
            return
        state = self._files.get(rel)
        if state is None or state.inode != info.st_ino or info.st_size < state.offset:
            self._forget(rel)
            state = self._files[rel] = _FileState(inode=info.st_ino)
        if info.st_size == state.offset:
            return
        try:
            data = read_regular(full, READ_MAX_BYTES, state.offset, root=self.root)
        except (NotRegularFile, FileTooLarge) as exc:  # a FIFO or a device would hang or flood the daemon
            self._forget(rel)
            state = self._files[rel] = _FileState(inode=info.st_ino)
            state.problems.append(f"{rel}: not read: {exc.strerror or exc}")
            state.offset = info.st_size
            return
        except OSError:
            self._forget(rel)
            return
        end = data.rfind(b"\n") + 1
        state.torn_tail = end < len(data)
        line_no = state.lines
        source = GLOBAL if rel == GLOBAL_FILE else f"run:{rel.split('/')[1]}"
        for raw in data[:end].splitlines():
            line_no += 1
            if not raw.strip():
                continue
            try:
                value: Any = orjson.loads(raw)
                observation = Observation.model_validate(value)
            except (orjson.JSONDecodeError, ValidationError) as exc:
                reason = "not JSON" if isinstance(exc, orjson.JSONDecodeError) else "not an observation"
                state.problems.append(f"{rel}: line {line_no}: {reason}, skipped")
                continue
            oid = observation.observation_id
            if oid in self._by_id:
                state.problems.append(f"{rel}: line {line_no}: duplicate {oid}, skipped")
                continue
            self._by_id[oid] = Stored(observation, source, rel)
            state.ids.append(oid)
            self._sorted = None
        state.lines = line_no
        state.offset += end

    # --- reading ------------------------------------------------------------------------------------------

    def get(self, observation_id: str) -> Stored | None:
        return self._by_id.get(observation_id)

    def __contains__(self, observation_id: object) -> bool:
        return observation_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def ordered(self) -> list[str]:
        """All observation ids, oldest first (ids sort by time)."""
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted(self._by_id)
            return self._sorted

    def iter_ordered(self) -> Iterator[Stored]:
        for oid in self.ordered():
            stored = self._by_id.get(oid)
            if stored is not None:
                yield stored

    def problems(self) -> list[str]:
        out: list[str] = []
        for rel, state in sorted(self._files.items()):
            out += state.problems
            if state.torn_tail:
                out.append(f"{rel}: the last line is incomplete (a torn write?), not read")
        return out
