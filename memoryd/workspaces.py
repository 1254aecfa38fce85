"""The registry of workspaces (``config/workspaces.yaml``) and the owner token (``config/owner.token``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from memoryd.errors import AppError
from memoryd.fsio import atomic_write


def workspace_id(real_path: Path) -> str:
    return "ws_" + hashlib.sha256(os.fsencode(real_path)).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    path: Path
    name: str
    added_at: str


class OwnerToken:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._value = self._load_or_create()

    def _load_or_create(self) -> str:
        try:
            value = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            value = ""
        if value:
            if self.path.stat().st_mode & 0o077:
                os.chmod(self.path, 0o600)
            return value
        value = secrets.token_hex(32)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.path, (value + "\n").encode("ascii"), mode=0o600)
        return value

    def check(self, presented: str | None) -> None:
        if not presented or not hmac.compare_digest(presented.encode(), self._value.encode()):
            raise AppError("MEMORY_FORBIDDEN", "This call needs the owner token")


class Registry:
    """Registered workspaces, persisted atomically. Thread-safe; reads are lock-free snapshots."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._by_id: dict[str, Workspace] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            return
        for item in raw.get("workspaces", []) or []:
            ws = Workspace(item["id"], Path(item["path"]), item.get("name") or "", item.get("added_at") or "")
            self._by_id[ws.id] = ws

    def _save(self) -> None:
        items = [
            {"id": w.id, "path": str(w.path), "name": w.name, "added_at": w.added_at}
            for w in sorted(self._by_id.values(), key=lambda w: str(w.path))
        ]
        text = yaml.safe_dump({"workspaces": items}, allow_unicode=True, sort_keys=False)
        atomic_write(self.path, text.encode("utf-8"), mode=0o600)

    def all(self) -> list[Workspace]:
        return sorted(self._by_id.values(), key=lambda w: str(w.path))

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, path: str, name: str | None) -> tuple[Workspace, bool]:
        """Register ``path``; returns (workspace, created). Creates ``memory/`` inside it only now."""
        if "\x00" in path:
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path contains a NUL byte")
        if not os.path.isabs(path):
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path must be absolute (memoryctl resolves it for you)")
        real = Path(os.path.realpath(path))
        if not real.is_dir():
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path is not an existing directory")
        if real == Path(real.anchor):
            raise AppError("MEMORY_WORKSPACE_INVALID", "The filesystem root cannot be a workspace")
        ws_id = workspace_id(real)
        with self._lock:
            existing = self._by_id.get(ws_id)
            if existing is not None and (name is None or name == existing.name):
                (real / "memory").mkdir(exist_ok=True)
                return existing, False
            ws = Workspace(
                ws_id,
                real,
                name if name is not None else (existing.name if existing else real.name),
                existing.added_at if existing else datetime.now(UTC).isoformat(timespec="seconds"),
            )
            try:
                (real / "memory").mkdir(exist_ok=True)
            except OSError as exc:
                raise AppError("MEMORY_WRITE_FAILED", f"Cannot create memory/: {exc.strerror}") from exc
            self._by_id[ws_id] = ws
            self._save()
            return ws, existing is None

    def remove(self, ws: Workspace) -> None:
        with self._lock:
            if self._by_id.pop(ws.id, None) is not None:
                self._save()

    def resolve(self, ref: str) -> Workspace:
        """An id, or a path equal to or inside a registered workspace (the innermost one wins)."""
        ws = self._by_id.get(ref)
        if ws is not None:
            return ws
        if "\x00" not in ref and os.path.isabs(ref):
            real = Path(os.path.realpath(ref))
            best: Workspace | None = None
            for candidate in self._by_id.values():
                if (real == candidate.path or candidate.path in real.parents) and (
                    best is None or len(str(candidate.path)) > len(str(best.path))
                ):
                    best = candidate
            if best is not None:
                return best
        raise AppError("MEMORY_WORKSPACE_NOT_FOUND", data_ref_hint(ref))


def data_ref_hint(ref: str) -> str:
    if ref.startswith("ws_"):
        return f"No registered workspace has id {ref}"
    return "No registered workspace contains that path"
