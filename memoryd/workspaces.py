"""The registry of workspaces (``config/workspaces.yaml``) and the owner token (``config/owner.token``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from memoryd.errors import AppError
from memoryd.fsio import atomic_write, make_dirs, make_private_dir


def workspace_id(real_path: Path) -> str:
    return "ws_" + hashlib.sha256(os.fsencode(real_path)).hexdigest()[:12]


# The trees inside a workspace the daemon writes to and indexes (docs/reference/files.md). No workspace may lie inside
# another's, and none may contain another's.
MEMORY_TREES = ("memory", "spec/memory", "data/memory", "runs")
# System trees: neither they nor anything under them can be a workspace (checked on the real path, so /etc
# reached through a symlink is refused too). macOS spells some of them /private/...
SYSTEM_TREES = tuple(
    Path(p)
    for p in (
        "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
        "/snap", "/sys", "/usr", "/var", "/System", "/Library", "/private/etc", "/private/var",
    )
)  # fmt: skip
# Directories that may hold projects but are no project themselves: refused as such, their subdirectories are fine.
CONTAINERS = tuple(Path(p) for p in ("/home", "/Users", "/opt", "/mnt", "/media", "/srv", "/tmp", "/private/tmp"))
# Inside the system trees, these are fine (temp dirs; macOS's per-user temp dir is under /var/folders).
SYSTEM_EXCEPTIONS = tuple(Path(p) for p in ("/var/tmp", "/var/folders", "/private/var/tmp", "/private/var/folders"))
RESOLVE_CACHE_MAX = 1024  # path references remembered (ref -> workspace id), cleared when the registry changes


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def refusal(real: Path, others: list[Workspace]) -> str | None:
    """Why ``real`` (a real path) cannot be a workspace next to ``others``, or None. Blocking (realpath)."""
    if real == Path(real.anchor):
        return "The filesystem root cannot be a workspace"
    home = _real(Path.home())
    if real == home:
        return f"Your home directory {home} cannot be a workspace; register a project directory inside it"
    temp = _real(tempfile.gettempdir())
    allowed = (home, temp, *(_real(p) for p in SYSTEM_EXCEPTIONS))
    inside_allowed = any(real.is_relative_to(a) and real != a for a in allowed)
    for system in SYSTEM_TREES:
        if real.is_relative_to(system) and not inside_allowed:
            return f"{real} is a system directory; register a project directory"
    for container in (*CONTAINERS, temp):
        if real == container or real == _real(container):
            return f"{real} holds other directories; register a project directory inside it"
    for ws in others:
        for sub in MEMORY_TREES:
            if real.is_relative_to(ws.path / sub):
                return f"{real} is inside the {sub}/ tree of workspace {ws.id} ({ws.path})"
            if ws.path.is_relative_to(real / sub):
                return f"Workspace {ws.id} ({ws.path}) lies inside this directory's {sub}/ tree"
    return None


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
        make_private_dir(self.path.parent)
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
        self._resolved: OrderedDict[str, str] = OrderedDict()  # path reference -> workspace id
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
        """Register ``path``; returns (workspace, created). Creates ``memory/`` inside it only now.

        Idempotent: adding a registered workspace again answers it unchanged (created False), whatever ``name``
        says; renaming is remove + add. Blocking (realpath, mkdir, an atomic write): call it in a worker thread.
        """
        if "\x00" in path:
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path contains a NUL byte")
        if not os.path.isabs(path):
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path must be absolute (memoryctl resolves it for you)")
        real = _real(path)
        if not real.is_dir():
            raise AppError("MEMORY_WORKSPACE_INVALID", "Path is not an existing directory")
        ws_id = workspace_id(real)
        with self._lock:
            existing = self._by_id.get(ws_id)
            why = refusal(real, [w for w in self._by_id.values() if w.id != ws_id])
            if why is not None:
                raise AppError(
                    "MEMORY_WORKSPACE_INVALID",
                    why,
                    hint="A workspace is a project directory: not a system directory, your home or /tmp itself, "
                    "and not inside another workspace's memory/, spec/memory/, data/memory/ or runs/ tree.",
                )
            try:
                make_dirs(real / "memory")  # an existing memory/ (a symlink inside it too) is left as it is
            except OSError as exc:
                raise AppError("MEMORY_WRITE_FAILED", f"Cannot create memory/: {exc.strerror}") from exc
            if existing is not None:
                return existing, False
            ws = Workspace(ws_id, real, name if name is not None else real.name, _now())
            self._by_id[ws_id] = ws
            self._resolved.clear()
            self._save()
            return ws, True

    def remove(self, ws: Workspace) -> None:
        """Blocking (an atomic write): call it in a worker thread."""
        with self._lock:
            if self._by_id.pop(ws.id, None) is not None:
                self._resolved.clear()
                self._save()

    def lookup(self, ref: str) -> Workspace | None:
        """An id, or a path reference resolved before: no system call, safe on the event loop. None: call
        ``resolve`` (in a worker thread)."""
        ws = self._by_id.get(ref)
        if ws is None:
            ws_id = self._resolved.get(ref)
            ws = None if ws_id is None else self._by_id.get(ws_id)
        return ws

    def resolve(self, ref: str) -> Workspace:
        """An id, or a path equal to or inside a registered workspace (the innermost one wins).

        A path costs a realpath (blocking: run it in a worker thread); the answer is remembered (at most
        RESOLVE_CACHE_MAX references, forgotten whenever a workspace is added or removed)."""
        ws = self.lookup(ref)
        if ws is not None:
            return ws
        if "\x00" not in ref and os.path.isabs(ref):
            real = _real(ref)
            best: Workspace | None = None
            for candidate in list(self._by_id.values()):
                if (real == candidate.path or candidate.path in real.parents) and (
                    best is None or len(str(candidate.path)) > len(str(best.path))
                ):
                    best = candidate
            if best is not None:
                with self._lock:
                    if self._by_id.get(best.id) is best:
                        self._resolved[ref] = best.id
                        while len(self._resolved) > RESOLVE_CACHE_MAX:
                            self._resolved.popitem(last=False)
                return best
        raise AppError("MEMORY_WORKSPACE_NOT_FOUND", data_ref_hint(ref))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def data_ref_hint(ref: str) -> str:
    """The message of MEMORY_WORKSPACE_NOT_FOUND, naming what was asked for (at most 300 characters of it, control
    characters escaped: it is a caller's string)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in ref[:300]) + ("…" if len(ref) > 300 else "")
    if ref.startswith("ws_"):
        return f"No registered workspace has id {shown}"
    return f"No registered workspace contains {shown}"
