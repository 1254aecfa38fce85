"""`memoryctl install claude|codex|opencode`: the files each host reads, merged (other settings stay, a second run
changes nothing), naming this memoryctl by its absolute path — and the real host programs (from the npm registry)
read them: `claude mcp get`, `codex mcp list --json`, `opencode mcp list`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import short_tmp
from tests.hostcli import CLAUDE_CODE, CODEX, OPENCODE, npx

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


def memoryctl(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return subprocess.run([MEMORYCTL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def host(package: str, *args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return npx(package, *args, cwd=cwd, env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})


@pytest.fixture
def project() -> tuple[Path, Path]:
    root = short_tmp("pj")
    (root / ".git").mkdir()
    home = short_tmp("hm")
    return root, home


@pytest.mark.registry
def test_claude_project_files_merge_and_claude_reads_them(project: tuple[Path, Path]) -> None:
    root, home = project
    (root / ".claude").mkdir()
    settings = {
        "model": "x",
        "hooks": {"PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "fmt"}]}]},
    }
    (root / ".claude" / "settings.json").write_text(json.dumps(settings))
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other-server"}}}))

    printed = memoryctl("install", "claude", "--print", cwd=root, home=home)
    assert printed.returncode == 0 and MEMORYCTL in printed.stdout
    assert json.loads((root / ".mcp.json").read_text()) == {"mcpServers": {"other": {"command": "other-server"}}}

    assert memoryctl("install", "claude", cwd=root / ".claude", home=home).returncode == 0  # from a subdirectory
    written = json.loads((root / ".claude" / "settings.json").read_text())
    assert written["model"] == "x"
    post = written["hooks"]["PostToolUse"]
    assert post[0]["hooks"][0]["command"] == "fmt"  # another tool's hook stays
    # the variables that say where the daemon is, as install ran (tests/test_install_env.py), then this memoryctl
    assert post[1]["hooks"][0]["command"].endswith(f'"{MEMORYCTL}" hook claude PostToolUse')
    assert written["hooks"]["SessionStart"][0]["hooks"][0]["command"].endswith("hook --autostart claude SessionStart")
    servers = json.loads((root / ".mcp.json").read_text())["mcpServers"]
    assert servers["other"] == {"command": "other-server"}
    assert servers["memoryd"]["command"] == MEMORYCTL and servers["memoryd"]["args"] == ["mcp"]
    assert servers["memoryd"]["env"]["XDG_CONFIG_HOME"] == str(home / ".config")
    before = (root / ".claude" / "settings.json").read_text()
    memoryctl("install", "claude", cwd=root, home=home)
    assert (root / ".claude" / "settings.json").read_text() == before  # a second run changes nothing

    shown = host(CLAUDE_CODE, "mcp", "get", "memoryd", cwd=root, home=home)
    assert shown.returncode == 0 and "memoryd:" in shown.stdout and "Project config" in shown.stdout, shown.stdout


@pytest.mark.registry
def test_codex_config_block_and_codex_reads_it(project: tuple[Path, Path]) -> None:
    root, home = project
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "o4"\n\n[mcp_servers.other]\ncommand = "other"\n')
    assert memoryctl("install", "codex", "--scope", "user", cwd=root, home=home).returncode == 0
    assert memoryctl("install", "codex", "--scope", "user", cwd=root, home=home).returncode == 0  # replaced, not added
    text = (home / ".codex" / "config.toml").read_text()
    assert text.startswith('model = "o4"') and text.count("[mcp_servers.memoryd]") == 1
    listed = host(CODEX, "mcp", "list", "--json", cwd=root, home=home)
    assert listed.returncode == 0, listed.stderr[-1000:]
    servers = {s["name"]: s for s in json.loads(listed.stdout)}
    assert servers["memoryd"]["transport"]["command"] == MEMORYCTL and servers["memoryd"]["transport"]["args"] == [
        "mcp"
    ]
    assert "other" in servers
    # Codex hands MCP servers a trimmed environment: what finds the daemon's socket is forwarded
    assert {"MEMORYD_HOME", "XDG_RUNTIME_DIR"} <= set(servers["memoryd"]["transport"]["env_vars"])


@pytest.mark.registry
def test_opencode_config_and_opencode_connects(project: tuple[Path, Path]) -> None:
    root, home = project
    assert memoryctl("install", "opencode", cwd=root, home=home).returncode == 0
    config = json.loads((root / "opencode.json").read_text())
    assert {k: v for k, v in config["mcp"]["memoryd"].items() if k != "environment"} == {
        "type": "local",
        "command": [MEMORYCTL, "mcp"],
        "enabled": True,
    }
    assert (root / ".opencode" / "plugin" / "memoryd.ts").exists()
    listed = host(OPENCODE, "mcp", "list", cwd=root, home=home)
    assert listed.returncode == 0 and "memoryd" in listed.stdout and "connected" in listed.stdout, listed.stdout[-2000:]


def test_a_broken_config_is_refused_not_overwritten(project: tuple[Path, Path]) -> None:
    root, home = project
    (root / ".mcp.json").write_text("{not json")
    done = memoryctl("install", "claude", cwd=root, home=home)
    assert done.returncode != 0 and "not valid JSON" in done.stderr
    assert (root / ".mcp.json").read_text() == "{not json"
