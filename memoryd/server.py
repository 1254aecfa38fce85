"""Lifecycle: single-instance lock, bind (or take systemd's socket), serve, drain on SIGTERM/SIGINT, clean up.

Exit codes: 0 after a clean shutdown, 3 when startup fails (another daemon on this home or socket, a path that is
not a socket in the way, an unusable directory), 130 when a second SIGINT forces the exit.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc
import structlog

from memoryd.config import Settings
from memoryd.transport import Connection, serve_connection

log = structlog.get_logger("memoryd.server")

SD_LISTEN_FDS_START = 3


class StartupError(Exception):
    """Startup cannot proceed; the message says why and what to do. Exit code 3."""


@dataclass
class InstanceLock:
    """``run/memoryd.lock`` held with flock for the daemon's lifetime, plus ``run/memoryd.pid``."""

    lock_path: Path
    pid_path: Path
    _file: IO[str] | None = None

    def acquire(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle = open(self.lock_path, "a+", encoding="ascii")  # noqa: SIM115 - held for the daemon's lifetime
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            pid = "?"
            with contextlib.suppress(OSError):
                pid = self.pid_path.read_text(encoding="ascii").strip() or "?"
            raise StartupError(
                f"memoryd is already running for {self.lock_path.parent.parent} (pid {pid}); "
                "stop it first or use another MEMORYD_HOME"
            ) from None
        self._file = handle
        tmp = self.pid_path.with_suffix(".pid.tmp")
        tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
        os.replace(tmp, self.pid_path)

    def release(self) -> None:
        if self._file is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if self.pid_path.read_text(encoding="ascii").strip() == str(os.getpid()):
                self.pid_path.unlink()
        self._file.close()
        self._file = None


def systemd_socket() -> socket.socket | None:
    """The listening socket systemd passed (socket activation), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    if count < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    if sock.family != socket.AF_UNIX:
        raise StartupError("systemd passed a socket that is not a Unix socket; use ListenStream=/path")
    return sock


def _prepare_dir(directory: Path) -> None:
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = directory.stat()
    if info.st_uid != os.getuid():
        raise StartupError(f"{directory} belongs to another user; choose another socket path")
    if created or stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700)


def bind_socket(path: Path) -> socket.socket:
    """Bind a listening socket at ``path``, replacing a leftover socket only when nobody answers on it."""
    _prepare_dir(path.parent)
    if len(os.fsencode(path)) >= 104:
        raise StartupError(f"socket path is too long ({len(os.fsencode(path))} bytes; the limit is 103): {path}")
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise StartupError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise StartupError(f"cannot probe existing socket {path}: {exc.strerror}") from exc
            log.info("stale_socket_replaced", socket=str(path))
            path.unlink()
        else:
            raise StartupError(f"another memoryd is answering on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot bind {path}: {exc.strerror}") from exc
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(512)
    return sock


@dataclass
class Server:
    settings: Settings
    app: Any  # memoryd.app.App: handle_line, start(task_group), aclose()
    draining: anyio.Event = field(default_factory=anyio.Event)
    connections: dict[int, Connection] = field(default_factory=dict)
    _next_conn: int = 0
    _owned_socket: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound, to remove on exit

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> int:
        lock = InstanceLock(self.settings.dirs.lock_file, self.settings.dirs.pid_file)
        lock.acquire()
        try:
            return await self._run_locked(task_status)
        finally:
            lock.release()

    async def _run_locked(self, task_status: anyio.abc.TaskStatus[None]) -> int:
        sock = systemd_socket()
        activated = sock is not None
        if sock is None:
            sock = bind_socket(self.settings.socket)
            info = self.settings.socket.lstat()
            self._owned_socket = (info.st_dev, info.st_ino)
        sock.setblocking(False)
        listener = await anyio.abc.SocketListener.from_socket(sock)
        try:
            async with anyio.create_task_group() as tg:
                await self.app.start(tg)
                tg.start_soon(self._signals, tg.cancel_scope)
                accept_scope = anyio.CancelScope()
                tg.start_soon(self._accept, listener, tg, accept_scope)
                log.info("ready", socket=str(self.settings.socket), activated=activated, pid=os.getpid())
                task_status.started()
                await self.draining.wait()
                accept_scope.cancel()
                await self._drain()
                self.app.stop_background()
                tg.cancel_scope.cancel()
        finally:
            with contextlib.suppress(Exception):
                await listener.aclose()
            await self.app.aclose()
            self._remove_socket()
        log.info("stopped")
        return 0

    async def _accept(
        self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup, scope: anyio.CancelScope
    ) -> None:
        # At most max_connections at once; further clients wait in the listen backlog.
        slots = anyio.Semaphore(self.settings.max_connections)
        with scope:
            while True:
                await slots.acquire()
                try:
                    stream = await listener.accept()
                except OSError as exc:  # EMFILE and friends: back off, keep serving the others
                    slots.release()
                    log.warning("accept_failed", error=exc.strerror)
                    await anyio.sleep(0.05)
                    continue
                except BaseException:
                    slots.release()
                    raise
                self._next_conn += 1
                conn = Connection(self._next_conn)
                tg.start_soon(self._connection, stream, conn, slots)

    async def _connection(self, stream: anyio.abc.SocketStream, conn: Connection, slots: anyio.Semaphore) -> None:
        self.connections[conn.conn_id] = conn
        try:
            with conn.scope:
                await serve_connection(
                    stream,
                    conn,
                    self.app.handle_line,
                    max_line_bytes=self.settings.max_line_bytes,
                    idle_timeout_s=self.settings.idle_timeout_s,
                    draining=self.draining,
                )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass
        finally:
            self.connections.pop(conn.conn_id, None)
            slots.release()
            with contextlib.suppress(Exception):
                await stream.aclose()

    async def _drain(self) -> None:
        """Finish in-flight requests (bounded by drain_timeout_s); close idle connections right away."""
        self.app.dispatcher.shutting_down = True
        with anyio.move_on_after(self.settings.drain_timeout_s):
            while True:
                for conn in list(self.connections.values()):
                    if not conn.busy:
                        conn.scope.cancel()
                if not self.connections:
                    break
                await anyio.sleep(0.01)
        if self.connections:
            log.warning("drain_timeout", open_connections=len(self.connections))

    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self.draining.is_set():
                    if signum == signal.SIGINT:
                        log.warning("forced_exit")  # warnings are written at once
                        self._remove_socket()
                        os._exit(130)
                    continue
                log.info("shutdown", signal=signal.Signals(signum).name)
                self.draining.set()

    def _remove_socket(self) -> None:
        if self._owned_socket is None:
            return
        with contextlib.suppress(FileNotFoundError):
            info = self.settings.socket.lstat()
            if (info.st_dev, info.st_ino) == self._owned_socket:
                self.settings.socket.unlink()
        self._owned_socket = None
