"""Talk to memoryd: one JSON-RPC 2.0 request per line over the Unix socket. Standard library only.

The socket is ``_socket``'s and the JSON ``memoryctl.wire``'s: the socket and json packages add enum, selectors and
re to every start (~7 ms of `memoryctl search`), and a Unix socket needs nothing they add.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from _socket import AF_UNIX, SOCK_STREAM, socket

from memoryctl import wire

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any

_ids = itertools.count(1)
BUSY_RETRY_S = 1.0  # how long a call answered MEMORY_BUSY (every connection slot taken) is retried


class ClientError(Exception):
    """A failure on this side of the socket, named like the daemon's errors."""

    def __init__(self, name: str, message: str, hint: str, exit_code: int) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.hint = hint
        self.exit_code = exit_code


class RemoteError(Exception):
    """The daemon answered with an error object."""

    def __init__(self, error: dict[str, Any]) -> None:
        raw = error.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        self.code = error.get("code")
        self.name = str(data.get("name") or "ERROR")
        self.message = str(error.get("message") or "error")
        self.hint = str(data.get("hint") or "")
        self.data = data
        super().__init__(self.message)


def unavailable(path: str, detail: str) -> ClientError:
    return ClientError(
        "DAEMON_UNAVAILABLE",
        f"memoryd is not answering on {path} ({detail})",
        "Start it with `memoryd serve` (or `make run`), or pass --autostart to start one in the background.",
        3,
    )


class Connection:
    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._answered = False  # a reply arrived on this connection (a MEMORY_BUSY one comes first, or never)
        self._connect()

    def _connect(self) -> None:
        path, timeout = self.path, self.timeout
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            self.sock = socket(AF_UNIX, SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(path)
                break
            except BlockingIOError:
                # EAGAIN: the daemon's listen backlog is full (a burst of clients). Retry with backoff within
                # the timeout instead of calling a busy daemon unavailable.
                self.sock.close()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise unavailable(path, "listen backlog full; connect timed out") from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.2)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                self.sock.close()
                raise unavailable(path, exc.strerror or type(exc).__name__) from None
            except TimeoutError:
                self.sock.close()
                raise unavailable(path, "connect timed out") from None
            except OSError as exc:
                self.sock.close()
                raise unavailable(path, exc.strerror or str(exc)) from None
        self._buffer = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        request = {"jsonrpc": "2.0", "method": method, "params": params or {}, "id": next(_ids)}
        line = wire.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        busy_until = time.monotonic() + min(BUSY_RETRY_S, self.timeout)
        delay = 0.01
        while True:
            try:
                return self._call(method, line)
            except RemoteError as exc:
                # All connection slots taken: in a burst they free within milliseconds, so retry briefly; when
                # they are held, report MEMORY_BUSY (it names the limit) rather than wait out the timeout.
                slots = exc.name == "MEMORY_BUSY" and exc.data.get("setting") == "max_connections"
                if not slots or self._answered or time.monotonic() + delay > busy_until:
                    raise
            self.sock.close()
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            self._connect()

    def _call(self, method: str, line: bytes) -> Any:
        try:
            self.sock.sendall(line)
            reply = self._read_line()
        except TimeoutError:
            raise ClientError(
                "TIMEOUT",
                f"memoryd did not answer {method} within {self.timeout:g} s",
                "Retry with a larger --timeout; `memoryctl status` shows whether the daemon is busy.",
                6,
            ) from None
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise unavailable(self.path, exc.strerror or "connection lost") from None
        try:
            message = wire.loads(reply)
        except ValueError:
            raise ClientError("PROTOCOL_ERROR", "memoryd sent a line that is not JSON", "Update memoryd.", 5) from None
        if not isinstance(message, dict):
            raise ClientError("PROTOCOL_ERROR", "memoryd sent an unexpected reply", "Update memoryd.", 5)
        if "error" in message:
            error = RemoteError(message["error"])
            if error.name != "MEMORY_BUSY":
                self._answered = True
            raise error
        self._answered = True
        return message.get("result")

    def _read_line(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line, self._buffer = self._buffer[:newline], self._buffer[newline + 1 :]
                return line
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionResetError(0, "daemon closed the connection")
            self._buffer += chunk


def start_daemon(path: str, wait_s: float = 15.0) -> None:
    """Start ``memoryd serve`` in the background (its own session) and wait until it answers ping."""
    import contextlib
    import subprocess

    from memorydirs import resolve_dirs

    log_file = resolve_dirs().log_file
    os.makedirs(os.path.dirname(log_file), mode=0o700, exist_ok=True)
    command = [sys.executable, "-m", "memoryd", "serve", "--socket", path]
    with open(log_file, "ab") as log:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with Connection(path, timeout=1.0) as conn:
                conn.call("ping")
                return
        except ClientError:
            code = child.poll()
            if code is not None and code != 0:  # it could not start (or lost a race to another): no waiting
                with contextlib.suppress(ClientError), Connection(path, timeout=1.0) as conn:
                    conn.call("ping")
                    return
                raise ClientError(
                    "DAEMON_UNAVAILABLE",
                    f"started memoryd but it exited with {code} before answering",
                    f"See its log: {log_file}",
                    3,
                ) from None
            time.sleep(0.05)
    raise ClientError(
        "DAEMON_UNAVAILABLE",
        f"started memoryd but it did not answer within {wait_s:g} s",
        f"See its log: {log_file}",
        3,
    )


def connect(path: str, timeout: float, autostart: bool) -> Connection:
    try:
        return Connection(path, timeout)
    except ClientError:
        if not autostart:
            raise
    start_daemon(path)
    return Connection(path, timeout)


def owner_token() -> str | None:
    from memorydirs import resolve_dirs

    try:
        with open(resolve_dirs().owner_token, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def parse_timeout(text: str) -> float:
    """A timeout in seconds: a finite number above zero, else ValueError with a message for a person."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not (0 < value < 1e9):  # also refuses nan and inf
        raise ValueError(f"must be a number of seconds above 0, got {text!r}")
    return value


def environ_timeout(default: float) -> float:
    """MEMORYCTL_TIMEOUT, else ``default``; a bad value is a ClientError (exit 2), never silently ignored."""
    raw = os.environ.get("MEMORYCTL_TIMEOUT")
    if raw is None or not raw.strip():
        return default
    try:
        return parse_timeout(raw.strip())
    except ValueError as exc:
        raise ClientError(
            "USAGE", f"MEMORYCTL_TIMEOUT {exc}", "Set it to seconds above 0, e.g. MEMORYCTL_TIMEOUT=30, or unset it.", 2
        ) from None
