"""Composition root: the only place that reads Settings and wires the parts together."""

from __future__ import annotations

import os
import time

import anyio
import anyio.abc
import structlog

from memoryd import __version__
from memoryd import log as logsetup
from memoryd.config import Settings
from memoryd.notes.service import NotesService
from memoryd.rpc import Context, Dispatcher
from memoryd.rules.service import RulesService
from memoryd.tasks import guarded, task
from memoryd.workspaces import OwnerToken, Registry, Workspace

log = structlog.get_logger("memoryd.app")


def build_dispatcher() -> Dispatcher:
    from memoryd.methods import admin, notes, rules

    dispatcher = Dispatcher()
    admin.register(dispatcher)
    notes.register(dispatcher)
    rules.register(dispatcher)
    return dispatcher


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.version = __version__
        self.started = time.monotonic()
        self.pid = os.getpid()
        for directory in (settings.dirs.config, settings.dirs.state):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.owner = OwnerToken(settings.dirs.owner_token)
        self.registry = Registry(settings.dirs.registry)
        self.dispatcher = build_dispatcher()
        self.dispatcher.max_batch_members = settings.max_batch_members
        self.dispatcher.max_reply_bytes = settings.max_reply_bytes
        self.notes = NotesService(settings)
        self.rules = RulesService(settings, self.notes)
        self.notes.on_rules_changed = self._rules_changed

    async def _rules_changed(self, ws: Workspace, paths: list[str] | None) -> None:
        # A failing reload is logged and leaves the last good rules; it must not end the workspace's watcher.
        await guarded("rules_reload", self.rules.files_changed, ws, paths, workspace_id=ws.id)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(task("log_flusher", self._flush_logs, restart=True))
        await self.notes.start(tg, self.registry.all())
        await self.rules.start(tg, self.registry.all())

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
        logsetup.flush()

    async def handle_line(self, line: bytes, peer_uid: int | None, conn_id: int) -> bytes | None:
        return await self.dispatcher.handle_line(line, Context(self, peer_uid, conn_id))

    def uptime_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    async def workspace_added(self, ws: Workspace) -> None:
        self.notes.attach(ws)
        self.rules.attach(ws)

    async def workspace_removed(self, ws: Workspace) -> None:
        self.rules.detach(ws)
        await self.notes.detach(ws, drop_index=True)
