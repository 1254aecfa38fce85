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
from memoryd.notes.semantic import SemanticSettings
from memoryd.notes.service import NotesService
from memoryd.notes.workspace import NotesSettings
from memoryd.rpc import Context, Dispatcher
from memoryd.rules.service import RulesService
from memoryd.rules.settings import RulesSettings
from memoryd.runtime import Runtime, RuntimeSettings
from memoryd.tasks import task
from memoryd.workspaces import OwnerToken, Registry, Workspace

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
        )
        self.context = ContextService(
            ContextSettings(
                state_dir=settings.dirs.workspaces_state,
                budget_chars=settings.context_budget_chars,
                dynamic_max_chars=settings.context_dynamic_max_chars,
                min_relevance=settings.recall_min_relevance,
                snapshot_ttl_s=settings.context_snapshot_ttl_hours * 3600,
                snapshot_max_files=settings.context_snapshot_max_files,
                memory_max_bytes=settings.index_max_file_bytes,
            ),
            self.notes,
            self.rules,
        )
        self.runtime = Runtime(
            RuntimeSettings(
                watch=settings.watch,
                watch_debounce_ms=settings.watch_debounce_ms,
                reconcile_interval_s=settings.reconcile_interval_s,
                socket=settings.socket,
                home=settings.dirs.home,
            ),
            self.registry,
            self.notes,
            self.rules,
        )

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(task("log_flusher", self._flush_logs, restart=True))
        await self.notes.start(tg)
        await self.rules.start(tg)
        await self.runtime.start(tg)

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
        return await self.dispatcher.handle_line(line, Context(self, peer_uid, conn_id))

    def reply_sent(self, reply: bytes) -> None:
        """The transport is done with a reply handle_line gave it (sent, or the client gone)."""
        self.dispatcher.sent(reply)

    def uptime_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    async def workspace_added(self, ws: Workspace) -> None:
        await self.runtime.added(ws)

    async def workspace_removed(self, ws: Workspace) -> None:
        await self.runtime.removed(ws)
