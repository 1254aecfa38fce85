"""Memory travels by git: two clones edit the same sections of MEMORY.md and the same daily file; with `memoryctl
init --git` a pull merges them with no conflict and every bullet there (a rebase too), where plain git conflicts;
and the daemon, watching the clone, finds the merged bullets by search once git has written them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import Daemon, short_tmp, wait_for
from tests.test_merge_driver import git, git_env, memoryctl

MEMORY = """# Memory

## Preferences
- 用中文回答
- use pnpm, never npm

## Project
- KX-200 talks 115200 baud
- the old flashing tool is gone
"""
DAILY = "## 2026-03-02\n\n## 2026-03-02 09:00 — note\n- started the UART work\n"


def _clone(origin: Path, name: str, env: dict[str, str]) -> Path:
    repo = short_tmp(name)
    git(repo.parent, "clone", "-q", str(origin), str(repo), env=env)
    git(repo, "config", "user.name", f"Engineer {name}", env=env)
    git(repo, "config", "user.email", f"{name}@example.com", env=env)
    return repo


def _edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _append(repo: Path, rel: str, text: str) -> None:
    with open(repo / rel, "a") as f:
        f.write(text)


def _commit(repo: Path, message: str, env: dict[str, str]) -> None:
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", message, env=env)


def _found(daemon: Daemon, workspace: str, query: str, path: str) -> Any:
    hits = daemon.call("search", {"workspace": workspace, "query": query, "limit": 5, "mode": "bm25"})["hits"]
    return any(hit["path"] == path for hit in hits)


def test_two_clones_merge_memory_by_section_and_the_daemon_finds_the_result(daemon: Daemon) -> None:
    env = git_env(daemon.env)
    origin = short_tmp("origin") / "memory.git"
    git(origin.parent, "init", "-q", "--bare", "-b", "main", str(origin), env=env)
    alice = _clone(origin, "alice", env)
    (alice / "memory").mkdir()
    (alice / "memory" / "MEMORY.md").write_text(MEMORY)
    (alice / "memory" / "2026-03-02.md").write_text(DAILY)
    init = memoryctl("--json", "init", "--git", cwd=alice, env=env)
    assert init.returncode == 0, init.stderr
    _commit(alice, "memory, merged by section", env)
    git(alice, "push", "-q", "origin", "main", env=env)
    bob = _clone(origin, "bob", env)
    bob_ws = daemon.call("workspace.add", {"path": str(bob)})["workspace_id"]

    # both edit the same sections of MEMORY.md and append to the same daily file
    _edit(alice, "memory/MEMORY.md", "- use pnpm, never npm\n", "- use pnpm, never npm\n- 缩进用两个空格 INDENT_TWO\n")
    _append(alice, "memory/2026-03-02.md", "\n## 2026-03-02 10:41 — decision\n- 串口超时改为重试三次 RETRY_THREE\n")
    _commit(alice, "alice remembers", env)
    git(alice, "push", "-q", "origin", "main", env=env)
    _edit(bob, "memory/MEMORY.md", "- use pnpm, never npm\n", "- use pnpm, never npm\n- tabs in Makefiles TABS_MAKE\n")
    _edit(bob, "memory/MEMORY.md", "- the old flashing tool is gone\n", "")  # a deliberate forget
    _append(bob, "memory/2026-03-02.md", "\n## 2026-03-02 11:05 — event\n- flashed bench-3 FLASHED_B3\n")
    _commit(bob, "bob remembers", env)

    # without the driver in bob's clone, git conflicts (the attribute names a driver bob has not registered)
    plain = git(bob, "pull", "--no-rebase", "-q", "origin", "main", env=env, check=False)
    assert plain.returncode != 0 and "CONFLICT" in plain.stdout + plain.stderr
    git(bob, "merge", "--abort", env=env)
    assert memoryctl("init", "--git", cwd=bob, env=env).returncode == 0

    pulled = git(bob, "pull", "--no-rebase", "-q", "origin", "main", env=env, check=False)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert git(bob, "status", "--porcelain", env=env).stdout == ""
    memory = (bob / "memory" / "MEMORY.md").read_text()
    daily = (bob / "memory" / "2026-03-02.md").read_text()
    assert "<<<<<<<" not in memory + daily and ">>>>>>>" not in memory + daily
    assert "- use pnpm, never npm\n- tabs in Makefiles TABS_MAKE\n- 缩进用两个空格 INDENT_TWO\n" in memory
    assert "- 用中文回答\n" in memory and "KX-200" in memory and "flashing tool" not in memory
    assert daily == DAILY + (
        "\n## 2026-03-02 11:05 — event\n- flashed bench-3 FLASHED_B3\n"
        "\n## 2026-03-02 10:41 — decision\n- 串口超时改为重试三次 RETRY_THREE\n"
    )
    # the daemon watching bob's clone saw git's writes: alice's bullets are found there
    wait_for(lambda: _found(daemon, bob_ws, "INDENT_TWO", "memory/MEMORY.md"))
    wait_for(lambda: _found(daemon, bob_ws, "RETRY_THREE", "memory/2026-03-02.md"))
    git(bob, "push", "-q", "origin", "main", env=env)

    # a rebase: both change the same section again; bob replays his commit on alice's
    git(alice, "pull", "-q", "--no-rebase", "origin", "main", env=env)
    _edit(alice, "memory/MEMORY.md", "- KX-200 talks 115200 baud\n", "- KX-200 talks 921600 baud FAST_BAUD\n")
    _commit(alice, "alice: faster baud", env)
    git(alice, "push", "-q", "origin", "main", env=env)
    _edit(
        bob,
        "memory/MEMORY.md",
        "- KX-200 talks 115200 baud\n",
        "- KX-200 talks 115200 baud\n- 板子要先复位 RESET_FIRST\n",
    )
    _commit(bob, "bob: reset first", env)
    rebased = git(bob, "pull", "--rebase", "-q", "origin", "main", env=env, check=False)
    assert rebased.returncode == 0, rebased.stdout + rebased.stderr
    memory = (bob / "memory" / "MEMORY.md").read_text()
    assert "<<<<<<<" not in memory
    assert "- KX-200 talks 921600 baud FAST_BAUD\n- 板子要先复位 RESET_FIRST\n" in memory  # the edit, and the add
    assert "115200" not in memory  # bob left that line as it was; alice changed it: hers wins, no duplicate
    assert git(bob, "log", "--format=%s", "-2", env=env).stdout.split("\n")[:2] == [
        "bob: reset first",
        "alice: faster baud",
    ]
    wait_for(lambda: _found(daemon, bob_ws, "FAST_BAUD", "memory/MEMORY.md"))

    # alice's clone, registered with the daemon, fast-forwards: a checkout's writes are seen too
    alice_ws = daemon.call("workspace.add", {"path": str(alice)})["workspace_id"]
    git(bob, "push", "-q", "origin", "main", env=env)
    git(alice, "pull", "-q", "--no-rebase", "origin", "main", env=env)
    wait_for(lambda: _found(daemon, alice_ws, "RESET_FIRST", "memory/MEMORY.md"))
    wait_for(lambda: _found(daemon, alice_ws, "FLASHED_B3", "memory/2026-03-02.md"))
    git(alice, "checkout", "-q", "HEAD~1", env=env)  # back before bob's commit: the bullet leaves the index
    wait_for(lambda: not _found(daemon, alice_ws, "RESET_FIRST", "memory/MEMORY.md"))
