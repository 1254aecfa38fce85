"""Hostile but plausible inputs that used to answer INTERNAL_ERROR, or MEMORY_WORKSPACE_LOCKED when nothing held the
lock, or left a traceback in the daemon log (issue 19 §2.10): each now gets a stable named error with a hint, or
simply works. The real daemon on a real socket; each case was reproduced against the code before its fix."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import Connection, RemoteError

from tests.conftest import Daemon, short_tmp, wait_for
from tests.test_rules import compiled, observe, rule

TIMEOUT = 10.0  # a hang fails through the client's timeout


def project(daemon: Daemon) -> tuple[Path, str]:
    root = short_tmp("ws")
    (root / "memory").mkdir()
    (root / "memory/MEMORY.md").write_text("# Memory\n\n- 串口超时 alpha notes\n")
    ws: str = daemon.call("workspace.add", {"path": str(root)}, timeout=TIMEOUT)["workspace_id"]
    return root, ws


def named(daemon: Daemon, method: str, params: dict[str, Any]) -> RemoteError:
    with pytest.raises(RemoteError) as info:
        daemon.call(method, params, timeout=TIMEOUT)
    error = info.value
    assert error.name not in ("INTERNAL_ERROR", "MEMORY_WORKSPACE_LOCKED"), (method, error.name, error.message)
    assert error.hint
    return error


def no_tracebacks(daemon: Daemon) -> None:
    daemon.call("ping", timeout=TIMEOUT)  # whatever a call started in the background has run by now
    log = daemon.log.read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 300 :][:3000]


# --- history.jsonl lines of the wrong shape ----------------------------------------------------------------------

CRAFTED = [
    {"op": "compile.apply", "run_id": "apply_bad1", "ts": "2026-01-01T00:00:00+00:00", "changes": "not a list"},
    {"op": "compile.apply", "run_id": "apply_bad2", "ts": "2026-01-01T00:00:00+00:00", "changes": [5, "x", None]},
    {
        "op": "compile.apply",
        "run_id": "apply_bad3",
        "ts": "2026-01-01T00:00:00+00:00",
        "changes": [{"path": "spec/memory/profiles/KX-200/uart-flow-control.yaml", "rules": [5, "uart-flow-control"]}],
    },
    {"op": 5, "run_id": ["x"], "ts": 10**400, "changes": []},
]


def test_history_lines_of_the_wrong_shape_are_skipped_and_reported(daemon: Daemon) -> None:
    root, ws = project(daemon)
    compiled(daemon, ws, rule(observe(daemon, ws)))
    with (root / "data/memory/history.jsonl").open("a") as f:
        for line in CRAFTED:
            f.write(json.dumps(line) + "\n")
    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"}, timeout=TIMEOUT)
    assert [h["op"] for h in shown["history"]] == ["compile.apply"]
    daemon.call("timeline", {"workspace": ws}, timeout=TIMEOUT)
    for run_id in ("apply_bad1", "apply_bad2", "apply_bad3"):
        assert named(daemon, "restore", {"workspace": ws, "run_id": run_id}).name == "MEMORY_RUN_NOT_FOUND"
    problems = daemon.call("validate", {"workspace": ws}, timeout=TIMEOUT)["reports"]
    found = [p["message"] for r in problems for p in r["problems"] if p["path"] == "data/memory/history.jsonl"]
    assert len(found) == len(CRAFTED), found
    no_tracebacks(daemon)


# --- a lock file nothing can hold -------------------------------------------------------------------------------

WRITES: list[tuple[str, dict[str, Any]]] = [
    ("remember", {"text": "a note"}),
    ("observe", {"kind": "log", "text": "evidence", "source": "pytest"}),
    ("compile.prepare", {}),
    ("forget", {"id": "ent_0123456789abcdef0123"}),
    ("restore", {"run_id": "forget_01M888YKYPXTBCR5SCJ4G580GT"}),
]


def _lock_is_a_directory(root: Path) -> None:
    (root / "memory/.memoryd.lock").unlink()
    (root / "memory/.memoryd.lock").mkdir()


def _lock_is_a_fifo(root: Path) -> None:
    (root / "memory/.memoryd.lock").unlink()
    os.mkfifo(root / "memory/.memoryd.lock")


def _memory_is_a_file(root: Path) -> None:
    shutil.rmtree(root / "memory")
    (root / "memory").write_text("not a directory\n")


@pytest.mark.parametrize(
    "spoil", [_lock_is_a_directory, _lock_is_a_fifo, _memory_is_a_file], ids=["directory", "fifo", "memory-file"]
)
def test_a_lock_file_nothing_can_hold_is_named_not_locked(daemon_factory: Any, spoil: Any) -> None:
    """A clone (or a slip) leaves something at memory/.memoryd.lock that cannot be locked: no daemon holds it, so
    MEMORY_WORKSPACE_LOCKED ("another memoryd writes this workspace", pid ?) would send the user hunting for one."""
    root = short_tmp("ws")
    (root / "memory").mkdir()
    daemon = daemon_factory(False)
    daemon.start()
    ws: str = daemon.call("workspace.add", {"path": str(root)}, timeout=TIMEOUT)["workspace_id"]
    daemon.stop()
    spoil(root)
    daemon.start()  # a fresh daemon: it holds nothing yet
    for method, params in WRITES:
        error = named(daemon, method, {"workspace": ws, **params})
        assert error.name == "MEMORY_WRITE_FAILED" and "lock" in error.message, (method, error.message)
        assert ".memoryd.lock" in error.hint
    assert daemon.call("search", {"workspace": ws, "query": "note"}, timeout=TIMEOUT)["hits"] == []  # reads answer
    # Put right, the workspace writes again.
    if (root / "memory").is_file():
        (root / "memory").unlink()
        (root / "memory").mkdir()
    elif (root / "memory/.memoryd.lock").is_dir():
        (root / "memory/.memoryd.lock").rmdir()
    else:
        (root / "memory/.memoryd.lock").unlink()
    daemon.call("remember", {"workspace": ws, "text": "串口超时 written again"}, timeout=TIMEOUT)


def test_a_deleted_workspace_directory_is_named_not_locked(daemon: Daemon) -> None:
    root, ws = project(daemon)
    daemon.stop()
    shutil.rmtree(root)
    daemon.start()
    for method, params in WRITES:
        error = named(daemon, method, {"workspace": ws, **params})
        assert error.name == "MEMORY_WORKSPACE_INVALID" and "gone" in error.message, (method, error.message)
        assert "workspace remove" in error.hint
    no_tracebacks(daemon)


# --- adding a registered workspace again ------------------------------------------------------------------------


def test_adding_a_registered_workspace_again_starts_no_second_watcher(daemon: Daemon) -> None:
    """`memoryctl init` run twice: the second add used to start a second watcher on the first one's cancel scope,
    which failed with a traceback in the log."""
    root, ws = project(daemon)
    for _ in range(3):
        assert daemon.call("workspace.add", {"path": str(root)}, timeout=TIMEOUT)["workspace_id"] == ws
    (root / "memory/2026-01-02.md").write_text("## 2026-01-02 10:00 — note\n- quokkafish by hand\n")
    wait_for(lambda: daemon.call("search", {"workspace": ws, "query": "quokkafish"}, timeout=TIMEOUT)["hits"])
    no_tracebacks(daemon)


# --- the daemon's own index file replaced ---------------------------------------------------------------------------


def test_status_answers_when_the_index_file_is_replaced_by_a_directory(daemon: Daemon) -> None:
    """`status` never fails as a whole (MEMORY_STATUS_FAILED is retired for that): an index file a read cannot
    open (here a directory at its path) is the workspace's `error`, not INTERNAL_ERROR."""
    _root, ws = project(daemon)
    assert daemon.call("search", {"workspace": ws, "query": "串口超时"}, timeout=TIMEOUT)["hits"]
    daemon.call("index", {"workspace": ws, "full": True}, timeout=TIMEOUT)  # a swap: every read connects anew
    index = daemon.home / "state/workspaces" / ws / "index.sqlite"
    index.unlink()
    index.mkdir()
    status = daemon.call("status", {"workspace": ws}, timeout=TIMEOUT)["workspaces"][0]
    assert status["error"] and "index file" in status["error"]


