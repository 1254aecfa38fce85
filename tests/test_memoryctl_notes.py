"""memoryctl verbs for the Markdown memory: JSON-first, readable otherwise."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, short_tmp


def test_remember_search_get_from_the_project_dir(daemon: Daemon) -> None:
    project = short_tmp("proj")
    assert daemon.memoryctl("init", cwd=project).returncode == 0
    nested = project / "src"
    nested.mkdir()
    out = daemon.memoryctl(
        "remember",
        "串口超时 after ERR_UART_TIMEOUT_0x3F",
        "--type",
        "decision",
        "--reason",
        "flow control off",
        cwd=nested,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("remembered memory/") and "(3 lines, id ent_" in out.stdout
    piped = daemon.memoryctl("--json", "remember", "-", cwd=project, input="from stdin 标准输入\n")
    assert json.loads(piped.stdout)["ok"] is True
    human = daemon.memoryctl("search", "串口超时", cwd=project)
    assert human.returncode == 0
    first = human.stdout.splitlines()[0]
    assert first.startswith("memory/") and ":4  ## " in first and "— decision" in first  # the bullet's line
    assert "    - **串口超时** after ERR_UART_TIMEOUT_0x3F" in human.stdout
    data = json.loads(daemon.memoryctl("--json", "search", "ERR_UART_TIMEOUT_0x3F", cwd=project).stdout)["data"]
    hit = data["hits"][0]
    got = daemon.memoryctl("get", hit["path"], "--from", str(hit["start_line"]), "--lines", "1", cwd=project)
    assert got.stdout.splitlines() == ["- 串口超时 after ERR_UART_TIMEOUT_0x3F"]
    none = daemon.memoryctl("search", "zzzznothing", cwd=project)
    assert none.returncode == 0 and "no matches" in none.stdout
    dry = daemon.memoryctl("remember", "maybe", "--dry-run", cwd=project)
    assert dry.stdout.startswith("would write ")


def test_outside_a_workspace(daemon: Daemon) -> None:
    elsewhere = short_tmp("none")
    out = daemon.memoryctl("--json", "search", "x", cwd=elsewhere)
    assert out.returncode == 1 and json.loads(out.stdout)["error"]["name"] == "MEMORY_WORKSPACE_NOT_FOUND"
    status = daemon.memoryctl("status", cwd=elsewhere)
    assert status.returncode == 0 and "memoryctl init" in status.stdout


def test_index_validate_status_and_owner_view(daemon: Daemon) -> None:
    a, b = short_tmp("pa"), short_tmp("pb")
    for p in (a, b):
        daemon.memoryctl("init", cwd=p)
        daemon.memoryctl("remember", f"owner view KQZOWNER in {p.name}", cwd=p)
    index = daemon.memoryctl("--json", "index", "--full", cwd=a)
    report = json.loads(index.stdout)["data"]["workspaces"][0]
    assert report["rebuilt"] is True and report["files"] == 1
    assert "ok" in daemon.memoryctl("validate", cwd=a).stdout
    status = daemon.memoryctl("status", cwd=a).stdout
    assert "files 1, chunks" in status and "segments 1" in status and "watching yes" in status
    everything = daemon.memoryctl("search", "--all", "KQZOWNER", cwd=a)
    assert everything.stdout.count("KQZOWNER") == 2 and f"[{a.name}] memory/" in everything.stdout
    all_status = json.loads(daemon.memoryctl("--json", "status", "--all").stdout)["data"]
    assert len(all_status["workspaces"]) == 2


def test_index_on_a_tty_draws_progress_without_breaking(daemon: Daemon) -> None:
    project = short_tmp("proj")
    (project / "memory").mkdir()
    for i in range(300):
        (project / "memory" / f"2025-{1 + i // 28:02d}-{1 + i % 28:02d}.md").write_text(
            f"## 2025-01-01\n\n## 2025-01-01 10:00 — note\n- entry {i} " + "text " * 400 + "\n"
        )
    daemon.memoryctl("init", cwd=project)
    pid, fd = pty.fork()
    if pid == 0:  # child: stderr is the pty
        os.chdir(project)
        os.execve(sys.executable, [sys.executable, "-m", "memoryctl", "index", "--full"], daemon.env)
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert b"300 files, 600 chunks (300 indexed, 0 removed, 0 unchanged, rebuilt)" in output


def test_help_lists_every_verb() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memoryctl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent / "client",
    )
    listed = re.findall(r"^    (\w[\w-]*)  ", out.stdout.split("positional arguments:")[1].split("options:")[0], re.M)
    assert listed == list(
        (
            "ping",
            "status",
            "workspace",
            "init",
            "remember",
            "search",
            "get",
            "index",
            "validate",
            "context",
            "mcp",
            "ui",
            "install",
            "forget",
            "restore",
            "archive",
            "ttl",
            "answer",
            "observe",
            "compile",
            "consolidate",
            "compact",
            "resolve",
            "rules",
            "timeline",
            "candidates",
            "hook",
            "audit",
            "merge-file",
        )
    )  # every verb, each once, in this order


def test_help_verb_shows_that_verbs_help(daemon_factory: Any) -> None:
    offline = daemon_factory(False)
    for words, shown in ((("help", "search"), "memoryctl search"), (("help", "compile", "apply"), "--in FILE")):
        out = offline.memoryctl(*words)
        assert out.returncode == 0 and shown in out.stdout, (words, out.stdout, out.stderr)
    assert offline.memoryctl("help").returncode == 0
    wrong = offline.memoryctl("help", "serch")
    assert wrong.returncode == 2 and "did you mean 'search'" in wrong.stderr


def _memoryctl_env(daemon: Daemon, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryctl", *args],
        env={**daemon.env, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_default_workspace_can_come_from_the_environment(daemon: Daemon) -> None:
    """Issue 19 §4: MEMORYD_WORKSPACE, then EMBEDDED_MEMORY_ROOT (seed 000 §3), name the workspace when --workspace
    does not; the cwd only when neither is set."""
    a, b, elsewhere = short_tmp("pa"), short_tmp("pb"), short_tmp("none")
    for project, word in ((a, "KQZENVA"), (b, "KQZENVB")):
        assert daemon.memoryctl("init", cwd=project).returncode == 0
        assert daemon.memoryctl("remember", f"{word} 环境变量", cwd=project).returncode == 0
    ws_b = json.loads(daemon.memoryctl("--json", "status", cwd=b).stdout)["data"]["workspaces"][0]["workspace_id"]

    def found(*args: str, **env: str) -> str:
        out = _memoryctl_env(daemon, elsewhere, "--json", "search", "KQZENVA KQZENVB", *args, **env)
        assert out.returncode == 0, out.stdout + out.stderr
        return " ".join(h["snippet"] for h in json.loads(out.stdout)["data"]["hits"])

    assert "KQZENVA" in found(MEMORYD_WORKSPACE=str(a)) and "KQZENVB" not in found(MEMORYD_WORKSPACE=str(a))
    assert "KQZENVB" in found(EMBEDDED_MEMORY_ROOT=str(b)) and "KQZENVA" not in found(EMBEDDED_MEMORY_ROOT=str(b))
    assert "KQZENVB" in found(MEMORYD_WORKSPACE=ws_b)  # an id, as --workspace takes
    assert "KQZENVA" in found(MEMORYD_WORKSPACE=str(a), EMBEDDED_MEMORY_ROOT=str(b))  # MEMORYD_WORKSPACE first
    assert "KQZENVB" in found("--workspace", str(b), MEMORYD_WORKSPACE=str(a))  # the flag first
    relative = _memoryctl_env(daemon, a.parent, "--json", "search", "KQZENVA", MEMORYD_WORKSPACE=a.name)
    assert json.loads(relative.stdout)["data"]["hits"]  # relative to the cwd
    remembered = _memoryctl_env(daemon, elsewhere, "--json", "remember", "KQZENVC", EMBEDDED_MEMORY_ROOT=str(b))
    assert json.loads(remembered.stdout)["ok"] and list((b / "memory").glob("*.md"))
    # a named workspace that is not registered is an error, not a silent fallback to the daemon's status
    status = _memoryctl_env(daemon, a, "--json", "status", MEMORYD_WORKSPACE=str(elsewhere))
    assert json.loads(status.stdout)["error"]["name"] == "MEMORY_WORKSPACE_NOT_FOUND"
    # init registers the directory the environment names
    fresh = short_tmp("pc")
    init = _memoryctl_env(daemon, elsewhere, "init", EMBEDDED_MEMORY_ROOT=str(fresh))
    assert init.returncode == 0 and str(fresh) in init.stdout
