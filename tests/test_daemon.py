"""The real daemon on a real socket: admin methods, owner token, framing limits, concurrency, fds."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon, short_tmp, wait_for


def raw(daemon: Daemon, payload: bytes, timeout: float = 10.0) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(daemon.socket))
        s.sendall(payload)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_ping_and_status(daemon: Daemon) -> None:
    assert daemon.call("ping")["pong"] is True
    status = daemon.call("status")
    assert status["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert status["home"] == str(daemon.home)
    assert status["socket"] == str(daemon.socket)
    assert status["probes"]["fts5"] is True
    assert status["probes"]["load_extension"] is True
    assert status["probes"]["sqlite_version"].startswith("3.")
    assert status["workspace_count"] == 0


def test_socket_and_dir_permissions(daemon: Daemon) -> None:
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(daemon.socket).st_mode) == 0o600
    token = daemon.home / "config" / "owner.token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(daemon.owner_token()) == 64


def test_workspace_add_is_idempotent_and_creates_memory_only_now(daemon: Daemon) -> None:
    project = short_tmp("proj")
    assert not (project / "memory").exists()
    first = daemon.call("workspace.add", {"path": str(project)})
    assert first["workspace_id"].startswith("ws_") and len(first["workspace_id"]) == 15
    assert first["created"] is True
    assert (project / "memory").is_dir()
    again = daemon.call("workspace.add", {"path": str(project) + "/"})
    assert again["workspace_id"] == first["workspace_id"] and again["created"] is False
    import hashlib

    expected = "ws_" + hashlib.sha256(os.fsencode(os.path.realpath(project))).hexdigest()[:12]
    assert first["workspace_id"] == expected


def test_workspace_add_refuses_bad_paths(daemon: Daemon, tmp_path: Path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for path in ["relative/dir", str(tmp_path / "missing"), str(a_file), "/", "/tmp/\x00evil"]:
        with pytest.raises(RemoteError) as info:
            daemon.call("workspace.add", {"path": path})
        assert info.value.name == "MEMORY_WORKSPACE_INVALID", path
        assert info.value.hint


def test_owner_token_guards_list_and_remove(daemon: Daemon) -> None:
    project = short_tmp("proj")
    ws = daemon.call("workspace.add", {"path": str(project), "name": "项目一"})
    for params in ({}, {"owner_token": "wrong"}):
        with pytest.raises(RemoteError) as info:
            daemon.call("workspace.list", params)
        assert info.value.name == "MEMORY_FORBIDDEN"
        with pytest.raises(RemoteError):
            daemon.call("workspace.remove", {"workspace": ws["workspace_id"], **params})
    listed = daemon.call("workspace.list", {"owner_token": daemon.owner_token()})["workspaces"]
    assert [(w["workspace_id"], w["name"]) for w in listed] == [(ws["workspace_id"], "项目一")]
    (project / "memory" / "keep.md").write_text("# keep\n")
    removed = daemon.call("workspace.remove", {"workspace": str(project), "owner_token": daemon.owner_token()})
    assert removed == {"workspace_id": ws["workspace_id"], "removed": True}
    assert (project / "memory" / "keep.md").read_text() == "# keep\n"
    assert daemon.call("workspace.list", {"owner_token": daemon.owner_token()})["workspaces"] == []
    with pytest.raises(RemoteError) as info:
        daemon.call("workspace.remove", {"workspace": ws["workspace_id"], "owner_token": daemon.owner_token()})
    assert info.value.name == "MEMORY_WORKSPACE_NOT_FOUND"


def test_registry_survives_restart(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory()
    project = short_tmp("proj")
    ws = d.call("workspace.add", {"path": str(project)})
    assert d.stop() == 0
    d2 = daemon_factory()
    listed = d2.call("workspace.list", {"owner_token": d2.owner_token()})["workspaces"]
    assert [w["workspace_id"] for w in listed] == [ws["workspace_id"]]


def test_wrong_types_are_invalid_params(daemon: Daemon) -> None:
    for params in (
        {"path": 5},
        {"path": ["a"]},
        {"path": "/tmp", "name": 3},
        {"path": "/tmp", "bogus": 1},
        {},
    ):
        with pytest.raises(RemoteError) as info:
            daemon.call("workspace.add", params)
        assert info.value.name == "INVALID_PARAMS"
        assert info.value.data["errors"]


def test_malformed_lines_keep_the_connection(daemon: Daemon) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(daemon.socket))
        f = s.makefile("rwb")
        for line, code in [
            (b"{not json", -32700),
            (b'"just a string"', -32600),
            (b"\xff\xfe\x00", -32700),
            (b'{"jsonrpc":"2.0","method":"nope","id":1}', -32601),
        ]:
            f.write(line + b"\n")
            f.flush()
            assert json.loads(f.readline())["error"]["code"] == code
        f.write(b'\n\n{"jsonrpc":"2.0","method":"ping","id":"last"}\n')
        f.flush()
        assert json.loads(f.readline())["id"] == "last"


def test_huge_line_is_refused_and_others_keep_being_served(daemon_factory, home: Path) -> None:  # type: ignore[no-untyped-def]
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "memoryd.yaml").write_text("max_line_bytes: 65536\n")
    d = daemon_factory()
    with socket.socket(socket.AF_UNIX) as big, socket.socket(socket.AF_UNIX) as other:
        big.settimeout(10)
        other.settimeout(10)
        big.connect(str(d.socket))
        other.connect(str(d.socket))
        big.sendall(b'{"jsonrpc":"2.0","method":"ping","params":{"x":"' + b"a" * 200_000)
        reply = json.loads(big.makefile("rb").readline())
        assert reply["error"]["code"] == -32600 and reply["error"]["data"]["name"] == "REQUEST_TOO_LARGE"
        other.sendall(b'{"jsonrpc":"2.0","method":"ping","id":2}\n')
        assert json.loads(other.makefile("rb").readline())["result"]["pong"] is True
        # the rest of the long line is discarded; the connection then serves the next request
        big.sendall(b"a" * 100_000 + b'"}, "id": 1}\n{"jsonrpc":"2.0","method":"ping","id":3}\n')
        assert json.loads(big.makefile("rb").readline())["id"] == 3


def test_idle_client_is_closed_and_does_not_block_others(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory(False)
    d.env["MEMORYD_IDLE_TIMEOUT_S"] = "0.5"
    d.start()
    with socket.socket(socket.AF_UNIX) as idle:
        idle.connect(str(d.socket))
        idle.sendall(b'{"jsonrpc":"2.0",')  # half a request, then silence
        assert d.call("ping")["pong"] is True
        idle.settimeout(10)
        assert idle.recv(10) == b""  # closed by the daemon after the idle timeout


def test_many_concurrent_clients(daemon: Daemon) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for _ in range(50):
                assert daemon.call("ping")["pong"] is True
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_pipelined_requests_are_answered_in_order(daemon: Daemon) -> None:
    lines = b"".join(b'{"jsonrpc":"2.0","method":"ping","id":%d}\n' % i for i in range(100))
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(daemon.socket))
        s.sendall(lines)
        f = s.makefile("rb")
        assert [json.loads(f.readline())["id"] for _ in range(100)] == list(range(100))


def test_no_fd_leak_over_200_connections(daemon: Daemon) -> None:
    fd_dir = Path(f"/proc/{daemon.proc.pid}/fd")  # type: ignore[union-attr]
    if not fd_dir.exists():
        pytest.skip("needs /proc to count the daemon's file descriptors")
    daemon.call("ping")
    before = len(os.listdir(fd_dir))
    for i in range(200):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(daemon.socket))
            if i % 2:
                s.sendall(b'{"jsonrpc":"2.0","method":"ping","id":1}\n')
                s.makefile("rb").readline()
    wait_for(lambda: len(os.listdir(fd_dir)) <= before)  # closed connections' descriptors are released


def test_logs_carry_no_params(daemon: Daemon) -> None:
    project = short_tmp("proj")
    daemon.call("workspace.add", {"path": str(project), "name": "SECRET-NAME-中文"})
    with pytest.raises(RemoteError):
        daemon.call("workspace.add", {"path": "relative-SECRET-PATH"})
    daemon.stop()
    log = daemon.log.read_text(encoding="utf-8")
    assert "SECRET" not in log
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    requests = [e for e in events if e.get("event") == "request"]
    assert {e["method"] for e in requests} >= {"workspace.add", "ping"}
    assert all({"ms", "error", "request_id"} <= set(e) for e in requests)
    assert any(e["error"] == "MEMORY_WORKSPACE_INVALID" for e in requests)


def test_idle_timeout_never_cuts_a_request_short(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory(False)
    d.start()
    project = short_tmp("proj")
    (project / "memory").mkdir()
    for i in range(3000):
        (project / "memory" / f"n{i:05d}.md").write_text(f"## {i}\n- " + "words 串口 " * 80 + "\n")
    ws = d.call("workspace.add", {"path": str(project)})["workspace_id"]
    d.call("index", {"workspace": ws})
    took_ms = d.call("index", {"workspace": ws, "full": True}, timeout=120)["ms"]
    d.stop()
    # An idle timeout a quarter of what this machine needs for the request, whatever its speed.
    d.env["MEMORYD_IDLE_TIMEOUT_S"] = str(took_ms / 4 / 1000)
    d.start()
    answer = d.call("index", {"workspace": ws, "full": True}, timeout=120)
    report = answer["workspaces"][0]
    assert report["files"] == 3000 and report["rebuilt"] is True
    assert answer["ms"] > took_ms / 4  # it did outlive the idle timeout, and still got its answer


def test_max_connections_answers_the_rest_busy(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory(False)
    d.env["MEMORYD_MAX_CONNECTIONS"] = "2"
    d.start()
    held = [socket.socket(socket.AF_UNIX) for _ in range(2)]
    for s in held:
        s.connect(str(d.socket))
        s.sendall(b'{"jsonrpc":"2.0","method":"ping","id":1}\n')
        assert json.loads(s.makefile("rb").readline())["result"]["pong"] is True
    extra = socket.socket(socket.AF_UNIX)
    extra.settimeout(10)
    extra.connect(str(d.socket))
    extra.sendall(b'{"jsonrpc":"2.0","method":"ping","id":2}\n')
    stream = extra.makefile("rb")
    busy = json.loads(stream.readline())  # answered at once, not left waiting in the backlog
    assert busy["error"]["data"]["name"] == "MEMORY_BUSY" and busy["error"]["data"]["limit"] == 2
    assert stream.readline() == b""  # and closed
    extra.close()
    held[0].close()  # a slot frees up: a new client is served

    def served() -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(d.socket))
            s.sendall(b'{"jsonrpc":"2.0","method":"ping","id":3}\n')
            return "result" in json.loads(s.makefile("rb").readline())

    wait_for(served)
    held[1].close()