# --- many concurrent gets of a large file -------------------------------------------------------------------------


def test_many_concurrent_gets_of_a_large_file_all_answer(daemon: Daemon) -> None:
    """A hundred clients asking at once for 200 lines (~1.2 MB) of one file: each used to read and decode the whole
    file and build its answer at the same time (+383 MB), so that the replies together passed
    max_unsent_reply_bytes and most were answered MEMORY_BUSY. Now a few gets read at a time, decoding only their
    window: every client gets the right text (the memory figures are in bench/bench_wire_attacks.py)."""
    root, ws = project(daemon)
    line = ("串口超时 ERR_UART_TIMEOUT " * 300)[:3000] + "x" * 3000
    lines = [f"{n} {line}" for n in range(400)]
    (root / "memory/big.md").write_text("\r\n".join(lines) + "\r\n")  # CRLF: numbered as the index numbers them
    expected = "".join(f"{text}\n" for text in lines[100:300])
    clients = 100
    gate = threading.Barrier(clients)
    answers: list[Any] = []

    def one() -> None:
        with Connection(str(daemon.socket), 60.0) as conn:
            gate.wait()
            params = {"workspace": ws, "path": "memory/big.md", "from_line": 101, "lines": 200}
            try:
                answers.append(conn.call("get", params))
            except RemoteError as exc:
                answers.append(exc.name)

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a if isinstance(a, str) else "ok" for a in answers] == ["ok"] * clients
    for answer in answers:
        assert answer["text"] == expected and answer["lines"] == 200 and answer["total_lines"] == 400
