"""ping, status, workspace.add / workspace.list / workspace.remove."""

from __future__ import annotations

from functools import cache
from typing import Literal

import anyio
import apsw
from pydantic import Field

from memoryd.methods.services import Ctx, Handlers, Services, services
from memoryd.models import Empty, OwnerToken, Wire, WorkspaceRef
from memoryd.notes.api import NotesStatus
from memoryd.notes.service import rjieba_ok as _rjieba_ok
from memoryd.rules.api import RulesStatus
from memoryd.workspaces import Workspace


class PingResult(Wire):
    pong: bool = True
    version: str


class Probes(Wire):
    sqlite_version: str
    fts5: bool
    load_extension: bool
    rjieba: bool


class StatusParams(Wire):
    workspace: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Also report this workspace (an id or a path inside it).",
    )
    scope: Literal["workspace", "all"] = Field(
        default="workspace", description="'all' reports every workspace (owner)."
    )
    owner_token: str | None = OwnerToken


class WorkspaceLockStatus(Wire):
    held: bool = Field(description="True when this daemon holds the workspace's write lock; False: read-only here.")
    path: str = Field(description="The lock file (memory/.memoryd.lock).")
    holder_pid: int | None = Field(default=None, description="The pid that last took the lock (the holder).")
    holder_socket: str | None = Field(default=None, description="The holder's socket.")
    holder_home: str | None = Field(default=None, description="The holder's MEMORYD_HOME, if it has one.")
    since: str | None = Field(default=None, description="When the holder took it.")


class WorkspaceStatus(NotesStatus):
    rules: RulesStatus | None = Field(default=None, description="Evidence and rules (None while still loading).")
    lock: WorkspaceLockStatus | None = Field(
        default=None, description="Who may write this workspace (one daemon at a time; the others serve it read-only)."
    )


class StatusResult(Wire):
    version: str
    pid: int
    uptime_s: float
    socket: str
    home: str | None
    config_dir: str
    state_dir: str
    workspace_count: int
    probes: Probes
    workspaces: list[WorkspaceStatus] = Field(default_factory=list)


class WorkspaceAddParams(Wire):
    path: str = Field(min_length=1, max_length=4096, description="Absolute path of the project directory.")
    name: str | None = Field(default=None, min_length=1, max_length=200, description="A display name.")


class WorkspaceInfo(Wire):
    workspace_id: str
    path: str
    name: str
    added_at: str


class WorkspaceAddResult(WorkspaceInfo):
    created: bool = Field(
        description="False when the path was already registered: the call is idempotent and answers the workspace "
        "unchanged (its name too; to rename, workspace.remove then workspace.add)."
    )


class WorkspaceListParams(Wire):
    owner_token: str | None = OwnerToken


class WorkspaceListResult(Wire):
    workspaces: list[WorkspaceInfo]


class WorkspaceRemoveParams(Wire):
    workspace: str = WorkspaceRef
    owner_token: str | None = OwnerToken


class WorkspaceRemoveResult(Wire):
    workspace_id: str
    removed: bool


def info(ws: Workspace) -> WorkspaceInfo:
    return WorkspaceInfo(workspace_id=ws.id, path=str(ws.path), name=ws.name, added_at=ws.added_at)


@cache
def rjieba_ok() -> bool:
    return _rjieba_ok()


def probes() -> Probes:
    options = set(apsw.compile_options)
    return Probes(
        sqlite_version=apsw.sqlite_lib_version(),
        fts5="ENABLE_FTS5" in options,
        load_extension="OMIT_LOAD_EXTENSION" not in options,
        rjieba=rjieba_ok(),
    )


async def _workspace_status(app: Services, ws: Workspace) -> WorkspaceStatus:
    notes = await app.notes.status(ws)
    rules = await app.curate.status(ws)
    if rules is not None and rules.errors and notes.recommended is None:
        notes = notes.model_copy(update={"recommended": "memoryctl validate"})
    lock = WorkspaceLockStatus.model_validate(await app.lock_status(ws))
    return WorkspaceStatus.model_validate({**notes.model_dump(), "rules": rules, "lock": lock})


def register(d: Handlers) -> None:
    @d.register("ping", Empty, PingResult)
    async def ping(ctx: Ctx, params: Empty) -> PingResult:
        """Liveness: answers at once with the daemon's version."""
        app = services(ctx)
        return PingResult(version=app.version)

    @d.register("status", StatusParams, StatusResult)
    async def status(ctx: Ctx, params: StatusParams) -> StatusResult:
        """Versions, uptime, socket, directories, probes; per workspace: files, chunks, dirty files, last
        indexed, and a recommended next command when something is wrong."""
        app = services(ctx)
        dirs = app.settings.dirs
        if params.scope == "all":
            app.owner.check(params.owner_token)
            chosen = app.registry.all()
        else:
            chosen = [] if params.workspace is None else [await app.workspace(params.workspace)]
        return StatusResult(
            version=app.version,
            pid=app.pid,
            uptime_s=app.uptime_s(),
            socket=str(app.settings.socket),
            home=None if dirs.home is None else str(dirs.home),
            config_dir=str(dirs.config),
            state_dir=str(dirs.state),
            workspace_count=len(app.registry),
            probes=probes(),
            workspaces=[await _workspace_status(app, ws) for ws in chosen],
        )

    @d.register("workspace.add", WorkspaceAddParams, WorkspaceAddResult, writes=True)
    async def workspace_add(ctx: Ctx, params: WorkspaceAddParams) -> WorkspaceAddResult:
        """Register a project directory (idempotent: adding it again changes nothing, its name included); creates
        its memory/ directory. Refuses system directories, the home directory itself, and a directory inside
        (or containing) another workspace's memory trees."""
        app = services(ctx)
        ws, created = await anyio.to_thread.run_sync(app.registry.add, params.path, params.name)
        await app.workspace_added(ws)
        return WorkspaceAddResult(**info(ws).model_dump(), created=created)

    @d.register("workspace.list", WorkspaceListParams, WorkspaceListResult)
    async def workspace_list(ctx: Ctx, params: WorkspaceListParams) -> WorkspaceListResult:
        """Every registered workspace (owner only)."""
        app = services(ctx)
        app.owner.check(params.owner_token)
        return WorkspaceListResult(workspaces=[info(ws) for ws in app.registry.all()])

    @d.register("workspace.remove", WorkspaceRemoveParams, WorkspaceRemoveResult, writes=True)
    async def workspace_remove(ctx: Ctx, params: WorkspaceRemoveParams) -> WorkspaceRemoveResult:
        """Unregister a workspace (owner only). Deletes nothing in the workspace; drops its derived index."""
        app = services(ctx)
        app.owner.check(params.owner_token)
        ws = await app.workspace(params.workspace)
        await app.workspace_removed(ws)
        await anyio.to_thread.run_sync(app.registry.remove, ws)
        return WorkspaceRemoveResult(workspace_id=ws.id, removed=True)
