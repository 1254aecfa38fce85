"""Composition root: the only place that reads Settings and wires the parts together."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from memoryd import __version__, fsio
from memoryd import log as logsetup
from memoryd.config import Settings
from memoryd.context.service import ContextService
from memoryd.curate.lifecycle_service import LifecycleService
from memoryd.curate.service import CurateService
from memoryd.curate.trace import TraceWriter
from memoryd.methods.services import Ctx, Handlers, Services
from memoryd.notes.service import NotesService
from memoryd.rpc import Context, Dispatcher
from memoryd.rules.service import RulesService
from memoryd.runtime import Runtime
from memoryd.settings import ServerSettings
from memoryd.tasks import task
from memoryd.workspaces import OwnerToken, Registry, Workspace

log = structlog.get_logger("memoryd.app")


def build_dispatcher(limits: ServerSettings | None = None) -> Handlers:
    """Every method registered; ``limits``: the server group (batch and reply sizes), its defaults when None."""
    from memoryd.methods import admin, audit, compact, context, curate, lifecycle, notes, review, rules

    dispatcher: Handlers = Dispatcher(limits=limits or ServerSettings())
    admin.register(dispatcher)
    notes.register(dispatcher)
    rules.register(dispatcher)
    context.register(dispatcher)
    curate.register(dispatcher)
    compact.register(dispatcher)
    audit.register(dispatcher)
    review.register(dispatcher)
    lifecycle.register(dispatcher)
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
        self.dispatcher = build_dispatcher(settings.server)
        # Each part gets its group of settings whole (memoryd/settings.py) and enforces its own limits.
        state = settings.dirs.workspaces_state
        self.notes = NotesService(settings.notes, settings.search, settings.semantic, state)
        self.rules = RulesService(settings.rules, watched=settings.notes.watch)
        self.curate = CurateService(
            settings.curate, self.notes, self.rules, replay_keep=settings.observability.replay_keep
        )
        self.lifecycle = LifecycleService(settings.lifecycle, self.rules)
        self.runtime = Runtime(
            settings.notes, self.registry, self.notes, self.rules, socket=settings.socket, home=settings.dirs.home
        )
        # recall rows are written by the daemon that writes the workspace (the others answer and keep none)
        self.trace = TraceWriter(settings.observability, may_write=self.runtime.holds)
        self.context = ContextService(settings.context, state, self.notes, self.rules, self.trace)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(task("log_flusher", self._flush_logs, restart=True))
        await self.notes.start(tg)
        await self.rules.start(tg)
        await self.runtime.start(tg)
        tg.start_soon(task("recall_trace", self.trace.run, restart=True))
        if self.settings.lifecycle.auto:
            tg.start_soon(
                task("lifecycle_auto", self.lifecycle.auto, self.registry, self.runtime.claim, self.runtime.changed)
            )

    # --- workspaces: the runtime's ----------------------------------------------------------------------------

    async def workspace(self, ref: str, *, write: bool = False) -> Workspace:
        return await self.runtime.workspace(ref, write=write)

    async def lock_status(self, ws: Workspace) -> dict[str, Any]:
        return await self.runtime.lock_status(ws)

    async def _flush_logs(self) -> None:
        while True:
            await anyio.sleep(0.1)
            logsetup.flush()

    def stop_background(self) -> None:
        """Before the task group is cancelled: stop watchers through their stop events (cancelling a
        watcher takes seconds)."""
        self.runtime.stop_watchers()

    async def aclose(self) -> None:
        await self.runtime.aclose()
        logsetup.flush()

    async def handle_line(self, line: bytes, peer_uid: int | None, conn_id: int) -> bytes | None:
        ctx: Ctx = Context(self, peer_uid, conn_id)  # mypy: App provides every collaborator Services names
        return await self.dispatcher.handle_line(line, ctx)

    def reply_sent(self, reply: bytes) -> None:
        """The transport is done with a reply handle_line gave it (sent, or the client gone)."""
        self.dispatcher.sent(reply)

    def uptime_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    async def workspace_added(self, ws: Workspace) -> None:
        await self.runtime.added(ws)

    async def workspace_removed(self, ws: Workspace) -> None:
        await self.runtime.removed(ws)


if TYPE_CHECKING:  # a static check, nothing at run time: App is what handlers are given (methods/services.py)

    def _app_provides_services(app: App) -> Services:
        return app
