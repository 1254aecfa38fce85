"""`memoryctl install` records where the daemon is (MEMORYD_HOME, MEMORYD_SOCKET, XDG_*), so a host started
without that environment reaches the same daemon; the SessionStart hook starts the daemon (`--autostart`) or says,
once, in the host's status line that memory is missing. The real client, the commands exactly as installed, run
by `sh` in a host-like environment, against a real daemon home. (No host program: tests/test_install.py has them.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from memoryctl.rpc import ClientError, Connection

from tests.conftest import Daemon, short_tmp, wait_for

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")
MEMORY = "## 约定\n- 串口波特率固定为 921600 QZXINSTALL\n"


def install(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMORYCTL, "install", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def host_env(fake_home: Path) -> dict[str, str]:
    """What a host started from a desktop launcher has: no MEMORYD_* and no XDG_* variables."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(fake_home), "LANG": "C.UTF-8"}


def run_hook(command: str, payload: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    out = subprocess.run(["sh", "-c", command], input=json.dumps(payload).encode(), env=env, capture_output=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def hook_command(settings: Path, event: str) -> str:
    command: str = json.loads(settings.read_text())["hooks"][event][-1]["hooks"][0]["command"]
    return command


def _project(daemon: Daemon) -> tuple[Path, Path]:
    root = short_tmp("pj")
    (root / ".git").mkdir()
    (root / "memory").mkdir()
    (root / "memory" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    daemon.call("workspace.add", {"path": str(root)})
    return root, short_tmp("hm")


def test_installed_hooks_and_server_carry_the_daemon_home(daemon: Daemon) -> None:
    root, fake_home = _project(daemon)
    env = {**daemon.env, "HOME": str(fake_home)}
    done = install("claude", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    settings = root / ".claude" / "settings.json"
    start = hook_command(settings, "SessionStart")
    assert f"MEMORYD_HOME={daemon.home}" in start and "--autostart" in start
    assert "--autostart" not in hook_command(settings, "UserPromptSubmit")
    server = json.loads((root / ".mcp.json").read_text())["mcpServers"]["memoryd"]
    assert server["env"]["MEMORYD_HOME"] == str(daemon.home)
    payload = {"session_id": "s1", "cwd": str(root), "hook_event_name": "SessionStart", "source": "startup"}
    answer = run_hook(start, payload, host_env(fake_home))  # the host's environment knows nothing of the home
    assert answer is not None and "QZXINSTALL" in answer["hookSpecificOutput"]["additionalContext"], answer


def test_session_start_starts_the_daemon_within_its_deadline(daemon: Daemon) -> None:
    root, fake_home = _project(daemon)
    (daemon.home / "config" / "memoryd.yaml").write_text("embedding_provider: none\nsearch_dictionary: false\n")
    assert install("claude", cwd=root, env={**daemon.env, "HOME": str(fake_home)}).returncode == 0
    daemon.stop()  # a reboot without a service
    start = hook_command(root / ".claude" / "settings.json", "SessionStart")
    payload = {"session_id": "s2", "cwd": str(root), "hook_event_name": "SessionStart", "source": "startup"}
    try:
        answer = run_hook(start, payload, host_env(fake_home))
        assert answer is not None, "the hook said nothing"
        # either it answered within its deadline, or it says in the status line that memory comes next prompt
        said = answer.get("hookSpecificOutput", {}).get("additionalContext", "") or answer.get("systemMessage", "")
        assert "QZXINSTALL" in said or "starting now" in said, answer

        def up() -> bool:
            try:
                with Connection(str(daemon.socket), 2.0) as conn:
                    conn.call("ping")
                return True
            except ClientError:
                return False

        wait_for(up, 30)
        again = run_hook(start, {**payload, "session_id": "s3"}, host_env(fake_home))
        assert again is not None and "QZXINSTALL" in again["hookSpecificOutput"]["additionalContext"]
    finally:  # the daemon the hook started for this test
        pid_file = daemon.home / "run" / "memoryd.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not pid_file.exists() or not _alive(pid), 30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_unreachable_daemon_is_said_once_in_the_status_line() -> None:
    home = short_tmp()
    env = {
        **host_env(home),
        "MEMORYD_SOCKET": str(home / "nowhere.sock"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    base = {"session_id": "s", "cwd": str(home)}
    for host in ("claude", "codex"):
        start = run_hook(f'"{MEMORYCTL}" hook {host} SessionStart', {**base, "hook_event_name": "SessionStart"}, env)
        assert start is not None and set(start) == {"systemMessage"}, start
        assert "memoryd is not running" in start["systemMessage"] and "no project memory" in start["systemMessage"]
        prompt = {**base, "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
        assert run_hook(f'"{MEMORYCTL}" hook {host} UserPromptSubmit', prompt, env) is None  # once: not per prompt


def test_codex_asks_before_destructive_tools(tmp_path: Path) -> None:
    root = short_tmp("pj")
    (root / ".git").mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "MEMORYD_HOME": str(tmp_path / "mh")}
    printed = install("codex", "--print", cwd=root, env=env)
    assert printed.returncode == 0, printed.stderr
    assert "memory_forget" in printed.stdout and "asks" in printed.stdout  # --print says so
    assert install("codex", cwd=root, env=env).returncode == 0
    config = tomllib.loads((root / ".codex" / "config.toml").read_text())["mcp_servers"]["memoryd"]
    assert config["default_tools_approval_mode"] == "prompt"
    assert config["env"]["MEMORYD_HOME"] == str(tmp_path / "mh")
    approved = {name for name, tool in config["tools"].items() if tool.get("approval_mode") == "approve"}
    assert "memory_search" in approved and "memory_remember" in approved
    assert not approved & {"memory_forget", "compile_apply"}
    hooks = json.loads((root / ".codex" / "hooks.json").read_text())["hooks"]
    assert "--autostart" in hooks["SessionStart"][-1]["hooks"][0]["command"]


def test_opencode_install_writes_its_plugin(tmp_path: Path) -> None:
    root = short_tmp("pj")
    (root / ".git").mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "MEMORYD_HOME": str(tmp_path / "mh")}
    assert install("opencode", cwd=root, env=env).returncode == 0
    plugin = (root / ".opencode" / "plugin" / "memoryd.ts").read_text()
    assert f"process.env.MEMORYCTL || {json.dumps(MEMORYCTL)}" in plugin
    assert json.dumps({"MEMORYD_HOME": str(tmp_path / "mh")}) in plugin
    config = json.loads((root / "opencode.json").read_text())["mcp"]["memoryd"]
    assert config["environment"] == {"MEMORYD_HOME": str(tmp_path / "mh")}
    printed = install("opencode", "--print", cwd=root, env=env)
    assert ".opencode/plugin/memoryd.ts" in printed.stdout
