"""A cloned repository is untrusted input (docs/reference/threat-model.md): nothing it ships under data/memory/ or runs/ — intent
journals, history lines, symlinked sidecars and directories, FIFOs, huge sparse files — can make the daemon write,
delete or read outside the workspace, or hang it. Each case was reproduced against the code before the fix."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import RemoteError

from memoryd import fsio
from tests.conftest import Daemon, short_tmp
from tests.test_rules import compiled, observe, prepare, resolve, rule

TIMEOUT = 10.0  # a hang fails through the client's timeout


def clone(**files: str | bytes) -> Path:
    """A project as `git clone` would leave it: memory/ and whatever files the repository carries."""
    root = short_tmp("clone")
    (root / "memory").mkdir()
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def journal(run_id: str, path: str, content: str = "pwned\n") -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "history": {"op": "compile_apply", "run_id": run_id, "changes": []},
            "writes": [{"path": path, "content": content}],
        }
    )


def add(daemon: Daemon, root: Path) -> str:
    ws: str = daemon.call("workspace.add", {"path": str(root)}, timeout=TIMEOUT)["workspace_id"]
    return ws


def resolve_answers(daemon: Daemon, ws: str) -> None:
    """A journaled change and a rules read both answer (recovery runs before them under the workspace lock)."""
    observe(daemon, ws)
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}
    compiled(daemon, ws, rule(observe(daemon, ws)))
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "rts_cts"


# --- intent journals -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_a_journal_record_cannot_write_outside_the_workspace(daemon: Daemon, kind: str) -> None:
    outside = short_tmp("outside")
    victim = outside / "victim.txt"
    root = clone()
    path = "../" * (len(root.parts) + 2) + str(victim).lstrip("/") if kind == "relative" else str(victim)
    (root / "data/memory/journal").mkdir(parents=True)
    (root / "data/memory/journal/cr_evil.json").write_text(journal("cr_evil", path))
    ws = add(daemon, root)
    resolve_answers(daemon, ws)
    assert not victim.exists()
    assert (root / "data/memory/journal/cr_evil.json.unreadable").exists()  # set aside for a person


def test_a_journal_record_cannot_write_through_a_symlinked_directory(daemon: Daemon) -> None:
    outside = short_tmp("outside")
    root = clone()
    (root / "memory/notes").symlink_to(outside)
    (root / "data/memory/journal").mkdir(parents=True)
    (root / "data/memory/journal/cr_evil.json").write_text(journal("cr_evil", "memory/notes/x.md"))
    ws = add(daemon, root)
    resolve_answers(daemon, ws)
    assert list(outside.iterdir()) == []


def test_a_journal_record_cannot_name_the_daemons_bookkeeping(daemon: Daemon) -> None:
    root = clone()
    (root / "data/memory/journal").mkdir(parents=True)
    (root / "data/memory/journal/cr_evil.json").write_text(journal("cr_evil", "data/memory/history.jsonl", "{}\n"))
    ws = add(daemon, root)
    resolve_answers(daemon, ws)
    assert not (root / "data/memory/history.jsonl").read_text().startswith("{}\n")


def test_a_fifo_journal_record_never_blocks_the_workspace(daemon: Daemon) -> None:
    root = clone()
    (root / "data/memory/journal").mkdir(parents=True)
    os.mkfifo(root / "data/memory/journal/cr_fifo.json")
    ws = add(daemon, root)
    resolve_answers(daemon, ws)
    context = daemon.call("context", {"workspace": ws, "model_id": "KX-200", "fw_version": "1.2.3"}, timeout=TIMEOUT)
    assert "rts_cts" in context["stable"]["text"]


def test_a_huge_sparse_journal_record_is_not_read(daemon: Daemon) -> None:
    root = clone()
    (root / "data/memory/journal").mkdir(parents=True)
    with open(root / "data/memory/journal/cr_big.json", "wb") as f:
        f.truncate(1 << 30)  # 1 GB of nothing: read whole, it took 2.1 GB and hung the workspace
    ws = add(daemon, root)
    resolve_answers(daemon, ws)
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text().splitlines()
    rss_kb = int(next(line for line in status if line.startswith("VmHWM")).split()[1])
    assert rss_kb < 900_000, f"peak RSS {rss_kb} kB: the record was read"


def test_a_symlinked_journal_directory_is_not_replayed(daemon: Daemon) -> None:
    outside = short_tmp("outside")
    (outside / "cr_evil.json").write_text(journal("cr_evil", "memory/evil.md", "injected into prompts\n"))
    root = clone()
    (root / "data/memory").mkdir(parents=True)
    (root / "data/memory/journal").symlink_to(outside)
    ws = add(daemon, root)
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}
    with pytest.raises(RemoteError) as info:  # a journaled change cannot write its record through the link
        compiled(daemon, ws, rule(observe(daemon, ws)))
    assert "symlink" in str(info.value)
    assert not (root / "memory/evil.md").exists()
    assert (outside / "cr_evil.json").exists()  # nothing of the other directory was renamed or removed


# --- history lines and restore ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backup",
    ["/etc/passwd", "data/memory/backups/../../../../../etc/passwd", "data/memory/backups/x/../../../secret.txt"],
)
def test_a_crafted_history_line_cannot_make_restore_copy_a_file_in(daemon: Daemon, backup: str) -> None:
    secret = b"the secret\n"
    root = clone(**{"secret.txt": secret})
    (root / "data/memory").mkdir(parents=True)
    line = {
        "op": "compile_apply",
        "run_id": "cr_evil",
        "changes": [{"path": "memory/stolen.md", "sha_after": None, "sha_before": None, "backup": backup}],
    }
    (root / "data/memory/history.jsonl").write_text(json.dumps(line) + "\n")
    ws = add(daemon, root)
    with pytest.raises(RemoteError) as info:
        daemon.call("restore", {"workspace": ws, "run_id": "cr_evil"}, timeout=TIMEOUT)
    assert info.value.name in ("MEMORY_PATH_TRAVERSAL", "MEMORY_FILE_REFUSED", "MEMORY_CONFLICT")
    assert not (root / "memory/stolen.md").exists()


@pytest.mark.parametrize("path", ["../outside.md", "/tmp/x.md", ".git/config", "data/memory/journal/x.json"])
def test_a_crafted_history_line_cannot_make_restore_write_elsewhere(daemon: Daemon, path: str) -> None:
    root = clone()
    (root / "data/memory/backups/cr_evil").mkdir(parents=True)
    (root / "data/memory/backups/cr_evil/x").write_text("content\n")
    line = {
        "op": "compile_apply",
        "run_id": "cr_evil",
        "changes": [{"path": path, "sha_after": None, "backup": "data/memory/backups/cr_evil/x"}],
    }
    (root / "data/memory/history.jsonl").write_text(json.dumps(line) + "\n")
    ws = add(daemon, root)
    with pytest.raises(RemoteError) as info:
        daemon.call("restore", {"workspace": ws, "run_id": "cr_evil"}, timeout=TIMEOUT)
    assert info.value.name == "MEMORY_PATH_TRAVERSAL"
    assert not (root.parent / "outside.md").exists() and not (root / ".git").exists()
    assert not (root / "data/memory/journal/x.json").exists()


# --- symlinks under data/memory/ and runs/ ---------------------------------------------------------------------


def test_a_symlinked_items_sidecar_is_not_appended_to(daemon: Daemon) -> None:
    outside = short_tmp("outside")
    (outside / "items.jsonl").write_text("")
    root = clone()
    (root / "data/memory").mkdir(parents=True)
    (root / "data/memory/items.jsonl").symlink_to(outside / "items.jsonl")
    ws = add(daemon, root)
    daemon.call("remember", {"workspace": ws, "text": "a decision"}, timeout=TIMEOUT)  # the note is written
    assert (outside / "items.jsonl").read_text() == ""


@pytest.mark.parametrize("link", ["data/memory/compile", "data/memory/backups", "data/memory"])
def test_symlinked_compile_and_backup_directories_receive_nothing(daemon: Daemon, link: str) -> None:
    outside = short_tmp("outside")
    root = clone()
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(outside)
    ws = add(daemon, root)
    with pytest.raises(RemoteError):  # one of them needs the linked directory, and is refused
        compiled(daemon, ws, rule(observe(daemon, ws)))
        compiled(daemon, ws, rule(observe(daemon, ws, "again"), priority=20))  # backs the first up
        remembered = daemon.call("remember", {"workspace": ws, "text": "x"})
        daemon.call("forget", {"workspace": ws, "id": remembered["id"]})
    assert [p for p in outside.rglob("*")] == []


def test_another_workspaces_evidence_linked_into_runs_is_not_read(daemon: Daemon) -> None:
    b_root = clone()
    b_ws = add(daemon, b_root)
    observe(daemon, b_ws, "B's secret evidence", run_id="run-b")
    a_root = clone()
    (a_root / "runs/x").mkdir(parents=True)
    (a_root / "runs/x/observations.jsonl").symlink_to(b_root / "runs/run-b/observations.jsonl")
    (a_root / "runs/y").symlink_to(b_root / "runs/run-b")
    a_ws = add(daemon, a_root)
    observe(daemon, a_ws, "A's own evidence")
    request = prepare(daemon, a_ws)
    assert [o["text"] for o in request["request"]["observations"]] == ["A's own evidence"]
    timeline: Any = daemon.call("timeline", {"workspace": a_ws}, timeout=TIMEOUT)
    assert "B's secret" not in json.dumps(timeline)


# --- fsio itself -----------------------------------------------------------------------------------------------


def test_fsio_refuses_symlinks_on_the_way_and_at_the_end(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (root / "data/memory").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_bytes(b"secret")
    (root / "data/memory/dir").symlink_to(outside)
    (root / "data/memory/file").symlink_to(outside / "f")
    for path in (root / "data/memory/dir/f", root / "data/memory/file"):
        with pytest.raises(fsio.SymlinkRefused):
            fsio.read_regular(path, 100, root=root)
        with pytest.raises(fsio.NotRegularFile):
            fsio.atomic_write(path, b"x", root=root)
        with pytest.raises(fsio.NotRegularFile):
            fsio.append_line(path, b"x", root=root)
    with pytest.raises(fsio.SymlinkRefused):
        fsio.remove_tree(root / "data/memory/dir", root=root)
    assert (outside / "f").read_bytes() == b"secret"
    assert fsio.read_regular(outside / "f", 100) == b"secret"  # the daemon's own paths (no root) follow links


@pytest.mark.parametrize(
    "rel", ["", "/etc/x", "../x", "memory/../../x", "memory/./x", "memory//x", "memory\\x", "memory/\x00", ".git/x", 7]
)
def test_recorded_paths_are_checked_before_use(tmp_path: Path, rel: object) -> None:
    with pytest.raises(Exception) as info:
        fsio.member(tmp_path, rel)
    assert getattr(info.value, "name", None) == "MEMORY_PATH_TRAVERSAL"


def test_temp_files_a_killed_write_left_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".MEMORY.md.0123456789ab.tmp"
    fresh = tmp_path / ".other.md.ba9876543210.tmp"
    keep = tmp_path / "notes.tmp"  # not ours: no leading dot
    for path in (stale, fresh, keep):
        path.write_bytes(b"x")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    os.utime(keep, (old, old))
    assert fsio.remove_stale_temps(tmp_path, 3600, root=None) == 1
    assert not stale.exists() and fresh.exists() and keep.exists()


def test_temp_files_a_killed_daemon_left_in_the_workspace_are_swept(daemon: Daemon) -> None:
    root = clone()
    stale = [root / "memory/.MEMORY.md.00112233aabb.tmp", root / "data/memory/.forgotten.json.00112233aabb.tmp"]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    ws = add(daemon, root)
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}  # the workspace's recovery has run
    assert [p for p in stale if p.exists()] == []


@pytest.mark.parametrize(
    "state",
    [
        '{"requests": {"../../../../../../tmp/x": {"status": "outstanding", "batch_id": "b", "index": 1, "of": 1, '
        '"filters": {}, "observation_ids": [], "created_at": "2026-01-01T00:00:00"}}}',
        '["not", "a", "state"]',
        '{"requests": {"cr_1": "outstanding"}}',
    ],
)
def test_a_crafted_compile_state_is_refused_by_name(daemon: Daemon, state: str) -> None:
    root = clone(**{"data/memory/compile/state.json": state})
    ws = add(daemon, root)
    observe(daemon, ws)
    with pytest.raises(RemoteError) as info:
        prepare(daemon, ws)
    assert info.value.name == "MEMORY_FILE_REFUSED" and "state.json" in str(info.value) and info.value.hint
    assert (root / "data/memory/compile/state.json").read_text() == state  # kept for a person
