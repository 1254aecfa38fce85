"""Composition root: the only place that reads Settings and wires the parts together."""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import anyio.abc
import structlog

from memoryd import __version__, fsio
from memoryd import log as logsetup
from memoryd.config import Settings
from memoryd.context.service import ContextService, ContextSettings
from memoryd.embed import EmbedSettings
from memoryd.errors import AppError
from memoryd.notes.semantic import SemanticSettings
from memoryd.notes.service import NotesService, NotesSettings
from memoryd.rpc import Context, Dispatcher
from memoryd.rules.service import RulesService
from memoryd.rules.settings import RulesSettings
from memoryd.tasks import guarded, task
from memoryd.workspaces import OwnerToken, Registry, Workspace
from memoryd.wslock import WorkspaceLock

log = structlog.get_logger("memoryd.app")


def build_dispatcher() -> Dispatcher:
    from memoryd.methods import admin, context, notes, rules

    dispatcher = Dispatcher()
    admin.register(dispatcher)
    notes.register(dispatcher)
    rules.register(dispatcher)
    context.register(dispatcher)
    return dispatcher


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.version = __version__
        self.started = time.monotonic()
        self.pid = os.getpid()
        for directory in (settings.dirs.config, settings.dirs.state):
            fsio.make_private_dir(directory)
        self.owner = OwnerToken(settings.dirs.owner_token)
        self.registry = Registry(settings.dirs.registry)
        self.dispatcher = build_dispatcher()
        self.dispatcher.max_batch_members = settings.max_batch_members
        self.dispatcher.max_reply_bytes = settings.max_reply_bytes
        self.dispatcher.max_unsent_reply_bytes = settings.max_unsent_reply_bytes
        self.notes = NotesService(
            NotesSettings(
                state_dir=settings.dirs.workspaces_state,
                chunk_max_lines=settings.chunk_max_lines,
                index_max_file_bytes=settings.index_max_file_bytes,
                remember_max_bytes=settings.remember_max_bytes,
                merge_idle_s=settings.merge_idle_s,
                watch=settings.watch,
                watch_debounce_ms=settings.watch_debounce_ms,
                reconcile_interval_s=settings.reconcile_interval_s,
                semantic=SemanticSettings(
                    EmbedSettings(
                        provider=settings.embedding_provider,
                        url=settings.embedding_url,
                        model=settings.embedding_model,
                        timeout_s=settings.embedding_timeout_s,
                        query_timeout_s=settings.embedding_query_timeout_s,
                    ),
                    vector_extension=settings.vector_extension,
                ),
                fusion=settings.search_fusion,
                vector_weight=settings.search_vector_weight,
                dictionary=settings.search_dictionary,
            )
        )
        self.rules = RulesService(
            RulesSettings(
                min_confidence=settings.min_confidence,
                compile_max_observations=settings.compile_max_observations,
                compile_max_request_bytes=settings.compile_max_request_bytes,
                observe_max_bytes=settings.observe_max_bytes,
                rule_max_file_bytes=settings.rule_max_file_bytes,
                watch=settings.watch,
            ),
            self.notes,
        )
        self.context = ContextService(
            ContextSettings(
                state_dir=settings.dirs.workspaces_state,
                budget_chars=settings.context_budget_chars,
                dynamic_max_chars=settings.context_dynamic_max_chars,
                snapshot_ttl_s=settings.context_snapshot_ttl_hours * 3600,
                snapshot_max_files=settings.context_snapshot_max_files,
                memory_max_bytes=settings.index_max_file_bytes,
            ),
            self.notes,
            self.rules,
        )
        self.notes.on_rules_changed = self._rules_changed
        self.locks: dict[str, WorkspaceLock] = {}
        self.rules.may_write = lambda ws: self._lock(ws).held

    async def _rules_changed(self, ws: Workspace, paths: list[str] | None) -> None:
        # A failing reload is logged and leaves the last good rules; it must not end the workspace's watcher.
        await guarded("rules_reload", self.rules.files_changed, ws, paths, workspace_id=ws.id)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(task("log_flusher", self._flush_logs, restart=True))
        for ws in self.registry.all():  # before the rules open: their crash recovery writes, holders only
            await self._acquire(ws)
        await self.notes.start(tg, self.registry.all())
        await self.rules.start(tg, self.registry.all())

    # --- workspaces and their write locks ------------------------------------------------------------------

    def _lock(self, ws: Workspace) -> WorkspaceLock:
        lock = self.locks.get(ws.id)
        if lock is None:
            me = {
                "pid": self.pid,
                "socket": str(self.settings.socket),
                "home": None if self.settings.dirs.home is None else str(self.settings.dirs.home),
            }
            lock = self.locks[ws.id] = WorkspaceLock(ws.path, me)
        return lock

    async def _acquire(self, ws: Workspace) -> bool:
        lock = self._lock(ws)
        was_held = lock.held
        held = await anyio.to_thread.run_sync(lock.try_acquire)
        if held != was_held:
            log.info("workspace_lock", workspace_id=ws.id, held=held)
        return held

    async def workspace(self, ref: str, *, write: bool = False) -> Workspace:
        """The registered workspace ``ref`` names (an id or a path inside it). With ``write``, this daemon must
        hold its write lock: taken now if it is free (a read-only daemon takes over once the holder is gone,
        after finishing what the holder's intent journal left), else MEMORY_WORKSPACE_LOCKED naming the holder."""
        ws = self.registry.lookup(ref)
        if ws is None:
            ws = await anyio.to_thread.run_sync(self.registry.resolve, ref)
        if write:
            was_held = self._lock(ws).held
            if not await self._acquire(ws):
                holder = await anyio.to_thread.run_sync(self._lock(ws).holder)
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
        lock = self._lock(ws)
        holder = await anyio.to_thread.run_sync(lock.holder)
        return {
            "held": lock.held,
            "path": str(lock.path),
            "holder_pid": holder.pid,
            "holder_socket": holder.socket,
            "holder_home": holder.home,
            "since": holder.since,
        }

    async def _flush_logs(self) -> None:
        while True:
            await anyio.sleep(0.1)
            logsetup.flush()

    def stop_background(self) -> None:
        """Before the task group is cancelled: stop watchers through their stop events (cancelling a
        watcher takes seconds)."""
        self.notes.stop_watchers()

    async def aclose(self) -> None:
        await self.notes.aclose()
        for lock in self.locks.values():
            lock.release()
        logsetup.flush()

    async def handle_line(self, line: bytes, peer_uid: int | None, conn_id: int) -> bytes | None:
        return await self.dispatcher.handle_line(line, Context(self, peer_uid, conn_id))

    def reply_sent(self, reply: bytes) -> None:
        """The transport is done with a reply handle_line gave it (sent, or the client gone)."""
        self.dispatcher.sent(reply)

    def uptime_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    async def workspace_added(self, ws: Workspace) -> None:
        await self._acquire(ws)
        self.notes.attach(ws)
        self.rules.attach(ws)

    async def workspace_removed(self, ws: Workspace) -> None:
        self.rules.detach(ws)
        await self.notes.detach(ws, drop_index=True)
        lock = self.locks.pop(ws.id, None)
        if lock is not None:
            await anyio.to_thread.run_sync(lock.release)
