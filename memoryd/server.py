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
from typing import Any

import anyio
import anyio.abc
import structlog

from memoryd import fsio
from memoryd.config import Settings
from memoryd.rpc import error_line
from memoryd.transport import Connection, serve_connection

log = structlog.get_logger("memoryd.server")

SD_LISTEN_FDS_START = 3
LISTEN_BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
_MAX_REFUSING = 64  # MEMORY_BUSY answers in progress at once; beyond them a client is closed without one
_REFUSE_S = 1.0  # how long a MEMORY_BUSY answer may take (send it, read what the client sent)
_REFUSE_READ_BYTES = 1 << 20


class StartupError(Exception):
    """Startup cannot proceed; the message says why and what to do. Exit code 3."""


@dataclass
class InstanceLock:
    """``run/memoryd.lock`` held with flock for the daemon's lifetime, plus ``run/memoryd.pid``."""

    lock_path: Path
    pid_path: Path
    _file: int | None = None

    def acquire(self) -> None:
        fsio.make_private_dir(self.lock_path.parent)
        handle = fsio.open_lock_file(self.lock_path)  # held for the daemon's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            pid = "?"
            with contextlib.suppress(OSError):
                pid = self.pid_path.read_text(encoding="ascii").strip() or "?"
            raise StartupError(
                f"memoryd is already running for {self.lock_path.parent.parent} (pid {pid}); "
                "stop it first or use another MEMORYD_HOME"
            ) from None
        self._file = handle
        fsio.atomic_write(self.pid_path, f"{os.getpid()}\n".encode("ascii"), durable=False)

    def release(self) -> None:
        if self._file is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if self.pid_path.read_text(encoding="ascii").strip() == str(os.getpid()):
                fsio.remove(self.pid_path)
        os.close(self._file)
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
    """The socket's directory: created private (0700) when missing; an existing one is never changed (it may be
    $HOME or /tmp), only checked: it must belong to us, and a group/world-writable one is logged."""
    if not os.path.lexists(directory):
        fsio.make_private_dir(directory)
        os.chmod(directory, 0o700)  # mkdir's mode went through the umask
        return
    info = directory.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise StartupError(f"{directory} is not a directory; choose another socket path")
    if info.st_uid != os.getuid():
        raise StartupError(f"{directory} belongs to another user; choose another socket path")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        log.warning("socket_dir_writable_by_others", directory=str(directory), mode=oct(mode))


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
            fsio.remove(path)
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
    sock.listen(LISTEN_BACKLOG)
    return sock


@dataclass
class Server:
    settings: Settings
    app: Any  # memoryd.app.App: handle_line, start(task_group), aclose()
    draining: anyio.Event = field(default_factory=anyio.Event)
    connections: dict[int, Connection] = field(default_factory=dict)
    _next_conn: int = 0
    _refusing: int = 0  # clients beyond max_connections being answered MEMORY_BUSY right now
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
            try:
                await listener.aclose()
            except Exception:
                log.warning("listener_close_failed", exc_info=True)
            await self.app.aclose()
            self._remove_socket()
        log.info("stopped")
        return 0

    async def _accept(
        self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup, scope: anyio.CancelScope
    ) -> None:
        # At most max_connections served at once. A client beyond them is accepted, answered MEMORY_BUSY at once
        # and closed: waiting in the listen backlog behind held connections told it nothing for minutes.
        with scope:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # EMFILE and friends: back off, keep serving the others
                    log.warning("accept_failed", error=exc.strerror)
                    await anyio.sleep(0.05)
                    continue
                if len(self.connections) >= self.settings.server.max_connections:
                    if self._refusing < _MAX_REFUSING:
                        self._refusing += 1
                        tg.start_soon(self._refuse, stream)
                    else:  # a flood: close at once (the client sees the connection closed)
                        await _close(stream)
                    continue
                self._next_conn += 1
                conn = Connection(self._next_conn)
                self.connections[conn.conn_id] = conn
                tg.start_soon(self._connection, stream, conn)

    async def _refuse(self, stream: anyio.abc.SocketStream) -> None:
        """Tell a client beyond max_connections why, then close. The client's request (if it sent one already) is
        read and dropped before closing, so its socket sees our answer rather than a reset."""
        try:
            log.info("busy_refused", open_connections=len(self.connections), limit=self.settings.server.max_connections)
            with anyio.move_on_after(_REFUSE_S):
                await stream.send(
                    error_line("MEMORY_BUSY", limit=self.settings.server.max_connections, setting="max_connections")
                )
                await stream.send_eof()
                received = 0
                while received < _REFUSE_READ_BYTES:
                    received += len(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the client went away first: nothing to tell it
        finally:
            self._refusing -= 1
            await _close(stream)

    async def _connection(self, stream: anyio.abc.SocketStream, conn: Connection) -> None:
        try:
            with conn.scope:
                await serve_connection(
                    stream,
                    conn,
                    self.app.handle_line,
                    max_line_bytes=self.settings.server.max_line_bytes,
                    idle_timeout_s=self.settings.server.idle_timeout_s,
                    draining=self.draining,
                    send_timeout_s=self.settings.server.send_timeout_s,
                    sent=self.app.reply_sent,
                )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass  # the client went away: an ordinary end of a connection
        except Exception:
            # Last resort: whatever escaped the dispatcher's boundary ends this connection only, never the daemon.
            log.exception("connection_failed", conn=conn.conn_id, busy=conn.busy)
        finally:
            self.connections.pop(conn.conn_id, None)
            await _close(stream)

    async def _drain(self) -> None:
        """Finish in-flight requests (bounded by drain_timeout_s); close idle connections right away."""
        self.app.dispatcher.shutting_down = True
        with anyio.move_on_after(self.settings.server.drain_timeout_s):
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
                fsio.remove(self.settings.socket)
        self._owned_socket = None


async def _close(stream: anyio.abc.SocketStream) -> None:
    try:
        await stream.aclose()
    except Exception:
        log.warning("close_failed", exc_info=True)
