"""One runtime per workspace: its write lock and takeover, its file watcher, and where changes go.

The domain services (notes, rules) know nothing of each other or of the watcher; this module wires them for one
workspace (docs/reference/architecture.md):

- **the lock** — ``memory/.memoryd.lock``, held by the daemon that writes the workspace. A daemon that does not hold
  it serves reads; a write takes it over once the holder is gone, after finishing what the holder's intent journal
  left (:meth:`Runtime.workspace`).
- **the watcher** — armed once the notes index is open. A Markdown change goes to notes (indexed); a rule YAML
  change goes to notes (indexed: search covers rule files) *and* to rules (reloaded; a hand edit is recorded). The
  periodic reconcile and the first look after arming rescan both.
- **changes the daemon made itself** — a rules change (apply, promote, reject, restore) answers with the paths it
  wrote; :meth:`Runtime.wrote` has notes index them once, and remembers each file's signature so that the watcher's
  report of that very write is not reloaded and indexed a second time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc
import structlog

from memoryd.errors import AppError
from memoryd.notes.service import NotesService
from memoryd.rules.service import RulesService
from memoryd.settings import NotesSettings
from memoryd.store.prepare import OVERRIDES, SUFFIXES, file_kind
from memoryd.tasks import guarded, task
from memoryd.watch import WorkspaceWatcher
from memoryd.workspaces import Registry, Workspace
from memoryd.wslock import LOCK_REL, WorkspaceLock

log = structlog.get_logger("memoryd.runtime")

# Markdown memory, and the rule files (search covers them too; rules reload them).
WATCHED = ["memory", "spec/memory", OVERRIDES]
ECHO_MAX = 4096  # signatures of the daemon's own writes kept per workspace, for the watcher's echo of them


class Planned(Protocol):
    path: str
    action: str


class Written(Protocol):
    """A rules change's answer: the files it wrote (``action`` unchanged for the ones it left)."""

    @property
    def writes(self) -> list[Any]: ...


_W = TypeVar("_W", bound=Written)


@dataclass(eq=False)
class WorkspaceRuntime:
    ws: Workspace
    lock: WorkspaceLock
    watcher: WorkspaceWatcher | None = None
    # rel path → its (st_ino, st_size, st_mtime_ns) right after the daemon wrote and indexed it (GONE: deleted)
    echoes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    look_again: bool = False  # a delayed look at hand edits too fresh to record is scheduled
    watch_started: bool = False  # its watcher task was started (workspace.add of a registered one starts none)


GONE = (-1, -1, -1)


def _signature(path: Path) -> tuple[int, int, int]:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return GONE
    return info.st_ino, info.st_size, info.st_mtime_ns


