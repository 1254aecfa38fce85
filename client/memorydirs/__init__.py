"""Where memoryd keeps its files. Standard library only: the daemon (``memoryd.config``, ``memoryd.units``) and the
client (``memoryctl``) both import this module, so neither imports the other. It ships in the wheel as its own
top-level package and imports nothing but ``os`` and ``sys``.

Order: an explicit argument, then ``MEMORYD_HOME`` (everything under one directory, as tests use it),
then the platform default (XDG base directories on Linux, ``~/Library/Application Support/memoryd`` on macOS).
``MEMORYD_SOCKET`` overrides only the socket path.

Plain strings and ``os.path`` on purpose: pathlib, typing and dataclasses together cost memoryctl ~15 ms of
start-up, and memoryctl runs inside agent hooks. The daemon wraps these in ``pathlib.Path``.
"""

from __future__ import annotations

import os
import sys

SOCKET_NAME = "memoryd.sock"


class Dirs:
    """The daemon's directories, as absolute path strings."""

    __slots__ = ("config", "home", "run", "state")

    def __init__(self, home: str | None, config: str, state: str, run: str) -> None:
        self.home = home
        self.config = config
        self.state = state
        self.run = run

    def __repr__(self) -> str:
        return f"Dirs(home={self.home!r}, config={self.config!r}, state={self.state!r}, run={self.run!r})"

    @property
    def owner_token(self) -> str:
        return os.path.join(self.config, "owner.token")

    @property
    def settings_file(self) -> str:
        return os.path.join(self.config, "memoryd.yaml")

    @property
    def registry(self) -> str:
        return os.path.join(self.config, "workspaces.yaml")

    @property
    def pid_file(self) -> str:
        return os.path.join(self.run, "memoryd.pid")

    @property
    def lock_file(self) -> str:
        return os.path.join(self.run, "memoryd.lock")

    @property
    def log_file(self) -> str:
        return os.path.join(self.state, "memoryd.log")


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def resolve_dirs(home: str | None = None) -> Dirs:
    if home is None:
        home = os.environ.get("MEMORYD_HOME") or None
    if home is not None:
        root = _absolute(home)
        return Dirs(root, os.path.join(root, "config"), os.path.join(root, "state"), os.path.join(root, "run"))
    user_home = os.path.expanduser("~")
    if sys.platform == "darwin":
        root = os.path.join(user_home, "Library", "Application Support", "memoryd")
        return Dirs(None, os.path.join(root, "config"), os.path.join(root, "state"), os.path.join(root, "run"))
    config = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(user_home, ".config"), "memoryd")
    state = os.path.join(os.environ.get("XDG_STATE_HOME") or os.path.join(user_home, ".local", "state"), "memoryd")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    run = os.path.join(runtime, "memoryd") if runtime else os.path.join(state, "run")
    return Dirs(None, config, state, run)


def socket_path(explicit: str | None = None, home: str | None = None) -> str:
    if explicit:
        return _absolute(explicit)
    env_socket = os.environ.get("MEMORYD_SOCKET")
    if env_socket:
        return _absolute(env_socket)
    return os.path.join(resolve_dirs(home).run, SOCKET_NAME)
