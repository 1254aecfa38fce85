"""Hostile clients on a real daemon: long batches, huge replies, clients that never read, more clients than slots,
values the wire cannot carry, and the socket's directory."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from memoryctl.rpc import ClientError, Connection, RemoteError

from tests.conftest import Daemon, short_tmp, wait_for
from tests.test_rules import PROFILE, compiled, observe, resolve, rule


def raw_connect(d: Daemon, timeout: float = 30.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(d.socket))
    return sock


def read_line(sock: socket.socket) -> Any:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        assert chunk, "daemon closed the connection"
        data += chunk
    return orjson.loads(data)


def exchange(d: Daemon, line: bytes) -> Any:
    with raw_connect(d) as sock:
        sock.sendall(line + b"\n")
        return read_line(sock)


def ping(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "ping", "id": i}


def started(daemon_factory: Any, home: Path, **settings: Any) -> Daemon:
    d: Daemon = daemon_factory(start=False)
    for name, value in settings.items():
        d.env[f"MEMORYD_{name.upper()}"] = str(value)
    return d.start()


def test_a_batch_over_max_batch_members_is_refused_whole(daemon_factory: Any, home: Path) -> None:
    d = started(daemon_factory, home, max_batch_members=10)
    ok = exchange(d, orjson.dumps([ping(i) for i in range(10)]))
    assert [r["id"] for r in ok] == list(range(10))
    notes = [{"jsonrpc": "2.0", "method": "workspace.add", "params": {"path": "/nonexistent/x"}}] * 5
    refused = exchange(d, orjson.dumps([ping(i) for i in range(6)] + notes))
    assert isinstance(refused, dict) and refused["id"] is None
    assert refused["error"]["data"]["name"] == "BATCH_TOO_LARGE"
    assert refused["error"]["data"]["limit"] == 10 and refused["error"]["data"]["members"] == 11
    # the daemon's 5.4 MB [1,1,…] line: one small error, not a 600 MB reply
    amplified = exchange(d, b"[" + b",".join([b"1"] * 100_000) + b"]")
    assert amplified["error"]["data"]["name"] == "BATCH_TOO_LARGE"
    assert d.call("ping")


def test_replies_over_max_reply_bytes_become_reply_too_large(daemon_factory: Any, home: Path) -> None:
    d = started(daemon_factory, home, max_reply_bytes=200)
    big = exchange(d, orjson.dumps({"jsonrpc": "2.0", "method": "status", "id": "s"}))
    assert big["id"] == "s" and big["error"]["data"]["name"] == "REPLY_TOO_LARGE"
    assert big["error"]["data"]["limit"] == 200 and big["error"]["data"]["reply_bytes"] > 200
    batch = exchange(d, orjson.dumps([ping(1), ping(2), ping(3), ping(4)]))
    assert [r["id"] for r in batch] == [1, 2, 3, 4]  # every id answered...
    assert "result" in batch[0]
    assert batch[-1]["error"]["data"]["name"] == "REPLY_TOO_LARGE"  # ...the ones past the cap with the error
    assert d.call("ping")


def test_a_client_that_never_reads_is_disconnected_and_others_are_served(daemon_factory: Any, home: Path) -> None:
    d = started(daemon_factory, home, send_timeout_s=0.5)
    status = orjson.dumps({"jsonrpc": "2.0", "method": "status", "id": 1}) + b"\n"
    hog = raw_connect(d)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.setblocking(False)
    sent = 0
    try:
        while sent < 8 * 1024 * 1024:  # pipelined requests whose replies are never read
            sent += hog.send(status * 256)
    except BlockingIOError:
        pass  # the daemon stopped reading: it is stuck sending to us
    assert d.call("ping")  # others are served meanwhile
    wait_for(lambda: "send_timeout" in d.log.read_text(), timeout=20)
    hog.settimeout(20)
    while hog.recv(1 << 20):  # what was already in flight, then the end of the stream
        pass
    hog.close()
    assert d.call("ping")


def test_replies_nobody_reads_are_bounded_in_total(daemon_factory: Any, home: Path) -> None:
    """Issue 19, 2.10: 100 clients that never read their replies held +1.2 GB; now the replies waiting for their
    clients are bounded all together (max_unsent_reply_bytes), and past it a big reply is answered MEMORY_BUSY."""
    d = started(daemon_factory, home, max_unsent_reply_bytes=2_000_000, send_timeout_s=600)
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    (root / "memory" / "MEMORY.md").write_text(
        "## Long\n" + "".join(f"- {n} " + "长" * 2000 + "\n" for n in range(199)), encoding="utf-8"
    )
    get = {"workspace": ws, "path": "memory/MEMORY.md", "from_line": 1, "lines": 200}
    assert len(orjson.dumps(d.call("get", get))) > 1_000_000  # one reply is 1.2 MB: more than a socket buffer
    hog = raw_connect(d)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # pipelined: one is answered MEMORY_BUSY while the other client's reply is on its way; a later one sticks
    hog.sendall((orjson.dumps({"jsonrpc": "2.0", "method": "get", "params": get, "id": 1}) + b"\n") * 20)
    with Connection(str(d.socket), 30.0) as conn:  # the hog's reply waits in the daemon: a second does not fit
        with pytest.raises(RemoteError) as busy:
            wait_for(lambda: conn.call("get", get) and False, timeout=20)
        assert busy.value.name == "MEMORY_BUSY" and busy.value.data["setting"] == "max_unsent_reply_bytes"
        assert busy.value.data["limit"] == 2_000_000
        assert conn.call("ping")["pong"]  # small replies always go
    hog.close()  # the hog goes: its reply is freed, and big replies go again
    assert wait_for(lambda: _get_or_busy(d, get), timeout=20)


def _get_or_busy(d: Daemon, params: dict[str, Any]) -> bool:
    try:
        return bool(d.call("get", params))
    except RemoteError as exc:
        assert exc.name == "MEMORY_BUSY"
        return False


def test_a_value_beyond_64_bits_in_a_rule_file_never_reaches_the_wire(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    # Before: resolve's result held 2**64 + 1, orjson could not serialise it outside the error boundary, and the
    # daemon exited with code 1. Now the loader refuses the value as the file's problem (the generic boundary is
    # tests/test_jsonrpc_spec.py::test_a_result_the_wire_cannot_carry_is_an_internal_error_for_its_id).
    root, ws = workspace
    oid = observe(daemon, ws)
    compiled(daemon, ws, rule(oid))
    path = root / PROFILE
    data = yaml.safe_load(path.read_text())
    data["facts"]["x"] = 18446744073709551617  # 2**64 + 1: JSON has it, orjson (64-bit) does not
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    answer = wait_for(lambda: (r := resolve(daemon, ws, "1.2.3"))["errors"] and r, timeout=20)
    assert "64 bits" in answer["errors"][0] and "x" not in answer["facts"]
    assert answer["facts"]["transport.uart.flow_control"] == "rts_cts"  # the last good rule
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert daemon.call("ping")


def test_a_client_beyond_max_connections_is_answered_busy_at_once(daemon_factory: Any, home: Path) -> None:
    d = started(daemon_factory, home, max_connections=4)
    held = [Connection(str(d.socket), 10.0) for _ in range(4)]
    try:
        for conn in held:
            assert conn.call("ping")
        with pytest.raises(RemoteError) as busy, Connection(str(d.socket), 10.0) as extra:
            extra.call("ping")
        assert busy.value.name == "MEMORY_BUSY" and busy.value.data["limit"] == 4
        assert held[0].call("ping")  # the held ones are still served
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: d.call("ping"))


def test_memoryctl_retries_briefly_when_every_slot_is_taken(
    daemon_factory: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = started(daemon_factory, home, max_connections=1)
    held = Connection(str(d.socket), 10.0)
    assert held.call("ping")
    real_sleep = time.sleep
    waits: list[float] = []

    def slot_frees(seconds: float) -> None:  # the first back-off: the other client finishes
        waits.append(seconds)
        held.close()
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", slot_frees)  # the one time module, memoryctl.rpc's too
    with Connection(str(d.socket), 10.0) as conn:
        assert conn.call("ping")["pong"]
    assert waits  # it was answered MEMORY_BUSY first, then retried


def test_memoryctl_retries_while_the_listen_backlog_is_full(monkeypatch: pytest.MonkeyPatch) -> None:
    directory = short_tmp("bl")
    path = str(directory / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(0)
    fillers = fill_backlog(path)
    real_sleep = time.sleep
    waits: list[float] = []

    def backlog_drains(seconds: float) -> None:  # the first back-off: the server catches up with its backlog
        waits.append(seconds)
        server.setblocking(False)
        try:
            while True:
                server.accept()[0].close()
        except BlockingIOError:
            pass
        real_sleep(0)

    monkeypatch.setattr(time, "sleep", backlog_drains)
    try:
        with Connection(path, 5.0):
            pass
        assert waits and waits[0] < 0.1
    finally:
        for filler in fillers:
            filler.close()
        server.close()
        os.unlink(path)
        directory.rmdir()


def fill_backlog(path: str) -> list[socket.socket]:
    """Connect without being accepted until the kernel says EAGAIN: the listen backlog is full."""
    fillers: list[socket.socket] = []
    while True:
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        filler.setblocking(False)
        try:
            filler.connect(path)
        except BlockingIOError:
            filler.close()
            return fillers
        fillers.append(filler)


def test_memoryctl_gives_up_on_a_full_backlog_within_its_timeout() -> None:
    directory = short_tmp("bl")
    path = str(directory / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(0)
    fillers = fill_backlog(path)
    try:
        with pytest.raises(ClientError) as exc:
            Connection(path, 0.3)
        assert exc.value.name == "DAEMON_UNAVAILABLE" and "backlog" in exc.value.message
    finally:
        for filler in fillers:
            filler.close()
        server.close()
        os.unlink(path)
        directory.rmdir()


def test_an_existing_socket_directory_keeps_its_mode(daemon_factory: Any, home: Path) -> None:
    shared = home / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    d: Daemon = daemon_factory(start=False)
    d.socket = shared / "m.sock"
    d.start("--socket", str(d.socket))
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    fresh = home / "fresh" / "run"
    d2: Daemon = daemon_factory(start=False)
    d2.env["MEMORYD_HOME"] = str(home / "h2")
    d2.socket = fresh / "m.sock"
    d2.start("--socket", str(d2.socket))
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700  # one it creates is private


def test_a_world_writable_socket_directory_is_named_in_the_log(daemon_factory: Any, home: Path) -> None:
    shared = home / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    d: Daemon = daemon_factory(start=False)
    d.socket = shared / "m.sock"
    d.start("--socket", str(d.socket))
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777
    warned = wait_for(lambda: [json.loads(x) for x in d.log.read_text().splitlines() if "socket_dir" in x])
    assert warned[0]["directory"] == str(shared)