class Runtime:
    def __init__(
        self,
        settings: NotesSettings,
        registry: Registry,
        notes: NotesService,
        rules: RulesService,
        *,
        socket: Path,
        home: Path | None,
    ) -> None:
        """``settings``: the notes group (watch, its debounce, the reconcile interval); ``socket`` and ``home`` are
        noted in the lock file, so another daemon can name its holder."""
        self.settings = settings
        self.socket = socket
        self.home = home
        self.registry = registry
        self.notes = notes
        self.rules = rules
        self.pid = os.getpid()
        self._by_id: dict[str, WorkspaceRuntime] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Take the lock of every registered workspace this daemon can (before the rules open: their crash
        recovery writes, holders only), then open notes and rules and arm the watchers."""
        self._tg = tg
        workspaces = self.registry.all()
        for ws in workspaces:
            await self._acquire(self._runtime(ws))
        for ws in workspaces:
            self._open(ws)

    async def added(self, ws: Workspace) -> None:
        await self._acquire(self._runtime(ws))
        self._open(ws)

    def _open(self, ws: Workspace) -> None:
        wrt = self._runtime(ws)
        self.notes.attach(ws)
        self.rules.attach(ws, recover=wrt.lock.held)
        if self._tg is not None and self.settings.watch and not wrt.watch_started:  # added again: one watcher
            wrt.watch_started = True
            self._tg.start_soon(task("watch", self._watch, wrt, workspace_id=ws.id))

    async def removed(self, ws: Workspace) -> None:
        wrt = self._by_id.pop(ws.id, None)
        if wrt is not None:
            if wrt.watcher is not None:
                wrt.watcher.stop()
            wrt.scope.cancel()
        self.rules.detach(ws)
        await self.notes.detach(ws, drop_index=True)
        if wrt is not None:
            await anyio.to_thread.run_sync(wrt.lock.release)

    def stop_watchers(self) -> None:
        """Before the task group is cancelled: stop watchers through their stop events (cancelling a watcher
        takes seconds)."""
        for wrt in self._by_id.values():
            if wrt.watcher is not None:
                wrt.watcher.stop()

    async def aclose(self) -> None:
        self.stop_watchers()
        await self.notes.aclose()
        for wrt in self._by_id.values():
            wrt.lock.release()

    def _runtime(self, ws: Workspace) -> WorkspaceRuntime:
        wrt = self._by_id.get(ws.id)
        if wrt is None:
            me = {
                "pid": self.pid,
                "socket": str(self.socket),
                "home": None if self.home is None else str(self.home),
            }
            wrt = self._by_id[ws.id] = WorkspaceRuntime(ws, WorkspaceLock(ws.path, me))
        return wrt

    # --- the lock -----------------------------------------------------------------------------------------

    async def _acquire(self, wrt: WorkspaceRuntime) -> bool:
        was_held = wrt.lock.held
        held = await anyio.to_thread.run_sync(wrt.lock.try_acquire)
        if held != was_held:
            log.info("workspace_lock", workspace_id=wrt.ws.id, held=held)
        return held

    async def workspace(self, ref: str, *, write: bool = False) -> Workspace:
        """The registered workspace ``ref`` names (an id or a path inside it). With ``write``, this daemon must
        hold its write lock: taken now if it is free (a read-only daemon takes over once the holder is gone,
        after finishing what the holder's intent journal left), else MEMORY_WORKSPACE_LOCKED naming the holder."""
        ws = self.registry.lookup(ref)
        if ws is None:
            ws = await anyio.to_thread.run_sync(self.registry.resolve, ref)
        if write:
            wrt = self._runtime(ws)
            was_held = wrt.lock.held
            if not await self._acquire(wrt):
                problem = wrt.lock.problem
                if problem is not None and problem.workspace_gone:
                    raise AppError(
                        "MEMORY_WORKSPACE_INVALID",
                        f"The workspace directory is gone: {problem.reason}",
                        hint="Put the directory back (a clone, a restore), or unregister it with "
                        "`memoryctl workspace remove`.",
                        path=str(ws.path),
                    )
                if problem is not None:
                    raise AppError(
                        "MEMORY_WRITE_FAILED",
                        f"The workspace's write lock cannot be taken: {problem.reason}",
                        hint=f"Nothing holds it: remove what is at {LOCK_REL} (the daemon creates it as a small "
                        "regular file) and make sure memory/ is a writable directory, then retry.",
                        lock_path=str(wrt.lock.path),
                    )
                holder = await anyio.to_thread.run_sync(wrt.lock.holder)
                raise AppError(
                    "MEMORY_WORKSPACE_LOCKED",
                    f"Another memoryd (pid {holder.pid if holder.pid is not None else '?'}) writes this workspace",
                    holder_pid=holder.pid,
                    holder_socket=holder.socket,
                    holder_home=holder.home,
                )
            if not was_held:
                await self.rules.recover(ws)
        return ws

    async def lock_status(self, ws: Workspace) -> dict[str, Any]:
        lock = self._runtime(ws).lock
        holder = await anyio.to_thread.run_sync(lock.holder)
        return {
            "held": lock.held,
            "path": str(lock.path),
            "holder_pid": holder.pid,
            "holder_socket": holder.socket,
            "holder_home": holder.home,
            "since": holder.since,
        }

    # --- the watcher and where changes go ------------------------------------------------------------------

    async def _watch(self, wrt: WorkspaceRuntime) -> None:
        ws = wrt.ws
        with wrt.scope:
            if not await self.notes.opened(ws):
                return  # the index could not be opened: status says so; `memoryctl index` tries again
            wrt.watcher = WorkspaceWatcher(
                ws.path,
                WATCHED,
                on_change=lambda paths: self._changed(wrt, paths),
                debounce_ms=self.settings.watch_debounce_ms,
                reconcile_interval_s=self.settings.reconcile_interval_s,
                reconcile=lambda: self._rescan(wrt),
            )
            async with anyio.create_task_group() as tg:
                await tg.start(wrt.watcher.run)
                self.notes.watching(ws, True)
                # Files changed between the index's own scan (in open) and the watcher's arming are in neither:
                # look at every file once more, now that every later change is reported. The same for rule files
                # (a tree created right after workspace.add: the rules' first load may have read it before, and the
                # watcher's first scan counts them as known, not changed).
                await self._rescan(wrt)

    async def _changed(self, wrt: WorkspaceRuntime, paths: set[Path]) -> None:
        ws = wrt.ws
        reported: dict[str, str] = {}
        for path in paths:
            try:
                rel = path.relative_to(ws.path).as_posix()
            except ValueError:
                continue
            kind = file_kind(rel)
            if kind is not None:
                reported[rel] = kind
            elif not rel.lower().endswith(SUFFIXES):  # a directory moved or removed: look at everything
                self.notes.rescan(ws)
        echoes = await anyio.to_thread.run_sync(self._echoes, wrt, list(reported))
        notes = [rel for rel in reported if rel not in echoes]
        rules = [rel for rel in notes if reported[rel] != "markdown"]
        if notes:
            self.notes.files_changed(ws, notes)
        if rules:
            await self._rules_changed(wrt, rules)

    async def _rescan(self, wrt: WorkspaceRuntime) -> None:
        self.notes.rescan(wrt.ws)
        await self._rules_changed(wrt, None)

    async def _rules_changed(self, wrt: WorkspaceRuntime, paths: list[str] | None) -> None:
        # A failing reload is logged and leaves the last good rules; it must not end the workspace's watcher.
        await guarded("rules_reload", self._reload_rules, wrt, paths, workspace_id=wrt.ws.id)

    async def _reload_rules(self, wrt: WorkspaceRuntime, paths: list[str] | None) -> None:
        again_after_s = await self.rules.files_changed(wrt.ws, paths)
        if again_after_s is not None and self._tg is not None and not wrt.look_again:
            wrt.look_again = True  # hand edits still too fresh to record: look again once they have been quiet
            self._tg.start_soon(task("rules_look_again", self._look_again, wrt, again_after_s, workspace_id=wrt.ws.id))

    async def _look_again(self, wrt: WorkspaceRuntime, after_s: float) -> None:
        try:
            await anyio.sleep(after_s)
        finally:
            wrt.look_again = False
        if self._by_id.get(wrt.ws.id) is wrt:
            await self._rules_changed(wrt, [])

    @staticmethod
    def _echoes(wrt: WorkspaceRuntime, rels: list[str]) -> set[str]:
        """Of ``rels``, the files still as the daemon's own write left them (already indexed and reloaded when
        it was made: the watcher's report of that write). A file changed since is forgotten here and handled."""
        out = set()
        for rel in rels:
            known = wrt.echoes.get(rel)
            if known is None:
                continue
            if known == _signature(wrt.ws.path / rel):
                out.add(rel)
            else:
                wrt.echoes.pop(rel, None)  # the loop may have cleared it meanwhile
        return out

    # --- changes the daemon made ------------------------------------------------------------------------------

    async def wrote(self, ws: Workspace, result: _W) -> _W:
        """After a rules change: index the files it wrote, once (the watcher's report of them is then skipped)."""
        if getattr(result, "dry_run", False):
            return result
        paths = [w.path for w in result.writes if getattr(w, "action", None) != "unchanged"]
        if paths:
            await self._index(self._runtime(ws), paths)
        return result

    async def changed(self, ws: Workspace, paths: list[str]) -> None:
        """After a change another domain wrote (a lifecycle run): index its files once (the watcher's report of
        them is then skipped)."""
        if paths:
            await self._index(self._runtime(ws), paths)

    async def claim(self, ws: Workspace) -> bool:
        """Whether this daemon may write ``ws`` (its write lock taken now if free, a crashed holder's journal
        finished first); False when another daemon holds it. For background work, which must not raise."""
        try:
            await self.workspace(ws.id, write=True)
        except AppError:
            return False
        return True

    async def _index(self, wrt: WorkspaceRuntime, paths: Iterable[str]) -> None:
        rels = sorted(set(paths))
        if self.settings.watch:
            signatures = await anyio.to_thread.run_sync(lambda: {rel: _signature(wrt.ws.path / rel) for rel in rels})
            if len(wrt.echoes) + len(signatures) > ECHO_MAX:
                wrt.echoes.clear()
            wrt.echoes.update(signatures)
        await self.notes.sync_paths(wrt.ws, rels)
