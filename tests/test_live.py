"""Live watching through the real daemon: edits by editors, shells and git show up in search within a second
(the waits below are generous upper bounds, not timing targets; bench/ measures the latency)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import Daemon


def hits(daemon: Daemon, ws: str, query: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = daemon.call("search", {"workspace": ws, "query": query})["hits"]
    return result


def eventually(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("not reflected in search in time")


def test_editor_rename_append_and_delete(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    memory = path / "memory"
    target = memory / "MEMORY.md"
    tmp = memory / ".MEMORY.md.swp.tmp"
    tmp.write_text("## Devices\n- bench KQZALPHA needs port 2\n")
    os.replace(tmp, target)  # how editors save: write a temp file, rename over
    eventually(lambda: hits(daemon, ws, "KQZALPHA"))
    with open(target, "a") as f:  # echo >>
        f.write("- probe KQZBETA is flaky\n")
    eventually(lambda: hits(daemon, ws, "KQZBETA"))
    target.unlink()
    eventually(lambda: not hits(daemon, ws, "KQZALPHA"))


def test_new_subdirectory_and_deleted_root(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    topics = path / "memory" / "topics" / "2025"  # (memory/archive/ is searched only when asked: test_lifecycle)
    topics.mkdir(parents=True)
    (topics / "2025-01-01.md").write_text("## 2025-01-01\n- filed KQZGAMMA\n")
    eventually(lambda: hits(daemon, ws, "KQZGAMMA"))
    shutil.rmtree(path / "memory")
    eventually(lambda: not hits(daemon, ws, "KQZGAMMA"))
    (path / "memory").mkdir()
    (path / "memory" / "MEMORY.md").write_text("## Back\n- recreated KQZDELTA\n")
    eventually(lambda: hits(daemon, ws, "KQZDELTA"))


def test_git_checkout_swaps_files(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    for i in range(5):
        (path / "memory" / f"2026-01-0{i + 1}.md").write_text(f"## 2026-01-0{i + 1}\n- main branch KQZMAIN{i}\n")
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "main"], cwd=path, check=True)
    subprocess.run([*git, "checkout", "-qb", "topic"], cwd=path, check=True)
    for i in range(5):
        (path / "memory" / f"2026-01-0{i + 1}.md").write_text(f"## 2026-01-0{i + 1}\n- topic branch KQZTOPIC{i}\n")
    subprocess.run([*git, "commit", "-qam", "topic"], cwd=path, check=True)
    eventually(lambda: all(hits(daemon, ws, f"KQZTOPIC{i}") for i in range(5)))
    subprocess.run([*git, "checkout", "-q", "main"], cwd=path, check=True)
    eventually(lambda: all(hits(daemon, ws, f"KQZMAIN{i}") for i in range(5)))
    eventually(lambda: not any(hits(daemon, ws, f"KQZTOPIC{i}") for i in range(5)))


def test_search_says_when_the_index_is_behind(daemon_factory: Any) -> None:
    d = daemon_factory(False)
    d.env["MEMORYD_WATCH"] = "false"  # no watcher: only the reconcile/explicit index catch up
    d.start()
    from tests.conftest import short_tmp

    path = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(path)})["workspace_id"]
    d.call("remember", {"workspace": ws, "text": "first"})
    (path / "memory" / "MEMORY.md").write_text("## Later\n- edited by hand KQZLATE\n")
    status = d.call("status", {"workspace": ws})["workspaces"][0]
    assert status["dirty_files"] == ["memory/MEMORY.md"]
    assert status["recommended"] == "memoryctl index"
    assert not hits(d, ws, "KQZLATE")
    d.call("index", {"workspace": ws})
    assert hits(d, ws, "KQZLATE")
