"""One writer per workspace (docs/reference/workspaces.md): two real daemons with two homes and two sockets on one workspace."""

from __future__ import annotations

import hashlib
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon, daemon_env, short_tmp, wait_for

RESPONSE: dict[str, Any] = {"request_id": "cr_none", "rules": [], "candidates": [], "overrides": []}


@pytest.fixture
def pair() -> Iterator[tuple[Daemon, Daemon]]:
    homes = [short_tmp("ha"), short_tmp("hb")]
    daemons = [Daemon(h, daemon_env(h)) for h in homes]
    yield daemons[0], daemons[1]
    for d in daemons:
        if d.proc is not None:
            d.stop(signal.SIGKILL if d.proc.poll() is None else signal.SIGTERM)
    for h in homes:
        shutil.rmtree(h, ignore_errors=True)


@pytest.fixture
def project() -> Iterator[Path]:
    path = short_tmp("proj")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def snapshot(root: Path) -> dict[str, str]:
    """Every file of the workspace with a digest of its content."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def locked(daemon: Daemon, method: str, params: dict[str, Any]) -> RemoteError:
    with pytest.raises(RemoteError) as info:
        daemon.call(method, params)
    assert info.value.name == "MEMORY_WORKSPACE_LOCKED", (method, info.value.name, info.value.message)
    return info.value


def hits(daemon: Daemon, ws: str, query: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = daemon.call("search", {"workspace": ws, "query": query})["hits"]
    return result


def test_a_second_daemon_serves_the_workspace_read_only(pair: tuple[Daemon, Daemon], project: Path) -> None:
    a, b = pair
    a.start()
    ws = a.call("workspace.add", {"path": str(project)})["workspace_id"]
    a.call("remember", {"workspace": ws, "text": "串口超时 first note by A"})
    a.call("observe", {"workspace": ws, "kind": "log", "text": "evidence by A", "source": "test"})

    b.start()
    assert b.call("workspace.add", {"path": str(project)})["workspace_id"] == ws
    wait_for(lambda: hits(b, ws, "串口超时"))  # B reads what A wrote

    lock_a = a.call("status", {"workspace": ws})["workspaces"][0]["lock"]
    lock_b = b.call("status", {"workspace": ws})["workspaces"][0]["lock"]
    assert lock_a["held"] is True and lock_b["held"] is False
    assert lock_b["holder_pid"] == a.proc.pid and lock_b["holder_socket"] == str(a.socket)  # type: ignore[union-attr]

    before = snapshot(project)
    error = locked(b, "remember", {"workspace": ws, "text": "note by B"})
    assert error.data["holder_pid"] == a.proc.pid  # type: ignore[union-attr]
    assert error.data["holder_socket"] == str(a.socket)
    locked(b, "observe", {"workspace": ws, "kind": "log", "text": "evidence by B", "source": "test"})
    locked(b, "compile.prepare", {"workspace": ws})
    locked(b, "compile.apply", {"workspace": ws, "response": RESPONSE})
    locked(b, "candidates.promote", {"workspace": ws, "rule_id": "some-rule"})
    locked(b, "candidates.reject", {"workspace": ws, "rule_id": "some-rule"})
    # What writes nothing still works, and B's index is its own: a rebuild touches no workspace file.
    assert b.call("remember", {"workspace": ws, "text": "planned", "dry_run": True})["dry_run"] is True
    assert b.call("index", {"workspace": ws, "full": True})["workspaces"][0]["rebuilt"] is True
    assert hits(b, ws, "串口超时") and hits(a, ws, "串口超时")
    assert snapshot(project) == before

    # A still writes, and B sees it.
    a.call("remember", {"workspace": ws, "text": "second note ERR_UART_0x3F"})
    wait_for(lambda: hits(b, ws, "ERR_UART_0x3F"))


def test_the_lock_passes_to_the_other_daemon_when_the_holder_dies(pair: tuple[Daemon, Daemon], project: Path) -> None:
    a, b = pair
    a.start()
    ws = a.call("workspace.add", {"path": str(project)})["workspace_id"]
    b.start()
    b.call("workspace.add", {"path": str(project)})
    locked(b, "remember", {"workspace": ws, "text": "too early"})

    a.stop(signal.SIGKILL)  # no clean shutdown: the kernel releases the flock with the process
    written = b.call("remember", {"workspace": ws, "text": "B took over 接管"})
    assert "B took over 接管" in (project / written["path"]).read_text()
    lock_b = b.call("status", {"workspace": ws})["workspaces"][0]["lock"]
    assert lock_b["held"] is True and lock_b["holder_pid"] == b.proc.pid  # type: ignore[union-attr]

    a.start()  # A comes back second: now A is the read-only one
    error = locked(a, "remember", {"workspace": ws, "text": "A again"})
    assert error.data["holder_pid"] == b.proc.pid  # type: ignore[union-attr]
    assert a.call("status", {"workspace": ws})["workspaces"][0]["lock"]["held"] is False


def test_the_lock_file_is_invisible_to_search_get_and_validate(pair: tuple[Daemon, Daemon], project: Path) -> None:
    a, _ = pair
    a.start()
    ws = a.call("workspace.add", {"path": str(project)})["workspace_id"]
    assert (project / "memory" / ".memoryd.lock").is_file()
    a.call("remember", {"workspace": ws, "text": "a note"})
    report = a.call("validate", {"workspace": ws})["reports"][0]
    assert not [p for p in report["problems"] if ".memoryd.lock" in p["path"]]
    assert not [h for h in hits(a, ws, "pid socket since") if "lock" in h["path"]]
    with pytest.raises(RemoteError):
        a.call("get", {"workspace": ws, "path": "memory/.memoryd.lock"})


def test_only_the_holder_recovers_interrupted_changes(pair: tuple[Daemon, Daemon], project: Path) -> None:
    """An intent journal belongs to the daemon that holds the lock (it may be mid-change): the read-only daemon
    leaves it alone at start, and finishes it when it takes the lock over."""
    a, b = pair
    a.start()
    ws = a.call("workspace.add", {"path": str(project)})["workspace_id"]
    wait_for(lambda: a.call("status", {"workspace": ws})["workspaces"][0].get("rules"))  # A's start-up is done
    journal = project / "data" / "memory" / "journal" / "run_interrupted.json"
    journal.parent.mkdir(parents=True)
    history = {"ts": "2026-01-01T00:00:00+00:00", "op": "compile.apply", "run_id": "run_interrupted", "changes": []}
    writes = [{"path": "memory/recovered.md", "content": "## Recovered\n- 恢复\n"}]
    journal.write_bytes(orjson.dumps({"run_id": "run_interrupted", "history": history, "writes": writes}))

    b.start()
    b.call("workspace.add", {"path": str(project)})
    wait_for(lambda: b.call("status", {"workspace": ws})["workspaces"][0].get("rules"))
    assert journal.exists() and not (project / "memory" / "recovered.md").exists()

    a.stop(signal.SIGKILL)
    b.call("remember", {"workspace": ws, "text": "first write after the takeover"})
    assert not journal.exists()
    assert (project / "memory" / "recovered.md").read_text() == "## Recovered\n- 恢复\n"
    assert "run_interrupted" in b.call("status", {"workspace": ws})["workspaces"][0]["rules"]["recovered"]
