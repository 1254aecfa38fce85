"""What a handler may use: the typed collaborators the composition root (``memoryd/app.py``) provides.

Handlers get these as ``ctx.app`` (or ``services(ctx)``), never the ``App`` class itself, so ``methods`` does not
import the composition root (the layers contract in pyproject.toml checks it) and a handler's reach is written down
here. The RPC layer's ``Context`` and ``Dispatcher`` are generic in what ``app`` is; handlers take ``Ctx``
(``Context[Services]``) and the composition root builds a ``Dispatcher[Services]``, so mypy checks statically that
``App`` has everything this Protocol names (memoryd/app.py), with no cast anywhere.
"""

from __future__ import annotations

from typing import Any, Protocol

from memoryd.config import Settings
from memoryd.context.service import ContextService
from memoryd.curate.lifecycle_service import LifecycleService
from memoryd.notes.service import NotesService
from memoryd.rpc import Context, Dispatcher
from memoryd.rules.service import RulesService
from memoryd.runtime import Runtime
from memoryd.workspaces import OwnerToken, Registry, Workspace


class Services(Protocol):
    settings: Settings
    version: str
    pid: int
    owner: OwnerToken
    registry: Registry
    notes: NotesService
    rules: RulesService
    context: ContextService
    lifecycle: LifecycleService
    runtime: Runtime

    async def workspace(self, ref: str, *, write: bool = False) -> Workspace: ...

    async def workspace_added(self, ws: Workspace) -> None: ...

    async def workspace_removed(self, ws: Workspace) -> None: ...

    async def lock_status(self, ws: Workspace) -> dict[str, Any]: ...

    def uptime_s(self) -> float: ...


Ctx = Context[Services]  # what every handler is given
Handlers = Dispatcher[Services]  # where handlers register


def services(ctx: Ctx) -> Services:
    """The collaborators of the request's daemon."""
    return ctx.app
