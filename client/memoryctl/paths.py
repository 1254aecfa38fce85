"""Where memoryd keeps its files. Standard library only: the daemon and the client share this module.

Order: an explicit argument, then ``MEMORYD_HOME`` (everything under one directory, as tests use it),
then the platform default (XDG base directories on Linux, ``~/Library/Application Support/memoryd`` on macOS).
``MEMORYD_SOCKET`` overrides only the socket path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

SOCKET_NAME = "memoryd.sock"


@dataclass(frozen=True, slots=True)
class Dirs:
    home: Path | None
    config: Path
    state: Path
    run: Path

    @property
    def owner_token(self) -> Path:
        return self.config / "owner.token"

    @property
    def settings_file(self) -> Path:
        return self.config / "memoryd.yaml"

    @property
    def registry(self) -> Path:
        return self.config / "workspaces.yaml"

    @property
    def pid_file(self) -> Path:
        return self.run / "memoryd.pid"

    @property
    def lock_file(self) -> Path:
        return self.run / "memoryd.lock"

    @property
    def log_file(self) -> Path:
        return self.state / "memoryd.log"


def resolve_dirs(home: str | os.PathLike[str] | None = None) -> Dirs:
    if home is None:
        env_home = os.environ.get("MEMORYD_HOME")
        home = env_home if env_home else None
    if home is not None:
        root = Path(home).expanduser().absolute()
        return Dirs(home=root, config=root / "config", state=root / "state", run=root / "run")
    user_home = Path.home()
    if sys.platform == "darwin":
        root = user_home / "Library" / "Application Support" / "memoryd"
        return Dirs(home=None, config=root / "config", state=root / "state", run=root / "run")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or user_home / ".config") / "memoryd"
    state = Path(os.environ.get("XDG_STATE_HOME") or user_home / ".local" / "state") / "memoryd"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    run = Path(runtime) / "memoryd" if runtime else state / "run"
    return Dirs(home=None, config=config, state=state, run=run)


def socket_path(explicit: str | os.PathLike[str] | None = None, home: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser().absolute()
    env_socket = os.environ.get("MEMORYD_SOCKET")
    if env_socket:
        return Path(env_socket).expanduser().absolute()
    return resolve_dirs(home).run / SOCKET_NAME
