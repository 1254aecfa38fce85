"""The review page's one way to the daemon: JSON-RPC over the Unix socket, like any client (the daemon opens no TCP
port), bound to the workspaces this server may show.

A page server started in a project shows that workspace only, like ``memoryctl mcp``: no URL names another (a
workspace id in a path that is not the bound one is 404). Started with ``--all`` it is the owner's view: every
registered workspace, listed with the owner token from ``config/owner.token`` exactly as the CLI sends it, and
read-only (no write is offered, and the server refuses one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memoryctl.rpc import ClientError, RemoteError, connect, owner_token


class DaemonError(Exception):
    """A daemon error (or an unreachable daemon) as a page shows it: its stable name, message and hint."""

    def __init__(self, name: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.hint = hint


@dataclass
class Daemon:
    socket: str
    timeout: float
    autostart: bool = True

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One call on a connection of its own (pages run in worker threads; a connection costs well under 1 ms)."""
        try:
            with connect(self.socket, self.timeout, self.autostart) as conn:
                result = conn.call(method, {k: v for k, v in params.items() if v is not None})
        except RemoteError as exc:
            name = "METHOD_NOT_FOUND" if exc.code == -32601 else exc.name  # an older daemon (no audit, lifecycle…)
            raise DaemonError(name, exc.message, exc.hint) from None
        except ClientError as exc:
            raise DaemonError(exc.name, exc.message, exc.hint) from None
        return result if isinstance(result, dict) else {}


@dataclass
class Binding:
    """Which workspaces this page server shows, and whether it may write."""

    daemon: Daemon
    bound: dict[str, str] = field(default_factory=dict)  # workspace id → its name (one, unless owner)
    owner: bool = False
    read_only: bool = False

    @property
    def writes(self) -> bool:
        return not (self.read_only or self.owner)

    def token(self) -> str | None:
        return owner_token() if self.owner else None

    def workspaces(self) -> dict[str, str]:
        """id → name of what the overview lists: the bound workspace, or (owner) every registered one, now."""
        if not self.owner:
            return dict(self.bound)
        listed = self.daemon.call("workspace.list", {"owner_token": self.token()})
        self.bound = {str(w["workspace_id"]): str(w.get("name") or w["workspace_id"]) for w in listed["workspaces"]}
        return dict(self.bound)

    def allows(self, workspace_id: str) -> bool:
        if workspace_id in self.bound:
            return True
        return self.owner and workspace_id in self.workspaces()

    def call(self, workspace_id: str, method: str, **params: Any) -> dict[str, Any]:
        """A workspace-scoped call (the caller checked ``allows``)."""
        return self.daemon.call(method, {"workspace": workspace_id, **params})


def bind(daemon: Daemon, workspace: str | None, *, owner: bool, read_only: bool) -> Binding:
    """The binding for ``memoryctl ui``: the workspace ``workspace`` names (a path inside it or its id), or with
    ``owner`` every workspace (the owner token is checked by the daemon now, so a wrong one fails at start)."""
    if owner:
        binding = Binding(daemon, owner=True, read_only=True)
        binding.workspaces()
        return binding
    assert workspace is not None
    status = daemon.call("status", {"workspace": workspace})
    (ws,) = status["workspaces"]
    return Binding(daemon, {str(ws["workspace_id"]): str(ws.get("name") or ws["workspace_id"])}, read_only=read_only)
